"""The commands that look at one encoding or the registry: ``posenc plot``, ``list`` and ``describe``."""

from __future__ import annotations

import argparse
import json
import re
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._common import _figure_note, _one_line, _specs_text, _terminal_width, _UsageError


def _safe_file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_.") or "encoding"


def _cmd_plot(args: argparse.Namespace) -> int:
    from ..plots import plot_encoding

    _specs_text(args.name, "NAME")
    out = Path(args.out) if args.out else Path(f"{_safe_file_name(args.name)[:100]}.png")
    if out.is_dir():
        raise _UsageError(f"--out: {str(out)!r} is a folder; give a file name such as rope.png")
    if args.d_model % args.num_heads:
        raise _UsageError(f"--d-model: {args.d_model} must be divisible by --num-heads {args.num_heads}")
    if _figure_note(
        "plot"
    ):  # nothing is written without matplotlib: say so, not "the data files are written"
        raise _UsageError(
            "matplotlib is not installed (pip install 'posenc[cli]'); posenc plot draws with it"
        )
    from ..study.checkpoint import check_writable
    from ..study.config import ConfigError
    from ..study.specs import check_spec_ints

    if not out.parent.is_dir():
        what = "is not a folder" if out.parent.exists() else "does not exist"
        raise _UsageError(
            f"--out: the folder {str(out.parent)[:200]!r} {what}; make it first, or give another path"
        )
    try:
        check_writable(out.parent, argument="--out")
        check_spec_ints(_specs_text(args.name, "NAME"))
    except ConfigError as err:
        message = str(err).removeprefix("encodings: ")
        raise _UsageError(message if err.argument == "--out" else f"NAME: {message}") from err
    if out.exists() and not args.force:
        raise _UsageError(
            f"--out {str(out)[:200]!r} already exists; give another file, or add --force to overwrite it"
        )
    try:
        path = plot_encoding(
            args.name, out, length=args.length, d_model=args.d_model, num_heads=args.num_heads
        )
    except (ValueError, TypeError) as err:
        raise _UsageError(f"NAME: {err}") from err
    print(f"wrote {path}")
    return 0


def _groups() -> list[dict[str, Any]]:
    from posenc.registry import available, describe

    seen, groups = set(), []
    for name in available():
        info = describe(name)
        if info["name"] not in seen:
            seen.add(info["name"])
            groups.append(info)
    return sorted(groups, key=lambda g: g["name"])  # by name, not by the first alias seen


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
    from posenc.registry import describe

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
    resolved = _resolved_defaults(info)
    for o in info["options"]:
        default = "required" if o["required"] else f"default {o['default']!r}"
        if o["name"] in resolved:  # None in the signature, a fixed value in the built encoding
            default = f"default None, meaning {resolved[o['name']]!r}"
        accepted = f"one of {', '.join(map(repr, o['choices']))}" if o["choices"] else o["type"]
        if o.get("is_dim"):
            meaning = _DIM_MEANING.get(o["name"], "a model setting")
            accepted += f"; {meaning}, filled in by build() from the model"
        if o["name"] == "scaling" and info["kind"] == "rotary":
            from posenc.functional import ROPE_TYPES

            accepted += f"; 'rope_type' one of {', '.join(map(repr, ROPE_TYPES))} (Hugging Face keys)"
        print(f"  {o['name'].ljust(width)}  {default}; accepts {accepted}")
    print(f'example: posenc.build("{info["name"]}", ...) or a spec such as "{_example_spec(info)}"')
    return 0


#: Two sets of model sizes: an option whose None becomes the same value in both is a fixed default.
_SIZES = (
    {"d_model": 64, "num_heads": 4, "head_dim": 16, "max_len": 128, "causal": True},
    {"d_model": 96, "num_heads": 2, "head_dim": 48, "max_len": 256, "causal": True},
)


def _resolved_defaults(info: dict[str, Any]) -> dict[str, Any]:
    """The options whose default ``None`` stands for one fixed value (RoPE's ``base``: 10000.0).

    Read from the built encoding (an attribute of the option's name), with two sets of model
    sizes: a value that follows the sizes (``rotary_dim``: the head width) is not a fixed default.
    """
    from posenc.registry import build

    names = [
        o["name"] for o in info["options"] if o["default"] is None and not o["required"] and not o["is_dim"]
    ]
    if not names:
        return {}
    try:
        built = [build(info["name"], **sizes) for sizes in _SIZES]
    except Exception:  # an encoding that needs other sizes (a 2D grid): its defaults shown as declared
        return {}
    resolved = {}
    for name in names:
        values = [getattr(b, name, None) for b in built]
        if (
            isinstance(values[0], (int, float, str))
            and not isinstance(values[0], bool)
            and values[0] == values[1]
        ):
            resolved[name] = values[0]
    return resolved


def _example_spec(info: dict[str, Any]) -> str:
    for o in info["options"]:
        if not o["is_dim"] and not o["required"] and o["default"] is not None:
            return f"{info['name']}({o['name']}={o['default']!r})"
    return info["name"]
