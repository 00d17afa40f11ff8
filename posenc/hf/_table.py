"""The conversion table: ``model_type`` -> converter and a one-line summary (the single source of truth).

:func:`posenc.hf.from_hf_config` looks a model type up here; :data:`SUPPORTED_MODEL_TYPES` and
:func:`supported_models_markdown` are generated from it. The converters themselves live in
:mod:`posenc.hf._rope`, :mod:`posenc.hf._layers`, :mod:`posenc.hf._speech` and :mod:`posenc.hf._bias`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..base import PositionalEncoding
from ._bias import _bloom, _falcon, _learned, _mpt, _sinusoidal, _t5
from ._layers import cohere2, deepseek, every_nth, gemma3, gemma4, gpt_oss, modernbert, nope_layers
from ._read import Config
from ._rope import RopeDefaults, gptj, mrope, rope
from ._speech import speech

Convert = Callable[[Config, str, bool | None], "PositionalEncoding | list[PositionalEncoding]"]


@dataclass(frozen=True)
class _Converter:
    """A model type's converter: one encoding, or a list with one per layer (shared where equal).

    ``summary``: one line, or ``(layer type, line)`` rows where the layers differ.
    """

    convert: Convert
    summary: str | tuple[tuple[str, str], ...]
    #: Every layer has its own learned tables (the conformer speech encoders): layer_encodings
    #: gives independent copies, and from_hf_model needs layer=.
    per_layer_weights: bool = False


# Model types whose config classes share every default also share a converter.
_BART = _Converter(
    _learned(
        width=("d_model",),
        length=("max_position_embeddings",),
        default_width=1024,
        default_length=1024,
        offset=2,
    ),
    "Learned, offset 2",
)
_MARIAN = _Converter(
    _sinusoidal(spacing="paper", default_width=1024, default_length=1024),
    "Sinusoidal, concat layout, positions from 0",
)

_GEMMA3 = _Converter(
    gemma3(RopeDefaults(2304, 8, 131072, head_dim=256), every_nth(6)),
    (
        ("sliding_attention", "RoPE, half layout, base `rope_local_base_freq` (1e4), sliding window"),
        ("full_attention", "RoPE, half layout, base 1e6 and the scaling dict (linear ×8 in the 4B-27B)"),
    ),
)

_QWEN2_VL = _Converter(
    mrope(RopeDefaults(8192, 64, 32768, theta=1_000_000.0), (16, 24, 24), interleaved=False),
    "MRoPE, chunked (t, h, w) sections, `mrope_section` (16, 24, 24), base 1e6",
)

_CONVERTERS: dict[str, _Converter] = {
    # RoPE, half-split layout (rotate_half), whole head
    "llama": _Converter(rope(RopeDefaults(4096, 32, 2048)), "RoPE, half layout"),
    "mistral": _Converter(rope(RopeDefaults(4096, 32, 131072)), "RoPE, half layout"),
    "mixtral": _Converter(
        rope(RopeDefaults(4096, 32, 131072, theta=1_000_000.0)), "RoPE, half layout, base 1e6"
    ),
    "qwen2": _Converter(rope(RopeDefaults(4096, 32, 32768)), "RoPE, half layout"),
    "qwen3": _Converter(
        rope(RopeDefaults(4096, 32, 32768, head_dim=128)), "RoPE, half layout (head_dim 128 by default)"
    ),
    "gemma": _Converter(
        rope(RopeDefaults(3072, 16, 8192, head_dim=256)), "RoPE, half layout (head_dim 256 by default)"
    ),
    "gemma2": _Converter(
        rope(RopeDefaults(2304, 8, 8192, head_dim=256)),
        "RoPE, half layout (head_dim 256 by default), every layer; sliding window on alternate layers",
    ),
    "gemma3_text": _GEMMA3,
    "gemma3n_text": _Converter(
        gemma3(RopeDefaults(2048, 8, 32768, head_dim=256), every_nth(5)),
        (
            ("sliding_attention", "RoPE, half layout, base `rope_local_base_freq` (1e4), sliding window"),
            ("full_attention", "RoPE, half layout, base 1e6"),
        ),
    ),
    "gemma4_text": _Converter(
        gemma4,
        (
            ("sliding_attention", "RoPE, half layout, base 1e4, sliding window"),
            (
                "full_attention",
                "proportional RoPE (p-RoPE, 0.25 of the pairs), base 1e6, `global_head_dim` (512)",
            ),
        ),
    ),
    "modernbert": _Converter(
        modernbert,
        (
            (
                "full_attention",
                "RoPE, half layout, `global_rope_theta` (1.6e5), every third layer from the first",
            ),
            (
                "sliding_attention",
                "RoPE, half layout, `local_rope_theta` (1e4), window `local_attention` (128)",
            ),
        ),
    ),
    "llama4_text": _Converter(
        nope_layers(
            RopeDefaults(5120, 40, 131072, theta=500_000.0, head_dim=128, layout="interleaved"), "temperature"
        ),
        (
            ("RoPE layers", "RoPE, interleaved layout, base 5e5"),
            ("`no_rope_layers` 0 (every 4th)", "QueryTemperature (`floor_scale`, `attn_scale`), or NoPE"),
        ),
    ),
    "smollm3": _Converter(
        nope_layers(RopeDefaults(2048, 16, 32768, theta=2_000_000.0), "none"),
        (("RoPE layers", "RoPE, half layout, base 2e6"), ("`no_rope_layers` 0 (every 4th)", "NoPE")),
    ),
    "cohere2": _Converter(
        cohere2,
        (
            ("sliding_attention", "RoPE, interleaved layout, sliding window"),
            ("full_attention", "NoPE"),
        ),
    ),
    "deepseek_v2": _Converter(
        deepseek(2),
        "RoPE over `qk_rope_head_dim` (q_pe / k_pe), interleaved, YaRN with mscale / mscale_all_dim",
    ),
    "deepseek_v3": _Converter(
        deepseek(3),
        "RoPE over `qk_rope_head_dim` (q_pe / k_pe), interleaved if `rope_interleave`, YaRN with mscale_all_dim",
    ),
    "gpt_oss": _Converter(
        gpt_oss, "RoPE, half layout, YaRN (`truncate=False`); sliding window on alternate layers"
    ),
    # M-RoPE (vision-language text models): positions (t, 3) or (b, t, 3); 1D positions = RoPE
    "qwen2_vl_text": _QWEN2_VL,
    "qwen2_5_vl_text": _QWEN2_VL,
    "qwen3_vl_text": _Converter(
        mrope(RopeDefaults(4096, 32, 128000, theta=500_000.0, head_dim=128), (24, 20, 20), interleaved=True),
        "MRoPE, interleaved (t, h, w) sections, `mrope_section` (24, 20, 20), base 5e5",
    ),
    "qwen3_vl_moe_text": _Converter(
        mrope(RopeDefaults(2048, 16, 128000, theta=500_000.0), (24, 20, 20), interleaved=True),
        "MRoPE, interleaved (t, h, w) sections, `mrope_section` (24, 20, 20), base 5e5",
    ),
    "olmo": _Converter(rope(RopeDefaults(4096, 32, 2048)), "RoPE, half layout"),
    "starcoder2": _Converter(rope(RopeDefaults(3072, 24, 4096)), "RoPE, half layout"),
    "granite": _Converter(rope(RopeDefaults(4096, 32, 2048)), "RoPE, half layout"),
    "cohere": _Converter(
        rope(RopeDefaults(8192, 64, 8192, theta=500_000.0, layout="interleaved")),
        "RoPE, interleaved layout, base 5e5",
    ),
    # RoPE on the first channels of each head (partial rotary)
    "phi": _Converter(
        rope(RopeDefaults(2048, 32, 2048, partial=0.5)), "RoPE, half layout, partial_rotary_factor (0.5)"
    ),
    "phi3": _Converter(
        rope(
            RopeDefaults(
                3072,
                32,
                4096,
                partial=1.0,
                original_max=4096,
                renamed_types=(("su", "longrope"), ("yarn", "longrope")),
            )
        ),
        "RoPE, half layout, longrope",
    ),
    "stablelm": _Converter(
        rope(RopeDefaults(2560, 32, 4096, partial=0.25)), "RoPE, half layout, partial_rotary_factor (0.25)"
    ),
    "persimmon": _Converter(
        rope(RopeDefaults(4096, 64, 16384, partial=0.5)), "RoPE, half layout, partial_rotary_factor (0.5)"
    ),
    "gpt_neox": _Converter(
        rope(
            RopeDefaults(
                6144, 64, 2048, partial=0.25, theta_keys=("rotary_emb_base",), partial_keys=("rotary_pct",)
            )
        ),
        "RoPE, half layout, rotary_pct (0.25), rotary_emb_base",
    ),
    "gptj": _Converter(gptj, "RoPE, interleaved layout, rotary_dim (64), no scaling"),
    "codegen": _Converter(gptj, "RoPE, interleaved layout, rotary_dim (64), no scaling"),
    "falcon": _Converter(
        _falcon, "RoPE, half layout; with alibi=True, ALiBi with slopes / sqrt(head_dim) (FalconALiBi)"
    ),
    # conformer speech encoders: one set of learned tables per layer (from_hf_model(model, layer=i))
    "wav2vec2-bert": _Converter(
        speech,
        "ShawRelative (`relative_key`, left 64 / right 8) or RelPosXL (`relative`), per layer",
        per_layer_weights=True,
    ),
    "wav2vec2-conformer": _Converter(
        speech,
        "RelPosXL (`relative`, Transformer-XL), per layer",
        per_layer_weights=True,
    ),
    "seamless_m4t": _Converter(
        speech,
        "speech encoder: RelPosXL (`relative`, Transformer-XL), per layer",
        per_layer_weights=True,
    ),
    "seamless_m4t_v2": _Converter(
        speech,
        "speech encoder: ShawRelative (`relative_key`, left 64 / right 8), per layer",
        per_layer_weights=True,
    ),
    # attention biases
    "t5": _Converter(_t5, "RelativeBias (encoder bidirectional, decoder causal)"),
    "mt5": _Converter(_t5, "RelativeBias (encoder bidirectional, decoder causal)"),
    "bloom": _Converter(_bloom, "ALiBi"),
    "mpt": _Converter(_mpt, "ALiBi, max_bias = attn_config.alibi_bias_max"),
    # added to the embeddings
    "gpt2": _Converter(
        _learned(
            width=("n_embd", "hidden_size"),
            length=("n_positions", "max_position_embeddings"),
            default_width=768,
            default_length=1024,
        ),
        "Learned",
    ),
    "gpt_neo": _Converter(
        _learned(
            width=("hidden_size",),
            length=("max_position_embeddings",),
            default_width=2048,
            default_length=2048,
        ),
        "Learned",
    ),
    "opt": _Converter(
        _learned(
            width=("hidden_size",),
            length=("max_position_embeddings",),
            default_width=768,
            default_length=2048,
            offset=2,
        ),
        "Learned, offset 2",
    ),
    "bart": _BART,
    "mbart": _BART,
    "marian": _MARIAN,
    "pegasus": _MARIAN,
    "speech_to_text": _Converter(
        _sinusoidal(
            spacing="tensor2tensor",
            default_width=256,
            default_length=1024,
            length=("max_target_positions", "max_source_positions"),
            default_pad=1,
        ),
        "Sinusoidal, concat layout, tensor2tensor spacing, offset pad_token_id + 1",
    ),
    "m2m_100": _Converter(
        _sinusoidal(spacing="tensor2tensor", default_width=1024, default_length=1024, default_pad=1),
        "Sinusoidal, concat layout, tensor2tensor spacing, offset pad_token_id + 1",
    ),
    "xglm": _Converter(
        _sinusoidal(spacing="tensor2tensor", default_width=1024, default_length=2048, fixed_offset=2),
        "Sinusoidal, concat layout, tensor2tensor spacing, offset 2",
    ),
}

#: The ``model_type`` values :func:`from_hf_config` accepts, generated from its conversion table.
#: Multimodal configs (``gemma3``, ``gemma3n``, ``gemma4``, ``llama4``...) are read through their
#: ``text_config``.
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted(_CONVERTERS))

# Multimodal model types whose text model lives under text_config, and that text model's type
# (for config.json dicts whose text_config leaves model_type out).
_TEXT_MODEL_TYPES = {
    "gemma3": "gemma3_text",
    "gemma3n": "gemma3n_text",
    "gemma4": "gemma4_text",
    "llama4": "llama4_text",
    "qwen2_vl": "qwen2_vl_text",
    "qwen2_5_vl": "qwen2_5_vl_text",
    "qwen3_vl": "qwen3_vl_text",
    "qwen3_vl_moe": "qwen3_vl_moe_text",
}
# Multimodal types whose config.json may be flat (no text_config; the text keys at the top level, as
# transformers' Qwen2-VL config reads them), and those whose missing text_config means the defaults.
_FLAT_TEXT = frozenset({"qwen2_vl", "qwen2_5_vl"})
_DEFAULT_TEXT = frozenset({"qwen3_vl", "qwen3_vl_moe"})


def supported_models_markdown() -> str:
    """A Markdown table of the supported ``model_type`` values and what each becomes, for the docs.

    Generated from the same table :func:`from_hf_config` uses, so the documentation cannot
    drift from the code. A model whose layers differ gets one row per layer type.
    """
    # Every RoPE row except GPT-J/CodeGen also reads the rope_parameters scaling types.
    rows = ["| model_type | layers | posenc encoding |", "| --- | --- | --- |"]
    for name in SUPPORTED_MODEL_TYPES:
        summary = _CONVERTERS[name].summary
        if isinstance(summary, str):
            rows.append(f"| `{name}` | all | {summary} |")
        else:
            rows += [f"| `{name}` | {layers} | {text} |" for layers, text in summary]
    for outer, inner in sorted(_TEXT_MODEL_TYPES.items()):
        rows.append(f"| `{outer}` | all | as `{inner}`, read from `text_config` |")
    return "\n".join(rows)
