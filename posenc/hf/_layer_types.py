"""What each layer of a ``transformers`` model is: its layer type, whether it rotates, its sliding window.

transformers 5 configs list ``layer_types``; older ones and hybrids give a pattern (Gemma's every ``n``-th
layer global, Qwen's ``max_window_layers``, SmolLM3's ``no_rope_layers``, Zamba's ``layers_block_type``...),
which :func:`layer_types` and :func:`table_types` expand as the config classes do. :func:`sliding_windows`
gives each layer's window as ``posenc.attention``'s ``window=`` reads it; :func:`refuse_local_attention`
refuses the local attention that ``window=`` does not express.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._checks import check_bool, check_positive_int
from ._read import Config, class_defaults, get, positive_int
from ._speech import SPEECH_MODEL_TYPES

#: Layer types whose blocks read no positions: transformers' recurrent layers (Mamba, gated DeltaNet, MiniMax's
#: lightning attention; :func:`layer_types` renames the legacy ``"mamba"``), LFM's convolutions, Nemotron-H's MLP
#: and MoE blocks.
NO_POSITION_TYPES = frozenset({"linear_attention", "conv", "mlp", "moe"})


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
#: The layer types transformers' configs allow (its ``ALLOWED_LAYER_TYPES``, 5.24), the old names above and
#: Nemotron-H's "mlp"
_KNOWN_TYPES = frozenset(
    "full_attention sliding_attention chunked_attention window_attention indexed_attention compressed_sparse_attention "
    "heavily_compressed_attention minimax_m3_sparse reference_sliding_attention hybrid hybrid_sliding "
    "linear_attention conv moe mlp sparse dense".split()
).union(_RENAMED_TYPES)
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
    in every other layer from the first; Granite MoE hybrid: Mamba throughout; LFM3-VL's vision tower), else
    ``None``."""
    key = next((k for k in ("layer_types", "layers_block_type") if cfg.get(k) is not None), None)
    family = model_type.split(" ")[0].removesuffix("_text")
    if key is None and family in (*_EVERY, "minimax", "granitemoehybrid", "lfm3_vl_vision"):
        n = required_count(cfg, model_type)
        if family == "lfm3_vl_vision":  # (attention in the even layers from the third; conv blocks between)
            return ["conv" if i < 2 or i % 2 else "full_attention" for i in range(n)]
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
        # RecurrentGemma: local attention
        if isinstance(blocks := cfg.get("block_types"), (list, tuple)) and blocks:
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
        if name not in _KNOWN_TYPES:  # (else read as full attention, which it may not be)
            raise ValueError(
                f"{model_type} config: {key}[{i}] is {name!r}, not a layer type transformers knows; "
                f"expected one of {sorted(_KNOWN_TYPES)}"
            )
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
    if model_type == "longt5" and not cfg.get("is_decoder"):  # its local encoder: |i - j| <= local_radius
        return [2 * positive_int(cfg, model_type, "local_radius", default=127)] * n
    rule, arg = _WINDOWS.get(model_type, ("none" if known else "any", None))
    key = {"modernbert": "local_attention", "gpt_neo": "window_size"}.get(model_type, "sliding_window")
    # (a key the config gives, even null, wins: its class keeps it; a key left out: its class's, from config_dict)
    window = cfg.get(key)
    if window is None and model_type == "dots3_note_text":  # (its class reads a null as its default)
        window = class_defaults(model_type)[key]
    # ModernBERT's class sets local_attention = 2 * a sliding_window given (a dict's: its to_dict() has none)
    if model_type == "modernbert" and cfg.get("sliding_window") is not None:
        window = 2 * positive_int(cfg, model_type, "sliding_window")
    # The classes that declare use_sliding_window (Qwen-style, SmolLM3; a dict's: _read's defaults) drop
    # sliding_window without it; the others' code never reads a stray one.
    declared = isinstance(config, Mapping) and "use_sliding_window" in class_defaults(model_type)
    use = cfg.get("use_sliding_window") if declared or hasattr(type(config), "use_sliding_window") else None
    if use is not None and not check_bool(f"{model_type} config: use_sliding_window", use):
        window = None
    if rule == "none" or window is None:
        return [None] * n
    if rule == "every":  # (a layer_types its code does not read)
        types = None
    else:
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


#: Models whose attention reads no ``sliding_window`` (their forward masks causally) while the ``DynamicCache``
#: their ``generate`` builds from the config keeps only that many keys: no one window describes them
_WINDOW_IN_CACHE_ONLY = frozenset(
    "kyutai_speech_to_text moshi moshi_depth qwen3_omni_moe_talker_text qwen3_omni_moe_text".split()
)


#: Swin and its kin (CLAP's audio tower is one): windows shifted every other layer
_SHIFTED_WINDOWS = frozenset("swin swinv2 swin2sr donut-swin maskformer-swin clap_audio_model".split())
#: Attention that is local in ways ``window=`` does not express, by the field that turns it on (one a config.json
#: leaves out: its class's, ``_read._DEFAULTS_BY_KEY``): windows of an image (Qwen2.5-VL's vision tower and its
#: kin, SAM's and ViTDet's, LW-DETR's and RF-DETR's, Swin's shifted ones), chunks of audio frames (Qwen's and
#: Gemma's audio encoders), LongT5's transient-global encoder, Reformer's local and LSH layers
_LOCAL_FIELDS: dict[str, tuple[Callable[[Config, str, bool], bool], str]] = {
    "fullatt_block_indexes": (
        lambda cfg, t, enc: bool(cfg.get("window_size")),
        "the other layers attend within windows of window_size pixels of the image",
    ),
    "global_attn_indexes": (
        lambda cfg, t, enc: bool(cfg.get("window_size")),
        "the other layers attend within windows of window_size x window_size patches",
    ),
    "num_windows": (
        lambda cfg, t, enc: (cfg.get("num_windows") or 1) > 1,
        "its windowed layers attend within num_windows windows of the image",
    ),
    "window_size": (
        lambda cfg, t, enc: t in _SHIFTED_WINDOWS and bool(cfg.get("window_size")),
        "its layers attend within shifted windows of window_size x window_size patches",
    ),
    "n_window": (
        lambda cfg, t, enc: bool(cfg.get("n_window")),
        "its attention runs within chunks of 2 * n_window frames",
    ),
    **dict.fromkeys(
        ("conf_attention_chunk_size", "attention_chunk_size"),
        (
            lambda cfg, t, enc: (
                t.endswith("_audio")
                and bool(cfg.get("attention_chunk_size") or cfg.get("conf_attention_chunk_size"))
            ),
            "its attention runs in chunks of frames, with left and right context",
        ),
    ),
    "encoder_attention_type": (
        lambda cfg, t, enc: enc and t == "longt5" and cfg.get("encoder_attention_type", "local") != "local",
        "its encoder attends within local_radius keys of each token and to transient global tokens (the sums "
        "of blocks)",
    ),
    "attn_layers": (
        lambda cfg, t, enc: t == "reformer",
        "its layers attend within chunks (local) or hashed buckets (lsh)",
    ),
}


def refuse_local_attention(cfg: Config, model_type: str, stack: str | None) -> None:
    """Refuse the windows of a stack whose attention is local in a way ``window=`` does not express.

    Raises:
        ValueError: Longformer's and LED's encoder (``attention_window``, and global tokens), BigBird's and
            BigBird-Pegasus's encoder with ``attention_type='block_sparse'``, layer types that slide by rules of
            their own, DeepSeek V4's compressed layers, Moonshine Streaming's encoder (a ``(left, right)`` window
            per layer), a ``sliding_window`` that only the generation cache reads (Moshi, Kyutai's speech-to-text,
            Qwen3-Omni's text models: :data:`_WINDOW_IN_CACHE_ONLY`), Nemotron's streaming ASR encoder (chunked
            attention), chunked layers (Llama 4's).
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
    elif model_type in _WINDOW_IN_CACHE_ONLY and cfg.get("sliding_window") is not None:
        what = (
            f"sliding_window={cfg['sliding_window']}: its forward masks no window, but the cache transformers "
            "builds for it when generating keeps only that many keys"
        )
    elif model_type == "nemotron_asr_streaming_encoder":
        what = (
            f"sliding_window={get(cfg, 'sliding_window', default=71)!r}: its attention is chunked (chunks of "
            "num_lookahead_tokens + 1 frames; a query sees its own chunk and the (sliding_window - 1) // chunk "
            "chunks before it)"
        )
    elif cfg.get("sliding_windows") is not None:  # (Moonshine Streaming's encoder)
        what = f"sliding_windows={cfg['sliding_windows']!r}: keys (left, right) of each query, per layer"
    elif local := [
        key for key, (on, _) in _LOCAL_FIELDS.items() if key in cfg and on(cfg, model_type, encoder)
    ]:
        what = f"{local[0]}={cfg[local[0]]!r}: {_LOCAL_FIELDS[local[0]][1]}"
    else:
        return
    raise ValueError(f"{model_type} config: {what}, which posenc.attention's window= does not express")


def table_types(cfg: Config, model_type: str) -> list[str]:
    """The ``layer_types`` of a model with a ``"pattern"`` in :data:`_WINDOWS`, else as its config class
    derives them: every ``n``-th layer full (the last of each group; ModernBERT: the first), ``n`` from the
    key its class reads."""
    every, key = _WINDOWS[model_type][1]
    every = positive_int(cfg, model_type, key, default=every) if key else every
    shift = 0 if model_type == "modernbert" else 1

    def kind(i: int) -> str:  # the last layer of each group of `every` is full (ModernBERT: the first)
        return "sliding_attention" if (i + shift) % every else "full_attention"

    types = layer_types(cfg, model_type) or [kind(i) for i in range(required_count(cfg, model_type))]
    if model_type in _LAST_GLOBAL:  # (derived: the last layer of the pattern)
        types[-1] = "full_attention"
    return types


#: How each table model's layers slide (types outside the table: "any"): the rule, and the rule's default:
#: Qwen's ``max_window_layers``; the patterns' ``(n, the key of n)`` (:func:`table_types`). Their class's window
#: where a config.json leaves it out: ``_read._DEFAULTS_BY_KEY``.
_WINDOWS: dict[str, tuple[str, Any]] = {
    **dict.fromkeys(("gemma2", "gpt_oss"), ("pattern", (2, None))),
    "gemma3_text": ("pattern", (6, "sliding_window_pattern")),
    "gemma3n_text": ("pattern", (5, None)),
    "gemma4_text": ("pattern", (6, None)),
    "cohere2": ("pattern", (4, "sliding_window_pattern")),
    "modernbert": ("pattern", (3, "global_attn_every_n_layers")),
    **dict.fromkeys(("qwen2", "qwen3"), ("qwen", 28)),
    **dict.fromkeys(("qwen2_vl_text", "qwen2_5_vl_text"), ("qwen", 80)),
    "smollm3": ("smollm3", None),
    # its sliding layers (its others: sparse attention by an indexer)
    "dots3_note_text": ("any", None),
    "minimax": ("minimax", None),
    # its local layers see the window_size keys up to their own
    "gpt_neo": ("gpt_neo", [[["global", "local"], 12]]),
    # every layer (DeepSeek V4's: its compressed ones refused above)
    **dict.fromkeys(("mistral", "mixtral", "phi3", "starcoder2", "deepseek_v4"), ("all", None)),
    # one mask for every layer; its class has no layer_types and its code reads none (a gpt-oss config.json's)
    "openai_privacy_filter": ("every", None),
}


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
