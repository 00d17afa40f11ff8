"""The argument checks of :func:`posenc.attention`, each error naming the argument and the value.

Shape key: ``b`` batch, ``h`` query heads, ``h_kv`` key/value heads, ``tq`` queries,
``tk`` keys, ``dh`` head width, ``dv`` value width.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from ._positions import check_qk
from .base import PositionalEncoding, PositionState

#: What :func:`attention` accepts as its position argument: an encoding (prepared per call),
#: a :class:`~posenc.PositionState` prepared once per forward, or ``None``.
Encoding = PositionalEncoding | PositionState | None

Backend = Literal["auto", "sdpa", "chunked", "flex"]
_BACKENDS = ("auto", "sdpa", "chunked", "flex")


def _check_inputs(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    encoding: Encoding,
    attn_mask: Tensor | None,
    dropout_p: float,
    scale: float | None,
    backend: str,
    chunk_size: int | None,
) -> None:
    check_qk(q, k)
    if not isinstance(v, Tensor):
        raise TypeError(
            f"v must be a torch.Tensor of shape (batch, heads, seq, head_dim), got {type(v).__name__}"
        )
    if v.dim() != 4:
        raise ValueError(
            f"v must have shape (batch, heads, seq, head_dim), got a tensor of rank {v.dim()}: {tuple(v.shape)}"
        )
    if not v.is_floating_point():
        raise TypeError(f"v must be a floating-point tensor, got dtype {v.dtype}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k and v must have the same dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}")
    hq = q.shape[1]
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
        target = (max(q.shape[0], k.shape[0]), hq, q.shape[2], k.shape[2])
        shape = tuple(attn_mask.shape)
        # Exactly 4-D: a 2-D mask is ambiguous ((batch, seq_k) padding or (seq_q, seq_k)?) when
        # batch == seq_q, and reading it the wrong way gives silently wrong outputs.
        if len(shape) != 4 or any(m not in (1, t) for m, t in zip(shape, target, strict=True)):
            raise ValueError(
                f"attn_mask must be 4-D, (batch|1, heads|1, seq_q|1, seq_k) broadcastable to {target}, "
                f"got shape {shape}; pass a (batch, seq_k) padding mask as mask[:, None, None, :] and a "
                f"(seq_q, seq_k) mask as mask[None, None]"
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


def _check_devices(q: Tensor, **tensors: Tensor | None) -> None:
    """Positions and masks must be on ``q``'s device (torch's own error would not name them)."""
    for name, t in tensors.items():
        if isinstance(t, Tensor) and t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; move it to q's device")
