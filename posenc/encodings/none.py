"""NoPE: no position encoding at all, the baseline every experiment needs."""

from __future__ import annotations

from torch import Tensor

from ..base import PositionalEncoding
from ..registry import register

__all__ = ["NoPE"]


@register("none", "nope")
class NoPE(PositionalEncoding):
    """No position information anywhere ("NoPE", Kazemnejad et al., 2023).

    Every hook is the base class's no-op. A causal decoder can still infer position from
    the causal mask; a bidirectional encoder sees a bag of tokens.

    Shape:
        ``forward(x)``: ``(b, t, d) -> (b, t, d)``, returned unchanged.
    """

    kind = "none"

    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """Return ``x`` unchanged (the drop-in call of an additive encoding that adds nothing)."""
        return self.encode_input(x, positions)
