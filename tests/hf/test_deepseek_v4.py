"""DeepSeek V4 against transformers' own rotary: whole q, k and attention-output tensors, per layer type.

Its heads are ``[nope | rope]``: interleaved RoPE on the last ``qk_rope_head_dim`` channels, "main"
(``rope_theta``) on sliding layers and "compress" (``compress_rope_theta``, YaRN with attention factor 1)
on the compressed ones; the attention output's rope slice is rotated back by the conjugate rotation at the
query positions. posenc: ``RoPE(rotary_offset=head_dim - r)`` from :func:`posenc.hf.layer_encodings`,
``encode_qk`` and ``rotate(..., conjugate=True)``.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.hf import from_hf_config, layer_encodings

transformers = pytest.importorskip("transformers")
modeling = pytest.importorskip("transformers.models.deepseek_v4.modeling_deepseek_v4")

# transformers computes the angles position * inv_freq in float32 (off by up to position * 6e-8 rad:
# ~3e-4 at position 5000 on unit-variance values); posenc in float64, rounded once.
REF_TOL = {"atol": 5e-4, "rtol": 1e-5}
T = 7
POSITIONS = {
    "default": torch.arange(T)[None].repeat(2, 1),
    "offset": torch.arange(T)[None].repeat(2, 1) + 4990,  # past YaRN's trained 256 and the 4096 context
    "batched": torch.stack([torch.arange(T), torch.tensor([3, 9, 10, 11, 40, 300, 301])]),
}
# A V4-Flash-like config.json at a small size: flat YaRN scaling for the compressed layers, the legacy
# compress_ratios (one more than the layers: the MTP layer, which its class drops) and qk_rope_head_dim.
CONFIG_JSON = {
    "model_type": "deepseek_v4",
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "qk_rope_head_dim": 16,
    "num_hidden_layers": 4,
    "compress_ratios": [0, 4, 128, 0, 4],
    "max_position_embeddings": 4096,
    "rope_theta": 10000.0,
    "compress_rope_theta": 160000.0,
    "rope_scaling": {
        "type": "yarn",
        "factor": 16.0,
        "original_max_position_embeddings": 256,
        "beta_fast": 32,
        "beta_slow": 1,
    },
}


def config_of(config_json):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.DeepseekV4Config(**{k: v for k, v in config_json.items() if k != "model_type"})


def forms(config_json):
    """The config object, its to_dict() (nested rope_parameters) and the config.json dict."""
    config = config_of(config_json)
    return config, {"config": config, "to_dict": config.to_dict(), "config.json": config_json}


@pytest.mark.parametrize("form", ["config", "to_dict", "config.json"])
@pytest.mark.parametrize("case", list(POSITIONS))
def test_queries_keys_and_the_output_rotation_match_transformers(form, case):
    config, given = forms(CONFIG_JSON)
    rotary = modeling.DeepseekV4RotaryEmbedding(config)
    apply = modeling.apply_rotary_pos_emb
    encodings = layer_encodings(given[form])
    assert len(encodings) == config.num_hidden_layers == 4
    gen = torch.Generator().manual_seed(0)
    pos = POSITIONS[case]
    for layer, layer_type in enumerate(config.layer_types):
        kind = "main" if layer_type == "sliding_attention" else "compress"
        enc = encodings[layer]
        assert isinstance(enc, posenc.RoPE) and (enc.rotary_dim, enc.rotary_offset) == (16, 48)
        q, kv = torch.randn(2, 4, T, 64, generator=gen), torch.randn(2, 1, T, 64, generator=gen)
        cos, sin = rotary(q, pos, layer_type=kind)
        q_ours, kv_ours = enc.encode_qk(q, kv, q_positions=pos, k_positions=pos)
        assert_close(q_ours, apply(q, cos, sin), **REF_TOL)
        assert_close(kv_ours, apply(kv, cos, sin), **REF_TOL)
        assert torch.equal(q_ours[..., :48], q[..., :48])  # the nope channels pass through
        # the attention output (b, t, h, d), rotated back at the query positions as its attention does
        out = torch.randn(2, T, 4, 64, generator=gen)
        want = apply(out.transpose(1, 2), cos, -sin).transpose(1, 2)
        got = enc.rotate(out.transpose(1, 2), pos, conjugate=True).transpose(1, 2)
        assert_close(got, want, **REF_TOL)
        # attention factor 1 (its class sets YaRN's): the conjugate rotation is the inverse
        assert enc.attention_scaling == 1.0
        assert_close(enc.rotate(q_ours, pos, conjugate=True), q, atol=1e-5, rtol=1e-5)


def test_each_layer_takes_its_rope_kind_and_equal_layers_share_one_encoding():
    config, given = forms(CONFIG_JSON)
    assert config.layer_types == [
        "sliding_attention",
        "compressed_sparse_attention",
        "heavily_compressed_attention",
        "sliding_attention",
    ]
    for form in given.values():
        main, csa, hca, main2 = layer_encodings(form)
        assert main is main2 and csa is hca and main is not csa
        assert (main.base, main.rope_type, csa.base, csa.rope_type) == (1e4, "default", 1.6e5, "yarn")
        assert "rotary_offset=48" in repr(main) and main.layout == "interleaved"
    with pytest.raises(ValueError, match="layer=i"):
        from_hf_config(config)
    assert from_hf_config(config, layer=1).base == 1.6e5


@pytest.mark.parametrize(
    "changes",
    [
        {"num_hidden_layers": 5},  # no layer_types: its class's default pattern (HCA, HCA, then CSA / HCA)
        {"partial_rotary_factor": 0.5, "rope_scaling": None, "compress_rope_theta": 5e4},  # plain "compress"
        {"rope_scaling": None, "rope_parameters": {"rope_type": "yarn", "factor": 8.0, "rope_theta": 3.0}},
    ],
)
def test_config_json_dicts_read_as_its_class_reads_them(changes):
    config_json = {k: v for k, v in CONFIG_JSON.items() if k != "compress_ratios"} | changes
    config_json = {k: v for k, v in config_json.items() if v is not None}
    config = config_of(config_json)
    ours, theirs = layer_encodings(config_json), layer_encodings(config)
    assert [repr(e) for e in ours] == [repr(e) for e in theirs]
    rotary = modeling.DeepseekV4RotaryEmbedding(config)
    for enc, layer_type in zip(ours, config.layer_types, strict=True):
        kind = "main" if layer_type == "sliding_attention" else "compress"
        q = torch.randn(2, 4, T, 64)
        cos, sin = rotary(q, POSITIONS["batched"], layer_type=kind)
        assert_close(
            enc.rotate(q, POSITIONS["batched"]), modeling.apply_rotary_pos_emb(q, cos, sin), **REF_TOL
        )


def test_bad_compress_ratios_are_refused_by_name():
    for ratios in ([0, 4, 3, 0], [0, 4], "0 4 128 0"):
        with pytest.raises(ValueError, match=r"compress_ratios must list one of \[0, 4, 128\]"):
            layer_encodings({**CONFIG_JSON, "compress_ratios": ratios})
