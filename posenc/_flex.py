"""The opt-in FlexAttention path of :func:`posenc.attention` (``backend="flex"``).

The encoding's ``score_mod`` adds its bias inside the kernel; causality, the window and packed
documents are applied in the same ``score_mod`` from positions and ids, so no ``(h, tq, tk)``
tensor is stored.

Shape key: ``b`` batch, ``h`` query heads, ``tq`` queries, ``tk`` keys, ``dh`` head width.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ._attention_common import heads_differ, needs_grad
from ._compat import is_compiling
from .base import PositionState
from .functional.relative import position_indexer
from .masking import Visibility

__all__ = ["flex_attention_path"]


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


def flex_attention_path(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    state: PositionState | None,
    vis: Visibility,
    scale: float | None,
) -> Tensor:
    """FlexAttention with the encoding's ``score_mod``: no ``(h, tq, tk)`` tensor is stored.

    Causality and the window follow positions (explicit ones through a lookup of the
    positions tensor), documents compare ids, all inside the ``score_mod``.
    """
    if needs_grad(q, k, v, state) and q.device.type == "cpu":
        raise ValueError(
            "backend='flex' cannot run with gradients on the CPU (FlexAttention has no CPU backward); "
            "use backend='auto' or 'chunked' for training, or wrap the call in torch.no_grad()"
        )
    mod = None if state is None else state.score_mod(q, k)
    if mod is None and state is not None and state.bias_form != "none":
        raise ValueError(
            f"backend='flex' needs an encoding with a score_mod; {type(state.encoding).__name__} returns "
            f"None from score_mod(); use backend='auto'"
        )
    offset = vis.offset
    keep = None
    if vis.user is not None:
        # 4-D, indexed with 0 on its broadcast dims (an expanded capture is not needed).
        keep = vis.user
    broadcast = [keep is not None and keep.shape[i] == 1 for i in range(4)]
    q_pos = k_pos = q_doc = k_doc = None
    if vis.q_pos is not None and vis.k_pos is not None:
        q_pos, k_pos = position_indexer(vis.q_pos), position_indexer(vis.k_pos)
    if vis.q_doc is not None and vis.k_doc is not None:
        q_doc, k_doc = position_indexer(vis.q_doc), position_indexer(vis.k_doc)
    causal, window = vis.causal, vis.window

    def score_mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        if mod is not None:
            score = mod(score, b, h, q_idx, kv_idx)
        if causal or window is not None:
            # A where, not a block mask: a BlockMask's mask_mod (like a captured mask tensor)
            # fails to build in the dynamic-shape CPU kernel of torch 2.13.
            if q_pos is not None and k_pos is not None:
                behind = q_pos(b, q_idx) - k_pos(b, kv_idx)
            else:
                behind = q_idx + offset - kv_idx
            if causal:
                seen = behind >= 0
                if window is not None:
                    seen = seen & (behind < window)
            else:
                seen = behind.abs() <= (window or 0) // 2
            score = torch.where(seen, score, float("-inf"))
        if q_doc is not None and k_doc is not None:
            score = torch.where(q_doc(b, q_idx) == k_doc(b, kv_idx), score, float("-inf"))
        if keep is not None:
            idx = [
                torch.zeros_like(i) if one else i
                for i, one in zip((b, h, q_idx, kv_idx), broadcast, strict=True)
            ]
            score = torch.where(keep[idx[0], idx[1], idx[2], idx[3]], score, float("-inf"))
        return score

    flex = _compiled_flex(dynamic=keep is None)
    if is_compiling():
        from torch.nn.attention.flex_attention import flex_attention as flex
    gqa = heads_differ(q, k)
    out = flex(q, k, v, score_mod=score_mod, scale=scale, enable_gqa=gqa)
    # A query row that sees no key comes out as NaN or garbage: set it to zero like the other
    # paths (the CPU kernel cannot return the log-sum-exp that would say so).
    dead = vis.unseen()
    return out if dead is None else out.masked_fill(dead, 0.0)
