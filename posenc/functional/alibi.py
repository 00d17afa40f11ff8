"""Pure tensor functions for ALiBi (no state).

ALiBi (Press, Smith & Lewis, 2022, "Train Short, Test Long: Attention with Linear Biases
Enables Input Length Extrapolation") adds ``-m_h * (q_pos - k_pos)`` to the scores of head
``h``, with one fixed slope ``m_h`` per head.

The slopes are the one formula of their own (the paper's rule); the bias itself, ``m * (k_pos -
q_pos)`` (causal) or ``-m * |k_pos - q_pos|`` (bidirectional), is written once, in
:meth:`posenc.ALiBi.bias_fn`, which every form of it (full, key-only, by distance, ``score_mod``) calls.

Shape key: ``b`` batch, ``h`` heads, ``tq`` queries, ``tk`` keys.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._checks import check_num_heads, check_positive_float

__all__ = ["alibi_slopes"]


def _geometric_slopes(n: int, max_bias: float) -> list[float]:
    # For n heads (a power of two): 2^(-max_bias * i / n), i = 1..n.
    return [2.0 ** (-max_bias * i / n) for i in range(1, n + 1)]


def alibi_slopes(
    num_heads: int,
    max_bias: float = 8.0,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """The ALiBi slope of each head.

    For ``n`` heads, ``n`` a power of two, the slopes are the geometric sequence
    ``2^(-max_bias * i / n)``, ``i = 1..n`` (with ``max_bias = 8``: 1/2, 1/4, ... 1/256 for 8
    heads). For other head counts, the paper's rule: the slopes of the closest smaller power of
    two ``p``, followed by every other slope of ``2p`` heads (the odd ones, ``i = 1, 3, 5...``),
    as many as needed. This is Bloom's rule (``max_bias = 8``) and MPT's (any
    ``alibi_bias_max``; MPT interleaves the same two sequences from ``2p`` heads and takes the
    same slopes in the same order).

    Computed in float64 and rounded once to ``dtype``.

    Args:
        num_heads: the number of heads.
        max_bias: the exponent span; 8 in the paper, MPT's ``alibi_bias_max``.
        dtype: dtype of the result.
        device: device of the result.

    Returns:
        ``(h,)`` slopes, decreasing for a power-of-two head count.
    """
    check_num_heads("num_heads", num_heads)
    check_positive_float("max_bias", max_bias)
    if not dtype.is_floating_point:  # (slopes below 1 in an integer dtype: all 0)
        raise TypeError(f"dtype must be a floating-point dtype, got {dtype}")
    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = _geometric_slopes(closest, max_bias)
    if closest != num_heads:
        slopes += _geometric_slopes(2 * closest, max_bias)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float64, device=device).to(dtype)
