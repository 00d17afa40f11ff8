"""The argument checks the application uses: its own copy of the few it needs from the library.

The messages read as the library's (a ``TypeError`` for a wrong type, a ``ValueError`` for a
wrong value, naming the argument, the value received and what is accepted), so an error reads
the same whether the study or an encoding raised it. ``bool`` is refused where an ``int`` or a
float is expected. Unlike the library's checks these import no torch, so the option parsing of
``posenc`` (and reading a :class:`~posenc.app.study.StudyConfig`) stays torch-free.
"""

from __future__ import annotations

import math


def short(value: object, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, so an error never echoes a huge input whole.

    Python refuses ``str()`` of ints past 4300 digits; those are described by their size.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an int of {len(str(value)) if value.bit_length() < 14000 else 'more than 4000'} digits"
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 20]}... ({len(text)} characters)"


def check_int(name: str, value: object, *, minimum: int) -> int:
    """Return ``value`` if it is an ``int >= minimum``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {short(value)} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {short(value)}")
    return value


def check_positive_int(name: str, value: object) -> int:
    """Return ``value`` if it is an ``int > 0``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be a positive int, got {short(value)} ({type(value).__name__})")
    if value <= 0:
        raise ValueError(f"{name} must be a positive int, got {short(value)}")
    return value


def check_positive_float(name: str, value: object) -> float:
    """Return ``float(value)`` if ``value`` is a finite real number ``> 0`` (ints accepted)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(
            f"{name} must be a float (a finite number > 0), got {short(value)} ({type(value).__name__})"
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
        raise TypeError(f"{name} must be a bool, got {short(value)} ({type(value).__name__})")
    return value
