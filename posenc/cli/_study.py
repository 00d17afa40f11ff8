"""The study commands: ``posenc extrapolate`` (one model per encoding) and ``posenc extend`` (RoPE scalings).

Each checks every option (the output folder, the encodings, the corpus) before training
starts, turns the library's :class:`~posenc.study.ConfigError` into a one-line usage error in
the command's words, and imports the study (and torch) only when it runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ._common import (
    _STUDY_OPTIONS,
    _figure_note,
    _in_flags,
    _specs_text,
    _terminal_width,
    _UsageError,
)


def _prepare_out(args: argparse.Namespace, reusable: bool) -> Path:
    """Check ``--out`` before any work: not a file, writable, and not silently overwritten."""
    from ..study.checkpoint import check_writable

    out = Path(args.out).expanduser()
    if (out / "results.json").is_file() and not args.force and not (reusable and args.resume):
        also = " --resume to reuse its models or" if reusable else ""
        raise _UsageError(
            f"--out {str(args.out)[:200]!r} already holds results.json; add{also} --force to overwrite"
        )
    return check_writable(out)


def _cmd_extrapolate(args: argparse.Namespace) -> int:
    from ..study import ConfigError, Corpus, StudyConfig, encoding_plan, run_study, split_specs
    from ..study.parallel import main_process

    try:
        config = StudyConfig(**{field: getattr(args, field) for field, *_ in _STUDY_OPTIONS})
        if args.encodings is None:
            plan = encoding_plan()
            specs = [c.name for c in plan if c.included]
        else:
            plan = None
            specs = split_specs(_specs_text(args.encodings, "--encodings"))
        out = _prepare_out(args, reusable=True)
        corpus = Corpus.standard_library() if args.corpus is None else Corpus.from_path(args.corpus)
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
            corpus, specs, config, out_dir=out, resume=args.resume, progress=not args.quiet, log=print
        )
    except ConfigError as err:
        raise _UsageError(_in_flags(err)) from err
    if not main_process():  # under torchrun, rank 0 alone reports and writes
        return 0
    elapsed = time.perf_counter() - start
    print()
    print(result.table(width=_terminal_width()))
    paths = result.save(out)
    if note is None:
        from ..plots import plot_extrapolation

        paths["png"] = plot_extrapolation(result, out / "extrapolation.png")
    print(
        f"\n{len(result.encodings)} models in {elapsed:.0f} s; wrote {', '.join(str(p) for p in paths.values())} "
        f"and the checkpoints model-*.pt"
    )
    return 0


def _cmd_extend(args: argparse.Namespace) -> int:
    from ..study.config import ConfigError, ExtendConfig
    from ..study.parallel import main_process

    try:
        baselines: list[str] = []
        if args.baselines is not None:
            from ..study.plan import split_specs

            baselines = split_specs(_specs_text(args.baselines, "--baselines"))
        config = ExtendConfig(
            **{field: getattr(args, field) for field, *_ in _STUDY_OPTIONS},
            methods=tuple(args.methods),
            factor=args.factor,
            finetune_steps=args.finetune_steps,
            finetune_lr=args.finetune_lr,
            baselines=tuple(baselines),
        )
        out = _prepare_out(args, reusable=True)
        if args.model is not None and not Path(args.model).expanduser().is_file():
            raise _UsageError(f"--model {str(args.model)[:200]!r} is not a file")
        from ..study import Corpus, run_extend

        corpus = Corpus.standard_library() if args.corpus is None else Corpus.from_path(args.corpus)
        note = _figure_note("extend")
        if note:
            print(note, file=sys.stderr)
        result = run_extend(
            corpus,
            config,
            out_dir=out,
            resume=args.resume,
            model_path=args.model,
            progress=not args.quiet,
            log=print,
        )
    except ConfigError as err:
        raise _UsageError(_in_flags(err)) from err
    if not main_process():  # under torchrun, rank 0 alone reports and writes
        return 0
    from ..study.checkpoint import atomic_write

    print()
    print(result.table(width=_terminal_width()))
    paths = result.save(out)
    figure = None
    if note is None:
        from ..plots import plot_extend

        paths["png"] = figure = plot_extend(result, out / "extend.png")
    report = result.report(figure.name if figure else None)
    paths["md"] = atomic_write(out / "report.md", lambda tmp: tmp.write_text(report, encoding="utf-8"))
    print(f"\n{result.seconds:.0f} s; wrote {', '.join(str(p) for p in paths.values())}")
    return 0
