"""Precision at large positions: half-precision inputs against a float64 computation, up to 131072
(and, for RoPE, up to 10^7).

The failure these tests guard against: angles ``position * inv_freq`` computed (or tables
stored) in a half-precision dtype are random phases past a few thousand positions. posenc
computes angles in float64 and stores float32 tables, never half-precision ones. The RoPE
rotation itself may round in the input dtype (a product owner's decision, for speed) as long as
its error stays within transformers' on the same inputs: that bound is tested here too.
"""

from __future__ import annotations

import copy
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

#: An output rounded once to the half dtype is off by half an ulp of the value (eps/2 relative);
#: the eager RoPE rotation may also round ``x * cos`` (half an ulp of the pair's magnitude) before
#: the sum. One ulp of the value plus one of the pair's magnitude covers both, and the float32
#: table (cos/sin off by <= 6e-8).
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
def test_rope_half_precision_error_is_within_an_ulp_up_to_131072(
    dtype: torch.dtype, layout: str, device: torch.device
) -> None:
    head_dim, base = 64, 500000.0
    rope = posenc.RoPE(head_dim, base=base, layout=layout).to(device)
    gen = torch.Generator().manual_seed(0)
    t = POSITIONS.numel()
    q = torch.randn(1, 2, t, head_dim, generator=gen).to(dtype)
    k = torch.randn(1, 2, t, head_dim, generator=gen).to(dtype)
    on = POSITIONS.to(device)
    q_rot, k_rot = (out.cpu() for out in rope(q.to(device), k.to(device), on, on))
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


#: RoPE positions past the float32 table and past any table one would build.
HUGE_POSITIONS = torch.tensor([4_000_000, 4_000_001, 10_000_000])


def _transformers_rope(x: torch.Tensor, positions: torch.Tensor, head_dim: int, base: float, layout: str):
    """transformers' Llama RoPE on ``x`` (its dtype): float32 angles, cos/sin cast to x's dtype,
    ``x * cos + rotate_half(x) * sin`` in x's dtype. The interleaved layout is a permutation of the
    channels of the half one, so it gets the same formula on permuted channels."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    config = transformers.LlamaConfig(
        hidden_size=head_dim * 4,
        num_attention_heads=4,
        head_dim=head_dim,
        max_position_embeddings=int(positions.max()) + 1,
        rope_theta=base,
    )
    cos, sin = LlamaRotaryEmbedding(config).to(x.device)(x, positions[None])
    if layout == "half":
        return apply_rotary_pos_emb(x, x, cos, sin)[0]
    pairs = head_dim // 2
    to_half = torch.cat(
        (torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2))
    )  # 2i -> i, 2i+1 -> i + r/2
    to_interleaved = torch.stack((torch.arange(pairs), torch.arange(pairs) + pairs), -1).flatten()
    return apply_rotary_pos_emb(x[..., to_half], x[..., to_half], cos, sin)[0][..., to_interleaved]


def _errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(max, root-mean-square) absolute error against the float64 reference."""
    err = out.double() - ref
    return err.abs().max().item(), err.pow(2).mean().sqrt().item()


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_half_precision_error_is_at_most_transformers(
    dtype: torch.dtype, layout: str, device: torch.device
) -> None:
    """The bound that lets the eager rotation round in the input dtype: against float64, posenc's
    error is at most transformers' on the same inputs, over positions up to 10^7, in every seed.

    Over the whole grid the maximum error is compared (transformers' float32 angles dominate it at
    large positions). Where transformers' angles are exact too (positions < 4096) both round the
    same products, and posenc's half layout rounds one product fewer: its RMS error is lower in
    every seed, while its maximum, a single element, exceeded transformers' in ~1 seed of 10 (by up
    to 11%, measured over 50 seeds), so that comparison uses the RMS error.
    """
    head_dim, base = 64, 10000.0
    rope = posenc.RoPE(head_dim, base=base, layout=layout).to(device)
    positions = torch.cat((POSITIONS, HUGE_POSITIONS))
    small = POSITIONS[POSITIONS < 4096]

    def both(x: torch.Tensor, at: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """posenc's and transformers' rotations of ``x``, both computed on ``device``."""
        x, at = x.to(device), at.to(device)
        return rope.rotate(x, at).cpu(), _transformers_rope(x, at, head_dim, base, layout).cpu()

    for seed in range(5):
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(2, 4, positions.numel(), head_dim, generator=gen).to(dtype)
        ref = _rope_reference(x.double(), positions, head_dim, base, layout)
        ours, theirs = both(x, positions)
        assert _errors(ours, ref)[0] <= _errors(theirs, ref)[0]

        x = torch.randn(2, 16, small.numel(), head_dim, generator=gen).to(dtype)
        ref = _rope_reference(x.double(), small, head_dim, base, layout)
        ours, theirs = both(x, small)
        assert _errors(ours, ref)[1] <= _errors(theirs, ref)[1]

    # The bound fails for angles computed in the input dtype: it tells the known bug apart.
    x = torch.randn(2, 4, positions.numel(), head_dim, generator=torch.Generator().manual_seed(9)).to(dtype)
    cos, sin = rope_cos_sin(positions.to(dtype), rope_inv_freq(head_dim, base, dtype=dtype))
    naive = rotary_reference(x, cos, sin, layout)
    ref = _rope_reference(x.double(), positions, head_dim, base, layout)
    theirs = _transformers_rope(x, positions, head_dim, base, layout)
    assert not _errors(naive, ref)[0] <= _errors(theirs, ref)[0]  # nan (fp16 overflow) fails too


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("layout", ["interleaved", "concat"])
def test_sinusoidal_half_precision_error_is_one_rounding_up_to_131072(
    dtype: torch.dtype, layout: str, device: torch.device
) -> None:
    d_model = 64
    pe = posenc.Sinusoidal(d_model, layout=layout).to(device)
    t = POSITIONS.numel()
    x = torch.randn(2, t, d_model, generator=torch.Generator().manual_seed(1)).to(dtype)
    out = pe(x.to(device), POSITIONS.to(device)).cpu()
    table64 = sinusoidal_table(POSITIONS, d_model, layout=layout, dtype=torch.float64)
    ref = x.double() + table64
    # two roundings: the table to the input dtype, then the sum
    assert _max_ulp_ratio(out, ref, table64.abs(), dtype) <= 1.0

    naive = (x + sinusoidal_table(POSITIONS.to(dtype), d_model, layout=layout, dtype=dtype)).double()
    assert not _max_ulp_ratio(naive, ref, table64.abs(), dtype) <= 10  # nan: fp16 overflow


def test_cached_float32_tables_are_float64_rounded_once_up_to_131072() -> None:
    """The float32 caches (RoPE cos/sin, sinusoidal rows) are within half a float32 ulp of float64;
    RoPE rows past its table too, up to position 10^7."""
    head_dim, base = 128, 10000.0
    rope = posenc.RoPE(head_dim, base=base)
    table_shape = rope._cos_sin.shape
    positions = torch.cat((POSITIONS, HUGE_POSITIONS))  # past the table: computed, as exactly
    x = torch.zeros(1, 1, positions.numel(), head_dim)
    x[..., 0] = 1.0  # rotating e_0 reads cos (channel 0) and sin (channel r/2) of pair 0
    out = rope.rotate(x, positions)
    assert rope._cos_sin.shape == table_shape  # no table grew to 10^7 rows
    angles = positions.double() * rope_inv_freq(head_dim, base, dtype=torch.float64)[0]
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
def test_rope_attention_scores_at_long_context(dtype: torch.dtype, device: torch.device) -> None:
    """Scores between a query at 131072 and keys at every position: within rounding of float64."""
    head_dim = 64
    rope = posenc.RoPE(head_dim, base=10000.0).to(device)
    gen = torch.Generator().manual_seed(2)
    t = POSITIONS.numel()
    q = torch.randn(1, 1, 1, head_dim, generator=gen).to(dtype)
    k = torch.randn(1, 1, t, head_dim, generator=gen).to(dtype)
    q_pos = torch.tensor([131072])
    q_rot, k_rot = (
        out.cpu() for out in rope(q.to(device), k.to(device), q_pos.to(device), POSITIONS.to(device))
    )
    scores = q_rot.double() @ k_rot.double().transpose(-1, -2)
    q_ref = _rope_reference(q.double(), q_pos, head_dim, 10000.0, "half")
    k_ref = _rope_reference(k.double(), POSITIONS, head_dim, 10000.0, "half")
    ref = q_ref @ k_ref.transpose(-1, -2)
    # each of q' and k' carries one rounding (eps/2 relative): the score errs by at most
    # eps * |q| * |k| (Cauchy-Schwarz), whatever the positions
    bound = torch.finfo(dtype).eps * q.double().norm() * k.double().norm(dim=-1)
    assert ((scores - ref).abs()[0, 0, 0] <= bound[0, 0]).all()
    assert math.isfinite(scores.abs().max().item())


@pytest.mark.parametrize("backend", ["sdpa", "chunked", "auto"])
@pytest.mark.parametrize("spec", ["alibi", "t5"])
def test_half_precision_bias_as_a_gpu_takes_it(spec: str, backend: str, monkeypatch, device) -> None:
    """A GPU's SDPA takes the bias in the query dtype: in bfloat16 every path stays as close to the
    float64 attention as T5's does. (ALiBi's key-only bias, rounded to bfloat16, was off by 3.6 at
    t=2048 on an H200 through ``backend="sdpa"``, and by 0.2 in 64-row chunks.) On the CPU the
    mask dtype of a GPU is forced, so the check runs everywhere."""
    import posenc._attention_paths
    import posenc.attend

    h, t = 8, 512
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, h, t, 32, generator=g).to(device) for _ in range(3))
    torch.manual_seed(0)
    encoding = posenc.build(spec, num_heads=h, head_dim=32, causal=True).to(device)
    exact = posenc.attention(*(x.double() for x in (q, k, v)), copy.deepcopy(encoding).double(), causal=True)
    for module in (posenc.attend, posenc._attention_paths):
        monkeypatch.setattr(module, "mask_dtype", lambda q: q.dtype)  # a GPU kernel's: the input dtype
    out = posenc.attention(*(x.bfloat16() for x in (q, k, v)), encoding, causal=True, backend=backend)
    assert (out.double() - exact).abs().max() < 0.03


def test_alibi_in_one_sdpa_call_is_as_exact_as_in_chunks(device) -> None:
    """Over all queries at once (``backend="sdpa"``, and every compiled call) ALiBi's bias takes its
    full form: the key-only one grows with the length and lost float32 resolution (t=2048: outputs
    off by ~3e-5, 40x the chunked path's error)."""
    h, t = 8, 2048
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, h, t, 16, generator=g).to(device) for _ in range(3))
    encoding = posenc.build("alibi", num_heads=h, causal=True).to(device)
    exact = posenc.attention(*(x.double() for x in (q, k, v)), copy.deepcopy(encoding).double(), causal=True)
    errors = {
        backend: (posenc.attention(q, k, v, encoding, causal=True, backend=backend).double() - exact)
        .abs()
        .max()
        for backend in ("sdpa", "chunked")
    }
    assert errors["sdpa"] <= 2 * errors["chunked"] + 1e-6, errors
