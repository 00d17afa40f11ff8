"""Fixed sin/cos encodings: 1D (Vaswani et al., 2017) and 2D for image patch grids (MAE)."""

from __future__ import annotations

from typing import Literal

from ..base import PositionalEncoding
from ..registry import register

__all__ = ["Sinusoidal", "Sinusoidal2D"]


@register("sinusoidal", "sincos")
class Sinusoidal(PositionalEncoding):
    """SKELETON: to be implemented."""

    kind = "additive"

    def __init__(
        self,
        d_model: int,
        base: float = 10000.0,
        layout: Literal["interleaved", "concat"] = "interleaved",
        max_len: int | None = None,
    ) -> None:
        super().__init__()
        self.d_model, self.base, self.layout, self.max_len = d_model, base, layout, max_len


@register("sinusoidal2d")
class Sinusoidal2D(PositionalEncoding):
    """SKELETON: to be implemented."""

    kind = "additive"

    def __init__(
        self,
        d_model: int,
        grid_size: int | tuple[int, int] | list[int] | None = None,
        base: float = 10000.0,
        num_prefix_tokens: int = 0,
    ) -> None:
        super().__init__()
        self.d_model, self.grid_size, self.base, self.num_prefix_tokens = d_model, grid_size, base, num_prefix_tokens
