"""Argument checks shared by the encodings and the functional core.

Each raises the project's one error style: a ``TypeError`` (wrong type) or ``ValueError``
(wrong value) whose message names the argument, the value received and what is accepted.
``bool`` is refused where an ``int`` or a float is expected (``True`` is an ``int`` in Python).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch import Tensor


def check_int(name: str, value: object, *, minimum: int) -> int:
    """Return ``value`` if it is an ``int >= minimum``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_positive_int(name: str, value: object) -> int:
    """Return ``value`` if it is an ``int > 0``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be a positive int, got {value!r} ({type(value).__name__})")
    if value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value}")
    return value


def check_positive_float(name: str, value: object) -> float:
    """Return ``float(value)`` if ``value`` is a finite real number ``> 0`` (ints accepted)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(
            f"{name} must be a float (a finite number > 0), got {value!r} ({type(value).__name__})"
        )
    try:
        value = float(value)
    except OverflowError:  # an int past the float range, e.g. 10**400
        raise ValueError(f"{name} must be a finite number > 0, got an int too large for a float") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value}")
    return value


def check_bool(name: str, value: object) -> bool:
    """Return ``value`` if it is a ``bool`` (``0``/``1`` and strings are refused)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r} ({type(value).__name__})")
    return value


def check_choice(name: str, value: object, choices: Sequence[str]) -> None:
    """Raise ValueError unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")


def check_float_tensor(name: str, value: object, *, rank: int, shape: str) -> None:
    """Raise unless ``value`` is a floating-point tensor of ``rank`` dims; ``shape`` names them."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape {shape}, got {type(value).__name__}")
    if value.dim() != rank:
        raise ValueError(
            f"{name} must have shape {shape}, got a tensor of rank {value.dim()}: {tuple(value.shape)}"
        )
    if not value.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {value.dtype}")
