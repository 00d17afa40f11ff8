"""xPos: scores equal rotary-embedding-torch's use_xpos=True; the decay; causal only."""

from __future__ import annotations

import math

import pytest
import torch
from rotary_embedding_torch import RotaryEmbedding

import posenc
from posenc.encodings.xpos import XPos

# rotary-embedding-torch computes its angles and scales in float32 (ours: float64, rounded
# once); scores of unit-scale inputs at positions < 64 differ by a few float32 ulps of ~10.
SCORES_FP32 = {"rtol": 1e-5, "atol": 2e-5}
FP64 = {"rtol": 1e-10, "atol": 1e-10}


def scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return q @ k.transpose(-1, -2)


@pytest.mark.parametrize(("dim", "scale_base", "t"), [(8, 512, 16), (16, 8, 40), (32, 64, 7)])
def test_scores_equal_rotary_embedding_torch(dim: int, scale_base: int, t: int, device: torch.device) -> None:
    torch.manual_seed(0)
    reference = RotaryEmbedding(dim=dim, use_xpos=True, xpos_scale_base=scale_base).to(device)
    q, k = torch.randn(2, 3, t, dim).to(device), torch.randn(2, 3, t, dim).to(device)
    rq, rk = reference.rotate_queries_and_keys(q, k)
    spec = f"xpos(layout='interleaved', scale_base={scale_base})"
    ours = posenc.build(spec, head_dim=dim, causal=True).to(device)
    oq, ok = ours(q, k)
    # The causal entries (keys at or before the query): the only ones xPos is defined for; past the
    # diagonal the scale grows like zeta ** -((n - m) / scale_base) and float32 roundings with it.
    keep = torch.ones(t, t, dtype=torch.bool, device=device).tril()
    torch.testing.assert_close(scores(oq, ok)[..., keep], scores(rq, rk)[..., keep], **SCORES_FP32)


def test_scores_are_rope_times_the_decay() -> None:
    """q_m · k_n = Σ_i zeta_i^((m - n)/scale_base) (RoPE's pair-i term), in float64."""
    torch.manual_seed(1)
    dh, t, sb = 8, 12, 4.0
    xpos, rope = XPos(dh, scale_base=sb).double(), posenc.RoPE(dh).double()
    q, k = torch.randn(1, 1, t, dh, dtype=torch.float64), torch.randn(1, 1, t, dh, dtype=torch.float64)
    xq, xk = xpos(q, k)
    rq, rk = rope(q, k)
    zeta = (torch.arange(0, dh, 2, dtype=torch.float64) / dh + 0.4) / 1.4  # the paper's zeta_i, gamma 0.4
    pos = torch.arange(t, dtype=torch.float64)
    decay = zeta ** ((pos[:, None] - pos[None, :])[..., None] / sb)  # (t, t, dh/2)
    half = dh // 2
    pairs = rq[..., None, :half] * rk[..., None, :, :half] + rq[..., None, half:] * rk[..., None, :, half:]
    torch.testing.assert_close(scores(xq, xk), (pairs * decay).sum(-1), **FP64)
    assert zeta[0] == pytest.approx(0.4 / 1.4) and float(zeta.max()) < 1.0


def test_kv_cache_and_shift_invariance() -> None:
    torch.manual_seed(2)
    xpos = XPos(8)
    q, k = torch.randn(2, 2, 9, 8), torch.randn(2, 2, 9, 8)
    fq, fk = xpos(q, k)
    # Decoding: the last 3 queries against all keys, by default positions.
    dq, dk = xpos.encode_qk(q[:, :, -3:], k)
    torch.testing.assert_close(scores(dq, dk), scores(fq, fk)[:, :, -3:], rtol=1e-5, atol=1e-5)
    # Shifting every position by 37 leaves the scores unchanged (only m - n enters).
    p = torch.arange(9) + 37
    sq, sk = xpos.encode_qk(q, k, q_positions=p, k_positions=p)
    torch.testing.assert_close(scores(sq, sk), scores(fq, fk), rtol=1e-5, atol=1e-5)


def test_attention_and_transformer_lm() -> None:
    torch.manual_seed(3)
    xpos = XPos(8)
    q, k, v = torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    xq, xk = xpos(q, k)
    keep = torch.ones(6, 6, dtype=torch.bool).tril()
    expected = (scores(xq, xk) / 8**0.5).masked_fill(~keep, float("-inf")).softmax(-1) @ v
    torch.testing.assert_close(posenc.attention(q, k, v, xpos, causal=True), expected, rtol=1e-5, atol=1e-6)
    model = posenc.nn.TransformerLM(vocab_size=7, d_model=16, num_layers=1, num_heads=2, position="xpos")
    assert model(torch.randint(0, 7, (1, 5))).shape == (1, 5, 7)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="xpos is causal only"):
        posenc.build("xpos", head_dim=8, causal=False)
    with pytest.raises(ValueError, match="xpos is causal only"):
        posenc.nn.TransformerLM(
            vocab_size=7, d_model=16, num_layers=1, num_heads=2, position="xpos", causal=False
        )
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(
        ValueError, match=r"XPos is exact only in causal attention: .*no bidirectional form"
    ) as err:
        posenc.attention(q, q, q, XPos(8), causal=False)
    assert "ALiBi" not in str(err.value)  # the key-only-bias advice does not apply to xPos
    with pytest.raises(ValueError, match="scale_base must be a finite number > 0"):
        XPos(8, scale_base=0)
    with pytest.raises(ValueError, match="gamma"):
        XPos(8, gamma=-1.0)
    with pytest.raises(ValueError, match="rotate them together"):
        XPos(8).rotate(torch.randn(1, 1, 3, 8))


def test_a_prepared_state_serves_every_layer() -> None:
    """The state's scaled rows, reused by later layers, give what the one-call hook gives."""
    xpos = XPos(8)
    state = xpos.prepare(6)
    q, k = torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    first = state.encode_qk(q, k)
    for _ in range(3):  # three more layers
        torch.testing.assert_close(state.encode_qk(q, k), first, rtol=0, atol=0)
    torch.testing.assert_close(first, xpos.encode_qk(q, k), rtol=0, atol=0)


def _far(xpos: XPos, q: torch.Tensor, k: torch.Tensor, start: int, path: str):
    """q and k (``t`` positions from ``start``) rotated by ``path``; queries are the last ``tq`` keys."""
    tq, tk = q.shape[-2], k.shape[-2]
    kp = torch.arange(start, start + tk)
    if path == "hook":
        return xpos.encode_qk(q, k, q_positions=kp[-tq:], k_positions=kp)
    if path == "prepared":
        return xpos.prepare(tq, tk, q_positions=kp[-tq:], k_positions=kp).encode_qk(q, k)
    if path == "per-row":
        rows = torch.stack((kp, kp))
        return xpos.encode_qk(q, k, q_positions=rows[:, -tq:], k_positions=rows)
    assert start == 0
    return xpos(q, k)  # default positions


@pytest.mark.parametrize("path", ["hook", "prepared", "per-row"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_large_positions_are_finite_and_equal_float64_scores(path: str, dtype: torch.dtype) -> None:
    """Queries and keys near the largest position a dtype serves: finite, and causal scores equal
    the float64 ones (relative to the largest, as the decay makes some vanishingly small)."""
    xpos = XPos(16)
    limit = xpos.max_position(dtype)
    assert limit == int(0.875 * 87.336544 * 512 / math.log(1.4 / 0.4))  # 7/8 of float32's normal range
    gen = torch.Generator().manual_seed(4)
    q, k = torch.randn(2, 2, 3, 16, generator=gen), torch.randn(2, 2, 40, 16, generator=gen)
    oq, ok = _far(xpos, q.to(dtype), k.to(dtype), limit - 39, path)
    assert oq.isfinite().all() and ok.isfinite().all()
    eq, ek = _far(xpos.double(), q.double(), k.double(), limit - 39, path)
    xpos.float()
    got, want = scores(oq.double(), ok.double()), scores(eq, ek)
    tol = {torch.float32: 1e-5, torch.bfloat16: 3e-2}[dtype]
    assert ((got - want).abs() <= tol * want.abs().amax()).all()


def test_a_decode_step_at_the_largest_position_with_default_positions() -> None:
    """One query after ``max_position()`` cached keys (default positions, the module call): finite,
    and every causal score equals the float64 one (relative to the largest)."""
    xpos = XPos(16)
    n = xpos.max_position() + 1
    gen = torch.Generator().manual_seed(5)
    q, k = torch.randn(1, 2, 1, 16, generator=gen), torch.randn(1, 2, n, 16, generator=gen)
    oq, ok = xpos(q, k)
    assert oq.isfinite().all() and ok.isfinite().all()
    eq, ek = xpos.double()(q.double(), k.double())
    got, want = scores(oq.double(), ok.double()), scores(eq, ek)
    assert ((got - want).abs() <= 1e-5 * want.abs().amax()).all()


@pytest.mark.parametrize("path", ["hook", "prepared", "per-row", "default"])
def test_positions_past_the_range_raise_instead_of_nan(path: str) -> None:
    """Keys at 40,000 overflowed float32 scales (inf, then NaN scores); now a ValueError names the
    position and the limit. float64 serves them."""
    xpos = XPos(16)
    q, k = torch.randn(2, 2, 1, 16), torch.randn(2, 2, 4, 16)
    start = 0 if path == "default" else 40_000
    if path == "default":
        k = torch.randn(2, 2, 40_001, 16)
    last = start + k.shape[-2] - 1
    with pytest.raises(ValueError, match=rf"position {last} is past 31232, .*torch.float32"):
        _far(xpos, q, k, start, path)
    if path != "default":
        oq, ok = _far(xpos.double(), q.double(), k.double(), start, path)
        assert scores(oq, ok).isfinite().all()


def test_max_position_per_dtype() -> None:
    xpos = XPos(64, scale_base=512.0)
    assert xpos.max_position(torch.bfloat16) == xpos.max_position(torch.float32) == 31232
    assert xpos.max_position(torch.float16) == 3470 and xpos.max_position(torch.float64) == 253329
    assert XPos(64, scale_base=1024.0).max_position() == 62464  # proportional to scale_base


def test_positions_past_the_limit_are_refused_without_a_host_sync():
    """Given positions past max_position on the accelerator path (no host read) gave NaN and inf keys
    without an error; a kernel assert refuses them there (a ValueError on the CPU, as before)."""
    from posenc._compat import accelerator_paths

    xpos = posenc.XPos(8)
    q, k = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)
    far = torch.tensor([0, 10, 40000, 60000])
    with pytest.raises(ValueError, match="past 31232"):
        xpos(q, k, far, far)
    with accelerator_paths(), pytest.raises(RuntimeError, match="xpos: a position is past 31232"):
        xpos(q, k, far, far)
    with accelerator_paths():
        near = torch.arange(4)
        torch.testing.assert_close(xpos(q, k, near, near), xpos(q, k))


def test_positions_past_the_range_of_autocasts_dtype_are_refused() -> None:
    # float32 q and k passed the float32 limit, then autocast handed SDPA float16 keys: inf, all-NaN output.
    xpos, positions = XPos(16), torch.arange(8000, 8008)
    q, k, v = (torch.randn(1, 2, 8, 16) for _ in range(3))
    with torch.autocast("cpu", dtype=torch.float16), pytest.raises(ValueError, match=r"past 3470, .*float16"):
        posenc.attention(q, k, v, xpos, causal=True, q_positions=positions, k_positions=positions)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # (bfloat16 holds float32's exponents)
        assert (
            posenc.attention(q, k, v, xpos, causal=True, q_positions=positions, k_positions=positions)
            .isfinite()
            .all()
        )
