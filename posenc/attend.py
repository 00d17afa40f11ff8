"""Scaled dot-product attention that applies any position encoding through its hooks.

:func:`attention` calls ``encoding.encode_qk`` (rotary encodings) and
``encoding.attention_bias`` (bias encodings) and computes attention with
:func:`torch.nn.functional.scaled_dot_product_attention` (SDPA). It never asks which
encoding it holds: the shape of the bias the encoding returns chooses the cheapest
correct path (see :func:`attention`'s docstring for the table).

This module holds the entry point and its choice of path; the argument checks are in
:mod:`posenc._attention_checks`, the SDPA paths in :mod:`posenc._attention_paths`.

Shape key: ``b`` batch, ``h`` query heads, ``h_kv`` key/value heads, ``tq`` queries,
``tk`` keys, ``dh`` head width, ``dv`` value width.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.utils.checkpoint
from torch import Tensor

from ._attention_checks import Backend, Encoding, _check_devices, _check_inputs
from ._attention_common import needs_grad, over_query_chunks
from ._attention_paths import _chunk_attention, _single, _toeplitz
from ._checks import check_bool
from ._compat import is_compiling
from ._flex import flex_attention_path
from ._positions import _resolve_qk, check_bias_qk
from ._weights import weighted_attention
from .base import PositionState
from .masking import Visibility, check_window, document_positions, resolve_document_ids

__all__ = ["Backend", "attention"]


#: Above this many bytes for one dense float mask, eager ``backend="auto"`` works over
#: query chunks instead, so that memory stays O(chunk * tk) (64 MiB is a (8, 1448, 1448)
#: float32 bias: large enough that small and medium calls take the single SDPA call).
BIAS_BUDGET_BYTES = 64 * 2**20
#: Query rows per chunk when a half-precision bias has to be cast to the input dtype: it
#: keeps the key-only ALiBi values small near every chunk's diagonal (a slope of at most
#: ~0.7 times 64 rows stays below 45, where bfloat16 still resolves steps of 0.25).
HALF_CAST_CHUNK = 64
#: Query rows per causal SDPA call on the Toeplitz path. Each call reads the keys up to its
#: last query, so the work beyond the causal triangle is ~chunk/t; 512 measured fastest for
#: causal ALiBi (t=2048..8192, one thread, torch 2.13 and 2.15: 1.1x bias-free causal SDPA).
TOEPLITZ_CHUNK = 512


# The mask dtype rule, and the chunk loop that reads it, stay here: tests patch
# `_float_mask_allowed` on this module.
def _float_mask_allowed(device_type: str) -> bool:
    """Whether SDPA on this device adds a float32 mask to half-precision scores without casting it.

    The CPU kernels accept a float32 ``attn_mask`` with bfloat16/float16 queries and add it
    in float32 (measured, torch 2.13). Other devices' fused kernels want the query dtype,
    so there the bias is cast and queries are processed in chunks to keep its resolution.
    """
    return device_type == "cpu"


def _mask_dtype(q: Tensor) -> torch.dtype:
    """The dtype biases are handed to SDPA in: float32 (float64 for float64 q) where the kernel allows it."""
    if q.dtype == torch.float64:
        return torch.float64
    if q.dtype in (torch.float16, torch.bfloat16) and not _float_mask_allowed(q.device.type):
        return q.dtype
    return torch.float32


def _chunked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    state: PositionState | None,
    vis: Visibility,
    dropout_p: float,
    scale: float | None,
    chunk: int,
) -> Tensor:
    """Attention over query chunks: the bias and mask of one chunk at a time, O(chunk * tk) memory.

    Each chunk asks the state for its bias at the chunk's own query positions (so a key-only
    ALiBi form is small near that chunk's diagonal), and reads only the keys it can see
    (causality, a window, its documents: :meth:`Visibility.visible_range`). When gradients are
    needed each chunk is checkpointed: its bias is recomputed in the backward pass instead of
    being kept for it (SDPA would otherwise save every chunk's mask, O(tq * tk) memory in all).
    """
    mask_dtype = _mask_dtype(q)
    # The only masked entries are above the diagonal of the chunk's last keys (index causality).
    causal_only = vis.causal and vis.ranged and vis.user is None and vis.window is None

    def chunk_fn(qs: slice, ks: slice) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
        keep = vis.block(qs, ks)
        block = None if state is None else state.narrow(qs, ks)
        return lambda q_c, k_c, v_c: _chunk_attention(
            q_c, k_c, v_c, block, keep, causal_only, dropout_p, scale, mask_dtype
        )

    return over_query_chunks(q, k, v, vis, chunk, needs_grad(q, k, v, state), chunk_fn)


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    encoding: Encoding = None,
    *,
    causal: bool = False,
    q_positions: Tensor | None = None,
    k_positions: Tensor | None = None,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    qk_encoded: bool = False,
    backend: Backend = "auto",
    chunk_size: int | None = None,
    window: int | None = None,
    document_ids: Tensor | None = None,
    q_document_ids: Tensor | None = None,
) -> Tensor:
    """Scaled dot-product attention with a position encoding applied through its hooks.

    Computes ``softmax(q' k'ᵀ · scale + bias + mask) v`` where ``q', k' = state.encode_qk(q, k)``
    and ``bias = state.attention_bias(q', k')`` for the encoding's position state
    (:meth:`~posenc.PositionalEncoding.prepare`), with
    :func:`torch.nn.functional.scaled_dot_product_attention` (SDPA) doing the work. Works for
    every encoding kind: additive and ``"none"`` encodings act nowhere here, rotary ones rotate
    ``q``/``k``, bias ones add their bias. A model passes the state it prepared once per forward
    instead of the encoding, so that no layer recomputes tables.

    Which path runs (eager; under ``torch.compile`` the single-call paths always run, so that
    the graph has no data- or size-dependent Python branches):

    ============================================  =================================================
    case                                          path
    ============================================  =================================================
    no bias, no ``attn_mask``, causal, tq == tk    SDPA's own ``is_causal`` (flash kernel)
    causal with tq == 1 (one decoding step)        no causal mask at all (the query is the last)
    no bias, any other mask that fits              one SDPA call with a boolean mask
    a bias that depends only on ``k - q`` (ALiBi,  Toeplitz: the bias of each distance, ``(h, tq +
    T5) at default positions, no ``attn_mask``     tk - 1)``, read as a ``(h, tq, tk)`` strided view
                                                   (queries reversed), never materialised; causal
                                                   calls run over query chunks of 512 that read only
                                                   the keys they see: ~1.1x bias-free causal SDPA
    any other bias whose dense mask fits in        one SDPA call with a float mask (bias, ``-inf``
    :data:`BIAS_BUDGET_BYTES` (64 MiB)             where masked)
    a larger dense mask (explicit positions or     query chunks: per chunk the bias at the chunk's
    padding at long length, ...)                   positions and only the keys the chunk can see;
                                                   memory O(chunk·tk); with gradients each chunk is
                                                   checkpointed (bias recomputed in backward)
    ``backend="flex"``                             FlexAttention with the encoding's ``score_mod``
                                                   (compiled, inference only on the CPU)
    ============================================  =================================================

    ``backend="sdpa"`` forces the single call, ``"chunked"`` the query chunks. The
    FlexAttention path is opt-in, never chosen by ``"auto"``: its first call compiles
    (~15 s on a CPU; once per process, and once per shape when ``attn_mask`` is given), and
    it has no CPU backward; the chunked path trains. None of the paths relies on SDPA taking
    ``attn_mask`` together with ``is_causal=True`` (refused since torch 2.15).

    Biases are handed to SDPA in float32 (float64 for float64 inputs) where the kernel adds
    a float32 mask to half-precision scores (the CPU kernels do); elsewhere the bias is cast
    to the input dtype and, for half precision, queries run in chunks of
    :data:`HALF_CAST_CHUNK` with the bias asked per chunk, so that its values near each
    chunk's diagonal stay small and keep their resolution far out (positions ~100k).

    Causal masking follows positions: key ``j`` is visible to query ``i`` iff
    ``k_pos[j] <= q_pos[i]`` (per batch row for ``(b, t)`` positions), so a shard of queries
    (context parallelism) or a packed batch sees exactly the keys before it. With default
    positions this is by index and bottom-right aligned: with ``tq < tk`` (decoding with a
    KV cache) the queries are the *last* ``tq`` of the keys, so query ``i`` sees keys
    ``j <= i + tk - tq`` (SDPA's own ``is_causal`` is top-left aligned when ``tq != tk``;
    this function never uses it then). Query rows that can see no key at all (padding
    queries) return zeros, never NaN.

    ``window`` restricts each query to nearby keys: causal, ``0 <= q_pos - k_pos < window``
    (the query and the ``window - 1`` keys before it, as Mistral's and Gemma's
    ``sliding_window``); bidirectional, ``|q_pos - k_pos| <= window // 2`` (ModernBERT's
    ``local_attention``). ``document_ids`` (packed documents) restricts each query to keys of
    its own document. Neither builds a ``(tq, tk)`` mask on the chunked path: each query chunk
    builds the block of the keys it can see. With a window at default positions and no other
    mask, the Toeplitz path applies it as ``-inf`` at the distances outside the window.

    An encoding with a value term (:attr:`~posenc.PositionState.has_value_term`, e.g. Shaw's
    relative values) takes an explicit path over query chunks:
    ``probs = softmax(q kᵀ · scale + bias + mask)`` (with dropout), then
    ``probs @ v + value_term(probs)``; memory O(chunk·tk) (:mod:`posenc._weights`).

    Args:
        q: ``(b, h, tq, dh)`` queries.
        k: ``(b, h_kv, tk, dh)`` keys; ``h`` must be a multiple of ``h_kv`` (grouped-query
            attention, handled by SDPA without copying the keys).
        v: ``(b, h_kv, tk, dv)`` values.
        encoding: a :class:`~posenc.PositionalEncoding` (e.g. from :func:`posenc.build`), a
            :class:`~posenc.PositionState` from its ``prepare`` (positions included: do not
            pass ``q_positions``/``k_positions`` then), or ``None`` for none.
        causal: mask keys after each query (bottom-right aligned, see above).
        q_positions, k_positions: integer positions ``(t,)`` or ``(b, t)``; defaults: keys
            ``0..tk-1``, queries the last ``tq`` of them (:func:`posenc._positions.resolve_qk_positions`).
        attn_mask: boolean keep-mask (``True`` = attend) broadcastable to ``(b, h, tq, tk)``;
            a ``(b, tk)`` padding mask is passed as ``mask[:, None, None, :]``.
        dropout_p: dropout on the attention weights (pass 0 at evaluation).
        scale: score scale; ``None`` means ``1 / sqrt(dh)``.
        qk_encoded: ``q`` and ``k`` already went through ``encode_qk`` (e.g. keys kept
            rotated in a KV cache); only the bias is applied.
        backend: ``"auto"`` (the table above), ``"sdpa"``, ``"chunked"`` or ``"flex"``.
        chunk_size: query rows per chunk on the chunked paths; ``None`` picks the largest that
            keeps one chunk's mask within :data:`BIAS_BUDGET_BYTES` (:data:`TOEPLITZ_CHUNK` on
            the Toeplitz path).
        window: a sliding window (a positive int, see above), or ``None`` for none.
        document_ids: ``(tk,)`` or ``(b, tk)`` integer ids of the keys' packed documents (a new
            document starts where the id changes); queries attend only within their document.
            The queries' ids are the last ``tq`` of them unless ``q_document_ids`` is given.
            When no positions are given (and ``encoding`` is not a state), positions restart
            at 0 in each document (:func:`posenc.document_positions`), so that each document
            is encoded as if it were alone.
        q_document_ids: ``(tq,)`` or ``(b, tq)`` ids of the queries' documents.

    Returns:
        ``(b, h, tq, dv)``, the dtype of ``q``.

    Raises:
        TypeError: a non-tensor, non-float or mixed-dtype input, a non-boolean ``attn_mask``,
            ``causal`` or ``qk_encoded``, non-integer document ids or ``window``, or an
            ``encoding`` of another type.
        ValueError: wrong ranks, mismatched shapes (``v`` vs ``k``, heads, head width, batch),
            an ``attn_mask`` that is not 4-D or does not broadcast, bad ``dropout_p``/``scale``/
            ``backend``/``chunk_size``/``window``, positions given with a state, positions, masks
            or ids on another device than ``q``, or ``backend="flex"`` where it cannot run.
    """
    _check_inputs(q, k, v, encoding, attn_mask, dropout_p, scale, backend, chunk_size)
    check_bool("causal", causal)
    check_bool("qk_encoded", qk_encoded)
    window = check_window(window)
    _check_devices(q, q_positions=q_positions, k_positions=k_positions, attn_mask=attn_mask)
    if q.shape[0] != k.shape[0]:  # batch broadcast from 1 (check_qk allows it)
        batch = max(q.shape[0], k.shape[0])
        q, k, v = (t.expand(batch, *t.shape[1:]) for t in (q, k, v))
    b, h, tq, _ = q.shape
    tk = k.shape[-2]
    q_doc = k_doc = None
    if document_ids is not None:
        q_doc, k_doc = resolve_document_ids(document_ids, q_document_ids, tq, tk, b, q.device)
        if q_positions is None and k_positions is None and not isinstance(encoding, PositionState):
            # Each document is encoded as if it were alone: positions restart in each one.
            k_positions = document_positions(k_doc)
            if q_document_ids is None:
                q_positions = k_positions[..., tk - tq :]
    elif q_document_ids is not None:
        raise ValueError("q_document_ids was given without document_ids (the keys' document ids)")
    state = _state(encoding, q, k, q_positions, k_positions)
    if state is not None and state.bias_heads is not None:
        # Every path, the Toeplitz one too (it never calls the hooks with q): never broadcast a
        # bias built for another number of heads.
        check_bias_qk(q, k, state.bias_heads)
    if state is not None and state.causal_only and not causal:
        name = type(state.encoding).__name__
        raise ValueError(
            f"causal=False, but this {name} is exact only in causal attention: {state.causal_only_reason}"
        )
    vis = _visibility(state, q, k, q_positions, k_positions, attn_mask, causal, window, q_doc, k_doc)
    if state is not None and not qk_encoded:
        q, k = state.encode_qk(q, k)
    tracing = is_compiling()
    if state is not None and state.has_value_term:
        if backend == "flex":
            raise ValueError(
                f"backend='flex' cannot apply the value term of {type(state.encoding).__name__} (it needs "
                f"the attention weights); use backend='auto'"
            )
        chunk = chunk_size or max(1, BIAS_BUDGET_BYTES // max(1, b * h * tk * 4))
        return weighted_attention(q, k, v, state, vis, dropout_p, scale, chunk)
    if backend == "flex":
        return flex_attention_path(q, k, v, state, vis, scale)

    if vis.causal and tq == 1 and vis.ranged and vis.window is None:
        # One decoding query is the last position: it sees every key, no mask is needed.
        vis.causal = False
    mask_dtype = _mask_dtype(q)
    elem = torch.finfo(mask_dtype).bits // 8
    form = "none" if state is None else state.bias_form
    half_cast = q.dtype in (torch.float16, torch.bfloat16) and mask_dtype == q.dtype and form != "none"

    if vis.user is None and vis.ranged and backend != "sdpa" and not half_cast:
        values = None
        if state is not None and form != "none":
            values = state.bias_by_distance(mask_dtype)
        elif form == "none" and window is not None:
            # A window is a function of the distance too: zeros, -inf outside it.
            values = q.new_zeros(1, tq + tk - 1, dtype=mask_dtype)
        # Traced, a learned bias takes the dense path: as_strided's backward specialises lengths.
        if values is not None and not (tracing and values.requires_grad and torch.is_grad_enabled()):
            ranged = vis.causal or window is not None
            chunk = tq if (tracing or not ranged) else (chunk_size or TOEPLITZ_CHUNK)
            return _toeplitz(q, k, v, values, vis, dropout_p, scale, chunk)
    if tracing or backend == "sdpa":
        return _single(q, k, v, state, vis, dropout_p, scale, mask_dtype)

    if form == "none" and vis.user is None and not vis.structural:
        use_chunks = backend == "chunked"
    else:
        # A dense mask: the bias, or a padding, document or window mask joined with the causal one.
        scratch = 0 if state is None else state.bias_scratch
        dense_bytes = b * ((h if form != "none" else 1) + scratch) * tq * tk * elem
        use_chunks = (
            backend == "chunked"
            or (dense_bytes > BIAS_BUDGET_BYTES and (vis.causal or form != "none" or vis.structural))
            or (half_cast and tq > HALF_CAST_CHUNK)
        )
    if not use_chunks:
        return _single(q, k, v, state, vis, dropout_p, scale, mask_dtype)
    if chunk_size is None:
        scratch = 0 if state is None else state.bias_scratch
        chunk_size = max(1, BIAS_BUDGET_BYTES // max(1, b * (h + scratch) * tk * elem))
        if half_cast:
            chunk_size = min(chunk_size, HALF_CAST_CHUNK)
    return _chunked(q, k, v, state, vis, dropout_p, scale, chunk_size)


def _visibility(
    state: PositionState | None,
    q: Tensor,
    k: Tensor,
    q_positions: Tensor | None,
    k_positions: Tensor | None,
    attn_mask: Tensor | None,
    causal: bool,
    window: int | None,
    q_doc: Tensor | None,
    k_doc: Tensor | None,
) -> Visibility:
    """The keys each query may see; explicit positions only when a side is not the default range."""
    tq, tk = q.shape[-2], k.shape[-2]
    qp = kp = None
    if causal or window is not None:
        if state is not None:
            if state.q_start is None or state.k_start is None:
                qp, kp = state.q_positions, state.k_positions
        elif q_positions is not None or k_positions is not None:
            qp, kp, q_start, k_start = _resolve_qk(tq, tk, q.shape[0], q.device, q_positions, k_positions)
            if q_start is not None and k_start is not None:
                qp = kp = None
        if qp is not None and kp is not None:
            qp, kp = qp.to(q.device), kp.to(q.device)
    return Visibility(
        tq,
        tk,
        q.device,
        user=attn_mask,
        causal=causal,
        window=window,
        q_pos=qp,
        k_pos=kp,
        q_doc=q_doc,
        k_doc=k_doc,
    )


def _state(
    encoding: Encoding, q: Tensor, k: Tensor, q_positions: Tensor | None, k_positions: Tensor | None
) -> PositionState | None:
    """The position state of this call: the one given, or the encoding's, prepared here."""
    tq, tk = q.shape[-2], k.shape[-2]
    if isinstance(encoding, PositionState):
        if q_positions is not None or k_positions is not None:
            raise ValueError(
                "q_positions/k_positions cannot be given with a PositionState: its positions were fixed by "
                "encoding.prepare(...); pass the encoding instead, or prepare with these positions"
            )
        if (encoding.q_len, encoding.k_len) != (tq, tk):
            raise ValueError(
                f"the PositionState was prepared for {encoding.q_len} queries and {encoding.k_len} keys, "
                f"but q has {tq} and k has {tk}"
            )
        return encoding
    if encoding is None:
        return None
    return encoding.prepare(
        tq, tk, q_positions=q_positions, k_positions=k_positions, batch=q.shape[0], device=q.device
    )
