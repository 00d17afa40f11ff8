"""posenc.functional.rotary: the frequency formulas against transformers, the eager fast
kernels against the plain formula, autograd, and compile."""

from __future__ import annotations

import logging
import math

import pytest
import torch
from torch.testing import assert_close

import posenc.functional.rotary as rotary
from posenc.functional.rotary import (
    apply_rotary,
    dynamic_ntk_inv_freq,
    llama3_inv_freq,
    resolve_rope_scaling,
    rope_cos_sin,
    rope_inv_freq,
    rotary_reference,
    yarn_inv_freq,
)

# Eager kernels vs the plain formula in the same dtype: different operation order, a few ulps.
KERNEL_TOL = {"atol": 1e-6, "rtol": 1e-6}
# float32 angles/frequencies computed by transformers vs ours in float64, rounded.
FREQ_TOL = {"atol": 0.0, "rtol": 1e-6}
# Second derivatives, eager kernel vs the formula (measured equal over 30 seeds): float64 allows
# operation-order round-off; bfloat16 one rounding tie broken differently, times ~4 from the
# cube and square in the test's loss.
DOUBLE_BACKWARD_F64_TOL = {"atol": 1e-12, "rtol": 1e-12}
DOUBLE_BACKWARD_BF16_TOL = {"atol": 0.0, "rtol": 4 * 2**-8}


def cos_sin(length: int, pairs: int, *, batch: int | None = None, offset: int = 0):
    positions = torch.arange(offset, offset + length)
    if batch is not None:
        positions = positions + 17 * torch.arange(batch)[:, None]
    cos, sin = rope_cos_sin(positions, rope_inv_freq(2 * pairs), dtype=torch.float32)
    if batch is not None:
        cos, sin = cos[:, None], sin[:, None]  # (b, 1, t, r/2)
    return cos, sin


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rotary_dim", [8, 16])
@pytest.mark.parametrize("per_batch", [False, True])
def test_eager_kernel_equals_plain_formula(layout, dtype, rotary_dim, per_batch):
    x = torch.randn(2, 3, 11, 16, dtype=torch.float64).to(dtype)
    cos, sin = cos_sin(11, rotary_dim // 2, batch=2 if per_batch else None)
    if dtype == torch.float64:
        cos, sin = cos.double(), sin.double()
    out = apply_rotary(x, cos, sin, layout)
    assert out.dtype == dtype and out.shape == x.shape
    expected = rotary_reference(x[..., :rotary_dim], cos, sin, layout)
    # half precision: both compute in float32 and round once, so they agree to one rounding
    tol = (
        KERNEL_TOL
        if dtype in (torch.float32, torch.float64)
        else {"atol": torch.finfo(dtype).eps * 4, "rtol": 0}
    )
    assert_close(out[..., :rotary_dim].double(), expected.double(), **tol)
    assert torch.equal(out[..., rotary_dim:], x[..., rotary_dim:])


def test_reference_formula_is_the_rotation_matrix():
    # Independent check of the formula: each pair times [[cos, -sin], [sin, cos]].
    x = torch.randn(1, 1, 5, 8, dtype=torch.float64)
    cos, sin = rope_cos_sin(torch.arange(5) * 3, rope_inv_freq(8))
    expected = torch.empty_like(x)
    for t in range(5):
        for i in range(4):
            c, s = cos[t, i], sin[t, i]
            rot = torch.stack((torch.stack((c, -s)), torch.stack((s, c))))
            expected[0, 0, t, [i, i + 4]] = rot @ x[0, 0, t, [i, i + 4]]
    assert_close(apply_rotary(x, cos, sin, "half"), expected, atol=1e-12, rtol=0)
    perm = torch.tensor([0, 4, 1, 5, 2, 6, 3, 7])  # half pairs (i, i+4) placed at (2i, 2i+1)
    assert_close(apply_rotary(x[..., perm], cos, sin, "interleaved"), expected[..., perm], atol=1e-12, rtol=0)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_non_contiguous_and_broadcast_inputs(layout):
    x = torch.randn(2, 9, 3, 16).transpose(1, 2)  # (b, h, t, d) view of a (b, t, h, d) projection
    cos, sin = cos_sin(9, 8)
    assert_close(apply_rotary(x, cos, sin, layout), rotary_reference(x, cos, sin, layout), **KERNEL_TOL)
    one = torch.randn(1, 3, 9, 16)
    cos_b, sin_b = cos_sin(9, 8, batch=2)
    out = apply_rotary(one, cos_b, sin_b, layout)  # a batch-1 tensor with per-row positions
    assert out.shape == (2, 3, 9, 16)
    assert_close(out, rotary_reference(one.expand(2, -1, -1, -1), cos_b, sin_b, layout), **KERNEL_TOL)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_custom_backward_equals_autograd_of_the_formula(layout):
    x = torch.randn(2, 4, 13, 16, requires_grad=True)
    cos, sin = cos_sin(13, 6)
    cos, sin = cos * 1.2, sin * 1.2  # an attention factor: the backward is the scaled inverse rotation
    grad = torch.randn(2, 4, 13, 16)
    out = apply_rotary(x, cos, sin, layout)
    assert out.grad_fn is not None and "Rotate" in type(out.grad_fn).__name__
    (got,) = torch.autograd.grad(out, x, grad)
    x_ref = x.detach().clone().requires_grad_(True)
    ref = torch.cat((rotary_reference(x_ref[..., :12], cos, sin, layout), x_ref[..., 12:]), dim=-1)
    (expected,) = torch.autograd.grad(ref, x_ref, grad)
    assert_close(got, expected, **KERNEL_TOL)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=["float64", "bfloat16"])
def test_custom_backward_supports_double_backward(layout, dtype):
    """create_graph=True through the eager kernel (gradient penalties, Hessian-vector products):
    the gradient of a gradient penalty equals the one through the plain formula."""
    x0 = torch.randn(2, 4, 13, 16, dtype=torch.float64).to(dtype)
    cos, sin = cos_sin(13, 6)
    cos, sin = cos * 1.2, sin * 1.2

    def penalty_grad(rotate):
        x = x0.clone().requires_grad_(True)
        loss = rotate(x).float().pow(3).sum()  # non-linear in x: the gradient depends on x
        (grad,) = torch.autograd.grad(loss, x, create_graph=True)
        (second,) = torch.autograd.grad(grad.float().pow(2).sum(), x)
        return rotate(x).grad_fn, second

    fn, got = penalty_grad(lambda x: apply_rotary(x, cos, sin, layout))
    assert "Rotate" in type(fn).__name__  # the custom autograd function, not the formula
    _, expected = penalty_grad(
        lambda x: torch.cat((rotary_reference(x[..., :12], cos, sin, layout).to(dtype), x[..., 12:]), dim=-1)
    )
    tol = DOUBLE_BACKWARD_F64_TOL if dtype == torch.float64 else DOUBLE_BACKWARD_BF16_TOL
    assert_close(got.double(), expected.double(), **tol)


def test_apply_rotary_errors():
    x = torch.randn(1, 1, 4, 8)
    cos, sin = cos_sin(4, 8)
    with pytest.raises(ValueError, match=r"rotate 16 channels.*only 8"):
        apply_rotary(x, cos, sin)
    cos, sin = cos_sin(4, 4)
    with pytest.raises(ValueError, match=r"layout.*'neox'"):
        apply_rotary(x, cos, sin, "neox")
    with pytest.raises(ValueError, match=r"cos and sin must have the same shape.*\(4, 4\).*\(4, 2\)"):
        apply_rotary(x, cos, sin[..., :2])
    with pytest.raises(TypeError, match=r"x must be a floating-point"):
        apply_rotary(x.long(), cos, sin)


# --- frequencies ---------------------------------------------------------------------------------


def test_rope_inv_freq_is_the_paper_formula():
    got = rope_inv_freq(8, 100.0)
    expected = torch.tensor([100.0 ** (-2 * i / 8) for i in range(4)], dtype=torch.float64)
    assert_close(got, expected, atol=0, rtol=1e-15)


def test_float64_angles_are_exact_where_float32_are_not():
    positions = torch.tensor([100_000])
    cos64, _ = rope_cos_sin(positions, rope_inv_freq(64))
    exact = math.cos(100_000 * 1.0)  # pair 0 has frequency exactly 1
    assert abs(cos64[0, 0].item() - exact) < 1e-12


@pytest.mark.parametrize("seq_len", [50, 128, 129, 1000])
def test_dynamic_ntk_matches_transformers(seq_len):
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    logging.getLogger("transformers").setLevel(logging.ERROR)
    config = transformers.LlamaConfig(
        hidden_size=256,
        num_attention_heads=4,
        head_dim=64,
        max_position_embeddings=128,
        rope_scaling={"rope_type": "dynamic", "factor": 3.0},
    )
    expected, _ = ROPE_INIT_FUNCTIONS["dynamic"](config, None, seq_len=torch.tensor(seq_len))
    got = dynamic_ntk_inv_freq(64, 10000.0, 3.0, 128, torch.tensor(seq_len))
    assert_close(got.float(), expected, **FREQ_TOL)
    if seq_len <= 128:  # below the trained length: plain RoPE
        assert_close(got, rope_inv_freq(64), atol=0, rtol=1e-15)


def test_llama3_bands():
    # high frequencies kept, low ones divided by the factor, the band between in between
    plain = rope_inv_freq(128, 500000.0)
    got = llama3_inv_freq(128, 500000.0, 8.0, 1.0, 4.0, 8192)
    wavelen = 2 * math.pi / plain
    high, low = wavelen < 8192 / 4, wavelen > 8192 / 1
    assert high.any() and low.any() and (~high & ~low).any()
    assert torch.equal(got[high], plain[high])
    assert_close(got[low], plain[low] / 8, atol=0, rtol=1e-15)
    mid = ~high & ~low
    assert ((got[mid] < plain[mid]) & (got[mid] > plain[mid] / 8)).all()


def test_yarn_ramp_keeps_fast_pairs_and_interpolates_slow_ones():
    plain = rope_inv_freq(64)
    got = yarn_inv_freq(64, 10000.0, 4.0, 2048)
    assert torch.equal(got[:4], plain[:4])  # turn many times in 2048 positions: extrapolated as is
    assert_close(got[-4:], plain[-4:] / 4, atol=0, rtol=1e-15)  # turn < once: interpolated


def test_resolve_rope_scaling_reads_hf_dicts():
    params = resolve_rope_scaling(
        {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6, "partial_rotary_factor": 0.5},
        head_dim=64,
        max_len=4096,
    )
    assert params.base == 1e6 and params.rotary_dim == 32 and params.original_max_len == 4096
    assert params.attention_scaling == pytest.approx(0.1 * math.log(4.0) + 1)
    legacy = resolve_rope_scaling({"type": "linear", "factor": 2.0}, head_dim=8)
    assert legacy.rope_type == "linear" and legacy.factor == 2.0


# --- compile ---------------------------------------------------------------------------------------------


LONGROPE_24 = {
    "rope_type": "longrope",
    "short_factor": [1.0 + 0.1 * i for i in range(12)],
    "long_factor": [2.0 + 0.5 * i for i in range(12)],
    "factor": 4.0,
    "original_max_position_embeddings": 64,
}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("layout", "scaling", "explicit_positions"),
    [
        ("half", None, False),
        ("interleaved", None, False),
        ("interleaved", None, True),  # positions past the table (300 > 64 rows): exact rows on the fly
        ("half", {"rope_type": "dynamic", "factor": 2.0}, False),
        ("half", LONGROPE_24, True),  # switches to the long factors past position 64
    ],
)
def test_compiles_fullgraph_once_for_all_lengths(layout, scaling, explicit_positions):
    from torch._dynamo.utils import counters

    from posenc import RoPE

    torch._dynamo.reset()
    counters.clear()
    kwargs = {"layout": layout, "rotary_dim": 24, "max_len": 64, "scaling": scaling}
    compiled = torch.compile(RoPE(32, **kwargs), fullgraph=True, dynamic=True)
    eager = RoPE(32, **kwargs)  # a separate module: eager growth must not touch the compiled one's table
    for length in (7, 60, 300):
        q, k = torch.randn(2, 4, length, 32), torch.randn(2, 2, length, 32)
        positions = (torch.arange(length) + 3,) * 2 if explicit_positions else ()
        got, expected = compiled(q, k, *positions), eager(q, k, *positions)
        assert_close(got[0], expected[0], **KERNEL_TOL)
        assert_close(got[1], expected[1], **KERNEL_TOL)
    # default positions past the table's 64 rows take the other branch of a guard: at most 2 graphs
    assert counters["stats"]["unique_graphs"] <= (1 if explicit_positions or scaling else 2)
    assert not counters["graph_break"]


@pytest.mark.slow
def test_custom_autograd_function_composes_with_compile():
    x = torch.randn(1, 2, 8, 16, requires_grad=True)
    cos, sin = cos_sin(8, 8)

    def rotate(t):
        return rotary._Rotate.apply(t, cos, sin, "half")

    out = torch.compile(rotate, fullgraph=True)(x)
    (grad,) = torch.autograd.grad(out.sum(), x)
    x_ref = x.detach().clone().requires_grad_(True)
    (expected,) = torch.autograd.grad(rotary_reference(x_ref, cos, sin).sum(), x_ref)
    assert_close(out, rotary_reference(x, cos, sin), **KERNEL_TOL)
    assert_close(grad, expected, **KERNEL_TOL)
