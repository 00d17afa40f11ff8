"""Rotary position embedding (RoPE, Su et al., 2021): the angles and the rotation. No state.

* :func:`rope_cos_sin` — cos and sin of ``position * inv_freq`` (times an attention factor), also
  for positions with axes (multi-axis RoPE: each pair reads one coordinate);
* :func:`rotary_reference` — the rotation as the paper writes it, in both layouts: ``"half"``
  (GPT-NeoX, Hugging Face Llama's ``rotate_half``) and ``"interleaved"`` (GPT-J, RoFormer,
  Meta Llama's complex form);
* :func:`apply_rotary` — the checked entry point: partial rotation (the first ``r`` channels, or those
  from an ``offset``), and in eager mode the same rotation in fewer passes over memory
  (:func:`rotate_eager`, with :func:`eager_rows` built once).

The frequencies live in :mod:`posenc.functional.rope_freqs` (the formulas, one dataclass per rope
type); reading a Hugging Face scaling dict is :mod:`posenc.functional.rope_scaling`. The inverse
(conjugate) rotation is the same call with ``-sin``.

Shape key: ``b`` batch, ``h`` heads, ``t`` sequence, ``dh`` head width, ``r`` rotated channels
(``rotary_dim``), ``r/2`` rotated pairs.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from .._checks import check_choice, check_int
from .._compat import is_tracing, precise_dtype

__all__ = ["apply_rotary", "rope_cos_sin", "rotary_reference"]

RopeLayout = Literal["half", "interleaved"]


def rope_cos_sin(
    positions: Tensor,
    inv_freq: Tensor,
    attention_scaling: float = 1.0,
    *,
    dtype: torch.dtype | None = None,
    axis: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """``cos`` and ``sin`` of the angles ``position * inv_freq``, times ``attention_scaling``.

    The angles are computed in ``inv_freq``'s dtype (pass float64 frequencies for exact
    angles at large positions) and the results rounded once to ``dtype``.

    Traced, they are two views of one ``(2, ...)`` tensor: inductor inlines a pointwise producer
    into each consumer's loop, and the float64 cos/sin of the ``(t, r/2)`` angles were recomputed
    for every head of q and of k, 3-7x slower than the rotation itself (single thread, torch
    2.13). A stack is a buffer inductor computes once.

    Args:
        positions: ``(...)`` integer (or float) positions, e.g. ``(t,)`` or ``(b, t)``; with
            ``axis``, coordinates ``(..., t, a)`` (multi-axis RoPE: pair ``i`` turns by
            ``coords[..., axis[i]] * inv_freq[i]``).
        inv_freq: ``(r/2,)`` frequencies, or ``(..., r/2)`` broadcastable against positions.
        attention_scaling: multiplied into both (YaRN / LongRoPE attention factor).
        dtype: of the results; ``None`` keeps ``inv_freq``'s.
        axis: ``(r/2,)`` long, the axis each pair reads; ``None`` for 1D positions.

    Returns:
        ``(cos, sin)``, each ``(..., r/2)`` (with ``axis``: ``(..., t, r/2)``).
    """
    positions = positions.to(inv_freq.dtype)
    angles = (positions[..., None] if axis is None else positions.index_select(-1, axis)) * inv_freq
    cos, sin = angles.cos(), angles.sin()
    if attention_scaling != 1.0:
        cos, sin = cos * attention_scaling, sin * attention_scaling
    if dtype is not None:
        cos, sin = cos.to(dtype), sin.to(dtype)
    if is_tracing():
        cos, sin = torch.stack((cos, sin)).unbind(0)
    return cos, sin


def rotary_reference(
    x: Tensor, cos: Tensor, sin: Tensor, layout: RopeLayout = "half", *, offset: int = 0
) -> Tensor:
    """The rotation as the paper writes it: each pair ``(x1, x2) -> (x1 cos − x2 sin, x2 cos + x1 sin)``.

    Su et al., 2021, eq. 34. The ``r = 2 * cos.shape[-1]`` channels from ``offset`` on rotate, the
    rest pass through. This is what runs under ``torch.compile`` and ``torch.export`` (inductor fuses
    it, with the cos/sin rows, into one kernel) and what :func:`rotate_eager` is tested against.

    Args:
        x: ``(..., t, dh)``.
        cos, sin: ``(..., t, r/2)``, broadcastable against ``x``'s pairs.
        layout: ``"half"`` pairs channel ``i`` with ``i + r/2``; ``"interleaved"`` pairs ``2i`` with ``2i+1``.
        offset: the first rotated channel (0: the head's first ``r``; ``dh - r``: its last, DeepSeek V4).

    Returns:
        ``(..., t, dh)``, computed in the wider of ``x``'s and ``cos``'s dtypes and rounded once to ``x``'s.
    """
    check_choice("layout", layout, ("half", "interleaved"))
    wide = x[..., offset : offset + 2 * cos.shape[-1]].to(torch.promote_types(x.dtype, cos.dtype))
    x1, x2 = wide.chunk(2, dim=-1) if layout == "half" else wide.unflatten(-1, (-1, 2)).unbind(-1)
    first, second = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    out = torch.cat((first, second), -1) if layout == "half" else torch.stack((first, second), -1).flatten(-2)
    return _with_rest(out.to(x.dtype), x, offset)


def eager_rows(cos: Tensor, sin: Tensor, dtype: torch.dtype, layout: RopeLayout) -> tuple[Tensor, ...]:
    """cos/sin in the form :func:`rotate_eager` multiplies by, for inputs of ``dtype``.

    ``"half"``: ``(cos, cos)`` and ``(−sin, sin)`` along the last axis, in ``dtype`` (``(..., t, r)``
    each); ``"interleaved"``: ``cos + i·sin``, complex64 (complex128 for float64 inputs),
    ``(..., t, r/2)``. A prepared state builds them once per dtype for every layer.
    """
    if layout == "interleaved":
        real = precise_dtype(dtype)
        return (torch.complex(cos.to(real), sin.to(real)),)
    cos, sin = cos.to(dtype), sin.to(dtype)
    return torch.cat((cos, cos), -1), torch.cat((-sin, sin), -1)


def rotate_eager(x: Tensor, rows: tuple[Tensor, ...], layout: RopeLayout, *, offset: int = 0) -> Tensor:
    """:func:`rotary_reference` in fewer passes over memory, for eager tensors; the rest pass through.

    ``"half"``: ``x·(cos, cos) + roll(x, r/2)·(−sin, sin)`` (the paper's eq. 34 with the partner of
    every channel), three passes in ``x``'s dtype; ``"interleaved"``: pairs as complex numbers times
    ``cos + i·sin``, one multiply in float32 (float64 for float64), rounded once. Both are plain
    autograd ops (no custom backward). Each is kept because it measured faster than transformers'
    ``apply_rotary_pos_emb`` at a decode step and a training size, forward and forward+backward
    (single thread, torch 2.13: ``python -m benchmarks.rope_floors``).

    Args:
        x: ``(..., t, dh)``.
        rows: :func:`eager_rows` for ``x``'s dtype, ``(t, ·)`` or ``(b, 1, t, ·)``.
        layout: ``"half"`` or ``"interleaved"``.
        offset: the first rotated channel, as in :func:`rotary_reference`.

    Returns:
        ``(..., t, dh)``, the broadcast shape of ``x`` and the rows, ``x``'s dtype.
    """
    rot = rows[0].shape[-1] * (1 if layout == "half" else 2)
    part = x if rot == x.shape[-1] else x[..., offset : offset + rot]  # the rotated channels, (..., t, r)
    if layout == "half":
        cos, signed_sin = rows
        out = (part * cos).addcmul_(part.roll(rot // 2, -1), signed_sin)
    else:
        # (the rows' real dtype from x's: reading rows[0].real makes a view, ~1/4 of a decode step's rotation)
        pairs = part.to(precise_dtype(x.dtype)).unflatten(-1, (-1, 2)).contiguous()
        # One row at an odd channel is contiguous already, and the complex view refuses its odd start.
        if pairs.storage_offset() % 2:
            pairs = pairs.clone()
        pairs = torch.view_as_complex(pairs)
        out = torch.view_as_real(pairs * rows[0]).flatten(-2).to(x.dtype)
    return out if part is x else _with_rest(out, x, offset)


def _with_rest(rotated: Tensor, x: Tensor, offset: int) -> Tensor:
    """The rotated channels ``(..., t, r)`` put back at ``offset`` among those of ``x`` ``(..., t, dh)``
    that pass through (``[x[:offset] | rotated | x[offset + r:]]``)."""
    rot, shape = rotated.shape[-1], (*rotated.shape[:-1], -1)
    if rot == x.shape[-1]:
        return rotated
    before = (x[..., :offset].expand(shape),) if offset else ()  # (none: the default pays no extra op)
    return torch.cat((*before, rotated, x[..., offset + rot :].expand(shape)), -1)


def apply_rotary(
    x: Tensor, cos: Tensor, sin: Tensor, layout: RopeLayout = "half", *, offset: int = 0
) -> Tensor:
    """Rotate ``r = 2 * cos.shape[-1]`` channels of ``x``, the first ``r`` or those from ``offset`` on;
    the rest pass through.

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
        offset: the first rotated channel: 0 (GPT-NeoX, GPT-J), ``dh - r`` for a trailing slice
            (DeepSeek V4's ``[nope | rope]`` heads); rotary-embedding-torch's ``start_index``.

    Returns:
        ``(..., t, dh)`` (the broadcast shape of ``x`` and the angles), same dtype as ``x``.

    Raises:
        TypeError: a non-floating ``x``, ``cos`` or ``sin``; a non-int ``offset``.
        ValueError: ``offset + r`` larger than ``dh``, cos and sin of different shapes or not broadcasting
            against ``x``'s rows, an unknown layout.
    """
    check_choice("layout", layout, ("half", "interleaved"))
    for name, t in (("x", x), ("cos", cos), ("sin", sin)):
        if not isinstance(t, Tensor) or not t.is_floating_point():
            got = t.dtype if isinstance(t, Tensor) else type(t).__name__
            raise TypeError(f"{name} must be a floating-point torch.Tensor, got {got}")
    if cos.shape != sin.shape:
        raise ValueError(
            f"cos and sin must have the same shape, got {tuple(cos.shape)} and {tuple(sin.shape)}"
        )
    try:  # (shapes only: the angles must broadcast against x's rows)
        torch.broadcast_shapes(x.shape[:-1], cos.shape[:-1])
    except RuntimeError:
        raise ValueError(
            f"cos/sin of shape {tuple(cos.shape)} do not broadcast against x's rows {tuple(x.shape[:-1])} "
            "(one row of angles per token: (t, r/2) or (b, 1, t, r/2))"
        ) from None
    rot = 2 * cos.shape[-1]
    if check_int("offset", offset, minimum=0) + rot > x.shape[-1]:
        raise ValueError(
            f"cos/sin rotate {rot} channels (2 × {cos.shape[-1]} pairs) from offset={offset} but x has only "
            f"{x.shape[-1]}"
        )
    if not is_tracing() and x.device.type in ("cpu", "cuda"):
        return rotate_eager(x, eager_rows(cos, sin, x.dtype, layout), layout, offset=offset)
    return rotary_reference(x, cos, sin, layout, offset=offset)
