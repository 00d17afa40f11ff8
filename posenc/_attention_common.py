"""Small helpers shared by the attention paths (SDPA, explicit weights, FlexAttention)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.utils.checkpoint
from torch import Tensor

from ._compat import is_tracing
from .base import PositionState
from .masking import Visibility

__all__ = ["heads_differ", "needs_grad", "over_query_chunks"]

#: ``chunk_fn(qs, ks)``: the attention of query rows ``qs`` over keys ``ks``, as a function of
#: those rows of q and those keys of k and v.
ChunkFn = Callable[[slice, slice], Callable[[Tensor, Tensor, Tensor], Tensor]]


def heads_differ(q: Tensor, k: Tensor) -> bool:
    """Grouped-query attention? A branch (not ``bool()``) so that dynamic shapes give a Python bool."""
    if q.shape[1] != k.shape[1]:  # a branch: it guards once under compile, bool() stays symbolic
        return True
    return False


def needs_grad(q: Tensor, k: Tensor, v: Tensor, state: PositionState | None) -> bool:
    """Whether this call builds a graph: inputs or the encoding's parameters need gradients."""
    if not torch.is_grad_enabled():
        return False
    if q.requires_grad or k.requires_grad or v.requires_grad:
        return True
    return state is not None and any(p.requires_grad for p in state.encoding.parameters())


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
        qs, ks = slice(start, end), slice(lo, hi)
        one_chunk = chunk_fn(qs, ks)
        args = (q[:, :, qs], k[:, :, ks], v[:, :, ks])
        if grad:
            outs.append(torch.utils.checkpoint.checkpoint(one_chunk, *args, use_reentrant=False))
        else:
            outs.append(one_chunk(*args))
    if not outs:  # no queries
        return q.new_zeros(q.shape[0], q.shape[1], 0, v.shape[-1])
    return torch.cat(outs[::-1], dim=2)
