"""The fixed 2D sin/cos encoding of image patch grids (MAE) and its 3D form for video patch
grids (CogVideoX / diffusers).

The table is a non-persistent buffer computed in float64 and stored in float32 (float64 after
``.double()``); ``.to(torch.bfloat16)`` / ``.half()`` move it but do not downcast it. Outputs are
cast to the input's dtype once, at the end.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from .._checks import check_int, check_positive_float
from .._compat import wide_dtype
from ..base import PositionalEncoding
from ..functional.sinusoidal import sinusoidal_2d_table, sinusoidal_3d_table
from ._patches import add_patch_table, input_grid, patch_grid

__all__ = ["Sinusoidal2D"]


class Sinusoidal2D(PositionalEncoding):
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
    cache_names = ("_table",)
    repr_names = ("d_model", "/", "grid_size", "base", "num_prefix_tokens", "order")
    repr_optional = ("order",)
    _table: Tensor

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
        # order: checked by sinusoidal_2d_table when the table is built below (or by _check_3d for video)
        self.order = order
        self.d_model = check_int("d_model", d_model, minimum=4)
        if d_model % 4:
            raise ValueError(
                f"d_model must be divisible by 4 (sin and cos for rows and columns), got {d_model}"
            )
        self.grid_size = None if grid_size is None else patch_grid("grid_size", grid_size, video=True)
        self._check_3d("grid_size", self.grid_size or ())
        self.base = check_positive_float("base", base)
        self.num_prefix_tokens = check_int("num_prefix_tokens", num_prefix_tokens, minimum=0)
        device = torch.device(device) if device is not None else torch.get_default_device()
        # the constructor's grid (p zero rows without one): it keeps the dtype through .to()
        self.register_buffer("_table", self._build(self.grid_size, torch.float32, device), persistent=False)

    def _check_3d(self, name: str, grid: tuple[int, ...]) -> None:
        """A video grid needs ``d_model % 16 == 0`` and MAE's order (the only 3D layout)."""
        if len(grid) == 3 and self.d_model % 16:
            raise ValueError(
                f"{name}={grid} is a video grid (frames, height, width): d_model must be a multiple of 16 "
                f"(time d/4, columns and rows 3d/8 each, each an even [sin | cos] pair), got d_model={self.d_model}"
            )
        if len(grid) == 3 and self.order != "mae":
            raise ValueError(
                f"{name}={grid} is a video grid: only order='mae' has a 3D form, got order={self.order!r}"
            )

    def _build(self, grid: tuple[int, ...] | None, dtype: torch.dtype, device: torch.device) -> Tensor:
        """``(p + n, d)``: ``p`` zero rows, then the grid's ``n`` encodings (none without a grid)."""
        wide, grid = wide_dtype(device), grid or (0, 0)
        if len(grid) == 3:
            body = sinusoidal_3d_table(*grid, self.d_model, self.base, dtype=wide, device=device)
        else:
            h, w = grid
            body = sinusoidal_2d_table(
                h, w, self.d_model, self.base, order=self.order, dtype=wide, device=device
            )
        prefix = torch.zeros(self.num_prefix_tokens, self.d_model, dtype=wide, device=device)
        return torch.cat((prefix, body)).to(dtype)

    def reset_caches(self) -> None:
        """Rebuild the table (on its current device and in its dtype), e.g. after ``to_empty()``."""
        self._table = self._build(self.grid_size, self._table.dtype, self._table.device)

    def _grid_table(self, grid: tuple[int, ...], dtype: torch.dtype) -> Tensor:
        """The ``(p + n, d)`` table of ``grid`` in ``dtype``: the cache for the constructor's grid,
        computed for others (a table per call is cheap next to the patches it is added to)."""
        if grid == self.grid_size and dtype == self._table.dtype:
            return self._table
        return self._build(grid, dtype, self._table.device)

    def table(self, grid_size: int | tuple[int, int] | tuple[int, int, int] | None = None) -> Tensor:
        """The encodings added to a flat input: ``(p + n, d)``, prefix rows zero, float32.

        Args:
            grid_size: the grid, ``(h, w)`` (``n = h*w``) or ``(t, h, w)`` (``n = t*h*w``);
                defaults to the constructor's ``grid_size``.
        """
        grid = self.grid_size if grid_size is None else patch_grid("grid_size", grid_size, video=True)
        if grid is None:
            raise ValueError("table() needs a grid_size (none was given to the constructor)")
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
        grid = input_grid(x, self.d_model, self.num_prefix_tokens, video=True, positions=positions)
        if grid is not None and self.grid_size is not None and len(grid) != len(self.grid_size):
            raise ValueError(
                f"x of shape {tuple(x.shape)} is a {len(grid)}-axis grid of patches, but grid_size={self.grid_size} "
                f"has {len(self.grid_size)} axes"
            )
        grid = grid or self.grid_size
        if grid is None:
            raise ValueError(
                f"a flat input of shape {tuple(x.shape)} needs grid_size=(h, w) or (t, h, w) at construction; "
                "or pass x as (batch, h, w, dim) or (batch, t, h, w, dim)"
            )
        self._check_3d("x.shape[1:4]", grid)
        table = self._grid_table(grid, torch.float64 if x.dtype == torch.float64 else self._table.dtype)
        return add_patch_table(x, table, grid, self.num_prefix_tokens, positions, "grid_size")
