"""Per-layer encodings from Hugging Face configs, checked inside tiny random transformers models.

Each case builds a tiny model of one architecture (nothing downloaded), records the queries and
keys its attention rotates during a real forward pass (the model module's rotary function is
wrapped), and checks layer by layer that the encoding posenc builds from the same config gives
the same result, at positions past the sliding window and past the trained context where
scaling acts.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import torch

import posenc
from posenc import NoPE, QueryTemperature, RoPE
from posenc.hf import SUPPORTED_MODEL_TYPES, from_hf_config, layer_encodings, layer_windows

transformers = pytest.importorskip("transformers")
from transformers.models.llama4.modeling_llama4 import eager_attention_forward  # noqa: E402

T = 40  # past the window (8) and past the trained context (16) of every case below
WINDOW = 8
# posenc's angles are float64 rounded once; transformers' are float32 products: ~T * 6e-8 rad.
ATOL = 2e-5

SMALL: dict[str, Any] = {
    "hidden_size": 32,
    "intermediate_size": 32,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "vocab_size": 64,
    "attn_implementation": "eager",
}


def _deepseek(mscale: float) -> dict[str, Any]:
    """A tiny DeepSeek V2/V3 config with YaRN (MLA: a rotated slice of each head)."""
    rope = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "mscale": mscale}
    rope |= {"mscale_all_dim": 0.8, "rope_theta": 10_000.0}
    moe = {"moe_intermediate_size": 16, "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 1}
    mla = {
        "q_lora_rank": 16,
        "kv_lora_rank": 16,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 8,
        "v_head_dim": 8,
    }
    return {
        **SMALL,
        **moe,
        **mla,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "topk_group": 1,
        "first_k_dense_replace": 1,
        "max_position_embeddings": 64,
        "rope_parameters": rope,
    }


def _record(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[tuple[tuple, Any]]:
    """Wrap ``module.name`` so every call's arguments and result are kept, in call (= layer) order."""
    calls: list[tuple[tuple, Any]] = []
    original = getattr(module, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        calls.append((args, out))
        return out

    monkeypatch.setattr(module, name, wrapper)
    return calls


_SEEN_QK: list[tuple[torch.Tensor, torch.Tensor]] = []


def _record_qk(module: Any, query: torch.Tensor, key: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    """transformers' eager attention, keeping the queries and keys each layer attends with."""
    _SEEN_QK.append((query, key))
    return eager_attention_forward(module, query, key, *args, **kwargs)


transformers.AttentionInterface.register("posenc_record_qk", _record_qk)


def _run(model_cls: str, config: Any, device: torch.device | str = "cpu") -> None:
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(config).eval().to(device)
    with torch.no_grad():
        model(input_ids=torch.randint(1, 64, (2, T)).to(device))


def _deinterleave(x: torch.Tensor) -> torch.Tensor:
    # DeepSeek-V3's rope_interleave output: channels (0, 2, 4, ..., 1, 3, 5, ...) of the interleaved rotation
    return x.unflatten(-1, (-1, 2)).transpose(-1, -2).flatten(-2)


def _bhtd(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(1, 2)


# (model type, config class, kwargs, model class, rotary function, call form)
CASES: list[tuple[str, str, dict[str, Any], str, str, str]] = [
    (
        "gemma3_text",
        "Gemma3TextConfig",
        {
            **SMALL,
            "head_dim": 16,
            "num_hidden_layers": 4,
            "sliding_window": WINDOW,
            "max_position_embeddings": 16,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            "rope_parameters": {
                "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
            },
        },
        "Gemma3TextModel",
        "apply_rotary_pos_emb",
        "pair",
    ),
    (
        "modernbert",
        "ModernBertConfig",
        {
            **{k: v for k, v in SMALL.items() if k != "num_key_value_heads"},
            "num_hidden_layers": 4,
            "local_attention": WINDOW,
            "max_position_embeddings": 64,
            "global_rope_theta": 160_000.0,
            "local_rope_theta": 500.0,
            **{f"{t}_token_id": 0 for t in ("pad", "eos", "bos", "cls", "sep")},
        },
        "ModernBertModel",
        "apply_rotary_pos_emb",
        "pair",
    ),
    (
        "smollm3",
        "SmolLM3Config",
        {
            **SMALL,
            "num_hidden_layers": 4,
            "max_position_embeddings": 16,
            "rope_theta": 2_000_000.0,
            "pad_token_id": 0,
        },
        "SmolLM3Model",
        "apply_rotary_pos_emb",
        "pair",
    ),
    (
        "cohere2",
        "Cohere2Config",
        {
            **SMALL,
            "head_dim": 16,
            "num_hidden_layers": 4,
            "sliding_window": WINDOW,
            "max_position_embeddings": 64,
        },
        "Cohere2Model",
        "apply_rotary_pos_emb",
        "pair",
    ),
    (
        "gpt_oss",
        "GptOssConfig",
        {
            **SMALL,
            "head_dim": 16,
            "num_hidden_layers": 2,
            "num_local_experts": 2,
            "num_experts_per_tok": 1,
            "sliding_window": WINDOW,
            "max_position_embeddings": 64,
            "rope_parameters": {
                "rope_type": "yarn",
                "factor": 4.0,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "truncate": False,
                "original_max_position_embeddings": 16,
                "rope_theta": 150_000.0,
            },
        },
        "GptOssModel",
        "apply_rotary_pos_emb",
        "pair",
    ),
    (
        "deepseek_v3",
        "DeepseekV3Config",
        _deepseek(mscale=1.0),
        "DeepseekV3Model",
        "apply_rotary_pos_emb_interleave",
        "deinterleave",
    ),
    (
        "deepseek_v2",
        "DeepseekV2Config",
        _deepseek(mscale=0.9),
        "DeepseekV2Model",
        "apply_rotary_emb",
        "pair",
    ),
    (
        "llama4_text",
        "Llama4TextConfig",
        {
            **SMALL,
            "head_dim": 16,
            "intermediate_size_mlp": 32,
            "num_hidden_layers": 4,
            "num_local_experts": 2,
            "max_position_embeddings": 64,
            "attention_chunk_size": WINDOW,
            "floor_scale": 4,
            "attn_scale": 0.5,
            "rope_parameters": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
                "rope_theta": 500_000.0,
            },
        },
        "Llama4TextModel",
        "apply_rotary_emb",
        "pair_bthd",
    ),
    (
        "gemma4_text",
        "Gemma4TextConfig",
        {
            **SMALL,
            "head_dim": 16,
            "global_head_dim": 32,
            "num_hidden_layers": 4,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            "sliding_window": WINDOW,
            "max_position_embeddings": 64,
            "vocab_size_per_layer_input": 64,
            "hidden_size_per_layer_input": 8,
        },
        "Gemma4TextModel",
        "apply_rotary_pos_emb",
        "single_bthd",
    ),
]


def _rotary_layers(encodings: list[posenc.PositionalEncoding]) -> list[int]:
    return [i for i, e in enumerate(encodings) if isinstance(e, RoPE)]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_layers_match_the_model(case: tuple, monkeypatch: pytest.MonkeyPatch, device: torch.device) -> None:
    _, config_cls, kwargs, model_cls, fn, form = case
    config = getattr(transformers, config_cls)(**kwargs)
    module = importlib.import_module(getattr(transformers, model_cls).__module__)
    calls = _record(monkeypatch, module, fn)
    _run(model_cls, config, device)

    encodings = layer_encodings(config)
    assert len(encodings) == config.num_hidden_layers
    for enc in (encodings, layer_encodings(config.to_dict())):  # the object and its config.json
        rotary = _rotary_layers(enc)
        per_layer = 2 if form == "single_bthd" else 1
        assert len(calls) == per_layer * len(rotary)
        for n, (args, out) in enumerate(calls):
            rope = enc[rotary[n // per_layer]].to(device)
            if form == "single_bthd":  # Gemma 4: q and k rotated one at a time, (b, t, h, d)
                x = _bhtd(args[0])
                got = rope.encode_qk(x, x)[0]
                torch.testing.assert_close(got, _bhtd(out), atol=ATOL, rtol=0)
                continue
            q, k = args[0], args[1]
            if form == "pair_bthd":  # Llama 4: before the transpose to (b, h, t, d)
                q, k, out = _bhtd(q), _bhtd(k), (_bhtd(out[0]), _bhtd(out[1]))
            got_q, got_k = rope.encode_qk(q, k)
            if form == "deinterleave":
                got_q, got_k = _deinterleave(got_q), _deinterleave(got_k)
            torch.testing.assert_close(got_q, out[0], atol=ATOL, rtol=0)
            torch.testing.assert_close(got_k, out[1], atol=ATOL, rtol=0)


def test_layers_share_instances_and_windows() -> None:
    config = transformers.Gemma3TextConfig(**{**CASES[0][2], "attn_implementation": "eager"})
    enc = layer_encodings(config)
    assert enc[0] is enc[2] and enc[1] is enc[3] and enc[0] is not enc[1]
    assert (enc[0].base, enc[1].base, enc[1].rope_type) == (10_000.0, 1_000_000.0, "linear")
    assert layer_windows(config) == [WINDOW, None, WINDOW, None]
    assert from_hf_config(config, layer=3).base == enc[3].base
    mb = transformers.ModernBertConfig(num_hidden_layers=4, local_attention=WINDOW)
    # transformers' bidirectional window: |i - j| <= local_attention // 2
    assert layer_windows(mb) == [None, WINDOW, WINDOW, None]  # posenc.attention: |i - j| <= window // 2
    assert [type(e) for e in layer_encodings(transformers.SmolLM3Config(num_hidden_layers=4))] == [
        RoPE
    ] * 3 + [NoPE]
    gemma2 = transformers.Gemma2Config(num_hidden_layers=4, sliding_window=WINDOW)
    assert isinstance(from_hf_config(gemma2), RoPE) and layer_windows(gemma2) == [WINDOW, None] * 2


def test_llama4_nope_layers_scale_queries_like_the_model() -> None:
    _, config_cls, kwargs, model_cls, _, _ = CASES[-2]
    # the attention function of each layer records the (scaled) queries and keys it receives
    config = getattr(transformers, config_cls)(**{**kwargs, "attn_implementation": "posenc_record_qk"})
    _SEEN_QK.clear()
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(config).eval()
    projected: list[tuple[torch.Tensor, torch.Tensor]] = []
    for layer in model.layers:
        attn = layer.self_attn
        attn.q_proj.register_forward_hook(lambda m, i, o: projected.append(("q", o)))
        attn.k_proj.register_forward_hook(lambda m, i, o: projected.append(("k", o)))
    with torch.no_grad():
        model(input_ids=torch.randint(1, 64, (2, T)))
    encodings = layer_encodings(config)
    assert [type(e) for e in encodings] == [RoPE, RoPE, RoPE, QueryTemperature]
    qs = [o for kind, o in projected if kind == "q"]
    ks = [o for kind, o in projected if kind == "k"]
    q = qs[3].view(2, T, -1, 16).transpose(1, 2)
    k = ks[3].view(2, T, -1, 16).transpose(1, 2)
    got_q, got_k = encodings[3].encode_qk(q, k)
    torch.testing.assert_close(got_q, _SEEN_QK[3][0], atol=1e-6, rtol=1e-6)
    assert got_k is k
    torch.testing.assert_close(got_k, _SEEN_QK[3][1], atol=0, rtol=0)
    assert not torch.equal(got_q, q)  # floor_scale 4: the temperature acts from position 3


def test_multimodal_configs_read_text_config() -> None:
    text = {**CASES[0][2]}
    text.pop("attn_implementation")
    outer = {"model_type": "gemma3", "text_config": {k: v for k, v in text.items()}}
    enc = layer_encodings(outer)
    assert [e.base for e in enc] == [10_000.0, 1_000_000.0] * 2
    llama4 = transformers.Llama4Config(text_config={"num_hidden_layers": 4})
    assert isinstance(from_hf_config(llama4, layer=3), QueryTemperature)


def test_blt_is_read_through_its_byte_level_stacks_never_its_top_level_rope() -> None:
    """BLT's model builds its four rotaries from its sub-configs (local encoder, global transformer, local
    decoder, patcher) and none from the parent's own rope_parameters (which a config may carry, with sizes):
    ``stack=`` gives the local encoder's and decoder's, as their rotary modules; without it, refused (the stacks
    differ). It was the top-level RoPE, which no module of the model reads."""
    sizes = {
        "hidden_size": 64,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "max_position_embeddings": 64,
    }
    config = transformers.BltConfig(
        **sizes,
        rope_parameters={"rope_type": "default", "rope_theta": 1234.0},
        encoder_hash_byte_group_vocab=64,
    )
    sub = {"hidden_size": 32, "num_attention_heads": 2, "num_hidden_layers": 1, "intermediate_size": 32}
    bases = {"encoder_config": 5e5, "decoder_config": 2e5, "global_config": 3e5, "patcher_config": 4e5}
    for field, base in bases.items():
        setattr(config, field, type(getattr(config, field))(**sub, rope_parameters={"rope_theta": base}))
    model = transformers.BltModel(config)
    rotaries = {n: m for n, m in model.named_modules() if n.endswith("rotary_emb")}
    assert sorted(m.config.rope_parameters["rope_theta"] for m in rotaries.values()) == sorted(bases.values())
    pos = torch.tensor([[0, 3, 7, 40]])
    q, k = (torch.randn(1, 2, 4, 16) for _ in range(2))
    for form in (config, config.to_dict()):
        with pytest.raises(ValueError, match=r"pass config\.encoder_config or config\.decoder_config"):
            from_hf_config(form)
        for stack, owner in (("encoder", "local_encoder"), ("decoder", "local_decoder")):
            ours = from_hf_config(form, stack=stack).encode_qk(q, k, q_positions=pos, k_positions=pos)
            cos, sin = rotaries[f"{owner}.rotary_emb"](q, pos)
            module = importlib.import_module("transformers.models.blt.modeling_blt")
            torch.testing.assert_close(ours, module.apply_rotary_pos_emb(q, k, cos, sin))


def _t5gemma(encoder_factor: float = 4.0, decoder_factor: float = 4.0) -> Any:
    """A small T5Gemma config, each stack with YaRN at its factor (the factor is not in RoPE's repr)."""

    def stack(factor: float) -> dict[str, Any]:
        params = {
            "rope_type": "yarn",
            "rope_theta": 1e4,
            "factor": factor,
            "original_max_position_embeddings": 16,
        }
        return {
            **SMALL,
            "num_hidden_layers": 2,
            "head_dim": 16,
            "max_position_embeddings": 64,
            "rope_parameters": params,
        }

    return transformers.T5GemmaConfig(encoder=stack(encoder_factor), decoder=stack(decoder_factor))


def test_an_encoder_decoder_parent_converts_on_the_meta_device() -> None:
    """Under ``torch.device("meta")`` (a large model built before its weights load) the stacks' tables have no
    values to compare: compared as built on the CPU (this raised NotImplementedError from ``aten::equal``).
    After ``to_empty()`` the encoding equals the one built on the CPU; stacks that differ only in their tables
    (YaRN's factor) are still refused."""
    with torch.device("meta"):
        rope = from_hf_config(_t5gemma())
    assert rope.inv_freq.is_meta
    rope.to_empty(device="cpu")
    expected = from_hf_config(_t5gemma())
    for name, buffer in expected.named_buffers():
        torch.testing.assert_close(dict(rope.named_buffers())[name], buffer, atol=0, rtol=0)
    with (
        torch.device("meta"),
        pytest.raises(ValueError, match="encoder and decoder differ in their position"),
    ):
        from_hf_config(_t5gemma(decoder_factor=2.0))


def test_an_encoder_decoder_parents_stacks_agree_when_their_tables_differ_in_the_last_bits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fresh process's first sizable cos in torch can run oneMKL's low-accuracy kernel on one thread's chunk
    (pytorch/pytorch#188792): the first stack's table then differs from the second's in its last bits, and
    T5Gemma's agreeing stacks were refused in about one fresh process in four. Emulated here: the first cos
    off by a relative 1e-8."""
    exact, calls = torch.Tensor.cos, []

    def first_call_inexact(self: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return exact(self) * (1 + 1e-8) if len(calls) == 1 else exact(self)

    monkeypatch.setattr(torch.Tensor, "cos", first_call_inexact)
    assert from_hf_config(_t5gemma()).rope_type == "yarn"
    assert len(calls) > 1


def test_encoder_decoder_parents_convert_where_their_stacks_agree() -> None:
    """T5Gemma's encoder / decoder (Dia's *_config): one encoding where the stacks agree, the model's own
    rotation; refused, naming the fields to pass, where they differ; never the parent's own top-level fields."""
    from transformers.models.t5gemma import modeling_t5gemma

    params = {"rope_type": "yarn", "rope_theta": 5e5, "factor": 4.0, "original_max_position_embeddings": 16}
    stack = {
        **SMALL,
        "num_hidden_layers": 4,
        "head_dim": 16,
        "rope_parameters": params,
        "sliding_window": WINDOW,
        "max_position_embeddings": 64,  # factor 4 over 16 (transformers warns otherwise)
    }
    config = transformers.T5GemmaConfig(encoder=stack, decoder=stack)
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 2, T, 16, generator=gen) for _ in range(2))
    positions = torch.stack([torch.arange(T), torch.arange(T) + 37])
    for form in (config, config.to_dict()):
        rope = from_hf_config(form)
        # (its encoder slides both ways: posenc's W twice the window; its decoder causally)
        assert layer_windows(form, stack="encoder") == [2 * WINDOW, None] * 2
        assert layer_windows(form, stack="decoder") == [WINDOW, None] * 2
        for sub in (config.encoder, config.decoder):
            cos, sin = modeling_t5gemma.T5GemmaRotaryEmbedding(sub)(q, positions)
            q_ref, k_ref = modeling_t5gemma.apply_rotary_pos_emb(q, k, cos, sin)
            q_ours, k_ours = rope.encode_qk(q, k, q_positions=positions, k_positions=positions)
            torch.testing.assert_close((q_ours, k_ours), (q_ref, k_ref), atol=ATOL, rtol=1e-5)
    other = {**stack, "rope_parameters": {**params, "rope_theta": 1e4}}
    for differ, what in ((other, "position encodings"), ({**stack, "sliding_window": 4}, "sliding windows")):
        config = transformers.T5GemmaConfig(encoder=stack, decoder=differ)
        with pytest.raises(
            ValueError, match=f"encoder and decoder differ in their {what}.*config.encoder or con"
        ):
            (layer_encodings if what == "position encodings" else layer_windows)(config.to_dict())
    assert from_hf_config(config.decoder).base == 5e5  # a stack on its own
    with pytest.raises(
        ValueError,
        match=r"layer 0: .*max_len=1024\) vs .*max_len=3072\)\): pass config.encoder_config or config.decoder_config",
    ):
        from_hf_config(transformers.DiaConfig().to_dict())
    # stack= picks that stack's sub-config (encoder / decoder; Dia's encoder_config / decoder_config)
    config = transformers.T5GemmaConfig(encoder=stack, decoder=other)
    for form in (config, config.to_dict()):
        assert [from_hf_config(form, stack=s).base for s in ("encoder", "decoder")] == [5e5, 1e4]
    dia = transformers.DiaConfig()
    assert [from_hf_config(dia, stack=s).max_len for s in ("encoder", "decoder")] == [1024, 3072]
    # RoPE fields and sizes at the parent's top level, which its model does not read: still its stacks
    stray = {"rope_theta": 321.0, "hidden_size": 64, "num_attention_heads": 2}
    for form in (
        transformers.T5GemmaConfig(encoder=stack, decoder=other, **stray),
        {**config.to_dict(), **stray},
    ):
        assert [from_hf_config(form, stack=s).base for s in ("encoder", "decoder")] == [5e5, 1e4]
        with pytest.raises(ValueError, match="encoder and decoder differ"):
            from_hf_config(form)


def test_parents_and_field_names_read_as_their_config_class() -> None:
    """Qwen2.5-Omni's text model under thinker_config.text_config; DBRX's n_heads / d_model / max_seq_len
    and Moonshine's decoder heads in a config.json dict, as their classes' attribute_map reads them."""
    text = {
        "hidden_size": 64,
        "num_attention_heads": 2,
        "rope_parameters": {"rope_theta": 5e4, "mrope_section": [4, 6, 6]},
    }
    omni = {"model_type": "qwen2_5_omni", "thinker_config": {"text_config": text}}
    assert repr(from_hf_config(omni)) == "MRoPE(head_dim=32, mrope_section=[4, 6, 6], base=50000.0)"
    for config in (
        transformers.DbrxConfig(d_model=64, n_heads=4, max_seq_len=128),
        transformers.MoonshineConfig(),
    ):
        ours = from_hf_config(config.to_dict())
        assert repr(ours) == repr(from_hf_config(config)) and torch.equal(
            ours.inv_freq, from_hf_config(config).inv_freq
        )
    assert repr(
        from_hf_config(transformers.DbrxConfig(d_model=64, n_heads=4, max_seq_len=128).to_dict())
    ) == ("RoPE(head_dim=16, base=10000.0, layout='half', max_len=128)")


def test_step3p7_config_json_lists_per_layer_read_as_its_config_class() -> None:
    """Step 3.7's config.json gives rope_theta and partial_rotary_factors per layer (and a rope_scaling for
    full attention); its config class keeps one per layer type, and so does posenc, refusing lists whose
    layers of one type disagree."""
    raw = {
        "hidden_size": 64, "num_attention_heads": 4, "head_dim": 16, "num_hidden_layers": 4,
        "max_position_embeddings": 64,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        "rope_theta": [1e4, 5e6, 1e4, 5e6], "partial_rotary_factors": [1.0, 0.5, 1.0, 0.5],
        "rope_scaling": {"rope_type": "linear", "factor": 2.0},
    }  # fmt: skip
    config = transformers.Step3p7TextConfig(**raw)
    ours = layer_encodings({"model_type": "step3p7_text", **raw})
    assert repr(ours) == repr(layer_encodings(config))
    assert (ours[1].base, ours[1].rotary_dim, ours[1].rope_type, ours[0].rotary_dim) == (5e6, 8, "linear", 16)
    with pytest.raises(ValueError, match=r"partial_rotary_factors differs between 'full_attention' layers"):
        layer_encodings(
            {"model_type": "step3p7_text", **raw, "partial_rotary_factors": [1.0, 0.5, 1.0, 0.25]}
        )
    with pytest.raises(ValueError, match="rope_theta has 3 entries for 4 layers"):
        layer_encodings({"model_type": "step3p7_text", **raw, "rope_theta": [1e4, 5e6, 1e4]})


def test_legacy_v4_keys() -> None:
    # Gemma 3's v4 config.json: rope_theta / rope_local_base_freq / rope_scaling on the global layers
    cfg = {
        "model_type": "gemma3_text",
        "num_hidden_layers": 6,
        "rope_theta": 1_000_000.0,
        "rope_local_base_freq": 10_000.0,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    }
    enc = layer_encodings(cfg)
    assert [e.base for e in enc] == [10_000.0] * 5 + [1_000_000.0]
    assert [e.rope_type for e in enc] == ["default"] * 5 + ["linear"]
    ref = transformers.Gemma3TextConfig(**{k: v for k, v in cfg.items() if k != "model_type"})
    assert ref.rope_parameters["full_attention"]["factor"] == enc[5].params.factor


BAD: list[tuple[dict[str, Any], type[Exception], str]] = [
    (
        {"model_type": "gemma3_text", "num_hidden_layers": 2, "rope_parameters": {"local": {}}},
        ValueError,
        "local",
    ),
    (
        {"model_type": "gemma3_text", "num_hidden_layers": 3, "layer_types": ["full_attention"]},
        ValueError,
        "layer_types",
    ),
    (
        {"model_type": "smollm3", "num_hidden_layers": 4, "no_rope_layers": [1, 0]},
        ValueError,
        "no_rope_layers",
    ),
    (
        {"model_type": "smollm3", "num_hidden_layers": 2, "no_rope_layers": [1, 2]},
        ValueError,
        "no_rope_layers",
    ),
    (
        {
            "model_type": "gemma4_text",
            "num_hidden_layers": 2,
            "rope_parameters": {
                "sliding_attention": {"rope_type": "default"},
                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 1.5},
            },
        },
        ValueError,
        "partial_rotary_factor",
    ),
    (
        {
            "model_type": "gemma4_text",
            "num_hidden_layers": 2,
            "rope_parameters": {
                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.0}
            },
        },
        ValueError,
        "partial_rotary_factor",
    ),
    (  # its class keeps a flat dict, and its model reads rope_parameters[layer_type] (a KeyError there)
        {
            "model_type": "gemma4_text",
            "num_hidden_layers": 2,
            "rope_parameters": {"rope_type": "default", "rope_theta": 5e3},
        },
        ValueError,
        r"rope_parameters must hold one dict per layer type .* flat keys \['rope_theta', 'rope_type'\]",
    ),
    ({"model_type": "falcon", "alibi": "false"}, TypeError, "alibi"),
    ({"model_type": "phi3", "rope_theta": True}, TypeError, "rope_theta"),
    ({"model_type": "phi3", "rope_theta": "abc"}, TypeError, "rope_theta"),
    ({"model_type": "phi3", "rope_theta": "5e5"}, TypeError, "rope_theta"),
    ({"model_type": "phi3", "rope_theta": 10**400}, ValueError, "rope_theta"),
    (
        {"model_type": "phi3", "rope_scaling": {"rope_type": "linear", "factor": 10**400}},
        ValueError,
        "factor",
    ),
    (
        {"model_type": "phi3", "rope_scaling": {"rope_type": "linear", "factor": 1e-320}},
        ValueError,
        "factor",
    ),
    (
        {"model_type": "phi3", "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "beta_fast": -1}},
        ValueError,
        "beta_fast",
    ),
    (
        {"model_type": "llama4_text", "num_hidden_layers": 4, "attn_temperature_tuning": "no"},
        TypeError,
        "attn_temperature",
    ),
    ({"model_type": "deepseek_v3", "rope_interleave": 1}, TypeError, "rope_interleave"),
    ({"model_type": "t5", "is_decoder": "False"}, TypeError, "is_decoder"),
]


@pytest.mark.parametrize(("cfg", "error", "key"), BAD, ids=[f"{c['model_type']}-{k}" for c, _, k in BAD])
def test_bad_configs_name_the_key(cfg: dict[str, Any], error: type[Exception], key: str) -> None:
    with pytest.raises(error, match=key):
        layer_encodings(cfg) if "num_hidden_layers" in cfg else from_hf_config(cfg)


def test_layer_argument() -> None:
    cfg = {"model_type": "gemma3_text", "num_hidden_layers": 6}
    with pytest.raises(ValueError, match=r"layer=|layer_encodings"):
        from_hf_config(cfg)
    with pytest.raises(ValueError, match=r"layer=6.*6 layers"):
        from_hf_config(cfg, layer=6)
    with pytest.raises(ValueError, match="layer=-1"):
        from_hf_config(cfg, layer=-1)
    with pytest.raises(TypeError, match="layer"):
        from_hf_config(cfg, layer=True)
    assert from_hf_config(cfg, layer=5).base == 1_000_000.0
    llama = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2}
    llama["rope_parameters"] = {"rope_type": "default", "rope_theta": 1e4}  # (by rule: the fields say it all)
    assert isinstance(from_hf_config(llama, layer=1), RoPE)
    with pytest.raises(ValueError, match="2 layers"):
        from_hf_config(llama, layer=2)


def test_supported_models_table_has_a_row_per_layer_type() -> None:
    table = posenc.hf.supported_models_markdown()
    assert "| `gemma3_text` | sliding_attention |" in table
    assert "| `gemma3_text` | full_attention |" in table
    assert "| `phi3` | all |" in table


def _proportional_reference(head_dim: int, fraction: float, base: float) -> torch.Tensor:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = transformers.Gemma4TextConfig(num_hidden_layers=2, head_dim=8, global_head_dim=head_dim)
    cfg.rope_parameters["full_attention"] = {
        "rope_type": "proportional",
        "partial_rotary_factor": fraction,
        "rope_theta": base,
    }
    return ROPE_INIT_FUNCTIONS["proportional"](cfg, "cpu", layer_type="full_attention")[0]


@pytest.mark.parametrize(("head_dim", "fraction"), [(64, 0.25), (32, 0.5), (24, 1.0), (48, 0.3)])
def test_proportional_frequencies_match_transformers(head_dim: int, fraction: float) -> None:
    rope = RoPE(
        head_dim, scaling={"rope_type": "proportional", "partial_rotary_factor": fraction, "rope_theta": 1e6}
    )
    torch.testing.assert_close(
        rope.inv_freq[0], _proportional_reference(head_dim, fraction, 1e6), atol=0, rtol=1e-6
    )
    assert rope.rotary_dim == head_dim  # the fraction picks pairs, not channels


def test_ntk_matches_x_transformers_formula() -> None:
    # x-transformers / vLLM static NTK: base * alpha ** (dim / (dim - 2))
    rope = RoPE(64, base=10_000.0, scaling={"rope_type": "ntk", "factor": 4.0})
    plain = RoPE(64, base=10_000.0 * 4.0 ** (64 / 62))
    torch.testing.assert_close(rope.inv_freq, plain.inv_freq, atol=0, rtol=0)
    q = torch.randn(1, 2, 50, 64)
    torch.testing.assert_close(rope(q, q)[0], plain(q, q)[0])


def test_beam_full_layers_scale_queries_by_its_power_law() -> None:
    """Beam: RoPE in its sliding layers; in its full layers (rope_parameters None) no rotation and queries times
    its compute_attention_scaling, (1 + (p + 1) / 2048) ** 0.1, whole tensors (config object and dict)."""
    from transformers.models.beam import modeling_beam as beam

    config = transformers.AutoConfig.for_model("beam", num_hidden_layers=6)
    positions = torch.stack([torch.arange(30), torch.arange(30) + 5000])  # (b, t): far positions too
    q, k = torch.randn(2, 3, 30, 8), torch.randn(2, 1, 30, 8)
    want = (q.float() * beam.compute_attention_scaling(positions)).to(q.dtype)
    for form in (config, config.to_dict()):
        layers = layer_encodings(form)
        assert [type(e) for e in layers] == [RoPE] * 5 + [QueryTemperature]
        got_q, got_k = layers[-1].encode_qk(q, k, q_positions=positions, k_positions=positions)
        torch.testing.assert_close(got_q, want, atol=1e-6, rtol=1e-6)
        assert got_k is k
    temp = posenc.build("query_temperature(floor_scale=4, attn_scale=0.5, form='power')")
    assert temp.form == "power" and "form='power'" in repr(temp)
    with pytest.raises(ValueError, match=r"form must be one of \['log', 'power'\], got 'exp'"):
        QueryTemperature(form="exp")  # type: ignore[arg-type]


LAYERED = [case[0] for case in CASES] + ["gemma3n_text"]


def _settings(enc: posenc.PositionalEncoding) -> tuple:
    if isinstance(enc, RoPE):
        return ("rope", enc.head_dim, enc.layout, enc.params)
    if isinstance(enc, QueryTemperature):
        return ("temperature", enc.floor_scale, enc.attn_scale)
    return (type(enc).__name__,)


@pytest.mark.parametrize("model_type", LAYERED)
def test_config_json_defaults_match_transformers(model_type: str) -> None:
    """A bare {"model_type": ...} dict (with the layer count) gives what the config class's defaults give.

    Models converted by rule (outside the table) need their fields: there only the object and its dict agree.
    """
    cfg = transformers.AutoConfig.for_model(model_type)
    bare = {"model_type": model_type, "num_hidden_layers": cfg.num_hidden_layers}
    if model_type in SUPPORTED_MODEL_TYPES:
        assert [_settings(e) for e in layer_encodings(cfg)] == [_settings(e) for e in layer_encodings(bare)]
        if model_type != "llama4_text":  # (its chunked layers: refused, tests/hf/test_windows.py)
            assert layer_windows(cfg) == layer_windows(bare)
    assert [_settings(e) for e in layer_encodings(cfg)] == [
        _settings(e) for e in layer_encodings(cfg.to_dict())
    ]


def test_zamba2_rotates_only_with_use_mem_rope() -> None:
    """Zamba2's shared attention applies RoPE only with use_mem_rope (class default False: NoPE); its heads are
    2 * hidden_size // heads wide (its class computes attention_head_dim so, unless the config gives one)."""
    from transformers.models.zamba2 import modeling_zamba2 as zamba2

    off = transformers.Zamba2Config(hidden_size=64, num_attention_heads=2)
    for form in (off, off.to_dict()):
        assert {type(e) for e in layer_encodings(form)} == {NoPE}
    config = transformers.Zamba2Config(hidden_size=32, num_attention_heads=2, use_mem_rope=True)
    q, k = torch.randn(2, 2, 12, 32), torch.randn(2, 2, 12, 32)
    positions = torch.stack([torch.arange(12), torch.arange(12) + 100])
    cos, sin = zamba2.Zamba2RotaryEmbedding(config)(q, positions)
    q_ref, k_ref = zamba2.apply_rotary_pos_emb(q, k, cos, sin)
    raw = {k: v for k, v in config.to_dict().items() if k != "attention_head_dim"}  # (read from the sizes)
    for form in (config, config.to_dict(), raw):
        rope, layers = from_hf_config(form), layer_encodings(form)
        assert isinstance(rope, RoPE) and rope.head_dim == 32
        # one RoPE for its hybrid layers (the shared attention), NoPE for its Mamba layers
        hybrid = [kind == "hybrid" for kind in config.layer_types]
        assert [isinstance(e, RoPE) for e in layers] == hybrid and len({id(e) for e in layers}) == 2
        q_ours, k_ours = rope.encode_qk(q, k, q_positions=positions, k_positions=positions)
        torch.testing.assert_close((q_ours, k_ours), (q_ref, k_ref), atol=ATOL, rtol=1e-5)
    # use_long_context: its class sets max_position_embeddings to 16384 (the base stays rope_theta)
    long = from_hf_config({**raw, "use_long_context": True, "max_position_embeddings": 4096})
    assert (long.max_len, long.base) == (16384, 10000.0)
    with pytest.raises(TypeError, match="use_mem_rope"):
        from_hf_config({**raw, "use_mem_rope": "yes"})


def _layers_the_model_rotates(config: Any, monkeypatch: pytest.MonkeyPatch) -> set[int]:
    """The decoder layers whose attention calls its modeling module's ``apply_rotary_pos_emb`` in a forward pass
    of the tiny model."""
    from tests.hf.test_absolute import (
        _tiny_model,
    )  # (AutoModel's, else the modeling module's: Mllama's text model)

    model = _tiny_model(config).eval()
    module = importlib.import_module(type(model).__module__)
    current: list[int] = []
    rotated: set[int] = set()
    apply = module.apply_rotary_pos_emb

    def recorded(*args: Any, **kwargs: Any) -> Any:
        rotated.add(current[-1])
        return apply(*args, **kwargs)

    monkeypatch.setattr(module, "apply_rotary_pos_emb", recorded)
    for i, layer in enumerate(model.layers):
        layer.register_forward_pre_hook(lambda *_, i=i: current.append(i))
    with torch.no_grad():
        # (Mllama's cross-attention layers run only with image states: one image token's)
        image = (
            {"cross_attention_states": torch.zeros(1, 1, 32)} if "cross_attention_layers" in config else {}
        )
        model(input_ids=torch.randint(3, 60, (1, 6)), **image)
    return rotated


@pytest.mark.parametrize(
    ("model_type", "change"),
    [
        ("afmoe", {}),  # only its sliding layers
        ("exaone4", {}),  # its sliding layers while it has a sliding_window...
        ("exaone4", {"sliding_window": None, "layer_types": ["full_attention"] * 6}),  # ... else every layer
        ("cohere2_moe", {}),  # its sliding layers...
        ("cohere2_moe", {"first_k_dense_replace": 2}),  # ... and its dense-MLP prefix (force_rope)
        # not its cross-attention layers
        ("mllama_text_model", {"cross_attention_layers": [1, 4], "pad_token_id": 0}),
        ("exaone_moe", {}),  # EXAONE 4's rule
        ("kolibri1", {}),
        ("flint", {}),  # its sliding layers, as Cohere 2
        ("lara_mini", {}),  # only its sliding layers
        ("cohere2", {}),  # (by table) its sliding layers
        # hybrids: not their recurrent layers (MiniMax's lightning attention, gated DeltaNet, RG-LRU) or
        # convolutions; RecurrentGemma's and Bamba's classes derive their layer types (to_dict() leaves them out)
        ("minimax", {}),
        ("qwen3_next", {}),
        ("olmo_hybrid", {"pad_token_id": 0}),
        ("lfm3", {"pad_token_id": 0}),
        ("recurrent_gemma", {}),
        ("bamba", {"attn_layer_indices": [1, 4], "mamba_n_heads": 8, "mamba_d_head": 8}),
    ],
)
def test_models_that_rotate_some_layers_get_nope_in_the_others(
    model_type: str, change: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One RoPE dict, but the model's attention rotates only some layers: posenc's per-layer encodings rotate
    exactly the layers whose attention calls the model's apply function (config object and config.json), and
    the dicts give the object's sliding windows."""
    sizes = {"hidden_size": 32, "intermediate_size": 32, "num_attention_heads": 2, "num_key_value_heads": 2}
    sizes |= {"num_hidden_layers": 6, "vocab_size": 64, "head_dim": 16}
    config = transformers.AutoConfig.for_model(model_type, **sizes, **change)
    expected = _layers_the_model_rotates(config, monkeypatch)
    assert 0 < len(expected) <= 6
    # (and a config.json leaving out a window equal to its class default, which decides the layers too)
    default = getattr(type(config)(), "sliding_window", None) == getattr(config, "sliding_window", None)
    bare = {k: v for k, v in config.to_dict().items() if k != "sliding_window" or not default}
    for form in (config, config.to_dict(), bare):
        assert {i for i, e in enumerate(layer_encodings(form)) if isinstance(e, RoPE)} == expected, form
        assert {i for i in range(6) if isinstance(from_hf_config(form, layer=i), RoPE)} == expected, form
        assert layer_windows(form) == layer_windows(config), form  # (the window the bare dict leaves out too)


@pytest.mark.parametrize("kind", [None, "nope", "absolute", "rope"])
def test_granitemoehybrid_rotates_only_where_its_model_builds_a_rotary(kind: str | None) -> None:
    """GraniteMoeHybrid builds its rotary module only for position_embedding_type 'rope' (class default None;
    Granite 4.0's hybrid checkpoints say 'nope'): without it every attention layer is NoPE. (The zoo checks the
    rotation itself, with 'rope'.)"""
    config = transformers.GraniteMoeHybridConfig(
        hidden_size=32, num_attention_heads=2, num_key_value_heads=2, num_hidden_layers=1, intermediate_size=32,
        vocab_size=64, mamba_n_heads=4, mamba_d_state=8, position_embedding_type=kind,
    )  # fmt: skip
    rotates = transformers.GraniteMoeHybridModel(config).rotary_emb is not None
    for form in (config, config.to_dict()):
        encoding = from_hf_config(form)
        assert isinstance(encoding, RoPE if rotates else NoPE), (kind, encoding)
    assert rotates == (kind == "rope")


@pytest.mark.parametrize("kind", ["absolute", "relative_key"])
def test_position_embedding_type_beside_rope_fields_is_refused_where_the_code_does_not_read_it(
    kind: str,
) -> None:
    """Llama's code reads no position_embedding_type: a value that does not say RoPE is refused by name (it
    became a learned table); 'rope' / 'rotary' (hub configs of rotary BERTs) are read as the fields say. ESM,
    whose code reads it, builds a table for 'absolute' and nothing for the rest, which is refused too."""
    llama = transformers.LlamaConfig(hidden_size=32, num_attention_heads=2).to_dict()
    with pytest.raises(ValueError, match=f"position_embedding_type={kind!r} beside RoPE fields"):
        from_hf_config({**llama, "position_embedding_type": kind})
    for said in ("rope", "rotary"):
        assert repr(from_hf_config({**llama, "position_embedding_type": said})) == repr(from_hf_config(llama))
    esm = transformers.EsmConfig(hidden_size=32, num_attention_heads=2, pad_token_id=1).to_dict()
    if kind == "absolute":
        assert isinstance(from_hf_config({**esm, "position_embedding_type": kind}), posenc.Learned)
    else:
        with pytest.raises(ValueError, match="accepted: 'absolute' or 'rotary'"):
            from_hf_config({**esm, "position_embedding_type": kind})


def test_minimax_m3_vl_rotary_dim_must_agree_with_the_channels_its_code_rotates() -> None:
    """MiniMax M3 VL's code rotates head_dim * partial_rotary_factor channels and does not read rotary_dim: a
    config whose two agree converts (the zoo checks it); its class default (64 of 128, factor 1) is refused."""
    text = transformers.AutoConfig.for_model("minimax_m3_vl_text")
    with pytest.raises(ValueError, match=r"'rotary_dim'=64 .* give 128 rotated channels"):
        from_hf_config(text)
    rope = {"rope_type": "default", "rope_theta": 5e6, "partial_rotary_factor": 0.5}
    agree = transformers.AutoConfig.for_model("minimax_m3_vl", text_config={"rope_parameters": rope})
    for form in (agree, agree.to_dict(), agree.text_config.to_dict()):
        enc = from_hf_config(form)
        assert (enc.head_dim, enc.rotary_dim, enc.base) == (128, 64, 5e6)


def test_dory_config_json_lists_attention_and_mlp_blocks_apart() -> None:
    """Dory's config.json (and its to_dict()) lists each layer as an attention block and an "mlp" block; its
    class keeps every other entry and halves num_hidden_layers: one encoding (and window) per decoder layer."""
    config = transformers.AutoConfig.for_model(
        "dory", num_hidden_layers=8, n_input_layers=2, n_output_layers=2, sliding_window=16
    )
    assert config.to_dict()["layer_types"][:4] == ["sliding_attention", "mlp", "sliding_attention", "mlp"]
    for form in (config, config.to_dict()):
        layers = layer_encodings(form)
        assert [e.base for e in layers] == [1e7 if t == "full_attention" else 1e4 for t in config.layer_types]
        assert layer_windows(form) == [16 if t == "sliding_attention" else None for t in config.layer_types]


def test_minimax_m2_config_json_rotary_dim_is_its_partial_rotation() -> None:
    """MiniMax M2's released config.json gives rotary_dim (64 of 128) and no partial_rotary_factor: its class
    turns it into partial_rotary_factor = rotary_dim / head_dim (a factor given wins)."""
    raw = {"model_type": "minimax_m2", "hidden_size": 3072, "num_attention_heads": 48, "head_dim": 128}
    raw |= {"rotary_dim": 64, "rope_theta": 5e6}
    hf = transformers.MiniMaxM2Config.from_dict(raw)
    for form in (raw, hf, hf.to_dict()):
        rope = from_hf_config(form)
        assert (rope.head_dim, rope.rotary_dim, rope.base) == (128, 64, 5e6)
    with pytest.raises(ValueError, match=r"'rotary_dim'=64 .* give 32 rotated channels"):
        from_hf_config({**raw, "partial_rotary_factor": 0.25})


@pytest.mark.parametrize("sliding", [{}, {"swa_qk_nope_head_dim": 224}])
def test_dots3_note_rotates_each_layers_q_pe_at_its_layer_types_base(monkeypatch, sliding) -> None:
    """dots3 Note's MLA layers against its own rotary module and apply function (the zoo's check, every layer
    type, default / offset / batched positions, object and dict), its sliding layers' q_pe narrowed too."""
    from posenc.app import hf_zoo

    monkeypatch.setitem(hf_zoo.ROTARY_VARIANT, "dots3_note_text", {"num_hidden_layers": 4, **sliding})
    assert hf_zoo.survey(["dots3_note_text"])["dots3_note_text"] == ("matched", "table")
    config = transformers.AutoConfig.for_model("dots3_note_text", num_hidden_layers=4, **sliding)
    layers = layer_encodings(config)
    rotated = 32 if sliding else 64
    assert [(e.head_dim, e.base, e.layout) for e in layers] == [(64, 8e7, "interleaved")] * 2 + [
        (rotated, 5e4, "interleaved")
    ] * 2
    broken = config.to_dict()
    broken["rope_parameters"]["indexed_attention"]["partial_rotary_factor"] = (
        0.5  # frequencies for 128 channels
    )
    with pytest.raises(ValueError, match=r"layer 0 rotates qk_rope_head_dim=64 channels, but .* = 128"):
        layer_encodings(broken)
    with pytest.raises(ValueError, match="needs 'layer_types' and one rope_parameters dict per layer type"):
        layer_encodings({**config.to_dict(), "layer_types": None})


#: Hybrids whose attention adds no position (posenc: NoPE in every layer), with tiny sizes their classes accept.
_NOPE_HYBRIDS: dict[str, dict[str, Any]] = {
    "jamba": {"num_hidden_layers": 2, "attn_layer_period": 2, "attn_layer_offset": 1, "num_experts": 2},
    "zamba": {
        "num_hidden_layers": 12,
        "n_mamba_heads": 2,
        "attention_hidden_size": 64,
        "attention_head_dim": 16,
    },
    "nemotron_h": {
        "layers_block_type": ["mamba", "attention"],
        "mamba_num_heads": 4,
        "mamba_head_dim": 16,
        "n_groups": 1,
    },
    "kimi_linear": {
        "num_hidden_layers": 2,
        "layer_types": ["linear_attention", "full_attention"],
        "linear_attn_config": {"head_dim": 8, "num_heads": 4, "short_conv_kernel_size": 4},
        "pad_token_id": 0,
    },
    # (its indexer keeps 4 of the 9 keys: the sparse selection runs too)
    "glm5_next_text": {
        "num_hidden_layers": 4,  # three linear-attention layers, then one indexed attention
        "mlp_layer_types": ["dense"] * 4,
        **{"kv_lora_rank": 16, "q_lora_rank": 16, "v_head_dim": 8, "qk_nope_head_dim": 8},
        **{"index_topk": 4, "index_kpool": 2, "index_head_dim": 8, "index_n_heads": 2},
        **{"linear_head_dim": 8, "linear_num_heads": 2, "pad_token_id": 0},
    },
}


@pytest.mark.parametrize("model_type", [*_NOPE_HYBRIDS, "llama"])
def test_hybrids_without_position_in_attention_are_nope(model_type: str) -> None:
    """Jamba, Zamba, NemotronH, Kimi Linear and GLM-5 Next attend without positions (their Mamba, KDA and linear
    attention layers order the tokens): their model holds no rotary or position table, and its output does not
    change with the positions it is given, as posenc's NoPE in every layer says. Llama, which rotates, changes
    (the check can fail)."""
    sizes = {
        **SMALL,
        "num_key_value_heads": 4,
        "num_attention_heads": 4,
        "mamba_d_state": 4,
        "ssm_state_size": 4,
    }
    config = transformers.AutoConfig.for_model(model_type, **sizes, **_NOPE_HYBRIDS.get(model_type, {}))
    model = transformers.AutoModel.from_config(config).eval()
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 9, dtype=torch.long)  # (given: no packed sequences read from the positions)
    gapped = torch.tensor([[0, 3, 4, 10, 11, 12, 30, 31, 40]] * 2)
    with torch.no_grad():
        outputs = [
            model(input_ids=ids, attention_mask=mask, position_ids=p).last_hidden_state
            for p in (gapped, None)
        ]
    encodings = layer_encodings(config)
    if model_type == "llama":
        assert not torch.allclose(*outputs) and isinstance(encodings[0], RoPE)
        return
    torch.testing.assert_close(outputs[0], outputs[1], atol=0, rtol=0)
    tables = [m for m in model.modules() if isinstance(m, torch.nn.Embedding) and m.num_embeddings != 64]
    assert not tables and not any("Rotary" in type(m).__name__ for m in model.modules())
    assert len(encodings) == config.num_hidden_layers and all(type(e) is NoPE for e in encodings)
    assert [type(e) for e in layer_encodings(config.to_dict())] == [NoPE] * config.num_hidden_layers


@pytest.mark.parametrize("model_type", ["glm5_next_text", "jamba", "kimi_linear", "zamba", "nemotron_h"])
def test_nope_hybrids_config_json_counts_the_classes_layers(model_type: str) -> None:
    """A ``config.json`` leaving the layer count out takes the class's; NemotronH counts its ``layers_block_type``
    (its class has no default count of its own to fall back on: without the pattern, refused by name)."""
    default = transformers.AutoConfig.for_model(model_type)
    if model_type == "nemotron_h":
        given = {"model_type": model_type, "layers_block_type": ["mamba", "attention", "moe"]}
        assert len(layer_encodings(given)) == 3
        with pytest.raises(ValueError, match="missing 'num_hidden_layers'"):
            layer_encodings({"model_type": model_type})
        return
    assert len(layer_encodings({"model_type": model_type})) == default.num_hidden_layers


@pytest.mark.parametrize("model_type", ["mamba", "mamba2", "falcon_mamba", "rwkv", "xlstm"])
def test_models_without_attention_are_refused_naming_it(model_type: str) -> None:
    config = transformers.AutoConfig.for_model(model_type)
    with torch.device("meta"):
        model = transformers.AutoModel.from_config(config)
    names = {type(m).__name__ for m in model.modules()}  # (RWKV's "attention": its recurrent time mixing)
    assert not any("Attention" in name for name in names - {"RwkvSelfAttention"})
    for given in (config, config.to_dict()):
        with pytest.raises(ValueError, match="so no position encoding applies"):
            layer_encodings(given)


@pytest.mark.parametrize(
    ("model_type", "module"),
    [
        ("xlnet", "XLNetRelativeAttention"),
        ("funnel", "FunnelRelMultiheadAttention"),
        ("cpmant", "CpmAntSegmentPositionEmbedding"),
        ("inkling_text", "InklingRelativeLogits"),
        ("inkling2_text", "Inkling2RelativePositionBias"),
        ("inkling2_loop_text", "Inkling2LoopRelativePositionBias"),
    ],
)
def test_relative_schemes_of_their_own_are_refused_naming_them(model_type: str, module: str) -> None:
    """Models whose attention adds positions in a way no posenc encoding computes: refused with what it is (the
    module that does it is in the model built from the class defaults)."""
    config = transformers.AutoConfig.for_model(model_type)
    # (AutoModel maps Funnel to two classes, chosen by the architectures a checkpoint names)
    build = transformers.FunnelModel if model_type == "funnel" else transformers.AutoModel.from_config
    with torch.device("meta"):
        model = build(config)
    assert module in {type(m).__name__ for m in model.modules()}
    for given in (config, config.to_dict()):
        with pytest.raises(ValueError, match=f"model_type '{model_type}' is not supported: its"):
            layer_encodings(given)
