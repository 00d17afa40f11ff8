"""The machinery shared by the multi-axis rotary encodings (:class:`~posenc.encodings.axial.AxialRoPE`,
:class:`~posenc.encodings.mrope.MRoPE`): their base class and their position state.

Positions with axes are tensors with the axis last: ``(t, a)`` or ``(b, t, a)``. Each rotated pair
``i`` reads one axis ``axis[i]`` and turns by ``coordinate[axis[i]] * inv_freq[i]``; subclasses
say which pair reads which axis at which frequency. The cos/sin rows are computed once per
forward from float64 angles (:class:`AxisRotaryState`), with no table that grows.

Shape key: ``b`` batch, ``h`` heads, ``t`` tokens (``tq`` queries, ``tk`` keys), ``a`` axes,
``dh`` head width, ``r/2`` rotated pairs.
"""

from __future__ import annotations

import copy
from typing import Literal

import torch
from torch import Tensor
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .._checks import check_float_tensor
from .._compat import check_values, wide_dtype
from .._positions import check_qk
from ..base import PositionalEncoding, PositionState
from ..functional.axial import (
    axial_cos_sin,
)
from ..functional.rotary import _rotate

__all__ = ["AxisRotaryState"]

RowsPair = tuple[Tensor, Tensor]


class AxisRotaryState(PositionState):
    """The position state of a multi-axis rotary encoding: cos/sin rows shared by every layer.

    Like :class:`~posenc.encodings.rotary.RotaryState`, but positions are ``(t, a)`` or
    ``(b, t, a)``: :attr:`q_len`/:attr:`k_len` read ``shape[-2]``.

    Attributes:
        q_cos, q_sin: ``(tq, r/2)`` or ``(b, 1, tq, r/2)`` float32 rows of the queries.
        q_start, k_start: token indices (``tk - tq`` and 0), not positions: masks follow the token
            order, since positions with axes are not ordered (:meth:`distances` is ``None``).
    """

    encoding: _AxisRotary

    def __init__(
        self, encoding: _AxisRotary, q_positions: Tensor, k_positions: Tensor, *, seq_len: int | Tensor | None
    ) -> None:
        # q_start/k_start say "the index rule": positions with axes have no order (image tokens
        # share positions), so causality and windows follow the token order, queries being the
        # last tq of the tk keys (what posenc.attention does for default positions).
        tq, tk = q_positions.shape[-2], k_positions.shape[-2]
        super().__init__(
            encoding, q_positions, k_positions, q_start=max(tk - tq, 0), k_start=0, bias_form="none"
        )
        self.seq_len = seq_len
        self.q_cos, self.q_sin = encoding._rows(q_positions, torch.float32, seq_len)
        self._k_rows: RowsPair | None = None

    @property
    def q_len(self) -> int:
        return self.q_positions.shape[-2]

    @property
    def k_len(self) -> int:
        return self.k_positions.shape[-2]

    def _query_rows(self, dtype: torch.dtype) -> RowsPair:
        if dtype == torch.float64:  # float64 inputs get float64 rows
            return self.encoding._rows(self.q_positions, dtype, self.seq_len)
        return self.q_cos, self.q_sin

    def _key_rows(self, k: Tensor) -> RowsPair:
        positions, _ = self.key_positions(k)
        if positions is self.q_positions:
            return self._query_rows(k.dtype)
        if k.dtype == torch.float64:
            return self.encoding._rows(positions, k.dtype, self.seq_len)
        if self._k_rows is None:
            self._k_rows = self.encoding._rows(positions, torch.float32, self.seq_len)
        return self._k_rows

    def encode_qk(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """Rotate queries ``(b, h, tq, dh)`` and keys ``(b, h_kv, tk or tq, dh)`` at this state's positions."""
        if self.encoding._generic_state:  # a subclass that overrides encode_qk: call it
            kp, _ = self.key_positions(k)
            return self.encoding.encode_qk(q, k, q_positions=self.q_positions, k_positions=kp)
        check_qk(q, k, head_dim=self.encoding.head_dim)
        return self._encode(q, k)

    def _encode(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        if q.shape[-2] != self.q_len:
            raise ValueError(f"q has {q.shape[-2]} positions, but this state was prepared for {self.q_len}")
        layout = self.encoding.layout
        return _rotate(q, *self._query_rows(q.dtype), layout), _rotate(k, *self._key_rows(k), layout)

    def distances(self) -> Tensor | None:
        return None  # positions with axes have no 1D distance

    def narrow(self, rows: slice, cols: slice) -> PositionState:
        state = copy.copy(self)
        state.q_positions = self.q_positions[..., rows, :]
        state.k_positions = self.k_positions[..., cols, :]
        state.q_start = (self.q_start or 0) + (rows.start or 0)
        state.k_start = (self.k_start or 0) + (cols.start or 0)
        state.q_cos, state.q_sin = self.q_cos[..., rows, :], self.q_sin[..., rows, :]
        if self._k_rows is not None:
            state._k_rows = (self._k_rows[0][..., cols, :], self._k_rows[1][..., cols, :])
        return state


class _AxisRotary(PositionalEncoding):
    """Base of the multi-axis rotary encodings: positions with axes, a state, the hooks.

    Subclasses set ``head_dim``, ``layout``, ``num_axes`` and implement :meth:`_frequencies`
    (float64 ``(r/2,)`` frequencies and ``(r/2,)`` axes), :meth:`_default_positions` and
    :meth:`_check_positions`.
    """

    kind = "rotary"
    cache_names = ("inv_freq", "axis")
    inv_freq: Tensor
    axis: Tensor
    head_dim: int
    layout: Literal["half", "interleaved"]
    num_axes: int
    attention_scaling: float = 1.0

    def _init_caches(self, device: torch.device | str | None) -> None:
        pairs = self._frequencies(torch.device("cpu"))[0].shape[0]
        self.register_buffer("inv_freq", torch.empty(pairs, device=device), persistent=False)
        self.register_buffer("axis", torch.empty(pairs, dtype=torch.long, device=device), persistent=False)
        self.reset_caches()

    def _frequencies(
        self, device: torch.device, seq_len: int | Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        raise NotImplementedError  # pragma: no cover

    @property
    def rotary_dim(self) -> int:
        """The number of rotated channels ``r`` (the rest pass through)."""
        return 2 * self.inv_freq.shape[0]

    def reset_caches(self) -> None:
        """Rebuild ``inv_freq`` (float32 copy, for inspection) and ``axis`` where they are now."""
        device = self.inv_freq.device
        if device.type == "meta":
            return
        inv_freq, axis = self._frequencies(device)
        self.inv_freq = inv_freq.to(self.inv_freq.dtype)
        self.axis = axis

    # --- positions ---------------------------------------------------------------------------

    def _default_positions(self, length: int, device: torch.device | str | None) -> Tensor:
        raise NotImplementedError  # pragma: no cover

    def _check_positions(self, positions: object, length: int, batch: int | None, name: str) -> Tensor:
        raise NotImplementedError  # pragma: no cover

    def _checked(
        self, positions: object, length: int, batch: int | None, name: str, *, floats: bool, one_d: bool
    ) -> Tensor:
        """Validate ``(t, a)``/``(b, t, a)`` positions (and ``(t,)``/``(b, t)`` when ``one_d``)."""
        a = self.num_axes
        kinds = "integer or floating" if floats else "integer"
        if not isinstance(positions, Tensor):
            raise TypeError(
                f"{name} must be a {kinds} torch.Tensor of shape (seq, {a}) or (batch, seq, {a}), "
                f"got {type(positions).__name__}"
            )
        bad_float = positions.is_floating_point() and not floats
        if bad_float or positions.is_complex() or positions.dtype == torch.bool:
            raise TypeError(f"{name} must have an {kinds} dtype, got {positions.dtype}")
        # (t,) or (b, t) is the same position on every axis (M-RoPE on text). A rank-2 tensor is
        # (b, t) when its last size is the length and it cannot be (t, a) — or, when it can be
        # both (t == a), when its first size is the batch: pass (1, t, a) for coordinates then.
        # statically_known_true: under export/compile a comparison of the symbolic length with the
        # number of axes would add a guard (length != a) and fail a dynamic-length export; a size
        # that is not provably the length is read as (t, a). Without one_d, rank 2 is always (t, a).
        as_bt = one_d and positions.dim() == 2 and statically_known_true(positions.shape[-1] == length)
        if as_bt and statically_known_true(positions.shape[0] == length) and positions.shape[-1] == a:
            as_bt = batch is not None and batch == length and batch != 1
        if one_d and (positions.dim() == 1 or as_bt):
            positions = positions[..., None].expand(*positions.shape, a)
        if positions.dim() not in (2, 3) or positions.shape[-1] != a:
            accepted = f"(seq, {a}) or (batch, seq, {a})" + (
                ", or (seq,)/(batch, seq) on every axis" if one_d else ""
            )
            raise ValueError(
                f"{name} must have shape {accepted} for {type(self).__name__} with {a} axes, "
                f"got {tuple(positions.shape)}"
            )
        if positions.shape[-2] != length:
            raise ValueError(
                f"{name} has {positions.shape[-2]} positions, expected {length} (the sequence length)"
            )
        if positions.dim() == 3 and batch is not None and positions.shape[0] not in (1, batch):
            raise ValueError(f"{name} has batch size {positions.shape[0]}, expected {batch} or 1")
        if positions.is_floating_point():
            check_values(positions.isfinite(), f"{name} must be finite, got a NaN or infinite coordinate")
        if not floats:
            check_values(
                positions >= 0,
                f"{name} must be non-negative",
                lambda: f"{name} must be non-negative, got minimum {int(positions.min())}",
            )
        return positions if positions.is_floating_point() else positions.long()

    def _resolve(
        self,
        tq: int,
        tk: int,
        batch: int | None,
        device: torch.device | str | None,
        q_positions: Tensor | None,
        k_positions: Tensor | None,
    ) -> tuple[Tensor, Tensor]:
        """Queries' and keys' positions; defaults as :func:`posenc._positions.resolve_qk_positions`
        (keys at the defaults, queries the last ``tq`` of them), on axes."""
        kp = None if k_positions is None else self._check_positions(k_positions, tk, batch, "k_positions")
        qp = None if q_positions is None else self._check_positions(q_positions, tq, batch, "q_positions")
        if qp is None:
            if kp is None:
                kp = self._default_positions(tk, device)
            qp = kp[..., tk - tq :, :] if tq <= tk else self._default_positions(tq, device)
        if kp is None:
            kp = qp if tq == tk else self._default_positions(tk, device)
        return qp, kp

    def _rows(self, positions: Tensor, dtype: torch.dtype, seq_len: int | Tensor | None = None) -> RowsPair:
        """cos and sin at ``positions``: ``(t, r/2)`` for ``(t, a)``, ``(b, 1, t, r/2)`` for ``(b, t, a)``."""
        device = positions.device
        inv_freq, _ = self._frequencies(device, seq_len)
        axis = self.axis.to(device)  # constant per module: the cached buffer, not recomputed per call
        inv_freq = inv_freq.to(torch.float64 if dtype == torch.float64 else wide_dtype(device))
        cos, sin = axial_cos_sin(positions, inv_freq, axis, self.attention_scaling, dtype=dtype)
        return (cos[:, None], sin[:, None]) if cos.dim() == 3 else (cos, sin)

    # --- state and hooks ---------------------------------------------------------------------

    def prepare(
        self,
        q_len: int,
        k_len: int | None = None,
        *,
        q_positions: Tensor | None = None,
        k_positions: Tensor | None = None,
        batch: int | None = None,
        device: torch.device | str | None = None,
    ) -> PositionState:
        """The :class:`AxisRotaryState` of one forward pass (see :meth:`PositionalEncoding.prepare`).

        ``q_positions``/``k_positions`` are ``(t, a)`` or ``(b, t, a)`` (see the class).
        """
        k_len = q_len if k_len is None else k_len
        if device is None:
            given = q_positions if q_positions is not None else k_positions
            device = given.device if isinstance(given, Tensor) else self._device()
        qp, kp = self._resolve(q_len, k_len, batch, device, q_positions, k_positions)
        return self.prepare_state(qp, kp, q_start=None, k_start=None)

    def prepare_state(
        self, q_positions: Tensor, k_positions: Tensor, *, q_start: int | None, k_start: int | None
    ) -> AxisRotaryState:
        """The :class:`AxisRotaryState` for resolved axis positions."""
        return AxisRotaryState(self, q_positions, k_positions, seq_len=None)

    def encode_qk(
        self,
        q: Tensor,
        k: Tensor,
        *,
        q_positions: Tensor | None = None,
        k_positions: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Rotate queries ``(b, h, tq, dh)`` and keys ``(b, h_kv, tk, dh)`` by their axis positions."""
        check_qk(q, k, head_dim=self.head_dim)
        qp = q_positions.to(q.device) if isinstance(q_positions, Tensor) else q_positions
        kp = k_positions.to(q.device) if isinstance(k_positions, Tensor) else k_positions
        batch = max(q.shape[0], k.shape[0])
        qp, kp = self._resolve(q.shape[-2], k.shape[-2], batch, q.device, qp, kp)
        state = self.prepare_state(qp, kp, q_start=None, k_start=None)
        return state._encode(q, k)

    def forward(
        self, q: Tensor, k: Tensor, q_positions: Tensor | None = None, k_positions: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """The drop-in call: ``q, k = rope(q, k, coords, coords)``; see :meth:`encode_qk`."""
        return self.encode_qk(q, k, q_positions=q_positions, k_positions=k_positions)

    def rotate(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """Rotate one tensor ``(b, h, t, dh)`` by its positions ``(t, a)``/``(b, t, a)``."""
        check_float_tensor("x", x, rank=4, shape="(batch, heads, seq, head_dim)")
        if x.shape[-1] != self.head_dim:
            raise ValueError(f"x has head_dim {x.shape[-1]}, expected head_dim={self.head_dim}")
        p = positions.to(x.device) if isinstance(positions, Tensor) else positions
        qp, _ = self._resolve(x.shape[-2], x.shape[-2], x.shape[0], x.device, p, None)
        return _rotate(x, *self._rows(qp, precise(x.dtype)), self.layout)


def precise(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32
