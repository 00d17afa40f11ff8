"""Per-layer encodings and windows: posenc.nn.layer_specs and the per-layer schedules of TransformerLM."""

from __future__ import annotations

import pytest
import torch

import posenc
from nn.models import HEADS, LOGITS_TOL, VOCAB, D, count_calls, ids
from posenc.nn import KVCache, TransformerLM, layer_specs

# tiny tensors: one thread (on a loaded 2-core machine, thread contention costs 100x)
pytestmark = pytest.mark.usefixtures("one_thread")


def test_layer_specs_forms():
    assert layer_specs("rope", 3) == ["rope"] * 3
    assert layer_specs(["rope", "none"], 2) == ["rope", "none"]
    assert layer_specs("rope*3 + none", 8) == ["rope", "rope", "rope", "none"] * 2
    # Gemma 3: five local layers then one global, cut at the last of 8 layers.
    assert layer_specs("rope(base=1e4)*5 + rope(base=1e6)", 8) == (
        ["rope(base=10000.0)"] * 5 + ["rope(base=1000000.0)"] + ["rope(base=10000.0)"] * 2
    )
    assert layer_specs("(rope + none)*2 + alibi", 5) == ["rope", "none", "rope", "none", "alibi"]
    assert layer_specs("2*rope + none", 3) == ["rope", "rope", "none"]
    built = posenc.build("alibi", num_heads=4)
    assert layer_specs(built, 2) == [built, built]


@pytest.mark.parametrize(
    ("position", "error", "match"),
    [
        (["rope", "none"], ValueError, r"position has 2 per-layer specs but the model has num_layers=3"),
        ("rope*0 + none", ValueError, r"repeat count must be a positive int literal, got '0'"),
        ("rope*1.5", ValueError, r"repeat count must be a positive int literal, got '1.5'"),
        ("rope*4", ValueError, r"repeats a group 4 times but the model has num_layers=3"),
        ("rope + none + rope + none", ValueError, r"group of 4 layers but the model has num_layers=3"),
        ("rope - none", ValueError, r"is not a spec"),
        ("rope(1)*2", ValueError, r"options must be given by keyword"),
        ("rope +", ValueError, r"cannot parse position pattern"),
        ([1, 2, 3], TypeError, r"position\[0\] must be a spec string"),
        (3, TypeError, r"position must be a spec"),
    ],
)
def test_layer_specs_bad_input(position, error, match):
    with pytest.raises(error, match=match):
        layer_specs(position, 3)


def test_equal_specs_share_one_encoding():
    shared = posenc.build("alibi", num_heads=HEADS)
    model = TransformerLM(VOCAB, D, 5, HEADS, position=["rope", "rope()", {"name": "rotary"}, shared, shared])
    assert model.encoding is None and len(model.encodings) == 2
    assert model.layer_encoding == (0, 0, 0, 1, 1)
    assert model.encodings[1] is shared
    layers = model.layer_encodings()
    assert layers[0] is layers[2] and layers[3] is layers[4] is shared


def test_per_layer_table_work_happens_once_per_distinct_encoding():
    model = TransformerLM(VOCAB, D, 6, HEADS, position="rope(base=1e4)*2 + rope(base=1e6)")
    calls = [count_calls(encoding, "prepare_state") for encoding in model.encodings]
    model(ids())
    assert [len(c) for c in calls] == [1, 1]  # once each, though one serves four layers
    assert sorted(e.base for e in model.encodings) == [1e4, 1e6]


PER_LAYER = ["rope*2 + alibi + none", ["t5", "rope", "t5", "alibi"]]


def make_per_layer(position, causal=True, window=None) -> TransformerLM:
    torch.manual_seed(0)
    model = TransformerLM(VOCAB, D, 4, HEADS, position=position, causal=causal, window=window)
    with torch.no_grad():
        for p in model.encodings.parameters():
            p.normal_(std=0.5)
    return model.eval()


@pytest.mark.parametrize("window", [None, [None, 3, None, 2]])
@pytest.mark.parametrize("position", PER_LAYER)
def test_per_layer_decode_equals_full_forward(position, window):
    model = make_per_layer(position, window=window)
    x = ids(t=10)
    full = model(x)
    cache = KVCache()
    steps = [model(x[:, :4], cache=cache)] + [model(x[:, i : i + 1], cache=cache) for i in range(4, 10)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **LOGITS_TOL)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("position", PER_LAYER)
def test_per_layer_padding_gives_the_unpadded_outputs(position, causal):
    model = make_per_layer(position, causal=causal, window=[None, 2, None, 3])
    a, b = ids(b=1, t=7, seed=3)[0], ids(b=1, t=4, seed=4)[0]
    batch = torch.stack([a, torch.cat([torch.zeros(3, dtype=torch.long), b])])
    mask = torch.tensor([[True] * 7, [False] * 3 + [True] * 4])
    padded = model(batch, attention_mask=mask)
    torch.testing.assert_close(padded[0], model(a[None])[0], **LOGITS_TOL)
    torch.testing.assert_close(padded[1, 3:], model(b[None])[0], **LOGITS_TOL)


def test_per_layer_state_dict_round_trips():
    model = make_per_layer(PER_LAYER[1])
    copy = TransformerLM(VOCAB, D, 4, HEADS, position=PER_LAYER[1])
    copy.load_state_dict(model.state_dict())
    assert any(key.startswith("encodings.") for key in model.state_dict())
    torch.testing.assert_close(copy.eval()(ids()), model(ids()))


def test_per_layer_model_trains():
    torch.manual_seed(0)
    model = TransformerLM(VOCAB, D, 4, HEADS, position="t5 + rope*2 + none", window=[None, 4, None, 4])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x = ids(b=4, t=16)
    losses = []
    for _ in range(8):
        logits = model(x[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.5, losses
    assert model.encodings[0].relative_attention_bias.weight.grad is not None


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"position": "sinusoidal + rope"}, ValueError, r"additive encoding\(s\) Sinusoidal act once"),
        ({"window": [2, None]}, ValueError, r"window has 2 per-layer entries but the model has num_layers=3"),
        ({"window": 0}, ValueError, r"window must be a positive int, got 0"),
        ({"window": [2, None, "4"]}, TypeError, r"window\[2\] must be a positive int"),
    ],
)
def test_per_layer_bad_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        TransformerLM(VOCAB, D, 3, HEADS, **kwargs)


@pytest.mark.slow
def test_per_layer_model_with_windows_compiles_and_exports():
    """A per-layer model (RoPE layers with windows, a NoPE layer) compiles without a graph break
    and exports with a dynamic length, both equal to eager at another length."""
    torch.manual_seed(0)
    model = TransformerLM(
        vocab_size=VOCAB,
        d_model=32,
        num_layers=4,
        num_heads=4,
        position="rope*3 + none",
        window=[8, None, 8, None],
    ).eval()
    short, long = ids(t=24, seed=1), ids(t=40, seed=2)
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(short), model(short), **LOGITS_TOL)
        torch.testing.assert_close(compiled(long), model(long), **LOGITS_TOL)
        program = torch.export.export(
            model, (short,), dynamic_shapes=({1: torch.export.Dim("t", min=2, max=512)},)
        )
        torch.testing.assert_close(program.module()(long), model(long), **LOGITS_TOL)


def test_model_per_layer_window_decodes_like_the_full_forward():
    torch.manual_seed(0)
    model = posenc.nn.TransformerLM(61, 32, 3, 4, position="rope", window=[4, None, 2]).eval()
    ids = torch.randint(0, 61, (2, 12))
    full = model(ids)
    cache = posenc.nn.KVCache()
    steps = [model(ids[:, :5], cache=cache)] + [model(ids[:, i : i + 1], cache=cache) for i in range(5, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    # A window changes the outputs past it.
    plain = posenc.nn.TransformerLM(61, 32, 3, 4, position="rope").eval()
    plain.load_state_dict(model.state_dict())
    assert not torch.allclose(plain(ids)[:, 6:], full[:, 6:])
    torch.testing.assert_close(plain(ids)[:, :2], full[:, :2])
