"""Whole-tensor parity of posenc's image encodings (and RoPE) with timm and torchtune, on the same inputs.

* timm ``RotaryEmbeddingCat`` / ``build_rotary_pos_embed`` / ``apply_rot_embed_cat`` as EVA-02 applies
  them (prefix tokens left unrotated) vs :class:`posenc.AxialRoPE`;
* timm ``resample_abs_pos_embed`` (+ ``_nhwc``) vs :class:`posenc.Learned2D` resampling;
* timm ``build_sincos2d_pos_embed`` vs :class:`posenc.Sinusoidal2D` ``order="timm"``/``"timm_interleaved"``;
* torchtune ``VisionRotaryPositionalEmbeddings`` (class token, tiles) vs :class:`posenc.AxialRoPE`;
* torchtune ``RotaryPositionalEmbeddings`` (its text RoPE) vs :class:`posenc.RoPE` ``layout="interleaved"``.

The reference modules are loaded from the installed packages' own files, without running the
packages' ``__init__``: ``import timm`` needs a torchvision built for the installed torch (PyPI's
torchvision for torch 2.13 is a CUDA build that fails to load against the CPU torch, and a newer
one makes pip replace torch), and ``import torchtune`` needs torchao, datasets and more. The files
compared here import only torch and their own siblings, so the code under test is timm's and
torchtune's own. Each test skips when its package is absent.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

import posenc
from posenc.functional import axial_frequencies, grid_positions, rope_cos_sin

# timm and torchtune build bands, coordinates and angles in float32; posenc computes angles in
# float64 and rounds once. Index angles stay below ~40 rad here, so the float32 angle error is
# < 40 * 6e-8 ≈ 2.4e-6, times |x| < ~5 for randn inputs.
ATOL = 2e-5
# Pixel frequencies reach pi * max_res / 2 (~50 rad for max_res=32): float32 angles err by ~3e-6.
ATOL_PIXEL = 1e-4
# Resampling: both run F.interpolate in float32 on the same values; only the op order differs.
ATOL_RESAMPLE = 1e-6


def _reference(package: str, *module: str) -> ModuleType:
    """Import ``package.<module...>`` from the installed files, skipping ``package/__init__.py``.

    The package is mirrored under a private name (``_posenc_ref_<package>``) whose parents are empty
    namespace modules, so relative imports inside the reference file resolve to its real siblings and
    nothing named ``timm``/``torchtune`` is put in ``sys.modules``.
    """
    spec = importlib.util.find_spec(package)  # a top-level spec: does not run __init__
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{package} is not installed (pip install --no-deps {package})")
    root = Path(next(iter(spec.submodule_search_locations)))
    alias = f"_posenc_ref_{package}"
    name, where = alias, root
    for part in ("", *module[:-1]):
        if part:
            name, where = f"{name}.{part}", where / part
        if name not in sys.modules:
            parent = ModuleType(name)
            parent.__path__ = [str(where)]
            sys.modules[name] = parent
    try:
        return importlib.import_module(f"{name}.{module[-1]}")
    except (ImportError, RuntimeError, OSError) as exc:  # e.g. a torchvision built for another torch
        pytest.skip(f"cannot load {package}.{'.'.join(module)}: {exc!r}")


@pytest.fixture(scope="module")
def sincos() -> ModuleType:
    return _reference("timm", "layers", "pos_embed_sincos")


@pytest.fixture(scope="module")
def pos_embed() -> ModuleType:
    return _reference("timm", "layers", "pos_embed")


@pytest.fixture(scope="module")
def torchtune_pe() -> ModuleType:
    return _reference("torchtune", "modules", "position_embeddings")


def _eva_rotate(sincos: ModuleType, x: torch.Tensor, emb: torch.Tensor, npt: int, half: bool) -> torch.Tensor:
    """EVA's attention: prefix tokens as they are, the patches through ``apply_rot_embed_cat``."""
    return torch.cat((x[:, :, :npt], sincos.apply_rot_embed_cat(x[:, :, npt:], emb, half=half)), dim=2)


def _coords(
    grid: tuple[int, int], npt: int, *, xy: bool, ref_grid: tuple[int, int] | None = None
) -> torch.Tensor:
    """posenc's coordinates of timm's grid: rows (ij) or columns (xy) first, prefix rows at 0."""
    patches = grid_positions(grid, ref_grid=ref_grid)
    patches = patches.flip(-1) if xy else patches
    return torch.cat((torch.zeros(npt, 2, dtype=patches.dtype), patches))


# --- timm RoPE ------------------------------------------------------------------------------


@pytest.mark.parametrize("rotate_half", [False, True])
@pytest.mark.parametrize("grid_indexing", ["ij", "xy"])
@pytest.mark.parametrize(("head_dim", "npt", "base"), [(32, 1, 10000.0), (16, 0, 100.0), (64, 5, 10000.0)])
def test_timm_rotary_embedding_cat_as_eva(sincos, rotate_half, grid_indexing, head_dim, npt, base, device):
    # EVA-02: RotaryEmbeddingCat(head_dim, in_pixels=False) on the patch grid, class/register tokens
    # unrotated; interleaved pairs unless rotate_half.
    grid = (3, 5)
    timm_rope = sincos.RotaryEmbeddingCat(
        head_dim,
        in_pixels=False,
        temperature=base,
        feat_shape=list(grid),
        grid_indexing=grid_indexing,
        rotate_half=rotate_half,
    ).to(device)
    layout = "half" if rotate_half else "interleaved"
    order = (1, 0) if grid_indexing == "xy" else None  # columns first
    rope = posenc.AxialRoPE(
        head_dim, base=base, layout=layout, axis_order=order, grid_size=grid, num_prefix_tokens=npt
    ).to(device)
    q, k = torch.randn(2, 3, npt + 15, head_dim).to(device), torch.randn(2, 1, npt + 15, head_dim).to(device)
    emb = timm_rope.get_embed()
    want = _eva_rotate(sincos, q, emb, npt, rotate_half), _eva_rotate(sincos, k, emb, npt, rotate_half)
    got = rope(q, k)  # the default positions: grid_size with its prefix tokens
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
    if grid_indexing == "xy":  # the same as the default axis order on (column, row) coordinates
        coords = _coords(grid, npt, xy=True).to(device)
        plain = posenc.AxialRoPE(head_dim, base=base, layout=layout).to(device)
        torch.testing.assert_close(plain(q, k, coords, coords), want, atol=ATOL, rtol=0)


@pytest.mark.parametrize("grid_indexing", ["ij", "xy"])
@pytest.mark.parametrize(("grid", "ref"), [((6, 10), (3, 5)), ((4, 4), (7, 3))])
def test_timm_reference_grid_rescaling(sincos, grid_indexing, grid, ref):
    # EVA at another resolution: coordinates scaled so the grid spans ref_feat_shape
    # (timm builds the table for any shape when feat_shape is None).
    head_dim, npt = 32, 1
    timm_rope = sincos.RotaryEmbeddingCat(
        head_dim, in_pixels=False, ref_feat_shape=list(ref), grid_indexing=grid_indexing
    )
    emb = timm_rope.get_embed(list(grid))
    rope = posenc.AxialRoPE(
        head_dim, layout="interleaved", grid_size=grid, num_prefix_tokens=npt, ref_grid=ref
    )
    x = torch.randn(1, 2, npt + grid[0] * grid[1], head_dim)
    want = _eva_rotate(sincos, x, emb, npt, False)
    if grid_indexing == "ij":
        got = rope.rotate(x)
    else:
        got = rope.rotate(x, _coords(grid, npt, xy=True, ref_grid=ref))
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)


@pytest.mark.parametrize("max_res", [10, 32])
def test_timm_pixel_bands(sincos, max_res):
    # timm in_pixels=True with linear_bands=True: pi * linspace(1, max_res / 2) on [-1, 1] coordinates,
    # which is posenc's freqs="pixel" with max_freq=max_res.
    head_dim, grid = 24, (4, 7)
    timm_rope = sincos.RotaryEmbeddingCat(
        head_dim, in_pixels=True, linear_bands=True, max_res=max_res, feat_shape=list(grid)
    )
    rope = posenc.AxialRoPE(head_dim, freqs="pixel", max_freq=max_res, layout="interleaved", grid_size=grid)
    x = torch.randn(2, 2, 28, head_dim)
    want = sincos.apply_rot_embed_cat(x, timm_rope.get_embed())
    torch.testing.assert_close(rope.rotate(x), want, atol=ATOL_PIXEL, rtol=0)


@pytest.mark.parametrize("rotate_half", [False, True])
def test_timm_build_rotary_pos_embed_with_grid_offset(sincos, rotate_half):
    # The functional form, and timm's grid_offset (EVA's rope_grid_offset): posenc takes the shifted
    # float coordinates as positions.
    head_dim, grid, offset = 16, (3, 4), 0.5
    sin, cos = sincos.build_rotary_pos_embed(
        list(grid), dim=head_dim, in_pixels=False, grid_offset=offset, rotate_half=rotate_half
    )  # each (h*w, head_dim)
    coords = grid_positions(grid).double() + offset
    inv_freq, axis = axial_frequencies((head_dim // 2, head_dim // 2))
    c, s = rope_cos_sin(coords, inv_freq, dtype=torch.float32, axis=axis)  # (h*w, head_dim / 2)
    spread = (lambda t: torch.cat((t, t), -1)) if rotate_half else (lambda t: t.repeat_interleave(2, -1))
    torch.testing.assert_close(spread(c), cos, atol=1e-6, rtol=0)
    torch.testing.assert_close(spread(s), sin, atol=1e-6, rtol=0)
    rope = posenc.AxialRoPE(head_dim, layout="half" if rotate_half else "interleaved")
    x = torch.randn(1, 2, 12, head_dim)
    want = sincos.apply_rot_embed(x, sin, cos, half=rotate_half)
    torch.testing.assert_close(rope.rotate(x, coords.float()), want, atol=ATOL, rtol=0)


# --- timm 2D sin/cos --------------------------------------------------------------------------


@pytest.mark.parametrize(("order", "interleave"), [("timm", False), ("timm_interleaved", True)])
@pytest.mark.parametrize(("grid", "dim", "base", "npt"), [((3, 5), 16, 10000.0, 0), ((7, 4), 64, 100.0, 1)])
def test_timm_sincos2d_orders(sincos, order, interleave, grid, dim, base, npt):
    want = sincos.build_sincos2d_pos_embed(
        list(grid), dim=dim, temperature=base, interleave_sin_cos=interleave
    )
    pe = posenc.Sinusoidal2D(dim, grid_size=grid, base=base, num_prefix_tokens=npt, order=order)
    table = pe.table()
    torch.testing.assert_close(table[npt:], want, atol=ATOL, rtol=0)
    assert torch.equal(table[:npt], torch.zeros(npt, dim))  # prefix tokens: no position
    x = torch.randn(2, npt + grid[0] * grid[1], dim)
    torch.testing.assert_close(pe(x)[:, npt:], x[:, npt:] + want, atol=ATOL, rtol=0)
    image = torch.randn(2, *grid, dim)  # (b, h, w, d) patches: the same table, row-major
    torch.testing.assert_close(pe(image), image + want.view(*grid, dim), atol=ATOL, rtol=0)


# --- timm table resampling --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "npt", "mode", "antialias"),
    [
        ((7, 7), (10, 12), 1, "bicubic", False),
        ((7, 7), (10, 12), 1, "bicubic", True),  # antialias has no effect when enlarging
        ((12, 10), (5, 7), 0, "bicubic", True),  # shrinking: the low-pass filter matters
        ((12, 10), (5, 7), 4, "bicubic", False),
        ((6, 8), (4, 11), 2, "bilinear", True),
        ((6, 8), (9, 3), 1, "nearest", False),
    ],
)
def test_timm_resample_abs_pos_embed(pos_embed, old, new, npt, mode, antialias):
    d = 24
    pe = posenc.Learned2D(d, old, num_prefix_tokens=npt, mode=mode, antialias=antialias)
    posemb = pe.weight.detach()[None]  # timm's (1, p + h*w, d)
    want = pos_embed.resample_abs_pos_embed(
        posemb, list(new), old_size=list(old), num_prefix_tokens=npt, interpolation=mode, antialias=antialias
    )[0]
    torch.testing.assert_close(pe.table(new), want, atol=ATOL_RESAMPLE, rtol=0)
    x = torch.randn(2, npt + new[0] * new[1], d)
    torch.testing.assert_close(pe(x, grid=new), x + want, atol=ATOL_RESAMPLE, rtol=0)
    pe.resize(new)  # fine-tuning at the new resolution keeps exactly timm's resampled table
    torch.testing.assert_close(pe.weight.detach(), want, atol=ATOL_RESAMPLE, rtol=0)


@pytest.mark.parametrize("antialias", [False, True])
def test_timm_resample_abs_pos_embed_nhwc(pos_embed, antialias):
    # NHWC tables (e.g. timm's dynamic-size ViTs): (1, h, w, d) resampled, added to (b, H, W, d) patches
    d, old, new = 8, (9, 6), (4, 5)
    pe = posenc.Learned2D(d, old, antialias=antialias)
    want = pos_embed.resample_abs_pos_embed_nhwc(
        pe.weight.detach().view(1, *old, d), list(new), antialias=antialias
    )
    image = torch.randn(3, *new, d)
    torch.testing.assert_close(pe(image), image + want, atol=ATOL_RESAMPLE, rtol=0)


# --- torchtune vision RoPE --------------------------------------------------------------------


@pytest.mark.parametrize("append_cls", [True, False])
@pytest.mark.parametrize(("head_dim", "side", "tiles", "base"), [(32, 4, 1, 10000), (16, 3, 2, 500)])
def test_torchtune_vision_rope(torchtune_pe, append_cls, head_dim, side, tiles, base, device):
    # Llama 3.2 / Llama 4 vision tower: dim = head_dim // 2 per axis, interleaved pairs, every tile
    # rotated the same way: patch (row, col) at (col + 1, row + 1), the class token (first, or last
    # with append_cls_token) at (0, 0), unrotated.
    tt = torchtune_pe.VisionRotaryPositionalEmbeddings(
        patch_size=14,
        tile_size=14 * side,
        max_num_tiles=tiles,
        dim=head_dim // 2,
        base=base,
        append_cls_token=append_cls,
    ).to(device)
    rope = posenc.AxialRoPE(
        head_dim,
        base=float(base),
        layout="interleaved",
        axis_order=(1, 0),
        first_index=1,
        grid_size=(side, side),
        num_prefix_tokens=int(not append_cls),
        num_suffix_tokens=int(append_cls),
    ).to(device)
    s = tiles * (side * side + 1)
    x = torch.randn(2, s, 3, head_dim).to(device)  # torchtune's (b, s, n_h, h_d)
    want = tt(x)
    coords = rope.grid_positions().repeat(tiles, 1)  # (s, 2): one tile's default positions per tile
    got = rope.rotate(x.transpose(1, 2), coords).transpose(1, 2)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
    if tiles == 1:  # the default positions are the tile's
        torch.testing.assert_close(rope.rotate(x.transpose(1, 2)).transpose(1, 2), want, atol=ATOL, rtol=0)


# --- torchtune text RoPE ----------------------------------------------------------------------


@pytest.mark.parametrize(("head_dim", "base"), [(64, 10000), (16, 500000)])
def test_torchtune_text_rope(torchtune_pe, head_dim, base, device):
    # Llama 3's in torchtune: interleaved pairs of (b, s, n_h, h_d), its default positions 0..s-1 or input_pos
    # per row (a packed or cached batch)
    tt = torchtune_pe.RotaryPositionalEmbeddings(dim=head_dim, max_seq_len=64, base=base).to(device)
    rope = posenc.RoPE(head_dim, base=float(base), layout="interleaved").to(device)
    x = torch.randn(2, 9, 3, head_dim).to(device)
    got = rope.rotate(x.transpose(1, 2)).transpose(1, 2)
    torch.testing.assert_close(got, tt(x), atol=ATOL, rtol=0)
    input_pos = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3, 4], [30, 31, 32, 33, 34, 35, 36, 37, 38]]).to(device)
    got = rope.rotate(x.transpose(1, 2), input_pos).transpose(1, 2)
    torch.testing.assert_close(got, tt(x, input_pos=input_pos), atol=ATOL, rtol=0)
