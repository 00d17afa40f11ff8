"""The ``posenc`` command: the extrapolation study, pictures of every encoding, and the registry.

::

    posenc extrapolate                       # train short (64), test long (64..512), every encoding
    posenc extrapolate --encodings "rope(base=500000.0),alibi" --corpus my_text/ --out runs/mine
    posenc plot rope --out rope.png          # a picture of one encoding
    posenc list                              # the registered encodings
    posenc describe alibi                    # its options, defaults and accepted values

Bad options print one line on stderr and exit with code 2, without a traceback.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from . import __version__
from .registry import available, describe

__all__ = ["main"]

#: Exit status for a bad command line or bad input (the same as argparse's usage errors).
EXIT_USAGE = 2


class _UsageError(Exception):
    """A bad option found after parsing; its message is printed as one line."""


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line on stderr (no usage block) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {_one_line(message)} (see {self.prog} --help)\n")


def _one_line(message: str) -> str:
    return " ".join(str(message).split())


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive finite number, got {text!r}")
    return value


def _length_list(text: str) -> list[int]:
    parts = [p.strip() for p in text.split(",")]
    if not parts or any(not p for p in parts):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers like 64,128,256, got {text!r}"
        )
    return [_positive_int(p) for p in parts]


def _build_parser() -> _Parser:
    from .study import StudyConfig

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
        "--train-len",
        type=_positive_int,
        default=defaults["train_len"].default,
        metavar="N",
        help="training length in characters (default %(default)s)",
    )
    ex.add_argument(
        "--eval-lens",
        type=_length_list,
        default=list(defaults["eval_lens"].default),
        metavar="N,N,...",
        help="evaluation lengths, each >= --train-len (default 64,128,256,512)",
    )
    ex.add_argument(
        "--steps",
        type=_positive_int,
        default=defaults["steps"].default,
        metavar="N",
        help="training steps per encoding (default %(default)s)",
    )
    ex.add_argument(
        "--corpus",
        metavar="PATH",
        help="a UTF-8 text file or a folder of them (default: the running Python's standard library sources)",
    )
    ex.add_argument(
        "--seed",
        type=_non_negative_int,
        default=defaults["seed"].default,
        metavar="N",
        help="seed for initialisation and batch order (default %(default)s)",
    )
    ex.add_argument(
        "--out",
        default="posenc-extrapolation",
        metavar="DIR",
        help="folder for results.json, results.csv, extrapolation.png (default %(default)s)",
    )
    ex.add_argument(
        "--device",
        default=defaults["device"].default,
        help="torch device (default %(default)s; the CPU gives bit-identical reruns)",
    )
    model = ex.add_argument_group("model and training (advanced)")
    model.add_argument(
        "--batch-size",
        type=_positive_int,
        default=defaults["batch_size"].default,
        metavar="N",
        help="windows per step (default %(default)s)",
    )
    model.add_argument(
        "--d-model",
        type=_positive_int,
        default=defaults["d_model"].default,
        metavar="N",
        help="model width (default %(default)s)",
    )
    model.add_argument(
        "--num-layers",
        type=_positive_int,
        default=defaults["num_layers"].default,
        metavar="N",
        help="transformer blocks (default %(default)s)",
    )
    model.add_argument(
        "--num-heads",
        type=_positive_int,
        default=defaults["num_heads"].default,
        metavar="N",
        help="attention heads (default %(default)s)",
    )
    model.add_argument(
        "--lr",
        type=_positive_float,
        default=defaults["lr"].default,
        metavar="X",
        help="peak AdamW learning rate (default %(default)s)",
    )
    model.add_argument(
        "--threads",
        type=_positive_int,
        default=defaults["threads"].default,
        metavar="N",
        help="torch CPU threads during the study (default %(default)s: a fixed count keeps reruns bit-identical)",
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
        config = StudyConfig(
            train_len=args.train_len,
            eval_lens=tuple(args.eval_lens),
            steps=args.steps,
            batch_size=args.batch_size,
            d_model=args.d_model,
            num_layers=args.num_layers,
            num_heads=args.num_heads,
            lr=args.lr,
            seed=args.seed,
            device=args.device,
            threads=args.threads,
        )
        if args.encodings is None:
            plan = encoding_plan()
            specs = [c.name for c in plan if c.included]
        else:
            plan = None
            specs = split_specs(args.encodings)
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--out: {args.out!r} exists and is not a folder")
        corpus = Corpus.standard_library() if args.corpus is None else Corpus.from_path(args.corpus)
        if plan is not None:
            print("encodings (derived from the registry):")
            width = max(len(c.name) for c in plan)
            for c in plan:
                print(f"  {'run ' if c.included else 'skip'} {c.name.ljust(width)}  {c.reason}")
        start = time.perf_counter()
        result = run_study(corpus, specs, config, progress=not args.quiet, log=print)
    except ConfigError as err:
        raise _UsageError(str(err)) from err
    elapsed = time.perf_counter() - start
    print()
    print(result.table())
    paths = result.save(out)
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
