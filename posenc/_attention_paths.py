"""The SDPA paths of :func:`posenc.attention`: one call, one query chunk, and the Toeplitz bias.

* ``_sdpa``: one :func:`torch.nn.functional.scaled_dot_product_attention` call with an optional
  float bias and boolean keep-mask (rows that see no key give zeros, never NaN);
* ``_single``: the whole call at once (SDPA's own ``is_causal`` where there is no mask at all);
* ``_chunk_attention``: one query chunk of the chunked path (the loop, ``_chunked``, is in
  :mod:`posenc.attention`, beside the mask dtype rule it reads);
* ``_toeplitz``: a bias that depends only on ``k_pos - q_pos``, read from its
  ``(h, tq + tk - 1)`` values as a strided view, never materialised.

The explicit-weights path (value terms) is :mod:`posenc._weights`, FlexAttention :mod:`posenc._flex`.

Shape key: ``b`` batch, ``h`` query heads, ``h_kv`` key/value heads, ``tq`` queries,
``tk`` keys, ``dh`` head width, ``dv`` value width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ._attention_common import heads_differ
from .base import PositionState
from .masking import Visibility


def _sdpa(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    bias: Tensor | None,
    keep: Tensor | None,
    fused_causal: bool,
    dropout_p: float,
    scale: float | None,
    mask_dtype: torch.dtype,
) -> Tensor:
    """One SDPA call with an optional float ``bias`` and boolean ``keep`` mask.

    ``fused_causal``: SDPA's own (top-left, here square) causal masking is applied on top.
    Rows of ``keep`` with no key at all are opened for the kernel (so that no backend
    produces NaN) and their outputs set to zero afterwards.
    """
    gqa = heads_differ(q, k)
    dead = None
    if keep is not None:
        dead = ~keep.any(dim=-1, keepdim=True)
        keep = keep | dead
    if bias is None:
        mask = keep
    else:
        bias = bias.to(mask_dtype)
        mask = bias if keep is None else bias.masked_fill(~keep, float("-inf"))
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=fused_causal, scale=scale, enable_gqa=gqa
    )
    if dead is not None:
        out = out.masked_fill(dead, 0.0)
    return out


def _chunk_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    state: PositionState | None,
    keep: Tensor | None,
    causal_only: bool,
    dropout_p: float,
    scale: float | None,
    mask_dtype: torch.dtype,
) -> Tensor:
    """One chunk of :func:`_chunked`; ``keep`` is the chunk's whole keep-mask.

    ``causal_only``: ``keep`` is nothing but the (bottom-right) causal mask.
    """
    bias = None if state is None else state.attention_bias(q, k)
    rows, cols = q.shape[-2], k.shape[-2]
    if causal_only and bias is not None and cols >= rows and keep is not None:
        # Only the causal mask: its masked entries all lie in the last ``rows`` keys (the
        # diagonal block), so a fresh bias is filled there in place instead of copied whole.
        bias = bias.to(mask_dtype)
        if _writable(bias, state, rows, cols):
            bias[..., cols - rows :].masked_fill_(~keep[..., cols - rows :], float("-inf"))
            gqa = heads_differ(q, k)
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=bias, dropout_p=dropout_p, scale=scale, enable_gqa=gqa
            )
    return _sdpa(
        q,
        k,
        v,
        bias=bias,
        keep=keep,
        fused_causal=False,
        dropout_p=dropout_p,
        scale=scale,
        mask_dtype=mask_dtype,
    )


def _writable(bias: Tensor, state: PositionState | None, rows: int, cols: int) -> bool:
    """Whether ``bias`` is a fresh full ``(.., rows, cols)`` tensor that may be masked in place.

    Filling its whole storage, not sharing it with the encoding's parameters or buffers (a cache),
    and not part of a graph that needs gradients (in-place writes there could break the
    backward of whatever op produced it).
    """
    if bias.shape[-2:] != (rows, cols) or not bias.is_contiguous():
        return False
    if bias.requires_grad and torch.is_grad_enabled():
        return False
    # It must fill its whole storage (a fresh allocation, not a slice of a larger cache).
    if bias.untyped_storage().nbytes() != bias.numel() * bias.element_size():
        return False
    owned = bias.untyped_storage().data_ptr()
    if state is not None:
        for t in (*state.encoding.parameters(), *state.encoding.buffers()):
            if t.untyped_storage().data_ptr() == owned:
                return False
    return True


def _single(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    state: PositionState | None,
    vis: Visibility,
    dropout_p: float,
    scale: float | None,
    mask_dtype: torch.dtype,
) -> Tensor:
    """One SDPA call: SDPA's own causal path where there is no mask at all, else an explicit one."""
    tq, tk = q.shape[-2], k.shape[-2]
    bias = None if state is None else state.attention_bias(q, k)
    # Never SDPA's is_causal together with a mask or bias (refused by torch 2.15, and by
    # exporters): only a bias-free call with nothing but index causality takes it.
    fused = (
        vis.causal and vis.ranged and vis.window is None and tq == tk and vis.user is None and bias is None
    )
    keep = None if fused else vis.block(slice(None), slice(None))
    return _sdpa(
        q,
        k,
        v,
        bias=bias,
        keep=keep,
        fused_causal=fused,
        dropout_p=dropout_p,
        scale=scale,
        mask_dtype=mask_dtype,
    )


def _toeplitz(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    values: Tensor,
    vis: Visibility,
    dropout_p: float,
    scale: float | None,
    chunk: int,
) -> Tensor:
    """Attention with a bias that depends only on ``k_pos - q_pos``, from its ``(h, tq + tk - 1)`` values.

    With the queries of a chunk in reverse order, entry ``(i', j)`` of the chunk's bias is
    ``values[start + i' + j]``: a Hankel matrix, which is a strided view of the vector
    (strides ``(1, 1)``), so SDPA reads it without a ``(h, tq, tk)`` tensor ever existing. The
    causal mask and the window are ``-inf`` at the distances they hide, in the same vector.
    Each chunk reads only the keys it can see.

    Args:
        values: ``(h|1, tq + tk - 1)`` from :meth:`~posenc.PositionState.bias_by_distance`
            (zeros for a window alone).
        vis: index rules only (default positions, no user mask, no documents).
        chunk: query rows per SDPA call (``tq`` for one call).
    """
    tq, tk = q.shape[-2], k.shape[-2]
    heads = values.shape[0]
    if vis.causal or vis.window is not None:
        # Entry n holds keys j = i + n - (tq - 1); the query sits at key index i + offset.
        behind = vis.offset - (torch.arange(values.shape[-1], device=values.device) - (tq - 1))
        if vis.causal:
            hidden = behind < 0
            if vis.window is not None:
                hidden = hidden | (behind >= vis.window)
        else:
            hidden = behind.abs() > (vis.window or 0) // 2
        values = values.masked_fill(hidden, float("-inf"))
    values = values.contiguous()
    gqa = heads_differ(q, k)

    def call(q_c: Tensor, k_c: Tensor, v_c: Tensor, mask: Tensor) -> Tensor:
        out = F.scaled_dot_product_attention(
            q_c.flip(2), k_c, v_c, attn_mask=mask, dropout_p=dropout_p, scale=scale, enable_gqa=gqa
        )
        return out.flip(2)

    if chunk >= tq:
        # One call (also the traced path: no loop over a symbolic length).
        out = call(q, k, v, values.as_strided((1, heads, tq, tk), (0, values.stride(0), 1, 1)))
        return _zero_unseen_rows(out, vis)
    # No checkpointing here: each chunk's mask is a view of the small vector, so SDPA keeps
    # nothing of size (h, tq, tk) for the backward pass.
    outs = []
    for start, end, lo, hi in vis.spans(chunk):
        rows = end - start
        if hi <= lo:  # these queries see no key
            outs.append(q.new_zeros(q.shape[0], q.shape[1], rows, v.shape[-1]))
            continue
        first = tq - end + lo  # the entry of (last row, key lo)
        strip = values[:, first : first + rows + hi - lo - 1]
        mask = strip.as_strided((1, heads, rows, hi - lo), (0, strip.stride(0), 1, 1))
        outs.append(call(q[:, :, start:end], k[:, :, lo:hi], v[:, :, lo:hi], mask))
    return _zero_unseen_rows(torch.cat(outs, dim=2), vis)


def _zero_unseen_rows(out: Tensor, vis: Visibility) -> Tensor:
    """More queries than keys (index rule): the first rows may see no key; zeros, as on every path."""
    if vis.tq <= vis.tk or not (vis.causal or vis.window is not None):
        return out
    return out.masked_fill(vis.dead_rows(out.device), 0.0)
