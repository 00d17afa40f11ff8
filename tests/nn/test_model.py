"""posenc.nn.TransformerLM: the language model for every encoding (forward, padding, generation,
training, compiling, export, bad input)."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from nn.models import (
    HEADS,
    LAYERS,
    LM_ENCODINGS,
    LOGITS_TOL,
    MAX_LEN,
    SPECS,
    VOCAB,
    D,
    count_calls,
    ids,
    make_model,
)
from posenc.nn import KVCache, TransformerLM

# tiny tensors: one thread (on a loaded 2-core machine, thread contention costs 100x)
pytestmark = pytest.mark.usefixtures("one_thread")


def test_forward_shape_for_every_spec():
    x = ids()
    for spec in SPECS:
        logits = make_model(spec)(x)
        assert logits.shape == (2, 11, VOCAB) and logits.dtype == torch.float32, spec
        assert torch.isfinite(logits).all(), spec


def test_swapping_specs_changes_only_the_encoding():
    """Every spec gives the same parameters apart from the encoding's own."""
    base = {n for n, _ in make_model("none").named_parameters()}
    for spec in SPECS:
        model = make_model(spec)
        names = {n for n, _ in model.named_parameters()}
        assert {n for n in names if not n.startswith("encoding.")} == base, spec


def test_encoding_is_built_once_and_held_by_the_model_only():
    model = make_model("t5")
    # The blocks hold no encoding: the model prepares the position state and hands it to them.
    assert all(block.attn.encoding is None for block in model.blocks)
    # One T5 table for all layers (as in T5), in one module: it appears once, under one name.
    names = [n for n, _ in model.named_parameters(remove_duplicate=False) if "relative_attention_bias" in n]
    assert names == ["encoding.relative_attention_bias.weight"]
    assert model.encoding.num_heads == HEADS and model.encoding.bidirectional is False


def test_encoding_gets_the_model_sizes():
    assert make_model("rope").encoding.head_dim == D // HEADS
    assert make_model("learned").encoding.max_len == MAX_LEN
    assert make_model("alibi", causal=False).encoding.causal is False
    assert make_model("t5", causal=False).encoding.bidirectional is True


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("position", LM_ENCODINGS)
def test_padding_gives_the_unpadded_outputs(position, causal, side):
    model = make_model(position, causal=causal)
    lengths = [9, 5, 7]
    t = max(lengths)
    seqs = [ids(b=1, t=n, seed=10 + n)[0] for n in lengths]
    batch = torch.zeros(len(seqs), t, dtype=torch.long)
    mask = torch.zeros(len(seqs), t, dtype=torch.bool)
    for row, s in enumerate(seqs):
        where = slice(t - len(s), t) if side == "left" else slice(0, len(s))
        batch[row, where] = s
        mask[row, where] = True
    padded = model(batch, attention_mask=mask)
    assert torch.isfinite(padded).all()
    for row, s in enumerate(seqs):
        alone = model(s[None])[0]
        torch.testing.assert_close(padded[row][mask[row]], alone, **LOGITS_TOL)


@pytest.mark.parametrize("position", ["rope", "alibi", "t5", "learned"])
def test_generate_greedy_equals_repeated_full_forward(position):
    model = make_model(position)
    prompt = ids(t=4)
    out = model.generate(prompt, max_new_tokens=6)
    assert out.shape == (2, 10) and torch.equal(out[:, :4], prompt)
    seq = prompt
    for _ in range(6):
        seq = torch.cat([seq, model(seq)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, seq)


def test_generate_with_left_padding_matches_each_prompt_alone():
    model = make_model("rope")
    a, b = ids(b=1, t=6, seed=5), ids(b=1, t=3, seed=6)
    batch = torch.cat([a, torch.cat([torch.zeros(1, 3, dtype=torch.long), b], dim=1)])
    mask = torch.tensor([[1] * 6, [0] * 3 + [1] * 3])
    out = model.generate(batch, 5, attention_mask=mask)
    assert torch.equal(out[0], model.generate(a, 5)[0])
    assert torch.equal(out[1, 3:], model.generate(b, 5)[0])


@pytest.mark.parametrize("position", ["rope", "alibi", "learned"])
def test_generate_with_right_padding_continues_each_prompt_from_its_last_token(position):
    """The first new token of a right-padded row comes from its last real token's logits (not a pad's); the
    new tokens follow the pads, at the next positions of the row: the prompt alone's continuation."""
    model = make_model(position)
    a, b = ids(b=1, t=6, seed=5), ids(b=1, t=3, seed=6)
    batch = torch.cat([a, torch.cat([b, torch.zeros(1, 3, dtype=torch.long)], dim=1)])
    mask = torch.tensor([[1] * 6, [1] * 3 + [0] * 3])
    out = model.generate(batch, 5, attention_mask=mask)
    assert torch.equal(out[0], model.generate(a, 5)[0])
    assert torch.equal(out[1, 6:], model.generate(b, 5)[0, 3:])


def test_generate_sampling_is_reproducible_and_respects_top_k():
    model = make_model("alibi")
    prompt = ids(t=3)
    first = model.generate(prompt, 8, do_sample=True, top_k=3, generator=torch.Generator().manual_seed(7))
    again = model.generate(prompt, 8, do_sample=True, top_k=3, generator=torch.Generator().manual_seed(7))
    assert torch.equal(first, again)
    # top_k=1 sampling is greedy decoding
    greedy = model.generate(prompt, 8)
    assert torch.equal(model.generate(prompt, 8, do_sample=True, top_k=1, temperature=0.5), greedy)


@pytest.mark.parametrize("position", ["learned", "t5"])
def test_gradient_reaches_the_learned_table(position):
    model = make_model(position).train()
    x = ids()
    torch.nn.functional.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten()).backward()
    grads = [p.grad for p in model.encoding.parameters()]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)


def test_training_step_reduces_loss():
    model = make_model("alibi").train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x = ids(b=4, t=16)
    losses = []
    for _ in range(5):
        loss = torch.nn.functional.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


# Compiling a model takes ~10 s per encoding: the default run compiles one of each kind
# that acts inside attention; the rest run with -m slow.
COMPILE_DEFAULT = ["rope", "t5"]


@pytest.mark.parametrize(
    "position", [p if p in COMPILE_DEFAULT else pytest.param(p, marks=pytest.mark.slow) for p in LM_ENCODINGS]
)
def test_model_compiles_fullgraph_without_recompiling_per_length(position):
    torch._dynamo.reset()
    counters.clear()
    model = make_model(position)
    # aot_eager traces and guards as inductor does, without its C++ build (10 s for RoPE's model);
    # inductor compiles the model in the next test (-m slow)
    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend="aot_eager")
    with torch.no_grad():
        for t in (7, 10, 13):
            x = ids(t=t, seed=t)
            torch.testing.assert_close(compiled(x), model(x), **LOGITS_TOL)
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])


@pytest.mark.slow
@pytest.mark.parametrize("position", LM_ENCODINGS)
def test_model_compiles_with_padding_and_backward(position):
    torch._dynamo.reset()
    counters.clear()
    model = make_model(position).train()
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    for t in (7, 10, 13):
        x = ids(t=t, seed=t)
        mask = torch.ones(2, t, dtype=torch.bool)
        mask[1, :2] = False
        out = compiled(x, attention_mask=mask)
        torch.testing.assert_close(out, model(x, attention_mask=mask), **LOGITS_TOL)
        out.sum().backward()
    # the forward graph, plus at most one more after a guard
    assert counters["stats"]["unique_graphs"] <= 2, dict(counters["stats"])


# --- bad input ---------------------------------------------------------------------------------


def test_learned_past_max_len_names_both_numbers():
    model = make_model("learned")
    # the message names max_len and the sequence length or its last position
    with pytest.raises(ValueError, match=rf"(?s)(?=.*\b({MAX_LEN + 6}|{MAX_LEN + 5})\b)(?=.*\b{MAX_LEN}\b)"):
        model(ids(t=MAX_LEN + 6))


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda m: m(torch.zeros(2, 3, 4, dtype=torch.long)),
            ValueError,
            r"input_ids must be a \(batch, seq\).*\(2, 3, 4\)",
        ),
        (
            lambda m: m(torch.zeros(2, 3)),
            TypeError,
            r"input_ids must be an integer tensor of dtype int64 or int32.*float32",
        ),
        (
            lambda m: m(ids().to(torch.uint8)),
            TypeError,
            r"input_ids must be an integer tensor of dtype int64 or int32.*uint8",
        ),
        (lambda m: m(ids(), cache={}), TypeError, r"cache must be a posenc.nn.KVCache or None, got dict"),
        (
            lambda m: m(ids(t=5), attention_mask=torch.ones(2, 4)),
            TypeError,
            r"attention_mask must be bool or 0/1.*float32",
        ),
        (
            lambda m: m(ids(t=5), attention_mask=torch.ones(2, 4, dtype=torch.bool)),
            ValueError,
            r"attention_mask must have shape.*\(2, 5\).*\(2, 4\)",
        ),
        (lambda m: m.generate(ids(), -1), ValueError, r"max_new_tokens.*-1"),
        (lambda m: m.generate(ids(), 2, do_sample=True, temperature=0.0), ValueError, r"temperature.*0.0"),
        (lambda m: m.generate(ids(), 2, top_k=0), ValueError, r"top_k.*0"),
    ],
)
def test_bad_calls_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call(make_model("rope"))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"d_model": 30}, ValueError, r"d_model=30 must be a multiple of num_heads=4"),
        ({"num_layers": 0}, ValueError, r"num_layers must be a positive int, got 0"),
        ({"position": "ropee"}, ValueError, r"unknown position encoding 'ropee'.*'rope'"),
        ({"position": "learned", "max_len": None}, ValueError, r"max_len"),
        ({"causal": "yes"}, TypeError, r"causal must be a bool"),
    ],
)
def test_bad_construction_names_the_argument(kwargs, error, match):
    args = {
        "vocab_size": VOCAB,
        "d_model": D,
        "num_layers": LAYERS,
        "num_heads": HEADS,
        "position": "rope",
        "max_len": 8,
    }
    args.update(kwargs)
    with pytest.raises(error, match=match):
        TransformerLM(**args)


def test_generate_refuses_a_bidirectional_model():
    with pytest.raises(ValueError, match="causal"):
        make_model("rope", causal=False).generate(ids(), 2)


@pytest.mark.parametrize("spec", ["t5", "rope", "alibi"])
def test_table_work_happens_once_per_forward(spec):
    """A 4-layer model prepares its position state once per forward, whatever the layer count."""
    model = TransformerLM(vocab_size=VOCAB, d_model=32, num_layers=4, num_heads=HEADS, position=spec)
    calls = count_calls(model.encoding, "prepare_state")
    ids = torch.randint(0, VOCAB, (2, 12))
    model(ids)
    assert len(calls) == 1
    cache = KVCache()
    model(ids[:, :8], cache=cache)
    model(ids[:, 8:9], cache=cache)
    assert len(calls) == 3


def test_t5_table_lookup_happens_once_per_forward():
    model = TransformerLM(vocab_size=VOCAB, d_model=32, num_layers=4, num_heads=HEADS, position="t5")
    calls = count_calls(model.encoding, "distance_table")
    model(torch.randint(0, VOCAB, (2, 12)))
    assert len(calls) == 1


# --- hard to misuse (issue 12) ------------------------------------------------------------------


def test_padding_mask_with_batch_equal_to_length_is_a_padding_mask():
    """A (b, t) mask with b == t is read as (batch, keys), never as (queries, keys)."""
    model = make_model("alibi")
    x = ids(b=4, t=4)
    mask = torch.tensor([[True] * 4, [False, True, True, True], [False, False, True, True], [True] * 4])
    padded = model(x, attention_mask=mask)
    for row in range(4):
        keep = mask[row]
        torch.testing.assert_close(padded[row][keep], model(x[row][keep][None])[0], **LOGITS_TOL)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda m: m(torch.tensor([[0, 61]])),
            ValueError,
            r"input_ids must lie in \[0, vocab_size=61\), got values from 0 to 61",
        ),
        (lambda m: m(torch.tensor([[-1, 3]])), ValueError, r"got values from -1 to 3"),
        (
            lambda m: m(ids(), positions=torch.arange(11, device="meta")),
            ValueError,
            r"positions is on meta but the input is on cpu",
        ),
        (
            lambda m: m(ids(), attention_mask=torch.ones(2, 11, device="meta")),
            ValueError,
            r"attention_mask is on meta",
        ),
        (lambda m: m.generate(torch.zeros(2, 0, dtype=torch.long), 3), ValueError, r"empty prompt"),
        (
            lambda m: m.generate(ids(), 2, do_sample=True, temperature=float("inf")),
            ValueError,
            r"temperature must be a finite number > 0, got inf",
        ),
        (
            lambda m: m.generate(ids(), 2, do_sample=True, temperature=float("nan")),
            ValueError,
            r"temperature must be a finite number > 0, got nan",
        ),
        (
            lambda m: m.generate(ids(), 2, temperature=0.0),
            ValueError,
            r"temperature must be a finite number > 0, got 0.0",
        ),
        (lambda m: m.generate(ids(), 2, temperature="1"), TypeError, r"temperature must be a float"),
        (lambda m: m.generate(ids(), 2, do_sample="yes"), TypeError, r"do_sample must be a bool"),
    ],
)
def test_bad_model_calls_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call(make_model("rope"))


def test_tiny_temperature_samples_the_most_likely_token():
    model = make_model("rope")
    gen = torch.Generator().manual_seed(0)
    sampled = model.generate(ids(), 4, do_sample=True, temperature=1e-300, generator=gen)
    torch.testing.assert_close(sampled, model.generate(ids(), 4))


@pytest.mark.parametrize("position", LM_ENCODINGS)
def test_meta_init_then_reset_parameters(position):
    """Built on the meta device, moved with to_empty() and reset: finite, and equal to a real model
    once its weights are loaded (every cache rebuilt)."""
    with torch.device("meta"):
        try:
            model = TransformerLM(VOCAB, D, LAYERS, HEADS, position=position, max_len=MAX_LEN)
        except ValueError as err:
            pytest.skip(str(err))
    model.to_empty(device="cpu")
    model.reset_parameters()
    model.eval()
    assert torch.isfinite(model(ids())).all()
    real = make_model(position)
    model.load_state_dict(real.state_dict())
    torch.testing.assert_close(model(ids()), real(ids()))
    # Weights were re-initialised (not left as to_empty's garbage): small and not all equal.
    fresh = TransformerLM(VOCAB, D, LAYERS, HEADS, position=position, max_len=MAX_LEN)
    fresh.to_empty(device="cpu")
    fresh.reset_parameters()
    assert 0.01 < fresh.embed.weight.std().item() < 0.03


@pytest.mark.parametrize("position", ["t5", "shaw(values=True)", "fire", "kerple", "learned"])
def test_reset_parameters_draws_what_construction_draws(position):
    """reset_parameters() reset the encodings' plain submodules with their own init: T5's table at std 1.0
    (0.02 built), Shaw's at 1.0 (0.02), FIRE's MLP biases nonzero; and left attention sinks as they were
    (trained values, or to_empty's garbage). Every parameter now has its construction's spread."""
    torch.manual_seed(0)
    options = dict(position=position, max_len=MAX_LEN, attention_sinks=True)
    built = TransformerLM(VOCAB, D, LAYERS, HEADS, **options)
    with torch.device("meta"):
        model = TransformerLM(VOCAB, D, LAYERS, HEADS, **options)
    model.to_empty(device="cpu")
    with torch.no_grad():
        for block in model.blocks:
            block.attn.sinks.fill_(float("nan"))
    model.reset_parameters()
    for (name, before), after in zip(built.named_parameters(), model.parameters(), strict=True):
        assert torch.isfinite(after).all(), name
        if before.numel() > 256:
            assert after.std().item() == pytest.approx(before.std().item(), rel=0.3, abs=1e-3), name
        else:  # (few values: their scale; zeros where construction has zeros)
            assert after.abs().max() <= 5 * before.abs().max() + 1e-6, name
    assert model.head.weight is model.embed.weight  # (to_empty() had untied them)


@pytest.mark.slow
@pytest.mark.parametrize("position", ["alibi", "rope", "t5", "none", "sinusoidal"])
def test_onnx_export_matches_onnxruntime(position, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    model = make_model(position)
    x = ids(t=9)
    program = torch.onnx.export(model, (x,), dynamo=True)
    path = tmp_path / "model.onnx"
    program.save(str(path))
    session = ort.InferenceSession(str(path))
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    torch.testing.assert_close(torch.from_numpy(got), model(x), atol=1e-5, rtol=1e-5)
