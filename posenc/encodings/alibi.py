"""ALiBi (Press et al., 2022): a linear penalty on distance, one slope per head."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._checks import check_bool, check_num_heads, check_positive_float, check_positive_int
from ..functional.alibi import alibi_slopes
from ._bias import BiasFn, PositionBias

__all__ = ["ALiBi", "FalconALiBi"]


class ALiBi(PositionBias):
    """ALiBi: attention with linear biases, ``-m_h * distance`` added to the scores of head ``h``.

    From Press, Smith & Lewis (2022), "Train Short, Test Long: Attention with Linear Biases
    Enables Input Length Extrapolation"; used by Bloom and MPT. No learned parameters. The
    slopes ``m_h`` are the paper's geometric sequence (see
    :func:`posenc.functional.alibi_slopes`), including its rule for head counts that are not
    powers of two; ``max_bias`` is MPT's ``alibi_bias_max`` (8 in the paper and Bloom).

    Which form each method returns (``i`` query position, ``j`` key position, ``m`` slope):

    ============================  ===================================  =======================
    call                          value                                shape
    ============================  ===================================  =======================
    ``attention_bias``, causal    ``m * (j - i_max)`` (key-only)       ``(1|b, h, 1, tk)``
    ``attention_bias``, not       ``-m * |i - j|`` (symmetric)         ``(1|b, h, tq, tk)``
    ``forward``, causal           ``scores - m * (i - j)`` (full)      ``(b, h, tq, tk)``
    ``forward``, not causal       ``scores - m * |i - j|``             ``(b, h, tq, tk)``
    ``score_mod``                 ``score - m*(i - j)`` / ``-m*|i-j|`` computed in the kernel
    ============================  ===================================  =======================

    ``i_max`` is the largest query position (per batch row). The key-only form differs from
    the full causal form by ``m * (i_max - i)``, constant along each query row, so it gives the
    same softmax wherever a causal mask hides the keys after each query, without an
    ``(h, tq, tk)`` tensor; its values are smallest next to the last query and grow with the
    distance from it, so :func:`posenc.attention` uses it over query chunks only (one call over
    all queries, or a half-precision mask, takes the full form). It is not a causal mask itself:
    the attention still masks.

    Args:
        num_heads: attention heads; ``q.shape[1]`` must equal it.
        causal: whether the attention is causal (``build`` passes the model's ``causal``).
        max_bias: the slopes run from ``2^(-max_bias / n)`` down to ``2^(-max_bias)`` for ``n``
            heads (a power of two); a positive finite float.
        device: of the slopes.

    Attributes:
        slopes: ``(h,)`` float32, a non-persistent buffer kept float32 by ``.to(dtype)``,
            ``.half()``, ``.bfloat16()``, rebuilt in float64 by ``.double()``; float64 inputs use float64
            slopes.

    Shape:
        ``forward(scores)``: ``(b, h, tq, tk) -> (b, h, tq, tk)``; the bias is added in float32
        (float64 for float64 scores) and the result cast back to the scores' dtype.

    Example::

        alibi = ALiBi(num_heads=8)                       # causal
        scores = alibi(q @ k.transpose(-1, -2) / math.sqrt(dh))
        scores = scores.masked_fill(~causal_mask, float("-inf"))
    """

    cache_names = ("slopes", "_slopes64")
    # (float64 work, and the float32 work of a .double() module, read it: on the device, no copy from the host)
    float64_caches = ("_slopes64",)
    key_only_when_causal = True
    repr_names = ("num_heads", "causal", "max_bias")
    slopes: Tensor
    _slopes64: Tensor

    def __init__(
        self,
        num_heads: int,
        causal: bool = True,
        max_bias: float = 8.0,
        *,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = check_num_heads("num_heads", num_heads)
        self.causal = check_bool("causal", causal)
        self.max_bias = check_positive_float("max_bias", max_bias)
        slopes64 = alibi_slopes(num_heads, self.max_bias, dtype=torch.float64, device=device)
        self.register_buffer("slopes", slopes64.float(), persistent=False)
        self.register_buffer("_slopes64", slopes64, persistent=False)

    def reset_caches(self) -> None:
        """Rebuild the slopes in their buffers' dtypes, e.g. after ``to_empty()`` from the meta device."""
        self._slopes64 = alibi_slopes(
            self.num_heads, self.max_bias, dtype=torch.float64, device=self._slopes64.device
        )
        self.slopes = self._slopes64.to(self.slopes.dtype)

    def _slopes(self, dtype: torch.dtype) -> Tensor:
        # Every form reads its slopes here, so a subclass can rescale them in one place (FalconALiBi does).
        # float32, or float64 for float64 work, whatever the buffer's (a .double() module's is float64); each
        # rounded once from float64, not converted from the other.
        # (no copy from the host in a forward: the float64 slopes are a buffer too)
        if dtype == torch.float64:
            return self._slopes64
        return self.slopes if self.slopes.dtype == torch.float32 else self._slopes64.float()

    def bias_fn(self, dtype: torch.dtype, table: Tensor | None) -> BiasFn:
        # ALiBi's formula, the one place it is written. Causal: m * (k - q), the paper's form
        # (positive past the diagonal, where the causal mask applies); bidirectional: -m * |k - q|.
        # The distance is converted once, so it is exact up to 2^24 in float32.
        slopes = self._slopes(dtype)
        if self.causal:
            return lambda q, k, h: slopes[h] * (k - q).to(slopes.dtype)
        return lambda q, k, h: -slopes[h] * (k - q).to(slopes.dtype).abs()


class FalconALiBi(ALiBi):
    """ALiBi as Falcon applies it: added before the ``1/sqrt(dh)`` scaling, rounded as transformers rounds it.

    Falcon (the ``alibi=True`` variants, e.g. Falcon-RW) computes ``softmax((q.k + m * pos) /
    sqrt(dh))``, so relative to the usual convention (bias added to the scaled scores, as SDPA's
    ``attn_mask`` and every posenc attention layer do) its slopes are ``m / sqrt(dh)``; :attr:`slopes`
    keeps the paper's values. Causal (Falcon's own attention), the bias is transformers' to the bit (a
    float32 model's; a bfloat16 model's rounds it once more): ``bf16(bf16(m) * j) / sqrt(dh)`` at key
    position ``j``, each slope rounded to bfloat16 and then its product with the position, as Falcon-RW
    was trained. That key-only bias equals ALiBi's ``m * (j - i) / sqrt(dh)`` under the causal mask but
    for the roundings, which are not small: within a query row (what the softmax sees) the float32 form
    differs from it by up to 0.13 logits at 255 positions and 1.8 at 2048 (Falcon-RW-1B's 32 heads of
    64). It is read at each key position, not by distance. Not causal (no Falcon model is): ALiBi's
    symmetric form with every slope times :attr:`slope_scale` ``= dh ** -0.5``, in float32.
    :func:`posenc.from_hf_config` returns it for Falcon configs with ``alibi=True``; it is not
    in the registry (no spec string builds it).

    Args:
        num_heads: attention heads ``h``.
        head_dim: per-head width ``dh`` of the model, a positive int (sets :attr:`slope_scale`).
        causal: see :class:`ALiBi`.
        device: of the slopes.

    Shape:
        As :class:`ALiBi`; causal, :meth:`attention_bias` and ``forward`` add the key-only bias.
    """

    by_distance = False  # bf16(m * j) is not a function of j - i
    key_only_formula = True  # (causal: sinks refused, there being no full form to weigh them against)

    def __init__(
        self, num_heads: int, head_dim: int, causal: bool = True, *, device: torch.device | str | None = None
    ) -> None:
        super().__init__(num_heads, causal=causal, device=device)
        self.head_dim = check_positive_int("head_dim", head_dim)
        self.slope_scale = head_dim**-0.5

    def _slopes(self, dtype: torch.dtype) -> Tensor:
        # Every ALiBi method reads its slopes here: scale them once, in the slopes' own dtype.
        return super()._slopes(dtype) * self.slope_scale

    def bias_fn(self, dtype: torch.dtype, table: Tensor | None) -> BiasFn:
        if not self.causal:
            return super().bias_fn(dtype, table)
        # transformers' build_alibi_tensor: bfloat16 slopes times integer positions (each rounded to bfloat16), a
        # bfloat16 product, cast and divided by sqrt(dh). The roundings are written on float32 bits: inductor
        # (torch.compile, FlexAttention) drops casts to bfloat16 between float32 operations (off by 0.38 at t=300).
        slopes, root = _bfloat16_rounded(self.slopes.float()), math.sqrt(self.head_dim)
        return lambda q, k, h: _bfloat16_rounded(slopes[h] * _bfloat16_rounded(k.float())).to(dtype) / root

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, slope_scale=1/sqrt({self.head_dim})"


def _bfloat16_rounded(x: Tensor) -> Tensor:
    """Float32 ``x`` rounded to the nearest bfloat16, ties to even, as float32: ``x.bfloat16().float()`` on the bits."""
    bits = x.view(torch.int32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & -65536).view(torch.float32)
