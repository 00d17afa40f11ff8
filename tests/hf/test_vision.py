"""Vision towers with ``rope_type: "axial"`` (Qwen2-VL and its kin): ``from_hf_config`` gives the
:class:`posenc.AxialRoPE` whose rotation equals the tower's own (its ``*VisionRotaryEmbedding``'s cos/sin
through its ``apply_rotary_pos_emb_vision``), whole tensors, at the (h, w) patch positions of
``get_vision_position_ids`` (a non-square image and a second one packed after it, a two-frame video).
"""

from __future__ import annotations

import importlib
import os

import pytest
import torch

import posenc

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()
from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # noqa: E402
from transformers.vision_utils import get_vision_position_ids  # noqa: E402

TOL = {"atol": 2e-5, "rtol": 1e-5}
GRIDS = (torch.tensor([[1, 4, 6], [1, 2, 2]]), torch.tensor([[2, 4, 4]]))
#: model type -> (the tower's rotary class, a small config: head width 16 or 24)
TOWERS = {
    "qwen2_vl_vision": ("Qwen2VLVisionRotaryEmbedding", {"embed_dim": 64, "num_heads": 4, "hidden_size": 96}),
    "qwen2_5_vl_vision": ("Qwen2_5_VLVisionRotaryEmbedding", {"hidden_size": 64, "num_heads": 4}),
    "qwen3_vl_vision": ("Qwen3VLVisionRotaryEmbedding", {"hidden_size": 96, "num_heads": 4}),
    "glm4v_vision": ("Glm4vVisionRotaryEmbedding", {"hidden_size": 64, "num_heads": 4}),
    "paddleocr_vl_vision": ("PaddleOCRVisionRotaryEmbedding", {"hidden_size": 64, "num_attention_heads": 4}),
    "minimax_m3_vl_vision": (
        "MiniMaxM3VLVisionRotaryEmbedding",
        {"hidden_size": 96, "num_attention_heads": 4},
    ),
    # columns before rows: [w | h] twice; [w | h] on neighbouring pairs; (w, h) at each frequency in turn
    "step3p5_vision": ("Step3p7VisionRotaryEmbedding", {"hidden_size": 64, "num_attention_heads": 4}),
    "inkling2_vision": ("Inkling2VisionRotaryEmbedding", {"hidden_size": 64, "num_attention_heads": 4}),
    "kimi_k25_vision": ("Kimi_K25VisionRotaryEmbedding", {"hidden_size": 64, "num_attention_heads": 4}),
    # [x | y] blocks each rotated by its own half split; (x, y) positions (apply_multidimensional_rope)
    "gemma4_vision": (
        "Gemma4VisionRotaryEmbedding",
        {"hidden_size": 64, "num_attention_heads": 4, "head_dim": 16, "num_key_value_heads": 4},
    ),
}


def _tower(model_type: str):
    name, sizes = TOWERS[model_type]
    config = CONFIG_MAPPING[model_type](**sizes, rope_parameters={"rope_type": "axial", "rope_theta": 123.0})
    module = importlib.import_module(type(config).__module__.replace("configuration_", "modeling_"))
    rotary = getattr(module, name)(config)
    if model_type != "gemma4_vision":
        return config, lambda q, k, pos: module.apply_rotary_pos_emb_vision(q, k, *rotary(q, pos))

    def gemma4(q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, ...]:
        cos, sin = rotary(
            q, pos[None]
        )  # pos as its pixel_position_ids, (x, y): posenc takes them as they are
        return tuple(module.apply_multidimensional_rope(x[None], cos, sin, pos[None])[0] for x in (q, k))

    return config, gemma4


@pytest.mark.parametrize("model_type", sorted(TOWERS))
def test_vision_tower_rotation_equals_the_models(model_type: str) -> None:
    config, rotate = _tower(model_type)
    temporal = model_type == "minimax_m3_vl_vision"  # (t, h, w) positions
    head_dim = next(iter(TOWERS[model_type][1].values())) // 4
    gen = torch.Generator().manual_seed(0)
    for form in (config, config.to_dict()):
        enc = posenc.from_hf_config(form)
        assert isinstance(enc, posenc.AxialRoPE) and enc.head_dim == head_dim and enc.base == 123.0
        for grid in GRIDS:
            merge = getattr(config, "spatial_merge_size", None) or 1
            pos = get_vision_position_ids(grid, merge, include_temporal=temporal)
            q, k = (torch.randn(len(pos), 3, head_dim, generator=gen) for _ in range(2))
            q_ref, k_ref = rotate(q, k, pos)  # the tower's (N, heads, dh)
            q_ours, k_ours = enc.encode_qk(
                q.transpose(0, 1)[None], k.transpose(0, 1)[None], q_positions=pos, k_positions=pos
            )
            torch.testing.assert_close(q_ours[0].transpose(0, 1), q_ref, **TOL)
            torch.testing.assert_close(k_ours[0].transpose(0, 1), k_ref, **TOL)


@pytest.mark.parametrize(("grid", "merge"), [((1, 4, 6), 2), ((2, 4, 4), 2), ((3, 6, 9), 3), ((1, 3, 5), 1)])
def test_grid_positions_in_merge_blocks_equal_get_vision_position_ids(grid, merge) -> None:
    """posenc's own merge-block-major patch order (2x2 blocks: the first four patches are rows 0-1, columns
    0-1), for the (h, w) towers (frames repeated) and MiniMax M3 VL's (t, h, w)."""
    g = torch.tensor([grid])
    ours = posenc.functional.grid_positions(grid[1:], merge_size=merge).repeat(grid[0], 1)
    assert torch.equal(ours, get_vision_position_ids(g, merge))
    with_time = posenc.functional.grid_positions(grid, merge_size=merge)
    assert torch.equal(with_time, get_vision_position_ids(g, merge, include_temporal=True))
    if merge == 2:
        assert ours[:4].tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]
    with pytest.raises(ValueError, match=r"merge_size=4 must divide the last two sizes of grid=\(4, 6\)"):
        posenc.functional.grid_positions((4, 6), merge_size=4)


@pytest.mark.parametrize(
    ("model_type", "why"),
    [
        ("hunyuan_vl", r"turns the two channels of a pair by different angles"),
    ],
)
def test_vision_towers_posenc_cannot_express_are_refused(model_type: str, why: str) -> None:
    config = CONFIG_MAPPING[model_type]()
    for form in (config, config.to_dict()):
        with pytest.raises(ValueError, match=why):
            posenc.from_hf_config(form)


def test_vision_axial_config_errors_name_the_field() -> None:
    base = {"model_type": "qwen3_vl_vision", "hidden_size": 64, "num_heads": 4}
    with pytest.raises(ValueError, match=r"rope_parameters must be \{'rope_type': 'axial'"):
        posenc.from_hf_config(
            {**base, "rope_parameters": {"rope_type": "axial", "rope_theta": 1e4, "factor": 2.0}}
        )
    with pytest.raises(ValueError, match=r"missing 'rope_theta'"):
        posenc.from_hf_config({**base, "rope_parameters": {"rope_type": "axial"}})
    with pytest.raises(ValueError, match=r"head_dim=18 does not split into 2 axes"):
        posenc.from_hf_config(
            {**base, "hidden_size": 72, "rope_parameters": {"rope_type": "axial", "rope_theta": 1e4}}
        )


@pytest.mark.parametrize(("sizes", "theta"), [((64, 4, 56, 14), 10000.0), ((96, 2, 60, 20), 123.0)])
def test_llama4_vision_rotation_equals_the_models(sizes, theta) -> None:
    """Llama 4's vision tower: its freqs_ci (every patch of the image_size // patch_size grid, columns first and
    numbered from 1, then the class token unrotated) through its vision_apply_rotary_emb, at posenc's default
    positions (the model's fixed token order), for the config object and its dict."""
    from transformers.models.llama4 import modeling_llama4

    hidden, heads, image, patch = sizes
    config = CONFIG_MAPPING["llama4_vision_model"](
        hidden_size=hidden,
        num_attention_heads=heads,
        image_size=image,
        patch_size=patch,
        rope_parameters={"rope_type": "default", "rope_theta": theta},
    )
    freqs_ci = modeling_llama4.Llama4VisionRotaryEmbedding(config)(torch.zeros(1))
    tokens, head_dim = (image // patch) ** 2 + 1, hidden // heads
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, tokens, heads, head_dim, generator=gen) for _ in range(2))  # its (b, t, h, dh)
    q_ref, k_ref = modeling_llama4.vision_apply_rotary_emb(q, k, freqs_ci)
    for form in (config, config.to_dict()):
        enc = posenc.from_hf_config(form)
        assert (
            isinstance(enc, posenc.AxialRoPE) and enc.base == theta and enc.grid_size == (image // patch,) * 2
        )
        q_ours, k_ours = enc.encode_qk(q.transpose(1, 2), k.transpose(1, 2))
        torch.testing.assert_close(q_ours.transpose(1, 2), q_ref, **TOL)
        torch.testing.assert_close(k_ours.transpose(1, 2), k_ref, **TOL)
    assert torch.equal(q_ours[:, :, -1], q[:, -1])  # the class token, last: unrotated


def test_llama4_vision_config_json_without_a_key_takes_its_class_default() -> None:
    defaults = CONFIG_MAPPING["llama4_vision_model"]()
    want = repr(posenc.from_hf_config(defaults))
    assert repr(posenc.from_hf_config({"model_type": "llama4_vision_model"})) == want
    for key in ("image_size", "patch_size", "rope_parameters", "hidden_size", "num_attention_heads"):
        form = {k: v for k, v in defaults.to_dict().items() if k != key}
        assert repr(posenc.from_hf_config(form)) == want, key


def test_llama4_vision_config_errors_name_the_field() -> None:
    base = {"model_type": "llama4_vision_model", "hidden_size": 64, "num_attention_heads": 4}
    with pytest.raises(ValueError, match=r"its head width 6 must be a multiple of 4"):
        posenc.from_hf_config({**base, "hidden_size": 24})
    with pytest.raises(ValueError, match=r"rope_parameters must be \{'rope_type': 'default'"):
        posenc.from_hf_config(
            {**base, "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}}
        )


@pytest.mark.parametrize(("image_size", "window"), [(112, 4), (140, 4), (56, 4)])
def test_sam3_vit_rotation_equals_the_models(image_size, window) -> None:
    """SAM 3's ViT, layer by layer: a windowed layer's rotary on one window's patches, a global layer's on the
    whole grid with coordinates scaled to span a window (a 10x10 grid: windows padded, coordinates * 0.4; a
    4x4 grid: the window's own), each through its apply_rotary_pos_emb_2d, config object and dict alike."""
    # (imported as the zoo does: `from transformers.models.sam3 import ...` asks for torchvision)
    modeling_sam3 = importlib.import_module("transformers.models.sam3.modeling_sam3")
    config = CONFIG_MAPPING["sam3_vit_model"](
        hidden_size=64,
        intermediate_size=64,
        num_attention_heads=2,
        num_hidden_layers=3,
        image_size=image_size,
        patch_size=14,
        window_size=window,
        global_attn_indexes=[1],
        rope_parameters={"rope_type": "axial", "rope_theta": 123.0},
    )
    gen = torch.Generator().manual_seed(0)
    for form in (config, config.to_dict()):
        encodings = posenc.hf.layer_encodings(form)
        assert len(encodings) == 3 and [e.grid_size for e in encodings] == [
            (window, window),
            (image_size // 14,) * 2,
            (window, window),
        ]
        for i, enc in enumerate(encodings):
            layer = modeling_sam3.Sam3ViTLayer(config, window_size=0 if i == 1 else window)
            cos, sin = layer.rotary_emb(torch.zeros(1), layer.position_ids)
            q, k = (torch.randn(1, 2, len(layer.position_ids), 32, generator=gen) for _ in range(2))
            q_ref, k_ref = modeling_sam3.apply_rotary_pos_emb_2d(q, k, cos=cos, sin=sin)
            q_ours, k_ours = enc.encode_qk(q, k)
            torch.testing.assert_close(q_ours, q_ref, **TOL)
            torch.testing.assert_close(k_ours, k_ref, **TOL)


def test_sam3_vit_config_json_takes_its_class_defaults_and_errors_name_the_field() -> None:
    defaults = CONFIG_MAPPING["sam3_vit_model"]()
    want = repr(posenc.hf.layer_encodings(defaults))
    assert repr(posenc.hf.layer_encodings({"model_type": "sam3_vit_model"})) == want
    base = {"model_type": "sam3_vit_model", "hidden_size": 64, "num_attention_heads": 2}
    with pytest.raises(ValueError, match=r"image_size=\[112, 140\] over patch_size=14 is not a square grid"):
        posenc.hf.layer_encodings({**base, "image_size": [112, 140]})
    with pytest.raises(ValueError, match=r"its head width 6 must be a multiple of 4"):
        posenc.hf.layer_encodings({**base, "hidden_size": 12})
    with pytest.raises(TypeError, match=r"global_attn_indexes must be a list of ints, got 7"):
        posenc.hf.layer_encodings({**base, "global_attn_indexes": 7})
    with pytest.raises(ValueError, match=r"rope_parameters must be \{'rope_type': 'axial'"):
        posenc.hf.layer_encodings(
            {**base, "rope_parameters": {"rope_type": "axial", "rope_theta": 1e4, "factor": 2}}
        )


@pytest.mark.parametrize(
    ("model_type", "grid"),
    [
        ("sam2_video", {"memory_attention_rope_feat_sizes": [6, 4]}),
        # (its class writes image_size // patch_size over the feature sizes given)
        ("sam3_tracker_video", {"image_size": 70, "memory_attention_rope_feat_sizes": [6, 4]}),
    ],
)
def test_sam_video_memory_attention_rotation_equals_the_models(model_type, grid) -> None:
    """SAM 2's and SAM 3's trackers: the memory attention's rotary on its (w, h) grid of features (SAM 2's
    6 x 4, SAM 3's 5 x 5), its self-attention at posenc's default positions, its cross-attention's keys (the grid
    for each of two memory frames, then three object pointer tokens, unrotated) at the positions posenc's docs
    give."""
    modeling = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    config = CONFIG_MAPPING[model_type](
        memory_attention_hidden_size=64,
        memory_attention_num_attention_heads=2,
        memory_attention_num_layers=3,
        rope_parameters={"rope_type": "axial", "rope_theta": 123.0},
        **grid,
    )
    tokens = 24 if model_type == "sam2_video" else 25
    attention = next(o for n, o in vars(modeling).items() if n.endswith("VideoMemoryAttention"))(config)
    cos, sin = attention.rotary_emb(torch.zeros(1), attention.position_ids)
    gen = torch.Generator().manual_seed(0)
    q, k, memory = (torch.randn(1, 2, n, 32, generator=gen) for n in (tokens, tokens, 2 * tokens + 3))
    q_ref, k_ref = modeling.apply_rotary_pos_emb_2d(q, k, cos, sin)
    _, memory_ref = modeling.apply_rotary_pos_emb_2d(
        q, memory, cos, sin, num_k_exclude_rope=3, repeat_freqs_k=True
    )
    for form in (config, config.to_dict()):
        layers = posenc.hf.layer_encodings(form)
        assert len(layers) == 3 and len(set(layers)) == 1
        rope = posenc.from_hf_config(form)
        assert rope.grid_size == ((4, 6) if tokens == 24 else (5, 5)) and rope.base == 123.0
        q_ours, k_ours = rope.encode_qk(q, k)
        torch.testing.assert_close(q_ours, q_ref, **TOL)
        torch.testing.assert_close(k_ours, k_ref, **TOL)
        keys = torch.cat((rope.grid_positions().repeat(2, 1), torch.zeros(3, 2).long()))
        _, memory_ours = rope.encode_qk(q, memory, k_positions=keys)
        torch.testing.assert_close(memory_ours, memory_ref, **TOL)
    defaults = CONFIG_MAPPING[model_type]()
    assert repr(posenc.from_hf_config({"model_type": model_type})) == repr(posenc.from_hf_config(defaults))
    with pytest.raises(
        ValueError,
        match=r"memory_attention_hidden_size=64 does not split into downsample_rate \* heads = 1 \* 3",
    ):
        posenc.from_hf_config(
            {
                "model_type": model_type,
                "memory_attention_num_attention_heads": 3,
                "memory_attention_hidden_size": 64,
            }
        )
    with pytest.raises(ValueError, match=r"its head width 18 must be a multiple of 4"):
        posenc.from_hf_config(
            {
                "model_type": model_type,
                "memory_attention_hidden_size": 36,
                "memory_attention_num_attention_heads": 2,
            }
        )
    given = {"memory_attention_rope_feat_sizes": [6, 4]}  # (SAM 3's class writes 72 x 72 over them)
    want = repr(posenc.from_hf_config(CONFIG_MAPPING[model_type](**given)))
    assert repr(posenc.from_hf_config({"model_type": model_type, **given})) == want
    if model_type == "sam2_video":
        with pytest.raises(ValueError, match=r"memory_attention_rope_feat_sizes must be \(w, h\), got 64"):
            posenc.from_hf_config({"model_type": model_type, "memory_attention_rope_feat_sizes": 64})


def test_edgetam_video_memory_attention_rotation_equals_the_models() -> None:
    """EdgeTAM's tracker: its memory attention's self-attention on its (w, h) = (6, 4) grid at posenc's default
    positions; its cross-attention's keys, per memory frame two temporal tokens unrotated then its own (3, 2) key
    grid, then three object pointer tokens unrotated, at the positions the converter's docstring gives."""
    modeling = importlib.import_module("transformers.models.edgetam_video.modeling_edgetam_video")
    config = CONFIG_MAPPING["edgetam_video"](
        memory_attention_hidden_size=64,
        memory_attention_num_attention_heads=2,
        memory_attention_rope_feat_sizes=[6, 4],
        memory_attention_rope_k_sizes=[3, 2],
        rope_parameters={"rope_type": "axial", "rope_theta": 123.0},
    )
    attention = modeling.EdgeTamVideoMemoryAttention(config)
    cos, sin = attention.rotary_emb(torch.zeros(1), attention.position_ids)
    cos_k, sin_k = attention.rotary_emb(torch.zeros(1), attention.position_ids_k)
    gen = torch.Generator().manual_seed(0)
    q, k, memory = (torch.randn(1, 2, n, 32, generator=gen) for n in (24, 24, 2 * (2 + 6) + 3))
    q_ref, k_ref = modeling.apply_rotary_pos_emb_2d_self_attn(q, k, cos, sin)
    _, memory_ref = modeling.apply_rotary_pos_emb_2d_cross_attn(
        q, memory, cos, sin, cos_k, sin_k, num_k_exclude_rope=3, repeat_freqs_k=2
    )
    for form in (config, config.to_dict()):
        assert len(posenc.hf.layer_encodings(form)) == 2  # (its class's memory_attention_num_layers)
        rope = posenc.from_hf_config(form)
        torch.testing.assert_close(rope.encode_qk(q, k), (q_ref, k_ref), **TOL)
        frame = rope.grid_positions((2, 3), num_prefix_tokens=2)
        keys = torch.cat((frame.repeat(2, 1), torch.zeros(3, 2).long()))
        torch.testing.assert_close(rope.encode_qk(q, memory, k_positions=keys)[1], memory_ref, **TOL)


@pytest.mark.parametrize(("hidden", "heads", "factor"), [(256, 8, 4.0), (256, 2, 1.0)])
def test_efficientloftr_rotation_equals_the_models(hidden, heads, factor) -> None:
    """EfficientLoFTR: its rotary over the whole hidden vector (before the heads are split), row and column at
    each frequency, cells numbered from 1, on the aggregated grid of a non-square feature map, through its
    apply_rotary_pos_emb, config object and dict; a partial factor that does not span the vector is refused."""
    modeling = importlib.import_module("transformers.models.efficientloftr.modeling_efficientloftr")
    params = {"rope_type": "default", "rope_theta": 123.0, "partial_rotary_factor": factor}
    config = CONFIG_MAPPING["efficientloftr"](
        hidden_size=hidden, num_attention_heads=heads, rope_parameters=params
    )
    cos, sin = (
        x.flatten(1, 2) for x in modeling.EfficientLoFTRRotaryEmbedding(config)(torch.zeros(1, 1, 18, 13))
    )
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 12, 1, hidden, generator=gen) for _ in range(2))  # its (b, t, 1, hidden_size)
    q_ref, k_ref = modeling.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2)
    for form in (config, config.to_dict()):
        rope = posenc.from_hf_config(form)
        cells = rope.grid_positions((4, 3))  # ((18 - 4) // 4 + 1, (13 - 4) // 4 + 1), from (1, 1)
        q_ours, k_ours = rope.encode_qk(
            q.transpose(1, 2), k.transpose(1, 2), q_positions=cells, k_positions=cells
        )
        torch.testing.assert_close(q_ours.transpose(1, 2), q_ref, **TOL)
        torch.testing.assert_close(k_ours.transpose(1, 2), k_ref, **TOL)
    with pytest.raises(
        ValueError, match=r"partial_rotary_factor'\]=2.0 gives 32 frequencies, but its code turns"
    ):
        posenc.from_hf_config(
            {
                **config.to_dict(),
                "num_attention_heads": 8,
                "rope_parameters": {**params, "partial_rotary_factor": 2.0},
            }
        )
    assert repr(posenc.from_hf_config({"model_type": "efficientloftr"})) == repr(
        posenc.from_hf_config(CONFIG_MAPPING["efficientloftr"]())
    )
