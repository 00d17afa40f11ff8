"""Checking a spec's options against the encoding's constructor annotations, before building.

:func:`_check_type` raises ``TypeError`` for a value of the wrong type (containers element by
element, ``Literal`` choices, unions reporting their deepest arm) and ``ValueError`` for a value of
the right type that cannot be used (a float too large or not finite). Annotations it cannot
resolve are accepted and left to the constructor. Used by :func:`posenc.registry.build` and
:func:`posenc.registry.describe`.
"""

from __future__ import annotations

import collections.abc
import inspect
import math
import sys
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, Union

from ._spec import _show


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
