"""posenc.nn: the attention layer, the block and the language model, for every encoding."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

import posenc
from posenc.nn import KVCache, MultiheadAttention, TransformerBlock, TransformerLM
from posenc.registry import lookup

# float32 logits of a 2-layer model computed two ways (cached vs full, padded vs alone):
# the same math in a different order, a few ulps of values of order 1.
LOGITS_TOL = {"atol": 1e-5, "rtol": 1e-5}

VOCAB, D, LAYERS, HEADS, MAX_LEN = 61, 32, 2, 4, 64

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
    names, seen = [], set()
    for name in posenc.available():
        cls = lookup(name)
        if cls not in seen:
            seen.add(cls)
            names.append(name)
    return names


# Sinusoidal2D needs a 2D grid of patches: a language model's 1D positions are not its input.
LM_ENCODINGS = [n for n in registered_classes() if n != "sinusoidal2d"] + [SPECS[3]]


def make_model(position, causal=True, seed=0, **kwargs) -> TransformerLM:
    torch.manual_seed(seed)
    model = TransformerLM(
        VOCAB, D, LAYERS, HEADS, position=position, max_len=MAX_LEN, causal=causal, **kwargs
    )
    # Learned position tables may start at zero: randomise every parameter of the encoding.
    with torch.no_grad():
        for p in model.encoding.parameters():
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
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
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


@pytest.mark.parametrize("spec", ["t5", "rope", "alibi"])
def test_table_work_happens_once_per_forward(spec, monkeypatch):
    """A 4-layer model prepares its position state once per forward, whatever the layer count."""
    model = TransformerLM(vocab_size=VOCAB, d_model=32, num_layers=4, num_heads=HEADS, position=spec)
    calls = []
    real = type(model.encoding).prepare_state

    def counting(self, *args, **kwargs):
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(model.encoding), "prepare_state", counting)
    ids = torch.randint(0, VOCAB, (2, 12))
    model(ids)
    assert len(calls) == 1
    cache = KVCache()
    model(ids[:, :8], cache=cache)
    model(ids[:, 8:9], cache=cache)
    assert len(calls) == 3


def test_t5_table_lookup_happens_once_per_forward(monkeypatch):
    model = TransformerLM(vocab_size=VOCAB, d_model=32, num_layers=4, num_heads=HEADS, position="t5")
    calls = []
    real = model.encoding.distance_table
    monkeypatch.setattr(model.encoding, "distance_table", lambda *a, **k: calls.append(1) or real(*a, **k))
    model(torch.randint(0, VOCAB, (2, 12)))
    assert len(calls) == 1
