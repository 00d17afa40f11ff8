"""The conversion table: ``model_type`` -> converter and a one-line summary (the single source of truth).

:func:`posenc.hf.from_hf_config` looks a model type up here; :data:`SUPPORTED_MODEL_TYPES` and
:func:`supported_models_markdown` are generated from it. The converters themselves live in
:mod:`posenc.hf._rope`, :mod:`posenc.hf._layers`, :mod:`posenc.hf._speech` and :mod:`posenc.hf._bias`.
"""

from __future__ import annotations

from ..encodings import NoPE
from ._bias import (
    _bloom,
    _falcon,
    _learned_grid,
    _longt5_encoder,
    _mpt,
    _siglip2,
    _sinusoidal,
    _t5,
    forecasting,
    learned_by_field,
    learned_stack,
    refused_stack,
    trocr,
)
from ._layer_types import rope_flags, sliding_layers
from ._layers import (
    deepseek_v4,
    dots3_note,
    gemma3,
    gemma4,
    modernbert,
    nope_layers,
)
from ._read import Convert
from ._rope import RopeDefaults, gptj, mistral4, mrope, roformer, rope
from ._speech import fastspeech2, speech, speecht5, vits
from ._vision import dinov3, efficientloftr, eomt_dinov3, llama4_vision, pixtral, sam3_vit, sam_memory

#: One line, or one per layer type where the layers (or stacks) differ.
Summary = str | dict[str, str]
#: An encoder-decoder whose stacks differ: ``stack`` -> converter (``None``: the stack taken without one).
PerStack = dict[str | None, Convert]

_MARIAN = (_sinusoidal("paper", 1024, 1024), "Sinusoidal, concat layout, positions from 0")
_QWEN2_VL = (
    mrope(RopeDefaults(8192, 64, 32768, theta=1e6), (16, 24, 24), interleaved=False),
    "MRoPE, chunked (t, h, w) sections, `mrope_section` (16, 24, 24), base 1e6",
)
_QWEN3_VL = "MRoPE, interleaved (t, h, w) sections, `mrope_section` (24, 20, 20), base 5e5"
_SLIDING = "RoPE, half layout, base `rope_local_base_freq` (1e4), sliding window"
_T2T = "Sinusoidal, concat layout, tensor2tensor spacing, offset"
_PHI3_TYPES = (("su", "longrope"), ("yarn", "longrope"))


def _fairseq(
    width: int, length: int, keys: tuple[str, ...] = ("max_position_embeddings",), pad: int = 1
) -> tuple[Convert, str]:
    """fairseq's sinusoids (M2M100's table), real tokens numbered from ``pad_token_id + 1``: ``width`` and
    ``length`` the class's defaults, ``keys`` those of the length (its first set)."""
    return _sinusoidal("tensor2tensor", width, length, keys, offset=None, pad=pad), f"{_T2T} pad_token_id + 1"


def _qwen3_vl(d: RopeDefaults) -> tuple[Convert, str]:
    """Qwen3-VL's text models: interleaved MRoPE, their class's ``mrope_section``; ``d``: its defaults."""
    return mrope(d, (24, 20, 20), interleaved=True), _QWEN3_VL


def _seamless(length: int, speech_line: str) -> tuple[PerStack, Summary]:
    """SeamlessM4T: the speech encoder's relative tables (by default), its text stacks' M2M100 sinusoids."""
    text, line = _fairseq(1024, length, pad=0)
    lines = {"speech encoder (`stack='encoder'`)": speech_line, "`stack='text_encoder'`, `'decoder'`": line}
    return {None: speech, "encoder": speech, "text_encoder": text, "decoder": text}, lines


# Only models whose code (or config.json) departs from transformers 5's standardized RoPE fields, each
# with the reason in a comment; every other text model is converted by rule (posenc.hf._rule). Model
# types whose config classes share every default share a row's converter.
_CONVERTERS: dict[str, tuple[Convert | PerStack, Summary]] = {
    # config.json keeps the legacy rope_local_base_freq / sliding_window_pattern its class converts
    "gemma3_text": (
        gemma3(RopeDefaults(2304, 8, 131072, head_dim=256)),
        {
            "sliding_attention": _SLIDING,
            "full_attention": "RoPE, half layout, base 1e6 and the scaling dict (linear ×8 in the 4B-27B)",
        },
    ),
    "gemma3n_text": (
        gemma3(RopeDefaults(2048, 8, 32768, head_dim=256)),
        {"sliding_attention": _SLIDING, "full_attention": "RoPE, half layout, base 1e6"},
    ),
    # its class derives layer_types (every 6th full, the last forced full) and per-type rope_parameters
    "gemma4_text": (
        gemma4,
        {
            "sliding_attention": "RoPE, half layout, base 1e4, sliding window",
            "full_attention": "proportional RoPE (p-RoPE, 0.25 of the pairs), base 1e6, `global_head_dim` (512)",
        },
    ),
    # legacy global_rope_theta / local_rope_theta; layer types from global_attn_every_n_layers
    "modernbert": (
        modernbert,
        {
            "full_attention": "RoPE, half layout, `global_rope_theta` (1.6e5), every third layer from the first",
            "sliding_attention": "RoPE, half layout, `local_rope_theta` (1e4), window `local_attention` (128)",
        },
    ),
    # no_rope_layers: NoPE layers (Llama 4: query temperature there), every 4th by default
    "llama4_text": (
        nope_layers(
            RopeDefaults(5120, 40, 131072, theta=5e5, head_dim=128, layout="interleaved"), rope_flags, True
        ),
        {
            "RoPE layers": "RoPE, interleaved layout, base 5e5",
            "`no_rope_layers` 0 (every 4th)": "QueryTemperature (`floor_scale`, `attn_scale`), or NoPE",
        },
    ),
    "smollm3": (
        nope_layers(RopeDefaults(2048, 16, 32768, theta=2e6), rope_flags),
        {"RoPE layers": "RoPE, half layout, base 2e6", "`no_rope_layers` 0 (every 4th)": "NoPE"},
    ),
    # its code rotates only the sliding layers
    "cohere2": (
        nope_layers(RopeDefaults(8192, 64, 8192, layout="interleaved"), sliding_layers),
        {"sliding_attention": "RoPE, interleaved layout, sliding window", "full_attention": "NoPE"},
    ),
    # M-RoPE over whole heads (the rule would read partial_rotary_factor / rope_interleave, which their code
    # does not), its class's mrope_section and sizes for a config.json: positions (t, 3) or (b, t, 3)
    **dict.fromkeys(("qwen2_vl_text", "qwen2_5_vl_text"), _QWEN2_VL),
    "qwen3_vl_text": _qwen3_vl(RopeDefaults(4096, 32, 128000, theta=5e5, head_dim=128)),
    "qwen3_vl_moe_text": _qwen3_vl(RopeDefaults(2048, 16, 128000, theta=5e5)),
    # MLA heads [nope | rope] whose code rotates the last qk_rope_head_dim channels and scales whole queries
    # (llama_4_scaling_beta), with a partial_rotary_factor the rule cannot place
    "mistral4": (
        mistral4,
        "RoPE, interleaved layout (half where `rope_interleave` is false), the last `qk_rope_head_dim` (64) of "
        "`qk_nope_head_dim + qk_rope_head_dim` channels, YaRN, whole queries scaled by `llama_4_scaling_beta`",
    ),
    # rope_parameters keyed "main" / "compress" (not by layer type), built by its class from compress_rope_theta;
    # the rotated channels end each head
    "deepseek_v4": (
        deepseek_v4,
        {
            "sliding_attention": "RoPE, interleaved layout, the last `qk_rope_head_dim` (64) channels, base `rope_theta` (1e4)",
            "compressed layers (CSA, HCA)": "RoPE, interleaved layout, the last 64 channels, base `compress_rope_theta` (1.6e5) and the scaling dict (YaRN, attention factor 1)",
        },
    ),
    # MLA in every layer with a partial_rotary_factor per layer type (its class writes qk_rope_head_dim / head_dim,
    # which the rule cannot place) and per-layer widths in per_layer_config
    "dots3_note_text": (
        dots3_note,
        "RoPE, interleaved layout, on each layer's `qk_rope_head_dim` (64) channels (q_pe / k_pe), at its layer "
        "type's `rope_parameters` (base 8e7 on the DSA layers, 5e4 on the sliding ones)",
    ),
    # config.json's legacy names its class converts: Phi-3's rope_type 'su' / 'yarn' (longrope), its
    # top-level original_max_position_embeddings; GPT-NeoX's rotary_pct / rotary_emb_base (posenc.hf._read.ALIASES)
    "phi3": (
        rope(3072, 32, 4096, partial=1.0, original_max=4096, renamed_types=_PHI3_TYPES),
        "RoPE, half layout, longrope",
    ),
    "gpt_neox": (rope(6144, 64, 2048, partial=0.25), "RoPE, half layout, rotary_pct (0.25), rotary_emb_base"),
    # vision (a 2D grid of patches, no text RoPE fields): ViT-style learned tables (class token first; DeiT's
    # distillation token too)
    "deit": (_learned_grid(2, 224, 16), "Learned2D, class and distillation tokens first, bicubic resampling"),
    "dinov2": (_learned_grid(1, 224, 14), "Learned2D, class token first, bicubic resampling (offset 0)"),
    "dinov2_with_registers": (
        _learned_grid(1, 224, 16, antialias=True),
        "Learned2D, class token first (the register tokens come after the table is added: none of their "
        "own), bicubic antialiased resampling",
    ),
    # ... and ViT's own and its kin among towers (CLIP's, BLIP's, OWL-ViT's, InternVL's, SigLIP's: none), by
    # (prefix, image, patch, width)
    **{
        name: (
            _learned_grid(*sizes[:3], width=sizes[3]),
            f"Learned2D, {'class token first' if sizes[0] else 'no prefix token'}, bicubic resampling",
        )
        for sizes, names in {
            (1, 224, 32, 768): "altclip_vision_model chinese_clip_vision_model clip_vision_model "
            "clipseg_vision_model metaclip_2_vision_model xclip_vision_model",
            (1, 224, 16, 768): "vit flava_image_model git_vision_model vit_mae vit_msn",
            (1, 224, 14, 1408): "blip_2_vision_model instructblip_vision_model "
            "instructblipvideo_vision_model",
            (1, 384, 16, 768): "blip_vision_model",
            (1, 448, 14, 1024): "internvl_vision qianfan_ocr_vision",
            (1, 768, 32, 768): "owlvit_vision_model",
            (1, 768, 16, 768): "owlv2_vision_model",
            (0, 224, 16, 384): "groupvit_vision_model",
            (0, 224, 16, 768): "siglip_vision_model ijepa",
            (0, 384, 16, 1024): "janus_vision_model",
            (0, 512, 16, 768): "granite_docling_vision",
        }.items()
        for name in names.split()
    },
    "tipsv2_vision_model": (
        _learned_grid(1, 448, 14, antialias=True, mode="bilinear"),
        "Learned2D, class token first (its register tokens come after the table is added), bilinear antialiased "
        "resampling",
    ),
    # NaViT's look-up: each patch reads the table cell its fractional coordinates fall in
    **{
        name: (
            _learned_grid(0, image, patch, width=width, mode="bucketize"),
            "Learned2D, no prefix token, NaViT's bucketized look-up for other grids (`mode='bucketize'`)",
        )
        for name, (image, patch, width) in {
            "idefics2_vision": (224, 32, 768),
            "idefics3_vision": (224, 32, 1152),
            "smolvlm_vision": (224, 32, 1152),
            "phi4_multimodal_vision": (448, 14, 1152),
        }.items()
    },
    # the same where the fractions are i / n (MiniCPM-V's towers: transformers' get_vision_nearest_position_ids)
    **dict.fromkeys(
        ("minicpm_ocr_vision", "minicpmv4_6_vision", "minicpmv4_7_vision"),
        (
            _learned_grid(0, 224, 16, mode="bucketize_divide"),
            "Learned2D, no prefix token, NaViT's bucketized look-up of fractions i / n (`mode='bucketize_divide'`)",
        ),
    ),
    # its class tokens: n_cls_tokens (8)
    "pixio": (
        _learned_grid(8, 256, 16, width=1280, prefix_key="n_cls_tokens"),
        "Learned2D, `n_cls_tokens` (8) class tokens first, bicubic resampling",
    ),
    "siglip2_vision_model": (
        _siglip2,
        "Learned2D, a `num_patches` square grid, no prefix token, resized per image (`spatial_shapes`) "
        "bilinear antialiased",
    ),
    # vision: DINOv3's 2D RoPE (its code reads rope_theta, image_size, patch_size, num_register_tokens)
    "dinov3_vit": (
        dinov3,
        "AxialRoPE, `freqs='period'` (base `rope_theta`, 100) on patch centres, prefix tokens unrotated",
    ),
    # EoMT's DINOv3: rope_theta in rope_parameters; query tokens join its last num_blocks layers, unrotated
    "eomt_dinov3": (
        eomt_dinov3,
        {
            "first `num_hidden_layers - num_blocks`": "as `dinov3_vit`, class and register tokens (4) unrotated",
            "last `num_blocks` (4)": "the same, its `num_queries` (200) query tokens (first) also unrotated",
        },
    ),
    # its code reads rope_theta, image_size and patch_size (a fixed grid: it tiles images), its class token last
    "llama4_vision_model": (
        llama4_vision,
        "AxialRoPE, interleaved layout, columns first, patches numbered from 1, the class token last (unrotated)",
    ),
    # windowed and global layers (global_attn_indexes), both on neighbouring pairs, columns first
    "sam3_vit_model": (
        sam3_vit,
        {
            "windowed": "AxialRoPE, interleaved layout, columns first, on each `window_size` (24) window's patches",
            "`global_attn_indexes` (7, 15, 23, 31)": "the same on the `image_size // patch_size` grid, "
            "coordinates scaled to span a window (`ref_grid`)",
        },
    ),
    # the memory attention's rotary (SAM 3's image encoder, a ViT, converts from its backbone_config as
    # sam3_vit_model; the others' have none): its cross-attention's keys repeat the grid
    **dict.fromkeys(
        ("sam2_video", "sam3_tracker_video", "edgetam_video"),
        (
            sam_memory,
            "AxialRoPE, interleaved layout, columns first, on the `memory_attention_rope_feat_sizes` grid (memory "
            "frames: the grid repeated, EdgeTAM's on `memory_attention_rope_k_sizes`; object pointer tokens "
            "unrotated)",
        ),
    ),
    # its rotary spans the whole hidden vector (before the heads are split); partial_rotary_factor sizes it
    "efficientloftr": (
        efficientloftr,
        "AxialRoPE over `hidden_size`, `axis_layout='cycle'` (row and column at each frequency), interleaved "
        "layout, cells numbered from 1",
    ),
    "pixtral": (
        pixtral,
        "AxialRoPE, `axis_layout='alternate'` (even frequencies to rows), base `rope_theta`",
    ),
    # GPT-J / CodeGen: no rope fields; rotary_dim, and the base fixed in their code
    **dict.fromkeys(("gptj", "codegen"), (gptj, "RoPE, interleaved layout, rotary_dim (64), no scaling")),
    # its own sinusoidal table (no rope fields), applied to neighbouring pairs; rotary_value rotates values too
    "roformer": (
        roformer,
        "RoPE, interleaved layout, base 1e4 (its sinusoidal table); `rotary_value` refused",
    ),
    # alibi=True replaces RoPE by ALiBi
    "falcon": (
        _falcon,
        "RoPE, half layout; with alibi=True, ALiBi with slopes / sqrt(head_dim), rounded as Falcon's (FalconALiBi)",
    ),
    # conformer speech encoders (posenc.hf._speech): position_embeddings_type, relative tables per layer
    "wav2vec2-bert": (
        speech,
        "ShawRelative (`relative_key`, left 64 / right 8) or RelPosXL (`relative`), per layer",
    ),
    "wav2vec2-conformer": (speech, "RelPosXL (`relative`, Transformer-XL), per layer"),
    # NeMo's FastConformer (Parakeet CTC/TDT, Canary's and Cohere ASR's encoders): always Transformer-XL
    "parakeet_encoder": (
        speech,
        "RelPosXL (Transformer-XL; `relative_k_proj`, `bias_u`, `bias_v`), per layer",
    ),
    # ... and their text stacks (stack='text_encoder', 'decoder'): M2M100's table, copied in their code
    "seamless_m4t": _seamless(1024, "RelPosXL (`relative`, Transformer-XL), per layer"),
    "seamless_m4t_v2": _seamless(4096, "ShawRelative (`relative_key`, left 64 / right 8), per layer"),
    # one table of relative keys for all its encoder's layers (its task models' prenets add input positions too)
    "speecht5": (
        {
            None: speecht5,
            "encoder": speecht5,
            "decoder": refused_stack(
                "its decoder's attention adds no position; the prenet of its task model adds them to the decoder's "
                "inputs (text: fairseq's sinusoids; speech: sinusoids times a learned alpha), which posenc does not "
                "convert; stack='encoder' gives its encoder's relative keys"
            ),
        },
        {
            "`stack='encoder'` (or none)": "ShawRelative (relative keys `pe_k`, clipped at "
            "`encoder_max_relative_position`: 159 back, 160 ahead), one table for every layer; its prenets' input "
            "positions not converted",
            "`stack='decoder'`": "refused: its attention adds no position (its task's prenet does)",
        },
    ),
    # ESPnet's relative positions in every layer of both stacks (its decoder: non-autoregressive)
    "fastspeech2_conformer": (
        {stack: fastspeech2(f"{stack}_config") for stack in ("encoder", "decoder")},
        {
            "`stack='encoder'`, `'decoder'`": "RelPosXL (ESPnet's relative positions: `linear_pos`, `pos_bias_u`, "
            "`pos_bias_v`), per layer"
        },
    ),
    # its text encoder's attention: relative keys and values within window_size, none beyond (no rope fields)
    "vits": (
        vits,
        "ShawRelative (`emb_rel_k`, `emb_rel_v`: keys and values within `window_size` (4), none beyond, "
        "`beyond='zero'`), per layer",
    ),
    # hybrids whose attention layers add no position at all: their Mamba / linear-attention layers carry the order
    # (GLM-5 Next: its indexed attention rotates no channel, qk_rope_head_dim 0, which its class requires)
    **dict.fromkeys(
        ("glm5_next_text", "jamba", "kimi_linear", "nemotron_h", "zamba"),
        (
            lambda cfg, model_type, causal: NoPE(),
            "NoPE (no position in attention; its recurrent layers order)",
        ),
    ),
    # attention biases, and below tables added to the embeddings: no RoPE fields to read
    # (Switch Transformers and Pop2Piano: T5's attention, copied)
    **dict.fromkeys(
        ("t5", "mt5", "switch_transformers", "pop2piano"),
        (_t5, "RelativeBias (encoder bidirectional, decoder causal)"),
    ),
    # Pix2Struct's text decoder: T5's bias, causal whatever is_decoder says (its code passes bidirectional=False)
    "pix2struct_text_model": (
        lambda cfg, model_type, causal: _t5({**cfg, "is_decoder": True}, model_type, causal),
        "RelativeBias (causal)",
    ),
    # its decoder's attention is T5's; its encoder's T5's within local_radius (layer_windows), or transient-global
    "longt5": (
        {"encoder": _longt5_encoder, "decoder": _t5},
        {
            "`stack='encoder'`": "RelativeBias (bidirectional) within `local_radius` of each token "
            "(`layer_windows`); transient-global refused",
            "`stack='decoder'`": "RelativeBias (causal)",
        },
    ),
    # T5's bias in every layer, each its own table
    "umt5": (_t5, "RelativeBias in every layer, each its own table (encoder bidirectional, decoder causal)"),
    "bloom": (_bloom, "ALiBi"),
    "mpt": (_mpt, "ALiBi (attn_config.alibi_bias_max other than 8 refused: transformers' MPT ignores it)"),
    # learned tables (posenc.hf._bias._LEARNED: their sizes and where from_hf_model finds them)
    **dict.fromkeys(("gpt2", "gpt_neo"), (learned_by_field, "Learned")),
    **dict.fromkeys(("opt", "bart", "mbart"), (learned_by_field, "Learned, offset 2")),
    **dict.fromkeys(("marian", "pegasus"), _MARIAN),
    "ctrl": (_sinusoidal("paper", 1280, 256), _MARIAN[1]),  # (its positional_encoding; n_positions rows)
    "speech_to_text": _fairseq(256, 1024, ("max_target_positions", "max_source_positions")),
    # M2M100's, and its table copied in their code (Kosmos-2's width is embed_dim; FSMT's: fairseq's own)
    **dict.fromkeys(("m2m_100", "nllb-moe", "fsmt"), _fairseq(1024, 1024)),
    "kosmos_2_text_model": _fairseq(2048, 2048),
    # the same module again; Kosmos-2.5 then adds its segment embedding (not a position) to the rows
    "kosmos_2_5_text_model": _fairseq(1536, 4096),
    "xglm": (_sinusoidal("tensor2tensor", 1024, 2048, offset=2), f"{_T2T} 2"),
    # (its decoder's config; the parents' hold it as `config.decoder`)
    **dict.fromkeys(
        ("musicgen_decoder", "musicgen_melody_decoder"),
        (
            _sinusoidal("tensor2tensor", 1024, 2048, layout="concat_cos"),
            "Sinusoidal, `concat_cos` layout (cos before sin), tensor2tensor spacing, positions from 0",
        ),
    ),
    # Canary's decoder (its parent's `decoder_config`): the paper's table over sqrt(hidden_size), by index from 0
    "canary_decoder": (
        _sinusoidal("paper", 1024, 1024, scaled=True),
        "Sinusoidal, concat layout, positions from 0, times 1/sqrt(`hidden_size`)",
    ),
    # its own flag picks the table: learned (BART's offset 2), or fairseq's sinusoids
    "trocr": (
        trocr,
        f"Learned, offset 2; with `use_learned_position_embeddings=False`, {_T2T} pad_token_id + 1",
    ),
    # computed on the fly by index (no table, no padding offset)
    "pegasus_x": (_sinusoidal("tensor2tensor", 1024, 16384), f"{_T2T} 0"),
    # TIPSv2's text tower: the same table, read by index from 0 (it scales the tokens, not the positions)
    "tipsv2_text_model": (_sinusoidal("tensor2tensor", 768, 64), f"{_T2T} 0"),
    # encoder-decoders whose stacks differ (from_hf_config's stack=): Whisper's encoder table is fixed, its
    # sinusoids() (tensor2tensor spacing, from 0), its decoder's learned; LED's stacks have their own lengths
    "whisper": (
        {
            "encoder": _sinusoidal("tensor2tensor", 384, 1500, ("max_source_positions",)),
            "decoder": learned_stack("max_target_positions", (384, 448)),
        },
        {
            "`stack='encoder'`": f"{_T2T} 0, `max_source_positions` (fixed)",
            "`stack='decoder'`": "Learned, `max_target_positions`",
        },
    ),
    # forecasting transformers: Marian's table over the context and prediction steps, the decoder's from
    # context_length (Autoformer's from context_length - label_length)
    **{
        name: (
            {stack: forecasting(stack, label=name == "autoformer") for stack in ("encoder", "decoder")},
            {
                "`stack='encoder'`": "Sinusoidal, concat layout, steps from 0",
                "`stack='decoder'`": "the same, steps from `context_length`"
                + (" - `label_length`" if name == "autoformer" else ""),
            },
        )
        for name in ("time_series_transformer", "informer", "autoformer")
    },
    # Cohere ASR: its top-level fields are its decoder's; its encoder is a Parakeet encoder (encoder_config)
    "cohere_asr": (
        {
            "encoder": refused_stack(
                "this stack's config is its encoder_config (parakeet_encoder): pass config.encoder_config "
                "(config['encoder_config'] of a config.json dict)"
            ),
            "decoder": learned_by_field,
        },
        {
            "`stack='encoder'`": "refused: pass its `encoder_config` (parakeet_encoder)",
            "`stack='decoder'`": "Learned",
        },
    ),
    "led": (
        {
            s: learned_stack(f"max_{s}_position_embeddings", (1024, n))
            for s, n in (("encoder", 16384), ("decoder", 1024))
        },
        {f"`stack='{s}'`": f"Learned, `max_{s}_position_embeddings`" for s in ("encoder", "decoder")},
    ),
}

#: The ``model_type`` values :func:`from_hf_config` accepts, generated from its conversion table.
#: Multimodal parents (``gemma3``, ``llava``, ... :data:`posenc.hf.configs._TEXT_TYPE`) are read through their
#: ``text_config``.
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted(_CONVERTERS))


def supported_models_markdown() -> str:
    """A Markdown table of the supported ``model_type`` values and what each becomes, for the docs.

    Generated from the same table :func:`from_hf_config` uses, so the documentation cannot
    drift from the code. A model whose layers differ gets one row per layer type.
    """
    # Every RoPE row except GPT-J/CodeGen also reads the rope_parameters scaling types.
    rows = ["| model_type | layers | posenc encoding |", "| --- | --- | --- |"]
    for name in SUPPORTED_MODEL_TYPES:
        summary = _CONVERTERS[name][1]
        lines = {"all": summary} if isinstance(summary, str) else summary
        rows += [f"| `{name}` | {layers} | {text} |" for layers, text in lines.items()]
    return "\n".join(rows)
