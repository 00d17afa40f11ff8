"""``posenc models``: what posenc does with each model type of the installed transformers.

The table of :mod:`posenc.app.hf_zoo` (what ``tests/hf/test_zoo.py`` checks and
``docs/hf_coverage.md`` shows): every model type whose text model rotates with a
``*RotaryEmbedding``, built tiny and compared with posenc's rotation: matched (by posenc's table
of model types or by rule from the standardized fields), refused (with posenc's reason),
mismatched, or not built (the tiny model could not be made here).
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

    from ..hf_zoo import report, survey

    if args.types is not None:
        for name in args.types:
            if name not in CONFIG_MAPPING_NAMES:
                close = difflib.get_close_matches(name, list(CONFIG_MAPPING_NAMES), n=3)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                raise _UsageError(
                    f"--types: {name!r} is not a model type of transformers {transformers.__version__}{hint}"
                )
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # the tiny configs' notes ("Forcing last layer ...")
    try:
        results = survey(args.types)
    finally:
        transformers.logging.set_verbosity(verbosity)
    others = [t for t in (args.types or CONFIG_MAPPING_NAMES) if t not in results]
    status = EXIT_MISMATCH if any(o == "mismatched" for o, _ in results.values()) else 0
    if args.markdown:
        print(report(results), end="")
    elif args.json:
        rows = {t: {"outcome": o, "detail": d} for t, (o, d) in sorted(results.items())}
        version = transformers.__version__
        print(json.dumps({"transformers": version, "model_types": rows, "no_text_rotary": others}, indent=2))
    else:
        _print_table(results, others, transformers.__version__, named=args.types is not None)
    return status


def _print_table(
    results: dict[str, tuple[str, str]], others: list[str], version: str, *, named: bool
) -> None:
    """The outcomes as a plain-text table, grouped by outcome; a long reason wraps under itself."""
    from ..hf_zoo import OUTCOMES

    counts = {o: sum(1 for outcome, _ in results.values() if outcome == o) for o in OUTCOMES}
    print(
        f"transformers {version}: {len(results)} model types with a text rotary embedding, built tiny "
        "and compared with posenc's rotation"
    )
    print("  " + ", ".join(f"{o} {n}" for o, n in counts.items()) + "\n")
    rows = [("model type", "outcome", "how or why")]
    for outcome in OUTCOMES:
        rows += [
            (t, o, f"by {d}" if o == "matched" else d)
            for t, (o, d) in sorted(results.items())
            if o == outcome
        ]
    widths = [max(len(r[i]) for r in rows) for i in (0, 1)]
    indent = sum(widths) + 4
    room = max(30, _terminal_width() - indent)
    for name, outcome, why in rows:
        wrapped = textwrap.wrap(why, room) or [""]
        print(f"{name.ljust(widths[0])}  {outcome.ljust(widths[1])}  {wrapped[0]}".rstrip())
        for more in wrapped[1:]:
            print(" " * indent + more)
    if others:
        listed = f": {', '.join(others)}" if named else ""
        many = f"{len(others)} other model types have" if len(others) > 1 else "1 other model type has"
        print(f"\n{many} no text rotary embedding (not checked here){listed}.")
