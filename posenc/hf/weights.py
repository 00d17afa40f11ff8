"""Trained position weights out of a loaded ``transformers`` model: :func:`from_hf_model`.

The encoding comes from the model's config (:func:`~posenc.hf.from_hf_config`); this module
adds the weights a config does not hold (T5's relative-bias table, the learned tables of
GPT-2, GPT-Neo, OPT, BART, LED and Whisper's decoder, each layer's relative tables of the conformer speech encoders), found in
the model's ``state_dict`` by key suffix.
``transformers`` is not imported: any object with ``.config`` and ``.state_dict()`` works.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from ..base import PositionalEncoding
from ._bias import absolute_table, learned_table_prefixes
from ._read import config_dict
from ._speech import SPEECH_MODEL_TYPES
from .configs import ENCODER_OF, _stack_count, from_hf_config

__all__ = ["from_hf_model"]

#: Where each model type keeps its trained position weights, per stack: the state_dict key prefix of
#: the module holding them (the model's own prefix, e.g. ``transformer.`` or ``model.``, may come
#: before it; ``{layer}``: one set per layer). The parameter names after it are posenc's own, except
#: those in :data:`_RENAMED`.
_T5 = {stack: f"{stack}.block.0.layer.0.SelfAttention." for stack in ("encoder", "decoder")}
#: model types whose table is a parameter of their embeddings with a leading batch axis of 1: its name
_VIT_TABLES = {
    **dict.fromkeys(
        "vit deit dinov2 dinov2_with_registers vit_mae vit_msn ijepa flava_image_model groupvit_vision_model "
        "internvl_vision qianfan_ocr_vision tipsv2_vision_model pixio".split(),
        "position_embeddings",
    ),
    **dict.fromkeys(
        "blip_vision_model blip_2_vision_model instructblip_vision_model instructblipvideo_vision_model".split(),
        "position_embedding",
    ),
}
#: ... and whose table is an ``nn.Embedding`` there
_EMBEDDING_TABLES = (
    "siglip_vision_model siglip2_vision_model altclip_vision_model chinese_clip_vision_model clip_vision_model "
    "clipseg_vision_model metaclip_2_vision_model xclip_vision_model git_vision_model owlvit_vision_model "
    "owlv2_vision_model janus_vision_model granite_docling_vision idefics2_vision idefics3_vision smolvlm_vision "
    "phi4_multimodal_vision minicpm_ocr_vision minicpmv4_6_vision minicpmv4_7_vision"
).split()
_PREFIXES: dict[str, dict[str, str]] = {
    **dict.fromkeys(("t5", "mt5", "switch_transformers", "pop2piano"), _T5),
    # (its local encoder's attention module: LocalSelfAttention)
    "longt5": {**_T5, "encoder": "encoder.block.0.layer.0.LocalSelfAttention."},
    "pix2struct_text_model": {"decoder": "layer.0.self_attention.attention."},  # (the parent's .decoder)
    "umt5": {stack: f"{stack}.block.{{layer}}.layer.0.SelfAttention." for stack in ("encoder", "decoder")},
    # the (speech) encoder layers' self-attention (not the adapter's or the text stacks', which hold none)
    **{name: {"encoder": "encoder.layers.{layer}.self_attn."} for name in SPEECH_MODEL_TYPES},
    "parakeet_encoder": {"encoder": "layers.{layer}.self_attn."},  # (its own model, or a CTC head's .encoder)
    "speecht5": {"encoder": "encoder.wrapped_encoder.embed_positions."},  # (one table for every layer)
    "fastspeech2_conformer": {
        s: f"{s}.conformer_layers.{{layer}}.self_attn." for s in ("encoder", "decoder")
    },
    "vits": {"encoder": "text_encoder.encoder.layers.{layer}.attention."},  # ((1, n, dh) parameters)
    **{name: {"encoder": "embeddings."} for name in _VIT_TABLES},  # a (1, p + n, d) parameter
    **{name: {"encoder": "embeddings.position_embedding."} for name in _EMBEDDING_TABLES},
    # encoder-decoders whose stacks differ (Whisper's encoder table is fixed: built from the config)
    "whisper": {"decoder": "decoder.embed_positions."},
    "led": {stack: f"{stack}.embed_positions." for stack in ("encoder", "decoder")},
}
#: posenc's parameter name -> the model's, where they differ: ShawRelative's key table; a ViT table; Parakeet's
#: RelPosXL weights
_RENAMED = {"key_embeddings.weight": "distance_embedding.weight"}
_RENAMED_BY_TYPE = {
    **{name: {**_RENAMED, "weight": parameter} for name, parameter in _VIT_TABLES.items()},
    "speecht5": {"key_embeddings.weight": "pe_k.weight"},
    "vits": {"key_embeddings.weight": "emb_rel_k", "value_embeddings.weight": "emb_rel_v"},
    "parakeet_encoder": {
        "linear_pos.weight": "relative_k_proj.weight",
        "pos_bias_u": "bias_u",
        "pos_bias_v": "bias_v",
    },
}


def from_hf_model(
    model: Any,
    *,
    stack: Literal["encoder", "decoder", "text_encoder"] | None = None,
    layer: int | None = None,
) -> PositionalEncoding:
    """The encoding of a ``transformers`` model, with its trained position weights loaded.

    :func:`from_hf_config` on ``model.config``, plus the weights a config does not hold: T5's
    relative-bias table (from the first block of the chosen stack, which the other blocks
    share), the learned tables of GPT-2, GPT-Neo, OPT, BART, LED and Whisper's decoder, of BERT-like encoders by rule
    (``embeddings.position_embeddings``), and of the GPT-2, BART and CLIP-text kin read by model type
    (``wpe``, ``embed_positions``, ``embeddings.position_embedding``...). Encodings without trained
    weights (RoPE, ALiBi, sinusoids) come back as :func:`from_hf_config` builds them.

    Args:
        model: a ``transformers`` model (any head: ``T5ForConditionalGeneration``,
            ``GPT2LMHeadModel``, ...), or anything with ``.config`` and ``.state_dict()``.
        stack: for encoder-decoder models, whose position weights to take: ``"encoder"``
            (bidirectional T5 bias) or ``"decoder"`` (causal T5 bias). ``None``: the decoder when
            ``model.config.is_decoder`` is set (a decoder stack on its own), else the encoder;
            decoder-only models have one stack. Required where the stacks differ (Whisper, LED; SeamlessM4T's
            text stacks: ``"text_encoder"``, ``"decoder"``), as in :func:`from_hf_config`.
        layer: the 0-based layer whose encoding to return. Required for UMT5 (each layer's own T5 bias table)
            and the conformer speech encoders (Wav2Vec2-BERT, wav2vec2-conformer, SeamlessM4T v1/v2, Parakeet)
            and VITS's text encoder (its ``emb_rel_k``/``emb_rel_v`` -> :class:`~posenc.ShawRelative`),
            where every layer has its own tables: that layer's ``distance_embedding`` (``relative_key`` ->
            :class:`~posenc.ShawRelative`) or ``linear_pos``/``pos_bias_u``/``pos_bias_v``
            (``relative`` -> :class:`~posenc.RelPosXL`; Parakeet's ``relative_k_proj``/``bias_u``/``bias_v``)
            are copied. For other models, as in
            :func:`from_hf_config` (models whose layers differ).

    Returns:
        The encoding, its learned parameters copied from ``model`` into its own (float32, CPU)
        parameters by :meth:`~torch.nn.Module.load_state_dict`; move it with ``.to()`` as usual.

    Raises:
        ValueError: ``stack`` is not one the model has (or missing where its stacks differ), or it has no
            weights for that stack (e.g. ``stack="decoder"`` on a ``T5EncoderModel``); a speech
            model without ``layer``, or ``layer`` outside it; position weights on the meta device (not loaded).
        TypeError: ``model`` has no ``config`` or ``state_dict``.
    """
    config, state_dict = getattr(model, "config", None), getattr(model, "state_dict", None)
    if config is None or not callable(state_dict):
        raise TypeError(
            f"model must be a transformers model (with .config and .state_dict()), got {type(model).__name__}"
        )
    cfg = config_dict(config)
    model_type = cfg.get("model_type", "")
    # (Parakeet's heads: their encoder's config and weights)
    if isinstance(cfg.get(ENCODER_OF.get(model_type, "")), Mapping):
        cfg = config_dict(cfg[ENCODER_OF[model_type]])
        model_type = cfg.get("model_type", "")
    learned = absolute_table(cfg, model_type) and cfg.get("position_embedding_type") in (None, "absolute")
    prefixes = _PREFIXES.get(model_type) or (learned_table_prefixes(model_type) if learned else None)
    if prefixes is None:
        encoding = from_hf_config(cfg, layer=layer, stack=stack)
        # trained weights posenc cannot find (BERT2BERT's parent: the stacks' own models hold them)
        if next(encoding.parameters(), None) is not None:
            raise ValueError(
                f"{model_type}: posenc does not know where this model keeps its position weights; pass the model "
                "of one stack (model.encoder, model.decoder)"
            )
        return encoding
    chosen = stack or (
        "decoder"
        if "encoder" not in prefixes or (cfg.get("is_decoder") and "decoder" in prefixes)
        else "encoder"
    )
    encoding = from_hf_config(cfg, layer=layer, causal=chosen == "decoder", stack=stack)  # (checks stack)
    prefix = prefixes.get(chosen, "")
    if "{layer}" in prefix:
        if layer is None:
            n = _stack_count(cfg, model_type, chosen)
            raise ValueError(
                f"{model_type}: every {chosen} layer has its own position tables; pass layer=i (0..{n - 1})"
            )
        prefix = prefix.format(layer=layer)
    renamed = _RENAMED_BY_TYPE.get(model_type, _RENAMED)
    names = {name: renamed.get(name, name) for name, _ in encoding.named_parameters()}
    if not names:  # no trained weights (a fixed table; a speech layer without position in attention: NoPE)
        return encoding
    if chosen not in prefixes:
        raise ValueError(
            f"{model_type} has no {chosen} position weights; accepted stack: {', '.join(prefixes)}"
        )
    weights = state_dict()
    suffix = prefix + next(iter(names.values()))
    found = [key[: -len(suffix)] for key in weights if key == suffix or key.endswith("." + suffix)]
    if not found and suffix.removeprefix(f"{chosen}.") in weights:  # the stack module itself (T5's decoder)
        name = type(model).__name__
        own = next((s for s in ("decoder", "encoder") if s in name.lower()), None)
        own = own or ("decoder" if cfg.get("is_decoder") else "encoder")  # (T5Stack: its config says)
        if stack in ("encoder", "decoder") and stack != own:  # (its table, read as the other stack's)
            raise ValueError(
                f"{model_type}: stack={stack!r}, but this is the {own} stack's own module ({name}); pass "
                f"stack={own!r} (or None), or the {stack}'s module"
            )
        prefix, found = prefix.removeprefix(f"{chosen}."), [""]
    if len(found) != 1:
        raise ValueError(
            f"{model_type}: expected one {chosen} position weight ending in {suffix!r}, found "
            f"{[f + suffix for f in found] or 'none'} (is the config that of the loaded model?)"
        )
    tables = {ours: weights[found[0] + prefix + theirs] for ours, theirs in names.items()}
    if model_type in _VIT_TABLES or model_type == "vits":
        tables = {ours: table.squeeze(0) for ours, table in tables.items()}  # (1, n, d) -> (n, d)
    # (SpeechT5's rows run over i - j from -L, posenc's over j - i from 1 - L: the same rows reversed)
    if model_type == "speecht5":
        tables = {ours: table.flip(0) for ours, table in tables.items()}
    if any(table.is_meta for table in tables.values()):  # (else torch's "Cannot copy out of meta tensor")
        raise ValueError(
            f"{model_type}: the model's position weights are on the meta device (no values yet): load its "
            "weights first, or take the untrained encoding of its config with from_hf_config"
        )
    encoding.load_state_dict(tables)
    return encoding
