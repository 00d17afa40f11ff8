"""ALiBi (Press et al., 2022): a linear penalty on distance, one slope per head."""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor

from .._checks import check_bool, check_num_heads, check_positive_int
from .._compat import precise_dtype
from .._positions import check_bias_qk, check_scores
from ..base import BiasForm, PositionalEncoding, PositionState, ScoreMod
from ..functional.alibi import alibi_bias, alibi_key_only_bias, alibi_slopes, check_alibi_options, linear_bias
from ..functional.relative import position_indexer, toeplitz_by_distance

__all__ = ["ALiBi", "ALiBiState"]


class ALiBiState(PositionState):
    """ALiBi's position state for one forward: the slopes and positions every layer reuses.

    Causal ALiBi has the key-only bias form (``bias_form == "key"``); with default positions the
    bias is also a function of the distance alone, which :func:`posenc.attention` reads from a
    ``(h, tq + tk - 1)`` vector (:meth:`bias_by_distance`) in the paper's exact form.
    """

    encoding: ALiBi

    def __init__(
        self,
        encoding: ALiBi,
        q_positions: Tensor,
        k_positions: Tensor,
        *,
        q_start: int | None,
        k_start: int | None,
    ) -> None:
        form: BiasForm = "key" if encoding.causal else "full"
        super().__init__(encoding, q_positions, k_positions, q_start=q_start, k_start=k_start, bias_form=form)

    @property
    def bias_heads(self) -> int | None:
        return self.encoding.num_heads

    def bias_by_distance(self, dtype: torch.dtype) -> Tensor | None:
        distances = self.distances()
        if distances is None:
            return None
        # Causal: m * (k - q), the paper's form (positive past the diagonal, where the causal
        # mask applies); bidirectional: -m * |k - q|.
        return linear_bias(
            self.encoding._slopes(dtype).unsqueeze(-1), distances, symmetric=not self.encoding.causal
        )

    def full_bias(self, dtype: torch.dtype) -> Tensor:
        """The ``(1|b, h, tq, tk)`` bias: ``-m * (q - k)`` when causal, else ``-m * |q - k|``."""
        values = self.bias_by_distance(dtype)
        if values is not None:
            return toeplitz_by_distance(values, self.q_len, self.k_len).unsqueeze(0)
        slopes = self.encoding._slopes(dtype)
        return alibi_bias(slopes, self.q_positions, self.k_positions, symmetric=not self.encoding.causal)

    def attention_bias(self, q: Tensor, k: Tensor) -> Tensor:
        """The smallest exact form of the bias (see the table in :class:`ALiBi`'s docstring).

        Args:
            q: ``(b, h, tq, dh)`` queries (shape, device and dtype only); ``h == num_heads``.
            k: ``(b, h_kv, tk, dh)`` keys (likewise).

        Returns:
            causal: the key-only form ``m * (k_pos - max(q_pos))``, ``(1, h, 1, tk)`` or, with
            ``(b, t)`` positions, ``(b, h, 1, tk)`` — exact under softmax with a causal mask.
            Not causal: ``-m * |q_pos - k_pos|``, ``(1|b, h, tq, tk)``. Float32 (float64 for
            float64 ``q``).
        """
        check_bias_qk(q, k, self.encoding.num_heads)
        dtype = precise_dtype(q)
        if self.encoding.causal:
            return alibi_key_only_bias(self.encoding._slopes(dtype), self.q_positions, self.k_positions)
        return self.full_bias(dtype)

    def score_mod(self, q: Tensor, k: Tensor) -> ScoreMod:
        """A FlexAttention ``score_mod`` adding the full bias inside the kernel.

        Causal: ``score - m[h] * (q_pos[q_idx] - k_pos[kv_idx])``; not causal:
        ``score - m[h] * |q_pos[q_idx] - k_pos[kv_idx]|``. Nothing of size ``(h, tq, tk)`` is
        stored; the causal mask is the attention's, not part of the score_mod.
        """
        check_bias_qk(q, k, self.encoding.num_heads)
        slopes = self.encoding._slopes(precise_dtype(q))
        q_pos, k_pos = position_indexer(self.q_positions), position_indexer(self.k_positions)
        symmetric = not self.encoding.causal

        def alibi_score_mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            distance = k_pos(b, kv_idx) - q_pos(b, q_idx)
            return score + linear_bias(slopes[h], distance, symmetric=symmetric).to(score.dtype)

        return alibi_score_mod


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
    cache_names = ("slopes",)
    state_class = ALiBiState
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
        check_num_heads("num_heads", num_heads)
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

    def _slopes(self, dtype: torch.dtype) -> Tensor:
        # Every method reads its slopes here, so a subclass can rescale them in one place
        # (posenc.hf.FalconALiBi does).
        if dtype == torch.float64:
            # Rounded once from float64, not widened from the float32 buffer.
            return alibi_slopes(self.num_heads, self.max_bias, dtype=torch.float64, device=self.slopes.device)
        return self.slopes

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
        compute = precise_dtype(scores)
        b, _, tq, tk = scores.shape
        state = cast(
            ALiBiState,
            self._own_state(
                tq, tk, q_positions=q_positions, k_positions=k_positions, batch=b, device=scores.device
            ),
        )
        bias = state.full_bias(compute)
        return (scores.to(compute) + bias).to(scores.dtype)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, causal={self.causal}, max_bias={self.max_bias}"


class FalconALiBi(ALiBi):
    """ALiBi as Falcon applies it: the bias is added before the ``1/sqrt(dh)`` score scaling.

    Falcon (the ``alibi=True`` variants, e.g. Falcon-RW) computes
    ``softmax((q.k + m * pos) / sqrt(dh))``, so relative to the usual convention (bias added to
    the scaled scores, as SDPA's ``attn_mask`` and every posenc attention layer do) its slopes
    are ``m / sqrt(dh)``. This class is :class:`ALiBi` with every slope it applies multiplied
    by :attr:`slope_scale` ``= dh ** -0.5``; :attr:`slopes` keeps the paper's values.
    :func:`posenc.from_hf_config` returns it for Falcon configs with ``alibi=True``; it is not
    in the registry (no spec string builds it).

    transformers rounds Falcon's ``slope * position`` to bfloat16; posenc keeps float32, so the
    two agree exactly for power-of-two head counts below 256 positions and to bfloat16
    precision beyond.

    Args:
        num_heads: attention heads ``h``.
        head_dim: per-head width ``dh`` of the model, a positive int (sets :attr:`slope_scale`).
        causal: see :class:`ALiBi`.
        device: of the slopes.

    Shape:
        As :class:`ALiBi`.
    """

    def __init__(
        self, num_heads: int, head_dim: int, causal: bool = True, *, device: torch.device | str | None = None
    ) -> None:
        super().__init__(num_heads, causal=causal, device=device)
        self.head_dim = check_positive_int("head_dim", head_dim)
        self.slope_scale = head_dim**-0.5

    def _slopes(self, dtype: torch.dtype) -> Tensor:
        # Every ALiBi method reads its slopes here: scale them once, in the slopes' own dtype.
        return super()._slopes(dtype) * self.slope_scale

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, slope_scale=1/sqrt({self.head_dim})"
