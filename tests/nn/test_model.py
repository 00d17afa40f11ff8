"""posenc.nn: the attention layer, the block and the language model, for every encoding."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

import posenc
from posenc.nn import KVCache, MultiheadAttention, TransformerBlock, TransformerLM, layer_specs
from posenc.registry import lookup

# float32 logits of a 2-layer model computed two ways (cached vs full, padded vs alone):
# the same math in a different order, a few ulps of values of order 1.
LOGITS_TOL = {"atol": 1e-5, "rtol": 1e-5}

VOCAB, D, LAYERS, HEADS, MAX_LEN = 61, 32, 2, 4, 64


# tiny tensors: one thread (on a loaded 2-core machine, thread contention costs 100x)
pytestmark = pytest.mark.usefixtures("one_thread")


# The config strings the issue names; swapping them changes nothing else.
SPECS = [
    "sinusoidal",
    "learned",
    "rope",
    "rope(scaling={'rope_type': 'yarn', 'factor': 4.0})",
    "t5",
    "alibi",
    "none",
]


def registered_classes() -> list[str]:
    """One name per registered class that builds from a language model's sizes with 1-D positions."""
    names, seen = [], set()
    dims = {"d_model": D, "num_heads": HEADS, "head_dim": D // HEADS, "max_len": MAX_LEN}
    for name in posenc.available():
        cls = lookup(name)
        if cls in seen:
            continue
        seen.add(cls)
        try:
            posenc.build(name, **dims).prepare(4)
        except ValueError as err:
            if "missing required size" in str(err) or "positions of shape" in str(err):
                continue  # a grid encoding (2-D positions, M-RoPE sections): not a 1-D LM's input
            raise
        names.append(name)
    return names


# Sinusoidal2D needs a 2D grid of patches: a language model's 1D positions are not its input.
LM_ENCODINGS = [n for n in registered_classes() if n != "sinusoidal2d"] + [SPECS[3]]


def make_model(position, causal=True, seed=0, **kwargs) -> TransformerLM:
    torch.manual_seed(seed)
    try:
        model = TransformerLM(
            VOCAB, D, LAYERS, HEADS, position=position, max_len=MAX_LEN, causal=causal, **kwargs
        )
    except ValueError as err:
        if not causal and "causal" in str(err):
            pytest.skip(f"{position} is causal only: {err}")
        raise
    # Learned position tables may start at zero: randomise every parameter of the encoding.
    with torch.no_grad():
        for p in model.encoding.parameters() if model.encoding is not None else model.encodings.parameters():
            p.normal_(std=0.5)
    return model.eval()


def ids(b=2, t=11, seed=1):
    return torch.randint(0, VOCAB, (b, t), generator=torch.Generator().manual_seed(seed))


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


@pytest.mark.parametrize("position", LM_ENCODINGS)
def test_decode_step_by_step_equals_full_forward(position):
    model = make_model(position)
    x = ids(t=12)
    full = model(x)
    cache = KVCache()
    steps = [model(x[:, :5], cache=cache)]  # a prompt, then one token at a time
    steps += [model(x[:, i : i + 1], cache=cache) for i in range(5, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **LOGITS_TOL)
    assert len(cache) == 12


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


@pytest.mark.parametrize("position", LM_ENCODINGS)
def test_decode_with_left_padding_equals_unpadded(position):
    """A left-padded batch decoded with a cache gives each sequence's own logits."""
    model = make_model(position)
    a, b = ids(b=1, t=8, seed=3)[0], ids(b=1, t=5, seed=4)[0]
    batch = torch.stack([a, torch.cat([torch.zeros(3, dtype=torch.long), b])])
    mask = torch.tensor([[True] * 8, [False] * 3 + [True] * 5])
    cache = KVCache()
    prompt = model(batch[:, :6], attention_mask=mask[:, :6], cache=cache)
    steps = [prompt] + [
        model(batch[:, i : i + 1], attention_mask=mask[:, : i + 1], cache=cache) for i in range(6, 8)
    ]
    out = torch.cat(steps, dim=1)
    torch.testing.assert_close(out[0], model(a[None])[0], **LOGITS_TOL)
    torch.testing.assert_close(out[1, 3:], model(b[None])[0], **LOGITS_TOL)


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


def test_multihead_attention_alone_with_gqa_and_cache():
    torch.manual_seed(0)
    layer = MultiheadAttention(D, HEADS, position="rope", causal=True, num_kv_heads=2).eval()
    x = torch.randn(2, 9, D)
    full = layer(x)
    cache = KVCache()
    steps = [layer(x[:, :4], cache=cache)] + [layer(x[:, i : i + 1], cache=cache) for i in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **LOGITS_TOL)


def test_block_is_pre_norm():
    torch.manual_seed(0)
    block = TransformerBlock(D, HEADS, position="none", causal=True).eval()
    x = torch.randn(2, 5, D)
    h = x + block.attn(block.attn_norm(x))
    torch.testing.assert_close(block(x), h + block.mlp(block.mlp_norm(h)))


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
        (lambda m: m(torch.zeros(2, 3)), TypeError, r"input_ids must be an integer tensor.*float32"),
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


def count_calls(module: torch.nn.Module, method: str) -> list:
    """Record each call of the public ``module.method``: ``module`` records it, its class is untouched."""
    calls, real = [], getattr(module, method)

    def counting(*args, **kwargs):
        calls.append(module)
        return real(*args, **kwargs)

    setattr(module, method, counting)
    return calls


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


# --- per-layer encodings and windows ------------------------------------------------------------


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


# --- hard to misuse (issue 12) ------------------------------------------------------------------


def test_cache_of_another_model_or_encoding_is_refused():
    two = TransformerLM(VOCAB, D, 2, HEADS, position="rope")
    three = TransformerLM(VOCAB, D, 3, HEADS, position="rope")
    cache = KVCache()
    two(ids(), cache=cache)
    with pytest.raises(ValueError, match=r"filled by a model with 2 layers, but this model has num_layers=3"):
        three(ids(t=1), cache=cache)
    rope = MultiheadAttention(D, HEADS, "rope", causal=True)
    alibi = MultiheadAttention(D, HEADS, "alibi", causal=True)
    cache = KVCache()
    x = torch.randn(2, 5, D)
    rope(x, cache=cache)
    with pytest.raises(ValueError, match=r"layer 0 of this KVCache holds keys encoded by RoPE.*not by ALiBi"):
        alibi(x[:, :1], cache=cache)
    with pytest.raises(ValueError, match=r"layer must be >= 0, got -1"):
        rope(x, cache=cache, layer=-1)
    with pytest.raises(TypeError, match=r"layer must be an int"):
        rope(x, cache=cache, layer=True)


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


# --- the KV cache: no silent wrong results; a static cache ------------------------------------------------


@pytest.mark.parametrize("position", ["rope", "alibi", "t5", "learned", "mrope"])
def test_default_positions_continue_an_explicit_position_prefill(position):
    """A prompt prefilled at positions 40..49, then a step with default positions: the new token
    is at 50 (the largest cached position + 1), not at 10 (the cache length), where causality by
    position would hide the whole prompt from it (positions below the learned table's 64)."""
    model = make_model(position).eval()
    x = ids(t=11)
    start = torch.arange(40, 50)
    full = model(x, positions=torch.arange(40, 51))
    cache = KVCache()
    model(x[:, :10], positions=start, cache=cache)
    step = model(x[:, 10:], cache=cache)
    torch.testing.assert_close(step, full[:, 10:], **LOGITS_TOL)
    # per row: each continues from its own largest position
    rows = torch.stack([torch.arange(40, 50), torch.arange(3, 13)])
    cache = KVCache()
    model(x[:, :10], positions=rows, cache=cache)
    step = model(x[:, 10:], cache=cache)
    expected = model(x, positions=torch.cat([rows, torch.tensor([[50], [13]])], dim=1))[:, 10:]
    torch.testing.assert_close(step, expected, **LOGITS_TOL)


def test_mrope_continues_from_the_largest_position_on_any_axis():
    """Qwen-VL's rule: text after an image continues from the largest position on any axis + 1."""
    model = make_model("mrope").eval()
    x = ids(b=1, t=5)
    grid = torch.tensor([[0, 0, 0], [1, 1, 1], [1, 1, 2], [1, 2, 1], [1, 2, 2]])  # text, then a 2x2 image
    cache = KVCache()
    model(x[:, :4], positions=grid[:4], cache=cache)
    assert cache.next_positions(0, 2).tolist() == [3, 4]
    step = model(x[:, 4:], cache=cache)
    text = torch.tensor([[3, 3, 3]])
    expected = model(x, positions=torch.cat([grid[:4], text]))[:, 4:]
    torch.testing.assert_close(step, expected, **LOGITS_TOL)


@pytest.mark.parametrize("capacity", [None, 10])
def test_mrope_decodes_explicit_text_positions_per_row(capacity):
    """(b, t) text positions of an M-RoPE model (the same on every axis), decoded with either cache."""
    model = make_model("mrope").eval()
    x = ids(t=8)
    rows = torch.stack([torch.arange(8), torch.arange(3, 11)])
    cache = KVCache(capacity=capacity)
    steps = [
        model(x[:, :5], positions=rows[:, :5], cache=cache),
        model(x[:, 5:], positions=rows[:, 5:], cache=cache),
    ]
    torch.testing.assert_close(torch.cat(steps, dim=1), model(x, positions=rows), **LOGITS_TOL)


def test_cache_of_another_batch_size_is_refused():
    model = make_model("rope")
    cache = KVCache()
    model(ids(b=2, t=4), cache=cache)
    with pytest.raises(
        ValueError, match=r"holds a batch of 2 sequences, but the new tokens have batch size 3"
    ):
        model(ids(b=3, t=1), cache=cache)
    layer = MultiheadAttention(D, HEADS, "alibi", causal=True)
    cache = KVCache()
    layer(torch.randn(2, 3, D), cache=cache)
    with pytest.raises(ValueError, match=r"batch of 2 sequences, but the new tokens have batch size 1"):
        layer(torch.randn(1, 1, D), cache=cache)


@pytest.mark.parametrize("position", [*LM_ENCODINGS, "rope*1 + none"])
def test_static_cache_decodes_to_the_full_forward(position):
    """KVCache(capacity=n): the same logits as the full forward, plain and left-padded, with shapes
    fixed by the capacity."""
    model = make_model(position).eval()
    x = ids(t=9)
    full = model(x)
    cache = KVCache(capacity=12)
    steps = [model(x[:, :5], cache=cache)] + [model(x[:, i : i + 1], cache=cache) for i in range(5, 9)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **LOGITS_TOL)
    assert len(cache) == 9 and cache.static and cache.keys[0].shape[-2] == 12
    assert cache.positions[0].shape[:2] == (2, 12)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[0, :3] = False
    padded = model(x, attention_mask=mask)
    slots = torch.zeros(2, 12, dtype=torch.bool)
    slots[:, :9] = mask
    cache = KVCache(capacity=12)
    steps = [model(x[:, :5], attention_mask=slots, cache=cache)]
    steps += [model(x[:, i : i + 1], attention_mask=slots, cache=cache) for i in range(5, 9)]
    torch.testing.assert_close(torch.cat(steps, dim=1)[mask], padded[mask], **LOGITS_TOL)


def test_static_cache_overflow_and_sizes_are_errors():
    model = make_model("rope")
    cache = KVCache(capacity=4)
    model(ids(t=3), cache=cache)
    with pytest.raises(ValueError, match=r"KVCache\(capacity=4\) holds 3 tokens: 2 more do not fit"):
        model(ids(t=2), cache=cache)
    with pytest.raises(ValueError, match=r"5 new tokens do not fit this KVCache\(capacity=4\)"):
        model(ids(t=5), cache=KVCache(capacity=4))
    with pytest.raises(ValueError, match=r"attention_mask must have shape .* = \(2, 4\)"):
        model(ids(t=1), attention_mask=torch.ones(2, 4 + 1, dtype=torch.bool), cache=KVCache(capacity=4))
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        KVCache(capacity=0)


def test_axial_positions_of_a_square_batch_are_axes_with_a_cache():
    """AxialRoPE reads a rank-2 tensor as (t, a), also when b == t == a: the cache must not take it
    as (b, t) text positions (M-RoPE's reading of that square case)."""
    layer = MultiheadAttention(D, HEADS, "rope_axial", causal=True).eval()
    x = torch.randn(2, 2, D)
    coords = torch.tensor([[0, 1], [2, 3]])  # token 0 at (0, 1), token 1 at (2, 3)
    torch.testing.assert_close(layer(x, positions=coords, cache=KVCache()), layer(x, positions=coords))
