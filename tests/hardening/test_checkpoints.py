"""Checkpoints: ``state_dict`` holds only learned parameters, round-trips through ``torch.save`` /
``torch.load(weights_only=True)``, does not depend on the length a model was used at, and
T5's table loads by its Hugging Face name."""

from __future__ import annotations

import io

import pytest
import torch
from entries_table import Entry, make_input, make_qk
from transformers import T5Config
from transformers.models.t5.modeling_t5 import T5Attention

import posenc
from posenc.nn import TransformerLM

LM_POSITIONS = [
    "rope",
    "alibi",
    "t5",
    "sinusoidal",
    "learned",
    "none",
    "rope(scaling={'rope_type': 'yarn', 'factor': 2.0})",
]


def _roundtrip(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def _outputs(module: posenc.PositionalEncoding, entry: Entry, length: int) -> list[torch.Tensor]:
    torch.manual_seed(3)
    x = make_input(entry, 2, length, torch.float32)
    q, k = make_qk(entry, 2, length, length, torch.float32)
    q_pos, k_pos = entry.qk_positions(length, length, None, None)  # explicit off an axial grid
    outs = [module.encode_input(x), *module.encode_qk(q, k, q_positions=q_pos, k_positions=k_pos)]
    bias = module.attention_bias(q, k)
    return outs + ([] if bias is None else [bias])


def test_state_dict_round_trip(entry: Entry) -> None:
    source = entry.build()
    with torch.no_grad():
        for p in source.parameters():
            p.add_(torch.randn_like(p))  # differ from any fresh initialisation
    state = _roundtrip(source.state_dict())
    assert set(state) == {n for n, _ in source.named_parameters()}
    target = entry.build()
    target.load_state_dict(state, strict=True)
    for name, p in target.named_parameters():
        torch.testing.assert_close(p, dict(source.named_parameters())[name], rtol=0, atol=0)
    length = entry.fixed_len or 50
    for a, b in zip(_outputs(source, entry, length), _outputs(target, entry, length), strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=0)


def test_state_dict_does_not_depend_on_the_length_used(entry: Entry) -> None:
    """A module used at a long length (caches grown) saves the same keys and shapes as a fresh one,
    and its state loads into a module built for another length, which then runs longer still."""
    if entry.max_position is not None or entry.fixed_len is not None:
        pytest.skip("the learned table and the 2D grid have a fixed size by design")
    used = entry.build(max_len=64)
    _outputs(used, entry, 600)
    fresh = entry.build(max_len=8192)
    saved = _roundtrip(used.state_dict())
    assert {k: v.shape for k, v in saved.items()} == {k: v.shape for k, v in fresh.state_dict().items()}
    fresh.load_state_dict(saved, strict=True)
    for a, b in zip(_outputs(used, entry, 1100), _outputs(fresh, entry, 1100), strict=True):
        assert torch.isfinite(b).all()
        if not (isinstance(used, posenc.RoPE) and used.rope_type == "dynamic"):
            # (dynamic NTK's frequencies depend on max_len, so only it may differ here)
            torch.testing.assert_close(b, a, rtol=0, atol=0)


@pytest.mark.parametrize("position", LM_POSITIONS)
def test_transformer_lm_round_trip_and_other_length(position: str) -> None:
    torch.manual_seed(0)
    kwargs = {"vocab_size": 50, "d_model": 32, "num_layers": 2, "num_heads": 4, "position": position}
    max_len = 128
    source = TransformerLM(**kwargs, max_len=max_len).eval()
    ids = torch.randint(0, 50, (2, 100))
    source(ids)  # used at one length: caches grow
    state = _roundtrip(source.state_dict())
    assert all(
        not k.endswith(("inv_freq", "_cos_sin", "_table", "slopes", "bucket_of_distance")) for k in state
    )
    target = TransformerLM(**kwargs, max_len=max_len).eval()
    target.load_state_dict(state, strict=True)
    with torch.no_grad():
        torch.testing.assert_close(target(ids), source(ids), rtol=0, atol=0)
        short = ids[:, :7]
        torch.testing.assert_close(target(short), source(short), rtol=0, atol=0)
    if position != "learned":
        # no length is baked into the checkpoint: it loads into a model built for another context
        other = TransformerLM(**kwargs, max_len=4 * max_len).eval()
        other.load_state_dict(state, strict=True)
        longer = torch.randint(0, 50, (1, 300))
        with torch.no_grad():
            logits = other(longer)
        assert logits.shape == (1, 300, 50) and torch.isfinite(logits).all()
        if "yarn" not in position:  # (yarn's trained length defaults to max_len)
            with torch.no_grad():
                torch.testing.assert_close(other(ids), source(ids), rtol=0, atol=0)


def test_learned_checkpoint_loads_after_resize_to_the_same_length() -> None:
    """A learned table saved at one length loads into a model of another length after resize()."""
    source = posenc.Learned(16, max_len=64)
    target = posenc.Learned(16, max_len=256)
    with pytest.raises(RuntimeError, match="size mismatch"):
        target.load_state_dict(source.state_dict())
    target.resize(64)
    target.load_state_dict(_roundtrip(source.state_dict()))
    x = torch.randn(1, 64, 16)
    torch.testing.assert_close(target(x), source(x), rtol=0, atol=0)


@pytest.mark.parametrize("is_decoder", [False, True], ids=["encoder", "decoder"])
def test_t5_relative_bias_table_loads_by_name(is_decoder: bool) -> None:
    """A Hugging Face T5 attention's ``relative_attention_bias.weight`` loads by name and gives T5's bias."""
    config = T5Config(
        d_model=32,
        d_kv=8,
        num_heads=4,
        relative_attention_num_buckets=32,
        relative_attention_max_distance=128,
        is_decoder=is_decoder,
    )
    torch.manual_seed(0)
    hf = T5Attention(config, has_relative_attention_bias=True)
    hf_state = {k: v for k, v in hf.state_dict().items() if k.startswith("relative_attention_bias.")}
    assert set(hf_state) == {"relative_attention_bias.weight"}
    ours = posenc.RelativeBias(4, 32, 128, causal=is_decoder)
    ours.load_state_dict(_roundtrip(hf_state), strict=True)
    tq = tk = 300  # past max_distance, both directions
    expected = hf.compute_bias(tq, tk)  # (1, h, tq, tk)
    q = torch.zeros(1, 4, tq, 8)
    torch.testing.assert_close(ours.attention_bias(q, q), expected, rtol=0, atol=0)
