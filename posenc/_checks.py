"""Argument checks shared by the encodings and the functional core.

Each raises the project's one error style: a ``TypeError`` (wrong type) or ``ValueError``
(wrong value) whose message names the argument, the value received and what is accepted.
``bool`` is refused where an ``int`` or a float is expected (``True`` is an ``int`` in Python).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import TypeGuard

import torch
from torch import Tensor


def short(value: object, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, so an error never echoes a huge input whole.

    Python refuses ``str()`` of ints past 4300 digits; those are described by their size.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an int of {len(str(value)) if value.bit_length() < 14000 else 'more than 4000'} digits"
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # a list of such ints; a very deep value
        return f"<a {type(value).__name__}>"
    return text if len(text) <= limit else f"{text[: limit - 20]}... ({len(text)} characters)"


def check_int(name: str, value: object, *, minimum: int) -> int:
    """Return ``value`` if it is an ``int >= minimum``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {short(value)} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {short(value)}")
    return value


def check_grid(grid: object, name: str = "grid", *, axes: int | None = None) -> tuple[int, ...]:
    """``grid`` as a tuple of positive ints: any non-empty one, or one of ``axes`` sizes when given.

    (The vision tables' ``grid_size``, which also takes an int, is checked by
    :func:`posenc.encodings._patches.patch_grid`.)
    """
    if axes is not None and (not isinstance(grid, (tuple, list)) or len(grid) != axes):
        raise ValueError(f"{name} must be a tuple of {axes} ints (one per axis), got {grid!r}")
    if not isinstance(grid, (tuple, list)) or not grid:
        raise TypeError(f"{name} must be a non-empty tuple of ints like (h, w), got {grid!r}")
    for i, s in enumerate(grid):
        check_int(f"{name}[{i}]", s, minimum=1)
    return tuple(grid)


def check_positive_int(name: str, value: object) -> int:
    """Return ``value`` if it is an ``int > 0``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be a positive int, got {short(value)} ({type(value).__name__})")
    if value <= 0:
        raise ValueError(f"{name} must be a positive int, got {short(value)}")
    return value


def check_rotary_channels(head_dim: int, rotary_dim: int | None, rotary_offset: int = 0) -> int:
    """The rotated channels of a ``head_dim``-wide head: ``rotary_dim`` (``None``: all) checked to be a positive
    even int that fits from ``rotary_offset`` (an int >= 0) on; returns ``rotary_dim``."""
    rotary_dim = check_positive_int("rotary_dim", head_dim if rotary_dim is None else rotary_dim)
    if rotary_dim % 2:
        raise ValueError(f"rotary_dim must be even (RoPE rotates channel pairs), got {rotary_dim}")
    if rotary_dim > head_dim:
        raise ValueError(f"rotary_dim must be <= head_dim={head_dim}, got {rotary_dim}")
    if check_int("rotary_offset", rotary_offset, minimum=0) + rotary_dim > head_dim:
        raise ValueError(
            f"rotary_offset must be <= head_dim - rotary_dim = {head_dim - rotary_dim} (the rotated channels "
            f"end inside the head), got {rotary_offset}"
        )
    return rotary_dim


def is_real(value: object) -> TypeGuard[int | float]:
    """An int or a float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_positive_float(name: str, value: object) -> float:
    """Return ``float(value)`` if ``value`` is a finite real number ``> 0`` (ints accepted)."""
    if not is_real(value):
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


#: The most attention heads an encoding accepts. No model comes near it; it keeps a typo such
#: as ``num_heads=10**15`` a clear error instead of an allocator failure in a per-head table.
MAX_HEADS = 2**16


def check_num_heads(name: str, value: object) -> int:
    """Return ``value`` if it is an ``int`` in ``1..MAX_HEADS``."""
    value = check_positive_int(name, value)
    if value > MAX_HEADS:
        raise ValueError(f"{name} must be at most {MAX_HEADS} (attention heads), got {short(value)}")
    return value


def check_bool(name: str, value: object) -> bool:
    """Return ``value`` if it is a ``bool`` (``0``/``1`` and strings are refused)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {short(value)} ({type(value).__name__})")
    return value


def check_choice(name: str, value: object, choices: Sequence[str]) -> None:
    """Raise ValueError unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {short(value)}")


def check_ints(name: str, value: object, shape: str) -> Tensor:
    """Return ``value`` if it is a tensor of an integer dtype; ``shape`` names the dims it should have."""
    if not isinstance(value, Tensor):
        raise TypeError(
            f"{name} must be an integer torch.Tensor of shape {shape}, got {type(value).__name__}"
        )
    if value.is_floating_point() or value.is_complex() or value.dtype == torch.bool:
        raise TypeError(f"{name} must have an integer dtype (e.g. torch.long), got {value.dtype}")
    return value


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
    if value.dtype.itemsize == 1:  # float8 (and smaller) formats: torch has no arithmetic for them
        raise TypeError(
            f"{name} has dtype {value.dtype}: float8 tensors are storage formats without the arithmetic "
            "position encodings need; cast to bfloat16 or float16 first"
        )


def allocate(
    what: str,
    shape: tuple[int, ...],
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """``torch.empty(shape)``, or a ``ValueError`` naming ``what`` when it clearly cannot be allocated.

    ``what`` names the arguments that set the size (e.g. ``"max_len=10**12 (d_model=8)"``), so a
    size typo reads as a clear error instead of an allocator message from inside torch. On the
    CPU, more bytes than the machine's RAM is refused before trying: with memory overcommit such
    an allocation may succeed and fail only when its pages are first written (the OOM killer).
    An allocator failure also becomes a ``ValueError``.
    """
    numel = math.prod(shape)
    if numel >= 2**62:  # past what torch can even describe
        raise ValueError(f"{what}: the table would have over 2**62 elements, more than any device can hold")
    size = numel * torch.empty(0, dtype=dtype).element_size()
    if (device is None or torch.device(device).type == "cpu") and size > _physical_memory():
        raise ValueError(
            f"{what}: a table of shape {shape} ({size / 2**30:.3g} GiB) is larger than this machine's memory"
        )
    try:
        return torch.empty(shape, device=device, dtype=dtype)
    except (RuntimeError, MemoryError) as error:
        if "alloc" not in str(error).lower() and "memory" not in str(error).lower():
            raise
        raise ValueError(f"{what}: a table of shape {shape} cannot be allocated ({error})") from None


def _physical_memory() -> int:
    """The machine's RAM in bytes (unbounded where the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 2**63


def keep_mask(attention_mask: object) -> Tensor:
    """The bool tensor of a keep-mask: true where ``attention_mask`` is true or a nonzero integer (a 2 is one
    token); floats refused (an additive mask, 0 to keep and ``-inf`` to drop, would read the other way round)."""
    if not isinstance(attention_mask, Tensor):
        raise TypeError(f"attention_mask must be a (batch, seq) tensor, got {type(attention_mask).__name__}")
    if attention_mask.is_floating_point() or attention_mask.is_complex():
        raise TypeError(f"attention_mask must be bool or 0/1 integers, got dtype {attention_mask.dtype}")
    return attention_mask != 0
