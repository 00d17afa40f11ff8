"""Query temperature by position: Llama 4's NoPE layers ("attention temperature tuning").

Llama 4 leaves every fourth layer without RoPE ("iRoPE") and, in those layers, multiplies the
queries at position ``p`` by ``log1p(floor((p + 1) / floor_scale)) * attn_scale + 1`` (Nakanishi,
2025, "Scalable-Softmax Is Superior for Attention"; transformers' ``attn_temperature_tuning``),
so the softmax stays sharp over long contexts. Keys are untouched. Below ``floor_scale - 1`` the
factor is 1: such layers behave as NoPE on short inputs. Beam's layers without RoPE use a power law
instead, ``(1 + (p + 1) / 2048) ** 0.1`` (``form="power"``).
"""

from __future__ import annotations

import sys
from typing import Literal

import torch
from torch import Tensor

from .._checks import check_choice, check_positive_float, is_real, short
from .._compat import precise_dtype
from .._positions import check_qk, resolve_qk_positions
from ..base import PositionalEncoding

__all__ = ["QueryTemperature"]


class QueryTemperature(PositionalEncoding):
    """Llama 4's NoPE-layer encoding: no rotation, queries scaled by a slowly growing temperature.

    ``q[..., p, :] *= log1p(floor((p + 1) / floor_scale)) * attn_scale + 1``; keys pass through. With
    ``form="power"`` (Beam): ``q[..., p, :] *= (1 + (p + 1) / floor_scale) ** attn_scale``, no floor.
    The scale is computed in float64 and applied in float32 or better (as transformers does),
    the result cast back to the queries' dtype.

    Args:
        floor_scale: positions per step (transformers' ``floor_scale``, 8192 in Llama 4).
        attn_scale: the slope (transformers' ``attn_scale``, 0.1 in Llama 4); 0 gives NoPE.
        form: ``"log"`` (Llama 4's steps) or ``"power"`` (Beam's power law; the exponent ``attn_scale``).

    Shape:
        ``forward(q, k)``: ``q`` ``(b, h, tq, dh)``, ``k`` ``(b, h_kv, tk, dh)`` -> ``(q, k)``, same
        shapes and dtypes; ``k`` is returned as is.

    Example::

        temp = QueryTemperature(floor_scale=8192, attn_scale=0.1)
        q, k = temp(q, k, q_positions=torch.arange(past, past + t))   # decoding at `past`
    """

    # acts on queries and keys inside attention, as RoPE does (nothing else reads it)
    kind = "rotary"

    def __init__(
        self, floor_scale: float = 8192.0, attn_scale: float = 0.1, form: Literal["log", "power"] = "log"
    ) -> None:
        super().__init__()
        check_choice("form", form, ("log", "power"))
        self.form = form
        self.floor_scale = check_positive_float("floor_scale", floor_scale)
        if not is_real(attn_scale):
            raise TypeError(
                f"attn_scale must be a finite number >= 0, got {attn_scale!r} ({type(attn_scale).__name__})"
            )
        # compared before float(): an int past the float range is refused here, not by an OverflowError
        if not 0 <= attn_scale <= sys.float_info.max:
            raise ValueError(f"attn_scale must be a finite number >= 0, got {short(attn_scale)}")
        self.attn_scale = float(attn_scale)

    def extra_repr(self) -> str:
        form = "" if self.form == "log" else f", form={self.form!r}"
        return f"floor_scale={self.floor_scale:g}, attn_scale={self.attn_scale:g}{form}"

    def encode_qk(
        self, q: Tensor, k: Tensor, *, q_positions: Tensor | None = None, k_positions: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Scale queries ``(b, h, tq, dh)`` by their positions' temperature; keys ``(b, h_kv, tk, dh)`` as is.

        Positions default as everywhere (keys ``0..tk-1``, queries the last ``tq`` of them).
        """
        check_qk(q, k)
        qp, _ = resolve_qk_positions(q, k, q_positions, k_positions)
        dtype = precise_dtype(q.dtype)
        # float64 steps: (p + 1) / floor_scale is exact for any position a model sees
        steps = (qp.to(torch.float64) + 1.0) / self.floor_scale
        if self.form == "power":  # Beam: (1 + steps) ** attn_scale, as exp(attn_scale * log1p(steps))
            scale = torch.exp(torch.log1p(steps) * self.attn_scale)
        else:  # Llama 4
            scale = torch.log1p(torch.floor(steps)) * self.attn_scale + 1.0
        scale = scale.to(dtype)  # (t,) or (b, t), >= 1
        # (t,) -> (t, 1); (b, t) -> (b, 1, t, 1): broadcast over heads and channels
        scale = scale[:, None, :, None] if scale.dim() == 2 else scale[:, None]
        return (q.to(dtype) * scale).to(q.dtype), k

    def forward(
        self, q: Tensor, k: Tensor, q_positions: Tensor | None = None, k_positions: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """The drop-in call: ``q, k = temp(q, k)``; the same as :meth:`encode_qk`."""
        return self.encode_qk(q, k, q_positions=q_positions, k_positions=k_positions)
