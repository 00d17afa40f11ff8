"""The opt-in FlexAttention path of :func:`posenc.attention` (``backend="flex"``).

The encoding's ``score_mod`` adds its bias inside the kernel. Which keys each query sees
(causality and windows by position, packed documents, the user's mask) goes into a
``BlockMask``: FlexAttention then skips the blocks of keys a block of queries cannot see
(a causal call reads about half the keys) and applies the ``mask_mod`` only inside the
partly visible blocks. Nothing of size ``(h, tq, tk)`` is stored: the block mask is built by a
compiled :func:`~torch.nn.attention.flex_attention.create_block_mask` (which fuses the
``mask_mod`` into its block reduction: kilobytes, where the eager build allocates about
``10 * tq * tk`` bytes).

Compiles: one compiled ``flex_attention`` and one compiled ``create_block_mask`` per process;
with dynamic shapes off the CPU, so new lengths reuse them, and static ones on the CPU (see
:func:`_compiled`). Inputs are brought to the row-major layout
first: a view (``x.transpose(1, 2)`` of a ``(b, t, h, d)`` tensor) would otherwise add stride
guards and a recompile per layout, and torch 2.13-2.15's CPU kernel fails to build for some of
those layouts (a C++ error about ``cur_kvSplitSize``).

Shape key: ``b`` batch, ``h`` query heads, ``tq`` queries, ``tk`` keys, ``dh`` head width.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ._attention_paths import Softmax, heads_differ, needs_grad
from ._compat import is_compiling
from .encodings._bias import _lookup, _row_major, _rows_of
from .masking import Visibility, visible
from .state import PositionState

__all__ = ["flex_attention_path", "flex_block_mask"]

_COMPILED: dict[str, Callable[..., Any]] = {}

#: Compiled variants allowed per function (dynamo's default is 8, then it runs eager, which for
#: FlexAttention means ``(b, h, tq, tk)`` scores): one per encoding's ``score_mod``, dtype,
#: grouped or not, batch of 1 or more, mask broadcast pattern.
RECOMPILE_LIMIT = 64
#: Up to this many ``(b|1, h|1, tq, tk)`` entries the block mask is built eagerly (about 10 bytes
#: each at its peak, 10 MiB here) instead of compiled (< 1 MB at any length, but a 5-25 s
#: compile per shape on the CPU, and torch 2.13's CPU code for a user mask with fewer than 128
#: keys does not build: "operands to '?:' have different types").
EAGER_BLOCK_MASK_SCORES = 2**20


def _compiled(name: str, device: torch.device) -> Callable[..., Any]:
    """``flex_attention`` or ``create_block_mask`` compiled once per process (and per kind of device).

    Inside a user's ``torch.compile`` the plain functions are returned: the outer compile
    traces them into its own graph.

    Dynamic shapes (one compile for every length) except on the CPU: there torch 2.13-2.15's
    template generates C++ that does not build (``'cur_kvSplitSize7' was not declared``) or reads
    out of bounds whenever a ``score_mod`` or ``mask_mod`` reads a captured tensor at a computed
    index (T5's table, positions, ids, the user's mask); each new ``(b, tq, tk)`` compiles once
    (about 5 s).
    """
    from torch.nn.attention import flex_attention as fa

    fn = getattr(fa, name)
    if is_compiling():
        return fn
    dynamic = device.type != "cpu"
    key = f"{name}-{dynamic}"
    if key not in _COMPILED:
        _COMPILED[key] = torch.compile(fn, dynamic=dynamic)
    return _COMPILED[key]


def lse_supported(device: torch.device) -> bool:
    """Whether compiled FlexAttention returns its log-sum-exp on ``device`` (not on the CPU, torch 2.13)."""
    return device.type != "cpu"


def _recompile_limit() -> Any:
    """A context raising dynamo's recompile limit to :data:`RECOMPILE_LIMIT` (never lowering it)."""
    import torch._dynamo.config as dynamo_config

    if is_compiling():  # the user's compile: its own limits
        return contextlib.nullcontext()
    return dynamo_config.patch(recompile_limit=max(RECOMPILE_LIMIT, dynamo_config.recompile_limit))


def flex_block_mask(vis: Visibility, batch: int, heads: int) -> Any | None:
    """The ``BlockMask`` of ``vis`` (the keys each query may see), or ``None`` when all are seen.

    Causality and windows compare positions (explicit ones, or the index rule: query row ``i``
    at key index ``i + tk - tq``), documents compare ids, and the user's mask is read where
    it is given. Every constant is a 0-d tensor, so that a new window or offset reuses the
    compiled kernels (a captured Python int would be a guard).

    Args:
        vis: the rules of this call.
        batch, heads: ``b`` and ``h`` of the queries.

    Returns:
        A :class:`torch.nn.attention.flex_attention.BlockMask` for ``(b|1, h|1, tq, tk)``.
    """
    rules: list[Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]] = []
    per_batch = per_head = False
    if vis.positional:
        if vis.q_pos is not None and vis.k_pos is not None:
            q_at, k_at = _rows_of(vis.q_pos), _rows_of(vis.k_pos)
            per_batch = vis.q_pos.dim() == 2 or vis.k_pos.dim() == 2
        else:  # the index rule: query row i at key index i + offset
            offset = torch.full((), vis.offset, device=vis.device)
            q_at, k_at = (lambda b, i: i + offset), (lambda b, j: j)
        causal = vis.causal
        window = None if vis.window is None else torch.full((), vis.window, device=vis.device)
        rules.append(lambda b, h, i, j: visible(q_at(b, i), k_at(b, j), causal, window))
    if vis.q_doc is not None and vis.k_doc is not None:
        q_doc, k_doc = _rows_of(vis.q_doc), _rows_of(vis.k_doc)
        per_batch = per_batch or vis.q_doc.dim() == 2 or vis.k_doc.dim() == 2
        rules.append(lambda b, h, i, j: q_doc(b, i) == k_doc(b, j))
    if vis.user is not None:
        # Read as uint8 (a view, no copy): a bool buffer of fewer than 128 keys generates C++
        # mixing vector-mask types that does not build (torch 2.13).
        read_user = _lookup(vis.user.view(torch.uint8))
        per_batch = per_batch or vis.user.shape[0] != 1
        per_head = vis.user.shape[1] != 1
        rules.append(lambda b, h, i, j: read_user(b, h, i, j) != 0)
    if not rules:
        return None

    def mask_mod(b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
        seen = rules[0](b, h, i, j)
        for rule in rules[1:]:
            seen = seen & rule(b, h, i, j)
        return seen

    b, h = (batch if per_batch else 1), (heads if per_head else 1)
    if b * h * vis.tq * vis.tk <= EAGER_BLOCK_MASK_SCORES:
        from torch.nn.attention.flex_attention import create_block_mask as create
    else:
        create = _compiled("create_block_mask", vis.device)
    with _recompile_limit():
        return create(mask_mod, b, h, vis.tq, vis.tk, device=vis.device)


def flex_attention_path(
    q: Tensor, k: Tensor, v: Tensor, state: PositionState, vis: Visibility, soft: Softmax
) -> Tensor:
    """FlexAttention with the encoding's ``score_mod`` and a ``BlockMask`` of ``vis``.

    Args:
        q: ``(b, h, tq, dh)``; k: ``(b, h_kv, tk, dh)``; v: ``(b, h_kv, tk, dv)`` (any layout).
        state: the encoding's state (its ``score_mod``).
        vis: which keys each query may see.
        soft: the score scale, and sink logits ``(h,)``: the output is scaled by ``sigmoid(lse - sinks[h])``,
            the weight the keys keep next to the sink (exact: ``lse`` is FlexAttention's log-sum-exp).
            Its ``dropout_p`` is not applied (FlexAttention has no dropout).

    Returns:
        ``(b, h, tq, dv)``; query rows that see no key are zero, as on the other paths.
    """
    from torch.nn.attention.flex_attention import AuxRequest

    scale, _, sinks = soft
    if needs_grad(q, k, v, sinks, state=state) and q.device.type == "cpu":
        raise ValueError(
            "backend='flex' cannot run with gradients on the CPU (FlexAttention has no CPU backward); "
            "use backend='auto' or 'chunked' for training, or wrap the call in torch.no_grad()"
        )
    if q.device.type == "cpu" and q.dtype == torch.float64:  # (inductor's error says it only after compiling)
        raise ValueError(
            f"backend='flex' on the CPU takes float32, float16 or bfloat16, got {q.dtype}; use backend='auto'"
        )
    q, k, v = _row_major(q), _row_major(k), _row_major(v)
    mod = state.score_mod(q, k)
    if mod is None and state.bias_form != "none":
        raise ValueError(
            f"backend='flex' needs an encoding with a score_mod; {type(state.encoding).__name__} returns "
            f"None from score_mod(); use backend='auto'"
        )
    block_mask = flex_block_mask(vis, q.shape[0], q.shape[1])
    flex = _compiled("flex_attention", q.device)
    gqa = heads_differ(q, k)
    # FlexAttention gives zeros for a query row whose keys are all masked by the block mask
    # (its log-sum-exp is -inf), the value every other path gives.
    aux_request = {} if sinks is None else {"return_aux": AuxRequest(lse=True)}
    with _recompile_limit():
        out = flex(q, k, v, score_mod=mod, block_mask=block_mask, scale=scale, enable_gqa=gqa, **aux_request)
    if sinks is None:
        return out
    out, aux = out
    # The keys keep exp(lse) / (exp(lse) + exp(s)) of the weight. A row that sees no key has
    # lse = -inf: weight 0, and its output is zero already.
    keys = torch.sigmoid(aux.lse - sinks.to(aux.lse.dtype).view(1, -1, 1))
    return (out.to(keys.dtype) * keys.unsqueeze(-1)).to(out.dtype)
