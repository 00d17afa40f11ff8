"""``posenc models``: what posenc does with each model type of the installed transformers.

The table of :mod:`posenc.app.hf_zoo` (what ``tests/hf/test_zoo.py`` checks and
``docs/hf_coverage.md`` shows): every model type whose text model rotates with a
``*RotaryEmbedding``, built tiny and compared with posenc's rotation: matched (by posenc's table
of model types or by rule from the standardized fields), refused (with posenc's reason),
mismatched, not built (the tiny model could not be made here), or no rotary of its own (an audio or
vision tower, a VQ model, whose model builds no rotary module). ``--all`` adds the other model
types with what :func:`posenc.from_hf_config` makes of their tiny config, marked as not checked.
"""

from __future__ import annotations

import argparse
import difflib
import json
import textwrap

from ._common import _one_line, _terminal_width, _UsageError

#: Exit status when a model type is mismatched: posenc rotates differently from the model's code.
EXIT_MISMATCH = 1


def _cmd_models(args: argparse.Namespace) -> int:
    try:
        import transformers
    except ImportError as err:
        raise _UsageError(
            f"transformers is not installed ({_one_line(err)}); posenc models reads its model types: "
            "pip install transformers"
        ) from None
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    from ..hf_zoo import OUTCOMES, convert_model_type, report, survey

    version = transformers.__version__
    for name in args.types or ():
        if name not in CONFIG_MAPPING_NAMES:
            close = difflib.get_close_matches(name, list(CONFIG_MAPPING_NAMES), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise _UsageError(f"--types: {name!r} is not a model type of transformers {version}{hint}")
    if args.all and args.markdown:
        raise _UsageError("--all: not with --markdown (the page holds the checked model types only)")
    verbosity = transformers.logging.get_verbosity()
    # the tiny configs' notes ("Forcing last layer ...", "Can't set hidden_size ..."): the table says what failed
    transformers.logging.set_verbosity(transformers.logging.CRITICAL)
    try:
        results = survey(args.types)
        others = [t for t in dict.fromkeys(args.types or CONFIG_MAPPING_NAMES) if t not in results]
        converted = {t: convert_model_type(t) for t in others} if args.all else {}
    finally:
        transformers.logging.set_verbosity(verbosity)
    status = EXIT_MISMATCH if any(o == "mismatched" for o, _ in results.values()) else 0
    if args.markdown:
        print(report(results), end="")
        return status
    if args.json:
        out = {"transformers": version, "model_types": _as_json(results), "no_text_rotary": others}
        if args.all:
            out["no_text_rotary_converted"] = _as_json(converted)
        print(json.dumps(out, indent=2))
        return status
    print(
        f"transformers {version}: {len(results)} model types with a text rotary embedding or an axial vision "
        "one, built tiny and compared with posenc's rotation"
    )
    _print_rows(results, OUTCOMES, matched="matched")
    if args.all:
        print(
            f"\n{len(others)} model types without either: what posenc.from_hf_config makes "
            "of a tiny config (NOT checked against the model's code)"
        )
        _print_rows(converted, ("converted", "refused", "error", "not built"))
    elif others:
        listed = f": {', '.join(others)}" if args.types is not None else " (posenc models --all lists them)"
        many = f"{len(others)} other model types have" if len(others) > 1 else "1 other model type has"
        print(f"\n{many} neither, not checked here{listed}.")
    return status


def _as_json(results: dict[str, tuple[str, str]]) -> dict[str, dict[str, str]]:
    return {t: {"outcome": o, "detail": d} for t, (o, d) in sorted(results.items())}


def _print_rows(results: dict[str, tuple[str, str]], outcomes: tuple[str, ...], matched: str = "") -> None:
    """The counts, then one row per model type grouped by outcome; a long reason wraps under itself."""
    print("  " + ", ".join(f"{o} {sum(1 for x, _ in results.values() if x == o)}" for o in outcomes) + "\n")
    rows = [("model type", "outcome", "how or why")]
    for outcome in outcomes:
        rows += [
            (t, o, f"by {d}" if o == matched else d) for t, (o, d) in sorted(results.items()) if o == outcome
        ]
    widths = [max(len(r[i]) for r in rows) for i in (0, 1)]
    indent = sum(widths) + 4
    room = max(30, _terminal_width() - indent)
    for name, outcome, why in rows:
        wrapped = textwrap.wrap(why, room) or [""]
        print(f"{name.ljust(widths[0])}  {outcome.ljust(widths[1])}  {wrapped[0]}".rstrip())
        for more in wrapped[1:]:
            print(" " * indent + more)
