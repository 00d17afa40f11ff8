"""Names for encodings, and building them from config strings, dicts or modules.

``build("rope(base=500000.0, scaling={'rope_type': 'yarn', 'factor': 4.0})", head_dim=64)``
parses the string with :mod:`ast` (never ``eval``), checks every option against the
encoding's constructor, and fills the model's sizes (``dims``) that the constructor declares.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, Union

from .base import PositionalEncoding

__all__ = ["DIM_NAMES", "available", "build", "describe", "lookup", "parse_spec", "register"]

#: The model sizes ``build`` can fill in; each encoding takes those its constructor declares.
DIM_NAMES = ("d_model", "num_heads", "head_dim", "max_len", "causal")

_REGISTRY: dict[str, type[PositionalEncoding]] = {}
_CANONICAL: dict[type[PositionalEncoding], str] = {}

E = TypeVar("E", bound=type[PositionalEncoding])


def register(name: str, *aliases: str) -> Callable[[E], E]:
    """Class decorator: register an encoding under ``name`` and any ``aliases``.

    Example::

        @posenc.register("my_pe", "mine")
        class MyPE(posenc.PositionalEncoding):
            ...

    Raises:
        ValueError: a name is already registered to another class, or is not an identifier.
        TypeError: the decorated object is not a :class:`PositionalEncoding` subclass.
    """
    names = (name, *aliases)
    for n in names:
        if not isinstance(n, str) or not n.isidentifier():
            raise ValueError(f"register: a name must be a Python identifier, got {n!r}")

    def decorator(cls: E) -> E:
        if not (isinstance(cls, type) and issubclass(cls, PositionalEncoding)):
            raise TypeError(f"register({name!r}) decorates PositionalEncoding subclasses, got {cls!r}")
        for n in names:
            key = n.lower()
            existing = _REGISTRY.get(key)
            if existing is not None and existing.__qualname__ != cls.__qualname__:
                raise ValueError(f"register: the name {n!r} is already taken by {existing.__name__}")
        for n in names:
            _REGISTRY[n.lower()] = cls
        _CANONICAL[cls] = name.lower()
        cls.registry_name = name.lower()
        return cls

    return decorator


def available() -> list[str]:
    """The registered names, aliases included, sorted."""
    return sorted(_REGISTRY)


def lookup(name: str) -> type[PositionalEncoding]:
    """The class registered under ``name`` (case-insensitive).

    Raises:
        ValueError: unknown name; the message lists the known names and the closest match.
    """
    if not isinstance(name, str):
        raise TypeError(f"an encoding name must be a string, got {type(name).__name__}")
    cls = _REGISTRY.get(name.strip().lower())
    if cls is None:
        known = available()
        close = difflib.get_close_matches(name.strip().lower(), known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown position encoding {name!r}.{hint} Known encodings: {', '.join(known)}")
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
        "required", "type", "choices"}]}``; ``choices`` lists a ``Literal``'s values.
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


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """Parse ``"name"`` or ``"name(key=literal, ...)"`` into ``(name, options)`` without ``eval``.

    Raises:
        ValueError: the string is not a name or a call with keyword literal arguments.
    """
    text = spec.strip()
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError as err:
        raise ValueError(
            f"cannot parse position encoding spec {spec!r}: expected a name like 'rope' or a call like "
            f'"rope(base=500000.0)" ({err.msg})'
        ) from None
    if isinstance(node, ast.Name):
        return node.id, {}
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        raise ValueError(
            f"position encoding spec {spec!r} must be a name like 'alibi' or a call like \"rope(base=500000.0)\""
        )
    if node.args:
        raise ValueError(
            f'position encoding spec {spec!r}: options must be given by keyword, e.g. "{node.func.id}(base=10000.0)"'
        )
    options: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise ValueError(
                f"position encoding spec {spec!r}: '**' is not allowed; write each option as key=value"
            )
        try:
            options[kw.arg] = ast.literal_eval(kw.value)
        except ValueError:
            raise ValueError(
                f"position encoding spec {spec!r}: option {kw.arg!r} must be a Python literal "
                f"(number, string, bool, None, list, tuple or dict), got {ast.unparse(kw.value)!r}"
            ) from None
    return node.func.id, options


def build(spec: Any, **dims: Any) -> PositionalEncoding:
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
            (lists the accepted ones), missing required size, unknown dim name.
        TypeError: an option of the wrong type, or a spec of an unsupported type.
    """
    if isinstance(spec, PositionalEncoding):
        return spec
    unknown_dims = sorted(set(dims) - set(DIM_NAMES))
    if unknown_dims:
        raise ValueError(f"build: unknown model size(s) {unknown_dims}; accepted: {', '.join(DIM_NAMES)}")
    if isinstance(spec, str):
        name, options = parse_spec(spec)
    elif isinstance(spec, Mapping):
        options = dict(spec)
        if "name" not in options:
            raise ValueError(f"a position encoding spec dict needs a 'name' key, got keys {sorted(options)}")
        name = options.pop("name")
        if not isinstance(name, str):
            raise TypeError(f"the 'name' of a position encoding spec must be a string, got {name!r}")
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
            f"{name}: unknown option(s) {', '.join(map(repr, unknown))}; {cls.__name__} accepts: {listing}"
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
    try:
        return typing.get_type_hints(cls.__init__)
    except Exception:  # annotations that cannot be resolved are simply not checked
        return {}


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
    if isinstance(ann, type):
        return ann.__name__
    return str(ann).replace("typing.", "")


def _matches(value: Any, ann: Any) -> bool:
    if ann is inspect.Parameter.empty or ann is Any:
        return True
    origin = typing.get_origin(ann)
    if origin is Literal:
        return any(value == choice and type(value) is type(choice) for choice in typing.get_args(ann))
    if origin in (Union, types.UnionType):
        return any(_matches(value, a) for a in typing.get_args(ann))
    if ann is type(None) or ann is None:
        return value is None
    if ann is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if ann is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin in (list, tuple, typing.Sequence, Mapping, dict) or ann in (list, tuple, dict):
        base = origin or ann
        if base in (typing.Sequence,):
            return isinstance(value, (list, tuple))
        if base in (Mapping,):
            return isinstance(value, Mapping)
        return isinstance(value, base)
    if isinstance(ann, type):
        return isinstance(value, ann)
    return True  # annotations we do not understand are not checked here; constructors check


def _check_type(owner: str, key: str, value: Any, ann: Any) -> None:
    if not _matches(value, ann):
        choices = _literal_choices(ann)
        expected = f"one of {choices}" if choices else _type_name(ann)
        raise TypeError(f"{owner}: option {key}={value!r} has the wrong type; expected {expected}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{owner}: option {key}={value!r} must be finite")
