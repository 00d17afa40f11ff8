"""Converters for the models whose position encoding is an attention bias or an added table.

Attention biases: T5 / mT5 (:class:`~posenc.RelativeBias`), BLOOM and MPT (:class:`~posenc.ALiBi`),
Falcon (RoPE, or :class:`~posenc.encodings.alibi.FalconALiBi` with ``alibi=True``). Added to the
embeddings: learned tables (GPT-2, OPT, BART...) and fairseq / Marian sinusoids. Each converter
takes ``(config dict, model_type, causal)``; the table in :mod:`posenc.hf._table` names them.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Literal, NamedTuple

from .._checks import check_bool, check_int
from ..base import PositionalEncoding
from ..encodings import ALiBi, Learned, Learned2D, RelativeBias, Sinusoidal
from ..encodings._patches import patch_grid
from ..encodings.alibi import FalconALiBi
from ._read import Config, Convert, config_dict, get, key_of, positive_int
from ._rope import RopeDefaults, build_rope, heads_and_head_dim

# --- biases ------------------------------------------------------------------------------------


def _t5(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    # The encoder's bias is bidirectional, the decoder's causal: a T5 config is the encoder's unless
    # is_decoder is set (transformers flips it for the decoder stack), so pass causal=True for the decoder.
    default_heads = {"mt5": 6, "umt5": 6, "switch_transformers": 12, "pix2struct_text_model": 12}.get(
        model_type, 8
    )
    num_heads = positive_int(cfg, model_type, "num_attention_heads", default=default_heads)
    is_decoder = check_bool(f"{model_type} config: is_decoder", cfg.get("is_decoder", False))
    is_causal = is_decoder if causal is None else causal
    return RelativeBias(
        num_heads,
        num_buckets=positive_int(cfg, model_type, "relative_attention_num_buckets", default=32),
        max_distance=positive_int(cfg, model_type, "relative_attention_max_distance", default=128),
        bidirectional=not is_causal,
        causal=is_causal,
    )


def _longt5_encoder(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    """LongT5's encoder: T5's bidirectional bias, each token attending within ``local_radius``
    (:func:`~posenc.hf.layer_windows`); its transient-global attention refused."""
    kind = cfg.get("encoder_attention_type", "local")
    if kind != "local":
        raise ValueError(
            f"{model_type} config: encoder_attention_type={kind!r} also attends to transient global tokens (the "
            "sums of blocks), which posenc has no form for; 'local' converts, and stack='decoder' gives the "
            "decoder's T5 bias"
        )
    return _t5(cfg, model_type, causal)


def _bloom(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    num_heads = positive_int(cfg, model_type, "num_attention_heads", default=8)
    return ALiBi(num_heads, causal=True if causal is None else causal)


def _mpt(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    attn = config_dict(cfg.get("attn_config") or {})  # a dict, or MptAttentionConfig
    if not check_bool(f"{model_type} config: attn_config['alibi']", attn.get("alibi", True)):
        raise ValueError(
            f"{model_type} config: attn_config.alibi is False; transformers' MPT always uses ALiBi and has no other "
            "position encoding, so this config has no supported encoding"
        )
    num_heads = positive_int(cfg, model_type, "num_attention_heads", default=16)
    max_bias = get(attn, "alibi_bias_max", default=8)
    if max_bias != 8:  # (the two codes differ there: say which to build rather than pick one silently)
        raise ValueError(
            f"{model_type} config: attn_config.alibi_bias_max={max_bias!r}, which transformers' MPT ignores (it "
            "always takes 8) where MosaicML's own code reads it: build posenc.ALiBi(num_heads, max_bias=...) with "
            "the value of the code you run"
        )
    return ALiBi(num_heads, causal=True if causal is None else causal)


def _falcon(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    alibi = check_bool(f"{model_type} config: alibi", cfg.get("alibi", False))
    d = RopeDefaults(4544, 71, 2048)
    num_heads, head_dim = heads_and_head_dim(cfg, model_type, d)
    if not alibi:
        return build_rope(cfg, model_type, d, head_dim)
    return FalconALiBi(num_heads, head_dim, causal=True if causal is None else causal)


# --- absolute (added to the embeddings) --------------------------------------------------------


def _learned_grid(
    prefix: int,
    image: int,
    patch: int,
    *,
    width: int = 768,
    antialias: bool = False,
    mode: Literal["bicubic", "bilinear", "bucketize", "bucketize_divide"] = "bicubic",
    prefix_key: str | None = None,
) -> Convert:
    """A ViT-style table (:class:`~posenc.Learned2D`): ``prefix`` class tokens (or the config's ``prefix_key``,
    Pixio's ``n_cls_tokens``), then the ``image_size // patch_size`` grid (each an int, or InternVL's ``[h, w]``),
    resampled bicubic (``antialias`` when shrinking) for other grids as their ``interpolate_pos_encoding`` (or by
    ``mode``: ``"bucketize"``, NaViT's look-up); ``width``: the class's ``hidden_size``."""

    def convert(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
        d_model = positive_int(cfg, model_type, "hidden_size", default=width)
        p = prefix
        if prefix_key is not None:
            p = check_int(
                f"{model_type} config: {prefix_key}", get(cfg, prefix_key, default=prefix), minimum=0
            )
        sizes = (("image_size", image), ("patch_size", patch))
        (image_h, image_w), (patch_h, patch_w) = (
            patch_grid(f"{model_type} config: {key}", get(cfg, key, default=default))
            for key, default in sizes
        )
        grid = (image_h // patch_h, image_w // patch_w)
        return Learned2D(d_model, grid, num_prefix_tokens=p, antialias=antialias, mode=mode)

    return convert


def _siglip2(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    """SigLIP 2's NaFlex table (:class:`~posenc.Learned2D`): ``num_patches`` rows, a square grid, resized
    per image to its patch grid as the model's ``resize_positional_embeddings`` does (bilinear,
    antialiased); no prefix token."""
    d_model = positive_int(cfg, model_type, "hidden_size", default=768)
    patches = positive_int(cfg, model_type, "num_patches", default=256)
    side = math.isqrt(patches)
    if side * side != patches:
        raise ValueError(
            f"{model_type} config: num_patches must be a square (a side x side grid), got {patches}"
        )
    return Learned2D(d_model, side, num_prefix_tokens=0, mode="bilinear", antialias=True)


def _sinusoidal(
    spacing: Literal["paper", "tensor2tensor"],
    default_width: int,
    default_length: int,
    length: tuple[str, ...] = ("max_position_embeddings",),
    *,
    offset: int | None = 0,
    pad: int = 1,
    layout: Literal["concat", "concat_cos"] = "concat",
    scaled: bool = False,
) -> Convert:
    """A ``[sin | cos]`` table (``[cos | sin]`` with ``layout="concat_cos"``: MusicGen): Marian / Pegasus
    (``"paper"``: positions from 0, ``inv_freq = base^(-2i/d)``), fairseq / tensor2tensor
    (``inv_freq = base^(-i/(d/2-1))``); ``offset=None``: real tokens numbered from ``pad_token_id + 1``
    (Speech2Text, M2M100; ``pad``: the class's default), XGLM adds a fixed 2 to its position ids;
    ``scaled``: times ``1/sqrt(d)`` (Canary's decoder, as NeMo's ``FixedPositionalEncoding``)."""

    def convert(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
        d_model = _sin_cos_width(cfg, model_type, default_width)
        start = _after_pad(cfg, model_type, default=pad) if offset is None else offset
        if offset and _after_pad(cfg, model_type, default=pad) - 1 >= offset:
            raise ValueError(  # (XGLM: row pad_token_id of its table is zeros, and its positions start at row 2)
                f"{model_type} config: pad_token_id={cfg.get('pad_token_id')} zeroes the row its code reads at "
                f"position pad_token_id - {offset}, which posenc's sinusoid does not; accepted: a pad_token_id "
                f"below {offset} (its checkpoints' 1)"
            )
        max_len = get(cfg, *length, default=default_length)
        scale = d_model**-0.5 if scaled else 1.0
        return Sinusoidal(
            d_model, layout=layout, max_len=max_len, offset=start, freq_spacing=spacing, scale=scale
        )

    return convert


def _sin_cos_width(cfg: Config, model_type: str, default: int) -> int:
    """The ``hidden_size`` of a sin/cos table, checked to be even."""
    d_model = positive_int(cfg, model_type, "hidden_size", default=default)
    if d_model % 2:
        raise ValueError(
            f"{model_type} config: {key_of(cfg, 'hidden_size')} must be even for a sin/cos table, got {d_model}"
        )
    return d_model


def forecasting(stack: str, *, label: bool = False) -> Convert:
    """The forecasting transformers' ``stack`` (Time Series Transformer, Informer, Autoformer): Marian's table over
    the ``context_length + prediction_length`` steps, the encoder's from step 0, the decoder's from
    ``context_length`` (with ``label``, Autoformer's: from ``context_length - label_length``, the known steps its
    decoder starts with)."""

    def convert(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
        d_model = _sin_cos_width(cfg, model_type, 64)
        steps = positive_int(cfg, model_type, "prediction_length")
        context = positive_int(cfg, model_type, "context_length", default=steps)
        start = 0 if stack == "encoder" else context
        if stack == "decoder" and label:
            known = positive_int(cfg, model_type, "label_length", default=10)
            if known > context:
                raise ValueError(
                    f"{model_type} config: label_length={known} exceeds context_length={context}: its decoder "
                    "would start before the first step; accepted: label_length <= context_length"
                )
            start -= known
        return Sinusoidal(d_model, layout="concat", max_len=context + steps, offset=start)

    return convert


def _after_pad(cfg: Config, model_type: str, default: int | None = None) -> int:
    """``pad_token_id + 1``: the first position of real tokens in fairseq's and RoBERTa's numbering."""
    pad = get(cfg, "pad_token_id", default=default)
    return check_int(f"{model_type} config: pad_token_id", pad, minimum=0) + 1


class _Table(NamedTuple):
    """Where a learned table outside posenc's table departs from BERT's ``hidden_size`` x
    ``max_position_embeddings`` rows at ``embeddings.position_embeddings``, from row 0."""

    #: the keys of its width and of its number of rows
    width: str = "hidden_size"
    length: str = "max_position_embeddings"
    #: ``"pad"`` (RoBERTa's ``create_position_ids_from_input_ids``: real tokens from row ``pad_token_id + 1``,
    #: counted in the positions) or a fixed number of leading rows kept beyond them (OPT's kin, MRA: 2)
    offset: str | int = 0
    #: the config class's defaults of width and length, for a ``config.json`` that leaves them out
    default: tuple[int | None, int | None] = (None, None)
    #: the module holding the table (its state_dict key before ``weight``), and the stacks that have one
    module: str = "embeddings.position_embeddings"
    stacks: tuple[str, ...] = ("encoder",)


def _gpt(default: tuple[int, int], module: str = "wpe", offset: int = 0) -> _Table:
    """GPT-2's kin (a decoder's table): ``wpe`` (GPT-1: ``positions_embed``; OPT, BioGPT: ``embed_positions``,
    2 rows kept ahead) of ``n_embd`` x ``n_positions``."""
    return _Table(offset=offset, default=default, module=module, stacks=("decoder",))


def _seq2seq(default: tuple[int, int], offset: int = 0) -> _Table:
    """BART's kin: each stack its own ``embed_positions`` of ``d_model`` x ``max_position_embeddings``."""
    return _Table(offset=offset, default=default, module="embed_positions", stacks=("encoder", "decoder"))


def learned_stack(length: str, default: tuple[int, int]) -> Convert:
    """One stack's ``d_model`` x ``length`` table where an encoder-decoder's stacks differ (Whisper's decoder,
    LED's stacks; ``default``: the class's width and length)."""
    return partial(learned_by_field, table=_Table(length=length, default=default))


#: Learned tables read by model type (GPT-2, GPT-Neo, OPT, BART and mBART also named in posenc's table): BERT's kin (which a transformers 4 config names
#: with ``position_embedding_type``), GPT-2's and BART's kin, and the text towers of CLIP-like models. The
#: table is copied by :func:`posenc.hf.from_hf_model`; tests/hf/test_absolute.py checks each against the
#: model's own forward pass.
_LEARNED: dict[str, _Table] = {
    **dict.fromkeys(
        (
            "roberta camembert data2vec-text longformer luke markuplm mpnet roberta-prelayernorm "
            "xlm-roberta xlm-roberta-xl xmod altclip_text_model bridgetower_text_model clap_text_model esm "
            # (LiLT: its text stream's table; its layout stream reads a table of its own at the same positions)
            "layoutlmv3 lilt ibert"
        ).split(),
        _Table(offset="pad"),
    ),
    **dict.fromkeys(("albert", "convbert", "electra"), _Table("embedding_size")),
    "rembert": _Table("input_embedding_size"),
    # CANINE: its characters' table, num_hash_buckets rows (the molecules it downsamples to get none)
    "canine": _Table(
        length="num_hash_buckets", default=(768, 16384), module="char_embeddings.char_position_embeddings"
    ),
    "distilbert": _Table("dim"),
    **dict.fromkeys(("mra", "nystromformer", "yoso"), _Table(offset=2)),
    # GPT-2's kin: wpe (GPT-1: positions_embed)
    **dict.fromkeys(("gpt2", "gpt_bigcode"), _gpt((768, 1024))),
    "gpt_neo": _gpt((2048, 2048)),
    "opt": _gpt((768, 2048), "decoder.embed_positions", offset=2),
    "openai-gpt": _gpt((768, 512), module="positions_embed"),
    "imagegpt": _gpt((512, 1024)),
    "biogpt": _gpt((1024, 1024), "embed_positions", offset=2),
    "pp_formulanet_text": _gpt((512, 2560), "embed_positions", offset=2),
    "trocr": _gpt((1024, 512), "embed_positions", offset=2),  # (its learned table: posenc.hf._bias.trocr)
    "clvp_decoder": _gpt((1024, 608), "position_embeds_layer"),  # (CLVP's speech GPT, Tortoise's)
    # XLM / FlauBERT (their fixed sinusoidal_embeddings option too: the table is copied)
    **dict.fromkeys(("xlm", "flaubert"), _Table(default=(2048, 512), module="position_embeddings")),
    # BART's kin: each stack its own embed_positions
    **dict.fromkeys(("bart", "mbart", "mvp"), _seq2seq((1024, 1024), offset=2)),
    "plbart": _seq2seq((768, 1024), offset=2),
    "blenderbot": _seq2seq((2560, 128)),
    "blenderbot-small": _seq2seq((512, 512)),
    "bigbird_pegasus": _seq2seq((1024, 4096)),
    # CLIP-like text towers
    **{
        name: _Table(default=default, module="embeddings.position_embedding")
        for default, names in {
            (512, 77): "clip_text_model clipseg_text_model metaclip_2_text_model xclip_text_model",
            (256, 77): "groupvit_text_model",
            (512, 16): "owlvit_text_model owlv2_text_model",
            (768, 64): "siglip_text_model siglip2_text_model",
            (768, 77): "aimv2_text_model",
        }.items()
        for name in names.split()
    },
    # Cohere ASR's decoder (its parent's own fields; its encoder: encoder_config, a Parakeet encoder)
    "cohere_asr": _Table(default=(1024, 1024), module="decoder.pos_emb", stacks=("decoder",)),
    # Whisper's kin among audio towers: a table the checkpoint holds (frozen), every row added to the fixed
    # max_source_positions frames (Whisper's own encoder: its sinusoids, posenc.hf._table)
    **{
        name: _Table(length="max_source_positions", default=(width, 1500), module="embed_positions")
        for name, width in {
            "qwen2_audio_encoder": 1280,
            "audioflamingo3_encoder": 1280,
            "voxtral_encoder": 1280,
            "moss_transcribe_diarize_audio": 1024,
        }.items()
    },
    # ViLT: its text tokens' table (its image patches have their own, read by the image's grid)
    "vilt": _Table(default=(768, 40), module="embeddings.text_embeddings.position_embeddings"),
    # Bark's three GPTs (its parent's semantic_config, coarse_acoustics_config, fine_acoustics_config), by index:
    # two causal, the fine one bidirectional
    **dict.fromkeys(
        ("semantic", "coarse_acoustics"),
        _gpt((768, 1024), "position_embeds_layer")._replace(length="block_size"),
    ),
    "fine_acoustics": _Table(length="block_size", default=(768, 1024), module="position_embeds_layer"),
}


#: Model types whose transformers 5 code always adds the absolute table and nothing else, so that a 5.x config
#: object says nothing about positions: BERT's kin (their config class dropped ``position_embedding_type``)
#: and every :data:`_LEARNED` model but ESM (whose code reads the field beside its rope_theta).
ABSOLUTE_ONLY = frozenset(
    "bert megatron-bert mobilebert ernie "
    # document and vision-language models (what they embed of boxes and image regions is the layout or the
    # image, not the tokens' positions)
    "layoutlm bros lxmert "
    # ... and the BERT-likes whose config class never had the field (their code reads none)
    "align_text_model bert-generation big_bird blip_text_model chinese_clip_text_model flava_text_model fnet git "
    "instructblip_qformer instructblipvideo_qformer roc_bert splinter squeezebert tapas visual_bert "
    # (DPR: a BERT inside each of its encoders, bert_model)
    "dpr "
    # (DeBERTa's and LayoutLMv3's: relative positions too, or instead, by their flags; MPNet's always: refused by
    # learned_by_field, naming them)
    "deberta deberta-v2".split()
) | (frozenset(_LEARNED) - {"esm"})


#: Models whose attention also adds relative positions where this flag is true: the flag, and its class default.
_RELATIVE_TOO = {
    "layoutlmv3": ("has_relative_attention_bias", True),
    **dict.fromkeys(("deberta", "deberta-v2"), ("relative_attention", False)),  # (disentangled attention)
}


def absolute_table(cfg: Config, model_type: str) -> bool:
    """Whether ``cfg`` describes a BERT-like learned table (by its field, or by its model type in 5.x; a RoPE key
    beside it is refused by :func:`posenc.hf._rule.by_rule`)."""
    return cfg.get("position_embedding_type") is not None or model_type in ABSOLUTE_ONLY


def learned_by_field(
    cfg: Config, model_type: str, causal: bool | None, table: _Table | None = None
) -> PositionalEncoding:
    """A learned table (:class:`Learned`): BERT-like encoders with ``position_embedding_type='absolute'``.

    ``max_position_embeddings`` rows of ``hidden_size`` (departures, and the learned tables of GPT-2's, BART's
    and CLIP's kin outside posenc's table: :data:`_LEARNED`; ``table``: one stack's, where the stacks differ).

    Raises:
        ValueError: any other ``position_embedding_type`` (``'relative_key'``, ``'relative_key_query'``:
            distance embeddings inside each attention, which posenc does not read from a config).
    """
    kind = cfg.get("position_embedding_type") or "absolute"  # absent: transformers 5's absolute-only code
    if kind != "absolute":
        raise ValueError(
            f"{model_type} config: position_embedding_type={kind!r} adds distance embeddings inside each "
            "attention layer, which posenc does not convert; accepted: 'absolute'"
        )
    if model_type == "mpnet":  # (its attention always adds a T5-like bucketed bias)
        raise ValueError(
            f"{model_type} config: relative_attention_num_buckets={cfg.get('relative_attention_num_buckets')}: its "
            "code adds relative positions inside each attention layer, which posenc does not convert; accepted: "
            "none (MPNet always adds them)"
        )
    flag, default = _RELATIVE_TOO.get(model_type, ("", False))
    if flag and check_bool(f"{model_type} config: {flag}", get(cfg, flag, default=default)):
        raise ValueError(
            f"{model_type} config: {flag}=True: its code adds relative positions inside each attention layer, "
            f"which posenc does not convert; accepted: {flag}=false"
        )
    if model_type.startswith("deberta") and not check_bool(
        f"{model_type} config: position_biased_input", get(cfg, "position_biased_input", default=True)
    ):
        raise ValueError(
            f"{model_type} config: position_biased_input=False: its code adds no absolute position table; "
            "accepted: true (with relative_attention false)"
        )
    if model_type == "tapas" and check_bool(
        f"{model_type} config: reset_position_index_per_cell",
        get(cfg, "reset_position_index_per_cell", default=True),
    ):
        raise ValueError(
            f"{model_type} config: reset_position_index_per_cell=True: its code numbers the tokens of each table cell "
            "from 0 (cells read from token_type_ids), which a config does not give; accepted: false (or a Learned "
            "table given those positions)"
        )
    table = table or _LEARNED.get(model_type, _Table())
    # (DeBERTa's code: getattr(config, "embedding_size", hidden_size))
    if model_type.startswith("deberta") and cfg.get("embedding_size") is not None:
        table = table._replace(width="embedding_size")
    d_model = positive_int(cfg, model_type, table.width, default=table.default[0])
    rows = positive_int(cfg, model_type, table.length, default=table.default[1])
    if table.offset != "pad":
        return Learned(d_model, rows, offset=int(table.offset))
    offset = _after_pad(cfg, model_type)
    if rows <= offset:
        raise ValueError(
            f"{model_type} config: max_position_embeddings={rows} leaves no position after the padding rows "
            f"(pad_token_id + 1 = {offset})"
        )
    return Learned(d_model, rows - offset, offset=offset)


def trocr(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding | list[PositionalEncoding]:
    """TrOCR's decoder: a learned table read at the token's index + 2 (BART's rule), or, with
    ``use_learned_position_embeddings`` false, fairseq's sinusoids with real tokens from ``pad_token_id + 1``."""
    if check_bool(
        f"{model_type} config: use_learned_position_embeddings",
        cfg.get("use_learned_position_embeddings", True),
    ):
        return learned_by_field(cfg, model_type, causal)
    return _sinusoidal("tensor2tensor", 1024, 512, offset=None)(cfg, model_type, causal)


def refused_stack(reason: str) -> Convert:
    """A stack posenc does not convert (where the model's other stack converts): its converter raises ``reason``."""

    def convert(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
        raise ValueError(f"{model_type}: {reason}")

    return convert


def learned_table_prefixes(model_type: str) -> dict[str, str]:
    """The state_dict key prefix of the learned table of a model :func:`learned_by_field` reads, per stack."""
    table = _LEARNED.get(model_type, _Table())
    if len(table.stacks) == 1:
        return {table.stacks[0]: f"{table.module}."}
    return {stack: f"{stack}.{table.module}." for stack in table.stacks}
