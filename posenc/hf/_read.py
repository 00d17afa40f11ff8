"""Reading a ``transformers`` config (object or ``config.json`` dict): shared by every converter."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .._checks import check_positive_int

if TYPE_CHECKING:
    from ..base import PositionalEncoding

Config = Mapping[str, Any]
#: A converter: ``(config dict, model_type, causal)`` -> the encoding, or one per layer.
Convert = Callable[[Config, str, "bool | None"], "PositionalEncoding | list[PositionalEncoding]"]


#: transformers' standard names and the older ones a ``config.json`` may keep instead (what config classes'
#: attribute_map reads them as: GPT-2's n_embd, BART's d_model, DBRX's n_heads, JetMoE's kv_channels, Moonshine's
#: decoder; GPT-NeoX's legacy rotary_emb_base / rotary_pct): :func:`config_dict` fills a standard name that is
#: missing (or null) from the first alias set.
ALIASES = {
    "num_attention_heads": ("n_head", "n_heads", "num_heads", "decoder_num_attention_heads"),
    "hidden_size": ("n_embd", "n_embed", "d_model", "embed_dim", "emb_dim"),
    "num_hidden_layers": ("n_layer", "num_layers", "n_layers", "decoder_num_hidden_layers"),
    "max_position_embeddings": ("n_positions", "max_seq_len"),
    "head_dim": ("kv_channels",),
    "rope_theta": ("rotary_emb_base",),
    "partial_rotary_factor": ("rotary_pct",),
}


def config_dict(config: Any) -> dict[str, Any]:
    """A plain dict from a ``transformers`` config object (via ``to_dict()``) or a mapping, with the
    standard names of :data:`ALIASES` filled in."""
    if isinstance(config, Mapping):
        cfg = dict(config)
    elif callable(getattr(config, "to_dict", None)) and isinstance(as_dict := config.to_dict(), Mapping):
        # the standard names the class maps onto its own (attribute_map: BART's num_hidden_layers ->
        # encoder_layers): to_dict() leaves them out
        aliases = getattr(config, "attribute_map", None) or {}
        cfg = {**{k: as_dict[v] for k, v in aliases.items() if v in as_dict}, **as_dict}
    else:
        raise TypeError(
            "config must be a transformers config object (with .to_dict()) or a dict as in a model's config.json, "
            f"got {type(config).__name__}"
        )
    for name, names in ALIASES.items():
        if cfg.get(name) is None and (value := get(cfg, *names)) is not None:
            cfg[name] = value
    return cfg


def get(cfg: Config, *names: str, default: Any = None) -> Any:
    """The first of ``names`` present in ``cfg`` with a value other than ``None``, else ``default``."""
    for name in names:
        value = cfg.get(name)
        if value is not None:
            return value
    return default


def rope_dict(cfg: Config, model_type: str) -> Mapping[str, Any]:
    """The config's RoPE dict, flat or per layer type: the legacy ``rope_scaling`` wins over
    ``rope_parameters`` as in transformers 5 (``rope_scaling or rope_parameters``); ``{}`` when neither.

    Raises:
        TypeError: it is not a dict.
    """
    raw = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    if not isinstance(raw, Mapping):
        raise TypeError(f"{model_type} config: rope_parameters must be a dict, got {type(raw).__name__}")
    return raw


def key_of(cfg: Config, name: str) -> str:
    """The key the config gave ``cfg[name]`` under: the alias :func:`config_dict` read it from, else ``name``."""
    return next((alias for alias in ALIASES.get(name, ()) if alias in cfg and cfg[alias] is cfg[name]), name)


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
