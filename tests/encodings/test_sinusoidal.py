"""Sinusoidal (1D): exactness against the formulas and Hugging Face, caches, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import posenc
from posenc.encodings.sinusoidal import Sinusoidal
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
