"""Rotary position embedding (RoPE, Su et al., 2021): the angles and the rotation. No state.

* :func:`rope_cos_sin` — cos and sin of ``position * inv_freq`` (times an attention factor);
* :func:`rotary_reference` — the rotation as the paper writes it, in both layouts: ``"half"``
  (GPT-NeoX, Hugging Face Llama's ``rotate_half``) and ``"interleaved"`` (GPT-J, RoFormer,
  Meta Llama's complex form);
* :func:`apply_rotary` — the checked entry point: partial rotation, and in eager mode the same
  rotation in fewer passes over memory.

The frequencies and the Hugging Face scaling dicts live in :mod:`posenc.functional.rope_scaling`;
their names are re-exported here.

Shape key: ``b`` batch, ``h`` heads, ``t`` sequence, ``dh`` head width, ``r`` rotated channels
(``rotary_dim``), ``r/2`` rotated pairs.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any, Literal

import torch
from torch import Tensor

from .._compat import is_tracing
from .rope_scaling import (  # re-exported: the names used to live here
    _TYPE_KEYS,  # noqa: F401 (posenc.hf reads it from here)
    ROPE_TYPES,
    DefaultRope,
    DynamicRope,
    LinearRope,
    Llama3Rope,
    LongRope,
    RopeParameters,
    YarnRope,
    dynamic_ntk_inv_freq,
    linear_inv_freq,
    llama3_inv_freq,
    longrope_attention_factor,
    longrope_inv_freq,
    resolve_rope_scaling,
    rope_inv_freq,
    scaled_inv_freq,
    yarn_attention_factor,
    yarn_inv_freq,
)

__all__ = [
    "ROPE_TYPES",
    "DefaultRope",
    "DynamicRope",
    "LinearRope",
    "Llama3Rope",
    "LongRope",
    "RopeParameters",
    "YarnRope",
    "apply_rotary",
    "dynamic_ntk_inv_freq",
    "linear_inv_freq",
    "llama3_inv_freq",
    "longrope_attention_factor",
    "longrope_inv_freq",
    "resolve_rope_scaling",
    "rope_cos_sin",
    "rope_inv_freq",
    "rotary_reference",
    "scaled_inv_freq",
    "yarn_attention_factor",
    "yarn_inv_freq",
]

RopeLayout = Literal["half", "interleaved"]
_HALF_PRECISION = (torch.float16, torch.bfloat16)


def rope_cos_sin(
    positions: Tensor,
    inv_freq: Tensor,
    attention_scaling: float = 1.0,
    *,
    dtype: torch.dtype | None = None,
) -> tuple[Tensor, Tensor]:
    """``cos`` and ``sin`` of the angles ``position * inv_freq``, times ``attention_scaling``.

    The angles are computed in ``inv_freq``'s dtype (pass float64 frequencies for exact
    angles at large positions) and the results rounded once to ``dtype``.

    Args:
        positions: ``(...)`` integer (or float) positions, e.g. ``(t,)`` or ``(b, t)``.
        inv_freq: ``(r/2,)`` frequencies, or ``(..., r/2)`` broadcastable against positions.
        attention_scaling: multiplied into both (YaRN / LongRoPE attention factor).
        dtype: of the results; ``None`` keeps ``inv_freq``'s.

    Returns:
        ``(cos, sin)``, each ``(..., r/2)``.
    """
    angles = positions.to(inv_freq.dtype)[..., None] * inv_freq
    cos, sin = angles.cos(), angles.sin()
    if attention_scaling != 1.0:
        cos, sin = cos * attention_scaling, sin * attention_scaling
    if dtype is not None:
        cos, sin = cos.to(dtype), sin.to(dtype)
    return computed_once(cos, sin)


def computed_once(cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """``(cos, sin)`` as two views of one ``(2, ...)`` tensor when traced, else unchanged.

    Inductor inlines a pointwise producer into each consumer's loop: the float64 cos/sin of the
    ``(t, r/2)`` angles were recomputed for every head of q and of k, 3-7x slower than the
    rotation itself (single thread, torch 2.13). A stack is a buffer inductor computes once.
    """
    if is_tracing():
        cos, sin = torch.stack((cos, sin)).unbind(0)
    return cos, sin


def rotary_reference(x: Tensor, cos: Tensor, sin: Tensor, layout: RopeLayout = "half") -> Tensor:
    """The rotation as the paper writes it: each pair ``(x1, x2) -> (x1 cos − x2 sin, x2 cos + x1 sin)``.

    Su et al., 2021, eq. 34. ``x`` is only the rotated channels (width ``r``). This is what runs
    under ``torch.compile`` and ``torch.export`` (inductor fuses it into one kernel) and what the
    eager paths of :func:`apply_rotary` are tested against.

    Args:
        x: ``(..., t, r)``.
        cos, sin: ``(..., t, r/2)``, broadcastable against ``x``'s pairs.
        layout: ``"half"`` pairs channel ``i`` with ``i + r/2``; ``"interleaved"`` pairs ``2i`` with ``2i+1``.

    Returns:
        ``(..., t, r)``, computed in the wider of ``x``'s and ``cos``'s dtypes and rounded once to ``x``'s.
    """
    wide = x.to(torch.promote_types(x.dtype, cos.dtype))
    if layout == "half":
        x1, x2 = wide.chunk(2, dim=-1)
    else:
        x1, x2 = wide.unflatten(-1, (-1, 2)).unbind(-1)
    first, second = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    out = torch.cat((first, second), -1) if layout == "half" else torch.stack((first, second), -1).flatten(-2)
    return out.to(x.dtype)


def _complex_view_ok(pairs: Tensor) -> bool:
    # view_as_complex needs unit stride inside a pair and even strides and offset elsewhere
    strides = pairs.stride()
    return bool(
        strides[-1] == 1 and pairs.storage_offset() % 2 == 0 and all(s % 2 == 0 for s in strides[:-1])
    )


def eager_tables(cos: Tensor, sin: Tensor, dtype: torch.dtype, layout: RopeLayout) -> tuple[Tensor, ...]:
    """cos/sin in the form :func:`rotate_eager` multiplies by, for inputs of ``dtype``.

    ``"half"``: ``(cos2, signed_sin)``, ``(cos, cos)`` and ``(−sin, sin)`` along the last axis in
    ``dtype``; ``"interleaved"``: ``(cis,)``, ``cos + i·sin`` in complex64 (complex128 for float64
    inputs). A :class:`~posenc.encodings.rotary.RotaryState` builds them once per dtype and reuses
    them for queries, keys and every layer.

    Args:
        cos, sin: ``(..., t, r/2)`` float32 or float64.
        dtype: the dtype of the tensors that will be rotated.
        layout: ``"half"`` or ``"interleaved"``.

    Returns:
        ``half``: two ``(..., t, r)`` tensors of ``dtype``; ``interleaved``: one ``(..., t, r/2)``.
    """
    if layout == "interleaved":
        real = torch.float64 if dtype == torch.float64 else torch.float32
        return (torch.complex(cos.to(real), sin.to(real)),)
    cos, sin = cos.to(dtype), sin.to(dtype)
    return torch.cat((cos, cos), -1), torch.cat((-sin, sin), -1)


#: Bytes of ``x`` that one piece of a multi-pass eager form covers on the CPU. The passes of a
#: piece re-read what the previous pass wrote from the cache instead of memory, and the temporaries
#: are piece-sized (reused by the allocator, no page faults): 1.1-2.6x faster forward on tensors past the
#: L2 cache (single thread, torch 2.13; ``python -m benchmarks --only rope``). Tests lower it.
PIECE_BYTES = 1 << 20


def rotate_eager(x: Tensor, tables: tuple[Tensor, ...], layout: RopeLayout) -> Tensor:
    """:func:`rotary_reference` in fewer passes over memory, for eager CPU/CUDA tensors.

    ``x`` ``(..., t, r)`` holds only the rotated channels; ``tables`` come from
    :func:`eager_tables` for ``x``'s dtype. Returns a new ``(..., t, r)`` tensor (the broadcast
    shape of ``x`` and the tables). Each form is kept because it measured faster than the reference
    and than transformers' ``apply_rotary_pos_emb`` (single-threaded CPU, torch 2.13, ``python -m
    benchmarks --only rope``).

    Under autograd the rotation is one function whose backward is the inverse rotation (the same
    forms with ``−sin``): recorded in-place writes into views made a slow backward, and the
    out-of-place forms a slow forward. Gradients of any order follow (the backward is itself this
    function). Tables that require grad, and ``torch.func`` transforms, take the reference formula.
    """
    grad = torch.is_grad_enabled()
    if _functorch_wrapped(x) or (grad and any(t.requires_grad for t in tables)):
        return rotary_reference(x, *_cos_sin(tables, layout), layout)
    if grad and x.requires_grad:
        return _Rotate.apply(x, layout, *tables)
    return _rotate(x, tables, layout)


_IS_FUNCTORCH_WRAPPED = getattr(torch._C._functorch, "is_functorch_wrapped_tensor", None)


def _functorch_wrapped(x: Tensor) -> bool:
    """Whether ``x`` is a ``torch.func`` (vmap / grad) wrapper: the ``out=`` forms do not apply."""
    return _IS_FUNCTORCH_WRAPPED is not None and bool(_IS_FUNCTORCH_WRAPPED(x))


def _cos_sin(tables: tuple[Tensor, ...], layout: RopeLayout) -> tuple[Tensor, Tensor]:
    """The ``(..., t, r/2)`` cos and sin that :func:`eager_tables` was built from."""
    if layout == "interleaved":
        return tables[0].real, tables[0].imag
    half = tables[0].shape[-1] // 2
    return tables[0][..., :half], tables[1][..., half:]


class _Rotate(torch.autograd.Function):
    """:func:`_rotate` with the inverse rotation as its backward (a rotation is orthogonal)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, layout: RopeLayout, *tables: Tensor) -> Tensor:
        ctx.layout = layout
        ctx.save_for_backward(*tables)
        return _rotate(x, tables, layout)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        tables = ctx.saved_tensors
        inverse = (tables[0].conj(),) if ctx.layout == "interleaved" else (tables[0], -tables[1])
        return (rotate_eager(grad, inverse, ctx.layout), None, *(None for _ in tables))


def _rotate(x: Tensor, tables: tuple[Tensor, ...], layout: RopeLayout) -> Tensor:
    """The eager rotation without autograd: one op, or the multi-pass forms piece by piece."""
    if layout == "interleaved" and x.dtype not in _HALF_PRECISION:
        # Pairs (2i, 2i+1) are complex numbers: one complex multiply, one pass (nothing to cut).
        (cis,) = tables
        pairs = x.to(torch.float64 if cis.dtype == torch.complex128 else torch.float32).unflatten(-1, (-1, 2))
        if not (pairs.is_contiguous() or _complex_view_ok(pairs)):
            pairs = pairs.contiguous()
        return torch.view_as_real(torch.view_as_complex(pairs) * cis).flatten(-2).to(x.dtype)
    if x.device.type != "cpu" or x.dim() < 2 or x.numel() * x.element_size() <= 2 * PIECE_BYTES:
        return _rotate_into(None, x, tables, layout)
    shape = torch.broadcast_shapes(x.shape, tables[0].shape[:-1] + x.shape[-1:])
    out = torch.empty(shape, dtype=x.dtype, device=x.device)
    x = x.expand(shape)
    for index in _pieces(shape, out.element_size(), PIECE_BYTES):
        _rotate_into(out[index], x[index], tuple(_table_piece(t, index, len(shape)) for t in tables), layout)
    return out


def _rotate_into(out: Tensor | None, x: Tensor, tables: tuple[Tensor, ...], layout: RopeLayout) -> Tensor:
    """The multi-pass forms: the rotation of ``x`` written into ``out`` (same shape), or into a
    new tensor when ``out`` is ``None``; returns it."""
    if layout == "interleaved":
        # Half precision (there is no bfloat16 complex type): a float32 copy rotated in place,
        # rounded once.
        (cis,) = tables
        work = x.to(torch.float32, memory_format=torch.contiguous_format)
        torch.view_as_complex(work.unflatten(-1, (-1, 2))).mul_(cis)
        return work.to(x.dtype) if out is None else out.copy_(work)
    cos2, signed_sin = tables
    half = cos2.shape[-1] // 2
    out = x * cos2 if out is None else torch.mul(x, cos2, out=out)
    if x.dtype in _HALF_PRECISION:
        # + partner·(−sin, sin), the partner of every channel being x rolled by r/2: full-width
        # contiguous ops (half-width strided ones are 3-10x slower in bfloat16/float16 on the CPU).
        return out.addcmul_(x.roll(half, -1), signed_sin)
    # float32/float64: ∓ the partner half times sin, added in place into each half.
    sin = signed_sin[..., half:]
    out[..., :half].addcmul_(x[..., half:], sin, value=-1)
    out[..., half:].addcmul_(x[..., :half], sin)
    return out


def _pieces(shape: torch.Size, itemsize: int, piece_bytes: int) -> Iterator[tuple[int | slice, ...]]:
    """Indices that cut a tensor of ``shape`` ``(..., t, r)`` into blocks of about ``piece_bytes``.

    The outer axes are taken one index at a time, the axis where a block reaches ``piece_bytes``
    in ranges, the inner axes whole; rows (the last axis) are never cut.
    """
    block = itemsize * shape[-1]  # bytes of everything inside the axis being considered
    axis = len(shape) - 2
    while axis > 0 and block * shape[axis] <= piece_bytes:
        block *= shape[axis]
        axis -= 1
    step = max(1, piece_bytes // block)
    for outer in itertools.product(*(range(n) for n in shape[:axis])):
        for start in range(0, shape[axis], step):
            yield (*outer, slice(start, start + step))


def _table_piece(table: Tensor, index: tuple[int | slice, ...], ndim: int) -> Tensor:
    """The part of ``table`` (broadcastable against an ``ndim``-d tensor) that lines up with ``index``."""
    table = table.reshape((1,) * (ndim - table.dim()) + tuple(table.shape))
    lined_up = tuple(
        (0 if isinstance(i, int) else slice(None)) if size == 1 else i
        for i, size in zip(index, table.shape, strict=False)
    )
    return table[lined_up]


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor, layout: RopeLayout = "half") -> Tensor:
    """Rotate the first ``r = 2 * cos.shape[-1]`` channels of ``x``; the rest pass through.

    ``layout="half"`` pairs channel ``i`` with ``i + r/2`` (GPT-NeoX, Hugging Face Llama);
    ``"interleaved"`` pairs ``2i`` with ``2i + 1`` (GPT-J, RoFormer, Meta Llama). The layout
    applies within the rotated channels, as GPT-NeoX and GPT-J do for partial rotation.

    Precision: cos and sin should be float32 (or float64), computed from float64 angles (see
    :func:`rope_cos_sin`). Under ``torch.compile``/``torch.export`` the rotation is computed in
    float32 and rounded once; in eager mode a half-precision ``x`` may be rotated in its own
    dtype, whose error stays within transformers' on the same inputs (tested).

    Args:
        x: ``(b, h, t, dh)`` (or any ``(..., t, dh)``).
        cos, sin: ``(t, r/2)``, ``(b, 1, t, r/2)`` or anything broadcastable against
            ``(..., t, r/2)``: one angle per pair, not duplicated to width ``r``.
        layout: ``"half"`` or ``"interleaved"``.

    Returns:
        ``(..., t, dh)`` (the broadcast shape of ``x`` and the angles), same dtype as ``x``.

    Raises:
        TypeError: a non-floating ``x``, ``cos`` or ``sin``.
        ValueError: ``r`` larger than ``dh``, cos and sin of different shapes, an unknown layout.
    """
    if layout not in ("half", "interleaved"):
        raise ValueError(f"layout must be 'half' or 'interleaved', got {layout!r}")
    for name, t in (("x", x), ("cos", cos), ("sin", sin)):
        if not isinstance(t, Tensor) or not t.is_floating_point():
            got = t.dtype if isinstance(t, Tensor) else type(t).__name__
            raise TypeError(f"{name} must be a floating-point torch.Tensor, got {got}")
    if cos.shape != sin.shape:
        raise ValueError(
            f"cos and sin must have the same shape, got {tuple(cos.shape)} and {tuple(sin.shape)}"
        )
    rot = 2 * cos.shape[-1]
    if rot > x.shape[-1]:
        raise ValueError(
            f"cos/sin rotate {rot} channels (2 × {cos.shape[-1]} pairs) but x has only {x.shape[-1]}"
        )
    return _apply(x, cos, sin, layout)


def _apply(x: Tensor, cos: Tensor, sin: Tensor, layout: RopeLayout) -> Tensor:
    """:func:`apply_rotary` without the argument checks (for callers that made them)."""
    if not eager_ok(x):
        x = _broadcast(x, cos)
        return _with_rest(x, rotary_reference(x[..., : 2 * cos.shape[-1]], cos, sin, layout))
    return apply_tables(x, eager_tables(cos, sin, x.dtype, layout), layout)


def eager_ok(x: Tensor) -> bool:
    """Whether ``x`` takes the eager forms (:func:`rotate_eager`): not traced, on the CPU or a
    CUDA device, not empty. Elsewhere :func:`rotary_reference` runs."""
    return not is_tracing() and x.device.type in ("cpu", "cuda") and x.numel() > 0


def apply_tables(x: Tensor, tables: tuple[Tensor, ...], layout: RopeLayout) -> Tensor:
    """Rotate the first ``r`` channels of an eager CPU/CUDA ``x`` ``(..., t, dh)`` with the
    :func:`eager_tables` of its dtype (unchecked: the caller made the checks)."""
    x = _broadcast(x, tables[0])
    rot = tables[0].shape[-1] * (2 if layout == "interleaved" else 1)
    if rot == x.shape[-1]:
        return rotate_eager(x, tables, layout)
    return _with_rest(x, rotate_eager(x[..., :rot], tables, layout))


def _broadcast(x: Tensor, table: Tensor) -> Tensor:
    """``x`` expanded to the batch of per-row tables, e.g. per-row positions for a batch-1 tensor."""
    if table.dim() <= 2:  # (t, r/2): broadcasts over every leading axis of x
        return x
    shape = (*torch.broadcast_shapes(x.shape[:-1], table.shape[:-1]), x.shape[-1])
    return x if shape == x.shape else x.expand(shape)


def _with_rest(x: Tensor, rotated: Tensor) -> Tensor:
    """The rotated channels followed by the channels of ``x`` that pass through."""
    rot = rotated.shape[-1]
    return rotated if rot == x.shape[-1] else torch.cat((rotated, x[..., rot:]), -1)
