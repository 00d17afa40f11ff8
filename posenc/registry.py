"""Names for encodings, and building them from config strings, dicts or modules.

``build("rope(base=500000.0, scaling={'rope_type': 'yarn', 'factor': 4.0})", head_dim=64)``
parses the string with :mod:`ast` (never ``eval``), checks every option against the
encoding's constructor, and fills the model's sizes (``dims``) that the constructor declares.
The parser and the option checks are in :mod:`posenc._spec`; this module holds the registry
itself and ``build`` / ``describe``.

Registration is explicit and reversible: :func:`register` (a class decorator),
:func:`unregister`, and :func:`registered`, a context manager that undoes its registration
on exit (for tests and notebooks). A name belongs to one class at a time: registering a
different class under a taken name or alias raises (unregister that class first).
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeAlias, TypeVar

from ._checks import short
from ._spec import check_option, literal_choices, parse_spec, type_hints, type_name
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

_LOCK = threading.RLock()  # guards _REGISTRY against concurrent (un)registration
_REGISTRY: dict[str, type[PositionalEncoding]] = {}

E = TypeVar("E", bound=type[PositionalEncoding])
_ABSENT = object()


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


# --- registration ------------------------------------------------------------------------------
# A class's canonical name is the ``registry_name`` in its own ``__dict__`` (a subclass inherits the
# attribute, not the registration).


def _names_of(cls: type) -> list[str]:
    """Every name ``cls`` is registered under, the canonical one first."""
    canonical = cls.__dict__.get("registry_name")
    return sorted((n for n, c in _REGISTRY.items() if c is cls), key=lambda n: (n != canonical, n))


def register(name: str, *aliases: str) -> Callable[[E], E]:
    """Class decorator: register an encoding under ``name`` and any ``aliases``.

    Names are case-insensitive. Registering the same class again is a no-op (new aliases are
    added; the first name stays the canonical one). A name or alias already registered to a
    *different* class raises: :func:`unregister` that class first to replace it (under all its
    names, so that ``"rope"`` and ``"rotary"`` never build two different classes).

    Example::

        @posenc.register("my_pe", "mine")
        class MyPE(posenc.PositionalEncoding):
            ...

    Args:
        name: the canonical name, a Python identifier.
        *aliases: other names for the same class.

    Raises:
        ValueError: a name is not an identifier, or is registered to another class (the
            message names it).
        TypeError: the decorated object is not a :class:`PositionalEncoding` subclass.
    """
    for n in (name, *aliases):
        if not isinstance(n, str) or not n.isidentifier():
            raise ValueError(f"register: a name must be a Python identifier, got {short(n)}")
    names = list(dict.fromkeys(n.lower() for n in (name, *aliases)))

    def decorator(cls: E) -> E:
        if not (isinstance(cls, type) and issubclass(cls, PositionalEncoding)):
            raise TypeError(
                f"register({names[0]!r}) decorates PositionalEncoding subclasses, got {short(cls)}"
            )
        with _LOCK:
            for n in names:
                if (old := _REGISTRY.get(n, cls)) is not cls:
                    raise ValueError(
                        f"register: cannot register {_qualified(cls)} as {n!r}: that name is already registered "
                        f"to {_qualified(old)} (names: {', '.join(_names_of(old))}). Choose another name, or "
                        f"replace {old.__name__} under all its names: posenc.registry.unregister({n!r}) first."
                    )
            if not _names_of(cls):
                cls.registry_name = names[0]  # the first name a class is registered under stays canonical
            _REGISTRY.update(dict.fromkeys(names, cls))
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
        for n in _names_of(cls):
            del _REGISTRY[n]
        cls.registry_name = None
    return cls


@contextlib.contextmanager
def registered(cls: E, name: str, *aliases: str) -> Iterator[E]:
    """Register ``cls`` for the duration of a ``with`` block, then undo it.

    Takes the arguments of :func:`register`; on exit the names it added are gone and the class's
    canonical name is back as it was, whatever happened in the block. Registrations of other
    names made inside the block are kept.

    Example::

        with posenc.registry.registered(MyPE, "my_pe"):
            pe = posenc.build("my_pe", d_model=64)
    """
    decorate = register(name, *aliases)  # checks the names first
    with _LOCK:
        added = [n for n in dict.fromkeys(x.lower() for x in (name, *aliases)) if n not in _REGISTRY]
        canonical = cls.__dict__.get("registry_name", _ABSENT)
        decorate(cls)
    try:
        yield cls
    finally:
        with _LOCK:
            for n in added:
                if _REGISTRY.get(n) is cls:
                    del _REGISTRY[n]
            if canonical is not _ABSENT:
                cls.registry_name = canonical
            elif "registry_name" in cls.__dict__:
                delattr(cls, "registry_name")


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
    if (cls := _REGISTRY.get(key)) is None:
        known = available()
        close = difflib.get_close_matches(key, known, n=1) if len(key) <= 100 else []
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"unknown position encoding {short(name)}.{hint} Known encodings: {', '.join(known)}"
        )
    return cls


def _options(cls: type[PositionalEncoding]) -> dict[str, inspect.Parameter]:
    """The options ``cls`` accepts, each with its default and its resolved annotation: what
    :func:`build` checks and fills, and what :func:`describe` lists."""
    hints = type_hints(cls)
    return {
        p.name: p.replace(annotation=hints.get(p.name, p.annotation))
        for p in list(inspect.signature(cls.__init__).parameters.values())[1:]
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in ("device", "dtype")
    }


def describe(name: str | type[PositionalEncoding]) -> dict[str, Any]:
    """What an encoding accepts, read from its constructor.

    Returns:
        ``{"name", "aliases", "class", "kind", "doc", "options": [{"name", "default",
        "required", "type", "choices", "is_dim"}]}``; ``choices`` lists a ``Literal``'s values.
    """
    if not (isinstance(name, str) or (isinstance(name, type) and issubclass(name, PositionalEncoding))):
        raise TypeError(f"name must be a registered name or a PositionalEncoding subclass, got {short(name)}")
    cls = lookup(name) if isinstance(name, str) else name
    canonical, *aliases = _names_of(cls) or [cls.__name__.lower()]
    options = [
        {
            "name": n,
            "default": None if p.default is p.empty else p.default,
            "required": p.default is p.empty,
            "type": type_name(p.annotation),
            "choices": literal_choices(p.annotation),
            "is_dim": n in DIM_NAMES,
        }
        for n, p in _options(cls).items()
    ]
    return {
        "name": canonical,
        "aliases": aliases,
        "class": cls.__name__,
        "kind": cls.kind,
        "doc": (inspect.getdoc(cls) or "").split("\n\n")[0],
        "options": options,
    }


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
            given twice, a number too large for a float or not finite, a value of the right type
            outside an option's accepted ones (``layout='split'``), an oversized spec.
        TypeError: an option of the wrong type (containers are checked element by element),
            or a spec of an unsupported type.
    """
    if isinstance(spec, PositionalEncoding):
        return spec
    if unknown_dims := sorted(set(dims) - set(DIM_NAMES)):
        raise ValueError(
            f"build: unknown model size(s) {short(unknown_dims)}; accepted: {', '.join(DIM_NAMES)}"
        )
    if isinstance(spec, str):
        name, options = parse_spec(spec)
    elif isinstance(spec, Mapping):
        options = dict(spec)
        if "name" not in options:
            keys = short(sorted(map(str, options)))
            raise ValueError(f"a position encoding spec dict needs a 'name' key, got keys {keys}")
        name = options.pop("name")
        if not isinstance(name, str):
            raise TypeError(f"the 'name' of a position encoding spec must be a string, got {short(name)}")
    else:
        raise TypeError(
            "spec must be a name, a call-like string, a dict with a 'name' key or a PositionalEncoding, "
            f"got {type(spec).__name__}"
        )
    cls = lookup(name)
    accepted = _options(cls)
    if unknown := [k for k in options if k not in accepted]:
        listing = ", ".join(n if p.default is p.empty else f"{n}={p.default!r}" for n, p in accepted.items())
        raise ValueError(
            f"{name}: unknown option(s) {', '.join(map(short, unknown))}; {cls.__name__} accepts: {listing}"
        )
    kwargs = {k: v for k, v in dims.items() if k in accepted and v is not None} | options
    for key, value in kwargs.items():
        check_option(cls.__name__, key, value, accepted[key].annotation)
    if missing := [n for n, p in accepted.items() if p.default is p.empty and n not in kwargs]:
        raise ValueError(
            f"{name}: missing required size(s) {', '.join(missing)}; pass them to build(), e.g. "
            f"build({name!r}, {', '.join(f'{m}=...' for m in missing)})"
        )
    return cls(**kwargs)


# The built-in encodings, registered here in one visible place (posenc.encodings.BUILTIN names them),
# so every lookup, and every user registration's name check, sees them.
from .encodings import BUILTIN  # noqa: E402  (the encodings import nothing of the registry)

for _cls, (_name, *_aliases) in BUILTIN:
    register(_name, *_aliases)(_cls)
