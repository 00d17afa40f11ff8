"""Converters for the RoPE models: ``rope_parameters`` / legacy ``rope_scaling`` as transformers reads them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .._checks import check_positive_int
from ..base import PositionalEncoding
from ..encodings import RoPE
from ..functional.rotary import _TYPE_KEYS, ROPE_TYPES
from ._read import Config, get, heads_and_head_dim

__all__ = ["RopeDefaults", "gptj", "rope", "rope_parameters"]


@dataclass(frozen=True)
class RopeDefaults:
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


def rope_parameters(
    cfg: Config, model_type: str, d: RopeDefaults, head_dim: int
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
    base = get(params, "rope_theta", default=get(cfg, "rope_theta", *d.theta_keys, default=d.theta))
    partial = get(params, "partial_rotary_factor", default=get(cfg, "partial_rotary_factor", *d.partial_keys))
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
    max_pos = get(cfg, "max_position_embeddings", default=d.max_len)
    scaling: dict[str, Any] = {"rope_type": rope_type}
    for key in sorted(_TYPE_KEYS[rope_type]):
        if params.get(key) is not None:
            scaling[key] = params[key]
    if "original_max_position_embeddings" in _TYPE_KEYS[rope_type]:
        # A top-level original_max_position_embeddings wins over the dict's (transformers' Phi-3 rule,
        # which it applies to every model with that attribute); otherwise the trained length.
        top = get(cfg, "original_max_position_embeddings", default=d.original_max)
        original = (
            top if top is not None else get(params, "original_max_position_embeddings", default=max_pos)
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


def rope(d: RopeDefaults) -> Callable[[Config, str, bool | None], PositionalEncoding]:
    """A converter for a model that reads ``rope_parameters`` (Llama and its kin), with defaults ``d``."""

    def convert(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
        _, head_dim = heads_and_head_dim(
            cfg,
            model_type,
            default_heads=d.num_heads,
            default_width=d.hidden_size,
            default_head_dim=d.head_dim,
        )
        base, partial, scaling = rope_parameters(cfg, model_type, d, head_dim)
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
            max_len=get(cfg, "max_position_embeddings", default=d.max_len),
        )

    return convert


def gptj(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    """GPT-J's and CodeGen's RoPE, which reads no ``rope_parameters``."""
    # GPT-J and CodeGen: interleaved pairs ("rotate_every_two"), base fixed at 10000 in the model code,
    # the first rotary_dim channels of each head (64 by default).
    _, head_dim = heads_and_head_dim(
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
    check_positive_int(f"{model_type} config: rotary_dim", rotary_dim)
    if rotary_dim > head_dim or rotary_dim % 2:
        raise ValueError(
            f"{model_type} config: rotary_dim must be a positive even int <= head_dim={head_dim}, got {rotary_dim}"
        )
    return RoPE(
        head_dim,
        base=10000.0,
        layout="interleaved",
        rotary_dim=None if rotary_dim == head_dim else rotary_dim,
        max_len=get(cfg, "n_positions", "max_position_embeddings", default=2048),
    )
