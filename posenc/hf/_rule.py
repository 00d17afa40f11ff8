"""Models outside the table: the encoding from transformers 5's standardized RoPE fields alone.

``rope_parameters`` (``rope_type`` and its keys, ``rope_theta``, ``partial_rotary_factor``; one
dict, or one per layer type with ``layer_types``), or the legacy ``rope_scaling`` + top-level
``rope_theta``; ``head_dim`` (else ``hidden_size // num_attention_heads``);
``max_position_embeddings``. Half-split layout, as transformers' shared ``rotate_half``. A key
posenc does not read (a ``rope_parameters`` key its ``rope_type`` does not take, any other
top-level key naming RoPE or rotary) is refused by name: the model's code may read it. A
``partial_rotary_factor`` other than 1 is read only for the models of :data:`_PARTIAL`, whose code
reads it (Llama's, and most others', rotates whole heads whatever it says), and refused for any other;
``rope_interleave`` likewise (:data:`_READS_INTERLEAVE`), and ``position_embedding_type`` beside RoPE fields
(ESM's code alone reads it there). A few models rotate only some layers (:data:`_ROTATED_LAYERS`) or none
without a switch (:data:`_SWITCH`): NoPE where they do not.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Literal

from .._checks import check_bool, check_positive_int
from ..base import PositionalEncoding
from ..encodings import NoPE, QueryTemperature
from ..functional.rope_scaling import rope_type_of
from ._bias import ABSOLUTE_ONLY, absolute_table, learned_by_field
from ._layer_types import layer_types, per_layer, required_count, sliding_layers
from ._layers import layer_head_dims, nope_layers, per_type_rope, two_bases_as_class
from ._read import Config, get, key_of, positive_int, rope_dict
from ._rope import RopeDefaults, build_rope, heads_and_head_dim, mrope
from ._table import SUPPORTED_MODEL_TYPES
from ._vision import vision_axial

__all__ = ["as_class", "by_rule", "refuse_undeclared_rope"]

#: The keys transformers 5 reads RoPE from (a config class declares those its model's code reads)
ROPE_KEYS = ("rope_parameters", "rope_scaling", "rope_theta")

# Models whose code departs from the fields, by model_type: the reason, one line each.
#: interleaved pairs (``x[..., ::2]``, ``x[..., 1::2]``) where transformers' shared code splits halves
_INTERLEAVED = {
    # BLT: its rotate_half pairs neighbours and its rotary module repeat_interleaves the angles
    *"blt blt_global_transformer blt_local_decoder blt_local_encoder blt_patcher".split(),
    *("cohere", "cohere2_moe"),  # Cohere: its rotate_half pairs neighbours (Cohere 2 MoE: in every layer)
    "deepseek_v2",  # DeepSeek V2: rotates complex pairs (view_as_complex) and has no rope_interleave
    *("ernie4_5", "ernie4_5_moe", "helium"),  # ERNIE 4.5, Helium: apply_rotary_pos_emb interleaves cos/sin
    *("glm", "glm4"),  # GLM: interleaved pairs over the partial_rotary_factor channels
    "openai_privacy_filter",  # OpenAI privacy filter: rotates neighbouring pairs (its _apply_rotary_emb)
    *("moonshine", "moonshine_streaming"),  # Moonshine: interleaved pairs, partial rotation
    # Perception Encoder's audio and video towers: 2x2 rotations of neighbouring pairs (stack_freqs)
    *("pe_audio_encoder", "pe_audio_video_encoder", "pe_video_encoder"),
    *("glm4v", "glm_ocr"),  # GLM-4.1V, GLM-OCR: M-RoPE over neighbouring pairs (rotate_half_llm)
    # HunYuan V4 VL, ERNIE 4.5 VL: their rotate_half (rotate_half_text) pairs neighbours, the angles repeat_interleaved
    *("hy_v4_vl", "ernie4_5_vl_moe"),
    # MLA whose attention always rotates neighbouring pairs (apply_rotary_pos_emb_interleave; its config has no
    # rope_interleave; DeepSeek V3.2's and AXK2's indexers rotate halves, but not the attention)
    *"axk2 bailing_hybrid deepseek_v32 glm_moe_dsa longcat_flash".split(),  # (Mistral Large 4: refused below)
}
#: reads ``partial_rotary_factor`` (its rotary's default frequencies span ``head_dim * factor`` channels and its
#: attention rotates those; towers whose own model builds no rotary are not listed); every other model
#: rotates whole heads whatever the field says (Llama's code does not read it), so posenc refuses a factor
#: other than 1 there rather than rotate part of each head
_PARTIAL = frozenset(
    "bamba diffusion_gemma dots3_note_audio_encoder glm glm4 glm4_moe glm4v glm4v_moe glm_image glm_ocr "
    "glmasr glmasr_encoder gpt_neox_japanese laguna mellum mimo_v2_flash minimax_m2 minimax_m3_vl "
    "moonshine moonshine_streaming nemotron nemotron3_5_transcribe_asr_audio "
    "nemotron3_5_transcribe_word_timestamp nemotron3_diarization_audio neomme persimmon phi "
    "phi4_multimodal qwen3_5 qwen3_5_moe qwen3_next qwen4_exp recurrent_gemma solar_open stablelm "
    "step3p5 step3p7 zaya".split()
)
#: reads ``rope_interleave`` (DeepSeek V3's MLA code: neighbouring pairs when true); every other model's code
#: does not (it rotates halves, or pairs always: ``_INTERLEAVED``), so posenc refuses a true flag there
_READS_INTERLEAVE = frozenset({"axk1", "deepseek_v3", "glm4_moe_lite", "youtu"})
#: rotates by minus the angles: RoPE(conjugate=True)
_CONJUGATE = {"nanochat": "NanoChat: its rotate_half flips the signs"}
#: whose rotary module raises on any rope type but "default" (posenc refuses it too, rather than scale a model that
#: cannot run the config)
_DEFAULT_ONLY = frozenset({"ernie4_5_vl_moe", "recurrent_gemma"})
#: no posenc encoding computes what the model does
_REFUSED = {
    "hunyuan_vl": "its text model's M-RoPE turns the two channels of a pair by different angles, which no "
    "rotation of pairs does",
    "qwen2_5_omni_dit": "its DiT attention rotates only its first head (its channels de-interleaved first), "
    "which no posenc encoding does",
    "mistral_large4": "its attention scales queries by a learned per-head scale * log(p + 1) + bias "
    "(MistralLarge4TextSoftmaxScaling), which posenc has no form for",
    "esmfold2": "its atom encoder rotates by 3D atom coordinates and atom ids (num_spatial_rope_pairs_per_axis, "
    "num_uid_rope_pairs), which posenc has no form for; its ESM-C trunk converts as esmc",
    **dict.fromkeys(
        "mamba mamba2 falcon_mamba xlstm".split(),
        "it has no attention layer (its recurrent layers order the tokens), so no position encoding applies",
    ),
    "rwkv": "its time mixing (RwkvSelfAttention) is a recurrence with a learned decay per channel, not softmax "
    "attention over positions, so no position encoding applies",
    # relative schemes of their own, named
    "xlnet": "its two-stream attention adds Transformer-XL's relative sinusoids (r_w_bias, r_r_bias) and a "
    "segment term (r_s_bias), which posenc does not convert",
    "funnel": "its attention adds Funnel's relative positions (attention_type 'relative_shift' or 'factorized'), "
    "pooled between blocks, which posenc has no form for",
    "cpmant": "its attention adds CPM-Ant's bias of relative position and segment pair, which posenc has no form for",
    **dict.fromkeys(
        ("inkling", "inkling2", "inkling2_loop"),
        "its attention adds a relative bias per backward distance that each query's hidden state mixes from a "
        "trained bank of profiles (its rel_logits_proj / relative_position_bias), which posenc has no form for",
    ),
}
#: the key and the value without which the model's code does not rotate at all (NoPE in every layer): Zamba2's
#: shared attention rotates only with use_mem_rope (class default False); GraniteMoeHybrid builds its rotary
#: only where position_embedding_type is "rope" (class default None; Granite 4.0's hybrid checkpoints: "nope")
_SWITCH: dict[str, tuple[str, object]] = {
    "zamba2": ("use_mem_rope", True),
    "granitemoehybrid": ("position_embedding_type", "rope"),
}
#: vision towers whose axial rotary departs from [rows | columns] twice: the AxialRoPE options that say how
_VISION: dict[str, dict[str, Any]] = {
    # (t, h, w): get_vision_position_ids(..., include_temporal=True)
    "minimax_m3_vl_vision": {"axes": 3},
    # [columns | rows] twice (its recomposition_frequencies flips the axes)
    "step3p5_vision": {"axis_order": (1, 0)},
    # [columns | rows] on neighbouring pairs (repeat_interleave, rotate_pairwise)
    "inkling2_vision": {"axis_order": (1, 0), "layout": "interleaved"},
    # (column, row) at each frequency in turn, twice (transpose, then flip)
    "kimi_k25_vision": {"axis_order": (1, 0), "axis_layout": "cycle"},
    # [x | y] blocks, each rotated by its own half split (apply_multidimensional_rope), on its pixel_position_ids
    # (x, y) as they are
    "gemma4_vision": {"axis_layout": "blocks"},
}

#: Models whose code reads ``layer_rope_theta`` (one entry per layer, 0: NoPE there): True, each layer
#: rotates at its own base (Granite SWA); False, at the global ``rope_theta`` wherever its entry is not 0,
#: and a missing list is NoPE every 4th layer counted back from the last (Muse, its config class's default)
_LAYER_THETA = {"granite_swa": True, "granitemoe_swa": True, "muse_glimmer": False, "muse_spark": False}
#: The per-layer field of each model whose code varies RoPE by layer: the above, and Molmo 2 (its
#: rope_scaling_layers take the dict's scaling, the other layers its base alone)
_PER_LAYER_KEY = {**dict.fromkeys(_LAYER_THETA, "layer_rope_theta"), "molmo2": "rope_scaling_layers"}

#: Vision-language text models whose code applies M-RoPE: the ``mrope_section`` it uses when
#: ``rope_parameters`` gives none, and whether the sections interleave (Qwen3-VL's stride 3; ERNIE 4.5 VL's
#: "hw", its sections listed (h, w, t)) or are chunked (Qwen2-VL's); the rest is read from the fields as for
#: any RoPE model.
_MROPE: dict[str, tuple[tuple[int, ...], bool | Literal["hw"]]] = {
    **dict.fromkeys(("qwen3_5", "qwen3_5_moe", "qwen4_exp"), ((11, 11, 10), True)),
    **dict.fromkeys(("cosmos3_edge", "qwen3_omni_moe", "qwen3_omni_moe_talker"), ((24, 20, 20), True)),
    # (what HY V4 VL's class writes in; its code's own fallback, 24 20 20, is not reached)
    "hy_v4_vl": ((12, 10, 10), True),
    **dict.fromkeys(("paddleocr_vl", "qwen2_5_omni", "qwen2_5_omni_talker"), ((16, 24, 24), False)),
    **dict.fromkeys(("glm4v", "glm4v_moe", "glm_image", "glm_ocr"), ((8, 12, 12), False)),
    "ernie4_5_vl_moe": ((22, 22, 20), "hw"),
}
#: ... with one M-RoPE dict per layer type (``None``: that type does not rotate)
_MROPE_PER_TYPE: dict[str, tuple[Any, bool | Literal["hw"]]] = {
    "cohere_compass": ((24, 20, 20), True),
    # rows and columns alternate over every rotated pair (recomposition_frequencies); no mrope_section read
    "neomme": (lambda pairs: [pairs // 2] * 2, "hw"),
}


def _cohere2_moe_layers(cfg: Config, model_type: str) -> list[bool]:
    """Cohere 2 MoE's: its sliding layers and, with prefix_dense_sliding_window_pattern 1, its dense-MLP layers
    (force_rope; ``mlp_layer_types``, else its class's: the first ``first_k_dense_replace``)."""
    sliding = sliding_layers(cfg, model_type)
    dense = cfg.get("mlp_layer_types") or [
        "dense" if i < (cfg.get("first_k_dense_replace") or 0) else "sparse" for i in range(len(sliding))
    ]
    forced = get(cfg, "prefix_dense_sliding_window_pattern", default=1) == 1
    return [rotates or (forced and mlp == "dense") for rotates, mlp in zip(sliding, dense, strict=True)]


#: Models whose attention rotates only some layers, though one RoPE dict serves them all: the layers it
#: rotates (NoPE in the others, :func:`~posenc.hf._layers.nope_layers`)
_ROTATED_LAYERS: dict[str, Callable[[Config, str], list[bool]]] = {
    # their sliding layers, as Cohere 2 (AFMoE's is_local_attention; LARA Mini passes no rotation to the others)
    **dict.fromkeys(("afmoe", "lara_mini", "flint"), sliding_layers),
    # EXAONE 4 and its kin: their sliding layers, or every layer when there is no sliding_window
    **dict.fromkeys(("exaone4", "exaone_moe", "kolibri1"), partial(sliding_layers, all_without_window=True)),
    "cohere2_moe": _cohere2_moe_layers,
    # Llama 3.2 Vision's text model: not its cross_attention_layers (queries on the image's keys)
    "mllama_text_model": lambda cfg, model_type: [
        i not in get(cfg, "cross_attention_layers", default=[3, 8, 13, 18, 23, 28, 33, 38])
        for i in range(required_count(cfg, model_type))
    ],
}
#: Models whose code does not rotate the layer types without a RoPE dict (``None`` or absent): what it does there
_UNROTATED: dict[str, Callable[[], PositionalEncoding]] = {
    "cohere_compass": NoPE,  # rope_parameters[type] None skips the rotation
    "lfm3": NoPE,  # its conv layers have no rope entry and do not attend
    # its full layers (rope_parameters None) scale queries by (1 + (p + 1) / 2048) ** 0.1 (its code's constants)
    "beam": lambda: QueryTemperature(2048.0, 0.1, form="power"),
}

_READ = frozenset(ROPE_KEYS).union(
    "partial_rotary_factor qk_rope_head_dim rope_interleave rotary_dim default_rope_type".split()
)


#: NeoMMe's class defaults by layer type: (rope_theta, partial_rotary_factor)
_NEOMME_ROPE = {"full_attention": (1_000_000.0, 0.25), "sliding_attention": (10_000.0, 1.0)}

#: The classes that nest a config.json's legacy keys by layer type as Gemma 3's (:func:`two_bases_as_class`): the
#: keys of full and sliding attention's bases (OLMo 3's reads rope_theta for the first only), their defaults,
#: and whether rope_scaling also scales sliding attention
_TWO_BASES: dict[str, tuple[tuple[str | None, str | None], tuple[float, float], bool]] = {
    "olmo3": (("rope_theta", None), (5e5, 5e5), False),
    **dict.fromkeys(
        ("t5gemma2", "t5gemma2_decoder"), (("rope_theta", "rope_local_base_freq"), (1e6, 1e4), False)
    ),
    "modernbert-decoder": (("global_rope_theta", "local_rope_theta"), (1.6e5, 1e4), True),
}

#: model types without modeling code of their own, whose auto mapping builds another family's model
_RUNS = {"sarvam_mla": "deepseek_v3", "sarvam_moe": "glm4_moe"}


def _family(model_type: str) -> str:
    """The family of a model type ("qwen2_5_omni_thinker text_config": a parent's text model, by its parent)."""
    family = model_type.split(" ")[0].removesuffix("_text").removesuffix("_thinker")
    return _RUNS.get(family, family)


def as_class(cfg: dict[str, Any], model_type: str) -> dict[str, Any]:
    """``cfg`` as the model's config class rewrites it in code (a ``config.json``, and what its ``to_dict()``
    writes back): Dory's attention and mlp blocks listed apart, MiniMax M2's rotary_dim, Zamba2's head width,
    NeoMMe's RoPE defaults by layer type, OLMo 3's and its kin's legacy bases (:data:`_TWO_BASES`)."""
    family = _family(model_type)
    if family == "zaya" and "rope_type" in (params := rope_dict(cfg, model_type)):  # (its class deletes it)
        cfg = {
            **cfg,
            "rope_scaling": None,
            "rope_parameters": {k: v for k, v in params.items() if k != "rope_type"},
        }
    if family in _TWO_BASES:
        keys, defaults, scale_local = _TWO_BASES[family]
        cfg = two_bases_as_class(cfg, model_type, keys, defaults, scale_local=scale_local)
    if family == "dory" and "mlp" in (cfg.get("layer_types") or ()):  # its class keeps every other entry
        n = required_count(cfg, model_type)
        cfg = {**cfg, "layer_types": list(cfg["layer_types"])[::2], "num_hidden_layers": n // 2}
    if family == "minimax_m2" and cfg.get("rotary_dim") is not None:  # its class: rotary_dim / head_dim (128)
        partial = rope_dict(cfg, model_type).get("partial_rotary_factor", cfg.get("partial_rotary_factor"))
        if partial is None:  # (a partial_rotary_factor given wins)
            cfg = {**cfg, "partial_rotary_factor": cfg["rotary_dim"] / get(cfg, "head_dim", default=128)}
    if family == "zamba2":  # its attention reads the input and the embeddings concatenated: 2 * hidden_size
        heads, hidden = (positive_int(cfg, model_type, k) for k in ("num_attention_heads", "hidden_size"))
        # (a width given is kept by its class: attention_head_dim, or head_dim by that name; its kv_channels,
        # which posenc reads as head_dim elsewhere, is a Mamba size)
        given = cfg.get("head_dim") if key_of(cfg, "head_dim") == "head_dim" else None
        cfg = {**cfg, "head_dim": get(cfg, "attention_head_dim", default=given or 2 * hidden // heads)}
        if check_bool(f"{model_type} config: use_long_context", cfg.get("use_long_context", False)):
            cfg["max_position_embeddings"] = 16384  # (the rope_theta its warning names is not rescaled)
    raw = rope_dict(cfg, model_type) if family == "neomme" else None
    if raw is not None and all(isinstance(value, Mapping) for value in raw.values()):
        # its class fills the dict of each of its layer types: rope_theta (the top-level one, else its default by
        # type) and partial_rotary_factor (its default by type: a top-level one is not read)
        top, present = cfg.get("rope_theta"), {*raw, *(cfg.get("layer_types") or ())}
        filled = {
            name: {
                "rope_type": "default",
                "rope_theta": base if top is None else top,
                "partial_rotary_factor": partial,
                **raw.get(name, {}),
            }
            for name, (base, partial) in _NEOMME_ROPE.items()
            if name in present
        }
        cfg = {**cfg, "rope_scaling": None, "rope_parameters": {**raw, **filled}}
    return cfg


def refuse_undeclared_rope(config: Any, model_type: str) -> None:
    """Refuse the RoPE keys of a transformers config object whose class declares none of them: stray keywords
    kept as attributes (a vision or audio tower's, a BERT-like's), which its model's code never reads, so that a
    RoPE built from them would rotate a model that does not. (A class that declares one gets the others from
    transformers' own standardisation: ``rope_theta`` -> ``rope_parameters``.) A class outside
    ``transformers.models`` (remote code) may read any key: not checked.

    Raises:
        ValueError: naming the keys and the class.
    """
    ours = [c for c in type(config).__mro__ if c.__module__.startswith("transformers.models.")]
    if type(config) not in ours:
        return
    declared = {name for c in ours for name in (*vars(c), *inspect.get_annotations(c))}
    stray = [key for key in ROPE_KEYS if vars(config).get(key) is not None]
    if stray and not declared.intersection(ROPE_KEYS):
        raise ValueError(
            f"{model_type} config: {', '.join(map(repr, stray))} is not a field of {type(config).__name__}, so "
            f"transformers' {model_type} code does not read it; accepted: the config without it"
        )


def by_rule(
    cfg: Config, model_type: str, causal: bool | None
) -> PositionalEncoding | list[PositionalEncoding]:
    """The RoPE a model outside the table describes with the standardized fields (one per layer if nested).

    Raises:
        ValueError: no RoPE fields, a missing ``rope_theta`` / size, or a field posenc does not read.
    """
    family = _family(model_type)
    if family in ("step3p5", "step3p7", "ultrabert"):
        cfg = _step3p7_per_type(cfg, model_type)
    axial = rope_dict(cfg, model_type).get("rope_type") == "axial"  # a vision tower's (h, w) rotary
    if family in _REFUSED:
        raise ValueError(f"model_type {model_type!r} is not supported: {_REFUSED[family]}")
    if axial:
        return vision_axial(cfg, model_type, **_VISION.get(family, {}))
    # (an image's size in pixels or patches beside patch_size: a vision tower; a byte-patching text model, BLT's
    # or NeoMMe's, has patch_size alone; ViLT's text tokens read a learned table beside its image)
    grid = [
        key for key in ("image_size", "max_image_size", "num_patches", "spatial_merge_size") if key in cfg
    ]
    vision = cfg.get("patch_size") is not None and model_type not in ABSOLUTE_ONLY
    if vision and any(cfg[key] is not None for key in grid):
        raise ValueError(
            f"model_type {model_type!r} is not supported by rule: its config has patch_size and {grid[0]}, a vision "
            "model, whose rotary works on a grid of patches (2D) that the standardized fields do not describe; "
            "build posenc.AxialRoPE for it"
        )
    # MLA (DeepSeek's fields): RoPE over the qk_rope_head_dim channels (q_pe / k_pe), pairs when rope_interleave
    rope_interleave = check_bool(
        f"{model_type} config: rope_interleave", get(cfg, "rope_interleave", default=False)
    )
    if rope_interleave and family not in _READS_INTERLEAVE | _INTERLEAVED:
        raise ValueError(
            f"{model_type} config: rope_interleave=True, but transformers' {model_type} is not among the models "
            "whose code reads it (DeepSeek V3's MLA and its kin; Llama's and most others rotate halves whatever "
            "it says); accepted: false or absent"
        )
    interleave = family in _INTERLEAVED or rope_interleave
    layout: Literal["half", "interleaved"] = "interleaved" if interleave else "half"
    partial = 1.0 if family in _PARTIAL else None  # (None: whole heads, a factor other than 1 refused)
    d = RopeDefaults(
        None, None, None, theta=None, partial=partial, layout=layout, conjugate=family in _CONJUGATE
    )
    switch, on = _SWITCH.get(family, (None, None))
    read = _READ | {_PER_LAYER_KEY.get(family), switch}  # (None: nothing more)
    unread = sorted(
        key
        for key, value in cfg.items()
        if ("rope" in key or "rotary" in key) and key not in read and value is not None
    )
    if unread:
        raise ValueError(
            f"{model_type} config: {', '.join(map(repr, unread))} may shape this model's RoPE in its own code, "
            f"which posenc does not read; model_type {model_type!r} is not in posenc's table"
        )
    if switch is not None:
        value = cfg.get(switch)
        if on is True:  # (a flag)
            value = check_bool(f"{model_type} config: {switch}", False if value is None else value)
        if value != on:
            return NoPE()
    has_rope = get(cfg, *ROPE_KEYS) is not None
    if has_rope and model_type in ABSOLUTE_ONLY:
        given = [key for key in ROPE_KEYS if cfg.get(key) is not None]
        raise ValueError(
            f"{model_type} config: {', '.join(map(repr, given))} given, but transformers' {model_type} adds a "
            "learned position table and reads no RoPE field; accepted: none of " + ", ".join(ROPE_KEYS)
        )
    kind = cfg.get("position_embedding_type")
    if has_rope and kind not in (None, "rope", "rotary") and switch != "position_embedding_type":
        # ESM's code alone reads it beside its rope_theta (which its config carries whatever the field says):
        # 'absolute' is a table and no rotation; any other model rotates whatever it says
        if family == "esm":
            if kind == "absolute":
                return learned_by_field(cfg, model_type, causal)
            raise ValueError(
                f"{model_type} config: position_embedding_type={kind!r} gives no position encoding its code "
                "builds; accepted: 'absolute' or 'rotary'"
            )
        raise ValueError(
            f"{model_type} config: position_embedding_type={kind!r} beside RoPE fields, but transformers' "
            f"{model_type} is not among the models whose code reads it there (ESM's); "
            "accepted: 'rope', 'rotary' or absent"
        )
    if family == "esm" and (params := rope_dict(cfg, model_type)):
        raise ValueError(  # (its config class has no rope_parameters: its rotary reads rope_theta alone)
            f"{model_type} config: ESM's code computes the default frequencies from rope_theta alone, but "
            f"rope_parameters holds {dict(params)!r}; accepted: rope_theta, and no rope_parameters"
        )
    if not has_rope:
        if absolute_table(cfg, model_type):  # BERT-like: a learned table, or refused by its kind
            return learned_by_field(cfg, model_type, causal)
        # wav2vec 2.0's kin (HuBERT, WavLM, SEW, UniSpeech, ...): a convolution over the features
        if cfg.get("num_conv_pos_embeddings") is not None:
            raise ValueError(
                f"model_type {model_type!r} is not supported: its code adds a convolutional position embedding "
                f"(num_conv_pos_embeddings={cfg['num_conv_pos_embeddings']}, a grouped Conv1d over the audio "
                "features, learned), which posenc has no form for"
            )
        # (a parent that holds its models' configs, MusicGen's text_encoder and decoder: name them)
        subs = ", ".join(
            f"{k} ({v['model_type']})" for k, v in cfg.items() if isinstance(v, Mapping) and "model_type" in v
        )
        held = f"; it holds the configs {subs}: to convert one of its models, pass that one" if subs else ""
        raise ValueError(
            f"model_type {model_type!r} is not supported by from_hf_config: its config has no 'rope_parameters' "
            f"or 'rope_theta' to build RoPE from, and it is not one of {', '.join(SUPPORTED_MODEL_TYPES)}{held}"
        )
    if family in _DEFAULT_ONLY and (kind := rope_type_of(rope_dict(cfg, model_type))) != "default":
        raise ValueError(
            f"{model_type} config: rope_type={kind!r}, but transformers' {model_type} rotary takes the default type "
            "alone (its code raises on any other); accepted: 'default' or absent"
        )
    if family in _PER_LAYER_KEY:
        return _layer_rope(cfg, model_type, d, family)
    if family in _MROPE:
        default, interleaved = _MROPE[family]
        return mrope(d, default, interleaved=interleaved)(cfg, model_type, causal)
    head_dim = _head_dim(cfg, model_type, d)
    if not any(isinstance(v, Mapping) for v in rope_dict(cfg, model_type).values()):
        if cfg.get("per_layer_config") is None:
            if family in _ROTATED_LAYERS:
                return nope_layers(d, _ROTATED_LAYERS[family])(cfg, model_type, causal)
            return build_rope(cfg, model_type, d, head_dim)
        # one RoPE per head width of per_layer_config
        dims = layer_head_dims(cfg, model_type, ["all"] * required_count(cfg, model_type), head_dim, None)
        built = {dim: build_rope(cfg, model_type, d, dim) for dim in sorted(set(dims))}
        return [built[dim] for dim in dims] if len(built) > 1 else built[dims[0]]
    types = layer_types(cfg, model_type)
    if types is None:
        raise ValueError(
            f"{model_type} config: rope_parameters are given per layer type, but 'layer_types' is missing"
        )
    dims = layer_head_dims(cfg, model_type, types, head_dim, get(cfg, "global_head_dim", default=None))
    mrope_setting, unrotated = _MROPE_PER_TYPE.get(family), _UNROTATED.get(family)
    return per_type_rope(cfg, model_type, d, types, dims, mrope=mrope_setting, unrotated=unrotated)


def _step3p7_per_type(cfg: Config, model_type: str) -> dict[str, Any]:
    """Step 3.5's and 3.7's (and UltraBERT's) ``config.json``, as their config class reads it: ``rope_parameters``
    with a dict for each layer type are kept; else ``rope_theta`` (one, or one per layer) and
    ``partial_rotary_factors`` (one per layer) become them, the layers of a type agreeing (the class takes the
    first one's), and a ``rope_scaling`` dict goes to full attention (a top-level ``partial_rotary_factor`` is not
    read then)."""
    types = layer_types(cfg, model_type)
    step = "ultrabert" not in model_type
    if types is None and step and "sparse_attention_config" not in cfg:  # (Step's class: full attention)
        types = ["full_attention"] * required_count(cfg, model_type)
        cfg = {**cfg, "layer_types": types}
    given = rope_dict(cfg, model_type)
    if types is None:
        raise ValueError(
            f"{model_type} config: per-layer rope_theta / partial_rotary_factors need 'layer_types'"
        )
    if all(isinstance(given.get(name), Mapping) for name in types):
        # (its class pops rope_theta first: a dict without one gets its default, 10000; the top-level
        # partial_rotary_factor is copied into them by transformers' standardisation)
        nested = {
            name: {"rope_theta": 10000.0, **one} if isinstance(one, Mapping) else one
            for name, one in given.items()
        }
        return {
            **{k: v for k, v in cfg.items() if k != "rope_theta"},
            "rope_scaling": None,
            "rope_parameters": nested,
        }
    per_type: dict[str, dict[str, Any]] = {t: {"rope_type": "default"} for t in types}
    for name, key in (("rope_theta", "rope_theta"), ("partial_rotary_factors", "partial_rotary_factor")):
        values = cfg.get(name)
        if values is None:
            continue
        values = list(values) if isinstance(values, (list, tuple)) else [values] * len(types)
        if len(values) != len(types):
            raise ValueError(f"{model_type} config: {name} has {len(values)} entries for {len(types)} layers")
        for layer_type, value in zip(types, values, strict=True):
            if per_type[layer_type].setdefault(key, value) != value:
                raise ValueError(
                    f"{model_type} config: {name} differs between {layer_type!r} layers "
                    f"({per_type[layer_type][key]} and {value}); its config class keeps one per layer type"
                )
    if isinstance(cfg.get("rope_scaling"), Mapping) and "full_attention" in per_type:
        per_type["full_attention"].update(cfg["rope_scaling"])
    dropped = ("rope_theta", "rope_scaling", "partial_rotary_factors", "partial_rotary_factor")
    return {**{k: v for k, v in cfg.items() if k not in dropped}, "rope_parameters": per_type}


def _layer_rope(cfg: Config, model_type: str, d: RopeDefaults, family: str) -> list[PositionalEncoding]:
    """One encoding per layer for the models whose code varies RoPE by layer (:data:`_PER_LAYER_KEY`)."""
    count = required_count(cfg, model_type)
    raw = rope_dict(cfg, model_type)
    base = get(raw, "rope_theta", default=cfg.get("rope_theta"))
    if family == "molmo2":
        # the dict's RoPE in rope_scaling_layers (default all), its base unscaled elsewhere
        scaled = get(cfg, "rope_scaling_layers", default=range(count))
        if not isinstance(scaled, (list, tuple, range)) or not all(isinstance(i, int) for i in scaled):
            raise TypeError(
                f"{model_type} config: rope_scaling_layers must be a list of layer indices, got {scaled!r}"
            )
        plain = {"rope_type": "default", "rope_theta": base}
        settings: list[Mapping | None] = [raw if i in scaled else plain for i in range(count)]
    else:
        if cfg.get("layer_rope_theta") is None:
            thetas = [base if _LAYER_THETA[family] or (count - 1 - i) % 4 else 0 for i in range(count)]
        else:
            thetas = per_layer(cfg, model_type, "layer_rope_theta", "bases", "one base (0: NoPE)")
        if not _LAYER_THETA[family] and any(t and t != base for t in thetas):
            raise ValueError(
                f"{model_type} config: layer_rope_theta={list(thetas)} gives a base other than rope_theta={base}, "
                f"but {model_type}'s code rotates every RoPE layer at rope_theta (it reads only which entries are 0)"
            )
        settings = [{**raw, "rope_theta": t} if t else None for t in thetas]
    head_dim, built = _head_dim(cfg, model_type, d), {}
    layers: list[PositionalEncoding] = []
    for i, params in enumerate(settings):
        key = None if params is None else repr(sorted(params.items()))
        if key is not None and key not in built:
            built[key] = build_rope(
                cfg, model_type, d, head_dim, params=params, where=f"layer {i}'s rope_parameters"
            )
        layers.append(NoPE() if key is None else built[key])
    return layers


def _head_dim(cfg: Config, model_type: str, d: RopeDefaults) -> int:
    if cfg.get("qk_rope_head_dim") is not None:  # MLA: the rotated part of each head
        params = rope_dict(cfg, model_type)
        partial = [
            p.get("partial_rotary_factor") for p in (cfg, params, *params.values()) if isinstance(p, Mapping)
        ]
        if any(value not in (None, 1, 1.0) for value in partial):
            raise ValueError(
                f"{model_type} config: both 'qk_rope_head_dim' and 'partial_rotary_factor' (!= 1): which channels "
                "its code rotates is not read from these fields alone"
            )
        return check_positive_int(f"{model_type} config: qk_rope_head_dim", cfg["qk_rope_head_dim"])
    return heads_and_head_dim(cfg, model_type, d)[1]
