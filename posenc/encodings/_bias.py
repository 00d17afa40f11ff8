"""The shared paths of the attention biases: one for a function of positions and head (ALiBi, T5,
KERPLE, FIRE), one for a query term read by distance (Shaw's relative keys, Transformer-XL).

Each of these encodings writes its formula once, :meth:`PositionBias.bias_fn`: a function of
broadcastable integer query positions, key positions and head indices. :class:`PositionBiasState`
applies it in every form the attention asks for:

* by distance: ``(h, tq + tk - 1)`` at default positions, spread into a Toeplitz matrix (or read as
  one by :func:`posenc.attention`), when the bias depends on ``k_pos - q_pos`` alone;
* dense: ``(1|b, h, tq, tk)`` for explicit positions;
* key-only: ``(1|b, h, 1, tk)``, the dense form at the largest query position (causal ALiBi);
* FlexAttention's ``score_mod``: the function on 0-d tensors, inside the kernel.

:class:`ContentBiasState` computes a term per distinct distance ``(b, h, tq, n)`` from the queries
and reads it per (query, key) pair, by a gather or inside a ``score_mod``.

Shape key: ``b`` batch, ``h`` heads, ``tq`` queries, ``tk`` keys.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar, cast

import torch
from torch import Tensor

from .._compat import is_tracing, outside_autocast, precise_dtype
from .._positions import check_bias_qk, check_scores
from ..base import PositionalEncoding
from ..functional.shaw import clipped_distance_index
from ..state import BiasForm, PositionState, ScoreMod

__all__ = ["ContentBiasState", "PositionBias", "PositionBiasState"]

#: ``(q_pos, k_pos, head) -> bias`` on broadcastable integer tensors (0-d inside a score_mod).
BiasFn = Callable[[Tensor, Tensor, Tensor], Tensor]


def _toeplitz_by_distance(values: Tensor, tq: int, tk: int) -> Tensor:
    """Spread values over ascending distances ``k_pos - q_pos`` into ``(tq, tk)``.

    With consecutive positions a bias that depends only on ``k_pos - q_pos`` is a Toeplitz
    matrix: ``out[i, j] = values[j - i + tq - 1]``. Windows of ``values`` (``unfold``) then one
    flip of the rows write it in a single pass, with no ``(tq, tk)`` index tensor (about 2x
    faster than a gather). Under ``torch.compile`` and
    ``torch.export`` it gathers instead, so that one graph serves every length.

    Args:
        values: ``(..., tq + tk - 1)``, at the distances ``-(tq - 1) + s .. tk - 1 + s`` of
            consecutive positions (``s = k_start - q_start``, see :meth:`~posenc.PositionState.distances`).
        tq, tk: query and key lengths.

    Returns:
        ``(..., tq, tk)``, contiguous.
    """
    if is_tracing():
        # unfold with a symbolic window size specialises it (one graph per length under
        # torch.compile, a length constraint under torch.export); a gather of
        # out[i, j] = values[j - i + tq - 1] keeps the length dynamic.
        index = torch.arange(tk, device=values.device) - torch.arange(tq, device=values.device).unsqueeze(-1)
        return values[..., index + (tq - 1)]
    # unfold's row r starts at distance index r (increasing); query i needs start tq-1-i.
    # flip may keep the window view's column-major strides when tq < tk: make it row-major.
    return values.unfold(-1, tk, 1).flip(-2).contiguous()


def _row_major(x: Tensor) -> Tensor:
    """``x`` with the canonical row-major strides (a copy only when it has others).

    ``is_contiguous()`` ignores the strides of size-1 dims and dynamo does not, so the strides
    themselves are compared: every call then meets the same stride guards.
    """
    # row-major: the stride of a dim is the product of the sizes after it
    if tuple(math.prod(x.shape[i + 1 :]) for i in range(x.dim())) == x.stride():
        return x
    return x.clone(memory_format=torch.contiguous_format)


def _lookup(t: Tensor) -> Callable[..., Tensor]:
    """A lookup ``(*indices) -> t[indices]`` of scalar index tensors, for a ``score_mod`` or ``mask_mod``.

    One flat read of a view of ``t``, with its strides as 0-d tensors (0 on size-1 dims,
    which broadcast): with dynamic shapes, torch's CPU FlexAttention fails to compile
    multi-dimensional indexing of a captured tensor and rejects captured Python ints (they
    become symbols). A *view* (not a new tensor) keeps the buffer's length an expression in
    ``t``'s sizes; a fresh buffer of a new length breaks the C++ build of torch 2.13-2.15's
    CPU kernel (``'cur_kvSplitSize7' was not declared``).
    """
    t = _row_major(t)
    flat = t.reshape(-1)
    strides = [
        torch.full((), 0 if size == 1 else stride, device=t.device)  # a fill, not a host copy
        for size, stride in zip(t.shape, t.stride(), strict=True)
    ]

    def read(*idx: Tensor) -> Tensor:
        at = idx[0] * strides[0]
        for i, s in zip(idx[1:], strides[1:], strict=True):
            at = at + i * s
        return flat[at]

    return read


def _rows_of(x: Tensor) -> Callable[[Tensor, Tensor], Tensor]:
    """``(b, i) -> x[b, i]`` for ``(t,)`` or ``(1|b, t)`` per-token values (positions, ids)."""
    return _lookup(x.reshape(-1 if x.dim() == 2 else 1, x.shape[-1]))


def _add_to_scores(scores: Tensor, bias: Tensor, inputs: str) -> Tensor:
    """``scores + bias`` in the bias' dtype, cast back to the scores'; ``inputs`` names what made the bias."""
    if scores.shape[1:] != bias.shape[1:] or scores.shape[0] not in (1, bias.shape[0]):
        raise ValueError(f"scores {tuple(scores.shape)} do not match {inputs} (expected {tuple(bias.shape)})")
    return (scores.to(bias.dtype) + bias).to(scores.dtype)


class PositionBiasState(PositionState):
    """The position state of a :class:`PositionBias`: positions, and T5's table looked up once.

    Parameters are read at each call (so gradients reach them); every method works on any block
    of positions, so the base class's :meth:`narrow` serves the chunked path.
    """

    encoding: PositionBias

    #: T5's per-distance table, looked up once per forward (``None`` for the others).
    table: Tensor | None = None

    def __init__(self, encoding: PositionBias, *args: Any, **kwargs: Any) -> None:
        """The base class's arguments; the bias form (key-only for a causal ALiBi) and the table from ``encoding``."""
        form: BiasForm = "key" if encoding.key_only_when_causal and encoding.causal else "full"
        super().__init__(encoding, *args, bias_form=form, **kwargs)
        self.table, self.bias_scratch = encoding.prepare_table(), encoding.bias_scratch

    @property
    def bias_heads(self) -> int | None:
        return self.encoding.num_heads

    def bias_by_distance(self, dtype: torch.dtype) -> Tensor | None:
        distances = self.distances()
        if distances is None or not self.encoding.by_distance:
            return None
        heads = torch.arange(self.encoding.num_heads, device=distances.device).unsqueeze(-1)
        return self.encoding.bias_fn(dtype, self.table)(distances.new_zeros(()), distances, heads)

    def bias(self, dtype: torch.dtype, q_positions: Tensor | None = None) -> Tensor:
        """The dense ``(1|b, h, tq, tk)`` bias in ``dtype``: the paper's form, for every query.

        ``q_positions`` (default the state's) gives other query positions: the key-only form.
        """
        values = self.bias_by_distance(dtype) if q_positions is None else None
        if values is not None:
            return _toeplitz_by_distance(values, self.q_len, self.k_len).unsqueeze(0)
        qp = self.q_positions if q_positions is None else q_positions
        return self.encoding.dense_bias(
            torch.atleast_2d(qp)[..., None], torch.atleast_2d(self.k_positions)[:, None], dtype, self.table
        )

    def attention_bias(self, q: Tensor, k: Tensor) -> Tensor:
        """The smallest exact form of the bias.

        Args:
            q: ``(b, h, tq, dh)`` queries (shape, device and dtype only); ``h == num_heads``.
            k: ``(b, h_kv, tk, dh)`` keys (likewise).

        Returns:
            The key-only form ``(1|b, h, 1, tk)`` where :attr:`bias_form` is ``"key"`` (see
            :class:`~posenc.ALiBi`), else ``(1|b, h, tq, tk)``; float32 (float64 for float64 ``q``),
            contiguous with heads outermost, differentiable in the parameters.
        """
        check_bias_qk(q, k, self.encoding.num_heads)
        self._check_lengths(q, k)
        if self.bias_form != "key":
            return self.bias(precise_dtype(q))
        qp = self.q_positions
        # no queries: any reference will do (amax of nothing fails)
        q_ref = qp.amax(-1, keepdim=True) if qp.shape[-1] else qp.new_zeros((*qp.shape[:-1], 1))
        return self.bias(precise_dtype(q), q_ref)

    def score_mod(self, q: Tensor, k: Tensor) -> ScoreMod:
        """A FlexAttention ``score_mod`` adding the dense bias inside the kernel (no ``(h, tq, tk)`` tensor)."""
        check_bias_qk(q, k, self.encoding.num_heads)
        self._check_lengths(q, k)
        fn = self.encoding.bias_fn(precise_dtype(q), self.table)
        q_pos, k_pos = _rows_of(self.q_positions), _rows_of(self.k_positions)
        return lambda score, b, h, i, j: score + fn(q_pos(b, i), k_pos(b, j), h).to(score.dtype)


class PositionBias(PositionalEncoding):
    """Base of the biases that are a function of the positions and the head (ALiBi, T5, KERPLE, FIRE).

    A subclass sets ``num_heads`` and writes :meth:`bias_fn`; :class:`PositionBiasState` (its
    :attr:`state_class`) writes every hook with it.
    """

    kind = "bias"
    state_class = PositionBiasState
    num_heads: int
    causal: bool
    #: The bias depends on ``k_pos - q_pos`` alone (FIRE's does not: its normaliser reads ``q_pos``).
    by_distance: ClassVar[bool] = True
    #: Float temporaries per (query, key) pair beyond the bias (see :class:`~posenc.PositionState`).
    bias_scratch: int = 0
    #: With ``causal`` (read at each prepare), :meth:`attention_bias` returns the key-only form,
    #: exact under a causal mask only (ALiBi).
    key_only_when_causal: ClassVar[bool] = False
    #: Causal, its formula reads the key positions only (Falcon's rounded bias): it has no full form, which a
    #: sink logit needs.
    key_only_formula: ClassVar[bool] = False
    repr_names: ClassVar[tuple[str, ...]] = ("num_heads", "causal")

    def prepare_table(self) -> Tensor | None:
        """What the state computes once per forward for :meth:`bias_fn` (T5's table), or ``None``."""
        return None

    def bias_fn(self, dtype: torch.dtype, table: Tensor | None) -> BiasFn:
        """The bias as a function of broadcastable ``(q_pos, k_pos, head)`` integer tensors, in ``dtype``."""
        raise NotImplementedError

    def dense_bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype, table: Tensor | None) -> Tensor:
        """``(1|b, h, tq, tk)`` for ``q_pos`` ``(1|b, tq, 1)`` and ``k_pos`` ``(1|b, 1, tk)``."""
        heads = torch.arange(self.num_heads, device=q_pos.device).view(-1, 1, 1)
        return self.bias_fn(dtype, table)(q_pos.unsqueeze(1), k_pos.unsqueeze(1), heads)

    def forward(
        self, scores: Tensor, q_positions: Tensor | None = None, k_positions: Tensor | None = None
    ) -> Tensor:
        """Add the dense bias to attention scores (the drop-in call).

        Args:
            scores: ``(b, h, tq, tk)`` attention scores.
            q_positions, k_positions: ``(t,)`` or ``(b, t)`` integer positions, as in :meth:`attention_bias`.

        Returns:
            ``(b, h, tq, tk)`` ``scores + bias``, added in float32 (float64 for float64 scores) and
            cast back to the scores' dtype.
        """
        check_scores(scores, self.num_heads)
        b, _, tq, tk = scores.shape
        state = self._state(tq, tk, b, scores.device, q_positions, k_positions)
        compute = precise_dtype(scores)
        return (scores.to(compute) + cast(PositionBiasState, state).bias(compute)).to(scores.dtype)


class ContentBiasState(PositionState):
    """The state of a bias that reads the queries through a table over distances (Shaw, Transformer-XL).

    The term ``q_i · a(k_pos - q_pos)`` is computed once per distinct distance, ``(b, h, tq, n)``,
    then read per (query, key) pair at row ``clamp(k_pos - q_pos, lo, hi) - lo``: a gather, or inside
    FlexAttention's kernel. Never ``(b, h, tq, tk, dh)``. A subclass gives the rows
    (:meth:`_window`) and the term per row (:meth:`_per_distance`).
    """

    encoding: Any  # ShawRelative or RelPosXL: num_heads, head_dim

    @property
    def bias_heads(self) -> int | None:
        return self.encoding.num_heads

    def _window(self) -> tuple[int, int]:
        """``(lo, hi)``: the smallest and largest distance ``k_pos - q_pos`` the table holds."""
        raise NotImplementedError

    def _per_distance(self, q: Tensor, k: Tensor, lo: int, n: int) -> tuple[Tensor, Tensor | None]:
        """``(b, h, tq, n)`` at distances ``lo .. lo + n - 1``, and a key term ``(b, h, 1, tk)`` or ``None``."""
        raise NotImplementedError

    def _check(self, q: Tensor, k: Tensor) -> None:
        """Check ``q`` and ``k`` against the encoding and the state."""
        check_bias_qk(q, k, self.bias_heads, head_dim=self.encoding.head_dim)
        self._check_lengths(q, k)

    def _rows(self, lo: int, hi: int) -> Tensor:
        """``(1|b, tq, tk)``: the row ``clamp(k_pos - q_pos, lo, hi) - lo`` of each (query, key) pair."""
        return clipped_distance_index(
            torch.atleast_2d(self.q_positions), torch.atleast_2d(self.k_positions), -lo, hi
        )

    def _terms(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor | None, int, int]:
        """``(per_distance, key_term, lo, hi)`` for checked ``q`` and ``k``."""
        self._check(q, k)
        lo, hi = self._window()
        # (outside autocast: a term float32 or better whatever the inputs, as every bias here)
        return (*outside_autocast(self._per_distance, q, k, lo, hi - lo + 1), lo, hi)

    def attention_bias(self, q: Tensor, k: Tensor) -> Tensor:
        """The term for every (query, key) pair, to add to the *scaled* scores.

        Args:
            q: ``(b, h, tq, dh)`` queries (their values are read).
            k: ``(b, h_kv, tk, dh)`` keys.

        Returns:
            ``(b, h, tq, tk)``, float32 (float64 for float64 ``q``).
        """
        per_distance, key_term, lo, hi = self._terms(q, k)
        index = self._rows(lo, hi)
        _, h, tq, n = per_distance.shape
        sizes = [per_distance.shape[:1], index.shape[:1], () if key_term is None else key_term.shape[:1]]
        (b,) = torch.broadcast_shapes(*sizes)  # the batch; (not max(): an empty batch stays empty)
        bias = per_distance.expand(b, h, tq, n).gather(
            -1, index.unsqueeze(1).expand(b, h, tq, index.shape[-1])
        )
        return bias if key_term is None else bias.add_(key_term)

    def score_mod(self, q: Tensor, k: Tensor) -> ScoreMod:
        """A FlexAttention ``score_mod`` adding the same term, read from ``(b, h, tq, n)`` (and ``(b, h, tk)``)."""
        per_distance, key_term, lo, hi = self._terms(q, k)
        term, keys = _lookup(per_distance), None if key_term is None else _lookup(key_term)
        # 0-d tensors, not Python ints: see _lookup.
        low, high = (per_distance.new_full((), x, dtype=torch.long) for x in (lo, hi))
        q_pos, k_pos = _rows_of(self.q_positions), _rows_of(self.k_positions)

        def by_distance_score_mod(score: Tensor, b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
            row = torch.clamp(k_pos(b, j) - q_pos(b, i), low, high) - low
            value = term(b, h, i, row)
            if keys is not None:
                value = value + keys(b, h, i, j)
            return score + value.to(score.dtype)

        return by_distance_score_mod
