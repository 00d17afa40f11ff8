"""Property-based tests (hypothesis) over every registered encoding and over ``posenc.attention``.

Random batch sizes, heads (grouped-query included), lengths 1..200, dtypes, position
offsets and position shapes ``(t,)`` / ``(b, t)``. Each test states the property it checks;
expected values come from float64 computations or from the reference implementations in
``transformers``, never from this library's own earlier output.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from entries_table import FLOAT_DTYPES, PROFILE, Entry, make_input, make_qk
from hypothesis import given
from hypothesis import strategies as st
from transformers.models.bloom.modeling_bloom import build_alibi_tensor
from transformers.models.t5.modeling_t5 import T5Attention

import posenc
import posenc._positions
from posenc.functional import (
    alibi_slopes,
    relative_position_bucket,
    sinusoidal_shift_map,
)

#: Rounding of one result to ``dtype`` is half an ulp; the bound allows one ulp of the larger of
#: the operands (two roundings: the table cast to the input dtype, then the sum).
EPS = {dtype: torch.finfo(dtype).eps for dtype in FLOAT_DTYPES}
#: Rotations are computed in float32 for half inputs and rounded once, so an output entry is off
#: by at most ~1 ulp of the pair's magnitude; 4 ulps covers the float32 table and products.
ROTATION_ULPS = 4
#: float64 identities at positions up to ~1e5: the float64 angle ``p * inv_freq`` is exact to
#: ~1e5 * 1.1e-16; 1e-9 relative leaves three orders of margin.
F64_IDENTITY_RTOL = 1e-9
#: float32 shift invariance: cos/sin tables are float64 rounded once to float32 (6e-8 each);
#: a score of dh=8 products of N(0,1) entries accumulates ~1e-6 relative.
F32_IDENTITY_RTOL = 2e-5
#: Bloom raises a float32 base to integer powers in float32, and its error grows with the power
#: (measured up to 10.5 float32 ulps off the float64 value, that posenc rounds once, for up to
#: 200 heads); 16 ulps.
BLOOM_SLOPE_RTOL = 16 * 2**-23
#: posenc.attention against a float64 reference, per input dtype (output = convex combination of
#: N(0,1) values): rotated q/k rounded to 8 (bf16) / 11 (fp16) bits shift the scores, and the
#: output is rounded once more. Measured maxima over 425 examples (25 per table row): 1.6e-15
#: float64, 6.6e-7 float32, 1.3e-3 float16, 1.1e-2 bfloat16; the bounds leave ~5x margin, but float32
#: also carries the drift of ALiBi's key-only form (slope * (k - max q) rounded to float32; 8.8e-6 seen
#: once with positions spread over 140k, MEASURED.md gives 2e-5 at T=1024), hence 3e-5 there.
#: An encoding that ignores positions gives identical scores at every distance; a real one moves
#: a score at distance d != 0 by O(|q||k|) (rotary) or by O(0.02) at least (T5's initial table).
#: 1e-6 relative separates the two far above float64/float32 rounding of equal computations.
NOT_BLIND_RTOL = 1e-6
ATTENTION_ATOL = {torch.float64: 1e-12, torch.float32: 3e-5, torch.bfloat16: 0.05, torch.float16: 0.006}


def _positions(data, entry: Entry, batch: int, length: int, name: str):
    """None, ``(t,)`` or ``(b, t)`` positions: a run from a random offset, or random integers."""
    form = data.draw(st.sampled_from(["default", "shared", "per-row"]), label=f"{name} form")
    if form == "default":
        return None
    if entry.fixed_len is not None:  # 2D patch indices below h*w
        high = entry.fixed_len
    elif entry.max_position is not None:  # the learned table
        high = entry.max_position + 1
    elif entry.position_limit is not None:  # xPos: its scales leave the float range further out
        high = entry.position_limit
    else:
        high = data.draw(st.sampled_from([64, 5000, 140_000]), label=f"{name} range")
    rows = 1 if form == "shared" else batch
    if data.draw(st.booleans(), label=f"{name} contiguous") and high >= length:
        offsets = data.draw(st.lists(st.integers(0, high - length), min_size=rows, max_size=rows))
        positions = torch.stack([torch.arange(o, o + length) for o in offsets])
    else:
        seed = data.draw(st.integers(0, 2**31 - 1), label=f"{name} seed")
        positions = torch.randint(0, high, (rows, length), generator=torch.Generator().manual_seed(seed))
    return positions[0] if form == "shared" else positions


def _close_to_float64(
    out: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype, ulps: float
):
    """``|out - ref| <= ulps * eps(dtype) * scale`` elementwise (``scale`` broadcasts)."""
    err = (out.double() - ref).abs()
    bound = ulps * EPS[dtype] * scale + 1e-300
    worst = (err / bound).max().item() if err.numel() else 0.0
    assert worst <= 1.0, f"error {err.max().item():.3g} exceeds {ulps} ulps of {dtype} (ratio {worst:.3g})"


# --- the contract of every hook ------------------------------------------------------------------------


@PROFILE
@given(data=st.data())
def test_hooks_shapes_dtypes_and_float64_agreement(entry: Entry, data) -> None:
    """Every hook keeps shapes and dtypes, gives finite values, agrees with its own float64
    computation to rounding, and the hooks where the encoding does not act are no-ops."""
    module = entry.build()
    dtype = data.draw(st.sampled_from(FLOAT_DTYPES), label="dtype")
    batch = data.draw(st.integers(1, 3), label="batch")

    # encode_input: (b, t, d) -> (b, t, d), x + pe with one rounding to the input dtype.
    length = entry.fixed_len or data.draw(st.integers(1, 200), label="t")
    x = make_input(entry, batch, length, dtype)
    positions = _positions(data, entry, batch, x.shape[1], "positions")
    out = module.encode_input(x, positions)
    assert out.shape == x.shape and out.dtype == dtype
    assert torch.isfinite(out).all()
    if "input" in entry.hooks:
        pe64 = module.encode_input(torch.zeros(x.shape, dtype=torch.float64), positions)
        # not blind: every token gets another encoding at another position
        others = (torch.arange(length) if positions is None else positions) + 1
        if entry.fixed_len is not None or entry.max_position is not None:
            others = others % (entry.fixed_len or entry.max_position + 1)
        pe_others = module.encode_input(torch.zeros(x.shape, dtype=torch.float64), others)
        assert (pe64 - pe_others).abs().amax(dim=-1).min() > NOT_BLIND_RTOL
        ref = x.double() + pe64
        _close_to_float64(out, ref, ref.abs() + pe64.abs(), dtype, ulps=1.0)
    else:
        assert torch.equal(out, x)

    # encode_qk and attention_bias: (b, h, tq, dh), (b, h_kv, tk, dh).
    kv_heads = (
        entry.num_heads if "bias" in entry.hooks else data.draw(st.sampled_from([1, 2, 4]), label="h_kv")
    )
    heads = (
        entry.num_heads if "bias" in entry.hooks else kv_heads * data.draw(st.sampled_from([1, 2]), label="g")
    )
    tq = data.draw(st.integers(1, 200), label="tq")
    tk = data.draw(st.integers(1, 200), label="tk") if data.draw(st.booleans(), label="cross") else tq
    q, k = make_qk(entry, batch, tq, tk, dtype, heads=heads, kv_heads=kv_heads)
    q_pos = _positions(data, entry, batch, tq, "q_positions")
    k_pos = _positions(data, entry, batch, tk, "k_positions")
    if q_pos is None and k_pos is not None and tq > tk:
        q_pos = torch.arange(tq)  # queries cannot be the last tq of fewer keys
    q_pos, k_pos = entry.qk_positions(tq, tk, q_pos, k_pos)

    q_out, k_out = module.encode_qk(q, k, q_positions=q_pos, k_positions=k_pos)
    assert q_out.shape == q.shape and k_out.shape == k.shape
    assert q_out.dtype == dtype and k_out.dtype == dtype
    assert torch.isfinite(q_out).all() and torch.isfinite(k_out).all()
    if "qk" in entry.hooks:
        q64, k64 = module.encode_qk(q.double(), k.double(), q_positions=q_pos, k_positions=k_pos)
        for rotated, rotated64, original in ((q_out, q64, q), (k_out, k64, k)):
            # the rounding error of an output entry is relative to its pair's magnitude
            scale = original.double().abs().amax(dim=-1, keepdim=True) * max(_attention_scaling(module), 1.0)
            if not entry.norm_preserving:  # scaled pairs (xPos's decay, a query temperature)
                scale = torch.maximum(scale, rotated64.abs().amax(dim=-1, keepdim=True))
            _close_to_float64(rotated, rotated64, scale, dtype, ulps=ROTATION_ULPS)
    else:
        assert q_out is q and k_out is k

    bias = module.attention_bias(q, k, q_positions=q_pos, k_positions=k_pos)
    if entry.has_value_term:
        _check_value_term(module, batch, heads, tq, tk, dtype, q_pos, k_pos)
    if "bias" not in entry.hooks:
        assert bias is None
        return
    assert bias.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    assert torch.broadcast_shapes(bias.shape, (batch, heads, tq, tk)) == (batch, heads, tq, tk)
    assert torch.isfinite(bias).all()
    zeros = torch.zeros(batch, heads, tq, tk, dtype=torch.float64)
    if entry.content and entry.has_value_term:
        # the drop-in forward refuses to drop the value term (documented); nothing to compare with
        with pytest.raises(ValueError, match="value term"):
            module(zeros, q, q_pos, k_pos)
        return
    # Against the drop-in forward's full bias: equal, or (ALiBi's key-only form) equal up to a
    # constant in each query row, which softmax cancels.
    full = module(zeros, q, q_pos, k_pos) if entry.content else module(zeros, q_pos, k_pos)
    difference = bias.double() - full
    spread = difference.amax(dim=-1) - difference.amin(dim=-1)
    assert spread.abs().max() <= 1e-6 * max(1.0, full.abs().max().item())
    if bias.shape[-2] != 1:
        torch.testing.assert_close(bias.double().expand_as(full), full, rtol=1e-6, atol=1e-6)


def _attention_scaling(module) -> float:
    """RoPE's attention factor (YaRN, LongRoPE), 1 for encodings without one."""
    return getattr(module, "attention_scaling", 1.0)


def _check_value_term(module, batch, heads, tq, tk, dtype, q_pos, k_pos) -> None:
    """``value_term(probs)``: ``(b, h, tq, dh)`` in ``probs``' dtype, finite, and its float64 value
    (from a float64 copy of the module) to rounding."""
    probs = torch.rand(batch, heads, tq, tk, dtype=torch.float64).softmax(-1)
    out = module.value_term(probs.to(dtype), q_positions=q_pos, k_positions=k_pos)
    out64 = copy.deepcopy(module).double().value_term(probs, q_positions=q_pos, k_positions=k_pos)
    assert out.shape == out64.shape == (batch, heads, tq, out64.shape[-1]) and out.dtype == dtype
    assert torch.isfinite(out).all()
    if out.numel():
        # A convex combination of N(0, 1) table rows (entries below ~5): each weight rounded to
        # dtype (half an ulp), the float32 sum, and the result rounded once: 8 ulps of 5 covers it.
        bound = 8 * EPS[dtype] * 5 if dtype in (torch.float16, torch.bfloat16) else 1e-5
        assert (out.double() - out64).abs().max().item() <= bound


@PROFILE
@given(data=st.data())
def test_attention_matches_float64_reference(entry: Entry, data) -> None:
    """posenc.attention with any encoding equals softmax(q'k'ᵀ/√dh + full bias + mask) v in float64."""
    module = entry.build()
    dtype = data.draw(st.sampled_from(FLOAT_DTYPES), label="dtype")
    batch = data.draw(st.integers(1, 2), label="batch")
    kv_heads = data.draw(st.sampled_from([1, 2, 4]), label="h_kv")
    heads = entry.num_heads if "bias" in entry.hooks else kv_heads
    if heads % kv_heads:
        kv_heads = heads
    tk = data.draw(st.integers(1, 96), label="tk")
    tq = data.draw(st.integers(1, tk), label="tq")
    # A causal ALiBi encoding returns the key-only form, exact only under a causal mask; xPos is causal only.
    fixed = "bias" in entry.hooks or entry.causal_only
    causal = entry.sizes["causal"] if fixed else data.draw(st.booleans(), label="causal")
    q, k = make_qk(entry, batch, tq, tk, dtype, heads=heads, kv_heads=kv_heads)
    v = torch.randn(batch, kv_heads, tk, entry.head_dim, dtype=torch.float64).to(dtype)
    k_pos = _positions(data, entry, batch, tk, "k_positions")
    q_pos = None if k_pos is None else k_pos[..., tk - tq :]
    # positions as the encoding reads them (on axes; explicit where it has no defaults)
    q_pos, k_pos = entry.qk_positions(tq, tk, q_pos, k_pos)
    keep = None
    if data.draw(st.booleans(), label="padding"):
        keep = torch.rand(batch, tk) > 0.3
        keep = keep[:, None, None, :]
    backend = data.draw(st.sampled_from(["auto", "sdpa", "chunked"]), label="backend")
    chunk_size = data.draw(st.integers(1, 40), label="chunk") if backend == "chunked" else None

    out = posenc.attention(
        q,
        k,
        v,
        module,
        causal=causal,
        q_positions=q_pos,
        k_positions=k_pos,
        attn_mask=keep,
        backend=backend,
        chunk_size=chunk_size,
    )
    assert out.shape == (batch, heads, tq, entry.head_dim) and out.dtype == dtype

    # The reference, written out in float64 from the hooks' float64 results.
    q64, k64, v64 = q.double(), k.double(), v.double()
    q64, k64 = module.encode_qk(q64, k64, q_positions=q_pos, k_positions=k_pos)
    k64 = k64.repeat_interleave(heads // kv_heads, dim=1)
    v64 = v64.repeat_interleave(heads // kv_heads, dim=1)
    scores = q64 @ k64.transpose(-1, -2) / math.sqrt(entry.head_dim)
    if "bias" in entry.hooks and entry.has_value_term:  # (its drop-in forward refuses the value term)
        scores = scores + module.attention_bias(q64, k64, q_positions=q_pos, k_positions=k_pos)
    elif entry.content:  # the full form, float64, from the encoded queries
        scores = module(scores, q64, q_pos, k_pos)
    elif "bias" in entry.hooks:
        scores = module(scores, q_pos, k_pos)  # the full form, float64
    allowed = torch.ones(batch, heads, tq, tk, dtype=torch.bool)
    if causal and (k_pos is None or entry.axes):
        # bottom-right aligned by index: query i is key i + tk - tq (default positions; and
        # positions with axes, which have no order: causality follows the token order)
        allowed &= torch.ones(tq, tk, dtype=torch.bool).tril(tk - tq)
    elif causal:  # by position: key j is visible to query i iff k_pos[j] <= q_pos[i] (per batch row)
        visible = k_pos.unsqueeze(-2) <= q_pos.unsqueeze(-1)  # (tq, tk) or (b, tq, tk)
        allowed &= visible if visible.dim() == 2 else visible[:, None]
    if keep is not None:
        allowed &= keep
    weights = scores.masked_fill(~allowed, float("-inf")).softmax(-1).nan_to_num(0.0)
    ref = weights @ v64
    if entry.has_value_term:  # Shaw's relative values: sum_j weights[i, j] a_V(j - i)
        ref = ref + module.value_term(weights, q_positions=q_pos, k_positions=k_pos)
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=ATTENTION_ATOL[dtype])


# --- RoPE --------------------------------------------------------------------------------------------------


@st.composite
def _rope_configs(draw):
    head_dim = 2 * draw(st.integers(2, 32))
    rotary_dim = 2 * draw(st.integers(2, head_dim // 2))
    kind = draw(st.sampled_from(["default", "linear", "dynamic", "yarn", "llama3", "longrope"]))
    scaling = None
    if kind != "default":
        scaling = {"rope_type": kind, "factor": draw(st.sampled_from([1.5, 2.0, 8.0]))}
    if kind in ("yarn", "llama3", "longrope"):
        scaling["original_max_position_embeddings"] = draw(st.sampled_from([64, 4096]))
    if kind == "llama3":
        scaling.update(low_freq_factor=1.0, high_freq_factor=4.0)
    if kind == "longrope":
        pairs = rotary_dim // 2
        scaling.update(short_factor=[1.0] * pairs, long_factor=[1.0 + i / pairs for i in range(pairs)])
    return {
        "head_dim": head_dim,
        "base": draw(st.sampled_from([100.0, 10000.0, 500000.0])),
        "layout": draw(st.sampled_from(["half", "interleaved"])),
        "rotary_dim": rotary_dim,
        "scaling": scaling,
        "max_len": draw(st.sampled_from([64, 4096])),
    }


@PROFILE
@given(config=_rope_configs(), seed=st.integers(0, 2**31 - 1), length=st.integers(1, 64))
def test_rope_keeps_norms(config, seed, length) -> None:
    """RoPE is a rotation: each token's rotated channels keep their norm (times YaRN's/LongRoPE's
    attention factor) and the other channels pass through unchanged."""
    rope = posenc.RoPE(**config)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, length, config["head_dim"], dtype=torch.float64, generator=gen)
    positions = torch.randint(0, 200_000, (2, length), generator=gen)
    out = rope.rotate(x, positions)
    r = config["rotary_dim"]
    torch.testing.assert_close(out[..., r:], x[..., r:], rtol=0, atol=0)
    torch.testing.assert_close(
        out[..., :r].norm(dim=-1), rope.attention_scaling * x[..., :r].norm(dim=-1), rtol=1e-12, atol=0
    )
    # and it does rotate: a token away from position 0 comes out different (an identity fails here)
    change = (out[..., :r] - x[..., :r]).norm(dim=-1) / x[..., :r].norm(dim=-1)
    assert change[positions.unsqueeze(1).expand_as(change) != 0].min() > NOT_BLIND_RTOL


def _scores(module, entry: Entry, q: torch.Tensor, k: torch.Tensor, q_pos, k_pos) -> torch.Tensor:
    """``(b, h, tq, tk)`` float64: ``q'·k'`` of the rotated q/k, or the bias the attention path adds."""
    if "qk" in entry.hooks:
        q_out, k_out = module.encode_qk(q, k, q_positions=q_pos, k_positions=k_pos)
        return q_out.double() @ k_out.double().transpose(-1, -2)
    bias = module.attention_bias(q, k, q_positions=q_pos, k_positions=k_pos)
    return bias.double().expand(q.shape[0], q.shape[1], q.shape[-2], k.shape[-2])


@PROFILE
@given(data=st.data())
def test_scores_depend_only_on_relative_position(attention_entry: Entry, data) -> None:
    """Rotary and bias encodings see positions through ``k_pos - q_pos`` only, and do see them.

    Shifting every position by ``s`` changes no score (relative variants); moving a key by
    ``d != 0`` changes its score, and moving a query changes its rotated value, so an encoding
    blind to positions (an identity ``encode_qk``, a constant bias) fails this test.
    """
    entry = attention_entry
    if not entry.key_positions:
        pytest.skip("the encoding scales queries by their absolute position and ignores the keys'")
    module = entry.build()
    dtype = data.draw(st.sampled_from([torch.float32, torch.float64]), label="dtype")
    t = data.draw(st.integers(1, 64), label="t")
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1), label="seed"))
    q, k = make_qk(entry, 1, t, t, dtype, generator=gen)
    k = torch.cat([k, k], dim=-2)  # each key vector twice: at its query's position and d away
    high = entry.position_limit or 100_000
    q_pos = torch.randint(1000, high, (t,), generator=gen)
    d = data.draw(st.integers(1, 1000), label="|d|")
    # keys before their query: a causal bias gives every later key the same bucket
    d = -d if entry.sizes["causal"] else d * data.draw(st.sampled_from([1, -1]), label="sign")
    k_pos = torch.cat([q_pos, q_pos + d])
    s = data.draw(st.integers(1, high), label="shift")

    scores = _scores(module, entry, q, k, *entry.qk_positions(t, 2 * t, q_pos, k_pos))
    if "qk" in entry.hooks:  # a score is a product of two rotated vectors
        scale = q.double().norm(dim=-1, keepdim=True) * k.double().norm(dim=-1).unsqueeze(-2)
        scale = scale * _attention_scaling(module) ** 2
    else:
        scale = torch.full_like(scores, max(1.0, scores.abs().max().item()))

    if entry.relative:
        shifted = _scores(module, entry, q, k, *entry.qk_positions(t, 2 * t, q_pos + s, k_pos + s))
        rtol = F64_IDENTITY_RTOL if dtype == torch.float64 else F32_IDENTITY_RTOL
        assert ((scores - shifted).abs() <= rtol * scale).all(), "scores moved with a common shift"

    # Not blind: query i against the same key vector at distance 0 (column i) and d (column t + i).
    i = torch.arange(t)
    at_0, at_d = scores[..., i, i], scores[..., i, t + i]
    if "qk" in entry.hooks:
        moved = (at_0 - at_d).abs() / scale[..., i, i]
    else:  # relative to these two biases, not the matrix's largest (KERPLE's power kernel grows as d**2)
        moved = (at_0 - at_d).abs() / torch.maximum(at_0.abs(), at_d.abs()).clamp_min(1.0)
    assert moved.max() > NOT_BLIND_RTOL, f"scores at distance {d} equal those at distance 0"
    if "qk" in entry.hooks:
        here, _ = module.encode_qk(
            q, k, q_positions=entry.positions(q_pos), k_positions=entry.positions(k_pos)
        )
        there, _ = module.encode_qk(
            q, k, q_positions=entry.positions(q_pos + s), k_positions=entry.positions(k_pos + s)
        )
        change = (here.double() - there.double()).norm(dim=-1) / q.double().norm(dim=-1)
        assert change.min() > NOT_BLIND_RTOL, f"a query rotated the same at positions p and p + {s}"


@PROFILE
@given(data=st.data())
def test_rope_rotations_compose(qk_entry: Entry, data) -> None:
    """Rotating by p then by s equals rotating by p + s (the table at p + s is a fixed linear map,
    the rotation by s, of the table at p)."""
    rope = qk_entry.build()
    if not qk_entry.relative or not qk_entry.norm_preserving or rope.attention_scaling != 1.0:
        pytest.skip("length-dependent frequencies, scaled pairs (xPos), or an attention factor")
    t = data.draw(st.integers(1, 64), label="t")
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1), label="seed"))
    x = torch.randn(2, 2, t, qk_entry.head_dim, generator=gen, dtype=torch.float64)
    p = torch.randint(0, 100_000, (2, t), generator=gen)
    s = torch.full((t,), data.draw(st.integers(0, 100_000), label="shift"))
    pos = qk_entry.positions
    once = rope.rotate(x, pos(p + s))
    twice = rope.rotate(rope.rotate(x, pos(p)), pos(s))
    torch.testing.assert_close(once, twice, rtol=0, atol=F64_IDENTITY_RTOL * x.abs().max().item())


# --- sinusoidal -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["interleaved", "concat", "concat_cos"])
@pytest.mark.parametrize("spacing", ["paper", "tensor2tensor"])
@PROFILE
@given(data=st.data())
def test_sinusoidal_table_shift_is_a_fixed_linear_map(layout: str, spacing: str, data) -> None:
    """PE(p + k) = PE(p) @ M(k), with M(k) independent of p and a rotation per frequency pair,
    the identity for k = 0 (Vaswani et al., 2017, Sec. 3.5)."""
    module = posenc.Sinusoidal(16, layout=layout, freq_spacing=spacing)
    t = data.draw(st.integers(1, 100), label="t")
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1), label="seed"))
    p = torch.randint(0, 140_000, (t,), generator=gen)
    shift = data.draw(st.integers(0, 10_000), label="shift")
    zeros = torch.zeros(1, t, module.d_model, dtype=torch.float64)
    at_p, at_shifted = module(zeros, p), module(zeros, p + shift)
    m = sinusoidal_shift_map(shift, module.d_model, module.base, module.layout, module.freq_spacing)
    torch.testing.assert_close(at_p @ m, at_shifted, rtol=0, atol=1e-9)
    identity = torch.eye(module.d_model, dtype=torch.float64)
    torch.testing.assert_close(m @ m.T, identity, rtol=0, atol=1e-12)
    if shift == 0:
        torch.testing.assert_close(m, identity, rtol=0, atol=0)


# --- ALiBi ------------------------------------------------------------------------------------------------


@PROFILE
@given(num_heads=st.integers(1, 80))
def test_alibi_slopes_match_bloom_for_any_head_count(num_heads: int) -> None:
    """Slopes for head counts that are not powers of two follow the paper's rule (Bloom's code)."""
    mask = torch.ones(1, 2, dtype=torch.long)
    bloom = build_alibi_tensor(mask, num_heads, torch.float32)[:, 0, 1]  # slope * position 1
    torch.testing.assert_close(alibi_slopes(num_heads), bloom, rtol=BLOOM_SLOPE_RTOL, atol=0)
    torch.testing.assert_close(posenc.ALiBi(num_heads).slopes, bloom, rtol=BLOOM_SLOPE_RTOL, atol=0)


@PROFILE
@given(data=st.data())
def test_alibi_key_only_form_equals_full_form_after_softmax(data) -> None:
    """Causal ALiBi's key-only bias gives the same attention weights as the paper's full bias."""
    heads = data.draw(st.integers(1, 20), label="heads")
    alibi = posenc.ALiBi(heads, causal=True, max_bias=data.draw(st.sampled_from([8.0, 4.0, 16.0])))
    batch = data.draw(st.integers(1, 3), label="batch")
    tk = data.draw(st.integers(1, 200), label="tk")
    tq = data.draw(st.integers(1, tk), label="tq")
    entry = Entry("alibi", "alibi", dims={"num_heads": heads})
    k_pos = _positions(data, entry, batch, tk, "k_positions")
    q_pos = None if k_pos is None else k_pos[..., tk - tq :]
    dtype = data.draw(st.sampled_from([torch.float32, torch.float64]), label="dtype")
    q, k = make_qk(entry, batch, tq, tk, dtype)
    scores = torch.randn(batch, heads, tq, tk, dtype=torch.float64)
    causal = torch.ones(tq, tk, dtype=torch.bool).tril(tk - tq)
    key_only = alibi.attention_bias(q, k, q_positions=q_pos, k_positions=k_pos)
    assert key_only.shape[-2] == 1 and key_only.shape[1] == heads
    full = alibi(scores, q_pos, k_pos) - scores  # the paper's -m (i - j), float64
    with_key_only = (scores + key_only.double()).masked_fill(~causal, float("-inf")).softmax(-1)
    with_full = (scores + full).masked_fill(~causal, float("-inf")).softmax(-1)
    # float32 key-only values are m * (j - i_max): exact integers times a float32 slope,
    # relative error 6e-8 of values up to ~1e5 * 0.5 (positions up to 140000).
    atol = 1e-12 if dtype == torch.float64 else 2e-7 * max(1.0, key_only.abs().max().item())
    torch.testing.assert_close(with_key_only, with_full, rtol=0, atol=atol)


# --- T5 buckets --------------------------------------------------------------------------------------------


@st.composite
def _bucket_options(draw):
    bidirectional = draw(st.booleans())
    num_buckets = draw(st.integers(4 if bidirectional else 2, 64))
    max_exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    max_distance = draw(st.integers(max_exact + 1, 400))
    return {"bidirectional": bidirectional, "num_buckets": num_buckets, "max_distance": max_distance}


@PROFILE
@given(options=_bucket_options())
def test_t5_buckets_monotone_capped_and_equal_to_t5(options) -> None:
    """Buckets grow with |distance| in each direction, saturate at max_distance, and equal
    transformers' T5Attention._relative_position_bucket everywhere; the per-distance table
    (what the encoding gathers from) is the bucket of the clamped distance."""
    max_distance = options["max_distance"]
    relative = torch.arange(-3 * max_distance, 3 * max_distance + 1)
    buckets = relative_position_bucket(relative, **options)
    reference = T5Attention._relative_position_bucket(relative, **options)
    torch.testing.assert_close(buckets, reference, rtol=0, atol=0)
    by_distance = posenc.RelativeBias(1, **options).bucket_of_distance
    torch.testing.assert_close(
        by_distance[relative.clamp(-max_distance, max_distance) + max_distance], reference, rtol=0, atol=0
    )
    assert buckets.min() >= 0 and buckets.max() < options["num_buckets"]
    middle = 3 * max_distance  # index of distance 0
    before = buckets[: middle + 1].flip(0)  # distances 0, 1, 2, ... of keys before the query
    after = buckets[middle:]  # keys after it
    for side in (before, after) if options["bidirectional"] else (before,):
        assert (side[1:] >= side[:-1]).all(), "buckets must not decrease with |distance|"
        assert (side[max_distance:] == side[max_distance]).all(), "buckets must saturate at max_distance"
    if not options["bidirectional"]:
        assert (after == 0).all(), "a causal bias gives keys after the query bucket 0"


@PROFILE
@given(data=st.data())
def test_t5_bias_equals_bucketing_every_pair(data) -> None:
    """The gathered per-distance table equals bucketing every (query, key) pair, as T5 does."""
    causal = data.draw(st.booleans(), label="causal")
    options = data.draw(_bucket_options().filter(lambda o: o["bidirectional"] == (not causal)))
    t5 = posenc.RelativeBias(3, options["num_buckets"], options["max_distance"], causal=causal)
    batch, tq, tk = 2, data.draw(st.integers(1, 80)), data.draw(st.integers(1, 80))
    entry = Entry("t5", "t5", dims={"num_heads": 3})
    q_pos = _positions(data, entry, batch, tq, "q_positions")
    k_pos = _positions(data, entry, batch, tk, "k_positions")
    if q_pos is None and k_pos is not None and tq > tk:
        q_pos = torch.arange(tq)
    q, k = make_qk(entry, batch, tq, tk, torch.float32)
    bias = t5.attention_bias(q, k, q_positions=q_pos, k_positions=k_pos)
    q_pos, k_pos = posenc._positions.resolve_qk_positions(q, k, q_pos, k_pos)
    relative = k_pos.unsqueeze(-2) - q_pos.unsqueeze(-1)
    bucket = T5Attention._relative_position_bucket(relative, **options)
    expected = t5.relative_attention_bias.weight[bucket]  # (..., tq, tk, h)
    expected = expected.movedim(-1, -3).reshape(-1, 3, tq, tk)
    torch.testing.assert_close(
        bias.expand(batch, 3, tq, tk), expected.expand(batch, 3, tq, tk), rtol=0, atol=0
    )


def test_a_pass_through_subclass_gives_the_built_in_results(attention_entry: Entry) -> None:
    """A subclass that overrides each hook its encoding acts at with a call to ``super()`` gets the generic
    state (whose methods call the hooks back), and that state gives exactly what the built-in's own state gives:
    rotated q/k, bias, value term and the attention output, at explicit positions after a cache."""
    entry = attention_entry
    module = entry.build().double()
    hooks = module.overridden_hooks - {"encode_input"}

    def pass_through(name):
        def hook(self, *args, **kwargs):
            return getattr(super(Sub, self), name)(*args, **kwargs)

        return hook

    Sub = type(f"PassThrough{type(module).__name__}", (type(module),), {h: pass_through(h) for h in hooks})
    sub = copy.deepcopy(module)
    sub.__class__ = Sub
    assert Sub._generic_state  # (the built-in's own may be generic too: hooks written on the module)

    gen = torch.Generator().manual_seed(0)
    q, k = make_qk(entry, 2, 3, 7, torch.float64, generator=gen)
    v = torch.randn(k.shape, generator=gen, dtype=torch.float64)
    q_pos, k_pos = entry.qk_positions(3, 7, torch.arange(4, 7), torch.arange(7))
    own = module.prepare(3, 7, q_positions=q_pos, k_positions=k_pos)
    generic = sub.prepare(3, 7, q_positions=q_pos, k_positions=k_pos)

    for a, b in zip(own.encode_qk(q, k), generic.encode_qk(q, k), strict=True):
        assert torch.equal(a, b)
    bias, again = own.attention_bias(q, k), generic.attention_bias(q, k)
    assert (bias is None) == (again is None) and (bias is None or torch.equal(bias, again))
    probs = torch.rand(2, entry.num_heads, 3, 7, generator=gen, dtype=torch.float64).softmax(-1)
    term, again = own.value_term(probs), generic.value_term(probs)
    assert (term is None) == (again is None) and (term is None or torch.equal(term, again))
    torch.testing.assert_close(
        posenc.attention(q, k, v, generic, causal=True), posenc.attention(q, k, v, own, causal=True)
    )
