"""The study commands: ``posenc extrapolate`` (one model per encoding) and ``posenc extend`` (RoPE scalings).

Each checks every option (the output folder, the encodings, the corpus) before training
starts, turns the library's :class:`~posenc.app.study.ConfigError` into a one-line usage error in
the command's words, and imports the study (and torch) only when it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ..study import Corpus

from ._common import (
    _STUDY_OPTIONS,
    _figure_note,
    _in_flags,
    _specs_text,
    _terminal_width,
    _UsageError,
)


def _hold_out(args: argparse.Namespace) -> contextlib.AbstractContextManager[Path]:
    """Make ``--out`` and hold it for this run (one run per folder); the caller checks what it holds.

    Under torchrun rank 0 holds it; the others only check it. Called after every other option
    is checked, so a bad option is reported as itself and leaves no folder behind.
    """
    import torch.distributed as dist

    from ..study.outdir import hold
    from ..study.parallel import main_process

    lock = main_process() and not (dist.is_available() and dist.is_initialized())
    return hold(Path(args.out).expanduser(), lock=lock)


def _check_out(out: Path, args: argparse.Namespace) -> None:
    """Refuse to write over what ``--out`` holds, unless ``--force`` (or ``--resume`` of the same study);
    ``--force`` alone has the study replace what the folder holds, once it has checked everything.

    One rule for both commands, checked before anything is written: a folder holding the other
    command's study (or files that are not a study's) is refused even with ``--resume``; a
    folder holding this command's results or checkpoints needs ``--resume`` or ``--force``
    (the study then checks, with ``--resume``, that its settings match).
    """
    from ..study.outdir import outputs, study_kind

    kind = study_kind(out)
    if args.force:  # (the study removes what it replaces once every check has passed)
        return
    shown = repr(str(args.out)[:200])
    if kind is not None and kind != args.command:
        what = "a results.json that is not a posenc study's" if kind == "other" else f"a posenc {kind} study"
        raise _UsageError(f"--out {shown} holds {what}; use another folder, or add --force to overwrite it")
    files = sorted(outputs(out), key=lambda name: name != "results.json")  # results.json first
    # (without a results.json there is nothing to resume, but an interrupted extend's checkpoints, which it
    # checks on loading; any other file of those names is not this study's to replace)
    resumable = kind == args.command or (args.command == "extend" and all(f.endswith(".pt") for f in files))
    if files and not (args.resume and resumable):
        named = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
        hint = "add --resume to reuse its models or" if resumable else "no results.json to resume from: add"
        raise _UsageError(f"--out {shown} already holds {named}; {hint} --force to overwrite")


def _cmd_extrapolate(args: argparse.Namespace) -> int:
    from ..study import ConfigError, StudyConfig, encoding_plan, run_study, split_specs
    from ..study.extrapolate import check_corpus
    from ..study.parallel import main_process
    from ..study.specs import _check_specs

    try:
        # Every option first (a bad one is reported as itself, whatever --out holds) ...
        config = StudyConfig(**{field: getattr(args, field) for field, *_ in _STUDY_OPTIONS})
        if args.encodings is None:
            plan = encoding_plan()
            specs = [c.name for c in plan if c.included]
        else:
            plan = None
            specs = split_specs(_specs_text(args.encodings, "--encodings"))
        _check_specs(specs, config)
        corpus = _corpus(args)
        check_corpus(corpus, config)  # its lengths too, before the plan is printed
        # ... then the folder: held by this run alone, its contents checked before anything is written.
        with _hold_out(args) as out:
            _check_out(out, args)
            note = _figure_note("extrapolate")
            if note:
                print(note, file=sys.stderr)
            if plan is not None and main_process():
                print("encodings (derived from the registry):")
                width = max(len(c.name) for c in plan)
                for c in plan:
                    print(f"  {'run ' if c.included else 'skip'} {c.name.ljust(width)}  {c.reason}")
            start = time.perf_counter()
            result = run_study(
                corpus,
                specs,
                config,
                out_dir=out,
                resume=args.resume,
                force=args.force and not args.resume,
                progress=not args.quiet,
                log=print,
            )
            if not main_process():  # under torchrun, rank 0 alone reports and writes
                return 0
            elapsed = time.perf_counter() - start
            print()
            print(result.table(width=_terminal_width()))
            paths = result.save(out)
            if note is None:
                from ..plots import plot_extrapolation

                paths["png"] = plot_extrapolation(result, out / "extrapolation.png")
            else:
                _drop_figure(out / "extrapolation.png")
    except ConfigError as err:
        raise _UsageError(_in_flags(err)) from err
    print(
        f"\n{len(result.encodings)} models in {elapsed:.0f} s; wrote {', '.join(str(p) for p in paths.values())} "
        f"and the checkpoints model-*.pt"
    )
    return 0


def _drop_figure(path: Path) -> None:
    """Remove an earlier run's figure that the run could not redraw (it would pass for these results)."""
    from ..study.outdir import made_by_posenc

    if path.is_file() and made_by_posenc(path):
        path.unlink()


def _corpus(args: argparse.Namespace) -> Corpus:
    """``--corpus`` (default: the standard library), never reading ``--out`` or other posenc output."""
    from ..study import Corpus

    if args.corpus is None:
        return Corpus.standard_library()
    return Corpus.from_path(args.corpus, exclude=(Path(args.out).expanduser(),))


def _cmd_extend(args: argparse.Namespace) -> int:
    from ..study.config import ConfigError, ExtendConfig
    from ..study.extend import _check_baselines
    from ..study.parallel import main_process

    try:
        # Every option first (a bad one is reported as itself, whatever --out holds) ...
        baselines: list[str] = []
        if args.baselines is not None:
            from ..study.plan import split_specs

            try:
                baselines = split_specs(_specs_text(args.baselines, "--baselines"))
            except ConfigError as err:  # the shared spec-list check speaks of encodings
                raise _UsageError(_in_flags(err).replace("--encodings", "--baselines", 1)) from err
        config = ExtendConfig(
            **{field: getattr(args, field) for field, *_ in _STUDY_OPTIONS},
            methods=tuple(args.methods),
            factor=args.factor,
            finetune_steps=args.finetune_steps,
            finetune_lr=args.finetune_lr,
            baselines=tuple(baselines),
        )
        _check_baselines(config)
        if args.model is not None and not Path(args.model).expanduser().is_file():
            raise _UsageError(f"--model {str(args.model)[:200]!r} is not a file")
        from ..study import run_extend
        from ..study.extend import check_corpus

        corpus = _corpus(args)
        check_corpus(corpus, config)  # its lengths too, before anything is printed
        # ... then the folder: held by this run alone, its contents checked before anything is written.
        with _hold_out(args) as out:
            _check_out(out, args)
            note = _figure_note("extend")
            if note:
                print(note, file=sys.stderr)
            result = run_extend(
                corpus,
                config,
                out_dir=out,
                resume=args.resume,
                force=args.force and not args.resume,
                model_path=args.model,
                progress=not args.quiet,
                log=print,
            )
            if not main_process():  # under torchrun, rank 0 alone reports and writes
                return 0
            from .._files import atomic_write

            print()
            print(result.table(width=_terminal_width()))
            paths = result.save(out)
            figure = None
            if note is None:
                from ..plots import plot_extend

                paths["png"] = figure = plot_extend(result, out / "extend.png")
            else:
                _drop_figure(out / "extend.png")
            report = result.report(figure.name if figure else None)
            paths["md"] = atomic_write(
                out / "report.md", lambda tmp: tmp.write_text(report, encoding="utf-8")
            )
    except ConfigError as err:
        raise _UsageError(_in_flags(err)) from err
    print(f"\n{result.seconds:.0f} s; wrote {', '.join(str(p) for p in paths.values())}")
    return 0
