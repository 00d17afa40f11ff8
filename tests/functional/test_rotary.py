"""posenc.functional.rotary: the rotation's eager paths against the plain formula, autograd, offsets, errors,
and the functional namespace's rotary names."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import posenc.functional as F
from posenc.functional.rope_freqs import rope_inv_freq
from posenc.functional.rotary import apply_rotary, rope_cos_sin, rotary_reference

# Eager forms vs the plain formula in the same dtype: different operation order, a few ulps.
KERNEL_TOL = {"atol": 1e-6, "rtol": 1e-6}
# float64 gradients through different formulations: operation-order round-off.
F64_TOL = {"atol": 1e-12, "rtol": 1e-12}
# Half precision: the eager half layout rounds twice in the input dtype (x·cos, then the sum),
# the reference once (from float32): they differ by at most ~eps/2 of |x·cos| plus eps/2 of the
# result, i.e. eps of the row's largest |x| (measured up to 1.38 eps over 300 seeds); 2 eps.
HALF_EAGER_EPS = 2.0


def cos_sin(length: int, pairs: int, *, batch: int | None = None, offset: int = 0):
    positions = torch.arange(offset, offset + length)
    if batch is not None:
        positions = positions + 17 * torch.arange(batch)[:, None]
    cos, sin = rope_cos_sin(positions, rope_inv_freq(2 * pairs), dtype=torch.float32)
    if batch is not None:
        cos, sin = cos[:, None], sin[:, None]  # (b, 1, t, r/2)
    return cos, sin


# --- the rotation ----------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("rotary_dim", [8, 16])
@pytest.mark.parametrize("per_batch", [False, True])
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_eager_paths_equal_the_plain_formula(layout, dtype, rotary_dim, per_batch, grad):
    """Every eager path (with and without autograd recording) against rotary_reference."""
    gen = torch.Generator().manual_seed(rotary_dim)
    x = torch.randn(2, 3, 11, 16, dtype=torch.float64, generator=gen).to(dtype).requires_grad_(grad)
    cos, sin = cos_sin(11, rotary_dim // 2, batch=2 if per_batch else None)
    if dtype == torch.float64:
        cos, sin = cos.double(), sin.double()
    out = apply_rotary(x, cos, sin, layout)
    assert out.dtype == dtype and out.shape == x.shape
    assert (out.grad_fn is not None) == grad
    got, expected = (
        out[..., :rotary_dim].double(),
        rotary_reference(x[..., :rotary_dim], cos, sin, layout).double(),
    )
    if dtype in (torch.float32, torch.float64):
        assert_close(got, expected, **KERNEL_TOL)
    else:
        row_max = x[..., :rotary_dim].detach().double().abs().amax(-1, keepdim=True)
        assert ((got - expected).abs() <= HALF_EAGER_EPS * torch.finfo(dtype).eps * row_max).all()
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
    odd = torch.randn(2, 3, 9, 17)[..., 1:]  # an odd storage offset: no complex view of it
    assert_close(apply_rotary(odd, cos, sin, layout), rotary_reference(odd, cos, sin, layout), **KERNEL_TOL)
    one = torch.randn(1, 3, 9, 16)
    cos_b, sin_b = cos_sin(9, 8, batch=2)
    out = apply_rotary(one, cos_b, sin_b, layout)  # a batch-1 tensor with per-row positions
    assert out.shape == (2, 3, 9, 16)
    assert_close(out, rotary_reference(one.expand(2, -1, -1, -1), cos_b, sin_b, layout), **KERNEL_TOL)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_empty_inputs(layout):
    cos, sin = cos_sin(0, 4)
    assert apply_rotary(torch.randn(2, 3, 0, 8), cos, sin, layout).shape == (2, 3, 0, 8)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_gradients_of_first_and_second_order(layout):
    """The eager paths are plain autograd ops: gradcheck and gradgradcheck in float64, also with
    respect to cos and sin (e.g. learned frequencies), and a partial rotation."""
    x = torch.randn(2, 3, 5, 12, dtype=torch.float64, requires_grad=True)
    cos, sin = cos_sin(5, 4)
    cos = (cos.double() * 1.2).requires_grad_()  # an attention factor
    sin = (sin.double() * 1.2).requires_grad_()

    def rotate(x, cos, sin):
        return apply_rotary(x, cos, sin, layout)

    assert torch.autograd.gradcheck(rotate, (x, cos, sin))
    assert torch.autograd.gradgradcheck(rotate, (x, cos, sin))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=str)
def test_backward_equals_the_plain_formula(layout, dtype):
    """The gradient of a rotation is the rotation by −θ; through the eager paths it equals the
    gradient through the formula, also the gradient of a gradient penalty (create_graph)."""
    x0 = torch.randn(2, 4, 13, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).to(dtype)
    cos, sin = cos_sin(13, 6)

    def penalty_grads(rotate):
        x = x0.clone().requires_grad_(True)
        loss = rotate(x).float().pow(3).sum()  # non-linear in x: the gradient depends on x
        (grad,) = torch.autograd.grad(loss, x, create_graph=True)
        (second,) = torch.autograd.grad(grad.float().pow(2).sum(), x)
        return grad.detach(), second

    got = penalty_grads(lambda x: apply_rotary(x, cos, sin, layout))
    expected = penalty_grads(
        lambda x: torch.cat((rotary_reference(x[..., :12], cos, sin, layout), x[..., 12:]), dim=-1)
    )
    for g, e in zip(got, expected, strict=True):
        # bfloat16: the eager half layout rounds in bfloat16, the reference in float32 (see
        # above), and the loss cubes/squares those differences: measured up to 4.3 (gradient) and
        # 6.6 (second derivative) bfloat16 ulps of the largest entry over 200 seeds (entries near
        # zero come from cancellations, so no relative bound).
        tol = F64_TOL if dtype == torch.float64 else {"atol": 8 * 2**-8 * e.abs().max().item(), "rtol": 0}
        assert_close(g.double(), e.double(), **tol)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("offset", [0, 3, 8])  # the first, a middle (odd) and the trailing slice
@pytest.mark.parametrize("per_batch", [False, True])
def test_offset_rotates_the_slice_it_names_on_every_path(layout, offset, per_batch):
    """offset=o: channels o .. o+r-1 rotate as a head of r channels would, the others pass through; eager
    (with and without autograd) and the traced formula (rotary_reference) agree."""
    x = torch.randn(2, 3, 11, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(offset))
    cos, sin = (c.double() for c in cos_sin(11, 4, batch=2 if per_batch else None))
    part = rotary_reference(x[..., offset : offset + 8], cos, sin, layout)
    want = torch.cat((x[..., :offset], part, x[..., offset + 8 :]), -1)
    assert_close(apply_rotary(x, cos, sin, layout, offset=offset), want, atol=1e-12, rtol=0)
    assert_close(apply_rotary(x.requires_grad_(), cos, sin, layout, offset=offset), want, atol=1e-12, rtol=0)
    assert_close(rotary_reference(x, cos, sin, layout, offset=offset), want, atol=0, rtol=0)


def test_offset_matches_rotary_embedding_torch_start_index():
    from rotary_embedding_torch import apply_rotary_emb

    x = torch.randn(2, 3, 11, 16, dtype=torch.float64)
    angles = torch.arange(11, dtype=torch.float64)[:, None] * torch.tensor([1.0, 0.3, 0.05, 0.001]).double()
    want = apply_rotary_emb(
        angles.repeat_interleave(2, -1), x, start_index=5
    )  # its (t, r) angles, interleaved
    assert_close(
        apply_rotary(x, angles.cos(), angles.sin(), "interleaved", offset=5), want, atol=1e-12, rtol=0
    )


def test_apply_rotary_errors():
    x = torch.randn(1, 1, 4, 8)
    with pytest.raises(ValueError, match=r"rotate 4 channels .* from offset=5 but x has only 8"):
        apply_rotary(x, *cos_sin(4, 2), offset=5)
    with pytest.raises(ValueError, match=r"offset must be >= 0, got -1"):
        apply_rotary(x, *cos_sin(4, 2), offset=-1)
    with pytest.raises(TypeError, match=r"offset must be an int, got 1.0"):
        apply_rotary(x, *cos_sin(4, 2), offset=1.0)

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


def test_public_names_are_posenc_functionals():
    import posenc.functional.rotary as rotary
    from posenc.functional import rope_freqs, rope_scaling

    assert rotary.__all__ == ["apply_rotary", "rope_cos_sin", "rotary_reference"]
    for module in (rotary, rope_freqs, rope_scaling):
        for name in module.__all__:
            assert getattr(module, name) is getattr(F, name), name
    assert set(rope_scaling._TYPE_KEYS) == set(rope_scaling.ROPE_TYPES)
