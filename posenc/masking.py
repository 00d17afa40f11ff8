"""Which keys each query may see: causality by position, packed documents, sliding windows.

:func:`posenc.attention` joins four rules into one :class:`Visibility`, and every path asks it
only for the block of queries and keys it works on, so that no path builds a ``(tq, tk)`` mask
where a chunk's ``(chunk, keys it sees)`` block does:

* the user's boolean keep-mask (``attn_mask``);
* causality: key ``j`` is visible to query ``i`` iff ``k_pos[j] <= q_pos[i]``;
* a sliding window of ``w``: causal ``q_pos - k_pos < w`` (Mistral, Gemma 2/3: the query and
  the ``w - 1`` keys before it), bidirectional ``|q_pos - k_pos| <= w // 2`` (ModernBERT's local
  attention of ``w`` tokens);
* packed documents: only keys of the query's document, where a document is a run of equal ids
  (:func:`document_numbers`: the one rule, used by :func:`posenc.attention` and by
  :func:`posenc.distributed.context_parallel_attention` over the whole sequence).

With default positions (keys ``0..tk-1``, queries the last ``tq`` of them) the rules are about
indices: query row ``i`` sits at key index ``i + tk - tq`` (bottom-right aligned), and the keys
each query chunk sees form a range known without looking at any data.

Shape key: ``b`` batch, ``tq`` queries, ``tk`` keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise
from typing import Any

import torch
from torch import Tensor

from ._checks import check_positive_int
from ._compat import can_sync
from ._positions import check_batch, check_ids

__all__ = ["Visibility", "document_numbers", "document_positions", "resolve_document_ids", "visible"]


def document_positions(document_ids: Tensor) -> Tensor:
    """Positions that restart at 0 in each packed document.

    A new document starts wherever the id changes from one token to the next (ids are any
    integers; equal ids that are not adjacent are two documents), so ``[7, 7, 7, 2, 2, 7]``
    gives ``[0, 1, 2, 0, 1, 0]``. Feed the result as ``positions`` so that every document is
    encoded as if it were alone in its row.

    Args:
        document_ids: ``(t,)`` or ``(b, t)`` integer document ids.

    Returns:
        Long positions of the same shape: ``(t,)`` or ``(b, t)``.
    """
    ids = check_ids("document_ids", document_ids)
    index = torch.arange(ids.shape[-1], device=ids.device).expand_as(ids)
    # The index of each token's document start: the running maximum of the start indices.
    first = torch.where(_starts(ids), index, torch.zeros_like(index)).cummax(dim=-1).values
    return index - first


def _starts(ids: Tensor) -> Tensor:
    """``(t,)``/``(b, t)`` bool: True where a document starts (the first token, and where the id changes)."""
    starts = torch.ones_like(ids, dtype=torch.bool)
    starts[..., 1:] = ids[..., 1:] != ids[..., :-1]
    return starts


def document_numbers(document_ids: Tensor) -> Tensor:
    """Number the packed documents of each row: 0, 1, 2, ... (a new document where the id changes).

    The rule of packed documents everywhere in posenc: a document is a run of equal ids, so two
    documents with the same id that are not adjacent stay apart (``[7, 7, 2, 7]`` gives
    ``[0, 0, 1, 2]``). Equal numbers mean one document, whatever order the tokens are later
    taken in (a shard of a sequence, gathered keys).

    Args:
        document_ids: ``(t,)`` or ``(b, t)`` integer document ids, in sequence order.

    Returns:
        Long document numbers of the same shape.
    """
    ids = check_ids("document_ids", document_ids)
    return _starts(ids).long().cumsum(dim=-1) - 1


def resolve_document_ids(
    document_ids: Tensor, q_document_ids: Tensor | None, tq: int, tk: int, batch: int
) -> tuple[Tensor, Tensor]:
    """Check the keys' (and queries') document ids; queries default to the last ``tq`` of the keys'.

    Without ``q_document_ids`` the ids become :func:`document_numbers` (a new number where the id
    changes), so equal ids of non-adjacent documents never match. Given ``q_document_ids``
    (queries that are not the last ``tq`` keys, e.g. a shard), both sides are compared as given:
    they must already be numbers that differ between the documents of a row, e.g. the
    :func:`document_numbers` of the whole sequence (as context parallelism passes them).

    Returns:
        ``(q_ids, k_ids)`` of shapes ``(tq,)``/``(b, tq)`` and ``(tk,)``/``(b, tk)``.
    """
    k_ids = check_ids("document_ids", document_ids, tk)
    q_ids = None if q_document_ids is None else check_ids("q_document_ids", q_document_ids, tq)
    if q_ids is None and tq > tk:
        raise ValueError(
            f"document_ids has {tk} entries (one per key) but there are {tq} queries; "
            f"pass q_document_ids of length {tq}"
        )
    check_batch("document_ids", k_ids, batch, rank=2)
    if q_ids is not None:
        check_batch("q_document_ids", q_ids, batch, rank=2)
        return q_ids, k_ids
    # Number the documents (0, 1, 2, ... where the id changes), so that two documents with the
    # same id that are not adjacent stay apart; the queries' are the last tq of the keys'.
    k_ids = document_numbers(k_ids)
    return k_ids[..., tk - tq :], k_ids


def _rows(x: Tensor) -> Tensor:
    """``(t,)`` -> ``(1, 1, t, 1)``; ``(b, t)`` -> ``(b, 1, t, 1)``: a query-side operand."""
    return x.reshape(x.shape[0] if x.dim() == 2 else 1, 1, x.shape[-1], 1)  # (not -1: ambiguous with t = 0)


def _cols(x: Tensor) -> Tensor:
    """``(t,)`` -> ``(1, 1, 1, t)``; ``(b, t)`` -> ``(b, 1, 1, t)``: a key-side operand."""
    return x.reshape(x.shape[0] if x.dim() == 2 else 1, 1, 1, x.shape[-1])


def _reach(first: Any, last: Any, causal: bool, window: int | Tensor | None) -> tuple[Any, Any]:
    """The lowest and highest key position that queries at positions ``first..last`` may see by
    causality and the window (``None``: unbounded); ints (index rule) or broadcast tensors.

    The one statement of these rules: causal ``k_pos <= q_pos`` and ``q_pos - k_pos < window``;
    without causality (a bidirectional window) ``|q_pos - k_pos| <= window // 2``.
    """
    if causal:
        return (None if window is None else first - window + 1), last
    if window is None:
        return None, None
    return first - window // 2, last + window // 2


def visible(q_pos: Tensor, k_pos: Tensor | int, causal: bool, window: int | Tensor | None) -> Tensor:
    """Whether a query at ``q_pos`` sees a key at ``k_pos`` by causality and a window (:func:`_reach`).

    For the chunks' blocks, the Toeplitz bias and FlexAttention's ``mask_mod``; needs causality or
    a window. Comparisons of ``(.., r, 1)`` with ``(.., 1, c)`` give the bool block directly, never
    an int64 ``(r, c)`` distance. ``window`` may be a 0-d tensor (FlexAttention: a new size does not
    recompile).
    """
    low, high = _reach(q_pos, q_pos, causal, window)
    seen = k_pos <= high  # causal or a window: high is set
    return seen if low is None else seen & (k_pos >= low)


@dataclass
class Visibility:
    """The keys each query may see (see the module docstring for the rules).

    Attributes:
        tq, tk: numbers of queries and keys.
        device: where masks are built.
        user: the user's 4-D keep-mask, broadcastable to ``(b, h, tq, tk)``, or ``None``.
        causal: mask keys after each query.
        window: the sliding window, or ``None``.
        q_pos, k_pos: explicit positions ``(t,)``/``(b, t)``; ``None`` for the index rule
            (default positions), where query row ``i`` sits at key index ``i + offset``.
        q_doc, k_doc: document ids ``(t,)``/``(b, t)``, or ``None``.
        offset: ``tk - tq`` (the index rule); by_index, positional, structural, ranged: set from the
            rules (see the comments in :meth:`__post_init__`).
    """

    tq: int
    tk: int
    device: torch.device
    user: Tensor | None = None
    causal: bool = False
    window: int | None = None
    q_pos: Tensor | None = None
    k_pos: Tensor | None = None
    q_doc: Tensor | None = None
    k_doc: Tensor | None = None

    def __post_init__(self) -> None:
        self.offset = self.tk - self.tq
        #: Positions are the default ones: the rules are about indices.
        self.by_index = self.q_pos is None
        #: Whether any rule depends on positions (causality or a window).
        self.positional = self.causal or self.window is not None
        #: Whether anything beyond the user's mask and index causality restricts the keys.
        self.structural = (
            self.window is not None or self.q_doc is not None or (self.causal and not self.by_index)
        )
        #: Whether each query chunk's visible keys are a range known from indices alone.
        self.ranged = self.by_index and self.q_doc is None

    def block(self, rows: slice, cols: slice) -> Tensor | None:
        """The keep-mask of queries ``rows`` and keys ``cols``: ``(b|1, h|1, r, c)`` bool, or ``None``.

        Only the block is built: ``O(r * c)`` memory, never ``(tq, tk)`` unless asked for it.
        """
        # Not slice.indices(): it would specialise symbolic lengths under torch.compile.
        r0, r1 = rows.start or 0, self.tq if rows.stop is None else rows.stop
        c0, c1 = cols.start or 0, self.tk if cols.stop is None else cols.stop
        keep = None
        if (u := self.user) is not None:
            keep = u[
                ..., rows if u.shape[-2] != 1 else slice(None), cols if u.shape[-1] != 1 else slice(None)
            ]
        if self.positional:
            if self.q_pos is None or self.k_pos is None:
                qp = _rows(torch.arange(r0, r1, device=self.device) + self.offset)
                kp = _cols(torch.arange(c0, c1, device=self.device))
            else:
                qp, kp = _rows(self.q_pos[..., rows]), _cols(self.k_pos[..., cols])
            rule = visible(qp, kp, self.causal, self.window)
            keep = rule if keep is None else keep & rule
        if self.q_doc is not None and self.k_doc is not None:
            same = _rows(self.q_doc[..., rows]) == _cols(self.k_doc[..., cols])
            keep = same if keep is None else keep & same
        return keep

    def spans(self, chunk: int) -> list[tuple[int, int, int, int]]:
        """``(start, end, lo, hi)``: query rows ``[start, end)`` in chunks of at most ``chunk``, and the
        keys ``[lo, hi)`` they may see.

        With packed documents a chunk also ends where a document starts (in any batch row), so
        that each chunk's queries belong to one document: it reads only that document's keys,
        and a key-only bias (causal ALiBi's, relative to the chunk's last query) stays small.
        """
        # chunks of at most `chunk` rows between the breaks (ascending, each in 1..tq-1)
        bounds = pairwise([0, *self.document_breaks, self.tq])
        spans = [(s, min(s + chunk, cut)) for first, cut in bounds for s in range(first, cut, chunk)]
        return [(s, e, *self.visible_range(s, e)) for s, e in spans]

    @cached_property
    def document_breaks(self) -> list[int]:
        """The query rows where a packed document starts in any batch row (not row 0); none where the
        ids cannot be read without a device sync (:func:`~posenc._compat.can_sync`). Read once per call."""
        if self.q_doc is None or not can_sync(self.q_doc) or self.tq < 2:
            return []
        changed = (self.q_doc[..., 1:] != self.q_doc[..., :-1]).reshape(-1, self.tq - 1).any(dim=0)
        return (changed.nonzero().flatten() + 1).tolist()

    def visible_range(self, start: int, end: int) -> tuple[int, int]:
        """The keys ``[lo, hi)`` outside which query rows ``[start, end)`` see nothing.

        From indices when :attr:`ranged`; otherwise read from the chunk's ``(r, tk)`` block (one
        host sync per chunk, eager only), so that a chunk of one packed document or one window
        reads only those keys.
        """
        lo, hi = 0, self.tk
        if self.by_index:  # both bounds grow with the row: the first row gives lo, the last one hi
            low, high = _reach(start + self.offset, end - 1 + self.offset, self.causal, self.window)
            lo, hi = max(0, low or 0), min(self.tk, self.tk if high is None else high + 1)
        if self.ranged or not can_sync(self.device) or hi <= lo:
            return lo, hi
        # Keys the chunk may see, bounded per key in O(b * tk) (not the O(chunk * tk) block): of
        # its documents, and within reach of its smallest and largest query position.
        cols: Tensor | None = None
        if self.q_doc is not None and self.k_doc is not None:
            cols = torch.isin(self.k_doc[..., lo:hi].contiguous(), self.q_doc[..., start:end].contiguous())
        if self.positional and self.q_pos is not None and self.k_pos is not None:
            qp, kp = self.q_pos[..., start:end], self.k_pos[..., lo:hi]
            low, high = _reach(qp.amin(-1, keepdim=True), qp.amax(-1, keepdim=True), self.causal, self.window)
            near = kp <= high  # positional (causal or a window): high is set
            near = near if low is None else near & (kp >= low)
            cols = near if cols is None else cols & near
        if cols is None:
            return lo, hi
        seen = cols.reshape(-1, cols.shape[-1]).any(dim=0).nonzero()
        if seen.numel() == 0:
            return lo, lo
        return lo + int(seen[0]), lo + int(seen[-1]) + 1


def check_window(window: object) -> int | None:
    """``None`` or a positive int (the sliding window)."""
    return None if window is None else check_positive_int("window", window)
