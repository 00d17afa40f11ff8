"""QueryTemperature, Llama 4's query scale by position in its layers without RoPE (and Beam's power law): the
formula, decoding, the registry and errors. Against transformers' models: tests/hf/test_layers.py."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc import QueryTemperature


def test_query_temperature_formula_and_contract() -> None:
    temp = QueryTemperature(floor_scale=4, attn_scale=0.5)
    q, k = torch.randn(2, 3, 20, 8), torch.randn(2, 1, 20, 8)
    out, same = temp(q, k)
    p = torch.arange(20, dtype=torch.float32)
    scale = torch.log1p(torch.floor((p + 1) / 4)) * 0.5 + 1
    torch.testing.assert_close(out, q * scale[:, None])
    assert same is k
    # decoding one query at position 19 equals the last row of the full call
    step, _ = temp(q[:, :, -1:], k)
    torch.testing.assert_close(step, out[:, :, -1:])
    assert posenc.build("query_temperature(floor_scale=4, attn_scale=0.5)").floor_scale == 4.0
    with pytest.raises(ValueError, match="attn_scale"):
        QueryTemperature(attn_scale=-1.0)
    with pytest.raises(TypeError, match="floor_scale"):
        QueryTemperature(floor_scale="8192")  # type: ignore[arg-type]
