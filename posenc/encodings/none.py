"""NoPE: no position encoding at all, the baseline every experiment needs."""

from __future__ import annotations

from torch import Tensor

from .._positions import check_input
from ..base import PositionalEncoding

__all__ = ["NoPE"]


class NoPE(PositionalEncoding):
    """No position information anywhere ("NoPE", Kazemnejad et al., 2023).

    Every hook is the base class's no-op. A causal decoder can still infer position from
    the causal mask; a bidirectional encoder sees a bag of tokens.

    Shape:
        ``forward(x)``: ``(b, t, d) -> (b, t, d)``, returned unchanged.
    """

    kind = "none"

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """Return ``x`` unchanged (the drop-in call of an additive encoding that adds nothing).

        ``x`` and ``positions`` are checked like any additive encoding's, so that swapping an
        encoding for NoPE does not hide a shape bug.

        Args:
            x: ``(b, t, d)`` embeddings.
            positions: ignored after validation; ``(t,)`` or ``(b, t)`` integers or ``None``.

        Returns:
            ``x`` itself.
        """
        check_input(x, positions=positions)
        return self.encode_input(x, positions)
