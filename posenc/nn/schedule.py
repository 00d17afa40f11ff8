"""Per-layer schedules: which position encoding (and window) each layer of a model uses.

:func:`layer_specs` turns what a user writes into one spec per layer:

* one spec for every layer: ``"rope"``, ``"rope(base=1e6)"``, a dict, a built module;
* a list (or tuple) with one spec per layer: ``["rope", "rope", "rope", "none"]``;
* a pattern string, a group cycled over the layers: ``"rope*3 + none"`` is the group
  ``rope, rope, rope, none`` repeated (Llama 4's iRoPE, SmolLM3), ``"rope(base=1e4)*5 +
  rope(base=1e6)"`` Gemma 3's five local layers then one global. ``*`` repeats a spec or a
  parenthesised group by a positive int, ``+`` concatenates; the group need not divide the
  number of layers (its last repetition is cut at the last layer, as Gemma 3's 26 layers cut
  their fifth group of 6), but a group longer than the model is refused.

Patterns are parsed with :mod:`ast`, never evaluated; each spec inside is checked by
:func:`posenc.registry.parse_spec`.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from .._checks import check_positive_int
from ..base import PositionalEncoding
from ..masking import check_window
from ..registry import Spec, lookup, parse_spec

__all__ = ["layer_specs", "layer_windows", "spec_key"]

_MAX_PATTERN = 10_000  # characters: a pattern is a short schedule, never data


def layer_specs(position: Any, num_layers: int) -> list[Spec]:
    """One position-encoding spec per layer, from one spec, a list or a pattern string.

    Args:
        position: a spec for every layer (a name or call string, a dict, a built encoding), a
            list/tuple of ``num_layers`` specs, or a pattern such as ``"rope*3 + none"`` (see the
            module docstring).
        num_layers: the number of layers.

    Returns:
        ``num_layers`` specs (strings, dicts or modules), in layer order.

    Raises:
        ValueError: a list whose length is not ``num_layers``, a pattern that does not parse,
            repeats by a non-positive or non-int count, or has more layers than the model.
        TypeError: a spec of an unsupported type.
    """
    check_positive_int("num_layers", num_layers)
    if isinstance(position, (list, tuple)):
        if len(position) != num_layers:
            raise ValueError(
                f"position has {len(position)} per-layer specs but the model has num_layers={num_layers}; "
                f"give one spec per layer, or a pattern such as 'rope*3 + none'"
            )
        for i, spec in enumerate(position):
            if not isinstance(spec, (str, Mapping, PositionalEncoding)):
                raise TypeError(
                    f"position[{i}] must be a spec string, a dict or a PositionalEncoding, got {type(spec).__name__}"
                )
        return list(position)
    if isinstance(position, str) and len(position) <= _MAX_PATTERN:  # longer: parse_spec says why
        try:
            node = ast.parse(position.strip(), mode="eval").body
        except (SyntaxError, RecursionError, MemoryError):
            if "*" in position or "+" in position:
                raise ValueError(
                    f"cannot parse position pattern {position!r}: expected specs joined by '+' and repeated "
                    f"by '*', e.g. 'rope*3 + none'"
                ) from None
            node = None  # a broken single spec: parse_spec says why
        if node is not None and not isinstance(node, (ast.Name, ast.Call)):  # a pattern, not one spec
            group = _group(node, position, num_layers)
            return [group[i % len(group)] for i in range(num_layers)]
    if not isinstance(position, (str, Mapping, PositionalEncoding)):
        raise TypeError(
            "position must be a spec (a name or call string, a dict, a PositionalEncoding), a list of "
            f"one spec per layer, or a pattern string such as 'rope*3 + none'; got {type(position).__name__}"
        )
    return [position] * num_layers


def _group(node: ast.AST, pattern: str, num_layers: int) -> list[str]:
    """The specs ``node`` stands for, at most ``num_layers`` of them (checked as it grows)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        out = _group(node.left, pattern, num_layers) + _group(node.right, pattern, num_layers)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        count_node, spec_node = node.right, node.left
        if isinstance(node.left, ast.Constant) and not isinstance(node.right, ast.Constant):
            count_node, spec_node = node.left, node.right  # "3*rope" as well as "rope*3"
        count = count_node.value if isinstance(count_node, ast.Constant) else None
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(
                f"position pattern {pattern!r}: a repeat count must be a positive int literal, got "
                f"{ast.unparse(count_node)!r}"
            )
        if count > num_layers:
            raise ValueError(
                f"position pattern {pattern!r} repeats a group {count} times but the model has "
                f"num_layers={num_layers}"
            )
        out = _group(spec_node, pattern, num_layers) * count
    elif isinstance(node, (ast.Name, ast.Call)):
        text = ast.unparse(node)
        parse_spec(text)  # checks the spec (keyword literal options only)
        out = [text]
    else:
        raise ValueError(
            f"position pattern {pattern!r}: {ast.unparse(node)!r} is not a spec; expected a name like "
            f"'rope', a call like 'rope(base=1e6)', '+' and '*' with an int"
        )
    if len(out) > num_layers:
        raise ValueError(
            f"position pattern {pattern!r} has a group of {len(out)} layers but the model has "
            f"num_layers={num_layers}"
        )
    return out


def layer_windows(window: Any, num_layers: int) -> list[int | None]:
    """One sliding window (or ``None``) per layer, from ``None``, an int or a list of ``num_layers``.

    Raises:
        ValueError: a list of another length, a non-positive window.
        TypeError: a window that is not an int or ``None``.
    """
    if not isinstance(window, (list, tuple)):
        return [check_window(window)] * num_layers
    if len(window) != num_layers:
        raise ValueError(
            f"window has {len(window)} per-layer entries but the model has num_layers={num_layers}"
        )
    return [None if w is None else check_positive_int(f"window[{i}]", w) for i, w in enumerate(window)]


def spec_key(spec: Spec) -> object:
    """A key equal for specs that build the same encoding: ``"rope"``, ``"rope()"`` and
    ``{"name": "rotary"}`` share one; a built module is its own key (shared by identity), as is a
    dict without a string ``name`` (:func:`posenc.build` then says why)."""
    if isinstance(spec, str):
        name, options = parse_spec(spec)
    elif isinstance(spec, Mapping) and isinstance(spec.get("name"), str):
        name, options = spec["name"], {k: v for k, v in spec.items() if k != "name"}
    else:
        return id(spec)
    return (lookup(name), repr(sorted(options.items())))
