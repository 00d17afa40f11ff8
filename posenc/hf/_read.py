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


def config_dict(config: Any) -> dict[str, Any]:
    """A plain dict from a ``transformers`` config object (via ``to_dict()``) or a mapping."""
    if isinstance(config, Mapping):
        return dict(config)
    to_dict = getattr(config, "to_dict", None)
    if callable(to_dict):
        as_dict = to_dict()
        if isinstance(as_dict, Mapping):
            # transformers' standard names that the class maps onto its own (attribute_map: BART's
            # num_hidden_layers -> encoder_layers, JetMoE's head_dim -> kv_channels): to_dict() leaves them out
            aliases = getattr(config, "attribute_map", None) or {}
            return {**{k: as_dict[v] for k, v in aliases.items() if v in as_dict}, **as_dict}
    raise TypeError(
        "config must be a transformers config object (with .to_dict()) or a dict as in a model's config.json, "
        f"got {type(config).__name__}"
    )


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


def positive_int(cfg: Config, model_type: str, *names: str, default: int | None = None) -> int:
    """The first of ``names`` (or ``default``), checked to be a positive int.

    Raises:
        ValueError: none of ``names`` is set and there is no default, or the value is ``<= 0``.
        TypeError: the value is not an int.
    """
    value = get(cfg, *names, default=default)
    if value is None:
        raise ValueError(
            f"{model_type} config: missing {names[0]!r} (also read as {', '.join(names[1:]) or 'nothing else'})"
        )
    return check_positive_int(f"{model_type} config: {names[0]}", value)


def heads_and_head_dim(
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
    """``(num_heads, head_dim)``; ``head_dim`` defaults to ``width // heads`` as in transformers."""
    num_heads = positive_int(cfg, model_type, *heads, default=default_heads)
    head_dim = get(cfg, *head_dim_keys)
    if head_dim is None and not any(key in cfg for key in head_dim_keys):
        head_dim = default_head_dim  # absent: the config class default; an explicit null: hidden // heads
    if head_dim is None:
        hidden = positive_int(cfg, model_type, *width, default=default_width)
        if hidden % num_heads != 0:
            raise ValueError(
                f"{model_type} config: {width[0]}={hidden} is not a multiple of {heads[0]}={num_heads}"
            )
        head_dim = hidden // num_heads
    return num_heads, check_positive_int(f"{model_type} config: head_dim", head_dim)
