"""Sinusoidal (1D) and Sinusoidal2D: exactness against the formulas and Hugging Face, caches, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import posenc
from posenc.encodings.sinusoidal import Sinusoidal
from posenc.encodings.sinusoidal2d import Sinusoidal2D
from posenc.functional.sinusoidal import sinusoidal_2d_table, sinusoidal_shift_map, sinusoidal_table

# A float64 table cast once to float32 is within one float32 rounding of the exact value
# (|PE| <= 1, so half an ulp is <= 6e-8); the two float64 computations differ far below that.
FLOAT32_CAST = {"atol": 1e-7, "rtol": 0.0}
# float64 against float64 formulas written differently: angles up to 1e5 rad carry ~1e-11 error.
FLOAT64_ANGLES = {"atol": 1e-10, "rtol": 0.0}
# transformers' Speech2Text/M2M100 build their angles in float32: error ~3e-8 × position;
# positions here stay below 70, so 1e-5 is loose enough and still 4 orders below the values.
HF_FLOAT32_ANGLES = {"atol": 1e-5, "rtol": 0.0}
# bfloat16 outputs: x + pe rounds to 8 mantissa bits (relative 2^-8).
BF16_ROUNDING = {"atol": 1e-2, "rtol": 1e-2}


def reference_1d(positions: np.ndarray, dim: int, base: float, layout: str, spacing: str) -> np.ndarray:
    """Independent float64 numpy table, written from the paper / tensor2tensor formulas."""
    pos = positions.astype(np.float64)[:, None]
    i = np.arange(dim // 2, dtype=np.float64)[None, :]
    if spacing == "paper":  # PE[p, 2i] = sin(p / base^(2i/d)), PE[p, 2i+1] = cos(...)
        angle = pos / np.power(base, 2.0 * i / dim)
    else:  # tensor2tensor get_timing_signal_1d: log_timescale_increment = log(base) / (d/2 - 1)
        angle = pos * np.exp(-i * (math.log(base) / (dim // 2 - 1)))
    out = np.empty((len(positions), dim), dtype=np.float64)
    if layout == "interleaved":
        out[:, 0::2], out[:, 1::2] = np.sin(angle), np.cos(angle)
    elif layout == "concat":
        out[:, : dim // 2], out[:, dim // 2 :] = np.sin(angle), np.cos(angle)
    else:  # "concat_cos": [cos | sin] (MusicGen)
        out[:, : dim // 2], out[:, dim // 2 :] = np.cos(angle), np.sin(angle)
    return out


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


# ----------------------------------------------------------------------------- 1D: exactness


@pytest.mark.parametrize("layout", ["interleaved", "concat", "concat_cos"])
@pytest.mark.parametrize("spacing", ["paper", "tensor2tensor"])
@pytest.mark.parametrize("base", [10000.0, 500.0])
def test_table_matches_float64_formula(layout, spacing, base):
    pe = Sinusoidal(64, base=base, layout=layout, freq_spacing=spacing, max_len=16)
    positions = np.arange(3000)
    expected = torch.from_numpy(reference_1d(positions, 64, base, layout, spacing))
    got = pe.table(3000)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected.float(), **FLOAT32_CAST)


def test_float64_table_precise_at_large_positions():
    positions = np.array([0, 1, 4095, 32768, 99991])
    expected = torch.from_numpy(reference_1d(positions, 128, 10000.0, "interleaved", "paper"))
    got = Sinusoidal(128).table(torch.from_numpy(positions), dtype=torch.float64)
    torch.testing.assert_close(got, expected, **FLOAT64_ANGLES)


def test_forward_adds_table_and_is_forward():
    pe = Sinusoidal(16)
    x = torch.randn(3, 7, 16)
    expected = x + torch.from_numpy(reference_1d(np.arange(7), 16, 1e4, "interleaved", "paper")).float()
    torch.testing.assert_close(pe(x), expected, **FLOAT32_CAST)
    torch.testing.assert_close(pe.encode_input(x), pe(x), atol=0, rtol=0)


def test_explicit_positions_batched_and_offset():
    pe = Sinusoidal(16, offset=3, layout="concat")
    positions = torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]])  # left padding in row 0
    x = torch.randn(2, 5, 16)
    table = torch.from_numpy(reference_1d(np.arange(20), 16, 1e4, "concat", "paper")).float()
    torch.testing.assert_close(pe(x, positions), x + table[positions + 3], **FLOAT32_CAST)
    # shared (t,) positions broadcast over the batch
    torch.testing.assert_close(pe(x, positions[1]), x + table[positions[1] + 3], **FLOAT32_CAST)


@pytest.mark.parametrize("hf_name", ["speech_to_text", "m2m_100"])
def test_parity_with_hf_fairseq_style_embeddings(hf_name, device):
    if hf_name == "speech_to_text":
        from transformers.models.speech_to_text.modeling_speech_to_text import (
            Speech2TextSinusoidalPositionalEmbedding as HF,
        )
    else:
        from transformers.models.m2m_100.modeling_m2m_100 import M2M100SinusoidalPositionalEmbedding as HF
    padding_idx, dim = 1, 48
    hf = HF(64, dim, padding_idx=padding_idx).to(device)
    # fairseq numbering: real tokens at padding_idx + 1, +2, ...; we get it from offset.
    pe = Sinusoidal(dim, layout="concat", freq_spacing="tensor2tensor", offset=padding_idx + 1).to(device)
    input_ids = torch.tensor([[5, 6, 7, 8, 9, 10], [5, 6, 7, 8, padding_idx, padding_idx]], device=device)
    with torch.no_grad():
        expected = hf(input_ids)
    got = pe(torch.zeros(2, 6, dim, device=device), posenc.mask_to_positions(input_ids.ne(padding_idx)))
    real = input_ids.ne(padding_idx)
    torch.testing.assert_close(got[real], expected[real], **HF_FLOAT32_ANGLES)
    torch.testing.assert_close(got[0], expected[0], **HF_FLOAT32_ANGLES)  # an unpadded row, whole
    # HF's float32 angles are the less exact of the two, against the float64 formula
    truth = torch.from_numpy(reference_1d(np.arange(2, 8), dim, 1e4, "concat", "tensor2tensor")).to(device)
    assert (got[0].double() - truth).abs().max() <= (expected[0].double() - truth).abs().max()


def test_parity_with_hf_marian():
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    hf = MarianSinusoidalPositionalEmbedding(300, 40)
    with torch.no_grad():
        hf.weight.copy_(hf.create_weight())
        expected = hf((2, 9), cache_length=17)  # positions 17..25
    got = Sinusoidal(40, layout="concat").table(torch.arange(17, 26))
    torch.testing.assert_close(got, expected, **FLOAT32_CAST)
    torch.testing.assert_close(Sinusoidal(40, layout="concat").table(300), hf.weight.detach(), **FLOAT32_CAST)


# ----------------------------------------------------------------------------- 1D: the paper's property


# The shift map property (PE[p + k] = PE[p] @ M(k), Vaswani et al. 3.5) is a property test, for
# every layout and spacing: tests/hardening/test_properties.py.


def test_table_rejects_negative_positions():
    with pytest.raises(ValueError, match=r"non-negative, got minimum -1"):
        Sinusoidal(8).table(torch.tensor([3, -1]))


def test_functional_rejects_bad_arguments():
    with pytest.raises(
        ValueError, match=r"layout must be one of \['interleaved', 'concat', 'concat_cos'\], got 'halves'"
    ):
        sinusoidal_shift_map(1, 8, layout="halves")
    with pytest.raises(ValueError, match=r"dim must be an even int >= 2 .* got 7"):
        sinusoidal_table(torch.arange(3), 7)
    with pytest.raises(ValueError, match=r"base must be a finite number > 0, got -1.0"):
        sinusoidal_table(torch.arange(3), 8, base=-1.0)
    with pytest.raises(ValueError, match=r"freq_spacing='tensor2tensor' needs dim >= 4 .* got dim=2"):
        sinusoidal_table(torch.arange(3), 2, freq_spacing="tensor2tensor")
    with pytest.raises(ValueError, match=r"divisible by 4 .* got 6"):
        sinusoidal_2d_table(2, 2, 6)


# ----------------------------------------------------------------------------- 1D: cache, dtype, state


def test_cache_covers_max_len_and_longer_is_computed():
    pe = Sinusoidal(16, max_len=8)
    cached = pe._table
    assert cached.shape[0] == 8
    x = torch.zeros(1, 100, 16)
    out = pe(x)
    torch.testing.assert_close(out[0], pe.table(100), atol=0, rtol=0)
    torch.testing.assert_close(
        out[0],
        torch.from_numpy(reference_1d(np.arange(100), 16, 1e4, "interleaved", "paper")).float(),
        **FLOAT32_CAST,
    )
    # explicit positions past the table, near and far (a table up to 10**7 would take 640 MB)
    for positions in (torch.arange(100, 200), torch.tensor([10**7, 7])):
        torch.testing.assert_close(
            pe(torch.zeros(1, positions.numel(), 16), positions)[0],
            torch.from_numpy(reference_1d(positions.numpy(), 16, 1e4, "interleaved", "paper")).float(),
            **FLOAT32_CAST,
        )
    # the rows of the table are the computed ones, bit for bit
    torch.testing.assert_close(pe(torch.zeros(1, 8, 16))[0], out[0, :8], atol=0, rtol=0)
    assert pe._table is cached  # never replaced: calls do not allocate tables


def test_scale_multiplies_every_row_the_table_holds_or_computes():
    """``scale`` (Canary's 1/sqrt(d)) multiplies cached rows, rows past the table, explicit and float64 ones."""
    plain, scaled = Sinusoidal(16, max_len=8), Sinusoidal(16, max_len=8, scale=0.25)
    positions = torch.tensor([0, 3, 7, 50, 10**6])
    for x, given in ((torch.zeros(2, 20, 16), None), (torch.zeros(1, 5, 16, dtype=torch.float64), positions)):
        torch.testing.assert_close(scaled(x, given), plain(x, given) * 0.25, atol=0, rtol=0)
    torch.testing.assert_close(scaled.table(positions), plain.table(positions) * 0.25, atol=0, rtol=0)
    assert repr(scaled) == "Sinusoidal(16, base=10000.0, layout='interleaved', scale=0.25)"
    assert "scale" not in repr(plain)
    scaled.reset_caches()
    torch.testing.assert_close(scaled._table, plain._table * 0.25, atol=0, rtol=0)


@pytest.mark.parametrize("low", [torch.bfloat16, torch.float16])
def test_low_precision_cast_keeps_table_float32(low):
    pe = Sinusoidal(32, max_len=64).to(low)
    assert pe._table.dtype == torch.float32
    pe = pe.half() if low == torch.float16 else pe.bfloat16()
    assert pe._table.dtype == torch.float32
    x = torch.randn(2, 64, 32).to(low)
    out = pe(x)
    assert out.dtype == low
    expected = (
        x.float() + torch.from_numpy(reference_1d(np.arange(64), 32, 1e4, "interleaved", "paper")).float()
    ).to(low)
    torch.testing.assert_close(out.float(), expected.float(), **BF16_ROUNDING)


def test_float64_inputs_get_float64_encodings():
    pe = Sinusoidal(16)
    x = torch.zeros(1, 5, 16, dtype=torch.float64)
    positions = torch.tensor([0, 1, 2, 40000, 99999])
    expected = torch.from_numpy(reference_1d(positions.numpy(), 16, 1e4, "interleaved", "paper"))
    torch.testing.assert_close(pe(x, positions)[0], expected, **FLOAT64_ANGLES)
    pe.double()
    assert pe._table.dtype == torch.float64
    torch.testing.assert_close(pe.table(positions), expected, **FLOAT64_ANGLES)
    pe.float()
    assert pe._table.dtype == torch.float32


def test_state_dict_is_empty_and_loads_at_another_length():
    pe = Sinusoidal(16, max_len=32)
    assert pe.state_dict() == {}
    other = Sinusoidal(16, max_len=4)
    other.load_state_dict(pe.state_dict(), strict=True)
    assert other(torch.zeros(1, 40, 16)).shape == (1, 40, 16)


def test_meta_device_then_to_empty_rebuilds_the_table():
    with torch.device("meta"):
        pe = Sinusoidal(16, max_len=12)
    assert pe._table.is_meta
    pe = pe.to_empty(device="cpu")
    torch.testing.assert_close(pe._table, Sinusoidal(16, max_len=12)._table, atol=0, rtol=0)


def test_build_by_name_alias_and_spec():
    a = posenc.build("sinusoidal", d_model=32, max_len=128, num_heads=4)
    b = posenc.build("sincos", d_model=32)
    c = posenc.build("sinusoidal(layout='concat', freq_spacing='tensor2tensor', offset=2)", d_model=32)
    assert type(a) is type(b) is type(c) is Sinusoidal
    assert a.max_len == 128 and a.kind == "additive"
    assert (c.layout, c.freq_spacing, c.offset) == ("concat", "tensor2tensor", 2)
    with pytest.raises(
        ValueError, match=r"layout='halves' is not one of \['interleaved', 'concat', 'concat_cos'\]"
    ):
        posenc.build("sinusoidal(layout='halves')", d_model=32)


def test_hooks_other_than_encode_input_are_no_ops():
    pe = Sinusoidal(8)
    q, k = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    assert pe.encode_qk(q, k) == (q, k)
    assert pe.attention_bias(q, k) is None


# ----------------------------------------------------------------------------- 1D: errors


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"d_model": 7}, ValueError, r"d_model must be even.*7"),
        ({"d_model": 0}, ValueError, r"d_model must be >= 2, got 0"),
        ({"d_model": 8.0}, TypeError, r"d_model must be an int"),
        ({"d_model": True}, TypeError, r"d_model must be an int"),
        ({"d_model": 8, "base": 0.0}, ValueError, r"base must be a finite number > 0, got 0.0"),
        ({"d_model": 8, "base": -2.0}, ValueError, r"base .* got -2.0"),
        ({"d_model": 8, "base": float("inf")}, ValueError, r"base .* got inf"),
        ({"d_model": 8, "base": float("nan")}, ValueError, r"base .* got nan"),
        ({"d_model": 8, "base": "1e4"}, TypeError, r"base must be a float"),
        ({"d_model": 8, "layout": "halves"}, ValueError, r"layout must be one of .*'halves'"),
        ({"d_model": 8, "freq_spacing": "t2t"}, ValueError, r"freq_spacing must be one of .*'t2t'"),
        ({"d_model": 2, "freq_spacing": "tensor2tensor"}, ValueError, r"d_model >= 4.*2"),
        ({"d_model": 8, "max_len": 0}, ValueError, r"max_len must be >= 1, got 0"),
        ({"d_model": 8, "offset": -1}, ValueError, r"offset must be >= 0, got -1"),
        ({"d_model": 8, "scale": 0.0}, ValueError, r"scale must be a finite number > 0, got 0.0"),
        ({"d_model": 8, "scale": None}, TypeError, r"scale must be a float"),
    ],
)
def test_constructor_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        Sinusoidal(**kwargs)


@pytest.mark.parametrize(
    ("x", "positions", "error", "match"),
    [
        (torch.zeros(5, 8), None, ValueError, r"x must have shape \(batch, seq, dim\).*rank 2"),
        (torch.zeros(1, 5, 6), None, ValueError, r"last dimension 6, expected d_model=8"),
        (torch.zeros(1, 5, 8, dtype=torch.long), None, TypeError, r"floating-point"),
        (torch.zeros(1, 5, 8), torch.arange(4), ValueError, r"positions has length 4, expected 5"),
        (torch.zeros(2, 5, 8), torch.zeros(3, 5, dtype=torch.long), ValueError, r"batch size 3, expected 2"),
        (torch.zeros(1, 5, 8), torch.zeros(1, 1, 5, dtype=torch.long), ValueError, r"rank 3"),
        (torch.zeros(1, 5, 8), torch.arange(5.0), TypeError, r"integer dtype"),
        (torch.zeros(1, 2, 8), torch.tensor([0, -3]), ValueError, r"non-negative, got minimum -3"),
    ],
)
def test_call_errors(x, positions, error, match):
    with pytest.raises(error, match=match):
        Sinusoidal(8)(x, positions)


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


# ----------------------------------------------------------------------------- compile


@pytest.mark.slow
def test_compile_fullgraph_dynamic_lengths():
    pe = Sinusoidal(16, max_len=32)
    compiled = torch.compile(pe, fullgraph=True, dynamic=True)
    for t in (5, 9, 40):  # 40 is past the cached rows: computed in the graph instead
        x = torch.randn(2, t, 16)
        torch.testing.assert_close(compiled(x), x + pe.table(t), **FLOAT32_CAST)
    positions = torch.tensor([[3, 1000, 2]])
    x = torch.randn(1, 3, 16)
    torch.testing.assert_close(compiled(x, positions), x + pe.table(positions), **FLOAT32_CAST)


@pytest.mark.slow
def test_export_serves_any_length():
    class AddPE(torch.nn.Module):
        def __init__(self, pe):
            super().__init__()
            self.pe = pe

        def forward(self, x):
            return self.pe.encode_input(x)

    pe = Sinusoidal(16, max_len=32)
    program = torch.export.export(
        AddPE(pe), (torch.randn(2, 10, 16),), dynamic_shapes={"x": {1: torch.export.Dim("t")}}
    )
    x = torch.randn(2, 300, 16)  # past the cached rows
    torch.testing.assert_close(program.module()(x), pe(x), **FLOAT32_CAST)


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


def test_1d_table_stays_bounded():
    from posenc.encodings.sinusoidal import MAX_TABLE_LEN

    pe = posenc.Sinusoidal(8, max_len=10**9)
    assert pe._table.shape[0] == MAX_TABLE_LEN  # max_len is not a reason to allocate
    for end in (MAX_TABLE_LEN - 5, MAX_TABLE_LEN + 5, 3 * MAX_TABLE_LEN):  # a decoding walk past the bound
        positions = torch.arange(end - 2 * MAX_TABLE_LEN // 3, end)
        out = pe(torch.zeros(1, positions.numel(), 8), positions)
        torch.testing.assert_close(out[0], sinusoidal_table(positions, 8).float(), rtol=0, atol=0)
        assert pe._table.shape[0] <= MAX_TABLE_LEN
    long = pe(torch.zeros(1, MAX_TABLE_LEN + 3, 8))  # default positions past the bound
    assert pe._table.shape[0] <= MAX_TABLE_LEN and long.shape[1] == MAX_TABLE_LEN + 3


_MEMORY_SCRIPT = """
import resource, sys, torch, posenc
pe = posenc.Sinusoidal(1024)
x = torch.zeros(1, 1, 1024)
pe(torch.zeros(1, 1000, 1024), torch.arange(1000, 2000) * 7)  # warm up: allocator, thread pools
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
# positions creeping up by 1.5x per call: the old rule grew a power-of-two table each time
for end in (2000, 3000, 4500, 7000, 10_000, 40_000, 200_000, 1_000_000, 4_000_000):
    pe(torch.zeros(1, 1000, 1024), torch.arange(end - 1000, end))
    pe(x, torch.tensor([end]))
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
print(grown, pe._table.shape[0])
"""


def test_1d_peak_memory_bounded_in_a_subprocess():
    import subprocess
    import sys

    limit = "import resource; resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))\n"
    done = subprocess.run(
        [sys.executable, "-c", limit + _MEMORY_SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    grown, rows = map(int, done.stdout.split())
    # a 4M-row table of width 1024 would be 16 GiB; the bound is 64 MiB plus per-call work
    assert rows <= 16384 and grown < 512 * 2**20, f"peak grew by {grown / 2**20:.0f} MiB, table rows {rows}"


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
