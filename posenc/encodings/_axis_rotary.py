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
from typing import ClassVar

import torch
from torch import Tensor
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .._compat import check_values, wide_dtype
from ..functional.axial import axial_cos_sin
from ..state import PositionState
from .rotary import RotaryState, _Rotary

__all__ = ["AxisRotaryState"]


class AxisRotaryState(RotaryState):
    """The position state of a multi-axis rotary encoding: cos/sin rows shared by every layer.

    A :class:`~posenc.encodings.rotary.RotaryState` whose positions are ``(t, a)`` or ``(b, t, a)``:
    :attr:`q_len`/:attr:`k_len` read ``shape[-2]``.

    Attributes:
        q_cos, q_sin: ``(tq, r/2)`` or ``(b, 1, tq, r/2)`` float32 rows of the queries.
        q_start, k_start: token indices (``tk - tq`` and 0), not positions: masks follow the token
            order, since positions with axes are not ordered (:meth:`distances` is ``None``).
    """

    def __init__(
        self,
        encoding: _Rotary,
        q_positions: Tensor,
        k_positions: Tensor,
        *,
        q_start: int | None = None,
        k_start: int | None = None,
        seq_len: int | Tensor | None = None,
        end: int | None = None,
    ) -> None:
        # q_start/k_start say "the index rule": positions with axes have no order (image tokens
        # share positions), so causality and windows follow the token order, queries being the
        # last tq of the tk keys (what posenc.attention does for default positions).
        tq, tk = q_positions.shape[-2], k_positions.shape[-2]
        super().__init__(
            encoding, q_positions, k_positions, q_start=max(tk - tq, 0), k_start=0, seq_len=seq_len
        )

    @property
    def q_len(self) -> int:
        return self.q_positions.shape[-2]

    @property
    def k_len(self) -> int:
        return self.k_positions.shape[-2]

    def distances(self) -> Tensor | None:
        return None  # positions with axes have no 1D distance

    def narrow(self, rows: slice, cols: slice) -> PositionState:
        state = copy.copy(self)
        state.q_positions = self.q_positions[..., rows, :]
        state.k_positions = self.k_positions[..., cols, :]
        state.q_start = (self.q_start or 0) + (rows.start or 0)
        state.k_start = (self.k_start or 0) + (cols.start or 0)
        state._narrow_tables(rows, cols)
        return state


class _AxisRotary(_Rotary):
    """Base of the multi-axis rotary encodings: positions with axes, a state, the hooks.

    Subclasses set ``head_dim``, ``layout``, ``num_axes`` and implement :meth:`_frequencies`
    (float64 ``(r/2,)`` frequencies and ``(r/2,)`` axes), :meth:`_default_positions` and
    :meth:`_check_positions`.
    """

    cache_names = ("inv_freq", "axis")
    state_class = AxisRotaryState
    _generic_state_class = AxisRotaryState
    axis: Tensor
    num_axes: int
    #: Whether coordinates may be floats (AxialRoPE), and whether ``(t,)``/``(b, t)`` positions mean
    #: the same position on every axis (M-RoPE on text) or are refused (AxialRoPE).
    float_positions: ClassVar[bool] = False
    one_d_positions: ClassVar[bool] = True

    def _init_caches(self, device: torch.device | str | None) -> None:
        pairs = self._frequencies(torch.device("cpu"))[0].shape[0]
        self.register_buffer("inv_freq", torch.empty(pairs, device=device), persistent=False)
        self.register_buffer("axis", torch.empty(pairs, dtype=torch.long, device=device), persistent=False)
        self.reset_caches()

    def _frequencies(
        self, device: torch.device, seq_len: int | Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        raise NotImplementedError  # pragma: no cover

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
        """Validate ``(t, a)``/``(b, t, a)`` positions (and ``(t,)``/``(b, t)`` when :attr:`one_d_positions`)."""
        a, floats, one_d = self.num_axes, self.float_positions, self.one_d_positions
        kinds = "integer or floating" if floats else "integer"
        if not isinstance(positions, Tensor):
            raise TypeError(
                f"{name} must be a {kinds} torch.Tensor of shape (seq, {a}) or (batch, seq, {a}), "
                f"got {type(positions).__name__}"
            )
        bad_float = positions.is_floating_point() and not floats
        if bad_float or positions.is_complex() or positions.dtype == torch.bool:
            raise TypeError(f"{name} must have an {kinds} dtype, got {positions.dtype}")
        if not one_d and positions.dim() == 1:
            raise ValueError(
                f"{name} has shape {tuple(positions.shape)}, but {type(self).__name__} needs one coordinate "
                f"per axis: (seq, {a}) or (batch, seq, {a})"
            )
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
    ) -> tuple[Tensor, Tensor, int | None, int | None]:
        """Queries' and keys' positions on ``device``; defaults as :func:`posenc._positions.resolve_qk_positions`
        (keys at the defaults, queries the last ``tq`` of them), on axes. No starts: positions with axes
        have no order (:class:`AxisRotaryState` sets token indices)."""
        qp, kp = (p.to(device) if isinstance(p, Tensor) else p for p in (q_positions, k_positions))
        kp = None if kp is None else self._check_positions(kp, tk, batch, "k_positions")
        qp = None if qp is None else self._check_positions(qp, tq, batch, "q_positions")
        if qp is None:
            if kp is None:
                kp = self._default_positions(tk, device)
            qp = kp[..., tk - tq :, :] if tq <= tk else self._default_positions(tq, device)
        if kp is None:
            kp = qp if tq == tk else self._default_positions(tk, device)
        return qp, kp, None, None

    def _rows(
        self,
        positions: Tensor,
        start: int | None,
        seq_len: int | Tensor | None,
        end: int | None,
        dtype: torch.dtype,
    ) -> tuple[Tensor, Tensor]:
        """cos and sin at ``positions``: ``(t, r/2)`` for ``(t, a)``, ``(b, 1, t, r/2)`` for ``(b, t, a)``
        (``start`` and ``end`` are RoPE's table's, unused here)."""
        device = positions.device
        inv_freq, _ = self._frequencies(device, seq_len)
        axis = self.axis.to(device)  # constant per module: the cached buffer, not recomputed per call
        inv_freq = inv_freq.to(torch.float64 if dtype == torch.float64 else wide_dtype(device))
        cos, sin = axial_cos_sin(positions, inv_freq, axis, self.attention_scaling, dtype=dtype)
        return (cos[:, None], sin[:, None]) if cos.dim() == 3 else (cos, sin)
