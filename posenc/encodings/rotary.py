"""Rotary position embedding (RoPE, Su et al., 2021) with the Hugging Face scaling variants."""

from __future__ import annotations

from typing import Any, Literal

from ..base import PositionalEncoding
from ..registry import register

__all__ = ["RoPE"]


@register("rope", "rotary")
class RoPE(PositionalEncoding):
    """SKELETON: to be implemented."""

    kind = "rotary"

    def __init__(
        self,
        head_dim: int,
        base: float = 10000.0,
        layout: Literal["half", "interleaved"] = "half",
        rotary_dim: int | None = None,
        scaling: dict[str, Any] | None = None,
        max_len: int | None = None,
    ) -> None:
        super().__init__()
        self.head_dim, self.base, self.layout = head_dim, base, layout
        self.rotary_dim, self.scaling, self.max_len = rotary_dim, scaling, max_len
