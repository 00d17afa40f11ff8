"""MRoPE: parity with transformers' Qwen2-VL / Qwen2.5-VL / Qwen3-VL rotary embeddings on the
position layouts their own ``get_rope_index`` makes for images and videos; text equals RoPE."""

from __future__ import annotations

import copy
import logging

import pytest
import torch

import posenc
from posenc.functional import axes_last, mrope_axes, rope_layout_permutation

transformers = pytest.importorskip("transformers")
from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as hf25  # noqa: E402
from transformers.models.qwen2_vl import modeling_qwen2_vl as hf2  # noqa: E402
from transformers.models.qwen3_vl import modeling_qwen3_vl as hf3  # noqa: E402

#: float32 rotation, cos/sin from float32 (transformers) vs float64 (posenc) angles at positions < 100
ATOL = 2e-5
HEAD_DIM, SECTION = 32, [4, 6, 6]
IMAGE, VIDEO, START = 90, 91, 92
logging.getLogger("transformers").setLevel(logging.ERROR)


def _text(**rope):
    return dict(
        hidden_size=64,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_hidden_layers=1,
        intermediate_size=32,
        vocab_size=100,
        head_dim=HEAD_DIM,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": SECTION, **rope},
    )


VISION = dict(
    depth=1,
    hidden_size=16,
    num_heads=2,
    in_channels=3,
    patch_size=2,
    spatial_merge_size=2,
    temporal_patch_size=2,
)
TOKENS = dict(image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=START)
# one image of 1×4×6 patches (2×3 tokens after merging) and one video of 2×4×4 (2×2×2 tokens)
IDS = torch.tensor(
    [
        [1, 2, START] + [IMAGE] * 6 + [3, 4, START] + [VIDEO] * 8 + [5],
        [7, START] + [VIDEO] * 8 + [6, START] + [IMAGE] * 6 + [8, 9, 10],
    ]
)
GRIDS = dict(
    image_grid_thw=torch.tensor([[1, 4, 6], [1, 4, 6]]), video_grid_thw=torch.tensor([[2, 4, 4], [2, 4, 4]])
)


def _positions(model) -> torch.Tensor:
    types = torch.zeros_like(IDS, dtype=torch.int32)
    types[IDS == IMAGE], types[IDS == VIDEO] = 1, 2
    pos, _ = model.get_rope_index(IDS, types, **GRIDS)
    return pos  # (3, b, t)


@pytest.fixture(scope="module")
def qwen2():
    cfg = transformers.Qwen2VLConfig(text_config=_text(), vision_config={**VISION, "embed_dim": 16}, **TOKENS)
    return hf2.Qwen2VLModel(cfg).eval()


def _hf_rotate(rotary, apply, q, k, pos):
    cos, sin = rotary(q, pos)
    return apply(q, k, cos, sin)


def test_qwen2_vl_parity_on_image_and_video_positions(qwen2, device):
    pos = _positions(qwen2)
    assert not torch.equal(pos[0], pos[1])  # a real multimodal layout, not text
    torch.manual_seed(0)
    q, k = torch.randn(2, 2, IDS.shape[1], HEAD_DIM), torch.randn(2, 1, IDS.shape[1], HEAD_DIM)
    q, k, pos = q.to(device), k.to(device), pos.to(device)
    rotary = hf2.Qwen2VLRotaryEmbedding(qwen2.config.text_config).to(device)
    ref_q, ref_k = _hf_rotate(rotary, hf2.apply_rotary_pos_emb, q, k, pos)
    ours = posenc.MRoPE(HEAD_DIM, mrope_section=SECTION).to(device)
    out_q, out_k = ours(q, k, axes_last(pos), axes_last(pos))
    torch.testing.assert_close(out_q, ref_q, atol=ATOL, rtol=0)
    torch.testing.assert_close(out_k, ref_k, atol=ATOL, rtol=0)


@pytest.mark.parametrize(
    "rope",
    [
        {"rope_type": "linear", "factor": 2.0},
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
        {"rope_type": "dynamic", "factor": 2.0},
    ],
)
def test_qwen2_vl_parity_with_rope_types(qwen2, rope, device):
    text = _text(**rope)
    text["max_position_embeddings"] = 16
    cfg = transformers.Qwen2VLConfig(
        text_config=text, vision_config={**VISION, "embed_dim": 16}, **TOKENS
    ).text_config
    pos = _positions(qwen2) + 20  # past max_position_embeddings: dynamic scales, yarn's factor shows
    torch.manual_seed(1)
    q, k = torch.randn(2, 2, IDS.shape[1], HEAD_DIM), torch.randn(2, 2, IDS.shape[1], HEAD_DIM)
    q, k, pos = q.to(device), k.to(device), pos.to(device)
    rotary = hf2.Qwen2VLRotaryEmbedding(cfg).to(device)
    ref_q, ref_k = _hf_rotate(rotary, hf2.apply_rotary_pos_emb, q, k, pos)
    ours = posenc.MRoPE(HEAD_DIM, mrope_section=SECTION, scaling=dict(cfg.rope_parameters), max_len=16)
    ours.to(device)
    out_q, out_k = ours(q, k, axes_last(pos), axes_last(pos))
    torch.testing.assert_close(out_q, ref_q, atol=ATOL, rtol=0)
    torch.testing.assert_close(out_k, ref_k, atol=ATOL, rtol=0)


def test_qwen2_5_vl_parity_with_video_timing(device):
    cfg = transformers.Qwen2_5_VLConfig(
        text_config=_text(),
        vision_config={**VISION, "out_hidden_size": 64, "intermediate_size": 16},
        **TOKENS,
    )
    model = hf25.Qwen2_5_VLModel(cfg).eval()
    types = torch.zeros_like(IDS, dtype=torch.int32)
    types[IDS == IMAGE], types[IDS == VIDEO] = 1, 2
    pos, _ = model.get_rope_index(IDS, types, second_per_grid_ts=torch.tensor([0.5, 2.0]), **GRIDS)
    torch.manual_seed(2)
    q, k = torch.randn(2, 2, IDS.shape[1], HEAD_DIM), torch.randn(2, 2, IDS.shape[1], HEAD_DIM)
    q, k, pos = q.to(device), k.to(device), pos.to(device)
    rotary = hf25.Qwen2_5_VLRotaryEmbedding(cfg.text_config).to(device)
    ref_q, ref_k = _hf_rotate(rotary, hf25.apply_rotary_pos_emb, q, k, pos)
    ours = posenc.MRoPE(HEAD_DIM, mrope_section=SECTION).to(device)
    out_q, out_k = ours(q, k, axes_last(pos), axes_last(pos))
    torch.testing.assert_close(out_q, ref_q, atol=ATOL, rtol=0)
    torch.testing.assert_close(out_k, ref_k, atol=ATOL, rtol=0)


@pytest.mark.parametrize("section", [[6, 5, 5], [4, 3, 3], [12, 10, 10]])  # sum = pairs, fewer, more
def test_qwen3_vl_interleaved_parity(qwen2, device, section):
    """Interleaved sections that do not sum to the pairs work as transformers' recomposition does:
    height and width where their stride-3 indices exist, time elsewhere."""
    text = transformers.Qwen3VLTextConfig(
        **{
            **_text(),
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 5000.0,
                "mrope_section": section,
                "mrope_interleaved": True,
            },
        }
    )
    pos = _positions(qwen2) * 3  # larger and distinct per axis
    torch.manual_seed(3)
    q, k = torch.randn(2, 2, IDS.shape[1], HEAD_DIM), torch.randn(2, 2, IDS.shape[1], HEAD_DIM)
    q, k, pos = q.to(device), k.to(device), pos.to(device)
    rotary = hf3.Qwen3VLTextRotaryEmbedding(text).to(device)
    ref_q, ref_k = _hf_rotate(rotary, hf3.apply_rotary_pos_emb, q, k, pos)
    spec = f"mrope(mrope_section={section}, base=5000.0, interleaved=True)"
    ours = posenc.build(spec, head_dim=HEAD_DIM).to(device)
    out_q, out_k = ours(q, k, axes_last(pos), axes_last(pos))
    torch.testing.assert_close(out_q, ref_q, atol=ATOL, rtol=0)
    torch.testing.assert_close(out_k, ref_k, atol=ATOL, rtol=0)
    if sum(section) == HEAD_DIM // 2:  # (the chunked form needs the sections to cover the pairs)
        chunked = posenc.MRoPE(HEAD_DIM, mrope_section=section, base=5000.0).to(device)(
            q, k, axes_last(pos), axes_last(pos)
        )
        assert (chunked[0] - ref_q).abs().max() > 1e-2  # the two layouts differ on these positions


def test_axes_of_pairs():
    assert mrope_axes([2, 1, 1]).tolist() == [0, 0, 1, 2]
    # Qwen3-VL: t h w t h w ... up to 3 * section, then time
    assert mrope_axes([4, 2, 2], interleaved=True).tolist() == [0, 1, 2, 0, 1, 2, 0, 0]
    # ERNIE 4.5 VL: h w h w ... over the spatial pairs, then time
    assert mrope_axes([2, 2, 2], interleaved="hw").tolist() == [1, 2, 1, 2, 0, 0]
    # NeoMME: two sections (rows, columns), alternating over every pair
    assert mrope_axes([3, 3], interleaved="hw").tolist() == [0, 1, 0, 1, 0, 1]


def test_ernie4_5_vl_parity():
    """ERNIE 4.5 VL's text rotary: its config's (h, w, t) sections, height and width alternating over
    neighbouring pairs, time last; against its rotary module and apply function at distinct (t, h, w)."""
    from transformers.models.ernie4_5_vl_moe import modeling_ernie4_5_vl_moe as ernie

    config = transformers.Ernie4_5_VLMoeTextConfig(
        hidden_size=64, num_attention_heads=2, head_dim=HEAD_DIM,
        rope_parameters={"rope_type": "default", "rope_theta": 500.0, "mrope_section": [6, 6, 4]},
    )  # fmt: skip
    pos = torch.stack([torch.arange(20), torch.arange(20) // 3 + 5, torch.arange(20) % 4])[
        :, None
    ]  # (3, 1, t)
    torch.manual_seed(5)
    q, k = torch.randn(1, 2, 20, HEAD_DIM), torch.randn(1, 2, 20, HEAD_DIM)
    ref_q, ref_k = _hf_rotate(
        ernie.Ernie4_5_VLMoeTextRotaryEmbedding(config), ernie.apply_rotary_pos_emb, q, k, pos
    )
    ours = posenc.MRoPE(HEAD_DIM, mrope_section=[4, 6, 6], base=500.0, interleaved="hw", layout="interleaved")
    out_q, out_k = ours(q, k, axes_last(pos), axes_last(pos))
    torch.testing.assert_close(out_q, ref_q, atol=ATOL, rtol=0)
    torch.testing.assert_close(out_k, ref_k, atol=ATOL, rtol=0)
    assert "interleaved='hw'" in repr(ours)
    assert (
        posenc.build("mrope(mrope_section=[4, 6, 6], interleaved='hw')", head_dim=HEAD_DIM).interleaved
        == "hw"
    )


@pytest.mark.parametrize(("layer_type", "rotated"), [("full_attention", 8), ("sliding_attention", 32)])
def test_neomme_parity(layer_type, rotated):
    """NeoMME's rotary: per layer type, two position axes (rows, columns) alternating over neighbouring
    pairs, a partial rotation on full attention; against its rotary module and apply function at distinct
    (row, column) positions."""
    from transformers.models.neomme import modeling_neomme as neomme

    config = transformers.NeoMMEConfig(
        hidden_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=HEAD_DIM, num_hidden_layers=2,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
        },
    )  # fmt: skip
    pos = torch.stack([torch.arange(20) // 5 + 3, torch.arange(20) % 5])[:, None]  # (2, 1, t): row, column
    torch.manual_seed(6)
    q, k = torch.randn(1, 2, 20, HEAD_DIM), torch.randn(1, 1, 20, HEAD_DIM)
    cos, sin = neomme.NeoMMERotaryEmbedding(config)(q, pos, layer_type)
    ref_q, ref_k = neomme.apply_rotary_pos_emb(q, k, cos, sin)
    base = config.rope_parameters[layer_type]["rope_theta"]
    ours = posenc.MRoPE(
        HEAD_DIM,
        mrope_section=[rotated // 4] * 2,
        base=base,
        interleaved="hw",
        scaling={"rope_type": "default", "partial_rotary_factor": rotated / HEAD_DIM},
    )
    out_q, out_k = ours(q, k, axes_last(pos), axes_last(pos))
    torch.testing.assert_close(out_q, ref_q, atol=ATOL, rtol=0)
    torch.testing.assert_close(out_k, ref_k, atol=ATOL, rtol=0)
    assert (out_q[..., rotated:] == q[..., rotated:]).all()


@pytest.mark.parametrize("interleaved", [False, True])
def test_text_positions_equal_rope(interleaved):
    torch.manual_seed(4)
    q, k = torch.randn(2, 4, 9, HEAD_DIM), torch.randn(2, 2, 12, HEAD_DIM)
    rope, mrope = (
        posenc.RoPE(HEAD_DIM, base=500.0),
        posenc.MRoPE(HEAD_DIM, mrope_section=SECTION, base=500.0, interleaved=interleaved),
    )
    kp = torch.randint(0, 300, (2, 12))
    for kwargs in ({}, {"k_positions": kp}, {"q_positions": kp[:, 3:], "k_positions": kp}):
        want, got = rope.encode_qk(q, k, **kwargs), mrope.encode_qk(q, k, **kwargs)
        torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    same = kp[..., None].expand(2, 12, 3)  # the same position on every axis, given with axes
    torch.testing.assert_close(
        mrope.encode_qk(q, k, k_positions=same), rope.encode_qk(q, k, k_positions=kp), atol=1e-6, rtol=0
    )


@pytest.mark.parametrize("interleaved", [False, True])
def test_interleaved_pairs_are_the_half_layout_with_channels_permuted(interleaved, qwen2):
    """GLM-4V / HunYuan V4 VL pair channels (2i, 2i+1): pair i keeps its frequency and axis, so the
    rotation is the half layout's on channels reordered by rope_layout_permutation (a partial head too)."""
    pos = axes_last(_positions(qwen2))  # (b, t, 3)
    torch.manual_seed(6)
    q, k = torch.randn(2, 4, pos.shape[1], HEAD_DIM), torch.randn(2, 2, pos.shape[1], HEAD_DIM)
    for rotary_dim in (HEAD_DIM, HEAD_DIM // 2):
        kwargs = {
            "base": 500.0,
            "interleaved": interleaved,
            "scaling": {"partial_rotary_factor": rotary_dim / HEAD_DIM},
        }
        section = [s * rotary_dim // HEAD_DIM for s in SECTION]
        half = posenc.MRoPE(HEAD_DIM, mrope_section=section, **kwargs)
        pairs = posenc.MRoPE(HEAD_DIM, mrope_section=section, layout="interleaved", **kwargs)
        to_half = rope_layout_permutation(HEAD_DIM, rotary_dim, to="half")
        back = torch.argsort(to_half)
        want = [x[..., back] for x in half.encode_qk(q[..., to_half], k[..., to_half], k_positions=pos)]
        torch.testing.assert_close(pairs.encode_qk(q, k, k_positions=pos), tuple(want), atol=1e-6, rtol=0)
    assert "layout='interleaved'" in repr(pairs)


def test_attention_and_kv_cache_decoding_equal_full_forward(qwen2):
    pos = axes_last(_positions(qwen2))  # (b, t, 3)
    mrope = posenc.MRoPE(HEAD_DIM, mrope_section=SECTION)
    torch.manual_seed(5)
    t = pos.shape[1]
    q, k, v = (torch.randn(2, 2, t, HEAD_DIM) for _ in range(3))
    full = posenc.attention(q, k, v, mrope, causal=True, q_positions=pos, k_positions=pos)
    state = mrope.prepare(t, q_positions=pos, batch=2)
    assert (state.q_len, state.k_len) == (t, t)
    torch.testing.assert_close(posenc.attention(q, k, v, state, causal=True), full)
    # the last 3 tokens decode against all keys (already rotated keys are re-rotated here: the same call)
    step = posenc.attention(q[:, :, -3:], k, v, mrope, causal=True, q_positions=pos[:, -3:], k_positions=pos)
    torch.testing.assert_close(step, full[:, :, -3:], atol=1e-6, rtol=0)
    # chunked backend narrows the state's tables
    chunked = posenc.attention(q, k, v, state, causal=True, backend="chunked", chunk_size=5)
    torch.testing.assert_close(chunked, full, atol=1e-6, rtol=0)


def test_caches_state_dict_dtype_copy():
    mrope = posenc.MRoPE(HEAD_DIM, mrope_section=SECTION)
    assert mrope.state_dict() == {}
    half = copy.deepcopy(mrope).to(torch.bfloat16)
    assert half.inv_freq.dtype == torch.float32 and half.axis.dtype == torch.long
    meta = posenc.MRoPE(HEAD_DIM, mrope_section=SECTION, device="meta").to_empty(device="cpu")
    torch.testing.assert_close(meta.inv_freq, mrope.inv_freq)
    assert torch.equal(meta.axis, mrope.axis)
    q = torch.randn(1, 2, 5, HEAD_DIM, dtype=torch.float64)
    out, _ = mrope(q, q, torch.arange(15).view(5, 3), torch.arange(15).view(5, 3))
    assert out.dtype == torch.float64


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"mrope_section": [4, 6, 5]}, ValueError, r"sums to 15, expected head_dim / 2 = 16"),
        (
            {"mrope_section": [3, 3], "interleaved": "hw", "scaling": {"partial_rotary_factor": 0.5}},
            ValueError,
            r"sums to 6, expected rotary_dim / 2 = 8 \(one entry per axis\)",
        ),
        ({"mrope_section": [8, 8], "interleaved": True}, ValueError, "three sections"),
        (
            {"mrope_section": [4, 6, 6], "interleaved": "yes"},
            ValueError,
            "interleaved must be False, True or 'hw'",
        ),
        (
            {"mrope_section": [4, 6, 6], "interleaved": 1},
            TypeError,
            "interleaved must be False, True or 'hw', got 1",
        ),
        ({"mrope_section": [6, 6, 4], "interleaved": "hw"}, ValueError, "their sections must be equal"),
        ({"mrope_section": [10, 6], "interleaved": "hw"}, ValueError, "their sections must be equal"),
        (
            {"mrope_section": [4, 4, 4, 4], "interleaved": "hw"},
            ValueError,
            r"needs two or three sections \(\(h, w\) or \(t, h, w\)\), got mrope_section=\[4, 4, 4, 4\]",
        ),
        (
            {"mrope_section": [2, 6, 6], "interleaved": "hw"},
            ValueError,
            "sums to 14, expected head_dim / 2 = 16",
        ),
        ({"mrope_section": "4,6,6"}, TypeError, "mrope_section must be a list"),
        ({"mrope_section": [4, 6, 6], "scaling": {"mrope_section": [6, 5, 5]}}, ValueError, "conflicts"),
        # Qwen3-VL's dict says its sections interleave: chunked sections would rotate every pair wrongly
        (
            {"mrope_section": [4, 6, 6], "scaling": {"mrope_interleaved": True}},
            ValueError,
            r"scaling\['mrope_interleaved'\]=True conflicts with interleaved=False; pass interleaved=True",
        ),
        (
            {"mrope_section": [4, 6, 6], "interleaved": True, "scaling": {"mrope_interleaved": False}},
            ValueError,
            r"scaling\['mrope_interleaved'\]=False conflicts with interleaved=True",
        ),
        (
            {"mrope_section": [4, 6, 6], "layout": "neox"},
            ValueError,
            r"layout must be one of \['half', 'interleaved'\], got 'neox'",
        ),
    ],
)
def test_constructor_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        posenc.MRoPE(HEAD_DIM, **kwargs)


def test_position_errors():
    mrope = posenc.MRoPE(HEAD_DIM, mrope_section=SECTION)
    q = torch.randn(1, 2, 5, HEAD_DIM)
    with pytest.raises(ValueError, match=r"\(seq, 3\) or \(batch, seq, 3\).*got \(5, 2\)"):
        mrope(q, q, torch.zeros(5, 2, dtype=torch.long))
    with pytest.raises(TypeError, match="integer or floating dtype"):
        mrope(q, q, torch.zeros(5, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="non-negative"):
        mrope(q, q, -torch.ones(5, 3) / 2)
    with pytest.raises(ValueError, match="non-negative"):
        mrope(q, q, -torch.ones(5, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="has 4 positions, expected 5"):
        mrope(q, q, torch.zeros(4, 3, dtype=torch.long))


def test_1d_encodings_reject_axis_positions():
    q = torch.randn(1, 2, 5, HEAD_DIM)
    with pytest.raises(ValueError, match=r"must have shape \(seq,\) or \(batch, seq\).*rank 3"):
        posenc.RoPE(HEAD_DIM)(q, q, torch.zeros(1, 5, 3, dtype=torch.long))


@pytest.mark.slow
def test_compiled_equals_eager():
    mrope = posenc.MRoPE(HEAD_DIM, mrope_section=SECTION)
    pos = torch.randint(0, 50, (2, 7, 3))
    q, k = torch.randn(2, 2, 7, HEAD_DIM), torch.randn(2, 2, 7, HEAD_DIM)
    compiled = torch.compile(lambda q, k, p: mrope(q, k, p, p), fullgraph=True)
    torch.testing.assert_close(compiled(q, k, pos), mrope(q, k, pos, pos))
