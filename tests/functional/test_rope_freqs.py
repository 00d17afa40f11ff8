"""posenc.functional.rope_freqs: the inverse frequencies of each rope type against the paper's formula and
transformers' (dynamic NTK, Llama 3's bands, YaRN's ramp)."""

from __future__ import annotations

import logging
import math

import pytest
import torch
from torch.testing import assert_close

from posenc.functional.rope_freqs import (
    DynamicRope,
    Llama3Rope,
    LongRope,
    YarnRope,
    rope_inv_freq,
)
from posenc.functional.rotary import rope_cos_sin

# float32 angles/frequencies computed by transformers vs ours in float64, rounded.
FREQ_TOL = {"atol": 0.0, "rtol": 1e-6}


# --- frequencies ---------------------------------------------------------------------------------


def test_rope_inv_freq_is_the_paper_formula():
    got = rope_inv_freq(8, 100.0)
    expected = torch.tensor([100.0 ** (-2 * i / 8) for i in range(4)], dtype=torch.float64)
    assert_close(got, expected, atol=0, rtol=1e-15)


def test_float64_angles_are_exact_where_float32_are_not():
    positions = torch.tensor([100_000])
    cos64, _ = rope_cos_sin(positions, rope_inv_freq(64))
    exact = math.cos(100_000 * 1.0)  # pair 0 has frequency exactly 1
    assert abs(cos64[0, 0].item() - exact) < 1e-12


@pytest.mark.parametrize("seq_len", [50, 128, 129, 1000])
def test_dynamic_ntk_matches_transformers(seq_len):
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    logging.getLogger("transformers").setLevel(logging.ERROR)
    config = transformers.LlamaConfig(
        hidden_size=256,
        num_attention_heads=4,
        head_dim=64,
        max_position_embeddings=128,
        rope_scaling={"rope_type": "dynamic", "factor": 3.0},
    )
    expected, _ = ROPE_INIT_FUNCTIONS["dynamic"](config, None, seq_len=torch.tensor(seq_len))
    got = DynamicRope(rotary_dim=64, factor=3.0, original_max_len=128).inv_freq_at(torch.tensor(seq_len))
    assert_close(got.float(), expected, **FREQ_TOL)
    if seq_len <= 128:  # below the trained length: plain RoPE
        assert_close(got, rope_inv_freq(64), atol=0, rtol=1e-15)


def test_llama3_bands():
    # high frequencies kept, low ones divided by the factor, the band between in between
    plain = rope_inv_freq(128, 500000.0)
    got = Llama3Rope(
        rotary_dim=128,
        base=500000.0,
        factor=8.0,
        original_max_len=8192,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
    ).inv_freq()[0]
    wavelen = 2 * math.pi / plain
    high, low = wavelen < 8192 / 4, wavelen > 8192 / 1
    assert high.any() and low.any() and (~high & ~low).any()
    assert torch.equal(got[high], plain[high])
    assert_close(got[low], plain[low] / 8, atol=0, rtol=1e-15)
    mid = ~high & ~low
    assert ((got[mid] < plain[mid]) & (got[mid] > plain[mid] / 8)).all()


def test_yarn_ramp_keeps_fast_pairs_and_interpolates_slow_ones():
    plain = rope_inv_freq(64)
    got = YarnRope(rotary_dim=64, factor=4.0, original_max_len=2048, attention_factor=1.0).inv_freq()[0]
    assert torch.equal(got[:4], plain[:4])  # turn many times in 2048 positions: extrapolated as is
    assert_close(got[-4:], plain[-4:] / 4, atol=0, rtol=1e-15)  # turn < once: interpolated


def test_longrope_frequencies_at_a_length_per_row_are_one_set_per_row():
    """inv_freq_at with one length per row paired the rows with the frequency pairs (torch.where broadcast
    the lengths along the last axis): with as many rows as pairs, one vector mixing both sets, silently."""
    params = LongRope(
        rotary_dim=4, base=10000.0, short_factor=(1.0, 1.0), long_factor=(4.0, 4.0), original_max_len=100,
        attention_factor=1.0,
    )  # fmt: skip
    rows = params.inv_freq_at(torch.tensor([10, 5000]))
    assert torch.equal(rows, torch.stack([params.inv_freq_at(10), params.inv_freq_at(5000)]))
