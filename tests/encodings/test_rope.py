"""RoPE (posenc.RoPE): parity with transformers, GPT-NeoX, GPT-J and rotary-embedding-torch,
the paper's properties, the cache, dtypes, build() and errors."""

from __future__ import annotations

import logging
import math
import threading

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc.encodings.rope import DEFAULT_TABLE_LEN, MAX_TABLE_LEN, RoPE
from posenc.encodings.rotary import RotaryState
from posenc.functional.rope_freqs import rope_inv_freq
from posenc.functional.rotary import rope_cos_sin, rotary_reference

transformers = pytest.importorskip("transformers")
from transformers import GPTNeoXConfig, LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding  # noqa: E402
from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb as neox_apply  # noqa: E402
from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb as gptj_apply  # noqa: E402
from transformers.models.gptj.modeling_gptj import create_sinusoidal_positions  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb  # noqa: E402

# The references compute the angle position * inv_freq in float32: it is off by up to
# position * 6e-8 rad, so at positions <= 400 rotated unit-variance values differ by <= ~1e-4.
# Ours are computed in float64 and rounded once.
REF_ANGLE_TOL = {"atol": 1.5e-4, "rtol": 1e-5}
# Frequencies: transformers computes base ** (2i/d) in float32 (about 2 ulp); ours in float64.
FREQ_TOL = {"atol": 0.0, "rtol": 1e-6}
# Same math in float32 vs float64 (angles rounded once): a few float32 ulps of unit values.
F32_TOL = {"atol": 2e-6, "rtol": 1e-6}

logging.getLogger("transformers").setLevel(logging.ERROR)

HEAD_DIM = 64
MAX_LEN = 128  # the trained context length (transformers' max_position_embeddings)
PAIRS = HEAD_DIM // 2
SHORT = [1.0 + 0.05 * i for i in range(PAIRS)]
LONG = [1.5 + 0.4 * i for i in range(PAIRS)]

SCALINGS = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 2.0},
    "linear_legacy_type": {"type": "linear", "factor": 3.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
    "yarn_mscale": {
        "rope_type": "yarn",
        "factor": 8.0,
        "original_max_position_embeddings": 64,
        "mscale": 0.707,
        "mscale_all_dim": 1.0,
        "beta_fast": 16,
        "beta_slow": 2,
    },
    # (both correction dims round to pair 0: the ramp's zero width, which transformers widens by 0.001)
    "yarn_zero_width_ramp": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 6},
    "yarn_attention_factor_no_truncate": {
        "rope_type": "yarn",
        "factor": 2.0,
        "attention_factor": 1.3,
        "truncate": False,
    },
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    },
    "longrope": {
        "rope_type": "longrope",
        "short_factor": SHORT,
        "long_factor": LONG,
        "factor": 4.0,
        "original_max_position_embeddings": 64,
    },
    # (transformers trains it at max_position_embeddings: factor and attention factor 1)
    "longrope_without_its_length": {"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG},
}


def llama_reference(scaling, base: float, positions: torch.Tensor, q, k):
    """transformers' Llama RoPE on (b, h, t, d) q, k with (b, t) positions: a fresh module per call."""
    config = LlamaConfig(
        hidden_size=HEAD_DIM * 4,
        num_attention_heads=4,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_LEN,
        rope_theta=base,
        rope_scaling=dict(scaling) if scaling else None,
    )
    embedding = LlamaRotaryEmbedding(config).to(q.device)
    cos, sin = embedding(q, positions)
    return (*apply_rotary_pos_emb(q, k, cos, sin), embedding)


def qk(b=2, h=4, t=40, d=HEAD_DIM, hk=None, dtype=torch.float32, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, t, d, generator=g).to(device, dtype)
    k = torch.randn(b, hk or h, t, d, generator=g).to(device, dtype)
    return q, k


# --- parity ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SCALINGS))
@pytest.mark.parametrize("length", [100, 300])  # below and above the trained length MAX_LEN
def test_matches_transformers_llama(name, length, device):
    scaling = SCALINGS[name]
    base = 500000.0 if name == "llama3" else 10000.0
    q, k = qk(t=length, device=device)
    positions = torch.arange(length, device=device).expand(2, length)
    q_ref, k_ref, embedding = llama_reference(scaling, base, positions, q, k)
    rope = RoPE(HEAD_DIM, base=base, scaling=scaling, max_len=MAX_LEN).to(device)
    assert rope.attention_scaling == pytest.approx(embedding.attention_scaling, rel=1e-12)
    q_out, k_out = rope(q, k)
    assert_close(q_out, q_ref, **REF_ANGLE_TOL)
    assert_close(k_out, k_ref, **REF_ANGLE_TOL)
    # the same with explicit (b, t) positions, as the HF interop passes position_ids
    q_out, k_out = rope(q, k, positions, positions)
    assert_close(q_out, q_ref, **REF_ANGLE_TOL)
    assert_close(k_out, k_ref, **REF_ANGLE_TOL)


@pytest.mark.parametrize("name", [n for n in SCALINGS if n != "dynamic"])
def test_inverse_frequencies_match_transformers(name):
    scaling = SCALINGS[name]
    config = LlamaConfig(
        hidden_size=HEAD_DIM * 4,
        num_attention_heads=4,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_LEN,
        rope_scaling=dict(scaling) if scaling else None,
    )
    rope_type = config.rope_parameters["rope_type"]
    if rope_type == "default":
        expected, factor = LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    else:
        expected, factor = ROPE_INIT_FUNCTIONS[rope_type](config, None)
    rope = RoPE(HEAD_DIM, scaling=scaling, max_len=MAX_LEN)
    assert_close(rope.inv_freq[0].float(), expected, **FREQ_TOL)
    assert rope.attention_scaling == pytest.approx(factor, rel=1e-12)
    if rope_type == "longrope":
        long_expected, _ = ROPE_INIT_FUNCTIONS["longrope"](config, None, seq_len=MAX_LEN + 1)
        assert_close(rope.inv_freq[1].float(), long_expected, **FREQ_TOL)


@pytest.mark.parametrize("length", [64, 65])  # longrope switches to the long factors past 64
def test_longrope_switches_at_original_length_like_transformers(length, device):
    scaling = SCALINGS["longrope"]
    q, k = qk(t=length, device=device)
    positions = torch.arange(length, device=device)[None]
    q_ref, k_ref, _ = llama_reference(scaling, 10000.0, positions, q, k)
    q_out, k_out = RoPE(HEAD_DIM, scaling=scaling).to(device)(q, k)
    assert_close(q_out, q_ref, **REF_ANGLE_TOL)
    assert_close(k_out, k_ref, **REF_ANGLE_TOL)


def test_dynamic_decode_step_uses_the_current_length(device):
    # One query at position 299 against keys 0..299: L = 300 > MAX_LEN, as HF's seq_len.
    scaling = SCALINGS["dynamic"]
    q_all, k = qk(t=300, device=device)
    q = q_all[:, :, -1:]
    positions = torch.arange(300, device=device)[None]
    _, k_ref, _ = llama_reference(scaling, 10000.0, positions, k, k)
    q_ref, _, _ = llama_reference(scaling, 10000.0, positions, q_all, q_all)
    q_out, k_out = RoPE(HEAD_DIM, scaling=scaling, max_len=MAX_LEN).to(device)(q, k)
    assert_close(q_out, q_ref[:, :, -1:], **REF_ANGLE_TOL)
    assert_close(k_out, k_ref, **REF_ANGLE_TOL)


@pytest.mark.parametrize("rotary_pct", [0.25, 0.5, 1.0])
def test_partial_rotary_matches_gpt_neox(rotary_pct, device):
    config = GPTNeoXConfig(
        hidden_size=HEAD_DIM * 4, num_attention_heads=4, rotary_pct=rotary_pct, max_position_embeddings=512
    )
    embedding = GPTNeoXRotaryEmbedding(config).to(device)
    q, k = qk(t=50, device=device)
    positions = torch.arange(50, device=device)[None] + 200
    cos, sin = embedding(q, positions)
    q_ref, k_ref = neox_apply(q, k, cos, sin)
    rope = RoPE(HEAD_DIM, rotary_dim=int(HEAD_DIM * rotary_pct)).to(device)
    q_out, k_out = rope(q, k, positions, positions)
    assert_close(q_out, q_ref, **REF_ANGLE_TOL)
    assert_close(k_out, k_ref, **REF_ANGLE_TOL)
    # the unrotated channels are passed through bit for bit
    assert torch.equal(q_out[..., rope.rotary_dim :], q[..., rope.rotary_dim :])
    # a partial_rotary_factor in the dict gives the same module
    via_dict = RoPE(HEAD_DIM, scaling={"rope_type": "default", "partial_rotary_factor": rotary_pct})
    assert via_dict.rotary_dim == rope.rotary_dim


@pytest.mark.parametrize("rotary_dim", [16, HEAD_DIM])
def test_interleaved_matches_gptj(rotary_dim, device):
    # GPT-J works on (b, t, h, d) and rotates the first rotary_dim channels, pairs (2i, 2i+1).
    q, _ = qk(t=30, device=device)
    positions = torch.arange(30, device=device)[None].expand(2, 30) + 100
    table = create_sinusoidal_positions(512, rotary_dim).to(device)
    sincos = table[positions]
    sin, cos = torch.split(sincos, rotary_dim // 2, dim=-1)
    x = q.transpose(1, 2)
    expected = torch.cat((gptj_apply(x[..., :rotary_dim], sin, cos), x[..., rotary_dim:]), dim=-1).transpose(
        1, 2
    )
    out = RoPE(HEAD_DIM, layout="interleaved", rotary_dim=rotary_dim).to(device).rotate(q, positions)
    assert_close(out, expected, **REF_ANGLE_TOL)


def test_interleaved_matches_rotary_embedding_torch(device):
    from rotary_embedding_torch import RotaryEmbedding

    reference = RotaryEmbedding(dim=HEAD_DIM).to(device)  # interleaved by default, base 10000
    q, k = qk(t=100, device=device)
    expected = reference.rotate_queries_or_keys(q)
    out = RoPE(HEAD_DIM, layout="interleaved").to(device).rotate(q)
    assert_close(out, expected, **REF_ANGLE_TOL)
    # rotary-embedding-torch's partial rotation: RotaryEmbedding(dim=r) on a wider head
    reference = RotaryEmbedding(dim=16).to(device)
    assert_close(
        RoPE(HEAD_DIM, layout="interleaved", rotary_dim=16).to(device).rotate(k),
        reference.rotate_queries_or_keys(k),
        **REF_ANGLE_TOL,
    )


@pytest.mark.parametrize(("rotary_dim", "factor"), [(HEAD_DIM, 1.0), (32, 1.0), (32, 4.0)])
def test_interleaved_matches_x_transformers(rotary_dim, factor, device):
    """x-transformers' RotaryEmbedding and apply_rotary_pos_emb as its Attention calls them: the first
    ``rotary_dim`` channels in neighbouring pairs (its default rotates half of each head), positions per row,
    ``interpolation_factor`` (posenc's linear scaling)."""
    from x_transformers.x_transformers import RotaryEmbedding, apply_rotary_pos_emb

    reference = RotaryEmbedding(rotary_dim, interpolation_factor=factor).to(device)
    scaling = None if factor == 1.0 else {"rope_type": "linear", "factor": factor}
    rope = RoPE(HEAD_DIM, layout="interleaved", rotary_dim=rotary_dim, scaling=scaling).to(device)
    q, _ = qk(t=40, device=device)
    positions = torch.stack((torch.arange(40), torch.arange(40) + 17)).to(device)
    freqs, _ = reference(positions)
    assert_close(rope.rotate(q, positions), apply_rotary_pos_emb(q, freqs), **REF_ANGLE_TOL)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_conjugate_rotation_undoes_the_rotation_and_negates_the_angles(layout):
    """rotate(..., conjugate=True): cos and -sin (DeepSeek V4's attention-output rotation). With no
    attention factor it is the inverse; with YaRN's factor s it is s * R(-angle), as transformers'
    apply_rotary_pos_emb(x, cos, -sin); partial heads keep their other channels; multi-axis too."""
    x = torch.randn(2, 3, 9, HEAD_DIM, dtype=torch.float64)
    positions = torch.tensor([[4, 0, 9, 100, 3, 3, 7, 1, 50], list(range(9))])
    rope = RoPE(HEAD_DIM, layout=layout, rotary_dim=48)
    assert_close(rope.rotate(rope.rotate(x, positions), positions, conjugate=True), x, atol=1e-12, rtol=0)
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}
    config = LlamaConfig(hidden_size=4 * HEAD_DIM, num_attention_heads=4, max_position_embeddings=128,
                         rope_parameters={**scaling, "rope_theta": 10000.0})  # fmt: skip
    cos, sin = LlamaRotaryEmbedding(config)(x.float(), positions)
    want, _ = apply_rotary_pos_emb(x.float(), x.float(), cos, -sin)  # transformers' layout is "half"
    got = RoPE(HEAD_DIM, scaling=scaling, max_len=128).rotate(x.float(), positions, conjugate=True)
    assert_close(got, want, **REF_ANGLE_TOL)  # (their angles are float32 products)
    axial = posenc.AxialRoPE(16, grid_size=(3, 3))
    y = torch.randn(1, 2, 9, 16, dtype=torch.float64)
    assert_close(axial.rotate(axial.rotate(y), conjugate=True), y, atol=1e-12, rtol=0)
    with pytest.raises(TypeError, match="conjugate must be a bool"):
        rope.rotate(x, conjugate=1)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_rotary_offset_moves_the_rotated_slice_on_every_path(layout, dtype):
    """rotary_offset=o rotates channels o .. o+r-1 exactly as rotary_offset=0 rotates the first r of the
    head with its channels rolled by o: the table's view (default positions) and gather (explicit ones),
    the formula (past the table; float64), a prepared state with a KV cache step, rotate and its inverse."""
    r, o = 16, HEAD_DIM - 16  # DeepSeek V4's [nope | rope] heads: the trailing slice
    moved = RoPE(HEAD_DIM, layout=layout, rotary_dim=r, rotary_offset=o, max_len=64)
    first = RoPE(HEAD_DIM, layout=layout, rotary_dim=r, max_len=64)
    q, k = qk(t=9, dtype=dtype)

    def roll(x, by):
        return x.roll(by, -1)

    for positions in (
        None,
        torch.arange(9) + 3,
        torch.tensor([[0, 5, 1, 9, 2, 7, 3, 8, 4], list(range(90, 99))]),
    ):
        got = moved.encode_qk(q, k, q_positions=positions, k_positions=positions)
        want = first.encode_qk(roll(q, -o), roll(k, -o), q_positions=positions, k_positions=positions)
        for g, w in zip(got, want, strict=True):
            assert_close(g, roll(w, o), atol=0, rtol=0)
    state = moved.prepare(3, 9, q_positions=torch.arange(6, 9))  # a decode step after 6 cached keys
    assert_close(
        state.encode_qk(q[..., 6:, :], k[..., 6:, :])[1], moved.encode_qk(q, k)[1][..., 6:, :], atol=0, rtol=0
    )
    positions = torch.tensor([4, 0, 9, 100, 3, 3, 7, 1, 50])
    rotated = moved.rotate(q, positions)
    assert_close(rotated, roll(first.rotate(roll(q, -o), positions), o), atol=0, rtol=0)
    if dtype != torch.bfloat16:
        assert_close(moved.rotate(rotated, positions, conjugate=True), q, **F32_TOL)
    assert torch.equal(rotated[..., :o], q[..., :o])
    compiled = torch.compile(moved.encode_qk, fullgraph=True, backend="aot_eager")
    for g, w in zip(compiled(q, k, q_positions=positions, k_positions=positions), moved.encode_qk(q, k, q_positions=positions, k_positions=positions), strict=True):  # fmt: skip
        assert_close(g, w, **(F32_TOL if dtype != torch.bfloat16 else {"atol": 2e-2, "rtol": 1e-2}))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("shape", [(1, 1, 1, 8), (1, 2, 1, 8), (2, 1, 3, 8)])
def test_an_odd_rotary_offset_rotates_interleaved_pairs_at_any_shape(shape, dtype):
    """An odd offset starts the interleaved pairs at an odd channel: a slice that is contiguous (one token of one
    head) or not, rotated as the first pairs of the head rolled by the offset."""
    moved = RoPE(8, layout="interleaved", rotary_dim=4, rotary_offset=1)
    first = RoPE(8, layout="interleaved", rotary_dim=4)
    x = torch.randn(shape, dtype=dtype)
    positions = torch.arange(shape[2]) + 5
    for got, want in zip(moved(x, x), first(x.roll(-1, -1), x.roll(-1, -1)), strict=True):
        assert_close(got, want.roll(1, -1), atol=0, rtol=0)
    assert_close(
        moved.rotate(x, positions), first.rotate(x.roll(-1, -1), positions).roll(1, -1), atol=0, rtol=0
    )
    fused = torch.randn(*shape[:-1], 9, dtype=dtype)[..., 1:]  # the whole head, a slice at an odd start
    whole = RoPE(8, layout="interleaved")
    for got, want in zip(whole(fused, fused), whole(fused.clone(), fused.clone()), strict=True):
        assert_close(got, want, atol=0, rtol=0)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_conjugate_rotates_by_minus_the_angles_on_every_path(layout):
    """conjugate=True (NanoChat) equals rotating at negated positions, written out with the paper's
    formula: the table's view and gather, the formula past the table and in float64, a prepared decode
    step, compile; scores then depend on n - m; rotate(conjugate=True) turns it back."""
    conj = RoPE(HEAD_DIM, layout=layout, rotary_dim=48, conjugate=True, max_len=64)
    q, k = qk(t=9)
    inv_freq = 10000.0 ** (-torch.arange(0, 48, 2, dtype=torch.float64) / 48)  # the paper's, exact

    def by_formula(x, positions):  # angles at minus the positions
        angles = -positions.double()[..., None] * inv_freq
        return rotary_reference(x, angles.cos().float(), angles.sin().float(), layout)

    for positions in (torch.arange(9), torch.arange(9) + 3, torch.arange(9) + 500):
        got_q, got_k = conj.encode_qk(q, k, q_positions=positions, k_positions=positions)
        assert_close(got_q, by_formula(q, positions), **F32_TOL)
        assert_close(got_k, by_formula(k, positions), **F32_TOL)
        double = conj.encode_qk(q.double(), k.double(), q_positions=positions, k_positions=positions)[0]
        assert_close(double.float(), got_q, **F32_TOL)
    plain = RoPE(HEAD_DIM, layout=layout, rotary_dim=48, max_len=64)
    m = torch.arange(9)
    assert_close(  # q_m . k_n of conjugate RoPE is plain RoPE's with q at n and k at m: swapped distance
        torch.einsum("bhd,bhd->bh", *(x[..., 2, :] for x in conj.encode_qk(q, k, q_positions=m, k_positions=m + 4))),
        torch.einsum("bhd,bhd->bh", *(x[..., 2, :] for x in plain.encode_qk(q, k, q_positions=m + 4, k_positions=m))),
        **F32_TOL,
    )  # fmt: skip
    state = conj.prepare(1, 9, q_positions=torch.tensor([8]))
    assert_close(
        state.encode_qk(q[..., 8:, :], k[..., 8:, :])[0], conj.encode_qk(q, k)[0][..., 8:, :], **F32_TOL
    )
    compiled = torch.compile(conj.encode_qk, fullgraph=True, backend="aot_eager")
    assert_close(compiled(q, k)[0], conj.encode_qk(q, k)[0], **F32_TOL)
    assert_close(conj.rotate(conj.rotate(q), conjugate=True), q, **F32_TOL)
    assert "conjugate=True" in repr(conj) and "conjugate" not in repr(plain)
    with pytest.raises(TypeError, match=r"conjugate must be a bool, got 1"):
        RoPE(HEAD_DIM, conjugate=1)
    with pytest.raises(ValueError, match=r"unknown option\(s\) 'conjugate'"):
        posenc.build("xpos(conjugate=True)", head_dim=64)


def test_rotary_offset_is_checked_shown_and_only_rope_takes_it():
    rope = posenc.build("rope(rotary_dim=16, rotary_offset=48, layout='interleaved')", head_dim=64)
    assert rope.rotary_offset == 48 and "rotary_offset=48" in repr(rope)
    assert "rotary_offset" not in repr(RoPE(64, rotary_dim=16))
    options = {o["name"]: o for o in posenc.describe("rope")["options"]}
    assert options["rotary_offset"]["default"] == 0 and options["rotary_offset"]["type"] == "int"
    with pytest.raises(ValueError, match=r"rotary_offset must be <= head_dim - rotary_dim = 48.*got 49"):
        RoPE(64, rotary_dim=16, rotary_offset=49)
    with pytest.raises(ValueError, match=r"rotary_offset must be >= 0, got -2"):
        RoPE(64, rotary_dim=16, rotary_offset=-2)
    with pytest.raises(TypeError, match=r"rotary_offset must be an int, got '8'"):
        RoPE(64, rotary_dim=16, rotary_offset="8")
    with pytest.raises(ValueError, match=r"rotary_offset must be <= head_dim - rotary_dim = 0"):
        RoPE(64, rotary_offset=1)  # the whole head rotates
    # the other rotary encodings rotate the first rotary_dim channels: the option is unknown to them
    for spec in ("xpos(rotary_offset=8)", "rope_axial(rotary_offset=8)", "mrope(rotary_offset=8)"):
        with pytest.raises(ValueError, match=r"unknown option\(s\) 'rotary_offset'"):
            posenc.build(spec, head_dim=64)


def test_llama_4_scaling_beta_scales_whole_queries_when_a_slice_rotates():
    """Mistral 4 rotates the last channels of each head and then scales the whole query: the channels
    that pass through are scaled too, the keys are not."""
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}
    rope = RoPE(HEAD_DIM, rotary_dim=16, rotary_offset=48, scaling={**yarn, "llama_4_scaling_beta": 0.1})
    plain = RoPE(HEAD_DIM, rotary_dim=16, rotary_offset=48, scaling=yarn)
    q, k = qk(t=30, hk=2)
    positions = torch.arange(30) + 5
    scale = (1 + 0.1 * torch.log(1 + torch.floor(positions / 8)))[:, None]
    want_q, want_k = plain.encode_qk(q, k, q_positions=positions, k_positions=positions)
    for formula in (False, True):
        encode = (
            torch.compile(rope.encode_qk, fullgraph=True, backend="aot_eager") if formula else rope.encode_qk
        )
        got_q, got_k = encode(q, k, q_positions=positions, k_positions=positions)
        assert_close(got_q, want_q * scale, **F32_TOL)
        assert_close(got_k, want_k, **F32_TOL)
    assert_close(got_q[..., :48], q[..., :48] * scale, **F32_TOL)  # (the unrotated channels, scaled)


def test_llama_4_scaling_beta_scales_only_the_queries_by_position():
    """Ministral 3: queries times ``1 + beta * log(1 + floor(p / L))`` (transformers'
    get_llama_4_attn_scale), keys as plain RoPE: in one call, a prepared state, a decode step
    (keys at the query's position) and a traced program."""
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}
    rope = RoPE(HEAD_DIM, scaling={**yarn, "llama_4_scaling_beta": 0.1})
    plain = RoPE(HEAD_DIM, scaling=yarn)
    q, k = qk(t=30, hk=2)
    positions = torch.stack([torch.arange(30), torch.arange(30) + 17])  # (b, t): a cache offset in row 1
    scale = (1 + 0.1 * torch.log(1 + torch.floor(positions / 8)))[:, None, :, None]
    want_q, want_k = plain.encode_qk(q, k, q_positions=positions, k_positions=positions)
    want_q = want_q * scale
    state = rope.prepare(30, q_positions=positions, k_positions=positions, batch=2)
    compiled = torch.compile(rope.encode_qk, fullgraph=True, backend="aot_eager")
    for got_q, got_k in (
        rope.encode_qk(q, k, q_positions=positions, k_positions=positions),
        state.encode_qk(q, k),
        compiled(q, k, q_positions=positions, k_positions=positions),
    ):
        assert_close(got_q, want_q, **F32_TOL)
        assert_close(got_k, want_k, **F32_TOL)
    last = positions[:, -1:]
    got_q, got_k = rope.encode_qk(q[..., -1:, :], k[..., -1:, :], q_positions=last, k_positions=last)
    assert_close(got_q, want_q[..., -1:, :], **F32_TOL)
    assert_close(got_k, want_k[..., -1:, :], **F32_TOL)
    assert "llama_4_scaling_beta=0.1" in repr(rope)
    # a model's KV-cache decoding (queries scaled, cached keys not) equals its full forward
    model = posenc.nn.TransformerLM(
        50, 64, 2, 4, position=RoPE(16, scaling={**yarn, "llama_4_scaling_beta": 0.5})
    )
    ids, cache = torch.randint(0, 50, (2, 12)), posenc.nn.KVCache()
    steps = [model.eval()(ids[:, :5], cache=cache)] + [
        model(ids[:, t : t + 1], cache=cache) for t in range(5, 12)
    ]
    assert_close(torch.cat(steps, 1), model(ids), **F32_TOL)
    with pytest.raises(ValueError, match="rotate them together"):
        rope.rotate(q)
    with pytest.raises(ValueError, match="needs the trained context length"):
        RoPE(HEAD_DIM, scaling={"llama_4_scaling_beta": 0.1})
    with pytest.raises(ValueError, match=r"scaling\['llama_4_scaling_beta'\] must be >= 0, got -1"):
        RoPE(HEAD_DIM, scaling={**yarn, "llama_4_scaling_beta": -1})
    with pytest.raises(ValueError, match="MRoPE has none"):
        posenc.MRoPE(HEAD_DIM, mrope_section=[8, 12, 12], scaling={**yarn, "llama_4_scaling_beta": 0.1})


# --- the paper's properties ------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rotation_keeps_norms(layout):
    q, _ = qk(t=64, dtype=torch.float64)
    out = RoPE(HEAD_DIM, layout=layout, rotary_dim=48).rotate(q, torch.arange(64) * 1000)
    assert_close(out.norm(dim=-1), q.norm(dim=-1), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("scaling", ["default", "yarn", "llama3"])
def test_scores_depend_only_on_relative_position(layout, scaling):
    # q at m, k at n: q_m . k_n is the same for (m, n) and (m + s, n + s).
    rope = RoPE(HEAD_DIM, layout=layout, scaling=SCALINGS[scaling], max_len=MAX_LEN)
    q, k = qk(b=1, h=1, t=1, dtype=torch.float64)
    m, n = torch.tensor([7]), torch.tensor([3])
    scale = rope.attention_scaling**2
    base_score = (rope.rotate(q, m) * rope.rotate(k, n)).sum() / scale
    for shift in (1, 50, 1000, 12345):
        shifted = (rope.rotate(q, m + shift) * rope.rotate(k, n + shift)).sum() / scale
        assert_close(shifted, base_score, atol=1e-9, rtol=1e-9)
    # and it is not position-blind: another distance gives another score
    other = (rope.rotate(q, m + 5) * rope.rotate(k, n)).sum() / scale
    assert not torch.allclose(other, base_score)


def test_half_and_interleaved_are_a_channel_permutation_of_each_other():
    q, _ = qk(t=20, dtype=torch.float64)
    positions = torch.arange(20) * 37
    half = RoPE(HEAD_DIM, layout="half").rotate(q, positions)
    # interleaved pairs (2i, 2i+1) hold what half pairs (i, i + d/2) hold
    perm = torch.stack((torch.arange(PAIRS), torch.arange(PAIRS) + PAIRS), dim=-1).flatten()
    inter = RoPE(HEAD_DIM, layout="interleaved").rotate(q[..., perm], positions)
    assert_close(inter, half[..., perm], atol=1e-12, rtol=1e-12)


def test_float32_equals_float64_math():
    rope = RoPE(HEAD_DIM)
    q, k = qk(t=300)
    q32, k32 = rope(q, k)
    q64, k64 = rope(q.double(), k.double())
    assert q64.dtype == torch.float64
    assert_close(q32.double(), q64, **F32_TOL)
    assert_close(k32.double(), k64, **F32_TOL)


# --- positions, shapes, GQA --------------------------------------------------------------------------


def test_default_positions_decode_step_equals_full_sequence():
    rope = RoPE(HEAD_DIM)
    q, k = qk(t=33)
    q_full, k_full = rope(q, k)
    q_last, k_again = rope(q[:, :, -1:], k)  # KV-cache step: the query is the last key position
    assert torch.equal(q_last, q_full[:, :, -1:])
    assert torch.equal(k_again, k_full)


def test_grouped_query_attention_and_batch_positions():
    rope = RoPE(HEAD_DIM, layout="interleaved")
    q, k = qk(b=2, h=8, hk=2, t=12)
    positions = torch.stack((torch.arange(12), torch.arange(12) + 100))  # (b, t), e.g. packed/left-padded
    q_out, k_out = rope(q, k, positions, positions)
    assert q_out.shape == q.shape and k_out.shape == k.shape
    for row in range(2):
        q_row, k_row = rope(q[row : row + 1], k[row : row + 1], positions[row], positions[row])
        assert_close(q_out[row : row + 1], q_row, atol=0, rtol=0)
        assert_close(k_out[row : row + 1], k_row, atol=0, rtol=0)


def test_rotate_equals_encode_qk_and_functional():
    rope = RoPE(HEAD_DIM, rotary_dim=32)
    q, k = qk(t=10)
    positions = torch.arange(10) + 3
    q_out, k_out = rope.encode_qk(q, k, q_positions=positions, k_positions=positions)
    assert torch.equal(rope.rotate(q, positions), q_out)
    assert torch.equal(rope(q, k, positions, positions)[0], q_out)  # the drop-in call takes them by position
    cos, sin = rope_cos_sin(positions, rope.params.inv_freq()[0], dtype=torch.float32)
    assert_close(posenc.functional.apply_rotary(k, cos, sin, "half"), k_out, atol=0, rtol=0)


# --- the state: rows computed once per forward ----------------------------------------------------------


def test_prepared_state_equals_encode_qk_in_every_layer():
    rope = RoPE(HEAD_DIM, scaling=SCALINGS["yarn"], max_len=MAX_LEN)
    positions = torch.arange(40).expand(2, 40) + torch.tensor([[0], [7]])
    state = rope.prepare(40, q_positions=positions, batch=2)
    assert isinstance(state, RotaryState) and state.bias_form == "none"
    for seed in range(3):  # three "layers", one state
        q, k = qk(t=40, hk=2, seed=seed)
        got = state.encode_qk(q, k)
        expected = rope.encode_qk(q, k, q_positions=positions, k_positions=positions)
        assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    assert state.attention_bias(q, k) is None


def test_default_positions_slice_the_table_and_explicit_ones_gather_once():
    rope = RoPE(HEAD_DIM, max_len=256)
    table = rope._cos_sin
    state = rope.prepare(16, 100)  # default positions: queries 84..99, keys 0..99
    assert state.q_start == 84 and state.q_cos._base is table  # a view of the table, no gather
    assert torch.equal(state.q_cos, table[0, 84:100, :PAIRS]) and torch.equal(
        state.q_sin, table[1, 84:100, PAIRS:]
    )
    explicit = rope.prepare(3, q_positions=torch.tensor([5, 200, 17]))
    assert explicit.q_cos._base is not table
    assert torch.equal(explicit.q_cos, table[0, [5, 200, 17], :PAIRS])


def test_kv_cache_step_rotates_the_new_keys_at_the_query_positions():
    rope = RoPE(HEAD_DIM, layout="interleaved")
    q, k = qk(t=33)
    q_full, k_full = rope(q, k)
    state = rope.prepare(1, 33)  # one new token after 32 cached ones
    q_new, k_new = state.encode_qk(q[:, :, -1:], k[:, :, -1:])
    assert torch.equal(q_new, q_full[:, :, -1:]) and torch.equal(k_new, k_full[:, :, -1:])
    assert "k" not in state._cache  # the 33 key rows were never needed
    with pytest.raises(ValueError, match=r"k has 5 positions.*33 keys.*1 new"):
        state.encode_qk(q[:, :, -1:], k[:, :, :5])
    with pytest.raises(ValueError, match=r"q has 2 positions.*prepared for 1"):
        state.encode_qk(q[:, :, -2:], k)


def test_narrowed_state_is_a_block_of_the_full_rotation():
    rope = RoPE(HEAD_DIM)
    q, k = qk(t=48)
    full_q, full_k = rope.encode_qk(q, k, q_positions=torch.arange(48) + 5, k_positions=torch.arange(48) + 5)
    state = rope.prepare(48, q_positions=torch.arange(48) + 5)
    block = state.narrow(slice(16, 32), slice(0, 32))
    got_q, got_k = block.encode_qk(q[:, :, 16:32], k[:, :, :32])
    assert torch.equal(got_q, full_q[:, :, 16:32]) and torch.equal(got_k, full_k[:, :, :32])


@pytest.mark.parametrize("name", ["dynamic", "longrope"])
def test_seq_len_gives_chunks_the_frequencies_of_the_whole_sequence(name):
    """A length-dependent variant rotates a chunk like the whole sequence when given its length."""
    rope = RoPE(HEAD_DIM, scaling=SCALINGS[name], max_len=MAX_LEN)
    q, k = qk(t=300)
    full_q, full_k = rope(q, k)  # L = 300: past the trained length
    chunk = torch.arange(50)  # the first 50 tokens alone have L = 50: below both trained lengths
    state = rope.prepare(50, q_positions=chunk, seq_len=300)
    got_q, got_k = state.encode_qk(q[:, :, :50], k[:, :, :50])
    assert_close(got_q, full_q[:, :, :50], **F32_TOL)
    assert_close(got_k, full_k[:, :, :50], **F32_TOL)
    alone = rope.prepare(50, q_positions=chunk).encode_qk(q[:, :, :50], k[:, :, :50])
    assert not torch.allclose(alone[0], full_q[:, :, :50])


def test_a_subclass_that_overrides_the_hook_gets_the_generic_state():
    class Scaled(RoPE):
        def encode_qk(self, q, k, *, q_positions=None, k_positions=None):
            q, k = super().encode_qk(q, k, q_positions=q_positions, k_positions=k_positions)
            return 2 * q, k

    rope = Scaled(HEAD_DIM)
    q, k = qk(t=8)
    state = rope.prepare(8)
    assert not isinstance(state, RotaryState)
    assert torch.equal(state.encode_qk(q, k)[0], 2 * RoPE(HEAD_DIM)(q, k)[0])


# --- dtypes, the bounded table, devices ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_half_precision_inputs_keep_dtype_and_exact_angles(dtype, layout):
    rope = RoPE(HEAD_DIM, layout=layout).to(dtype)
    assert rope._cos_sin.dtype == torch.float32 and rope.inv_freq.dtype == torch.float32
    q, k = qk(t=16, dtype=dtype)
    positions = torch.arange(16) + 8000  # bf16 positions/angles would be wrong by whole radians here
    q_out, k_out = rope(q, k, positions, positions)
    assert q_out.dtype == dtype and k_out.dtype == dtype
    q_ref, k_ref = RoPE(HEAD_DIM, layout=layout)(q.double(), k.double(), positions, positions)
    # rounded once or twice to the input dtype: within one ulp of |x| <= 4
    ulp = torch.finfo(dtype).eps * 4
    assert_close(q_out.double(), q_ref, atol=ulp, rtol=0)
    assert_close(k_out.double(), k_ref, atol=ulp, rtol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_decode_rows_are_the_table_rounded_once_and_follow_it(dtype):
    """A decode step of half-precision q, k reads the table's rows rounded to their dtype (a copy made once),
    bit for bit the float32 rows rounded; after a move, a rebuild or .double() the rows follow the table."""
    from posenc.functional.rotary import eager_rows, rotate_eager

    rope = RoPE(HEAD_DIM)
    q, k = qk(t=1, dtype=dtype)
    for step in range(3):
        if step == 1:
            rope.to(device="meta").to_empty(device="cpu")  # a rebuilt table
        state = rope.prepare(1, 50 + step)
        rows = eager_rows(state.q_cos, state.q_sin, dtype, "half")  # float32 rows, then rounded
        q_out, k_out = state.encode_qk(q, k)
        assert torch.equal(q_out, rotate_eager(q, rows, "half")) and torch.equal(
            k_out, rotate_eager(k, rows, "half")
        )
    rope.double()  # a float64 table: half-precision rows are its float64 rows rounded (no copy), as before
    state = rope.prepare(1, 60)
    rows = eager_rows(state.q_cos, state.q_sin, dtype, "half")
    assert state.q_cos.dtype == torch.float64 and torch.equal(
        state.encode_qk(q, k)[0], rotate_eager(q, rows, "half")
    )


def test_table_is_bounded_and_never_rebuilt_by_a_call():
    assert RoPE(HEAD_DIM).cached_len == DEFAULT_TABLE_LEN
    assert RoPE(HEAD_DIM, max_len=100).cached_len == 100
    huge = RoPE(HEAD_DIM, max_len=2_000_000)  # would be 512 MiB of table at full length
    assert huge.cached_len == MAX_TABLE_LEN
    assert huge._cos_sin.shape == (2, MAX_TABLE_LEN, 2 * PAIRS)
    rope = RoPE(HEAD_DIM, max_len=100)
    q, k = qk(t=200)
    for _ in range(2):
        rope(q, k)  # past the table: computed from the positions
        rope(q, k, torch.arange(200) + 20, torch.arange(200) + 20)
    assert rope.table_builds == 1 and rope.cached_len == 100


@pytest.mark.parametrize("position", [100_000, 4_000_000, 10_000_000])
def test_huge_positions_are_exact_without_a_huge_table(position):
    """One decode step at a huge position: exact cos/sin (float64 angles), no table of that size."""
    rope = RoPE(HEAD_DIM, scaling=SCALINGS["linear"])
    x = torch.zeros(1, 1, 2, HEAD_DIM, dtype=torch.float32)
    x[..., 0] = 1.0  # rotating e_0 reads cos (channel 0) and sin (channel r/2) of pair 0
    positions = torch.tensor([position, position + 1])
    for out in (rope.rotate(x, positions), rope(x, x, positions, positions)[0]):
        angles = positions.double() * rope.params.inv_freq()[0, 0]
        # float64 values rounded once to float32: half an ulp of values <= 1
        assert_close(out[0, 0, :, 0].double(), angles.cos(), atol=2**-24, rtol=0)
        assert_close(out[0, 0, :, PAIRS].double(), angles.sin(), atol=2**-24, rtol=0)
    # and as the last of many default positions (the KV-cache decode of a long sequence)
    state = rope.prepare(1, position + 1)
    assert state.q_start == position
    angle = torch.tensor(position, dtype=torch.float64) * rope.params.inv_freq()[0, 0]
    assert abs(state.q_cos[0, 0].item() - angle.cos().item()) <= 2**-24
    assert rope._cos_sin.shape == (2, DEFAULT_TABLE_LEN, 2 * PAIRS) and rope.table_builds == 1


def test_caches_are_not_in_state_dict_and_survive_dtype_moves():
    rope = RoPE(HEAD_DIM, scaling=SCALINGS["yarn"], max_len=MAX_LEN)
    assert rope.state_dict() == {}
    table = rope._cos_sin.clone()
    for convert in (
        lambda m: m.to(torch.bfloat16),
        lambda m: m.half(),
        lambda m: m.to("cpu", torch.bfloat16),
    ):
        convert(rope)
        assert rope._cos_sin.dtype == torch.float32
        assert torch.equal(rope._cos_sin, table)
    rope.double()
    assert rope._cos_sin.dtype == torch.float64 and rope.inv_freq.dtype == torch.float64
    assert_close(rope._cos_sin.float(), table, atol=0, rtol=0)  # float64 build, rounded: the same values
    rope.float()
    assert rope._cos_sin.dtype == torch.float32 and torch.equal(rope._cos_sin, table)


def test_meta_device_then_to_empty_rebuilds():
    with torch.device("meta"):
        rope = RoPE(HEAD_DIM, scaling=SCALINGS["longrope"], max_len=MAX_LEN)
    assert rope._cos_sin.is_meta
    q, k = qk(t=8)
    assert rope(q.to("meta"), k.to("meta"))[0].is_meta  # shapes only, on the meta device
    rope.to_empty(device="cpu")  # and nothing else: the base class rebuilds the caches
    reference = RoPE(HEAD_DIM, scaling=SCALINGS["longrope"], max_len=MAX_LEN)
    assert torch.equal(rope._cos_sin, reference._cos_sin)
    assert torch.equal(rope.inv_freq, reference.inv_freq)
    for got, want in zip(rope(q, k), reference(q, k), strict=True):
        assert torch.equal(got, want)
    # reset_caches rebuilds in place too
    rope._cos_sin.zero_()
    rope.reset_caches()
    assert torch.equal(rope._cos_sin, reference._cos_sin)


def test_export_serves_lengths_past_the_table_while_decoding():
    """An exported RoPE computes cos/sin from the frequencies, so its table size is no length
    limit, also with fewer queries than keys (queries at positions tk-tq .. tk-1)."""

    class Rotate(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rope = RoPE(HEAD_DIM, scaling=SCALINGS["yarn"], max_len=32)  # a 32-row table

        def forward(self, q, k):
            return self.rope(q, k)

    module = Rotate()
    tq, tk = torch.export.Dim("tq", min=2, max=100_000), torch.export.Dim("tk", min=2, max=100_000)
    args = (torch.randn(1, 4, 3, HEAD_DIM), torch.randn(1, 2, 20, HEAD_DIM))
    program = torch.export.export(module, args, dynamic_shapes=({2: tq}, {2: tk})).module()
    for q_len, k_len in ((2, 3000), (5, 9), (40, 20)):
        q, k = torch.randn(1, 4, q_len, HEAD_DIM), torch.randn(1, 2, k_len, HEAD_DIM)
        for got, want in zip(program(q, k), module(q, k), strict=True):
            # the eager table holds the same float64-computed values rounded once; only the
            # rotation's operation order differs
            assert_close(got, want, **F32_TOL)


def test_float64_inputs_get_float64_rows_without_touching_the_table():
    rope = RoPE(HEAD_DIM)
    q, k = qk(t=8, dtype=torch.float64)
    positions = torch.arange(8) + 100_000
    q_out, _ = rope(q, k, positions, positions)
    angles = positions.double()[:, None] * rope_inv_freq(HEAD_DIM)
    expected = posenc.functional.rotary_reference(q, angles.cos(), angles.sin())
    assert_close(q_out, expected, atol=1e-12, rtol=0)  # float32 rows would be off by ~6e-8
    assert rope._cos_sin.dtype == torch.float32 and rope.table_builds == 1


def test_concurrent_calls_from_threads():
    rope = RoPE(HEAD_DIM, max_len=8)
    q, _ = qk(b=1, h=1, t=1)
    results, errors = {}, []

    def work(offset):
        try:
            results[offset] = rope.rotate(q, torch.tensor([offset]))
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(2**i + 3,)) for i in range(14)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    fresh = RoPE(HEAD_DIM, max_len=8)
    for offset, out in results.items():
        assert torch.equal(out, fresh.rotate(q, torch.tensor([offset])))
    assert rope.table_builds == 1


def test_gradient_is_the_inverse_rotation():
    rope = RoPE(HEAD_DIM, layout="half", rotary_dim=48)
    for layout in ("half", "interleaved"):
        rope.layout = layout
        q = torch.randn(1, 2, 5, HEAD_DIM, dtype=torch.float64, requires_grad=True)
        positions = torch.arange(5) * 11
        assert torch.autograd.gradcheck(lambda x, p=positions: rope.rotate(x, p), (q,))


# --- compile ----------------------------------------------------------------------------------------------


class Layers(torch.nn.Module):
    """A small model's use of RoPE: one state per forward, two layers, or the one-call hook."""

    def __init__(self, rope: RoPE, prepared: bool) -> None:
        super().__init__()
        self.rope, self.prepared = rope, prepared

    def forward(self, q, k, positions=None):
        if not self.prepared:
            return self.rope.encode_qk(q, k, q_positions=positions, k_positions=positions)
        state = self.rope.prepare(q.shape[-2], k.shape[-2], q_positions=positions, batch=q.shape[0])
        q1, k1 = state.encode_qk(q, k)  # layer 1
        return state.encode_qk(q1, k1)  # layer 2: the same rows


def _compile_once_for_all_lengths(scaling, layout, prepared, explicit, backend="aot_eager"):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    kwargs = {"layout": layout, "rotary_dim": 24, "max_len": 64, "scaling": scaling}
    compiled = torch.compile(
        Layers(RoPE(32, **kwargs), prepared), fullgraph=True, dynamic=True, backend=backend
    )
    eager = Layers(RoPE(32, **kwargs), prepared)
    for length in (7, 60, 300):  # 300: past the 64-row table, and longrope's switch
        q, k = torch.randn(2, 4, length, 32), torch.randn(2, 2, length, 32)
        args = (torch.arange(length) + 3,) if explicit else ()
        for got, want in zip(compiled(q, k, *args), eager(q, k, *args), strict=True):
            assert_close(got, want, **F32_TOL)
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["graph_break"]


def test_compiles_fullgraph_once_for_all_lengths():
    """torch.compile(fullgraph=True, dynamic=True): one graph for every length, with the prepared
    state. YaRN (an attention factor) with explicit positions: the case that failed on torch 2.15,
    whose torch.cond rejects a SymFloat operand (posenc no longer uses torch.cond). The aot_eager
    backend traces and guards as inductor does without its C++ build (20 s); inductor's code for the
    rotation is checked by test_compiled_rotation_is_one_kernel, every rope type's with -m slow."""
    _compile_once_for_all_lengths(SCALINGS["yarn"], "half", prepared=True, explicit=True)


@pytest.mark.parametrize(
    ("layout", "dtype"),
    [
        ("half", torch.float32),
        pytest.param("interleaved", torch.bfloat16, marks=pytest.mark.slow),
    ],
)
def test_compiled_rotation_is_one_kernel(layout, dtype):
    """Inductor fuses the cos/sin rows and the rotation of q and k into one CPU kernel."""
    import re

    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    rope = RoPE(HEAD_DIM, layout=layout)
    compiled = torch.compile(rope.encode_qk, fullgraph=True, dynamic=True)
    q, k = qk(t=37, dtype=dtype)
    out, codes = run_and_get_code(compiled, q, k)
    kernels = set(re.findall(r"(cpp_fused_\w+)\s*=\s*async_compile", "\n".join(codes)))
    assert len(kernels) == 1, sorted(kernels)
    for got, want in zip(out, rope.encode_qk(q, k), strict=True):
        assert_close(got, want, **(F32_TOL if dtype == torch.float32 else {"atol": 2e-2, "rtol": 0}))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "layout", "prepared", "explicit"),
    [
        ("default", "interleaved", False, False),
        ("default", "interleaved", True, True),
        ("yarn", "half", False, True),
        ("dynamic", "half", True, False),
        ("longrope", "half", False, True),
        ("longrope", "interleaved", True, False),
    ],
)
def test_compiles_fullgraph_once_for_all_lengths_every_kind(name, layout, prepared, explicit):
    scaling = SCALINGS[name]
    if name == "longrope":
        scaling = {**scaling, "short_factor": SHORT[:12], "long_factor": LONG[:12]}
    _compile_once_for_all_lengths(scaling, layout, prepared, explicit, backend="inductor")


# --- build() and errors ------------------------------------------------------------------------------


def test_build_from_strings_and_dicts():
    rope = posenc.build("rope(base=500000.0, layout='interleaved')", head_dim=64, max_len=256)
    assert isinstance(rope, RoPE) and rope.base == 500000.0 and rope.layout == "interleaved"
    rope = posenc.build(
        {"name": "rotary", "scaling": {"type": "linear", "factor": 2.0}}, head_dim=32, d_model=128
    )
    assert rope.rope_type == "linear" and rope.params.factor == 2.0
    rope = posenc.build("rope(scaling={'type': 'linear', 'factor': 2.0})", head_dim=32)
    assert rope.rope_type == "linear"
    rope = posenc.build("rope(scaling={'rope_type': 'yarn', 'factor': 4.0})", head_dim=64, max_len=4096)
    assert rope.params.original_max_len == 4096


def test_rope_theta_in_the_dict_is_the_base():
    rope = RoPE(HEAD_DIM, scaling={"rope_type": "default", "rope_theta": 1e6})
    assert rope.base == 1e6
    assert RoPE(HEAD_DIM, base=1e6, scaling={"rope_theta": 1e6}).base == 1e6  # the same value twice
    assert RoPE(HEAD_DIM).base == 10000.0  # base=None: the paper's default
    with pytest.raises(ValueError, match="rope_theta"):
        RoPE(HEAD_DIM, base=5e5, scaling={"rope_type": "default", "rope_theta": 1e6})
    # an explicit base equal to the default is still a given base, not "not given"
    with pytest.raises(ValueError, match=r"base=10000.0 conflicts with scaling\['rope_theta'\]=500000.0"):
        RoPE(8, base=10000.0, scaling={"rope_theta": 5e5})
    with pytest.raises(ValueError, match="conflicts"):
        posenc.build("rope(base=10000.0, scaling={'rope_theta': 500000.0})", head_dim=8)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"head_dim": 63}, ValueError, "head_dim must be even.*63"),
        ({"head_dim": 0}, ValueError, "head_dim.*positive.*0"),
        ({"head_dim": 64.0}, TypeError, "head_dim.*64.0"),
        ({"head_dim": 64, "rotary_dim": 15}, ValueError, "rotary_dim must be even.*15"),
        ({"head_dim": 64, "rotary_dim": 80}, ValueError, "rotary_dim must be <= head_dim=64.*80"),
        ({"head_dim": 64, "rotary_dim": -2}, ValueError, "rotary_dim.*-2"),
        ({"head_dim": 64, "base": 0.0}, ValueError, "base.*> 0.*0.0"),
        ({"head_dim": 64, "base": float("inf")}, ValueError, "base.*inf"),
        ({"head_dim": 64, "base": "1e4"}, TypeError, "base.*'1e4'"),
        ({"head_dim": 64, "layout": "neox"}, ValueError, "layout.*'half'.*'interleaved'.*'neox'"),
        ({"head_dim": 64, "max_len": 0}, ValueError, "max_len.*0"),
        ({"head_dim": 64, "scaling": "linear"}, TypeError, "scaling must be a dict.*str"),
        (
            {"head_dim": 64, "scaling": {"rope_type": "ntk_by_parts"}},
            ValueError,
            "rope_type.*'linear'.*'longrope'.*'ntk'.*'ntk_by_parts'",
        ),
        ({"head_dim": 64, "scaling": {"rope_type": "linear"}}, ValueError, "'linear' needs a 'factor'"),
        (
            {"head_dim": 64, "scaling": {"rope_type": "linear", "factor": 0}},
            ValueError,
            "factor.*> 0.*1e-06.*0",
        ),
        (
            {"head_dim": 64, "scaling": {"rope_type": "linear", "factor": float("nan")}},
            ValueError,
            "factor.*finite.*nan",
        ),
        ({"head_dim": 64, "scaling": {"rope_type": "linear", "factor": "2"}}, TypeError, "factor.*'2'"),
        (
            {"head_dim": 64, "scaling": {"rope_type": "dynamic", "factor": 2.0}},
            ValueError,
            "'dynamic' needs max_len",
        ),
        (
            {"head_dim": 64, "scaling": {"rope_type": "yarn", "factor": 2.0}},
            ValueError,
            "original_max_position_embeddings'] or max_len",
        ),
        (
            {
                "head_dim": 64,
                "max_len": 64,
                "scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0},
            },
            ValueError,
            "'high_freq_factor'",
        ),
        (
            {
                "head_dim": 64,
                "max_len": 64,
                "scaling": {
                    "rope_type": "llama3",
                    "factor": 8.0,
                    "low_freq_factor": 4.0,
                    "high_freq_factor": 1.0,
                },
            },
            ValueError,
            "high_freq_factor.*greater",
        ),
        (
            {
                "head_dim": 64,
                "max_len": 64,
                "scaling": {
                    "rope_type": "longrope",
                    "short_factor": SHORT,
                    "long_factor": LONG[:5],
                    "factor": 2.0,
                },
            },
            ValueError,
            "long_factor.*32 entries.*got 5",
        ),
        (
            {
                "head_dim": 64,
                "max_len": 64,
                "scaling": {"rope_type": "longrope", "short_factor": 1.0, "long_factor": LONG},
            },
            TypeError,
            "short_factor.*list of 32",
        ),
        (
            {"head_dim": 64, "scaling": {"rope_type": "linear", "type": "dynamic", "factor": 2.0}},
            ValueError,
            "rope_type.*type",
        ),
    ],
)
def test_bad_arguments_raise_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        RoPE(**kwargs)


def test_unread_scaling_keys_warn():
    with pytest.warns(UserWarning, match="beta_fast"):
        RoPE(HEAD_DIM, scaling={"rope_type": "linear", "factor": 2.0, "beta_fast": 3})


def test_bad_call_arguments():
    rope = RoPE(HEAD_DIM)
    q, k = qk(t=4)
    with pytest.raises(ValueError, match=r"head_dim 32.*head_dim=64"):
        rope(q[..., :32], k[..., :32])
    state = rope.prepare(4)
    state.encode_qk(q, k)  # shapes that passed are not checked again; any others still are
    for bad_q, bad_k in ((q[..., :32], k[..., :32]), (q, k[..., :32]), (q[:, :3], k[:, :2]), (q[0], k[0])):
        with pytest.raises(ValueError, match=r"head_dim|heads|rank 3"):
            state.encode_qk(bad_q, bad_k)
    with pytest.raises(ValueError, match=r"k has 3 positions"):
        state.encode_qk(q, k[..., :3, :])
    with pytest.raises(ValueError, match=r"rank 3"):
        rope.rotate(q[0])
    with pytest.raises(ValueError, match=r"positions.*length 5.*expected 4"):
        rope.rotate(q, torch.arange(5))
    with pytest.raises(TypeError, match=r"positions.*integer"):
        rope.rotate(q, torch.arange(4.0))


def test_yarn_factor_defaults_to_the_length_ratio_like_deepseek():
    rope = RoPE(
        HEAD_DIM,
        max_len=4096,
        scaling={"rope_type": "yarn", "factor": None, "original_max_position_embeddings": 1024},
    )
    assert rope.params.factor == 4.0
    assert rope.attention_scaling == pytest.approx(0.1 * math.log(4.0) + 1)


def test_a_prepared_state_refuses_a_batch_its_positions_do_not_have():
    """A state of (2, t) positions rotating a batch of 3 raised torch's broadcast error from inside the
    rotation; it names the batch now, as the bias states do."""
    state = RoPE(16).prepare(
        5, q_positions=torch.arange(10).view(2, 5), k_positions=torch.arange(10).view(2, 5)
    )
    q = torch.randn(3, 2, 5, 16)
    with pytest.raises(
        ValueError, match="got a batch of 3, but this RotaryState was prepared for positions of batch 2"
    ):
        state.encode_qk(q, q)
    assert state.encode_qk(q[:2], q[:2])[0].shape == (2, 2, 5, 16)
