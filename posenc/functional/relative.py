"""Pure tensor functions for T5's relative position bias (no state).

T5 (Raffel et al., 2020, "Exploring the Limits of Transfer Learning with a Unified
Text-to-Text Transformer") adds to every attention score a learned scalar per head that
depends on the relative position ``k_pos - q_pos`` through a bucket: distances below
``max_exact`` get a bucket each, larger ones share logarithmically wider buckets, and every
distance of ``max_distance`` or more shares the last bucket.

Because the buckets saturate at ``max_distance``, the bias depends only on
``clamp(k_pos - q_pos, -max_distance, max_distance)``. :class:`posenc.RelativeBias` uses that:
the bias of a head is a vector over the ``2 * max_distance + 1`` clamped distances, and a
``(tq, tk)`` bias is a gather from it, with no bucketing (log, division) per score.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._checks import check_bool, check_int, check_ints, check_positive_int, short

__all__ = ["check_relative_bucket_options", "relative_position_bucket"]

#: The largest ``max_distance`` (and ``num_buckets``) accepted: :class:`posenc.RelativeBias` reads a
#: vector with one entry per clamped distance in ``-max_distance..max_distance`` at every forward.
MAX_DISTANCE = 2**20


def check_relative_bucket_options(num_buckets: int, max_distance: int, bidirectional: bool) -> None:
    """Check T5 bucket options; raise ValueError/TypeError naming the bad one.

    Limits, and why:

    * ``num_buckets`` and ``max_distance`` are positive integers;
    * the buckets of one direction (``num_buckets // 2`` when bidirectional, else
      ``num_buckets``) number at least 2: half of them are exact buckets and the formula needs
      at least one (``max_exact >= 1``; with 0 it divides by zero) plus one logarithmic bucket.
      So ``num_buckets >= 4`` bidirectional, ``>= 2`` causal;
    * ``max_distance > max_exact`` (``max_exact`` = half the buckets of one direction): the
      logarithmic buckets divide by ``log(max_distance / max_exact)``, which is zero at equality
      and negative below (buckets would then decrease with distance).

    An odd ``num_buckets`` is accepted, as in T5: when bidirectional, the last bucket is never used.
    """
    check_positive_int("num_buckets", num_buckets)
    check_int("max_distance", max_distance, minimum=1)
    if max_distance > MAX_DISTANCE:
        raise ValueError(
            f"max_distance must be at most {MAX_DISTANCE} (one table entry per distance), got {short(max_distance)}"
        )
    if num_buckets > MAX_DISTANCE:
        raise ValueError(f"num_buckets must be at most {MAX_DISTANCE}, got {short(num_buckets)}")
    check_bool("bidirectional", bidirectional)
    per_direction = num_buckets // 2 if bidirectional else num_buckets
    if per_direction < 2:
        raise ValueError(
            f"num_buckets={num_buckets} is too small for bidirectional={bidirectional}: each direction needs at least "
            f"2 buckets (one exact, one logarithmic), so num_buckets must be >= {4 if bidirectional else 2}"
        )
    max_exact = per_direction // 2
    if max_distance <= max_exact:
        raise ValueError(
            f"max_distance={max_distance} must be greater than the {max_exact} exact buckets of num_buckets={num_buckets} "
            f"(bidirectional={bidirectional}); the logarithmic buckets span max_exact..max_distance"
        )


def relative_position_bucket(
    relative_position: Tensor, *, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128
) -> Tensor:
    """T5's bucket of each relative position ``k_pos - q_pos`` (memory minus context position).

    With ``bidirectional``, half of the buckets are for keys after the query (positive
    relative positions) and half for keys before or at it. Without it (a causal decoder),
    positive relative positions all fall in bucket 0 with distance 0. In each direction, half
    the buckets hold the distances ``0 .. max_exact-1`` one by one and the others split
    ``max_exact .. max_distance`` logarithmically; farther distances share the last bucket.
    The arithmetic (float32 log, truncation) is T5's, so buckets agree at every boundary.

    Args:
        relative_position: integer tensor of any shape, ``k_pos - q_pos``.
        bidirectional: whether keys after the query get their own buckets (T5's encoder) or
            not (T5's decoder).
        num_buckets: the number of buckets (rows of the bias table).
        max_distance: distances from here on share the last bucket of their direction.

    Returns:
        A ``torch.long`` tensor of the same shape with values in ``[0, num_buckets)``.
    """
    check_relative_bucket_options(num_buckets, max_distance, bidirectional)
    relative_position = check_ints("relative_position", relative_position, "(...)").long()
    if bidirectional:
        num_buckets //= 2
        offset = (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        offset = torch.zeros_like(relative_position)
        distance = (-relative_position).clamp_min(0)
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    # Where the distance is small the log branch is discarded; clamping to max_exact keeps it
    # finite (log(0) = -inf cast to long is undefined) without changing any kept value.
    ratio = distance.clamp_min(max_exact).float() / max_exact
    log_ratio = torch.log(ratio) / math.log(max_distance / max_exact)
    if_large = (max_exact + (log_ratio * (num_buckets - max_exact)).long()).clamp_max(num_buckets - 1)
    return offset + torch.where(is_small, distance, if_large)
