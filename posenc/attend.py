"""Scaled dot-product attention that applies any position encoding through its hooks.

:func:`attention` calls ``encoding.encode_qk`` (rotary encodings) and
``encoding.attention_bias`` (bias encodings) and computes attention with
:func:`torch.nn.functional.scaled_dot_product_attention` (SDPA). It never asks which
encoding it holds: the shape of the bias the encoding returns chooses the cheapest
correct path (see :func:`attention`'s docstring for the table).

This module holds the entry point, its argument checks and its choice of path; the paths are
in :mod:`posenc._attention_paths` (the explicit-weights one too), FlexAttention in
:mod:`posenc._flex`.

Shape key: ``b`` batch, ``h`` query heads, ``h_kv`` key/value heads, ``tq`` queries,
``tk`` keys, ``dh`` head width, ``dv`` value width.
"""

from __future__ import annotations

import copy
import math
from typing import Literal

import torch
from torch import Tensor

from ._attention_paths import Softmax, _toeplitz, mask_dtype, sdpa_attention, weighted_attention
from ._checks import check_bool, check_choice, check_float_tensor, is_real
from ._compat import autocast_dtype, can_sync, is_compiling
from ._flex import flex_attention_path, lse_supported
from ._positions import check_bias_qk, check_qk
from .base import PositionalEncoding
from .encodings.none import NoPE
from .masking import Visibility, check_window, document_positions, resolve_document_ids
from .state import PositionState

__all__ = ["Backend", "attention"]

#: What :func:`attention` accepts as its position argument: an encoding (prepared per call),
#: a :class:`~posenc.PositionState` prepared once per forward, or ``None``.
Encoding = PositionalEncoding | PositionState | None
Backend = Literal["auto", "sdpa", "chunked", "flex"]

#: Above this many bytes for one dense float mask, eager ``backend="auto"`` works over
#: query chunks instead, so that memory stays O(chunk * tk); by device type, others take the
#: CPU's. CPU: 64 MiB, a (8, 1448, 1448) float32 bias, so small and medium calls take the single
#: SDPA call. CUDA: 1 GiB, since chunks of 512-1024 rows cost up to 7.6x the single call with the
#: backward on an H100 (bfloat16, ``benchmarks/results/cuda-*-chunks.md``).
BIAS_BUDGET_BYTES = {"cpu": 64 * 2**20, "cuda": 2**30}
#: Query rows per causal SDPA call on the Toeplitz path. Each call reads the keys up to its
#: last query, so the work beyond the causal triangle is ~chunk/t; 512 measured fastest for
#: causal ALiBi (t=2048..8192, one thread, torch 2.13 and 2.15: 1.1x bias-free causal SDPA on an AMD EPYC).
TOEPLITZ_CHUNK = 512

#: Eager ``backend="auto"`` on the CPU takes query chunks for packed documents averaging at least this many
#: query rows, also within the budget: each chunk ends where a document starts and reads only that document's
#: keys (t²/documents of work, not t²). Measured (one thread, t = 512..4096, 2 to 8 documents, with and
#: without the backward): 0.2-0.8x the one masked call (about even, 0.75-1.07x, at t = 128-256); documents of
#: 8-16 rows cost more in calls than they save (1.3-2.8x).
DOCUMENT_CHUNK_MIN_ROWS = 64

#: The encoding of ``encoding=None``: its state carries the positions the masks follow.
_NOPE = NoPE()


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
    sinks: Tensor | None = None,
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
                                                   the keys they see: 1.23-1.49x bias-free causal SDPA
                                                   on the CPU, t = 1024-4096, subnormals flushed
                                                   (benchmarks/results/denormals.md);
                                                   training on the CPU with a learned bias or dropout,
                                                   checkpointed past the budget
    any other bias whose dense mask fits in        one SDPA call with a float mask (bias, ``-inf``
    :data:`BIAS_BUDGET_BYTES` (the device's)       where masked); 64 MiB on the CPU, 1 GiB on CUDA
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
    to the input dtype, and for half precision in its full form (relative distances, exact near
    every diagonal), never ALiBi's key-only one (whose large values would lose the steps between
    neighbouring keys); such a half-precision mask never takes the Toeplitz view (through it,
    causal ALiBi in bfloat16 gave NaN on an H100, torch 2.11) but the dense or chunked paths.

    Causal masking follows positions: key ``j`` is visible to query ``i`` iff
    ``k_pos[j] <= q_pos[i]`` (per batch row for ``(b, t)`` positions), so a shard of queries
    (context parallelism) or a packed batch sees exactly the keys before it. With default
    positions this is by index and bottom-right aligned: with ``tq < tk`` (decoding with a
    KV cache) the queries are the *last* ``tq`` of the keys, so query ``i`` sees keys
    ``j <= i + tk - tq`` (SDPA's own ``is_causal`` is top-left aligned when ``tq != tk``;
    this function never uses it then); with ``tq > tk`` the first ``tq - tk`` queries see no key, and an
    encoding needs explicit positions there (a ``ValueError``: its default ones start both sides at 0).
    Query rows that can see no key at all (padding queries) return zeros, never NaN.

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
    ``probs @ v + value_term(probs)``; memory O(chunk·tk) (:func:`posenc._attention_paths.weighted_attention`).

    ``sinks`` (attention sinks, one learned logit ``s_h`` per head, as in gpt-oss): each row's
    softmax also runs over ``s_h``, whose value row is zero, so
    ``out = sum_j p_j v_j`` with ``p = softmax([score_1, ..., score_tk, s_h])``; the keys' weights
    sum to less than one. Every path applies it exactly: the SDPA paths (one call, query chunks,
    Toeplitz) append one key per head whose key and value are zero and whose additive bias is
    ``s_h`` (the mask is then a float one, so a bias-free causal call does not take SDPA's own
    ``is_causal``; a Toeplitz chunk's mask is materialised), the explicit-weights path adds the
    logit to its softmax, and FlexAttention scales its output by ``sigmoid(lse - s_h)`` (on the
    CPU, whose compiled FlexAttention cannot return ``lse``, ``backend="flex"`` with sinks runs
    the ``"auto"`` paths instead). A query
    row that sees no key returns zeros, as without sinks. A key-only bias (causal ALiBi's) is
    replaced by the full one: its per-row shift would move the sink's weight.

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
        q_document_ids: ``(tq,)`` or ``(b, tq)`` ids of the queries' documents (queries that are not the
            last ``tq`` keys: a shard, a decoding step). Given, both sides' ids are compared as they are,
            not renumbered where they change: they must differ between the documents of a row (two
            documents both numbered 0 are then one), e.g. :func:`posenc.masking.document_numbers` of the
            whole sequence, as context parallelism passes them. The queries' positions are then given
            too (``q_positions``), where anything reads them: ``causal``, ``window`` or the encoding.
        sinks: ``(h,)`` float sink logits, one per query head (any float dtype, on ``q``'s
            device; applied in the scores' float dtype, differentiable), or ``None`` for none.

    Returns:
        ``(b, h, tq, dv)``, the dtype of ``q``.

    Raises:
        TypeError: a non-tensor, non-float or mixed-dtype input, a non-boolean ``attn_mask``,
            ``causal`` or ``qk_encoded``, non-integer document ids or ``window``, a non-tensor or
            non-float ``sinks``, or an ``encoding`` of another type.
        ValueError: wrong ranks, mismatched shapes (``v`` vs ``k``, heads, head width, batch),
            an ``attn_mask`` that is not 4-D or does not broadcast, bad ``dropout_p``/``scale``/
            ``backend``/``chunk_size``/``window``, ``sinks`` not of shape ``(h,)``, positions given
            with a state, positions, masks, ids or ``sinks`` on another device than ``q``, or ``backend="flex"`` where it cannot run.
    """
    _check_inputs(q, k, v, encoding, attn_mask)
    soft = Softmax(scale, dropout_p, sinks)
    _check_options(soft, backend, chunk_size, q.shape[1])
    check_bool("causal", causal)
    check_bool("qk_encoded", qk_encoded)
    window = check_window(window)
    names = ("q_positions", "k_positions", "attn_mask", "sinks", "document_ids", "q_document_ids")
    given = (q_positions, k_positions, attn_mask, sinks, document_ids, q_document_ids)
    for name, t in zip(names, given, strict=True):
        if isinstance(t, Tensor) and t.device != q.device:  # torch's own error would not name it
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; move it to q's device")
    if q.shape[0] != k.shape[0]:  # batch broadcast from 1 (check_qk allows it)
        batch = max(q.shape[0], k.shape[0])
        q, k, v = (t.expand(batch, *t.shape[1:]) for t in (q, k, v))
    b, h, tq, _ = q.shape
    tk = k.shape[-2]
    q_doc = k_doc = None
    if document_ids is not None:
        q_doc, k_doc = resolve_document_ids(document_ids, q_document_ids, tq, tk, b)
        if q_positions is None and k_positions is None and not isinstance(encoding, PositionState):
            # Each document is encoded as if it were alone: positions restart in each one.
            k_positions = document_positions(k_doc)
            if q_document_ids is None:
                q_positions = k_positions[..., tk - tq :]
        placed = q_document_ids is None or q_positions is not None or isinstance(encoding, PositionState)
        hooks = getattr(encoding, "overridden_hooks", frozenset[str]()) - {"encode_input"}
        if not placed and (causal or window is not None or hooks):
            # (queries given their own documents are not the last tq keys, which default positions take them for)
            raise ValueError(
                f"q_document_ids places the {tq} queries apart from the keys, but their positions are not given: "
                "pass q_positions and k_positions (e.g. posenc.document_positions of the whole sequence)"
            )
    elif q_document_ids is not None:
        raise ValueError("q_document_ids was given without document_ids (the keys' document ids)")
    state = _state(encoding, q, k, q_positions, k_positions)
    if state.bias_heads is not None:
        # Every path, the Toeplitz one too (it never calls the hooks with q), before any chunk (whose
        # shape the hooks would name): never broadcast a bias built for another number of heads.
        check_bias_qk(q, k, state.bias_heads)
    if not qk_encoded:
        q, k = state.encode_qk(q, k)
    if (amp := autocast_dtype(q.device, q.dtype)) is not None:
        # As autocast would hand them to SDPA (which runs outside it: a float32 bias stays float32, the Toeplitz
        # view is not copied whole), after the encoding rotated or scaled them in their own dtype.
        q, k, v = q.to(amp), k.to(amp), v.to(amp)
    dtype = mask_dtype(q)
    if sinks is not None and state.bias_form == "key" and getattr(state.encoding, "key_only_formula", False):
        raise ValueError(
            f"sinks with a causal {type(state.encoding).__name__}, whose bias is read at each key (relative to no "
            "query): a sink logit would be weighed against rows shifted by their positions; no Falcon model has "
            "sinks: use ALiBi with the slopes over sqrt(head_dim) for a sink's relative form"
        )
    if sinks is not None or dtype.itemsize < 4:
        # A key-only bias differs from the full one by a constant per query row, which the softmax
        # ignores but a sink's logit does not: the sinks need the full bias. Cast to half precision
        # (a GPU kernel's mask dtype) its values, large far from the last query, lose the steps
        # between neighbouring keys (ALiBi, t=2048, bfloat16: outputs off by 3.6); the full form's
        # are exact near every diagonal.
        state = _full_bias(state)
    if state.causal_only and not causal:
        name = type(state.encoding).__name__
        raise ValueError(
            f"causal=False, but this {name} is exact only in causal attention: {state.causal_only_reason}"
        )
    # Explicit positions in the rules only where a side is not the default range.
    q_start, k_start, masks = state.q_start, state.k_start, causal or window is not None
    offset = None if q_start is None or k_start is None else q_start - k_start
    explicit = masks and offset is None
    # The rules align the queries' end with the keys' by index, but an encoding's default positions put both
    # from 0: the distances it encodes would be off by tq - tk. (A multi-axis encoding given positions starts
    # its keys' token indices at tq - tk: aligned.)
    if masks and offset is not None and encoding is not None and offset > tk - tq:
        raise ValueError(
            f"{'causal=True' if causal else f'window={window}'} with more queries ({tq}) than keys ({tk}) at "
            "default positions, where the mask aligns the last query with the last key but the encoding puts "
            "both at 0 first; pass q_positions and k_positions (e.g. arange(tq) and arange(tk) + tq - tk)"
        )
    qp, kp = (state.q_positions.to(q.device), state.k_positions.to(q.device)) if explicit else (None, None)
    if masks and q_start is not None and k_start is not None and q_start - k_start < tk - tq:
        # Queries that are not the last ones (a narrowed state's block): masked by the tokens' indices.
        qp = torch.arange(q_start, q_start + tq, device=q.device)
        kp = torch.arange(k_start, k_start + tk, device=q.device)
    # One decoding query at default positions is the last one: it sees every key, no causal mask is needed.
    last = tq == 1 and qp is None and q_doc is None and window is None
    vis = Visibility(tq, tk, q.device, attn_mask, causal and not last, window, qp, kp, q_doc, k_doc)
    form = state.bias_form
    budget = BIAS_BUDGET_BYTES.get(q.device.type, BIAS_BUDGET_BYTES["cpu"])
    if state.has_value_term:
        if backend == "flex":
            raise ValueError(
                f"backend='flex' cannot apply the value term of {type(state.encoding).__name__} (it needs "
                f"the attention weights); use backend='auto'"
            )
        rows = chunk_size or max(1, budget // max(1, b * h * tk * 4))  # float32 weights
        return weighted_attention(q, k, v, state, vis, soft, rows)
    if backend == "flex":
        if sinks is None or lse_supported(q.device):
            return flex_attention_path(q, k, v, state, vis, soft)
        backend = "auto"  # sinks need FlexAttention's log-sum-exp, which the CPU kernel cannot return

    tracing = is_compiling()
    half_cast = q.dtype in (torch.float16, torch.bfloat16) and dtype == q.dtype and form != "none"
    if vis.user is None and vis.ranged and backend != "sdpa" and not half_cast:
        values = None
        if form != "none":
            values = state.bias_by_distance(dtype)
        elif window is not None:  # a window is a function of the distance too: zeros, -inf outside it
            values = q.new_zeros(1, tq + tk - 1, dtype=dtype)
        # Traced, a learned bias takes the dense path: as_strided's backward specialises lengths.
        if values is not None and not (tracing and values.requires_grad and torch.is_grad_enabled()):
            # Chunks read only the keys they see; with sinks each chunk's mask is materialised: chunks bound it.
            rows = (chunk_size or TOEPLITZ_CHUNK) if vis.positional or sinks is not None else tq
            return _toeplitz(q, k, v, values, vis, soft, rows, budget)
    # "auto" takes chunks where a dense mask (the bias, or a padding, document or window mask joined
    # with the causal one) would pass the budget; a user's mask alone is dense already. Traced: one call.
    scratch = state.bias_scratch
    per_head = form != "none" or sinks is not None  # with sinks the mask is a float one per head
    dense_bytes = b * ((h if per_head else 1) + scratch) * tq * tk * dtype.itemsize
    large = dense_bytes > budget and (per_head or vis.structural or (vis.causal and vis.user is not None))
    if not tracing and backend == "auto" and not large:
        breaks = vis.document_breaks  # (none where reading the ids would sync: on the CPU alone)
        large = bool(breaks) and tq >= DOCUMENT_CHUNK_MIN_ROWS * (len(breaks) + 1)
    if not tracing and (backend == "chunked" or (backend == "auto" and large)):
        # The default chunk: one chunk's dense mask within the budget.
        rows = chunk_size or max(1, budget // max(1, b * (h + scratch) * tk * dtype.itemsize))
        if form == "key" and qp is not None and _far_apart(qp, rows):
            state = _full_bias(state)
        return sdpa_attention(q, k, v, state, vis, soft, rows)
    return sdpa_attention(q, k, v, _full_bias(state, needed=False), vis, soft, None)


def _far_apart(positions: Tensor, rows: int) -> bool:
    """Whether a chunk of ``rows`` queries at ``positions`` ``(tq,)``/``(b, tq)`` spans more than ``rows``
    positions, where a key-only bias loses the steps between neighbouring keys of its farthest rows (a
    context-parallel shard's two halves; 1e-2 off at 1e6 positions apart). Read where :func:`can_sync`
    allows it; elsewhere (the read would sync) every chunk is taken as far apart."""
    if not can_sync(positions):
        return True
    tq = positions.shape[-1]
    if positions.numel() == 0:  # no queries (or an empty batch): nothing to lose
        return False
    last = positions[..., -1:].expand(*positions.shape[:-1], -tq % rows)  # the last chunk filled up
    chunks = torch.cat((positions, last), -1).unflatten(-1, (-1, rows))
    return bool((chunks.amax(-1) - chunks.amin(-1)).max() >= rows)


def _full_bias(state: PositionState, needed: bool = True) -> PositionState:
    """``state`` with its bias in the full form where it would take the key-only one.

    The key-only form (ALiBi's ``slope * (k - last query)``) serves query chunks, whose values stay
    small near each chunk's last query; over all queries at once they grow with the length and lose
    the steps between neighbouring keys (float32, t=4096: outputs off by 1e-4 against 8e-7 chunked).
    """
    if state.bias_form != "key":
        return state
    encoding = state.encoding
    # A subclass's own hook gives the bias (key-only, as its parent's): all queries at once, as exact as it is.
    if encoding._generic_state and type(state) is encoding._generic_state_class:
        if not needed:
            return state
        # The posenc class the user's encoding derives from.
        builtin = next(c.__name__ for c in type(encoding).__mro__ if c.__module__.startswith("posenc."))
        raise ValueError(
            f"{type(encoding).__name__} overrides a hook of a causal {builtin}, whose bias "
            "is key-only (relative to the last query), and this call needs the full one (sinks, a float16 or "
            "bfloat16 call, autocast's too, or queries far apart in a chunk): change bias_fn instead of the hook, "
            "or call with float32 inputs outside autocast and no sinks"
        )
    state = copy.copy(state)
    state.bias_form = "full"
    return state


def _check_inputs(q: Tensor, k: Tensor, v: Tensor, encoding: Encoding, attn_mask: Tensor | None) -> None:
    """The tensor checks of :func:`attention`, each error naming the argument and the value (devices: in
    :func:`attention`; the options and ``sinks``: :func:`_check_options`)."""
    check_qk(q, k)
    check_float_tensor("v", v, rank=4, shape="(batch, heads, seq, head_dim)")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k and v must have the same dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}")
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(
            f"v must have shape (batch, kv_heads, seq_k, head_dim_v) matching k's first three dims "
            f"{tuple(k.shape[:3])}, got v {tuple(v.shape)}"
        )
    if encoding is not None and not isinstance(encoding, (PositionalEncoding, PositionState)):
        raise TypeError(
            f"encoding must be a posenc.PositionalEncoding, a PositionState from its prepare(), or None "
            f"(use posenc.build(spec, ...) for a config string), got {type(encoding).__name__}"
        )
    if attn_mask is not None:
        if not isinstance(attn_mask, Tensor):
            raise TypeError(
                f"attn_mask must be a boolean torch.Tensor (True = attend), got {type(attn_mask).__name__}"
            )
        if attn_mask.dtype != torch.bool:
            raise TypeError(
                f"attn_mask must be a boolean keep-mask (True = attend), got dtype {attn_mask.dtype}; "
                f"for a (batch, seq_k) padding mask pass attention_mask.bool()[:, None, None, :]"
            )
        target = (max(q.shape[0], k.shape[0]), q.shape[1], q.shape[2], k.shape[2])
        shape = tuple(attn_mask.shape)
        # Exactly 4-D: a 2-D mask is ambiguous ((batch, seq_k) padding or (seq_q, seq_k)?) when
        # batch == seq_q, and reading it the wrong way gives silently wrong outputs.
        if len(shape) != 4 or any(m not in (1, t) for m, t in zip(shape, target, strict=True)):
            raise ValueError(
                f"attn_mask must be 4-D, (batch|1, heads|1, seq_q|1, seq_k) broadcastable to {target}, "
                f"got shape {shape}; pass a (batch, seq_k) padding mask as mask[:, None, None, :] and a "
                f"(seq_q, seq_k) mask as mask[None, None]"
            )


def _check_options(soft: Softmax, backend: str, chunk_size: int | None, heads: int) -> None:
    """The option checks of :func:`attention` (``soft.sinks``: type and shape only, no host sync; ``heads``:
    the queries')."""
    scale, dropout_p, sinks = soft
    if not is_real(dropout_p) or not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be a float in [0, 1), got {dropout_p!r}")
    if scale is not None and (not is_real(scale) or not math.isfinite(scale) or scale <= 0):
        raise ValueError(f"scale must be None or a positive finite float, got {scale!r}")
    check_choice("backend", backend, ("auto", "sdpa", "chunked", "flex"))
    if chunk_size is not None and (
        not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size <= 0
    ):
        raise ValueError(f"chunk_size must be None or a positive int, got {chunk_size!r}")
    if sinks is not None and (not isinstance(sinks, Tensor) or not sinks.is_floating_point()):
        kind = f"dtype {sinks.dtype}" if isinstance(sinks, Tensor) else type(sinks).__name__
        raise TypeError(f"sinks must be None or a float tensor of shape (heads,), got {kind}")
    if sinks is not None and tuple(sinks.shape) != (heads,):
        raise ValueError(
            f"sinks must have shape (heads,) = ({heads},), one logit per query head, got {tuple(sinks.shape)}"
        )


def _state(
    encoding: Encoding, q: Tensor, k: Tensor, q_positions: Tensor | None, k_positions: Tensor | None
) -> PositionState:
    """The position state of this call: the one given, or the encoding's (NoPE's for none), prepared here."""
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
    return (_NOPE if encoding is None else encoding).prepare(
        tq, tk, q_positions=q_positions, k_positions=k_positions, batch=q.shape[0], device=q.device
    )
