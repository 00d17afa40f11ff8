"""Axial (N-D) RoPE for image and video tokens, and what every multi-axis rotary encoding shares.

Positions with axes are tensors with the axis last: ``(t, a)`` or ``(b, t, a)`` (Pixtral's
layout; transformers' M-RoPE ``(3, b, t)`` is :func:`posenc.functional.axes_last` of it). Each
rotated pair ``i`` reads one axis ``axis[i]`` and turns by ``coordinate[axis[i]] * inv_freq[i]``;
the encodings (:class:`AxialRoPE`, :class:`~posenc.encodings.mrope.MRoPE`) differ only in which
pair reads which axis at which frequency (:mod:`posenc.functional.axial`). The cos/sin rows are
computed once per forward from float64 angles (:class:`AxisRotaryState`), with no table that grows.

Shape key: ``b`` batch, ``h`` heads, ``t`` tokens (``tq`` queries, ``tk`` keys), ``a`` axes,
``dh`` head width, ``r/2`` rotated pairs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .._checks import check_choice, check_grid, check_int
from .._compat import check_values
from .._positions import check_batch
from ..functional.axial import axial_frequencies, check_axis_widths, grid_positions
from ..functional.rope_freqs import DefaultRope
from ..state import PositionState
from .rotary import RotaryState, _Rotary

__all__ = ["AxialRoPE", "AxisRotaryState"]

#: The keywords of :func:`~posenc.functional.axial_frequencies` that :class:`AxialRoPE` keeps as attributes.
_FREQUENCY_OPTIONS = ("base", "freqs", "axis_layout", "axis_order", "max_freq", "min_period", "max_period")


class AxisRotaryState(RotaryState):
    """The position state of a multi-axis rotary encoding: cos/sin rows shared by every layer.

    A :class:`~posenc.encodings.rotary.RotaryState` whose positions are ``(t, a)`` or ``(b, t, a)``:
    :attr:`q_len`/:attr:`k_len` read ``shape[-2]``.

    Attributes:
        q_cos, q_sin: ``(tq, r/2)`` or ``(b, 1, tq, r/2)`` float32 rows of the queries.
        q_start, k_start: token indices (``tk - tq`` and 0, or 0 and ``tq - tk``), not positions
            (:meth:`_AxisRotary._resolve`).
    """

    @property
    def q_len(self) -> int:
        return self.q_positions.shape[-2]

    @property
    def k_len(self) -> int:
        return self.k_positions.shape[-2]

    def distances(self) -> Tensor | None:
        return None  # positions with axes have no 1D distance

    def narrow(self, rows: slice, cols: slice) -> PositionState:
        state = super().narrow(rows, cols)  # the rows, the starts; then the positions' token axis
        state._q_positions = self.q_positions[..., rows, :]
        state._k_positions = self.k_positions[..., cols, :]
        return state

    # axis_layout="blocks": each axis's channels a block of their own, rotated within it, the shared rotation
    # applied to x viewed as (..., t, a, r/a) with rows (..., t, a, r/2a) (their apply-ready form cached as any)
    # (each an attribute test first: M-RoPE's decode steps pass here too)
    def _rows(self, side: str, role: str, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        cos, sin = super()._rows(side, role, dtype)
        n = self.encoding._axis_blocks
        return (cos.unflatten(-1, (n, -1)), sin.unflatten(-1, (n, -1))) if n else (cos, sin)

    def _rotate(self, x: Tensor, side: str, role: str, formula: bool) -> Tensor:
        if not self.encoding._axis_blocks:
            return super()._rotate(x, side, role, formula)
        return self._blockwise(super()._rotate, x, side, role, formula)

    def _apply(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        if not self.encoding._axis_blocks:
            return super()._apply(x, cos, sin)
        return self._blockwise(super()._apply, x, cos, sin)

    def _blockwise(self, rotate: Callable[..., Tensor], x: Tensor, *args: Any) -> Tensor:
        """``rotate(blocks, *args)`` of ``x``'s rotated channels as ``(..., t, a, r/a)`` blocks, the rest
        passed on."""
        n, r = self.encoding._axis_blocks, self.encoding.rotary_dim
        out = rotate(x[..., :r].unflatten(-1, (n, -1)), *args).flatten(-2)
        return out if r == x.shape[-1] else torch.cat((out, x[..., r:]), -1)


class _CallbackAxisState(AxisRotaryState):
    """The state of a subclass that overrides a hook (``prepare``): positions with axes, the hooks called back."""

    encode_qk = PositionState.encode_qk


class _AxisRotary(_Rotary):
    """Base of the multi-axis rotary encodings: positions with axes, a state, the hooks.

    Subclasses set ``head_dim``, ``layout``, ``params``, ``num_axes`` and implement :meth:`_pairs`
    (the frequencies and the axis of each pair) and :meth:`_default_positions`.
    """

    cache_names = ("inv_freq", "_inv_freq64", "axis")
    state_class = AxisRotaryState
    _generic_state_class = _CallbackAxisState
    axis: Tensor
    num_axes: int
    #: Coordinates may be integers or floats (AxialRoPE's pixels, Qwen3-Omni's fractional times). Whether
    #: they may be below 0 (AxialRoPE), and whether ``(t,)``/``(b, t)`` positions mean the same position on
    #: every axis (M-RoPE on text) or are refused (AxialRoPE).
    negative_positions: ClassVar[bool] = False
    one_d_positions: ClassVar[bool] = True
    #: the number of per-axis channel blocks rotated on their own (AxialRoPE's ``axis_layout="blocks"``), else 0
    _axis_blocks = 0

    def _init_caches(self, shape: tuple[int, ...], device: torch.device | str | None) -> None:
        self.register_buffer(
            "axis", torch.empty(shape[-1], dtype=torch.long, device=device), persistent=False
        )
        super()._init_caches(shape, device)

    def _pairs(self, device: torch.device) -> tuple[Tensor, Tensor]:
        """``(s, r/2)`` float64 frequencies and the ``(r/2,)`` long axis each pair reads, on ``device``."""
        raise NotImplementedError  # pragma: no cover

    def reset_caches(self) -> None:
        """Rebuild ``inv_freq`` (float32 ``(r/2,)``, for inspection), its float64 copy and ``axis`` where they are now."""
        self._inv_freq64, axis = self._pairs(self._inv_freq64.device)
        self.inv_freq = self._inv_freq64[0].to(self.inv_freq.dtype)
        self.axis = axis.to(self.axis.device)

    # --- positions ---------------------------------------------------------------------------

    def _default_positions(self, length: int, device: torch.device | str | None) -> Tensor:
        raise NotImplementedError  # pragma: no cover

    def _check_positions(self, positions: object, length: int, batch: int | None, name: str) -> Tensor:
        """Validate ``(t, a)``/``(b, t, a)`` positions (and ``(t,)``/``(b, t)`` when :attr:`one_d_positions`)."""
        a, one_d = self.num_axes, self.one_d_positions
        if not isinstance(positions, Tensor):
            raise TypeError(
                f"{name} must be an integer or floating torch.Tensor of shape (seq, {a}) or (batch, seq, {a}), "
                f"got {type(positions).__name__}"
            )
        if positions.is_complex() or positions.dtype == torch.bool:
            raise TypeError(f"{name} must have an integer or floating dtype, got {positions.dtype}")
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
        if as_bt and batch is not None and positions.shape[0] not in (1, batch) and positions.shape[0] == a:
            raise ValueError(
                f"{name} has shape {tuple(positions.shape)}: a batch of {positions.shape[0]} rows for a batch of "
                f"{batch}; axes first as transformers' position_ids, it is {name}.mT here (seq, {a}) "
                "(posenc.functional.axes_last for (axes, batch, seq))"
            )
        if one_d and (positions.dim() == 1 or as_bt):
            positions = positions[..., None].expand(*positions.shape, a)
        if positions.dim() not in (2, 3) or positions.shape[-1] != a:
            also = ", or (seq,)/(batch, seq) on every axis" if one_d else ""
            raise ValueError(
                f"{name} must have shape (seq, {a}) or (batch, seq, {a}){also} for {type(self).__name__} "
                f"with {a} axes, got {tuple(positions.shape)}"
            )
        if positions.shape[-2] != length:
            raise ValueError(
                f"{name} has {positions.shape[-2]} positions, expected {length} (the sequence length)"
            )
        check_batch(name, positions, batch, rank=3)
        if positions.is_floating_point():
            check_values(positions.isfinite(), f"{name} must be finite, got a NaN or infinite coordinate")
        if not self.negative_positions:
            check_values(
                positions >= 0,
                f"{name} must be non-negative",
                lambda: f"{name} must be non-negative, got minimum {positions.min().item()}",
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
        (keys at the defaults, queries the last ``tq`` of them), on axes.

        The starts are token indices, not positions: positions with axes have no order (image tokens
        share positions), so causality and windows follow the token order, queries being the last
        ``tq`` of the ``tk`` keys (what :func:`posenc.attention` does for default positions) or, given
        positions with more queries than keys, the keys the last ``tk`` of the queries."""
        qp, kp = (p.to(device) if isinstance(p, Tensor) else p for p in (q_positions, k_positions))
        qp = None if qp is None else self._check_positions(qp, tq, batch, "q_positions")
        kp = None if kp is None else self._check_positions(kp, tk, batch, "k_positions")
        if qp is None:
            if kp is None:
                kp = self._default_positions(tk, device)
            qp = kp[..., tk - tq :, :] if tq <= tk else self._default_positions(tq, device)
        if kp is None:
            kp = qp if tq == tk else self._default_positions(tk, device)
        # More queries than keys, with positions given: the keys are the last tk tokens (at default positions
        # both sides start at 0, which posenc.attention refuses under a causal mask or a window)
        given = q_positions is not None or k_positions is not None
        return qp, kp, max(tk - tq, 0), max(tq - tk, 0) if given else 0


class AxialRoPE(_AxisRotary):
    """RoPE over several axes (2D images, 3D video) with a channel budget per axis.

    Each axis ``j`` rotates ``axes_dim[j]`` channels by its own coordinate, so the score of two
    tokens depends only on their offset along every axis (Heo et al., 2024, "Rotary Position
    Embedding for Vision Transformer"). The layouts people use:

    * per-axis blocks, ``axis_layout="cat"``: Flux (``axes_dim=(16, 56, 56)``,
      ``layout="interleaved"``), EVA-02 / timm ``RotaryEmbeddingCat`` and
      rotary-embedding-torch ``get_axial_freqs`` (``layout="interleaved"``; timm's
      ``rotate_half=True`` is ``layout="half"``, its ``grid_indexing="xy"`` is ``axis_order=(1, 0)``),
      torchtune's vision RoPE / Llama 4 (interleaved, columns first and 1-based: patch ``(row, col)``
      at ``(col + 1, row + 1)``, ``axis_order=(1, 0), first_index=1``; the class token at 0, first or
      Llama 4's last: ``num_suffix_tokens=1``), the vision towers of Step 3.5 (``layout="half"``)
      and Inkling 2 (``"interleaved"``), columns first: ``axis_order=(1, 0)``;
    * alternating frequencies, ``axis_layout="alternate"``: Pixtral (``layout="half"``): one
      frequency set for the whole head, even frequencies to rows, odd ones to columns;
    * cycling axes, ``axis_layout="cycle"``: the per-axis frequencies of ``"cat"``, one pair of each axis
      in turn: Kimi K2.5's vision tower (``axis_order=(1, 0)``: column then row at each frequency);
    * per-axis blocks of channels, ``axis_layout="blocks"``: the frequencies of ``"cat"``, each axis
      rotating a block of ``axes_dim[j]`` channels of its own, paired within it (``layout="half"``: channel
      ``i`` of the block with ``i + axes_dim[j] / 2``; with ``"interleaved"`` the same as ``"cat"``): Gemma 4's
      vision tower (on its ``pixel_position_ids``, ``(x, y)``: ``grid_positions()``'s ``(row, col)`` flipped);
    * ``freqs="lang"``: ``base ** (-2i / width)`` on integer (or rescaled) indices;
      ``freqs="pixel"``: ``pi * linspace(1, max_freq / 2)`` on coordinates in ``[-1, 1]``
      (rotary-embedding-torch ``freqs_for="pixel"``); ``freqs="period"``: ``2 pi / base ** (2i /
      width)`` on cell centres in ``(-1, 1)`` (DINOv3, ``base=100``, ``layout="half"``; its
      ``normalize_coords="max"``/``"min"`` are :func:`~posenc.functional.grid_positions`'
      ``normalize``; its training-time coordinate augmentation is :meth:`grid_positions`'
      ``shift``/``jitter``/``rescale``; its ``min_period``/``max_period`` are this class's).

    Positions are coordinates ``(t, a)`` or ``(b, t, a)``, integer **or float** in every layout
    (the formula is continuous: pixel coordinates, and index coordinates rescaled for another
    resolution, are floats), negative allowed. ``None`` means the grid ``grid_size`` with
    ``num_prefix_tokens`` leading and ``num_suffix_tokens`` trailing tokens at coordinate 0 (no rotation: class
    and register tokens, as torchtune and EVA do); see :meth:`grid_positions`. 1D positions are refused: an
    image token needs one coordinate per axis.

    Args:
        head_dim: the attention head width ``dh`` (even).
        axes_dim: channels per axis (even, summing to at most ``head_dim``; the rest pass
            through); default ``head_dim`` split equally over ``num_axes``.
        num_axes: the number of axes when ``axes_dim`` is not given (default 2).
        base: the wavelength base of ``"lang"`` frequencies (Flux 10000, EVA 10000, Pixtral 10000).
        freqs: ``"lang"``, ``"pixel"`` or ``"period"``.
        axis_layout: ``"cat"``, ``"alternate"``, ``"cycle"`` or ``"blocks"``.
        axis_order: the coordinate each axis's pairs read, in channel order (default ``(0, 1, ...)``);
            see :func:`~posenc.functional.axial_frequencies`.
        layout: channel pairing, as :class:`~posenc.RoPE`: ``"half"`` or ``"interleaved"``.
        max_freq: the highest ``"pixel"`` frequency (rotary-embedding-torch's ``max_freq``).
        min_period, max_period: ``"period"`` only, both or neither: each axis's periods geometric from
            one to the other instead of from ``base`` (DINOv3's ``min_period`` / ``max_period``).
        grid_size: the default grid (``(h, w)``, ``(t, h, w)``), used when positions are ``None``.
        num_prefix_tokens: tokens before the grid that are not rotated.
        num_suffix_tokens: tokens after the grid that are not rotated (Llama 4's class token).
        first_index: the grid's first index on every axis (``"lang"`` without ``ref_grid`` only):
            1 for torchtune's and Llama 4's patches.
        ref_grid: the grid the model was trained at: coordinates of other grids are scaled to span
            it (EVA / timm ``ref_feat_shape``); ``"lang"`` only.
        device: where the caches are built.

    Shape:
        ``forward(q, k, q_positions, k_positions)``: ``q`` ``(b, h, tq, dh)``, ``k``
        ``(b, h_kv, tk, dh)``, positions ``(t, a)`` or ``(b, t, a)`` -> ``(q, k)`` rotated.

    Example::

        rope = AxialRoPE(64, grid_size=(14, 14), num_prefix_tokens=1)   # ViT-B/16 at 224
        state = rope.prepare(1 + 14 * 14)                                # class token + patches
        coords = rope.grid_positions((28, 28))                           # another resolution
        state = rope.prepare(1 + 28 * 28, q_positions=coords)
    """

    negative_positions = True  # pixels, and index coordinates rescaled to another grid
    repr_optional = (
        *("axis_order", "min_period", "max_period", "grid_size"),
        *("num_prefix_tokens", "num_suffix_tokens", "first_index", "ref_grid"),
    )
    repr_names = ("head_dim", "axes_dim", "freqs", "axis_layout", "layout", *repr_optional)
    one_d_positions = False  # an image token needs one coordinate per axis

    def __init__(
        self,
        head_dim: int,
        axes_dim: tuple[int, ...] | list[int] | None = None,
        *,
        num_axes: int | None = None,
        base: float = 10000.0,
        freqs: Literal["lang", "pixel", "period"] = "lang",
        axis_layout: Literal["cat", "alternate", "cycle", "blocks"] = "cat",
        axis_order: tuple[int, ...] | list[int] | None = None,
        layout: Literal["half", "interleaved"] = "half",
        max_freq: float = 10.0,
        min_period: float | None = None,
        max_period: float | None = None,
        grid_size: tuple[int, ...] | list[int] | None = None,
        num_prefix_tokens: int = 0,
        num_suffix_tokens: int = 0,
        first_index: int = 0,
        ref_grid: tuple[int, ...] | list[int] | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        check_int("head_dim", head_dim, minimum=2)
        if head_dim % 2:
            raise ValueError(f"head_dim must be even (RoPE rotates channel pairs), got {head_dim}")
        if axes_dim is None:
            n = 2 if num_axes is None else check_int("num_axes", num_axes, minimum=1)
            if head_dim % (2 * n):
                raise ValueError(
                    f"head_dim={head_dim} does not split into {n} axes of even width; give axes_dim explicitly"
                )
            axes_dim = (head_dim // n,) * n
        self.axes_dim = check_axis_widths(axes_dim, head_dim)
        if num_axes is not None and num_axes != len(self.axes_dim):
            raise ValueError(
                f"num_axes={num_axes} conflicts with axes_dim={self.axes_dim}, one width per axis"
            )
        # checks freqs, axis_layout, axis_order, base, max_freq and the periods
        axial_frequencies(
            self.axes_dim,
            base=base,
            freqs=freqs,
            axis_layout=axis_layout,
            axis_order=axis_order,
            max_freq=max_freq,
            min_period=min_period,
            max_period=max_period,
        )
        self.min_period, self.max_period = (None if p is None else float(p) for p in (min_period, max_period))
        check_choice("layout", layout, ("half", "interleaved"))
        self.head_dim, self.num_axes = head_dim, len(self.axes_dim)
        # the base and the rotated width; the frequencies of each axis are axial_frequencies'
        self.params = DefaultRope(base=float(base), rotary_dim=sum(self.axes_dim))
        self.max_freq = float(max_freq)
        self.freqs, self.axis_layout, self.layout = freqs, axis_layout, layout
        self._axis_blocks = self.num_axes if axis_layout == "blocks" else 0
        self.axis_order = None if axis_order is None else tuple(axis_order)
        self.grid_size = None if grid_size is None else check_grid(grid_size, "grid_size", axes=self.num_axes)
        self.num_prefix_tokens = check_int("num_prefix_tokens", num_prefix_tokens, minimum=0)
        self.ref_grid = None if ref_grid is None else check_grid(ref_grid, "ref_grid", axes=self.num_axes)
        if self.ref_grid is not None and freqs != "lang":
            raise ValueError(
                f"ref_grid rescales index coordinates; freqs={freqs!r} coordinates already span [-1, 1]"
            )
        self.num_suffix_tokens = check_int("num_suffix_tokens", num_suffix_tokens, minimum=0)
        self.first_index = check_int("first_index", first_index, minimum=0)
        if first_index and (freqs != "lang" or self.ref_grid is not None):
            raise ValueError(
                f"first_index={first_index} numbers plain index cells (freqs='lang' without ref_grid), got "
                f"freqs={freqs!r}" + (f" with ref_grid={self.ref_grid}" if self.ref_grid else "")
            )
        self._init_caches((self.rotary_dim // 2,), device)

    def _pairs(self, device: torch.device) -> tuple[Tensor, Tensor]:
        options = {name: getattr(self, name) for name in _FREQUENCY_OPTIONS}
        inv_freq, axis = axial_frequencies(self.axes_dim, device=device, **options)
        return inv_freq[None], axis

    def grid_positions(
        self,
        grid: Sequence[int] | None = None,
        *,
        num_prefix_tokens: int | None = None,
        num_suffix_tokens: int | None = None,
        device: torch.device | str | None = None,
        shift: float | None = None,
        jitter: float | None = None,
        rescale: float | None = None,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """The coordinates of ``grid`` (default ``grid_size``) as this encoding reads them.

        ``num_prefix_tokens`` (default: the constructor's) zero rows first, then the cells row-major, then
        ``num_suffix_tokens`` (default: the constructor's) zero rows. The cells: integer indices from
        ``first_index`` (``"lang"``), scaled to ``ref_grid`` when one was given (float), pixel coordinates in
        ``[-1, 1]`` (``"pixel"``), or cell centres in ``(-1, 1)`` (``"period"``). ``shift``,
        ``jitter``, ``rescale`` and ``generator``: DINOv3's training-time augmentation of float
        coordinates (see :func:`~posenc.functional.grid_positions`); give the result as positions
        at each training step, as DINOv3 does in training mode.

        Returns:
            ``(p + prod(grid) + q, a)`` coordinates (``p``/``q``: the prefix and suffix rows).
        """
        grid = self.grid_size if grid is None else check_grid(grid, "grid", axes=self.num_axes)
        if grid is None:
            raise ValueError("grid_positions() needs a grid (none was given to the constructor as grid_size)")
        return grid_positions(
            grid,
            num_prefix_tokens=self.num_prefix_tokens if num_prefix_tokens is None else num_prefix_tokens,
            num_suffix_tokens=self.num_suffix_tokens if num_suffix_tokens is None else num_suffix_tokens,
            first_index=self.first_index,
            kind="index" if self.freqs == "lang" else "pixel" if self.freqs == "pixel" else "center",
            ref_grid=None if self.ref_grid is None or tuple(grid) == self.ref_grid else self.ref_grid,
            device=device if device is not None else self.inv_freq.device,
            shift=shift,
            jitter=jitter,
            rescale=rescale,
            generator=generator,
        )

    def _default_positions(self, length: int, device: torch.device | str | None) -> Tensor:
        if self.grid_size is None:
            raise ValueError(
                f"AxialRoPE needs positions of shape (seq, {self.num_axes}) (e.g. from grid_positions((h, w))), "
                "or grid_size at construction for the default"
            )
        extra = self.num_prefix_tokens + self.num_suffix_tokens
        if length != (expected := extra + math.prod(self.grid_size)):
            raise ValueError(
                f"the default positions are the grid_size={self.grid_size} grid with num_prefix_tokens="
                f"{self.num_prefix_tokens} and num_suffix_tokens={self.num_suffix_tokens}: {expected} tokens, "
                f"got {length}; pass positions for other grids"
            )
        return self.grid_positions(device=device)
