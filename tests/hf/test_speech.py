"""posenc.from_hf_model(model, layer=i) for the conformer speech encoders: whole-layer attention parity.

Tiny random Wav2Vec2-BERT, wav2vec2-conformer, SeamlessM4T-v2 and Parakeet speech encoders (built from
configs, nothing downloaded): the attention output of one layer's self-attention equals
``posenc.attention`` with the encoding ``from_hf_model`` gives for that layer.
"""

from __future__ import annotations

import os

import pytest
import torch

import posenc
from posenc.hf import from_hf_config, from_hf_model, layer_encodings, layer_windows

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

# float32 attention outputs computed in another order.
FP32 = {"rtol": 1e-5, "atol": 1e-5}
HIDDEN, HEADS, LAYERS = 32, 4, 3


def _randomise(model: torch.nn.Module) -> None:
    """Every parameter N(0, 0.3): the models' tiny inits would hide a wrong term or a wrong layer."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)


#: The sizes every tiny encoder below shares (its heads and layers under their standard names)
SIZES = {
    "hidden_size": HIDDEN,
    "num_attention_heads": HEADS,
    "num_hidden_layers": LAYERS,
    "intermediate_size": 37,
    "attn_implementation": "eager",
}


def _wav2vec2_bert(mode: str):
    config = transformers.Wav2Vec2BertConfig(
        **SIZES,
        feature_projection_input_dim=16,
        position_embeddings_type=mode,
        left_max_position_embeddings=5,
        right_max_position_embeddings=2,
        max_source_positions=32,
    )
    return transformers.Wav2Vec2BertModel(config).eval()


def _wav2vec2_conformer(mode: str):
    config = transformers.Wav2Vec2ConformerConfig(
        **SIZES,
        conv_dim=(8,),
        conv_stride=(1,),
        conv_kernel=(1,),
        num_conv_pos_embeddings=4,
        num_conv_pos_embedding_groups=2,
        position_embeddings_type=mode,
        max_source_positions=32,
    )
    return transformers.Wav2Vec2ConformerModel(config).eval()


def _seamless_v2(mode: str):
    from transformers.models.seamless_m4t_v2.modeling_seamless_m4t_v2 import SeamlessM4Tv2SpeechEncoder

    config = transformers.SeamlessM4Tv2Config(
        hidden_size=HIDDEN,
        speech_encoder_attention_heads=HEADS,
        speech_encoder_layers=LAYERS,
        speech_encoder_intermediate_size=37,
        feature_projection_input_dim=16,
        position_embeddings_type=mode,
        left_max_position_embeddings=5,
        right_max_position_embeddings=2,
        attn_implementation="eager",
    )
    return SeamlessM4Tv2SpeechEncoder(config).eval()


def _parakeet(mode: str, **more):
    config = transformers.ParakeetEncoderConfig(**more, **SIZES, subsampling_conv_channels=4, num_mel_bins=16)
    return transformers.ParakeetEncoder(config).eval()


MODELS = {
    ("wav2vec2-bert", "relative_key"): _wav2vec2_bert,
    ("wav2vec2-bert", "relative"): _wav2vec2_bert,
    ("wav2vec2-conformer", "relative"): _wav2vec2_conformer,
    ("seamless_m4t_v2", "relative_key"): _seamless_v2,
    ("parakeet_encoder", "relative"): _parakeet,
}


def _layer_output(model, layer: int, x: torch.Tensor, encoding: posenc.PositionalEncoding) -> tuple:
    """(transformers' self-attention output of ``layer``, posenc.attention's with ``encoding``)."""
    b, t, _ = x.shape
    dh = encoding.head_dim
    with torch.no_grad():
        if hasattr(model, "encode_positions"):  # Parakeet: the encoder itself, its table given to each layer
            attn = model.layers[layer].self_attn
            expected = attn(x, position_embeddings=model.encode_positions(x))[0]
            projections = attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj
        else:
            attn = model.encoder.layers[layer].self_attn
            embed = getattr(model.encoder, "embed_positions", None)
            rel = embed(x) if embed is not None else None
            expected = attn(x, relative_position_embeddings=rel)[0] if rel is not None else attn(x)[0]
            projections = attn.linear_q, attn.linear_k, attn.linear_v, attn.linear_out

        def split(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, HEADS, dh).transpose(1, 2)

        q, k, v = (split(project(x)) for project in projections[:3])
        out = posenc.attention(q, k, v, encoding)
        got = projections[3](out.transpose(1, 2).reshape(b, t, HEADS * dh))
    return expected, got


@pytest.mark.parametrize(("model_type", "mode"), list(MODELS))
def test_each_layer_attention_equals_the_models(model_type: str, mode: str, device: torch.device) -> None:
    model = MODELS[(model_type, mode)](mode)
    _randomise(model)
    model.to(device)
    expected_class = posenc.ShawRelative if mode == "relative_key" else posenc.RelPosXL
    x = torch.randn(2, 12, HIDDEN, generator=torch.Generator().manual_seed(1)).to(device)
    outputs = []
    for layer in (0, LAYERS - 1):
        encoding = from_hf_model(model, layer=layer).to(device)
        assert type(encoding) is expected_class
        expected, got = _layer_output(model, layer, x, encoding)
        torch.testing.assert_close(got, expected, **FP32)
        outputs.append(got)
    # another layer's tables give another output (each layer has its own)
    wrong = _layer_output(model, 0, x, from_hf_model(model, layer=LAYERS - 1).to(device))[1]
    assert not torch.allclose(wrong, outputs[0], **FP32)


def test_a_parakeet_head_width_its_config_gives_is_its_attentions() -> None:
    """Parakeet's attention reads a ``head_dim`` its config carries (heads x head_dim need not be hidden_size);
    its relative table stays hidden_size wide."""
    model = _parakeet("relative", head_dim=6)
    _randomise(model)
    x = torch.randn(2, 9, HIDDEN, generator=torch.Generator().manual_seed(1))
    for given in (
        model,
        type("Json", (), {"config": model.config.to_dict(), "state_dict": model.state_dict}),
    ):
        encoding = from_hf_model(given, layer=1)
        assert (encoding.head_dim, encoding.d_model) == (6, HIDDEN)
        torch.testing.assert_close(*_layer_output(model, 1, x, encoding)[::-1], **FP32)


@pytest.mark.parametrize("head", ["ParakeetForCTC", "ParakeetForTDT"])
def test_parakeets_heads_are_read_as_their_encoder(head: str) -> None:
    """Parakeet's CTC, RNN-T and TDT models hold their only attention in ``encoder_config``: their config (object
    and ``config.json``) converts as it, and ``from_hf_model(model, layer=i)`` copies that layer's weights."""
    model_class = getattr(transformers, head)
    config = model_class.config_class(encoder_config=_parakeet("relative").config.to_dict())
    model = model_class(config).eval()
    _randomise(model)
    x = torch.randn(2, 9, HIDDEN, generator=torch.Generator().manual_seed(1))
    for given in (config, config.to_dict()):
        assert repr(from_hf_config(given)) == repr(from_hf_config(config.encoder_config))
        assert len(layer_encodings(given)) == LAYERS
    encoding = from_hf_model(model, layer=LAYERS - 1)
    torch.testing.assert_close(*_layer_output(model.encoder, LAYERS - 1, x, encoding)[::-1], **FP32)
    with pytest.raises(ValueError, match="no 'encoder_config' dict"):
        from_hf_config({"model_type": config.model_type})


def test_shaw_settings_come_from_the_config() -> None:
    shaw = from_hf_config(
        {"model_type": "seamless_m4t_v2", "hidden_size": 64, "speech_encoder_attention_heads": 4}
    )
    assert isinstance(shaw, posenc.ShawRelative)
    assert (shaw.head_dim, shaw.max_distance, shaw.right, shaw.num_heads) == (16, 64, 8, 4)
    xl = from_hf_config({"model_type": "wav2vec2-conformer", "hidden_size": 64, "num_attention_heads": 8})
    assert isinstance(xl, posenc.RelPosXL) and (xl.num_heads, xl.head_dim, xl.d_model) == (8, 8, 64)
    assert isinstance(from_hf_config({"model_type": "seamless_m4t"}), posenc.RelPosXL)
    none = {"model_type": "wav2vec2-bert", "position_embeddings_type": None}
    assert isinstance(from_hf_config(none), posenc.NoPE)


def test_layer_encodings_are_independent_and_windows_global() -> None:
    config = {
        "model_type": "wav2vec2-bert",
        "hidden_size": 32,
        "num_attention_heads": 4,
        "num_hidden_layers": 3,
    }
    encodings = layer_encodings(config)
    assert len(encodings) == 3 and len({id(e) for e in encodings}) == 3
    assert not torch.equal(encodings[0].key_embeddings.weight, encodings[1].key_embeddings.weight)
    assert layer_windows({"model_type": "seamless_m4t_v2", "speech_encoder_layers": 5}) == [None] * 5


def test_errors_name_the_layer_and_the_mode() -> None:
    model = _wav2vec2_bert("relative_key")
    with pytest.raises(ValueError, match=r"own position tables; pass layer=i \(0\.\.2\)"):
        from_hf_model(model)
    with pytest.raises(ValueError, match="layer=3 is outside the wav2vec2-bert model: it has 3 layers"):
        from_hf_model(model, layer=3)
    with pytest.raises(ValueError, match="accepted stack: encoder"):
        from_hf_model(model, layer=0, stack="decoder")
    with pytest.raises(ValueError, match="rotates the hidden states before the q/k projections"):
        from_hf_config({"model_type": "wav2vec2-conformer", "position_embeddings_type": "rotary"})
    with pytest.raises(ValueError, match="position_embeddings_type='alibi' is not one its attention reads"):
        from_hf_config({"model_type": "wav2vec2-bert", "position_embeddings_type": "alibi"})
    # a mode another of these models reads, which this one's attention ignores (it adds no position): refused,
    # where it gave Shaw's or Transformer-XL's encoding (2.3 to 4.3 off the model's layer)
    for model_type, mode in (
        ("wav2vec2-conformer", "relative_key"),
        ("seamless_m4t", "relative_key"),
        ("seamless_m4t_v2", "relative"),
        ("seamless_m4t_v2", "rotary"),
    ):
        with pytest.raises(
            ValueError, match=f"position_embeddings_type={mode!r} is not one its attention reads"
        ):
            from_hf_config({"model_type": model_type, "position_embeddings_type": mode})
    with pytest.raises(ValueError, match="left_max_position_embeddings must be >= 0"):
        from_hf_config({"model_type": "wav2vec2-bert", "left_max_position_embeddings": -1})

    class Mismatch:  # a relative config with relative_key weights
        config = transformers.Wav2Vec2BertConfig(
            hidden_size=HIDDEN,
            num_attention_heads=HEADS,
            num_hidden_layers=LAYERS,
            position_embeddings_type="relative",
        )
        state_dict = model.state_dict

    with pytest.raises(
        ValueError,
        match=r"expected one encoder position weight ending in 'encoder\.layers\.1\.self_attn\.",
    ):
        from_hf_model(Mismatch(), layer=1)


#: Speech encoders that add a convolution over the features (WavLM and SEW-D add relative terms in attention
#: too): refused, naming it
CONV_POSITION_TYPES = (
    "data2vec-audio hubert omniasr_audio sew sew-d unispeech unispeech-sat wav2vec2 wavlm".split()
)


@pytest.mark.parametrize("model_type", CONV_POSITION_TYPES)
def test_a_convolutional_position_embedding_is_refused_by_name(model_type: str) -> None:
    config = transformers.AutoConfig.for_model(model_type)
    with torch.device("meta"):
        model = transformers.AutoModel.from_config(config)
    assert any(type(m).__name__.endswith("PositionalConvEmbedding") for m in model.modules())
    for given in (config, config.to_dict()):
        with pytest.raises(
            ValueError, match=r"convolutional position embedding \(num_conv_pos_embeddings=\d+"
        ):
            from_hf_config(given)


def test_speecht5_encoder_attention_equals_the_models() -> None:
    """SpeechT5's encoder: every layer's self-attention with the one relative-key table its encoder shares
    (clipped at encoder_max_relative_position 3 on a 12-frame input, both sides), copied out of a task model."""
    config = transformers.SpeechT5Config(
        hidden_size=HIDDEN, encoder_attention_heads=HEADS, encoder_layers=LAYERS, encoder_ffn_dim=37,
        decoder_layers=1, decoder_attention_heads=HEADS, decoder_ffn_dim=37, encoder_max_relative_position=3,
    )  # fmt: skip
    model = transformers.SpeechT5ForSpeechToText(config).eval()
    _randomise(model)
    encoder = model.speecht5.encoder.wrapped_encoder
    encoding = from_hf_model(model)
    assert type(encoding) is posenc.ShawRelative
    assert len(set(layer_encodings(config.to_dict(), stack="encoder"))) == 1  # (one instance: one table)
    x = torch.randn(2, 12, HIDDEN, generator=torch.Generator().manual_seed(1))
    b, t, dh = 2, 12, HIDDEN // HEADS
    flipped = posenc.ShawRelative(dh, max_distance=2, max_distance_right=3, num_heads=HEADS)
    flipped.load_state_dict({"key_embeddings.weight": encoding.key_embeddings.weight.flip(0)})
    with torch.no_grad():
        for layer in range(LAYERS):
            attn = encoder.layers[layer].attention
            expected = attn(x, position_bias=encoder.embed_positions(x))[0]
            q, k, v = (
                p(x).view(b, t, HEADS, dh).transpose(1, 2) for p in (attn.q_proj, attn.k_proj, attn.v_proj)
            )
            for shaw, same in ((encoding, True), (flipped, False)):
                got = attn.out_proj(posenc.attention(q, k, v, shaw).transpose(1, 2).reshape(b, t, HIDDEN))
                assert torch.allclose(got, expected, **FP32) is same
    with pytest.raises(ValueError, match="its decoder's attention adds no position"):
        from_hf_config(config, stack="decoder")


def test_fastspeech2_conformer_attention_equals_the_models_in_both_stacks() -> None:
    """FastSpeech2Conformer (ESPnet's TTS): every layer of its encoder and of its non-autoregressive decoder adds
    ESPnet's relative positions (its own linear_pos, pos_bias_u, pos_bias_v): RelPosXL, ``from_hf_model(model,
    stack=..., layer=i)`` copying that layer's, from the model and from its ``config.json``; the stacks' head counts
    differ, so ``stack`` is required."""
    config = transformers.FastSpeech2ConformerConfig(
        hidden_size=HIDDEN, encoder_num_attention_heads=HEADS, decoder_num_attention_heads=2, encoder_layers=2,
        decoder_layers=LAYERS, encoder_linear_units=37, decoder_linear_units=37,
    )  # fmt: skip
    model = transformers.FastSpeech2ConformerModel(config).eval()
    _randomise(model)
    x = torch.randn(2, 12, HIDDEN, generator=torch.Generator().manual_seed(1))
    json = type("Json", (), {"config": config.to_dict(), "state_dict": model.state_dict})
    for name, heads in (("encoder", HEADS), ("decoder", 2)):
        stack, dh = getattr(model, name), HIDDEN // heads
        assert len({id(e) for e in layer_encodings(config, stack=name)}) == len(stack.conformer_layers)
        with torch.no_grad():
            pos_emb = stack.pos_enc(x)[1]
            for layer, attn in enumerate(stack.conformer_layers):
                attn = attn.self_attn
                expected = attn(x, pos_emb=pos_emb)[0]
                q, k, v = (
                    p(x).view(2, 12, heads, dh).transpose(1, 2)
                    for p in (attn.linear_q, attn.linear_k, attn.linear_v)
                )
                for given in (model, json):
                    encoding = from_hf_model(given, stack=name, layer=layer)
                    assert type(encoding) is posenc.RelPosXL and encoding.num_heads == heads
                    got = attn.linear_out(
                        posenc.attention(q, k, v, encoding).transpose(1, 2).reshape(2, 12, HIDDEN)
                    )
                    torch.testing.assert_close(got, expected, **FP32)
    with pytest.raises(ValueError, match="pass stack='encoder' or 'decoder'"):
        from_hf_config(config)


def test_vits_text_encoder_attention_equals_the_models() -> None:
    """VITS (MMS-TTS): every text-encoder layer adds its own relative keys and values (emb_rel_k, emb_rel_v) within
    window_size of the query and none beyond: ShawRelative(beyond="zero", values=True), ``from_hf_model(model,
    layer=i)`` copying that layer's, from the model and from its ``config.json``; on 12 tokens, window 2, so that
    most pairs lie beyond it (Shaw's clipped form, which repeats the edge rows there, differs)."""
    config = transformers.VitsConfig(
        hidden_size=HIDDEN, num_attention_heads=HEADS, num_hidden_layers=LAYERS, window_size=2, ffn_dim=37,
        flow_size=8, spectrogram_bins=9, upsample_initial_channel=8, upsample_rates=[2], upsample_kernel_sizes=[4],
        resblock_kernel_sizes=[3], resblock_dilation_sizes=[[1]], prior_encoder_num_wavenet_layers=1,
        posterior_encoder_num_wavenet_layers=1, duration_predictor_filter_channels=8,
    )  # fmt: skip
    model = transformers.VitsModel(config).eval()
    _randomise(model)
    x = torch.randn(2, 12, HIDDEN, generator=torch.Generator().manual_seed(1))
    b, t, dh = 2, 12, HIDDEN // HEADS
    json = type("Json", (), {"config": config.to_dict(), "state_dict": model.state_dict})
    layers = model.text_encoder.encoder.layers
    assert len({id(e) for e in layer_encodings(config)}) == len(layers) == LAYERS
    with torch.no_grad():
        for layer, block in enumerate(layers):
            attn = block.attention
            expected = attn(x)[0]
            q, k, v = (
                p(x).view(b, t, HEADS, dh).transpose(1, 2) for p in (attn.q_proj, attn.k_proj, attn.v_proj)
            )
            for given in (model, json):
                encoding = from_hf_model(given, layer=layer)
                assert type(encoding) is posenc.ShawRelative and encoding.beyond == "zero"
                got = attn.out_proj(posenc.attention(q, k, v, encoding).transpose(1, 2).reshape(b, t, HIDDEN))
                torch.testing.assert_close(got, expected, **FP32)
            clipped = posenc.ShawRelative(dh, max_distance=2, values=True)
            clipped.load_state_dict(encoding.state_dict())
            got = attn.out_proj(posenc.attention(q, k, v, clipped).transpose(1, 2).reshape(b, t, HIDDEN))
            assert not torch.allclose(got, expected, **FP32)
    with pytest.raises(ValueError, match="every encoder layer has its own position tables; pass layer=i"):
        from_hf_model(model)
    with pytest.raises(ValueError, match="window_size must be"):
        from_hf_config({**config.to_dict(), "window_size": 0})
    with pytest.raises(TypeError, match="window_size must be"):  # (as its class refuses it)
        from_hf_config({**config.to_dict(), "window_size": None})
