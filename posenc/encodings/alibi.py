"""ALiBi (Press et al., 2022): a linear penalty on distance, one slope per head."""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import check_bool, check_positive_int
from ..base import PositionalEncoding, ScoreMod, _precise_dtype, resolve_qk_positions
from ..functional.alibi import alibi_bias, alibi_key_only_bias, alibi_slopes, check_alibi_options
from ..functional.relative import default_relative_distances, position_indexer, toeplitz_by_distance
from ..registry import register
from .relative import check_bias_qk, check_scores, uses_default_positions

__all__ = ["ALiBi"]


@register("alibi")
class ALiBi(PositionalEncoding):
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
    ``(h, tq, tk)`` tensor; its values are smallest next to the last query, which keeps them
    precise at long context. It is not a causal mask itself: the attention still masks.

    Args:
        num_heads: attention heads; ``q.shape[1]`` must equal it.
        causal: whether the attention is causal (``build`` passes the model's ``causal``).
        max_bias: the slopes run from ``2^(-max_bias / n)`` down to ``2^(-max_bias)`` for ``n``
            heads (a power of two); a positive finite float.
        device: of the slopes.

    Attributes:
        slopes: ``(h,)`` float32, a non-persistent buffer kept float32 by ``.to(dtype)``,
            ``.half()``, ``.bfloat16()`` (rebuilt exactly); float64 inputs use float64 slopes.

    Shape:
        ``forward(scores)``: ``(b, h, tq, tk) -> (b, h, tq, tk)``; the bias is added in float32
        (float64 for float64 scores) and the result cast back to the scores' dtype.

    Example::

        alibi = ALiBi(num_heads=8)                       # causal
        scores = alibi(q @ k.transpose(-1, -2) / math.sqrt(dh))
        scores = scores.masked_fill(~causal_mask, float("-inf"))
    """

    kind = "bias"
    slopes: Tensor

    def __init__(
        self,
        num_heads: int,
        causal: bool = True,
        max_bias: float = 8.0,
        *,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        check_positive_int("num_heads", num_heads)
        check_bool("causal", causal)
        check_alibi_options(num_heads, max_bias)
        self.num_heads = num_heads
        self.causal = causal
        self.max_bias = float(max_bias)
        self.register_buffer(
            "slopes", alibi_slopes(num_heads, self.max_bias, device=device), persistent=False
        )

    def reset_caches(self) -> None:
        """Rebuild the slopes (float32), e.g. after ``to_empty()`` from the meta device."""
        self.slopes = alibi_slopes(self.num_heads, self.max_bias, device=self.slopes.device)

    def _apply(self, fn, recurse=True):
        was_meta = self.slopes.device.type == "meta"
        super()._apply(fn, recurse)
        # to_empty() from the meta device leaves uninitialised memory: compute the slopes.
        # .to(dtype) / .half() would round them: rebuild them exactly, in float32 (as timm
        # keeps its frequency buffers).
        if (was_meta and self.slopes.device.type != "meta") or self.slopes.dtype != torch.float32:
            self.reset_caches()
        return self

    def _slopes(self, dtype: torch.dtype) -> Tensor:
        # Every method reads its slopes here, so a subclass can rescale them in one place
        # (posenc.hf.FalconALiBi does).
        if dtype == torch.float64:
            # Rounded once from float64, not widened from the float32 buffer.
            return alibi_slopes(self.num_heads, self.max_bias, dtype=torch.float64, device=self.slopes.device)
        return self.slopes

    def attention_bias(
        self,
        q: Tensor,
        k: Tensor,
        q_positions: Tensor | None = None,
        k_positions: Tensor | None = None,
    ) -> Tensor:
        """The smallest exact form of the bias (see the table in the class docstring).

        Args:
            q: ``(b, h, tq, dh)`` queries (shape, device and dtype only); ``h == num_heads``.
            k: ``(b, h_kv, tk, dh)`` keys (likewise).
            q_positions, k_positions: ``(t,)`` or ``(b, t)`` integer positions; defaults: keys
                at ``0..tk-1``, queries the last ``tq`` of them. A chunk of queries may be
                passed with its own positions.

        Returns:
            causal: the key-only form ``m * (k_pos - max(q_pos))``, ``(1, h, 1, tk)`` or, with
            ``(b, t)`` positions, ``(b, h, 1, tk)`` — exact under softmax with a causal mask.
            Not causal: ``-m * |q_pos - k_pos|``, ``(1|b, h, tq, tk)``. Float32 (float64 for
            float64 ``q``).
        """
        check_bias_qk(q, k, self.num_heads)
        slopes = self._slopes(_precise_dtype(q))
        if self.causal:
            q_positions, k_positions = resolve_qk_positions(q, k, q_positions, k_positions)
            return alibi_key_only_bias(slopes, q_positions, k_positions)
        return self._full_bias(q, k, q_positions, k_positions, slopes, symmetric=True)

    def _full_bias(
        self,
        q: Tensor,
        k: Tensor,
        q_positions: Tensor | None,
        k_positions: Tensor | None,
        slopes: Tensor,
        *,
        symmetric: bool,
    ) -> Tensor:
        # q and k: anything with the query (resp. key) length at dim -2 and the batch at dim 0.
        tq, tk = q.shape[-2], k.shape[-2]
        if uses_default_positions(q_positions, k_positions, tq, tk):
            # Consecutive default positions: a Toeplitz matrix, written without a (tq, tk) index.
            distances = default_relative_distances(tq, tk, device=slopes.device)  # k_pos - q_pos
            distances = -distances.abs() if symmetric else distances  # -m*|q-k| or -m*(q-k)
            values = slopes.unsqueeze(-1) * distances.to(slopes.dtype)
            return toeplitz_by_distance(values, tq, tk).unsqueeze(0)
        q_positions, k_positions = resolve_qk_positions(q, k, q_positions, k_positions)
        return alibi_bias(slopes, q_positions, k_positions, symmetric=symmetric)

    def forward(
        self,
        scores: Tensor,
        q_positions: Tensor | None = None,
        k_positions: Tensor | None = None,
    ) -> Tensor:
        """Add the full bias to attention scores (the drop-in call).

        Args:
            scores: ``(b, h, tq, tk)`` attention scores.
            q_positions, k_positions: as in :meth:`attention_bias`.

        Returns:
            ``(b, h, tq, tk)``: ``scores - m * (q_pos - k_pos)`` when causal (the paper's form;
            positive past the diagonal, where the caller's causal mask applies), else
            ``scores - m * |q_pos - k_pos|``. Added in float32 (float64 for float64 scores),
            cast back to the scores' dtype.
        """
        check_scores(scores, self.num_heads)
        compute = _precise_dtype(scores)
        # Views with the query length (resp. key length) at dim -2 stand in for q and k.
        bias = self._full_bias(
            scores,
            scores.transpose(-1, -2),
            q_positions,
            k_positions,
            self._slopes(compute),
            symmetric=not self.causal,
        )
        return (scores.to(compute) + bias).to(scores.dtype)

    def score_mod(
        self,
        q: Tensor,
        k: Tensor,
        q_positions: Tensor | None = None,
        k_positions: Tensor | None = None,
    ) -> ScoreMod:
        """A FlexAttention ``score_mod`` adding the full bias inside the kernel.

        Causal: ``score - m[h] * (q_pos[q_idx] - k_pos[kv_idx])``; not causal:
        ``score - m[h] * |q_pos[q_idx] - k_pos[kv_idx]|``. Nothing of size ``(h, tq, tk)`` is
        stored. The causal mask is FlexAttention's ``block_mask``, not part of the score_mod.

        Args:
            q, k, q_positions, k_positions: as in :meth:`attention_bias`.

        Returns:
            ``(score, b, h, q_idx, kv_idx) -> score + bias``.
        """
        check_bias_qk(q, k, self.num_heads)
        q_positions, k_positions = resolve_qk_positions(q, k, q_positions, k_positions)
        slopes = self._slopes(_precise_dtype(q))
        q_pos, k_pos = position_indexer(q_positions), position_indexer(k_positions)
        symmetric = not self.causal

        def alibi_score_mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            distance = q_pos(b, q_idx) - k_pos(b, kv_idx)
            if symmetric:
                distance = distance.abs()
            return score - (slopes[h] * distance.to(slopes.dtype)).to(score.dtype)

        return alibi_score_mod

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, causal={self.causal}, max_bias={self.max_bias}"
