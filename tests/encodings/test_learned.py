"""Learned: look-up by position, parity with OPT/GPT-2 tables, limits, resize, dtype, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import posenc
from posenc.encodings.learned import Learned

# A look-up copies rows: the result must be bit-identical.
EXACT = {"atol": 0.0, "rtol": 0.0}
# Interpolation in float32 against numpy's float64 interp: a few float32 ulps of values ~0.02-1.
INTERP_FLOAT32 = {"atol": 1e-6, "rtol": 1e-6}
# bfloat16 outputs: x + pe rounds to 8 mantissa bits (relative 2^-8).
BF16_ROUNDING = {"atol": 1e-2, "rtol": 1e-2}


def test_adds_rows_of_weight():
    pe = Learned(8, max_len=10)
    x = torch.randn(2, 6, 8)
    torch.testing.assert_close(pe(x), x + pe.weight[:6], **EXACT)
    positions = torch.tensor([[0, 0, 1, 2, 3, 4], [9, 8, 7, 6, 5, 4]])
    torch.testing.assert_close(pe(x, positions), x + pe.weight[positions], **EXACT)
    torch.testing.assert_close(pe.table(positions), pe.weight[positions], **EXACT)
    torch.testing.assert_close(pe.table(4), pe.weight[:4], **EXACT)


def test_parity_with_hf_opt_learned_positions(device):
    from transformers.models.opt.modeling_opt import OPTLearnedPositionalEmbedding

    hf = OPTLearnedPositionalEmbedding(16, 8).to(device)
    pe = Learned(8, max_len=16, offset=2).to(device)
    assert pe.weight.shape == hf.weight.shape == (18, 8)
    pe.load_state_dict(hf.state_dict())  # OPT's "embed_positions.weight" loads by name
    mask = torch.ones(2, 7, dtype=torch.long, device=device)
    with torch.no_grad():
        expected = hf(mask)  # positions 0..6, rows 2..8
        expected_cached = hf(mask, cache_length=4)  # the last 3 of them (KV cache)
        explicit = torch.tensor([[3, 1, 4, 1, 5, 9, 2]], device=device)
        expected_explicit = hf(mask, position_ids=explicit)
    zeros = torch.zeros(2, 7, 8, device=device)
    torch.testing.assert_close(pe(zeros), expected, **EXACT)
    got_cached = pe(torch.zeros(2, 3, 8, device=device), torch.arange(4, 7, device=device))
    torch.testing.assert_close(got_cached, expected_cached, **EXACT)
    torch.testing.assert_close(pe(torch.zeros(1, 7, 8, device=device), explicit), expected_explicit, **EXACT)
    # left padding: real tokens numbered from 0 as OPT does (its pad rows differ: it uses row 1)
    left = torch.tensor([[0, 0, 1, 1, 1, 1, 1]], device=device)
    with torch.no_grad():
        expected_left = hf(left)
    got_left = pe(torch.zeros(1, 7, 8, device=device), posenc.mask_to_positions(left))
    torch.testing.assert_close(got_left[:, 2:], expected_left[:, 2:], **EXACT)


def test_gpt2_wpe_loads_by_name():
    from transformers import GPT2Config, GPT2Model

    gpt2 = GPT2Model(GPT2Config(n_embd=16, n_layer=1, n_head=2, n_positions=32, vocab_size=11))
    pe = Learned(16, max_len=32)
    pe.load_state_dict({"weight": gpt2.wpe.weight.detach().clone()}, strict=True)
    ids = torch.arange(5).unsqueeze(0)
    with torch.no_grad():
        expected = gpt2.wte(ids) + gpt2.wpe(torch.arange(5))
        got = pe(gpt2.wte(ids))
    torch.testing.assert_close(got, expected, **EXACT)


def test_state_dict_holds_weight_only_and_matches_nn_embedding():
    pe = Learned(8, max_len=10, offset=2)
    assert list(pe.state_dict()) == ["weight"]
    assert [n for n, _ in pe.named_parameters()] == ["weight"]
    pe.load_state_dict(nn.Embedding(12, 8).state_dict(), strict=True)


def test_gradient_reaches_only_the_used_rows():
    pe = Learned(4, max_len=10)
    x = torch.randn(2, 3, 4, requires_grad=True)
    pe(x, torch.tensor([1, 5, 5])).sum().backward()
    grad = pe.weight.grad
    assert torch.equal(grad[1], torch.full((4,), 2.0)) and torch.equal(grad[5], torch.full((4,), 4.0))
    assert grad[[0, 2, 3, 4, 6, 7, 8, 9]].abs().sum() == 0
    assert torch.equal(x.grad, torch.ones_like(x))


def test_init_std_and_reset_parameters():
    torch.manual_seed(0)
    pe = Learned(64, max_len=512)
    assert abs(pe.weight.std().item() - 0.02) < 0.002  # 32k draws: std within 10%
    pe = Learned(64, max_len=512, init_std=0.5)
    before = pe.weight.detach().clone()
    pe.reset_parameters()
    assert not torch.equal(before, pe.weight) and abs(pe.weight.std().item() - 0.5) < 0.05
    assert torch.equal(Learned(4, 3, init_std=0.0).weight, torch.zeros(3, 4))


@pytest.mark.parametrize("low", [torch.bfloat16, torch.float16])
def test_dtypes(low):
    pe = Learned(8, max_len=10)
    x = torch.randn(2, 5, 8)
    out = pe(x.to(low))
    assert out.dtype == low
    torch.testing.assert_close(out.float(), (x + pe.weight[:5]).detach(), **BF16_ROUNDING)
    pe.to(low)
    assert pe.weight.dtype == low  # a parameter follows the model's dtype, unlike caches
    assert pe(x.to(low)).dtype == low
    assert pe(x.double()).dtype == torch.float64


def test_sequence_longer_than_max_len_names_both_numbers():
    pe = Learned(8, max_len=10)
    with pytest.raises(ValueError, match=r"sequence length 11 exceeds max_len=10"):
        pe(torch.zeros(1, 11, 8))
    with pytest.raises(ValueError, match=r"position 10 .* needs 11 positions, max_len=10 allows 0\.\.9"):
        pe(torch.zeros(1, 2, 8), torch.tensor([3, 10]))
    with pytest.raises(ValueError, match=r"position 12 .* max_len=10"):
        pe.table(torch.tensor([12]))
    with pytest.raises(ValueError, match=r"non-negative, got minimum -1"):
        pe(torch.zeros(1, 2, 8), torch.tensor([3, -1]))
    with pytest.raises(ValueError, match=r"sequence length 11 exceeds max_len=10"):
        pe.table(11)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"d_model": 0, "max_len": 4}, ValueError, r"d_model must be >= 1, got 0"),
        ({"d_model": 4, "max_len": 0}, ValueError, r"max_len must be >= 1, got 0"),
        ({"d_model": 4, "max_len": 4.0}, TypeError, r"max_len must be an int, got 4.0"),
        ({"d_model": 4, "max_len": 4, "offset": -2}, ValueError, r"offset must be >= 0, got -2"),
        (
            {"d_model": 4, "max_len": 4, "init_std": -1.0},
            ValueError,
            r"init_std must be finite and >= 0, got -1.0",
        ),
        ({"d_model": 4, "max_len": 4, "init_std": "big"}, TypeError, r"init_std must be a float"),
    ],
)
def test_constructor_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        Learned(**kwargs)


def test_call_errors():
    pe = Learned(8, max_len=10)
    with pytest.raises(ValueError, match=r"rank 2"):
        pe(torch.zeros(5, 8))
    with pytest.raises(ValueError, match=r"last dimension 4, expected d_model=8"):
        pe(torch.zeros(1, 5, 4))
    with pytest.raises(ValueError, match=r"positions has length 3, expected 5"):
        pe(torch.zeros(1, 5, 8), torch.arange(3))
    with pytest.raises(TypeError, match=r"positions must be an int or an integer tensor"):
        pe.table([1, 2])


def test_build_by_name():
    pe = posenc.build("learned", d_model=8, max_len=16, num_heads=2, causal=True)
    assert isinstance(pe, Learned) and pe.weight.shape == (16, 8)
    assert posenc.build("learned(offset=2)", d_model=8, max_len=16).weight.shape == (18, 8)
    with pytest.raises(ValueError, match=r"missing required size\(s\) max_len"):
        posenc.build("learned", d_model=8)


# ----------------------------------------------------------------------------- resize


def test_resize_linear_matches_half_pixel_interpolation():
    pe = Learned(3, max_len=5, offset=2)
    head = pe.weight[:2].detach().clone()
    old = pe.weight[2:].detach().double().numpy()
    pe.resize(12)
    assert isinstance(pe.weight, nn.Parameter) and pe.weight.requires_grad
    assert pe.max_len == 12 and pe.weight.shape == (14, 3)
    torch.testing.assert_close(pe.weight[:2].detach(), head, **EXACT)  # offset rows untouched
    # new row j samples old coordinate (j + 0.5) * 5/12 - 0.5, clamped to the ends
    coords = np.clip((np.arange(12) + 0.5) * 5 / 12 - 0.5, 0, 4)
    expected = np.stack([np.interp(coords, np.arange(5), old[:, c]) for c in range(3)], axis=1)
    torch.testing.assert_close(pe.weight[2:].detach(), torch.from_numpy(expected).float(), **INTERP_FLOAT32)
    assert pe(torch.zeros(1, 12, 3)).shape == (1, 12, 3)
    with pytest.raises(ValueError, match=r"sequence length 13 exceeds max_len=12"):
        pe(torch.zeros(1, 13, 3))


def test_resize_same_length_is_identity_and_other_modes():
    pe = Learned(4, max_len=6)
    old = pe.weight.detach().clone()
    pe.resize(6)
    torch.testing.assert_close(pe.weight.detach(), old, **INTERP_FLOAT32)
    pe.resize(15, mode="repeat")  # Longformer: tile the old table
    torch.testing.assert_close(pe.weight.detach(), old[torch.arange(15) % 6], **EXACT)
    pe = Learned(4, max_len=4)
    old = pe.weight.detach().clone()
    pe.resize(8, mode="nearest")
    torch.testing.assert_close(pe.weight.detach(), old.repeat_interleave(2, dim=0), **EXACT)
    pe.resize(2)  # shrinking works too: mean of neighbouring pairs
    torch.testing.assert_close(pe.weight.detach(), old.view(2, 2, 4).mean(1), **INTERP_FLOAT32)
    with pytest.raises(ValueError, match=r"mode must be one of .*'cubic'"):
        pe.resize(4, mode="cubic")
    with pytest.raises(ValueError, match=r"new_max_len must be >= 1, got 0"):
        pe.resize(0)


# ----------------------------------------------------------------------------- compile


@pytest.mark.slow
def test_compile_fullgraph_keeps_the_length_check():
    pe = Learned(8, max_len=16)
    compiled = torch.compile(pe, fullgraph=True, dynamic=True)
    for t in (3, 7, 16):
        x = torch.randn(2, t, 8)
        torch.testing.assert_close(compiled(x), x + pe.weight[:t], **EXACT)
    # fullgraph=True cannot raise from inside a graph: dynamo refuses the length, with our message
    with pytest.raises(RuntimeError, match=r"sequence length 17 exceeds max_len=16"):
        compiled(torch.randn(1, 17, 8))
    # without fullgraph it falls back to eager for that call: the ValueError itself
    with pytest.raises(ValueError, match=r"sequence length 17 exceeds max_len=16"):
        torch.compile(pe, dynamic=True)(torch.randn(1, 17, 8))
