"""What a spec may say: parsing ``"name(key=literal, ...)"`` and checking options against annotations.

:func:`parse_spec` (re-exported by :mod:`posenc.registry`, which builds from its result) bounds the
input first, then reads keyword literals only, with :mod:`ast` (never ``eval``). :func:`check_option`
raises ``TypeError`` for a value of the wrong type (containers element by element, ``Literal``
choices, unions reporting their deepest arm) and ``ValueError`` for a value of the right type that
cannot be used (a float too large or not finite). Annotations it cannot resolve are accepted and
left to the constructor.
"""

from __future__ import annotations

import ast
import collections.abc as abc
import inspect
import itertools
import math
import re
import sys
import types
import typing
from typing import Any, Literal, Union

from ._checks import short

# Spec strings are parsed with ast, whose parser and literal_eval recurse: bound the input first.
# Real specs are a few hundred characters (LongRoPE's factor lists at head_dim=256: ~6k) and
# nest brackets 3 deep (call, dict, list).
_MAX_SPEC_LENGTH = 100_000
_MAX_SPEC_DEPTH = 20
# A quoted string literal, whose brackets do not nest anything (a bound, not a parser).
_STRING = re.compile(r"'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"", re.S)


def _unparse(node: ast.AST) -> str:
    try:
        return short(ast.unparse(node))
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
    where = f"position encoding spec {short(spec)}"
    if len(text) > _MAX_SPEC_LENGTH:
        raise ValueError(f"{where} is too long: {len(text)} characters, the limit is {_MAX_SPEC_LENGTH}")
    # the deepest nesting of ([{ outside string literals
    steps = ((c in "([{") - (c in ")]}") for c in _STRING.sub("", text))
    if (depth := max(itertools.accumulate(steps), default=0)) > _MAX_SPEC_DEPTH:
        raise ValueError(f"{where} nests brackets {depth} deep; the limit is {_MAX_SPEC_DEPTH}")
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError as err:
        raise ValueError(
            f"cannot parse {where}: expected a name like 'rope' or a call like "
            f'"rope(base=500000.0)" ({short(err.msg)})'
        ) from None
    except (RecursionError, MemoryError):  # e.g. thousands of chained unary or binary operators
        raise ValueError(f"cannot parse {where}: it is nested too deeply") from None
    if isinstance(node, ast.Name):
        return node.id, {}
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        raise ValueError(f"{where} must be a name like 'alibi' or a call like \"rope(base=500000.0)\"")
    if node.args:
        raise ValueError(f'{where}: options must be given by keyword, e.g. "{node.func.id}(base=10000.0)"')
    options: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise ValueError(f"{where}: '**' is not allowed; write each option as key=value")
        if kw.arg in options:
            raise ValueError(f"{where}: option {kw.arg!r} is given more than once")
        try:
            options[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            # TypeError: an unhashable dict key or set item, e.g. {[1]: 2}
            raise ValueError(
                f"{where}: option {kw.arg!r} must be a Python literal "
                f"(number, string, bool, None, list, tuple or dict), got {_unparse(kw.value)}"
            ) from None
    return node.func.id, options


# --- option types ----------------------------------------------------------------------------------


def type_hints(cls: type) -> dict[str, Any]:
    """The constructor's annotations, resolved; one that cannot be resolved stays a string."""
    init = inspect.getattr_static(cls, "__init__")  # the function, as inspect.signature reads it
    namespace = getattr(init, "__globals__", {})

    # One by one, not typing.get_type_hints, which fails on all when one cannot be resolved.
    def resolve(ann: Any) -> Any:
        try:  # what typing.get_type_hints does for each annotation, with the function's globals
            return eval(ann, namespace) if isinstance(ann, str) else ann
        except Exception:
            return ann

    return {n: resolve(ann) for n, ann in getattr(init, "__annotations__", {}).items()}


def literal_choices(ann: Any) -> list[Any] | None:
    """The values of a ``Literal`` annotation, or of a union's ``Literal`` and ``bool`` arms (``False``, ``True``:
    ShawRelative's ``values``, bool or ``"shared"``), else ``None``."""
    if typing.get_origin(ann) is Literal:
        return list(typing.get_args(ann))
    if typing.get_origin(ann) in (Union, types.UnionType):
        literals = [c for arm in typing.get_args(ann) for c in literal_choices(arm) or ()]
        flags = [False, True] if bool in typing.get_args(ann) else []
        return literals + flags if literals else None
    return None


def type_name(ann: Any) -> str:
    if ann is inspect.Parameter.empty:
        return "any"
    if isinstance(ann, type) and not typing.get_args(ann):
        return "None" if ann is type(None) else ann.__name__
    return str(ann).replace("typing.", "").replace("collections.abc.", "")


# Why a value does not fit an annotation: (depth, where, expected, reason). ``depth`` is how far into
# the value the check got (a union reports its deepest arm); ``reason`` is set when the type fits but
# the value does not (a ValueError).
_Problem = tuple[int, str, str, str]
_NOT_ONE_OF = "is not one of"
_SEQUENCES = (list, set, frozenset, abc.Sequence, abc.MutableSequence, abc.Set)


def _problem(value: Any, ann: Any, path: str, depth: int = 0) -> _Problem | None:
    """``None`` if ``value`` fits ``ann``, else why not. Containers are checked element by element."""
    if ann in (inspect.Parameter.empty, Any, object):
        return None
    where = f"{path}={short(value)}"
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    base = type(None) if ann is None else origin or ann
    if origin is Literal:
        if any(value == choice and type(value) is type(choice) for choice in args):
            return None
        # an accepted type but not an accepted value (layout='split'): a wrong value, not a wrong type
        wrong_value = any(type(value) is type(choice) for choice in args)
        return depth, where, f"one of {list(args)}", f"{_NOT_ONE_OF} {list(args)}" if wrong_value else ""
    if origin in (Union, types.UnionType):
        found = [p for arm in args if (p := _problem(value, arm, path, depth)) is not None]
        if len(found) < len(args):  # an arm fits
            return None
        # The type fits one arm but the value does not (say why), or one arm matched the container
        # (report the element that did not).
        worst = max(found, key=lambda p: (bool(p[3]), p[0]))
        if worst[3].startswith(_NOT_ONE_OF):  # every accepted value (ShawRelative's: a bool or "shared")
            return depth, where, "", f"{_NOT_ONE_OF} {literal_choices(ann)}"
        if worst[3] or worst[0] > depth:
            return worst
        choices = literal_choices(ann)
        return depth, where, type_name(ann) + (f" (one of {choices})" if choices else ""), ""
    wrong = (depth, where, type_name(ann), "")
    if not isinstance(base, type):
        # An annotation that could not be resolved, a type variable, a special form: accepted
        # here, and the constructor checks its own argument.
        return None
    if isinstance(value, bool) and ann in (int, float):  # a bool is an int in Python, never one here
        return wrong
    try:  # ints are accepted where a float is declared
        fits = isinstance(value, (int, float) if ann is float else base)
    except TypeError:  # a Protocol that is not runtime_checkable: the constructor checks
        return None
    if not fits:
        return wrong
    if ann is float:
        try:
            finite = math.isfinite(float(value))
        except OverflowError:
            return depth, where, "", f"is too large for a float (at most {sys.float_info.max:.4g})"
        return None if finite else (depth, where, "", "must be finite")
    if base is tuple and args:
        items = [args[0]] * len(value) if args[-1] is Ellipsis else [a for a in args if a != ()]
        if len(value) != len(items):
            return depth, where, f"{type_name(ann)} (a tuple of {len(items)})", ""
        pairs = [(v, a, f"{path}[{i}]") for i, (v, a) in enumerate(zip(value, items, strict=True))]
    elif base in _SEQUENCES:
        # A str is a Sequence of str, but a string where a list is meant is nearly always a mistake.
        if isinstance(value, (str, bytes)):
            return wrong
        pairs = [(item, args[0] if args else Any, f"{path}[{i}]") for i, item in enumerate(value)]
    elif base in (dict, abc.Mapping, abc.MutableMapping):
        key_ann, value_ann = args if len(args) == 2 else (Any, Any)
        pairs = []
        for k, v in value.items():
            pairs += [(k, key_ann, f"{path} key"), (v, value_ann, f"{path}[{short(k)}]")]
    else:
        return None
    return next(filter(None, (_problem(v, a, p, depth + 1) for v, a, p in pairs)), None)


def check_option(owner: str, key: str, value: Any, ann: Any) -> None:
    """Raise ``TypeError`` if ``value`` does not fit ``ann``, ``ValueError`` if it fits but is unusable (a value
    of a ``Literal``'s type that is not one of its values, a float that is not finite)."""
    problem = _problem(value, ann, key)
    if problem is not None and problem[3]:
        raise ValueError(f"{owner}: option {problem[1]} {problem[3]}")
    if problem is not None:
        raise TypeError(f"{owner}: option {problem[1]} has the wrong type; expected {problem[2]}")
    if isinstance(value, float) and not math.isfinite(value):  # whatever the annotation says
        raise ValueError(f"{owner}: option {key}={value!r} must be finite")
