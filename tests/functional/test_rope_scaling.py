"""posenc.functional.rope_scaling: a Hugging Face RoPE dict (or a scaling) read into one frozen dataclass per
rope type, with its base and defaults."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from posenc.functional.rope_freqs import (
    DefaultRope,
    DynamicRope,
    LinearRope,
    Llama3Rope,
    LongRope,
    RopeParameters,
    YarnRope,
)
from posenc.functional.rope_scaling import resolve_rope_scaling

# --- the scaling dicts: one dataclass per rope type ---------------------------------------------------


LONG = {"short_factor": [1.0] * 4, "long_factor": [2.0] * 4}


@pytest.mark.parametrize(
    ("scaling", "cls", "fields"),
    [
        (None, DefaultRope, {}),
        ({"rope_type": "linear", "factor": 2.0}, LinearRope, {"factor": 2.0}),
        ({"type": "dynamic", "factor": 3.0}, DynamicRope, {"factor": 3.0, "original_max_len": 64}),
        (
            {"rope_type": "yarn", "factor": 4.0, "beta_fast": 0, "truncate": False},
            YarnRope,
            {"factor": 4.0, "original_max_len": 64, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False},
        ),
        (
            {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1, "high_freq_factor": 4},
            Llama3Rope,
            {"factor": 8.0, "original_max_len": 64, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
        ),
        (
            {"rope_type": "longrope", "factor": 4.0, "original_max_position_embeddings": 16, **LONG},
            LongRope,
            {"factor": 4.0, "original_max_len": 16, "short_factor": (1.0,) * 4, "long_factor": (2.0,) * 4},
        ),
    ],
)
def test_each_rope_type_has_its_own_frozen_dataclass(scaling, cls, fields):
    params = resolve_rope_scaling(scaling, head_dim=8, max_len=64)
    assert type(params) is cls and isinstance(params, RopeParameters)
    assert params.rope_type == cls.rope_type and params.base == 10000.0 and params.rotary_dim == 8
    for name, value in fields.items():
        assert getattr(params, name) == value, name
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.base = 1.0  # type: ignore[misc]
    assert params.length_dependent == (cls in (DynamicRope, LongRope))
    inv_freq = params.inv_freq()
    assert inv_freq.dtype == torch.float64 and inv_freq.shape == (2 if cls is LongRope else 1, 4)


def test_resolve_rope_scaling_reads_hf_dicts():
    params = resolve_rope_scaling(
        {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6, "partial_rotary_factor": 0.5},
        head_dim=64,
        max_len=4096,
    )
    assert isinstance(params, YarnRope)
    assert params.base == 1e6 and params.rotary_dim == 32 and params.original_max_len == 4096
    assert params.attention_scaling == pytest.approx(0.1 * math.log(4.0) + 1)
    legacy = resolve_rope_scaling({"type": "linear", "factor": 2.0}, head_dim=8)
    assert legacy.rope_type == "linear" and legacy.factor == 2.0
    assert DefaultRope(rotary_dim=8).attention_scaling == 1.0


def test_base_given_once_or_equal_to_rope_theta():
    assert resolve_rope_scaling({"rope_theta": 5e5}, head_dim=8).base == 5e5
    assert resolve_rope_scaling({"rope_theta": 5e5}, head_dim=8, base=5e5).base == 5e5
    assert resolve_rope_scaling(None, head_dim=8).base == 10000.0
    # an explicit 10000.0 is a given base, not "no base": it conflicts with another rope_theta
    with pytest.raises(ValueError, match=r"base=10000.0 conflicts with scaling\['rope_theta'\]=500000.0"):
        resolve_rope_scaling({"rope_theta": 5e5}, head_dim=8, base=10000.0)
