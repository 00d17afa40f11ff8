"""The paths of :func:`posenc.attention`: SDPA (one call, query chunks, a Toeplitz bias) and explicit weights.

* ``_sdpa``: one :func:`torch.nn.functional.scaled_dot_product_attention` call, the attention
  sinks' column appended where there are sinks;
* :func:`sdpa_attention`: the state's bias and a boolean keep-mask (rows that see no key give
  zeros, never NaN), in one call (SDPA's own ``is_causal`` where there is no mask at all) or over
  query chunks, each with its own bias and only the keys it can see (:func:`over_query_chunks`,
  also the loop of :func:`weighted_attention`);
* ``_toeplitz``: a bias that depends only on ``k_pos - q_pos``, read from its
  ``(h, tq + tk - 1)`` values as a strided view, never materialised;
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

import itertools
import math
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from ._compat import is_tracing, outside_autocast, precise_dtype
from .masking import Visibility, visible
from .state import PositionState

#: ``chunk_fn(qs, ks)``: the attention of query rows ``qs`` over keys ``ks``, as a function of
#: those rows of q and those keys of k and v.
ChunkFn = Callable[[slice, slice], Callable[[Tensor, Tensor, Tensor], Tensor]]


class Softmax(NamedTuple):
    """What every path applies to the scores besides the bias and the mask.

    Attributes:
        scale: score scale; ``None`` means ``1 / sqrt(dh)``.
        dropout_p: dropout on the attention weights.
        sinks: ``(h,)`` sink logits (one more logit per row of the softmax, whose value is zero), or ``None``.
    """

    scale: float | None
    dropout_p: float
    sinks: Tensor | None


def heads_differ(q: Tensor, k: Tensor) -> bool:
    """Grouped-query attention? A branch (not ``bool()``) so that dynamic shapes give a Python bool."""
    if q.shape[1] != k.shape[1]:  # a branch: it guards once under compile, bool() stays symbolic
        return True
    return False


def needs_grad(*tensors: Tensor | None, state: PositionState | None = None) -> bool:
    """Whether this call builds a graph: ``tensors`` (inputs, sinks, ``None`` skipped) or the parameters of
    ``state``'s encoding need gradients."""
    if not torch.is_grad_enabled():
        return False
    params = () if state is None else state.encoding.parameters()
    return any(t is not None and t.requires_grad for t in itertools.chain(tensors, params))


def mask_dtype(q: Tensor) -> torch.dtype:
    """The dtype biases are handed to SDPA in: float32 (float64 for float64 q) where the kernel allows it.

    The CPU kernels accept a float32 ``attn_mask`` with bfloat16/float16 queries and add it
    in float32 (measured, torch 2.13). Other devices' fused kernels want the query dtype,
    so there the bias is cast (and :func:`posenc.attention` asks for it in small query chunks).
    """
    if q.dtype in (torch.float16, torch.bfloat16) and q.device.type != "cpu":
        return q.dtype
    return precise_dtype(q)


def over_query_chunks(
    q: Tensor, k: Tensor, v: Tensor, vis: Visibility, chunk: int, grad: bool, chunk_fn: ChunkFn
) -> Tensor:
    """Attention over query chunks of ``chunk`` rows, each reading only the keys it can see.

    With ``grad`` each chunk is checkpointed (recomputed in the backward pass instead of keeping
    its bias and weights). Queries that see no key get zeros.

    Traced (``torch.compile``, ``torch.export``) or under a ``torch.func`` transform, one call
    covers every query and key, without checkpointing: the chunk ranges are Python ints that
    would fix the sequence length in a traced program, and ``torch.func.grad`` refuses the saved
    tensor hooks of non-reentrant checkpointing. Memory is then O(tq * tk), as on the single
    SDPA path those callers take for every other encoding.

    Args:
        q: ``(b, h, tq, dh)``; k: ``(b, h_kv, tk, dh)``; v: ``(b, h_kv, tk, dv)``.
        chunk_fn: ``chunk_fn(qs, ks)(q[:, :, qs], k[:, :, ks], v[:, :, ks])`` is one chunk's ``(b, h, r, dv)``.

    Returns:
        ``(b, h, tq, dv)``.
    """
    if is_tracing() or torch._C._are_functorch_transforms_active():
        return chunk_fn(slice(None), slice(None))(q, k, v)
    outs = []
    # Longest key range first: each later chunk's blocks then fit in memory the earlier ones freed.
    # In rising order (causal ranges grow) glibc malloc kept every freed block and grew the heap:
    # FIRE at t=16384 held 0.4-4.2 GiB of RSS for 130 MiB of live tensors.
    for start, end, lo, hi in reversed(vis.spans(chunk)):
        if hi <= lo:  # these queries see no key
            outs.append(q.new_zeros(q.shape[0], q.shape[1], end - start, v.shape[-1]))
            continue
        one_chunk = chunk_fn(slice(start, end), slice(lo, hi))
        args = (q[:, :, start:end], k[:, :, lo:hi], v[:, :, lo:hi])
        outs.append(checkpoint(one_chunk, *args, use_reentrant=False) if grad else one_chunk(*args))
    if not outs:  # no queries
        return q.new_zeros(q.shape[0], q.shape[1], 0, v.shape[-1])
    return torch.cat(outs[::-1], dim=2)


def _sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, soft: Softmax) -> Tensor:
    """One SDPA call with an optional ``mask`` (boolean keep-mask, or float bias with ``-inf``), and ``soft``.

    ``sinks`` (``(h,)``): one more key per head, key and value zero, whose bias is ``sinks[h]``: SDPA's
    softmax is then the attention-sink softmax (gpt-oss), the sink taking weight
    ``exp(s_h) / (exp(s_h) + sum_j exp(score_j))`` and adding nothing to the output. The mask becomes
    a float one, ``(b|1, h, tq, tk + 1)``, in :func:`mask_dtype` (boolean masks as 0/-inf).
    """
    if (sinks := soft.sinks) is not None:
        dtype, (h, tq, tk) = mask_dtype(q), (q.shape[1], q.shape[2], k.shape[2])
        if mask is None:
            mask = q.new_zeros(1, 1, 1, 1, dtype=dtype)
        elif mask.dtype == torch.bool:
            mask = torch.zeros((), dtype=dtype, device=q.device).masked_fill(~mask, float("-inf"))
        rows = mask.shape[0]
        column = sinks.to(dtype).view(1, h, 1, 1).expand(rows, h, tq, 1)
        mask = torch.cat([mask.to(dtype).expand(rows, h, tq, tk), column], dim=-1)
        k, v = (torch.cat([t, t.new_zeros(*t.shape[:2], 1, t.shape[3])], dim=2) for t in (k, v))
    # (outside autocast: a float mask stays float32 where mask_dtype chose it)
    sdpa, drop, gqa = F.scaled_dot_product_attention, soft.dropout_p, heads_differ(q, k)
    return outside_autocast(sdpa, q, k, v, attn_mask=mask, dropout_p=drop, scale=soft.scale, enable_gqa=gqa)


def sdpa_attention(
    q: Tensor, k: Tensor, v: Tensor, state: PositionState, vis: Visibility, soft: Softmax, chunk: int | None
) -> Tensor:
    """SDPA with the state's bias and ``vis``'s mask, in one call (``chunk=None``) or over query chunks.

    The one call takes SDPA's own causal path where there is no mask at all. Query chunks
    (:func:`over_query_chunks`, O(chunk * tk) memory) ask the state for the bias at the chunk's own
    query positions (so a key-only ALiBi form is small near that chunk's diagonal), and read only
    the keys the chunk can see (causality, a window, its documents: :meth:`Visibility.visible_range`).
    Rows that see no key give zeros, never NaN (with sinks they see only the sink: zero too).
    """

    def chunk_fn(qs: slice, ks: slice) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
        keep, block = vis.block(qs, ks), state.narrow(qs, ks) if chunk else state

        def one(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            bias = block.attention_bias(q, k)
            bias = None if bias is None else bias.to(mask_dtype(q))
            if keep is None:
                return _sdpa(q, k, v, bias, soft)
            # Rows with no key at all are opened for the kernel (no backend then gives NaN), zeroed after.
            dead = ~keep.any(dim=-1, keepdim=True)
            mask = keep | dead if bias is None else bias.masked_fill(~(keep | dead), float("-inf"))
            return _sdpa(q, k, v, mask, soft).masked_fill(dead, 0.0)

        return one

    if chunk is not None:
        return over_query_chunks(q, k, v, vis, chunk, needs_grad(q, k, v, soft.sinks, state=state), chunk_fn)
    # Never SDPA's is_causal together with a mask or bias (refused by torch 2.15, and by
    # exporters): only a bias-free call with nothing but index causality takes it.
    plain = state.bias_form == "none" and soft.sinks is None and vis.window is None and vis.user is None
    if plain and vis.causal and vis.ranged and vis.tq == vis.tk:
        return F.scaled_dot_product_attention(
            q, k, v, dropout_p=soft.dropout_p, is_causal=True, scale=soft.scale, enable_gqa=heads_differ(q, k)
        )
    return chunk_fn(slice(None), slice(None))(q, k, v)


def _toeplitz(
    q: Tensor, k: Tensor, v: Tensor, values: Tensor, vis: Visibility, soft: Softmax, chunk: int, budget: int
) -> Tensor:
    """Attention with a bias that depends only on ``k_pos - q_pos``, from its ``(h, tq + tk - 1)`` values.

    With the queries of a chunk in reverse order, entry ``(i', j)`` of the chunk's bias is
    ``values[start + i' + j]``: a Hankel matrix, which is a strided view of the vector
    (strides ``(1, 1)``), so SDPA reads it without a ``(h, tq, tk)`` tensor ever existing. The
    causal mask and the window are ``-inf`` at the distances they hide, in the same vector.
    Each chunk reads only the keys it can see. Its mask is a view of the small vector, and SDPA's flash
    kernel keeps nothing of size ``(h, tq, tk)`` for the backward; where SDPA keeps each chunk's weights
    instead (sinks; on the CPU a bias that needs a gradient, or dropout: its math kernel), the chunks are
    checkpointed, with sinks always, else once ``(b, h, tq, tk)`` float32 weights would pass ``budget``
    bytes (as a dense mask would).

    Args:
        values: ``(h|1, tq + tk - 1)`` from :meth:`~posenc.PositionState.bias_by_distance`
            (zeros for a window alone).
        vis: index rules only (default positions, no user mask, no documents).
        soft: its sinks materialise each chunk's mask with the sink column (:func:`_sdpa`),
            ``(h, chunk, keys + 1)``.
        chunk: query rows per SDPA call (``tq`` for one call).
        budget: the bytes of weights the chunks may keep for the backward (the device's bias budget).
    """
    tq, tk = q.shape[-2], k.shape[-2]
    if vis.positional:
        # Entry n holds keys j = i + n - (tq - 1); the query sits at key index i + offset.
        behind = vis.offset - (torch.arange(values.shape[-1], device=values.device) - (tq - 1))
        values = values.masked_fill(~visible(behind, 0, vis.causal, vis.window), float("-inf"))
    values = values.contiguous()

    def chunk_fn(qs: slice, ks: slice) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
        # Not slice.indices(): it would specialise symbolic lengths under torch.compile.
        start, end = qs.start or 0, tq if qs.stop is None else qs.stop
        lo, hi = ks.start or 0, tk if ks.stop is None else ks.stop
        strip = values[:, tq - end + lo :]  # from the entry of (last row, key lo)
        mask = strip.as_strided((1, values.shape[0], end - start, hi - lo), (0, strip.stride(0), 1, 1))
        return lambda q_c, k_c, v_c: _sdpa(q_c.flip(2), k_c, v_c, mask, soft).flip(2)

    # The CPU's flash kernel takes no bias that needs a gradient and no dropout: its math kernel keeps every
    # chunk's weights (0.8 of one (h, t, t) float32 tensor at t=1024, 0.56 at 4096), and recomputing them
    # costs time (T5's attention, forward+backward at t=2048: 1.27x): checkpointed past the budget only.
    # With sinks each chunk's mask is a tensor of its own: always checkpointed, as on the chunked path.
    math_kernel = q.device.type == "cpu" and (values.requires_grad or soft.dropout_p > 0)
    large = q.shape[0] * q.shape[1] * tq * tk * 4 > budget
    grad = (soft.sinks is not None or (math_kernel and large)) and needs_grad(q, k, v, values, soft.sinks)
    out = over_query_chunks(q, k, v, vis, chunk, grad, chunk_fn)
    if tq <= tk or not vis.positional:
        return out
    # More queries than keys (index rule): the first rows may see no key; zeros, as on every path.
    # A row before the keys (at < 0) sees none iff it does not see key 0.
    at = torch.arange(tq, device=out.device)[:, None] + vis.offset
    return out.masked_fill((at < 0) & ~visible(at, 0, vis.causal, vis.window), 0.0)


def weighted_attention(
    q: Tensor, k: Tensor, v: Tensor, state: PositionState, vis: Visibility, soft: Softmax, chunk: int
) -> Tensor:
    """Attention through explicit weights, over query chunks of ``chunk`` rows.

    Args:
        q: ``(b, h, tq, dh)`` encoded queries; k: ``(b, h_kv, tk, dh)`` encoded keys;
        v: ``(b, h_kv, tk, dv)``.
        state: the position state (its bias and value term are asked per chunk, at the chunk's
            positions, from the chunk's encoded queries: a content bias is never reused).
        vis: which keys each query may see.
        soft: scale, dropout on the weights, and sink logits (one more logit per row of the
            softmax, whose weight is then dropped, as gpt-oss's ``eager_attention_forward``).
        chunk: query rows per chunk.

    Returns:
        ``(b, h, tq, dv)`` in ``q``'s dtype.
    """

    def chunk_fn(qs: slice, ks: slice) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
        keep, block = vis.block(qs, ks), state.narrow(qs, ks)
        return lambda q_c, k_c, v_c: _weights_chunk(q_c, k_c, v_c, block, keep, soft)

    return over_query_chunks(q, k, v, vis, chunk, needs_grad(q, k, v, soft.sinks, state=state), chunk_fn)


def _weights_chunk(
    q: Tensor, k: Tensor, v: Tensor, state: PositionState, keep: Tensor | None, soft: Softmax
) -> Tensor:
    """One chunk: ``q`` ``(b, h, r, dh)`` against ``k``/``v`` ``(b, h_kv, c, d)``; ``keep`` ``(b|1, h|1, r, c)``."""
    scale, dropout_p, sinks = soft
    work = precise_dtype(q)  # scores and softmax in float32 (float64 for float64)
    groups = q.shape[1] // k.shape[1]
    # Grouped-query attention without copying the keys: query heads g of each key head together.
    qg = rearrange(q.to(work), "b (hk g) r d -> b hk g r d", g=groups)
    factor = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = outside_autocast(torch.matmul, qg, k.to(work).unsqueeze(2).transpose(-1, -2)) * factor
    scores = rearrange(scores, "b hk g r c -> b (hk g) r c")
    bias = state.attention_bias(q, k)
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
    extra = state.value_term(probs)
    if extra is not None and extra.shape[-1] != out.shape[-1]:
        raise ValueError(
            f"v has head width {out.shape[-1]}, but {type(state.encoding).__name__}'s value term adds vectors of "
            f"width {extra.shape[-1]} (its head_dim)"
        )
    return out if extra is None else out + extra.to(out.dtype)
