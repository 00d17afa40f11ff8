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

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .._checks import check_int
from ..base import PositionalEncoding
from ..encodings import ALiBi, Learned, RelativeBias, Sinusoidal
from ..encodings.alibi import FalconALiBi
from ._read import Config, config_dict, get, heads_and_head_dim, positive_int
from ._rope import RopeDefaults, gptj, rope

__all__ = ["SUPPORTED_MODEL_TYPES", "from_hf_config", "supported_models_markdown"]


# --- biases ------------------------------------------------------------------------------------


def _t5(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    # The encoder's bias is bidirectional, the decoder's causal: a T5 config is the encoder's unless
    # is_decoder is set (transformers flips it for the decoder stack), so pass causal=True for the decoder.
    default_heads = 6 if model_type == "mt5" else 8
    num_heads = positive_int(cfg, model_type, "num_heads", "num_attention_heads", default=default_heads)
    is_causal = bool(cfg.get("is_decoder", False)) if causal is None else causal
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
    if not attn.get("alibi", True):
        raise ValueError(
            f"{model_type} config: attn_config.alibi is False; transformers' MPT always uses ALiBi and has no other "
            "position encoding, so this config has no supported encoding"
        )
    num_heads = positive_int(cfg, model_type, "n_heads", "num_attention_heads", default=16)
    max_bias = get(attn, "alibi_bias_max", default=8)
    return ALiBi(num_heads, causal=True if causal is None else causal, max_bias=float(max_bias))


def _falcon(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    if not cfg.get("alibi", False):
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


@dataclass(frozen=True)
class _Converter:
    convert: Callable[[Config, str, bool | None], PositionalEncoding]
    summary: str


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
        rope(RopeDefaults(2304, 8, 8192, head_dim=256)), "RoPE, half layout (head_dim 256 by default)"
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
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted(_CONVERTERS))


def supported_models_markdown() -> str:
    """A Markdown table of the supported ``model_type`` values and what each becomes, for the docs.

    Generated from the same table :func:`from_hf_config` uses, so the documentation cannot
    drift from the code.
    """
    # Every RoPE row except GPT-J/CodeGen also reads the rope_parameters scaling types.
    rows = ["| model_type | posenc encoding |", "| --- | --- |"]
    rows += [f"| `{name}` | {_CONVERTERS[name].summary} |" for name in SUPPORTED_MODEL_TYPES]
    return "\n".join(rows)


def from_hf_config(config: Any, *, causal: bool | None = None) -> PositionalEncoding:
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
            unsupported ``rope_type``, per-layer RoPE settings, or sizes that do not fit.
        TypeError: ``config`` is neither a config object nor a mapping; ``causal`` not a bool;
            a size in the config is not an int.

    Example::

        >>> from transformers import AutoConfig                         # doctest: +SKIP
        >>> rope = from_hf_config(AutoConfig.from_pretrained("meta-llama/Llama-3.1-8B"))  # doctest: +SKIP
        >>> q, k = rope(q, k)                                           # doctest: +SKIP
    """
    if causal is not None and not isinstance(causal, bool):
        raise TypeError(f"causal must be None, True or False, got {causal!r}")
    cfg = config_dict(config)
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise ValueError(
            f"config has no 'model_type' (got {model_type!r}); a config.json dict must carry it. "
            f"Supported model types: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    converter = _CONVERTERS.get(model_type)
    if converter is None:
        raise ValueError(
            f"model_type {model_type!r} is not supported by from_hf_config. Supported model types: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    return converter.convert(cfg, model_type, causal)
