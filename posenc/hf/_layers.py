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
from ._read import GEMMA4_ROPE, Config, Convert, get, positive_int, rope_dict
from ._rope import RopeDefaults, build_rope, heads_and_head_dim
from ._speech import SPEECH_MODEL_TYPES

#: Layer type names transformers knows besides those a config lists.
_KNOWN_TYPES = frozenset({"full_attention", "sliding_attention", "chunked_attention"})
#: Layer types whose blocks read no positions: transformers' recurrent layers (Mamba, gated DeltaNet, MiniMax's
#: lightning attention; :func:`layer_types` renames the legacy ``"mamba"``), LFM's convolutions, Nemotron-H's MLP
#: and MoE blocks.
NO_POSITION_TYPES = frozenset({"linear_attention", "conv", "mlp", "moe"})

Layers = list[PositionalEncoding]


def required_count(cfg: Config, model_type: str) -> int:
    """The config's number of layers (of the encoder, for the speech models)."""
    if model_type in SPEECH_MODEL_TYPES:  # (speech) encoder layers
        return positive_int(cfg, model_type, SPEECH_MODEL_TYPES[model_type][1], default=24)
    if cfg.get("num_hidden_layers") is None:  # (NemotronH's class counts its layers by its pattern)
        pattern = get(cfg, "layer_types", "layers_block_type")
        if isinstance(pattern, list) and pattern:
            return len(pattern)
    return positive_int(cfg, model_type, "num_hidden_layers")


def layer_count(cfg: Config, model_type: str) -> int | None:
    """The config's number of layers, or ``None`` when it gives none."""
    given = model_type in SPEECH_MODEL_TYPES or cfg.get("num_hidden_layers") is not None
    return required_count(cfg, model_type) if given else None


#: transformers' old layer type names, which every config class renames (LFM's "attention")
_RENAMED_TYPES = {
    "mamba": "linear_attention",
    "attention": "full_attention",
    "deepseek_sparse_attention": "indexed_attention",
    "qwen_sparse_attention": "indexed_attention",
}
#: Hybrids whose config class derives its layer types where a config.json gives none: full attention every
#: ``cfg[key]`` (else ``default``) layers, the last of each group, and linear attention in the others
_EVERY: dict[str, tuple[str | None, int, str]] = {
    **dict.fromkeys(
        ("qwen3_next", "qwen3_5", "qwen3_5_moe"), ("full_attention_interval", 4, "full_attention")
    ),
    "qwen4_exp": ("full_attention_interval", 4, "indexed_attention"),
    "bailing_hybrid": ("layer_group_size", 6, "full_attention"),
    "olmo_hybrid": (None, 4, "full_attention"),  # (and at least its last layer)
}


def layer_types(cfg: Config, model_type: str) -> list[str] | None:
    """The config's ``layer_types`` (checked against ``num_hidden_layers``; old names renamed), else those a
    hybrid's config class reads from its ``config.json`` (Zamba's ``layers_block_type``, RecurrentGemma's
    ``block_types`` in turn, Bamba's ``attn_layer_indices``) or derives (:data:`_EVERY`; MiniMax: full attention
    in every other layer from the first; Granite MoE hybrid: Mamba throughout), else ``None``."""
    key = next((k for k in ("layer_types", "layers_block_type") if cfg.get(k) is not None), None)
    family = model_type.split(" ")[0].removesuffix("_text")
    if key is None and family in (*_EVERY, "minimax", "granitemoehybrid"):
        n = required_count(cfg, model_type)
        if family not in _EVERY:  # (MiniMax, Granite MoE hybrid)
            return [
                "linear_attention" if family == "granitemoehybrid" or i % 2 else "full_attention"
                for i in range(n)
            ]
        every_key, every, full = _EVERY[family]
        every = positive_int(cfg, model_type, every_key, every) if every_key else every
        types = [full if (i + 1) % every == 0 else "linear_attention" for i in range(n)]
        if family == "olmo_hybrid" and full not in types:
            types[-1] = full
        return types
    if key is None:
        if isinstance(blocks := cfg.get("block_types"), list) and blocks:  # RecurrentGemma: local attention
            n = required_count(cfg, model_type)
            return ["linear_attention" if b == "recurrent" else "sliding_attention" for b in (blocks * n)[:n]]
        if "attn_layer_indices" in cfg:  # Bamba: attention at these layers, Mamba in the others
            attention = cfg["attn_layer_indices"] or ()
            return [
                "full_attention" if i in attention else "linear_attention"
                for i in range(required_count(cfg, model_type))
            ]
        return None
    types = per_layer(cfg, model_type, key, "str", "one layer type")
    for i, name in enumerate(types):
        if not isinstance(name, str):
            raise TypeError(f"{model_type} config: {key}[{i}] must be a str, got {name!r}")
    types = [_RENAMED_TYPES.get(name, name) for name in types]
    if model_type in _LAST_GLOBAL:
        types[-1] = "full_attention"
    return types


#: Whose config classes force the last layer to full attention, whatever ``layer_types`` says (Gemma 4's kin).
_LAST_GLOBAL = frozenset("gemma4_text diffusion_gemma_text embedding_gemma2_text gemma4_unified_text".split())


def per_layer(cfg: Config, model_type: str, key: str, kind: str, one: str) -> list:
    """``cfg[key]``: a list with one entry per layer (``one``, entries of type ``kind``)."""
    n, values = required_count(cfg, model_type), cfg[key]
    if not isinstance(values, Sequence) or isinstance(values, (str, bytes)):
        raise TypeError(f"{model_type} config: {key} must be a list of {kind}, got {type(values).__name__}")
    if len(values) != n:
        raise ValueError(
            f"{model_type} config: {key} has {len(values)} entries, but num_hidden_layers={n}; give {one} per layer"
        )
    return list(values)


def rope_flags(cfg: Config, model_type: str) -> list[bool]:
    """``no_rope_layers`` as transformers reads it: 1 (RoPE) or 0 (NoPE) per layer; default every 4th is NoPE."""
    n = required_count(cfg, model_type)
    flags = cfg.get("no_rope_layers")
    if not flags:  # transformers: None or [] -> the default pattern
        interval = positive_int(cfg, model_type, "no_rope_layer_interval", default=4)
        return [(i + 1) % interval != 0 for i in range(n)]
    flags = per_layer(cfg, model_type, "no_rope_layers", "0/1", "one 0 (no RoPE) or 1 (RoPE)")
    for i, flag in enumerate(flags):
        if flag not in (0, 1) or not isinstance(flag, int):  # bools are ints: True/False pass
            raise ValueError(f"{model_type} config: no_rope_layers[{i}] must be 0 or 1, got {flag!r}")
    return [bool(flag) for flag in flags]


def sliding_windows(cfg: Config, model_type: str, config: Any, *, known: bool, n: int) -> list[int | None]:
    """The sliding window of each of the ``n`` layers (of one stack; ``None``: attends to every key),
    transformers' rule.

    A query at ``i`` sees keys ``j`` with ``i - W < j <= i`` (causal, transformers'
    ``sliding_window_overlay``: ``W`` keys) or ``|i - j| <= W // 2`` (ModernBERT, bidirectional):
    the meaning of ``posenc.attention(..., window=W)``.

    The layer types are the config's ``layer_types``, else derived as the config class does: a
    fixed pattern (Gemma, Cohere 2, GPT-OSS), the layers from ``max_window_layers`` on when
    ``use_sliding_window`` (Qwen2 and kin), SmolLM3's NoPE layers, or every layer for models whose
    attention reads ``sliding_window`` in every layer (Mistral, Mixtral, Phi-3, Starcoder2).
    ``known``: ``model_type`` is in the conversion table, whose other models never slide
    (Qwen3-VL-MoE drops its ``sliding_window``; Llama 4's chunked layers are refused before).
    A model outside the table slides as its ``layer_types`` say. Without them, the fields the class
    of ``config`` (the config object, or the dict) declares decide, as in transformers' mask helpers:
    every layer when the class declares ``sliding_window`` but no ``layer_types`` (transformers'
    generic rule), none when it declares neither (the model does not read a stray ``sliding_window``);
    a dict's ``sliding_window`` is refused, its class may derive the layer types in its own code.
    """
    rule, default_window, arg = _WINDOWS.get(model_type, ("none" if known else "any", None, None))
    key = {"modernbert": "local_attention", "gpt_neo": "window_size"}.get(model_type, "sliding_window")
    # (a key the config gives, even null, wins: its class keeps it)
    window = cfg[key] if key in cfg else default_window
    if window is None and model_type == "dots3_note_text":  # (its class reads a null as its default)
        window = default_window
    # ModernBERT's class sets local_attention = 2 * a sliding_window given (a dict's: its to_dict() has none)
    if model_type == "modernbert" and cfg.get("sliding_window") is not None:
        window = 2 * positive_int(cfg, model_type, "sliding_window")
    # the Qwen-style configs (and SmolLM3) drop sliding_window without use_sliding_window (its class default: _read)
    use = cfg.get("use_sliding_window")
    if use is not None and not check_bool(f"{model_type} config: use_sliding_window", use):
        window = None
    if rule == "none" or window is None:
        return [None] * n
    types = table_types(cfg, model_type) if rule == "pattern" else layer_types(cfg, model_type)
    if rule == "minimax" and types is not None:  # (its full-attention layers read sliding_window)
        types = ["sliding_attention" if t == "full_attention" else t for t in types]
    if types is None:  # as the config class derives them when a config.json leaves them out
        if rule == "any" and (isinstance(config, Mapping) or hasattr(type(config), "layer_types")):
            raise ValueError(
                f"{model_type} config: 'sliding_window' without 'layer_types': its config class may derive its "
                "layer types in its own code; pass the config object (its to_dict() carries them) or give "
                "'layer_types'"
            )
        if rule == "any" and not hasattr(type(config), "sliding_window"):
            return [None] * n
        if rule == "smollm3":  # the NoPE layers slide
            types = [
                "full_attention" if rope else "sliding_attention" for rope in rope_flags(cfg, model_type)
            ]
        elif rule == "gpt_neo":
            # its "local" layers (attention_layers, expanded by its class from attention_types)
            kinds = cfg.get("attention_layers") or [
                kind for pattern, repeat in get(cfg, "attention_types", default=arg) for _ in range(repeat)
                for kind in pattern
            ]  # fmt: skip
            if len(kinds) != n or not set(kinds) <= {"global", "local"}:
                raise ValueError(
                    f"{model_type} config: attention_layers must be {n} entries of 'global' or 'local', got {kinds!r}"
                )
            types = ["sliding_attention" if kind == "local" else "full_attention" for kind in kinds]
        elif rule == "qwen":  # from max_window_layers on
            first = get(cfg, "max_window_layers", default=arg)
            first = check_positive_int(f"{model_type} config: max_window_layers", first) if first else 0
            types = ["sliding_attention" if i >= first else "full_attention" for i in range(n)]
        else:  # every layer reads sliding_window (Mistral; transformers' generic rule)
            types = ["sliding_attention"] * n
    if "sliding_attention" not in types:
        return [None] * n
    window = check_positive_int(f"{model_type} config: {key}", window)
    windows = [window if t == "sliding_attention" else None for t in types]
    if model_type == "neomme":
        # per layer: its per_layer_config's, else every other sliding layer's 1024 (as its class derives them)
        given = cfg.get("per_layer_config")
        if given is None:
            long = [i for i, t in enumerate(types) if t == "sliding_attention"][1::2]
            windows = [1024 if i in long else w for i, w in enumerate(windows)]
        else:
            entries = {
                int(i): entry
                for i, entry in (given.items() if isinstance(given, Mapping) else enumerate(given))
            }
            windows = [entries.get(i, {}).get("sliding_window", w) for i, w in enumerate(windows)]
    return _bidirectional(cfg, model_type, windows)


#: Bidirectional models whose sliding layers see ``|i - j| <= sliding_window`` (transformers'
#: ``sliding_window_bidirectional_overlay``): posenc's ``W`` (``|i - j| <= W // 2``) is twice it (so is T5Gemma's
#: encoder's, a t5_gemma_module that is no decoder)
_BIDIRECTIONAL = frozenset("embedding_gemma2_text neomme openai_privacy_filter ultrabert".split())
#: Models that slide both ways by masks of their own: refused
_BIDIRECTIONAL_UNREAD = frozenset(
    "diffusion_gemma_text gemma4_assistant muse_glimmer_assistant t5gemma2 t5gemma2_encoder t5gemma2_decoder "
    "t5gemma2_text".split()
)


def _bidirectional(cfg: Config, model_type: str, windows: list[int | None]) -> list[int | None]:
    """``windows`` as posenc's ``W`` where the model attends both ways.

    Raises:
        ValueError: ``use_bidirectional_attention`` (True, or ``"all"``) with sliding layers, in a model other than
            Gemma 3 (EmbeddingGemma).
    """
    if model_type in _BIDIRECTIONAL or (model_type == "t5_gemma_module" and not cfg.get("is_decoder")):
        return [None if w is None else 2 * w for w in windows]
    if model_type in _BIDIRECTIONAL_UNREAD and set(windows) != {None}:
        raise ValueError(
            f"{model_type} config: its attention slides both ways by a mask of its own, which posenc does not read"
        )
    # (True, or Gemma 4's "all"; its "vision" leaves the text causal)
    if cfg.get("use_bidirectional_attention") not in (True, "all") or set(windows) == {None}:
        return windows
    if model_type != "gemma3_text":
        raise ValueError(
            f"{model_type} config: use_bidirectional_attention=True with sliding layers, whose mask posenc does not "
            "read for this model"
        )
    # Gemma 3's class keeps sliding_window // 2 + 1 (its to_dict() writes the one given back), its mask |i - j| < that
    return [None if w is None else 2 * (w // 2) for w in windows]


def refuse_local_attention(cfg: Config, model_type: str, stack: str | None) -> None:
    """Refuse the windows of a stack whose attention is local in a way ``window=`` does not express.

    Raises:
        ValueError: Longformer's and LED's encoder (``attention_window``, and global tokens), BigBird's and
            BigBird-Pegasus's encoder with ``attention_type='block_sparse'``, layer types that slide by rules of
            their own, DeepSeek V4's compressed layers, Moonshine Streaming's encoder (a ``(left, right)`` window
            per layer), Moshi's ``sliding_window`` (a window when generating, none in its forward), chunked
            layers (Llama 4's).
    """
    # (LED's and BigBird-Pegasus's encoder: their decoders attend causally; the other models have one stack)
    encoder = stack in (None, "encoder") or model_type in ("longformer", "big_bird")
    odd = sorted(
        {t for t in cfg.get("layer_types") or () if "sliding" in str(t) and t != "sliding_attention"}
    )
    if encoder and model_type in ("longformer", "led"):
        what = (
            f"attention_window={get(cfg, 'attention_window', default=512)!r}: each token sees the keys within half "
            "of it, and tokens marked global see (and are seen by) all"
        )
    elif (
        encoder
        and model_type in ("big_bird", "bigbird_pegasus")
        and cfg.get("attention_type", "block_sparse") == "block_sparse"
    ):
        what = "attention_type='block_sparse': blocks of sliding, random and global keys (full attention on short inputs)"
    elif odd:  # (Inkling's hybrid_sliding, Unlimited-OCR's reference_sliding_attention)
        what = f"layer_types {odd} slide by rules of its own code"
    elif model_type == "deepseek_v4" and set(cfg.get("layer_types") or ("?",)) != {"sliding_attention"}:
        what = (
            "its compressed layers (CSA, HCA) see the sliding_window latest keys and compressed entries of the "
            "earlier ones"
        )
    elif "chunked_attention" in (cfg.get("layer_types") or ()) or (
        model_type == "llama4_text" and cfg.get("attention_chunk_size", 8192) is not None
        and cfg.get("layer_types") is None
    ):  # fmt: skip
        chunk = cfg.get("attention_chunk_size", 8192)
        what = (
            f"its chunked_attention layers attend within chunks of attention_chunk_size={chunk} (in "
            f"posenc.attention: document_ids = positions // {chunk}), not a window"
        )
    elif model_type == "moshi" and cfg.get("sliding_window") is not None:
        what = (
            f"sliding_window={cfg['sliding_window']}: its forward masks no window, but the cache transformers "
            "builds for it when generating keeps only that many keys"
        )
    elif cfg.get("sliding_windows") is not None:  # (Moonshine Streaming's encoder)
        what = f"sliding_windows={cfg['sliding_windows']!r}: keys (left, right) of each query, per layer"
    else:
        return
    raise ValueError(f"{model_type} config: {what}, which posenc.attention's window= does not express")


def table_types(cfg: Config, model_type: str) -> list[str]:
    """The ``layer_types`` of a model with a ``"pattern"`` in :data:`_WINDOWS`, else as its config class
    derives them: every ``n``-th layer full (the last of each group; ModernBERT: the first), ``n`` from the
    key its class reads."""
    every, key = _WINDOWS[model_type][2]
    every = positive_int(cfg, model_type, key, default=every) if key else every
    shift = 0 if model_type == "modernbert" else 1

    def kind(i: int) -> str:  # the last layer of each group of `every` is full (ModernBERT: the first)
        return "sliding_attention" if (i + shift) % every else "full_attention"

    types = layer_types(cfg, model_type) or [kind(i) for i in range(required_count(cfg, model_type))]
    if model_type in _LAST_GLOBAL:  # (derived: the last layer of the pattern)
        types[-1] = "full_attention"
    return types


#: How each table model's layers slide (types outside the table: "any"): the rule, the config class's
#: window (``sliding_window``; ModernBERT: ``local_attention``) where a config.json leaves it out, and the
#: rule's default: Qwen's ``max_window_layers``; the patterns' ``(n, the key of n)`` (:func:`table_types`).
_WINDOWS: dict[str, tuple[str, int | None, Any]] = {
    "gemma2": ("pattern", 4096, (2, None)),
    "gpt_oss": ("pattern", 128, (2, None)),
    "gemma3_text": ("pattern", 4096, (6, "sliding_window_pattern")),
    "gemma3n_text": ("pattern", 512, (5, None)),
    "gemma4_text": ("pattern", 512, (6, None)),
    "cohere2": ("pattern", 4096, (4, "sliding_window_pattern")),
    "modernbert": ("pattern", 128, (3, "global_attn_every_n_layers")),
    "qwen2": ("qwen", 4096, 28),
    "qwen3": ("qwen", 4096, 28),
    "qwen2_vl_text": ("qwen", 4096, 80),
    "qwen2_5_vl_text": ("qwen", 4096, 80),
    "smollm3": ("smollm3", None, None),
    "mistral": ("all", 4096, None),
    # its sliding layers (its others: sparse attention by an indexer); every layer (DeepSeek V4's: its compressed
    # ones refused above)
    "dots3_note_text": ("any", 512, None),
    "deepseek_v4": ("all", 128, None),
    "minimax": ("minimax", None, None),
    # its local layers see the window_size keys up to their own
    "gpt_neo": ("gpt_neo", 256, [[["global", "local"], 12]]),
    **dict.fromkeys(("mixtral", "phi3", "starcoder2"), ("all", None, None)),
}


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


def sliding_layers(cfg: Config, model_type: str, all_without_window: bool = False) -> list[bool]:
    """True for the sliding layers, the only ones Cohere 2 and its kin rotate; with ``all_without_window``
    (EXAONE 4's kin) every layer when there is no ``sliding_window``."""
    types = table_types(cfg, model_type) if model_type in _WINDOWS else layer_types(cfg, model_type)
    if types is None:
        raise ValueError(
            f"{model_type} config: its attention rotates only some layers, chosen by 'layer_types', which is missing"
        )
    if all_without_window and cfg.get("sliding_window") is None:
        return [True] * len(types)
    return [t == "sliding_attention" for t in types]


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
