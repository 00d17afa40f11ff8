"""The base class every encoding derives from, and the handling of positions.

Position enters attention in one of three places (see ``DESIGN.md``):

* ``encode_input``   — added to the token embeddings once, before the first block;
* ``encode_qk``      — queries and keys rotated inside every attention layer;
* ``attention_bias`` — an additive term on the attention scores before softmax.

:class:`PositionalEncoding` gives every encoding all three hooks, each a no-op unless the
encoding acts there, so an attention layer can call all of them without asking which
encoding it holds.

Shape key used in the docstrings: ``b`` batch, ``h`` heads, ``t`` sequence (``tq`` queries,
``tk`` keys), ``d`` model width, ``dh`` head width.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Literal

import torch
from torch import Tensor, nn

from ._checks import check_float_tensor

__all__ = [
    "PositionalEncoding",
    "check_input",
    "check_qk",
    "mask_to_positions",
    "resolve_positions",
    "resolve_qk_positions",
]

Kind = Literal["additive", "rotary", "bias", "none"]

# A FlexAttention score modifier: (score, batch, head, q_idx, kv_idx) -> score.
ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]


#: The dtypes caches are kept in: float32, or float64 for float64 work; never half precision.
_CACHE_DTYPES = (torch.float32, torch.float64)


def _is_compiling() -> bool:
    compiler = getattr(torch, "compiler", None)
    return bool(compiler is not None and compiler.is_compiling())


def _is_exporting() -> bool:
    """Whether ``torch.export`` is tracing (such a program must serve every length: no cache slices)."""
    is_exporting = getattr(torch.compiler, "is_exporting", None)
    return bool(is_exporting is not None and is_exporting())


def _precise_dtype(t: Tensor) -> torch.dtype:
    """The dtype tables and biases are computed in for ``t``: float64 for float64, else float32."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def check_input(x: Tensor, *, name: str = "x", width: int | None = None) -> None:
    """Check that ``x`` is a floating ``(b, t, d)`` tensor, with ``d == width`` when given."""
    check_float_tensor(name, x, rank=3, shape="(batch, seq, dim)")
    if width is not None and x.shape[-1] != width:
        raise ValueError(f"{name} has last dimension {x.shape[-1]}, expected d_model={width}")


def check_qk(q: Tensor, k: Tensor, *, head_dim: int | None = None) -> None:
    """Check that ``q`` is ``(b, h, tq, dh)`` and ``k`` is ``(b, h, tk, dh)`` with matching b, h, dh.

    Keys may have fewer heads than queries when the query heads are a multiple of them
    (grouped-query attention), and ``b`` may broadcast from 1.
    """
    check_float_tensor("q", q, rank=4, shape="(batch, heads, seq, head_dim)")
    check_float_tensor("k", k, rank=4, shape="(batch, heads, seq, head_dim)")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same head_dim, got q {q.shape[-1]} and k {k.shape[-1]}")
    if head_dim is not None and q.shape[-1] != head_dim:
        raise ValueError(f"q and k have head_dim {q.shape[-1]}, expected head_dim={head_dim}")
    if q.shape[0] != k.shape[0] and 1 not in (q.shape[0], k.shape[0]):
        raise ValueError(f"q and k must have the same batch size, got q {q.shape[0]} and k {k.shape[0]}")
    hq, hk = q.shape[1], k.shape[1]
    if hq != hk and (hk == 0 or hq % hk != 0):
        raise ValueError(
            f"q has {hq} heads and k has {hk}: the query heads must equal or be a multiple of the key heads"
        )


def resolve_positions(
    positions: Tensor | None,
    length: int,
    *,
    batch: int | None = None,
    device: torch.device | None = None,
    offset: int = 0,
    name: str = "positions",
) -> Tensor:
    """Validate integer positions, or make the default ``offset .. offset+length-1``.

    Args:
        positions: ``None``, or an integer tensor of shape ``(t,)`` or ``(b, t)`` with
            ``t == length`` and ``b`` equal to ``batch`` or 1.
        length: the sequence length the positions belong to.
        batch: the batch size of the tensor the positions belong to (checked when given).
        device: where the default positions are made.
        offset: the first default position.
        name: the argument's name, for error messages.

    Returns:
        A ``torch.long`` tensor of shape ``(t,)`` or ``(b, t)`` (the shape given).
    """
    if positions is None:
        return torch.arange(offset, offset + length, device=device, dtype=torch.long)
    if not isinstance(positions, Tensor):
        raise TypeError(
            f"{name} must be an integer torch.Tensor of shape (seq,) or (batch, seq), got {type(positions).__name__}"
        )
    if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise TypeError(f"{name} must have an integer dtype (e.g. torch.long), got {positions.dtype}")
    if positions.dim() not in (1, 2):
        raise ValueError(
            f"{name} must have shape (seq,) or (batch, seq), got a tensor of rank {positions.dim()}: {tuple(positions.shape)}"
        )
    if positions.shape[-1] != length:
        raise ValueError(f"{name} has length {positions.shape[-1]}, expected {length} (the sequence length)")
    if positions.dim() == 2 and batch is not None and positions.shape[0] not in (1, batch):
        raise ValueError(f"{name} has batch size {positions.shape[0]}, expected {batch} or 1")
    # A data-dependent check: eager only, so that compiled graphs stay free of syncs.
    if (
        not _is_compiling()
        and positions.numel() > 0
        and positions.device.type != "meta"
        and bool((positions < 0).any())
    ):
        raise ValueError(f"{name} must be non-negative, got minimum {int(positions.min())}")
    return positions.long()


def resolve_qk_positions(
    q: Tensor,
    k: Tensor,
    q_positions: Tensor | None = None,
    k_positions: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Positions of queries and keys for ``q`` of shape ``(b, h, tq, dh)`` and ``k`` ``(b, h, tk, dh)``.

    Defaults: keys sit at ``0 .. tk-1`` and queries are the last ``tq`` of them
    (``tk-tq .. tk-1``), so a decoding step with a KV cache needs no extra argument.
    When only ``k_positions`` is given, queries take its last ``tq`` entries; when only
    ``q_positions`` is given and ``tq == tk`` (self-attention), keys take the same positions.

    Returns:
        ``(q_positions, k_positions)``, long tensors of shape ``(t,)`` or ``(b, t)``.
    """
    tq, tk = q.shape[-2], k.shape[-2]
    batch = max(q.shape[0], k.shape[0])
    if k_positions is not None:
        k_positions = resolve_positions(k_positions, tk, batch=batch, name="k_positions")
    if q_positions is not None:
        q_positions = resolve_positions(q_positions, tq, batch=batch, name="q_positions")
    if q_positions is None:
        if k_positions is not None and tq <= tk:
            q_positions = k_positions[..., tk - tq :]
        else:
            q_positions = resolve_positions(None, tq, device=q.device, offset=max(tk - tq, 0))
    if k_positions is None:
        if tq == tk:
            k_positions = q_positions
        else:
            k_positions = resolve_positions(None, tk, device=k.device)
    return q_positions, k_positions


def mask_to_positions(attention_mask: Tensor) -> Tensor:
    """Positions of the real tokens in a padded batch, from a ``(b, t)`` keep-mask.

    Real tokens are numbered ``0, 1, 2, ...`` in order whatever padding precedes them (left
    padding) or follows them (right padding); padding tokens get position 0. This is what
    Bloom does for ALiBi and what generation code does for RoPE.

    Args:
        attention_mask: ``(b, t)`` bool or 0/1 integer tensor, true/1 for real tokens.

    Returns:
        ``(b, t)`` long tensor of positions.
    """
    if not isinstance(attention_mask, Tensor) or attention_mask.dim() != 2:
        shape = (
            tuple(attention_mask.shape)
            if isinstance(attention_mask, Tensor)
            else type(attention_mask).__name__
        )
        raise ValueError(f"attention_mask must be a (batch, seq) tensor, got {shape}")
    keep = attention_mask.long()
    return (keep.cumsum(-1) - 1).clamp_min(0) * keep


class PositionalEncoding(nn.Module):
    """Base class of every position encoding: three hooks, each a no-op by default.

    Subclasses override the hooks where they act and set :attr:`kind`. A generic attention
    layer calls all three and never needs to know which encoding it holds::

        x = pe.encode_input(x)                              # once, on the embeddings
        q, k = pe.encode_qk(q, k)                           # in every attention layer
        bias = pe.attention_bias(q, k)                      # None, or added to the scores

    Positions are explicit and optional everywhere: integer tensors of shape ``(t,)`` or
    ``(b, t)``; ``None`` means ``0..t-1`` for inputs, and for attention keys at ``0..tk-1``
    with queries at the last ``tq`` of them (see :func:`resolve_qk_positions`).

    Caches (cos/sin and bias tables) are non-persistent buffers kept in float32 or better;
    ``state_dict()`` holds only learned parameters.
    """

    #: Where the encoding acts: ``"additive"``, ``"rotary"``, ``"bias"`` or ``"none"``.
    kind: ClassVar[Kind] = "none"
    #: The registered name, set by :func:`posenc.register`.
    registry_name: ClassVar[str | None] = None

    def encode_input(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """Add the position signal to token embeddings.

        Args:
            x: ``(b, t, d)`` embeddings.
            positions: ``(t,)`` or ``(b, t)`` integer positions; ``None`` means ``0..t-1``.

        Returns:
            ``(b, t, d)``, the same dtype as ``x``. The base class returns ``x`` unchanged.
        """
        return x

    def encode_qk(
        self,
        q: Tensor,
        k: Tensor,
        q_positions: Tensor | None = None,
        k_positions: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Encode position into queries and keys (e.g. rotate them).

        Args:
            q: ``(b, h, tq, dh)`` queries.
            k: ``(b, h_kv, tk, dh)`` keys.
            q_positions, k_positions: see :func:`resolve_qk_positions`.

        Returns:
            ``(q, k)`` with the same shapes and dtypes. The base class returns them unchanged.
        """
        return q, k

    def attention_bias(
        self,
        q: Tensor,
        k: Tensor,
        q_positions: Tensor | None = None,
        k_positions: Tensor | None = None,
    ) -> Tensor | None:
        """The additive bias on the attention scores, or ``None`` when the encoding adds none.

        Args:
            q: ``(b, h, tq, dh)`` queries (only their shape, device and dtype are used).
            k: ``(b, h_kv, tk, dh)`` keys (likewise).
            q_positions, k_positions: see :func:`resolve_qk_positions`.

        Returns:
            ``None``, or a float tensor broadcastable to ``(b, h, tq, tk)``; encodings return
            the smallest form that is exact under softmax (e.g. ``(1, h, 1, tk)``).
        """
        return None

    def score_mod(
        self,
        q: Tensor,
        k: Tensor,
        q_positions: Tensor | None = None,
        k_positions: Tensor | None = None,
    ) -> ScoreMod | None:
        """A FlexAttention ``score_mod`` equal to adding :meth:`attention_bias`, or ``None``.

        Encodings that can compute their bias inside the attention kernel return a callable
        ``(score, b, h, q_idx, kv_idx) -> score`` so that no ``(h, tq, tk)`` tensor is stored.
        """
        return None

    def reset_caches(self) -> None:
        """Rebuild non-persistent caches, e.g. after ``to_empty()`` from the meta device.

        Learned parameters are left alone (use ``reset_parameters`` for those).
        """

    def forward(self, *args, **kwargs):  # pragma: no cover - every encoding defines its own
        raise NotImplementedError(f"{type(self).__name__} does not define a drop-in forward")
