"""The attention layer and the transformer block of :mod:`posenc.nn`, and the plumbing they share.

:class:`MultiheadAttention` projects to queries, keys and values and applies a position state
through :func:`posenc.attention`; ``_prepare`` builds that state for new tokens (continuing a
:class:`~posenc.KVCache`, or from a padding mask); :class:`TransformerBlock` wraps the layer
with norms and an MLP. :class:`~posenc.nn.TransformerLM` (:mod:`posenc.nn.model`) stacks them.

Shape key: ``b`` batch, ``t`` new tokens, ``tk`` all keys (cached + new), ``d`` model
width, ``h`` heads, ``dh`` head width.
"""

from __future__ import annotations

from typing import Any

import torch
from einops import rearrange
from torch import Tensor, nn

from .._checks import (
    check_bool,
    check_float_tensor,
    check_positive_float,
    check_positive_int,
    is_real,
    keep_mask,
)
from .._compat import check_values
from .._positions import check_ids, mask_to_positions
from ..attend import attention
from ..base import PositionalEncoding
from ..masking import check_window, document_positions, visible
from ..registry import build
from ..state import PositionState
from .cache import KVCache, describe_encoding


class MultiheadAttention(nn.Module):
    """Multi-head (or grouped-query) self-attention whose position encoding is a config string.

    Projects ``x`` to queries, keys and values, applies the encoding's ``encode_qk`` and
    ``attention_bias`` through :func:`posenc.attention`, and projects back. Additive
    encodings (sinusoidal, learned) act on the embeddings, not here:
    :class:`TransformerLM` applies them once; in this layer alone they act nowhere.

    Args:
        d_model: model width ``d``.
        num_heads: query heads ``h``; ``d_model`` must be a multiple of it unless ``head_dim`` is given.
        position: a spec for :func:`posenc.build` or a built encoding (shared as is); ``None``
            for a layer that holds no encoding and is always called with a prepared ``state``
            (how :class:`TransformerLM` builds its blocks: the encoding lives once, at the model).
        causal: each token attends to itself and earlier tokens only.
        dropout: dropout on the attention weights and the output, in training mode.
        bias: whether the projections have biases.
        num_kv_heads: key/value heads for grouped-query attention (default ``num_heads``).
        head_dim: width per head (default ``d_model // num_heads``).
        max_len: the longest sequence, handed to the encoding (required by ``"learned"``).
        window: a sliding window (see :func:`posenc.attention`), or ``None`` for global attention.
        attention_sinks: a learned sink logit per query head (gpt-oss), :attr:`sinks`
            ``(num_heads,)`` initialised to zeros and passed to :func:`posenc.attention`.

    Shape:
        ``forward(x)``: ``(b, t, d) -> (b, t, d)``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        position: Any = "rope",
        causal: bool = False,
        dropout: float = 0.0,
        bias: bool = False,
        num_kv_heads: int | None = None,
        head_dim: int | None = None,
        max_len: int | None = None,
        window: int | None = None,
        attention_sinks: bool = False,
    ) -> None:
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.num_heads = check_positive_int("num_heads", num_heads)
        if head_dim is None:
            if d_model % num_heads != 0:
                raise ValueError(
                    f"d_model={d_model} must be a multiple of num_heads={num_heads} (or pass head_dim explicitly)"
                )
            head_dim = d_model // num_heads
        self.head_dim = check_positive_int("head_dim", head_dim)
        num_kv_heads = num_heads if num_kv_heads is None else check_positive_int("num_kv_heads", num_kv_heads)
        if num_heads % num_kv_heads != 0:
            raise ValueError(f"num_heads={num_heads} must be a multiple of num_kv_heads={num_kv_heads}")
        if not is_real(dropout) or not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be a float in [0, 1), got {dropout!r}")
        self.causal = check_bool("causal", causal)
        check_bool("attention_sinks", attention_sinks)
        check_bool("bias", bias)
        self.window = check_window(window)
        self.num_kv_heads, self.dropout = num_kv_heads, float(dropout)
        dims = dict(d_model=d_model, num_heads=num_heads, head_dim=head_dim, max_len=max_len, causal=causal)
        # build() ignores the sizes that are None (max_len)
        self.encoding = None if position is None else build(position, **dims)
        self.q_proj = nn.Linear(d_model, num_heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(d_model, num_kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(d_model, num_kv_heads * head_dim, bias=bias)
        self.out_proj = nn.Linear(num_heads * head_dim, d_model, bias=bias)
        self.out_dropout = nn.Dropout(dropout)
        #: One learned sink logit per query head (``attention_sinks=True``), else ``None``.
        self.sinks = nn.Parameter(torch.zeros(num_heads)) if attention_sinks else None

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
            f"head_dim={self.head_dim}, causal={self.causal}"
            + ("" if self.window is None else f", window={self.window}")
            + ("" if self.sinks is None else ", attention_sinks=True")
        )

    def forward(
        self,
        x: Tensor,
        *,
        positions: Tensor | None = None,
        attention_mask: Tensor | None = None,
        cache: KVCache | None = None,
        layer: int = 0,
        state: PositionState | None = None,
        document_ids: Tensor | None = None,
    ) -> Tensor:
        """Self-attention over ``x`` (and the cached tokens, with a ``cache``).

        Args:
            x: ``(b, t, d)``.
            positions: ``(t,)`` or ``(b, t)`` positions of the new tokens; default: after the
                cached ones (each row's largest cached position + 1 onwards), or
                :func:`posenc.mask_to_positions` of ``attention_mask``.
            attention_mask: ``(b, tk)`` keep-mask (bool or 0/1) over all keys, cached and new
                (``tk = cached + t``; the capacity for a static cache), e.g. a padding mask.
            cache: a :class:`KVCache`, updated in place.
            layer: which of the cache's layers this module uses.
            state: the position state prepared once per forward by the model
                (``encoding.prepare(t, cached + t, q_positions=..., k_positions=...)``); when
                given, ``positions`` is not used. Default: prepared here from this layer's encoding.
            document_ids: ``(b, t)`` or ``(t,)`` ids of packed documents: attention stays within
                each document, and default positions restart in each one
                (:func:`posenc.document_positions`; with ``attention_mask``, counting its real tokens).
                Not with a ``cache``.

        Returns:
            ``(b, t, d)``.
        """
        check_float_tensor("x", x, rank=3, shape=f"(batch, seq, d_model={self.d_model})")
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x must have shape (batch, seq, d_model={self.d_model}), got {tuple(x.shape)}")
        if state is None and self.encoding is None:
            raise ValueError(
                "this MultiheadAttention holds no encoding (position=None): pass the state prepared by "
                "the model, e.g. state=encoding.prepare(...)"
            )
        own = [self.encoding] if state is None and self.encoding is not None else []
        key_mask, document_ids, states = _prepare(
            x, own, positions, attention_mask, document_ids, cache, layer
        )
        state = states[0] if state is None else state
        q = rearrange(self.q_proj(x), "b t (h dh) -> b h t dh", h=self.num_heads)
        k = rearrange(self.k_proj(x), "b t (h dh) -> b h t dh", h=self.num_kv_heads)
        v = rearrange(self.v_proj(x), "b t (h dh) -> b h t dh", h=self.num_kv_heads)
        # New keys sit at the queries' positions; they are encoded before caching.
        q, k = state.encode_qk(q, k)
        causal, window = self.causal, self.window
        attn_mask = None if key_mask is None else key_mask[:, None, None, :]
        axes = bool(getattr(state.encoding, "num_axes", 0))
        if axes and window is not None and key_mask is not None:
            # Positions with axes are windowed by token order, where a pad between real tokens would count.
            real = key_mask.long()  # (b, tk), a static cache's slots too
            gap = (real.cumsum(-1) > 0) & (real.flip(-1).cumsum(-1).flip(-1) > 0) & ~key_mask
            check_values(
                ~gap,
                f"window={window} with {type(state.encoding).__name__} goes by token order (positions with "
                "axes have no order), where padding between real tokens would count: pad on the left",
            )
        if cache is not None and cache.static:
            # A static cache's slots past the filled length (after the update below) hold no keys: masked.
            # Causality and the window follow the keys' positions, as in a growing cache; positions with
            # axes (M-RoPE, AxialRoPE) have no order, and the attention's rules by token index would take
            # the new keys for the last slots: for them both go by slot here.
            slots = cache.slots(layer, x.shape[1], x.device)  # (t,) where the new keys go
            cols = torch.arange(cache.capacity or 0, device=x.device)
            keep = cols <= slots[-1:, None]  # (1, capacity): the filled slots
            if axes and (causal or window is not None):  # masking's rules, with slots for positions
                keep = keep & visible(slots[:, None], cols, causal, window)  # (t, capacity)
            causal, window = (False, None) if axes else (causal, window)
            attn_mask = keep[None, None] if key_mask is None else keep & key_mask[:, None, None, :]
        if cache is not None:
            encoding = describe_encoding(state.encoding)
            k, v, _ = cache.update(layer, k, v, state.q_positions, encoding=encoding, axes=axes)
        out = attention(
            q,
            k,
            v,
            state,
            causal=causal,
            attn_mask=attn_mask,
            dropout_p=self.dropout if self.training else 0.0,
            qk_encoded=True,
            window=window,
            document_ids=document_ids,
            sinks=self.sinks,
        )
        return self.out_dropout(self.out_proj(rearrange(out, "b h t dh -> b t (h dh)")))


def _prepare(
    x: Tensor,
    encodings: list[PositionalEncoding],
    positions: Tensor | None,
    attention_mask: Tensor | None,
    document_ids: Tensor | None,
    cache: KVCache | None,
    layer: int,
    first_layers: list[int] | None = None,
) -> tuple[Tensor | None, Tensor | None, list[PositionState]]:
    """Check the tensors that come with ``x`` ``(b, t, ...)`` and prepare each encoding's position state
    (``first_layers``: the cache layer each encoding reads, default ``layer``: a layer's cached positions
    have its encoding's form, with axes for M-RoPE).

    Each tensor must be on the input's device (torch's own error would not name them); the mask is
    ``(b, tk)`` bool or 0/1 over every key; document ids ``(b, t)`` or ``(t,)`` integers, not with a
    cache. Default positions restart in each document, continue the cache (each row from its largest
    cached position + 1), or come from the padding mask; with none of these they stay implicit so that
    encodings take their contiguous fast paths. No host sync: the cache's fill is read from shapes,
    or (static cache) as a tensor.

    Returns:
        ``(key_mask, document_ids, states)``: the ``(b, tk)`` bool mask, the ``(b|1, t)`` ids, and the
        state of each of ``encodings`` (cached keys included).
    """
    if cache is not None and not isinstance(cache, KVCache):
        raise TypeError(f"cache must be a posenc.nn.KVCache or None, got {type(cache).__name__}")
    b, t = x.shape[:2]
    named = {"positions": positions, "attention_mask": attention_mask, "document_ids": document_ids}
    for name, value in named.items():
        if isinstance(value, Tensor) and value.device != x.device:
            raise ValueError(f"{name} is on {value.device} but the input is on {x.device}; move it there")
    key_mask = None
    if attention_mask is not None:
        length = t if cache is None else cache.mask_length(layer, t)
        key_mask = keep_mask(attention_mask)
        if tuple(key_mask.shape) != (b, length):
            keys = (
                "the static cache's capacity" if cache is not None and cache.static else "cached + new tokens"
            )
            raise ValueError(
                f"attention_mask must have shape (batch, {keys}) = {(b, length)}, got {tuple(key_mask.shape)}"
            )
    if document_ids is not None:
        if cache is not None:
            raise ValueError(
                "document_ids cannot be combined with a cache: decode each document with its own KVCache"
            )
        if check_ids("document_ids", document_ids).dim() == 1:  # an integer tensor
            document_ids = document_ids.expand(b, -1)
        if document_ids.shape[-1] != t or document_ids.shape[0] not in (1, b):  # (b|1, t) after the expand
            raise ValueError(
                f"document_ids must have shape (batch, seq) = {(b, t)} (or (seq,)), got {tuple(document_ids.shape)}"
            )
    if not encodings:  # the caller holds a prepared state
        return key_mask, document_ids, []
    if positions is None and document_ids is not None:
        positions = document_positions(document_ids)
        if key_mask is not None:  # padding in a document takes no position: count its real tokens
            before = key_mask.cumsum(-1) - key_mask.long()  # real tokens before each token
            starts = (torch.arange(t, device=x.device) - positions).expand(b, t)  # its document's first index
            positions = (before - before.gather(-1, starts)) * key_mask
    if positions is None and key_mask is not None:
        # (b, tk) positions of every key; the new tokens are the last t, or at a static cache's fill index
        positions = mask_to_positions(key_mask)
        if cache is not None:
            positions = positions.index_select(1, cache.slots(layer, t, x.device))
    if cache is not None:
        cache.check_batch(layer, b)
        if positions is None:
            positions = cache.next_positions(layer, t)
            grids = [type(e).__name__ for e in encodings if not getattr(e, "one_d_positions", True)]
            if positions is not None and grids:  # (AxialRoPE's default is its grid, which has no next token)
                raise ValueError(
                    f"{grids[0]} has no default positions after cached tokens: pass positions (coordinates "
                    "(t, a) or (b, t, a)) for the new tokens"
                )
    states = []
    for encoding, first in zip(encodings, first_layers or [layer] * len(encodings), strict=True):
        qp, kp, k_len = positions, positions, None  # no cache, or a growing one's first call (None: implicit)
        if cache is not None and (positions is not None or cache.static):
            num_axes = getattr(encoding, "num_axes", 0)
            # A static cache's first call: the encoding's default positions (AxialRoPE: its grid).
            if qp is None:
                qp = encoding.prepare(t, batch=b, device=x.device).q_positions
                qp = qp.unsqueeze(0) if num_axes and qp.dim() == 2 else qp  # (t, a) -> (1, t, a)
            elif num_axes and encoding.one_d_positions and _text_positions(qp, b, t, num_axes):
                # Text positions of an encoding with axes (M-RoPE): the same position on every axis, batched
                # ((t, a) would read as (b, t) when b == t == a).
                qp = qp.reshape(-1, t).unsqueeze(-1).expand(-1, t, num_axes)
            # The keys cached by the encoding's first layer, with the new ones.
            kp, k_len = cache.key_positions(first, qp, axes=bool(num_axes)), cache.mask_length(first, t)
        states.append(encoding.prepare(t, k_len, q_positions=qp, k_positions=kp, batch=b, device=x.device))
    return key_mask, document_ids, states


def _text_positions(positions: Tensor, batch: int, length: int, num_axes: int) -> bool:
    """Whether ``positions`` of ``length`` tokens are ``(t,)``/``(b, t)``, not ``(t, a)``/``(b, t, a)``,
    for M-RoPE with ``num_axes``, read as it reads them (a square ``(t, t)`` is ``(b, t)`` when ``b == t``)."""
    if positions.dim() != 2 or positions.shape[-1] != length:
        return positions.dim() == 1
    return tuple(positions.shape) != (length, num_axes) or batch == length != 1


class TransformerBlock(nn.Module):
    """A pre-norm transformer block: ``x + attn(norm(x))``, then ``x + mlp(norm(x))``.

    Args:
        d_model: model width ``d``.
        num_heads: attention heads.
        position: a spec for :func:`posenc.build` or a built encoding (shared as is); ``None``
            when the model hands every call a prepared ``state``.
        causal: causal self-attention.
        dropout: dropout in attention and after the MLP.
        mlp_ratio: the MLP's hidden width is ``mlp_ratio * d_model``.
        bias: biases in the linear layers and norms.
        norm_eps: LayerNorm epsilon.
        attention: the other keyword arguments of :class:`MultiheadAttention`: ``num_kv_heads``
            (grouped-query attention), ``head_dim``, ``max_len`` (handed to the encoding),
            ``window`` (a sliding window, or ``None``), ``attention_sinks`` (a learned sink logit
            per head).

    Shape:
        ``forward(x)``: ``(b, t, d) -> (b, t, d)``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        position: Any = "rope",
        causal: bool = False,
        dropout: float = 0.0,
        mlp_ratio: float = 4.0,
        bias: bool = False,
        *,
        norm_eps: float = 1e-5,
        **attention: Any,
    ) -> None:
        super().__init__()
        hidden = max(1, round(check_positive_float("mlp_ratio", mlp_ratio) * d_model))
        norm_eps = check_positive_float("norm_eps", norm_eps)  # (NaN or < 0: every output NaN)
        self.attn_norm = nn.LayerNorm(d_model, eps=norm_eps, bias=bias)
        self.attn = MultiheadAttention(d_model, num_heads, position, causal, dropout, bias, **attention)
        self.mlp_norm = nn.LayerNorm(d_model, eps=norm_eps, bias=bias)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, hidden, bias=bias),
            nn.GELU(),
            nn.Linear(hidden, d_model, bias=bias),
            nn.Dropout(dropout),
        )

    def forward(self, x: Tensor, **kwargs: Any) -> Tensor:
        """Apply the block; the keyword arguments (``positions``, ``attention_mask``, ``cache``,
        ``layer``, ``state``, ``document_ids``) are :meth:`MultiheadAttention.forward`'s."""
        x = x + self.attn(self.attn_norm(x), **kwargs)
        return x + self.mlp(self.mlp_norm(x))
