"""Hugging Face interop: the encoding a ``transformers`` model config describes, and RoPE layout conversion.

* :func:`from_hf_config` reads a ``transformers`` config object, or the dict of a model's
  ``config.json``, and returns the posenc encoding that model uses, with every setting carried
  over (RoPE base, scaling dict, partial rotation and layout; T5 buckets; ALiBi slopes; learned
  table size and offset; sinusoidal layout, spacing and offset). One table,
  :data:`_CONVERTERS`, maps each ``model_type`` to its converter; :data:`SUPPORTED_MODEL_TYPES`
  and :func:`supported_models_markdown` are generated from it.
* :func:`interleaved_to_half` and :func:`half_to_interleaved` permute the rows of a q/k
  projection weight (or bias) between the two RoPE layouts, per head and within the rotated
  channels only, so that a checkpoint trained with one layout gives identical attention scores
  with the other (the permutation that Llama conversion scripts apply to Meta's weights).

``transformers`` is optional: nothing here imports it. A config object is read through its
``to_dict()``; the defaults of keys a ``config.json`` leaves out are those of the matching
``transformers`` config class (checked by the tests against ``transformers`` itself).

Shape key: ``h`` heads, ``dh`` head width, ``r`` rotated channels per head, ``i`` input features.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from .base import PositionalEncoding
from .encodings import ALiBi, Learned, RelativeBias, RoPE, Sinusoidal
from .functional.rotary import _TYPE_KEYS, ROPE_TYPES

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "FalconALiBi",
    "from_hf_config",
    "from_hf_model",
    "half_to_interleaved",
    "interleaved_to_half",
    "rope_layout_permutation",
    "supported_models_markdown",
]

Config = Mapping[str, Any]


# --- reading configs ---------------------------------------------------------------------------


def _config_dict(config: Any) -> dict[str, Any]:
    """A plain dict from a ``transformers`` config object (via ``to_dict()``) or a mapping."""
    if isinstance(config, Mapping):
        return dict(config)
    to_dict = getattr(config, "to_dict", None)
    if callable(to_dict):
        as_dict = to_dict()
        if isinstance(as_dict, Mapping):
            return dict(as_dict)
    raise TypeError(
        "config must be a transformers config object (with .to_dict()) or a dict as in a model's config.json, "
        f"got {type(config).__name__}"
    )


def _get(cfg: Config, *names: str, default: Any = None) -> Any:
    """The first of ``names`` present in ``cfg`` with a value other than ``None``, else ``default``."""
    for name in names:
        value = cfg.get(name)
        if value is not None:
            return value
    return default


def _check_positive_integer(name: str, value: Any) -> int:
    # Every size in this module is checked here; a wrong type raises ValueError too, as it always has.
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _positive_int(cfg: Config, model_type: str, *names: str, default: int | None = None) -> int:
    value = _get(cfg, *names, default=default)
    if value is None:
        raise ValueError(
            f"{model_type} config: missing {names[0]!r} (also read as {', '.join(names[1:]) or 'nothing else'})"
        )
    return _check_positive_integer(f"{model_type} config: {names[0]}", value)


def _heads_and_head_dim(
    cfg: Config,
    model_type: str,
    *,
    heads: tuple[str, ...] = ("num_attention_heads",),
    width: tuple[str, ...] = ("hidden_size",),
    head_dim_keys: tuple[str, ...] = ("head_dim",),
    default_heads: int | None = None,
    default_width: int | None = None,
    default_head_dim: int | None = None,
) -> tuple[int, int]:
    num_heads = _positive_int(cfg, model_type, *heads, default=default_heads)
    head_dim = _get(cfg, *head_dim_keys)
    if head_dim is None and not any(key in cfg for key in head_dim_keys):
        head_dim = default_head_dim  # absent: the config class default; an explicit null: hidden // heads
    if head_dim is None:
        hidden = _positive_int(cfg, model_type, *width, default=default_width)
        if hidden % num_heads != 0:
            raise ValueError(
                f"{model_type} config: {width[0]}={hidden} is not a multiple of {heads[0]}={num_heads}"
            )
        head_dim = hidden // num_heads
    return num_heads, _check_positive_integer(f"{model_type} config: head_dim", head_dim)


# --- RoPE --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _RopeDefaults:
    """What a RoPE model's config class assumes for keys a ``config.json`` may leave out."""

    hidden_size: int
    num_heads: int
    max_len: int  # max_position_embeddings
    theta: float = 10000.0
    head_dim: int | None = None  # None: hidden_size // num_attention_heads
    partial: float | None = None  # None: the model rotates whole heads and has no partial_rotary_factor
    layout: Literal["half", "interleaved"] = "half"
    # legacy top-level names of rope_theta and partial_rotary_factor (GPT-NeoX: rotary_emb_base, rotary_pct)
    theta_keys: tuple[str, ...] = ()
    partial_keys: tuple[str, ...] = ()
    original_max: int | None = None  # Phi-3 keeps original_max_position_embeddings outside the dict
    renamed_types: tuple[tuple[str, str], ...] = ()  # Phi-3 reads rope_type "su"/"yarn" as "longrope"


def _rope_parameters(
    cfg: Config, model_type: str, d: _RopeDefaults, head_dim: int
) -> tuple[float, float, dict]:
    """Standardise ``rope_parameters`` / legacy ``rope_scaling`` + ``rope_theta`` as transformers 5 does.

    Returns ``(base, partial_rotary_factor, scaling)`` where ``scaling`` holds only the keys the
    ``rope_type`` reads, every implicit default resolved.
    """
    raw = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    if not isinstance(raw, Mapping):
        raise TypeError(f"{model_type} config: rope_parameters must be a dict, got {type(raw).__name__}")
    params = dict(raw)
    nested = [key for key in params if isinstance(params[key], Mapping)]
    if nested:
        raise ValueError(
            f"{model_type} config: rope_parameters are given per layer type ({', '.join(map(repr, nested))}); "
            "from_hf_config supports one RoPE setting for the whole model"
        )
    # Priority as in transformers: the dict's own value, then the legacy top-level key, then the default.
    base = _get(params, "rope_theta", default=_get(cfg, "rope_theta", *d.theta_keys, default=d.theta))
    partial = _get(
        params, "partial_rotary_factor", default=_get(cfg, "partial_rotary_factor", *d.partial_keys)
    )
    if partial is None:
        partial = 1.0 if d.partial is None else d.partial
    if d.partial is None and partial != 1.0:
        raise ValueError(
            f"{model_type} config: partial_rotary_factor={partial!r}, but transformers' {model_type} rotates the whole "
            "head (its attention has no partial rotation); accepted: 1.0 or absent"
        )
    rope_type = params.get("rope_type", params.get("type", "default"))
    rope_type = dict(d.renamed_types).get(rope_type, rope_type)
    if rope_type not in ROPE_TYPES:
        raise ValueError(
            f"{model_type} config: rope_type {rope_type!r} is not supported; supported: {', '.join(ROPE_TYPES)}"
        )
    if rope_type == "default":
        return float(base), float(partial), {}
    max_pos = _get(cfg, "max_position_embeddings", default=d.max_len)
    scaling: dict[str, Any] = {"rope_type": rope_type}
    for key in sorted(_TYPE_KEYS[rope_type]):
        if params.get(key) is not None:
            scaling[key] = params[key]
    if "original_max_position_embeddings" in _TYPE_KEYS[rope_type]:
        # A top-level original_max_position_embeddings wins over the dict's (transformers' Phi-3 rule,
        # which it applies to every model with that attribute); otherwise the trained length.
        top = _get(cfg, "original_max_position_embeddings", default=d.original_max)
        original = (
            top if top is not None else _get(params, "original_max_position_embeddings", default=max_pos)
        )
        if original is None:
            raise ValueError(
                f"{model_type} config: rope_type {rope_type!r} needs original_max_position_embeddings "
                "(or max_position_embeddings)"
            )
        scaling["original_max_position_embeddings"] = original
        if scaling.get("factor") is None and rope_type in ("yarn", "longrope") and max_pos is not None:
            # transformers' rule for configs without a factor (Phi-3, DeepSeek-V3): the context ratio.
            scaling["factor"] = max_pos / original
    if rope_type != "longrope" and scaling.get("factor") is None:
        raise ValueError(f"{model_type} config: rope_type {rope_type!r} needs a 'factor' in rope_parameters")
    return float(base), float(partial), scaling


def _rope(d: _RopeDefaults) -> Callable[[Config, str, bool | None], PositionalEncoding]:
    def convert(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
        _, head_dim = _heads_and_head_dim(
            cfg,
            model_type,
            default_heads=d.num_heads,
            default_width=d.hidden_size,
            default_head_dim=d.head_dim,
        )
        base, partial, scaling = _rope_parameters(cfg, model_type, d, head_dim)
        rotary_dim = int(head_dim * partial)
        if rotary_dim <= 0 or rotary_dim % 2:
            raise ValueError(
                f"{model_type} config: head_dim={head_dim} * partial_rotary_factor={partial} gives {rotary_dim} rotated "
                "channels; accepted: a positive even number"
            )
        return RoPE(
            head_dim,
            base=base,
            layout=d.layout,
            rotary_dim=None if rotary_dim == head_dim else rotary_dim,
            scaling=scaling or None,
            max_len=_get(cfg, "max_position_embeddings", default=d.max_len),
        )

    return convert


def _gptj(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    # GPT-J and CodeGen: interleaved pairs ("rotate_every_two"), base fixed at 10000 in the model code,
    # the first rotary_dim channels of each head (64 by default).
    _, head_dim = _heads_and_head_dim(
        cfg,
        model_type,
        heads=("n_head", "num_attention_heads"),
        width=("n_embd", "hidden_size"),
        head_dim_keys=(),
        default_heads=16,
        default_width=4096,
    )
    rotary_dim = cfg.get("rotary_dim", 64)
    if rotary_dim is None:
        # transformers' table then spans the model width, which only fits one-head models: rotate whole heads
        rotary_dim = head_dim
    if (
        isinstance(rotary_dim, bool)
        or not isinstance(rotary_dim, int)
        or not 0 < rotary_dim <= head_dim
        or rotary_dim % 2
    ):
        raise ValueError(
            f"{model_type} config: rotary_dim must be a positive even integer <= head_dim={head_dim}, got {rotary_dim!r}"
        )
    return RoPE(
        head_dim,
        base=10000.0,
        layout="interleaved",
        rotary_dim=None if rotary_dim == head_dim else rotary_dim,
        max_len=_get(cfg, "n_positions", "max_position_embeddings", default=2048),
    )


# --- biases ------------------------------------------------------------------------------------


def _t5(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    # The encoder's bias is bidirectional, the decoder's causal: a T5 config is the encoder's unless
    # is_decoder is set (transformers flips it for the decoder stack), so pass causal=True for the decoder.
    default_heads = 6 if model_type == "mt5" else 8
    num_heads = _positive_int(cfg, model_type, "num_heads", "num_attention_heads", default=default_heads)
    is_causal = bool(cfg.get("is_decoder", False)) if causal is None else causal
    return RelativeBias(
        num_heads,
        num_buckets=_positive_int(cfg, model_type, "relative_attention_num_buckets", default=32),
        max_distance=_positive_int(cfg, model_type, "relative_attention_max_distance", default=128),
        bidirectional=not is_causal,
        causal=is_causal,
    )


def _bloom(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    num_heads = _positive_int(cfg, model_type, "n_head", "num_attention_heads", default=8)
    return ALiBi(num_heads, causal=True if causal is None else causal)


def _mpt(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    attn = cfg.get("attn_config") or {}
    if not isinstance(attn, Mapping):
        attn = _config_dict(attn)
    if not attn.get("alibi", True):
        raise ValueError(
            f"{model_type} config: attn_config.alibi is False; transformers' MPT always uses ALiBi and has no other "
            "position encoding, so this config has no supported encoding"
        )
    num_heads = _positive_int(cfg, model_type, "n_heads", "num_attention_heads", default=16)
    max_bias = _get(attn, "alibi_bias_max", default=8)
    return ALiBi(num_heads, causal=True if causal is None else causal, max_bias=float(max_bias))


class FalconALiBi(ALiBi):
    """ALiBi as Falcon applies it: the bias is added before the ``1/sqrt(dh)`` score scaling.

    Falcon (the ``alibi=True`` variants, e.g. Falcon-RW) computes
    ``softmax((q.k + m * pos) / sqrt(dh))``, so relative to the usual convention (bias added to
    the scaled scores, as SDPA's ``attn_mask`` and every posenc attention layer do) its slopes
    are ``m / sqrt(dh)``. This class is :class:`~posenc.ALiBi` with every slope it applies
    multiplied by :attr:`slope_scale` ``= dh ** -0.5``; :attr:`slopes` keeps the paper's values.

    transformers rounds Falcon's ``slope * position`` to bfloat16; posenc keeps float32, so the
    two agree exactly for power-of-two head counts below 256 positions and to bfloat16
    precision beyond.

    Args:
        num_heads: attention heads ``h``.
        head_dim: per-head width ``dh`` of the model (sets :attr:`slope_scale`).
        causal: see :class:`~posenc.ALiBi`.
        device: of the slopes.
    """

    def __init__(
        self, num_heads: int, head_dim: int, causal: bool = True, *, device: torch.device | str | None = None
    ) -> None:
        super().__init__(num_heads, causal=causal, device=device)
        self.head_dim = _check_positive_integer("head_dim", head_dim)
        self.slope_scale = head_dim**-0.5

    def _slopes(self, dtype: torch.dtype) -> Tensor:
        # Every ALiBi method reads its slopes here: scale them once, in the slopes' own dtype.
        return super()._slopes(dtype) * self.slope_scale

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, slope_scale=1/sqrt({self.head_dim})"


def _falcon(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    if not cfg.get("alibi", False):
        return _rope(_RopeDefaults(4544, 71, 2048))(cfg, model_type, causal)
    num_heads, head_dim = _heads_and_head_dim(
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
        d_model = _positive_int(cfg, model_type, *width, default=default_width)
        max_len = _positive_int(cfg, model_type, *length, default=default_length)
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
        d_model = _positive_int(cfg, model_type, "d_model", "hidden_size", default=default_width)
        if d_model % 2:
            raise ValueError(f"{model_type} config: d_model must be even for a sin/cos table, got {d_model}")
        max_len = _get(cfg, *length, default=default_length)
        if spacing == "paper":
            # Marian / Pegasus: positions from 0, [sin | cos], inv_freq = base^(-2i/d).
            return Sinusoidal(d_model, layout="concat", max_len=max_len)
        # fairseq / tensor2tensor: [sin | cos], inv_freq = base^(-i/(d/2-1)); Speech2Text and M2M100
        # number real tokens from padding_idx + 1, XGLM adds a fixed 2 to its position ids.
        offset = fixed_offset
        if offset is None:
            pad = _get(cfg, "pad_token_id", default=default_pad)
            if isinstance(pad, bool) or not isinstance(pad, int) or pad < 0:
                raise ValueError(
                    f"{model_type} config: pad_token_id must be a non-negative integer (positions start at "
                    f"pad_token_id + 1), got {pad!r}"
                )
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
    "llama": _Converter(_rope(_RopeDefaults(4096, 32, 2048)), "RoPE, half layout"),
    "mistral": _Converter(_rope(_RopeDefaults(4096, 32, 131072)), "RoPE, half layout"),
    "mixtral": _Converter(
        _rope(_RopeDefaults(4096, 32, 131072, theta=1_000_000.0)), "RoPE, half layout, base 1e6"
    ),
    "qwen2": _Converter(_rope(_RopeDefaults(4096, 32, 32768)), "RoPE, half layout"),
    "qwen3": _Converter(
        _rope(_RopeDefaults(4096, 32, 32768, head_dim=128)), "RoPE, half layout (head_dim 128 by default)"
    ),
    "gemma": _Converter(
        _rope(_RopeDefaults(3072, 16, 8192, head_dim=256)), "RoPE, half layout (head_dim 256 by default)"
    ),
    "gemma2": _Converter(
        _rope(_RopeDefaults(2304, 8, 8192, head_dim=256)), "RoPE, half layout (head_dim 256 by default)"
    ),
    "olmo": _Converter(_rope(_RopeDefaults(4096, 32, 2048)), "RoPE, half layout"),
    "starcoder2": _Converter(_rope(_RopeDefaults(3072, 24, 4096)), "RoPE, half layout"),
    "granite": _Converter(_rope(_RopeDefaults(4096, 32, 2048)), "RoPE, half layout"),
    "cohere": _Converter(
        _rope(_RopeDefaults(8192, 64, 8192, theta=500_000.0, layout="interleaved")),
        "RoPE, interleaved layout, base 5e5",
    ),
    # RoPE on the first channels of each head (partial rotary)
    "phi": _Converter(
        _rope(_RopeDefaults(2048, 32, 2048, partial=0.5)), "RoPE, half layout, partial_rotary_factor (0.5)"
    ),
    "phi3": _Converter(
        _rope(
            _RopeDefaults(
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
        _rope(_RopeDefaults(2560, 32, 4096, partial=0.25)), "RoPE, half layout, partial_rotary_factor (0.25)"
    ),
    "persimmon": _Converter(
        _rope(_RopeDefaults(4096, 64, 16384, partial=0.5)), "RoPE, half layout, partial_rotary_factor (0.5)"
    ),
    "gpt_neox": _Converter(
        _rope(
            _RopeDefaults(
                6144, 64, 2048, partial=0.25, theta_keys=("rotary_emb_base",), partial_keys=("rotary_pct",)
            )
        ),
        "RoPE, half layout, rotary_pct (0.25), rotary_emb_base",
    ),
    "gptj": _Converter(_gptj, "RoPE, interleaved layout, rotary_dim (64), no scaling"),
    "codegen": _Converter(_gptj, "RoPE, interleaved layout, rotary_dim (64), no scaling"),
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
        A :class:`~posenc.RoPE`, :class:`~posenc.RelativeBias`, :class:`~posenc.ALiBi`,
        :class:`~posenc.Learned` or :class:`~posenc.Sinusoidal`.

    Raises:
        ValueError: unsupported ``model_type`` (the message lists the supported ones), an
            unsupported ``rope_type``, per-layer RoPE settings, or sizes that do not fit.
        TypeError: ``config`` is neither a config object nor a mapping; ``causal`` not a bool.

    Example::

        >>> from transformers import AutoConfig                         # doctest: +SKIP
        >>> rope = from_hf_config(AutoConfig.from_pretrained("meta-llama/Llama-3.1-8B"))  # doctest: +SKIP
        >>> q, k = rope(q, k)                                           # doctest: +SKIP
    """
    if causal is not None and not isinstance(causal, bool):
        raise TypeError(f"causal must be None, True or False, got {causal!r}")
    cfg = _config_dict(config)
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


# --- trained position weights out of a model ----------------------------------------------------

#: Where each model type keeps its trained position weights, per stack, as a state_dict key suffix
#: (the model's prefix, e.g. ``transformer.`` or ``model.``, may come before it).
_WEIGHT_KEYS: dict[str, dict[str, str]] = {
    "t5": {
        "encoder": "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
        "decoder": "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
    },
    "gpt2": {"decoder": "wpe.weight"},
    "gpt_neo": {"decoder": "wpe.weight"},
    "opt": {"decoder": "decoder.embed_positions.weight"},
    "bart": {"encoder": "encoder.embed_positions.weight", "decoder": "decoder.embed_positions.weight"},
}
_WEIGHT_KEYS["mt5"] = _WEIGHT_KEYS["t5"]
_WEIGHT_KEYS["mbart"] = _WEIGHT_KEYS["bart"]


def from_hf_model(model: Any, *, stack: Literal["encoder", "decoder"] | None = None) -> PositionalEncoding:
    """The encoding of a ``transformers`` model, with its trained position weights loaded.

    :func:`from_hf_config` on ``model.config``, plus the weights a config does not hold: T5's
    relative-bias table (from the first block of the chosen stack, which the other blocks
    share), the learned tables of GPT-2, GPT-Neo, OPT and BART. Encodings without trained
    weights (RoPE, ALiBi, sinusoids) come back as :func:`from_hf_config` builds them.

    Args:
        model: a ``transformers`` model (any head: ``T5ForConditionalGeneration``,
            ``GPT2LMHeadModel``, ...), or anything with ``.config`` and ``.state_dict()``.
        stack: for encoder-decoder models, whose position weights to take: ``"encoder"``
            (bidirectional T5 bias) or ``"decoder"`` (causal T5 bias). ``None``: the decoder when
            ``model.config.is_decoder`` is set (a decoder stack on its own), else the encoder;
            decoder-only models have one stack.

    Returns:
        The encoding, its learned parameters copied from ``model`` into its own (float32, CPU)
        parameters by :meth:`~torch.nn.Module.load_state_dict`; move it with ``.to()`` as usual.

    Raises:
        ValueError: ``stack`` is not ``None``/``"encoder"``/``"decoder"``, or the model has no
            weights for that stack (e.g. ``stack="decoder"`` on a ``T5EncoderModel``).
        TypeError: ``model`` has no ``config`` or ``state_dict``.
    """
    config, state_dict = getattr(model, "config", None), getattr(model, "state_dict", None)
    if config is None or not callable(state_dict):
        raise TypeError(
            f"model must be a transformers model (with .config and .state_dict()), got {type(model).__name__}"
        )
    if stack not in (None, "encoder", "decoder"):
        raise ValueError(f"stack must be None, 'encoder' or 'decoder', got {stack!r}")
    cfg = _config_dict(config)
    keys = _WEIGHT_KEYS.get(cfg.get("model_type"))
    if keys is None:
        return from_hf_config(cfg)
    if stack is None:
        stack = "decoder" if cfg.get("is_decoder") or "encoder" not in keys else "encoder"
    if stack not in keys:
        raise ValueError(
            f"{cfg['model_type']} has no {stack} position weights; accepted stack: {', '.join(keys)}"
        )
    encoding = from_hf_config(cfg, causal=stack == "decoder")
    suffix = keys[stack]
    weights = state_dict()
    found = [key for key in weights if key == suffix or key.endswith("." + suffix)]
    bare = suffix.removeprefix(f"{stack}.")
    if not found and bare in weights:  # the stack module itself (e.g. model.decoder of a T5)
        found = [bare]
    if len(found) != 1:
        raise ValueError(
            f"{cfg['model_type']}: expected one {stack} position weight ending in {suffix!r}, found {found or 'none'}"
        )
    (target,) = (name for name, _ in encoding.named_parameters())  # one table: `weight` or T5's embedding
    encoding.load_state_dict({target: weights[found[0]]})
    return encoding


# --- checkpoint layout conversion --------------------------------------------------------------


def rope_layout_permutation(
    head_dim: int,
    rotary_dim: int | None = None,
    *,
    to: Literal["half", "interleaved"] = "half",
    device: torch.device | str | None = None,
) -> Tensor:
    """Channel order within one head that converts between the two RoPE layouts.

    In the interleaved layout (GPT-J, Meta's Llama, RoFormer) channels ``2i`` and ``2i+1`` rotate
    together at frequency ``i``; in the half-split layout (GPT-NeoX, Hugging Face Llama)
    channels ``i`` and ``i + r/2`` do. ``new = old[..., perm]`` re-orders a head's channels
    from one layout to the other; channels past ``rotary_dim`` stay in place.

    Args:
        head_dim: channels per head ``dh``.
        rotary_dim: rotated channels ``r`` (the first ``r`` of each head); ``None`` means all.
        to: ``"half"`` (interleaved -> half) or ``"interleaved"`` (half -> interleaved).
        device: where the index tensor is made.

    Returns:
        A ``(dh,)`` long tensor, a permutation of ``0 .. dh-1``.
    """
    rotary_dim = _check_rotary_dims(head_dim, rotary_dim)
    if to not in ("half", "interleaved"):
        raise ValueError(f"to must be 'half' or 'interleaved', got {to!r}")
    half = rotary_dim // 2
    if to == "half":
        # half channel j takes interleaved channel 2j, half channel half+j takes 2j+1
        rotated = torch.cat([torch.arange(0, rotary_dim, 2), torch.arange(1, rotary_dim, 2)])
    else:
        # interleaved channel 2j takes half channel j, 2j+1 takes half+j
        rotated = torch.stack([torch.arange(half), torch.arange(half, rotary_dim)], dim=-1).reshape(-1)
    return torch.cat([rotated, torch.arange(rotary_dim, head_dim)]).to(device)


def _check_rotary_dims(head_dim: int, rotary_dim: int | None) -> int:
    _check_positive_integer("head_dim", head_dim)
    if rotary_dim is None:
        rotary_dim = head_dim
    if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, int) or rotary_dim <= 0 or rotary_dim % 2:
        raise ValueError(f"rotary_dim must be a positive even integer, got {rotary_dim!r}")
    if rotary_dim > head_dim:
        raise ValueError(f"rotary_dim={rotary_dim} must not exceed head_dim={head_dim}")
    return rotary_dim


def _permute_heads(
    weight: Tensor,
    num_heads: int,
    head_dim: int | None,
    rotary_dim: int | None,
    to: Literal["half", "interleaved"],
) -> Tensor:
    if not isinstance(weight, Tensor):
        raise TypeError(
            f"weight must be a torch.Tensor of shape (num_heads*head_dim, ...), got {type(weight).__name__}"
        )
    if weight.dim() not in (1, 2):
        raise ValueError(
            "weight must be a projection weight (num_heads*head_dim, in_features) or bias (num_heads*head_dim,), "
            f"got shape {tuple(weight.shape)}"
        )
    _check_positive_integer("num_heads", num_heads)
    rows = weight.shape[0]
    if head_dim is None:
        if rows % num_heads:
            raise ValueError(f"weight has {rows} rows, not a multiple of num_heads={num_heads}")
        head_dim = rows // num_heads
    if rows != num_heads * head_dim:
        raise ValueError(
            f"weight has {rows} rows, expected num_heads*head_dim = {num_heads}*{head_dim} = {num_heads * head_dim}"
        )
    perm = rope_layout_permutation(head_dim, rotary_dim, to=to, device=weight.device)
    # (h*dh, ...) -> (h, dh, ...): re-order channels within each head, then flatten back.
    per_head = weight.reshape(num_heads, head_dim, *weight.shape[1:])
    return per_head.index_select(1, perm).reshape(weight.shape)


def interleaved_to_half(
    weight: Tensor, num_heads: int, head_dim: int | None = None, rotary_dim: int | None = None
) -> Tensor:
    """Permute q/k projection rows from the interleaved RoPE layout to the half-split one.

    A model whose RoPE rotates channel pairs ``(2i, 2i+1)`` (Meta's Llama checkpoints, GPT-J)
    computes the same attention scores as the half-split model (``rotate_half``: pairs
    ``(i, i + r/2)``) once its query and key projections are permuted with this function:
    within each head, rotated channel ``2i`` moves to ``i`` and ``2i+1`` to ``i + r/2``. This is
    the permutation Hugging Face's Llama conversion script applies. Apply it to ``q_proj`` and
    ``k_proj`` weights and biases (for grouped-query attention, with ``num_heads`` = the
    key/value heads for ``k_proj``); values and the output projection are unchanged.

    Args:
        weight: ``(h*dh, i)`` projection weight (``nn.Linear.weight``) or ``(h*dh,)`` bias.
        num_heads: heads ``h`` in this projection.
        head_dim: ``dh``; ``None`` means ``rows // num_heads``.
        rotary_dim: rotated channels ``r`` per head (partial rotary: the first ``r``);
            ``None`` means all ``dh``.

    Returns:
        A new tensor of the same shape, dtype and device.
    """
    return _permute_heads(weight, num_heads, head_dim, rotary_dim, "half")


def half_to_interleaved(
    weight: Tensor, num_heads: int, head_dim: int | None = None, rotary_dim: int | None = None
) -> Tensor:
    """Permute q/k projection rows from the half-split RoPE layout to the interleaved one.

    The inverse of :func:`interleaved_to_half` (same arguments): within each head, rotated
    channel ``i`` moves to ``2i`` and ``i + r/2`` to ``2i+1``.

    Args:
        weight: ``(h*dh, i)`` projection weight or ``(h*dh,)`` bias.
        num_heads: heads ``h`` in this projection.
        head_dim: ``dh``; ``None`` means ``rows // num_heads``.
        rotary_dim: rotated channels ``r`` per head; ``None`` means all ``dh``.

    Returns:
        A new tensor of the same shape, dtype and device.
    """
    return _permute_heads(weight, num_heads, head_dim, rotary_dim, "interleaved")
