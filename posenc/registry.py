"""Names for encodings, and building them from config strings, dicts or modules.

``build("rope(base=500000.0, scaling={'rope_type': 'yarn', 'factor': 4.0})", head_dim=64)``
parses the string with :mod:`ast` (never ``eval``), checks every option against the
encoding's constructor, and fills the model's sizes (``dims``) that the constructor declares.

Registration is explicit and reversible: :func:`register` (a class decorator),
:func:`unregister`, and :func:`registered`, a context manager that undoes its registration
on exit (for tests and notebooks). A name belongs to one class at a time: registering a
different class under a taken name or alias raises, unless ``replace=True`` says so.
"""

from __future__ import annotations

import ast
import collections.abc
import contextlib
import difflib
import inspect
import math
import sys
import threading
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, TypeVar, Union

from .base import PositionalEncoding

__all__ = [
    "DIM_NAMES",
    "Spec",
    "available",
    "build",
    "describe",
    "lookup",
    "parse_spec",
    "register",
    "registered",
    "unregister",
]

#: The model sizes ``build`` can fill in; each encoding takes those its constructor declares.
DIM_NAMES = ("d_model", "num_heads", "head_dim", "max_len", "causal")

#: What :func:`build` accepts: a registered name or call-like string (``"rope(base=500000.0)"``),
#: a mapping with a ``"name"`` key and options (as loaded from YAML/JSON), or a built encoding.
Spec: TypeAlias = str | Mapping[str, Any] | PositionalEncoding

# Spec strings are parsed with ast, whose parser and literal_eval recurse: bound the input first.
# Real specs are a few hundred characters (LongRoPE's factor lists at head_dim=256: ~6k) and
# nest brackets 3 deep (call, dict, list).
_MAX_SPEC_LENGTH = 100_000
_MAX_SPEC_DEPTH = 20
# Values echoed in error messages are cut to about this many characters.
_MAX_SHOWN = 100

_LOCK = threading.RLock()  # guards _REGISTRY and _CANONICAL against concurrent (un)registration
_REGISTRY: dict[str, type[PositionalEncoding]] = {}
_CANONICAL: dict[type[PositionalEncoding], str] = {}

E = TypeVar("E", bound=type[PositionalEncoding])


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


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


# --- registration ------------------------------------------------------------------------------


def _normalize_names(name: str, aliases: tuple[str, ...]) -> list[str]:
    names: list[str] = []
    for n in (name, *aliases):
        if not isinstance(n, str) or not n.isidentifier():
            raise ValueError(f"register: a name must be a Python identifier, got {_show(n)}")
        if n.lower() not in names:
            names.append(n.lower())
    return names


def _names_of(cls: type) -> list[str]:
    """Every name ``cls`` is registered under, the canonical one first."""
    names = [n for n, c in _REGISTRY.items() if c is cls]
    canonical = _CANONICAL.get(cls)
    return sorted(names, key=lambda n: (n != canonical, n))


def _drop(cls: type[PositionalEncoding]) -> None:
    for n in _names_of(cls):
        del _REGISTRY[n]
    _CANONICAL.pop(cls, None)
    cls.registry_name = None


def _add(cls: type[PositionalEncoding], names: list[str], *, replace: bool) -> None:
    """Register ``cls`` under ``names`` (lower-case); the caller holds :data:`_LOCK`."""
    if not (isinstance(cls, type) and issubclass(cls, PositionalEncoding)):
        raise TypeError(f"register({names[0]!r}) decorates PositionalEncoding subclasses, got {_show(cls)}")
    owners = {n: _REGISTRY[n] for n in names if n in _REGISTRY and _REGISTRY[n] is not cls}
    others = list(dict.fromkeys(owners.values()))
    if others and not replace:
        n, old = next(iter(owners.items()))
        raise ValueError(
            f"register: cannot register {_qualified(cls)} as {n!r}: that name is already registered to "
            f"{_qualified(old)} (names: {', '.join(_names_of(old))}). Choose another name, or pass "
            f"replace=True to replace {old.__name__} under all its names."
        )
    if len(others) > 1:
        held = "; ".join(f"{_qualified(c)}: {', '.join(_names_of(c))}" for c in others)
        raise ValueError(
            f"register(..., replace=True): the names {names} belong to several classes ({held}); "
            "replace one class at a time"
        )
    all_names = list(names)
    for old in others:
        # The replaced class goes away under every name, so that an alias cannot keep building it.
        all_names += [n for n in _names_of(old) if n not in all_names]
        _drop(old)
    for n in all_names:
        _REGISTRY[n] = cls
    if cls not in _CANONICAL:  # the first name a class is registered under stays its canonical name
        _CANONICAL[cls] = names[0]
    cls.registry_name = _CANONICAL[cls]


def register(name: str, *aliases: str, replace: bool = False) -> Callable[[E], E]:
    """Class decorator: register an encoding under ``name`` and any ``aliases``.

    Names are case-insensitive. Registering the same class again is a no-op (new aliases are
    added; the first name stays the canonical one). A name or alias already registered to a
    *different* class raises, unless ``replace=True``: then that class is unregistered under
    all its names and every one of them, aliases included, goes to the new class, so that
    ``"rope"`` and ``"rotary"`` never build two different classes.

    Example::

        @posenc.register("my_pe", "mine")
        class MyPE(posenc.PositionalEncoding):
            ...

    Args:
        name: the canonical name, a Python identifier.
        *aliases: other names for the same class.
        replace: take the names from the class that holds them (one class at most).

    Raises:
        ValueError: a name is not an identifier, or is registered to another class (the
            message names it) and ``replace`` is false.
        TypeError: the decorated object is not a :class:`PositionalEncoding` subclass.
    """
    names = _normalize_names(name, aliases)

    def decorator(cls: E) -> E:
        with _LOCK:
            _add(cls, names, replace=replace)
        return cls

    return decorator


def unregister(name: str) -> type[PositionalEncoding]:
    """Remove the class registered under ``name`` (or an alias of it) under all its names.

    Returns:
        The class, which can be registered again with :func:`register`.

    Raises:
        ValueError: unknown name, as :func:`lookup`.
    """
    with _LOCK:
        cls = lookup(name)
        _drop(cls)
    return cls


_ABSENT = object()


@contextlib.contextmanager
def registered(cls: E, name: str, *aliases: str, replace: bool = False) -> Iterator[E]:
    """Register ``cls`` for the duration of a ``with`` block, then restore what was there.

    Takes the arguments of :func:`register`; on exit the names involved (and, with
    ``replace=True``, the class they were taken from) are back as they were, whatever
    happened in the block. Registrations of other names made inside the block are kept.

    Example::

        with posenc.registry.registered(MyPE, "my_pe"):
            pe = posenc.build("my_pe", d_model=64)
    """
    names = _normalize_names(name, aliases)
    with _LOCK:
        classes = {cls} | {_REGISTRY[n] for n in names if n in _REGISTRY}
        touched = set(names).union(*(_names_of(c) for c in classes))
        saved_names = {n: _REGISTRY.get(n) for n in touched}
        saved_canonical = {c: _CANONICAL.get(c) for c in classes}
        saved_attr = {c: c.__dict__.get("registry_name", _ABSENT) for c in classes}
        _add(cls, names, replace=replace)
    try:
        yield cls
    finally:
        with _LOCK:
            for n, c in saved_names.items():
                if c is None:
                    _REGISTRY.pop(n, None)
                else:
                    _REGISTRY[n] = c
            for c, canonical in saved_canonical.items():
                if canonical is None:
                    _CANONICAL.pop(c, None)
                else:
                    _CANONICAL[c] = canonical
            for c, attr in saved_attr.items():
                if attr is _ABSENT:
                    with contextlib.suppress(AttributeError):
                        delattr(c, "registry_name")
                else:
                    c.registry_name = attr


def available() -> list[str]:
    """The registered names, aliases included, sorted."""
    return sorted(_REGISTRY)


def lookup(name: str) -> type[PositionalEncoding]:
    """The class registered under ``name`` (case-insensitive).

    Raises:
        ValueError: unknown name; the message lists the known names and the closest match.
        TypeError: ``name`` is not a string.
    """
    if not isinstance(name, str):
        raise TypeError(f"an encoding name must be a string, got {type(name).__name__}")
    key = name.strip().lower()
    cls = _REGISTRY.get(key)
    if cls is None:
        known = available()
        close = difflib.get_close_matches(key, known, n=1) if len(key) <= _MAX_SHOWN else []
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"unknown position encoding {_show(name)}.{hint} Known encodings: {', '.join(known)}"
        )
    return cls


def _options(cls: type[PositionalEncoding]) -> dict[str, inspect.Parameter]:
    params = inspect.signature(cls.__init__).parameters
    return {
        n: p
        for n, p in list(params.items())[1:]
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        and n not in ("device", "dtype")
    }


def describe(name: str | type[PositionalEncoding]) -> dict[str, Any]:
    """What an encoding accepts, read from its constructor.

    Returns:
        ``{"name", "aliases", "class", "kind", "doc", "options": [{"name", "default",
        "required", "type", "choices", "is_dim"}]}``; ``choices`` lists a ``Literal``'s values.
    """
    cls = lookup(name) if isinstance(name, str) else name
    canonical = _CANONICAL.get(cls, cls.__name__.lower())
    aliases = sorted(n for n, c in _REGISTRY.items() if c is cls and n != canonical)
    hints = _type_hints(cls)
    options = []
    for n, p in _options(cls).items():
        ann = hints.get(n, p.annotation)
        options.append(
            {
                "name": n,
                "default": None if p.default is inspect.Parameter.empty else p.default,
                "required": p.default is inspect.Parameter.empty,
                "type": _type_name(ann),
                "choices": _literal_choices(ann),
                "is_dim": n in DIM_NAMES,
            }
        )
    doc = inspect.getdoc(cls) or ""
    return {
        "name": canonical,
        "aliases": aliases,
        "class": cls.__name__,
        "kind": cls.kind,
        "doc": doc.split("\n\n")[0],
        "options": options,
    }


# --- spec strings ------------------------------------------------------------------------------


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


# --- building ----------------------------------------------------------------------------------


def build(spec: Spec, **dims: Any) -> PositionalEncoding:
    """Build an encoding from a spec and the model's sizes.

    Args:
        spec: a registered name (``"alibi"``); a call-like string with literal keyword
            arguments (``"rope(base=500000.0, layout='interleaved')"``); a mapping with a
            ``"name"`` key and options (as loaded from YAML/JSON); or a built
            :class:`PositionalEncoding`, returned as is.
        **dims: the model's sizes, among ``d_model``, ``num_heads``, ``head_dim``, ``max_len``
            and ``causal``. Each encoding takes those its constructor declares and ignores
            the rest; options given in ``spec`` win over ``dims``.

    Returns:
        The encoding module.

    Raises:
        ValueError: unknown name (lists the known ones and the closest), unknown option
            (lists the accepted ones), missing required size, unknown dim name, an option
            given twice, a number too large for a float or not finite, an oversized spec.
        TypeError: an option of the wrong type (containers are checked element by element),
            or a spec of an unsupported type.
    """
    if isinstance(spec, PositionalEncoding):
        return spec
    unknown_dims = sorted(set(dims) - set(DIM_NAMES))
    if unknown_dims:
        raise ValueError(
            f"build: unknown model size(s) {_show(unknown_dims)}; accepted: {', '.join(DIM_NAMES)}"
        )
    if isinstance(spec, str):
        name, options = parse_spec(spec)
    elif isinstance(spec, Mapping):
        options = dict(spec)
        if "name" not in options:
            raise ValueError(
                f"a position encoding spec dict needs a 'name' key, got keys {_show(sorted(map(str, options)))}"
            )
        name = options.pop("name")
        if not isinstance(name, str):
            raise TypeError(f"the 'name' of a position encoding spec must be a string, got {_show(name)}")
    else:
        raise TypeError(
            "spec must be a name, a call-like string, a dict with a 'name' key or a PositionalEncoding, "
            f"got {type(spec).__name__}"
        )
    cls = lookup(name)
    accepted = _options(cls)
    hints = _type_hints(cls)
    unknown = [k for k in options if k not in accepted]
    if unknown:
        listing = ", ".join(
            f"{n}={p.default!r}" if p.default is not inspect.Parameter.empty else n
            for n, p in accepted.items()
        )
        raise ValueError(
            f"{name}: unknown option(s) {', '.join(map(_show, unknown))}; {cls.__name__} accepts: {listing}"
        )
    kwargs = {k: v for k, v in dims.items() if k in accepted and v is not None}
    kwargs.update(options)
    for key, value in kwargs.items():
        _check_type(cls.__name__, key, value, hints.get(key, accepted[key].annotation))
    missing = [n for n, p in accepted.items() if p.default is inspect.Parameter.empty and n not in kwargs]
    if missing:
        raise ValueError(
            f"{name}: missing required size(s) {', '.join(missing)}; pass them to build(), e.g. "
            f"build({name!r}, {', '.join(f'{m}=...' for m in missing)})"
        )
    return cls(**kwargs)


# --- type checking of options against constructor annotations --------------------------------


def _type_hints(cls: type) -> dict[str, Any]:
    """The constructor's annotations, resolved; one that cannot be resolved stays a string."""
    init = inspect.getattr_static(cls, "__init__")  # the function, as inspect.signature reads it
    try:
        return typing.get_type_hints(init)
    except Exception:  # one bad annotation makes get_type_hints fail: resolve the others one by one
        pass
    hints: dict[str, Any] = {}
    namespace = getattr(init, "__globals__", {})
    for n, ann in getattr(init, "__annotations__", {}).items():
        try:
            # what typing.get_type_hints does for each annotation, with the function's globals
            hints[n] = eval(ann, namespace) if isinstance(ann, str) else ann
        except Exception:
            hints[n] = ann
    return hints


def _literal_choices(ann: Any) -> list[Any] | None:
    if typing.get_origin(ann) is Literal:
        return list(typing.get_args(ann))
    if typing.get_origin(ann) in (Union, types.UnionType):
        for arg in typing.get_args(ann):
            choices = _literal_choices(arg)
            if choices:
                return choices
    return None


def _type_name(ann: Any) -> str:
    if ann is inspect.Parameter.empty:
        return "any"
    if ann is type(None):
        return "None"
    if isinstance(ann, type) and not typing.get_args(ann):
        return ann.__name__
    return str(ann).replace("typing.", "").replace("collections.abc.", "")


@dataclass
class _Problem:
    """Why a value does not fit an annotation: ``where`` in the option, and what was expected."""

    where: str  # "scaling['factor']=..." or "grid_size[1]=..."
    depth: int  # how far into the value the check got; a union reports its deepest arm
    expected: str = ""
    reason: str = ""  # set when the type fits but the value does not (a ValueError)


def _float_problem(value: float | int, path: str, depth: int) -> _Problem | None:
    try:
        as_float = float(value)
    except OverflowError:
        return _Problem(
            f"{path}={_show(value)}",
            depth,
            reason=f"is too large for a float (at most {sys.float_info.max:.4g})",
        )
    if not math.isfinite(as_float):
        return _Problem(f"{path}={_show(value)}", depth, reason="must be finite")
    return None


_SEQUENCES = (
    list,
    set,
    frozenset,
    collections.abc.Sequence,
    collections.abc.MutableSequence,
    collections.abc.Set,
)
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)


def _problem(value: Any, ann: Any, path: str, depth: int = 0) -> _Problem | None:
    """``None`` if ``value`` fits ``ann``, else why not. Containers are checked element by element."""
    if ann is inspect.Parameter.empty or ann is Any or ann is object:
        return None
    if isinstance(ann, (str, typing.ForwardRef, TypeVar)):
        # An annotation that could not be resolved (or a type variable) cannot be checked here;
        # it is accepted and the constructor checks its own argument.
        return None
    wrong = _Problem(f"{path}={_show(value)}", depth, _type_name(ann))
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if origin is typing.Annotated:
        return _problem(value, args[0], path, depth)
    if origin is Literal:
        if any(value == choice and type(value) is type(choice) for choice in args):
            return None
        return _Problem(wrong.where, depth, f"one of {list(args)}")
    if origin in (Union, types.UnionType):
        problems = []
        for arm in args:
            p = _problem(value, arm, path, depth)
            if p is None:
                return None
            problems.append(p)
        bad_value = [p for p in problems if p.reason]
        if bad_value:  # the type fits one arm but the value does not: say why
            return bad_value[0]
        deepest = max(problems, key=lambda p: p.depth)
        if deepest.depth > depth:  # one arm matched the container: report the element that did not
            return deepest
        choices = _literal_choices(ann)
        return _Problem(
            wrong.where, depth, f"{_type_name(ann)}" + (f" (one of {choices})" if choices else "")
        )
    if ann is None or ann is type(None):
        return None if value is None else wrong
    if ann is bool:
        return None if isinstance(value, bool) else wrong
    if ann is int:  # bool is an int in Python; never accepted as one here
        return None if isinstance(value, int) and not isinstance(value, bool) else wrong
    if ann is float:  # ints are accepted where a float is declared, bools are not
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return wrong
        return _float_problem(value, path, depth)
    base = origin if origin is not None else ann
    if base is tuple:
        if not isinstance(value, tuple):
            return wrong
        if not args:
            return None
        if len(args) == 2 and args[1] is Ellipsis:
            element_types = [args[0]] * len(value)
        elif args == ((),):  # tuple[()]: the empty tuple
            element_types = []
        else:
            element_types = list(args)
        if len(value) != len(element_types):
            return _Problem(wrong.where, depth, f"{_type_name(ann)} (a tuple of {len(element_types)})")
        for i, (item, item_ann) in enumerate(zip(value, element_types, strict=True)):
            p = _problem(item, item_ann, f"{path}[{i}]", depth + 1)
            if p is not None:
                return p
        return None
    if base in _SEQUENCES:
        if base in (list, set, frozenset):
            ok = isinstance(value, base)
        else:
            # A str is a Sequence of str, but a string where a list is meant is nearly always a mistake.
            ok = isinstance(value, base) and not isinstance(value, (str, bytes))
        if not ok:
            return wrong
        for i, item in enumerate(value):
            p = _problem(item, args[0] if args else Any, f"{path}[{i}]", depth + 1)
            if p is not None:
                return p
        return None
    if base in _MAPPINGS:
        if not isinstance(value, base):
            return wrong
        key_ann, value_ann = args if len(args) == 2 else (Any, Any)
        for k, v in value.items():
            p = _problem(k, key_ann, f"{path} key", depth + 1) or _problem(
                v, value_ann, f"{path}[{_show(k)}]", depth + 1
            )
            if p is not None:
                return p
        return None
    if base is type:
        if not isinstance(value, type):
            return wrong
        if args and isinstance(args[0], type) and not issubclass(value, args[0]):
            return wrong
        return None
    if base is collections.abc.Callable:
        return None if callable(value) else wrong
    if hasattr(ann, "__supertype__"):  # typing.NewType
        return _problem(value, ann.__supertype__, path, depth)
    if isinstance(base, type):
        try:
            return None if isinstance(value, base) else wrong
        except TypeError:  # a Protocol that is not runtime_checkable: cannot be checked here
            return None
    # Any other annotation (a ParamSpec, a typing special form we do not know) cannot be checked
    # here; it is accepted and the constructor checks its own argument.
    return None


def _check_type(owner: str, key: str, value: Any, ann: Any) -> None:
    """Raise ``TypeError`` if ``value`` does not fit ``ann``, ``ValueError`` if it fits but is unusable."""
    problem = _problem(value, ann, key)
    if problem is not None and problem.reason:
        raise ValueError(f"{owner}: option {problem.where} {problem.reason}")
    if problem is not None:
        raise TypeError(f"{owner}: option {problem.where} has the wrong type; expected {problem.expected}")
    if isinstance(value, float) and not math.isfinite(value):  # whatever the annotation says
        raise ValueError(f"{owner}: option {key}={value!r} must be finite")
