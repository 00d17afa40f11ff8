"""Transformer-XL relative positions, as Conformer encoders use them (wav2vec2-conformer, Wav2Vec2-BERT).

Dai et al. (2019), "Transformer-XL", Sec. 3.3, split the score of query ``i`` and key ``j`` into
four terms; with learned ``u``, ``v`` and a projected sinusoid ``R`` of the distance ``i - j``::

    score_ij = ((q_i + u) · k_j + (q_i + v) · (W R_{i-j})) / sqrt(dh)

The attention computes ``q_i · k_j / sqrt(dh)`` itself; this encoding's bias is the rest:
``u · k_j`` (a key-content term) plus the position term, computed as ``(q + v) @ Pᵀ`` over the
distinct distances (``P = W R``, one row per distance) and gathered by distance — the rel-shift
of the original code as a gather, so explicit positions work too. Never ``(b, h, tq, tk, dh)``.
"""

from __future__ import annotations

import math
from typing import Literal, cast

import torch
from torch import Tensor, nn

from .._checks import check_choice, check_float_tensor, check_positive_float, check_positive_int
from .._compat import can_sync, outside_autocast, precise_dtype
from ..base import PositionalEncoding
from ..functional.sinusoidal import sinusoidal_table
from ..state import ScoreMod
from ._bias import ContentBiasState, _add_to_scores

__all__ = ["RelPosXL", "RelPosXLState"]


class RelPosXLState(ContentBiasState):
    """The position state of :class:`RelPosXL`: positions, and the distances they span.

    With default (consecutive) positions the ``tq + tk - 1`` distances are known from the
    lengths alone; explicit positions span ``min(k) - max(q) .. max(k) - min(q)`` (read from
    the positions once per call). The base class's :meth:`narrow` serves the chunked path.
    """

    encoding: RelPosXL

    def _window(self) -> tuple[int, int]:
        if self.q_len == 0 or self.k_len == 0:
            return 0, 0
        if self.q_start is not None and self.k_start is not None:
            first = self.k_start - (self.q_start + self.q_len - 1)
            return first, first + self.q_len + self.k_len - 2
        qp, kp = self.q_positions, self.k_positions
        if qp.numel() == 0 or kp.numel() == 0:  # (an empty batch)
            return 0, 0
        return int(kp.min()) - int(qp.max()), int(kp.max()) - int(qp.min())

    def _key_term(self, q: Tensor, k: Tensor) -> Tensor:
        """``u · k_j / sqrt(dh)``, ``(b, h, 1, tk)``."""
        dtype = precise_dtype(q)
        h, dh = q.shape[1], q.shape[-1]
        hkv, tk = k.shape[1], k.shape[-2]
        # u · k_j per query head; grouped-query heads read their group's key head (no copy of k).
        u = self.encoding.pos_bias_u.to(dtype).view(hkv, h // hkv, dh)
        return (u @ k.to(dtype).transpose(-1, -2)).reshape(k.shape[0], h, 1, tk) / math.sqrt(dh)

    def _per_distance(self, q: Tensor, k: Tensor, lo: int, n: int) -> tuple[Tensor, Tensor | None]:
        # (q_i + v) · W R at each distance, and the key term.
        enc = self.encoding
        dtype = precise_dtype(q)
        proj = enc.projected(torch.arange(lo, lo + n, device=q.device), dtype)  # (h, n, dh)
        per_distance = (q.to(dtype) + enc.pos_bias_v.to(dtype)[:, None]) @ proj.transpose(-1, -2)
        return per_distance * (1.0 / math.sqrt(q.shape[-1])), self._key_term(q, k)

    def bias_from_angles(self, q: Tensor, k: Tensor) -> Tensor:
        """:meth:`attention_bias` without the distances' range: static shapes for traced programs.

        With explicit positions the distances span a range read from the positions' values, a
        data-dependent size that compilers cannot lower. Here the position term
        ``(q_i + v) · W R_{i-j}`` is split by ``sin((a - c)ω) = sin aω cos cω - cos aω sin cω`` (and
        the same for cos): with ``P_i = (q_i + v) W`` holding ``α`` (sin) and ``β`` (cos) channels,
        it is ``[α sin aω + β cos aω, β sin aω - α cos aω] · [cos cω, sin cω]``, one
        ``(tq, d_model) @ (d_model, tk)`` product per head. Angles in float64, rounded once.

        Returns:
            ``(b, h, tq, tk)``, as :meth:`attention_bias`.
        """
        self._check(q, k)
        enc = self.encoding
        dtype = precise_dtype(q)
        h, dh = q.shape[1], q.shape[-1]
        weight = enc.linear_pos.weight.to(dtype).view(h, dh, enc.d_model)
        p = (q.to(dtype) + enc.pos_bias_v.to(dtype)[:, None]) @ weight  # (b, h, tq, d_model)
        # the sin and cos channels of R
        alpha, beta = p.unflatten(-1, (-1, 2)).unbind(-1) if enc.layout == "interleaved" else p.chunk(2, -1)

        def sin_cos(positions: Tensor) -> tuple[Tensor, ...]:
            # [sin | cos] of the angles (float64, rounded once): (t, d_model) or (b, t, d_model)
            table = sinusoidal_table(positions, enc.d_model, enc.base, "concat").to(dtype)
            table = table[:, None] if table.dim() == 3 else table  # heads axis
            return table.chunk(2, -1)

        sin_a, cos_a = sin_cos(self.q_positions)
        sin_c, cos_c = sin_cos(self.k_positions)
        queries = torch.cat((alpha * sin_a + beta * cos_a, beta * sin_a - alpha * cos_a), -1)
        keys = torch.cat((cos_c, sin_c), -1)  # (tk, d_model) or (b, 1, tk, d_model)
        return (queries @ keys.transpose(-1, -2)) / math.sqrt(dh) + self._key_term(q, k)

    def attention_bias(self, q: Tensor, k: Tensor) -> Tensor:
        """``(u · k_j + (q_i + v) · W R_{i-j}) / sqrt(dh)``, to add to the *scaled* scores.

        Args:
            q: ``(b, h, tq, dh)`` queries (their values are read).
            k: ``(b, h_kv, tk, dh)`` keys (their values are read: the ``u`` term).

        Returns:
            ``(b, h, tq, tk)``, float32 (float64 for float64 ``q``).
        """
        if self._from_angles():  # (outside autocast, as the per-distance term)
            return outside_autocast(self.bias_from_angles, q, k)
        return super().attention_bias(q, k)

    def score_mod(self, q: Tensor, k: Tensor) -> ScoreMod:
        """FlexAttention's form; with explicit positions where no value may be read, the dense term
        from angles ``(b, h, tq, tk)`` read per pair (the per-distance rows need the range's size)."""
        if not self._from_angles():
            return super().score_mod(q, k)
        dense = outside_autocast(self.bias_from_angles, q, k)
        return lambda score, b, h, i, j: score + dense[b, h, i, j].to(score.dtype)

    def _from_angles(self) -> bool:
        # no data-dependent size in a traced program, and no host sync on an accelerator
        return not can_sync(self.q_positions) and (self.q_start is None or self.k_start is None)


class RelPosXL(PositionalEncoding):
    """Transformer-XL / Conformer relative positions: ``pos_bias_u``, ``pos_bias_v`` and projected sinusoids.

    Exactly what transformers' Wav2Vec2-Conformer, Wav2Vec2-BERT and SeamlessM4T (v1) speech
    encoders compute in ``position_embeddings_type="relative"`` (Dai et al., 2019, Sec. 3.3)::

        score_ij = ((q_i + u) · k_j + (q_i + v) · (W R_{i-j})) / sqrt(dh)

    ``R_r`` is the sinusoid of the distance ``r = q_pos - k_pos`` (positive for keys to the
    left), width ``d_model``, interleaved ``[sin(r ω_0), cos(r ω_0), sin(r ω_1), ...]`` (those
    models') or, with ``layout="concat"``, ``[sin(r ω) | cos(r ω)]`` (the Transformer-XL authors'
    code: their checkpoints' ``r_net`` loads into :attr:`linear_pos` as it is), with
    ``ω_i = base^(-2i/d_model)``; ``W`` (:attr:`linear_pos`, no bias) projects it to every head.
    The hook :meth:`attention_bias` returns ``(u · k_j + (q_i + v) · W R_{i-j}) / sqrt(dh)``
    for the attention to add to its scaled scores ``q_i · k_j / sqrt(dh)`` (with another
    attention ``scale`` this term keeps ``1 / sqrt(dh)``, as in those models). Each layer of
    those models has its own ``W``, ``u`` and ``v``: one encoding per layer
    (:func:`posenc.from_hf_model` with ``layer=``).

    Memory beside the attention: ``(b, h, tq, n)`` with ``n`` the distinct distances
    (``tq + tk - 1`` at default positions) and a ``(tq, tk)`` index.

    Args:
        num_heads: attention heads ``h`` (of the queries).
        head_dim: the head width ``dh``.
        d_model: the sinusoid's width (the model width in those models); default ``h * dh``.
        base: the sinusoid's wavelength base (10000).
        layout: ``"interleaved"`` or ``"concat"``: the order of ``R``'s sin and cos channels.
        device, dtype: of the parameters.

    Attributes:
        linear_pos: ``nn.Linear(d_model, h * dh, bias=False)``, transformers' ``linear_pos``.
        pos_bias_u: ``(h, dh)``, added to the queries for the content term.
        pos_bias_v: ``(h, dh)``, added to the queries for the position term.

    Shape:
        ``attention_bias(q, k)``: ``(b, h, tq, dh), (b, h_kv, tk, dh) -> (b, h, tq, tk)``, float32
        (float64 for float64 ``q``).

        ``forward(scores, q, k)``: ``(b, h, tq, tk), (b, h, tq, dh), (b, h_kv, tk, dh) -> (b, h, tq, tk)``.

    Example::

        xl = RelPosXL(num_heads=4, head_dim=16)
        out = posenc.attention(q, k, v, xl)          # bidirectional, as in Conformer encoders
    """

    kind = "bias"
    state_class = RelPosXLState
    repr_optional = ("base", "layout")
    repr_names = ("num_heads", "head_dim", "d_model", *repr_optional)

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        d_model: int | None = None,
        base: float = 10000.0,
        layout: Literal["interleaved", "concat"] = "interleaved",
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_choice("layout", layout, ("interleaved", "concat"))
        self.layout = layout
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.head_dim = check_positive_int("head_dim", head_dim)
        width = num_heads * head_dim if d_model is None else check_positive_int("d_model", d_model)
        if width % 2:
            raise ValueError(f"d_model must be even (sin/cos come in pairs), got {width}")
        self.d_model = width
        self.base = check_positive_float("base", base)
        if self.base <= 1.0:
            raise ValueError(f"base must be > 1 (a wavelength scale), got {base!r}")
        self.linear_pos = nn.Linear(width, num_heads * head_dim, bias=False, device=device, dtype=dtype)
        self.pos_bias_u = nn.Parameter(torch.empty(num_heads, head_dim, device=device, dtype=dtype))
        self.pos_bias_v = nn.Parameter(torch.empty(num_heads, head_dim, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``linear_pos`` as ``nn.Linear``; ``u``, ``v`` Xavier-uniform (transformers' initialisation)."""
        self.linear_pos.reset_parameters()
        nn.init.xavier_uniform_(self.pos_bias_u)
        nn.init.xavier_uniform_(self.pos_bias_v)

    def projected(self, distances: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
        """``W R`` per head at the distances ``k_pos - q_pos``: ``(n,) -> (h, n, dh)``, differentiable in ``W``.

        ``R`` is the sinusoid of ``-distances``, ``(n, d_model)``, its angles computed in float64 and
        rounded once to ``dtype``.
        """
        emb = sinusoidal_table(-distances, self.d_model, self.base, self.layout).to(dtype)
        weight = self.linear_pos.weight.to(dtype).transpose(0, 1)  # (d_model, h * dh)
        proj = outside_autocast(torch.matmul, emb, weight)  # (n, h * dh): dtype's, autocast or not
        return proj.view(-1, self.num_heads, self.head_dim).transpose(0, 1)

    def forward(
        self,
        scores: Tensor,
        q: Tensor,
        k: Tensor,
        q_positions: Tensor | None = None,
        k_positions: Tensor | None = None,
    ) -> Tensor:
        """The drop-in call for hand-written attention: ``scores + attention_bias(q, k)``.

        Args:
            scores: ``(b, h, tq, tk)`` scaled scores ``q @ kᵀ / sqrt(dh)``.
            q, k: the queries and keys of those scores.
            q_positions, k_positions: as in :meth:`attention_bias`.

        Returns:
            ``(b, h, tq, tk)`` in the scores' dtype.
        """
        check_float_tensor("scores", scores, rank=4, shape="(batch, heads, q_len, k_len)")
        bias = cast(Tensor, self.attention_bias(q, k, q_positions=q_positions, k_positions=k_positions))
        return _add_to_scores(scores, bias, f"q {tuple(q.shape)} and k {tuple(k.shape)}")
