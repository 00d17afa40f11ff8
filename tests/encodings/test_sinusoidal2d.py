"""Sinusoidal2D, the fixed sin/cos encoding of patch grids: MAE's 2D table, timm's orders, diffusers' 3D
(video) table, prefix tokens, caches and errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import posenc
from posenc.encodings.sinusoidal2d import Sinusoidal2D
from posenc.functional.sinusoidal import sinusoidal_2d_table, sinusoidal_shift_map

# A float64 table cast once to float32 is within one float32 rounding of the exact value
# (|PE| <= 1, so half an ulp is <= 6e-8); the two float64 computations differ far below that.
FLOAT32_CAST = {"atol": 1e-7, "rtol": 0.0}
# float64 against float64 formulas written differently: angles up to 1e5 rad carry ~1e-11 error.
FLOAT64_ANGLES = {"atol": 1e-10, "rtol": 0.0}


def reference_mae_2d(dim: int, h: int, w: int, cls_token: bool = False) -> np.ndarray:
    """MAE's get_2d_sincos_pos_embed (He et al., 2022), re-written in numpy from the seed article."""

    def one_axis(embed_dim: int, pos: np.ndarray) -> np.ndarray:
        omega = np.arange(embed_dim // 2, dtype=np.float64) / (embed_dim / 2.0)
        omega = 1.0 / 10000**omega
        out = np.einsum("m,d->md", pos.reshape(-1), omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)

    grid = np.meshgrid(np.arange(w, dtype=np.float64), np.arange(h, dtype=np.float64))  # (x, y), each (h, w)
    emb = np.concatenate([one_axis(dim // 2, grid[0]), one_axis(dim // 2, grid[1])], axis=1)
    if cls_token:
        emb = np.concatenate([np.zeros((1, dim)), emb], axis=0)
    return emb


# ----------------------------------------------------------------------------- 2D


@pytest.mark.parametrize(("h", "w"), [(4, 4), (3, 5)])
def test_2d_matches_mae_formula(h, w):
    pe = Sinusoidal2D(32, grid_size=(h, w))
    expected = torch.from_numpy(reference_mae_2d(32, h, w)).float()
    torch.testing.assert_close(pe.table(), expected, **FLOAT32_CAST)
    torch.testing.assert_close(sinusoidal_2d_table(h, w, 32).float(), expected, **FLOAT32_CAST)
    x = torch.randn(2, h * w, 32)
    torch.testing.assert_close(pe(x), x + expected, **FLOAT32_CAST)
    # the (b, h, w, d) form gives the same encodings, without needing grid_size
    grid_x = x.view(2, h, w, 32)
    torch.testing.assert_close(Sinusoidal2D(32)(grid_x), (x + expected).view(2, h, w, 32), **FLOAT32_CAST)


def test_2d_cache_keeps_the_configured_grid():
    pe = Sinusoidal2D(16, grid_size=(2, 3))
    cached = pe._table
    other = torch.zeros(1, 4, 5, 16)
    torch.testing.assert_close(pe(other).view(20, 16), pe.table((4, 5)), atol=0, rtol=0)
    torch.testing.assert_close(
        pe.table((4, 5)), torch.from_numpy(reference_mae_2d(16, 4, 5)).float(), **FLOAT32_CAST
    )
    pe(torch.zeros(1, 6, 16))
    assert pe._table is cached  # not rebuilt by the other grid, nor per call


def test_2d_parity_with_hf_vit_mae_position_embeddings():
    from transformers import ViTMAEConfig
    from transformers.models.vit_mae.modeling_vit_mae import ViTMAEEmbeddings

    config = ViTMAEConfig(hidden_size=32, image_size=16, patch_size=4, num_channels=3)
    emb = ViTMAEEmbeddings(config)
    emb.initialize_weights()
    expected = emb.position_embeddings.detach()[0]  # (1 + 16, 32), class token row first
    pe = Sinusoidal2D(32, grid_size=4, num_prefix_tokens=1)
    torch.testing.assert_close(pe.table(), expected, **FLOAT32_CAST)


def test_2d_prefix_tokens_get_no_position_and_visible_patch_positions():
    pe = Sinusoidal2D(16, grid_size=(3, 4), num_prefix_tokens=2)
    body = torch.from_numpy(reference_mae_2d(16, 3, 4)).float()
    x = torch.randn(2, 2 + 12, 16)
    out = pe(x)
    torch.testing.assert_close(out[:, :2], x[:, :2], atol=0, rtol=0)
    torch.testing.assert_close(out[:, 2:], x[:, 2:] + body, **FLOAT32_CAST)
    # MAE keeps a random subset of patches: positions are their row-major indices
    keep = torch.tensor([[0, 5, 11], [3, 4, 7]])
    x_vis = torch.randn(2, 2 + 3, 16)
    out = pe(x_vis, keep)
    torch.testing.assert_close(out[:, :2], x_vis[:, :2], atol=0, rtol=0)
    torch.testing.assert_close(out[:, 2:], x_vis[:, 2:] + body[keep], **FLOAT32_CAST)


def test_2d_dtype_state_and_build():
    pe = posenc.build("sinusoidal2d(grid_size=(2, 2))", d_model=16, max_len=99).to(torch.bfloat16)
    assert isinstance(pe, Sinusoidal2D) and pe._table.dtype == torch.float32
    assert pe.state_dict() == {}
    x = torch.randn(1, 4, 16, dtype=torch.bfloat16)
    assert pe(x).dtype == torch.bfloat16
    x64 = torch.zeros(1, 4, 16, dtype=torch.float64)
    torch.testing.assert_close(pe(x64)[0], torch.from_numpy(reference_mae_2d(16, 2, 2)), **FLOAT64_ANGLES)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"d_model": 18}, ValueError, r"divisible by 4.*18"),
        ({"d_model": 0}, ValueError, r"d_model must be >= 4, got 0"),
        ({"d_model": 16, "grid_size": (2, 0)}, ValueError, r"grid_size must be positive, got \(2, 0\)"),
        (
            {"d_model": 16, "grid_size": (2, 3, 4, 5)},
            TypeError,
            r"grid_size must be an int or a pair .* or a triple",
        ),
        ({"d_model": 16, "grid_size": 2.5}, TypeError, r"grid_size .* got 2.5"),
        ({"d_model": 16, "num_prefix_tokens": -1}, ValueError, r"num_prefix_tokens must be >= 0, got -1"),
        ({"d_model": 16, "base": 0}, ValueError, r"base .* got 0"),
    ],
)
def test_2d_constructor_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        Sinusoidal2D(**kwargs)


def test_2d_call_errors():
    pe = Sinusoidal2D(16, grid_size=(3, 4), num_prefix_tokens=1)
    with pytest.raises(
        ValueError, match=r"x has 12 tokens, expected num_prefix_tokens \+ h\*w = 1 \+ 3\*4 = 13"
    ):
        pe(torch.zeros(1, 12, 16))
    with pytest.raises(ValueError, match=r"last dimension 8, expected d_model=16"):
        pe(torch.zeros(1, 13, 8))
    with pytest.raises(ValueError, match=r"patch indices below h\*w = 12, got maximum 12"):
        pe(torch.zeros(1, 3, 16), torch.tensor([0, 12]))
    with pytest.raises(ValueError, match=r"only accepted with flat"):
        pe(torch.zeros(1, 3, 4, 16), torch.arange(12))
    with pytest.raises(ValueError, match=r"3-axis grid .* grid_size=\(3, 4\) has 2 axes"):
        pe(torch.zeros(1, 1, 3, 4, 16))
    with pytest.raises(ValueError, match=r"rank 6"):
        pe(torch.zeros(1, 1, 1, 3, 4, 16))
    with pytest.raises(ValueError, match=r"needs grid_size"):
        Sinusoidal2D(16)(torch.zeros(1, 12, 16))


def _timm_sincos2d(h: int, w: int, dim: int, interleave: bool) -> torch.Tensor:
    # timm's build_sincos2d_pos_embed, written from its description: bands
    # 1 / 10000 ** (i / (dim / 4)), grid (row, col) per patch, sin/cos stacked outside
    # ([sin h | sin w | cos h | cos w]) or inside each axis (interleave_sin_cos=True:
    # [sin h | cos h | sin w | cos w])
    n = dim // 4
    bands = 1.0 / 10000.0 ** (torch.arange(n, dtype=torch.float64) / n)
    rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    pos = torch.stack((rows.flatten(), cols.flatten()), 1).double()[..., None] * bands  # (hw, 2, n)
    return torch.stack((pos.sin(), pos.cos()), dim=2 if interleave else 1).flatten(1)


@pytest.mark.parametrize(("order", "interleave"), [("timm", False), ("timm_interleaved", True)])
def test_2d_timm_orders(order, interleave):
    pe = posenc.Sinusoidal2D(16, (3, 5), order=order)
    want = _timm_sincos2d(3, 5, 16, interleave).float()
    torch.testing.assert_close(pe.table(), want, atol=1e-7, rtol=0)
    x = torch.randn(2, 3, 5, 16)
    torch.testing.assert_close(pe(x), x + want.view(3, 5, 16))
    # the same numbers as MAE's order, permuted: [sin w|cos w|sin h|cos h] vs [sin h|sin w|cos h|cos w]
    mae = posenc.Sinusoidal2D(16, (3, 5)).table()
    if order == "timm":
        torch.testing.assert_close(pe.table(), mae[:, [8, 9, 10, 11, 0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 6, 7]])
    with pytest.raises(ValueError, match="order must be one of"):
        posenc.Sinusoidal2D(16, order="moco")


# ----------------------------------------------------------------------------- 3D (video)


def _diffusers_3d(t: int, h: int, w: int, dim: int) -> torch.Tensor:
    """diffusers' ``get_3d_sincos_pos_embed`` (CogVideoX) as a ``(t*h*w, dim)`` float64 table."""
    embeddings = pytest.importorskip("diffusers.models.embeddings")
    # diffusers takes the spatial size as (width, height) and returns (t, h*w, dim)
    table = embeddings.get_3d_sincos_pos_embed(dim, (w, h), t, output_type="pt")
    return table.reshape(t * h * w, dim).double()


@pytest.mark.parametrize(("t", "h", "w", "dim"), [(3, 4, 5, 64), (1, 2, 7, 48), (5, 1, 1, 16), (2, 3, 3, 96)])
def test_3d_table_equals_diffusers(t, h, w, dim):
    from posenc.functional.sinusoidal import sinusoidal_3d_table

    want = _diffusers_3d(t, h, w, dim)
    torch.testing.assert_close(sinusoidal_3d_table(t, h, w, dim), want, **FLOAT64_ANGLES)
    pe = Sinusoidal2D(dim, grid_size=(t, h, w), num_prefix_tokens=2)
    table = pe.table()
    assert table.dtype == torch.float32 and table.shape == (2 + t * h * w, dim)
    torch.testing.assert_close(table[2:], want.float(), **FLOAT32_CAST)
    assert not table[:2].any()  # prefix tokens get no position
    x = torch.randn(2, 2 + t * h * w, dim)
    torch.testing.assert_close(pe(x), x + table)
    video = torch.randn(2, t, h, w, dim, dtype=torch.float64)  # the grid from the shape, float64 kept
    out = Sinusoidal2D(dim)(video)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, video + want.view(t, h, w, dim), **FLOAT64_ANGLES)


def test_3d_blocks_depend_on_their_axis_and_shift_linearly():
    from posenc.functional.sinusoidal import sinusoidal_3d_table, sinusoidal_3d_widths

    t, h, w, dim = 6, 5, 7, 32
    table = sinusoidal_3d_table(t, h, w, dim).view(t, h, w, dim)
    widths = sinusoidal_3d_widths(dim)
    assert widths == (8, 12, 12) and sum(widths) == dim
    time, col, row = table.split(widths, dim=-1)
    # each block depends only on its axis: constant along the two others, not along its own
    for block, axis in ((time, 0), (row, 1), (col, 2)):
        first = block.narrow(axis, 0, 1)
        others = [a for a in range(3) if a != axis]
        one = block
        for a in others:
            one = one.narrow(a, 0, 1)
        torch.testing.assert_close(block, one.expand_as(block), atol=0.0, rtol=0.0)
        assert (block - first).abs().amax() > 0.5
    # a shift by k along one axis is that block's fixed rotation (sinusoidal_shift_map); the
    # other blocks stay as they are
    for block, axis, width in ((time, 0, 8), (row, 1, 12), (col, 2, 12)):
        for k in (1, 3):
            n = block.shape[axis] - k
            shifted, base_rows = block.narrow(axis, k, n), block.narrow(axis, 0, n)
            m = sinusoidal_shift_map(k, width, layout="concat")
            torch.testing.assert_close(shifted, base_rows @ m, **FLOAT64_ANGLES)
            assert (shifted - base_rows).abs().amax() > 0.1  # the map is not the identity
    moved = sinusoidal_3d_table(t, h, w, dim).view(t, h, w, dim)[1:]
    torch.testing.assert_close(moved[..., 8:], table[:-1, ..., 8:], atol=0.0, rtol=0.0)


def test_3d_flat_input_prefix_positions_and_registry():
    t, h, w, dim = 2, 3, 4, 32
    pe = posenc.build({"name": "sinusoidal2d", "grid_size": [t, h, w], "num_prefix_tokens": 1}, d_model=dim)
    assert isinstance(pe, Sinusoidal2D) and pe.grid_size == (t, h, w)
    assert pe.state_dict() == {} and "grid_size=(2, 3, 4)" in repr(pe)
    table = pe.table()
    keep = torch.tensor([[0, 5, 23], [7, 12, 13]])  # MAE-style visible patches of each row
    x = torch.randn(2, 1 + 3, dim)
    out = pe(x, keep)
    torch.testing.assert_close(out[:, 0], x[:, 0])
    torch.testing.assert_close(out[:, 1:], x[:, 1:] + table[1:][keep])
    # bfloat16 modules keep a float32 table; to_empty + reset_caches rebuilds it
    pe = pe.to(torch.bfloat16)
    assert pe._table.dtype == torch.float32
    pe.to_empty(device="cpu")
    pe.reset_caches()
    torch.testing.assert_close(pe.table(), table, atol=0.0, rtol=0.0)
    # another grid through table(): computed, the cache keeps the constructor's grid
    assert pe.table((3, 3, 4)).shape == (1 + 36, dim) and pe.table().shape == (1 + 24, dim)


def test_3d_errors():
    with pytest.raises(
        ValueError, match=r"grid_size=\(2, 3, 4\) is a video grid .* multiple of 16.*d_model=24"
    ):
        Sinusoidal2D(24, grid_size=(2, 3, 4))
    with pytest.raises(ValueError, match=r"only order='mae' has a 3D form, got order='timm'"):
        Sinusoidal2D(32, grid_size=(2, 3, 4), order="timm")
    with pytest.raises(ValueError, match=r"grid_size must be positive, got \(2, 0, 4\)"):
        Sinusoidal2D(32, grid_size=(2, 0, 4))
    with pytest.raises(TypeError, match=r"grid_size .* got \(2, 3.0, 4\)"):
        Sinusoidal2D(32, grid_size=(2, 3.0, 4))
    with pytest.raises(ValueError, match=r"x.shape\[1:4\]=\(1, 2, 2\) is a video grid .* d_model=8"):
        Sinusoidal2D(8)(torch.zeros(1, 1, 2, 2, 8))
    pe = Sinusoidal2D(32, grid_size=(2, 3, 4), num_prefix_tokens=1)
    with pytest.raises(ValueError, match=r"2-axis grid .* grid_size=\(2, 3, 4\) has 3 axes"):
        pe(torch.zeros(1, 3, 4, 32))
    with pytest.raises(ValueError, match=r"expected num_prefix_tokens \+ t\*h\*w = 1 \+ 2\*3\*4 = 25"):
        pe(torch.zeros(1, 24, 32))
    with pytest.raises(ValueError, match=r"patch indices below t\*h\*w = 24, got maximum 24"):
        pe(torch.zeros(1, 3, 32), torch.tensor([0, 24]))
    from posenc.functional.sinusoidal import sinusoidal_3d_table

    with pytest.raises(ValueError, match=r"dim must be a positive multiple of 16.*got 40"):
        sinusoidal_3d_table(1, 2, 2, 40)
