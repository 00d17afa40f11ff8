"""Precision at large positions: half-precision inputs against a float64 computation, up to 131072.

The failure these tests guard against: angles ``position * inv_freq`` computed (or tables
stored) in a half-precision dtype are random phases past a few thousand positions. posenc
computes angles in float64, stores float32 tables and rounds the output once, so its error
is the rounding of the output itself.
"""

from __future__ import annotations

import math

import pytest
import torch

import posenc
from posenc.functional import rope_cos_sin, rope_inv_freq, rotary_reference, sinusoidal_table

#: Positions checked: small ones, every power of two up to 2^17 and its neighbours, and the end.
POSITIONS = torch.tensor(
    sorted({0, 1, 2, 3, 100, 1000, *(2**e + d for e in range(10, 18) for d in (-1, 0, 1)), 131071, 131072})
)
HALF = (torch.bfloat16, torch.float16)

#: The output is rounded once to the half dtype: half an ulp of the value (eps/2 relative). One
#: ulp (eps relative to the value, plus eps of the pair's magnitude for values near zero) also
#: covers the float32 table (cos/sin off by <= 6e-8) and the float32 products.
OUTPUT_ULPS = 1.0
#: A float32 sin/cos table built in float64 and rounded once: half a float32 ulp of values <= 1.
FLOAT32_TABLE_ATOL = 2**-24


def _rope_reference(x64: torch.Tensor, positions: torch.Tensor, head_dim: int, base: float, layout: str):
    """The rotation in float64 throughout: angles, cos/sin and products."""
    inv_freq = rope_inv_freq(head_dim, base, dtype=torch.float64)
    angles = positions.double()[:, None] * inv_freq  # float64 from the start, no table
    return rotary_reference(x64, angles.cos(), angles.sin(), layout)


def _max_ulp_ratio(out: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> float:
    eps = torch.finfo(dtype).eps
    bound = OUTPUT_ULPS * eps * (ref.abs() + scale)
    return ((out.double() - ref).abs() / bound).max().item()


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_half_precision_error_is_one_rounding_up_to_131072(dtype: torch.dtype, layout: str) -> None:
    head_dim, base = 64, 500000.0
    rope = posenc.RoPE(head_dim, base=base, layout=layout)
    gen = torch.Generator().manual_seed(0)
    t = POSITIONS.numel()
    q = torch.randn(1, 2, t, head_dim, generator=gen).to(dtype)
    k = torch.randn(1, 2, t, head_dim, generator=gen).to(dtype)
    q_rot, k_rot = rope(q, k, POSITIONS, POSITIONS)
    for x, out in ((q, q_rot), (k, k_rot)):
        ref = _rope_reference(x.double(), POSITIONS, head_dim, base, layout)
        scale = x.double().abs().amax(-1, keepdim=True)
        assert _max_ulp_ratio(out, ref, scale, dtype) <= 1.0

    # The same bound fails for angles computed in the input dtype, as some libraries do: the
    # test can tell a correct implementation from the known bug.
    cos, sin = rope_cos_sin(POSITIONS.to(dtype), rope_inv_freq(head_dim, base, dtype=dtype))
    naive = rotary_reference(q, cos, sin, layout).to(dtype)
    ref = _rope_reference(q.double(), POSITIONS, head_dim, base, layout)
    assert (
        not _max_ulp_ratio(naive, ref, q.double().abs().amax(-1, keepdim=True), dtype) <= 10
    )  # nan: fp16 overflow


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("layout", ["interleaved", "concat"])
def test_sinusoidal_half_precision_error_is_one_rounding_up_to_131072(
    dtype: torch.dtype, layout: str
) -> None:
    d_model = 64
    pe = posenc.Sinusoidal(d_model, layout=layout)
    t = POSITIONS.numel()
    x = torch.randn(2, t, d_model, generator=torch.Generator().manual_seed(1)).to(dtype)
    out = pe(x, POSITIONS)
    table64 = sinusoidal_table(POSITIONS, d_model, layout=layout, dtype=torch.float64)
    ref = x.double() + table64
    # two roundings: the table to the input dtype, then the sum
    assert _max_ulp_ratio(out, ref, table64.abs(), dtype) <= 1.0

    naive = (x + sinusoidal_table(POSITIONS.to(dtype), d_model, layout=layout, dtype=dtype)).double()
    assert not _max_ulp_ratio(naive, ref, table64.abs(), dtype) <= 10  # nan: fp16 overflow


def test_cached_float32_tables_are_float64_rounded_once_up_to_131072() -> None:
    """The float32 caches (RoPE cos/sin, sinusoidal rows) are within half a float32 ulp of float64."""
    head_dim, base = 128, 10000.0
    rope = posenc.RoPE(head_dim, base=base)
    x = torch.zeros(1, 1, POSITIONS.numel(), head_dim)
    x[..., 0] = 1.0  # rotating e_0 reads cos (channel 0) and sin (channel r/2) of pair 0
    out = rope.rotate(x, POSITIONS)
    angles = POSITIONS.double() * rope_inv_freq(head_dim, base, dtype=torch.float64)[0]
    torch.testing.assert_close(out[0, 0, :, 0].double(), angles.cos(), rtol=0, atol=FLOAT32_TABLE_ATOL)
    torch.testing.assert_close(
        out[0, 0, :, head_dim // 2].double(), angles.sin(), rtol=0, atol=FLOAT32_TABLE_ATOL
    )

    pe = posenc.Sinusoidal(head_dim)
    rows = pe.table(POSITIONS)
    assert rows.dtype == torch.float32
    expected = sinusoidal_table(POSITIONS, head_dim, dtype=torch.float64)
    torch.testing.assert_close(rows.double(), expected, rtol=0, atol=FLOAT32_TABLE_ATOL)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_rope_attention_scores_at_long_context(dtype: torch.dtype) -> None:
    """Scores between a query at 131072 and keys at every position: within rounding of float64."""
    head_dim = 64
    rope = posenc.RoPE(head_dim, base=10000.0)
    gen = torch.Generator().manual_seed(2)
    t = POSITIONS.numel()
    q = torch.randn(1, 1, 1, head_dim, generator=gen).to(dtype)
    k = torch.randn(1, 1, t, head_dim, generator=gen).to(dtype)
    q_pos = torch.tensor([131072])
    q_rot, k_rot = rope(q, k, q_pos, POSITIONS)
    scores = q_rot.double() @ k_rot.double().transpose(-1, -2)
    q_ref = _rope_reference(q.double(), q_pos, head_dim, 10000.0, "half")
    k_ref = _rope_reference(k.double(), POSITIONS, head_dim, 10000.0, "half")
    ref = q_ref @ k_ref.transpose(-1, -2)
    # each of q' and k' carries one rounding (eps/2 relative): the score errs by at most
    # eps * |q| * |k| (Cauchy-Schwarz), whatever the positions
    bound = torch.finfo(dtype).eps * q.double().norm() * k.double().norm(dim=-1)
    assert ((scores - ref).abs()[0, 0, 0] <= bound[0, 0]).all()
    assert math.isfinite(scores.abs().max().item())
