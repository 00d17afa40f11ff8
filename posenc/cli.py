"""The ``posenc`` command: the extrapolation study, pictures of every encoding, and the registry.

::

    posenc extrapolate                       # train short (64), test long (64..512), every encoding
    posenc extrapolate --encodings "rope(base=500000.0),alibi" --corpus my_text/ --out runs/mine
    posenc extend                            # a RoPE model at 64, each scaling method at 64..512
    posenc extend --methods linear,yarn --finetune-steps 50 --baselines alibi,none --resume
    posenc plot rope --out rope.png          # a picture of one encoding
    posenc list                              # the registered encodings
    posenc describe alibi                    # its options, defaults and accepted values

Bad options print one line on stderr and exit with code 2, without a traceback; every option
is checked (including that ``--out`` can be written and that every encoding runs) before any
training starts, and options that size an allocation have stated bounds.

This module imports neither torch nor the rest of posenc at import time: each command
imports what it needs, so ``posenc --help`` starts quickly.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from . import __version__

if TYPE_CHECKING:  # pragma: no cover
    from .study import ConfigError

__all__ = ["main"]

#: Exit status for a bad command line or bad input (the same as argparse's usage errors).
EXIT_USAGE = 2


class _UsageError(Exception):
    """A bad option found after parsing; its message is printed as one line."""


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line on stderr (no usage block) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {_one_line(message)} (see {self.prog} --help)\n")


#: The longest message printed; a longer one (a huge input echoed) is cut in the middle.
MAX_MESSAGE = 500


def _one_line(message: object) -> str:
    text = " ".join(str(message).split())
    if len(text) <= MAX_MESSAGE:
        return text
    cut = len(text) - MAX_MESSAGE + 100
    return f"{text[: MAX_MESSAGE - 200]} [... {cut:,} characters cut ...] {text[-100:]}"


def _option_type(
    parse: Callable[[str], Any], check_name: str, accepted: str, **options: Any
) -> Callable[[str], Any]:
    """An argparse ``type=``: ``parse`` the text, then apply posenc's shared check ``check_name`` to it.

    The check's TypeError/ValueError becomes argparse's one-line error, which names the flag
    (``argument --steps: expected a positive integer, got '0'``). ``posenc._checks`` imports
    torch, so it is imported when an option is converted, not when the parser is built (``--help``).
    """

    def convert(text: str) -> Any:
        from . import _checks

        check = getattr(_checks, check_name)
        try:
            return check("value", parse(text), **options)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected {accepted}, got {text!r}") from None

    return convert


def _parse_int(text: str) -> int:
    if len(text) > 30:  # int() of a huge digit string is slow, and no option needs one
        raise ValueError("too many digits")
    return int(text)


_positive_int = _option_type(_parse_int, "check_positive_int", "a positive integer")
_non_negative_int = _option_type(_parse_int, "check_int", "a non-negative integer", minimum=0)
_positive_float = _option_type(float, "check_positive_float", "a positive finite number")


def _bounded(limit: int) -> Callable[[str], int]:
    """A positive-int ``type=`` with an upper bound (for options that size an allocation)."""

    def convert(text: str) -> int:
        value = _positive_int(text)
        if value > limit:
            raise argparse.ArgumentTypeError(f"expected at most {limit:,} (a bound on memory), got {text!r}")
        return int(value)

    return convert


def _name_list(text: str) -> list[str]:
    parts = [p.strip() for p in text.split(",")]
    if not parts or any(not p for p in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated names like linear,yarn, got {text!r}")
    return parts


def _length_list(text: str) -> list[int]:
    parts = [p.strip() for p in text.split(",")]
    if not parts or any(not p for p in parts):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers like 64,128,256, got {text!r}"
        )
    return [_positive_int(p) for p in parts]


#: The StudyConfig fields ``posenc extrapolate`` sets: (field, type, metavar, help, advanced).
#: The flag is the field with dashes (``--train-len``); the default is StudyConfig's.
_STUDY_OPTIONS: tuple[tuple[str, Callable[[str], Any], str, str, bool], ...] = (
    ("train_len", _positive_int, "N", "training length in characters (default %(default)s)", False),
    (
        "eval_lens",
        _length_list,
        "N,N,...",
        "evaluation lengths, each >= --train-len (default %(default)s)",
        False,
    ),
    ("steps", _positive_int, "N", "training steps per encoding (default %(default)s)", False),
    ("seed", _non_negative_int, "N", "seed for initialisation and batch order (default %(default)s)", False),
    (
        "device",
        str,
        "DEVICE",
        "torch device (default %(default)s; the CPU gives bit-identical reruns)",
        False,
    ),
    ("batch_size", _positive_int, "N", "windows per step (default %(default)s)", True),
    ("d_model", _positive_int, "N", "model width (default %(default)s)", True),
    ("num_layers", _positive_int, "N", "transformer blocks (default %(default)s)", True),
    ("num_heads", _positive_int, "N", "attention heads (default %(default)s)", True),
    ("lr", _positive_float, "X", "peak AdamW learning rate (default %(default)s)", True),
    (
        "eval_chars",
        _positive_int,
        "N",
        "about this many validation characters scored at every length (default %(default)s)",
        True,
    ),
    (
        "threads",
        _positive_int,
        "N",
        "torch CPU threads during the study (default %(default)s: a fixed count keeps reruns bit-identical)",
        True,
    ),
)

#: The library's argument names (StudyConfig fields, run_study and save arguments) as the flags
#: of ``posenc extrapolate``, to report the library's errors in the command's words.
_FLAGS = {
    **{field: "--" + field.replace("_", "-") for field, *_ in _STUDY_OPTIONS},
    "corpus": "--corpus",
    "encodings": "--encodings",
    "out_dir": "--out",
    "methods": "--methods",
    "factor": "--factor",
    "finetune_steps": "--finetune-steps",
    "finetune_lr": "--finetune-lr",
    "baselines": "--baselines",
    "model": "--model",
    "resume": "--resume",
}
#: Arguments whose messages quote the user's own text (left as typed, not turned into flags).
_ECHOING = ("corpus", "encodings", "out_dir", "baselines", "model", "methods", "resume")
#: The longest --encodings / --baselines text read (a spec is at most a few hundred characters).
MAX_SPECS_TEXT = 10_000
_NAME_EQUALS = re.compile(r"(?<![\w-])(" + "|".join(_FLAGS) + r")=")


def _in_flags(err: ConfigError) -> str:
    """A study ConfigError's message with the library's argument names as this command's flags.

    The message starts with its argument's name (``steps must be ...`` -> ``--steps must
    be ...``); other settings it quotes as ``name=value`` (``train_len=64`` ->
    ``--train-len=64``), except in messages about the corpus, encodings or output folder,
    which echo the user's own text.
    """
    message = _one_line(err)
    argument = err.argument or ""
    if argument in _FLAGS and message.startswith(argument):
        message = _FLAGS[argument] + message[len(argument) :]
    if argument not in _ECHOING:
        message = _NAME_EQUALS.sub(lambda match: f"{_FLAGS[match[1]]}=", message)
    return message


#: The most positions ``posenc plot`` draws (a picture shows no more; tables stay small).
MAX_PLOT_LENGTH = 8192


def _add_study_options(parser: argparse.ArgumentParser, defaults: dict[str, Any]) -> None:
    model = parser.add_argument_group("model and training (advanced)")
    for field, kind, metavar, help_text, advanced in _STUDY_OPTIONS:
        default = defaults[field].default
        (model if advanced else parser).add_argument(
            _FLAGS[field],
            type=kind,
            # a tuple as the text one would type: argparse parses a str default with `type`
            default=",".join(map(str, default)) if isinstance(default, tuple) else default,
            metavar=metavar,
            help=help_text,
        )


def _build_parser() -> _Parser:
    from .study.config import StudyConfig  # no torch: see posenc.study.config

    defaults = StudyConfig.__dataclass_fields__
    parser = _Parser(
        prog="posenc",
        description="Position encodings for attention models: an extrapolation study, plots and the registry.",
    )
    parser.add_argument("--version", action="version", version=f"posenc {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    ex = commands.add_parser(
        "extrapolate",
        help="train short, test long: perplexity of a small char-level LM per encoding at several lengths",
        description=(
            "Train one small causal character-level TransformerLM per position encoding at --train-len, then "
            "measure validation perplexity at each --eval-lens (Press et al., 'Train Short, Test Long'). Prints "
            "a table and writes results.json, results.csv, extrapolation.png and each model (model-NAME.pt) to "
            "--out; results are saved as each model finishes, and --resume continues an interrupted run."
        ),
    )
    ex.add_argument(
        "--encodings",
        metavar="SPECS",
        help='registry specs separated by commas, e.g. "rope(base=500000.0),alibi,learned"; a comma inside '
        "parentheses, brackets, braces or quotes does not split (default: every registered encoding that can "
        "run past its training length, plus the learned table as the one that cannot)",
    )
    ex.add_argument(
        "--corpus",
        metavar="PATH",
        help="a UTF-8 text file or a folder of them (default: the running Python's standard library sources)",
    )
    ex.add_argument(
        "--out",
        default="posenc-extrapolation",
        metavar="DIR",
        help="folder for results.json, results.csv, extrapolation.png and each model's checkpoint "
        "(model-NAME.pt), written as each model finishes (default %(default)s)",
    )
    _add_study_options(ex, defaults)
    ex.add_argument(
        "--resume",
        action="store_true",
        help="reuse the encodings already in --out/results.json (same settings and corpus) instead of training them",
    )
    ex.add_argument("--force", action="store_true", help="overwrite results already in --out")
    ex.add_argument("--quiet", action="store_true", help="no progress bars")

    from .study.config import METHODS, ExtendConfig

    ext_defaults = ExtendConfig.__dataclass_fields__
    en = commands.add_parser(
        "extend",
        help="context extension: a RoPE model trained short, each scaling method (PI, NTK, YaRN, ...) run long",
        description=(
            "Train one small causal character-level RoPE TransformerLM at --train-len (or load it with --model or "
            "--resume), then score each RoPE scaling method at every --eval-lens zero-shot and after "
            "--finetune-steps steps at the longest length. Same weights, seed, batches and fine-tuning budget for "
            "every method: only the scaling dict differs. Writes results.json, results.csv, extend.png, "
            "report.md and the base model (base.pt) to --out."
        ),
    )
    en.add_argument(
        "--methods",
        type=_name_list,
        default=",".join(METHODS),
        metavar="M,M,...",
        help=f"methods among {','.join(METHODS)} (default: all)",
    )
    en.add_argument(
        "--factor",
        type=_positive_float,
        default=None,
        metavar="X",
        help="extension factor of every method (default: longest --eval-lens / --train-len)",
    )
    en.add_argument(
        "--finetune-steps",
        type=_non_negative_int,
        default=ext_defaults["finetune_steps"].default,
        metavar="N",
        help="fine-tuning steps per method at the longest length; 0 skips fine-tuning (default %(default)s)",
    )
    en.add_argument(
        "--finetune-lr",
        type=_positive_float,
        default=None,
        metavar="X",
        help="peak fine-tuning learning rate (default: --lr / 3)",
    )
    en.add_argument(
        "--baselines",
        metavar="SPECS",
        help='encodings trained from scratch as reference rows, e.g. "alibi,none" (default: none)',
    )
    en.add_argument(
        "--corpus", metavar="PATH", help="a UTF-8 text file or folder (default: the standard library)"
    )
    en.add_argument(
        "--out",
        default="posenc-extend",
        metavar="DIR",
        help="folder for the results, the figure, report.md and base.pt (default %(default)s)",
    )
    en.add_argument(
        "--model", metavar="PATH", help="load this posenc checkpoint (a base.pt) instead of training"
    )
    en.add_argument(
        "--resume", action="store_true", help="reuse the models saved in --out when their settings match"
    )
    en.add_argument("--force", action="store_true", help="overwrite results already in --out")
    _add_study_options(en, ext_defaults)
    en.add_argument("--quiet", action="store_true", help="no progress bars")

    pl = commands.add_parser(
        "plot",
        help="draw one encoding: tables, similarity, q·k decay or bias matrices",
        description="Draw a picture of one encoding, chosen by where it acts: the added table and the similarity "
        "of positions (sinusoidal, learned, 2D), cos(position·θ) and the decay of q·k (RoPE), or the bias "
        "matrix of every head (ALiBi, T5).",
    )
    pl.add_argument(
        "name", metavar="NAME", help='a registered name or spec, e.g. rope or "alibi(max_bias=4.0)"'
    )
    pl.add_argument(
        "--out", metavar="FILE", help="PNG file to write (default: NAME.png in the current folder)"
    )
    pl.add_argument(
        "--length",
        type=_bounded(MAX_PLOT_LENGTH),
        default=128,
        metavar="N",
        help=f"positions shown (default %(default)s, at most {MAX_PLOT_LENGTH})",
    )
    pl.add_argument(
        "--d-model", type=_bounded(8192), default=128, metavar="N", help="model width (default %(default)s)"
    )
    pl.add_argument(
        "--num-heads", type=_bounded(256), default=8, metavar="N", help="heads (default %(default)s)"
    )

    commands.add_parser("list", help="the registered encodings", description="List the registered encodings.")

    de = commands.add_parser(
        "describe",
        help="one encoding's options, defaults and accepted values",
        description="Show an encoding's options with their defaults and accepted values, read from the registry.",
    )
    de.add_argument("name", metavar="NAME", help="a registered name or alias")
    de.add_argument("--json", action="store_true", help="print the description as JSON")
    return parser


# --- commands ------------------------------------------------------------------------------------


def _specs_text(text: str, flag: str) -> str:
    if len(text) > MAX_SPECS_TEXT:
        raise _UsageError(f"{flag}: {len(text):,} characters; the limit is {MAX_SPECS_TEXT:,}")
    return text


def _prepare_out(args: argparse.Namespace, reusable: bool) -> Path:
    """Check ``--out`` before any work: not a file, writable, and not silently overwritten."""
    from .study.checkpoint import check_writable

    out = Path(args.out).expanduser()
    if (out / "results.json").is_file() and not args.force and not (reusable and args.resume):
        also = " --resume to reuse its models or" if reusable else ""
        raise _UsageError(
            f"--out {str(args.out)[:200]!r} already holds results.json; add{also} --force to overwrite"
        )
    return check_writable(out)


def _figure_note(command: str) -> str | None:
    """Why the figure will not be drawn (matplotlib missing), said before the run, or ``None``."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return f"posenc {command}: note: matplotlib is not installed (pip install 'posenc[cli]'); the data files are written, the figure is skipped"
    return None


def _cmd_extrapolate(args: argparse.Namespace) -> int:
    from .study import ConfigError, Corpus, StudyConfig, encoding_plan, run_study, split_specs

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
        if plan is not None:
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
    elapsed = time.perf_counter() - start
    print()
    print(result.table(width=_terminal_width()))
    paths = result.save(out)
    if note is None:
        from .plots import plot_extrapolation

        paths["png"] = plot_extrapolation(result, out / "extrapolation.png")
    print(
        f"\n{len(result.encodings)} models in {elapsed:.0f} s; wrote {', '.join(str(p) for p in paths.values())} "
        f"and the checkpoints model-*.pt"
    )
    return 0


def _cmd_extend(args: argparse.Namespace) -> int:
    from .study.config import ConfigError, ExtendConfig

    try:
        baselines: list[str] = []
        if args.baselines is not None:
            from .study.plan import split_specs

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
        from .study import Corpus, run_extend

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
    from .study.checkpoint import atomic_write

    print()
    print(result.table(width=_terminal_width()))
    paths = result.save(out)
    figure = None
    if note is None:
        from .plots import plot_extend

        paths["png"] = figure = plot_extend(result, out / "extend.png")
    report = result.report(figure.name if figure else None)
    paths["md"] = atomic_write(out / "report.md", lambda tmp: tmp.write_text(report, encoding="utf-8"))
    print(f"\n{result.seconds:.0f} s; wrote {', '.join(str(p) for p in paths.values())}")
    return 0


def _terminal_width() -> int:
    """The terminal's columns (80 when not a terminal), for tables that must not wrap."""
    import shutil

    return max(40, shutil.get_terminal_size((80, 24)).columns)


def _safe_file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_.") or "encoding"


def _cmd_plot(args: argparse.Namespace) -> int:
    from .plots import plot_encoding

    _specs_text(args.name, "NAME")
    out = Path(args.out) if args.out else Path(f"{_safe_file_name(args.name)[:100]}.png")
    if out.is_dir():
        raise _UsageError(f"--out: {str(out)!r} is a folder; give a file name such as rope.png")
    if args.d_model % args.num_heads:
        raise _UsageError(f"--d-model: {args.d_model} must be divisible by --num-heads {args.num_heads}")
    note = _figure_note("plot")
    if note:
        raise _UsageError(note.split("note: ", 1)[1])
    from .study.checkpoint import check_writable
    from .study.config import ConfigError
    from .study.training import check_spec_ints

    try:
        check_writable(out.parent, argument="--out")
        check_spec_ints(_specs_text(args.name, "NAME"))
    except ConfigError as err:
        message = str(err).removeprefix("encodings: ")
        raise _UsageError(message if err.argument == "--out" else f"NAME: {message}") from err
    try:
        path = plot_encoding(
            args.name, out, length=args.length, d_model=args.d_model, num_heads=args.num_heads
        )
    except (ValueError, TypeError) as err:
        raise _UsageError(f"NAME: {err}") from err
    print(f"wrote {path}")
    return 0


def _groups() -> list[dict[str, Any]]:
    from .registry import available, describe

    seen, groups = set(), []
    for name in available():
        info = describe(name)
        if info["name"] not in seen:
            seen.add(info["name"])
            groups.append(info)
    return groups


#: reStructuredText markup in docstrings (``code``, :func:`name`), shown as plain text.
_RST = re.compile(r":[a-z]+:`~?([^`]+)`|``([^`]+)``")


def _plain(text: str) -> str:
    """A docstring line without reST markup: ``-m_h * distance`` -> -m_h * distance."""
    return _RST.sub(lambda m: m[1] or m[2], _one_line(text))


#: What build() fills each model size with (``describe`` marks these options ``is_dim``).
_DIM_MEANING = {
    "d_model": "the model width",
    "num_heads": "the number of attention heads",
    "head_dim": "the width of one head",
    "max_len": "the longest sequence",
    "causal": "whether the attention is causal (a decoder)",
}


def _cmd_list(args: argparse.Namespace) -> int:
    groups = _groups()
    rows = [(g["name"], ", ".join(g["aliases"]) or "-", g["kind"], _plain(g["doc"])) for g in groups]
    headers = ("name", "aliases", "kind", "what it is")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers[:3])]
    indent = sum(widths) + 2 * len(widths)
    room = max(30, _terminal_width() - indent)  # the description wraps under itself, not under the name

    def line(cells: Sequence[str], text: str) -> None:
        wrapped = textwrap.wrap(text, room) or [""]
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + "  " + wrapped[0])
        for more in wrapped[1:]:
            print(" " * indent + more)

    line(headers[:3], headers[3])
    for row in rows:
        line(row[:3], row[3])
    print("\nposenc describe NAME shows an encoding's options.")
    return 0


def _cmd_describe(args: argparse.Namespace) -> int:
    from .registry import describe

    try:
        info = describe(args.name)
    except (ValueError, TypeError) as err:
        raise _UsageError(f"NAME: {err}") from err
    if args.json:
        print(json.dumps(info, indent=2, default=repr))
        return 0
    aliases = f" (aliases: {', '.join(info['aliases'])})" if info["aliases"] else ""
    print(f"{info['name']}{aliases}: class {info['class']}, acts on: {info['kind']}")
    if info["doc"]:
        print(f"  {_plain(info['doc'])}")
    print("options:")
    if not info["options"]:
        print("  (none)")
    width = max((len(o["name"]) for o in info["options"]), default=0)
    for o in info["options"]:
        default = "required" if o["required"] else f"default {o['default']!r}"
        accepted = f"one of {', '.join(map(repr, o['choices']))}" if o["choices"] else o["type"]
        if o.get("is_dim"):
            meaning = _DIM_MEANING.get(o["name"], "a model setting")
            accepted += f"; {meaning}, filled in by build() from the model"
        if o["name"] == "scaling" and info["kind"] == "rotary":
            from .functional.rope_scaling import ROPE_TYPES

            accepted += f"; 'rope_type' one of {', '.join(map(repr, ROPE_TYPES))} (Hugging Face keys)"
        print(f"  {o['name'].ljust(width)}  {default}; accepts {accepted}")
    print(f'example: posenc.build("{info["name"]}", ...) or a spec such as "{_example_spec(info)}"')
    return 0


def _example_spec(info: dict[str, Any]) -> str:
    for o in info["options"]:
        if not o["is_dim"] and not o["required"] and o["default"] is not None:
            return f"{info['name']}({o['name']}={o['default']!r})"
    return info["name"]


_COMMANDS = {
    "extend": _cmd_extend,
    "extrapolate": _cmd_extrapolate,
    "plot": _cmd_plot,
    "list": _cmd_list,
    "describe": _cmd_describe,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``posenc`` command line; returns the exit status (0 ok, 2 bad options).

    Args:
        argv: the arguments after the program name; ``None`` reads ``sys.argv[1:]``.
    """
    parser = _build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # reported by the sub-command, so the message names it
        print(
            f"posenc {args.command}: error: unrecognized arguments: {' '.join(unknown)} (see posenc {args.command} --help)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        return _COMMANDS[args.command](args)
    except _UsageError as err:
        print(f"posenc {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        # on a line of its own, not inside a progress bar's line
        print(f"\nposenc {args.command}: interrupted", file=sys.stderr)
        return 130
    except (MemoryError, RuntimeError) as err:
        if not _is_allocation_error(err):
            raise
        print(
            f"posenc {args.command}: error: out of memory ({_one_line(err)[:200]}); use smaller sizes or lengths",
            file=sys.stderr,
        )
        return EXIT_USAGE


def _is_allocation_error(err: BaseException) -> bool:
    """Whether ``err`` is an allocator failure (host or device), not a bug."""
    if isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError":
        return True
    text = str(err)
    return any(
        s in text
        for s in ("DefaultCPUAllocator", "out of memory", "can't allocate memory", "not enough memory")
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
