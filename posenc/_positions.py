"""Input checks of the hooks' tensors, and the resolution of query / key positions.

:func:`check_input`, :func:`check_qk`, :func:`check_bias_qk` and :func:`check_scores` check the
tensors an encoding's hooks receive, :func:`check_ids` integer positions and document ids;
:func:`resolve_positions`, :func:`resolve_qk_positions` (and
:func:`resolve_qk`, the same from lengths, which :meth:`~posenc.base.PositionalEncoding.prepare`
uses) and :func:`mask_to_positions` turn optional positions into ``torch.long`` tensors.

Shape key: ``b`` batch, ``h`` heads, ``t`` sequence (``tq`` queries, ``tk`` keys), ``d`` model
width, ``dh`` head width.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from ._checks import check_float_tensor, check_ints, keep_mask
from ._compat import check_values


def check_input(x: Tensor, *, width: int | None = None, positions: Tensor | None = None) -> Tensor | None:
    """Check that ``x`` is a floating ``(b, t, d)`` tensor, with ``d == width`` when given; return
    ``positions`` of its tokens resolved (:func:`resolve_positions`), or ``None`` when not given."""
    check_float_tensor("x", x, rank=3, shape="(batch, seq, dim)")
    if width is not None and x.shape[-1] != width:
        raise ValueError(f"x has last dimension {x.shape[-1]}, expected d_model={width}")
    return None if positions is None else resolve_positions(positions, x.shape[1], batch=x.shape[0])


def check_qk(q: Tensor, k: Tensor, *, head_dim: int | None = None) -> None:
    """Check that ``q`` is ``(b, h, tq, dh)`` and ``k`` is ``(b, h, tk, dh)`` with matching b, h, dh.

    Keys may have fewer heads than queries when the query heads are a multiple of them
    (grouped-query attention), and ``b`` may broadcast from 1.
    """
    check_float_tensor("q", q, rank=4, shape="(batch, heads, seq, head_dim)")
    check_float_tensor("k", k, rank=4, shape="(batch, heads, seq, head_dim)")
    (bq, hq, _, dq), (bk, hk, _, dk) = q.shape, k.shape
    if dq != dk:
        raise ValueError(f"q and k must have the same head_dim, got q {dq} and k {dk}")
    if head_dim is not None and dq != head_dim:
        raise ValueError(f"q and k have head_dim {dq}, expected head_dim={head_dim}")
    if bq != bk and 1 not in (bq, bk):
        raise ValueError(f"q and k must have the same batch size, got q {bq} and k {bk}")
    if hq != hk and (hk == 0 or hq % hk != 0):
        raise ValueError(
            f"q has {hq} heads and k has {hk}: the query heads must equal or be a multiple of the key heads"
        )


def check_bias_qk(q: Tensor, k: Tensor, num_heads: int | None, *, head_dim: int | None = None) -> None:
    """Check ``q`` ``(b, h, tq, dh)`` and ``k`` ``(b, h_kv, tk, dh)`` as :func:`check_qk`, with
    ``h == num_heads`` (any ``h`` for ``None``)."""
    check_qk(q, k, head_dim=head_dim)
    _check_heads("q has", q, num_heads)


def check_scores(scores: Tensor, num_heads: int) -> None:
    """Check attention scores ``(b, h, tq, tk)`` with ``h == num_heads``."""
    check_float_tensor("scores", scores, rank=4, shape="(batch, heads, q_len, k_len)")
    _check_heads("scores have", scores, num_heads)


def _check_heads(what: str, t: Tensor, num_heads: int | None) -> None:
    if num_heads is not None and t.shape[1] != num_heads:
        raise ValueError(
            f"{what} {t.shape[1]} heads (shape {tuple(t.shape)}), but the encoding was built with num_heads={num_heads}"
        )


def check_ids(
    name: str, ids: object, length: int | None = None, length_is: str = "the sequence length"
) -> Tensor:
    """Check integer ``(t,)`` or ``(b, t)`` positions or ids, with ``t == length`` (``length_is``) when given."""
    ids = check_ints(name, ids, "(seq,) or (batch, seq)")
    if ids.dim() not in (1, 2):
        raise ValueError(
            f"{name} must have shape (seq,) or (batch, seq), got a tensor of rank {ids.dim()}: {tuple(ids.shape)}"
        )
    if length is not None and ids.shape[-1] != length:
        raise ValueError(f"{name} has length {ids.shape[-1]}, expected {length} ({length_is})")
    return ids


def resolve_positions(
    positions: Tensor | None,
    length: int,
    *,
    batch: int | None = None,
    device: torch.device | str | None = None,
    name: str = "positions",
    length_is: str = "the sequence length",
) -> Tensor:
    """Validate integer positions, or make the default ``0 .. length-1``.

    Args:
        positions: ``None``, or an integer tensor of shape ``(t,)`` or ``(b, t)`` with
            ``t == length`` and ``b`` equal to ``batch`` or 1.
        length: the sequence length the positions belong to.
        batch: the batch size of the tensor the positions belong to (checked when given).
        device: where the default positions are made.
        name: the argument's name, for error messages.
        length_is: what ``length`` counts, for error messages.

    Returns:
        A ``torch.long`` tensor of shape ``(t,)`` or ``(b, t)`` (the shape given).
    """
    if positions is None:
        return torch.arange(length, device=device)
    # long first: torch has few kernels for uint16/32/64 (uint64 past 2**63 wraps negative, refused below)
    positions = check_ids(name, positions, length, length_is).long()
    if device is not None and not _same_device(positions.device, torch.device(device)):
        raise ValueError(f"{name} is on {positions.device}, but the tensors it positions are on {device}")
    check_batch(name, positions, batch, rank=2)
    check_non_negative(name, positions)
    return positions


def check_non_negative(name: str, positions: Tensor) -> None:
    """Refuse a negative position: it must fail, not wrap around a table (a kernel assert off the CPU: no sync)."""
    message = f"{name} must be non-negative"
    check_values(positions >= 0, message, lambda: f"{message}, got minimum {int(positions.min())}")


def check_batch(name: str, t: Tensor, batch: int | None, *, rank: int) -> None:
    """Refuse a ``rank``-dim ``t`` (batched positions or ids) whose batch size is neither 1 nor ``batch``."""
    if t.dim() == rank and batch is not None and t.shape[0] not in (1, batch):
        raise ValueError(
            f"{name} has batch size {t.shape[0]}, expected {batch if batch == 1 else f'{batch} or 1'}"
        )


def _same_device(a: torch.device, b: torch.device) -> bool:
    """Whether ``a`` and ``b`` are one device (``cuda`` and ``cuda:0`` are, when 0 is current)."""
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def resolve_qk_positions(
    q: Tensor, k: Tensor, q_positions: Tensor | None = None, k_positions: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Positions of queries and keys for ``q`` of shape ``(b, h, tq, dh)`` and ``k`` ``(b, h, tk, dh)``.

    Defaults: keys sit at ``0 .. tk-1`` and queries are the last ``tq`` of them
    (``tk-tq .. tk-1``), so a decoding step with a KV cache needs no extra argument.
    When only ``k_positions`` is given, queries take its last ``tq`` entries; when only
    ``q_positions`` is given and ``tq == tk`` (self-attention), keys take the same positions.

    Returns:
        ``(q_positions, k_positions)``, long tensors of shape ``(t,)`` or ``(b, t)``.
    """
    batch = max(q.shape[0], k.shape[0])
    qp, kp, _, _ = resolve_qk(q.shape[-2], k.shape[-2], batch, q.device, q_positions, k_positions)
    return qp if isinstance(qp, Tensor) else qp.tensor(), kp if isinstance(kp, Tensor) else kp.tensor()


def resolve_qk(
    tq: int,
    tk: int,
    batch: int | None,
    device: torch.device,
    q_positions: Tensor | None,
    k_positions: Tensor | None,
) -> tuple[Positions, Positions, int | None, int | None]:
    """:func:`resolve_qk_positions` from lengths; also the first position of each default range.

    Returns ``(q_positions, k_positions, q_start, k_start)`` where ``q_start``/``k_start`` is the
    first position when that side got the default consecutive positions (then a
    :class:`Consecutive`, not yet a tensor), else ``None`` (an encoding may then slice a cached
    table instead of gathering rows).
    """
    if q_positions is not None:
        q_positions = resolve_positions(q_positions, tq, batch=batch, device=device, name="q_positions")
    if k_positions is not None:
        k_positions = resolve_positions(k_positions, tk, batch=batch, device=device, name="k_positions")
    q_start = k_start = None
    qp: Positions | None = q_positions
    kp: Positions | None = k_positions
    if qp is None:
        if k_positions is not None and tq <= tk:
            qp = k_positions[..., tk - tq :]
        else:
            q_start = max(tk - tq, 0)
            qp = Consecutive((tq,), q_start, device)
    if kp is None:
        kp, k_start = (qp, q_start) if tq == tk else (Consecutive((tk,), 0, device), 0)
    return qp, kp, q_start, k_start


@dataclasses.dataclass(eq=False)
class Consecutive:
    """The default positions ``start .. start+t-1`` on ``device``, ``shape`` ``(t,)``, made a tensor only
    where read (:attr:`~posenc.PositionState.q_positions`), once: a decode step from a table needs none."""

    shape: tuple[int]
    start: int
    device: torch.device
    made: Tensor | None = None

    def tensor(self) -> Tensor:
        if self.made is None:
            self.made = torch.arange(self.start, self.start + self.shape[0], device=self.device)
        return self.made


#: Resolved positions: a tensor, or default ones not made one yet.
Positions = Tensor | Consecutive


def mask_to_positions(attention_mask: Tensor) -> Tensor:
    """Positions of the real tokens in a padded batch, from a ``(b, t)`` keep-mask.

    Real tokens are numbered ``0, 1, 2, ...`` in order whatever padding precedes them (left
    padding) or follows them (right padding); padding tokens get position 0. This is what
    Bloom does for ALiBi and what generation code does for RoPE.

    Args:
        attention_mask: ``(b, t)`` bool or integer tensor, true/nonzero for real tokens (as
            :class:`~posenc.nn.TransformerLM` reads it). Floats are refused: an additive mask (0 to keep,
            ``-inf`` to drop) would read the other way round.

    Returns:
        ``(b, t)`` long tensor of positions.
    """
    keep = keep_mask(attention_mask)
    if keep.dim() != 2:
        raise ValueError(f"attention_mask must be a (batch, seq) tensor, got {tuple(keep.shape)}")
    return (keep.cumsum(-1) - 1).clamp_min(0) * keep
