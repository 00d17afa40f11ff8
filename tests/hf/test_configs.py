"""Tests of posenc.hf: configs -> encodings, RoPE checkpoint layout conversion, and parity inside
tiny randomly initialised transformers models (built from configs, nothing downloaded).

The in-model tests capture what the model itself computes while it runs a forward pass:
rotated queries/keys by wrapping the model file's ``apply_rotary_pos_emb``, bias tensors with
forward pre-hooks or by wrapping the bias method, absolute encodings with forward hooks on the
position-embedding module. posenc then computes the same thing from ``from_hf_config(model.config)``
for the same positions, and the whole tensors are compared.
"""

from __future__ import annotations

import copy
import importlib
import os
import re
import sys
from typing import Any

import pytest
import torch

import posenc
from posenc.encodings.alibi import FalconALiBi
from posenc.hf import (
    SUPPORTED_MODEL_TYPES,
    from_hf_config,
    from_hf_model,
    layer_encodings,
    layer_windows,
    supported_models_markdown,
)
from posenc.hf._table import _CONVERTERS

os.environ.setdefault("HF_HUB_OFFLINE", "1")
try:
    import transformers
except ImportError:  # the parity tests need it (dev extra); the rest of posenc.hf does not
    transformers = None
else:
    transformers.logging.set_verbosity_error()
requires_transformers = pytest.mark.skipif(
    transformers is None, reason="compares against transformers (dev extra)"
)

# RoPE: transformers builds its angles in float32 (position * inv_freq); posenc may build them in
# float64 and round once, so the two differ by float32 round-off of angles up to ~100 rad.
ROPE_TOL = {"atol": 2e-5, "rtol": 1e-5}
# Biases and tables that are gathers or exact small products: float32 round-off only.
BIAS_TOL = {"atol": 1e-6, "rtol": 1e-6}
# Sinusoid tables: transformers builds Marian's in float64 (numpy) and fairseq's in float32.
TABLE_TOL = {"atol": 2e-5, "rtol": 1e-5}


def test_posenc_hf_exports_only_its_own_names():
    """The layout conversion (posenc.functional, tests/functional/test_rope_layout.py) and FalconALiBi
    (posenc.encodings.alibi) live at home."""
    assert issubclass(FalconALiBi, posenc.ALiBi)
    hf_own = [
        "SUPPORTED_MODEL_TYPES",
        "from_hf_config",
        "from_hf_model",
        "layer_encodings",
        "layer_windows",
        "supported_models_markdown",
    ]
    assert sorted(posenc.hf.__all__) == sorted(hf_own)


# --- from_hf_config: the table and its errors --------------------------------------------------


def test_supported_model_types_are_generated_from_the_table():
    assert list(SUPPORTED_MODEL_TYPES) == sorted(SUPPORTED_MODEL_TYPES)
    table = supported_models_markdown()
    for name in SUPPORTED_MODEL_TYPES:
        assert f"| `{name}` |" in table
    # one row per type, one per layer type where the layers differ
    rows = sum(1 if isinstance(s, str) else len(s) for _, s in _CONVERTERS.values())
    assert len(table.splitlines()) == rows + 2


def test_unsupported_model_type_names_it_and_lists_the_supported():
    with pytest.raises(ValueError, match="'no_such_model' is not supported") as err:
        from_hf_config({"model_type": "no_such_model"})
    assert all(name in str(err.value) for name in SUPPORTED_MODEL_TYPES)


@pytest.mark.parametrize(
    ("config", "kwargs", "error", "match"),
    [
        ({"hidden_size": 64}, {}, ValueError, "no 'model_type'"),
        (42, {}, TypeError, "got int"),
        ({"model_type": "t5"}, {"causal": "yes"}, TypeError, "causal must be None, True or False"),
        (
            {
                "model_type": "llama",
                "hidden_size": 64,
                "num_attention_heads": 4,
                "rope_theta": 1e4,
                "rope_scaling": {"rope_type": "su"},
            },
            {},
            ValueError,
            "rope_type 'su' is not supported",
        ),
        (
            {
                "model_type": "llama",
                "hidden_size": 64,
                "num_attention_heads": 4,
                "rope_theta": 1e4,
                "rope_scaling": {"rope_type": "linear"},
            },
            {},
            ValueError,
            "needs a 'factor'",
        ),
        (
            {
                "model_type": "llama",
                "hidden_size": 64,
                "num_attention_heads": 4,
                "rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "llama_4_scaling_beta": 0.1},
            },
            {},
            ValueError,
            "has 'llama_4_scaling_beta' but no 'original_max_position_embeddings'",
        ),
        (
            {
                "model_type": "llama",
                "hidden_size": 64,
                "num_attention_heads": 4,
                "original_max_position_embeddings": 32,
                "rope_parameters": {
                    **{"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0, "llama_4_scaling_beta": 0.1},
                    "original_max_position_embeddings": 64,
                },
            },
            {},
            ValueError,
            "the top-level original_max_position_embeddings differs from rope_parameters's",
        ),
        (
            {
                "model_type": "falcon",
                "hidden_size": 64,
                "num_attention_heads": 4,
                "partial_rotary_factor": 0.5,
            },
            {},
            ValueError,
            "rotate the whole head",
        ),
        (  # Llama's code reads no partial_rotary_factor: it rotates whole heads whatever the field says
            {
                "model_type": "llama",
                "hidden_size": 64,
                "num_attention_heads": 4,
                "rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5},
            },
            {},
            ValueError,
            r"partial_rotary_factor=0.5, but transformers' llama is not among .* rotate the whole head",
        ),
        (  # ESM's rotary computes default frequencies from rope_theta whatever a rope_parameters dict says
            {
                "model_type": "esm",
                "hidden_size": 64,
                "num_attention_heads": 4,
                "position_embedding_type": "rotary",
                "rope_parameters": {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0},
            },
            {},
            ValueError,
            "ESM's code computes the default frequencies from rope_theta alone",
        ),
        (
            {"model_type": "llama", "hidden_size": 60, "num_attention_heads": 8, "rope_theta": 1e4},
            {},
            ValueError,
            "not a multiple",
        ),
        (
            {"model_type": "gptj", "n_embd": 64, "n_head": 4, "rotary_dim": 7},
            {},
            ValueError,
            "rotary_dim must be",
        ),
        (
            {"model_type": "gpt_neox", "hidden_size": 64, "num_attention_heads": 4, "rotary_pct": 0.2},
            {},
            ValueError,
            "positive even number",
        ),
        (
            {"model_type": "mpt", "attn_config": {"alibi": False}},
            {},
            ValueError,
            "attn_config.alibi is False",
        ),
        (
            {"model_type": "gemma3", "rope_parameters": {"full_attention": {}, "sliding_attention": {}}},
            {},
            ValueError,
            # (no text_config: its class builds its default text model, which needs its sizes)
            "gemma3_text config: missing 'num_hidden_layers'",
        ),
        (
            {
                "model_type": "qwen2",
                "hidden_size": 64,
                "num_attention_heads": 4,
                "rope_parameters": {"a": {}, "b": {}},
            },
            {},
            ValueError,
            "per layer type",
        ),
        (
            {"model_type": "gpt2", "n_embd": -3},
            {},
            ValueError,
            "gpt2 config: n_embd must be a positive int, got -3",
        ),
        (
            {"model_type": "gpt2", "n_embd": "768"},
            {},
            TypeError,
            "gpt2 config: n_embd must be a positive int",
        ),
        (
            {"model_type": "speech_to_text", "pad_token_id": -1},
            {},
            ValueError,
            "speech_to_text config: pad_token_id must be >= 0, got -1",
        ),
        # (the classes that nest legacy keys by layer type, by table and by rule)
        (
            {"model_type": "gemma3_text", "num_hidden_layers": 2, "rope_parameters": "x"},
            {},
            TypeError,
            "rope_parameters must be a dict",
        ),
        ({"model_type": "olmo3", "rope_parameters": [1, 2]}, {}, TypeError, "rope_parameters must be a dict"),
        (
            {"model_type": "olmo3", "rope_scaling": "linear"},
            {},
            TypeError,
            "rope_scaling must be a dict, got str",
        ),
        (
            {"model_type": "t5gemma2_text", "rope_parameters": {"full_attention": 3}},
            {},
            TypeError,
            r"rope_parameters\['full_attention'\] must be a dict, got int",
        ),
    ],
)
def test_from_hf_config_errors(config, kwargs, error, match):
    with pytest.raises(error, match=match):
        from_hf_config(config, **kwargs)


def test_explicit_null_head_dim_means_hidden_over_heads():
    """Gemma 3 defaults head_dim to 256, but an explicit null means hidden_size // heads."""
    gemma3 = {
        "model_type": "gemma3_text",
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_hidden_layers": 1,
    }
    assert from_hf_config(gemma3, layer=0).head_dim == 256
    assert from_hf_config({**gemma3, "head_dim": None}, layer=0).head_dim == 64


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"model_type": "gpt2"}, "n_embd"),
        ({"model_type": "t5"}, "num_heads"),
        ({"model_type": "bart"}, "d_model"),
    ],
)
def test_a_null_old_name_reads_as_left_out(config, key):
    """``"n_embd": null`` without ``hidden_size``: the default, as without the key (it was a KeyError)."""
    assert repr(from_hf_config({**config, key: None})) == repr(from_hf_config(config))


def test_dict_path_needs_no_transformers(monkeypatch):
    """A config.json dict converts with transformers made unimportable."""
    for name in [m for m in sys.modules if m == "transformers" or m.startswith("transformers.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    with pytest.raises(ImportError):
        importlib.import_module("transformers")
    rope = from_hf_config(
        {
            "model_type": "llama",
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "max_position_embeddings": 131072,
            "rope_theta": 500000.0,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
        }
    )
    assert isinstance(rope, posenc.RoPE)
    assert isinstance(from_hf_config({"model_type": "t5", "num_heads": 8}), posenc.RelativeBias)
    assert isinstance(from_hf_config({"model_type": "bloom", "n_head": 8}), posenc.ALiBi)
    assert isinstance(from_hf_config({"model_type": "opt"}), posenc.Learned)
    assert isinstance(from_hf_config({"model_type": "marian"}), posenc.Sinusoidal)


# --- tiny models: one table of configs drives the tests below ----------------------------------

_DECODER = {"num_hidden_layers": 1, "intermediate_size": 32, "vocab_size": 64}
#: Small sizes for each supported model type (the keys each config class understands).
TINY: dict[str, dict] = {
    "llama": {
        **_DECODER,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32,
    },
    "mistral": {
        **_DECODER,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32,
    },
    "mistral4": {
        **_DECODER,
        "hidden_size": 64,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
        "v_head_dim": 8,
        "kv_lora_rank": 16,
        "q_lora_rank": None,
        "moe_intermediate_size": 16,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "max_position_embeddings": 64,
    },
    "nanochat": {
        **_DECODER,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32,
    },
    "mixtral": {
        **_DECODER,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32,
        "num_local_experts": 2,
        "num_experts_per_tok": 1,
    },
    "qwen2": {
        **_DECODER,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32,
    },
    "qwen3": {
        **_DECODER,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
    },
    "gemma": {
        **_DECODER,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 24,
    },
    "gemma2": {
        **_DECODER,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
    },
    "olmo": {**_DECODER, "hidden_size": 64, "num_attention_heads": 4, "rope_theta": 20000.0},
    "starcoder2": {**_DECODER, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2},
    "granite": {**_DECODER, "hidden_size": 64, "num_attention_heads": 4},
    "cohere": {**_DECODER, "hidden_size": 64, "num_attention_heads": 4},
    "phi": {**_DECODER, "hidden_size": 64, "num_attention_heads": 4},
    "phi3": {
        **_DECODER,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
    },
    "stablelm": {**_DECODER, "hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 2},
    "persimmon": {**_DECODER, "hidden_size": 64, "num_attention_heads": 4},
    "gpt_neox": {
        **_DECODER,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "rotary_pct": 0.5,
        "rotary_emb_base": 5000,
    },
    "falcon": {"num_hidden_layers": 1, "vocab_size": 64, "hidden_size": 64, "num_attention_heads": 4},
    "roformer": {
        "num_hidden_layers": 1,
        "vocab_size": 64,
        "hidden_size": 64,
        "embedding_size": 64,
        "num_attention_heads": 4,
        "max_position_embeddings": 64,
    },
    "gptj": {"n_layer": 1, "vocab_size": 64, "n_embd": 64, "n_head": 4, "rotary_dim": 8, "n_positions": 64},
    "codegen": {
        "n_layer": 1,
        "vocab_size": 64,
        "n_embd": 64,
        "n_head": 4,
        "rotary_dim": 8,
        "n_positions": 64,
    },
    "t5": {
        "num_layers": 1,
        "vocab_size": 64,
        "d_model": 32,
        "d_kv": 8,
        "d_ff": 32,
        "num_heads": 4,
        "relative_attention_num_buckets": 8,
        "relative_attention_max_distance": 12,
    },
    "mt5": {"num_layers": 1, "vocab_size": 64, "d_model": 32, "d_kv": 8, "d_ff": 32, "num_heads": 3},
    "umt5": {"num_layers": 1, "vocab_size": 64, "d_model": 32, "d_kv": 8, "d_ff": 32, "num_heads": 3},
    # (their class defaults differ: 12 decoder layers, Switch's experts; sized apart)
    "switch_transformers": {
        "num_layers": 1,
        "num_decoder_layers": 1,
        "vocab_size": 64,
        "d_model": 32,
        "d_kv": 8,
        "d_ff": 32,
        "num_heads": 5,
        "num_experts": 2,
        "relative_attention_num_buckets": 6,
        "relative_attention_max_distance": 10,
    },
    "pop2piano": {"num_layers": 1, "vocab_size": 64, "d_model": 32, "d_kv": 8, "d_ff": 32, "num_heads": 2},
    "bloom": {"n_layer": 1, "vocab_size": 64, "hidden_size": 48, "n_head": 6},
    "mpt": {"n_layers": 1, "vocab_size": 64, "d_model": 48, "n_heads": 6, "max_seq_len": 64},
    "gpt2": {"n_layer": 1, "vocab_size": 64, "n_embd": 32, "n_head": 4, "n_positions": 48},
    "gpt_neo": {
        "num_layers": 1,
        "attention_types": [[["global"], 1]],
        "vocab_size": 64,
        "hidden_size": 32,
        "num_heads": 4,
        "max_position_embeddings": 48,
    },
    "opt": {
        **_DECODER,
        "hidden_size": 32,
        "num_attention_heads": 4,
        "ffn_dim": 32,
        "max_position_embeddings": 48,
    },
    "bart": {
        "encoder_layers": 1,
        "decoder_layers": 1,
        "vocab_size": 64,
        "d_model": 32,
        "max_position_embeddings": 48,
    },
    "mbart": {
        "encoder_layers": 1,
        "decoder_layers": 1,
        "vocab_size": 64,
        "d_model": 32,
        "max_position_embeddings": 48,
    },
    "marian": {
        "encoder_layers": 1,
        "decoder_layers": 1,
        "vocab_size": 64,
        "d_model": 32,
        "max_position_embeddings": 48,
        "pad_token_id": 63,
        "decoder_start_token_id": 63,
    },
    "pegasus": {
        "encoder_layers": 1,
        "decoder_layers": 1,
        "vocab_size": 64,
        "d_model": 32,
        "max_position_embeddings": 48,
    },
    "speech_to_text": {"encoder_layers": 1, "decoder_layers": 1, "vocab_size": 64, "d_model": 32},
    "ctrl": {"n_layer": 1, "vocab_size": 64, "n_embd": 32, "n_head": 2, "dff": 32, "n_positions": 48},
    "fsmt": {
        "encoder_layers": 1,
        "decoder_layers": 1,
        "src_vocab_size": 64,
        "tgt_vocab_size": 64,
        "d_model": 32,
        "encoder_attention_heads": 2,
        "decoder_attention_heads": 2,
        "encoder_ffn_dim": 32,
        "decoder_ffn_dim": 32,
    },
    "m2m_100": {
        "encoder_layers": 1,
        "decoder_layers": 1,
        "vocab_size": 64,
        "d_model": 32,
        "max_position_embeddings": 48,
    },
    "nllb-moe": {
        "encoder_layers": 1,
        "decoder_layers": 1,
        "vocab_size": 64,
        "d_model": 32,
        "encoder_ffn_dim": 32,
        "decoder_ffn_dim": 32,
        "num_experts": 2,
        "max_position_embeddings": 48,
    },
    "kosmos_2_text_model": {
        "layers": 1,
        "vocab_size": 64,
        "embed_dim": 32,
        "ffn_dim": 32,
        "attention_heads": 4,
        "max_position_embeddings": 48,
    },
    "kosmos_2_5_text_model": {
        "layers": 1,
        "vocab_size": 64,
        "embed_dim": 32,
        "ffn_dim": 32,
        "attention_heads": 4,
        "max_position_embeddings": 48,
    },
    "tipsv2_text_model": {
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "intermediate_size": 32,
        "vocab_size": 64,
        "max_position_embeddings": 24,
    },
    "pegasus_x": {
        "encoder_layers": 1,
        "decoder_layers": 1,
        "vocab_size": 64,
        "d_model": 32,
        "encoder_ffn_dim": 32,
        "decoder_ffn_dim": 32,
        "encoder_attention_heads": 4,
        "decoder_attention_heads": 4,
        "max_position_embeddings": 48,
    },
    "xglm": {
        "num_layers": 1,
        "vocab_size": 64,
        "d_model": 32,
        "attention_heads": 4,
        "max_position_embeddings": 48,
    },
    # (proven inside the model, both tables, in tests/hf/test_absolute.py)
    "trocr": {"decoder_layers": 1, "vocab_size": 64, "d_model": 32, "max_position_embeddings": 48},
    # (proven inside the model, and their own module (MusicGen's after a cache), in tests/hf/test_absolute.py)
    **{
        name: {
            "num_hidden_layers": 1,
            "vocab_size": 64,
            "hidden_size": 32,
            "num_attention_heads": 4,
            "max_position_embeddings": 48,
        }
        for name in ("musicgen_decoder", "musicgen_melody_decoder", "canary_decoder")
    },
}


# Model types whose layers differ or that tests/hf/test_layers.py proves inside a model (DeepSeek V4:
# tests/hf/test_deepseek_v4.py, against its rotary module and apply function).
LAYERED_MODEL_TYPES = [
    "cohere2", "deepseek_v4", "dots3_note_text", "gemma3_text", "gemma3n_text", "gemma4_text", "llama4_text",
    "modernbert", "smollm3",
]  # fmt: skip
# M-RoPE text models (proven below against transformers' rotary embeddings) and the conformer
# speech encoders (proven in tests/hf/test_speech.py, one layer's whole attention).
MROPE_MODEL_TYPES = ["qwen2_5_vl_text", "qwen2_vl_text", "qwen3_vl_moe_text", "qwen3_vl_text"]
SPEECH_MODEL_TYPES = [
    "fastspeech2_conformer",  # (tests/hf/test_speech.py, both stacks)
    "seamless_m4t",
    "seamless_m4t_v2",
    "wav2vec2-bert",
    "wav2vec2-conformer",
    "parakeet_encoder",
    "speecht5",
    "vits",  # (its text encoder: tests/hf/test_speech.py)
]
# proven below against their own RoPE modules and position tables (Llama 4's and SAM's: tests/hf/test_vision.py)
VISION_MODEL_TYPES = [
    "deit", "dinov2", "dinov2_with_registers", "dinov3_vit", "eomt_dinov3", "llama4_vision_model", "pixtral",
    "edgetam_video", "efficientloftr", "sam2_video", "sam3_tracker_video", "sam3_vit_model", "siglip_vision_model",
    "siglip2_vision_model", "vit",
    # ViT's kin (test_vision_learned_tables_are_copied_and_resampled_as_the_model_does)
    "altclip_vision_model", "chinese_clip_vision_model", "clip_vision_model", "clipseg_vision_model",
    "metaclip_2_vision_model", "xclip_vision_model", "flava_image_model", "git_vision_model", "vit_mae", "vit_msn",
    "blip_2_vision_model", "instructblip_vision_model", "instructblipvideo_vision_model", "blip_vision_model",
    "internvl_vision", "qianfan_ocr_vision", "owlvit_vision_model", "owlv2_vision_model", "groupvit_vision_model",
    "ijepa", "janus_vision_model", "granite_docling_vision", "tipsv2_vision_model", "pixio",
    # NaViT's look-up (test_navit_towers_read_their_table_by_bucketized_fractions_as_the_model_does, and ..._quotients)
    "idefics2_vision", "idefics3_vision", "smolvlm_vision", "phi4_multimodal_vision", "minicpm_ocr_vision",
    "minicpmv4_6_vision", "minicpmv4_7_vision",
]  # fmt: skip
# encoder-decoders whose stacks differ (stack= required): proven per stack in tests/hf/test_stacks.py (Cohere ASR's
# decoder table in tests/hf/test_absolute.py, its encoder refused for its encoder_config)
STACKED_MODEL_TYPES = [
    "led", "whisper", "cohere_asr", "time_series_transformer", "informer", "autoformer",
    "longt5",  # (test_longt5_decoder_bias_is_t5s_and_its_encoder_refused, here)
    "pix2struct_text_model",  # (test_pix2struct_text_bias_is_t5s_causal_one, here)
]  # fmt: skip
# hybrids whose attention adds no position: proven NoPE in tests/hf/test_layers.py
NOPE_MODEL_TYPES = ["glm5_next_text", "jamba", "kimi_linear", "nemotron_h", "zamba"]
OTHER_PROVEN = [
    *LAYERED_MODEL_TYPES, *MROPE_MODEL_TYPES, *SPEECH_MODEL_TYPES, *VISION_MODEL_TYPES, *STACKED_MODEL_TYPES,
    *NOPE_MODEL_TYPES,
]  # fmt: skip
SINGLE_MODEL_TYPES = [name for name in SUPPORTED_MODEL_TYPES if name not in OTHER_PROVEN]
# RoPE models outside the table, converted by rule from their fields and proven inside a model here
# (DeepSeek V2/V3 and GPT-OSS, also by rule, are proven in tests/hf/test_layers.py).
RULE_MODEL_TYPES = [
    "cohere", "gemma", "gemma2", "granite", "llama", "mistral", "mixtral", "olmo", "persimmon", "phi", "qwen2",
    "qwen3", "stablelm", "starcoder2", "nanochat",
]  # fmt: skip


def test_tiny_table_covers_every_supported_type():
    assert sorted([*TINY, *OTHER_PROVEN]) == sorted([*SUPPORTED_MODEL_TYPES, *RULE_MODEL_TYPES])
    assert not set(RULE_MODEL_TYPES) & set(SUPPORTED_MODEL_TYPES)


def _hf_config(model_type: str, **overrides):
    return transformers.AutoConfig.for_model(model_type, **{**TINY[model_type], **overrides})


def _probe(
    pe: posenc.PositionalEncoding, length: int, *, heads: int = 2, head_dim: int | None, d_model: int | None
):
    """What an encoding computes for fixed random inputs of ``length`` tokens (whole tensors)."""
    gen = torch.Generator().manual_seed(1)
    if pe.kind == "rotary":
        q = torch.randn(2, heads, length, head_dim, generator=gen)
        k = torch.randn(2, heads, length, head_dim, generator=gen)
        return torch.cat(pe.encode_qk(q, k))
    if pe.kind == "bias":
        q = torch.randn(1, heads, length, 8, generator=gen)
        return pe.attention_bias(q, q)
    return pe.encode_input(torch.zeros(1, length, d_model))


def _sizes(cfg) -> dict:
    """(heads, head_dim, d_model) for _probe, from a transformers config object."""
    heads = getattr(cfg, "num_attention_heads", None)
    d_model = getattr(cfg, "hidden_size", None)
    head_dim = getattr(cfg, "head_dim", None) or (d_model // heads if heads and d_model else None)
    return {"heads": heads or 1, "head_dim": head_dim, "d_model": d_model}


def _same_encoding(a: posenc.PositionalEncoding, b: posenc.PositionalEncoding, length: int, **sizes):
    assert type(a) is type(b)
    b.load_state_dict(a.state_dict())  # learned tables are random: compare the computation, not the init
    torch.testing.assert_close(_probe(a, length, **sizes), _probe(b, length, **sizes), atol=0, rtol=0)


@requires_transformers
@pytest.mark.parametrize("model_type", SINGLE_MODEL_TYPES)
def test_config_json_defaults_match_transformers(model_type):
    """A bare {"model_type": ...} dict gives what transformers' config class defaults give."""
    cfg = transformers.AutoConfig.for_model(model_type)
    sizes = _sizes(cfg)
    sizes["heads"] = min(sizes["heads"], 2)  # the probe needs few heads; biases use the config's own count
    if model_type in BIAS_MODEL_TYPES:
        sizes["heads"] = from_hf_config(cfg).num_heads
    _same_encoding(from_hf_config(cfg), from_hf_config({"model_type": model_type}), 24, **sizes)


@requires_transformers
@pytest.mark.parametrize("model_type", SINGLE_MODEL_TYPES + RULE_MODEL_TYPES)
def test_config_object_and_its_json_agree(model_type):
    """from_hf_config(config) == from_hf_config(the dict config.json would hold), for the tiny configs.

    Table models also fill what a hand-written dict leaves out with the config class's defaults.
    """
    cfg = _hf_config(model_type)
    sizes = _sizes(cfg)
    if model_type in BIAS_MODEL_TYPES:
        sizes["heads"] = from_hf_config(cfg).num_heads
    _same_encoding(from_hf_config(cfg), from_hf_config(cfg.to_diff_dict()), 40, **sizes)
    if model_type in SUPPORTED_MODEL_TYPES:
        tiny = {"model_type": model_type, **TINY[model_type]}
        _same_encoding(from_hf_config(cfg), from_hf_config(tiny), 40, **sizes)


LLAMA_ROPE_TYPES = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 2.0},
    "dynamic": {"rope_type": "dynamic", "factor": 3.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
    "yarn_mscale": {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 16,
        "beta_fast": 16,
        "beta_slow": 2,
        "mscale": 0.8,
        "mscale_all_dim": 0.5,
    },
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16,
    },
    "longrope": {
        "rope_type": "longrope",
        "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.1, 3.8],
        "long_factor": [1.0, 1.5, 2.2, 3.0, 4.1, 5.5, 7.0, 9.0],
        "original_max_position_embeddings": 16,
    },
}


@requires_transformers
@pytest.mark.parametrize("rope_type", [name for name, scaling in LLAMA_ROPE_TYPES.items() if scaling])
def test_legacy_rope_scaling_keys_read_like_rope_parameters(rope_type):
    """An old config.json (rope_scaling with "type", rope_theta at top level) equals the new form."""
    scaling = LLAMA_ROPE_TYPES[rope_type]
    legacy = {k if k != "rope_type" else "type": v for k, v in scaling.items()}
    old = {"model_type": "llama", **TINY["llama"], "rope_theta": 30000.0, "rope_scaling": legacy}
    new = {"model_type": "llama", **TINY["llama"], "rope_parameters": {**scaling, "rope_theta": 30000.0}}
    hf = transformers.LlamaConfig(**TINY["llama"], rope_parameters={**scaling, "rope_theta": 30000.0})
    for length in (12, 40):
        sizes = {"heads": 2, "head_dim": 16, "d_model": None}
        _same_encoding(from_hf_config(old), from_hf_config(new), length, **sizes)
        _same_encoding(from_hf_config(hf), from_hf_config(new), length, **sizes)


# --- proof inside real models: RoPE ------------------------------------------------------------


def _spy_rotary(monkeypatch, model) -> list:
    """Record every (inputs, outputs) of the model file's apply_rotary_pos_emb during a forward pass."""
    module = sys.modules[type(model).__module__]
    original = module.apply_rotary_pos_emb
    calls: list = []

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        calls.append((args, out))
        return out

    monkeypatch.setattr(module, "apply_rotary_pos_emb", spy)
    return calls


def _rotated_qk(calls: list) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q_in, k_in, q_out, k_out) as (b, h, t, r) from the first layer's calls."""
    args, out = calls[0]
    if isinstance(out, tuple):  # apply_rotary_pos_emb(q, k, cos, sin) -> (q, k)
        return args[0], args[1], out[0], out[1]
    # GPT-J / CodeGen: apply_rotary_pos_emb(x, sin, cos) -> x, on (b, t, h, r), keys first then queries
    (k_in, _, _), k_out = calls[0]
    (q_in, _, _), q_out = calls[1]
    return tuple(t.transpose(1, 2) for t in (q_in, k_in, q_out, k_out))


def _check_rope_inside(monkeypatch, config, positions: torch.Tensor) -> None:
    model = transformers.AutoModel.from_config(config).eval()
    calls = _spy_rotary(monkeypatch, model)
    ids = torch.randint(0, 64, (2, positions.shape[-1]), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model(input_ids=ids, position_ids=positions if positions.dim() == 2 else positions.expand(2, -1))
    q_in, k_in, q_out, k_out = _rotated_qk(calls)
    rope = from_hf_config(model.config)
    assert isinstance(rope, posenc.RoPE)
    head_dim = rope.head_dim
    # Some models pass only the rotated channels to apply_rotary_pos_emb: pad with zeros, which
    # posenc must pass through untouched.
    pad = head_dim - q_in.shape[-1]
    q_full, k_full = (torch.nn.functional.pad(t, (0, pad)) for t in (q_in, k_in))
    q_ours, k_ours = rope.encode_qk(q_full, k_full, q_positions=positions, k_positions=positions)
    torch.testing.assert_close(q_ours[..., : q_in.shape[-1]], q_out, **ROPE_TOL)
    torch.testing.assert_close(k_ours[..., : k_in.shape[-1]], k_out, **ROPE_TOL)
    if pad:
        assert not q_ours[..., q_in.shape[-1] :].any() and not k_ours[..., k_in.shape[-1] :].any()


# Which in-model test proves each supported model type (test_every_supported_type_is_proven checks the split).
ROPE_MODEL_TYPES = [
    "llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "olmo", "starcoder2", "granite", "cohere",
    "phi", "phi3", "stablelm", "persimmon", "gpt_neox", "falcon", "gptj", "codegen", "nanochat",
]  # fmt: skip
BIAS_MODEL_TYPES = [
    "t5",
    "mt5",
    "umt5",
    "switch_transformers",
    "pop2piano",
    "bloom",
    "mpt",
]  # + falcon with alibi=True
MLA_MODEL_TYPES = ["mistral4"]  # whole MLA heads: test_mistral4_equals_what_reaches_its_attention
OWN_APPLY_MODEL_TYPES = [
    "roformer"
]  # its own apply function: test_roformer_equals_what_reaches_its_attention
LEARNED_MODEL_TYPES = ["gpt2", "gpt_neo", "opt", "bart", "mbart", "trocr"]
SINUSOIDAL_MODEL_TYPES = [
    "marian",
    "pegasus",
    "speech_to_text",
    "ctrl",
    "m2m_100",
    "fsmt",
    "nllb-moe",
    "kosmos_2_text_model",
    "kosmos_2_5_text_model",
    "xglm",
    "pegasus_x",
    "tipsv2_text_model",
    "musicgen_decoder",
    "musicgen_melody_decoder",
    "canary_decoder",
]


@requires_transformers
def test_every_supported_type_is_proven_inside_a_model():
    rotary = ROPE_MODEL_TYPES + MLA_MODEL_TYPES + OWN_APPLY_MODEL_TYPES
    groups = rotary + BIAS_MODEL_TYPES + LEARNED_MODEL_TYPES + SINUSOIDAL_MODEL_TYPES
    assert sorted(groups + OTHER_PROVEN) == sorted([*SUPPORTED_MODEL_TYPES, *RULE_MODEL_TYPES])
    kinds = {"rotary": rotary, "bias": BIAS_MODEL_TYPES}
    for kind, names in kinds.items():
        assert all(from_hf_config(_hf_config(name)).kind == kind for name in names)
    assert all(isinstance(from_hf_config(_hf_config(n)), posenc.Learned) for n in LEARNED_MODEL_TYPES)
    assert all(isinstance(from_hf_config(_hf_config(n)), posenc.Sinusoidal) for n in SINUSOIDAL_MODEL_TYPES)


@requires_transformers
def test_roformer_equals_what_reaches_its_attention(monkeypatch):
    """RoFormer rotates with its own sinusoidal table and apply_rotary_position_embeddings (neighbouring pairs),
    queries and keys of self-attention; with rotary_value it rotates the values too, which posenc refuses."""
    config = _hf_config("roformer")
    model = transformers.AutoModel.from_config(config).eval()
    attention = type(model.encoder.layer[0].attention.self)
    original, calls = attention.apply_rotary_position_embeddings, []

    def spy(sinusoidal_pos, query, key, value=None):
        out = original(sinusoidal_pos, query, key, value)
        calls.append(((query, key), out))
        return out

    monkeypatch.setattr(attention, "apply_rotary_position_embeddings", staticmethod(spy))
    ids = torch.randint(0, 64, (2, 37), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model(input_ids=ids)
    (q_in, k_in), (q_out, k_out) = calls[0]
    for form in (config, config.to_dict()):
        rope = from_hf_config(form)
        assert (rope.head_dim, rope.layout, rope.base) == (16, "interleaved", 10000.0)
        q_ours, k_ours = rope.encode_qk(q_in, k_in)
        torch.testing.assert_close(q_ours, q_out, **ROPE_TOL)
        torch.testing.assert_close(k_ours, k_out, **ROPE_TOL)
    with pytest.raises(ValueError, match="rotary_value=True rotates the values too"):
        from_hf_config(_hf_config("roformer", rotary_value=True))


@requires_transformers
@pytest.mark.parametrize("model_type", ROPE_MODEL_TYPES)
def test_rope_equals_the_models_rotation(monkeypatch, model_type):
    """Per-row positions (a KV-cache offset in row 1): rotated q/k equal the model's own."""
    length = 13
    positions = torch.stack([torch.arange(length), torch.arange(length) + 7])
    _check_rope_inside(monkeypatch, _hf_config(model_type), positions)


@requires_transformers
@pytest.mark.parametrize(
    ("rope_type", "length"),
    [
        ("default", 12),
        ("linear", 12),
        ("dynamic", 12),  # below max_position_embeddings: the base is unchanged
        ("dynamic", 45),  # above it: NTK-scaled base, from the longest position
        ("yarn", 20),
        ("yarn_mscale", 20),
        ("llama3", 20),
        ("longrope", 12),  # short factors
        ("longrope", 45),  # long factors
    ],
)
def test_llama_rope_types_equal_the_models_rotation(monkeypatch, rope_type, length):
    scaling = LLAMA_ROPE_TYPES[rope_type]
    config = _hf_config(
        "llama", rope_parameters={**(scaling or {"rope_type": "default"}), "rope_theta": 10000.0}
    )
    _check_rope_inside(monkeypatch, config, torch.arange(length))


@requires_transformers
def test_phi3_longrope_equals_the_models_rotation(monkeypatch):
    """Phi-3 keeps original_max_position_embeddings outside the dict; longrope picks its factor list."""
    scaling = {
        "rope_type": "longrope",
        "short_factor": [1.0 + i / 10 for i in range(8)],
        "long_factor": [1.0 + i for i in range(8)],
    }
    for length in (12, 40):
        config = _hf_config(
            "phi3", rope_parameters=scaling, original_max_position_embeddings=16, max_position_embeddings=64
        )
        _check_rope_inside(monkeypatch, config, torch.arange(length))


@requires_transformers
@pytest.mark.parametrize("model_type", ["hunyuan_v1_dense", "hunyuan_v1_moe"])
def test_hunyuan_ntk_alpha_equals_the_models_rotation(monkeypatch, model_type):
    """Hunyuan's checkpoints say "dynamic" with a fixed alpha: a static NTK base, yarn keys unread."""
    scaling = {"rope_type": "dynamic", "rope_theta": 1e4, "alpha": 1000.0, "factor": 1.0, "beta_fast": 32}
    config = transformers.AutoConfig.for_model(
        model_type, **_DECODER, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        rope_parameters=scaling,
    )  # fmt: skip
    _check_rope_inside(monkeypatch, config, torch.arange(40))
    assert from_hf_config(config.to_dict()).scaling == from_hf_config(config).scaling
    # other models' code reads no alpha: still refused, naming it
    with pytest.raises(ValueError, match="'alpha'"):
        from_hf_config({**_hf_config("llama").to_dict(), "rope_parameters": scaling})


@pytest.mark.parametrize(
    "scaling",
    [
        {"rope_type": "default"},
        {"rope_type": "linear", "factor": 2.0},
        {"rope_type": "proportional", "partial_rotary_factor": 0.5},
        {"rope_type": "yarn", "factor": 4.0},
    ],
)
def test_llama_4_scaling_beta_is_carried_with_every_rope_type(scaling):
    params = {
        **scaling,
        "rope_theta": 1e4,
        "llama_4_scaling_beta": 0.1,
        "original_max_position_embeddings": 8,
    }
    config = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "rope_parameters": params}
    rope = from_hf_config(config)
    assert (rope.params.query_scale_beta, rope.params.query_scale_len) == (0.1, 8)


@requires_transformers
def test_ministral3_query_scaling_equals_what_reaches_the_models_attention(monkeypatch):
    """Ministral 3 multiplies its rotated queries by 1 + beta * log(1 + floor(p / L)) (its rope dict's
    llama_4_scaling_beta and original_max_position_embeddings): compared at the attention's inputs."""
    config = transformers.AutoConfig.for_model(
        "ministral3", **_DECODER, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    )  # fmt: skip
    config.rope_parameters |= {"original_max_position_embeddings": 8, "factor": 4.0}
    config._attn_implementation = "eager"
    model = transformers.AutoModel.from_config(config).eval()
    module = sys.modules[type(model).__module__]
    rotated = _spy_rotary(monkeypatch, model)
    attended: list = []
    eager = module.eager_attention_forward

    def spy(layer, query, key, *args, **kwargs):
        attended.append((query, key))
        return eager(layer, query, key, *args, **kwargs)

    monkeypatch.setattr(module, "eager_attention_forward", spy)
    positions = torch.stack([torch.arange(40), torch.arange(40) + 7])  # up to 46: scales up to 1.18
    with torch.no_grad():
        model(
            input_ids=torch.randint(0, 64, (2, 40), generator=torch.Generator().manual_seed(0)),
            position_ids=positions,
        )
    (q_in, k_in, *_), _ = rotated[0]
    for rope in (from_hf_config(config), from_hf_config(config.to_dict())):
        q, k = rope.encode_qk(q_in, k_in, q_positions=positions, k_positions=positions)
        torch.testing.assert_close(q, attended[0][0], **ROPE_TOL)
        torch.testing.assert_close(k, attended[0][1], **ROPE_TOL)
    assert not torch.allclose(
        q, rotated[0][1][0], **ROPE_TOL
    )  # (the scaling is seen: it is not RoPE's alone)


@requires_transformers
@pytest.mark.parametrize("interleave", [True, None])
def test_mistral4_equals_what_reaches_its_attention(monkeypatch, interleave):
    """Mistral 4's MLA: the last qk_rope_head_dim channels of [nope | rope] heads rotated (in pairs, or in
    halves where rope_interleave is null), then the whole query scaled by llama_4_scaling_beta; compared at its
    attention's inputs (scores: its interleaved apply returns the pairs as halves), past the trained length."""
    config = _hf_config("mistral4", rope_interleave=interleave)
    config.rope_parameters |= {"original_max_position_embeddings": 8, "factor": 4.0}
    config._attn_implementation = "eager"
    model = transformers.AutoModel.from_config(config).eval()
    module = sys.modules[type(model).__module__]
    attn = model.layers[0].self_attn
    seen: dict = {}
    attn.q_proj.register_forward_hook(lambda _, args, out: seen.setdefault("q", out))
    for name in ("apply_rotary_pos_emb", "apply_rotary_pos_emb_interleave", "eager_attention_forward"):
        original = getattr(module, name)

        def spy(*args, _name=name, _original=original, **kwargs):
            seen[_name] = args
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, name, spy)
    positions = torch.stack([torch.arange(30), torch.arange(30) + 7])  # scales up to 1.16
    with torch.no_grad():
        model(
            input_ids=torch.randint(0, 64, (2, 30), generator=torch.Generator().manual_seed(0)),
            position_ids=positions,
        )
    _, query, key, *_ = seen["eager_attention_forward"]
    k_rot = seen["apply_rotary_pos_emb_interleave" if interleave else "apply_rotary_pos_emb"][1]
    q_in = seen["q"].view(2, 30, 2, 24).transpose(1, 2)  # (b, h, t, nope + rope)
    k_in = torch.cat([key[..., :16], k_rot.expand(-1, 2, -1, -1)], -1)  # its keys, the rope part unrotated
    for rope in (from_hf_config(config), from_hf_config(config.to_dict())):
        assert (rope.rotary_dim, rope.rotary_offset, rope.layout) == (
            8,
            16,
            "interleaved" if interleave else "half",
        )
        q, k = rope.encode_qk(q_in, k_in, q_positions=positions, k_positions=positions)
        torch.testing.assert_close(q[..., :16], query[..., :16], **ROPE_TOL)  # the unrotated channels, scaled
        torch.testing.assert_close(q @ k.mT, query @ key.mT, **ROPE_TOL)
    assert not torch.allclose(q[..., :16], q_in[..., :16], **ROPE_TOL)  # (the scaling is seen)


@requires_transformers
def test_mistral4_refusals_name_what_its_code_does():
    base = {"model_type": "mistral4", "qk_nope_head_dim": 16, "qk_rope_head_dim": 8}
    with pytest.raises(ValueError, match=r"rope_type 'default' with qk_nope_head_dim=16: its code computes"):
        from_hf_config({**base, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}})
    yarn = {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 8,
        "partial_rotary_factor": 0.5,
    }
    with pytest.raises(
        ValueError, match=r"partial_rotary_factor'\]=0.5 does not give qk_rope_head_dim=8 of the 24"
    ):
        from_hf_config({**base, "rope_parameters": yarn})


@requires_transformers
@pytest.mark.parametrize(
    ("config_name", "module", "rotary"),
    [
        ("RecurrentGemmaConfig", "recurrent_gemma", "RecurrentGemmaRotaryEmbedding"),
        ("Ernie4_5_VLMoeTextConfig", "ernie4_5_vl_moe", "Ernie4_5_VLMoeTextRotaryEmbedding"),
    ],
)
def test_a_scaling_is_refused_where_the_models_rotary_takes_the_default_type_alone(
    config_name, module, rotary
):
    """RecurrentGemma's and ERNIE 4.5 VL's rotary modules raise on any rope type but "default": posenc refuses such a
    config too (it built a YaRN rotation for a model that cannot run it), as object and as config.json dict."""
    config = getattr(transformers, config_name)(hidden_size=64, num_attention_heads=2, num_key_value_heads=2)
    if module == "ernie4_5_vl_moe":  # (its (h, w, t) sections, for the 16 pairs of a 32-wide head)
        config.rope_parameters = {**config.rope_parameters, "mrope_section": [6, 6, 4]}
    default = from_hf_config(config)
    config.rope_parameters = {**config.rope_parameters, "rope_type": "yarn", "factor": 4.0}
    own = getattr(importlib.import_module(f"transformers.models.{module}.modeling_{module}"), rotary)
    with pytest.raises(ValueError, match="default"):
        own(config)
    for form in (config, config.to_dict()):
        with pytest.raises(ValueError, match=r"rope_type='yarn', but .* takes the default type alone"):
            from_hf_config(form)
    assert default.rope_type == "default"


@requires_transformers
def test_dinov3_equals_its_rope_on_patches_at_any_resolution():
    """DINOv3ViT: 2D RoPE on patch centres in (-1, 1), CLS and register tokens unrotated; at its
    image size and at another, non-square one (its code recomputes the centres from the pixels)."""
    from transformers.models.dinov3_vit import modeling_dinov3_vit as hf

    config = transformers.DINOv3ViTConfig(
        hidden_size=64, num_attention_heads=2, num_register_tokens=4, image_size=64
    )
    module = hf.DINOv3ViTRopePositionEmbedding(config).eval()
    for rope in (from_hf_config(config), from_hf_config(config.to_dict())):
        assert isinstance(rope, posenc.AxialRoPE) and rope.num_prefix_tokens == 5
        for height, width in ((64, 64), (96, 48)):
            cos, sin = module(torch.zeros(1, 3, height, width))
            gen = torch.Generator().manual_seed(height)
            q, k = (torch.randn(2, 2, 5 + cos.shape[0], 32, generator=gen) for _ in range(2))
            coords = rope.grid_positions((height // 16, width // 16))
            ours = rope.encode_qk(q, k, q_positions=coords, k_positions=coords)
            torch.testing.assert_close(ours, hf.apply_rotary_pos_emb(q, k, cos, sin), **ROPE_TOL)
    # a bare config.json gets the config class's defaults
    assert repr(from_hf_config({"model_type": "dinov3_vit"})) == repr(
        from_hf_config(transformers.DINOv3ViTConfig())
    )


@requires_transformers
def test_eomt_dinov3_leaves_its_queries_unrotated_in_its_last_blocks():
    """EoMT's DINOv3 backbone: DINOv3's rotation (base in rope_parameters) after the class and register tokens;
    its last num_blocks layers put num_queries query tokens first, unrotated too (its forward)."""
    from transformers.models.eomt_dinov3 import modeling_eomt_dinov3 as hf

    config = transformers.AutoConfig.for_model(
        "eomt_dinov3", hidden_size=64, num_attention_heads=2, num_hidden_layers=3, num_blocks=1, num_queries=5,
        rope_parameters={"rope_type": "default", "rope_theta": 50.0},
    )  # fmt: skip
    module = hf.EomtDinov3RotaryEmbedding(config).eval()
    cos, sin = module(torch.zeros(1, 3, 64, 48))
    for form in (config, config.to_dict()):
        layers = posenc.hf.layer_encodings(form)
        assert [e.num_prefix_tokens for e in layers] == [5, 5, 10] and layers[0] is layers[1]
        for rope in layers[1:]:
            assert isinstance(rope, posenc.AxialRoPE) and rope.base == 50.0
            q, k = (torch.randn(2, 2, rope.num_prefix_tokens + 12, 32) for _ in range(2))
            coords = rope.grid_positions((4, 3))
            ours = rope.encode_qk(q, k, q_positions=coords, k_positions=coords)
            torch.testing.assert_close(ours, hf.apply_rotary_pos_emb(q, k, cos, sin), **ROPE_TOL)
    # a bare config.json gets the config class's defaults
    bare = posenc.hf.layer_encodings({"model_type": "eomt_dinov3"})
    assert list(map(repr, bare)) == list(
        map(repr, posenc.hf.layer_encodings(transformers.EomtDinov3Config()))
    )
    with pytest.raises(ValueError, match=r"rope_parameters must be \{'rope_type': 'default'"):
        from_hf_config({"model_type": "eomt_dinov3", "rope_parameters": {"rope_type": "yarn", "factor": 2.0}})


@requires_transformers
def test_pixtral_equals_its_rope_on_packed_images():
    """Pixtral's vision encoder: alternating 2D frequencies on (row, column) of each image's patches;
    two images of different sizes packed in one sequence, as its encoder concatenates them."""
    from transformers.models.pixtral import modeling_pixtral as hf

    config = transformers.PixtralVisionConfig(
        hidden_size=64, num_attention_heads=2, head_dim=32, image_size=64
    )
    module = hf.PixtralVisionRotaryEmbedding(config)
    coords = torch.cat([posenc.functional.grid_positions((4, 3)), posenc.functional.grid_positions((2, 4))])
    q, k = (torch.randn(1, 2, 20, 32, generator=torch.Generator().manual_seed(i)) for i in range(2))
    cos, sin = module(q, coords)
    for rope in (from_hf_config(config), from_hf_config(config.to_dict())):
        ours = rope.encode_qk(q, k, q_positions=coords, k_positions=coords)
        torch.testing.assert_close(ours, hf.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=0), **ROPE_TOL)
    assert repr(from_hf_config({"model_type": "pixtral"})) == repr(
        from_hf_config(transformers.PixtralVisionConfig())
    )
    # (its class reads rope_type "default" as its default_rope_type, "axial"; any other is refused)
    default = {"model_type": "pixtral", "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}
    assert repr(from_hf_config(default)) == repr(from_hf_config(transformers.PixtralVisionConfig(**default)))
    with pytest.raises(ValueError, match="rope_parameters must be"):
        from_hf_config({"model_type": "pixtral", "rope_parameters": {"rope_type": "linear", "factor": 2.0}})


@requires_transformers
def test_granite_swa_rotates_each_layer_at_its_own_base_and_nope_at_zero(monkeypatch):
    """Granite SWA's layer_rope_theta: a base per layer, 0 for NoPE; each RoPE layer equals the
    rotation the model computes for that base, and the NoPE layers get no position embeddings there."""
    from transformers.models.granite_swa import modeling_granite_swa as hf

    thetas = [1e4, 0, 5e5, 1e4]
    config = transformers.AutoConfig.for_model(
        "granite_swa", **{**_DECODER, "num_hidden_layers": 4}, hidden_size=64, num_attention_heads=4,
        num_key_value_heads=2, layer_rope_theta=thetas,
    )  # fmt: skip
    for form in (config, config.to_dict()):
        layers = posenc.hf.layer_encodings(form)
        assert [type(e).__name__ for e in layers] == ["RoPE", "NoPE", "RoPE", "RoPE"]
        assert [e.base for e in layers if isinstance(e, posenc.RoPE)] == [1e4, 5e5, 1e4]
    model = transformers.AutoModel.from_config(config).eval()
    seen: list = []
    for layer in model.layers:
        layer.register_forward_pre_hook(
            lambda m, a, kw: seen.append(kw.get("position_embeddings")), with_kwargs=True
        )
    q, k = (torch.randn(1, 4, 9, 16, generator=torch.Generator().manual_seed(i)) for i in range(2))
    with torch.no_grad():
        model(input_ids=torch.arange(9)[None])
    for encoding, embeddings in zip(posenc.hf.layer_encodings(config), seen, strict=True):
        if isinstance(encoding, posenc.NoPE):
            assert embeddings is None
            continue
        cos, sin = embeddings
        torch.testing.assert_close(
            encoding.encode_qk(q, k), hf.apply_rotary_pos_emb(q, k, cos, sin), **ROPE_TOL
        )


@requires_transformers
def test_molmo2_scales_rope_only_in_its_rope_scaling_layers():
    from transformers.models.molmo2 import modeling_molmo2 as hf

    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "rope_theta": 1e4}
    config = transformers.AutoConfig.for_model(
        "molmo2_text", **{**_DECODER, "num_hidden_layers": 3}, hidden_size=64, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=64, rope_parameters=yarn,
        rope_scaling_layers=[0, 2],
    )  # fmt: skip
    positions = torch.arange(40)[None]
    q, k = (torch.randn(1, 4, 40, 16, generator=torch.Generator().manual_seed(i)) for i in range(2))
    want = {
        scaled: hf.apply_rotary_pos_emb(q, k, *hf.Molmo2RotaryEmbedding(config, scaled=scaled)(q, positions))
        for scaled in (True, False)
    }
    for form in (config, config.to_dict()):
        for i, encoding in enumerate(posenc.hf.layer_encodings(form)):
            got = encoding.encode_qk(q, k, q_positions=positions[0], k_positions=positions[0])
            torch.testing.assert_close(got, want[i != 1], **ROPE_TOL)
    assert not torch.allclose(want[True][0], want[False][0], **ROPE_TOL)


@requires_transformers
@pytest.mark.parametrize("model_type", ["muse_glimmer_text", "muse_spark_text"])
def test_muse_nope_every_fourth_layer_from_the_last_and_one_base(model_type):
    """Muse rotates at the global rope_theta wherever layer_rope_theta is not 0; a dict without the list
    gets its config class's default (NoPE every 4th layer counted back from the last)."""
    config = transformers.AutoConfig.for_model(model_type, num_hidden_layers=6)
    flat = config.to_dict()
    del flat["layer_rope_theta"]
    for form in (config, config.to_dict(), flat):
        kinds = [type(e).__name__ for e in posenc.hf.layer_encodings(form)]
        assert kinds == ["RoPE", "NoPE", "RoPE", "RoPE", "RoPE", "NoPE"], kinds
    other = {**config.to_dict(), "layer_rope_theta": [5.0, 0, 1e4, 1e4, 1e4, 0]}
    with pytest.raises(ValueError, match="reads only which entries are 0"):
        posenc.hf.layer_encodings(other)


#: ViT's kin among vision towers: model type -> prefix rows (class, distillation tokens) of its learned table
VIT_LIKE = {
    "vit": 1, "deit": 2, "dinov2": 1, "dinov2_with_registers": 1, "siglip_vision_model": 0,
    **dict.fromkeys(
        "altclip_vision_model chinese_clip_vision_model clip_vision_model clipseg_vision_model metaclip_2_vision_model "
        "xclip_vision_model flava_image_model git_vision_model vit_mae vit_msn blip_2_vision_model "
        "instructblip_vision_model instructblipvideo_vision_model blip_vision_model internvl_vision "
        "qianfan_ocr_vision owlvit_vision_model owlv2_vision_model tipsv2_vision_model".split(),
        1,
    ),
    **dict.fromkeys("groupvit_vision_model ijepa janus_vision_model granite_docling_vision".split(), 0),
    "pixio": 8,
}  # fmt: skip


@requires_transformers
@pytest.mark.parametrize(("model_type", "prefix"), sorted(VIT_LIKE.items()))
def test_vision_learned_tables_are_copied_and_resampled_as_the_model_does(model_type, prefix):
    """ViT's kin (DeiT, DINOv2 (with registers too: they take no position), SigLIP, CLIP's, BLIP's, OWL-ViT's,
    InternVL's towers...): from_hf_model copies the trained table; at another image size the grid is resampled as
    the model's own interpolate_pos_encoding does (prefix rows kept)."""
    config = transformers.AutoConfig.for_model(
        model_type, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        image_size=32, patch_size=8,
    )  # fmt: skip
    from tests.hf.test_absolute import _tiny_model  # (its modeling module's class where AutoModel has none)

    model = _tiny_model(config).eval()
    embeddings = getattr(model, "vision_model", model).embeddings  # (GIT's, OWL-ViT's: inside vision_model)
    with torch.no_grad():
        for name, weight in embeddings.named_parameters():
            if "position" in name:
                weight.normal_(generator=torch.Generator().manual_seed(3))
    encoding = posenc.hf.from_hf_model(model)
    assert isinstance(encoding, posenc.Learned2D) and encoding.num_prefix_tokens == prefix
    for height, width in ((32, 32), (48, 64), (16, 40)):
        grid = (height // 8, width // 8)
        tokens = torch.zeros(1, prefix + grid[0] * grid[1], 32)
        want = embeddings.interpolate_pos_encoding(tokens, height, width)[0]
        torch.testing.assert_close(encoding.table(grid), want, atol=1e-6, rtol=0)
    assert repr(from_hf_config({"model_type": model_type})) == repr(
        from_hf_config(transformers.AutoConfig.for_model(model_type))
    )


def _navit_tower(model_type: str, side: int) -> tuple[Any, Any]:
    """A tiny NaViT-style vision tower with a ``side`` x ``side`` table (8-pixel patches), its table random: its
    embeddings module, and what from_hf_model makes of it."""
    config = transformers.AutoConfig.for_model(
        model_type, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        image_size=side * 8, patch_size=8,
    )  # fmt: skip
    from tests.hf.test_absolute import _tiny_model  # (its modeling module's class where AutoModel has none)

    model = _tiny_model(config).eval()
    with torch.no_grad():
        model.embeddings.position_embedding.weight.normal_(generator=torch.Generator().manual_seed(3))
    assert repr(from_hf_config({"model_type": model_type})) == repr(
        from_hf_config(transformers.AutoConfig.for_model(model_type))
    )
    return model.embeddings, posenc.hf.from_hf_model(model)


@requires_transformers
@pytest.mark.parametrize(
    "model_type", ["idefics2_vision", "idefics3_vision", "smolvlm_vision", "phi4_multimodal_vision"]
)
def test_navit_towers_read_their_table_by_bucketized_fractions_as_the_model_does(model_type):
    """Idefics 2/3, SmolVLM and Phi-4's vision towers: each real patch of an image padded into a batch reads the
    table cell its fractional coordinates fall in (their float32 bucketize); from_hf_model's table((h, w)) gives
    those rows, per image, on a 19 x 19 table (where nearest resampling would differ, its own grid included)."""
    embeddings, encoding = _navit_tower(model_type, 19)
    assert isinstance(encoding, posenc.Learned2D) and encoding.mode == "bucketize"
    grids, padded = [(19, 19), (10, 25), (4, 7)], (19, 25)
    pixels = torch.zeros(len(grids), 3, padded[0] * 8, padded[1] * 8)
    mask = torch.zeros(len(grids), *padded, dtype=torch.bool)
    for i, (h, w) in enumerate(grids):
        mask[i, :h, :w] = True
    with torch.no_grad():
        rows = embeddings(pixels, mask) - embeddings.patch_embedding(pixels).flatten(2).transpose(1, 2)
    for i, (h, w) in enumerate(grids):
        real = rows[i].view(*padded, -1)[:h, :w].reshape(h * w, -1)
        torch.testing.assert_close(encoding.table((h, w)), real, atol=0, rtol=0)
    nearest = posenc.Learned2D(32, 19, mode="nearest")
    nearest.load_state_dict(encoding.state_dict())
    assert not torch.equal(nearest.table((19, 19)), encoding.table((19, 19)))


@requires_transformers
@pytest.mark.parametrize("model_type", ["minicpm_ocr_vision", "minicpmv4_6_vision", "minicpmv4_7_vision"])
def test_minicpm_towers_read_their_table_by_bucketized_quotients_as_the_model_does(model_type):
    """MiniCPM-V's towers: NaViT's look-up with the fractions i / n (transformers' get_vision_nearest_position_ids),
    for images packed into one sequence (their target_sizes); on a 10 x 10 table, where Idefics' i * (1/n) differs
    on the grid (25, 50) below."""
    embeddings, encoding = _navit_tower(model_type, 10)
    assert isinstance(encoding, posenc.Learned2D) and encoding.mode == "bucketize_divide"
    grids = [(10, 10), (25, 50), (4, 7), (13, 3)]
    pixels = torch.zeros(
        1, 3, 8, 8 * sum(h * w for h, w in grids)
    )  # (packed: one row of every image's patches)
    with torch.no_grad():
        patches = embeddings.patch_embedding(pixels).flatten(2).transpose(1, 2)
        rows = embeddings(pixels, torch.tensor(grids)) - patches
    want = torch.cat([encoding.table(grid) for grid in grids])
    torch.testing.assert_close(want, rows[0], atol=0, rtol=0)
    idefics = posenc.Learned2D(32, 10, mode="bucketize")
    idefics.load_state_dict(encoding.state_dict())
    assert not torch.equal(idefics.table((25, 50)), encoding.table((25, 50)))


@requires_transformers
def test_siglip2_table_is_copied_and_resized_per_image_as_the_model_does():
    """SigLIP 2 (NaFlex): from_hf_model copies the num_patches table; Learned2D.table((h, w)) is the
    model's resize_positional_embeddings for an image of h x w patches (bilinear, antialiased), for
    grids larger, smaller and of other aspect than the table."""
    config = transformers.AutoConfig.for_model(
        "siglip2_vision_model", hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, num_patches=64,
    )  # fmt: skip
    model = transformers.AutoModel.from_config(config).eval()
    embeddings = model.embeddings
    with torch.no_grad():
        embeddings.position_embedding.weight.normal_(generator=torch.Generator().manual_seed(3))
    encoding = posenc.hf.from_hf_model(model)
    assert isinstance(encoding, posenc.Learned2D) and encoding.num_prefix_tokens == 0
    table = embeddings.position_embedding.weight.reshape(8, 8, 32)
    for grid in ((8, 8), (12, 16), (3, 5), (16, 4)):
        want = embeddings.resize_positional_embeddings(table, torch.tensor([grid]), grid[0] * grid[1])[0]
        torch.testing.assert_close(encoding.table(grid), want, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="num_patches must be a square"):
        from_hf_config({"model_type": "siglip2_vision_model", "num_patches": 60})
    assert repr(from_hf_config({"model_type": "siglip2_vision_model"})) == repr(
        from_hf_config(transformers.AutoConfig.for_model("siglip2_vision_model"))
    )


@requires_transformers
def test_gpt_neox_partial_rotary_settings_are_carried_over():
    rope = from_hf_config(_hf_config("gpt_neox"))
    assert (rope.head_dim, rope.rotary_dim, rope.base) == (16, 8, 5000.0)
    assert from_hf_config(_hf_config("gptj")).layout == "interleaved"


# --- proof inside real models: attention biases ------------------------------------------------


@requires_transformers
@pytest.mark.parametrize("model_type", ["t5", "mt5", "switch_transformers", "pop2piano"])
def test_t5_bias_equals_the_models_encoder_and_decoder_bias(model_type):
    """Lengths past max_distance (12 for t5) exercise the saturated buckets; the model's own bias method."""
    pop2piano = transformers.Pop2PianoForConditionalGeneration  # (no AutoModel of its own)
    build = pop2piano if model_type == "pop2piano" else transformers.AutoModel.from_config
    model = build(_hf_config(model_type)).eval()
    enc_attn = model.encoder.block[0].layer[0].SelfAttention
    dec_attn = model.decoder.block[0].layer[0].SelfAttention
    heads, head_dim = model.config.num_heads, model.config.d_kv

    encoder_pe = from_hf_config(model.config)  # the top-level config is the encoder's: bidirectional
    decoder_pe = from_hf_config(model.config, causal=True)
    assert from_hf_config(model.decoder.config).causal  # the decoder stack's own config says is_decoder
    for pe, attention, length in ((encoder_pe, enc_attn, 40), (decoder_pe, dec_attn, 31)):
        assert isinstance(pe, posenc.RelativeBias)
        pe.load_state_dict(attention.relative_attention_bias.state_dict(prefix="relative_attention_bias."))
        q = torch.zeros(1, heads, length, head_dim)
        expected = attention.compute_bias(length, length)
        torch.testing.assert_close(pe.attention_bias(q, q), expected, atol=0, rtol=0)

    # a decoding step: 3 new queries after 7 cached tokens, the model's own bias method
    q, k = torch.zeros(1, heads, 3, head_dim), torch.zeros(1, heads, 10, head_dim)
    expected = dec_attn.compute_bias(3, 10, past_seen_tokens=7)
    torch.testing.assert_close(decoder_pe.attention_bias(q, k), expected, atol=0, rtol=0)
    for stack, attention in (("encoder", enc_attn), ("decoder", dec_attn)):  # from_hf_model finds each table
        copied = from_hf_model(model, stack=stack).relative_attention_bias.weight
        torch.testing.assert_close(copied, attention.relative_attention_bias.weight, atol=0, rtol=0)


@requires_transformers
def test_longt5_decoder_bias_is_t5s_and_its_encoder_refused():
    """LongT5's decoder: T5's causal bias (its own compute_bias, past max_distance and at a decoding step),
    copied by from_hf_model; its encoder's transient-global attention is refused, naming it."""
    config = transformers.LongT5Config(**TINY["t5"], num_decoder_layers=2)
    model = transformers.LongT5Model(config).eval()
    attention = model.decoder.block[0].layer[0].SelfAttention
    pe = from_hf_model(model, stack="decoder")
    assert pe.causal and repr(pe) == repr(from_hf_config(config.to_dict(), stack="decoder"))
    q, k = (
        torch.zeros(1, config.num_heads, 31, config.d_kv),
        torch.zeros(1, config.num_heads, 38, config.d_kv),
    )
    torch.testing.assert_close(pe.attention_bias(q, q), attention.compute_bias(31, 31), atol=0, rtol=0)
    torch.testing.assert_close(
        pe.attention_bias(q[:, :, :3], k[:, :, :10]),
        attention.compute_bias(3, 10, past_seen_tokens=7),
        atol=0,
        rtol=0,
    )
    with pytest.raises(ValueError, match="pass stack='encoder' or 'decoder'"):
        from_hf_config(config)
    with pytest.raises(ValueError, match="pass stack='encoder' or 'decoder'"):
        layer_windows(config)
    tglobal = {**config.to_dict(), "encoder_attention_type": "transient-global"}
    with pytest.raises(ValueError, match="transient global tokens"):
        from_hf_config(tglobal, stack="encoder")
    with pytest.raises(ValueError, match="transient global tokens"):
        layer_windows(tglobal, stack="encoder")
    assert layer_windows(tglobal, stack="decoder") == [None] * 2


@requires_transformers
def test_longt5_local_encoder_attention_equals_the_models():
    """LongT5's local encoder: each token attends within local_radius (3) of it, through blocks of 4 that its code
    pads the 13 tokens to, with T5's bidirectional bias: posenc.attention with from_hf_model's bias (copied from its
    LocalSelfAttention) and layer_windows' window gives each layer's attention output for every real token, a
    row padded on the right included (T5 does not scale the scores)."""
    config = transformers.LongT5Config(**{**TINY["t5"], "local_radius": 3, "num_layers": 2})
    model = transformers.LongT5EncoderModel(config).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    ids = torch.randint(0, config.vocab_size, (2, 13), generator=gen)
    keep = torch.ones(2, 13, dtype=torch.long)
    keep[1, -3:] = 0
    seen = {}
    for i, block in enumerate(model.encoder.block):
        attn = block.layer[0].LocalSelfAttention
        attn.register_forward_hook(lambda m, a, out, i=i: seen.update({i: (a[0], out[0])}), with_kwargs=False)
    with torch.no_grad():
        model(input_ids=ids, attention_mask=keep)
    json = type("Json", (), {"config": config.to_dict(), "state_dict": model.state_dict})
    windows = layer_windows(config, stack="encoder")
    assert windows == [6, 6]
    for given in (model, json):
        bias = from_hf_model(given, stack="encoder")
        assert isinstance(bias, posenc.RelativeBias) and bias.bidirectional
        for i, block in enumerate(model.encoder.block):
            attn = block.layer[0].LocalSelfAttention
            x, expected = seen[i]
            q, k, v = (
                p(x).view(2, 13, config.num_heads, -1).transpose(1, 2) for p in (attn.q, attn.k, attn.v)
            )
            mask = keep.bool()[:, None, None, :]
            with torch.no_grad():
                out = posenc.attention(q, k, v, bias, attn_mask=mask, scale=1.0, window=windows[i])
                got = attn.o(out.transpose(1, 2).reshape(2, 13, -1))
            real = keep.bool()
            torch.testing.assert_close(got[real], expected[real], rtol=1e-5, atol=1e-5)
            wide = posenc.attention(q, k, v, bias, attn_mask=mask, scale=1.0, window=windows[i] + 2)
            assert not torch.allclose(attn.o(wide.transpose(1, 2).reshape(2, 13, -1))[real], expected[real])


@requires_transformers
def test_pix2struct_text_bias_is_t5s_causal_one():
    """Pix2Struct's text decoder (its own model cannot be built alone: from the parent): T5's bias, causal whatever
    is_decoder says, its own compute_bias past max_distance and at a decoding step; from_hf_model copies it."""
    text = {**TINY["t5"], "hidden_size": 32}
    vision = {"num_hidden_layers": 1, "hidden_size": 32, "d_kv": 8, "d_ff": 32, "num_attention_heads": 2}
    model = transformers.Pix2StructForConditionalGeneration(
        transformers.Pix2StructConfig(text_config=text, vision_config=vision)
    ).eval()
    attention = model.decoder.layer[0].self_attention.attention
    pe = from_hf_model(model.decoder)
    heads, d_kv = model.config.text_config.num_heads, model.config.text_config.d_kv
    assert pe.causal and repr(pe) == repr(from_hf_config(model.config))
    assert from_hf_config({**model.config.text_config.to_dict(), "is_decoder": False}).causal
    q, k = torch.zeros(1, heads, 31, d_kv), torch.zeros(1, heads, 10, d_kv)
    torch.testing.assert_close(pe.attention_bias(q, q), attention.compute_bias(31, 31), atol=0, rtol=0)
    step = attention.compute_bias(3, 10, past_seen_tokens=7)
    torch.testing.assert_close(pe.attention_bias(q[:, :, :3], k), step, atol=0, rtol=0)


@requires_transformers
def test_umt5_every_layer_has_its_own_bias_table():
    """UMT5: T5's bias in every self-attention layer, each its own table: from_hf_model(layer=i) copies layer i's,
    per stack (2 encoder and 3 decoder layers: the decoder's last is past the encoder's count), equal to that
    layer's own compute_bias past max_distance."""
    config = transformers.UMT5Config(**{**TINY["t5"], "num_layers": 2, "num_decoder_layers": 3})
    model = transformers.UMT5Model(config).eval()
    q = torch.zeros(1, config.num_heads, 30, config.d_kv)
    for stack, module, n in (("encoder", model.encoder, 2), ("decoder", model.decoder, 3)):
        encodings = layer_encodings(config, stack=stack)
        assert len(encodings) == n and len(set(map(id, encodings))) == n  # (one module per layer)
        biases = []
        for i in range(n):
            pe = from_hf_model(model, stack=stack, layer=i)
            assert isinstance(pe, posenc.RelativeBias) and pe.causal == (stack == "decoder")
            expected = module.block[i].layer[0].SelfAttention.compute_bias(30, 30)
            torch.testing.assert_close(pe.attention_bias(q, q), expected, atol=0, rtol=0)
            biases.append(expected)
        assert not torch.equal(biases[0], biases[-1])
    with pytest.raises(
        ValueError, match=r"every decoder layer has its own position tables; pass layer=i \(0\.\.2\)"
    ):
        from_hf_model(model, stack="decoder")


@requires_transformers
def test_layers_hold_their_own_encodings_exactly_where_from_hf_model_reads_weights_per_layer():
    """Which models hold position tables per layer is written twice: ``layer_encodings`` builds one module per layer
    (speech encoders, UMT5, FastSpeech2, VITS) and ``from_hf_model`` reads a ``{layer}`` prefix. For every model type
    and stack ``from_hf_model`` knows, the two agree (a type added to one place alone fails here)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from posenc.hf.weights import _PREFIXES

    two = dict.fromkeys(("num_hidden_layers", "encoder_layers", "decoder_layers", "speech_encoder_layers"), 2)
    per_layer = []
    for model_type, stacks in sorted(_PREFIXES.items()):
        config = CONFIG_MAPPING[model_type](**two, num_layers=2, num_decoder_layers=2)
        for stack, prefix in stacks.items():
            encodings = layer_encodings(config, stack=stack)
            own = len(encodings) == 2 and encodings[0] is not encodings[1]
            assert own == ("{layer}" in prefix), (model_type, stack, prefix)
            per_layer += [model_type] * own
    assert {"umt5", "vits", "parakeet_encoder", "fastspeech2_conformer"} <= set(per_layer)


def _softmax_with(scores: torch.Tensor, bias: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Attention probabilities; rows with no key to keep (padding queries) are NaN in both."""
    return torch.softmax((scores + bias).masked_fill(~keep, float("-inf")), dim=-1)


def _attention_kwargs(attention) -> list:
    """Record the keyword arguments an attention module is called with (its bias among them)."""
    calls: list = []
    attention.register_forward_pre_hook(lambda mod, args, kwargs: calls.append(kwargs), with_kwargs=True)
    return calls


@requires_transformers
def test_bloom_alibi_equals_the_models_bias_under_softmax():
    """Left-padded batch: Bloom numbers real tokens from 0 (cumsum of the mask), as mask_to_positions."""
    model = transformers.AutoModel.from_config(_hf_config("bloom")).eval()
    calls = _attention_kwargs(model.h[0].self_attention)
    length, heads = 9, model.config.n_head
    mask = torch.ones(2, length, dtype=torch.long)
    mask[1, :3] = 0  # row 1: three left-padding tokens
    ids = torch.randint(0, 64, (2, length), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
    bloom_bias = calls[0]["alibi"].view(2, heads, 1, length)  # slope * key position

    pe = from_hf_config(model.config)
    assert isinstance(pe, posenc.ALiBi) and pe.causal
    positions = posenc.mask_to_positions(mask)
    q = torch.zeros(2, heads, length, 8)
    ours = pe.attention_bias(
        q, q, q_positions=positions, k_positions=positions
    )  # slope * (key position - last query position)
    # Both are slope * k_pos up to a constant per row, which softmax cancels: compare the attention.
    keep = torch.ones(length, length).tril().bool() & mask.bool()[:, None, None, :]
    scores = torch.randn(2, heads, length, length, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(
        _softmax_with(scores, ours, keep), _softmax_with(scores, bloom_bias, keep), equal_nan=True, **BIAS_TOL
    )
    # and the bias itself differs from Bloom's by exactly slope * (last position) per row
    shift = (bloom_bias - ours)[..., -1:]
    torch.testing.assert_close(bloom_bias - ours, shift.expand_as(ours), **BIAS_TOL)


@requires_transformers
def test_mpt_alibi_equals_the_models_bias():
    """MPT's bias is slope * (k - last key): the same tensor as posenc's key-only causal form."""
    model = transformers.AutoModel.from_config(_hf_config("mpt")).eval()
    calls = _attention_kwargs(model.blocks[0].attn)
    length = 11
    with torch.no_grad():
        model(input_ids=torch.randint(0, 64, (1, length)))
    mpt_bias = calls[0]["position_bias"][:, :, -length:]  # the slice MptAttention adds: (h, 1, t)
    pe = from_hf_config(model.config)
    q = torch.zeros(1, model.config.n_heads, length, 8)
    torch.testing.assert_close(pe.attention_bias(q, q), mpt_bias[None], **BIAS_TOL)


@requires_transformers
def test_an_mpt_alibi_bias_max_other_than_8_is_refused():
    """transformers' MptModel ignores attn_config.alibi_bias_max (it always passes 8) where MosaicML's code reads
    it: posenc took it, so from_hf_model of a transformers MPT with 16 gave a bias 11.8 off the model's at 64
    positions. Another value is refused, naming both codes; 8 converts as before."""
    import transformers

    with pytest.raises(ValueError, match="alibi_bias_max=16, which transformers' MPT ignores"):
        from_hf_config({"model_type": "mpt", "n_heads": 6, "attn_config": {"alibi_bias_max": 16}})
    config = transformers.MptConfig(n_heads=4, d_model=32, n_layers=1, max_seq_len=16, vocab_size=50)
    config.attn_config.alibi_bias_max = 16
    with pytest.raises(ValueError, match="alibi_bias_max=16"):
        from_hf_model(transformers.MptModel(config))
    assert (
        from_hf_config({"model_type": "mpt", "n_heads": 6, "attn_config": {"alibi_bias_max": 8}}).max_bias
        == 8.0
    )


@requires_transformers
@pytest.mark.parametrize(
    ("head_dim", "error", "match"),
    [
        (0, ValueError, "head_dim must be a positive int, got 0"),
        (16.0, TypeError, "head_dim must be a positive int"),
    ],
)
def test_falcon_alibi_head_dim_errors(head_dim, error, match):
    with pytest.raises(error, match=match):
        FalconALiBi(4, head_dim=head_dim)


@pytest.mark.parametrize("heads", [4, 32, 71])
def test_falcon_alibi_is_the_models_bias_to_the_bit(heads):
    """Falcon adds ALiBi before the 1/sqrt(dh) scaling (effective slopes m / sqrt(dh)) and rounds each slope, then
    slope * key position, to bfloat16: posenc's bias is its bias exactly, from 32 heads (Falcon-RW-1B) and past 256
    positions too, where float32 slopes differed by up to 0.1 logits (71: not a power of two)."""
    config = _hf_config("falcon", alibi=True, num_attention_heads=heads, hidden_size=4 * heads)
    model = transformers.AutoModel.from_config(config).eval()
    calls = _attention_kwargs(model.h[0].self_attention)
    length = 300
    with torch.no_grad():
        model(input_ids=torch.randint(0, 64, (1, length)))
    falcon_mask = calls[0]["attention_mask"]  # alibi / sqrt(dh), min-value above the diagonal
    pe = from_hf_config(model.config)
    assert isinstance(pe, FalconALiBi)
    q = torch.zeros(1, heads, length, 4)
    keep = torch.ones(length, length).tril().bool().expand(1, heads, length, length)
    exact = {"rtol": 0, "atol": 0}
    torch.testing.assert_close(pe.attention_bias(q, q).expand_as(keep)[keep], falcon_mask[keep], **exact)
    # FlexAttention's score_mod (evaluated here on broadcast index tensors) adds the same bias
    index = torch.arange(length)
    zero = torch.zeros((), dtype=torch.long)
    flex_bias = pe.score_mod(q, q)(
        torch.zeros(()), zero, torch.arange(heads)[:, None, None], index[:, None], index
    )
    torch.testing.assert_close(flex_bias.expand_as(keep)[keep], falcon_mask[keep], **exact)
    # the drop-in forward adds it too, and posenc.attention gives the model's attention
    scores = torch.randn(1, heads, length, length, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close((pe(scores) - scores)[keep], falcon_mask[keep], rtol=0, atol=1e-5)
    q, k, v = torch.randn(3, 1, heads, length, 4, generator=torch.Generator().manual_seed(2)).unbind(0)
    torch.testing.assert_close(
        posenc.attention(q, k, v, pe, causal=True),
        torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=falcon_mask),
        rtol=1e-5,
        atol=1e-6,
    )


def test_falcon_alibis_rounding_survives_inductor():
    """Inductor (torch.compile, FlexAttention) drops a cast to bfloat16 between float32 operations: written on the
    bits, Falcon's rounding is kept, and compiled code gives the eager bias (it gave the unrounded one, 0.38 off)."""
    pe = FalconALiBi(32, head_dim=4)
    q = torch.zeros(1, 32, 300, 4)
    torch._dynamo.reset()
    compiled = torch.compile(lambda q: pe.attention_bias(q, q), backend="inductor", fullgraph=True)
    torch.testing.assert_close(compiled(q), pe.attention_bias(q, q), rtol=0, atol=0)


# --- proof inside real models: absolute encodings ----------------------------------------------


def _output_of(module) -> list:
    """Record what a (position-embedding) module returns during the forward pass."""
    outputs: list = []
    module.register_forward_hook(lambda mod, args, out: outputs.append(out))
    return outputs


@requires_transformers
@pytest.mark.parametrize("model_type", ["gpt2", "gpt_neo"])
def test_learned_equals_the_models_position_embedding(model_type):
    model = transformers.AutoModel.from_config(_hf_config(model_type)).eval()
    outputs = _output_of(model.wpe)
    length = 10
    positions = torch.stack([torch.arange(length), torch.arange(length) + 30])
    with torch.no_grad():
        model(input_ids=torch.randint(0, 64, (2, length)), position_ids=positions)
    pe = from_hf_config(model.config)
    pe.load_state_dict(model.wpe.state_dict())  # GPT-2's wpe.weight loads by name
    ours = pe.encode_input(torch.zeros(2, length, pe.d_model), positions)
    torch.testing.assert_close(ours, outputs[0], atol=0, rtol=0)


@requires_transformers
def test_opt_learned_offset_with_left_padding():
    model = transformers.AutoModel.from_config(_hf_config("opt")).eval()
    outputs = _output_of(model.decoder.embed_positions)
    length = 8
    mask = torch.ones(2, length, dtype=torch.long)
    mask[1, :3] = 0
    with torch.no_grad():
        model(input_ids=torch.randint(2, 64, (2, length)), attention_mask=mask)
    pe = from_hf_config(model.config)
    pe.load_state_dict(model.decoder.embed_positions.state_dict())  # (max_len + 2, d): offset 2
    ours = pe.encode_input(torch.zeros(2, length, pe.d_model), posenc.mask_to_positions(mask))
    real = mask.bool()  # padding tokens get other rows in each library; they are masked out anyway
    torch.testing.assert_close(ours[real], outputs[0][real], atol=0, rtol=0)


@requires_transformers
@pytest.mark.parametrize("model_type", ["bart", "mbart"])
def test_bart_learned_offset(model_type):
    model = transformers.AutoModel.from_config(_hf_config(model_type)).eval()
    outputs = _output_of(model.encoder.embed_positions)
    with torch.no_grad():
        model.encoder(input_ids=torch.randint(3, 64, (1, 12)))
    pe = from_hf_config(model.config)
    pe.load_state_dict(model.encoder.embed_positions.state_dict())
    torch.testing.assert_close(
        pe.encode_input(torch.zeros(1, 12, pe.d_model)), outputs[0].expand(1, 12, -1), atol=0, rtol=0
    )


@requires_transformers
@pytest.mark.parametrize("model_type", ["marian", "pegasus"])
def test_marian_sinusoid_equals_the_models_table(model_type):
    model = transformers.AutoModel.from_config(_hf_config(model_type)).eval()
    outputs = _output_of(model.encoder.embed_positions)
    with torch.no_grad():
        model.encoder(input_ids=torch.randint(3, 60, (1, 40)))
    pe = from_hf_config(model.config)
    ours = pe.encode_input(torch.zeros(1, 40, pe.d_model))
    torch.testing.assert_close(ours[0], outputs[0].reshape(40, -1), **TABLE_TOL)


@requires_transformers
def test_ctrl_sinusoid_equals_what_its_forward_adds():
    """CTRL adds its positional_encoding rows, by index, to the tokens' embeddings times sqrt(d)."""
    model = transformers.AutoModel.from_config(_hf_config("ctrl")).eval()
    ids = torch.randint(0, 64, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        hidden = model(input_ids=ids, output_hidden_states=True).hidden_states[0]
        added = hidden - model.w(ids) * model.config.n_embd**0.5
    pe = from_hf_config(model.config)
    torch.testing.assert_close(pe.encode_input(torch.zeros(1, 40, pe.d_model)), added, **TABLE_TOL)


@requires_transformers
@pytest.mark.parametrize("model_type", ["speech_to_text", "m2m_100", "nllb-moe", "fsmt", "xglm"])
def test_fairseq_sinusoid_equals_the_models_table(model_type):
    """Real tokens are numbered from padding_idx + 1 (XGLM: + 2), skipping padding, as mask_to_positions + offset."""
    model = transformers.AutoModel.from_config(_hf_config(model_type)).eval()
    pad = model.config.pad_token_id
    ids = torch.randint(3, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    ids[1, :4] = pad
    mask = ids != pad
    if model_type == "speech_to_text":
        module = model.decoder.embed_positions
        expected = module(ids)
    elif model_type in ("m2m_100", "nllb-moe", "fsmt"):
        outputs = _output_of(model.encoder.embed_positions)
        with torch.no_grad():
            model.encoder(input_ids=ids, attention_mask=mask.long())
        expected = outputs[0]
    else:  # XGLM takes position ids; give it the same numbering
        outputs = _output_of(model.embed_positions)
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask.long(), position_ids=posenc.mask_to_positions(mask))
        expected = outputs[0]
    pe = from_hf_config(model.config)
    ours = pe.encode_input(torch.zeros(2, 12, pe.d_model), posenc.mask_to_positions(mask))
    torch.testing.assert_close(ours[mask], expected[mask], **TABLE_TOL)


# --- from_hf_model: trained position weights -----------------------------------------------------


@requires_transformers
def test_from_hf_model_loads_t5_bias_tables_per_stack():
    model = transformers.T5ForConditionalGeneration(_hf_config("t5"))
    encoder, decoder = from_hf_model(model), from_hf_model(model, stack="decoder")
    assert not encoder.causal and decoder.causal
    for pe, stack in ((encoder, model.encoder), (decoder, model.decoder)):
        expected = stack.block[0].layer[0].SelfAttention.relative_attention_bias.weight
        torch.testing.assert_close(pe.relative_attention_bias.weight, expected, atol=0, rtol=0)
    # a decoder stack on its own says is_decoder: its bias is the causal one
    assert from_hf_model(model.decoder).causal
    # from_hf_config reads stack= the same way: the decoder's bias causal, the encoder's not
    assert from_hf_config(model.config, stack="decoder").causal
    assert not from_hf_config(model.decoder.config, stack="encoder").causal
    assert not from_hf_config(model.config, stack="decoder", causal=False).causal  # causal= wins
    with pytest.raises(ValueError, match="expected one decoder position weight"):
        from_hf_model(transformers.T5EncoderModel(_hf_config("t5")), stack="decoder")
    # a model built on the meta device (weights not loaded yet) raised torch's "Cannot copy out of meta tensor"
    with pytest.raises(ValueError, match="t5: the model's position weights are on the meta device"):
        from_hf_model(model.to("meta"))


@requires_transformers
def test_from_hf_model_of_an_encoder_decoder_parent_takes_the_weights_of_one_stack():
    """BERT2BERT: the stacks agree (one Learned table each), but the parent holds two tables: not one."""
    bert = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
    )
    model = transformers.EncoderDecoderModel(
        transformers.EncoderDecoderConfig.from_encoder_decoder_configs(bert, bert)
    )
    assert isinstance(from_hf_config(model.config), posenc.Learned)
    with pytest.raises(ValueError, match=r"pass the model of one stack \(model.encoder, model.decoder\)"):
        from_hf_model(model)
    expected = model.decoder.bert.embeddings.position_embeddings.weight
    torch.testing.assert_close(from_hf_model(model.decoder).weight, expected, atol=0, rtol=0)


@requires_transformers
@pytest.mark.parametrize(
    ("model_class", "model_type", "table"),
    [
        ("GPT2LMHeadModel", "gpt2", lambda m: m.transformer.wpe.weight),
        ("GPTNeoForCausalLM", "gpt_neo", lambda m: m.transformer.wpe.weight),
        ("OPTForCausalLM", "opt", lambda m: m.model.decoder.embed_positions.weight),
        ("BartForConditionalGeneration", "bart", lambda m: m.model.encoder.embed_positions.weight),
    ],
)
def test_from_hf_model_loads_learned_tables(model_class, model_type, table):
    model = getattr(transformers, model_class)(_hf_config(model_type))
    pe = from_hf_model(model)
    assert isinstance(pe, posenc.Learned)
    torch.testing.assert_close(pe.weight, table(model), atol=0, rtol=0)
    if model_type == "bart":
        decoder = from_hf_model(model, stack="decoder")
        torch.testing.assert_close(decoder.weight, model.model.decoder.embed_positions.weight, atol=0, rtol=0)
    else:
        with pytest.raises(ValueError, match="accepted stack: decoder"):
            from_hf_model(model, stack="encoder")


@requires_transformers
def test_from_hf_model_without_trained_position_weights_is_from_hf_config():
    model = transformers.AutoModel.from_config(_hf_config("llama"))
    _same_encoding(from_hf_model(model), from_hf_config(model.config), 12, heads=2, head_dim=16, d_model=None)
    with pytest.raises(TypeError, match="must be a transformers model"):
        from_hf_model({"model_type": "llama"})
    with pytest.raises(ValueError, match="stack must be None, 'encoder' or 'decoder'"):
        from_hf_model(model, stack="middle")
    with pytest.raises(
        ValueError, match="stack must be None, 'encoder' or 'decoder' for llama, got 'middle'"
    ):
        from_hf_config(model.config, stack="middle")
    with pytest.raises(
        ValueError, match="stack must be None, 'encoder' or 'decoder' for llama, got 'text_encoder'"
    ):
        from_hf_config(model.config, stack="text_encoder")
    # one encoding for every stack: stack= is accepted and changes nothing
    assert repr(from_hf_config(model.config, stack="decoder")) == repr(from_hf_config(model.config))


def test_docs_table_of_supported_models_is_the_generated_one():
    """docs/huggingface.md's table is the output of supported_models_markdown()."""
    from pathlib import Path

    readme = Path(__file__).resolve().parents[2] / "docs" / "huggingface.md"
    marker = 'print(supported_models_markdown())" -->'  # the comment line above the pasted table
    text = readme.read_text(encoding="utf-8")
    assert marker in text, "docs/huggingface.md lost the generated table of supported model types"
    after = text[text.index(marker) :].split("\n", 1)[1]
    generated = supported_models_markdown()
    table = "\n".join(after.splitlines()[: len(generated.splitlines())])
    assert table == generated


# --- M-RoPE: Qwen2-VL, Qwen2.5-VL, Qwen3-VL --------------------------------------------------


def _qwen_vl_rotation(config, q: torch.Tensor, k: torch.Tensor, position_ids: torch.Tensor):
    """q/k rotated by the model file's own rotary embedding and apply function (the reference)."""
    module = importlib.import_module(type(config).__module__.replace("configuration_", "modeling_"))
    text = config.get_text_config()
    name = next(n for n in dir(module) if n.endswith("RotaryEmbedding") and "Vision" not in n)
    cos, sin = getattr(module, name)(text)(q, position_ids)  # (b, t, dh)
    return module.apply_rotary_pos_emb(q, k, cos, sin)


QWEN_VL_CASES = {
    "qwen2_vl": ("Qwen2VLConfig", [2, 3, 3], {"rope_type": "default", "rope_theta": 5000.0}),
    "qwen2_5_vl": ("Qwen2_5_VLConfig", [4, 2, 2], {"rope_type": "default", "rope_theta": 1e6}),
    "qwen3_vl": ("Qwen3VLConfig", [2, 3, 3], {"rope_type": "default", "rope_theta": 5e5}),
    "qwen2_vl-yarn": (
        "Qwen2VLConfig",
        [2, 3, 3],
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "rope_theta": 1e4},
    ),
}


@requires_transformers
@pytest.mark.parametrize("case", sorted(QWEN_VL_CASES))
def test_qwen_vl_configs_give_the_models_mrope(case):
    """Top-level and text configs -> MRoPE; rotated q/k equal the model's for image-like (3, b, t) positions."""
    class_name, section, params = QWEN_VL_CASES[case]
    heads, head_dim = 2, 2 * sum(section)
    text = {
        "hidden_size": heads * head_dim,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "head_dim": head_dim,
        "max_position_embeddings": 128,
        "rope_parameters": {**params, "mrope_section": section},
    }
    config = getattr(transformers, class_name)(text_config=text)
    rope = from_hf_config(config)
    assert isinstance(rope, posenc.MRoPE) and rope.interleaved == class_name.startswith("Qwen3")
    for other in (config.text_config, config.text_config.to_dict()):
        assert from_hf_config(other).state_dict().keys() == rope.state_dict().keys()
        assert repr(from_hf_config(other)) == repr(rope)
    # text tokens 0..3, a 2x3 image at t=4 (h, w vary), text again from 7; row 1 shifted by a cache offset
    t_ax = torch.tensor([0, 1, 2, 3, 4, 4, 4, 4, 4, 4, 7, 8])
    h_ax = torch.tensor([0, 1, 2, 3, 4, 4, 4, 5, 5, 5, 7, 8])
    w_ax = torch.tensor([0, 1, 2, 3, 4, 5, 6, 4, 5, 6, 7, 8])
    position_ids = torch.stack([t_ax, h_ax, w_ax])[:, None].repeat(1, 2, 1)
    position_ids[:, 1] += 40  # past max_position_embeddings / factor: yarn's frequencies matter
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, heads, 12, head_dim, generator=gen) for _ in range(2))
    q_ref, k_ref = _qwen_vl_rotation(config, q, k, position_ids)
    positions = posenc.functional.axes_last(position_ids)  # (b, t, 3)
    q_ours, k_ours = rope.encode_qk(q, k, q_positions=positions, k_positions=positions)
    torch.testing.assert_close(q_ours, q_ref, **ROPE_TOL)
    torch.testing.assert_close(k_ours, k_ref, **ROPE_TOL)


@requires_transformers
def test_ernie4_5_vl_gives_the_models_mrope():
    """ERNIE 4.5 VL by rule: its (h, w, t) sections as posenc's (t, h, w), height and width alternating over
    neighbouring pairs, time last; equal to its own rotation (config object, text config, config.json dict)."""
    text = {
        "hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 32,
        "rope_parameters": {"rope_type": "default", "rope_theta": 5e5, "mrope_section": [6, 6, 4]},
    }  # fmt: skip
    config = transformers.Ernie4_5_VLMoeConfig(text_config=text)
    rope = from_hf_config(config)
    assert isinstance(rope, posenc.MRoPE)
    assert (rope.mrope_section, rope.interleaved, rope.layout) == ((4, 6, 6), "hw", "interleaved")
    for other in (config.text_config, config.text_config.to_dict()):
        assert repr(from_hf_config(other)) == repr(rope)
    position_ids = torch.stack([torch.arange(12), torch.arange(12) // 4 + 3, torch.arange(12) % 4])[:, None]
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 2, 12, 32, generator=gen) for _ in range(2))
    q_ref, k_ref = _qwen_vl_rotation(config, q, k, position_ids)
    positions = posenc.functional.axes_last(position_ids)
    q_ours, k_ours = rope.encode_qk(q, k, q_positions=positions, k_positions=positions)
    torch.testing.assert_close(q_ours, q_ref, **ROPE_TOL)
    torch.testing.assert_close(k_ours, k_ref, **ROPE_TOL)


@requires_transformers
def test_cohere_compass_gives_its_mrope_per_layer_type_and_nope():
    """Cohere Compass by rule: one Qwen3-VL-style M-RoPE dict per layer type (its mrope_section), NoPE where the
    type's dict is None; equal to its rotary module for that layer type at distinct (t, h, w)."""
    from transformers.models.cohere_compass import modeling_cohere_compass as hf

    per_type = {
        "sliding_attention": {"rope_type": "default", "rope_theta": 5e4, "mrope_section": [6, 5, 5]},
        "full_attention": None,
    }
    text = dict(hidden_size=64, num_attention_heads=2, num_key_value_heads=2, num_hidden_layers=3,
                layer_types=["sliding_attention", "full_attention", "sliding_attention"], rope_parameters=per_type)  # fmt: skip
    config = transformers.CohereCompassConfig(text_config=text)
    for form in (config, config.text_config, config.text_config.to_dict()):
        layers = posenc.hf.layer_encodings(form)
        assert isinstance(layers[1], posenc.NoPE) and layers[0] is layers[2]
        assert (layers[0].mrope_section, layers[0].interleaved, layers[0].base) == ((6, 5, 5), True, 5e4)
    position_ids = torch.stack([torch.arange(12), torch.arange(12) // 4 + 3, torch.arange(12) % 4])[:, None]
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 2, 12, 32, generator=gen) for _ in range(2))
    cos, sin = hf.CohereCompassRotaryEmbedding(config.text_config)(q, position_ids, "sliding_attention")
    q_ref, k_ref = hf.apply_rotary_pos_emb(q, k, cos, sin)
    positions = posenc.functional.axes_last(position_ids)
    q_ours, k_ours = layers[0].encode_qk(q, k, q_positions=positions, k_positions=positions)
    torch.testing.assert_close(q_ours, q_ref, **ROPE_TOL)
    torch.testing.assert_close(k_ours, k_ref, **ROPE_TOL)


@requires_transformers
def test_lfm3_conv_layers_are_nope_and_its_attention_layers_rotate_per_type():
    """LFM3's rope_parameters hold its attention layer types only: its conv layers (no attention) are NoPE."""
    config = transformers.Lfm3Config(
        hidden_size=64, num_attention_heads=2, num_key_value_heads=2, num_hidden_layers=3,
        layer_types=["conv", "sliding_attention", "full_attention"],
    )  # fmt: skip
    for form in (config, config.to_dict()):
        layers = posenc.hf.layer_encodings(form)
        assert isinstance(layers[0], posenc.NoPE)
        assert [type(e) for e in layers[1:]] == [posenc.RoPE, posenc.RoPE]
        params = config.rope_parameters
        assert (layers[1].base, layers[2].base) == (
            params["sliding_attention"]["rope_theta"],
            params["full_attention"]["rope_theta"],
        )
    with pytest.raises(ValueError, match=r"rope_parameters has no entry for layer type 'conv'"):
        posenc.hf.layer_encodings({**config.to_dict(), "model_type": "llama"})


def test_qwen_vl_flat_config_json_and_legacy_mrope_type():
    """Qwen2-VL's hub config.json is flat, with rope_scaling {"type": "mrope", "mrope_section": ...}."""
    flat = {
        "model_type": "qwen2_vl",
        "hidden_size": 256,
        "num_attention_heads": 2,
        "rope_theta": 1e6,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    }
    rope = from_hf_config(flat)
    assert isinstance(rope, posenc.MRoPE)
    assert (rope.head_dim, rope.mrope_section, rope.base, rope.rope_type) == (
        128,
        (16, 24, 24),
        1e6,
        "default",
    )
    qwen3 = from_hf_config({"model_type": "qwen3_vl"})  # no text_config: the text config class's defaults
    assert (qwen3.head_dim, qwen3.mrope_section, qwen3.base, qwen3.interleaved) == (
        128,
        (24, 20, 20),
        5e5,
        True,
    )
    with pytest.raises(ValueError, match=r"qwen2_vl_text config: mrope_section=\[16, 24, 23\] sums to 63"):
        from_hf_config({**flat, "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 23]}})
    with pytest.raises(TypeError, match="mrope_section'\\] must be a list of ints"):
        from_hf_config({**flat, "rope_scaling": {"mrope_section": "16,24,24"}})


# --- Llama 4 Scout: llama3 scaling with low_freq_factor == high_freq_factor ------------------

# text_config of meta-llama/Llama-4-Scout-17B-16E (the keys that shape its RoPE)
SCOUT_TEXT = {
    "model_type": "llama4_text",
    "hidden_size": 5120,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "num_hidden_layers": 48,
    "max_position_embeddings": 10485760,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 16.0,
        "high_freq_factor": 1.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
}


@requires_transformers
@pytest.mark.parametrize("low_high", [(1.0, 1.0), (2.0, 2.0), (1.0, 4.0)])
def test_llama3_scaling_with_an_empty_smooth_band_matches_transformers(low_high):
    """Scout's config (low == high: no smooth band) is accepted; inv_freq and rotations equal transformers'."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.llama4 import modeling_llama4

    low, high = low_high
    text = {
        **SCOUT_TEXT,
        "rope_scaling": {**SCOUT_TEXT["rope_scaling"], "low_freq_factor": low, "high_freq_factor": high},
    }
    config = transformers.Llama4TextConfig(**{k: v for k, v in text.items() if k != "model_type"})
    want, attention_scaling = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    assert attention_scaling == 1.0
    for form in (text, config, config.to_dict(), {"model_type": "llama4", "text_config": text}):
        rope = from_hf_config(form, layer=0)
        assert isinstance(rope, posenc.RoPE) and rope.layout == "interleaved"
        got = rope.params.inv_freq()[0]
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got.float(), want, rtol=1e-6, atol=0)
    # the model's own rotary module and apply function, at positions past the trained 8192
    positions = torch.tensor([[0, 1, 5, 8191, 8192, 12000, 20000], [3, 4, 9000, 9001, 9002, 9003, 16000]])
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 7, 2, 128, generator=gen) for _ in range(2))  # (b, t, h, d): the model's layout
    freqs_cis = modeling_llama4.Llama4TextRotaryEmbedding(config)(q, positions)
    q_ref, k_ref = modeling_llama4.apply_rotary_emb(q, k, freqs_cis)
    q_ours, k_ours = rope.encode_qk(
        q.transpose(1, 2), k.transpose(1, 2), q_positions=positions, k_positions=positions
    )
    # angles up to 2e4 rad: float32 rounding in transformers' own product
    torch.testing.assert_close(q_ours.transpose(1, 2), q_ref, atol=5e-3, rtol=0)
    torch.testing.assert_close(k_ours.transpose(1, 2), k_ref, atol=5e-3, rtol=0)


# --- models outside the table: the standardized fields ----------------------------------------

RULE_BASE = {"model_type": "some_new_llm", "hidden_size": 64, "num_attention_heads": 2, "rope_theta": 5e5}


def test_a_model_outside_the_table_is_built_from_its_standardized_fields():
    rope = from_hf_config(RULE_BASE)
    assert (rope.head_dim, rope.base, rope.layout, rope.rotary_dim) == (32, 5e5, "half", 32)
    scaled = from_hf_config(
        {
            **RULE_BASE,
            "model_type": "qwen3_next",  # (one whose code reads partial_rotary_factor)
            "head_dim": 16,
            "max_position_embeddings": 256,
            "rope_parameters": {
                "rope_type": "yarn",
                "factor": 4.0,
                "rope_theta": 1e4,
                "partial_rotary_factor": 0.5,
            },
        }
    )
    assert (scaled.head_dim, scaled.base, scaled.rotary_dim, scaled.rope_type) == (16, 1e4, 8, "yarn")
    assert scaled.params.original_max_len == 256  # yarn without original_max: max_position_embeddings
    with pytest.raises(ValueError, match="some_new_llm is not among the models whose code reads it"):
        from_hf_config({**RULE_BASE, "partial_rotary_factor": 0.5})  # (Llama's code would rotate whole heads)
    layers = layer_encodings(
        {
            **RULE_BASE,
            "num_hidden_layers": 3,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
            "rope_parameters": {
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                "full_attention": {"rope_type": "linear", "factor": 8.0},  # rope_theta from the top level
            },
        }
    )
    assert layers[0] is layers[2] and layers[0].base == 1e4 and layers[1].base == 5e5
    assert layers[1].rope_type == "linear"
    assert from_hf_config({**RULE_BASE, "model_type": "ernie4_5"}).layout == "interleaved"  # listed departure
    mla = from_hf_config(
        {**RULE_BASE, "model_type": "deepseek_v3", "qk_rope_head_dim": 16, "rope_interleave": True}
    )  # DeepSeek's MLA fields
    with pytest.raises(ValueError, match="rope_interleave=True, but transformers' some_new_llm is not among"):
        from_hf_config({**RULE_BASE, "qk_rope_head_dim": 16, "rope_interleave": True})
    assert (mla.head_dim, mla.layout) == (16, "interleaved")
    for always in ("deepseek_v32", "axk2", "glm_moe_dsa", "longcat_flash"):  # no rope_interleave field
        rope = from_hf_config({**RULE_BASE, "model_type": always, "qk_rope_head_dim": 16})
        assert (rope.head_dim, rope.layout) == (16, "interleaved"), always


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"rotary_dim": 16}, "'rotary_dim'=16 may shape .* give 32 rotated channels"),
        (
            {"qk_rope_head_dim": 16, "partial_rotary_factor": 0.5},
            "'qk_rope_head_dim' and 'partial_rotary_factor'",
        ),
        ({"rope_parameters": {"rope_type": "default", "mrope_section": [8, 4, 4]}}, "'mrope_section'"),
        ({"rope_parameters": {"rope_type": "llama3", "factor": 8.0, "beta": 1}}, "'beta'"),
        ({"rope_parameters": {"rope_type": "made_up"}}, "rope_type 'made_up' is not supported"),
        ({"rope_theta": None}, "no 'rope_parameters' or 'rope_theta'"),
        ({"rope_theta": None, "rope_parameters": {"rope_type": "default"}}, "missing 'rope_theta'"),
        ({"rope_parameters": {"full_attention": {"rope_theta": 1.0}}}, "'layer_types' is missing"),
        ({"num_attention_heads": None}, "missing 'num_attention_heads'"),
        ({"model_type": "hunyuan_vl", "text_config": {"rope_theta": 1e4}}, "M-RoPE"),
        ({"model_type": "mistral_large4_text"}, r"learned per-head scale \* log\(p \+ 1\) \+ bias"),
        ({"model_type": "esmfold2", "rope_theta": None}, "3D atom coordinates"),
        (
            {"model_type": "qwen2_5_omni_dit", "rope_parameters": {"rope_theta": 1e4}},
            "rotates only its first head",
        ),
    ],
)
def test_a_model_outside_the_table_refuses_what_it_cannot_read(extra, match):
    with pytest.raises(ValueError, match=match):
        from_hf_config({**RULE_BASE, **extra})


def test_nanochat_by_rule_rotates_by_minus_the_angles():
    rope = from_hf_config({**RULE_BASE, "model_type": "nanochat"})
    assert rope.conjugate and not from_hf_config(RULE_BASE).conjugate


def test_unread_rope_parameters_keys_are_refused_for_table_models_too():
    llama = {
        "model_type": "phi3",
        "rope_parameters": {"rope_type": "linear", "factor": 2.0, "low_freq_factor": 1.0},
    }
    with pytest.raises(ValueError, match="'low_freq_factor', which rope_type 'linear' does not read"):
        from_hf_config(llama)


def _read_layers(config: Any, stack: str | None = None) -> tuple[list[str] | None, list[int | None] | None]:
    """Every layer's encoding (its repr), and every layer's window; each ``None`` where posenc refuses it."""
    try:
        # (without the cache length: a dict may leave max_position_embeddings out, and it only sizes a cache)
        encodings = [re.sub(r", max_len=\d+", "", repr(e)) for e in layer_encodings(config, stack=stack)]
    except (ValueError, TypeError):  # refused, or a class default posenc cannot convert
        encodings = None
    try:
        return encodings, layer_windows(config, stack=stack)
    except (ValueError, TypeError):
        return encodings, None


#: the layer counts of an encoder-decoder's stacks (read per stack too)
_STACK_COUNTS = ("bare", "encoder_layers", "decoder_layers", "num_decoder_layers", "num_layers")


#: the sizes num_hidden_layers and max_position_embeddings do not set, where they would dominate the time: the
#: speech encoders' layers and widths (each layer builds trained tables), CANINE's character table (num_hash_buckets
#: rows). (A form without the key still gets the class default.)
_SMALLER = {
    "seamless_m4t": {"speech_encoder_layers": 2},
    "canine": {"num_hash_buckets": 64},
    **{
        name: {"hidden_size": 64, "num_attention_heads": 4}
        for name in ("wav2vec2-conformer", "parakeet_encoder")
    },
    **{
        name: {"encoder_config": {"num_hidden_layers": 2}}
        for name in ("parakeet_ctc", "parakeet_tdt", "parakeet_rnnt")
    },
}


def _short_caches(config: dict) -> dict:
    """``config`` with max_position_embeddings 64 in every sub-config that has one (the cache length)."""
    return {
        key: _short_caches(value)
        if isinstance(value, dict)
        else 64
        if key == "max_position_embeddings"
        else value
        for key, value in config.items()
    }


def _class_forms(model_type: str) -> tuple[Any, dict[str, dict]] | None:
    """A config object of ``model_type`` with its class defaults (seven layers, a count no class defaults to, so
    that a dict read by another key's count shows, and a short cache, where its class takes them: a speech
    encoder's 24 layers of trained tables would dominate the time), and its ``config.json``
    forms: its ``to_dict()`` without any one key, or with its rope dict (flat, or one layer type's) without any
    one key, or its ``text_config`` without any one key; a vision tower's with rope_type "default"; the bare
    ``{"model_type": ..., "num_hidden_layers": ...}``."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    small = {"num_hidden_layers": 7, "max_position_embeddings": 64, **_SMALLER.get(model_type, {})}
    for sizes in (small, {"max_position_embeddings": 64}):
        try:
            config = CONFIG_MAPPING[model_type](**sizes)
            full = config.to_dict()
            if (short := _short_caches(full)) != full:  # (a sub-config's too: T5Gemma 2's stacks)
                full, config = short, CONFIG_MAPPING[model_type](**copy.deepcopy(short))
            break
        except Exception:  # (a class that needs arguments, or refuses the sizes)
            continue
    else:
        return None
    # (not the keys every class inherits from PretrainedConfig, the same default in each, which posenc reads none of)
    inherited = set(transformers.PretrainedConfig().to_dict())
    forms = {key: {k: v for k, v in full.items() if k != key} for key in full if key not in inherited}
    # (with its layer count, which posenc needs: a config.json always gives it)
    forms["bare"] = {"model_type": model_type, **{k: full[k] for k in ("num_hidden_layers",) if k in full}}
    rope = full["rope_parameters"] if isinstance(full.get("rope_parameters"), dict) else {}
    per_type = {name: params for name, params in rope.items() if isinstance(params, dict)}
    for layer_type, params in (per_type or {None: rope}).items():
        for key in params:  # (its class may write a default of its own in: by model, or by layer type)
            dropped = {k: v for k, v in params.items() if k != key}
            nested = dropped if layer_type is None else {**rope, layer_type: dropped}
            where = f"rope_parameters.{layer_type}" if layer_type else "rope_parameters"
            forms[f"{where}.{key}"] = {**full, "rope_parameters": nested}
    if rope.get("rope_type") == "axial":  # (a vision tower's class reads "default" as "axial")
        forms["rope_parameters.rope_type=default"] = {
            **full,
            "rope_parameters": {**rope, "rope_type": "default"},
        }
    text = full.get("text_config")
    for key in (
        text if isinstance(text, dict) else ()
    ):  # (its parent's class may fill it with its own defaults)
        forms[f"text_config.{key}"] = {**full, "text_config": {k: v for k, v in text.items() if k != key}}
    return config, forms


def _model_type_shard(shard: int, shards: int = 8) -> list[str]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return sorted(CONFIG_MAPPING)[shard::shards]


@requires_transformers
@pytest.mark.parametrize("shard", range(8))
def test_a_config_json_without_a_key_converts_as_its_class_loads_it(shard):
    """Every config class of the installed transformers, with its defaults: each ``config.json`` form of
    :func:`_class_forms` gives the encodings and sliding windows of the config transformers loads from it, or
    is refused (as the config is, where it is); never a value the class does not have (Qwen3-Next's head_dim
    256, OLMo 3's sliding_window 4096, DeepSeek V3's rope_interleave, Voxtral's head_dim, Gemma 3's global base
    1e6, a vision tower's "axial"; RecurrentGemma's window of 2048 and its recurrent layers, ViT-MAE's layer
    count, Bamba's Mamba layers, Inkling's hybrid sliding layers)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    differ, checked = [], 0
    for model_type in _model_type_shard(shard):
        if (built := _class_forms(model_type)) is None:
            continue
        config, forms = built
        # (a part None: refused, and then so must a form's be that loads as it)
        expected = {stack: _read_layers(config, stack) for stack in (None, "encoder", "decoder")}
        for key, form in forms.items():
            for stack in (None, "encoder", "decoder") if key in _STACK_COUNTS else (None,):
                checked += 1
                got = _read_layers(form, stack)
                if all(part is None or part == want for part, want in zip(got, expected[stack], strict=True)):
                    continue
                try:  # (what the class loads from it: a default where the form left a key out; a copy, as the
                    # class pops the text model's type from the dict)
                    loaded = _read_layers(CONFIG_MAPPING[model_type](**copy.deepcopy(form)), stack)
                except Exception:  # (its class refuses the dict: FunASR-Nano's sizes must agree)
                    continue
                for what, part, want in zip(("encodings", "windows"), got, loaded, strict=True):
                    if part is not None and part != want:
                        differ.append(f"{model_type} without {key} (stack {stack}): {what}")
    assert checked > 1000 and not differ, differ


@requires_transformers
def _own_keys_for(standard: str) -> list[tuple[str, str]]:
    """``(model_type, key)`` of every config class whose attribute_map reads ``standard`` under a key of its own
    (none without transformers)."""
    if transformers is None:
        return []
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    maps = {t: getattr(c, "attribute_map", None) or {} for t, c in CONFIG_MAPPING.items()}
    return sorted((t, m[standard]) for t, m in maps.items() if m.get(standard) not in (None, standard))


def test_every_class_that_counts_its_layers_under_a_key_of_its_own_is_read_by_it():
    """A config.json of a class whose attribute_map reads num_hidden_layers as ``depth`` (Qwen2-VL's vision tower),
    ``decoder_layers`` (Mask2Former) or ``layers`` (Kosmos-2) has that count read, not another key's or none."""
    pytest.importorskip("transformers")
    from posenc.hf._read import _TYPE_ALIASES, ALIASES

    # (read by the BART-like rule, or layers without positions: ConvNeXt's stages, SegFormer's blocks; SeamlessM4T:
    # its speech encoder's)
    elsewhere = {"encoder_layers", "num_stages", "num_encoder_blocks", *ALIASES["num_hidden_layers"]}
    counted = _own_keys_for("num_hidden_layers")
    unread = [
        f"{model_type} ({key})"
        for model_type, key in counted
        if key not in elsewhere
        and not model_type.startswith("seamless_m4t")
        and ("num_hidden_layers", key) not in _TYPE_ALIASES.get(model_type, ())
    ]
    assert len(counted) > 40 and not unread, unread


@pytest.mark.parametrize(("model_type", "key"), _own_keys_for("max_position_embeddings"))
def test_a_trained_length_under_a_key_of_its_own_is_read(model_type, key):
    """Dynamic NTK reads the trained length, max_position_embeddings, which Bailing's class keeps as
    model_max_length: its config.json scales as its config object (it was refused: no max_position_embeddings).
    Classes whose model reads no RoPE field refuse both forms (GPT-2's kin, RWKV; Kimi Linear: NoPE)."""
    transformers = pytest.importorskip("transformers")
    scaling = {"rope_type": "dynamic", "factor": 4.0, "rope_theta": 1e6}
    config = transformers.AutoConfig.for_model(model_type, **{key: 4096, "rope_parameters": scaling})
    outcomes = []
    for form in (config, config.to_dict()):
        try:
            outcomes.append([repr(getattr(e, "params", e)) for e in layer_encodings(form)])
        except ValueError:
            outcomes.append("refused")
    if model_type == "bailing_hybrid":
        assert "original_max_len=4096" in outcomes[0][-1]
    # (a config.json of a type outside posenc's table is read by its fields: Decision Transformer's object is
    # refused, its class declaring no RoPE field, while its dict with one is RoPE by rule)
    assert outcomes[0] == outcomes[1] or (model_type == "decision_transformer" and outcomes[0] == "refused")


@pytest.mark.parametrize(
    "model_type", ["diffusion_gemma_text", "embedding_gemma2_text", "gemma4_unified_text"]
)
def test_gemma4_kin_rotate_their_full_layers_over_the_global_head_dim(model_type):
    """By rule, as Gemma 4 by table: the config object's per_layer_config (which its class builds from
    global_head_dim, default 512) widens the full layers; a config.json dict without per_layer_config
    takes that default, as transformers loads it; the sliding layers keep head_dim."""
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(model_type, num_hidden_layers=6, head_dim=64)
    without = {k: v for k, v in config.to_dict().items() if k != "per_layer_config"}
    from_object, from_dict = layer_encodings(config), layer_encodings(without)
    assert [e.head_dim for e in from_object] == [64] * 5 + [512]
    assert [repr(e) for e in from_dict] == [repr(e) for e in from_object]


@pytest.mark.parametrize("model_type", ["qwen2_5_omni", "qwen3_omni_moe"])
def test_an_omni_config_is_read_through_its_thinker(model_type):
    """As transformers' get_text_config: the text model of Qwen2.5-Omni / Qwen3-Omni is thinker_config.text_config."""
    text = {
        "hidden_size": 64,
        "num_attention_heads": 2,
        "rope_parameters": {"rope_theta": 1e6, "mrope_section": [4, 6, 6]},
    }
    outer = {
        "model_type": model_type,
        "thinker_config": {"model_type": f"{model_type}_thinker", "text_config": text},
    }
    inner = {**text, "model_type": f"{model_type} text_config"}
    assert repr(from_hf_config(outer)) == repr(from_hf_config(inner))
    assert isinstance(from_hf_config(outer), posenc.MRoPE)


def test_qwen3_omni_checkpoint_flags_are_read_as_its_code_reads_them():
    """Qwen3-Omni's config.json carries ``interleaved`` and ``mrope_interleaved`` in its rope dict, which its
    code never reads (it always interleaves): the same MRoPE as without them, whatever they say."""
    text = {
        "model_type": "qwen3_omni_moe_text",
        "hidden_size": 64,
        "num_attention_heads": 2,
        "rope_scaling": {"rope_type": "default", "mrope_section": [4, 6, 6]},
        "rope_theta": 1e6,
    }
    plain = from_hf_config(text)
    assert isinstance(plain, posenc.MRoPE) and plain.interleaved
    for flag in (True, False):
        flags = {"interleaved": flag, "mrope_interleaved": flag}
        with_flags = from_hf_config({**text, "rope_scaling": {**text["rope_scaling"], **flags}})
        assert repr(with_flags) == repr(plain)


def test_dbrx_config_json_names_its_sizes_n_heads_and_d_model():
    """DBRX's config.json keeps n_heads / d_model (its class maps the standard names onto them)."""
    rope = from_hf_config(
        {"model_type": "dbrx", "d_model": 256, "n_heads": 4, "rope_parameters": {"rope_theta": 5e5}}
    )
    assert (rope.head_dim, rope.base) == (64, 5e5)


def test_a_layer_type_whose_rope_parameters_are_none_is_refused_by_name():
    """Beam's full layers: no RoPE, a query scale by position that no config field describes."""
    config = {
        **RULE_BASE,
        "num_hidden_layers": 2,
        "layer_types": ["sliding_attention", "full_attention"],
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            "full_attention": None,
        },
    }
    with pytest.raises(ValueError, match=r"rope_parameters\['full_attention'\] is None"):
        layer_encodings(config)


def test_a_per_layer_config_that_overrides_rope_is_refused():
    config = {**RULE_BASE, "num_hidden_layers": 2, "per_layer_config": {"1": {"rope_theta": 5.0}}}
    with pytest.raises(ValueError, match=r"per_layer_config\[1\] overrides 'rope_theta'"):
        layer_encodings(config)


@pytest.mark.parametrize(
    ("per_layer_config", "error", "match"),
    [
        ("nope", TypeError, r"per_layer_config must be a dict, got str"),
        ({"x1": {"head_dim": 64}}, ValueError, r"per_layer_config keys must be layer indices, got \['x1'\]"),
    ],
)
def test_a_per_layer_config_that_is_not_a_map_of_layer_indices_is_refused(per_layer_config, error, match):
    config = {**RULE_BASE, "num_hidden_layers": 2, "per_layer_config": per_layer_config}
    with pytest.raises(error, match=match):
        layer_encodings(config)


@pytest.mark.parametrize(("floor_scale", "error"), [(-1, ValueError), ("x", TypeError)])
def test_llama4_query_temperature_fields_are_checked_naming_the_model(floor_scale, error):
    config = {"model_type": "llama4_text", "num_hidden_layers": 4, "floor_scale": floor_scale}
    with pytest.raises(error, match=r"llama4_text config: floor_scale must be a"):
        layer_encodings(config)


@requires_transformers
def test_a_vision_tower_is_refused_by_rule_unless_its_class_says_axial():
    """A vision encoder rotates by patch row and column: a 1D RoPE from its fields would be silently wrong. MLCD's
    class reads a rope dict without rope_type (or only a top-level rope_theta) as "axial", its 2D rotary."""
    config = {
        "model_type": "mlcd_vision_model",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "rope_theta": 100.0,
        "patch_size": 16,
        "image_size": 224,
    }
    loaded = transformers.AutoConfig.for_model(**config)
    assert loaded.rope_parameters["rope_type"] == "axial"
    assert repr(from_hf_config(config)) == repr(from_hf_config(loaded))
    assert isinstance(from_hf_config(config), posenc.AxialRoPE)
    with pytest.raises(ValueError, match="patch_size and image_size, a vision model"):
        from_hf_config({**config, "model_type": "a_vision_model_of_its_own"})


@requires_transformers
@pytest.mark.parametrize("key", ["image_size", "patch_size"])
def test_a_vision_tower_config_json_without_its_image_or_patch_size_is_refused(key):
    """Its config class defaults both: a dict that leaves one out is a vision tower still (refused as its
    object is), not a text model's 1D RoPE."""
    config = transformers.AutoConfig.for_model("sapiens2")
    for form in (config, {k: v for k, v in config.to_dict().items() if k != key}):
        with pytest.raises(ValueError, match="patch_size and image_size, a vision model"):
            layer_encodings(form)


@requires_transformers
def test_esm_reads_its_position_embedding_type_not_its_rope_theta():
    """ESM's config carries rope_theta whatever its position_embedding_type: 'absolute' (ESM-1b, the class
    default) is a learned table numbered from the padding, 'rotary' (ESM-2) is RoPE."""
    sizes = {"hidden_size": 64, "num_attention_heads": 2, "pad_token_id": 1, "max_position_embeddings": 40}
    learned = from_hf_config(transformers.EsmConfig(**sizes))
    assert isinstance(learned, posenc.Learned) and learned.offset == 2
    rope = from_hf_config(transformers.EsmConfig(**sizes, position_embedding_type="rotary"))
    assert isinstance(rope, posenc.RoPE) and rope.head_dim == 32


@requires_transformers
@pytest.mark.parametrize(
    "model_type", ["moshi_depth", "hy_v4_vl_vision", "qwen3_omni_moe_audio_encoder", "roberta", "mamba2"]
)
@pytest.mark.parametrize("key", ["rope_theta", "rope_parameters"])
def test_a_rope_key_its_config_class_does_not_have_is_refused(model_type, key):
    """A RoPE key kept on a config object whose class has none (a tower, an audio encoder, a BERT-like, a
    state-space model) is one its model's code never reads: refused by name, not read as the model's RoPE."""
    value = 5.0 if key == "rope_theta" else {"rope_type": "default", "rope_theta": 5.0}
    config = transformers.AutoConfig.for_model(model_type, **{key: value})
    with pytest.raises(ValueError, match=rf"'{key}' is not a field of {type(config).__name__}"):
        from_hf_config(config)


@requires_transformers
def test_a_config_class_of_its_own_may_read_any_rope_key():
    """Remote code (a class outside transformers.models, even one built on a transformers class) may read a
    key its class does not declare: converted by rule, as a config.json dict is."""

    class RemoteConfig(transformers.MoshiDepthConfig):
        pass

    config = RemoteConfig(rope_theta=5.0)
    assert repr(from_hf_config(config)) == repr(from_hf_config(config.to_dict()))
    assert from_hf_config(config).base == 5.0


@requires_transformers
@pytest.mark.parametrize("key", ["rope_theta", "rope_parameters"])
def test_a_bert_like_config_json_with_a_rope_key_is_refused(key):
    """BERT's kin always add their learned table in transformers 5: a RoPE key in their config.json is not theirs."""
    config = transformers.AutoConfig.for_model("roberta").to_dict()
    value = 5.0 if key == "rope_theta" else {"rope_type": "default", "rope_theta": 5.0}
    with pytest.raises(ValueError, match=rf"'{key}' given, but transformers' roberta adds a learned"):
        from_hf_config({**config, key: value})


@requires_transformers
def test_esm_refuses_a_rope_parameters_dict_its_code_does_not_read():
    """ESM's rotary reads rope_theta alone; a rope_parameters beside it (object or dict) would be read for it."""
    sizes = {
        "hidden_size": 64,
        "num_attention_heads": 2,
        "pad_token_id": 1,
        "position_embedding_type": "rotary",
    }
    config = transformers.EsmConfig(**sizes, rope_parameters={"rope_type": "default", "rope_theta": 5.0})
    for form in (config, config.to_dict()):
        with pytest.raises(
            ValueError, match="ESM's code computes the default frequencies from rope_theta alone"
        ):
            from_hf_config(form)
    assert from_hf_config(transformers.EsmConfig(**sizes, rope_theta=5.0)).base == 5.0


@requires_transformers
@pytest.mark.parametrize(
    ("model_type", "key"), [("hy_v4_vl_vision", "max_image_size"), ("cosmos3_edge_vision", "num_patches")]
)
def test_a_vision_tower_config_json_with_a_rope_key_is_refused_by_its_image_size(model_type, key):
    """A vision tower's config.json says its image size another way than image_size: still a vision tower, whose
    code builds no 1D RoPE from a rope_theta it carries."""
    config = transformers.AutoConfig.for_model(model_type).to_dict()
    with pytest.raises(ValueError, match=f"patch_size and {key}, a vision model"):
        from_hf_config({**config, "rope_theta": 5.0})


@requires_transformers
def test_from_hf_model_of_one_stacks_module_refuses_the_other_stacks_name():
    """A stack's own module holds its table under the bare name: asked for the other stack, it would be read as
    that stack's (T5: the decoder's table with bidirectional buckets, matching neither stack's bias): refused."""
    config = transformers.T5Config(d_model=32, d_kv=8, d_ff=32, num_layers=1, num_heads=4, vocab_size=50)
    t5 = transformers.T5ForConditionalGeneration(config)
    bart = transformers.BartModel(
        transformers.BartConfig(
            vocab_size=50, d_model=32, encoder_layers=1, decoder_layers=1, max_position_embeddings=40
        )
    )
    for module, own, other in [
        (t5.decoder, "decoder", "encoder"),
        (t5.encoder, "encoder", "decoder"),
        (bart.encoder, "encoder", "decoder"),
        (bart.decoder, "decoder", "encoder"),
    ]:
        with pytest.raises(ValueError, match=f"stack='{other}', but this is the {own} stack's own module"):
            from_hf_model(module, stack=other)
        weights = dict(from_hf_model(module, stack=own).named_parameters())
        assert all(any(torch.equal(w, t) for t in module.state_dict().values()) for w in weights.values())
    assert from_hf_model(t5.decoder, stack="decoder").causal and not from_hf_model(t5.encoder).causal


@requires_transformers
@pytest.mark.parametrize(
    ("model_type", "change", "match"),
    [
        ("mpnet", {}, "relative_attention_num_buckets=32: its code adds relative positions inside each"),
        (
            "deberta",
            {"relative_attention": True},
            "relative_attention=True: its code adds relative positions",
        ),
        (
            "deberta-v2",
            {"relative_attention": True},
            "relative_attention=True: its code adds relative positions",
        ),
        (
            "deberta-v2",
            {"position_biased_input": False},
            "position_biased_input=False: its code adds no absolute",
        ),
    ],
)
def test_an_absolute_table_beside_relative_attention_is_refused(model_type, change, match):
    """MPNet's attention always adds a bucketed relative bias, DeBERTa's with relative_attention (and without
    position_biased_input it has no table): its learned table alone would not be the model's positions."""
    config = {
        **transformers.AutoConfig.for_model(model_type).to_dict(),
        "position_embedding_type": "absolute",
    }
    with pytest.raises(ValueError, match=match):
        from_hf_config({**config, **change})
    if model_type.startswith("deberta"):
        assert isinstance(from_hf_config(config), posenc.Learned)


@requires_transformers
def test_a_legacy_rope_scaling_the_class_leaves_beside_its_rope_parameters_is_not_read():
    """Cohere2-MoE's class does not fold a rope_scaling kwarg into its rope_parameters, which its model reads;
    to_dict() keeps both: the object converts as its model rotates (posenc scaled by the leftover)."""
    from transformers.models.cohere2_moe import modeling_cohere2_moe as cohere

    from posenc.app.hf_zoo import TINY as ZOO_TINY

    config = cohere.Cohere2MoeConfig(
        **ZOO_TINY, rope_theta=777.0, rope_scaling={"type": "linear", "factor": 2.0}
    )
    assert config.rope_parameters == {"rope_type": "default", "rope_theta": 777.0}
    q, k = torch.randn(2, 1, 2, 50, config.head_dim).unbind()
    positions = torch.arange(50)[None]
    want = cohere.apply_rotary_pos_emb(q, k, *cohere.Cohere2MoeRotaryEmbedding(config)(q, positions))
    got = posenc.hf.layer_encodings(config)[0].encode_qk(q, k, q_positions=positions, k_positions=positions)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=2e-5, rtol=1e-5)
