"""The rotary family's shared state and hooks: what RoPE, xPos, AxialRoPE and M-RoPE have in common.

:class:`RotaryState` holds the cos/sin rows of one forward pass, as gpt-fast's ``freqs_cis[input_pos]``;
``_Rotary`` holds the hooks that apply it (``prepare_state``, ``encode_qk``, ``forward``, ``rotate``).
The encodings differ only in their positions and in how they compute the cos/sin rows:
:mod:`posenc.encodings.rope` (RoPE and its bounded table), :mod:`posenc.encodings.xpos`, and the
multi-axis encodings in :mod:`posenc.encodings.axial`. The math is in :mod:`posenc.functional.rotary`.

Shape key: ``b`` batch, ``h`` heads, ``tq`` queries, ``tk`` keys, ``dh`` head width, ``r/2``
rotated pairs.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, cast

import torch
from torch import Tensor

from .._checks import check_bool, check_float_tensor, check_int, check_ints
from .._compat import can_sync, check_values, is_tracing
from .._positions import Positions, check_qk
from ..base import PositionalEncoding
from ..functional.rope_freqs import RopeParameters
from ..functional.rotary import apply_rotary, eager_rows, rope_cos_sin, rotary_reference, rotate_eager
from ..state import PositionState

__all__ = ["RotaryState"]


class RotaryState(PositionState):
    """The position state of every rotary encoding: the cos/sin rows of one forward pass, shared by every layer.

    Built by :meth:`~posenc.encodings.rope.RoPE.prepare` (and by the multi-axis encodings' ``prepare``). The rows of each side
    are computed when first used (with a KV cache only the new keys are rotated, at the query
    positions, so the ``tk`` key rows may never be needed). In eager mode the first rotation of each
    side and dtype also builds the rows' apply-ready form (:func:`~posenc.functional.rotary.eager_rows`,
    never per head; for RoPE's half layout a view of its table), which the keys at the same positions
    and every later layer reuse.

    Attributes:
        q_cos, q_sin: ``(tq, r/2)`` or ``(b, 1, tq, r/2)`` rows of the queries, in the caches'
            dtype (float32; float64 after ``.double()``).
        seq_len: the length ``L`` the length-dependent variants (dynamic, longrope) use: given to
            :meth:`~posenc.encodings.rope.RoPE.prepare`, else one past the largest position (an int when eager, a
            tensor under compile/export); ``None`` for the other variants.
        end: eager only: one past the largest position of queries and keys (else ``None``).
    """

    encoding: _Rotary
    seq_len: int | Tensor | None = None
    end: int | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # built by the first layer that needs them, then used by every layer: side ("q"/"k") -> the cos/sin
        # rows in the caches' dtype; (side, role, dtype) -> the apply-ready rows; "qk" -> the shapes and
        # dtypes of the last q and k checked, and the keys' side
        self._cache: dict[object, tuple[Any, ...]] = {}

    @property
    def q_cos(self) -> Tensor:
        return self._side_rows("q")[0]

    @property
    def q_sin(self) -> Tensor:
        return self._side_rows("q")[1]

    def _side_rows(self, side: str) -> tuple[Tensor, ...]:
        """cos and sin at the positions of ``side`` in the caches' dtype, computed once."""
        if side not in self._cache:
            self._cache[side] = self.encoding._rows(self, side, self.encoding.inv_freq.dtype)
        return self._cache[side]

    def encode_qk(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """Rotate queries ``(b, h, tq, dh)`` and keys ``(b, h_kv, tk or tq, dh)`` at this state's positions."""
        tracing, enc = is_tracing(), self.encoding
        # the checks read only types, shapes and dtypes: the layers of a forward pass, whose q and k have the
        # same ones, are checked once by this state, and check_qk once by the encoding for every state whose
        # q and k have the shapes it last passed (the steps of a decode loop). Eager; a traced program
        # checks in every call it traces.
        both = not tracing and isinstance(q, Tensor) and isinstance(k, Tensor)
        seen, checked = (q.shape, q.dtype, k.shape, k.dtype) if both else None, self._cache.get("qk")
        if seen is None or checked is None or checked[0] != seen:
            if seen is None or seen != enc._checked_qk:
                check_qk(q, k, head_dim=enc.head_dim)
                if seen is not None:
                    enc._checked_qk = seen
            if q.shape[-2] != self.q_len:
                raise ValueError(
                    f"q has {q.shape[-2]} positions, but this {type(self).__name__} was prepared for {self.q_len}"
                )
            # a batch its (b, t) positions (with axes: (b, t, a)) have
            rank = 2 if enc.axis is None else 3
            if len(self._q_positions.shape) == rank or len(self._k_positions.shape) == rank:
                self._check_batch(max(q.shape[0], k.shape[0]), rank)
            # keys at the queries' positions: tq new keys with a KV cache, or the same positions
            k_side = "q" if self.key_side(k) == "q" or self._k_positions is self._q_positions else "k"
            self._cache["qk"] = checked = (seen, k_side)
        # traced (compile/export: inductor fuses the formula) or another device: the formula
        formula = tracing or not (q.is_cpu or q.is_cuda)
        return self._rotate(q, "q", "query", formula), self._rotate(k, checked[1], "key", formula)

    def _rotate(self, x: Tensor, side: str, role: str, formula: bool) -> Tensor:
        """Rotate ``x`` at the positions of ``side`` (``"q"`` or ``"k"``) as a ``role`` tensor."""
        enc = self.encoding
        if formula:
            out = rotary_reference(x, *self._rows(side, role, x.dtype), enc.layout, offset=enc.rotary_offset)
        else:
            layout, key = enc.layout, (side, role if enc.by_role else "", x.dtype)
            rows = self._cache.get(key)
            if rows is None:  # RoPE's half layout: a view of its table (in x's dtype); else from the rows
                wide = enc._table_rows(self, side, x.dtype) if layout == "half" and not enc.by_role else None
                if wide is None:
                    rows = eager_rows(*self._rows(side, role, x.dtype), x.dtype, layout)
                else:
                    rows = wide.unbind(0)
                self._cache[key] = rows
            out = rotate_eager(x, rows, layout, offset=enc.rotary_offset)
        if role == "query" and enc.params.query_scale_beta and enc.rotary_dim < enc.head_dim:
            # Mistral 4 scales whole queries: its scaled rows reach the rotated channels, this the others
            # (in place: a partial rotation's output is a new tensor)
            scale = enc._scale(self, side, role, x.dtype).to(x.dtype)  # type: ignore[union-attr]
            scale = scale[:, None] if scale.dim() == 3 else scale  # (b, t, 1) -> (b, 1, t, 1)
            out[..., : enc.rotary_offset].mul_(scale)
            out[..., enc.rotary_offset + enc.rotary_dim :].mul_(scale)
        return out

    def _apply(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """:func:`~posenc.functional.apply_rotary` with the encoding's layout and offset."""
        return apply_rotary(x, cos, sin, self.encoding.layout, offset=self.encoding.rotary_offset)

    def _rows(self, side: str, role: str, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """cos and sin at the positions of ``side``, for a ``role`` tensor of ``dtype``, times the
        encoding's :meth:`~_Rotary._scale` of that role. The caches' dtype; float64 rows from the
        formula for float64 inputs."""
        enc = self.encoding
        if dtype == torch.float64 and enc.inv_freq.dtype != dtype:
            cos, sin = enc._rows(self, side, dtype)
        else:
            cos, sin = self._side_rows(side)
        scale = enc._scale(self, side, role, dtype) if enc.by_role else None
        if scale is None:
            return cos, sin
        scale = scale.to(cos.dtype)
        scale = scale[:, None] if scale.dim() == 3 else scale  # (b, t, ·) -> (b, 1, t, ·)
        return cos * scale, sin * scale

    def _past_last(self) -> Tensor | None:
        """One past the largest position of queries and keys, a 0-dim tensor (``None``: no positions)."""
        flat = torch.cat((self.q_positions.reshape(-1), self.k_positions.reshape(-1)))
        return flat.max() + 1 if flat.numel() else None

    def _positions(self, side: str) -> Tensor:
        """The positions of ``side`` (``"q"`` or ``"k"``)."""
        return self.q_positions if side == "q" else self.k_positions

    def _narrow_tables(self, rows: slice, cols: slice) -> None:
        self._cache = {}  # this is a shallow copy: the original keeps its rows, these are rebuilt


class _Rotary(PositionalEncoding):
    """What every rotary encoding shares: the hooks, each one :class:`RotaryState` applied once, and
    the rows from the formula.

    Subclasses set ``head_dim``, ``layout``, ``params`` and the ``inv_freq``/``_inv_freq64`` caches
    (:meth:`_init_caches`), and give the positions (:meth:`_resolve`); the multi-axis ones the
    ``axis`` each pair reads.
    """

    kind = "rotary"
    state_class: ClassVar[type[RotaryState]] = RotaryState
    cache_names: ClassVar[tuple[str, ...]] = ("inv_freq", "_inv_freq64")
    # the formula's frequencies, exact, read in a forward instead of copied from the host
    float64_caches = ("_inv_freq64",)
    head_dim: int
    layout: Literal["half", "interleaved"]
    inv_freq: Tensor
    _inv_freq64: Tensor
    #: ``(r/2,)`` long, the axis each pair reads (multi-axis encodings); ``None`` for 1D positions.
    axis: Tensor | None
    #: The first rotated channel (RoPE's ``rotary_offset``; the others rotate the first ``r``).
    rotary_offset: int = 0
    #: Whether the rotation turns by minus the angles (RoPE's ``conjugate``: NanoChat).
    conjugate: bool = False

    #: The validated settings: the base, the rotated width, the rope type and its frequencies.
    params: RopeParameters
    #: Whether queries and keys at the same positions take different rows (:meth:`_scale`: xPos,
    #: RoPE's ``llama_4_scaling_beta``).
    by_role: bool = False
    #: Whether eager rows come from a cos/sin table (RoPE's) when every position is inside it.
    has_table: ClassVar[bool] = False
    #: The shapes and dtypes of the last q and k that passed :func:`~posenc._positions.check_qk` (eager).
    _checked_qk: tuple[Any, ...] | None = None

    @property
    def rope_type(self) -> str:
        """The scaling variant: one of :data:`~posenc.functional.rope_freqs.ROPE_TYPES`."""
        return self.params.rope_type

    @property
    def rotary_dim(self) -> int:
        """The number of rotated channels ``r`` (the rest pass through)."""
        return self.params.rotary_dim

    @property
    def base(self) -> float:
        """The wavelength base (``rope_theta``), after the scaling dict's ``rope_theta``."""
        return self.params.base

    @property
    def attention_scaling(self) -> float:
        """The factor multiplied into cos and sin (YaRN / LongRoPE attention factor; 1 otherwise)."""
        return self.params.attention_scaling

    def _init_caches(self, shape: tuple[int, ...], device: torch.device | str | None) -> None:
        """Register ``inv_freq`` (float32, ``shape``, for inspection) and ``_inv_freq64`` (the same
        frequencies, float64 ``(s, r/2)``: the formula's, read in a forward instead of copied from
        the host), then build every cache."""
        # (float32 whatever the default dtype: built under torch.set_default_dtype(torch.bfloat16) too)
        self.register_buffer(
            "inv_freq", torch.empty(shape, dtype=torch.float32, device=device), persistent=False
        )
        sets = torch.empty(shape, dtype=torch.float64, device=device).reshape(-1, shape[-1])
        self.register_buffer("_inv_freq64", sets, persistent=False)
        self.reset_caches()

    def reset_caches(self) -> None:
        """Rebuild the caches where they are now (e.g. after ``to_empty()``): ``(s, r/2)`` float64
        frequencies, one row per set (longrope: short, long)."""
        self._inv_freq64 = self.params.inv_freq(device=self._inv_freq64.device)
        self.inv_freq = self._inv_freq64.to(self.inv_freq.dtype)

    def _rows(self, state: RotaryState, side: str, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """cos and sin at the positions of ``side`` of ``state``, in ``dtype``, from float64 angles:
        ``(t, r/2)``, or ``(b, 1, t, r/2)`` for positions with a batch. The frequencies are picked by
        ``state.seq_len`` (longrope's long set past its trained length, dynamic NTK's own)."""
        if (wide := self._table_rows(state, side, dtype)) is not None:
            return wide[0, ..., : self.rotary_dim // 2], wide[1, ..., self.rotary_dim // 2 :]
        positions = state._positions(side)
        device = positions.device  # the module's, unless it was not moved with the inputs
        inv_freq = self.params.inv_freq_at(state.seq_len, device=device, sets=self._inv_freq64.to(device))
        axis = None if self.axis is None else self.axis.to(device)
        cos, sin = rope_cos_sin(positions, inv_freq, self.attention_scaling, dtype=dtype, axis=axis)
        sin = -sin if self.conjugate else sin
        # (b, t, r/2) -> (b, 1, t, r/2): broadcast over heads
        return (cos[:, None], sin[:, None]) if cos.dim() == 3 else (cos, sin)

    def _table_rows(self, state: RotaryState, side: str, dtype: torch.dtype) -> Tensor | None:
        """The rows of a table kept in the half layout's apply-ready form, ``(cos, cos)`` and ``(-sin, sin)``
        at the positions of ``side`` in ``dtype``, ``(2, t, r)`` or ``(2, b, 1, t, r)``; ``None`` where there
        is no table (here) or it does not serve them (``RoPE._table_rows``)."""
        return None

    def _scale(self, state: RotaryState, side: str, role: str, dtype: torch.dtype) -> Tensor | None:
        """Where :attr:`by_role`: the factor the rows of a ``role`` tensor at the positions of ``side``
        are multiplied by, ``(t, ·)`` or ``(b, t, ·)`` (``None``: none). Scaling the rows scales the
        rotated tensor: the rotation is linear."""
        return None

    def prepare_state(
        self,
        q_positions: Positions,
        k_positions: Positions,
        *,
        q_start: int | None,
        k_start: int | None,
        seq_len: int | Tensor | None = None,
    ) -> RotaryState:
        """The :class:`RotaryState` (:attr:`state_class`) for resolved positions (called by :meth:`prepare`).

        Args:
            q_positions, k_positions, q_start, k_start: as in the base class.
            seq_len: the length ``L`` of the dynamic and longrope variants, given to :meth:`prepare`
                (``rope.prepare(t, seq_len=L)``): by default one past the largest position of this
                call; give the whole sequence's length when the call sees only part of it (a chunk,
                a context-parallel shard). Ignored by the other variants. (transformers' ``"dynamic"``
                rotary module keeps the largest length it has seen above the trained one, so after a longer
                call its batch of shorter rows rotates at that length: pass it here to match.)
        """

        if isinstance(seq_len, Tensor):  # (a traced or device length: its value checked without a host sync)
            n = check_ints("seq_len", seq_len, "()")
            check_values(n >= 1, "seq_len must be >= 1", lambda: f"seq_len must be >= 1, got {n.tolist()}")
        elif seq_len is not None and not isinstance(seq_len, torch.SymInt):
            check_int("seq_len", seq_len, minimum=1)
        state = self.state_class(self, q_positions, k_positions, q_start=q_start, k_start=k_start)
        # one past the largest position, where known without a host sync
        if is_tracing() or q_positions.device.type == "meta":
            pass  # no host sync in a traced program; no values on the meta device
        elif q_start is not None and k_start is not None and self.axis is None:  # (axes: token indices)
            state.end = max(q_start + q_positions.shape[-1], k_start + k_positions.shape[-1])
        elif (self.params.length_dependent or self.has_table) and can_sync(q_positions.device):
            # explicit positions, eager on the CPU: one sync per forward (the table rows, the length)
            state.end = 0 if (last := state._past_last()) is None else int(last)
        if seq_len is None and self.params.length_dependent:
            seq_len = state.end if state.end is not None else state._past_last()
        state.seq_len = seq_len
        return state

    def forward(
        self, q: Tensor, k: Tensor, q_positions: Tensor | None = None, k_positions: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """The drop-in call: ``q, k = rope(q, k)``; the same as :meth:`encode_qk`."""
        return self.encode_qk(q, k, q_positions=q_positions, k_positions=k_positions)

    def rotate(self, x: Tensor, positions: Tensor | None = None, *, conjugate: bool = False) -> Tensor:
        """Rotate one tensor (queries or keys) by its positions (not xPos or ``llama_4_scaling_beta``,
        which scale queries and keys differently: ``encode_qk`` rotates them together).

        ``conjugate=True`` rotates the other way (sin negated, an attention factor kept): the
        inverse rotation when the factor is 1, as DeepSeek V4 applies to its attention output at the
        query positions to undo the rotation its values carry (its keys are its values).

        For ``"dynamic"`` and ``"longrope"`` the length ``L`` is ``max(positions) + 1`` of this
        tensor alone; rotate queries and keys together with :meth:`encode_qk` when their
        positions differ.

        Args:
            x: ``(b, h, t, dh)``.
            positions: ``(t,)`` or ``(b, t)`` integer positions (``(t, a)`` or ``(b, t, a)`` for
                the multi-axis encodings); ``None`` means ``0..t-1``.

        Returns:
            ``(b, h, t, dh)`` rotated, same dtype.
        """
        check_float_tensor("x", x, rank=4, shape="(batch, heads, seq, head_dim)")
        if self.by_role:
            raise ValueError(
                f"{type(self).__name__} scales queries and keys differently: rotate them together with "
                "encode_qk(q, k)"
            )
        if x.shape[-1] != self.head_dim:
            raise ValueError(f"x has head_dim {x.shape[-1]}, expected head_dim={self.head_dim}")
        t = x.shape[-2]
        state = cast(RotaryState, self._state(t, t, x.shape[0], x.device, positions, None))
        cos, sin = state._rows("q", "query", x.dtype)
        return state._apply(x, cos, -sin if check_bool("conjugate", conjugate) else sin)
