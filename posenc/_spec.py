"""Parsing a spec string, ``"name"`` or ``"name(key=literal, ...)"``, with :mod:`ast` (never ``eval``).

:func:`parse_spec` (re-exported by :mod:`posenc.registry`, which builds from its result) bounds
the input first, then reads keyword literals only. ``_show`` / ``_cut`` shorten the values that
error messages echo, here and in the registry.
"""

from __future__ import annotations

import ast
from typing import Any

# Spec strings are parsed with ast, whose parser and literal_eval recurse: bound the input first.
# Real specs are a few hundred characters (LongRoPE's factor lists at head_dim=256: ~6k) and
# nest brackets 3 deep (call, dict, list).
_MAX_SPEC_LENGTH = 100_000
_MAX_SPEC_DEPTH = 20
# Values echoed in error messages are cut to about this many characters.
_MAX_SHOWN = 100


def _cut(text: str) -> str:
    """``text`` cut to about :data:`_MAX_SHOWN` characters, for error messages."""
    if len(text) > _MAX_SHOWN:
        return f"{text[:_MAX_SHOWN]}... ({len(text)} characters)"
    return text


def _show(value: Any) -> str:
    """``repr(value)``, cut to about :data:`_MAX_SHOWN` characters, for error messages."""
    try:
        return _cut(repr(value))
    except (ValueError, RecursionError):  # ints past sys.get_int_max_str_digits(); very deep values
        if isinstance(value, int):
            return f"<an int of {value.bit_length()} bits>"
        return f"<a {type(value).__name__}>"


def _bracket_depth(text: str) -> int:
    """The deepest nesting of ``([{`` in ``text``, outside string literals (a bound, not a parser)."""
    depth = deepest = 0
    quote = ""
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if text.startswith(quote, i):
                i += len(quote)
                quote = ""
                continue
        elif c in "'\"":
            quote = text[i : i + 3] if text[i : i + 3] in ("'''", '"""') else c
            i += len(quote)
            continue
        elif c in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in ")]}":
            depth -= 1
        i += 1
    return deepest


def _unparse(node: ast.AST) -> str:
    try:
        return _cut(ast.unparse(node))
    except (RecursionError, MemoryError):
        return "<an expression too deep to show>"


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """Parse ``"name"`` or ``"name(key=literal, ...)"`` into ``(name, options)`` without ``eval``.

    Raises:
        ValueError: the string is not a name or a call with keyword literal arguments, gives
            an option twice, or is longer than 100,000 characters or nested deeper than 20
            brackets.
        TypeError: ``spec`` is not a string.
    """
    if not isinstance(spec, str):
        raise TypeError(f"a position encoding spec string must be a str, got {type(spec).__name__}")
    text = spec.strip()
    shown = _show(spec)
    if len(text) > _MAX_SPEC_LENGTH:
        raise ValueError(
            f"position encoding spec {shown} is too long: {len(text)} characters, the limit is {_MAX_SPEC_LENGTH}"
        )
    depth = _bracket_depth(text)
    if depth > _MAX_SPEC_DEPTH:
        raise ValueError(
            f"position encoding spec {shown} nests brackets {depth} deep; the limit is {_MAX_SPEC_DEPTH}"
        )
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError as err:
        raise ValueError(
            f"cannot parse position encoding spec {shown}: expected a name like 'rope' or a call like "
            f'"rope(base=500000.0)" ({_cut(err.msg)})'
        ) from None
    except (RecursionError, MemoryError):  # e.g. thousands of chained unary or binary operators
        raise ValueError(f"cannot parse position encoding spec {shown}: it is nested too deeply") from None
    if isinstance(node, ast.Name):
        return node.id, {}
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        raise ValueError(
            f"position encoding spec {shown} must be a name like 'alibi' or a call like \"rope(base=500000.0)\""
        )
    if node.args:
        raise ValueError(
            f'position encoding spec {shown}: options must be given by keyword, e.g. "{node.func.id}(base=10000.0)"'
        )
    options: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise ValueError(
                f"position encoding spec {shown}: '**' is not allowed; write each option as key=value"
            )
        if kw.arg in options:
            raise ValueError(f"position encoding spec {shown}: option {kw.arg!r} is given more than once")
        try:
            options[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            # TypeError: an unhashable dict key or set item, e.g. {[1]: 2}
            raise ValueError(
                f"position encoding spec {shown}: option {kw.arg!r} must be a Python literal "
                f"(number, string, bool, None, list, tuple or dict), got {_unparse(kw.value)}"
            ) from None
    return node.func.id, options
