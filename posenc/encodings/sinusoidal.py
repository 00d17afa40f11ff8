"""Fixed sin/cos encodings: 1D (Vaswani et al., 2017), 2D for image patch grids (MAE) and 3D
for video patch grids (CogVideoX / diffusers).

Both keep their table as a non-persistent buffer computed in float64 and stored in float32
(float64 after ``.double()``). ``.to(torch.bfloat16)`` / ``.half()`` move the table but do not
downcast it: a bfloat16 table has random phases past a few thousand positions. Outputs are
cast to the input's dtype once, at the end.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from .._checks import check_choice, check_int, check_positive_float
from .._compat import is_compiling, is_exporting, wide_dtype
from ..base import PositionalEncoding, check_input, resolve_positions
from ..functional.sinusoidal import (
    ORDERS_2D,
    sinusoidal_2d_table,
    sinusoidal_3d_table,
    sinusoidal_table,
)
from ..registry import register

__all__ = ["Sinusoidal", "Sinusoidal2D"]

Grid = tuple[int, int] | tuple[int, int, int]

#: Rows of the 1D table built at construction when ``max_len`` is not given.
DEFAULT_INITIAL_LEN = 512
#: The most rows the 1D table ever holds (16384 rows of width 1024: 64 MiB). Positions past it
#: are computed from the formula per call, so memory is bounded by what the call needs.
MAX_TABLE_LEN = 16384


class _TableCache(PositionalEncoding):
    """Base of the sin/cos encodings: keeps the buffer ``_table`` float32/float64 through
    ``.to()``, ``.half()`` and ``to_empty()``.

    Subclasses implement :meth:`_build_table` (float64 math, returned in the given dtype).
    """

    _table: Tensor
    cache_names = ("_table",)

    def _build_table(self, dtype: torch.dtype, device: torch.device) -> Tensor:  # pragma: no cover
        raise NotImplementedError

    def reset_caches(self) -> None:
        """Rebuild the table (on its current device), e.g. after ``to_empty()``."""
        self._table = self._build_table(self._table.dtype, self._table.device)


@register("sinusoidal", "sincos")
class Sinusoidal(_TableCache):
    """The fixed sin/cos position encoding of "Attention Is All You Need" (Vaswani et al., 2017).

    ``PE[p, 2i] = sin(p·omega_i)``, ``PE[p, 2i+1] = cos(p·omega_i)`` with
    ``omega_i = base^(-2i/d_model)``, added to the token embeddings. The table is built in
    float64, cached in float32 and grows on demand: ``max_len`` is only its initial size.

    Variants (for parity with existing checkpoints):

    * ``layout="concat"``: ``[sin | cos]`` instead of interleaved (tensor2tensor, Marian, MAE);
    * ``freq_spacing="tensor2tensor"``: ``omega_i = base^(-i/(d_model/2 - 1))``
      (tensor2tensor's ``get_timing_signal_1d``, fairseq, Speech2Text, M2M100);
    * ``offset``: added to every position (fairseq-style models start at ``padding_idx + 1``).

    Args:
        d_model: the embedding width, even.
        base: the wavelength scale, finite and > 0.
        layout: ``"interleaved"`` (the paper) or ``"concat"``.
        max_len: rows built at construction (default :data:`DEFAULT_INITIAL_LEN`); longer
            sequences grow the table.
        offset: added to every position before the look-up, >= 0.
        freq_spacing: ``"paper"`` or ``"tensor2tensor"``.
        device: where the table is built.

    Shape:
        ``forward(x, positions)``: ``x`` is ``(b, t, d)``, ``positions`` ``(t,)`` or ``(b, t)``
        (default ``0..t-1``); returns ``(b, t, d)`` in ``x.dtype``.

    Caching: default positions read a slice of the table. Explicit positions are gathered;
    in eager mode the largest one is read (one device sync) to grow the table when needed
    (to the next power of two, never past :data:`MAX_TABLE_LEN` rows; a few positions far past
    the table, and any past that bound, are computed instead: memory follows the call).
    Under ``torch.compile`` the table cannot grow (a graph does not reassign buffers), so
    lengths past it, explicit positions and exported programs compute the encodings from
    the formula inside the graph (float64, cast once): the same values, no size limit.

    Example::

        pe = Sinusoidal(512)
        x = pe(token_embeddings)                      # x + PE[0..t-1]
        x = pe(x, positions=mask_to_positions(mask))  # left padding: look up by position
    """

    kind = "additive"

    def __init__(
        self,
        d_model: int,
        base: float = 10000.0,
        layout: Literal["interleaved", "concat"] = "interleaved",
        max_len: int | None = None,
        offset: int = 0,
        freq_spacing: Literal["paper", "tensor2tensor"] = "paper",
        *,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        check_int("d_model", d_model, minimum=2)
        if d_model % 2:
            raise ValueError(f"d_model must be even (sin/cos come in pairs), got {d_model}")
        check_choice("layout", layout, ("interleaved", "concat"))
        check_choice("freq_spacing", freq_spacing, ("paper", "tensor2tensor"))
        if freq_spacing == "tensor2tensor" and d_model < 4:
            raise ValueError(f"freq_spacing='tensor2tensor' needs d_model >= 4, got d_model={d_model}")
        if max_len is not None:
            check_int("max_len", max_len, minimum=1)
        self.d_model = d_model
        self.base = check_positive_float("base", base)
        self.layout = layout
        self.max_len = max_len
        self.offset = check_int("offset", offset, minimum=0)
        self.freq_spacing = freq_spacing
        self._initial_rows = min(
            (max_len if max_len is not None else DEFAULT_INITIAL_LEN) + offset, MAX_TABLE_LEN
        )
        device = torch.device(device) if device is not None else torch.get_default_device()
        self.register_buffer(
            "_table", self._build_table(torch.float32, device, self._initial_rows), persistent=False
        )

    def _build_table(self, dtype: torch.dtype, device: torch.device, rows: int | None = None) -> Tensor:
        rows = rows if rows is not None else max(self._initial_rows, self._table.shape[0])
        positions = torch.arange(rows, dtype=torch.float64, device=device)
        return self._compute(positions, dtype)

    def _compute(self, rows: Tensor, dtype: torch.dtype) -> Tensor:
        """Encodings of table rows (positions already offset), built in float64, cast once."""
        wide = wide_dtype(rows.device)
        return sinusoidal_table(rows, self.d_model, self.base, self.layout, self.freq_spacing, dtype=wide).to(
            dtype
        )

    def _grow(self, rows: int) -> bool:
        """Eager only: grow the table to at least ``rows`` rows (the next power of two, at most
        :data:`MAX_TABLE_LEN`); ``False`` when ``rows`` is past that bound (compute instead)."""
        if rows > MAX_TABLE_LEN:
            return False
        new_rows = min(1 << max(rows - 1, 1).bit_length(), MAX_TABLE_LEN)
        self._table = self._build_table(self._table.dtype, self._table.device, new_rows)
        return True

    def table(self, positions: Tensor | int, *, dtype: torch.dtype | None = None) -> Tensor:
        """The encodings of ``positions`` (what :meth:`encode_input` adds), in float32 or better.

        Args:
            positions: an int ``n`` (positions ``0..n-1``) or an integer tensor of any shape
                ``(...)``; ``offset`` is added.
            dtype: ``torch.float32`` (default: the table's dtype) or ``torch.float64``.

        Returns:
            ``(..., d)`` tensor (``(n, d)`` for an int).
        """
        if isinstance(positions, int) and not isinstance(positions, bool):
            check_int("positions", positions, minimum=0)
            positions = torch.arange(positions, device=self._table.device)
        elif (
            not isinstance(positions, Tensor)
            or positions.is_floating_point()
            or positions.dtype == torch.bool
        ):
            raise TypeError(f"positions must be an int or an integer tensor, got {positions!r}")
        if not is_compiling() and positions.numel() and bool((positions < 0).any()):
            raise ValueError(f"positions must be non-negative, got minimum {int(positions.min())}")
        dtype = dtype or self._table.dtype
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        return self._lookup(positions.to(self._table.device), dtype)

    def _lookup(self, positions: Tensor, dtype: torch.dtype) -> Tensor:
        """Encodings of explicit ``positions`` (any shape) in ``dtype`` (float32/float64)."""
        rows = positions + self.offset
        if dtype != self._table.dtype or is_compiling() or rows.device.type == "meta":
            # float64 encodings for float64 inputs come from the formula (the cache is float32);
            # under compile the largest position is data, and checking it would need a sync;
            # on the meta device it has no value at all (shape propagation).
            return self._compute(rows, dtype)
        needed = int(rows.max()) + 1 if rows.numel() else 0
        if needed > self._table.shape[0]:
            if needed > 2 * max(self._table.shape[0], rows.numel()) or not self._grow(needed):
                # A few far positions (say one decoding step at 10**7), or any past the bound:
                # computing them costs what the call needs, while a table up to there could
                # take gigabytes and would be kept.
                return self._compute(rows, dtype)
        return self._table[rows]

    def _prefix(self, length: int, dtype: torch.dtype) -> Tensor:
        """Encodings of positions ``0..length-1``: a slice of the table, ``(length, d)``."""
        rows = length + self.offset
        past = rows > self._table.shape[0]
        if (
            dtype != self._table.dtype
            or is_exporting()
            or (past and (is_compiling() or not self._grow(rows)))
        ):
            # Under compile ``length`` is a shape, so the test above is a guard, not a sync;
            # an exported program computes instead, so that it serves every length.
            positions = torch.arange(self.offset, rows, device=self._table.device)
            return self._compute(positions, dtype)
        return self._table[self.offset : rows]

    def encode_input(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """Add the sin/cos encodings of ``positions`` to ``x``.

        Args:
            x: ``(b, t, d)`` embeddings, any floating dtype.
            positions: ``(t,)`` or ``(b, t)`` non-negative integers; ``None`` means ``0..t-1``.

        Returns:
            ``x + PE[positions + offset]``, ``(b, t, d)`` in ``x.dtype``.
        """
        check_input(x, width=self.d_model)
        wide = torch.float64 if x.dtype == torch.float64 else self._table.dtype
        if positions is None:
            pe = self._prefix(x.shape[1], wide)
        else:
            positions = resolve_positions(positions, x.shape[1], batch=x.shape[0])
            pe = self._lookup(positions.to(self._table.device), wide)
        # One cast of the (t, d) table, not of the (b, t, d) sum.
        return x + pe.to(x.dtype)

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """Drop-in call: ``x + PE``; see :meth:`encode_input`. ``(b, t, d) -> (b, t, d)``."""
        return self.encode_input(x, positions)

    def extra_repr(self) -> str:
        extra = f"{self.d_model}, base={self.base}, layout={self.layout!r}"
        if self.freq_spacing != "paper":
            extra += f", freq_spacing={self.freq_spacing!r}"
        if self.offset:
            extra += f", offset={self.offset}"
        return extra


@register("sinusoidal2d")
class Sinusoidal2D(_TableCache):
    """The fixed 2D sin/cos encoding of image patch grids from MAE (He et al., 2022), and its
    3D form for video.

    Half of the channels encode the patch's column and half its row, each with a 1D
    ``[sin | cos]`` table of width ``d_model / 2``, in MAE's order
    ``[sin(w) | cos(w) | sin(h) | cos(h)]`` (see :func:`~posenc.functional.sinusoidal_2d_table`),
    so pretrained MAE/ViT-MAE weights see the encoding they were trained with. The first
    ``num_prefix_tokens`` tokens (a class token, registers) get no position, like MAE's
    zero row for the class token.

    **Video** (``grid_size=(t, h, w)``, or ``(b, t, h, w, d)`` inputs): the split of diffusers'
    ``get_3d_sincos_pos_embed`` (CogVideoX and the video DiTs built on it): the first
    ``d_model/4`` channels encode the frame with a 1D ``[sin | cos]`` table, the other
    ``3·d_model/4`` the place in the frame with the MAE 2D table above
    (:func:`~posenc.functional.sinusoidal_3d_table`); ``d_model`` must then be a multiple of
    16. Tokens are numbered frame, row, column (row-major). Only ``order="mae"`` has a 3D form.

    Args:
        d_model: the embedding width, divisible by 4 (by 16 for video).
        grid_size: ``(h, w)``, ``s`` for ``s × s`` patches, or ``(t, h, w)`` for video; needed
            for flat ``(b, n, d)`` inputs; ``(b, h, w, d)`` and ``(b, t, h, w, d)`` inputs give
            the grid by their shape (which must have as many axes as ``grid_size``, if given).
        base: the wavelength scale, finite and > 0.
        num_prefix_tokens: leading tokens of a flat input left without position.
        order: the channel order: ``"mae"`` (above), or timm's ``"timm"``
            (``[sin h | sin w | cos h | cos w]``) and ``"timm_interleaved"`` (``[sin h | cos h | sin w | cos w]``,
            timm's ``interleave_sin_cos=True``), for weights trained with timm's
            ``build_sincos2d_pos_embed``.
        device: where the table is built.

    Shape:
        ``forward(x, positions)``: ``x`` is ``(b, p + h*w, d)`` with ``p = num_prefix_tokens``,
        ``(b, h, w, d)``, or for video ``(b, p + t*h*w, d)`` or ``(b, t, h, w, d)``; returns the
        same shape in ``x.dtype``. For a flat input, ``positions`` may select patches (MAE's
        visible patches): ``(n,)`` or ``(b, n)`` row-major patch indices below ``h*w``
        (``t*h*w``), with ``x`` of shape ``(b, p + n, d)``.

    Example::

        pe = Sinusoidal2D(768, grid_size=(8, 14, 14), num_prefix_tokens=1)  # 8 frames of 14x14
        x = pe(tokens)                                                      # (b, 1 + 8*14*14, 768)
    """

    kind = "additive"

    def __init__(
        self,
        d_model: int,
        grid_size: int | tuple[int, int] | tuple[int, int, int] | list[int] | None = None,
        base: float = 10000.0,
        num_prefix_tokens: int = 0,
        *,
        order: Literal["mae", "timm", "timm_interleaved"] = "mae",
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        check_choice("order", order, ORDERS_2D)
        self.order = order
        check_int("d_model", d_model, minimum=4)
        if d_model % 4:
            raise ValueError(
                f"d_model must be divisible by 4 (sin and cos for rows and columns), got {d_model}"
            )
        self.d_model = d_model
        self.grid_size = self._check_grid(grid_size)
        if self.grid_size is not None and len(self.grid_size) == 3:
            self._check_3d("grid_size", self.grid_size)
        self.base = check_positive_float("base", base)
        self.num_prefix_tokens = check_int("num_prefix_tokens", num_prefix_tokens, minimum=0)
        device = torch.device(device) if device is not None else torch.get_default_device()
        self._table_grid = self.grid_size
        self.register_buffer("_table", self._build_table(torch.float32, device), persistent=False)

    @staticmethod
    def _check_grid(grid_size: object) -> Grid | None:
        if grid_size is None:
            return None
        if isinstance(grid_size, int) and not isinstance(grid_size, bool):
            grid_size = (grid_size, grid_size)
        if (
            not isinstance(grid_size, (tuple, list))
            or len(grid_size) not in (2, 3)
            or not all(isinstance(s, int) and not isinstance(s, bool) for s in grid_size)
        ):
            raise TypeError(
                "grid_size must be an int, a pair (height, width) or a triple (frames, height, width) "
                f"of ints, got {grid_size!r}"
            )
        if min(grid_size) < 1:
            raise ValueError(f"grid_size must be positive, got {tuple(grid_size)}")
        if len(grid_size) == 3:
            return (grid_size[0], grid_size[1], grid_size[2])
        return (grid_size[0], grid_size[1])

    def _check_3d(self, name: str, grid: tuple[int, ...]) -> None:
        """A video grid needs ``d_model % 16 == 0`` and MAE's order (the only 3D layout)."""
        if self.d_model % 16:
            raise ValueError(
                f"{name}={grid} is a video grid (frames, height, width): d_model must be a multiple of 16 "
                f"(time d/4, columns and rows 3d/8 each, each an even [sin | cos] pair), got d_model={self.d_model}"
            )
        if self.order != "mae":
            raise ValueError(
                f"{name}={grid} is a video grid: only order='mae' has a 3D form, got order={self.order!r}"
            )

    def _build_table(self, dtype: torch.dtype, device: torch.device, grid: Grid | None = None) -> Tensor:
        """``(p + n, d)``: ``p`` zero rows, then the grid's ``n`` encodings (none without a grid)."""
        grid = grid if grid is not None else self._table_grid
        wide = wide_dtype(device)
        if grid is not None and len(grid) == 3:
            body = sinusoidal_3d_table(*grid, self.d_model, self.base, dtype=wide, device=device)
        else:
            h, w = grid if grid is not None else (0, 0)
            body = sinusoidal_2d_table(
                h, w, self.d_model, self.base, order=self.order, dtype=wide, device=device
            )
        prefix = torch.zeros(self.num_prefix_tokens, self.d_model, dtype=wide, device=device)
        return torch.cat((prefix, body)).to(dtype)

    def _grid_table(self, grid: Grid, dtype: torch.dtype) -> Tensor:
        """The ``(p + n, d)`` table of ``grid`` in ``dtype``, from the cache when it holds that grid."""
        if grid == self._table_grid and dtype == self._table.dtype:
            return self._table
        if is_compiling() or dtype != self._table.dtype or self.grid_size not in (None, grid):
            # the cache keeps the constructor's grid; other grids are computed per call
            return self._build_table(dtype, self._table.device, grid)
        # Eager, no grid given at construction: keep the last grid seen.
        self._table_grid = grid
        self._table = self._build_table(self._table.dtype, self._table.device, grid)
        return self._table

    def table(self, grid_size: int | tuple[int, int] | tuple[int, int, int] | None = None) -> Tensor:
        """The encodings added to a flat input: ``(p + n, d)``, prefix rows zero, float32.

        Args:
            grid_size: the grid, ``(h, w)`` (``n = h*w``) or ``(t, h, w)`` (``n = t*h*w``);
                defaults to the constructor's ``grid_size``.
        """
        grid = self._check_grid(grid_size) or self.grid_size
        if grid is None:
            raise ValueError("table() needs a grid_size (none was given to the constructor)")
        if len(grid) == 3:
            self._check_3d("grid_size", grid)
        return self._grid_table(grid, self._table.dtype)

    def encode_input(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """Add the 2D encodings to patch tokens.

        Args:
            x: ``(b, p + n, d)`` tokens (``p = num_prefix_tokens``; ``n = h*w``, or ``t*h*w``
                for a video grid, without ``positions``), ``(b, h, w, d)`` patches or
                ``(b, t, h, w, d)`` video patches.
            positions: for flat inputs only, ``(n,)`` or ``(b, n)`` row-major patch indices.

        Returns:
            ``x`` plus the encodings, same shape, in ``x.dtype``.
        """
        if not isinstance(x, Tensor):
            raise TypeError(
                f"x must be a torch.Tensor of shape (batch, tokens, dim) or (batch, h, w, dim), got {type(x).__name__}"
            )
        wide = torch.float64 if x.dtype == torch.float64 else self._table.dtype
        if x.dim() in (4, 5):
            return self._encode_grid(x, positions, wide)
        check_input(x, width=self.d_model)
        if self.grid_size is None:
            raise ValueError(
                f"a flat input of shape {tuple(x.shape)} needs grid_size=(h, w) or (t, h, w) at construction; "
                "or pass x as (batch, h, w, dim) or (batch, t, h, w, dim)"
            )
        grid = self.grid_size
        p = self.num_prefix_tokens
        n = x.shape[1] - p
        table = self._grid_table(grid, wide)
        cells = math.prod(grid)
        # "h*w" or "t*h*w": the product named by its axes, as the grid was given
        axes = "*".join("thw"[3 - len(grid) :])
        if positions is None:
            if n != cells:
                sizes = "*".join(map(str, grid))
                raise ValueError(
                    f"x has {x.shape[1]} tokens, expected num_prefix_tokens + {axes} = {p} + {sizes} = {p + cells} "
                    f"for grid_size={grid}"
                )
            return x + table.to(x.dtype)
        if n < 0:
            raise ValueError(f"x has {x.shape[1]} tokens, fewer than num_prefix_tokens={p}")
        positions = resolve_positions(positions, n, batch=x.shape[0], name="positions").to(table.device)
        # a data-dependent check: eager only, and not on meta (no values; shape propagation)
        checkable = not is_compiling() and positions.numel() and positions.device.type != "meta"
        if checkable and int(positions.max()) >= cells:
            raise ValueError(
                f"positions must be patch indices below {axes} = {cells}, got maximum {int(positions.max())}"
            )
        prefix = torch.arange(p, device=table.device).expand(*positions.shape[:-1], p)
        rows = torch.cat((prefix, positions + p), dim=-1)
        return x + table[rows].to(x.dtype)

    def _encode_grid(self, x: Tensor, positions: Tensor | None, wide: torch.dtype) -> Tensor:
        """``(b, h, w, d)`` or ``(b, t, h, w, d)`` inputs: the grid is the input's shape."""
        if not x.is_floating_point():
            raise TypeError(f"x must be a floating-point tensor, got dtype {x.dtype}")
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x has last dimension {x.shape[-1]}, expected d_model={self.d_model}")
        layout = "(batch, h, w, dim)" if x.dim() == 4 else "(batch, t, h, w, dim)"
        if positions is not None:
            raise ValueError(
                f"positions are only accepted with flat (batch, tokens, dim) inputs, not {layout}"
            )
        grid: Grid = (x.shape[1], x.shape[2]) if x.dim() == 4 else (x.shape[1], x.shape[2], x.shape[3])
        if self.grid_size is not None and len(self.grid_size) != len(grid):
            raise ValueError(
                f"x of shape {tuple(x.shape)} is a {len(grid)}-axis grid {layout}, but grid_size={self.grid_size} "
                f"has {len(self.grid_size)} axes"
            )
        if len(grid) == 3:
            self._check_3d("x.shape[1:4]", grid)
        pe = self._grid_table(grid, wide)[self.num_prefix_tokens :]
        return x + pe.view(*grid, self.d_model).to(x.dtype)

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """Drop-in call: ``x + PE``; see :meth:`encode_input`."""
        return self.encode_input(x, positions)

    def extra_repr(self) -> str:
        extra = f"{self.d_model}, grid_size={self.grid_size}, base={self.base}, num_prefix_tokens={self.num_prefix_tokens}"
        return extra + (f", order={self.order!r}" if self.order != "mae" else "")
