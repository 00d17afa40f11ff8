"""The encoding a ``transformers`` config describes: one converter per ``model_type``, one table.

:func:`from_hf_config` reads a ``transformers`` config object, or the dict of a model's
``config.json``, and returns the posenc encoding that model uses, with every setting carried
over. :data:`_CONVERTERS` maps each ``model_type`` to its converter and a one-line summary;
:data:`SUPPORTED_MODEL_TYPES` and :func:`supported_models_markdown` are generated from it. The
RoPE converters live in :mod:`posenc.hf._rope`, the config readers in :mod:`posenc.hf._read`.

``transformers`` is optional: nothing here imports it. The defaults of keys a ``config.json``
leaves out are those of the matching ``transformers`` config class (checked by the tests
against ``transformers`` itself).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .._checks import check_bool, check_int
from ..base import PositionalEncoding
from ..encodings import ALiBi, Learned, RelativeBias, Sinusoidal
from ..encodings.alibi import FalconALiBi
from ._layers import (
    cohere2,
    deepseek,
    every_nth,
    gemma3,
    gemma4,
    gpt_oss,
    layer_count,
    modernbert,
    nope_layers,
)
from ._layers import layer_windows as _layer_windows
from ._read import Config, config_dict, get, heads_and_head_dim, positive_int
from ._rope import RopeDefaults, gptj, mrope, rope
from ._speech import SPEECH_MODEL_TYPES, speech, speech_layer_count

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "from_hf_config",
    "layer_encodings",
    "layer_windows",
    "supported_models_markdown",
]


# --- biases ------------------------------------------------------------------------------------


def _t5(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    # The encoder's bias is bidirectional, the decoder's causal: a T5 config is the encoder's unless
    # is_decoder is set (transformers flips it for the decoder stack), so pass causal=True for the decoder.
    default_heads = 6 if model_type == "mt5" else 8
    num_heads = positive_int(cfg, model_type, "num_heads", "num_attention_heads", default=default_heads)
    is_decoder = check_bool(f"{model_type} config: is_decoder", cfg.get("is_decoder", False))
    is_causal = is_decoder if causal is None else causal
    return RelativeBias(
        num_heads,
        num_buckets=positive_int(cfg, model_type, "relative_attention_num_buckets", default=32),
        max_distance=positive_int(cfg, model_type, "relative_attention_max_distance", default=128),
        bidirectional=not is_causal,
        causal=is_causal,
    )


def _bloom(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    num_heads = positive_int(cfg, model_type, "n_head", "num_attention_heads", default=8)
    return ALiBi(num_heads, causal=True if causal is None else causal)


def _mpt(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    attn = cfg.get("attn_config") or {}
    if not isinstance(attn, Mapping):
        attn = config_dict(attn)
    if not check_bool(f"{model_type} config: attn_config['alibi']", attn.get("alibi", True)):
        raise ValueError(
            f"{model_type} config: attn_config.alibi is False; transformers' MPT always uses ALiBi and has no other "
            "position encoding, so this config has no supported encoding"
        )
    num_heads = positive_int(cfg, model_type, "n_heads", "num_attention_heads", default=16)
    max_bias = get(attn, "alibi_bias_max", default=8)
    return ALiBi(num_heads, causal=True if causal is None else causal, max_bias=float(max_bias))


def _falcon(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    if not check_bool(f"{model_type} config: alibi", cfg.get("alibi", False)):
        return rope(RopeDefaults(4544, 71, 2048))(cfg, model_type, causal)
    num_heads, head_dim = heads_and_head_dim(
        cfg,
        model_type,
        heads=("num_attention_heads", "n_head"),
        width=("hidden_size", "n_embed"),
        default_heads=71,
        default_width=4544,
    )
    return FalconALiBi(num_heads, head_dim, causal=True if causal is None else causal)


# --- absolute (added to the embeddings) --------------------------------------------------------


def _learned(
    *,
    width: tuple[str, ...],
    length: tuple[str, ...],
    default_width: int,
    default_length: int,
    offset: int = 0,
) -> Callable[[Config, str, bool | None], PositionalEncoding]:
    def convert(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
        d_model = positive_int(cfg, model_type, *width, default=default_width)
        max_len = positive_int(cfg, model_type, *length, default=default_length)
        return Learned(d_model, max_len, offset=offset)

    return convert


def _sinusoidal(
    *,
    spacing: Literal["paper", "tensor2tensor"],
    default_width: int,
    default_length: int,
    length: tuple[str, ...] = ("max_position_embeddings",),
    default_pad: int | None = None,
    fixed_offset: int | None = None,
) -> Callable[[Config, str, bool | None], PositionalEncoding]:
    def convert(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
        d_model = positive_int(cfg, model_type, "d_model", "hidden_size", default=default_width)
        if d_model % 2:
            raise ValueError(f"{model_type} config: d_model must be even for a sin/cos table, got {d_model}")
        max_len = get(cfg, *length, default=default_length)
        if spacing == "paper":
            # Marian / Pegasus: positions from 0, [sin | cos], inv_freq = base^(-2i/d).
            return Sinusoidal(d_model, layout="concat", max_len=max_len)
        # fairseq / tensor2tensor: [sin | cos], inv_freq = base^(-i/(d/2-1)); Speech2Text and M2M100
        # number real tokens from padding_idx + 1, XGLM adds a fixed 2 to its position ids.
        offset = fixed_offset
        if offset is None:
            pad = get(cfg, "pad_token_id", default=default_pad)
            check_int(f"{model_type} config: pad_token_id", pad, minimum=0)  # positions start at pad + 1
            offset = pad + 1
        return Sinusoidal(
            d_model, layout="concat", max_len=max_len, offset=offset, freq_spacing="tensor2tensor"
        )

    return convert


# --- the table: model_type -> converter (the single source of truth) ---------------------------


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


def _resolve(config: Any) -> tuple[dict[str, Any], str, _Converter]:
    """The config as a dict (the text model's for a multimodal config), its model_type and converter."""
    cfg = config_dict(config)
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise ValueError(
            f"config has no 'model_type' (got {model_type!r}); a config.json dict must carry it. "
            f"Supported model types: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    if model_type in _TEXT_MODEL_TYPES and cfg.get("text_config") is None:
        if model_type in _FLAT_TEXT:
            cfg = {**cfg, "text_config": {k: v for k, v in cfg.items() if k != "model_type"}}
        elif model_type in _DEFAULT_TEXT:
            cfg = {**cfg, "text_config": {}}
    if model_type not in _CONVERTERS and cfg.get("text_config") is not None:
        text = config_dict(cfg["text_config"])
        text.setdefault("model_type", _TEXT_MODEL_TYPES.get(model_type))
        if text["model_type"] in _CONVERTERS:
            cfg, model_type = text, text["model_type"]
    converter = _CONVERTERS.get(model_type)
    if converter is None:
        raise ValueError(
            f"model_type {model_type!r} is not supported by from_hf_config. Supported model types: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)} (and, through text_config, {', '.join(sorted(_TEXT_MODEL_TYPES))})"
        )
    return cfg, model_type, converter


def _layer_count(cfg: dict[str, Any], model_type: str) -> int | None:
    if model_type in SPEECH_MODEL_TYPES:
        return speech_layer_count(cfg, model_type)
    return layer_count(cfg, model_type)


def _fresh_copy(encoding: PositionalEncoding) -> PositionalEncoding:
    clone = copy.deepcopy(encoding)
    reset = getattr(clone, "reset_parameters", None)
    if callable(reset):
        reset()
    return clone


def _layers(
    config: Any, causal: bool | None
) -> tuple[PositionalEncoding | list[PositionalEncoding], dict, str]:
    if causal is not None and not isinstance(causal, bool):
        raise TypeError(f"causal must be None, True or False, got {causal!r}")
    cfg, model_type, converter = _resolve(config)
    return converter.convert(cfg, model_type, causal), cfg, model_type


def layer_encodings(config: Any, *, causal: bool | None = None) -> list[PositionalEncoding]:
    """One position encoding per layer of a Hugging Face model, built from its config.

    Layers that share settings share one instance (Gemma 3's sliding layers hold one
    :class:`~posenc.RoPE`, its global layers another), so tables are built once per distinct
    setting. A model with one encoding for all layers gives that instance ``n`` times.

    * Gemma 3 / 3n: base ``rope_local_base_freq`` (1e4) on sliding layers, 1e6 and the scaling
      dict on full layers; Gemma 4: proportional RoPE with ``global_head_dim`` on full layers;
      ModernBERT: ``global_rope_theta`` every third layer; transformers 5's ``rope_parameters``
      nested by layer type, or the legacy keys.
    * Llama 4: :class:`~posenc.QueryTemperature` (or :class:`~posenc.NoPE` without
      ``attn_temperature_tuning``) where ``no_rope_layers`` is 0; SmolLM3: NoPE there; Cohere 2:
      NoPE on its full (global) layers.
    * Sliding windows are not encodings: :func:`layer_windows` gives them.

    Args:
        config: a ``transformers`` config object or a ``config.json`` dict (multimodal configs
            are read through ``text_config``).
        causal: as in :func:`from_hf_config`.

    Returns:
        ``num_hidden_layers`` encodings.

    Raises:
        ValueError: as :func:`from_hf_config`; also a config without ``num_hidden_layers``.
    """
    built, cfg, model_type = _layers(config, causal)
    if isinstance(built, list):
        return built
    n = _layer_count(cfg, model_type)
    if n is None:
        raise ValueError(f"{model_type} config: missing 'num_hidden_layers' (the number of layers)")
    if _CONVERTERS[model_type].per_layer_weights:
        # each layer has its own tables: independent modules, each freshly initialised
        return [built, *(_fresh_copy(built) for _ in range(n - 1))]
    return [built] * n


def layer_windows(config: Any) -> list[int | None]:
    """The sliding window of each layer (``None`` for global layers), for ``window=`` per layer.

    ``W`` as transformers applies it and as ``posenc.attention(..., window=W)`` reads it: in a
    causal model a query at ``i`` sees keys ``j`` with ``i - W < j <= i`` (``sliding_window``); in
    ModernBERT (bidirectional) ``|i - j| <= W // 2`` (``W = local_attention``). Layers without a window, models without sliding
    windows, and Llama 4's chunked layers (chunks, not windows) give ``None``.

    Args:
        config: as in :func:`layer_encodings`.

    Returns:
        ``num_hidden_layers`` entries.
    """
    cfg, model_type, _ = _resolve(config)
    if model_type in SPEECH_MODEL_TYPES:  # full (bidirectional) attention in every layer
        return [None] * speech_layer_count(cfg, model_type)
    return _layer_windows(cfg, model_type)


def from_hf_config(
    config: Any, *, layer: int | None = None, causal: bool | None = None
) -> PositionalEncoding:
    """The position encoding a Hugging Face ``transformers`` model uses, built from its config.

    Every setting that shapes the encoding is carried over: RoPE ``rope_theta`` and the
    ``rope_parameters`` / legacy ``rope_scaling`` dict (``linear``, ``dynamic``, ``yarn``,
    ``longrope``, ``llama3``), ``head_dim``, partial rotation (``partial_rotary_factor``, GPT-NeoX's
    ``rotary_pct``, GPT-J's ``rotary_dim``) and layout (half-split or interleaved); T5's buckets
    and max distance; ALiBi (MPT's ``alibi_bias_max``); learned tables (OPT/BART offset 2);
    fairseq-style sinusoids (offset ``pad_token_id + 1``). Keys a ``config.json`` omits take the
    defaults of the ``transformers`` config class. :data:`SUPPORTED_MODEL_TYPES` lists the
    accepted ``model_type`` values.

    Learned weights (T5's bias table, GPT-2's ``wpe``) are not part of a config: the returned
    module is freshly initialised; load them with ``load_state_dict`` (the parameter names
    match: ``relative_attention_bias.weight``, ``weight``).

    Args:
        config: a ``transformers`` config object (``model.config``, ``AutoConfig``), or the dict
            of a ``config.json`` (must hold ``model_type``). ``transformers`` need not be
            installed for the dict form.
        layer: the 0-based layer whose encoding to return; needed when the model's layers
            differ (Gemma 3, ModernBERT, Llama 4, SmolLM3, Cohere 2, Gemma 4; see
            :func:`layer_encodings`).
        causal: for bias encodings, whether attention is causal. ``None`` reads it from the
            config: T5 follows ``is_decoder`` (the encoder's bias is bidirectional, the
            decoder's causal; pass ``causal=True`` for the decoder of an encoder-decoder
            config); ALiBi models are causal decoders. Ignored by the other encodings.

    Returns:
        A :class:`~posenc.RoPE`, :class:`~posenc.RelativeBias`, :class:`~posenc.ALiBi` (or
        :class:`~posenc.encodings.alibi.FalconALiBi`), :class:`~posenc.Learned` or
        :class:`~posenc.Sinusoidal`.

    Raises:
        ValueError: unsupported ``model_type`` (the message lists the supported ones), an
            unsupported ``rope_type``, layers that differ without ``layer=``, ``layer`` outside
            the model, a bad ``layer_types`` / ``no_rope_layers`` / nested ``rope_parameters``,
            or sizes that do not fit.
        TypeError: ``config`` is neither a config object nor a mapping; ``causal`` not a bool;
            a size in the config is not an int; a number (``rope_theta``) or flag (``alibi``) of
            the wrong type — strings and truthy non-bools are refused, naming the key.

    Example::

        >>> from transformers import AutoConfig                         # doctest: +SKIP
        >>> rope = from_hf_config(AutoConfig.from_pretrained("meta-llama/Llama-3.1-8B"))  # doctest: +SKIP
        >>> q, k = rope(q, k)                                           # doctest: +SKIP
    """
    built, cfg, model_type = _layers(config, causal)
    if layer is not None:
        if isinstance(layer, bool) or not isinstance(layer, int):
            raise TypeError(
                f"layer must be an int (0-based layer index) or None, got {layer!r} ({type(layer).__name__})"
            )
        n = len(built) if isinstance(built, list) else _layer_count(cfg, model_type)
        if layer < 0 or (n is not None and layer >= n):
            count = f"it has {n} layers (0..{n - 1})" if n is not None else "layers count from 0"
            raise ValueError(f"layer={layer} is outside the {model_type} model: {count}")
        return built[layer] if isinstance(built, list) else built
    if isinstance(built, list):
        distinct = list(dict.fromkeys(built))
        if len(distinct) > 1:
            raise ValueError(
                f"{model_type} layers use {len(distinct)} different encodings "
                f"({', '.join(type(e).__name__ for e in distinct)}): pass layer=i for the encoding of layer i, "
                "or use posenc.hf.layer_encodings(config) for one per layer"
            )
        return distinct[0]
    return built
