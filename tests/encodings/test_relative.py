"""T5 relative position bias: parity with transformers' T5 and x-transformers, and T5's properties."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from transformers import T5Config
from transformers.models.t5.modeling_t5 import T5Attention
from x_transformers.x_transformers import RelativePositionBias as XRelativePositionBias

import posenc
from posenc.encodings.relative import RelativeBias
from posenc.functional.relative import relative_position_bucket

# Our bias is a gather of the very table entries the references look up: bit-identical.
EXACT = {"rtol": 0.0, "atol": 0.0}
# Attention outputs computed two ways (dense bias through SDPA vs a score_mod inside
# FlexAttention) differ by float32 summation order only.
ATTENTION_FP32 = {"rtol": 1e-5, "atol": 1e-6}

BUCKET_CONFIGS = [(32, 128), (16, 40), (8, 20), (64, 256), (5, 9), (4, 3)]


def t5_attention(num_heads: int, num_buckets: int, max_distance: int, is_decoder: bool) -> T5Attention:
    config = T5Config(
        d_model=16,
        d_kv=4,
        num_heads=num_heads,
        relative_attention_num_buckets=num_buckets,
        relative_attention_max_distance=max_distance,
        is_decoder=is_decoder,
    )
    return T5Attention(config, has_relative_attention_bias=True, layer_idx=0).eval()


def qk(
    batch: int,
    heads: int,
    tq: int,
    tk: int,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    q, k = torch.randn(batch, heads, tq, 8, dtype=dtype), torch.randn(batch, heads, tk, 8, dtype=dtype)
    return q.to(device), k.to(device)


def reference_bias(enc: RelativeBias, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
    """T5's recipe for arbitrary (b, t) positions: bucket every pair, look up, heads to dim 1."""
    relative = k_positions.unsqueeze(-2) - q_positions.unsqueeze(-1)  # (b, tq, tk)
    buckets = T5Attention._relative_position_bucket(
        relative, bidirectional=enc.bidirectional, num_buckets=enc.num_buckets, max_distance=enc.max_distance
    )
    return enc.relative_attention_bias(buckets).permute(0, 3, 1, 2)


# --- the bucket function ------------------------------------------------------------------------


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("num_buckets", "max_distance"), BUCKET_CONFIGS)
def test_buckets_match_transformers(num_buckets: int, max_distance: int, bidirectional: bool) -> None:
    relative = torch.arange(-1000, 1001)
    expected = T5Attention._relative_position_bucket(
        relative, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    ours = relative_position_bucket(
        relative, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    assert torch.equal(ours, expected)
    # The bucket depends only on the distance clamped to +-max_distance.
    by_distance = RelativeBias(1, num_buckets, max_distance, bidirectional).bucket_of_distance
    assert torch.equal(by_distance[relative.clamp(-max_distance, max_distance) + max_distance], expected)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("num_buckets", "max_distance"), BUCKET_CONFIGS)
def test_buckets_monotone_in_distance_and_capped(
    num_buckets: int, max_distance: int, bidirectional: bool
) -> None:
    distance = torch.arange(0, 3 * max_distance)
    per_direction = num_buckets // 2 if bidirectional else num_buckets
    max_exact = per_direction // 2
    kwargs = {"bidirectional": bidirectional, "num_buckets": num_buckets, "max_distance": max_distance}
    before = relative_position_bucket(-distance, **kwargs)  # keys at or before the query
    assert (before.diff() >= 0).all(), "buckets must not decrease with distance"
    assert torch.equal(before[:max_exact], distance[:max_exact]), "small distances get a bucket each"
    assert (before[max_distance:] == per_direction - 1).all(), (
        "distances >= max_distance share the last bucket"
    )
    after = relative_position_bucket(distance[1:], **kwargs)  # keys after the query
    if bidirectional:
        assert torch.equal(after, before[1:] + per_direction), "keys after the query use the upper half"
    else:
        assert (after == 0).all(), "a causal decoder puts every later key in bucket 0"
    assert int(before.max()) < num_buckets and int(after.max()) < num_buckets


@settings(max_examples=60, deadline=None)
@given(
    num_buckets=st.integers(2, 200),
    max_distance=st.integers(1, 3000),
    bidirectional=st.booleans(),
    relative=st.lists(st.integers(-10_000, 10_000), min_size=1, max_size=50),
)
def test_buckets_match_transformers_for_any_valid_options(
    num_buckets: int, max_distance: int, bidirectional: bool, relative: list[int]
) -> None:
    max_exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    assume(max_exact >= 1 and max_distance > max_exact)
    relative_position = torch.tensor(relative)
    kwargs = {"bidirectional": bidirectional, "num_buckets": num_buckets, "max_distance": max_distance}
    expected = T5Attention._relative_position_bucket(relative_position, **kwargs)
    assert torch.equal(relative_position_bucket(relative_position, **kwargs), expected)
    by_distance = RelativeBias(1, num_buckets, max_distance, bidirectional).bucket_of_distance
    assert torch.equal(
        by_distance[relative_position.clamp(-max_distance, max_distance) + max_distance], expected
    )


# --- the bias against transformers' T5 ----------------------------------------------------------


@pytest.mark.parametrize("is_decoder", [False, True])
@pytest.mark.parametrize(
    ("num_buckets", "max_distance", "tq", "tk"), [(32, 128, 300, 300), (16, 20, 1, 77), (8, 10, 17, 40)]
)
def test_bias_matches_t5_compute_bias(
    is_decoder: bool, num_buckets: int, max_distance: int, tq: int, tk: int, device: torch.device
) -> None:
    torch.manual_seed(0)
    reference = t5_attention(4, num_buckets, max_distance, is_decoder).to(device)
    ours = RelativeBias(4, num_buckets, max_distance, causal=is_decoder).to(device)
    assert ours.bidirectional is not is_decoder
    # T5 checkpoints load by name.
    ours.load_state_dict({"relative_attention_bias.weight": reference.relative_attention_bias.weight})
    # T5's decoder at a cache step: queries are the last tq positions of tk.
    expected = reference.compute_bias(tq, tk, past_seen_tokens=tk - tq)
    q, k = qk(2, 4, tq, tk, device=device)
    bias = ours.attention_bias(q, k)
    torch.testing.assert_close(bias, expected, **EXACT)
    assert bias.shape == (1, 4, tq, tk) and bias.dtype == torch.float32
    assert bias.is_contiguous(), "heads outermost: SDPA reads this layout fastest"


@pytest.mark.parametrize("explicit", [False, True], ids=["default-positions", "explicit-positions"])
def test_gradient_matches_t5(explicit: bool, device: torch.device) -> None:
    # Default positions take the Toeplitz fast path, explicit (t,) positions the index_select gather.
    torch.manual_seed(0)
    reference = t5_attention(4, 32, 128, is_decoder=False).to(device)
    ours = RelativeBias(4).to(device)
    ours.load_state_dict(reference.state_dict(), strict=False)
    upstream = torch.randn(1, 4, 50, 200).to(device)
    expected = reference.compute_bias(50, 200, past_seen_tokens=150)
    (expected * upstream).sum().backward()
    positions = (
        (torch.arange(150, 200, device=device), torch.arange(200, device=device))
        if explicit
        else (None, None)
    )
    bias = ours.attention_bias(
        *qk(1, 4, 50, 200, device=device), q_positions=positions[0], k_positions=positions[1]
    )
    torch.testing.assert_close(bias, expected, **EXACT)
    (bias * upstream).sum().backward()
    grad = ours.relative_attention_bias.weight.grad
    assert grad is not None and grad.abs().sum() > 0
    # Both sum the same upstream gradients into each bucket, in a different order.
    torch.testing.assert_close(grad, reference.relative_attention_bias.weight.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_bias_matches_x_transformers(causal: bool, device: torch.device) -> None:
    torch.manual_seed(0)
    # x-transformers multiplies T5's bias by `scale` (it passes sqrt(dim_head)) and names
    # the decoder case `causal`; the buckets are T5's. Compare bias * scale.
    scale = 8**0.5
    reference = XRelativePositionBias(scale=scale, causal=causal, num_buckets=32, max_distance=64, heads=4)
    reference.to(device)
    ours = RelativeBias(4, 32, 64, causal=causal).to(device)
    ours.load_state_dict(reference.state_dict())
    for tq, tk in [(100, 100), (7, 150)]:
        expected = reference(tq, tk)  # queries are the last tq of tk keys, as ours by default
        bias = ours.attention_bias(*qk(1, 4, tq, tk, device=device))
        torch.testing.assert_close(bias[0] * scale, expected, **EXACT)


def test_batched_positions_match_t5_recipe() -> None:
    torch.manual_seed(0)
    ours = RelativeBias(3, num_buckets=16, max_distance=30, causal=True)
    q_positions = torch.randint(0, 200, (2, 11))
    k_positions = torch.randint(0, 200, (2, 23))
    bias = ours.attention_bias(*qk(2, 3, 11, 23), q_positions=q_positions, k_positions=k_positions)
    assert bias.shape == (2, 3, 11, 23) and bias.is_contiguous()
    torch.testing.assert_close(bias, reference_bias(ours, q_positions, k_positions), **EXACT)
    # Shared (t,) query positions with per-row key positions broadcast over the batch.
    bias = ours.attention_bias(*qk(2, 3, 11, 23), q_positions=q_positions[0], k_positions=k_positions)
    torch.testing.assert_close(bias, reference_bias(ours, q_positions[0].expand(2, -1), k_positions), **EXACT)


def test_bias_depends_only_on_relative_position() -> None:
    torch.manual_seed(0)
    ours = RelativeBias(2, num_buckets=8, max_distance=12)
    q, k = qk(1, 2, 20, 20)
    positions = torch.arange(20)
    torch.testing.assert_close(
        ours.attention_bias(q, k, q_positions=positions + 1000, k_positions=positions + 1000),
        ours.attention_bias(q, k),
        **EXACT,
    )
    table = ours.distance_table()  # (h, 25): distances -12..12
    gathered = table[:, (positions - positions.unsqueeze(-1)).clamp(-12, 12) + 12]
    torch.testing.assert_close(gathered.unsqueeze(0), ours.attention_bias(q, k), **EXACT)


@pytest.mark.parametrize(("tq", "tk"), [(1, 1), (1, 50), (13, 50), (50, 50), (50, 13), (300, 300)])
def test_default_positions_fast_path_equals_the_gather(tq: int, tk: int) -> None:
    # Default positions take a Toeplitz shortcut; explicit ones gather. Same values, same layout.
    torch.manual_seed(0)
    ours = RelativeBias(4, num_buckets=16, max_distance=40)
    q, k = qk(2, 4, tq, tk)
    q_positions = torch.arange(max(tk - tq, 0), max(tk - tq, 0) + tq)
    fast = ours.attention_bias(q, k)
    assert fast.is_contiguous()
    torch.testing.assert_close(
        fast, ours.attention_bias(q, k, q_positions=q_positions, k_positions=torch.arange(tk)), **EXACT
    )
    scores = torch.randn(2, 4, tq, tk)
    torch.testing.assert_close(ours(scores), ours(scores, q_positions, torch.arange(tk)), **EXACT)


def test_chunk_of_queries_is_a_slice_of_the_full_bias() -> None:
    ours = RelativeBias(4, causal=True)
    q, k = qk(1, 4, 64, 64)
    full = ours.attention_bias(q, k)
    chunk = ours.attention_bias(
        q[:, :, 16:32], k, q_positions=torch.arange(16, 32), k_positions=torch.arange(64)
    )
    torch.testing.assert_close(chunk, full[:, :, 16:32], **EXACT)


# --- forward, dtypes, state ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_forward_adds_bias_in_float32_and_keeps_dtype(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    ours = RelativeBias(4, num_buckets=16, max_distance=20)
    scores = torch.randn(2, 4, 9, 30).to(dtype)
    out = ours(scores)
    assert out.dtype == dtype and out.shape == scores.shape
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    bias = ours.attention_bias(*qk(2, 4, 9, 30, dtype))
    assert bias.dtype == compute
    torch.testing.assert_close(out, (scores.to(compute) + bias).to(dtype), **EXACT)


def test_float64_bias_uses_float64_table() -> None:
    ours = RelativeBias(2, num_buckets=8, max_distance=10).double()
    bias = ours.attention_bias(*qk(1, 2, 5, 5, torch.float64))
    assert bias.dtype == torch.float64
    torch.testing.assert_close(
        bias, reference_bias(ours, torch.arange(5)[None], torch.arange(5)[None]), **EXACT
    )


def test_state_dict_holds_the_embedding_only() -> None:
    ours = RelativeBias(8, num_buckets=32, max_distance=128)
    state = ours.state_dict()
    assert list(state) == ["relative_attention_bias.weight"]
    assert state["relative_attention_bias.weight"].shape == (32, 8)


def test_to_bfloat16_keeps_integer_cache_and_float32_bias() -> None:
    ours = RelativeBias(4).to(torch.bfloat16)
    assert ours.bucket_of_distance.dtype == torch.long
    assert torch.equal(
        ours.bucket_of_distance, RelativeBias(1, 32, 128, bidirectional=True).bucket_of_distance
    )
    bias = ours.attention_bias(*qk(1, 4, 6, 6, torch.bfloat16))
    assert bias.dtype == torch.float32
    torch.testing.assert_close(
        bias, reference_bias(ours, torch.arange(6)[None], torch.arange(6)[None]).float(), **EXACT
    )


def test_meta_device_then_to_empty_and_reset() -> None:
    ours = RelativeBias(4, num_buckets=16, max_distance=40, device="meta")
    assert ours.relative_attention_bias.weight.is_meta
    ours.to_empty(device="cpu")
    ours.reset_caches()
    ours.reset_parameters()
    assert torch.equal(
        ours.bucket_of_distance, RelativeBias(1, 16, 40, bidirectional=True).bucket_of_distance
    )
    torch.testing.assert_close(
        ours.attention_bias(*qk(1, 4, 5, 5)),
        reference_bias(ours, torch.arange(5)[None], torch.arange(5)[None]),
        **EXACT,
    )


def test_build_follows_model_causality_unless_spec_says() -> None:
    assert posenc.build("t5", num_heads=8, causal=True).bidirectional is False
    assert posenc.build("t5", num_heads=8, causal=False).bidirectional is True
    assert posenc.build("relative_bias", num_heads=8).bidirectional is True
    built = posenc.build("t5(bidirectional=True, num_buckets=16)", num_heads=8, causal=True)
    assert built.bidirectional is True and built.num_buckets == 16 and built.num_heads == 8


def test_gradient_reaches_the_table_through_forward() -> None:
    ours = RelativeBias(4, num_buckets=8, max_distance=16)
    ours(torch.randn(2, 4, 10, 10)).square().sum().backward()
    grad = ours.relative_attention_bias.weight.grad
    assert grad is not None and (grad != 0).any()


# --- FlexAttention score_mod ---------------------------------------------------------------------


def flex_reference(enc: RelativeBias, q, k, v, q_positions=None, k_positions=None) -> torch.Tensor:
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=enc.attention_bias(q, k, q_positions=q_positions, k_positions=k_positions)
    )


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("batched", [False, True])
def test_score_mod_matches_dense_bias_eager(batched: bool) -> None:
    from torch.nn.attention.flex_attention import flex_attention

    torch.manual_seed(0)
    enc = RelativeBias(4, num_buckets=16, max_distance=12)
    q, k = qk(2, 4, 24, 24)
    v = torch.randn_like(k)
    positions = torch.randint(0, 60, (2, 24)) if batched else None
    with torch.no_grad():
        out = flex_attention(
            q, k, v, score_mod=enc.score_mod(q, k, q_positions=positions, k_positions=positions)
        )
        torch.testing.assert_close(out, flex_reference(enc, q, k, v, positions, positions), **ATTENTION_FP32)


@pytest.mark.slow
@pytest.mark.parametrize("batched", [False, True])
def test_score_mod_matches_dense_bias_compiled(batched: bool) -> None:
    from torch.nn.attention.flex_attention import flex_attention

    torch.manual_seed(0)
    enc = RelativeBias(4, num_buckets=16, max_distance=20, causal=True)
    # flex_attention's compile cache is shared across tests and wrappers: start clean.
    torch.compiler.reset()
    # torch 2.13 on the CPU: dynamic shapes compile for (t,) positions; (b, t) positions hit an
    # Inductor code-generation error with dynamic shapes (see the notes), so compile them static.
    compiled = torch.compile(flex_attention, fullgraph=True, dynamic=not batched)
    # FlexAttention has no backward on the CPU: inference only.
    with torch.no_grad():
        for t in (40,) if batched else (40, 57):
            q, k = qk(2, 4, t, t)
            v = torch.randn_like(k)
            pos = torch.randint(0, 100, (2, t)) if batched else None
            out = compiled(q, k, v, score_mod=enc.score_mod(q, k, q_positions=pos, k_positions=pos))
            torch.testing.assert_close(out, flex_reference(enc, q, k, v, pos, pos), **ATTENTION_FP32)


@pytest.mark.slow
def test_compiles_fullgraph_with_dynamic_lengths() -> None:
    enc = RelativeBias(4, num_buckets=16, max_distance=20)
    compiled_bias = torch.compile(enc.attention_bias, fullgraph=True, dynamic=True)
    compiled_forward = torch.compile(enc, fullgraph=True, dynamic=True)
    for t in (7, 13, 29):
        q, k = qk(1, 4, t, t)
        torch.testing.assert_close(compiled_bias(q, k), enc.attention_bias(q, k), **EXACT)
        scores = torch.randn(2, 4, t, t)
        torch.testing.assert_close(compiled_forward(scores), enc(scores), **EXACT)
        positions = torch.randint(0, 100, (2, t))
        torch.testing.assert_close(
            compiled_forward(scores, positions, positions), enc(scores, positions, positions), **EXACT
        )


# --- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"num_heads": 0}, ValueError, ["num_heads", "0"]),
        ({"num_heads": 2.0}, TypeError, ["num_heads", "2.0"]),
        ({"num_heads": 4, "num_buckets": 0}, ValueError, ["num_buckets", "0"]),
        ({"num_heads": 4, "num_buckets": 3}, ValueError, ["num_buckets=3", ">= 4"]),
        ({"num_heads": 4, "num_buckets": 1, "causal": True}, ValueError, ["num_buckets=1", ">= 2"]),
        ({"num_heads": 4, "max_distance": -5}, ValueError, ["max_distance", "-5"]),
        ({"num_heads": 4, "max_distance": 8}, ValueError, ["max_distance=8", "8 exact buckets"]),
        ({"num_heads": 4, "max_distance": float("inf")}, TypeError, ["max_distance", "inf"]),
        ({"num_heads": 4, "bidirectional": "yes"}, TypeError, ["bidirectional", "'yes'"]),
        ({"num_heads": 4, "causal": 1}, TypeError, ["causal", "1"]),
    ],
)
def test_bad_options_are_named(kwargs: dict, error: type[Exception], words: list[str]) -> None:
    with pytest.raises(error) as info:
        RelativeBias(**kwargs)
    for word in words:
        assert word in str(info.value)


def test_bad_inputs_are_named() -> None:
    ours = RelativeBias(4)
    q, k = qk(2, 4, 5, 5)
    with pytest.raises(ValueError, match=r"q has 3 heads.*num_heads=4"):
        ours.attention_bias(q[:, :3], k[:, :3])
    with pytest.raises(ValueError, match="rank 3"):
        ours.attention_bias(q[0], k[0])
    with pytest.raises(ValueError, match="q_positions has length 4, expected 5"):
        ours.attention_bias(q, k, q_positions=torch.arange(4))
    with pytest.raises(ValueError, match="k_positions has batch size 3"):
        ours.attention_bias(q, k, q_positions=None, k_positions=torch.zeros(3, 5, dtype=torch.long))
    with pytest.raises(TypeError, match="integer dtype"):
        ours.attention_bias(q, k, q_positions=torch.arange(5.0))
    with pytest.raises(ValueError, match=r"scores have 2 heads.*num_heads=4"):
        ours(torch.randn(1, 2, 5, 5))
    with pytest.raises(ValueError, match="rank 3"):
        ours(torch.randn(4, 5, 5))
    with pytest.raises(TypeError, match="floating-point"):
        ours(torch.zeros(1, 4, 5, 5, dtype=torch.long))
