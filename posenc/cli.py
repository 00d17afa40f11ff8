"""The ``posenc`` command: the extrapolation study, pictures of every encoding, and the registry.

::

    posenc extrapolate                       # train short (64), test long (64..512), every encoding
    posenc extrapolate --encodings "rope(base=500000.0),alibi" --corpus my_text/ --out runs/mine
    posenc plot rope --out rope.png          # a picture of one encoding
    posenc list                              # the registered encodings
    posenc describe alibi                    # its options, defaults and accepted values

Bad options print one line on stderr and exit with code 2, without a traceback.

This module imports neither torch nor the rest of posenc at import time: each command
imports what it needs, so ``posenc --help`` starts quickly.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from . import __version__
from ._checks import check_int, check_positive_float, check_positive_int

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


def _one_line(message: object) -> str:
    return " ".join(str(message).split())


def _option_type(
    parse: Callable[[str], Any], check: Callable[..., Any], accepted: str, **options: Any
) -> Callable[[str], Any]:
    """An argparse ``type=``: ``parse`` the text, then apply posenc's shared ``check`` to it.

    The check's TypeError/ValueError becomes argparse's one-line error, which names the flag
    (``argument --steps: expected a positive integer, got '0'``).
    """

    def convert(text: str) -> Any:
        try:
            return check("value", parse(text), **options)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected {accepted}, got {text!r}") from None

    return convert


_positive_int = _option_type(int, check_positive_int, "a positive integer")
_non_negative_int = _option_type(int, check_int, "a non-negative integer", minimum=0)
_positive_float = _option_type(float, check_positive_float, "a positive finite number")


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
}
_NAME_EQUALS = re.compile(r"\b(" + "|".join(_FLAGS) + r")=")


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
    if argument not in ("corpus", "encodings", "out_dir"):
        message = _NAME_EQUALS.sub(lambda match: f"{_FLAGS[match[1]]}=", message)
    return message


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
            "a table and writes results.json, results.csv and extrapolation.png to --out."
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
        help="folder for results.json, results.csv, extrapolation.png (default %(default)s)",
    )
    model = ex.add_argument_group("model and training (advanced)")
    for field, kind, metavar, help_text, advanced in _STUDY_OPTIONS:
        default = defaults[field].default
        (model if advanced else ex).add_argument(
            _FLAGS[field],
            type=kind,
            # a tuple as the text one would type: argparse parses a str default with `type`
            default=",".join(map(str, default)) if isinstance(default, tuple) else default,
            metavar=metavar,
            help=help_text,
        )
    ex.add_argument("--quiet", action="store_true", help="no progress bars")

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
        "--length", type=_positive_int, default=128, metavar="N", help="positions shown (default %(default)s)"
    )
    pl.add_argument(
        "--d-model", type=_positive_int, default=128, metavar="N", help="model width (default %(default)s)"
    )
    pl.add_argument(
        "--num-heads", type=_positive_int, default=8, metavar="N", help="heads (default %(default)s)"
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


def _cmd_extrapolate(args: argparse.Namespace) -> int:
    from .study import ConfigError, Corpus, StudyConfig, encoding_plan, run_study, split_specs

    try:
        config = StudyConfig(**{field: getattr(args, field) for field, *_ in _STUDY_OPTIONS})
        if args.encodings is None:
            plan = encoding_plan()
            specs = [c.name for c in plan if c.included]
        else:
            plan = None
            specs = split_specs(args.encodings)
        out = Path(args.out)
        if out.exists() and not out.is_dir():  # checked before training, not only when saving
            raise _UsageError(f"--out: {args.out!r} exists and is not a folder")
        corpus = Corpus.standard_library() if args.corpus is None else Corpus.from_path(args.corpus)
        if plan is not None:
            print("encodings (derived from the registry):")
            width = max(len(c.name) for c in plan)
            for c in plan:
                print(f"  {'run ' if c.included else 'skip'} {c.name.ljust(width)}  {c.reason}")
        start = time.perf_counter()
        result = run_study(corpus, specs, config, progress=not args.quiet, log=print)
    except ConfigError as err:
        raise _UsageError(_in_flags(err)) from err
    elapsed = time.perf_counter() - start
    print()
    print(result.table())
    paths = result.save(out)
    try:
        from .plots import plot_extrapolation

        paths["png"] = plot_extrapolation(result, out / "extrapolation.png")
    except ImportError as err:  # matplotlib is in the `cli` extra; the data files are written
        print(f"posenc extrapolate: extrapolation.png not drawn: {err}", file=sys.stderr)
    print(
        f"\n{len(result.encodings)} models in {elapsed:.0f} s; wrote {', '.join(str(p) for p in paths.values())}"
    )
    return 0


def _safe_file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_.") or "encoding"


def _cmd_plot(args: argparse.Namespace) -> int:
    from .plots import plot_encoding

    out = Path(args.out) if args.out else Path(f"{_safe_file_name(args.name)}.png")
    if out.exists() and out.is_dir():
        raise _UsageError(f"--out: {str(out)!r} is a folder; give a file name such as rope.png")
    if args.d_model % args.num_heads:
        raise _UsageError(f"--d-model: {args.d_model} must be divisible by --num-heads {args.num_heads}")
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


def _cmd_list(args: argparse.Namespace) -> int:
    groups = _groups()
    rows = [(g["name"], ", ".join(g["aliases"]) or "-", g["kind"], _one_line(g["doc"])) for g in groups]
    headers = ("name", "aliases", "kind", "what it is")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers[:3])]
    print("  ".join(h.ljust(w) for h, w in zip(headers[:3], widths, strict=True)) + "  " + headers[3])
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row[:3], widths, strict=True)) + "  " + row[3])
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
        print(f"  {_one_line(info['doc'])}")
    print("options:")
    if not info["options"]:
        print("  (none)")
    width = max((len(o["name"]) for o in info["options"]), default=0)
    for o in info["options"]:
        default = "required" if o["required"] else f"default {o['default']!r}"
        accepted = f"one of {', '.join(map(repr, o['choices']))}" if o["choices"] else o["type"]
        dim = "; a model size, filled in by build()" if o.get("is_dim") else ""
        print(f"  {o['name'].ljust(width)}  {default}; accepts {accepted}{dim}")
    print(f'example: posenc.build("{info["name"]}", ...) or a spec such as "{_example_spec(info)}"')
    return 0


def _example_spec(info: dict[str, Any]) -> str:
    for o in info["options"]:
        if not o["is_dim"] and not o["required"] and o["default"] is not None:
            return f"{info['name']}({o['name']}={o['default']!r})"
    return info["name"]


_COMMANDS = {"extrapolate": _cmd_extrapolate, "plot": _cmd_plot, "list": _cmd_list, "describe": _cmd_describe}


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
        print(f"posenc {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
