"""NoPE: no position anywhere, through every hook; registry names; input checks."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.encodings.none import NoPE


def test_every_hook_is_a_no_op():
    pe = NoPE()
    x = torch.randn(2, 5, 8)
    assert pe(x) is x
    assert pe(x, torch.arange(5)) is x
    assert pe.encode_input(x) is x
    q, k = torch.randn(2, 4, 3, 8), torch.randn(2, 2, 6, 8)
    q_out, k_out = pe.encode_qk(q, k)
    assert q_out is q and k_out is k
    assert pe.attention_bias(q, k) is None
    assert pe.score_mod(q, k) is None
    pe.reset_caches()
    assert pe.kind == "none"


def test_no_state_and_no_dtype_change():
    pe = NoPE().to(torch.bfloat16)
    assert pe.state_dict() == {} and list(pe.parameters()) == [] and list(pe.buffers()) == []
    x = torch.randn(1, 3, 4, dtype=torch.bfloat16)
    assert pe(x).dtype == torch.bfloat16


@pytest.mark.parametrize("name", ["none", "nope", "NoPE"])
def test_build_by_name_ignores_model_sizes(name):
    pe = posenc.build(name, d_model=8, num_heads=2, head_dim=4, max_len=16, causal=True)
    assert isinstance(pe, NoPE)
    with pytest.raises(ValueError, match=r"unknown option\(s\) 'base'"):
        posenc.build("none(base=10.0)")


def test_drop_in_call_checks_its_input():
    pe = NoPE()
    with pytest.raises(ValueError, match=r"rank 2"):
        pe(torch.zeros(5, 8))
    with pytest.raises(ValueError, match=r"positions has length 4, expected 5"):
        pe(torch.zeros(1, 5, 8), torch.arange(4))
    with pytest.raises(TypeError, match=r"integer dtype"):
        pe(torch.zeros(1, 5, 8), torch.arange(5.0))
