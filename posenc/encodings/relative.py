"""T5's relative position bias: a learned scalar per head and log-spaced distance bucket."""

from __future__ import annotations

from ..base import PositionalEncoding
from ..registry import register

__all__ = ["RelativeBias"]


@register("relative_bias", "t5")
class RelativeBias(PositionalEncoding):
    """SKELETON: to be implemented."""

    kind = "bias"

    def __init__(
        self,
        num_heads: int,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool | None = None,
        causal: bool = False,
    ) -> None:
        super().__init__()
        self.num_heads, self.num_buckets, self.max_distance = num_heads, num_buckets, max_distance
        self.bidirectional = (not causal) if bidirectional is None else bidirectional
        self.causal = causal
