"""The encoding a ``transformers`` config describes: one converter per ``model_type``, one table.

:func:`from_hf_config` reads a ``transformers`` config object, or the dict of a model's
``config.json``, and returns the posenc encoding that model uses, with every setting carried
over. :data:`_CONVERTERS` (:mod:`posenc.hf._table`) maps each ``model_type`` to its converter and
a one-line summary; :data:`SUPPORTED_MODEL_TYPES` and :func:`supported_models_markdown` are
generated from it. The converters live in :mod:`posenc.hf._rope`, :mod:`posenc.hf._vision`,
:mod:`posenc.hf._layers`, :mod:`posenc.hf._speech` and :mod:`posenc.hf._bias`, the config readers in
:mod:`posenc.hf._read` and :mod:`posenc.hf._layer_types` (each layer's type and window).

``transformers`` is optional: nothing here imports it. The defaults of keys a ``config.json``
leaves out are those of the matching ``transformers`` config class (checked by the tests
against ``transformers`` itself).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, cast

import torch

from ..base import PositionalEncoding
from ..encodings import NoPE
from ._layer_types import (
    NO_POSITION_TYPES,
    layer_count,
    layer_types,
    refuse_local_attention,
    required_count,
    sliding_windows,
)
from ._read import Convert, class_defaults, config_dict, positive_int
from ._rule import as_class, by_rule, refuse_undeclared_rope
from ._speech import SPEECH_MODEL_TYPES
from ._table import (
    _CONVERTERS,
    SUPPORTED_MODEL_TYPES,
    PerStack,
    supported_models_markdown,
)

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "from_hf_config",
    "layer_encodings",
    "layer_windows",
    "supported_models_markdown",
]


#: The model type of the text model a parent's class builds from a ``text_config`` dict that names none
#: (transformers' SubConfigSpec): ``<parent>_text``, ``<parent>_text_model`` or another model's. A parent not
#: listed reads such a dict by rule, as ``"<parent> text_config"``.
_TEXT_TYPE: dict[str, str] = {
    **{
        parent: f"{parent}_text"
        for parent in (
            "apertus1p5 aria cohere_compass cosmos3_edge deepseek_ocr2 diffusion_gemma dots3_note embedding_gemma2 "
            "ernie4_5_vl_moe gemma3 gemma3n gemma4 gemma4_unified glm4v glm4v_moe glm5_next glm_image glm_ocr "
            "granite4_vision granite_docling hunyuan_vl hy_v4_vl inkling2 inkling2_loop llama4 minimax_m3_vl "
            "mistral_large4 molmo2 muse_glimmer muse_spark paddleocr_vl pp_formulanet qwen2_5_vl qwen2_vl qwen3_5 "
            "qwen3_5_moe qwen3_vl qwen3_vl_moe qwen4_exp unlimited_ocr voxtral_realtime"
        ).split()
    },
    **{
        parent: f"{parent}_text_model"
        for parent in (
            "aimv2 align altclip blip bridgetower chinese_clip clap clip clipseg emu3 flava groupvit metaclip_2 "
            "mllama owlv2 owlvit pix2struct sam3_lite_text siglip siglip2 tipsv2 videoprism xclip"
        ).split()
    },
    **{
        parent: text
        for text, parents in {
            "bart": "florence2",
            "bert": "grounding-dino mm-grounding-dino vision-text-dual-encoder",
            "clip_text_model": "omdet-turbo sam3",
            "clvp_encoder": "clvp",
            "cohere2": "aya_vision cohere2_vision",
            "deepseek_v3": "kimi_k25",
            "exaone4": "exaone4_5",
            "gemma": "paligemma",
            "gemma3_text": "shieldgemma2",
            "gemma4_text": "gemma4_assistant",
            "gemma4_unified_text": "gemma4_unified_assistant",
            "glm4v_text": "glm46v glmga",
            "granite": "granite_speech granite_speech_plus",
            "hyperclovax": "hyperclovax_vision_v2",
            "inkling_text": "inkling_mm_model",
            "kosmos_2_5_text_model": "kosmos-2.5",
            "kosmos_2_text_model": "kosmos-2",
            "lfm2": "lfm2_vl",
            "lfm3": "lfm3_vl",
            "llama": "deepseek_vl deepseek_vl_hybrid glmasr idefics3 janus llava llava_next llava_next_video "
            "omniasr perception_lm smolvlm video_llava vipllava voxtral",
            "mistral": "idefics2 mistral3",
            "modernbert": "modernvbert pe_audio pe_audio_video pe_video",
            "nemotron_h": "nemo_speechlm nemotron_h_omni",
            "opt": "blip-2 instructblip instructblipvideo",
            "persimmon": "fuyu",
            "qwen2": "audioflamingo3 fast_vlm got_ocr2 internvl llava_onevision musicflamingo ovis2 "
            "pp_chart2table qwen2_audio vibevoice vibevoice_asr video_llama_3",
            "qwen2_5_omni_text": "qwen2_5_omni_thinker",
            "qwen3": "fun_asr_nano lighton_ocr moss_transcribe_diarize qianfan_ocr qwen3_asr",
            "qwen3_5_text": "jev minicpm_ocr minicpmv4_6 minicpmv4_7",
            "qwen3_omni_moe_text": "qwen3_omni_moe_thinker",
            "qwen3_vl_text": "cosmos3_omni",
            "step3p5": "step3p7",
            "t5gemma2_text": "t5gemma2_encoder",
            "ultrabert": "ultravbert",
        }.items()
        for parent in parents.split()
    },
}
#: Parents whose only attention is the encoder they hold (Parakeet's CTC, RNN-T and TDT heads): read as that one.
ENCODER_OF = dict.fromkeys(("parakeet_ctc", "parakeet_rnnt", "parakeet_tdt"), "encoder_config")
#: Parents whose class builds a default sub-config for a stack (or thinker) a ``config.json`` leaves out, which
#: posenc would read; it holds no such defaults, so such a dict is refused.
_DEFAULT_STACKS = {
    **dict.fromkeys(
        "encoder-decoder speech-encoder-decoder t5gemma t5gemma2 vision-encoder-decoder".split(),
        ("encoder", "decoder"),
    ),
    **dict.fromkeys("blt canary dia".split(), ("encoder_config", "decoder_config")),
    **dict.fromkeys(("qwen2_5_omni", "qwen3_omni_moe"), ("thinker_config",)),
    **{parent: (field,) for parent, field in ENCODER_OF.items()},
}
#: The parents whose class reads a config without ``text_config`` from its top-level keys; every other
#: parent's class then builds its default text model (what :func:`from_hf_config` reads) and ignores them.
_FLAT_TEXT = frozenset("fuyu glm5_next hunyuan_vl paddleocr_vl qwen2_5_vl qwen2_vl".split())
#: Where a parent config keeps its text model (as transformers' get_text_config; Qwen2.5-Omni: its thinker's
#: text_config), and the stacks of an encoder-decoder parent (T5Gemma, Dia; BLT's byte-level encoder_config /
#: decoder_config: its model reads no RoPE field at the parent's top level, though a config may carry one).
_TEXT_FIELDS = ("text_config", "thinker_config")
_STACK_FIELDS = (("encoder", "decoder"), ("encoder_config", "decoder_config"))
#: A resolved config: the parent's field it came from (None: itself), dict, model_type, converter, object.
_Stack = tuple[str | None, dict[str, Any], str, Convert | PerStack, Any]


def _resolve(config: Any) -> list[_Stack]:
    """The config (a multimodal one's text model; each stack of an encoder-decoder parent) and its converter."""
    cfg = config_dict(config)
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise ValueError(
            f"config has no 'model_type' (got {model_type!r}); a config.json dict must carry it. "
            f"Supported model types: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    absent = [f for f in _DEFAULT_STACKS.get(model_type, ()) if not isinstance(cfg.get(f), Mapping)]
    if absent and isinstance(config, Mapping):  # (an object's class has built them)
        raise ValueError(
            f"{model_type} config: no {absent[0]!r} dict; its class builds a default one, whose settings posenc "
            "does not hold: give it"
        )
    if cfg.get("text_config") is None and model_type in _TEXT_TYPE:
        # The parent's class builds its default text model (what a config object of it holds), ignoring text keys
        # at its top level, or reads those keys (_FLAT_TEXT)
        flat = model_type in _FLAT_TEXT
        config = cfg = {**cfg, "text_config": {k: v for k, v in cfg.items() if flat and k != "model_type"}}
    fields: list[tuple[str, ...]] = [
        (f,) for f in (*_TEXT_FIELDS, ENCODER_OF.get(model_type)) if f and cfg.get(f) is not None
    ]
    fields += [pair for pair in _STACK_FIELDS if all(isinstance(cfg.get(f), Mapping) for f in pair)]
    if model_type not in _CONVERTERS and fields:
        stacks: list[_Stack] = []
        for field in fields[0]:
            sub = cfg[field] if isinstance(config, Mapping) else getattr(config, field, cfg[field])
            # (with what its parent's class fills a dict with: Voxtral's text model's head_dim)
            if isinstance(sub, Mapping):
                sub = {**class_defaults(f"{model_type}.{field}"), **sub}
                if sub.get("model_type") in (None, model_type):  # (a parent's class never nests itself)
                    text = _TEXT_TYPE.get(model_type) if field == "text_config" else None
                    sub = {**sub, "model_type": text or f"{model_type} {field}"}
            stacks += [(field if len(fields[0]) > 1 else s[0], *s[1:]) for s in _resolve(sub)]
        return stacks
    if model_type in _CONVERTERS:
        return [(None, cfg, model_type, _CONVERTERS[model_type][0], config)]
    # outside the table: the standardized fields (posenc.hf._rule), refused by name where they fall short
    if not isinstance(config, Mapping):
        refuse_undeclared_rope(config, model_type)
    return [(None, as_class(cfg, model_type), model_type, by_rule, config)]


def _same_table(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two buffers hold one table: equal, or floating point within 1e-6 of each other. (Two builds of
    one table can differ in their last bits: a fresh process's first sizable cos or sin in torch can run
    oneMKL's low-accuracy kernel on one thread's chunk, pytorch/pytorch#188792; other settings differ by far
    more.)"""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a, b) or (a.is_floating_point() and torch.allclose(a, b, rtol=1e-6, atol=1e-7))


def _agree(stacks: list[_Stack], per_layer: list[list[Any]], what: str) -> None:
    """Refuse an encoder-decoder parent whose stacks differ in ``what`` (per stack, one entry per layer):
    encodings differ in their repr (type, settings) or buffers (tables; under the meta device, built again on
    the CPU), other entries by ``==``."""

    compared: dict[tuple[int, int], bool] = {}  # (layers share instances: each pair's tables compared once)

    def same(a: Any, b: Any) -> bool:
        if not isinstance(a, torch.nn.Module):
            return bool(a == b)
        if (a_b := (id(a), id(b))) not in compared:
            ba, bb = dict(a.named_buffers()), dict(b.named_buffers())
            compared[a_b] = (
                repr(a) == repr(b) and ba.keys() == bb.keys() and all(_same_table(ba[n], bb[n]) for n in ba)
            )
        return compared[a_b]

    (field, *_), first = stacks[0], per_layer[0]
    for (other, *_), value in zip(stacks[1:], per_layer[1:], strict=True):
        i = next((i for i, (x, y) in enumerate(zip(first, value, strict=False)) if not same(x, y)), None)
        if i is not None or len(first) != len(value):
            detail = (
                f"{len(first)} vs {len(value)} layers"
                if i is None
                else " ".join(f"layer {i}: {first[i]!r} vs {value[i]!r}".split())  # (one line: RelPosXL's)
            )
            raise ValueError(
                f"this encoder-decoder config's {field} and {other} differ in their {what} ({detail}): pass "
                f"config.{field} or config.{other} (config[{field!r}] or config[{other!r}] of a config.json dict; "
                "from_hf_config: stack='encoder' or 'decoder')"
            )


def _of_stack(convert: Convert | PerStack, model_type: str, stack: str | None) -> Convert:
    """The converter of ``stack``: the model's only one where its stacks agree (or it has one stack)."""
    stacks = convert if isinstance(convert, dict) else dict.fromkeys((None, "encoder", "decoder"), convert)
    if (stack is None or isinstance(stack, str)) and stack in stacks:
        return stacks[stack]
    accepted = " or ".join(repr(s) for s in stacks if s)
    if stack is None:
        raise ValueError(
            f"{model_type}: its stacks use different position encodings; pass stack={accepted} "
            "(from_hf_config, from_hf_model)"
        )
    raise ValueError(f"stack must be None, {accepted} for {model_type}, got {stack!r}")


#: The layer count of one stack of a flat encoder-decoder config: the first of its keys the config gives
_STACK_LAYERS = {
    "encoder": ("encoder_layers", "num_layers"),
    "text_encoder": ("encoder_layers",),  # (SeamlessM4T's text encoder; its "encoder" is the speech one)
    # (T5: a null num_decoder_layers means num_layers)
    "decoder": ("decoder_layers", "num_decoder_layers", "num_layers"),
}


def _stacks(config: Any, stack: str | None) -> list[_Stack]:
    """The stacks of ``config`` (:func:`_resolve`); of an encoder-decoder parent, ``stack``'s sub-config."""
    stacks = _resolve(config)
    if stack is not None and len(stacks) > 1:
        stacks = [s for s in stacks if s[0] in (stack, f"{stack}_config")] or stacks
    return stacks


def _stack_count(cfg: dict, model_type: str, stack: str | None) -> int:
    """The number of layers of ``stack`` (of a flat encoder-decoder config; else the config's)."""
    if model_type in SPEECH_MODEL_TYPES and stack in (None, "encoder"):  # SeamlessM4T's: the speech encoder
        return required_count(cfg, model_type)
    keys = _STACK_LAYERS.get(stack or "", ())
    if stack is None and layer_count(cfg, model_type) is None:  # a BART-like config.json: its encoder's
        keys = ("encoder_layers",)  # layers, as transformers' attribute_map reads num_hidden_layers there
    key = next((k for k in keys if cfg.get(k) is not None), None)
    return required_count(cfg, model_type) if key is None else positive_int(cfg, model_type, key)


def _layers(
    config: Any, causal: bool | None, stack: str | None = None
) -> tuple[PositionalEncoding | list[PositionalEncoding], dict, str]:
    if causal is not None and not isinstance(causal, bool):
        raise TypeError(f"causal must be None, True or False, got {causal!r}")
    stacks = _stacks(config, stack)
    # a stack's config as transformers hands it to that stack (T5's decoder: is_decoder, a causal bias)
    given = {} if stack is None else {"is_decoder": stack == "decoder"}

    def build() -> list[tuple[PositionalEncoding | list[PositionalEncoding], dict, str]]:
        return [
            (_of_stack(convert, t, stack)({**cfg, **given}, t, causal), cfg, t)
            for _, cfg, t, convert, _ in stacks
        ]

    built = checked = build()
    if len(built) > 1:  # an encoder-decoder parent: one answer where its stacks agree
        if torch.get_default_device().type == "meta":  # (no values to compare: their tables built on the CPU)
            with torch.device("cpu"):
                checked = build()
        per_layer = [b if isinstance(b, list) else [b] * (layer_count(cfg, t) or 1) for b, cfg, t in checked]
        _agree(stacks, per_layer, "position encodings")
    return built[-1]


def layer_encodings(
    config: Any,
    *,
    causal: bool | None = None,
    stack: Literal["encoder", "decoder", "text_encoder"] | None = None,
) -> list[PositionalEncoding]:
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
    * Hybrids: :class:`~posenc.NoPE` on the layers that hold no attention to rotate (layer types
      ``"linear_attention"``: Mamba, gated DeltaNet, MiniMax's lightning attention; ``"conv"``: LFM's
      convolutions; Nemotron-H's ``"mlp"`` / ``"moe"``), though their rotary module serves every layer.
    * Sliding windows are not encodings: :func:`layer_windows` gives them.

    Args:
        config: a ``transformers`` config object or a ``config.json`` dict (multimodal configs
            are read through ``text_config``; an encoder-decoder config through both stacks, which
            must agree: T5Gemma's ``encoder`` / ``decoder``, Dia's ``encoder_config`` / ``decoder_config``).
        causal: as in :func:`from_hf_config`.
        stack: as in :func:`from_hf_config`; the layers are that stack's (``encoder_layers`` /
            ``decoder_layers``, T5's ``num_layers`` / ``num_decoder_layers``, an encoder-decoder parent's
            sub-config). Without it an encoder-decoder config gives its encoder's count.

    Returns:
        ``num_hidden_layers`` encodings (of ``stack``).

    Raises:
        ValueError: as :func:`from_hf_config`; also a config without ``num_hidden_layers``.
    """
    built, cfg, model_type = _layers(config, causal, stack)
    if not isinstance(built, list):
        n = _stack_count(cfg, model_type, stack)
        # layers that each hold their own tables ((speech) encoder layers, UMT5's): one built for each
        speech_encoder = model_type in SPEECH_MODEL_TYPES and stack in (None, "encoder")
        if speech_encoder or model_type in ("umt5", "fastspeech2_conformer", "vits"):
            again = (cast(PositionalEncoding, _layers(config, causal, stack)[0]) for _ in range(n - 1))
            return [built, *again]
        built = [built] * n
    return _no_position_layers(built, cfg, model_type)


def _no_position_layers(
    built: list[PositionalEncoding], cfg: dict, model_type: str
) -> list[PositionalEncoding]:
    """``built`` (one encoding per layer) with :class:`~posenc.NoPE` on a hybrid's layers that hold no attention."""
    types = layer_types(cfg, model_type) if model_type not in SPEECH_MODEL_TYPES else None
    if types is None or not NO_POSITION_TYPES.intersection(types):
        return built
    nope = NoPE()
    return [nope if kind in NO_POSITION_TYPES else e for e, kind in zip(built, types, strict=True)]


def layer_windows(
    config: Any, *, stack: Literal["encoder", "decoder", "text_encoder"] | None = None
) -> list[int | None]:
    """The sliding window of each layer (``None`` for global layers), for ``window=`` per layer.

    ``W`` as transformers applies it and as ``posenc.attention(..., window=W)`` reads it: in a
    causal model a query at ``i`` sees keys ``j`` with ``i - W < j <= i`` (``sliding_window``); in a
    bidirectional one ``|i - j| <= W // 2`` (ModernBERT: ``W = local_attention``; EmbeddingGemma 2, UltraBERT,
    NeoMMe (per layer), OpenAI's privacy filter: twice their ``sliding_window``; Gemma 3 with
    ``use_bidirectional_attention``: as its class halves it; LongT5's local encoder: twice ``local_radius``).
    Layers without a window, models without sliding windows give ``None``; Llama 4's chunked layers (chunks,
    not windows) are refused. Without ``layer_types`` the layers are derived as the config class does
    (Mistral: every layer; Qwen2: from ``max_window_layers`` on, with ``use_sliding_window``; Gemma: the pattern; GPT-Neo: its
    ``"local"`` layers, ``window_size``); for a model outside the table a config object's class decides,
    and a dict with ``sliding_window`` but no ``layer_types`` is refused (its class may derive them in code).

    Args:
        config: as in :func:`layer_encodings`.
        stack: as in :func:`layer_encodings`: one entry per layer of that stack.

    Returns:
        ``num_hidden_layers`` entries (of ``stack``).

    Raises:
        ValueError: as :func:`layer_encodings`; also attention that is local in a way ``window=`` does not
            express (Longformer's and LED's ``attention_window`` with global tokens, BigBird's
            ``attention_type='block_sparse'``, chunked layers, windows of an image in vision towers, chunks of
            audio frames, a window only the generation cache keeps: ``posenc.hf._layer_types.refuse_local_attention``),
            never ``None`` for it.
    """
    stacks = _stacks(config, stack)
    for _, _, t, convert, _ in stacks:
        # (a stack the model does not have, or none where its stacks' windows differ: layer_encodings' error)
        if stack is not None or t == "longt5":
            _of_stack(convert, t, stack)
    for _, cfg, t, _, _ in stacks:
        refuse_local_attention(cfg, t, stack)
    # (a stack's config as transformers hands it over, as in _layers: T5Gemma's decoder sub-config, LongT5's
    # stack=, is a decoder whatever its dict says)
    windows = [
        sliding_windows(
            {**cfg, "is_decoder": (field or stack) == "decoder"} if field or stack else cfg,
            t,
            obj,
            known=t in _CONVERTERS,
            n=_stack_count(cfg, t, stack),
        )
        for field, cfg, t, _, obj in stacks
    ]
    _agree(stacks, windows, "sliding windows")
    return windows[-1]


def from_hf_config(
    config: Any,
    *,
    layer: int | None = None,
    causal: bool | None = None,
    stack: Literal["encoder", "decoder", "text_encoder"] | None = None,
) -> PositionalEncoding:
    """The position encoding a Hugging Face ``transformers`` model uses, built from its config.

    Every setting that shapes the encoding is carried over: RoPE ``rope_theta`` and the
    ``rope_parameters`` / legacy ``rope_scaling`` dict (``linear``, ``dynamic``, ``yarn``,
    ``longrope``, ``llama3``), ``head_dim``, partial rotation (``partial_rotary_factor``, GPT-NeoX's
    ``rotary_pct``, GPT-J's ``rotary_dim``) and layout (half-split or interleaved); T5's buckets
    and max distance; ALiBi; learned tables (OPT/BART offset 2);
    fairseq-style sinusoids (offset ``pad_token_id + 1``). Keys a ``config.json`` omits take the
    defaults of the ``transformers`` config class. :data:`SUPPORTED_MODEL_TYPES` lists the
    model types of posenc's table; any other text model is built from transformers 5's
    standardized fields (``rope_parameters``, flat or per layer type, ``rope_theta``,
    ``partial_rotary_factor``, ``head_dim``, ``max_position_embeddings``), and refused, naming the
    field, where its config holds one posenc does not read (``mrope_section``...) or lacks one it
    needs (``rope_theta``); a BERT-like config with ``position_embedding_type='absolute'`` gives a
    :class:`~posenc.Learned` table (RoBERTa's kin offset by ``pad_token_id + 1``).

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
            config, or ``stack``); ALiBi models are causal decoders. Ignored by the other encodings.
        stack: the stack of an encoder-decoder model whose encoding to return, as in
            :func:`~posenc.hf.from_hf_model`: required where the stacks differ (Whisper: ``"encoder"``, a
            fixed sinusoid table, or ``"decoder"``, a learned one; LED: each stack its own table length;
            SeamlessM4T v1/v2: ``"encoder"``, the speech encoder, also taken when ``None``,
            ``"text_encoder"`` or ``"decoder"``, the text stacks' sinusoids); on an encoder-decoder parent
            (T5Gemma, Dia) the sub-config of that stack; ``"decoder"`` also reads a config as the decoder's
            (T5: ``is_decoder``, a causal bias). Models whose stacks agree, or with one, ignore it.

    Returns:
        A :class:`~posenc.RoPE`, :class:`~posenc.RelativeBias`, :class:`~posenc.ALiBi` (or
        :class:`~posenc.encodings.alibi.FalconALiBi`), :class:`~posenc.Learned` or
        :class:`~posenc.Sinusoidal`.

    Raises:
        ValueError: a ``model_type`` outside the table whose config falls short of the
            standardized fields (the message names the field), an unsupported ``rope_type`` or a
            ``rope_parameters`` key it does not read, a RoPE key on a config object whose transformers class
            has none (its model's code does not read it; a ``config.json`` dict is read as given), layers that
            differ without ``layer=``, ``layer`` outside
            the model, a bad ``layer_types`` / ``no_rope_layers`` / nested ``rope_parameters``,
            sizes that do not fit, an encoder-decoder config whose stacks differ (the message names the
            sub-configs to pass instead), or ``stack`` missing where the stacks differ, or not one the model has.
        TypeError: ``config`` is neither a config object nor a mapping; ``causal`` not a bool;
            a size in the config is not an int; a number (``rope_theta``) or flag (``alibi``) of
            the wrong type — strings and truthy non-bools are refused, naming the key.

    Example::

        >>> from transformers import AutoConfig                         # doctest: +SKIP
        >>> rope = from_hf_config(AutoConfig.from_pretrained("meta-llama/Llama-3.1-8B"))  # doctest: +SKIP
        >>> q, k = rope(q, k)                                           # doctest: +SKIP
    """
    built, cfg, model_type = _layers(config, causal, stack)
    if layer is not None:
        if isinstance(layer, bool) or not isinstance(layer, int):
            raise TypeError(
                f"layer must be an int (0-based layer index) or None, got {layer!r} ({type(layer).__name__})"
            )
        n = len(built) if isinstance(built, list) else layer_count(cfg, model_type)
        if stack is not None and n is not None and not isinstance(built, list):  # (T5's num_decoder_layers)
            n = _stack_count(cfg, model_type, stack)
        if layer < 0 or (n is not None and layer >= n):
            count = f"it has {n} layers (0..{n - 1})" if n is not None else "layers count from 0"
            raise ValueError(f"layer={layer} is outside the {model_type} model: {count}")
        if n is None:  # (no layer count: no layer types either)
            return built[layer] if isinstance(built, list) else built
        return _no_position_layers(built if isinstance(built, list) else [built] * n, cfg, model_type)[layer]
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
