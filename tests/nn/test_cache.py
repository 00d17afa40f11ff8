"""posenc.nn.KVCache: decoding with the cache equals the full forward (dynamic and static caches,
padding, explicit positions), and a cache that does not fit the call is refused."""

from __future__ import annotations

import pytest
import torch

from nn.models import HEADS, LM_ENCODINGS, LOGITS_TOL, VOCAB, D, ids, make_model
from posenc.nn import KVCache, MultiheadAttention, TransformerLM

# tiny tensors: one thread (on a loaded 2-core machine, thread contention costs 100x)
pytestmark = pytest.mark.usefixtures("one_thread")


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


@pytest.mark.parametrize("capacity", [None, 10])
@pytest.mark.parametrize(
    "position, batch",
    [("mrope(mrope_section=(2, 1, 1))", 3), ("mrope(mrope_section=(2, 2), interleaved='hw')", 2)],
)
def test_mrope_decodes_chunks_as_long_as_its_axes_in_a_batch_as_large(position, batch, capacity):
    """Text positions of a chunk of ``a`` tokens went to M-RoPE as ``(t, a)``, which it reads as ``(b, t)`` when
    the batch is ``a`` too: every token of row r at position r (0.08 in one attention layer)."""
    model = make_model(position).eval()
    a = batch  # the axes
    x = ids(b=batch, t=2 * a)
    for given in ({}, {"positions": torch.arange(2 * a)}):
        cache = KVCache(capacity=capacity)
        pos = given.get("positions")
        steps = [
            model(x[:, i : i + a], cache=cache, **({} if pos is None else {"positions": pos[i : i + a]}))
            for i in (0, a)
        ]
        torch.testing.assert_close(torch.cat(steps, dim=1), model(x), **LOGITS_TOL)


@pytest.mark.parametrize("capacity", [None, 10])
def test_mrope_decodes_fractional_positions(capacity):
    """Qwen3-Omni's float32 times (0.5 s a frame: fractional) through either cache, as they are: a
    static cache's long slot positions take the float ones (rounding them would turn by other angles)."""
    model = make_model("mrope").eval()
    x = ids(b=1, t=8)
    times = torch.arange(8.0)[:, None].expand(8, 3) * 0.5 + torch.tensor([0.25, 0.0, 0.0])
    cache = KVCache(capacity=capacity)
    steps = [
        model(x[:, :5], positions=times[:5], cache=cache),
        model(x[:, 5:], positions=times[5:], cache=cache),
    ]
    torch.testing.assert_close(torch.cat(steps, dim=1), model(x, positions=times), **LOGITS_TOL)
    assert not torch.allclose(model(x, positions=times), model(x, positions=times.long()))


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


@pytest.mark.parametrize("capacity", [None, 8])
def test_update_refuses_keys_and_positions_unlike_those_it_holds(capacity):
    """A growing cache joined positions of batch 3 to keys of batch 2 ((3, 4) positions), positions with
    axes to those without ((1, 6)), and promoted itself to float64 for float64 keys (a static one cast them
    down); other heads or widths were raw torch errors. Each is refused, naming what the layer holds."""
    k = v = torch.zeros(2, 2, 2, 8)
    for bad, match in (
        (
            dict(positions=torch.arange(2).expand(3, 2)),
            r"positions must have shape \(t,\) or \(batch, t\) with batch 2",
        ),
        (
            dict(positions=torch.zeros(1, 2, 1, dtype=torch.long)),
            r"positions must have shape .* got \(1, 2, 1\)",
        ),
        (
            dict(positions=torch.zeros(2, 3, dtype=torch.long), axes=True),
            r"holds positions without axes, got axes=True",
        ),
        (
            dict(k=k.double(), v=v.double()),
            r"holds k of 2 heads of width 8 in torch.float32, got 2 of width 8 in torch.float64",
        ),
        (
            dict(k=torch.zeros(2, 1, 2, 8), v=torch.zeros(2, 1, 2, 8)),
            r"holds k of 2 heads .* got 1 of width 8",
        ),
        (dict(v=torch.zeros(2, 2, 2, 4)), r"holds v of 2 heads of width 8 .* got 2 of width 4"),
    ):
        cache = KVCache(capacity=capacity)
        cache.update(0, k, v, torch.arange(2))
        call = {"k": k, "v": v, "positions": torch.arange(2, 4), **bad}
        with pytest.raises(ValueError, match=match):
            cache.update(0, call.pop("k"), call.pop("v"), call.pop("positions"), **call)


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


@pytest.mark.parametrize(
    "scaling",
    [
        {"rope_type": "dynamic", "factor": 2.0},
        {"rope_type": "longrope", "factor": 4.0, "original_max_position_embeddings": 8}
        | {"short_factor": [1.0, 1.5, 2.0, 3.0], "long_factor": [4.0, 4.0, 6.0, 8.0]},
    ],
    ids=["dynamic", "longrope"],
)
def test_a_static_cache_gives_length_dependent_rope_the_filled_length(scaling):
    """Dynamic and longrope RoPE rotate by one past the largest position: a static cache's empty slots add
    none (their capacity was read as the length: longrope's long factors, dynamic's larger base, for a
    5-token prompt). Its logits equal a growing cache's at every step, across the trained length 8."""
    torch.manual_seed(0)
    kwargs = {"vocab_size": VOCAB, "d_model": 32, "num_layers": 1, "num_heads": 4, "max_len": 8}
    model = TransformerLM(**kwargs, position=f"rope(scaling={scaling!r})").double().eval()
    x = ids(t=12)
    caches = KVCache(), KVCache(capacity=20)
    prompts = [model(x[:, :5], cache=cache) for cache in caches]
    torch.testing.assert_close(prompts[0], model(x[:, :5]), rtol=0, atol=1e-12)
    torch.testing.assert_close(prompts[1], prompts[0], rtol=0, atol=1e-12)
    for i in range(5, 12):
        growing, static = (model(x[:, i : i + 1], cache=cache) for cache in caches)
        torch.testing.assert_close(static, growing, rtol=0, atol=1e-12)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("position", ["mrope(mrope_section=(2, 1, 1))", "rope_axial(grid_size=(2, 4))"])
def test_a_static_cache_windows_positions_with_axes_by_slot(position, causal):
    """Positions with axes (M-RoPE, AxialRoPE) are windowed by token order; a static cache's new tokens are
    not its last slots, so the window goes by slot: the prompt and each step as a growing cache gives them
    (and, causal, as the full forward)."""
    torch.manual_seed(0)
    kwargs = {"vocab_size": VOCAB, "d_model": 32, "num_layers": 2, "num_heads": 4, "max_len": 64}
    model = TransformerLM(**kwargs, position=position, window=3, causal=causal).double().eval()
    x = ids(b=1, t=8)
    grid = torch.stack(torch.meshgrid(torch.arange(2), torch.arange(4), indexing="ij"), -1).reshape(8, 2)
    given = (lambda a, b: {}) if position.startswith("mrope") else (lambda a, b: {"positions": grid[a:b]})
    outs = []
    for cache in (KVCache(), KVCache(capacity=16)):
        steps = [model(x[:, :5], cache=cache, **given(0, 5))]
        steps += [model(x[:, i : i + 1], cache=cache, **given(i, i + 1)) for i in range(5, 8)]
        outs.append(torch.cat(steps, dim=1))
    torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=1e-12)
    if causal:
        torch.testing.assert_close(outs[0], model(x, **given(0, 8)), rtol=0, atol=1e-12)


@pytest.mark.parametrize("position", ["rope", "t5", "none"])
def test_a_static_cache_follows_positions_as_a_growing_one(position):
    """A step at a position before cached ones (3 after 0..5): causality follows positions in both caches (the
    static one masked by slot: it saw the keys at 4 and 5)."""
    model = make_model(position).eval()
    x, positions = ids(t=7), torch.tensor([0, 1, 2, 3, 4, 5, 3])
    steps = []
    for cache in (KVCache(), KVCache(capacity=10)):
        model(x[:, :6], positions=positions[:6], cache=cache)
        steps.append(model(x[:, 6:], positions=positions[6:], cache=cache))
    torch.testing.assert_close(steps[1], steps[0], **LOGITS_TOL)


@pytest.mark.parametrize("capacity", [None, 10])
@pytest.mark.parametrize("first_per_row", [True, False])
def test_shared_and_per_row_positions_mix_across_steps(first_per_row, capacity):
    """A prompt at shared ``(t,)`` positions, then steps at per-row ``(b, t)`` ones (or the reverse): the full
    forward at the joined ``(b, t)`` positions, in a growing and a static cache."""
    model = make_model("rope").eval()
    x = ids(t=7)
    rows = torch.tensor([[0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 4, 9, 12]])
    prompt, steps = (rows[:, :5], rows[0, 5:]) if first_per_row else (rows[0, :5], rows[:, 5:])
    cache = KVCache(capacity=capacity)
    model(x[:, :5], positions=prompt, cache=cache)
    out = torch.cat(
        [model(x[:, i : i + 1], positions=steps[..., i - 5 : i - 4], cache=cache) for i in (5, 6)], 1
    )
    full = torch.cat([prompt.expand(2, -1), steps.expand(2, -1)], dim=1)
    torch.testing.assert_close(out, model(x, positions=full)[:, 5:], **LOGITS_TOL)


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


def test_axial_rope_with_a_cache_reads_its_grid_and_asks_for_the_next_coordinates():
    """AxialRoPE's default positions are its grid: a static cache's first call reads it (it read the
    diagonal (i, i), a result differing from the cache-free forward without an error), and a call after
    cached tokens without positions is refused (a grid has no next token; it continued on the diagonal)."""
    model = make_model("rope_axial(grid_size=(2, 3))").eval()
    x = ids(t=6)
    full = model(x)
    for cache in (KVCache(), KVCache(capacity=8)):
        torch.testing.assert_close(model(x, cache=cache), full, **LOGITS_TOL)
        with pytest.raises(ValueError, match="AxialRoPE has no default positions after cached tokens"):
            model(ids(t=1), cache=cache)
        after = model(ids(t=1), positions=torch.tensor([[2, 0]]), cache=cache)  # the next row's first cell
        assert after.shape == (2, 1, VOCAB)


@pytest.mark.parametrize(
    "schedule", ["mrope(mrope_section=(2, 1, 1)) + rope", "rope + mrope(mrope_section=(2, 1, 1))"]
)
def test_a_schedule_mixing_m_rope_and_rope_decodes_to_the_full_forward(schedule):
    """Each encoding's state reads the cache of its own first layer (M-RoPE's positions have axes,
    RoPE's not); both read layer 0's, and the other form failed inside torch."""
    model = make_model(schedule).eval()
    x = ids(t=8)
    full = model(x)
    for cache in (KVCache(), KVCache(capacity=10)):
        steps = [model(x[:, :5], cache=cache)] + [model(x[:, i : i + 1], cache=cache) for i in range(5, 8)]
        torch.testing.assert_close(torch.cat(steps, dim=1), full, **LOGITS_TOL)


@pytest.mark.parametrize("capacity", [None, 8])
@pytest.mark.parametrize("position", ["mrope(mrope_section=(2, 1, 1))", "rope"])
def test_a_window_over_positions_with_axes_refuses_padding_between_real_tokens(position, capacity):
    """Positions with axes are windowed by token order, where a pad between real tokens (a right-padded
    prompt, then a step) would count: refused; left padding, and padding after the last real token, stay."""
    torch.manual_seed(0)
    kwargs = {"vocab_size": VOCAB, "d_model": 32, "num_layers": 1, "num_heads": 4, "max_len": 64}
    model = TransformerLM(**kwargs, position=position, window=2).double().eval()
    x = ids(b=1, t=3)
    alone = model(x[:, [0, 2]])[:, -1]
    cache = KVCache(capacity=capacity)
    prompt = torch.tensor(
        [[True] + [False] * ((capacity or 2) - 1)]
    )  # (a static cache's mask covers every slot)
    model(x[:, :2], attention_mask=prompt, cache=cache)
    step = torch.tensor([[True, False, True] + [False] * ((capacity or 3) - 3)])
    if position == "rope":  # positions in one dimension are ordered: the pad takes none
        torch.testing.assert_close(model(x[:, 2:], attention_mask=step, cache=cache)[:, -1], alone)
        return
    with pytest.raises(ValueError, match=r"window=2 .* MRoPE .* padding between real tokens"):
        model(x[:, 2:], attention_mask=step, cache=cache)
    with pytest.raises(ValueError, match=r"padding between real tokens"):
        model(x, attention_mask=torch.tensor([[True, False, True]]))
    for keep in ([False, True, True], [True, True, False]):
        model(x, attention_mask=torch.tensor([keep]))  # left and right padding


@pytest.mark.parametrize("position", ["learned2d(grid_size=(3, 4))", "sinusoidal2d(grid_size=(3, 4))"])
def test_a_grid_table_decodes_its_grid_in_chunks(position):
    """A growing cache's first call went to the additive encoding without positions, which a grid table reads
    as a grid of that many tokens: 4 tokens of a 3 x 4 table were a resampled 2 x 2 one (0.59 off), 6 were
    refused. With a cache every call indexes the table's own grid, as the later calls did."""
    model = make_model(position)
    x = ids(t=12)
    full = model(x)
    for chunks in ([4, 8], [6, 6], [1] * 12):
        cache, steps, i = KVCache(), [], 0
        for n in chunks:
            steps.append(model(x[:, i : i + n], cache=cache))
            i += n
        torch.testing.assert_close(torch.cat(steps, dim=1), full, **LOGITS_TOL)


def test_a_mask_of_the_wrong_length_for_a_static_cache_names_its_capacity():
    """The message said "(batch, cached + new tokens) = (1, 8)" for 3 cached and new tokens: 8 is the capacity."""
    layer = MultiheadAttention(D, HEADS, "rope", causal=True)
    cache = KVCache(capacity=8)
    with pytest.raises(ValueError, match=r"\(batch, the static cache's capacity\) = \(1, 8\), got \(1, 3\)"):
        layer(torch.randn(1, 3, D), cache=cache, attention_mask=torch.ones(1, 3, dtype=torch.bool))


def test_a_static_cache_takes_positions_of_another_integer_dtype_as_a_growing_one():
    # int32 positions, then next_positions' int64: a raw index_copy_ dtype error from the static cache.
    k = v = torch.randn(1, 2, 4, 8)
    caches = KVCache(), KVCache(capacity=6)
    for cache in caches:
        cache.update(0, k, v, torch.arange(4, dtype=torch.int32))
        cache.update(0, k[:, :, :1], v[:, :, :1], cache.next_positions(0, 1))
    grown, static = (cache.positions[0] for cache in caches)
    assert static.dtype == grown.dtype == torch.long
    assert static[0, :5].tolist() == grown.tolist() == list(range(5))


def test_a_cache_filled_inside_autocast_and_used_outside_says_so():
    layer = MultiheadAttention(D, HEADS, "rope")
    x, cache = torch.randn(1, 4, D), KVCache()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        layer(x, cache=cache)
    with pytest.raises(
        ValueError, match=r"in torch.bfloat16, got .* in torch.float32; .*autocast on in every call"
    ):
        layer(x[:, :1], cache=cache)
    other = KVCache()
    other.update(0, torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8), torch.arange(4))
    with pytest.raises(ValueError, match=r"for another model$"):  # (other heads: no word of autocast)
        other.update(
            0, torch.randn(1, 3, 1, 8).double(), torch.randn(1, 3, 1, 8).double(), torch.arange(4, 5)
        )
