"""Positions with axes: grid coordinates, axial RoPE frequencies and table resampling. No state.

Multi-axis positions are tensors with the axis last: ``(t, a)`` or ``(b, t, a)`` (Pixtral's
layout). transformers' M-RoPE ``position_ids`` are ``(3, b, t)``: :func:`axes_last` turns
them into ``(b, t, 3)``.

* :func:`grid_positions` — the coordinates of an ``h × w`` (or ``t × h × w``, any rank) grid,
  row-major, with zero rows for prefix tokens (class / register tokens: no rotation), integer
  indices, coordinates rescaled to a reference grid (EVA's resize) or pixel coordinates in
  ``[-1, 1]`` (rotary-embedding-torch, timm ``in_pixels``);
* :func:`axial_frequencies` — the frequency and the axis of each rotated pair, for the
  per-axis-block (Flux, EVA, rotary-embedding-torch), alternating (Pixtral) and cycling (Kimi K2.5)
  layouts, the axes in any order;
* :func:`mrope_axes` — the axis of each pair in M-RoPE, chunked (Qwen2-VL) or interleaved (Qwen3-VL);
* :func:`resample_grid_table` — a ``(p + h*w, d)`` table resampled to another grid
  (ViT/DINOv2/timm's bicubic ``interpolate_pos_encoding``).

Shape key: ``b`` batch, ``t`` tokens, ``a`` axes, ``r/2`` rotated pairs, ``p`` prefix tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from .._checks import check_choice, check_grid, check_int, check_positive_float

__all__ = [
    "axes_last",
    "axial_frequencies",
    "check_axis_widths",
    "grid_positions",
    "mrope_axes",
    "resample_grid_table",
]

#: Frequencies and axes are built on the CPU when no device is given, whatever the default device
#: (a module constructed under ``with torch.device("meta")`` must still size its buffers).
_CPU = torch.device("cpu")


def axes_last(position_ids: Tensor) -> Tensor:
    """transformers' M-RoPE ``position_ids`` ``(a, b, t)`` -> posenc's axis-last ``(b, t, a)``.

    Qwen2-VL's ``get_rope_index`` returns ``(3, b, t)`` (temporal, height, width); posenc's
    multi-axis positions put the axis last, as Pixtral does: this is ``.permute(1, 2, 0)``.
    """
    if not isinstance(position_ids, Tensor) or position_ids.dim() != 3:
        got = tuple(position_ids.shape) if isinstance(position_ids, Tensor) else type(position_ids).__name__
        raise ValueError(
            f"position_ids must be a (axes, batch, seq) tensor like transformers' M-RoPE ids, got {got}"
        )
    return position_ids.permute(1, 2, 0)


def grid_positions(
    grid: Sequence[int],
    *,
    num_prefix_tokens: int = 0,
    num_suffix_tokens: int = 0,
    first_index: int = 0,
    kind: Literal["index", "pixel", "center"] = "index",
    normalize: Literal["separate", "max", "min"] = "separate",
    ref_grid: Sequence[int] | None = None,
    shift: float | None = None,
    jitter: float | None = None,
    rescale: float | None = None,
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
    merge_size: int = 1,
) -> Tensor:
    """The coordinates of every cell of a grid, row-major, between ``num_prefix_tokens`` and
    ``num_suffix_tokens`` zero rows.

    A zero coordinate is no rotation in RoPE, so class and register tokens in front of the
    patches attend unrotated (as torchtune's vision RoPE and timm's EVA do), or after them (Llama 4's
    vision tower appends its class token).

    Args:
        grid: ``(h, w)``, ``(t, h, w)`` or any number of axis sizes.
        num_prefix_tokens: leading rows at coordinate 0.
        num_suffix_tokens: trailing rows at coordinate 0.
        first_index: ``"index"`` only, without ``ref_grid``: the index of each axis's first cell, ``first_index
            .. first_index + s - 1`` (torchtune's and Llama 4's vision RoPE: 1, so that no patch is unrotated).
        kind: ``"index"``: integer indices ``0 .. s-1`` per axis; ``"pixel"``: ``s`` evenly
            spaced floats in ``[-1, 1]`` per axis (rotary-embedding-torch's ``freqs_for="pixel"``);
            ``"center"``: the cell centres ``2 (i + 0.5) / n - 1`` (DINOv3), in ``(-1, 1)`` when ``n`` is
            the axis's own size.
        normalize: ``"center"`` only, DINOv3's ``normalize_coords``: ``n`` is each axis's size
            (``"separate"``), or the largest (``"max"``) or smallest (``"min"``) of the sizes.
        ref_grid: ``"index"`` only: rescale each axis so that this grid spans the reference grid
            the model was trained at, ``i * ref / s`` (EVA / timm ``ref_feat_shape``): a model
            trained on 16×16 patches sees 32×32 patches at half steps. Gives float coordinates.
        shift, jitter, rescale: DINOv3's training-time augmentation of float coordinates (its
            ``pos_embed_shift``/``_jitter``/``_rescale``), drawn afresh at each call in this
            order and in ``dtype``, as its code draws them (the same values for the same random
            state): add one uniform offset in ``[-shift, shift]`` per axis, multiply by one
            log-uniform factor in ``[1/jitter, jitter]`` per axis, then by one in
            ``[1/rescale, rescale]`` for all axes. Prefix rows stay at 0. ``None``: not applied.
        generator: the random generator of the augmentation (default: torch's global one).
        dtype: default ``torch.long`` for plain indices, else ``torch.float32``.
        device: of the result.
        merge_size: order the cells of the last two axes in ``m × m`` blocks, block after block (each
            block row-major), as the vision towers of Qwen2-VL and its kin order their patches
            (transformers' ``get_vision_position_ids``; ``t`` frames of ``(h, w)``: pass ``(t, h, w)`` for
            ``include_temporal=True``, else ``(h, w)`` and ``.repeat(t, 1)``). ``m`` must divide both.

    Returns:
        ``(p + prod(grid) + q, a)`` coordinates, ``a = len(grid)``, ``p``/``q`` the prefix and suffix rows.
    """
    sizes = check_grid(grid)
    check_int("num_prefix_tokens", num_prefix_tokens, minimum=0)
    check_int("num_suffix_tokens", num_suffix_tokens, minimum=0)
    if check_int("first_index", first_index, minimum=0) and (kind != "index" or ref_grid is not None):
        raise ValueError(
            f"first_index={first_index} numbers plain index cells; kind={kind!r}"
            + (" with ref_grid" if ref_grid is not None else "")
            + " coordinates have no first index: leave it 0"
        )
    check_choice("kind", kind, ("index", "pixel", "center"))
    check_choice("normalize", normalize, ("separate", "max", "min"))
    if normalize != "separate" and kind != "center":  # (else silently the same coordinates as without it)
        raise ValueError(
            f"normalize={normalize!r} sizes the cell centres of kind='center' only, got kind={kind!r}"
        )
    if ref_grid is not None:
        ref = check_grid(ref_grid)
        if kind != "index":
            raise ValueError(f"ref_grid rescales index coordinates; {kind} coordinates already span [-1, 1]")
        if len(ref) != len(sizes):
            raise ValueError(f"ref_grid={tuple(ref)} must have one size per axis of grid={sizes}")
    span = {"max": max(sizes), "min": min(sizes)}.get(normalize)
    if dtype is None:  # plain indices are integers, every other coordinate a float
        dtype = torch.long if kind == "index" and ref_grid is None else torch.float32
    axes = []
    for i, s in enumerate(sizes):
        if kind == "pixel":
            axes.append(torch.linspace(-1.0, 1.0, s, dtype=torch.float64, device=device))
        elif kind == "center":
            axes.append(2.0 * torch.arange(0.5, s, dtype=torch.float64, device=device) / (span or s) - 1.0)
        elif ref_grid is not None:
            axes.append(torch.arange(s, dtype=torch.float64, device=device) * (ref_grid[i] / s))
        else:
            axes.append(torch.arange(first_index, first_index + s, device=device))
    coords = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).to(dtype)
    m = check_int("merge_size", merge_size, minimum=1)
    if m > 1:  # (..., h, w, a) -> (..., h/m, w/m, m, m, a): each block's cells together
        if len(sizes) < 2 or sizes[-2] % m or sizes[-1] % m:
            raise ValueError(f"merge_size={m} must divide the last two sizes of grid={tuple(sizes)}")
        # (..., h/m, m, w/m, m, a), its two block axes then swapped
        coords = coords.unflatten(-3, (-1, m)).unflatten(-2, (-1, m)).transpose(-4, -3)
    coords = coords.reshape(-1, len(sizes))
    if shift is not None or jitter is not None or rescale is not None:
        coords = _augment(coords, shift, jitter, rescale, generator)
    zeros = coords.new_zeros(num_prefix_tokens + num_suffix_tokens, len(sizes))
    return torch.cat((zeros[:num_prefix_tokens], coords, zeros[num_prefix_tokens:]))


def _augment(
    coords: Tensor, shift: float | None, jitter: float | None, rescale: float | None, generator: Any
) -> Tensor:
    """DINOv3's random shift, per-axis jitter and rescale of ``(n, a)`` float coordinates."""
    if not coords.is_floating_point():
        raise ValueError("shift, jitter and rescale move float coordinates: use kind='center' or 'pixel'")

    def draw(size: int, bound: float) -> Tensor:
        out = torch.empty(1, size, dtype=coords.dtype, device=coords.device)
        return out.uniform_(-bound, bound, generator=generator)

    if shift is not None:
        coords = coords + draw(coords.shape[-1], check_positive_float("shift", shift))
    for name, value, size in (("jitter", jitter, coords.shape[-1]), ("rescale", rescale, 1)):
        if value is not None:
            if check_positive_float(name, value) < 1:
                raise ValueError(
                    f"{name} must be a float >= 1 (a log-uniform factor in [1/{name}, {name}]), got {value}"
                )
            coords = coords * draw(size, math.log(value)).exp()
    return coords


def check_axis_widths(axes_dim: Sequence[int], head_dim: int | None = None) -> tuple[int, ...]:
    """Validate a per-axis channel budget: even positive widths whose sum fits ``head_dim`` (when given)."""
    if not isinstance(axes_dim, (tuple, list)) or not axes_dim:
        raise TypeError(f"axes_dim must be a non-empty tuple of ints (channels per axis), got {axes_dim!r}")
    for i, d in enumerate(axes_dim):
        check_int(f"axes_dim[{i}]", d, minimum=2)
        if d % 2:
            raise ValueError(
                f"axes_dim[{i}] must be even (RoPE rotates channel pairs), got {d} in {tuple(axes_dim)}"
            )
    if head_dim is not None and sum(axes_dim) > head_dim:
        raise ValueError(
            f"axes_dim={tuple(axes_dim)} uses {sum(axes_dim)} channels, more than head_dim={head_dim}"
        )
    return tuple(axes_dim)


def axial_frequencies(
    axes_dim: Sequence[int],
    *,
    base: float = 10000.0,
    freqs: Literal["lang", "pixel", "period"] = "lang",
    axis_layout: Literal["cat", "alternate", "cycle", "blocks"] = "cat",
    axis_order: Sequence[int] | None = None,
    max_freq: float = 10.0,
    min_period: float | None = None,
    max_period: float | None = None,
    device: torch.device | str | None = None,
) -> tuple[Tensor, Tensor]:
    """The frequency and the axis of each rotated pair of axial RoPE, float64.

    * ``axis_layout="cat"`` (Flux ``axes_dim``, EVA / timm ``RotaryEmbeddingCat``,
      rotary-embedding-torch ``get_axial_freqs``): axis ``j`` owns a block of ``axes_dim[j] / 2``
      pairs, with frequencies computed for width ``axes_dim[j]``;
    * ``axis_layout="alternate"`` (Pixtral): one set of frequencies for the whole rotated width
      ``r = sum(axes_dim)``; frequency ``i`` goes to axis ``i mod a``, and each axis's frequencies
      form one block (all axes equal width);
    * ``axis_layout="cycle"`` (Kimi K2.5's vision tower): the pairs of ``"cat"`` taken from each axis in
      turn: pair ``i`` reads axis ``i mod a`` at that axis's ``(i // a)``-th frequency (all axes equal width).
    * ``axis_layout="blocks"`` (Gemma 4's vision tower): the frequencies and axes of ``"cat"``; the rotation
      (:class:`~posenc.AxialRoPE`) then pairs the channels within each axis's block (all axes equal width).

    ``axis_order`` names the coordinate each axis's pairs read, in channel order: default ``(0, 1, ...)``;
    ``(1, 0)`` puts the pairs of the columns (coordinate 1 of row-major ``(row, col)`` positions) before
    those of the rows (the vision towers of Step 3.5, Inkling 2 and Kimi K2.5; timm's ``grid_indexing="xy"``).

    Frequencies: ``"lang"`` ``base ** (-2i / width)``; ``"pixel"``
    ``pi * linspace(1, max_freq / 2, pairs)`` (rotary-embedding-torch), for coordinates in [-1, 1];
    ``"period"`` ``2 pi / base ** (2i / width)`` (DINOv3's periods; its base is 100), for cell centres;
    with ``min_period`` and ``max_period`` (DINOv3's other parametrisation, which replaces ``base``) the
    ``n`` periods of each axis are ``min_period * (max_period / min_period) ** (j / (n - 1))``, geometric
    from one to the other, both included.

    Returns:
        ``(inv_freq, axis)``: ``(r/2,)`` float64 frequencies and ``(r/2,)`` long axis indices.
    """
    check_axis_widths(axes_dim)
    check_choice("freqs", freqs, ("lang", "pixel", "period"))
    check_choice("axis_layout", axis_layout, ("cat", "alternate", "cycle", "blocks"))
    base = check_positive_float("base", base)
    max_freq = check_positive_float("max_freq", max_freq)
    # an option the frequencies would not read is refused (else silently the frequencies without it)
    if max_freq != 10.0 and freqs != "pixel":
        raise ValueError(
            f"max_freq={max_freq!r} sets the frequencies of freqs='pixel' only, got freqs={freqs!r}"
        )
    if base != 10000.0 and (freqs == "pixel" or min_period is not None):
        what = "freqs='pixel'" if freqs == "pixel" else "min_period and max_period"
        raise ValueError(f"base={base!r} is not read with {what}, whose frequencies do not depend on it")
    if (min_period is None) != (max_period is None) or (min_period is not None and freqs != "period"):
        raise ValueError(
            "min_period and max_period go together, with freqs='period' (they replace base), got "
            f"min_period={min_period!r}, max_period={max_period!r}, freqs={freqs!r}"
        )
    periods = None
    if min_period is not None:  # (and max_period, as just checked)
        periods = (
            check_positive_float("min_period", min_period),
            check_positive_float("max_period", max_period),
        )
        if periods[0] >= periods[1]:
            raise ValueError(f"min_period must be below max_period, got {min_period!r} and {max_period!r}")
    widths = list(axes_dim)
    if axis_layout != "cat" and len(set(widths)) != 1:
        raise ValueError(
            f"axis_layout={axis_layout!r} needs equal widths per axis, got axes_dim={tuple(widths)}"
        )
    n, where = len(widths), _CPU if device is None else torch.device(device)
    order = list(range(n)) if axis_order is None else axis_order
    ints = isinstance(order, (tuple, list)) and all(type(j) is int for j in order)  # (not bool, not float)
    if not ints or sorted(order) != list(range(n)):
        raise ValueError(f"axis_order must list the axes 0 .. {n - 1} once each, got {axis_order!r}")

    def frequencies(pairs: int, width: int) -> Tensor:  # the pairs of a block of `width` channels
        # DINOv3's other form: periods geometric from min_period to max_period, ends included
        if periods is not None:
            low, high = periods
            ramp = torch.linspace(0.0, 1.0, pairs, dtype=torch.float64, device=where)
            return 2 * math.pi / (low * (high / low) ** ramp)
        if freqs != "pixel":  # RoPE's base ** (-2i / width); DINOv3's "period" 2 pi / base ** (2i / width)
            lang = base ** -(torch.arange(pairs, dtype=torch.float64, device=where) * 2 / width)
            return lang if freqs == "lang" else 2 * math.pi * lang
        # rotary-embedding-torch "pixel" / timm pixel bands: pi * linspace(1, max_freq / 2)
        return torch.linspace(1.0, max_freq / 2, pairs, dtype=torch.float64, device=where) * math.pi

    # each axis's pairs in one block, in every layout but "cycle" (reordered below)
    axis = torch.tensor([j for j, d in enumerate(widths) for _ in range(d // 2)], device=where)
    if axis_layout == "alternate":  # one set over the whole width: frequency i to axis i mod n
        every = frequencies(sum(widths) // 2, sum(widths))
        inv_freq = torch.cat([every[j::n] for j in range(n)])
    else:
        inv_freq = torch.cat([frequencies(d // 2, d) for d in widths])
    if axis_layout == "cycle":  # (a, r/2a) -> (r/2a, a): one pair of each axis in turn
        inv_freq, axis = (x.unflatten(0, (n, -1)).T.flatten() for x in (inv_freq, axis))
    return inv_freq, torch.tensor(order, device=where)[axis]


def mrope_axes(
    mrope_section: Sequence[int], *, interleaved: bool | str = False, pairs: int | None = None
) -> Tensor:
    """The axis (0 temporal, 1 height, 2 width) of each rotated pair of M-RoPE, ``(pairs,)``.

    * chunked (Qwen2-VL, Qwen2.5-VL): the first ``section[0]`` pairs follow the temporal
      position, the next ``section[1]`` the height, the last ``section[2]`` the width;
    * interleaved (Qwen3-VL): pairs cycle t, h, w — pair ``i`` follows height when
      ``i mod 3 == 1`` and ``i < 3 * section[1]``, width when ``i mod 3 == 2`` and
      ``i < 3 * section[2]``, else time — so every axis spans low and high frequencies;
    * ``"hw"`` (ERNIE 4.5 VL): height and width alternate over the first ``2 * section[1]`` pairs (its two
      spatial sections are equal), time takes the last ``section[0]``; with two sections ``(h, w)``
      (NeoMME: rows and columns, no time), axes 0 and 1 alternate over every pair.

    Any number of sections works for the chunked form; ``"hw"`` takes two or three; the interleaved
    one takes three, over ``pairs`` pairs (default ``sum(section)``; transformers' recomposition writes
    height and width into the temporal angles only where those indices exist, so the sections need not
    sum to the pairs).
    """
    if not (isinstance(interleaved, bool) or interleaved == "hw"):
        error = ValueError if isinstance(interleaved, str) else TypeError  # (a str is the wrong value)
        raise error(f"interleaved must be False, True or 'hw', got {interleaved!r}")
    # (Python lists, not repeat_interleave with tensor repeats: that took ~8 ms per call on the CPU)
    sections = [check_int(f"mrope_section[{i}]", s, minimum=0) for i, s in enumerate(mrope_section)]
    n = len(sections)
    by_hw = interleaved == "hw"
    if interleaved and n not in ((2, 3) if by_hw else (3,)):
        expected = "two or three sections ((h, w) or (t, h, w))" if by_hw else "three sections (t, h, w)"
        raise ValueError(f"interleaved={interleaved!r} needs {expected}, got mrope_section={sections}")
    if by_hw and sections[-2] != sections[-1]:
        raise ValueError(
            f"interleaved='hw' alternates height and width: their sections must be equal, got mrope_section={sections}"
        )
    if by_hw:  # the last two sections alternate, from pair 0; a third (first) one, time, last
        axes = [n - 2 + i % 2 for i in range(2 * sections[-1])] + [0] * sum(sections[:-2])
    elif interleaved:  # pair i reads axis i mod n while i < n * section[i mod n], else time (axis 0)
        axes = [
            i % n if i < n * sections[i % n] else 0 for i in range(sum(sections) if pairs is None else pairs)
        ]
    else:
        axes = [j for j, s in enumerate(sections) for _ in range(s)]
    return torch.tensor(axes, dtype=torch.long, device=_CPU)


def _fraction_buckets(old: int, new: int, device: torch.device, divide: bool) -> Tensor:
    """``(new,)``: the old cell each new one reads, as Idefics' code finds it (float32 ``i * (1/new)``, clamped
    below 1), or with ``divide`` as MiniCPM-V's (float32 ``i / new``), bucketized at ``k/old``."""
    steps = torch.arange(new, dtype=torch.float32, device=device)
    # (the two differ by an ulp on a few grids, one that crosses a boundary k/old: 107 of the 70 x 70 pairs)
    fractions = steps / new if divide else steps * torch.full((), new, device=device).reciprocal()  # (a fill)
    boundaries = torch.arange(1 / old, 1.0, 1 / old, device=device)
    return torch.bucketize(fractions.clamp(max=1.0 - 1e-6), boundaries, right=True)


def resample_grid_table(
    table: Tensor,
    old_grid: Sequence[int],
    new_grid: Sequence[int],
    *,
    num_prefix_tokens: int = 0,
    mode: str = "bicubic",
    antialias: bool = False,
    align_corners: bool | None = False,
    interpolate_offset: float = 0.0,
) -> Tensor:
    """Resample a ``(p + h*w, d)`` position table to another grid, prefix rows kept as they are.

    The ViT / DINOv2 / timm recipe (``interpolate_pos_encoding``, ``resample_abs_pos_embed``):
    the ``(h, w, d)`` grid is read as a ``d``-channel image and resized with
    :func:`torch.nn.functional.interpolate`, in float32 (or float64), then cast back once.

    ``mode="bucketize"`` is NaViT's look-up instead (Idefics 2/3, SmolVLM, Phi-4's vision towers): cell ``(i, j)``
    of the new grid reads the old cell its fractional coordinates ``(i/H, j/W)`` fall in, computed in float32 as
    their code does (``i * (1/H)``, ``torch.bucketize``; not always the identity on the table's own grid).
    ``mode="bucketize_divide"``: the same with the fractions ``i / H`` (MiniCPM-V's towers, transformers'
    ``get_vision_nearest_position_ids``), which differ on a few grids.

    Args:
        table: ``(p + h*w, d)``.
        old_grid, new_grid: ``(h, w)`` and ``(H, W)``.
        num_prefix_tokens: ``p``, rows copied unchanged (class / register tokens).
        mode: an ``interpolate`` mode for 4-D input (``"bicubic"``, ``"bilinear"``, ``"nearest"``…), or
            ``"bucketize"`` / ``"bucketize_divide"``.
        antialias: low-pass filter when shrinking (timm's default; ViT/DINOv2 do not).
        align_corners: as ``interpolate`` (``False`` as ViT and DINOv2; ``None`` for ``"nearest"``).

    Returns:
        ``(p + H*W, d)`` in ``table.dtype``.
    """
    (h, w), (nh, nw) = check_grid(old_grid, "old_grid", axes=2), check_grid(new_grid, "new_grid", axes=2)
    modes = ("bicubic", "bilinear", "nearest", "nearest-exact", "area", "bucketize", "bucketize_divide")
    check_choice("mode", mode, modes)
    if not (align_corners is None or isinstance(align_corners, bool)):
        raise TypeError(f"align_corners must be a bool or None, got {align_corners!r}")
    if interpolate_offset:
        check_positive_float("interpolate_offset", interpolate_offset)
    p = num_prefix_tokens
    if table.dim() != 2 or table.shape[0] != p + h * w:
        raise ValueError(
            f"table must have shape (num_prefix_tokens + h*w, d) = ({p} + {h}*{w}, d), got {tuple(table.shape)}"
        )
    if mode in ("bucketize", "bucketize_divide"):
        divide = mode == "bucketize_divide"
        rows, cols = (_fraction_buckets(old, new, table.device, divide) for old, new in ((h, nh), (w, nw)))
        body = table[p:].reshape(h, w, -1)[rows[:, None], cols[None, :]].reshape(nh * nw, -1)
        return torch.cat((table[:p], body))
    if (h, w) == (nh, nw):
        return table
    work = torch.float64 if table.dtype == torch.float64 else torch.float32
    body = table[p:].to(work).reshape(1, h, w, -1).permute(0, 3, 1, 2)  # (1, d, h, w)
    if mode in ("nearest", "area", "nearest-exact"):
        align_corners = None
    # DINOv2's interpolate_offset > 0: scale factors (n + offset) / old given instead of the size
    scale = ((nh + interpolate_offset) / h, (nw + interpolate_offset) / w) if interpolate_offset else None
    body = F.interpolate(
        body, None if scale else (nh, nw), scale, mode=mode, align_corners=align_corners, antialias=antialias
    )
    body = body.permute(0, 2, 3, 1).reshape(nh * nw, -1).to(table.dtype)
    return torch.cat((table[:p], body))
