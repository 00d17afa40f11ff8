"""Reading a ``transformers`` config (object or ``config.json`` dict): shared by every converter."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .._checks import check_positive_int
from ..functional.rope_scaling import _ORIGINAL, rope_type_of

if TYPE_CHECKING:
    from ..base import PositionalEncoding

Config = Mapping[str, Any]
#: A converter: ``(config dict, model_type, causal)`` -> the encoding, or one per layer.
Convert = Callable[[Config, str, "bool | None"], "PositionalEncoding | list[PositionalEncoding]"]


#: transformers' standard names and the older ones a ``config.json`` may keep instead (what config classes'
#: attribute_map reads them as: GPT-2's n_embd, BART's d_model, DBRX's n_heads, JetMoE's kv_channels):
#: :func:`config_dict` fills a standard name that is missing (or null) from the first alias set.
ALIASES = {
    "num_attention_heads": ("n_head", "n_heads", "num_heads"),
    "hidden_size": ("n_embd", "n_embed", "d_model", "embed_dim", "emb_dim"),
    "num_hidden_layers": ("n_layer", "num_layers", "n_layers"),
    "max_position_embeddings": ("n_positions", "max_seq_len"),
    "head_dim": ("kv_channels",),
    # RecurrentGemma's local attention; dots3 Note's released config.json
    "sliding_window": ("attention_window_size", "sliding_window_size"),
}
#: Classes that read a standard name under a key of their own (attribute_map) that other classes use for
#: something else (ViT-MAE's decoder_* keys are its MAE decoder's; Janus's depth, its aligner's)
_TYPE_ALIASES: dict[str, tuple[tuple[str, str], ...]] = {
    "moonshine": (
        ("num_hidden_layers", "decoder_num_hidden_layers"),
        ("num_attention_heads", "decoder_num_attention_heads"),
    ),
    **dict.fromkeys(("mask2former", "oneformer", "trocr"), (("num_hidden_layers", "decoder_layers"),)),
    **dict.fromkeys(("kosmos_2_text_model", "kosmos_2_5_text_model"), (("num_hidden_layers", "layers"),)),
    "bailing_hybrid": (("max_position_embeddings", "model_max_length"),),
    **dict.fromkeys(
        "cohere_compass_vision ernie4_5_vl_moe_vision exaone4_5_vision glm4v_moe_vision glm4v_vision glm5_next_vision "
        "glm_image_vision glm_ocr_vision pp_ocrv5_mobile_rec pp_ocrv5_server_rec pp_ocrv6_small_rec pp_ocrv6_tiny_rec "
        "qwen2_5_omni_vision_encoder qwen2_5_vl_vision qwen2_vl_vision qwen3_5_moe_vision qwen3_5_vision "
        "qwen3_omni_moe_vision_encoder qwen3_vl_moe_vision qwen3_vl_vision qwen4_exp_vision".split(),
        (("num_hidden_layers", "depth"),),
    ),
}


#: SAM's vision tower and the models that reuse it
_SAM_KIN = (
    "deepseek_ocr2_sam_vision_model got_ocr2_vision pp_chart2table_vision pp_formulanet_vision sam_hq_vision_model "
    "sam_vision_model slanext_vision unlimited_ocr_sam_vision_model"
)
#: Config-class defaults that differ from what posenc assumes for a key a ``config.json`` dict leaves out (a config
#: object always has them): standard key (JetMoE's kv_channels: head_dim) -> value -> the model types whose class
#: defaults to it. tests/hf/test_configs.py drops each key from every config class of the installed transformers.
_DEFAULTS_BY_KEY: dict[str, dict[Any, str]] = {
    "head_dim": {
        256: "gemma gemma2 diffusion_gemma_text dory embedding_gemma2_text gemma4_unified_text qwen3_5_moe_text "
        "qwen3_5_text qwen3_next qwen4_exp_text t5_gemma_module t5gemma2_decoder t5gemma2_text vaultgemma",
        192: "mimo_v2_flash",
        128: "qwen3 afmoe beam cohere2_moe cosmos3_edge_text cwm dia_decoder dia_encoder "
        "ernie4_5 flint glm glm4 helium higgs_audio_v2 hrm_text hy_v3 internlm3 iquestcoder jetmoe kolibri1 "
        "laguna lara_mini lfm3 mellum minimax_m2 ministral3 molmo2_text muse_glimmer_assistant "
        "muse_glimmer_text pe_audio_encoder pe_audio_video_encoder pe_video_encoder "
        "qwen3_omni_moe_talker_code_predictor seed_oss solar_open step3p5 zaya",
        80: "timesfm2_5",
        64: "gpt_oss hy_v4_vl_text muse_spark_text neomme neucodec openai_privacy_filter sarvam_moe "
        "voxtral_realtime_encoder xcodec2",
    },
    # Gemma 4's kin: their config classes turn global_head_dim into per_layer_config
    "global_head_dim": {512: "diffusion_gemma_text embedding_gemma2_text gemma4_unified_text"},
    "sliding_window": {
        8192: "cwm",
        4096: "exaone4 exaone_moe cohere2 cohere2_moe cohere_compass_text gemma2 gemma3_text ministral mistral olmo3 "
        "qwen2 qwen2_5_vl_text qwen2_vl_text qwen3 t5_gemma_module t5gemma2_decoder t5gemma2_text vaultgemma "
        "voxtral_realtime_text",
        3000: "moshi",
        2048: "muse_glimmer_assistant muse_glimmer_text muse_spark_text recurrent_gemma",
        1024: "afmoe dory gemma4_unified_text inkling2_text inkling2_loop_text",
        750: "voxtral_realtime_encoder",
        513: "flint kolibri1",
        512: "beam blt_patcher diffusion_gemma_text dots3_note_text embedding_gemma2_text gemma3n_text gemma4_text "
        "inkling_text lara_mini",
        375: "kyutai_speech_to_text",
        256: "lfm3 neomme",
        250: "mimi mimi_decoder mimi_encoder pocket_tts_audio_tokenizer pocket_tts_audio_tokenizer_decoder "
        "pocket_tts_audio_tokenizer_encoder",
        129: "mimo_v2_flash",
        128: "deepseek_v4 esmfold2 gpt_oss granite_swa granitemoe_swa openai_privacy_filter ultrabert "
        "unlimited_ocr_text",
        71: "nemotron_asr_streaming_encoder",
        64: "modernbert-decoder",
        8: "moshi_depth",
    },
    "local_attention": {128: "modernbert"},
    # the layer patterns of RecurrentGemma (in turn) and Bamba (Mamba throughout); Moonshine Streaming's windows
    "block_types": {("recurrent", "recurrent", "attention"): "recurrent_gemma"},
    "attn_layer_indices": {None: "bamba"},
    "sliding_windows": {
        ((16, 4), (16, 4), (16, 0), (16, 0), (16, 4), (16, 4)): "moonshine_streaming_encoder"
    },
    "use_sliding_window": {
        False: "deepseek_ocr2_encoder qwen2 qwen2_5_omni_talker qwen2_5_omni_text qwen2_5_vl_text qwen2_moe "
        "qwen2_vl_text qwen3 qwen3_moe smollm3"
    },  # (their classes then drop sliding_window)
    "position_embedding_type": {"absolute": "esm"},  # (ESM-1b's table; ESM-2's checkpoints say "rotary")
    # (read as the rope dict's when it has none: GLM's and Qwen3-Next's classes write theirs into it)
    "partial_rotary_factor": {
        0.9: "moonshine",
        0.5: "phi persimmon bamba dots3_note_audio_encoder glm glm4 glm4_moe glmasr_encoder nemotron "
        "recurrent_gemma",
        0.25: "stablelm qwen3_5_moe_text qwen3_5_text qwen3_next",
    },
    "rotary_dim": {64: "minimax_m3_vl_text"},
    "qk_rope_head_dim": {64: "deepseek_v2 deepseek_v3 sarvam_mla"},
    # (DeepSeek V3's own config.json leaves rope_interleave out)
    "rope_interleave": {True: "deepseek_v3 axk1 glm4_moe_lite sarvam_mla youtu"},
    # sizes: wav2vec2-conformer's, Parakeet's (posenc's speech converter assumes the others': 16 heads of 1024 in
    # 24 layers)
    "hidden_size": {768: "wav2vec2-conformer"},
    "embed_dim": {1280: "qwen2_vl_vision"},  # (its attention's width; its hidden_size is its merger's output)
    "num_attention_heads": {12: "wav2vec2-conformer", 8: "parakeet_encoder"},
    # the stacks of an encoder-decoder (from_hf_config's stack=)
    "encoder_layers": {
        1: "pp_doclayout_v2 pp_doclayout_v3 pp_doclayout_v4",
        6: "deformable_detr mask2former oneformer",
        24: "seamless_m4t",
    },
    "decoder_layers": {
        3: "lw_detr rf_detr",
        6: "deformable_detr pp_doclayout_v2 pp_doclayout_v3 pp_doclayout_v4",
        24: "seamless_m4t",
    },
    "num_decoder_layers": {12: "switch_transformers", 2: "nemotron3_5_asr nemotron_asr_streaming"},
    "num_layers": {3: "sam3_geometry_encoder sam3_lite_text_geometry_encoder"},
    "num_hidden_layers": {
        10: "mask2former oneformer",  # (their decoder_layers)
        12: "wav2vec2-conformer",
        32: "jamba",
        27: "kimi_linear",
        45: "glm5_next_text",
        76: "zamba",
        24: "gpt_neo",
    },
    # (vision towers whose grid is not read by rule: Llama 4's, whose converter reads it; Sapiens 2, refused by
    # these as its config object is)
    "image_size": {448: "llama4_vision_model", 224: "sapiens2"},
    "patch_size": {14: "llama4_vision_model", 16: "sapiens2"},
    # (not a config key: the class attribute by which transformers reads a flat rope dict's rope_type "default",
    # given or absent, as its vision tower's "axial"; :func:`rope_dict` does the same)
    "default_rope_type": {
        "axial": "cohere_compass_vision dots3_note_vision_encoder edgetam_video ernie4_5_vl_moe_vision "
        "exaone4_5_vision gemma4_vision glm4v_moe_vision glm4v_vision glm5_next_vision glm_image_vision "
        "glm_ocr_vision inkling2_vision kimi_k25_vision lfm3_vl_vision minimax_m3_vl_vision mlcd mlcd_vision_model "
        "muse_glimmer_vision muse_spark_vision paddleocr_vl_vision pixtral qwen2_5_omni_vision_encoder "
        "qwen2_5_vl_vision qwen2_vl_vision qwen3_5_moe_vision qwen3_5_vision qwen3_omni_moe_vision_encoder "
        "qwen3_vl_moe_vision qwen3_vl_vision qwen4_exp_vision sam2_video sam3_tracker_video sam3_vit_model "
        "step3p5_vision video_llama_3_vision"
    },
    "rope_theta": {150000.0: "gpt_oss openai_privacy_filter"},
    # attention local by windows of the image or chunks of frames (refused by _layer_types.refuse_local_attention)
    "window_size": {
        112: "qwen2_5_vl_vision qwen2_5_omni_vision_encoder exaone4_5_vision",
        14: _SAM_KIN,
        24: "sam3_vit_model",
        7: "swin swinv2 donut-swin maskformer-swin",
        8: "swin2sr clap_audio_model",
        256: "gpt_neo",  # (its local layers' window)
    },
    "fullatt_block_indexes": {
        (7, 15, 23, 31): "qwen2_5_vl_vision qwen2_5_omni_vision_encoder exaone4_5_vision"
    },
    "global_attn_indexes": {(2, 5, 8, 11): _SAM_KIN, (7, 15, 23, 31): "sam3_vit_model"},
    "num_windows": {16: "lw_detr_vit", 4: "rf_detr_dinov2"},
    "n_window": {100: "qwen2_5_omni_audio_encoder", 50: "qwen3_asr_encoder qwen3_omni_moe_audio_encoder"},
    "conf_attention_chunk_size": {12: "gemma3n_audio"},
    "attention_chunk_size": {12: "gemma4_audio"},
    "attn_layers": {("local", "lsh") * 3: "reformer"},
}


def _default_rope(theta: float, **more: Any) -> dict[str, Any]:
    """A ``"default"`` rope_parameters dict of base ``theta`` (and ``more``), as a config class fills it in."""
    return {"rope_type": "default", "rope_theta": theta, **more}


GEMMA4_ROPE = {
    "sliding_attention": _default_rope(10_000.0),
    "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0},
}
_LLAMA3 = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0, _ORIGINAL: 8192}
_YARN = {"rope_type": "yarn", "beta_fast": 32.0, "beta_slow": 1.0}
#: The rope_parameters a config class fills in where a ``config.json`` gives neither them nor the legacy
#: ``rope_scaling``: a top-level ``rope_theta`` or ``partial_rotary_factor`` only fills what these leave out
#: (transformers 5's standardisation), so the class's own values win. tests/hf/test_config_json.py checks
#: each against its class, with the dicts of a transformers-4 ``config.json``.
CLASS_ROPE: dict[str, dict[str, Any]] = {
    "apertus apertus1p5_text": {**_LLAMA3, "rope_theta": 1.2e7, "factor": 8.0},
    "cwm": {**_LLAMA3, "rope_theta": 1e6, "factor": 16.0},
    "higgs_audio_v2": {
        **_LLAMA3,
        "rope_theta": 5e5,
        "factor": 32.0,
        "low_freq_factor": 0.125,
        "high_freq_factor": 0.5,
        _ORIGINAL: 1024,
    },
    # (rope_theta: the top-level one, else the class's default_theta, 150000)
    "gpt_oss openai_privacy_filter": {**_YARN, "factor": 32.0, "truncate": False, _ORIGINAL: 4096},
    "ministral3": {
        **_YARN,
        "rope_theta": 1e6,
        "factor": 16.0,
        _ORIGINAL: 16384,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "llama_4_scaling_beta": 0.1,
    },
    "cosmos3_edge_text": _default_rope(1e8, mrope_section=[24, 20, 20]),
    "muse_spark_text": _default_rope(5e5),
    "moonshine_streaming": _default_rope(1e4, partial_rotary_factor=0.8),
    "nemotron3_5_transcribe_asr_audio nemotron3_5_transcribe_word_timestamp": _default_rope(
        1e4, partial_rotary_factor=0.5
    ),
    "dory": {"sliding_attention": _default_rope(1e4)},
    "ultrabert": {"sliding_attention": _default_rope(1e4), "full_attention": _default_rope(2.56e6)},
    "beam": {"sliding_attention": _default_rope(1e4), "full_attention": None},
    "diffusion_gemma_text gemma4_unified_text": GEMMA4_ROPE,
    "embedding_gemma2_text": {"sliding_attention": _default_rope(1e4), "full_attention": _default_rope(1e6)},
    "lfm3": {
        "sliding_attention": _default_rope(1e4),
        "full_attention": {"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": 0.5},
    },
    "mellum": {"full_attention": _default_rope(5e5), "sliding_attention": _default_rope(1e4)},
    "laguna": {
        "full_attention": _default_rope(5e5, partial_rotary_factor=0.5),
        "sliding_attention": _default_rope(1e4, partial_rotary_factor=1.0),
    },
    "mimo_v2_flash": {
        "full_attention": _default_rope(5e6, partial_rotary_factor=0.334),
        "sliding_attention": _default_rope(1e4, partial_rotary_factor=0.334),
    },
    "zaya": {
        "hybrid": _default_rope(5e6, partial_rotary_factor=0.5),
        "hybrid_sliding": _default_rope(1e4, partial_rotary_factor=0.5),
    },
}


def _sizes(hidden: int, heads: int, layers: int, **more: Any) -> dict[str, Any]:
    """A text model's sizes (and ``more``), as a parent's class fills them in."""
    return {"hidden_size": hidden, "num_attention_heads": heads, "num_hidden_layers": layers, **more}


#: What a parent's class merges a text_config dict over (its SubConfigSpec init_kwargs, the keys posenc reads),
#: as :func:`class_defaults` of ``"<parent>.text_config"``; other parents' classes take a dict as it is
_PARENT_TEXT: dict[str, dict[str, Any]] = {
    "glmasr": _sizes(2048, 16, 28, max_position_embeddings=8192, rope_parameters=_default_rope(1e4)),
    **dict.fromkeys(("pe_audio", "pe_audio_video", "pe_video"), _sizes(1024, 16, 22)),
    "voxtral": {
        "hidden_size": 3072,
        "num_hidden_layers": 30,
        "max_position_embeddings": 131072,
        "rope_theta": 1e8,
        "head_dim": 128,
    },
    "voxtral_realtime": _sizes(
        3072, 32, 26, max_position_embeddings=131072, rope_theta=1e6, head_dim=128, sliding_window=8192
    ),
}
#: Top-level keys a class reads under names of its own (GPT-NeoX's; HunYuan V4 VL's head width is its
#: qk_rope_head_dim), or not at all (Bamba hard-codes its factor, DeepSeek-OCR 2's and kin's classes their head
#: width, hidden_size // num_attention_heads; Cohere 2 MoE keeps rope_scaling unread beside its rope_parameters):
#: name -> (its key or None, its value); the standard name's aliases are then not read
_OWN_KEYS: dict[str, dict[str, tuple[str | None, Any]]] = {
    "gpt_neox": {"rope_theta": ("rotary_emb_base", 10000.0), "partial_rotary_factor": ("rotary_pct", 0.25)},
    "gpt_neox_japanese": {
        "rope_theta": ("rotary_emb_base", 10000.0),
        "partial_rotary_factor": ("rotary_pct", 1.0),
    },
    "bamba": {"partial_rotary_factor": (None, 0.5)},
    # (Cohere 2's class keeps a head_dim given, else hidden // heads; it never reads kv_channels)
    "cohere2": {"head_dim": ("head_dim", None)},
    **{
        name: {"head_dim": (None, None)}
        for name in "deepseek_ocr2_text unlimited_ocr_text dots3_note_audio_encoder".split()
    },
    "hy_v4_vl_text": {"head_dim": ("qk_rope_head_dim", 64)},
    "cohere2_moe": {"rope_scaling": (None, None)},
}


def config_dict(config: Any) -> dict[str, Any]:
    """A plain dict from a ``transformers`` config object (via ``to_dict()``) or a mapping, with the
    standard names of :data:`ALIASES` filled in, then the :data:`_DEFAULTS_BY_KEY` and :data:`CLASS_ROPE` of
    its model type for the keys it leaves out (a key it gives, even null, wins); a mapping's keys that its
    class reads under other names or not at all (:data:`_OWN_KEYS`) replaced as its class does."""
    if isinstance(config, Mapping):
        cfg = dict(config)
        # (a config object's class has done this: its to_dict() holds the standard names' values)
        for name, (key, default) in _OWN_KEYS.get(str(cfg.get("model_type")), {}).items():
            cfg[name] = cfg.get(key, default) if key else default
    elif callable(getattr(config, "to_dict", None)) and isinstance(as_dict := config.to_dict(), Mapping):
        # the standard names the class maps onto its own (attribute_map: BART's num_hidden_layers ->
        # encoder_layers): to_dict() leaves them out
        aliases = getattr(config, "attribute_map", None) or {}
        cfg = {**{k: as_dict[v] for k, v in aliases.items() if v in as_dict}, **as_dict}
        # ... nor a list its class derives (Bamba's, RecurrentGemma's layer types: layers_block_type)
        cfg |= {
            k: list(value)
            for k in aliases
            if k not in cfg and isinstance(value := getattr(config, k, None), (list, tuple))
        }
        # A transformers class's model reads its standardised rope_parameters: a legacy rope_scaling that
        # to_dict() keeps beside them (Cohere2-MoE's class does not fold it in) is not read.
        own_class = type(config).__module__.startswith("transformers.models.")
        if own_class and getattr(config, "rope_parameters", None):
            cfg.pop("rope_scaling", None)
    else:
        raise TypeError(
            "config must be a transformers config object (with .to_dict()) or a dict as in a model's config.json, "
            f"got {type(config).__name__}"
        )
    own = _OWN_KEYS.get(str(cfg.get("model_type")), {}) if isinstance(config, Mapping) else {}
    own_aliases = {name: (key,) for name, key in _TYPE_ALIASES.get(str(cfg.get("model_type")), ())}
    for name, names in (ALIASES | own_aliases).items():
        alias = next((a for a in names if cfg.get(a) is not None), None)
        if name in own or alias is None or cfg.get(name) is not None:
            continue
        if name in cfg and isinstance(config, Mapping):
            # (a class that keeps the value under the old name maps the standard one onto it, null and all:
            # JetMoE's head_dim -> kv_channels, RecurrentGemma's sliding_window -> attention_window_size)
            raise ValueError(
                f"{cfg.get('model_type')} config: {name!r} is null beside {alias!r} = {cfg[alias]!r}; a class "
                f"that reads {alias!r} as {name!r} takes the null: leave {name!r} out or give its value"
            )
        cfg[name] = cfg[alias]
    if (count := _LAYER_COUNTS.get(str(cfg.get("model_type")))) and cfg.get("num_hidden_layers") is None:
        cfg["num_hidden_layers"] = get(cfg, count[0], default=count[1])
    if cfg.get("rope_parameters") is None:  # (null: the class's own, as none)
        cfg.pop("rope_parameters", None)
    defaults = class_defaults(model_type := str(cfg.get("model_type")))
    if cfg.get("rope_scaling") == {} and model_type in _EMPTY_SCALING_WINS:
        defaults.pop("rope_parameters", None)
    return {**defaults, **cfg}


#: Models without ``num_hidden_layers`` whose layers with positions another key counts (SAM's video trackers:
#: their memory attention's; EfficientLoFTR: its feature transformer's): that key and its class's default
_LAYER_COUNTS = {
    **dict.fromkeys(("sam2_video", "sam3_tracker_video"), ("memory_attention_num_layers", 4)),
    "edgetam_video": ("memory_attention_num_layers", 2),
    "efficientloftr": ("num_attention_layers", 4),
}

#: Classes that take a config.json's ``"rope_scaling": {}`` as their ``rope_parameters`` (then read a top-level
#: ``rope_theta``), instead of their own dict of :data:`CLASS_ROPE` (the others keep it).
_EMPTY_SCALING_WINS = frozenset(
    "beam diffusion_gemma_text embedding_gemma2_text gemma4_unified_text laguna mellum mimo_v2_flash zaya".split()
)


def class_defaults(name: str) -> dict[str, Any]:
    """The :data:`_DEFAULTS_BY_KEY` and :data:`CLASS_ROPE` of a model type, or the :data:`_PARENT_TEXT` of a
    parent's sub-config (``"voxtral.text_config"``)."""
    parent, _, field = name.partition(".")
    if field == "text_config":
        return copy.deepcopy(_PARENT_TEXT.get(parent, {}))
    own = {
        key: value
        for key, by_value in _DEFAULTS_BY_KEY.items()
        for value, types in by_value.items()
        if name in types.split()
    }
    rope = [copy.deepcopy(params) for types, params in CLASS_ROPE.items() if name in types.split()]
    return own | ({"rope_parameters": rope[0]} if rope else {})


def get(cfg: Config, *names: str, default: Any = None) -> Any:
    """The first of ``names`` present in ``cfg`` with a value other than ``None``, else ``default``."""
    return next((cfg[name] for name in names if cfg.get(name) is not None), default)


def rope_dict(cfg: Config, model_type: str) -> Mapping[str, Any]:
    """The config's RoPE dict, flat or per layer type: the legacy ``rope_scaling`` wins over
    ``rope_parameters`` as in transformers 5 (``rope_scaling or rope_parameters``); ``{}`` when neither.
    A flat dict whose ``rope_type`` is ``"default"`` or absent takes the class's ``default_rope_type``
    (a vision tower's ``"axial"``), as transformers standardises it.

    Raises:
        TypeError: it is not a dict.
    """
    raw = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    if not isinstance(raw, Mapping):
        raise TypeError(f"{model_type} config: rope_parameters must be a dict, got {type(raw).__name__}")
    flat = not any(isinstance(value, Mapping) for value in raw.values())
    if flat and rope_type_of(raw) == "default" and cfg.get("default_rope_type"):
        return {**raw, "rope_type": cfg["default_rope_type"]}
    return raw


def key_of(cfg: Config, name: str) -> str:
    """The key the config gave ``cfg[name]`` under: the alias :func:`config_dict` read it from, else ``name``."""
    value = cfg.get(name)
    return next((alias for alias in ALIASES.get(name, ()) if alias in cfg and cfg[alias] is value), name)


def positive_int(cfg: Config, model_type: str, name: str, default: int | None = None) -> int:
    """``cfg[name]`` (or ``default``), checked to be a positive int.

    Raises:
        ValueError: ``name`` is not set and there is no default, or the value is ``<= 0``.
        TypeError: the value is not an int.
    """
    value = get(cfg, name, default=default)
    if value is None:
        also = ", ".join(ALIASES.get(name, ())) or "nothing else"
        raise ValueError(f"{model_type} config: missing {name!r} (also read as {also})")
    return check_positive_int(f"{model_type} config: {key_of(cfg, name)}", value)
