"""Pure tensor functions for ALiBi (no state).

ALiBi (Press, Smith & Lewis, 2022, "Train Short, Test Long: Attention with Linear Biases
Enables Input Length Extrapolation") adds ``-m_h * (q_pos - k_pos)`` to the scores of head
``h``, with one fixed slope ``m_h`` per head.

Three forms of the same bias, each exact where it is used:

* **full causal**  ``-m * (q_pos - k_pos)``, ``(h, tq, tk)``: the paper's form;
* **key-only**     ``m * (k_pos - q_ref)``, ``(h, 1, tk)``, ``q_ref`` the largest query
  position: differs from the full form by ``m * (q_ref - q_pos)``, a constant in each query
  row, which softmax cancels. Valid wherever the full causal form is (a causal mask).
  Subtracting ``q_ref`` keeps the values small next to the diagonal of the last query, which
  is what keeps them precise at long context;
* **symmetric**    ``-m * |q_pos - k_pos|``, ``(h, tq, tk)``: for bidirectional attention.

Shape key: ``b`` batch, ``h`` heads, ``tq`` queries, ``tk`` keys.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._checks import check_num_heads, check_positive_float

__all__ = ["alibi_slopes", "check_alibi_options", "linear_bias"]


def check_alibi_options(num_heads: int, max_bias: float) -> None:
    """Check ALiBi options; raise ValueError/TypeError naming the bad one."""
    check_num_heads("num_heads", num_heads)
    check_positive_float("max_bias", max_bias)


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
    check_alibi_options(num_heads, max_bias)
    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = _geometric_slopes(closest, max_bias)
    if closest != num_heads:
        slopes += _geometric_slopes(2 * closest, max_bias)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float64, device=device).to(dtype)


def linear_bias(slopes: Tensor, distance: Tensor, *, symmetric: bool) -> Tensor:
    """ALiBi's formula, the one place it is written: ``m * d`` (causal), ``-m * |d|`` (symmetric).

    ``d = k_pos - q_pos``, so the causal form is the paper's ``-m * (q_pos - k_pos)``. Every
    form of the bias (full, key-only, by distance, FlexAttention's ``score_mod``) calls this with
    its own broadcastable ``slopes`` and ``distance``.

    Args:
        slopes: float slopes ``m``; the result has their dtype.
        distance: integer (or float) ``k_pos - q_pos``, broadcastable with ``slopes``; converted
            once, so exact up to 2^24 in float32.
        symmetric: ``True`` for bidirectional attention.

    Returns:
        The broadcast of ``slopes`` and ``distance``.
    """
    distance = distance.to(slopes.dtype)
    return -slopes * distance.abs() if symmetric else slopes * distance
