"""Sliding windows per layer (``posenc.hf.layer_windows``), checked against the masks transformers builds.

Each case builds a tiny model of one architecture from the table (nothing downloaded), registers
an attention function that records the mask each layer receives (and returns zeros), runs one
forward pass, and checks that posenc's window of that layer allows exactly the same keys:
``i - W < j <= i`` in causal models, ``|i - j| <= W // 2`` in ModernBERT. The config object, its
``to_dict()`` and a minimal hand-written ``config.json`` dict must all agree with the model.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import torch

from posenc.hf import SUPPORTED_MODEL_TYPES, layer_windows
from posenc.hf._layer_types import _BIDIRECTIONAL, _WINDOWS

transformers = pytest.importorskip("transformers")
from transformers import AttentionInterface  # noqa: E402
from transformers.masking_utils import AttentionMaskInterface, eager_mask  # noqa: E402

T = 12  # longer than every window below
LAYERS = 6
TINY: dict[str, Any] = {
    "hidden_size": 16,
    "intermediate_size": 16,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "num_hidden_layers": LAYERS,
    "vocab_size": 300_000,  # above every default pad / bos / eos id
}
_SEEN: dict[int, torch.Tensor] = {}


def _capture(
    module: Any,
    query: torch.Tensor,
    key: Any,
    value: torch.Tensor,
    attention_mask: Any = None,
    *_: Any,
    **__: Any,
) -> tuple:
    _SEEN[getattr(module, "layer_idx", len(_SEEN))] = (
        attention_mask  # (OpenAI's privacy filter: in order, no index)
    )
    b, h, t, _d = query.shape
    return query.new_zeros(b, t, h, value.shape[-1]), None


AttentionInterface.register("posenc_mask_capture", _capture)
AttentionMaskInterface.register("posenc_mask_capture", eager_mask)

_MOE = {"num_experts": 2, "num_local_experts": 2, "num_experts_per_tok": 1}
_MROPE = {"rope_parameters": {"rope_type": "default", "mrope_section": [1, 1, 2]}}
#: Gemma 3n's and Gemma 4's per-layer input embeddings, tiny (their defaults, 262,144 ids x 256 per layer, are
#: 1.6 GB at 6 layers and took 15-20 s to initialize); the token ids here are 1..T.
_PER_LAYER = {"vocab_size_per_layer_input": 64, "hidden_size_per_layer_input": 4}
# (model_type, config kwargs): every model with a window rule (posenc.hf._layer_types._WINDOWS), with and without
# the fields that switch windows on, and a few that never slide although their config says so.
CASES: list[tuple[str, dict[str, Any]]] = [
    ("mistral", {"sliding_window": 3}),
    # a stray use_sliding_window (only the Qwen-style classes and SmolLM3 read it): it turned the windows off
    ("mistral", {"sliding_window": 3, "use_sliding_window": False}),
    ("gemma2", {"sliding_window": 3, "use_sliding_window": False}),
    ("mixtral", {"sliding_window": 3, "num_local_experts": 2, "num_experts_per_tok": 1}),
    ("phi3", {"sliding_window": 5}),
    ("starcoder2", {"sliding_window": 3}),
    ("qwen2", {"use_sliding_window": True, "sliding_window": 3, "max_window_layers": 2}),
    ("qwen2", {"use_sliding_window": False, "sliding_window": 3, "max_window_layers": 2}),
    ("qwen2", {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 0}),
    ("qwen3", {"use_sliding_window": True, "sliding_window": 3, "max_window_layers": 4}),
    ("qwen2_vl_text", {"use_sliding_window": True, "sliding_window": 3, "max_window_layers": 1, **_MROPE}),
    ("qwen2_5_vl_text", {"use_sliding_window": True, "sliding_window": 3, "max_window_layers": 5, **_MROPE}),
    ("smollm3", {"use_sliding_window": True, "sliding_window": 3, "no_rope_layer_interval": 2}),
    ("smollm3", {"sliding_window": 3}),
    ("gemma2", {"sliding_window": 3}),
    ("gemma3_text", {"sliding_window": 3, "sliding_window_pattern": 3}),
    ("gemma3_text", {"sliding_window": 3}),
    ("cohere2", {"sliding_window": 4}),
    (
        "gemma3n_text",
        {
            "sliding_window": 3,
            "num_kv_shared_layers": 0,
            "altup_num_inputs": 2,
            "laurel_rank": 4,
            **_PER_LAYER,
        },
    ),
    ("gemma4_text", {"sliding_window": 3, "global_head_dim": 8, "num_kv_shared_layers": 0, **_PER_LAYER}),
    ("gpt_oss", {"sliding_window": 3, "num_local_experts": 2, "num_experts_per_tok": 1}),
    ("gemma2", {"sliding_window": 3, "layer_types": ["full_attention", "sliding_attention"] * 3}),
    ("qwen2", {"use_sliding_window": True, "sliding_window": 3, "layer_types": ["sliding_attention"] * 6}),
    ("llama", {"sliding_window": 3}),
    ("qwen3_vl_moe_text", {"sliding_window": 3, "num_experts": 2, "num_experts_per_tok": 1}),
    ("modernbert", {"local_attention": 4, "global_attn_every_n_layers": 2}),
    ("deepseek_v4", {"sliding_window": 3, "layer_types": ["sliding_attention"] * 6, "q_lora_rank": 8}),
    # bidirectional: |i - j| <= sliding_window (posenc's W twice it; NeoMMe's per layer, EmbeddingGemma's half)
    ("embedding_gemma2_text", {"sliding_window": 3}),
    ("openai_privacy_filter", {"sliding_window": 3, **_MOE}),
    # (a gpt-oss config.json's layer_types, which its code never reads: it gave full layers)
    (
        "openai_privacy_filter",
        {"sliding_window": 3, **_MOE, "layer_types": ["sliding_attention", "full_attention"] * 3},
    ),
    ("ultrabert", {"sliding_window": 2}),
    (
        "neomme",
        {
            "sliding_window": 2,
            "head_dim": 16,
            "per_layer_config": {"1": {"sliding_window": 3}, "5": {"sliding_window": None}},
        },
    ),
    ("gemma3_text", {"sliding_window": 6, "use_bidirectional_attention": True}),
    # its full-attention layers read sliding_window (its others: linear attention)
    ("minimax", {"sliding_window": 3, **_MOE}),
    (
        "dots3_note_text",
        {
            "sliding_window": 3,
            "layer_types": ["indexed_attention", "sliding_attention", "sliding_attention"] * 2,
        },
    ),
    # outside the table (the rule: layer_types, else Qwen2's fields, else every layer)
    ("qwen2_moe", {"use_sliding_window": True, "sliding_window": 3, "max_window_layers": 2, **_MOE}),
    ("qwen2_moe", {"sliding_window": 3, "max_window_layers": 2, **_MOE}),
    ("qwen3_moe", {"use_sliding_window": True, "sliding_window": 3, "max_window_layers": 3, **_MOE}),
    ("ministral", {"sliding_window": 3, "layer_types": ["sliding_attention", "full_attention"] * 3}),
    ("ministral", {"sliding_window": 3, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}),
    (
        "dots1",
        {"sliding_window": 3, "max_window_layers": 2, "n_routed_experts": 2, "num_experts_per_tok": 1}
        | {"moe_intermediate_size": 16, "n_shared_experts": 1, "n_group": 1, "topk_group": 1},
    ),
    ("ministral", {"sliding_window": 3, "layer_types": ["sliding_attention", "full_attention"] * 3}),
    ("ministral", {"sliding_window": 3}),
    ("olmo3", {"sliding_window": 3}),
    ("exaone4", {"sliding_window": 3, "sliding_window_pattern": 3}),
    ("seed_oss", {"sliding_window": 3}),  # a stray key: Seed-OSS never slides
    ("phimoe", {"sliding_window": 3, **_MOE}),
]


def _allowed(window: int | None, bidirectional: bool) -> torch.Tensor:
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    if bidirectional:
        return (i - j).abs() <= (T if window is None else window // 2)
    return (j <= i) & (j > i - (T if window is None else window))


def _model_masks(config: Any, bidirectional: bool) -> list[torch.Tensor | None]:
    _SEEN.clear()
    config._attn_implementation = "posenc_mask_capture"
    model = transformers.AutoModel.from_config(config).eval()
    with torch.no_grad():
        model(input_ids=torch.arange(1, T + 1)[None], attention_mask=torch.ones(1, T, dtype=torch.long))
    masks = []
    for layer in range(LAYERS):
        if layer not in _SEEN:  # (no attention there: MiniMax's linear layers)
            masks.append(None)
            continue
        mask = _SEEN[layer]
        if mask is None:  # no mask needed: every key (bidirectional) or plain causal attention
            masks.append(_allowed(None, bidirectional))
        else:
            masks.append(mask[0, 0] if mask.dtype == torch.bool else mask[0, 0] == 0)
    return masks


@pytest.mark.parametrize(("model_type", "kwargs"), CASES, ids=[f"{t}-{i}" for i, (t, _) in enumerate(CASES)])
def test_windows_match_the_masks_transformers_builds(model_type: str, kwargs: dict[str, Any]) -> None:
    tiny = {k: v for k, v in TINY.items() if model_type != "modernbert" or k != "num_key_value_heads"}
    config = transformers.AutoConfig.for_model(model_type, **{**tiny, **kwargs})
    bidirectional = model_type in {"modernbert", *_BIDIRECTIONAL} or bool(
        kwargs.get("use_bidirectional_attention")
    )
    masks = _model_masks(config, bidirectional)
    minimal = {"model_type": model_type, "num_hidden_layers": LAYERS, **kwargs}
    forms = [config, config.to_dict(), minimal]
    if model_type not in SUPPORTED_MODEL_TYPES and model_type not in _WINDOWS:
        # without a window rule a config class may derive layer_types in code: dicts without them are refused
        # (unless no layer slides: Qwen2-MoE without use_sliding_window), else checked below as the others
        for form in [f for f in forms[1:] if f.get("layer_types") is None]:
            try:
                layer_windows(form)
            except ValueError as err:
                assert "'sliding_window' without 'layer_types'" in str(err)
                forms.remove(form)
    for form in forms:
        windows = layer_windows(form)
        got = [_allowed(w, bidirectional) for w in windows]
        for layer, (mask, want) in enumerate(zip(masks, got, strict=True)):
            assert mask is None or torch.equal(mask, want), (
                model_type,
                kwargs,
                type(form).__name__,
                layer,
                windows,
            )


@pytest.mark.parametrize("model_type", sorted({*SUPPORTED_MODEL_TYPES, *_WINDOWS}))
def test_config_json_defaults_give_the_config_class_windows(model_type: str) -> None:
    """A bare ``config.json`` dict, the config object and its ``to_dict()`` give the same windows."""
    config = transformers.AutoConfig.for_model(model_type)
    # (the encoder-decoders' to_dict() leaves it out; SAM's trackers have none: their memory attention's layers)
    n = {"num_hidden_layers": config.num_hidden_layers} if hasattr(config, "num_hidden_layers") else {}
    bare = {"model_type": model_type, **n}
    forms = (config, {**config.to_dict(), **n}, bare)
    if model_type in ("deepseek_v4", "llama4_text", "sam3_vit_model"):  # (refused: compressed, chunked or
        for form in forms:  # windowed layers, tests above and below)
            with pytest.raises(
                ValueError, match=r"compressed layers|chunked_attention layers|global_attn_indexes"
            ):
                layer_windows(form)
        return
    if model_type == "dots3_note_text":  # (its class derives layer_types, which posenc does not: refused)
        with pytest.raises(ValueError, match="'sliding_window' without 'layer_types'"):
            layer_windows(bare)
        bare["layer_types"] = config.layer_types
    # (LED's encoder: refused, local attention with global tokens; LongT5's stacks' windows differ)
    for stack in {"led": ["decoder"], "longt5": ["encoder", "decoder"]}.get(model_type, [None]):
        windows = [layer_windows(form, stack=stack) for form in forms]
        assert windows[0] == windows[1] == windows[2]


@pytest.mark.parametrize("model_type", sorted(_WINDOWS))
def test_a_config_json_that_gives_a_null_window_gives_none(model_type: str) -> None:
    """``"sliding_window": null`` (with ``use_sliding_window``) is kept by the class: every layer attends to every
    key. posenc read it as absent and took the class default (Qwen2: windows of 4096 from max_window_layers on)."""
    key = "local_attention" if model_type == "modernbert" else "sliding_window"
    given = {"num_hidden_layers": 4, "use_sliding_window": True, "max_window_layers": 2, key: None}
    if model_type == "dots3_note_text":  # (a dict must give them; its class reads the null as 512)
        given["layer_types"] = ["indexed_attention", "sliding_attention"] * 2
    try:
        config = transformers.AutoConfig.for_model(model_type, **given)
    except Exception:  # (a strict dataclass's validation error)
        pytest.skip(f"{model_type}'s class refuses a null {key}")
    assert layer_windows({"model_type": model_type, **given}) == layer_windows(config)


#: The model types whose config class declares use_sliding_window, default False (Qwen2-MoE, Qwen2.5-Omni's
#: thinker and talker, DeepSeek-OCR 2's encoder, ...)
_USE_SLIDING_OFF = sorted(
    model_type
    for model_type, config_class in transformers.models.auto.configuration_auto.CONFIG_MAPPING.items()
    if getattr(getattr(config_class, "__dataclass_fields__", {}).get("use_sliding_window"), "default", None)
    is False
)


@pytest.mark.parametrize("model_type", _USE_SLIDING_OFF)
def test_a_config_json_without_use_sliding_window_slides_nowhere_as_its_class(model_type: str) -> None:
    """Their classes drop sliding_window unless use_sliding_window, layer_types or not: posenc read a
    config.json's sliding_window at face value (windows of 7 on its sliding layers)."""
    given = {
        "num_hidden_layers": 3,
        "sliding_window": 7,
        "layer_types": ["full_attention", *["sliding_attention"] * 2],
    }
    config = transformers.AutoConfig.for_model(model_type, **given)
    assert layer_windows({"model_type": model_type, **given}) == layer_windows(config) == [None] * 3


def test_a_modernbert_config_json_with_sliding_window_is_read_as_its_class_reads_it() -> None:
    """ModernBERT's class turns a ``sliding_window`` (the half window) into ``local_attention = 2 *`` it, over a
    ``local_attention`` given beside it; posenc read only ``local_attention`` (windows of 128, not 64)."""
    given = {"num_hidden_layers": 3, "sliding_window": 32, "local_attention": 100}
    config = transformers.ModernBertConfig(**given)
    assert layer_windows({"model_type": "modernbert", **given}) == layer_windows(config) == [None, 64, 64]


def test_gpt_neo_local_layers_see_the_window_size_keys_up_to_their_own() -> None:
    """GPT-Neo's "local" layers (expanded from attention_types) see the window_size keys up to the query, its
    "global" ones every earlier key: its own attention weights in a forward pass (zero exactly where masked)."""
    kinds = [[["global", "local"], 1], [["local"], 2]]
    config = transformers.GPTNeoConfig(
        vocab_size=64, hidden_size=16, num_heads=2, num_layers=4, window_size=3, attention_types=kinds,
        max_position_embeddings=T, attn_implementation="eager",
    )  # fmt: skip
    model = transformers.AutoModel.from_config(config).eval()
    with torch.no_grad():
        weights = model(input_ids=torch.arange(1, T + 1)[None], output_attentions=True).attentions
    minimal = {"model_type": "gpt_neo", "num_layers": 4, "window_size": 3, "attention_types": kinds}
    for form in (config, config.to_dict(), minimal):
        windows = layer_windows(form)
        assert windows == [None, 3, 3, 3]
        for layer, window in enumerate(windows):
            assert torch.equal(weights[layer][0, 0] > 0, _allowed(window, bidirectional=False))


@pytest.mark.parametrize(
    ("model_type", "stack", "field"),
    [
        ("longformer", None, "attention_window"),
        ("led", "encoder", "attention_window"),
        ("big_bird", None, "attention_type='block_sparse'"),
        ("bigbird_pegasus", "encoder", "attention_type='block_sparse'"),
        ("deepseek_v4", None, "compressed layers"),
        ("moonshine_streaming_encoder", None, "sliding_windows="),
        ("moshi", None, "its forward masks no window"),
        ("moshi_depth", None, "its forward masks no window"),
        ("kyutai_speech_to_text", None, "its forward masks no window"),
        ("nemotron_asr_streaming_encoder", None, "its attention is chunked"),
        # windows of an image, chunks of audio frames, Reformer (LongT5's transient-global encoder: test_configs)
        ("qwen2_5_vl_vision", None, "fullatt_block_indexes="),
        ("exaone4_5_vision", None, "fullatt_block_indexes="),
        ("sam3_vit_model", None, "global_attn_indexes="),
        ("sam_vision_model", None, "global_attn_indexes="),
        ("rf_detr_dinov2", None, "num_windows="),
        ("swin", None, "shifted windows"),
        ("qwen3_asr_encoder", None, "n_window="),
        ("gemma3n_audio", None, "conf_attention_chunk_size="),
        ("gemma4_audio", None, "attention_chunk_size="),
        ("reformer", None, "attn_layers="),
    ],
)
def test_local_attention_window_does_not_express_is_refused(
    model_type: str, stack: str | None, field: str
) -> None:
    """Longformer's window with global tokens, BigBird's block-sparse attention, DeepSeek V4's compressed layers,
    Moonshine Streaming's (left, right) windows, a window only the generation cache keeps (Moshi's, Kyutai's),
    Nemotron's chunked streaming attention, windows of an image (Qwen2.5-VL's and SAM's vision towers, RF-DETR's,
    Swin's) and chunks of audio frames (Qwen's and Gemma's audio encoders) and Reformer: refused,
    never ``None`` (every key) or a window its forward does not mask; the decoders, BigBird's full attention and DeepSeek V4's sliding layers alone do give their windows."""
    config = transformers.AutoConfig.for_model(model_type)
    for form in (config, config.to_dict()):
        with pytest.raises(ValueError, match=f"{field}.*which posenc.attention's window= does not express"):
            layer_windows(form, stack=stack)
    if stack == "encoder":
        assert set(layer_windows(config, stack="decoder")) == {None}
    else:  # (one stack: stack="decoder" names it too)
        with pytest.raises(ValueError, match=f"{field}.*which posenc.attention's window= does not express"):
            layer_windows(config, stack="decoder")
    if model_type == "big_bird":
        assert set(layer_windows({**config.to_dict(), "attention_type": "original_full"})) == {None}
    if model_type == "deepseek_v4":
        sliding = {**config.to_dict(), "layer_types": ["sliding_attention"] * config.num_hidden_layers}
        assert set(layer_windows(sliding)) == {config.sliding_window}


def test_a_window_only_the_generation_cache_keeps_is_refused() -> None:
    """Qwen3-Omni's thinker text model with a sliding_window: its forward masks every earlier key (its attention
    sets no window), the DynamicCache its generate builds keeps sliding_window keys. It got that window; refused,
    through the parent too, and no window without one. Found by the survey below."""
    from transformers.cache_utils import DynamicCache, DynamicSlidingWindowLayer

    config = transformers.AutoConfig.for_model("qwen3_omni_moe_text", **TINY, **_MOE, sliding_window=3)
    config._attn_implementation = "posenc_mask_capture"
    assert _run_tiny(config) and all(_mask_window(mask) == (False, None) for mask in _SEEN.values())
    assert isinstance(DynamicCache(config=config).layers[0], DynamicSlidingWindowLayer)
    parent = {"model_type": "qwen3_omni_moe", "thinker_config": {"text_config": config.to_dict()}}
    for form in (config, config.to_dict(), parent):
        with pytest.raises(ValueError, match="its forward masks no window"):
            layer_windows(form)
    assert set(layer_windows({**config.to_dict(), "sliding_window": None})) == {None}


def test_attention_local_by_a_field_is_refused_for_every_class_that_turns_it_on() -> None:
    """Every config class of the installed transformers whose default turns on attention that is local by a field
    of its own (windows of an image, chunks of frames: posenc.hf._layer_types._LOCAL_FIELDS) has those defaults in
    posenc's class defaults, so that a config.json that leaves them out is refused as its class reads it; turned
    off, it is not."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from posenc.hf._layer_types import _LOCAL_FIELDS
    from posenc.hf._read import class_defaults

    turned_on = []
    for model_type, config_class in CONFIG_MAPPING.items():
        try:
            default = config_class().to_dict()
        except Exception:  # (a class that needs arguments)
            continue
        if any(k in default and rule(default, model_type, True) for k, (rule, _) in _LOCAL_FIELDS.items()):
            turned_on.append(model_type)
            fields = {k for k in (*_LOCAL_FIELDS, "window_size") if k in default}
            assert {k: v for k, v in class_defaults(model_type).items() if k in fields} == {
                k: tuple(default[k]) if isinstance(default[k], list) else default[k] for k in fields
            }, model_type
    assert len(turned_on) == 26, turned_on
    for model_type in turned_on:
        bare = {"model_type": model_type, "num_hidden_layers": 2}
        with pytest.raises(ValueError, match="does not express"):
            layer_windows(bare)
    assert (
        layer_windows({"model_type": "sam_vision_model", "num_hidden_layers": 2, "window_size": 0})
        == [None] * 2
    )


@pytest.mark.parametrize("model_type", ["inkling_text", "inkling2_text", "unlimited_ocr_text"])
def test_layer_types_that_slide_by_rules_of_their_own_are_refused(model_type: str) -> None:
    """Inkling's ``hybrid_sliding`` (its window: ``sliding_window_size``), Unlimited-OCR's
    ``reference_sliding_attention``: never read as full attention."""
    config = transformers.AutoConfig.for_model(model_type)
    for form in (config, config.to_dict()):
        with pytest.raises(ValueError, match="slide by rules of its own code"):
            layer_windows(form)


def test_a_bidirectional_sliding_mask_posenc_does_not_read_is_refused() -> None:
    """use_bidirectional_attention with sliding layers: Gemma 3's (EmbeddingGemma) is read (test above); the
    other classes with the flag are refused rather than read as causal windows."""
    config = transformers.AutoConfig.for_model("gemma2", use_bidirectional_attention=True)
    with pytest.raises(ValueError, match="use_bidirectional_attention=True with sliding layers"):
        layer_windows(config)
    for model_type in ("diffusion_gemma_text", "muse_glimmer_assistant", "t5gemma2"):  # (masks of their own)
        with pytest.raises(ValueError, match="slides both ways by a mask of its own"):
            layer_windows(transformers.AutoConfig.for_model(model_type))


def _mask_window(mask: torch.Tensor | None) -> tuple[bool, int | None] | None:
    """(bidirectional, W as posenc reads it) of a captured mask over T tokens; None if it is neither form."""
    if mask is None:
        return False, None
    allowed = mask[0, 0] if mask.dtype == torch.bool else mask[0, 0] > torch.finfo(mask.dtype).min / 2
    for bidirectional in (False, True):
        for window in (None, *range(1, 2 * T)):
            if torch.equal(allowed, _allowed(window, bidirectional)):
                return bidirectional, window
    return None


def _run_tiny(config: Any) -> bool:
    """Run T tokens through a model of ``config``: AutoModel's, else a class of its modeling module whose
    ``config_class`` it is (Qwen3-Omni's text models, which AutoModel does not map). False if none runs."""
    try:
        module = vars(
            importlib.import_module(type(config).__module__.replace(".configuration_", ".modeling_"))
        )
    except ImportError:
        module = {}
    own = [
        c for c in module.values()
        if isinstance(c, type) and issubclass(c, torch.nn.Module) and getattr(c, "config_class", None) is type(config)
    ]  # fmt: skip
    for build in (
        transformers.AutoModel.from_config,
        *sorted(own, key=lambda c: ("For" in c.__name__, c.__name__)),
    ):
        _SEEN.clear()
        try:  # (sized first: a class default that stays large, MuSE Spark's, is skipped)
            with torch.device("meta"):
                size = sum(t.numel() for t in build(config).state_dict().values())
        except Exception:  # (a class that cannot be built on the meta device: built below, or not at all)
            size = 0
        if size > 2_000_000_000:  # (8 GB in float32; Phi-4 multimodal's towers are 3.5)
            continue
        try:
            with torch.no_grad():
                build(config).eval()(
                    input_ids=torch.arange(1, T + 1)[None], attention_mask=torch.ones(1, T, dtype=torch.long)
                )
            return True
        except Exception:
            continue
    return False


@pytest.mark.slow
def test_every_model_with_a_sliding_window_gets_the_windows_its_model_masks() -> None:
    """The whole zoo (-m slow, about a minute): every config class of the installed transformers that declares
    sliding_window (set to 3) or has sliding layer types, built tiny; what each layer's attention is given, in a
    forward pass, is the window layer_windows gives (one wider than the sequence reads as every key), or
    layer_windows refuses. Found GPT-Neo's, dots3 Note's, the bidirectional models' and MiniMax's windows wrong."""
    from posenc.app.hf_zoo import ROTARY_VARIANT
    from posenc.app.hf_zoo import TINY as ZOO_TINY

    matched, wrong = [], {}
    for model_type, config_class in transformers.models.auto.configuration_auto.CONFIG_MAPPING.items():
        fields = getattr(config_class, "__dataclass_fields__", {})
        kwargs = {**ZOO_TINY, "num_hidden_layers": 4, **ROTARY_VARIANT.get(model_type, {})}
        kwargs |= {"sliding_window": 3} if "sliding_window" in fields else {}
        if isinstance(kwargs.get("layer_types"), list):
            kwargs["layer_types"] = (kwargs["layer_types"] * 4)[:4]
        try:
            config = config_class(**kwargs)
        except Exception:  # (a class that needs other arguments)
            continue
        if "sliding_window" not in fields and not any(
            "sliding" in str(t) for t in config.to_dict().get("layer_types") or ()
        ):
            continue
        try:
            windows = layer_windows(config)
        except ValueError:  # refused, naming why
            continue
        config._attn_implementation = "posenc_mask_capture"
        if not _run_tiny(config):  # (a model that takes other inputs, or other sizes)
            continue
        for layer, mask in _SEEN.items():
            seen = _mask_window(mask)
            bidirectional = bool(seen and seen[0])
            ours = windows[layer] if layer < len(windows) else "missing"
            if (
                ours is not None
                and ours != "missing"
                and ((ours // 2 >= T - 1) if bidirectional else ours >= T)
            ):
                ours = None  # (as wide as the sequence: every key)
            if seen is None or seen[1] != ours:
                wrong[model_type] = (layer, seen, windows)
                break
        else:
            matched.append(model_type)
    assert not wrong, wrong
    assert len(matched) >= 45, matched


def test_t5gemmas_encoder_slides_both_ways_its_decoder_causally() -> None:
    """T5Gemma: its encoder's sliding layers see ``|i - j| <= sliding_window`` (posenc's W twice it), its
    decoder's the causal window: the encoder's masks in a forward pass; a decoder dict without is_decoder too."""
    module = {**TINY, "sliding_window": 3, "layer_types": ["sliding_attention", "full_attention"] * 3}
    config = transformers.T5GemmaConfig(encoder=module, decoder=module, vocab_size=64)
    config.encoder._attn_implementation = "posenc_mask_capture"
    model = transformers.T5GemmaModel(config).eval()
    _SEEN.clear()
    with torch.no_grad():
        model.encoder(
            input_ids=torch.arange(1, T + 1)[None], attention_mask=torch.ones(1, T, dtype=torch.long)
        )
    windows = layer_windows(config, stack="encoder")
    assert windows == [6, None] * 3
    for layer, window in enumerate(windows):
        mask = _SEEN[layer]
        seen = (
            _allowed(None, True)
            if mask is None
            else (mask[0, 0] if mask.dtype == torch.bool else mask[0, 0] == 0)
        )
        assert torch.equal(seen, _allowed(window, bidirectional=True))
    as_json = config.to_dict()
    as_json["decoder"].pop("is_decoder", None)
    assert layer_windows(as_json, stack="decoder") == layer_windows(config, stack="decoder") == [3, None] * 3


def test_chunked_layers_are_refused_pointing_at_document_ids() -> None:
    """Llama 4's chunked layers attend within chunks, which no window expresses: refused (they got None, every
    key); the mask they get in the model's forward pass is causal within each chunk, as document_ids say."""
    config = transformers.AutoConfig.for_model(
        "llama4_text", **{**TINY, "num_hidden_layers": 2}, attention_chunk_size=4, num_local_experts=2,
        intermediate_size_mlp=16, no_rope_layers=[1, 0],
    )  # fmt: skip
    for form in (config, config.to_dict(), {"model_type": "llama4_text", "num_hidden_layers": 2}):
        with pytest.raises(
            ValueError, match=r"attention_chunk_size=(4|8192) .in posenc.attention: document_ids"
        ):
            layer_windows(form)
    masks = _model_masks(config, bidirectional=False)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    assert torch.equal(masks[0], (j <= i) & (i // 4 == j // 4))
    unchunked = {"model_type": "llama4_text", "num_hidden_layers": 2, "attention_chunk_size": None}
    assert layer_windows(unchunked) == [None, None]


@pytest.mark.parametrize("model_type", ["gemma2", "mistral", "gemma3_text"])
def test_a_layer_type_transformers_does_not_know_is_refused_not_read_as_full_attention(model_type):
    """``layer_types=["foo", "sliding_attention"]`` gave ``[None, 4]``: the unknown layer attended over every
    key, where transformers refuses the config. posenc names the entry and the types it knows."""
    config = {
        "model_type": model_type,
        **TINY,
        "num_hidden_layers": 2,
        "sliding_window": 4,
        "rope_theta": 1e4,
    }
    config["layer_types"] = ["foo", "sliding_attention"]
    with pytest.raises(ValueError, match=r"layer_types\[0\] is 'foo', not a layer type transformers knows"):
        layer_windows(config)
    if model_type == "gemma3_text":  # (its encodings follow its layer types: local and global rotations)
        from posenc.hf import layer_encodings

        with pytest.raises(ValueError, match=r"layer_types\[0\] is 'foo'"):
            layer_encodings(config)
