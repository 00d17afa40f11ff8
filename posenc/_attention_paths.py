"""The paths of :func:`posenc.attention`: SDPA (one call or query chunks) and explicit weights.

* :func:`sdpa_attention`: :func:`torch.nn.functional.scaled_dot_product_attention` with the
  state's bias and a boolean keep-mask (rows that see no key give zeros, never NaN), in one call
  (SDPA's own ``is_causal`` where there is no mask at all) or over query chunks, each with its own
  bias and only the keys it can see (:func:`over_query_chunks`, also the loop of
  :func:`weighted_attention`);
* :func:`weighted_attention`: explicit weights, for encodings whose value term needs them (Shaw's
  relative values): ``out = probs @ v + value_term(probs)`` with
  ``probs = dropout(softmax(q kᵀ · scale + bias + mask))``, so the value term sees the same
  (dropped-out) weights as the values, as in Shaw et al.'s ``z_i = sum_j a_ij (v_j + a_V(j - i))``.
  Over query chunks too (memory O(chunk · tk)); with gradients each chunk is checkpointed (its
  weights are recomputed in the backward pass, the dropout mask with them: checkpointing restores
  the random state).

Shape key: ``b`` batch, ``h`` query heads, ``h_kv`` key/value heads, ``tq`` queries,
``tk`` keys, ``dh`` head width, ``dv`` value width.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from einops import rearrange
from torch import Tensor

from ._compat import is_tracing, precise_dtype
from .masking import Visibility
from .state import PositionState

#: ``one(q_c, k_c, v_c, block, keep)``: one chunk's attention, from its rows of q, its keys of k and v,
#: the state narrowed to them and their keep-mask.
ChunkFn = Callable[..., Tensor]


def heads_differ(q: Tensor, k: Tensor) -> bool:
    """Grouped-query attention? A branch (not ``bool()``) so that dynamic shapes give a Python bool."""
    if q.shape[1] != k.shape[1]:  # a branch: it guards once under compile, bool() stays symbolic
        return True
    return False


def needs_grad(q: Tensor, k: Tensor, v: Tensor, state: PositionState, sinks: Tensor | None = None) -> bool:
    """Whether this call builds a graph: inputs, sinks or the encoding's parameters need gradients."""
    if not torch.is_grad_enabled():
        return False
    if q.requires_grad or k.requires_grad or v.requires_grad or (sinks is not None and sinks.requires_grad):
        return True
    return any(p.requires_grad for p in state.encoding.parameters())


def mask_dtype(q: Tensor) -> torch.dtype:
    """The dtype biases are handed to SDPA in: float32 (float64 for float64 q) where the kernel allows it.

    The CPU kernels accept a float32 ``attn_mask`` with bfloat16/float16 queries and add it
    in float32 (measured, torch 2.13). Other devices' fused kernels want the query dtype,
    so there the bias is cast (and :func:`posenc.attention` asks for it in small query chunks).
    """
    if q.dtype == torch.float64:
        return torch.float64
    if q.dtype in (torch.float16, torch.bfloat16) and q.device.type != "cpu":
        return q.dtype
    return torch.float32


def over_query_chunks(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    state: PositionState,
    vis: Visibility,
    chunk: int,
    sinks: Tensor | None,
    one: ChunkFn,
) -> Tensor:
    """Attention over query chunks of ``chunk`` rows, each reading only the keys it can see.

    Each chunk gets the state narrowed to its queries and keys (so a key-only ALiBi form stays
    small near the chunk's diagonal) and its block of the keep-mask, built outside the chunk's
    computation. When gradients are needed each chunk is checkpointed: its bias and weights are
    recomputed in the backward pass instead of being kept (O(tq * tk) memory in all otherwise).
    Queries that see no key get zeros.

    Traced (``torch.compile``, ``torch.export``) or under a ``torch.func`` transform, one call
    covers every query and key, without checkpointing: the chunk ranges are Python ints that
    would fix the sequence length in a traced program, and ``torch.func.grad`` refuses the saved
    tensor hooks of non-reentrant checkpointing. Memory is then O(tq * tk), as on the single
    SDPA path those callers take for every other encoding.

    Args:
        q: ``(b, h, tq, dh)``; k: ``(b, h_kv, tk, dh)``; v: ``(b, h_kv, tk, dv)``.
        one: ``one(q_c, k_c, v_c, block_state, keep)`` is one chunk's ``(b, h, r, dv)``.

    Returns:
        ``(b, h, tq, dv)``.
    """
    if is_tracing() or torch._C._are_functorch_transforms_active():
        return one(q, k, v, state, vis.block(slice(None), slice(None)))
    grad = needs_grad(q, k, v, state, sinks)
    outs = []
    # Longest key range first: each later chunk's blocks then fit in memory the earlier ones freed.
    # In rising order (causal ranges grow) glibc malloc kept every freed block and grew the heap:
    # FIRE at t=16384 held 0.4-4.2 GiB of RSS for 130 MiB of live tensors.
    for start, end, lo, hi in reversed(vis.spans(chunk)):
        if hi <= lo:  # these queries see no key
            outs.append(q.new_zeros(q.shape[0], q.shape[1], end - start, v.shape[-1]))
            continue
        qs, ks = slice(start, end), slice(lo, hi)
        one_chunk = functools.partial(one, block=state.narrow(qs, ks), keep=vis.block(qs, ks))
        args = (q[:, :, qs], k[:, :, ks], v[:, :, ks])
        if grad:
            outs.append(torch.utils.checkpoint.checkpoint(one_chunk, *args, use_reentrant=False))
        else:
            outs.append(one_chunk(*args))
    if not outs:  # no queries
        return q.new_zeros(q.shape[0], q.shape[1], 0, v.shape[-1])
    return torch.cat(outs[::-1], dim=2)


def sdpa_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    state: PositionState,
    vis: Visibility,
    dropout_p: float,
    scale: float | None,
    chunk: int | None,
    sinks: Tensor | None = None,
) -> Tensor:
    """SDPA in one call (``chunk=None``) or over query chunks of ``chunk`` rows (:func:`over_query_chunks`).

    The one call takes SDPA's own causal path where there is no mask at all, else an explicit one.
    """

    def one(q: Tensor, k: Tensor, v: Tensor, block: PositionState, keep: Tensor | None) -> Tensor:
        """One SDPA call with the block's bias and the boolean ``keep`` mask (rows that see no key give
        zeros, never NaN; with ``sinks`` they see only the sink: zero too)."""
        bias = block.attention_bias(q, k)
        mask = keep if bias is None else bias.to(mask_dtype(q))
        dead = None
        if keep is not None:  # rows without any key are opened for the kernel and zeroed after
            dead = ~keep.any(dim=-1, keepdim=True)
            keep = keep | dead
            mask = keep if bias is None else mask.masked_fill(~keep, float("-inf"))
        if sinks is not None:
            # One more key per head, key and value zero, whose bias is the sink's logit: SDPA's softmax
            # is then the attention-sink softmax (gpt-oss), and the sink adds nothing to the output.
            dtype, (h, tq, tk) = mask_dtype(q), (q.shape[1], q.shape[2], k.shape[2])
            if mask is None:
                mask = q.new_zeros(1, 1, 1, 1, dtype=dtype)
            elif mask.dtype == torch.bool:
                mask = torch.zeros((), dtype=dtype, device=q.device).masked_fill(~mask, float("-inf"))
            rows = mask.shape[0]
            column = sinks.to(dtype).view(1, h, 1, 1).expand(rows, h, tq, 1)
            mask = torch.cat([mask.to(dtype).expand(rows, h, tq, tk), column], dim=-1)
            k = torch.cat([k, k.new_zeros(*k.shape[:2], 1, k.shape[3])], dim=2)
            v = torch.cat([v, v.new_zeros(*v.shape[:2], 1, v.shape[3])], dim=2)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale, enable_gqa=heads_differ(q, k)
        )
        return out if dead is None else out.masked_fill(dead, 0.0)

    if chunk is not None:
        return over_query_chunks(q, k, v, state, vis, chunk, sinks, one)
    # Never SDPA's is_causal together with a mask or bias (refused by torch 2.15, and by
    # exporters): only a bias-free call with nothing but index causality takes it.
    if state.bias_form == "none" and sinks is None and vis.causal and vis.ranged and vis.tq == vis.tk:
        if vis.window is None and vis.user is None:
            return F.scaled_dot_product_attention(
                q, k, v, dropout_p=dropout_p, is_causal=True, scale=scale, enable_gqa=heads_differ(q, k)
            )
    return one(q, k, v, state, vis.block(slice(None), slice(None)))


def weighted_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    state: PositionState,
    vis: Visibility,
    dropout_p: float,
    scale: float | None,
    chunk: int,
    sinks: Tensor | None = None,
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
        sinks: ``(h,)`` sink logits: one more logit per row of the softmax, whose weight is then
            dropped (its value is zero), as gpt-oss's ``eager_attention_forward``.

    Returns:
        ``(b, h, tq, dv)`` in ``q``'s dtype.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    one = functools.partial(_weights_chunk, dropout_p=dropout_p, scale=scale, sinks=sinks)
    return over_query_chunks(q, k, v, state, vis, chunk, sinks, one)


def _weights_chunk(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    block: PositionState,
    keep: Tensor | None,
    *,
    dropout_p: float,
    scale: float,
    sinks: Tensor | None,
) -> Tensor:
    """One chunk: ``q`` ``(b, h, r, dh)`` against ``k``/``v`` ``(b, h_kv, c, d)``; ``keep`` ``(b|1, h|1, r, c)``."""
    work = precise_dtype(q)  # scores and softmax in float32 (float64 for float64)
    groups = q.shape[1] // k.shape[1]
    # Grouped-query attention without copying the keys: query heads g of each key head together.
    qg = rearrange(q.to(work), "b (hk g) r d -> b hk g r d", g=groups)
    scores = qg @ k.to(work).unsqueeze(2).transpose(-1, -2) * scale
    scores = rearrange(scores, "b hk g r c -> b (hk g) r c")
    bias = block.attention_bias(q, k)
    if bias is not None:
        scores = scores + bias.to(work)
    dead = None
    if keep is not None:
        # A row that sees no key is opened for the softmax (no NaN, also in backward) and zeroed after.
        dead = ~keep.any(dim=-1, keepdim=True)
        scores = scores.masked_fill(~(keep | dead), float("-inf"))
    if sinks is None:
        probs = scores.softmax(dim=-1)
    else:  # the sink's logit joins each row's softmax; its weight falls on a zero value
        sink = sinks.to(work).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        probs = torch.cat([scores, sink], dim=-1).softmax(dim=-1)[..., :-1]
    if dead is not None:
        probs = probs.masked_fill(dead, 0.0)
    if dropout_p > 0:
        probs = F.dropout(probs, p=dropout_p, training=True)
    probs = probs.to(v.dtype)
    pg = rearrange(probs, "b (hk g) r c -> b hk g r c", g=groups)
    out = rearrange(pg @ v.unsqueeze(2), "b hk g r d -> b (hk g) r d")
    extra = block.value_term(probs)
    if extra is not None:
        out = out + extra.to(out.dtype)
    return out
