"""Pure tensor functions for the sinusoidal encodings (no state).

* :func:`sinusoidal_inv_freq` — the frequencies ``omega_i`` of the 1D table;
* :func:`sinusoidal_table` — the 1D sin/cos table of Vaswani et al. (2017) for any positions;
* :func:`sinusoidal_shift_map` — the fixed linear map taking the table at ``p`` to ``p + k``;
* :func:`sinusoidal_2d_table` — the 2D table of MAE (He et al., 2022) for an image patch grid;
* :func:`sinusoidal_3d_table` — the 3D table of video patch grids (CogVideoX / diffusers' split).

Everything is computed in the dtype asked for, float64 by default: float32 angles lose
about ``1e-7 × position`` (2e-4 at position 4096), so callers build in float64 and cast once.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
from torch import Tensor

from .._checks import check_choice

__all__ = [
    "sinusoidal_2d_table",
    "sinusoidal_3d_table",
    "sinusoidal_3d_widths",
    "sinusoidal_inv_freq",
    "sinusoidal_shift_map",
    "sinusoidal_table",
]

Layout = Literal["interleaved", "concat", "concat_cos"]
FreqSpacing = Literal["paper", "tensor2tensor"]
Order2D = Literal["mae", "timm", "timm_interleaved"]


def sinusoidal_inv_freq(
    dim: int,
    base: float = 10000.0,
    freq_spacing: FreqSpacing = "paper",
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    """The ``dim // 2`` angular frequencies of a sin/cos table of width ``dim``.

    * ``"paper"`` (Vaswani et al., 2017, Sec. 3.5; MAE; Marian): ``omega_i = base^(-2i/dim)``;
    * ``"tensor2tensor"`` (``get_timing_signal_1d``; fairseq, Speech2Text, M2M100):
      ``omega_i = base^(-i/(dim/2 - 1))``, so the last frequency is exactly ``1/base``.

    Args:
        dim: the table width (even; at least 4 for ``"tensor2tensor"``).
        base: the wavelength scale (10000 in the paper), > 0.
        freq_spacing: ``"paper"`` or ``"tensor2tensor"``.
        dtype, device: of the result.

    Returns:
        ``(dim // 2,)`` frequencies, the first equal to 1.
    """
    if not isinstance(dim, int) or isinstance(dim, bool) or dim < 2 or dim % 2:
        raise ValueError(f"dim must be an even int >= 2 (sin/cos come in pairs), got {dim!r}")
    if not (isinstance(base, (int, float)) and 0 < base < math.inf):
        raise ValueError(f"base must be a finite number > 0, got {base!r}")
    half = dim // 2
    check_choice("freq_spacing", freq_spacing, ("paper", "tensor2tensor"))
    if freq_spacing == "tensor2tensor" and half < 2:
        raise ValueError(
            f"freq_spacing='tensor2tensor' needs dim >= 4 (it divides by dim/2 - 1), got dim={dim}"
        )
    index = torch.arange(half, dtype=dtype, device=device)
    exponent = index * (2.0 / dim) if freq_spacing == "paper" else index / (half - 1)
    # exp(-x log b) rather than b ** -x: one formula for tensors and Python floats alike.
    return torch.exp(exponent * -math.log(base))


def sinusoidal_table(
    positions: Tensor,
    dim: int,
    base: float = 10000.0,
    layout: Layout = "interleaved",
    freq_spacing: FreqSpacing = "paper",
    *,
    dtype: torch.dtype = torch.float64,
) -> Tensor:
    """The sin/cos encodings of ``positions``.

    ``layout="interleaved"`` is the paper's ``PE[p, 2i] = sin(p·omega_i)``,
    ``PE[p, 2i+1] = cos(p·omega_i)``; ``layout="concat"`` is ``[sin(p·omega) | cos(p·omega)]``
    (tensor2tensor, MAE, Marian, most later code); ``layout="concat_cos"`` is ``[cos(p·omega) | sin(p·omega)]``
    (MusicGen).

    Args:
        positions: integer or float tensor of any shape ``(...)``.
        dim: the table width, even.
        base, freq_spacing: see :func:`sinusoidal_inv_freq`.
        layout: ``"interleaved"``, ``"concat"`` or ``"concat_cos"``.
        dtype: the dtype the angles are computed and returned in (float64 by default).

    Returns:
        ``(..., dim)`` tensor on ``positions.device``.
    """
    check_choice("layout", layout, get_args(Layout))
    inv_freq = sinusoidal_inv_freq(dim, base, freq_spacing, dtype=dtype, device=positions.device)
    angles = positions.to(dtype).unsqueeze(-1) * inv_freq  # (..., dim/2)
    # interleaved: (..., dim/2, 2) -> sin on even channels, cos on odd; concat: (..., 2, dim/2) -> [sin | cos]
    # (concat_cos: [cos | sin])
    pair = (angles.cos(), angles.sin()) if layout == "concat_cos" else (angles.sin(), angles.cos())
    return torch.stack(pair, dim=-1 if layout == "interleaved" else -2).flatten(-2)


def sinusoidal_shift_map(
    shift: int | float,
    dim: int,
    base: float = 10000.0,
    layout: Layout = "interleaved",
    freq_spacing: FreqSpacing = "paper",
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    """The matrix ``M`` with ``table(p + shift) == table(p) @ M`` for every ``p``.

    The paper's motivation for sin/cos (Vaswani et al., 2017, Sec. 3.5): for each frequency,
    ``(sin, cos)`` at ``p + k`` is ``(sin, cos)`` at ``p`` rotated by the angle ``k·omega_i``,
    a map that depends on ``k`` only. ``M`` is block-diagonal in those pairs.

    Args:
        shift: the offset ``k``.
        dim, base, layout, freq_spacing: as for :func:`sinusoidal_table`.

    Returns:
        ``(dim, dim)`` matrix acting on row vectors.
    """
    check_choice("layout", layout, get_args(Layout))
    inv_freq = sinusoidal_inv_freq(dim, base, freq_spacing, dtype=dtype, device=device)
    angle = inv_freq * shift
    c, s = angle.cos(), angle.sin()
    # sin(a + b) = sin a cos b + cos a sin b;  cos(a + b) = cos a cos b - sin a sin b: entry [x, y, i, i]
    # takes channel x (0: sin, 1: cos) of frequency i to channel y, (2, 2, dim/2, dim/2)
    blocks = torch.diag_embed(torch.stack((c, -s, s, c)).view(2, 2, -1))
    if layout == "concat_cos":  # channel x = 0 is cos there, 1 sin
        blocks = blocks.flip(0, 1)
    # channels numbered 2i + x (interleaved: side by side) or x * dim/2 + i (concat: dim/2 apart)
    m = blocks.permute(2, 0, 3, 1) if layout == "interleaved" else blocks.permute(0, 2, 1, 3)
    return m.reshape(dim, dim)


def sinusoidal_2d_table(
    height: int,
    width: int,
    dim: int,
    base: float = 10000.0,
    *,
    order: Order2D = "mae",
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    """The 2D sin/cos table of MAE (He et al., 2022) for a ``height × width`` patch grid.

    Patches are numbered row-major (row outer). In MAE's channel order, the first half of
    the channels encodes the column and the second half the row, each as
    ``[sin | cos]`` with ``omega_i = base^(-i/(dim/4))``:
    ``[sin(w·omega) | cos(w·omega) | sin(h·omega) | cos(h·omega)]``. (MAE's
    ``get_2d_sincos_pos_embed`` gives this order; pretrained MAE weights rely on it.)

    The same frequencies in timm's orders (``build_sincos2d_pos_embed``): ``order="timm"`` is
    ``[sin(h·omega) | sin(w·omega) | cos(h·omega) | cos(w·omega)]``; ``"timm_interleaved"``
    (``interleave_sin_cos=True``) is ``[sin(h·omega) | cos(h·omega) | sin(w·omega) | cos(w·omega)]``.

    Args:
        height, width: the grid size in patches.
        dim: the table width, divisible by 4.
        base: the wavelength scale (10000 in MAE).
        order: ``"mae"``, ``"timm"`` or ``"timm_interleaved"``.

    Returns:
        ``(height * width, dim)`` tensor.
    """
    if not isinstance(dim, int) or dim < 4 or dim % 4:
        raise ValueError(f"dim must be divisible by 4 (sin and cos for rows and columns), got {dim!r}")
    check_choice("order", order, ("mae", "timm", "timm_interleaved"))
    rows, cols = (torch.arange(n, dtype=dtype, device=device) for n in (height, width))
    row_of, col_of = torch.meshgrid(rows, cols, indexing="ij")  # (h, w) each
    axes = (col_of, row_of) if order == "mae" else (row_of, col_of)
    # each axis's 1D [sin | cos] table of width dim/2 (base ** (-i / (dim / 4))): (n, 2 axes, dim/2)
    table = sinusoidal_table(torch.stack(axes, -1).flatten(0, 1), dim // 2, base, "concat", dtype=dtype)
    # sin/cos inside each axis as they are (mae: [sin w | cos w | sin h | cos h]; timm_interleaved:
    # [sin h | cos h | sin w | cos w]) or outside the axes (timm: [sin h | sin w | cos h | cos w])
    return (table.unflatten(-1, (2, -1)).transpose(1, 2) if order == "timm" else table).flatten(1)


def sinusoidal_3d_widths(dim: int) -> tuple[int, int, int]:
    """The channel widths ``(time, width, height)`` of :func:`sinusoidal_3d_table`'s blocks.

    A quarter of the channels for time and three quarters for space, split equally between
    columns and rows: ``(dim/4, 3·dim/8, 3·dim/8)``. Each block is a ``[sin | cos]`` pair, so
    every width must be even: ``dim`` divisible by 16.

    Raises:
        ValueError: ``dim`` is not a positive multiple of 16.
    """
    if not isinstance(dim, int) or isinstance(dim, bool) or dim < 16 or dim % 16:
        raise ValueError(
            f"dim must be a positive multiple of 16 for a 3D table (time d/4, columns and rows 3d/8 each, "
            f"each an even [sin | cos] pair), got {dim!r}"
        )
    return dim // 4, 3 * dim // 8, 3 * dim // 8


def sinusoidal_3d_table(
    frames: int,
    height: int,
    width: int,
    dim: int,
    base: float = 10000.0,
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    """The 3D sin/cos table of a ``frames × height × width`` video patch grid.

    The split of diffusers' ``get_3d_sincos_pos_embed`` (CogVideoX, and the video DiTs built
    on it): the first ``dim/4`` channels encode the frame index with a 1D ``[sin | cos]``
    table, the other ``3·dim/4`` the patch's place in the frame with MAE's 2D table
    (:func:`sinusoidal_2d_table`, ``order="mae"``)::

        [sin(t·ω_t) | cos(t·ω_t) | sin(w·ω_s) | cos(w·ω_s) | sin(h·ω_s) | cos(h·ω_s)]

    with ``ω_t,i = base^(-i/(dim/8))`` and ``ω_s,i = base^(-i/(3·dim/16))`` (each block's own
    width, as in MAE). Each block depends on its own axis only. (diffusers takes the spatial
    size as ``(width, height)``; tokens here are numbered ``(frame, row, column)``
    row-major, as diffusers flattens them.)

    Args:
        frames, height, width: the grid size in patches (``>= 0``).
        dim: the table width, a multiple of 16 (see :func:`sinusoidal_3d_widths`).
        base: the wavelength scale (10000 in diffusers and MAE).
        dtype, device: of the result (computed in ``dtype``: build in float64, cast once).

    Returns:
        ``(frames * height * width, dim)`` tensor.
    """
    time_width = sinusoidal_3d_widths(dim)[0]
    frame_of = torch.arange(frames, dtype=dtype, device=device)
    time = sinusoidal_table(frame_of, time_width, base, "concat", dtype=dtype)  # (t, dim/4)
    space = sinusoidal_2d_table(height, width, dim - time_width, base, dtype=dtype, device=device)
    # (t, 1, dim/4) and (1, h*w, 3dim/4) broadcast to (t, h*w, dim), then flatten frame-major
    return torch.cat(
        (time[:, None].expand(-1, space.shape[0], -1), space.expand(frames, -1, -1)), -1
    ).flatten(0, 1)
