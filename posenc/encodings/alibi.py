"""ALiBi (Press et al., 2022): a linear penalty on distance, one slope per head."""

from __future__ import annotations

from ..base import PositionalEncoding
from ..registry import register

__all__ = ["ALiBi"]


@register("alibi")
class ALiBi(PositionalEncoding):
    """SKELETON: to be implemented."""

    kind = "bias"

    def __init__(self, num_heads: int, causal: bool = True, max_bias: float = 8.0) -> None:
        super().__init__()
        self.num_heads, self.causal, self.max_bias = num_heads, causal, max_bias
