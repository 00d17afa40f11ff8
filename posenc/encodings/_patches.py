"""Patch tokens, shared by the vision tables (:class:`~posenc.Sinusoidal2D`, :class:`~posenc.Learned2D`):
grid arguments, input checks, and a ``(p + n, d)`` table added to flat tokens or to a patch grid.

Shape key: ``b`` batch, ``p`` prefix tokens (class token, registers), ``n`` patches (``h*w`` or
``t*h*w``), ``d`` model width.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._checks import check_float_tensor
from .._compat import check_values
from .._positions import resolve_positions


def patch_grid(name: str, grid: object, *, video: bool = False) -> tuple[int, ...]:
    """``grid`` as a tuple of positive ints: ``s`` means ``(s, s)``; ``(t, h, w)`` only if ``video``."""
    if isinstance(grid, int) and not isinstance(grid, bool):
        grid = (grid, grid)
    if (
        not isinstance(grid, (tuple, list))
        or len(grid) not in ((2, 3) if video else (2,))
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in grid)
    ):
        triple = " or a triple (frames, height, width)" if video else ""
        raise TypeError(f"{name} must be an int or a pair (height, width){triple} of ints, got {grid!r}")
    if min(grid) < 1:
        raise ValueError(f"{name} must be positive, got {tuple(grid)}")
    return tuple(grid)


def input_grid(
    x: Tensor, d_model: int, num_prefix_tokens: int, *, video: bool = False, **flat_only: object
) -> tuple[int, ...] | None:
    """Check ``x``: flat ``(b, p + n, d)`` tokens, ``(b, h, w, d)`` patches, or (``video``)
    ``(b, t, h, w, d)``; return the patches' grid, or ``None`` for flat tokens.

    ``flat_only`` names the arguments (``positions=...``) that must be ``None`` for a grid input.
    """
    ranks = (4, 5) if video else (4,)
    rank = x.dim() if isinstance(x, Tensor) and x.dim() in ranks else 3
    shapes = ["(batch, tokens, dim)", "(batch, h, w, dim)", "(batch, t, h, w, dim)"][: len(ranks) + 1]
    check_float_tensor("x", x, rank=rank, shape=shapes[rank - 3] if rank > 3 else " or ".join(shapes))
    if x.shape[-1] != d_model:
        raise ValueError(f"x has last dimension {x.shape[-1]}, expected d_model={d_model}")
    if rank > 3:
        if given := [name for name, value in flat_only.items() if value is not None]:
            raise ValueError(
                f"{' and '.join(given)}: only accepted with flat (batch, tokens, dim) inputs, not {shapes[rank - 3]}"
            )
        return tuple(x.shape[1:-1])
    if x.shape[1] < num_prefix_tokens:
        raise ValueError(f"x has {x.shape[1]} tokens, fewer than num_prefix_tokens={num_prefix_tokens}")
    return None


def add_patch_table(
    x: Tensor, table: Tensor, grid: tuple[int, ...], p: int, positions: Tensor | None, grid_name: str
) -> Tensor:
    """``x`` plus the rows of ``table`` ``(p + n, d)``, the encodings of ``grid``'s ``n`` patches
    after ``p`` prefix rows, in ``x.dtype``.

    Args:
        x: ``(b, *grid, d)`` patches (they get ``table[p:]``), or flat ``(b, p + n, d)`` tokens
            (all rows; ``(b, p + m, d)`` with ``positions``), checked by :func:`input_grid`.
        p: the number of rows before the patches' (class token, registers).
        positions: flat only: ``(m,)`` or ``(b, m)`` row-major patch indices below ``n`` (MAE's
            visible patches); the prefix tokens keep their rows.
        grid_name: how the message of a token count that does not fit names the grid.
    """
    if x.dim() > 3:
        return x + table[p:].view(*grid, -1).to(x.dtype)
    cells = math.prod(grid)
    axes = "*".join("thw"[3 - len(grid) :])  # "h*w" or "t*h*w", as the grid was given
    if positions is None:
        if x.shape[1] != p + cells:
            sizes = "*".join(map(str, grid))
            raise ValueError(
                f"x has {x.shape[1]} tokens, expected num_prefix_tokens + {axes} = {p} + {sizes} = {p + cells} "
                f"for {grid_name}={grid}"
            )
        return x + table.to(x.dtype)
    patches = f"one per patch token: x's {x.shape[1]} tokens less num_prefix_tokens={p}"
    positions = resolve_positions(positions, x.shape[1] - p, batch=x.shape[0], length_is=patches).to(
        table.device
    )
    message = f"positions must be patch indices below {axes} = {cells}"
    check_values(positions < cells, message, lambda: f"{message}, got maximum {int(positions.max())}")
    prefix = torch.arange(p, device=table.device).expand(*positions.shape[:-1], p)
    return x + table[torch.cat((prefix, positions + p), dim=-1)].to(x.dtype)
