"""Small helpers shared by the attention paths (SDPA, explicit weights, FlexAttention)."""

from __future__ import annotations

import torch
from torch import Tensor

from .base import PositionState

__all__ = ["heads_differ", "needs_grad"]


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
