"""Context parallelism: attention over a sequence sharded across processes, with global positions.

Each of ``W`` ranks holds ``t / W`` of the sequence's tokens. With torch's head-tail load
balancing (the default of ``torch.distributed.tensor.experimental.context_parallel``) rank
``r`` holds chunks ``r`` and ``2W - 1 - r`` of ``2W`` equal chunks, so that every rank gets the
same share of the causal triangle; its tokens are not contiguous. Position therefore has to be
global everywhere: RoPE rotates with global positions, ALiBi and T5 biases use global
distances, and causal masking compares positions (key visible iff ``k_pos <= q_pos``), not
indices. posenc's explicit positions carry all of it:

* :func:`shard_positions` — the global positions of one rank's tokens, in torch's order;
* :func:`shard_batch` / :func:`unshard` — take a rank's shard of batch tensors, and gather
  shards back into sequence order;
* :func:`context_parallel_attention` — this rank's queries against every rank's keys and values
  (all-gathered with ``torch.distributed``), any encoding applied with global positions.

Which path to use:

============================  ==============================================================
encoding                      context parallel with
============================  ==============================================================
``rope`` (all scalings),      torch's ``context_parallel`` (SDPA ring attention) works when
``none``, ``sinusoidal``,     the encoding acts *before* attention: rotate ``q``/``k`` (or
``learned``                   add the embedding) with :func:`shard_positions`' global
                              positions, then call SDPA. On GPUs only: torch has no CPU
                              sharding rule for SDPA (measured, torch 2.13). posenc's
                              :func:`context_parallel_attention` works everywhere too.
``alibi``, ``t5``, any        :func:`context_parallel_attention` only: their bias is an
encoding with a bias or a     ``attn_mask`` of SDPA, which torch's ring attention refuses
value term                    (and FlexAttention's context parallel is forward-only on the CPU).
============================  ==============================================================

:func:`context_parallel_attention` all-gathers keys and values (memory ``O(t)`` per rank for
them, like the all-gather rotation of torch's ring attention) and computes one block of
``t / W`` queries against ``t`` keys with :func:`posenc.attention` (the chunked path keeps the
mask at ``O(chunk * t)``); gradients flow back to the rank that owns each key.

Shape key: ``b`` batch, ``h`` query heads, ``h_kv`` key/value heads, ``t`` the whole sequence,
``tl = t / W`` this rank's tokens, ``dh`` head width, ``dv`` value width, ``W`` world size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch import Tensor

from ._checks import check_bool, check_choice, check_float_tensor, check_int, check_positive_int
from ._compat import check_values
from ._positions import check_ids, resolve_positions
from .attend import attention
from .base import PositionalEncoding
from .masking import document_numbers

__all__ = ["Balance", "context_parallel_attention", "shard_batch", "shard_positions", "unshard"]

Balance = Literal["headtail", "contiguous"]
_BALANCES = ("headtail", "contiguous")


def shard_positions(
    seq_len: int,
    world_size: int,
    rank: int,
    balance: Balance = "headtail",
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """The global positions of ``rank``'s tokens when ``seq_len`` tokens are split over ``world_size`` ranks.

    ``"headtail"`` is torch's context-parallel load balancing (``_HeadTailLoadBalancer``): the
    sequence is cut into ``2 * world_size`` equal chunks and rank ``r`` holds chunks ``r`` and
    ``2 * world_size - 1 - r``, in that order, so every rank does the same causal work.
    ``"contiguous"`` gives rank ``r`` the ``r``-th of ``world_size`` equal slices (torch without
    load balancing).

    Args:
        seq_len: the whole sequence length ``t``.
        world_size: the number of ranks ``W``.
        rank: this rank, ``0 <= rank < world_size``.
        balance: ``"headtail"`` (needs ``seq_len % (2 * world_size) == 0``) or ``"contiguous"``
            (needs ``seq_len % world_size == 0``).
        device: where the positions are made.

    Returns:
        ``(tl,)`` long tensor, ``tl = seq_len / world_size``.

    Example:
        ``shard_positions(8, 2, 0)`` is ``[0, 1, 6, 7]``; rank 1 gets ``[2, 3, 4, 5]``.
    """
    check_positive_int("seq_len", seq_len)
    check_positive_int("world_size", world_size)
    check_int("rank", rank, minimum=0)
    if rank >= world_size:
        raise ValueError(f"rank must be < world_size={world_size}, got {rank}")
    check_choice("balance", balance, _BALANCES)
    pieces = 2 * world_size if balance == "headtail" else world_size
    if seq_len % pieces != 0:
        raise ValueError(
            f"seq_len={seq_len} must split into {pieces} equal chunks for balance={balance!r} with "
            f"world_size={world_size} (a multiple of {pieces}); pad the sequence to a multiple of {pieces}"
        )
    chunk = seq_len // pieces
    mine = [rank] if balance == "contiguous" else [rank, pieces - 1 - rank]
    return torch.cat([torch.arange(c * chunk, (c + 1) * chunk, device=device) for c in mine])


def _sequence_order(seq_len: int, world: int, balance: Balance, device: torch.device) -> Tensor:
    """``(seq_len,)``: where each token of the shards gathered in rank order goes in the sequence
    (``gathered[..., order.argsort()]`` is in sequence order)."""
    return torch.cat([shard_positions(seq_len, world, r, balance, device=device) for r in range(world)])


def _require_process_group(caller: str, alternative: str = "") -> None:
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            f"{caller}: torch.distributed is not initialised: call torch.distributed.init_process_group(...) "
            f"first (e.g. run under torchrun){alternative}"
        )


def shard_batch(
    tensors: Sequence[Tensor],
    *,
    seq_dims: int | Sequence[int] = 1,
    balance: Balance = "headtail",
    group: dist.ProcessGroup | None = None,
    world_size: int | None = None,
    rank: int | None = None,
) -> tuple[list[Tensor], Tensor]:
    """This rank's shard of each tensor along its sequence dimension, and the shard's global positions.

    Every rank calls it with the same whole batch (token ids, labels, document ids, ...) and keeps
    the tokens at :func:`shard_positions`; no communication happens.

    Args:
        tensors: tensors that share the sequence length ``t`` along their ``seq_dims``.
        seq_dims: the sequence dimension of every tensor (one int for all), e.g. 1 for ``(b, t)``.
        balance: see :func:`shard_positions`.
        group: the process group whose size and rank are used (default: the world).
        world_size, rank: given explicitly instead of from ``group`` (both or neither).

    Returns:
        ``(shards, positions)``: each tensor with ``tl`` entries along its sequence dim, and the
        ``(tl,)`` long global positions to pass as ``positions=`` (and to the model).
    """
    if isinstance(tensors, Tensor) or not all(isinstance(t, Tensor) for t in tensors):
        raise TypeError("tensors must be a sequence (list or tuple) of torch.Tensor")
    if len(tensors) == 0:
        raise ValueError("tensors must hold at least one tensor")
    if not isinstance(seq_dims, (int, list, tuple)):
        raise TypeError(f"seq_dims must be an int or a list of ints (one per tensor), got {seq_dims!r}")
    dims = [seq_dims] * len(tensors) if isinstance(seq_dims, int) else list(seq_dims)
    if len(dims) != len(tensors):
        raise ValueError(f"seq_dims has {len(dims)} entries for {len(tensors)} tensors")
    for i, (t, d) in enumerate(zip(tensors, dims, strict=True)):
        _check_dim(f"seq_dims[{i}]", d, t)
    lengths = {t.shape[d] for t, d in zip(tensors, dims, strict=True)}
    if len(lengths) != 1:
        raise ValueError(
            f"tensors must share one sequence length along seq_dims, got lengths {sorted(lengths)}"
        )
    if (world_size is None) != (rank is None):
        raise ValueError("pass both world_size and rank, or neither (then they come from the process group)")
    if world_size is None or rank is None:  # else checked by shard_positions
        _require_process_group("shard_batch", ", or pass world_size and rank explicitly")
        world_size, rank = dist.get_world_size(group), dist.get_rank(group)
    positions = shard_positions(lengths.pop(), world_size, rank, balance, device=tensors[0].device)
    shards = [t.index_select(d, positions.to(t.device)) for t, d in zip(tensors, dims, strict=True)]
    return shards, positions


def _check_dim(name: str, dim: object, t: Tensor) -> None:
    if isinstance(dim, bool) or not isinstance(dim, int) or not -t.dim() <= dim < t.dim():
        raise ValueError(f"{name}={dim!r} is not a dimension of a tensor of shape {tuple(t.shape)}")


class _GatherSequence(torch.autograd.Function):
    """All shards of ``x`` along ``dim``, concatenated in rank order (``_GatherSequence.apply(x, dim,
    group)``); backward sums every rank's gradient of this shard."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, dim: int, group: dist.ProcessGroup | None) -> Tensor:
        ctx.dim, ctx.group = dim, group
        return _along(dim, x, x.shape[dim] * dist.get_world_size(group), dist.all_gather_single, group)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        # Every rank's queries read this rank's keys: the gradient of the shard is the sum over
        # ranks of the matching slice of each rank's gradient (a reduce-scatter).
        length = grad.shape[ctx.dim] // dist.get_world_size(ctx.group)
        return _along(ctx.dim, grad, length, dist.reduce_scatter_single, ctx.group), None, None


def _along(dim: int, x: Tensor, length: int, collective: Any, group: dist.ProcessGroup | None) -> Tensor:
    """``collective(out, x)`` along ``dim`` of ``x``, into ``out`` of ``length`` entries there."""
    # The collectives work along dim 0: move the sequence dim there and back.
    moved = x.movedim(dim, 0).contiguous()
    out = moved.new_empty((length, *moved.shape[1:]))
    collective(out, moved, group=group)
    return out.movedim(0, dim)


#: The dtypes a shard's shape check can name (any other is "other").
_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32, torch.int64, torch.bool)


def _check_same_shapes(named: dict[str, Tensor | None], group: dist.ProcessGroup | None, device: Any) -> None:
    """Raise the same ``ValueError`` on every rank unless all ranks hold tensors of equal shapes.

    One small all-gather of each rank's shapes and dtypes runs before any collective on the data,
    so that mismatched shards fail with a message instead of a hang or a garbled gather. On an
    accelerator the comparison is a kernel assert (:func:`~posenc._compat.check_values`): no host sync.
    """
    row: list[int] = []
    for t in named.values():  # per tensor: rank, dtype code (-1: None), shape padded to 4 dims
        shape = [] if t is None else list(t.shape)
        code = -1 if t is None else (_DTYPES.index(t.dtype) if t.dtype in _DTYPES else len(_DTYPES))
        row += [len(shape), code, *shape, *[0] * (4 - len(shape))]
    world = dist.get_world_size(group)
    # a non-blocking copy: a blocking one waits for the device's queue (once per layer of every step)
    local = torch.tensor(row, dtype=torch.long).to(device, non_blocking=True)
    rows = _GatherSequence.apply(local, 0, group).view(world, -1)

    def describe(r: int) -> str:
        # only where check_values may read values (a CPU tensor); one row per tensor
        return ", ".join(
            f"{name}=None" if code == -1 else f"{name} {tuple(shape[:n])} {(*_DTYPES, 'other')[code]}"
            for name, (n, code, *shape) in zip(named, rows[r].view(len(named), -1).tolist(), strict=True)
        )

    def detail() -> str:
        bad = next(r for r in range(world) if not bool((rows[r] == rows[0]).all()))
        return f"{message} (rank 0: {describe(0)}; rank {bad}: {describe(bad)}){advice}"

    message = "context_parallel_attention: ranks hold shards of different shapes or dtypes"
    advice = "; every rank must hold an equal shard of the sequence (see posenc.distributed.shard_batch)"
    check_values((rows == rows[0]).all(dim=-1), message + advice, detail)


def context_parallel_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    encoding: PositionalEncoding | None = None,
    *,
    positions: Tensor,
    causal: bool = True,
    group: dist.ProcessGroup | None = None,
    scale: float | None = None,
    document_ids: Tensor | None = None,
    balance: Balance = "headtail",
) -> Tensor:
    """Attention of this rank's queries over the whole sharded sequence, with global positions.

    Keys, values and positions of every rank are all-gathered (in rank order, each with its
    global positions); the encoding's state is prepared for this rank's query positions against
    all key positions, so RoPE rotates and ALiBi/T5 biases are computed with global positions,
    and with ``causal`` a key is visible iff its position is ``<=`` the query's. The output equals
    the rows at ``positions`` of :func:`posenc.attention` over the unsharded sequence.

    Must be called by every rank of ``group`` (a collective), with equal shard shapes; the shapes
    are compared first (one small all-gather), so a mismatch raises on every rank instead of hanging
    (on an accelerator as a device-side assert, so that no call waits for the host).

    Args:
        q: ``(b, h, tl, dh)`` this rank's queries.
        k: ``(b, h_kv, tl, dh)`` this rank's keys (the same tokens as ``q``).
        v: ``(b, h_kv, tl, dv)`` this rank's values.
        encoding: any :class:`~posenc.PositionalEncoding` (additive ones act nowhere here: the
            model adds them to the embeddings at :func:`shard_batch`'s positions), or ``None``; with
            ``causal``, not one whose positions have axes (M-RoPE, AxialRoPE: a ``ValueError``).
        positions: ``(tl,)`` or ``(b, tl)`` global positions of this rank's tokens, e.g. from
            :func:`shard_positions` / :func:`shard_batch`.
        causal: mask keys at later positions than the query (by position, not by index).
        group: the process group over which the sequence is sharded (default: the world).
        scale: score scale; ``None`` means ``1 / sqrt(dh)``.
        document_ids: ``(tl,)`` or ``(b, tl)`` integer ids of the packed documents of this rank's
            tokens (the shard of the whole batch's ids); queries then attend only within their
            document. A document is a run of equal ids in the whole sequence, as in
            :func:`posenc.attention` (an id may recur for another document): the ids of every rank
            are gathered and numbered in sequence order (:func:`posenc.masking.document_numbers`).
            ``positions`` are then the shard of the per-document positions
            (:func:`posenc.document_positions` of the whole ids), so that each document is
            encoded as if it were alone.
        balance: how the sequence was sharded (:func:`shard_batch`'s ``balance``); it puts the
            gathered document ids back in sequence order to find the runs.

    Returns:
        ``(b, h, tl, dv)``, this rank's rows of the attention output.

    Raises:
        TypeError / ValueError: bad local inputs (checked before any communication); ranks
            whose shards differ in shape or dtype (raised on every rank; a device-side assert on an
            accelerator).
        RuntimeError: ``torch.distributed`` is not initialised.
    """
    check_float_tensor("q", q, rank=4, shape="(batch, heads, seq, head_dim)")
    check_float_tensor("k", k, rank=4, shape="(batch, kv_heads, seq, head_dim)")
    check_float_tensor("v", v, rank=4, shape="(batch, kv_heads, seq, head_dim_v)")
    if not (q.shape[2] == k.shape[2] == v.shape[2]):
        raise ValueError(
            f"q, k and v must hold the same tokens of this rank's shard, got sequence lengths "
            f"q {q.shape[2]}, k {k.shape[2]}, v {v.shape[2]}"
        )
    if encoding is not None and not isinstance(encoding, PositionalEncoding):
        raise TypeError(
            f"encoding must be a posenc.PositionalEncoding or None (a PositionState is per shape: pass the "
            f"encoding), got {type(encoding).__name__}"
        )
    check_bool("causal", causal)
    if causal and getattr(encoding, "num_axes", False):
        raise ValueError(
            f"{type(encoding).__name__}'s positions have axes, and its causal mask follows the tokens' order in "
            "the call, which a shard does not hold; context parallelism needs 1D positions (e.g. RoPE), or "
            "causal=False"
        )
    check_choice("balance", balance, _BALANCES)
    if positions is None:
        raise ValueError(
            "positions must be given: the global positions of this rank's tokens (shard_positions)"
        )
    b, tl = max(q.shape[0], k.shape[0]), q.shape[2]
    positions = resolve_positions(positions, tl, batch=b, name="positions").to(q.device)
    _require_process_group("context_parallel_attention")

    if document_ids is not None:  # checked here, before any communication
        document_ids = check_ids("document_ids", document_ids, tl).to(q.device)

    shapes = {"q": q, "k": k, "v": v, "positions": positions, "document_ids": document_ids}
    _check_same_shapes(shapes, group, q.device)
    q_documents = key_documents = None
    if document_ids is not None:
        # Where each gathered token sits in the sequence (after the shape check, so that every
        # rank raises the same error for a length the balance cannot split, before any gather).
        world, me = dist.get_world_size(group), dist.get_rank(group)
        order = _sequence_order(world * tl, world, balance, q.device)
        # Number the documents over the whole sequence (runs of equal ids, in sequence order):
        # equal numbers then mean one document in the gathered (rank) order too.
        gathered = _GatherSequence.apply(document_ids, document_ids.dim() - 1, group)
        # gathered[..., i] is token order[i] of the sequence.
        key_documents = document_numbers(gathered[..., torch.argsort(order)])[..., order]
        q_documents = key_documents[..., me * tl : (me + 1) * tl]
    # Every rank's keys, values and key positions, in rank order (collectives: the same order on every rank)
    return attention(
        q,
        _GatherSequence.apply(k, 2, group),
        _GatherSequence.apply(v, 2, group),
        encoding,
        causal=causal,
        q_positions=positions,
        k_positions=_GatherSequence.apply(positions, positions.dim() - 1, group),
        scale=scale,
        document_ids=key_documents,
        q_document_ids=q_documents,
    )


def unshard(
    tensor: Tensor, *, seq_dim: int = 1, balance: Balance = "headtail", group: dist.ProcessGroup | None = None
) -> Tensor:
    """Gather every rank's shard of ``tensor`` back into the whole sequence, in position order.

    The inverse of :func:`shard_batch` (e.g. for logits or an attention output); a collective that
    every rank of ``group`` calls with equal shapes, differentiable.

    Args:
        tensor: this rank's shard, ``tl`` entries along ``seq_dim``.
        seq_dim: the sequence dimension.
        balance: how the sequence was sharded (see :func:`shard_positions`).
        group: the process group (default: the world).

    Returns:
        ``tensor`` with ``t = W * tl`` entries along ``seq_dim``, on every rank.
    """
    if not isinstance(tensor, Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    _check_dim("seq_dim", seq_dim, tensor)
    check_choice("balance", balance, _BALANCES)
    _require_process_group("unshard")
    _check_same_shapes({"tensor": tensor}, group, tensor.device)
    gathered = _GatherSequence.apply(tensor, seq_dim, group)
    order = _sequence_order(gathered.shape[seq_dim], dist.get_world_size(group), balance, tensor.device)
    # gathered[..., i, ...] holds position order[i]: put each back at its position.
    return gathered.index_select(seq_dim, torch.argsort(order))
