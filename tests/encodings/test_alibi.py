"""ALiBi: slopes and biases against Bloom, MPT (transformers) and x-transformers, and the paper's properties."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers.models.bloom.modeling_bloom import _get_alibi_slopes, build_alibi_tensor
from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor
from x_transformers.x_transformers import AlibiPositionalBias

import posenc
from posenc.encodings.alibi import ALiBi
from posenc.functional.alibi import alibi_slopes

# Bloom raises a float32-rounded base to integer powers: measured up to 8 float32 ulps
# (4.8e-7 relative) from the exact slope; ours rounds the float64 value once.
BLOOM_SLOPE = {"rtol": 1e-6, "atol": 0.0}
# MPT and x-transformers round a differently computed float64/float32 value: one ulp at most.
ONE_ULP = {"rtol": 2.0**-23, "atol": 0.0}
# Same slopes, same integer distances, one multiply: bit-identical.
EXACT = {"rtol": 0.0, "atol": 0.0}
# Key-only vs full causal form in float32 at T = 1024 (8 heads): both forms round values up
# to m * 1023 <= 511.5 (half an ulp: 2^-16 = 1.5e-5), so a probability moves by at most about
# twice that; measured max |p_full - p_key_only| 6.0e-6 (seed 0; 2.5e-5 at T = 4096).
KEY_ONLY_DRIFT_FP32 = {"rtol": 0.0, "atol": 3e-5}
# The same comparison in float64.
KEY_ONLY_DRIFT_FP64 = {"rtol": 0.0, "atol": 1e-12}
# Attention outputs computed two ways (dense bias through SDPA vs score_mod in FlexAttention).
ATTENTION_FP32 = {"rtol": 1e-5, "atol": 1e-6}

HEAD_COUNTS = list(range(1, 33))


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


def causal_keep(tq: int, tk: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(tq, tk) keep-mask for queries at the last tq of tk positions."""
    return torch.ones(tq, tk, dtype=torch.bool, device=device).tril(diagonal=tk - tq)


def masked_softmax(scores: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    return scores.masked_fill(~keep, float("-inf")).softmax(dim=-1)


# --- slopes -------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_heads", HEAD_COUNTS)
def test_slopes_match_bloom_and_x_transformers(num_heads: int) -> None:
    slopes = ALiBi(num_heads).slopes
    assert slopes.shape == (num_heads,) and slopes.dtype == torch.float32
    torch.testing.assert_close(slopes, _get_alibi_slopes(num_heads, "cpu"), **BLOOM_SLOPE)
    x_slopes = torch.tensor(AlibiPositionalBias._get_slopes(num_heads), dtype=torch.float32)
    torch.testing.assert_close(slopes, x_slopes, **ONE_ULP)


def test_mpt_slope_rule_equals_bloom_rule_for_1_to_64_heads() -> None:
    for num_heads in range(1, 65):
        # (h, 1, 2) = slope * (k - 1) for k = 0, 1: the first column is -slope.
        mpt = -build_mpt_alibi_tensor(num_heads, 2, alibi_bias_max=8)[:, 0, 0]
        torch.testing.assert_close(
            mpt, _get_alibi_slopes(num_heads, "cpu"), **BLOOM_SLOPE, msg=f"{num_heads} heads"
        )
        torch.testing.assert_close(alibi_slopes(num_heads), mpt, **ONE_ULP, msg=f"{num_heads} heads")


@pytest.mark.parametrize("max_bias", [1.0, 4.0, 6.5, 12.0, 16.0])
def test_slopes_match_mpt_for_other_max_bias(max_bias: float) -> None:
    for num_heads in (1, 3, 4, 6, 12, 16, 20, 32):
        mpt = -build_mpt_alibi_tensor(num_heads, 2, alibi_bias_max=max_bias)[:, 0, 0]
        torch.testing.assert_close(ALiBi(num_heads, max_bias=max_bias).slopes, mpt, **ONE_ULP)


def test_slopes_follow_the_paper() -> None:
    # 8 heads: 1/2, 1/4, ..., 1/256 (the paper's example).
    assert ALiBi(8).slopes.tolist() == [2.0**-i for i in range(1, 9)]
    # 12 heads: the 8-head slopes, then the odd-indexed slopes of 16 heads, 2^(-0.5 * (1, 3, 5, 7)).
    expected = [2.0**-i for i in range(1, 9)] + [2.0 ** (-0.5 * i) for i in (1, 3, 5, 7)]
    torch.testing.assert_close(ALiBi(12).slopes, torch.tensor(expected, dtype=torch.float32), **EXACT)


# --- biases against the references --------------------------------------------------------------


@pytest.mark.parametrize("num_heads", [1, 5, 8, 12, 32])
def test_key_only_bias_matches_mpt(num_heads: int, device: torch.device) -> None:
    # MPT's tensor is slope * (k - (T-1)): exactly the key-only form for default positions.
    t = 50
    bias = ALiBi(num_heads, causal=True).to(device).attention_bias(*qk(1, num_heads, t, t, device=device))
    assert bias.shape == (1, num_heads, 1, t)
    mpt = build_mpt_alibi_tensor(num_heads, t, device=device).float()
    torch.testing.assert_close(bias[0], mpt, **ONE_ULP)


@pytest.mark.parametrize("num_heads", [1, 3, 6, 8, 16, 24])
def test_key_only_bias_matches_bloom_with_padding(num_heads: int, device: torch.device) -> None:
    torch.manual_seed(0)
    # Left and right padding: Bloom numbers the real tokens 0, 1, 2, ...
    keep = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 0, 0, 0]], device=device)
    positions = posenc.mask_to_positions(keep)
    bloom = build_alibi_tensor(keep, num_heads, torch.float32).view(2, num_heads, 1, 10)  # slope * k_pos
    ours = ALiBi(num_heads, causal=True).to(device)
    bias = ours.attention_bias(
        *qk(2, num_heads, 10, 10, device=device), q_positions=positions, k_positions=positions
    )
    assert bias.shape == (2, num_heads, 1, 10)
    # Ours is slope * (k_pos - q_ref), q_ref the largest position of each row.
    q_ref = positions.amax(dim=-1).float().view(2, 1, 1, 1)
    torch.testing.assert_close(bias, bloom - ours.slopes.view(1, -1, 1, 1) * q_ref, rtol=1e-6, atol=1e-6)
    # And the attention weights are Bloom's, for real query rows under a causal + padding mask.
    scores = torch.randn(2, num_heads, 10, 10).to(device)
    mask = causal_keep(10, 10, device) & keep.bool()[:, None, None, :]
    real = keep.bool()[:, None, :, None].expand(2, num_heads, 10, 10)
    expected = masked_softmax(scores + bloom, mask)[real]
    torch.testing.assert_close(masked_softmax(scores + bias, mask)[real], expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(
        masked_softmax(ours(scores, positions, positions), mask)[real], expected, rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("num_heads", [3, 8, 12])
def test_symmetric_bias_matches_x_transformers(num_heads: int, device: torch.device) -> None:
    # x-transformers always uses -m * |i - j| (causal models mask the upper triangle).
    reference = AlibiPositionalBias(heads=num_heads).to(device)
    symmetric = ALiBi(num_heads, causal=False).to(device)
    for tq, tk in [(20, 20), (5, 30)]:
        expected = reference(tq, tk)  # (h, tq, tk); queries are the last tq of tk keys
        torch.testing.assert_close(
            symmetric.attention_bias(*qk(1, num_heads, tq, tk, device=device))[0], expected, **ONE_ULP
        )
        # The causal drop-in form agrees where the causal mask keeps scores (k <= q).
        full = ALiBi(num_heads, causal=True).to(device)(torch.zeros(1, num_heads, tq, tk, device=device))[0]
        keep = causal_keep(tq, tk, device).expand_as(full)
        torch.testing.assert_close(full[keep], expected[keep], **ONE_ULP)
    # Per-row (b, t) positions.
    positions = torch.randint(0, 500, (2, 17)).to(device)
    expected = reference.forward_custom_pos(positions)
    torch.testing.assert_close(
        symmetric.attention_bias(
            *qk(2, num_heads, 17, 17, device=device), q_positions=positions, k_positions=positions
        ),
        expected,
        **ONE_ULP,
    )


# --- the paper's properties ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "tolerance"), [(torch.float32, KEY_ONLY_DRIFT_FP32), (torch.float64, KEY_ONLY_DRIFT_FP64)]
)
def test_key_only_form_gives_the_softmax_of_the_full_form(dtype: torch.dtype, tolerance: dict) -> None:
    torch.manual_seed(0)
    t, heads = 1024, 8
    alibi = ALiBi(heads, causal=True)
    scores = torch.randn(1, heads, t, t, dtype=dtype)
    keep = causal_keep(t, t)
    key_only = alibi.attention_bias(*qk(1, heads, t, t, dtype))
    assert key_only.shape == (1, heads, 1, t) and key_only.dtype == dtype
    p_key_only = masked_softmax(scores + key_only, keep)
    p_full = masked_softmax(alibi(scores), keep)
    torch.testing.assert_close(p_key_only, p_full, **tolerance)


def test_key_only_form_is_small_near_the_last_query_at_long_context() -> None:
    # Around position 100k: the last query's own key gets 0 and its neighbours -m, -2m, ...
    alibi = ALiBi(4, causal=True)
    positions = torch.arange(100_000, 100_008)
    bias = alibi.attention_bias(*qk(1, 4, 8, 8), q_positions=positions, k_positions=positions)
    expected = alibi.slopes.view(1, 4, 1, 1) * torch.arange(-7, 1, dtype=torch.float32)
    torch.testing.assert_close(bias, expected, **EXACT)


def test_bias_depends_only_on_relative_position() -> None:
    for causal in (True, False):
        alibi = ALiBi(6, causal=causal)
        q, k = qk(1, 6, 12, 30)
        shifted = alibi.attention_bias(
            q, k, q_positions=torch.arange(18, 30) + 5000, k_positions=torch.arange(30) + 5000
        )
        torch.testing.assert_close(shifted, alibi.attention_bias(q, k), **EXACT)
        scores = torch.randn(1, 6, 12, 30)
        torch.testing.assert_close(
            alibi(scores, torch.arange(18, 30) + 77, torch.arange(30) + 77), alibi(scores), **EXACT
        )


def test_forward_is_the_papers_full_form() -> None:
    alibi = ALiBi(4, causal=True)
    scores = torch.zeros(1, 4, 6, 6)
    i = torch.arange(6).view(-1, 1)
    j = torch.arange(6).view(1, -1)
    expected = -alibi.slopes.view(1, 4, 1, 1) * (i - j).float()
    torch.testing.assert_close(alibi(scores), expected, **EXACT)
    torch.testing.assert_close(
        ALiBi(4, causal=False)(scores), -alibi.slopes.view(1, 4, 1, 1) * (i - j).abs().float(), **EXACT
    )


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("tq", "tk"), [(1, 1), (1, 50), (13, 50), (50, 50), (50, 13)])
def test_default_positions_fast_path_equals_explicit_positions(causal: bool, tq: int, tk: int) -> None:
    # Default positions take a Toeplitz shortcut for the full forms; explicit ones do not.
    torch.manual_seed(0)
    alibi = ALiBi(5, causal=causal)
    q, k = qk(2, 5, tq, tk)
    q_positions, k_positions = torch.arange(max(tk - tq, 0), max(tk - tq, 0) + tq), torch.arange(tk)
    fast = alibi.attention_bias(q, k)
    assert fast.is_contiguous()
    torch.testing.assert_close(
        fast, alibi.attention_bias(q, k, q_positions=q_positions, k_positions=k_positions), **EXACT
    )
    scores = torch.randn(2, 5, tq, tk)
    torch.testing.assert_close(alibi(scores), alibi(scores, q_positions, k_positions), **EXACT)


def test_chunk_of_queries_gives_the_same_attention() -> None:
    torch.manual_seed(0)
    alibi = ALiBi(4, causal=True)
    scores = torch.randn(1, 4, 64, 64)
    keep = causal_keep(64, 64)
    full = masked_softmax(scores + alibi.attention_bias(*qk(1, 4, 64, 64)), keep)
    chunk_bias = alibi.attention_bias(
        *qk(1, 4, 16, 64), q_positions=torch.arange(16, 32), k_positions=torch.arange(64)
    )
    chunk = masked_softmax(scores[:, :, 16:32] + chunk_bias, keep[16:32])
    torch.testing.assert_close(chunk, full[:, :, 16:32], rtol=1e-5, atol=1e-7)
    symmetric = ALiBi(4, causal=False)
    whole = symmetric.attention_bias(*qk(1, 4, 64, 64))
    part = symmetric.attention_bias(
        *qk(1, 4, 16, 64), q_positions=torch.arange(16, 32), k_positions=torch.arange(64)
    )
    torch.testing.assert_close(part, whole[:, :, 16:32], **EXACT)


# --- dtypes and state ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_forward_adds_in_float32_and_keeps_dtype(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    alibi = ALiBi(4, causal=True)
    scores = torch.randn(2, 4, 9, 9).to(dtype)
    out = alibi(scores)
    assert out.dtype == dtype
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    slopes = alibi_slopes(4, dtype=compute)
    distance = (torch.arange(9) - torch.arange(9).unsqueeze(-1)).to(compute)  # k - q
    full = slopes.view(1, -1, 1, 1) * distance  # the paper's -m * (q - k)
    torch.testing.assert_close(out, (scores.to(compute) + full).to(dtype), **EXACT)
    bias = alibi.attention_bias(*qk(2, 4, 9, 9, dtype))
    assert bias.dtype == compute
    torch.testing.assert_close(bias, full[:, :, -1:], **EXACT)  # key-only: the last query's row


def test_float64_uses_float64_slopes() -> None:
    alibi = ALiBi(12)
    bias = alibi.attention_bias(*qk(1, 12, 1, 2, torch.float64))
    # Key at 0 seen from the query at 1: -slope, computed from the float64 slopes.
    assert torch.equal(bias[0, :, 0, 0], -alibi_slopes(12, dtype=torch.float64))


@pytest.mark.parametrize("cast", ["bfloat16", "half", "double", "to_bf16"])
def test_half_casts_keep_slopes_float32_and_double_rebuilds_them_in_float64(cast: str) -> None:
    alibi = ALiBi(12)
    alibi = alibi.to(torch.bfloat16) if cast == "to_bf16" else getattr(alibi, cast)()
    dtype = torch.float64 if cast == "double" else torch.float32
    assert alibi.slopes.dtype == dtype
    assert torch.equal(alibi.slopes, alibi_slopes(12, dtype=dtype))


def test_state_dict_is_empty_and_meta_device_works() -> None:
    assert ALiBi(8).state_dict() == {}
    meta = ALiBi(8, device="meta")
    assert meta.slopes.is_meta
    meta.to_empty(device="cpu")
    meta.reset_caches()
    assert torch.equal(meta.slopes, alibi_slopes(8))


@pytest.mark.parametrize("num_heads", [6, 64])
def test_to_empty_from_meta_rebuilds_the_slopes(num_heads: int) -> None:
    # As for RoPE and the sinusoids: no reset_caches() call needed after materialising,
    # also when the encoding is a submodule (to_empty recurses through _apply).
    with torch.device("meta"):
        model = torch.nn.ModuleDict({"alibi": ALiBi(num_heads, causal=False)})
    assert model["alibi"].slopes.is_meta
    model.to_empty(device="cpu")
    alibi = model["alibi"]
    assert alibi.slopes.dtype == torch.float32
    assert torch.equal(alibi.slopes, alibi_slopes(num_heads))
    q = torch.randn(1, num_heads, 5, 4)
    want = ALiBi(num_heads, causal=False).attention_bias(q, q)
    # exact: the same slopes and the same arithmetic
    torch.testing.assert_close(alibi.attention_bias(q, q), want, rtol=0, atol=0)


def test_build_follows_model_causality() -> None:
    assert posenc.build("alibi", num_heads=12).causal is True
    assert posenc.build("alibi", num_heads=12, causal=False).causal is False
    built = posenc.build("alibi(max_bias=16.0, causal=True)", num_heads=16, causal=False)
    assert built.causal is True and built.max_bias == 16.0


# --- FlexAttention score_mod ---------------------------------------------------------------------


def dense_reference(alibi: ALiBi, q, k, v, positions=None) -> torch.Tensor:
    bias = alibi.attention_bias(q, k, q_positions=positions, k_positions=positions)
    if alibi.causal:
        bias = bias.masked_fill(~causal_keep(q.shape[-2], k.shape[-2]), float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("causal", [True, False])
def test_score_mod_matches_dense_bias_eager(causal: bool) -> None:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    torch.manual_seed(0)
    alibi = ALiBi(4, causal=causal)
    q, k = qk(2, 4, 24, 24)
    v = torch.randn_like(k)
    block_mask = None
    if causal:
        block_mask = create_block_mask(lambda b, h, i, j: j <= i, None, None, 24, 24, device="cpu")
    for positions in (None, torch.arange(24).expand(2, 24) + torch.tensor([[0], [1000]])):
        out = flex_attention(
            q,
            k,
            v,
            score_mod=alibi.score_mod(q, k, q_positions=positions, k_positions=positions),
            block_mask=block_mask,
        )
        torch.testing.assert_close(out, dense_reference(alibi, q, k, v, positions), **ATTENTION_FP32)


@pytest.mark.slow
def test_score_mod_matches_dense_bias_compiled() -> None:
    from torch.nn.attention.flex_attention import flex_attention

    torch.manual_seed(0)
    alibi = ALiBi(4, causal=False)
    torch.compiler.reset()  # flex_attention's compile cache is shared across tests
    compiled = torch.compile(flex_attention, fullgraph=True, dynamic=True)
    for t, batched in [(40, False), (40, True), (57, True)]:
        q, k = qk(2, 4, t, t)
        v = torch.randn_like(k)
        positions = torch.randint(0, 100, (2, t)) if batched else None
        out = compiled(q, k, v, score_mod=alibi.score_mod(q, k, q_positions=positions, k_positions=positions))
        torch.testing.assert_close(out, dense_reference(alibi, q, k, v, positions), **ATTENTION_FP32)


@pytest.mark.slow
def test_compiles_fullgraph_with_dynamic_lengths() -> None:
    for causal in (True, False):
        alibi = ALiBi(4, causal=causal)
        compiled_bias = torch.compile(alibi.attention_bias, fullgraph=True, dynamic=True)
        compiled_forward = torch.compile(alibi, fullgraph=True, dynamic=True)
        for t in (7, 13, 29):
            q, k = qk(1, 4, t, t)
            torch.testing.assert_close(compiled_bias(q, k), alibi.attention_bias(q, k), **EXACT)
            scores = torch.randn(2, 4, t, t)
            torch.testing.assert_close(compiled_forward(scores), alibi(scores), **EXACT)
            q, k, positions = q.expand(2, -1, -1, -1), k.expand(2, -1, -1, -1), torch.randint(0, 100, (2, t))
            torch.testing.assert_close(
                compiled_bias(q, k, q_positions=positions, k_positions=positions),
                alibi.attention_bias(q, k, q_positions=positions, k_positions=positions),
                **EXACT,
            )


# --- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"num_heads": 0}, ValueError, ["num_heads", "0"]),
        ({"num_heads": -3}, ValueError, ["num_heads", "-3"]),
        ({"num_heads": "8"}, TypeError, ["num_heads", "'8'"]),
        ({"num_heads": 8, "max_bias": 0.0}, ValueError, ["max_bias", "0.0"]),
        ({"num_heads": 8, "max_bias": -1}, ValueError, ["max_bias", "-1"]),
        ({"num_heads": 8, "max_bias": float("nan")}, ValueError, ["max_bias", "nan"]),
        ({"num_heads": 8, "max_bias": float("inf")}, ValueError, ["max_bias", "inf"]),
        ({"num_heads": 8, "max_bias": "8"}, TypeError, ["max_bias", "'8'"]),
        ({"num_heads": 8, "causal": "yes"}, TypeError, ["causal", "'yes'"]),
    ],
)
def test_bad_options_are_named(kwargs: dict, error: type[Exception], words: list[str]) -> None:
    with pytest.raises(error) as info:
        ALiBi(**kwargs)
    for word in words:
        assert word in str(info.value)


def test_bad_inputs_are_named() -> None:
    alibi = ALiBi(4)
    q, k = qk(2, 4, 5, 5)
    with pytest.raises(ValueError, match=r"q has 8 heads.*num_heads=4"):
        alibi.attention_bias(torch.randn(2, 8, 5, 8), torch.randn(2, 8, 5, 8))
    with pytest.raises(ValueError, match="rank 5"):
        alibi.attention_bias(q[None], k[None])
    with pytest.raises(ValueError, match="q_positions must have shape"):
        alibi.attention_bias(q, k, q_positions=torch.zeros(1, 2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="k_positions has length 6, expected 5"):
        alibi.score_mod(q, k, q_positions=None, k_positions=torch.arange(6))
    with pytest.raises(ValueError, match="must be non-negative"):
        alibi(torch.randn(2, 4, 5, 5), torch.arange(-1, 4))
    with pytest.raises(ValueError, match=r"scores have 3 heads.*num_heads=4"):
        alibi(torch.randn(2, 3, 5, 5))
    with pytest.raises(TypeError, match=r"scores must be a torch\.Tensor"):
        alibi([[1.0]])


def test_causal_set_after_construction_changes_the_form():
    """The key-only form is exact only under a causal mask: it follows ``causal``, never a stale copy."""
    alibi = ALiBi(num_heads=4)
    alibi.causal = False
    q = torch.randn(1, 4, 6, 8)
    bias = alibi.attention_bias(q, q)
    assert bias.shape[-2] == 6  # the full symmetric form, not the (.., 1, tk) key-only one
    assert torch.equal(bias[0, :, 2, 4], bias[0, :, 4, 2])
