"""RoPE's position state: the cos/sin rows of one forward pass, shared by every layer.

:meth:`posenc.encodings.rotary.RoPE.prepare` builds a :class:`RotaryState`; this module holds
only the state (re-exported by :mod:`posenc.encodings.rotary`). The rows and the table they come
from are the encoding's (:meth:`RoPE._rows <posenc.encodings.rotary.RoPE._rows>`).

Shape key: ``b`` batch, ``h`` heads, ``tq`` queries, ``tk`` keys, ``dh`` head width, ``r/2``
rotated pairs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..base import PositionState, check_qk
from ..functional.rotary import _apply, apply_tables, eager_ok, eager_tables

if TYPE_CHECKING:  # RoPE builds this state, so its module imports this one
    from .rotary import RoPE

__all__ = ["RotaryState"]

RowsPair = tuple[Tensor, Tensor]


class RotaryState(PositionState):
    """RoPE's position state: the cos/sin rows of one forward pass, shared by every layer.

    Built by :meth:`RoPE.prepare`. The query rows are computed at once, the key rows when
    keys of length ``tk`` are first rotated (with a KV cache only the new keys are rotated, at
    the query positions, so the ``tk`` rows may never be needed). In eager mode the first
    rotation of each side and dtype also builds the rows' apply-ready form
    (:func:`~posenc.functional.rotary.eager_tables`: ``(t, r)`` or ``(b, 1, t, r)``, never per
    head), which the keys at the same positions and every later layer reuse.

    Attributes:
        q_cos, q_sin: ``(tq, r/2)`` or ``(b, 1, tq, r/2)`` rows of the queries, in the table's
            dtype (float32; float64 after ``.double()``).
        seq_len: the length ``L`` the length-dependent variants (dynamic, longrope) use: given to
            :meth:`RoPE.prepare`, else one past the largest position (an int when eager, a
            tensor under compile/export); ``None`` for the other variants when traced.
        end: eager only: one past the largest position of queries and keys (else ``None``).
    """

    encoding: RoPE

    def __init__(
        self,
        encoding: RoPE,
        q_positions: Tensor,
        k_positions: Tensor,
        *,
        q_start: int | None,
        k_start: int | None,
        seq_len: int | Tensor | None,
        end: int | None,
    ) -> None:
        super().__init__(
            encoding, q_positions, k_positions, q_start=q_start, k_start=k_start, bias_form="none"
        )
        self.seq_len = seq_len
        self.end = end
        self.q_cos, self.q_sin = self._rows(q_positions, q_start)
        self._k_rows: RowsPair | None = None
        # (_table_key(side, role), dtype) -> eager_tables(rows): built once, then used by every layer
        self._tables: dict[tuple[str, torch.dtype], tuple[Tensor, ...]] = {}

    def _rows(self, positions: Tensor, start: int | None, dtype: torch.dtype | None = None) -> RowsPair:
        return self.encoding._rows(positions, start, self.seq_len, self.end, dtype)

    def query_rows(self, dtype: torch.dtype = torch.float32) -> RowsPair:
        """cos and sin of the queries; float64 rows (from the formula) when ``dtype`` is float64."""
        if dtype == torch.float64 and self.q_cos.dtype != dtype:
            return self._rows(self.q_positions, self.q_start, dtype)
        return self.q_cos, self.q_sin

    def key_rows(self, k: Tensor) -> RowsPair:
        """cos and sin of keys ``k``: at the keys' positions for ``tk`` rows, at the queries' for ``tq``."""
        return self._side_rows(self._key_side(k), k.dtype)

    def _key_side(self, k: Tensor) -> str:
        """``"q"`` when keys ``k`` sit at the queries' positions (``tq`` keys with a KV cache, or
        self-attention with the same positions), else ``"k"``."""
        return "q" if self.key_positions(k)[0] is self.q_positions else "k"

    def _side_rows(self, side: str, dtype: torch.dtype) -> RowsPair:
        if side == "q":
            return self.query_rows(dtype)
        if dtype == torch.float64 and self.q_cos.dtype != dtype:
            return self._rows(self.k_positions, self.k_start, dtype)
        if self._k_rows is None:
            self._k_rows = self._rows(self.k_positions, self.k_start)
        return self._k_rows

    def _rotation_rows(self, side: str, role: str, dtype: torch.dtype) -> RowsPair:
        """The cos and sin a ``role`` (``"query"`` or ``"key"``) tensor at the positions of ``side``
        is rotated with: the side's rows (xPos scales them by role)."""
        return self._side_rows(side, dtype)

    def _table_key(self, side: str, role: str) -> str:
        """What the apply-ready tables of ``side`` and ``role`` are cached under (with the dtype):
        RoPE's depend on the side only, so queries and keys at the same positions share them."""
        return side

    def _rotate(self, x: Tensor, side: str, role: str = "query") -> Tensor:
        """Rotate ``x`` at the positions of ``side``; eager calls reuse the tables for x's dtype."""
        layout = self.encoding.layout
        if not eager_ok(x):
            return _apply(x, *self._rotation_rows(side, role, x.dtype), layout)
        key = (self._table_key(side, role), x.dtype)
        tables = self._tables.get(key)
        if tables is None:
            rows = self._rotation_rows(side, role, x.dtype)
            tables = self._tables[key] = eager_tables(*rows, x.dtype, layout)
        return apply_tables(x, tables, layout)

    def encode_qk(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """Rotate queries ``(b, h, tq, dh)`` and keys ``(b, h_kv, tk or tq, dh)`` at this state's positions."""
        check_qk(q, k, head_dim=self.encoding.head_dim)
        return self._encode(q, k)

    def _encode(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        if q.shape[-2] != self.q_len:
            raise ValueError(
                f"q has {q.shape[-2]} positions, but this {type(self).__name__} was prepared for {self.q_len}"
            )
        return self._rotate(q, "q", "query"), self._rotate(k, self._key_side(k), "key")

    def _narrow_tables(self, rows: slice, cols: slice) -> None:
        self._tables = {}  # this is a shallow copy: never narrow the original's tables
        self.q_cos, self.q_sin = self.q_cos[..., rows, :], self.q_sin[..., rows, :]
        if self._k_rows is not None:
            self._k_rows = (self._k_rows[0][..., cols, :], self._k_rows[1][..., cols, :])
