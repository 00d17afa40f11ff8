"""Encoder-decoder models whose two stacks use different encodings: ``stack=`` in from_hf_config / from_hf_model.

Whisper (a fixed sinusoid table in the encoder, its ``sinusoids()``; a learned table in the decoder), LED
(a learned table per stack, each of its own length) and SeamlessM4T v1/v2's text stacks (M2M100's
sinusoids, beside the speech encoder's relative tables). Tiny random models built from configs (nothing
downloaded): whole tensors against each model's own position module, at positions from 0 and from a
cache offset; the config object, its ``config.json`` dict and a bare ``{"model_type": ...}`` agree.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

import posenc
from posenc.hf import from_hf_config, from_hf_model, layer_encodings, layer_windows

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

T, PAST = 6, 5
SIZES = {
    "d_model": 32,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 32,
    "decoder_ffn_dim": 32,
    "vocab_size": 64,
}


def _whisper() -> transformers.WhisperModel:
    config = transformers.WhisperConfig(
        **SIZES, num_mel_bins=8, max_source_positions=40, max_target_positions=24, pad_token_id=1
    )
    return transformers.WhisperModel(config).eval()


def _led() -> transformers.LEDModel:
    config = transformers.LEDConfig(
        **SIZES, max_encoder_position_embeddings=48, max_decoder_position_embeddings=24, attention_window=4
    )
    return transformers.LEDModel(config).eval()


def _rows(pe: posenc.PositionalEncoding, positions: torch.Tensor) -> torch.Tensor:
    """What ``pe`` adds to zero embeddings at ``positions`` ((t,) or (b, t))."""
    batch = positions.shape[0] if positions.dim() == 2 else 1
    return pe.encode_input(torch.zeros(batch, positions.shape[-1], pe.d_model), positions)


def test_whisper_encoder_is_its_fixed_sinusoid_table() -> None:
    """The encoder adds all ``max_source_positions`` rows of ``sinusoids()``: tensor2tensor spacing, from 0."""
    from transformers.models.whisper.modeling_whisper import sinusoids

    model = _whisper()
    table = model.encoder.embed_positions.weight  # sinusoids(40, 32), as the model initialises it
    for source in (model, model.config, model.config.to_diff_dict()):
        pe = (
            from_hf_model(source, stack="encoder")
            if source is model
            else from_hf_config(source, stack="encoder")
        )
        assert isinstance(pe, posenc.Sinusoidal) and not list(pe.parameters())
        # the model computes its angles in float32, posenc in float64 (positions < 40 here)
        torch.testing.assert_close(_rows(pe, torch.arange(40))[0], table, atol=1e-5, rtol=0)
        torch.testing.assert_close(
            _rows(pe, torch.arange(PAST, PAST + T))[0], table[PAST : PAST + T], atol=1e-5, rtol=0
        )
    # the real size (Whisper tiny / large: d_model 384 / 1280, 1500 frames): the same formula in float64
    torch.set_default_dtype(torch.float64)
    try:
        exact = {d: sinusoids(1500, d) for d in (384, 1280)}
    finally:
        torch.set_default_dtype(torch.float32)
    for d, ref in exact.items():
        pe = from_hf_config({"model_type": "whisper", "d_model": d}, stack="encoder")
        torch.testing.assert_close(_rows(pe, torch.arange(1500))[0].double(), ref, atol=1e-6, rtol=0)
    default = from_hf_config(transformers.WhisperConfig(), stack="encoder")
    assert (default.d_model, default.max_len) == (384, 1500)
    assert repr(default) == repr(from_hf_config({"model_type": "whisper"}, stack="encoder"))


def test_whisper_decoder_table_is_copied_and_read_by_position() -> None:
    model = _whisper()
    module = model.decoder.embed_positions
    generation = transformers.WhisperForConditionalGeneration(model.config)
    for source, decoder in (
        (model, model.decoder),
        (generation, generation.model.decoder),
        (model.decoder, model.decoder),
    ):
        pe = from_hf_model(source, stack="decoder")
        assert repr(pe) == "Learned(32, max_len=24)"
        torch.testing.assert_close(pe.weight, decoder.embed_positions.weight, atol=0, rtol=0)
    pe = from_hf_model(model, stack="decoder")
    ids = torch.randint(3, 64, (2, T))
    with torch.no_grad():  # from 0, from a cache offset, and per-row position_ids
        torch.testing.assert_close(_rows(pe, torch.arange(T))[0], module(ids), atol=0, rtol=0)
        torch.testing.assert_close(
            _rows(pe, torch.arange(PAST, PAST + T))[0], module(ids, PAST), atol=0, rtol=0
        )
        rows = torch.stack([torch.arange(T), torch.arange(T) + PAST])
        torch.testing.assert_close(_rows(pe, rows), module(ids, position_ids=rows), atol=0, rtol=0)
    for config in (model.config, model.config.to_diff_dict()):
        assert repr(from_hf_config(config, stack="decoder")) == repr(pe)
    bare = from_hf_config({"model_type": "whisper"}, stack="decoder")
    assert (
        repr(bare)
        == repr(from_hf_config(transformers.WhisperConfig(), stack="decoder"))
        == "Learned(384, max_len=448)"
    )


@pytest.mark.parametrize("stack", ["encoder", "decoder"])
def test_led_tables_per_stack(stack: str) -> None:
    """Each stack's own table (48 / 24 rows here), from row 0 (no offset), by index from the cache length."""
    model = _led()
    module = getattr(model, stack).embed_positions
    for source in (model, transformers.LEDForConditionalGeneration(model.config)):
        pe = from_hf_model(source, stack=stack)
        owner = source.led if hasattr(source, "led") else source
        torch.testing.assert_close(pe.weight, getattr(owner, stack).embed_positions.weight, atol=0, rtol=0)
    pe = from_hf_model(model, stack=stack)
    assert repr(pe) == f"Learned(32, max_len={48 if stack == 'encoder' else 24})"
    with torch.no_grad():
        torch.testing.assert_close(_rows(pe, torch.arange(T))[0], module((2, T)), atol=0, rtol=0)
        torch.testing.assert_close(
            _rows(pe, torch.arange(PAST, PAST + T))[0], module((2, T), PAST), atol=0, rtol=0
        )
    for config in (model.config, model.config.to_diff_dict()):
        assert repr(from_hf_config(config, stack=stack)) == repr(pe)
    rows = 16384 if stack == "encoder" else 1024
    for config in (transformers.LEDConfig(), {"model_type": "led"}):
        assert repr(from_hf_config(config, stack=stack)) == f"Learned(1024, max_len={rows})"


@pytest.mark.parametrize("version", ["seamless_m4t", "seamless_m4t_v2"])
@pytest.mark.parametrize("stack", ["text_encoder", "decoder"])
def test_seamless_m4t_text_stacks_are_m2m100_sinusoids(version: str, stack: str) -> None:
    """The text encoder and decoder build the same table: real tokens numbered from ``pad_token_id + 1``,
    padding skipped, a cache offset added."""
    config_class = (
        transformers.SeamlessM4TConfig if version == "seamless_m4t" else transformers.SeamlessM4Tv2Config
    )
    module_name = "SeamlessM4TSinusoidalPositionalEmbedding"
    if version == "seamless_m4t_v2":
        from transformers.models.seamless_m4t_v2 import modeling_seamless_m4t_v2 as modeling

        module_name = module_name.replace("M4T", "M4Tv2")
    else:
        from transformers.models.seamless_m4t import modeling_seamless_m4t as modeling
    config = config_class(hidden_size=32, max_position_embeddings=40, pad_token_id=3)
    # as SeamlessM4TEncoder / SeamlessM4TDecoder build theirs
    module = getattr(modeling, module_name)(
        config.max_position_embeddings, config.hidden_size, config.pad_token_id
    )
    pe = from_hf_model(SimpleNamespace(config=config, state_dict=dict), stack=stack)
    assert repr(pe) == "Sinusoidal(32, base=10000.0, layout='concat', freq_spacing='tensor2tensor', offset=4)"
    for form in (
        config.to_diff_dict(),
        {"model_type": version, "hidden_size": 32, "max_position_embeddings": 40, "pad_token_id": 3},
    ):
        assert repr(from_hf_config(form, stack=stack)) == repr(pe)
    ids = torch.randint(5, 64, (2, T))
    keep = torch.ones(2, T, dtype=torch.bool)
    keep[0, :2] = False  # row 0 padded on the left
    ids = ids.masked_fill(~keep, config.pad_token_id)
    for past in (0, PAST):
        ours = _rows(pe, posenc.mask_to_positions(keep) + past)
        torch.testing.assert_close(ours[keep], module(ids, cache_length=past)[keep], atol=1e-5, rtol=0)
    # a config.json leaving out pad_token_id and the sizes: the class's (pad 0: offset 1)
    assert repr(from_hf_config({"model_type": version}, stack=stack)) == repr(
        from_hf_config(config_class(), stack=stack)
    )
    assert from_hf_config({"model_type": version}, stack=stack).offset == 1


def test_stack_is_required_where_the_stacks_differ() -> None:
    whisper, led = _whisper(), _led()
    for model in (whisper, led):
        name = model.config.model_type
        for call, arg in (
            (from_hf_config, model.config),
            (from_hf_model, model),
            (layer_encodings, model.config),
        ):
            with pytest.raises(
                ValueError,
                match=rf"{name}: its stacks use different position encodings; pass stack='encoder' or 'decoder'",
            ):
                call(arg)
        with pytest.raises(
            ValueError, match=rf"stack must be None, 'encoder' or 'decoder' for {name}, got 'text_encoder'"
        ):
            from_hf_config(model.config, stack="text_encoder")
        with pytest.raises(
            ValueError, match=rf"stack must be None, 'encoder' or 'decoder' for {name}, got 'middle'"
        ):
            from_hf_model(model, stack="middle")
    with pytest.raises(ValueError, match="stack must be None, 'encoder' or 'decoder' for whisper, got 1"):
        from_hf_config({"model_type": "whisper"}, stack=1)
    with pytest.raises(ValueError, match=r"got \['decoder'\]"):  # (not hashed)
        from_hf_config({"model_type": "whisper"}, stack=["decoder"])
    message = "stack must be None, 'encoder' or 'text_encoder' or 'decoder' for seamless_m4t, got 'speech'"
    with pytest.raises(ValueError, match=message):
        from_hf_config({"model_type": "seamless_m4t"}, stack="speech")
    # SeamlessM4T keeps its speech encoder as the default stack (relative tables per layer)
    assert isinstance(from_hf_config({"model_type": "seamless_m4t"}), posenc.RelPosXL)
    assert isinstance(from_hf_config({"model_type": "seamless_m4t_v2"}, stack="encoder"), posenc.ShawRelative)


@pytest.mark.parametrize("name", ["t5", "bart"])
def test_layer_encodings_of_a_stack_has_that_stacks_layers(name: str) -> None:
    """``layer_encodings(config, stack=)``: one encoding per layer of that stack, as the model builds it
    (T5's ``num_layers`` / ``num_decoder_layers``, BART's ``encoder_layers`` / ``decoder_layers``); T5's
    decoder bias is causal. A BART ``config.json`` (no ``num_hidden_layers``) counts its encoder's, as the
    config object does."""
    if name == "t5":
        config = transformers.T5Config(
            vocab_size=64, d_model=32, d_kv=8, d_ff=32, num_heads=2, num_layers=3, num_decoder_layers=2
        )
        model = transformers.T5Model(config)
        counts = {"encoder": len(model.encoder.block), "decoder": len(model.decoder.block)}
    else:
        sizes = {**SIZES, "encoder_layers": 3, "decoder_layers": 2}
        model = transformers.BartModel(transformers.BartConfig(**sizes, max_position_embeddings=32))
        config = model.config
        counts = {"encoder": len(model.encoder.layers), "decoder": len(model.decoder.layers)}
    assert counts == {"encoder": 3, "decoder": 2}
    for form in (config, config.to_dict()):
        assert len(layer_encodings(form)) == len(layer_windows(form)) == counts["encoder"]
        for stack, n in counts.items():
            encodings = layer_encodings(form, stack=stack)
            assert len(encodings) == n and layer_windows(form, stack=stack) == [None] * n
            if name == "t5":
                assert encodings[0].causal == (stack == "decoder")


def test_seamless_m4t_layer_encodings_per_stack() -> None:
    """Its speech encoder (the default stack) has fresh relative tables per layer; its text stacks share
    one sinusoid each, over their own layer counts; ``layer_windows`` counts the same layers."""
    config = transformers.SeamlessM4TConfig(speech_encoder_layers=4, encoder_layers=3, decoder_layers=2)
    for form in (config, config.to_dict()):
        speech = layer_encodings(form, stack="encoder")
        assert len(speech) == 4 and len(set(map(id, speech))) == 4
        assert [type(e) for e in layer_encodings(form)] == [posenc.RelPosXL] * 4
        for stack, n in (("text_encoder", 3), ("decoder", 2)):
            text = layer_encodings(form, stack=stack)
            assert len(text) == n and len(set(map(id, text))) == 1 and isinstance(text[0], posenc.Sinusoidal)
            assert layer_windows(form, stack=stack) == [None] * n
        assert layer_windows(form, stack="encoder") == [None] * 4
    with pytest.raises(
        ValueError, match="stack must be None, 'encoder' or 'decoder' for t5, got 'text_encoder'"
    ):
        layer_windows({"model_type": "t5"}, stack="text_encoder")


def test_a_config_json_without_a_sub_config_its_class_fills_is_refused() -> None:
    """T5Gemma's class builds a default ``encoder`` where a ``config.json`` has none (26 layers, windows of 4096
    on every other one); posenc holds no such defaults. Its layer windows were ``[None] * n`` of a top-level
    ``num_hidden_layers``. The table of such parents is transformers' (every sub-config posenc reads as a
    stack or thinker that the class fills in when it is left out)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from posenc.hf.configs import _DEFAULT_STACKS, ENCODER_OF

    fields = ("encoder", "decoder", "encoder_config", "decoder_config", "thinker_config")
    filled = {}
    for model_type, config_class in CONFIG_MAPPING.items():
        try:
            full = config_class().to_dict()
        except Exception:  # (its class needs arguments)
            continue
        given = tuple(f for f in fields if isinstance(full.get(f), dict))
        pairs = given in (("encoder", "decoder"), ("encoder_config", "decoder_config"))
        # (FastSpeech2Conformer's class builds them from its top-level keys, which posenc reads too)
        if model_type == "fastspeech2_conformer":
            raw = {k: v for k, v in full.items() if k not in given}
            assert repr(layer_encodings(raw, stack="decoder")) == repr(layer_encodings(full, stack="decoder"))
            continue
        # (Parakeet's heads read their encoder_config as their own)
        if pairs or given == ("thinker_config",) or model_type in ENCODER_OF:
            filled[model_type] = given
            for field in given:
                raw = {k: v for k, v in full.items() if k != field} | {"num_hidden_layers": 2}
                assert getattr(config_class.from_dict(raw), field) is not None  # (its class fills it in)
                for read in (layer_encodings, layer_windows):
                    with pytest.raises(ValueError, match=f"{model_type} config: no '{field}' dict"):
                        read(raw)
    assert filled == _DEFAULT_STACKS


def test_a_parent_holding_its_models_configs_is_refused_naming_them() -> None:
    """MusicGen's config holds its text encoder's, audio codec's and decoder's: the refusal names them, and the
    decoder's converts."""
    from transformers import MusicgenConfig

    config = MusicgenConfig()
    held = (
        "text_encoder (t5), audio_encoder (encodec), decoder (musicgen_decoder): to convert one of its models"
    )
    for form in (config, config.to_dict()):
        with pytest.raises(
            ValueError, match=r"it holds the configs " + held.replace("(", r"\(").replace(")", r"\)")
        ):
            from_hf_config(form)
    assert isinstance(from_hf_config(config.decoder), posenc.Sinusoidal)
    with pytest.raises(
        ValueError, match=r"it is not one of [^;]*xglm, zamba$"
    ):  # (no configs held: nothing more said)
        from_hf_config({"model_type": "bert_generation_like_without_fields"})


@pytest.mark.parametrize("name", ["time_series_transformer", "informer", "autoformer"])
def test_forecasting_stacks_add_the_table_from_their_first_step(name: str) -> None:
    """Time Series Transformer, Informer, Autoformer: what each stack's forward adds (a forward pass, whole
    tensors), the decoder's from context_length (Autoformer's from context_length - label_length)."""
    extra = {"label_length": 2} if name == "autoformer" else {}
    config = transformers.AutoConfig.for_model(
        name, prediction_length=4, context_length=6, d_model=16, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16,
        lags_sequence=[1, 2], num_time_features=1, **extra,
    )  # fmt: skip
    model = transformers.AutoModel.from_config(config).eval()
    added: dict[str, torch.Tensor] = {}
    for stack in ("encoder", "decoder"):
        module = getattr(model, stack).embed_positions
        module.register_forward_hook(lambda m, args, out, stack=stack: added.__setitem__(stack, out))
    past = 6 + 2  # (context_length steps and the largest lag)
    with torch.no_grad():
        model(
            past_values=torch.randn(1, past), past_time_features=torch.randn(1, past, 1),
            past_observed_mask=torch.ones(1, past), future_values=torch.randn(1, 4),
            future_time_features=torch.randn(1, 4, 1),
        )  # fmt: skip
    for stack, form in (("encoder", config), ("decoder", config.to_dict())):
        pe = from_hf_config(form, stack=stack)
        rows = added[stack].reshape(-1, 16)
        torch.testing.assert_close(pe.encode_input(torch.zeros(1, len(rows), 16))[0], rows, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="its stacks use different position encodings"):
        from_hf_config(config)
    with pytest.raises(ValueError, match="d_model must be even for a sin/cos table, got 15"):
        from_hf_config({**config.to_dict(), "d_model": 15}, stack="encoder")
