"""Attention with explicit weights, for encodings whose value term needs them (Shaw's relative values).

``out = probs @ v + value_term(probs)`` with ``probs = dropout(softmax(q kᵀ · scale + bias + mask))``:
the value term sees the same (dropped-out) weights as the values, as in Shaw et al.'s
``z_i = sum_j a_ij (v_j + a_V(j - i))``. Queries are processed in chunks, each against only the
keys it can see, so memory is O(chunk · tk); with gradients each chunk is checkpointed (its
weights are recomputed in the backward pass, the dropout mask with them: checkpointing restores
the random state).

Shape key: ``b`` batch, ``h`` query heads, ``h_kv`` key/value heads, ``tq`` queries, ``tk``
keys, ``dh`` head width, ``dv`` value width.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch.nn.functional as F
from einops import rearrange
from torch import Tensor

from ._attention_paths import needs_grad, over_query_chunks
from ._compat import precise_dtype
from .masking import Visibility
from .state import PositionState

__all__ = ["weighted_attention"]


def weighted_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    state: PositionState,
    vis: Visibility,
    dropout_p: float,
    scale: float | None,
    chunk: int,
) -> Tensor:
    """Attention through explicit weights, over query chunks of ``chunk`` rows.

    Args:
        q: ``(b, h, tq, dh)`` encoded queries; k: ``(b, h_kv, tk, dh)`` encoded keys;
        v: ``(b, h_kv, tk, dv)``.
        state: the position state (its bias and value term are asked per chunk, at the chunk's
            positions, from the chunk's encoded queries: a content bias is never reused).
        vis: which keys each query may see.
        dropout_p: dropout on the weights.
        scale: score scale; ``None`` means ``1 / sqrt(dh)``.
        chunk: query rows per chunk.

    Returns:
        ``(b, h, tq, dv)`` in ``q``'s dtype.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale

    def chunk_fn(qs: slice, ks: slice) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
        keep, block = vis.block(qs, ks), state.narrow(qs, ks)
        return lambda q_c, k_c, v_c: _weights_chunk(q_c, k_c, v_c, block, keep, dropout_p, scale)

    return over_query_chunks(q, k, v, vis, chunk, needs_grad(q, k, v, state), chunk_fn)


def _weights_chunk(
    q: Tensor, k: Tensor, v: Tensor, state: PositionState, keep: Tensor | None, dropout_p: float, scale: float
) -> Tensor:
    """One chunk: ``q`` ``(b, h, r, dh)`` against ``k``/``v`` ``(b, h_kv, c, d)``; ``keep`` ``(b|1, h|1, r, c)``."""
    work = precise_dtype(q)  # scores and softmax in float32 (float64 for float64)
    groups = q.shape[1] // k.shape[1]
    # Grouped-query attention without copying the keys: query heads g of each key head together.
    qg = rearrange(q.to(work), "b (hk g) r d -> b hk g r d", g=groups)
    scores = qg @ k.to(work).unsqueeze(2).transpose(-1, -2) * scale
    scores = rearrange(scores, "b hk g r c -> b (hk g) r c")
    bias = state.attention_bias(q, k)
    if bias is not None:
        scores = scores + bias.to(work)
    dead = None
    if keep is not None:
        # A row that sees no key is opened for the softmax (no NaN, also in backward) and zeroed after.
        dead = ~keep.any(dim=-1, keepdim=True)
        scores = scores.masked_fill(~(keep | dead), float("-inf"))
    probs = scores.softmax(dim=-1)
    if dead is not None:
        probs = probs.masked_fill(dead, 0.0)
    if dropout_p > 0:
        probs = F.dropout(probs, p=dropout_p, training=True)
    probs = probs.to(v.dtype)
    pg = rearrange(probs, "b (hk g) r c -> b hk g r c", g=groups)
    out = rearrange(pg @ v.unsqueeze(2), "b hk g r d -> b (hk g) r d")
    extra = state.value_term(probs)
    if extra is not None:
        out = out + extra.to(out.dtype)
    return out
