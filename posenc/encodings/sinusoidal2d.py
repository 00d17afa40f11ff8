"""The fixed 2D sin/cos encoding of image patch grids (MAE) and its 3D form for video patch
grids (CogVideoX / diffusers).

The table is a non-persistent buffer computed in float64 and stored in float32 (float64 after
``.double()``); ``.to(torch.bfloat16)`` / ``.half()`` move it but do not downcast it. Outputs are
cast to the input's dtype once, at the end.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from .._checks import check_choice, check_int, check_positive_float
from .._compat import check_values, is_compiling, wide_dtype
from .._positions import check_input, resolve_positions
from ..functional.sinusoidal import (
    ORDERS_2D,
    sinusoidal_2d_table,
    sinusoidal_3d_table,
)
from ._table_cache import TABLE_LOCK, _TableCache

__all__ = ["Sinusoidal2D"]

Grid = tuple[int, int] | tuple[int, int, int]


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
        if is_compiling():  # the cache is read, never replaced, under tracing
            if grid == self._table_grid and dtype == self._table.dtype:
                return self._table
            return self._build_table(dtype, self._table.device, grid)
        with TABLE_LOCK:  # the grid and its table are read and replaced together (threads)
            cached_grid, table = self._table_grid, self._table
        if grid == cached_grid and dtype == table.dtype:
            return table
        if dtype != table.dtype or self.grid_size not in (None, grid):
            # the cache keeps the constructor's grid; other grids are computed per call
            return self._build_table(dtype, table.device, grid)
        # Eager, no grid given at construction: keep the last grid seen.
        table = self._build_table(table.dtype, table.device, grid)
        with TABLE_LOCK:
            self._table_grid, self._table = grid, table
        return table

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
        check_values(
            positions < cells,
            f"positions must be patch indices below {axes} = {cells}",
            lambda: (
                f"positions must be patch indices below {axes} = {cells}, got maximum {int(positions.max())}"
            ),
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
