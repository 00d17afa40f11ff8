"""Conformer speech encoders: Wav2Vec2-BERT, wav2vec2-conformer, SeamlessM4T (v1, v2), Parakeet.

Their self-attention reads ``position_embeddings_type`` (Parakeet's, NeMo's FastConformer, has none: it is
always ``"relative"``, with ``relative_k_proj``, ``bias_u``, ``bias_v``):

* ``"relative_key"`` (Wav2Vec2-BERT and SeamlessM4T-v2 by default): Shaw's relative keys,
  clipped ``left_max_position_embeddings`` (64) to the left and ``right_max_position_embeddings``
  (8) to the right -> :class:`~posenc.ShawRelative`, ``distance_embedding`` -> ``key_embeddings``;
* ``"relative"`` (wav2vec2-conformer, SeamlessM4T v1 by default): Transformer-XL ->
  :class:`~posenc.RelPosXL`, with ``linear_pos``, ``pos_bias_u``, ``pos_bias_v``;
* ``None``: nothing in the attention (wav2vec2-conformer's convolutional position embedding
  acts on the features, outside attention) -> :class:`~posenc.NoPE`;
* ``"rotary"``: refused — these models rotate the hidden states *before* the q/k projections,
  which is not a rotation of queries and keys (no posenc encoding computes it).

Each model's attention reads only some of these values (SeamlessM4T v2's only ``"relative_key"``;
wav2vec2-conformer's and SeamlessM4T v1's not it); any other value adds no position there, silently, so posenc
refuses it, naming the values that model reads.

Every layer holds its own tables (:func:`posenc.hf.from_hf_model` with ``layer=i`` copies them).

SpeechT5's encoder (:func:`speecht5`) shares one table of Shaw's relative keys between its layers; its decoder's
attention adds no position. FastSpeech2Conformer's encoder and (non-autoregressive) decoder (:func:`fastspeech2`):
ESPnet's relative positions in every layer, as wav2vec2-conformer's ``"relative"``. VITS's text encoder
(:func:`vits`): Shaw's relative keys and values within its window, none beyond, in every layer.
"""

from __future__ import annotations

from collections.abc import Mapping

from .._checks import check_int
from ..base import PositionalEncoding
from ..encodings import NoPE, ShawRelative
from ..encodings.transformer_xl import RelPosXL
from ._read import Config, Convert, get, positive_int
from ._rope import RopeDefaults, heads_and_head_dim

__all__ = ["SPEECH_MODEL_TYPES", "fastspeech2", "speech", "speecht5", "vits"]

#: model_type -> (heads key, layers key, the position_embeddings_type values its attention reads, its config
#: class's default first); the config classes default to 16 heads of 1024 channels in 24 layers
#: (wav2vec2-conformer's 12 of 768 in 12 and Parakeet's 8 heads: filled in by _read.config_dict)
SPEECH_MODEL_TYPES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "wav2vec2-bert": ("num_attention_heads", "num_hidden_layers", ("relative_key", "relative", "rotary")),
    "wav2vec2-conformer": ("num_attention_heads", "num_hidden_layers", ("relative", "rotary")),
    "seamless_m4t": ("speech_encoder_attention_heads", "speech_encoder_layers", ("relative", "rotary")),
    "seamless_m4t_v2": ("speech_encoder_attention_heads", "speech_encoder_layers", ("relative_key",)),
    "parakeet_encoder": ("num_attention_heads", "num_hidden_layers", ("relative",)),
}


def speech(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    """A fresh encoding of one (speech) encoder layer's self-attention (its weights not loaded)."""
    # an explicit None: no position in attention (Parakeet's code reads no such key)
    heads_key, _, reads = SPEECH_MODEL_TYPES[model_type]
    parakeet = model_type == "parakeet_encoder"
    mode = reads[0] if parakeet else cfg.get("position_embeddings_type", reads[0])
    if mode is None:
        return NoPE()
    if mode not in reads:  # (its attention then adds no position, silently: say so rather than guess)
        raise ValueError(
            f"{model_type} config: position_embeddings_type={mode!r} is not one its attention reads "
            f"({', '.join(map(repr, reads))}; any other value adds no position, as None does)"
        )
    if mode == "rotary":
        raise ValueError(
            f"{model_type} config: position_embeddings_type='rotary' rotates the hidden states before the q/k "
            "projections (not the queries and keys), which no posenc encoding computes; supported: "
            f"{', '.join(repr(m) for m in reads if m != 'rotary')} or None"
        )
    heads, head_dim = heads_and_head_dim(  # (Parakeet's code reads a head_dim its config may carry)
        cfg, model_type, RopeDefaults(1024, 16, None), heads=heads_key, read_head_dim=parakeet
    )
    if mode == "relative":  # (the table is hidden_size wide, projected to the heads)
        return RelPosXL(heads, head_dim, d_model=positive_int(cfg, model_type, "hidden_size", default=1024))
    left, right = (
        check_int(f"{model_type} config: {key}", get(cfg, key, default=default), minimum=0)
        for key, default in (("left_max_position_embeddings", 64), ("right_max_position_embeddings", 8))
    )
    return ShawRelative(head_dim, max_distance=left, max_distance_right=right, num_heads=heads)


def speecht5(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    """SpeechT5's encoder: Shaw's relative keys (``pe_k``, ``hidden_size // encoder_attention_heads`` wide), one
    table for every layer, distances ``i - j`` clipped to ``[-L, L - 1]`` (``L``: ``encoder_max_relative_position``):
    ``L - 1`` keys back and ``L`` ahead in posenc's terms (:func:`~posenc.hf.from_hf_model` reverses its rows)."""
    heads, head_dim = heads_and_head_dim(
        cfg, model_type, RopeDefaults(768, 12, None), heads="encoder_attention_heads", read_head_dim=False
    )
    reach = positive_int(cfg, model_type, "encoder_max_relative_position", default=160)
    return ShawRelative(head_dim, max_distance=reach - 1, max_distance_right=reach, num_heads=heads)


def vits(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    """VITS's text encoder (MMS-TTS): in every layer, relative keys and values (``emb_rel_k``, ``emb_rel_v``, shared by
    the heads) for the distances within ``window_size`` of the query, none beyond (Glow-TTS's scheme)."""
    _, head_dim = heads_and_head_dim(cfg, model_type, RopeDefaults(192, 2, None), read_head_dim=False)
    # (its class refuses a null window; one of 0 builds no tables, which its attention then reads)
    window = check_int(f"{model_type} config: window_size", cfg.get("window_size", 4), minimum=1)
    return ShawRelative(head_dim, max_distance=window, values=True, beyond="zero")


def fastspeech2(field: str) -> Convert:
    """FastSpeech2Conformer's stack ``field`` (``"encoder_config"``, ``"decoder_config"``: its heads) with ESPnet's
    relative positions (``linear_pos``, ``pos_bias_u``, ``pos_bias_v`` in each layer) over the parent's
    ``hidden_size``: :class:`~posenc.RelPosXL`."""

    def convert(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
        # (its class builds the stack's dict from encoder_num_attention_heads, ...; a dict given wins)
        key, stack = f"{field.removesuffix('_config')}_num_attention_heads", cfg.get(field)
        if isinstance(stack, Mapping) and stack.get("num_attention_heads") is not None:
            key = f"{field}.num_attention_heads"  # (named so in an error)
            cfg = {**cfg, key: stack["num_attention_heads"]}
        heads, head_dim = heads_and_head_dim(
            cfg, model_type, RopeDefaults(384, 2, None), heads=key, read_head_dim=False
        )
        return RelPosXL(heads, head_dim, d_model=heads * head_dim)

    return convert
