"""Which encodings the study runs, and splitting a comma-separated list of specs."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from itertools import accumulate, pairwise
from typing import Any

from posenc.registry import available, describe, lookup

from .config import ConfigError

__all__ = ["EncodingChoice", "default_encodings", "encoding_plan", "has_fixed_length", "split_specs"]


@dataclass(frozen=True)
class EncodingChoice:
    """Whether a registered encoding is in the default study, and why."""

    name: str
    kind: str
    included: bool
    reason: str


_KIND_REASONS = {
    "additive": "a fixed function of position, defined at every position",
    "rotary": "rotates queries and keys by position, defined at every position",
    "bias": "adds a bias by query-key distance, defined at every distance",
    "none": "no position signal: the baseline",
}


def encoding_plan() -> list[EncodingChoice]:
    """Every registered encoding (aliases merged) with whether the default study runs it, and why.

    Derived from the registry's descriptions, not from a list of names, so encodings
    registered later are covered by the same rules:

    * an option without a default that is not a model size (e.g. a file path) cannot be
      guessed: out;
    * a ``grid_size`` option marks a 2D image-patch encoding; text has no grid: out;
    * a required ``max_len`` means a table with a hard size (the learned table): in, as the
      baseline that cannot run past its training length, reported as "cannot run";
    * every other encoding is defined at any position: in.
    """
    plan = []
    seen = set()
    for name in available():
        cls = lookup(name)
        if cls in seen:
            continue
        seen.add(cls)
        info = describe(cls)
        options = {o["name"]: o for o in info["options"]}
        required = [o["name"] for o in info["options"] if o["required"] and not o["is_dim"]]
        if required:
            choice = EncodingChoice(
                info["name"], info["kind"], False, f"needs option(s) {', '.join(required)}"
            )
        elif "grid_size" in options:
            choice = EncodingChoice(
                info["name"], info["kind"], False, "encodes 2D image-patch grids; text has no grid"
            )
        elif has_fixed_length(info):
            choice = EncodingChoice(
                info["name"],
                info["kind"],
                True,
                "a table of max_len=train_len rows: cannot run past the training length",
            )
        else:
            reason = _KIND_REASONS.get(info["kind"], "defined at every position")
            choice = EncodingChoice(info["name"], info["kind"], True, reason)
        plan.append(choice)
    return plan


def default_encodings() -> list[str]:
    """The names the study runs by default: see :func:`encoding_plan`."""
    return [c.name for c in encoding_plan() if c.included]


def has_fixed_length(info: dict[str, Any]) -> bool:
    """Whether a :func:`posenc.describe` result is a table with a hard size (a required ``max_len``).

    Such an encoding (the learned table) cannot run past ``max_len`` positions: the study
    reports those lengths as "cannot run" instead of scoring them.
    """
    return any(o["name"] == "max_len" and o["required"] for o in info["options"])


def split_specs(text: str) -> list[str]:
    """Split specs at top-level commas: ``"rope(base=5e5, scaling={'a': 1}),alibi"`` is two specs.

    The text is parsed as the items of a Python tuple (specs are Python call expressions, see
    :func:`posenc.registry.parse_spec`), so a comma inside parentheses, brackets, braces or a
    string does not split, and the text between two top-level commas is one spec, kept as
    written (stripped).

    Args:
        text: specs separated by commas, e.g. ``"rope(base=1e4),alibi,t5(num_buckets=8)"``.

    Returns:
        The specs, in order.

    Raises:
        TypeError: ``text`` is not a str.
        ConfigError: an empty spec (``"rope,,alibi"``, ``"rope,"``), unbalanced brackets or
            quotes, a ``#`` comment, or text that is not comma-separated expressions.
    """
    if not isinstance(text, str):
        raise TypeError(f"encodings must be a str of comma-separated specs, got {type(text).__name__}")
    if not text.strip():
        raise ConfigError(
            f"encodings must name at least one spec, e.g. 'rope,alibi'; got {text!r}", argument="encodings"
        )
    # The wrapper makes any non-empty list a tuple; the newline keeps it out of a trailing comment.
    source = f"({text}\n,)"
    try:
        body = ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError) as err:  # ValueError: a NUL character (Python < 3.12)
        raise ConfigError(_syntax_message(text, source, err), argument="encodings") from None
    if not isinstance(body, ast.Tuple):  # text that closes the wrapper's bracket, e.g. "a)+(b"
        raise ConfigError(
            f'encodings {text!r} is not a comma-separated list of specs like "rope(base=1e4),alibi": '
            "unbalanced brackets",
            argument="encodings",
        )
    items = body.elts
    # ast gives (line, UTF-8 byte column) positions; turn them into offsets in `source`.
    lines = source.split("\n")
    starts = list(accumulate((len(line) + 1 for line in lines), initial=0))

    def offset(line: int, byte_col: int) -> int:
        return starts[line - 1] + len(lines[line - 1].encode()[:byte_col].decode())

    def span(e: ast.expr) -> tuple[int, int]:
        # ast.parse sets every end position (Optional only for nodes built by hand).
        end_line, end_col = e.end_lineno or e.lineno, e.end_col_offset or e.col_offset
        return offset(e.lineno, e.col_offset), offset(end_line, end_col)

    spans = [span(e) for e in items]
    # Outside the items there are only brackets, blanks and the top-level commas, one between
    # two items; a comment could hide text, so it is refused.
    between = [source[end:start] for (_, end), (start, _) in pairwise(spans)]
    if any("#" in gap for gap in [source[: spans[0][0]], *between, source[spans[-1][1] :]]):
        raise ConfigError(f"encodings {text!r}: '#' comments are not allowed", argument="encodings")
    # source[i] is text[i - 1]: the commas' offsets in `text`.
    commas = [end + gap.index(",") - 1 for (_, end), gap in zip(spans, between, strict=False)]
    return [text[a + 1 : b].strip() for a, b in zip([-1, *commas], [*commas, len(text)], strict=True)]


def _syntax_message(text: str, source: str, err: SyntaxError | ValueError) -> str:
    if not isinstance(err, SyntaxError):
        return f"encodings {text!r} cannot be read as specs: {err}"
    lines = source.split("\n")
    line = lines[err.lineno - 1] if err.lineno and err.lineno <= len(lines) else ""
    if err.offset and line[err.offset - 1 : err.offset] == ",":  # a comma where an item should start
        return (
            f"encodings {text!r} has a comma with nothing before it (an empty spec); separate specs "
            "with single commas, e.g. 'rope,alibi'"
        )
    reason = (err.msg or "invalid syntax").split(" (detected at")[0]  # its line numbers count our wrapper
    return f'encodings {text!r} is not a comma-separated list of specs like "rope(base=1e4),alibi": {reason}'
