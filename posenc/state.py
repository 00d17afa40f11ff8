"""The position state of one forward pass: what :meth:`~posenc.base.PositionalEncoding.prepare` returns.

:class:`PositionState` holds the resolved positions of queries and keys and calls the encoding's
hooks at them; built-in encodings return subclasses that hold their precomputed tables. It is
built by :meth:`~posenc.base.PositionalEncoding.prepare`. It imports nothing of posenc at run time.

Shape key used in the docstrings: ``b`` batch, ``h`` heads, ``t`` sequence (``tq`` queries,
``tk`` keys), ``dh`` head width.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

import torch
from torch import Tensor

if TYPE_CHECKING:
    from ._positions import Positions
    from .base import PositionalEncoding

__all__ = ["BiasForm", "PositionState", "ScoreMod"]

# A FlexAttention score modifier: (score, batch, head, q_idx, kv_idx) -> score.
ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]


#: Which form an encoding's attention bias takes, known before any bias is computed:
#: ``"none"`` (no bias), ``"key"`` (query-independent ``(.., 1, tk)``, exact under causal
#: softmax) or ``"full"`` (``(.., tq, tk)``).
BiasForm = Literal["none", "key", "full"]


class PositionState:
    """Position state for one forward pass: computed once, reused by every attention layer.

    :meth:`PositionalEncoding.prepare` builds it from the positions of queries and keys;
    what it holds depends on the encoding (RoPE: its cos/sin rows; T5: its bias by distance;
    ALiBi: its slopes), so a model whose layers all use one encoding does the table work once
    per forward, as gpt-fast hands ``freqs_cis[input_pos]`` and timm's Eva hands ``rope=`` to
    every block. :func:`posenc.attention` accepts a state wherever it accepts an encoding::

        state = encoding.prepare(t, q_positions=positions)       # once per forward
        for layer in layers:
            q, k = state.encode_qk(q, k)                         # or let attention() do it
            y = posenc.attention(q, k, v, state, causal=True, qk_encoded=True)

    This base class serves any encoding through its hooks; built-in encodings name a subclass
    in :attr:`~posenc.base.PositionalEncoding.state_class` that holds their tables and
    implements their hooks, once: the encoding's own hooks build that state and apply it.

    Keys: :meth:`encode_qk` encodes keys of length ``tk`` at :attr:`k_positions`, and keys of
    length ``tq < tk`` at :attr:`q_positions` — the new tokens' keys in self-attention with a
    KV cache, whose positions are the queries'.

    Attributes:
        encoding: the encoding that built the state.
        q_positions: ``(tq,)`` or ``(b, tq)`` long positions of the queries.
        k_positions: ``(tk,)`` or ``(b, tk)`` long positions of the keys.
        q_start, k_start: the first position when that side has the default consecutive
            positions, else ``None``.
        bias_form: ``"none"``, ``"key"`` (query-independent ``(.., 1, tk)``, exact for causal
            attention) or ``"full"``: which bias :meth:`attention_bias` returns.
        causal_only: the state is exact only under causal attention (true for the key form).
    """

    bias_form: BiasForm
    #: Whether this state is exact only in causal attention (ALiBi's key-only bias, xPos):
    #: :func:`posenc.attention` refuses it with ``causal=False`` instead of a silently wrong result.
    causal_only: bool = False
    #: Why the state is causal-only and what to do instead: the end of the error message
    #: :func:`posenc.attention` raises for ``causal=False``.
    causal_only_reason: str = (
        "its key-only bias (e.g. ALiBi(causal=True)) equals the full bias only under a causal mask; "
        "for bidirectional attention build it with causal=False"
    )
    #: Float temporaries per (query, key) pair that computing the bias needs beyond the bias
    #: itself (FIRE's MLP hidden layer): :func:`posenc.attention` counts them in its memory budget.
    bias_scratch: int = 0

    def __init__(
        self,
        encoding: PositionalEncoding,
        q_positions: Positions,
        k_positions: Positions,
        *,
        q_start: int | None = None,
        k_start: int | None = None,
        bias_form: BiasForm | None = None,
    ) -> None:
        self.encoding, self._q_positions, self._k_positions = encoding, q_positions, k_positions
        self.q_start, self.k_start = q_start, k_start
        self.bias_form = bias_form or ("full" if "attention_bias" in encoding.overridden_hooks else "none")
        if self.bias_form == "key":
            self.causal_only = True

    @property
    def q_positions(self) -> Tensor:
        return p if isinstance(p := self._q_positions, Tensor) else p.tensor()  # default ones: made when read

    @property
    def k_positions(self) -> Tensor:
        return p if isinstance(p := self._k_positions, Tensor) else p.tensor()

    @property
    def q_len(self) -> int:
        return self._q_positions.shape[-1]

    @property
    def k_len(self) -> int:
        return self._k_positions.shape[-1]

    def _check_lengths(self, q: Tensor, k: Tensor) -> None:
        """Refuse queries ``(b, h, tq, ·)`` and keys ``(b, h_kv, tk, ·)`` this state was not prepared for: other
        lengths, or a batch other than its ``(b, t)`` positions' (a bias of the wrong shape otherwise)."""
        tq, tk, batch = q.shape[-2], k.shape[-2], max(q.shape[0], k.shape[0])
        if (tq, tk) != (self.q_len, self.k_len):
            raise ValueError(
                f"got {tq} queries and {tk} keys, but this {type(self).__name__} was prepared "
                f"for {self.q_len} queries and {self.k_len} keys"
            )
        self._check_batch(batch)

    def _check_batch(self, batch: int, rank: int = 2) -> None:
        """Refuse a batch other than that of its batched positions (rank ``rank``: ``(b, t)``, ``(b, t, a)``)."""
        rows = {p.shape[0] for p in (self._q_positions, self._k_positions) if len(p.shape) == rank} - {1}
        if rows and rows != {batch}:
            raise ValueError(
                f"got a batch of {batch}, but this {type(self).__name__} was prepared for positions of batch "
                f"{min(rows)}"
            )

    def key_side(self, k: Tensor) -> str:
        """Where keys ``k`` sit: ``"k"`` (``tk`` rows, at the keys' positions) or ``"q"`` (``tq < tk``
        rows, new tokens with a KV cache, at the queries')."""
        n = k.shape[-2]
        if n == self.k_len:
            return "k"
        if n == self.q_len:
            return "q"
        raise ValueError(
            f"k has {n} positions, but this PositionState was prepared for {self.k_len} keys "
            f"(or {self.q_len} new keys at the query positions)"
        )

    def encode_qk(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """The encoding's :meth:`~PositionalEncoding.encode_qk` at this state's positions.

        Args:
            q: ``(b, h, tq, dh)``; k: ``(b, h_kv, tk, dh)`` or ``(b, h_kv, tq, dh)`` (see the class).

        Returns:
            ``(q, k)``, same shapes and dtypes.
        """
        if "encode_qk" not in self.encoding.overridden_hooks:
            return q, k
        kp = self.k_positions if self.key_side(k) == "k" else self.q_positions
        return self.encoding.encode_qk(q, k, q_positions=self.q_positions, k_positions=kp)

    def attention_bias(self, q: Tensor, k: Tensor) -> Tensor | None:
        """The encoding's :meth:`~PositionalEncoding.attention_bias` at this state's positions.

        Returns:
            ``None`` (when :attr:`bias_form` is ``"none"``), or a float tensor broadcastable to
            ``(b, h, tq, tk)``.
        """
        if self.bias_form == "none":
            return None
        return self.encoding.attention_bias(q, k, q_positions=self.q_positions, k_positions=self.k_positions)

    def distances(self) -> Tensor | None:
        """The ascending distances ``k_pos - q_pos`` of a Toeplitz bias, or ``None``.

        When both sides have default consecutive positions, a bias that depends only on the
        distance is a Toeplitz matrix: ``bias[i, j] = values[j - i + tq - 1]`` for values at these
        ``tq + tk - 1`` distances, from ``k_start - (q_start + tq - 1)`` upwards.
        """
        if self.q_start is None or self.k_start is None or self.q_len == 0 or self.k_len == 0:
            return None
        first = self.k_start - (self.q_start + self.q_len - 1)
        return torch.arange(first, first + self.q_len + self.k_len - 1, device=self.q_positions.device)

    def bias_by_distance(self, dtype: torch.dtype) -> Tensor | None:
        """The bias at each of :meth:`distances`, ``(h, tq + tk - 1)``, or ``None``.

        ``None`` when the positions are not both default or the bias is not a function of the
        distance alone (the base class). :func:`posenc.attention` reads a Toeplitz bias from
        this vector without ever building ``(h, tq, tk)``.
        """
        return None

    @property
    def bias_heads(self) -> int | None:
        """The query head count the bias (and value term) was built for; ``None`` when any count works.

        :func:`posenc.attention` checks it on every path, so that a bias built for another number
        of heads is never broadcast over the queries' heads.
        """
        return None

    @property
    def has_value_term(self) -> bool:
        """Whether :meth:`value_term` adds to the attention output (then attention needs the weights)."""
        return "value_term" in self.encoding.overridden_hooks

    def value_term(self, probs: Tensor) -> Tensor | None:
        """The encoding's :meth:`~PositionalEncoding.value_term` at this state's positions.

        Args:
            probs: ``(b, h, tq, tk)`` attention weights.

        Returns:
            ``None``, or ``(b, h, tq, dv)`` to add to ``probs @ v``.
        """
        if not self.has_value_term:
            return None
        return self.encoding.value_term(probs, q_positions=self.q_positions, k_positions=self.k_positions)

    def score_mod(self, q: Tensor, k: Tensor) -> ScoreMod | None:
        """The encoding's FlexAttention ``score_mod`` at this state's positions, or ``None``."""
        return self.encoding.score_mod(q, k, q_positions=self.q_positions, k_positions=self.k_positions)

    def narrow(self, rows: slice, cols: slice) -> PositionState:
        """The state of a block of queries (``rows``) and keys (``cols``), e.g. one query chunk.

        Args:
            rows, cols: slices of step 1 over the query and key tokens; negative and open ends count
                from the ends as in Python (``slice(-2, None)``: the last two).

        Subclasses that hold tables indexed by query or key slice them in :meth:`_narrow_tables`.
        """
        rows, cols = _block(rows, self.q_len, "rows"), _block(cols, self.k_len, "cols")
        state = copy.copy(self)
        state._q_positions, state._k_positions = self.q_positions[..., rows], self.k_positions[..., cols]
        state.q_start = None if self.q_start is None else self.q_start + rows.start
        state.k_start = None if self.k_start is None else self.k_start + cols.start
        state._narrow_tables(rows, cols)
        return state

    def _narrow_tables(self, rows: slice, cols: slice) -> None:
        """Slice tables held per query row or key column (none here)."""

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({type(self.encoding).__name__}, tq={self.q_len}, tk={self.k_len}, "
            f"bias_form={self.bias_form!r})"
        )


def _block(tokens: slice, length: int, name: str) -> slice:
    """``tokens`` as ``slice(start, stop)`` with ``start`` an index from 0 (``stop`` may stay open): the starts
    of a narrowed state add ``start``, so a negative end must be resolved first, and a step would skip tokens."""
    if not isinstance(tokens, slice):
        raise TypeError(f"{name} must be a slice, got {type(tokens).__name__}")
    if tokens.step not in (None, 1):
        raise ValueError(f"{name} must be a slice of step 1 (a block of tokens), got step {tokens.step}")
    start, stop = tokens.start, tokens.stop
    if (start is None or start >= 0) and (stop is None or stop >= 0):  # (a traced length stays symbolic)
        return slice(start or 0, stop)
    start, stop, _ = tokens.indices(length)
    return slice(start, max(start, stop))
