"""Converters for models whose layers differ: one encoding per layer, shared between equal layers.

Gemma 3 / 3n / 4 and ModernBERT read ``rope_parameters`` nested by layer type (transformers 5) or
their legacy top-level keys (``rope_local_base_freq``, ``global_rope_theta``...); Llama 4 and
SmolLM3 drop RoPE in the layers ``no_rope_layers`` marks 0; Cohere 2 rotates only its sliding
layers. Each converter returns a list with one encoding per layer, the same instance for every
layer of one setting.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from .._checks import check_bool, check_positive_float, check_positive_int
from ..base import PositionalEncoding
from ..encodings import NoPE
from ..encodings.temperature import QueryTemperature
from ..functional.rope_scaling import rope_type_of
from ._layer_types import layer_types, required_count, table_types
from ._read import GEMMA4_ROPE, Config, Convert, get, positive_int, rope_dict
from ._rope import RopeDefaults, build_rope, heads_and_head_dim

#: Layer type names transformers knows besides those a config lists.
_KNOWN_TYPES = frozenset({"full_attention", "sliding_attention", "chunked_attention"})

Layers = list[PositionalEncoding]


def per_type_rope(
    cfg: Config,
    model_type: str,
    d: RopeDefaults,
    types: list[str],
    head_dims: Sequence[int] | int,
    legacy: Callable[[dict[str, Any]], dict[str, dict[str, Any]]] | None = None,
    *,
    mrope: tuple[tuple[int, ...] | Callable[[int], list[int]], bool | Literal["hw"]] | None = None,
    unrotated: Callable[[], PositionalEncoding] | None = None,
) -> Layers:
    """One :class:`RoPE` per layer, built once per (layer type, head size), from one RoPE dict per layer
    type: the nested ``rope_parameters``, else ``legacy(flat dict)``.

    A layer type name outside ``types`` and transformers' own is refused, except without ``legacy`` (a
    model outside the table, which must nest its ``rope_parameters``). With
    ``mrope`` (``(default mrope_section, interleaved)``) each dict is an :class:`MRoPE`'s. With
    ``unrotated``, a layer type whose dict is ``None`` or absent gets ``unrotated()``, what its code does
    there instead of rotating (NoPE: Cohere Compass's ``None`` types, LFM3's conv layers; Beam's query
    temperature); elsewhere both are refused.
    """
    raw = rope_dict(cfg, model_type)
    if raw and all(isinstance(v, Mapping) or (unrotated and v is None) for v in raw.values()):
        known = _KNOWN_TYPES | set(types)
        unknown = [name for name in raw if name not in known] if legacy else []
        if unknown:
            raise ValueError(
                f"{model_type} config: rope_parameters[{unknown[0]!r}] names an unknown layer type; known: "
                f"{', '.join(sorted(known))}"
            )
        params: dict[str, dict[str, Any] | None] = {**(legacy({}) if legacy else {})}
        params.update({name: None if value is None else dict(value) for name, value in raw.items()})
    elif any(isinstance(v, Mapping) for v in raw.values()):
        for name, value in raw.items():
            if value is None:  # the model's code decides what those layers do instead (NoPE, or more)
                raise ValueError(
                    f"{model_type} config: rope_parameters[{name!r}] is None: those layers do not rotate, and "
                    "what the model's code does there instead (NoPE, or a query scale as Beam's) is not in "
                    "the config; posenc does not convert it"
                )
        raise ValueError(
            f"{model_type} config: rope_parameters mixes per-layer-type dicts and flat keys ({sorted(raw)}); "
            "give one dict per layer type"
        )
    else:
        params = {**legacy(dict(raw))} if legacy else {}
    dims = [head_dims] * len(types) if isinstance(head_dims, int) else head_dims
    built: dict[tuple[str, int], PositionalEncoding] = {}
    for name, head_dim in zip(types, dims, strict=True):
        if name not in params and not unrotated:
            raise ValueError(
                f"{model_type} config: rope_parameters has no entry for layer type {name!r} (it has {sorted(params)})"
            )
        where, one = f"rope_parameters[{name!r}]", params.get(name)
        if (name, head_dim) in built:
            continue
        if one is None:  # (built once per type and width, as the RoPEs)
            built[name, head_dim] = unrotated() if unrotated else NoPE()
            continue
        kw: dict[str, Any] = {}
        if mrope:  # (its section from the dict, else the model's default; a function of the pairs: no dict's)
            section = mrope[0] if callable(mrope[0]) else list(one.pop("mrope_section", mrope[0]))
            kw = {"mrope_section": section, "interleaved": mrope[1]}
        check_type_dict(one, model_type, where)
        built[name, head_dim] = build_rope(cfg, model_type, d, head_dim, params=one, where=where, **kw)
    return [built[key] for key in zip(types, dims, strict=True)]


def check_type_dict(one: Mapping[str, Any], model_type: str, where: str) -> None:
    """Refuse a layer type's (or rope kind's) RoPE dict that transformers does not read as given: YaRN's init
    reads ``truncate`` from the config's whole ``rope_parameters``, not a layer type's (the model truncates)."""
    if one.get("truncate") is False:
        raise ValueError(
            f"{model_type} config: {where} has truncate=False, which transformers' YaRN does not read from a layer "
            "type's dict: the model truncates (True); drop it to convert what the model computes"
        )


def two_bases_as_class(
    cfg: Config,
    model_type: str,
    keys: tuple[str | None, str | None],
    defaults: tuple[float, float],
    *,
    scale_local: bool,
) -> dict[str, Any]:
    """``cfg`` with ``rope_parameters`` by layer type as Gemma 3's, ModernBERT's, OLMo 3's and T5Gemma 2's classes
    make them: their own (else a default-type dict for each of full and sliding attention), a legacy
    ``rope_scaling`` merged into the full-attention one (and the sliding one, ``scale_local``), then each
    ``rope_theta`` left out taken from its legacy key ``keys[i]`` (``None``: none), else ``defaults[i]``. A flat
    ``rope_parameters`` stays beside them, unread by the model (refused later).

    Raises:
        TypeError: ``rope_parameters``, ``rope_scaling``, or the dict of full or sliding attention is not a dict.
    """
    params, scaling = cfg.get("rope_parameters"), cfg.get("rope_scaling")
    names = ("full_attention", "sliding_attention")
    for field, value in (("rope_parameters", params), ("rope_scaling", scaling)):
        if value is not None and not isinstance(value, Mapping):
            raise TypeError(f"{model_type} config: {field} must be a dict, got {type(value).__name__}")
    # (a dict missing or None for full or sliding attention is filled in below)
    nested: dict[str, Any] = {
        name: dict(one) if isinstance(one, Mapping) else one for name, one in (params or {}).items()
    }
    for i, (name, key, base) in enumerate(zip(names, keys, defaults, strict=True)):
        if nested.get(name) is None:
            nested[name] = {"rope_type": "default"}
        elif not isinstance(nested[name], Mapping):
            raise TypeError(
                f"{model_type} config: rope_parameters[{name!r}] must be a dict, got {type(nested[name]).__name__}"
            )
        if isinstance(scaling, Mapping) and (i == 0 or scale_local):
            nested[name].update(scaling)
        nested[name].setdefault("rope_theta", base if key is None else get(cfg, key, default=base))
    return {**cfg, "rope_scaling": None, "rope_parameters": nested}


def two_bases(
    d: RopeDefaults, keys: tuple[str, str], defaults: tuple[float, float], *, scale_local: bool
) -> Convert:
    """Gemma 3 / 3n and ModernBERT: one RoPE per layer type, from ``rope_parameters`` by layer type or the legacy
    keys (:func:`two_bases_as_class`); :func:`table_types` gives the layer types a config leaves out."""

    def convert(cfg: Config, model_type: str, causal: bool | None) -> Layers:
        types = table_types(cfg, model_type)
        cfg = two_bases_as_class(cfg, model_type, keys, defaults, scale_local=scale_local)
        # (nested now; a legacy map all the same: a table model's layer type names are checked)
        return per_type_rope(cfg, model_type, d, types, heads_and_head_dim(cfg, model_type, d)[1], dict)

    return convert


def gemma3(d: RopeDefaults) -> Convert:
    """Gemma 3 / 3n: local base on sliding layers, global base (and the scaling dict) on full layers."""
    return two_bases(d, ("rope_theta", "rope_local_base_freq"), (1e6, 1e4), scale_local=False)


def gemma4(cfg: Config, model_type: str, causal: bool | None) -> Layers:
    """Gemma 4: plain RoPE on sliding layers; proportional RoPE with the global head dim on full layers."""
    d = RopeDefaults(2304, 8, 131072, head_dim=256)
    types = table_types(cfg, model_type)
    head_dim = heads_and_head_dim(cfg, model_type, d)[1]
    dims = layer_head_dims(cfg, model_type, types, head_dim, get(cfg, "global_head_dim", default=512))

    def per_type(flat: dict[str, Any]) -> dict[str, dict[str, Any]]:
        if flat:  # (its class keeps a flat dict as given, and its model reads rope_parameters[layer_type]: KeyError)
            raise ValueError(
                f"{model_type} config: rope_parameters must hold one dict per layer type ({', '.join(GEMMA4_ROPE)}), "
                f"as its model reads them; got the flat keys {sorted(flat)}"
            )
        return GEMMA4_ROPE

    return per_type_rope(cfg, model_type, d, types, dims, per_type)


def layer_head_dims(
    cfg: Config, model_type: str, types: list[str], head_dim: int, global_dim: int | None
) -> list[int]:
    """The head width of each layer: the ``head_dim`` of its entry in transformers' ``per_layer_config``
    (sparse overrides by layer index, ``{"05": {"head_dim": 512}, ...}``), else ``head_dim``; without a
    ``per_layer_config``, ``global_dim`` on the full-attention layers (the ``global_head_dim`` that
    Gemma 4's config class and its kin turn into ``per_layer_config``) where it is not ``None``.

    Raises:
        ValueError: a ``per_layer_config`` whose keys are not layer indices, or that overrides a RoPE key.
    """
    overrides = cfg.get("per_layer_config")
    if overrides is not None and not isinstance(overrides, Mapping):
        raise TypeError(
            f"{model_type} config: per_layer_config must be a dict, got {type(overrides).__name__}"
        )
    try:
        by_layer = {int(k): v or {} for k, v in (overrides or {}).items()}
    except (TypeError, ValueError):
        raise ValueError(
            f"{model_type} config: per_layer_config keys must be layer indices, got {sorted(map(str, overrides or {}))}"
        ) from None
    for i, entry in by_layer.items():
        rope_keys = sorted(key for key in entry if "rope" in key or "rotary" in key)
        if rope_keys:
            raise ValueError(
                f"{model_type} config: per_layer_config[{i}] overrides {', '.join(map(repr, rope_keys))}, "
                "which posenc does not read per layer"
            )
    if overrides is None and global_dim is not None:  # (the per_layer_config its class writes)
        by_layer = {i: {"head_dim": global_dim} for i, name in enumerate(types) if name == "full_attention"}
    dims = [get(by_layer.get(i, {}), "head_dim", default=head_dim) for i in range(len(types))]
    return [check_positive_int(f"{model_type} config: head_dim of layer {i}", d) for i, d in enumerate(dims)]


#: ModernBERT: base 160k on the global layers (every third, from the first), 10k on the local ones.
modernbert = two_bases(
    RopeDefaults(768, 12, 8192),
    ("global_rope_theta", "local_rope_theta"),
    (160_000.0, 10_000.0),
    scale_local=True,
)


def nope_layers(
    d: RopeDefaults, rope_at: Callable[[Config, str], list[bool]], temperature: bool = False
) -> Convert:
    """RoPE in the layers ``rope_at`` marks, NoPE (with ``temperature``: Llama 4's query temperature) in the others."""

    def convert(cfg: Config, model_type: str, causal: bool | None) -> Layers:
        flags = rope_at(cfg, model_type)
        rope = build_rope(cfg, model_type, d) if any(flags) else None
        other: PositionalEncoding = NoPE()
        if temperature and check_bool(
            f"{model_type} config: attn_temperature_tuning", cfg.get("attn_temperature_tuning", True)
        ):
            try:  # (QueryTemperature checks both numbers, and names them)
                other = QueryTemperature(
                    get(cfg, "floor_scale", default=8192), get(cfg, "attn_scale", default=0.1)
                )
            except (TypeError, ValueError) as err:
                raise type(err)(f"{model_type} config: {err}") from None
        return [rope if flag and rope is not None else other for flag in flags]

    return convert


#: DeepSeek V4's layer types by the legacy ``compress_ratios`` its config class maps them from
_DSV4_TYPES = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}


def deepseek_v4(cfg: Config, model_type: str, causal: bool | None) -> Layers:
    """DeepSeek V4: interleaved RoPE on the last ``qk_rope_head_dim`` channels of each head (``[nope | rope]``).

    Its ``rope_parameters`` are keyed by rope kind, not layer type: ``"main"`` (``rope_theta``, unscaled) on
    the sliding layers, ``"compress"`` (``compress_rope_theta`` and the flat scaling dict; YaRN's attention
    factor 1 unless given) on the compressed ones (CSA, HCA). A ``config.json`` is nested as its class does.
    """
    d = RopeDefaults(
        4096, 64, 1048576, head_dim=512, partial=64 / 512, layout="interleaved", rope_at_end=True
    )
    n, head_dim = required_count(cfg, model_type), heads_and_head_dim(cfg, model_type, d)[1]
    types = layer_types(cfg, model_type)
    if types is None:  # its class's default: two HCA layers, then CSA and HCA in turn
        ratios = cfg.get("compress_ratios") or [128] * min(n, 2) + [4 if i % 2 else 128 for i in range(n - 2)]
        # (its class keeps the first num_hidden_layers: V4's list has one more, for its MTP layer)
        ok = isinstance(ratios, (list, tuple)) and len(ratios) >= n
        if not ok or any(not isinstance(r, int) or r not in _DSV4_TYPES for r in ratios[:n]):
            raise ValueError(
                f"{model_type} config: compress_ratios must list one of {sorted(_DSV4_TYPES)} for each of the "
                f"{n} layers, got {ratios!r}"
            )
        types = [_DSV4_TYPES[r] for r in ratios[:n]]
    raw = rope_dict(cfg, model_type)
    if all(isinstance(raw.get(kind), Mapping) for kind in ("main", "compress")):
        missing = [kind for kind in ("main", "compress") if raw[kind].get("partial_rotary_factor") is None]
        if missing:  # (its class writes a top-level one in only when given; its code else reads 1.0, or the
            # class's 64 / 512 where a scaled init copies it in first: a config object cannot tell which)
            raise ValueError(
                f"{model_type} config: rope_parameters[{missing[0]!r}] has no partial_rotary_factor, whose value "
                "its class and code decide by how the config was made; give it in each of rope_parameters' dicts"
            )
    else:  # nest as its class does
        partial = get(cfg, "partial_rotary_factor")
        if partial is None and cfg.get("qk_rope_head_dim") is not None:
            partial = positive_int(cfg, model_type, "qk_rope_head_dim") / head_dim
        common = {"partial_rotary_factor": d.partial if partial is None else partial}
        flat = {k: v for k, v in raw.items() if k != "rope_theta"}  # (the flat dict's own base is not read)
        kind = rope_type_of(flat)
        compress = {**flat, "rope_type": kind, "rope_theta": get(cfg, "compress_rope_theta", default=1.6e5)}
        raw = {
            "main": {"rope_type": "default", "rope_theta": get(cfg, "rope_theta", default=1e4), **common},
            "compress": ({"attention_factor": 1.0} if kind == "yarn" else {}) | compress | common,
        }
    for kind in ("main", "compress"):
        check_type_dict(raw[kind], model_type, f"rope_parameters[{kind!r}]")
    built = {
        kind: build_rope(cfg, model_type, d, head_dim, params=raw[kind], where=f"rope_parameters[{kind!r}]")
        for kind in ("main", "compress")
    }
    return [built["main" if t == "sliding_attention" else "compress"] for t in types]


def dots3_note(cfg: Config, model_type: str, causal: bool | None) -> Layers:
    """dots3 Note: MLA in every layer, interleaved RoPE on each layer's ``q_pe`` / ``k_pe`` (``qk_rope_head_dim``
    channels, a layer's ``per_layer_config`` entry giving its own) at its layer type's ``rope_parameters``.

    Its config class writes ``partial_rotary_factor = qk_rope_head_dim / head_dim`` into each dict, so that its
    rotary's frequencies (computed for ``head_dim * partial_rotary_factor`` channels) span the rotated ones:
    posenc checks that they do, and builds the RoPE of the rotated channels.
    """
    d = RopeDefaults(5120, 128, 524288, theta=80_000_000.0, layout="interleaved")
    types, raw = layer_types(cfg, model_type), rope_dict(cfg, model_type)
    if types is None or not all(isinstance(raw.get(t), Mapping) for t in types):
        raise ValueError(
            f"{model_type} config: needs 'layer_types' and one rope_parameters dict per layer type, as its config "
            f"class writes them; got layer_types={cfg.get('layer_types')!r}, rope_parameters keys {sorted(raw)}"
        )
    overrides = {int(i): entry or {} for i, entry in (cfg.get("per_layer_config") or {}).items()}
    built: dict[tuple[str, int], PositionalEncoding] = {}
    layers = []
    for i, name in enumerate(types):
        entry = {**cfg, **overrides.get(i, {})}
        rotated = positive_int(entry, model_type, "qk_rope_head_dim", default=64)
        what = f"{model_type} config: rope_parameters[{name!r}]['partial_rotary_factor']"
        partial = check_positive_float(what, raw[name].get("partial_rotary_factor", 1.0))
        spanned = int(positive_int(entry, model_type, "head_dim", default=256) * partial)
        if spanned != rotated:
            raise ValueError(
                f"{model_type} config: layer {i} rotates qk_rope_head_dim={rotated} channels, but its "
                f"rope_parameters[{name!r}] give frequencies for head_dim * partial_rotary_factor = {spanned}"
            )
        if (name, rotated) not in built:
            where = f"rope_parameters[{name!r}]"
            check_type_dict(raw[name], model_type, where)
            params = {k: v for k, v in raw[name].items() if k != "partial_rotary_factor"}
            built[name, rotated] = build_rope(cfg, model_type, d, rotated, params=params, where=where)
        layers.append(built[name, rotated])
    return layers
