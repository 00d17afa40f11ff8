"""Every way RoPE rotates in eager mode (prepared state, unprepared call, ``rotate``; with and
without autograd) against the float64 formula, and in half precision against transformers' error
on the same inputs (the bound that lets the rotation round in the input dtype)."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.functional import rope_inv_freq, rotary_reference

HEAD_DIM = 64
HALF = (torch.bfloat16, torch.float16)
#: Small positions, powers of two and their neighbours, and positions past every table.
POSITIONS = torch.tensor(
    sorted({0, 1, 2, 3, 100, 1000, *(2**e + d for e in range(10, 18) for d in (-1, 0, 1)), 4_000_001})
)


def _reference(x: torch.Tensor, positions: torch.Tensor, layout: str, rot: int = HEAD_DIM, base=10000.0):
    """The rotation of the first ``rot`` channels in float64 throughout; ``positions`` ``(t,)`` or ``(b, t)``."""
    angles = positions.double()[..., None] * rope_inv_freq(rot, base, dtype=torch.float64)
    if angles.dim() == 3:
        angles = angles[:, None]  # (b, 1, t, r/2)
    x64 = x.double()
    rotated = rotary_reference(x64[..., :rot], angles.cos(), angles.sin(), layout)
    return torch.cat((rotated, x64[..., rot:]), -1)


def _transformers(x: torch.Tensor, positions: torch.Tensor, layout: str) -> torch.Tensor:
    """transformers' Llama rotation of ``x`` in its dtype (the interleaved layout on permuted channels)."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    config = transformers.LlamaConfig(
        hidden_size=HEAD_DIM * 4,
        num_attention_heads=4,
        head_dim=HEAD_DIM,
        max_position_embeddings=int(positions.max()) + 1,
        rope_theta=10000.0,
    )
    cos, sin = LlamaRotaryEmbedding(config).to(x.device)(x, positions.expand(x.shape[0], -1))
    if layout == "half":
        return apply_rotary_pos_emb(x, x, cos, sin)[0]
    pairs = HEAD_DIM // 2
    to_half = torch.cat((torch.arange(0, HEAD_DIM, 2), torch.arange(1, HEAD_DIM, 2)))
    to_interleaved = torch.stack((torch.arange(pairs), torch.arange(pairs) + pairs), -1).flatten()
    return apply_rotary_pos_emb(x[..., to_half], x[..., to_half], cos, sin)[0][..., to_interleaved]


def _max_and_rms(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    err = out.double() - ref
    return err.abs().max().item(), err.pow(2).mean().sqrt().item()


def _paths(rope: posenc.RoPE, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor):
    """Every eager way a model or a user rotates q and k at ``positions``: the prepared state
    (its first call builds the tables, the second reuses them), the unprepared call, ``rotate``."""
    state = rope.prepare(q.shape[-2], q_positions=positions)
    first = state.encode_qk(q, k)
    again = state.encode_qk(q, k)  # a later layer: the cached tables
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    yield "prepared", first
    yield "unprepared", rope.encode_qk(q, k, q_positions=positions, k_positions=positions)
    yield "rotate", (rope.rotate(q, positions), rope.rotate(k, positions))


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_half_precision_error_is_at_most_transformers_on_every_path(dtype, layout, device):
    """Against float64, every path's error is at most transformers' on the same inputs: the
    maximum over positions up to 4e6 (transformers' float32 angles dominate there), the RMS where
    both angles are exact (positions < 4096: one element's maximum is a coin toss, the RMS is not;
    see tests/hardening/test_precision.py)."""
    rope = posenc.RoPE(HEAD_DIM, layout=layout).to(device)
    small = POSITIONS[POSITIONS < 4096]
    for seed in range(3):
        gen = torch.Generator().manual_seed(seed)
        for positions, which in ((POSITIONS, 0), (small, 1)):
            q = torch.randn(2, 4, positions.numel(), HEAD_DIM, generator=gen).to(dtype)
            k = torch.randn(2, 2, positions.numel(), HEAD_DIM, generator=gen).to(dtype)
            on = [t.to(device) for t in (q, k, positions)]  # computed on device, compared on the CPU
            bound = [
                _max_and_rms(_transformers(x, on[2], layout).cpu(), _reference(x.cpu(), positions, layout))
                for x in on[:2]
            ]
            for name, outs in _paths(rope, *on):
                for x, out, theirs in zip((q, k), outs, bound, strict=True):
                    assert out.dtype == dtype
                    ours = _max_and_rms(out.cpu(), _reference(x, positions, layout))
                    assert ours[which] <= theirs[which], (name, seed, which, ours, theirs)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, *HALF], ids=str)
def test_every_path_matches_the_float64_formula(layout, dtype):
    """Default, explicit and per-row positions, partial rotation, grouped-query keys, KV-cache
    keys at the query positions, with and without autograd recording."""
    tol = {torch.float64: 1e-12, torch.float32: 2e-6}.get(dtype, 2 * torch.finfo(dtype).eps)
    gen = torch.Generator().manual_seed(3)
    rot = 48
    rope = posenc.RoPE(HEAD_DIM, layout=layout, rotary_dim=rot)
    b, t = 3, 37
    q = torch.randn(b, 4, t, HEAD_DIM, generator=gen).to(dtype)
    k = torch.randn(b, 2, t, HEAD_DIM, generator=gen).to(dtype)
    per_row = torch.randint(0, 20_000, (b, t), generator=gen)  # (b, t): (b, 1, t, r/2) tables
    cases = [
        ("default", {}, torch.arange(t)),
        ("explicit", {"q_positions": per_row[0]}, per_row[0]),
        ("per-row", {"q_positions": per_row}, per_row),
    ]
    for name, kwargs, positions in cases:
        for grad in (False, True):
            qq, kk = q.clone().requires_grad_(grad), k.clone().requires_grad_(grad)
            state = rope.prepare(t, **kwargs)
            for _ in range(2):  # the first call builds the tables, the second reuses them
                out_q, out_k = state.encode_qk(qq, kk)
                for x, out in ((q, out_q), (k, out_k)):
                    ref = _reference(x, positions, layout, rot)
                    scale = ref.abs().amax().item()
                    assert (out.detach().double() - ref).abs().max().item() <= tol * scale, (name, grad)
                    assert torch.equal(out[..., rot:].detach(), x[..., rot:])  # passthrough channels
    # KV cache: 8 cached keys are rotated at their positions, the new keys at the queries'
    state = rope.prepare(4, 12)
    new_q, new_k = state.encode_qk(q[:, :, :4], k[:, :, :4])
    _, all_k = state.encode_qk(q[:, :, :4], k[:, :, :12])
    for x, out, positions in (
        (q[:, :, :4], new_q, torch.arange(8, 12)),
        (k[:, :, :4], new_k, torch.arange(8, 12)),
    ):
        ref = _reference(x, positions, layout, rot)
        assert (out.double() - ref).abs().max().item() <= tol * ref.abs().amax().item()
    ref = _reference(k[:, :, :12], torch.arange(12), layout, rot)
    assert (all_k.double() - ref).abs().max().item() <= tol * ref.abs().amax().item()


def test_narrowed_state_does_not_share_the_tables_of_the_full_state():
    rope = posenc.RoPE(HEAD_DIM)
    q, k = torch.randn(1, 2, 12, HEAD_DIM), torch.randn(1, 2, 12, HEAD_DIM)
    state = rope.prepare(12)
    full_q, full_k = state.encode_qk(q, k)  # builds the 12-row tables
    block = state.narrow(slice(4, 8), slice(0, 12))
    block_q, block_k = block.encode_qk(q[:, :, 4:8], k)
    assert torch.allclose(block_q, full_q[:, :, 4:8]) and torch.allclose(block_k, full_k)
    assert state.encode_qk(q, k)[0].shape == q.shape  # the full state still has its own tables


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_gradient_is_the_inverse_rotation_of_the_float64_formula(layout, dtype):
    """The eager backward (the rotation by −angle) against autograd through the float64 formula,
    for shared and per-row positions, partial rotation and a non-contiguous upstream gradient."""
    tol = {torch.float64: 1e-12, torch.float32: 2e-6}.get(dtype, 4 * torch.finfo(dtype).eps)
    gen = torch.Generator().manual_seed(5)
    b, h, t, rot = 2, 3, 19, 48
    rope = posenc.RoPE(HEAD_DIM, layout=layout, rotary_dim=rot)
    for positions in (torch.arange(t) * 3 + 100, torch.randint(0, 30_000, (b, t), generator=gen)):
        x = torch.randn(b, h, t, HEAD_DIM, generator=gen).to(dtype).requires_grad_()
        upstream = torch.randn(b, h, HEAD_DIM, t, generator=gen).to(dtype).transpose(-1, -2)  # strided
        rope.rotate(x, positions).backward(upstream)
        x64 = x.detach().double().requires_grad_()
        _reference(x64, positions, layout, rot).backward(upstream.double())
        scale = x64.grad.abs().amax().item()
        assert (x.grad.double() - x64.grad).abs().max().item() <= tol * scale, positions.shape


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_gradients_of_every_order(layout):
    rope = posenc.RoPE(8, layout=layout)
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(2, 3, 11, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    positions = torch.randint(0, 1000, (2, 11), generator=gen)
    assert torch.autograd.gradcheck(lambda x: rope.rotate(x, positions), (x,))
    assert torch.autograd.gradgradcheck(lambda x: rope.rotate(x, positions), (x,))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_torch_func_transforms_rotate_as_the_eager_call(layout):
    """vmap and grad wrap their tensors: the reference formula runs there, with the same result."""
    from torch.func import grad, vmap

    rope = posenc.RoPE(HEAD_DIM, layout=layout)
    gen = torch.Generator().manual_seed(7)
    xs = torch.randn(3, 2, 4, 9, HEAD_DIM, generator=gen)
    positions = torch.arange(9) + 50
    expected = torch.stack([rope.rotate(x, positions) for x in xs])
    torch.testing.assert_close(vmap(lambda x: rope.rotate(x, positions))(xs), expected, rtol=0, atol=2e-6)
    weights = torch.randn(2, 4, 9, HEAD_DIM, generator=gen)
    x = xs[0].clone().requires_grad_()
    (rope.rotate(x, positions) * weights).sum().backward()
    by_func = grad(lambda x: (rope.rotate(x, positions) * weights).sum())(xs[0])
    torch.testing.assert_close(by_func, x.grad, rtol=0, atol=2e-6)
