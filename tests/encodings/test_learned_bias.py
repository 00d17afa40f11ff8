"""KERPLE and FIRE: the papers' formulas, their properties, gradients, and every attention path."""

from __future__ import annotations

import math

import pytest
import torch

import posenc
from posenc.encodings.learned_bias import FIRE, KERPLE

FP64 = {"rtol": 1e-12, "atol": 1e-12}
# Attention outputs, dense bias vs Toeplitz view vs chunks: float32 summation order only.
ATTENTION_FP32 = {"rtol": 1e-5, "atol": 1e-6}
SPECS = ["kerple", "kerple(kind='power')", "fire"]


def kerple_reference(kind: str, r1: torch.Tensor, r2: torch.Tensor, tq: int, tk: int) -> torch.Tensor:
    """The paper's kernels, written out per head over |i - j| (queries at the last tq of tk)."""
    i = torch.arange(tk - tq, tk, dtype=torch.float64)[:, None]
    j = torch.arange(tk, dtype=torch.float64)[None, :]
    d = (i - j).abs()
    out = []
    for a, p in zip(r1.double().tolist(), r2.double().tolist(), strict=True):
        a = max(a, 1e-2)
        if kind == "log":
            out.append(-a * torch.log(1 + max(p, 1e-2) * d))
        else:
            out.append(-a * d ** min(max(p, 1e-2), 2.0))
    return torch.stack(out).unsqueeze(0)


def fire_reference(fire: FIRE, q_pos: list[int], k_pos: list[int]) -> torch.Tensor:
    """FIRE's equation f(psi(|i-j|) / psi(max(i, L))), psi(x) = log(c x + 1), one pair at a time."""
    c, threshold = float(fire.c), float(fire.threshold)
    out = torch.empty(fire.num_heads, len(q_pos), len(k_pos), dtype=torch.float64)
    for a, i in enumerate(q_pos):
        for b, j in enumerate(k_pos):
            x = math.log(c * abs(i - j) + 1) / (math.log(c * max(i, threshold) + 1) + fire.eps)
            out[:, a, b] = fire.mlp(torch.tensor([x], dtype=torch.float64))
    return out.unsqueeze(0)


@pytest.mark.parametrize("kind", ["log", "power"])
@pytest.mark.parametrize(("tq", "tk"), [(6, 6), (2, 7)])
def test_kerple_equals_the_paper(kind: str, tq: int, tk: int) -> None:
    torch.manual_seed(0)
    kerple = KERPLE(3, kind=kind).double()
    with torch.no_grad():  # one parameter below the clamp, one power exponent above 2
        kerple.r2[0] = -0.5 if kind == "log" else 3.0
    q, k = torch.randn(1, 3, tq, 4, dtype=torch.float64), torch.randn(1, 3, tk, 4, dtype=torch.float64)
    expected = kerple_reference(kind, kerple.r1, kerple.r2, tq, tk)
    torch.testing.assert_close(kerple.attention_bias(q, k), expected, **FP64)
    # Explicit (b, t) positions shifted by 10: the same bias (a function of distance alone).
    qp, kp = torch.arange(tk - tq, tk).expand(2, tq) + 10, torch.arange(tk).expand(2, tk) + 10
    got = kerple.attention_bias(q.expand(2, -1, -1, -1), k, q_positions=qp, k_positions=kp)
    torch.testing.assert_close(got, expected.expand(2, -1, -1, -1), **FP64)


def test_kerple_properties() -> None:
    """Zero at distance 0, decreasing with distance on both sides, symmetric."""
    kerple = KERPLE(4, kind="log").double()
    zeros = torch.zeros(1, 4, 50, 2, dtype=torch.float64)
    bias = kerple.attention_bias(zeros, zeros)[0]
    assert torch.all(bias.diagonal(dim1=-2, dim2=-1) == 0)
    row = bias[:, 25]
    assert torch.all(row[:, 26:].diff() < 0) and torch.all(row[:, :26].diff() > 0)
    torch.testing.assert_close(bias, bias.transpose(-1, -2), **FP64)


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("causal", [True, False])
def test_attention_paths_agree(spec: str, causal: bool) -> None:
    torch.manual_seed(1)
    enc = posenc.build(spec, num_heads=2, causal=causal)
    q, k, v = (torch.randn(2, 2, 9, 8) for _ in range(3))
    bias = enc.attention_bias(q, k)
    scores = q @ k.transpose(-1, -2) / math.sqrt(8) + bias
    if causal:
        scores = scores.masked_fill(~torch.ones(9, 9, dtype=torch.bool).tril(), float("-inf"))
    expected = scores.softmax(-1) @ v
    for backend in ("auto", "sdpa", "chunked"):
        out = posenc.attention(q, k, v, enc, causal=causal, backend=backend, chunk_size=4)
        torch.testing.assert_close(out, expected, **ATTENTION_FP32)
    raw = q @ k.transpose(-1, -2)
    torch.testing.assert_close(enc(raw), raw + bias, **ATTENTION_FP32)


@pytest.mark.parametrize("spec", SPECS)
def test_score_mod_equals_bias(spec: str) -> None:
    enc = posenc.build(spec, num_heads=2)
    q, k = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 5, 4)
    qp = torch.tensor([[2, 3, 4], [600, 700, 800]])
    kp = torch.tensor([[0, 1, 2, 3, 4], [0, 5, 600, 650, 800]])
    bias = enc.attention_bias(q, k, q_positions=qp, k_positions=kp)
    mod = enc.score_mod(q, k, q_positions=qp, k_positions=kp)
    zero = torch.tensor(0.0)
    for b, h, i, j in [(0, 0, 0, 0), (1, 1, 2, 4), (1, 0, 1, 2), (0, 1, 2, 1)]:
        got = mod(zero, torch.tensor(b), torch.tensor(h), torch.tensor(i), torch.tensor(j))
        torch.testing.assert_close(got, bias[b, h, i, j], rtol=1e-6, atol=1e-6)


def test_fire_equals_the_paper_and_interpolates() -> None:
    torch.manual_seed(2)
    fire = FIRE(3, init_threshold=4.0).double()
    q_pos, k_pos = [0, 3, 5, 9], [0, 1, 4, 9, 12]
    q, k = torch.zeros(1, 3, 4, 2, dtype=torch.float64), torch.zeros(1, 3, 5, 2, dtype=torch.float64)
    got = fire.attention_bias(q, k, q_positions=torch.tensor(q_pos), k_positions=torch.tensor(k_pos))
    with torch.no_grad():
        torch.testing.assert_close(got, fire_reference(fire, q_pos, k_pos), **FP64)
    # Past the threshold the normalised distance of the farthest key (j = 0) is 1 at every length.
    i = torch.tensor([10, 100, 1000])
    x = fire.normalized_distance(i[:, None], torch.zeros(1, 1, dtype=torch.long), torch.float64)
    torch.testing.assert_close(x, torch.ones_like(x), rtol=1e-5, atol=1e-5)
    # Below it, the bias depends on the distance alone.
    x = fire.normalized_distance(torch.tensor([2, 3]), torch.tensor([0, 1]), torch.float64)
    torch.testing.assert_close(x[0], x[1], **FP64)


@pytest.mark.parametrize("spec", SPECS)
def test_gradients_reach_every_parameter(spec: str) -> None:
    torch.manual_seed(3)
    # A narrow MLP for FIRE keeps gradcheck's columns few (its code does not depend on the width).
    enc = posenc.build(spec.replace("fire", "fire(mlp_width=4)"), num_heads=2).double()
    q, k, v = (torch.randn(1, 2, 5, 4, dtype=torch.float64) for _ in range(3))
    names = [n for n, _ in enc.named_parameters()]
    raw = q @ k.transpose(-1, -2)

    def f(*values: torch.Tensor) -> torch.Tensor:
        out = torch.func.functional_call(enc, dict(zip(names, values, strict=True)), (raw,))
        return out.softmax(-1) @ v

    # Inside KERPLE's clamps; FIRE's MLP is piecewise linear, gradcheck stays off its kinks here.
    start = tuple(p.detach().clone().clamp(min=0.05).requires_grad_(True) for p in enc.parameters())
    assert torch.autograd.gradcheck(f, start)
    model = posenc.nn.TransformerLM(vocab_size=7, d_model=16, num_layers=1, num_heads=2, position=spec)
    model(torch.randint(0, 7, (1, 6))).sum().backward()
    assert all(p.grad is not None for p in model.encoding.parameters())


def test_checkpoint_and_bad_input() -> None:
    fire = posenc.build("fire", num_heads=2)
    expected = {"mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias", "c", "L_multiplier"}
    assert set(fire.state_dict()) == expected
    assert set(posenc.build("kerple", num_heads=2).state_dict()) == {"r1", "r2"}
    # c and L_multiplier are (1,) (FSDP2 refuses 0-d parameters); the authors' 0-d values still load.
    old_layout = {k: v.reshape(()) if k in ("c", "L_multiplier") else v for k, v in fire.state_dict().items()}
    old_layout["c"] = torch.tensor(0.25)
    other = posenc.build("fire", num_heads=2)
    other.load_state_dict(old_layout)
    assert other.c.shape == (1,) and float(other.c.detach()) == 0.25
    q_pos, k_pos = torch.arange(5)[:, None], torch.arange(5)[None]
    assert other.normalized_distance(q_pos, k_pos, torch.float32).shape == (5, 5)
    assert other.normalized_distance(torch.tensor(3), torch.tensor(1), torch.float32).dim() == 0  # score_mod
    with pytest.raises(ValueError, match="kind must be one of"):
        KERPLE(2, kind="exp")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="init_threshold must be a finite number > 0"):
        FIRE(2, init_threshold=0.0)
    with pytest.raises(ValueError, match="num_heads=2"):
        KERPLE(2).attention_bias(torch.randn(1, 3, 2, 4), torch.randn(1, 3, 2, 4))
