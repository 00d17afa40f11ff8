"""Learned2D: ViT's interpolate_pos_encoding parity, timm-style antialias, identity at its own
size, resize, the no-interpolation limit, errors."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
import torch.nn.functional as F

import posenc
from posenc.functional import resample_grid_table

logging.getLogger("transformers").setLevel(logging.ERROR)


def test_parity_with_hf_vit_interpolate_pos_encoding(device):
    transformers = pytest.importorskip("transformers")
    from transformers.models.vit import modeling_vit as hf

    cfg = transformers.ViTConfig(hidden_size=16, image_size=32, patch_size=8, num_channels=3)
    emb = hf.ViTEmbeddings(cfg).eval()
    torch.manual_seed(0)
    with torch.no_grad():
        emb.position_embeddings.normal_()
    ours = posenc.Learned2D(16, 4, num_prefix_tokens=1)
    ours.load_state_dict({"weight": emb.position_embeddings[0]})
    emb.to(device), ours.to(device)
    for height, width in ((48, 64), (16, 24), (32, 32)):
        tokens = torch.zeros(1, 1 + (height // 8) * (width // 8), 16, device=device)
        want = emb.interpolate_pos_encoding(tokens, height, width)
        got = ours(tokens, grid=(height // 8, width // 8))
        torch.testing.assert_close(got, want, atol=1e-6, rtol=0)


def test_antialias_matches_interpolate_and_own_size_is_identity():
    torch.manual_seed(1)
    pe = posenc.Learned2D(8, (6, 6), num_prefix_tokens=2, antialias=True)
    table = pe.weight.detach()
    assert pe.table((6, 6)) is pe.weight  # interpolating a table to its own size: identity
    assert torch.equal(resample_grid_table(table, (6, 6), (6, 6), num_prefix_tokens=2), table)
    small = pe.table((3, 4)).detach()
    grid = table[2:].reshape(1, 6, 6, 8).permute(0, 3, 1, 2)
    want = F.interpolate(grid, size=(3, 4), mode="bicubic", align_corners=False, antialias=True)
    torch.testing.assert_close(small[2:], want.permute(0, 2, 3, 1).reshape(12, 8))
    torch.testing.assert_close(small[:2], table[:2])  # prefix rows unchanged
    no_aa = posenc.Learned2D(8, (6, 6), num_prefix_tokens=2)
    no_aa.load_state_dict(pe.state_dict())
    assert not torch.allclose(no_aa.table((3, 4)), small)


def test_grid_inputs_flat_inputs_and_visible_patches():
    torch.manual_seed(2)
    pe = posenc.build("learned2d(grid_size=(4, 5), num_prefix_tokens=1)", d_model=8)
    x = torch.randn(2, 3, 4, 8)  # (b, h, w, d) patches at another size
    out = pe(x)
    torch.testing.assert_close(out, x + pe.table((3, 4))[1:].view(3, 4, 8))
    flat = torch.randn(2, 1 + 20, 8)
    torch.testing.assert_close(pe(flat), flat + pe.weight)
    square = torch.randn(2, 1 + 9, 8)  # 9 patches: a 3x3 grid
    torch.testing.assert_close(pe(square), square + pe.table((3, 3)))
    visible = torch.tensor([[0, 7, 19], [3, 4, 5]])
    part = torch.randn(2, 1 + 3, 8)
    want = part + torch.cat((pe.weight[:1].expand(2, 1, 8), pe.weight[1 + visible]), 1)
    torch.testing.assert_close(pe(part, visible), want)
    out.sum().backward()
    assert pe.weight.grad is not None and pe.weight.grad.abs().sum() > 0


def test_resize_makes_the_grid_permanent():
    torch.manual_seed(3)
    pe = posenc.Learned2D(8, 4, num_prefix_tokens=1)
    want = pe.table((6, 8)).detach().clone()
    pe.resize((6, 8))
    assert pe.grid_size == (6, 8) and pe.weight.shape == (1 + 48, 8)
    torch.testing.assert_close(pe.weight.detach(), want)
    assert pe.weight.requires_grad


def test_no_interpolation_crops_smaller_and_refuses_larger():
    pe = posenc.Learned2D(8, (4, 4), interpolate=False)
    torch.testing.assert_close(pe.table((2, 3)), pe.weight.view(4, 4, 8)[:2, :3].reshape(6, 8))
    with pytest.raises(ValueError, match=r"grid \(5, 4\) is larger than the table's grid_size \(4, 4\)"):
        pe(torch.randn(1, 5, 4, 8))


def test_state_dict_dtype_meta():
    pe = posenc.Learned2D(8, 3, num_prefix_tokens=1)
    assert list(pe.state_dict()) == ["weight"]
    meta = posenc.Learned2D(8, 3, num_prefix_tokens=1, device="meta").to_empty(device="cpu")
    meta.load_state_dict(pe.state_dict())
    x = torch.randn(1, 1 + 16, 8, dtype=torch.bfloat16)
    half = copy.deepcopy(pe).to(torch.bfloat16)
    assert half(x).dtype == torch.bfloat16
    torch.testing.assert_close(meta(x.float()), pe(x.float()))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"grid_size": (4, 0)}, ValueError, r"grid_size must be positive, got \(4, 0\)"),
        ({"grid_size": "4x4"}, TypeError, "grid_size must be an int or a pair"),
        ({"grid_size": 4, "mode": "cubic"}, ValueError, "mode must be one of"),
        ({"grid_size": 4, "mode": "nearest", "antialias": True}, ValueError, "antialias=True needs"),
        ({"grid_size": 4, "interpolate": 1}, TypeError, "interpolate must be a bool"),
    ],
)
def test_constructor_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        posenc.Learned2D(8, **kwargs)


def test_call_errors():
    pe = posenc.Learned2D(8, 4, num_prefix_tokens=1)
    with pytest.raises(ValueError, match="not the table's grid_size"):
        pe(torch.randn(1, 1 + 10, 8))
    with pytest.raises(ValueError, match="expected d_model=8"):
        pe(torch.randn(1, 4, 4, 6))
    with pytest.raises(ValueError, match="below h\\*w = 16"):
        pe(torch.randn(1, 1 + 2, 8), torch.tensor([3, 16]))
