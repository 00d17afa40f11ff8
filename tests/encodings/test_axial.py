"""AxialRoPE: parity with rotary-embedding-torch's axial frequencies and transformers' Pixtral
2D rotary, the 2D-offset property, grids with prefix tokens, resolution changes, errors."""

from __future__ import annotations

import copy
import logging
import math

import pytest
import torch

import posenc
from posenc.functional import axial_frequencies, grid_positions

#: float32 rotations of the same angles (references build them in float32)
ATOL = 2e-5
logging.getLogger("transformers").setLevel(logging.ERROR)


@pytest.mark.parametrize("freqs", ["lang", "pixel"])
def test_parity_with_rotary_embedding_torch_axial(freqs, device):
    ret = pytest.importorskip("rotary_embedding_torch")
    h, w, dim = 5, 7, 16  # dim channels per axis
    ref = ret.RotaryEmbedding(dim, freqs_for=freqs, max_freq=12).to(device)
    torch.manual_seed(0)
    q = torch.randn(2, 3, h, w, 2 * dim).to(device)
    want = ret.apply_rotary_emb(ref.get_axial_freqs(h, w), q).flatten(2, 3)
    pixel = {"max_freq": 12.0} if freqs == "pixel" else {}  # (which rotary-embedding-torch's "lang" ignores)
    ours = posenc.AxialRoPE(2 * dim, freqs=freqs, layout="interleaved", grid_size=(h, w), **pixel).to(device)
    got = ours.rotate(q.flatten(2, 3))
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)


def test_parity_with_pixtral_2d_rotary(device):
    transformers = pytest.importorskip("transformers")
    from transformers.models.pixtral import modeling_pixtral as hf

    cfg = transformers.PixtralVisionConfig(
        hidden_size=64, num_attention_heads=2, head_dim=32, rope_theta=1000.0
    )
    rotary = hf.PixtralVisionRotaryEmbedding(cfg).to(device)
    coords = grid_positions((4, 6)).to(device)  # (h, w) per patch, Pixtral's position_ids layout
    torch.manual_seed(1)
    q, k = torch.randn(1, 2, 24, 32).to(device), torch.randn(1, 2, 24, 32).to(device)
    cos, sin = rotary(q, coords)
    want = hf.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=0)
    ours = posenc.build("rope2d(axis_layout='alternate', base=1000.0)", head_dim=32).to(device)
    got = ours(q, k, coords, coords)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)


def _eva_reference(coords: torch.Tensor, head_dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    # EVA-02 / timm RotaryEmbeddingCat (in_pixels=False): bands base ** (-i / (dh / 4)) per axis,
    # [h bands | w bands], each repeated twice (interleaved pairs); written from the paper's formula.
    n = head_dim // 4
    bands = base ** -(torch.arange(n, dtype=torch.float64) / n)
    angles = (coords.double()[..., None] * bands).flatten(-2).repeat_interleave(2, -1)
    return angles.sin(), angles.cos()


def test_eva_layout_and_reference_grid_interpolation():
    dh, base = 32, 10000.0
    rope = posenc.AxialRoPE(dh, layout="interleaved", grid_size=(4, 4), num_prefix_tokens=1, ref_grid=(4, 4))
    coords = rope.grid_positions((8, 6))  # another resolution, scaled to span the trained 4x4 grid
    assert coords.dtype == torch.float32 and coords.shape == (1 + 48, 2)
    torch.testing.assert_close(coords[1:].view(8, 6, 2)[3, 5], torch.tensor([3 * 4 / 8, 5 * 4 / 6]))
    torch.manual_seed(2)
    x = torch.randn(1, 1, 49, dh)
    sin, cos = _eva_reference(coords[1:], dh, base)
    rot = torch.stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2)
    patches = (x[..., 1:, :].double() * cos + rot[..., 1:, :].double() * sin).float()
    got = rope.rotate(x, coords)
    torch.testing.assert_close(got[..., 1:, :], patches, atol=ATOL, rtol=0)
    torch.testing.assert_close(got[..., :1, :], x[..., :1, :])  # the class token is not rotated


@pytest.mark.parametrize("normalize", ["separate", "max", "min"])
def test_dinov3_periods_and_patch_centres_equal_the_authors_formula(normalize):
    """DINOv3's RopePositionEmbedding (base mode, no augmentation), re-typed: centres (i + 0.5) / n
    mapped to [-1, 1] with n per normalize_coords, angles 2 pi * coord / base ** (2i / (dh / 2)),
    [y freqs | x freqs] tiled twice, rotate_half; on a non-square grid after a class token."""
    dh, base, (h, w) = 16, 100.0, (3, 5)
    n_h, n_w = {"separate": (h, w), "max": (w, w), "min": (h, h)}[normalize]
    centres = (
        torch.stack(
            torch.meshgrid(
                torch.arange(0.5, h, dtype=torch.float64) / n_h,
                torch.arange(0.5, w, dtype=torch.float64) / n_w,
                indexing="ij",
            ),
            -1,
        ).flatten(0, 1)
        * 2
        - 1
    )
    periods = base ** (2 * torch.arange(dh // 4, dtype=torch.float64) / (dh // 2))
    angles = (2 * math.pi * centres[:, :, None] / periods).flatten(1, 2).tile(2)  # (hw, dh)
    x = torch.randn(1, 2, 1 + h * w, dh, dtype=torch.float64)
    patches = x[..., 1:, :]
    half = torch.cat((-patches[..., dh // 2 :], patches[..., : dh // 2]), -1)
    want = torch.cat((x[..., :1, :], patches * angles.cos() + half * angles.sin()), -2)
    rope = posenc.AxialRoPE(dh, freqs="period", base=base)
    coords = grid_positions(
        (h, w), num_prefix_tokens=1, kind="center", normalize=normalize, dtype=torch.float64
    )
    got, _ = rope.encode_qk(x, x, q_positions=coords, k_positions=coords)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)


def test_flux_axes_dim_blocks():
    # Flux: axes_dim=(16, 56, 56) over (t, h, w) ids, each block base ** (-2i / d_axis), interleaved pairs
    axes, dh = (4, 6, 6), 16
    rope = posenc.AxialRoPE(dh, axes, layout="interleaved")
    inv, axis = axial_frequencies(axes)
    assert axis.tolist() == [0, 0, 1, 1, 1, 2, 2, 2]
    want = torch.cat([10000.0 ** -(torch.arange(0, d, 2, dtype=torch.float64) / d) for d in axes])
    torch.testing.assert_close(inv, want)
    ids = torch.tensor([[0, 0, 0], [3, 1, 2], [5, 4, 1]])
    x = torch.randn(1, 1, 3, dh, dtype=torch.float64)
    angles = ids.double()[:, axis] * inv  # (t, 8)
    c, s = angles.cos(), angles.sin()
    pairs = x.unflatten(-1, (-1, 2))
    want_x = torch.stack(
        (pairs[..., 0] * c - pairs[..., 1] * s, pairs[..., 1] * c + pairs[..., 0] * s), -1
    ).flatten(-2)
    torch.testing.assert_close(rope.rotate(x, ids), want_x)


def test_flux_equals_diffusers():
    """Flux's rotary, diffusers' own (FluxPosEmbed, axes_dim (16, 56, 56), base 10000, and apply_rotary_emb): its
    text tokens at id (0, 0, 0), then the image's (0, row, column), and a Kontext reference image at (1, row,
    column), against AxialRoPE(128, (16, 56, 56), layout="interleaved") on the same ids, whole tensors."""
    pytest.importorskip("diffusers")
    from diffusers.models.embeddings import apply_rotary_emb
    from diffusers.models.transformers.transformer_flux import FluxPosEmbed

    rows, cols = torch.meshgrid(torch.arange(3), torch.arange(5), indexing="ij")
    image = torch.stack((torch.zeros_like(rows), rows, cols), -1).flatten(0, 1)
    ids = torch.cat((torch.zeros(4, 3, dtype=torch.long), image, image + torch.tensor([1, 0, 0])))
    x = torch.randn(2, 3, len(ids), 128)
    want = apply_rotary_emb(x, FluxPosEmbed(theta=10000, axes_dim=[16, 56, 56])(ids))
    rope = posenc.AxialRoPE(128, (16, 56, 56), layout="interleaved")
    torch.testing.assert_close(rope.rotate(x, ids), want)


@pytest.mark.parametrize("axis_layout", ["cat", "alternate", "cycle", "blocks"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_scores_depend_only_on_the_2d_offset(axis_layout, layout):
    rope = posenc.AxialRoPE(32, axis_layout=axis_layout, layout=layout, base=100.0)
    torch.manual_seed(3)
    q, k = torch.randn(1, 1, 1, 32, dtype=torch.float64), torch.randn(1, 1, 1, 32, dtype=torch.float64)

    def score(pq, pk):
        a, b = rope(q, k, torch.tensor([pq]), torch.tensor([pk]))
        return float((a * b).sum())

    base = score((2, 3), (5, 1))
    assert score((12, 7), (15, 5)) == pytest.approx(base, abs=1e-9)  # same offset (3, -2)
    assert abs(score((2, 3), (6, 1)) - base) > 1e-3  # offset moves along rows
    assert abs(score((2, 3), (5, 2)) - base) > 1e-3  # ... or along columns


@pytest.mark.parametrize("axis_layout", ["cat", "alternate", "cycle"])
def test_axis_order_reads_the_coordinates_in_that_order(axis_layout):
    """Columns first (axis_order=(1, 0)) is the default layout on (col, row) coordinates, exactly; and
    "cycle" is "cat" with its pairs taken from each axis in turn."""
    swapped = posenc.AxialRoPE(16, axis_layout=axis_layout, axis_order=(1, 0), grid_size=(3, 4))
    plain = posenc.AxialRoPE(16, axis_layout=axis_layout)
    assert "axis_order=(1, 0)" in repr(swapped) and "axis_order" not in repr(plain)
    x, coords = torch.randn(2, 3, 12, 16), swapped.grid_positions()
    assert torch.equal(swapped.rotate(x), plain.rotate(x, coords.flip(-1)))
    assert not torch.equal(swapped.rotate(x), plain.rotate(x, coords))
    cat_freq, cat_axis = axial_frequencies((8, 8), axis_order=(1, 0))
    freq, axis = axial_frequencies((8, 8), axis_layout="cycle", axis_order=(1, 0))
    assert axis.tolist() == [1, 0] * 4 and torch.equal(freq, cat_freq.view(2, 4).T.flatten())
    assert cat_axis.tolist() == [1] * 4 + [0] * 4


@pytest.mark.parametrize("axes_dim", [(8, 8), (8, 8, 8), (12, 12)])
def test_blocks_rotate_each_axis_block_as_rope_on_its_own_channels(axes_dim):
    """axis_layout="blocks": each axis's channels a block, rotated within it as RoPE rotates a slice of the
    head at that axis's coordinate (Gemma 4's vision tower); the channels after the blocks pass through."""
    n, width = len(axes_dim), axes_dim[0]
    head_dim = sum(axes_dim) + 4
    rope = posenc.AxialRoPE(
        head_dim, axes_dim, axis_layout="blocks", axis_order=tuple(range(n))[::-1], base=100.0
    )
    torch.manual_seed(5)
    x, coords = torch.randn(2, 3, 10, head_dim), torch.randint(0, 20, (2, 10, n))
    want = x
    for block in range(n):  # block j reads coordinate axis_order[j]
        part = posenc.RoPE(head_dim, base=100.0, rotary_dim=width, rotary_offset=block * width)
        want = part.rotate(want, coords[..., n - 1 - block])
    torch.testing.assert_close(rope.rotate(x, coords), want)
    q, k = rope.encode_qk(x, x, q_positions=coords, k_positions=coords)
    torch.testing.assert_close(q, want)
    torch.testing.assert_close(k, want)
    traced = torch.compile(lambda a: rope.rotate(a, coords), backend="eager", fullgraph=True)
    torch.testing.assert_close(traced(x), want)
    back = rope.rotate(rope.rotate(x, coords), coords, conjugate=True)  # the inverse rotation
    torch.testing.assert_close(back, x)
    cat = posenc.AxialRoPE(
        head_dim, axes_dim, axis_layout="cat", axis_order=tuple(range(n))[::-1], base=100.0
    )
    assert not torch.allclose(cat.rotate(x, coords), want)  # "cat" pairs channel i with i + r/2 instead
    pairs = {"layout": "interleaved", "base": 100.0}  # neighbouring pairs never leave a block: as "cat"
    torch.testing.assert_close(
        posenc.AxialRoPE(head_dim, axes_dim, axis_layout="blocks", **pairs).rotate(x, coords),
        posenc.AxialRoPE(head_dim, axes_dim, **pairs).rotate(x, coords),
    )


def test_attention_with_prepared_grid_and_prefix_tokens():
    rope = posenc.build("rope_axial(grid_size=(3, 4), num_prefix_tokens=2)", head_dim=16)
    t = 2 + 12
    torch.manual_seed(4)
    q, k, v = (torch.randn(2, 2, t, 16) for _ in range(3))
    state = rope.prepare(t)
    coords = rope.grid_positions()
    assert coords[:2].abs().sum() == 0 and coords[2:].tolist()[5] == [1, 1]
    out = posenc.attention(q, k, v, state)
    torch.testing.assert_close(out, posenc.attention(q, k, v, rope, q_positions=coords))
    rq, _ = state.encode_qk(q, k)
    torch.testing.assert_close(rq[..., :2, :], q[..., :2, :])  # prefix tokens not rotated
    assert not torch.allclose(rq[..., 2:, :], q[..., 2:, :])
    # batched coordinates, float coordinates (pixel frequencies)
    pix = posenc.AxialRoPE(16, freqs="pixel", grid_size=(3, 4))
    assert pix.grid_positions().dtype == torch.float32 and float(pix.grid_positions().max()) == 1.0
    batched = torch.stack((coords, coords.flip(0)))
    out_b = posenc.attention(q, k, v, rope, q_positions=batched)
    torch.testing.assert_close(out_b[0], out[0])


def test_grid_numbered_from_first_index_between_prefix_and_suffix_tokens():
    """Llama 4's vision tower: patches from (1, 1), its class token last at (0, 0); the prefix and suffix tokens
    unrotated wherever they are, the cells' scores depending only on their offsets."""
    rope = posenc.AxialRoPE(16, grid_size=(2, 3), num_prefix_tokens=1, num_suffix_tokens=2, first_index=1)
    coords = rope.grid_positions()
    cells = [[1, 1], [1, 2], [1, 3], [2, 1], [2, 2], [2, 3]]
    assert coords.tolist() == [[0, 0], *cells, [0, 0], [0, 0]]
    assert rope.grid_positions(num_prefix_tokens=0, num_suffix_tokens=0).tolist() == cells
    q, k = torch.randn(2, 1, 2, 9, 16).unbind(0)
    rq, rk = rope.encode_qk(q, k)  # the default positions: coords
    keep = [0, 7, 8]
    torch.testing.assert_close(rq[..., keep, :], q[..., keep, :], rtol=0, atol=0)
    from_zero = posenc.AxialRoPE(16, grid_size=(2, 3))
    zq, zk = from_zero.encode_qk(q[..., 1:7, :], k[..., 1:7, :])
    torch.testing.assert_close(rq[..., 1:7, :] @ rk[..., 1:7, :].mT, zq @ zk.mT)


def test_caches_copy_dtype_meta():
    rope = posenc.AxialRoPE(24, (8, 8, 8), grid_size=(2, 3, 4))
    assert rope.state_dict() == {} and rope.grid_positions().shape == (24, 3)
    moved = copy.deepcopy(rope).to(torch.bfloat16)
    assert moved.inv_freq.dtype == torch.float32
    meta = posenc.AxialRoPE(24, (8, 8, 8), device="meta").to_empty(device="cpu")
    torch.testing.assert_close(meta.inv_freq, rope.inv_freq)
    x = torch.randn(1, 2, 24, 24, dtype=torch.bfloat16)
    assert rope.rotate(x).dtype == torch.bfloat16


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"axes_dim": (16, 20)}, ValueError, r"uses 36 channels, more than head_dim=32"),
        ({"axes_dim": (15, 15)}, ValueError, r"axes_dim\[0\] must be even"),
        ({"num_axes": 3}, ValueError, "does not split into 3 axes"),
        ({"axes_dim": (8, 12), "axis_layout": "alternate"}, ValueError, "equal widths"),
        (
            {"axes_dim": (8, 12), "axis_layout": "cycle"},
            ValueError,
            r"axis_layout='cycle' needs equal widths",
        ),
        (
            {"axes_dim": (8, 12), "axis_layout": "blocks"},
            ValueError,
            r"axis_layout='blocks' needs equal widths",
        ),
        (
            {"axis_order": (0, 0)},
            ValueError,
            r"axis_order must list the axes 0 \.\. 1 once each, got \(0, 0\)",
        ),
        ({"axis_order": (1.0, 0)}, ValueError, r"axis_order must list the axes 0 \.\. 1 once each"),
        ({"axis_order": (2, 1, 0)}, ValueError, r"axis_order must list the axes 0 \.\. 1 once each"),
        ({"freqs": "pixels"}, ValueError, "freqs must be one of"),
        ({"grid_size": (4, 4, 4)}, ValueError, "grid_size must be a tuple of 2 ints"),
        ({"freqs": "pixel", "ref_grid": (4, 4)}, ValueError, "ref_grid"),
        ({"num_suffix_tokens": -1}, ValueError, r"num_suffix_tokens must be >= 0, got -1"),
        ({"first_index": 1.0}, TypeError, r"first_index must be an int, got 1\.0"),
    ],
)
def test_constructor_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        posenc.AxialRoPE(32, **kwargs)


def test_position_errors():
    rope = posenc.AxialRoPE(32, grid_size=(2, 2))
    q = torch.randn(1, 1, 4, 32)
    with pytest.raises(ValueError, match=r"one coordinate per axis: \(seq, 2\)"):
        rope(q, q, torch.arange(4))
    with pytest.raises(ValueError, match=r"\(seq, 2\) or \(batch, seq, 2\).*got \(4, 3\)"):
        rope(q, q, torch.zeros(4, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="finite"):
        rope(q, q, torch.full((4, 2), float("nan")))
    with pytest.raises(ValueError, match=r"grid_size=\(2, 2\).*4 tokens, got 5"):
        rope.prepare(5)
    suffixed = posenc.AxialRoPE(32, grid_size=(2, 2), num_prefix_tokens=1, num_suffix_tokens=2)
    with pytest.raises(ValueError, match=r"num_prefix_tokens=1 and num_suffix_tokens=2: 7 tokens, got 5"):
        suffixed.prepare(5)
    with pytest.raises(ValueError, match="needs positions of shape"):
        posenc.AxialRoPE(32).prepare(4)


@pytest.mark.slow
def test_compiled_equals_eager():
    rope = posenc.AxialRoPE(32, grid_size=(4, 4))
    q = torch.randn(1, 2, 16, 32)
    coords = rope.grid_positions()
    compiled = torch.compile(lambda q, c: rope(q, q, c, c), fullgraph=True)
    torch.testing.assert_close(compiled(q, coords), rope(q, q, coords, coords))


def test_dinov3_training_augmentation_equals_its_code_for_the_same_random_state():
    """DINOv3ViT in training mode shifts, jitters and rescales its patch centres at random:
    ``grid_positions(..., shift=, jitter=, rescale=)`` draws the same values from the same state."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.dinov3_vit import modeling_dinov3_vit as hf

    config = transformers.DINOv3ViTConfig(
        hidden_size=64, num_attention_heads=2, num_register_tokens=2, image_size=64,
        pos_embed_shift=0.1, pos_embed_jitter=1.5, pos_embed_rescale=2.0,
    )  # fmt: skip
    module = hf.DINOv3ViTRopePositionEmbedding(config).train()
    rope = posenc.hf.from_hf_config(config)
    augment = {"shift": 0.1, "jitter": 1.5, "rescale": 2.0}
    q, k = (torch.randn(2, 2, 3 + 4 * 2, 32, generator=torch.Generator().manual_seed(i)) for i in range(2))
    for seed in (0, 1):
        torch.manual_seed(seed)
        cos, sin = module(torch.zeros(1, 3, 64, 32))
        torch.manual_seed(seed)
        coords = rope.grid_positions((4, 2), **augment)
        ours = rope.encode_qk(q, k, q_positions=coords, k_positions=coords)
        torch.testing.assert_close(ours, hf.apply_rotary_pos_emb(q, k, cos, sin), atol=1e-5, rtol=1e-5)
    assert torch.equal(coords[:3], torch.zeros(3, 2))  # class and register tokens stay unrotated
    gen = torch.Generator().manual_seed(0)
    assert not torch.equal(rope.grid_positions((4, 2), generator=gen, **augment), coords)
    with pytest.raises(ValueError, match=r"jitter must be a float >= 1 .* got 0.5"):
        grid_positions((4, 2), kind="center", jitter=0.5)
    with pytest.raises(ValueError, match="use kind='center' or 'pixel'"):
        grid_positions((4, 2), shift=0.1)


def test_dinov3_min_and_max_period_equal_the_authors_parametrisation():
    """DINOv3's other form, re-typed: the dh/4 periods of each axis geometric from min_period to
    max_period, both included (its ``logspace``), angles 2 pi * coord / period, rotate_half."""
    dh, (low, high), (h, w) = 16, (0.25, 40.0), (3, 4)
    periods = torch.logspace(math.log10(low), math.log10(high), dh // 4, dtype=torch.float64)
    coords = grid_positions((h, w), kind="center", dtype=torch.float64)
    angles = (2 * math.pi * coords[:, :, None] / periods).flatten(1, 2).tile(2)  # (hw, dh)
    x = torch.randn(1, 2, h * w, dh, dtype=torch.float64)
    want = x * angles.cos() + torch.cat((-x[..., dh // 2 :], x[..., : dh // 2]), -1) * angles.sin()
    rope = posenc.build(f"rope_axial(freqs='period', min_period={low}, max_period={high})", head_dim=dh)
    got, _ = rope.encode_qk(x, x, q_positions=coords, k_positions=coords)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    assert "min_period=0.25, max_period=40.0" in repr(rope)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"freqs": "period", "min_period": 1.0}, "min_period and max_period go together"),
        ({"min_period": 1.0, "max_period": 2.0}, "with freqs='period'"),
        ({"freqs": "period", "min_period": 2.0, "max_period": 2.0}, "min_period must be below max_period"),
        ({"freqs": "period", "min_period": -1.0, "max_period": 2.0}, "min_period"),
    ],
)
def test_dinov3_periods_are_checked(options, message):
    with pytest.raises(ValueError, match=message):
        posenc.AxialRoPE(16, **options)


def test_the_state_of_a_subclass_that_overrides_a_hook_keeps_its_rows():
    """A subclass that overrides ``encode_qk`` gets a state that calls the hook back; its rows are the
    built-in state's."""

    class Doubled(posenc.AxialRoPE):
        def encode_qk(self, q, k, *, q_positions=None, k_positions=None):
            q, k = super().encode_qk(q, k, q_positions=q_positions, k_positions=k_positions)
            return 2 * q, k

    state, plain = (
        Doubled(16, grid_size=(3, 4)).prepare(12),
        posenc.AxialRoPE(16, grid_size=(3, 4)).prepare(12),
    )
    assert type(state) is not type(plain)
    assert torch.equal(state.q_cos, plain.q_cos) and torch.equal(state.q_sin, plain.q_sin)
    q = torch.randn(1, 2, 12, 16)
    assert torch.equal(state.encode_qk(q, q)[0], 2 * plain.encode_qk(q, q)[0])


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (
            lambda: posenc.AxialRoPE(32, max_freq=12.0),
            "max_freq=12.0 sets the frequencies of freqs='pixel' only",
        ),
        (
            lambda: posenc.AxialRoPE(32, freqs="pixel", base=100.0),
            "base=100.0 is not read with freqs='pixel'",
        ),
        (
            lambda: posenc.AxialRoPE(32, freqs="period", base=100.0, min_period=0.5, max_period=50.0),
            "base=100.0 is not read with min_period and max_period",
        ),
        (
            lambda: grid_positions((4, 6), normalize="max"),
            "normalize='max' sizes the cell centres of kind='center'",
        ),
        (
            lambda: grid_positions((4, 6), kind="center", first_index=1),
            "first_index=1 numbers plain index cells; kind='center' coordinates have no first index",
        ),
        (
            lambda: grid_positions((4, 6), ref_grid=(8, 8), first_index=1),
            "first_index=1 numbers plain index cells; kind='index' with ref_grid coordinates",
        ),
        (
            lambda: posenc.AxialRoPE(32, freqs="pixel", first_index=1),
            r"first_index=1 numbers plain index cells \(freqs='lang' without ref_grid\), got freqs='pixel'",
        ),
        (
            lambda: posenc.AxialRoPE(32, ref_grid=(4, 4), first_index=2),
            r"got freqs='lang' with ref_grid=\(4, 4\)",
        ),
    ],
)
def test_an_option_the_mode_does_not_read_is_refused(make, match):
    """Given, an option of another mode was ignored: the same encoding as without it, unsaid."""
    with pytest.raises(ValueError, match=match):
        make()
