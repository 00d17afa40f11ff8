"""Learned2D: ViT's and DINOv2's interpolate_pos_encoding parity (DINOv2's interpolate_offset),
timm-style antialias, identity at its own size, resize, the no-interpolation limit, errors."""

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


def dinov2_authors_interpolate(table, grid, new_grid, *, prefix, offset, antialias=False):
    """The DINOv2 authors' resampling, written here from their formula (facebookresearch/dinov2,
    dinov2/models/vision_transformer.py, DinoVisionTransformer.interpolate_pos_encoding): the
    grid is resized in float32 by scale factors ``(new + offset) / old`` when ``interpolate_offset``
    is set, else to the size; bicubic; the prefix rows kept. Generalised to a non-square table."""
    (h, w), (nh, nw) = grid, new_grid
    if (h, w) == (nh, nw):
        return table
    image = table[prefix:].float().reshape(1, h, w, -1).permute(0, 3, 1, 2)
    how = {"scale_factor": ((nh + offset) / h, (nw + offset) / w)} if offset else {"size": (nh, nw)}
    image = F.interpolate(image, mode="bicubic", antialias=antialias, **how)
    assert image.shape[-2:] == (nh, nw)
    return torch.cat((table[:prefix], image.permute(0, 2, 3, 1).reshape(nh * nw, -1).to(table.dtype)))


@pytest.mark.parametrize(("grid", "prefix"), [((4, 4), 1), ((6, 4), 2)])
@pytest.mark.parametrize("antialias", [False, True])
def test_interpolate_offset_matches_the_dinov2_authors_code(grid, prefix, antialias):
    torch.manual_seed(4)
    pe = posenc.Learned2D(8, grid, num_prefix_tokens=prefix, interpolate_offset=0.1, antialias=antialias)
    table = pe.weight.detach()
    for new in ((7, 9), (2, 3), (3, 5), (9, 4), grid):  # up, down, non-square, mixed, own size
        want = dinov2_authors_interpolate(table, grid, new, prefix=prefix, offset=0.1, antialias=antialias)
        x = torch.randn(2, prefix + new[0] * new[1], 8)
        torch.testing.assert_close(pe(x, grid=new), x + want, atol=1e-6, rtol=0)
        got = resample_grid_table(
            table, grid, new, num_prefix_tokens=prefix, antialias=antialias, interpolate_offset=0.1
        )
        torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
        if new != grid:  # the offset moves the sample points: not the same as resizing to the size
            plain = dinov2_authors_interpolate(table, grid, new, prefix=prefix, offset=0, antialias=antialias)
            assert (want - plain).abs().max() > 1e-4
    pe.resize((5, 7))
    torch.testing.assert_close(
        pe.weight.detach(),
        dinov2_authors_interpolate(table, grid, (5, 7), prefix=prefix, offset=0.1, antialias=antialias),
    )


def test_offset_zero_matches_hf_dinov2_interpolate_pos_encoding():
    transformers = pytest.importorskip("transformers")
    from transformers.models.dinov2 import modeling_dinov2 as hf

    cfg = transformers.Dinov2Config(
        hidden_size=16,
        image_size=32,
        patch_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
    )
    emb = hf.Dinov2Embeddings(cfg).eval()
    torch.manual_seed(5)
    with torch.no_grad():
        emb.position_embeddings.normal_()
    ours = posenc.Learned2D(16, 4, num_prefix_tokens=1)
    ours.load_state_dict({"weight": emb.position_embeddings[0]})
    table = ours.weight.detach()
    for height, width in ((48, 64), (16, 24), (40, 16), (32, 32)):
        new = (height // 8, width // 8)
        want = emb.interpolate_pos_encoding(torch.zeros(1, 1 + new[0] * new[1], 16), height, width)[0]
        torch.testing.assert_close(ours.table(new), want, atol=1e-6, rtol=0)
        reference = dinov2_authors_interpolate(table, (4, 4), new, prefix=1, offset=0)
        torch.testing.assert_close(reference, want, atol=1e-6, rtol=0)


def test_interpolate_offset_repr_spec_and_rounding_error():
    pe = posenc.build("learned2d(grid_size=(4, 5), num_prefix_tokens=1, interpolate_offset=0.1)", d_model=8)
    assert pe.interpolate_offset == 0.1
    assert repr(pe).endswith("antialias=False, interpolate_offset=0.1)")
    assert "interpolate_offset" not in repr(posenc.Learned2D(8, 4))
    tiny = posenc.Learned2D(8, 7, interpolate_offset=1e-20)  # F.interpolate's floor(7 * 61/7) is 60
    with pytest.raises(
        ValueError, match=r"interpolate_offset=1e-20 resizes grid_size \(7, 7\) to fewer cells"
    ):
        tiny.table((61, 61))
    assert tiny.table((8, 8)).shape == (64, 8)


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
        (
            {"grid_size": 4, "interpolate_offset": -0.1},
            ValueError,
            r"interpolate_offset must be .* \[0, 1\), got -0.1",
        ),
        (
            {"grid_size": 4, "interpolate_offset": 1},
            ValueError,
            r"interpolate_offset must be .* \[0, 1\), got 1",
        ),
        (
            {"grid_size": 4, "interpolate_offset": float("nan")},
            ValueError,
            "interpolate_offset must be a finite.*nan",
        ),
        (
            {"grid_size": 4, "interpolate_offset": float("inf")},
            ValueError,
            "interpolate_offset must be a finite.*inf",
        ),
        (
            {"grid_size": 4, "interpolate_offset": "0.1"},
            TypeError,
            r"interpolate_offset must be a float, got '0.1' \(str\)",
        ),
        (
            {"grid_size": 4, "interpolate_offset": True},
            TypeError,
            "interpolate_offset must be a float, got True",
        ),
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
