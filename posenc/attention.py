"""Scaled dot-product attention that applies any position encoding through its hooks.

:func:`attention` calls ``encoding.encode_qk`` (rotary encodings) and
``encoding.attention_bias`` (bias encodings) and computes attention with
:func:`torch.nn.functional.scaled_dot_product_attention` (SDPA). It never asks which
encoding it holds: the shape of the bias the encoding returns chooses the cheapest
correct path (see :func:`attention`'s docstring for the table).

Shape key: ``b`` batch, ``h`` query heads, ``h_kv`` key/value heads, ``tq`` queries,
``tk`` keys, ``dh`` head width, ``dv`` value width.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import Tensor

from .base import PositionalEncoding, _is_compiling, resolve_qk_positions

__all__ = ["Backend", "attention"]

Backend = Literal["auto", "sdpa", "chunked", "flex"]
_BACKENDS = ("auto", "sdpa", "chunked", "flex")

#: Above this many bytes for one dense float mask, eager ``backend="auto"`` works over
#: query chunks instead, so that memory stays O(chunk * tk) (64 MiB is a (8, 1448, 1448)
#: float32 bias: large enough that small and medium calls take the single SDPA call).
BIAS_BUDGET_BYTES = 64 * 2**20
#: Query rows per chunk when a half-precision bias has to be cast to the input dtype: it
#: keeps the key-only ALiBi values small near every chunk's diagonal (a slope of at most
#: ~0.7 times 64 rows stays below 45, where bfloat16 still resolves steps of 0.25).
HALF_CAST_CHUNK = 64


def _float_mask_allowed(device_type: str) -> bool:
    """Whether SDPA on this device adds a float32 mask to half-precision scores without casting it.

    The CPU kernels accept a float32 ``attn_mask`` with bfloat16/float16 queries and add it
    in float32 (measured, torch 2.13). Other devices' fused kernels want the query dtype,
    so there the bias is cast and queries are processed in chunks to keep its resolution.
    """
    return device_type == "cpu"


def _check_inputs(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    encoding: PositionalEncoding | None,
    attn_mask: Tensor | None,
    dropout_p: float,
    scale: float | None,
    backend: str,
    chunk_size: int | None,
) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(
                f"{name} must be a torch.Tensor of shape (batch, heads, seq, head_dim), got {type(t).__name__}"
            )
        if t.dim() != 4:
            raise ValueError(
                f"{name} must have shape (batch, heads, seq, head_dim), got a tensor of rank {t.dim()}: {tuple(t.shape)}"
            )
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k and v must have the same dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same head_dim, got q {tuple(q.shape)} and k {tuple(k.shape)}"
        )
    if k.shape[0] != q.shape[0]:
        raise ValueError(
            f"q and k must have the same batch size, got q {tuple(q.shape)} and k {tuple(k.shape)}"
        )
    hq, hk = q.shape[1], k.shape[1]
    if hk == 0 or hq % hk != 0:
        raise ValueError(
            f"q has {hq} heads and k has {hk}: the query heads must equal or be a multiple of the key heads "
            f"(grouped-query attention)"
        )
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(
            f"v must have shape (batch, kv_heads, seq_k, head_dim_v) matching k's first three dims "
            f"{tuple(k.shape[:3])}, got v {tuple(v.shape)}"
        )
    if encoding is not None and not isinstance(encoding, PositionalEncoding):
        raise TypeError(
            f"encoding must be a posenc.PositionalEncoding or None (use posenc.build(spec, ...) for a config "
            f"string), got {type(encoding).__name__}"
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
        target = (q.shape[0], hq, q.shape[2], k.shape[2])
        shape = tuple(attn_mask.shape)
        padded = (1,) * (4 - len(shape)) + shape
        if len(shape) > 4 or any(m not in (1, t) for m, t in zip(padded, target, strict=True)):
            raise ValueError(
                f"attn_mask must be broadcastable to (batch, heads, seq_q, seq_k) = {target}, got shape {shape}; "
                f"for a (batch, seq_k) padding mask use mask[:, None, None, :]"
            )
    if not isinstance(dropout_p, (int, float)) or isinstance(dropout_p, bool) or not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be a float in [0, 1), got {dropout_p!r}")
    if scale is not None and (
        not isinstance(scale, (int, float))
        or isinstance(scale, bool)
        or not math.isfinite(scale)
        or scale <= 0
    ):
        raise ValueError(f"scale must be None or a positive finite float, got {scale!r}")
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {list(_BACKENDS)}, got {backend!r}")
    if chunk_size is not None and (
        not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size <= 0
    ):
        raise ValueError(f"chunk_size must be None or a positive int, got {chunk_size!r}")


def _heads_differ(q: Tensor, k: Tensor) -> bool:
    """Grouped-query attention? A branch (not ``bool()``) so that dynamic shapes give a Python bool."""
    if q.shape[1] != k.shape[1]:  # a branch: it guards once under compile, bool() stays symbolic
        return True
    return False


def _causal_keep(q_start: int, q_end: int, tk: int, offset: int, device: torch.device) -> Tensor:
    """Bottom-right aligned causal keep-mask ``(q_end - q_start, tk)``: query row i sees keys j <= i + offset."""
    rows = torch.arange(q_start, q_end, device=device).unsqueeze(-1)
    cols = torch.arange(tk, device=device)
    return cols <= rows + offset


def _and(a: Tensor | None, b: Tensor | None) -> Tensor | None:
    if a is None:
        return b
    if b is None:
        return a
    return a & b


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
    gqa = _heads_differ(q, k)
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


def _mask_dtype(q: Tensor) -> torch.dtype:
    """The dtype biases are handed to SDPA in: float32 (float64 for float64 q) where the kernel allows it."""
    if q.dtype == torch.float64:
        return torch.float64
    if q.dtype in (torch.float16, torch.bfloat16) and not _float_mask_allowed(q.device.type):
        return q.dtype
    return torch.float32


def _slice_keep(user_keep: Tensor | None, qs: slice, ks: slice) -> Tensor | None:
    if user_keep is None:
        return None
    # Broadcast (size-1) dims stay size 1: only real dims are sliced.
    rows = qs if user_keep.shape[-2] != 1 else slice(None)
    cols = ks if user_keep.shape[-1] != 1 else slice(None)
    return user_keep[..., rows, cols]


def _chunked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    encoding: PositionalEncoding | None,
    q_positions: Tensor,
    k_positions: Tensor,
    user_keep: Tensor | None,
    causal: bool,
    dropout_p: float,
    scale: float | None,
    chunk: int,
) -> Tensor:
    """Attention over query chunks: the bias and mask of one chunk at a time, O(chunk * tk) memory.

    Each chunk asks the encoding for its bias at the chunk's own query positions (so a
    key-only ALiBi form is small near that chunk's diagonal), and with ``causal`` it only
    reads the keys its last query can see. When gradients are needed each chunk is
    checkpointed: its bias is recomputed in the backward pass instead of being kept for it
    (SDPA would otherwise save every chunk's mask, O(tq * tk) memory in all).
    """
    tq, tk = q.shape[-2], k.shape[-2]
    offset = tk - tq
    mask_dtype = _mask_dtype(q)
    needs_grad = torch.is_grad_enabled() and (
        q.requires_grad
        or k.requires_grad
        or v.requires_grad
        or (encoding is not None and any(p.requires_grad for p in encoding.parameters()))
    )
    causal_only = causal and user_keep is None  # the only masked entries are above the diagonal
    outs = []
    for start in range(0, tq, chunk):
        end = min(start + chunk, tq)
        k_end = min(tk, end + offset) if causal else tk
        if k_end <= 0:  # causal with more queries than keys: these queries see nothing
            outs.append(q.new_zeros(q.shape[0], q.shape[1], end - start, v.shape[-1]))
            continue
        qs, ks = slice(start, end), slice(0, k_end)
        args = (q[:, :, qs], k[:, :, ks], v[:, :, ks], q_positions[..., qs], k_positions[..., ks])
        keep = _slice_keep(user_keep, qs, ks)
        if causal:
            keep = _and(keep, _causal_keep(start, end, k_end, offset, q.device))

        def one_chunk(q_c, k_c, v_c, qp, kp, keep=keep):
            return _chunk_attention(
                q_c, k_c, v_c, qp, kp, encoding, keep, causal_only, dropout_p, scale, mask_dtype
            )

        if needs_grad:
            outs.append(torch.utils.checkpoint.checkpoint(one_chunk, *args, use_reentrant=False))
        else:
            outs.append(one_chunk(*args))
    return torch.cat(outs, dim=2)


def _chunk_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_positions: Tensor,
    k_positions: Tensor,
    encoding: PositionalEncoding | None,
    keep: Tensor | None,
    causal_only: bool,
    dropout_p: float,
    scale: float | None,
    mask_dtype: torch.dtype,
) -> Tensor:
    """One chunk of :func:`_chunked`; ``keep`` already holds the chunk's causal mask.

    ``causal_only``: ``keep`` is nothing but the (bottom-right) causal mask.
    """
    bias = None if encoding is None else encoding.attention_bias(q, k, q_positions, k_positions)
    rows, cols = q.shape[-2], k.shape[-2]
    if causal_only and bias is not None and cols >= rows:
        # Only the causal mask: its masked entries all lie in the last ``rows`` keys (the
        # diagonal block), so a fresh bias is filled there in place instead of copied whole.
        bias = bias.to(mask_dtype)
        if _writable(bias, encoding, rows, cols):
            bias[..., cols - rows :].masked_fill_(~keep[:, cols - rows :], float("-inf"))
            gqa = _heads_differ(q, k)
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


def _writable(bias: Tensor, encoding: PositionalEncoding | None, rows: int, cols: int) -> bool:
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
    if encoding is not None:
        for t in (*encoding.parameters(), *encoding.buffers()):
            if t.untyped_storage().data_ptr() == owned:
                return False
    return True


def _bias_form(
    encoding: PositionalEncoding | None, q: Tensor, k: Tensor, q_positions: Tensor, k_positions: Tensor
) -> tuple[Literal["none", "key", "full"], Tensor | None]:
    """Ask the encoding for the bias of its first two queries to learn which form it returns.

    Returns ``("none", None)``, ``("key", None)`` for a query-independent ``(.., 1, tk)``
    form, or ``("full", probe)`` (the probe is the whole bias when ``tq <= 2``).
    """
    if encoding is None:
        return "none", None
    n = min(q.shape[-2], 2)
    probe = encoding.attention_bias(q[:, :, :n], k, q_positions[..., :n], k_positions)
    if probe is None:
        return "none", None
    if n == 2 and probe.shape[-2] == 1:
        return "key", None
    return "full", probe if n == q.shape[-2] else None


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    encoding: PositionalEncoding | None = None,
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
) -> Tensor:
    """Scaled dot-product attention with a position encoding applied through its hooks.

    Computes ``softmax(q' k'ᵀ · scale + bias + mask) v`` where ``q', k' =
    encoding.encode_qk(q, k, ...)`` and ``bias = encoding.attention_bias(q', k', ...)``, with
    :func:`torch.nn.functional.scaled_dot_product_attention` doing the work. Works for every
    encoding kind: additive and ``"none"`` encodings act nowhere here, rotary ones rotate
    ``q``/``k``, bias ones add their bias.

    Which path runs (eager; under ``torch.compile`` the single-call paths always run, so that
    the graph has no data- or size-dependent Python branches):

    ============================================  =================================================
    case                                          path
    ============================================  =================================================
    no bias, no ``attn_mask``, causal, tq == tk    SDPA's own ``is_causal`` (flash kernel)
    causal with tq == 1 (one decoding step)        no causal mask at all (the query is the last)
    no bias, causal with 1 < tq != tk              a boolean bottom-right ``(tq, tk)`` mask
    bias of key-only form ``(.., 1, tk)`` (causal  one SDPA call with the ``(1|b, h, 1, tk)`` bias as
    ALiBi), causal, tq == tk, no ``attn_mask``,    ``attn_mask`` plus ``is_causal=True``: nothing of
    CPU                                            size ``tq·tk`` is built (a backend that refuses
                                                   the pair falls back to an explicit mask)
    any other bias whose dense mask fits in        one SDPA call with a float mask (bias, ``-inf``
    :data:`BIAS_BUDGET_BYTES` (64 MiB)             where masked)
    a larger dense mask (T5 at long length,        query chunks: per chunk the encoding's bias at
    causal ALiBi with a padding mask, ...)         the chunk's positions and only the keys the chunk
                                                   can see; memory O(chunk·tk); with gradients each
                                                   chunk is checkpointed (bias recomputed in backward)
    ``backend="flex"``                             FlexAttention with the encoding's ``score_mod``
                                                   (compiled, inference only on the CPU)
    ============================================  =================================================

    ``backend="sdpa"`` forces the single call, ``"chunked"`` the query chunks. The
    FlexAttention path is opt-in, never chosen by ``"auto"``: its first call compiles
    (~15 s on a CPU; once per process, and once per shape when ``attn_mask`` is given), and
    it has no CPU backward; the chunked path trains.

    Biases are handed to SDPA in float32 (float64 for float64 inputs) where the kernel adds
    a float32 mask to half-precision scores (the CPU kernels do); elsewhere the bias is cast
    to the input dtype and, for half precision, queries run in chunks of
    :data:`HALF_CAST_CHUNK` with the bias asked per chunk, so that its values near each
    chunk's diagonal stay small and keep their resolution far out (positions ~100k).

    Causal masking is by index and bottom-right aligned: with ``tq < tk`` (decoding with a
    KV cache) the queries are the *last* ``tq`` of the keys, so query ``i`` sees keys
    ``j <= i + tk - tq`` (SDPA's own ``is_causal`` is top-left aligned when ``tq != tk``;
    this function never uses it then). Query rows that can see no key at all (padding
    queries) return zeros, never NaN.

    Args:
        q: ``(b, h, tq, dh)`` queries.
        k: ``(b, h_kv, tk, dh)`` keys; ``h`` must be a multiple of ``h_kv`` (grouped-query
            attention, handled by SDPA without copying the keys).
        v: ``(b, h_kv, tk, dv)`` values.
        encoding: a :class:`~posenc.PositionalEncoding` (e.g. from :func:`posenc.build`), or
            ``None`` for none.
        causal: mask keys after each query (bottom-right aligned, see above).
        q_positions, k_positions: integer positions ``(t,)`` or ``(b, t)``; defaults: keys
            ``0..tk-1``, queries the last ``tq`` of them (:func:`posenc.base.resolve_qk_positions`).
        attn_mask: boolean keep-mask (``True`` = attend) broadcastable to ``(b, h, tq, tk)``;
            a ``(b, tk)`` padding mask is passed as ``mask[:, None, None, :]``.
        dropout_p: dropout on the attention weights (pass 0 at evaluation).
        scale: score scale; ``None`` means ``1 / sqrt(dh)``.
        qk_encoded: ``q`` and ``k`` already went through ``encoding.encode_qk`` (e.g. keys kept
            rotated in a KV cache); only the bias is applied.
        backend: ``"auto"`` (the table above), ``"sdpa"``, ``"chunked"`` or ``"flex"``.
        chunk_size: query rows per chunk on the chunked path; ``None`` picks the largest that
            keeps one chunk's mask within :data:`BIAS_BUDGET_BYTES`.

    Returns:
        ``(b, h, tq, dv)``, the dtype of ``q``.

    Raises:
        TypeError: a non-tensor, non-float or mixed-dtype input, a non-boolean ``attn_mask``,
            or an ``encoding`` that is not a :class:`~posenc.PositionalEncoding`.
        ValueError: wrong ranks, mismatched shapes (``v`` vs ``k``, heads, head width, batch),
            an ``attn_mask`` that does not broadcast, bad ``dropout_p``/``scale``/``backend``/
            ``chunk_size``, or ``backend="flex"`` where it cannot run.
    """
    _check_inputs(q, k, v, encoding, attn_mask, dropout_p, scale, backend, chunk_size)
    q_positions, k_positions = resolve_qk_positions(q, k, q_positions, k_positions)
    if encoding is not None and not qk_encoded:
        q, k = encoding.encode_qk(q, k, q_positions, k_positions)
    if backend == "flex":
        return _flex(q, k, v, encoding, q_positions, k_positions, attn_mask, causal, scale)

    b, h, tq, _ = q.shape
    tk = k.shape[-2]
    if causal and tq == 1:
        # One decoding query is the last position: it sees every key, no mask is needed.
        causal = False
    mask_dtype = _mask_dtype(q)
    elem = torch.finfo(mask_dtype).bits // 8
    # A causal square call with no user mask is SDPA's own causal path (no mask tensor at all).
    square_causal = causal and tq == tk and attn_mask is None

    if _is_compiling() or backend == "sdpa":
        bias = None if encoding is None else encoding.attention_bias(q, k, q_positions, k_positions)
        return _single(
            q, k, v, bias, attn_mask, causal, square_causal, dropout_p, scale, mask_dtype, eager=False
        )

    form, probe = _bias_form(encoding, q, k, q_positions, k_positions)
    half_cast = q.dtype in (torch.float16, torch.bfloat16) and mask_dtype == q.dtype and form != "none"
    if form == "none":
        use_chunks = backend == "chunked"
    elif form == "key" and square_causal and q.device.type == "cpu":
        use_chunks = backend == "chunked" or (half_cast and tq > HALF_CAST_CHUNK)
    else:
        dense_bytes = b * h * tq * tk * elem
        use_chunks = (
            backend == "chunked" or dense_bytes > BIAS_BUDGET_BYTES or (half_cast and tq > HALF_CAST_CHUNK)
        )
    if not use_chunks:
        if form == "none":
            bias = None
        elif probe is not None:
            bias = probe
        else:
            bias = encoding.attention_bias(q, k, q_positions, k_positions)
        return _single(
            q, k, v, bias, attn_mask, causal, square_causal, dropout_p, scale, mask_dtype, eager=True
        )

    if chunk_size is None:
        chunk_size = max(1, BIAS_BUDGET_BYTES // max(1, b * h * tk * elem))
        if half_cast:
            chunk_size = min(chunk_size, HALF_CAST_CHUNK)
    user_keep = None if attn_mask is None else attn_mask
    return _chunked(
        q, k, v, encoding, q_positions, k_positions, user_keep, causal, dropout_p, scale, chunk_size
    )


def _single(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    bias: Tensor | None,
    attn_mask: Tensor | None,
    causal: bool,
    square_causal: bool,
    dropout_p: float,
    scale: float | None,
    mask_dtype: torch.dtype,
    *,
    eager: bool,
) -> Tensor:
    """One SDPA call: SDPA's causal path where it is exact, else an explicit mask."""
    tq, tk = q.shape[-2], k.shape[-2]
    if square_causal and (bias is None or (bias.shape[-2] == 1 and q.device.type == "cpu")):
        kwargs = {"bias": bias, "keep": None, "fused_causal": True, "dropout_p": dropout_p, "scale": scale}
        if not eager:
            return _sdpa(q, k, v, mask_dtype=mask_dtype, **kwargs)
        try:
            return _sdpa(q, k, v, mask_dtype=mask_dtype, **kwargs)
        except RuntimeError:
            # ``attn_mask`` with ``is_causal=True`` is undocumented; a backend that refuses it
            # (the math backend does) gets the explicit mask below instead.
            if bias is None:
                raise
    keep = attn_mask
    if causal:
        keep = _and(keep, _causal_keep(0, tq, tk, tk - tq, q.device))
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


# --- FlexAttention (opt-in) -------------------------------------------------------------------

_COMPILED_FLEX: dict[bool, Callable] = {}


def _compiled_flex(dynamic: bool) -> Callable:
    """``flex_attention`` compiled once per process (and per ``dynamic``).

    ``dynamic=True`` reuses one kernel for every length. With a captured mask tensor the
    CPU kernel fails to build with dynamic shapes (torch 2.13: a C++ compile error in the
    generated code), so masked calls use static shapes: one compile per new shape.
    """
    if dynamic not in _COMPILED_FLEX:
        from torch.nn.attention.flex_attention import flex_attention

        _COMPILED_FLEX[dynamic] = torch.compile(flex_attention, dynamic=dynamic)
    return _COMPILED_FLEX[dynamic]


def _flex(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    encoding: PositionalEncoding | None,
    q_positions: Tensor,
    k_positions: Tensor,
    attn_mask: Tensor | None,
    causal: bool,
    scale: float | None,
) -> Tensor:
    """FlexAttention with the encoding's ``score_mod``: no ``(h, tq, tk)`` tensor is stored."""
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    if encoding is not None:
        needs_grad = needs_grad or (
            torch.is_grad_enabled() and any(p.requires_grad for p in encoding.parameters())
        )
    if needs_grad and q.device.type == "cpu":
        raise ValueError(
            "backend='flex' cannot run with gradients on the CPU (FlexAttention has no CPU backward); "
            "use backend='auto' or 'chunked' for training, or wrap the call in torch.no_grad()"
        )
    mod = None if encoding is None else encoding.score_mod(q, k, q_positions, k_positions)
    if mod is None and encoding is not None and encoding.attention_bias(q[:, :, :1], k[:, :, :1]) is not None:
        raise ValueError(
            f"backend='flex' needs an encoding with a score_mod; {type(encoding).__name__} returns None "
            f"from score_mod(); use backend='auto'"
        )
    tq, tk = q.shape[-2], k.shape[-2]
    offset = tk - tq
    keep = None
    if attn_mask is not None:
        # 4-D, indexed with 0 on its broadcast dims (an expanded capture is not needed).
        keep = attn_mask.reshape((1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape))
    broadcast = [keep is not None and keep.shape[i] == 1 for i in range(4)]

    def score_mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        if mod is not None:
            score = mod(score, b, h, q_idx, kv_idx)
        if causal:
            # A where, not a block mask: a BlockMask's mask_mod (like a captured mask tensor)
            # fails to build in the dynamic-shape CPU kernel of torch 2.13.
            score = torch.where(kv_idx <= q_idx + offset, score, float("-inf"))
        if keep is not None:
            idx = [
                torch.zeros_like(i) if one else i
                for i, one in zip((b, h, q_idx, kv_idx), broadcast, strict=True)
            ]
            score = torch.where(keep[idx[0], idx[1], idx[2], idx[3]], score, float("-inf"))
        return score

    flex = _compiled_flex(dynamic=keep is None)
    if _is_compiling():
        from torch.nn.attention.flex_attention import flex_attention as flex
    gqa = _heads_differ(q, k)
    out = flex(q, k, v, score_mod=score_mod, scale=scale, enable_gqa=gqa)
    # A query row that sees no key comes out as NaN or garbage: set it to zero like the other paths.
    if causal or keep is not None:
        dead = None
        if keep is not None:
            dead = ~keep.any(dim=-1, keepdim=True)
        if causal and tq > tk:
            rows = torch.arange(tq, device=q.device).view(tq, 1) + offset < 0
            dead = rows if dead is None else dead | rows
        if dead is not None:
            out = out.masked_fill(dead, 0.0)
    return out
