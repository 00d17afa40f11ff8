"""mrope_positions: equal to transformers' Qwen2-VL / Qwen2.5-VL ``get_rope_index`` on whole tensors
(random layouts of text, images and videos, left padding, video time scales) and to Qwen2.5-Omni's
(time-aligned videos, audio, videos interleaved with their audio) and ERNIE 4.5 VL's, packed documents equal to each
document alone, and the rotation of the model's own rotary module on those positions."""

from __future__ import annotations

import importlib
import logging
import types

import pytest
import torch

import posenc
from posenc.functional import axes_last, mrope_positions

transformers = pytest.importorskip("transformers")
from transformers.models.qwen2_5_omni import modeling_qwen2_5_omni as hfo  # noqa: E402
from transformers.models.qwen2_5_omni import processing_qwen2_5_omni as hfo_proc  # noqa: E402
from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as hf25  # noqa: E402
from transformers.models.qwen2_vl import modeling_qwen2_vl as hf2  # noqa: E402
from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as hfq3  # noqa: E402

logging.getLogger("transformers").setLevel(logging.ERROR)
TEXT, IMAGE, VIDEO, AUDIO = 0, 1, 2, 3
MODELS = {
    "qwen2_vl": (hf2.Qwen2VLModel, transformers.Qwen2VLConfig),
    "qwen2_5_vl": (hf25.Qwen2_5_VLModel, transformers.Qwen2_5_VLConfig),
}


def _get_rope_index(model: str, token_types, **kwargs):
    """transformers' own get_rope_index, called on its default config (no weights, nothing downloaded)."""
    cls, config_cls = MODELS[model]
    host = types.SimpleNamespace(config=config_cls())
    host.get_vision_position_ids = types.MethodType(cls.get_vision_position_ids, host)
    if model == "qwen2_vl":
        kwargs.pop("second_per_grid_ts", None)
    return cls.get_rope_index(host, token_types, token_types, **kwargs)


def _document(
    gen: torch.Generator, merge: int = 2, *, timestamps: bool = False, newlines: bool = False
) -> tuple[list[int], list[list[int]], list[list[int]]]:
    """(token types, image grids, video grids) of one random document: text runs between images and videos
    (``timestamps``: and one text token between a video's frames, as Qwen3-VL's and GLM-4V's processors write;
    ``newlines``: one more image or video token after each row, as HunYuan V4 VL's)."""
    kinds, images, videos = [], [], []
    for _ in range(int(torch.randint(1, 5, (1,), generator=gen))):
        kinds += [TEXT] * int(torch.randint(1, 4, (1,), generator=gen))
        kind = int(torch.randint(0, 3, (1,), generator=gen))
        if kind == TEXT:
            continue
        t = 1 if kind == IMAGE else int(torch.randint(1, 4, (1,), generator=gen))
        h, w = (merge * int(torch.randint(1, 4, (1,), generator=gen)) for _ in range(2))
        (images if kind == IMAGE else videos).append([t, h, w])
        frame = [kind] * ((h // merge) * (w // merge + newlines))
        kinds += _frames(frame, t, timestamps)
    return kinds, images, videos


def _frames(frame: list[int], t: int, timestamps: bool) -> list[int]:
    """``t`` frames of tokens, one text token (a timestamp) between each two if ``timestamps``."""
    out = list(frame)
    for _ in range(t - 1):
        out += [TEXT] * timestamps + frame
    return out


def _batch(
    gen: torch.Generator,
    rows: int,
    *,
    pad: bool,
    merge: int = 2,
    timestamps: bool = False,
    newlines: bool = False,
):
    """Rows of random documents, left padded to one length; the inputs of both functions."""
    docs = [_document(gen, merge, timestamps=timestamps, newlines=newlines) for _ in range(rows)]
    t = max(len(d[0]) for d in docs) + (2 if pad else 0)
    token_types = torch.zeros(rows, t, dtype=torch.long)
    mask = torch.zeros(rows, t, dtype=torch.long)
    for r, (kinds, _, _) in enumerate(docs):
        token_types[r, t - len(kinds) :] = torch.tensor(kinds)
        mask[r, t - len(kinds) :] = 1
    grids = {}
    for name, i in (("image_grid_thw", 1), ("video_grid_thw", 2)):
        found = [g for d in docs for g in d[i]]
        if found:
            grids[name] = torch.tensor(found)
    seconds = (
        torch.rand(len(grids.get("video_grid_thw", [])), generator=gen) * 2
    )  # float32, as processors give
    return token_types, mask, grids, seconds


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("pad", [False, True])
def test_equals_get_rope_index(model, pad):
    gen = torch.Generator().manual_seed(0)
    tokens_per_second = getattr(MODELS[model][1]().vision_config, "tokens_per_second", None)
    for _ in range(12):
        token_types, mask, grids, seconds = _batch(gen, 3, pad=pad)
        if not grids:
            continue
        masks = {"attention_mask": mask} if pad else {}
        want = _get_rope_index(model, token_types, second_per_grid_ts=seconds, **grids, **masks)
        scale = seconds * tokens_per_second if model == "qwen2_5_vl" else None
        got = mrope_positions(token_types, **grids, video_time_scale=scale, spatial_merge_size=2, **masks)
        assert got[0].dtype == got[1].dtype == torch.long
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
        torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)


#: Models whose get_rope_index reads each video as one grid per frame (its processor writes a timestamp between
#: frames): Qwen3-VL's kin and GLM-4V's; posenc takes those per-frame grids, ``(1, h, w)`` each.
PER_FRAME = (
    "qwen3_vl qwen3_vl_moe qwen3_5 qwen3_5_moe qwen4_exp cosmos3_edge cosmos3_omni cohere_compass glm4v glm4v_moe "
    "glm46v glm_ocr"
).split()


def _own_rope_index(model_type: str):
    """A model type's own get_rope_index on its default config (no weights): the class that defines it, a stand-in
    for ``self``, and the config's spatial merge size."""
    module = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    owner = next(c for c in vars(module).values() if isinstance(c, type) and "get_rope_index" in vars(c))
    host = types.SimpleNamespace(config=transformers.AutoConfig.for_model(model_type))
    host.get_vision_position_ids = types.MethodType(owner.get_vision_position_ids, host)
    return owner, host, host.config.vision_config.spatial_merge_size


#: HunYuan V4 VL's get_rope_index reads a newline token after each row of patches and gives each frame a block of its
#: own: posenc's with row_newlines=True, its grids as they are.
ROW_NEWLINES = ["hy_v4_vl"]


@pytest.mark.parametrize("model_type", PER_FRAME + ROW_NEWLINES)
@pytest.mark.parametrize("pad", [False, True])
def test_equals_get_rope_index_of_models_with_a_layout_of_their_own(model_type, pad):
    """As the docstring says: their own get_rope_index on random text, images and videos, against posenc's (a
    timestamp token between frames and each video's grid split into its frames, or a newline token per row)."""
    owner, host, merge = _own_rope_index(model_type)
    newlines = model_type in ROW_NEWLINES
    gen = torch.Generator().manual_seed(0)
    for _ in range(8):
        token_types, mask, grids, _ = _batch(
            gen, 3, pad=pad, merge=merge, timestamps=not newlines, newlines=newlines
        )
        masks = {"attention_mask": mask} if pad else {}
        want = owner.get_rope_index(
            host, token_types, token_types, **{k: g.clone() for k, g in grids.items()}, **masks
        )
        if "video_grid_thw" in grids and not newlines:
            videos = grids["video_grid_thw"]
            grids["video_grid_thw"] = videos.repeat_interleave(videos[:, 0], 0).index_fill(
                1, torch.tensor(0), 1
            )
        got = mrope_positions(token_types, **grids, spatial_merge_size=merge, row_newlines=newlines, **masks)
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
        torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)
    with pytest.raises(ValueError, match="row_newlines=True is HunYuan V4 VL's layout"):
        mrope_positions(token_types, row_newlines=True, video_time_scale=2.0)


@pytest.mark.parametrize("pad", [False, True])
def test_equals_ernie4_5_vl_get_rope_index(pad):
    """ERNIE 4.5 VL merges each 2 frames of a video into one (``temporal_merge_size``) before its
    tokens: its positions are mrope_positions' with each video's t divided by the merge (as documented)."""
    from transformers.models.ernie4_5_vl_moe import modeling_ernie4_5_vl_moe as hfe

    config = transformers.Ernie4_5_VLMoeConfig()
    merge_t = config.vision_config.temporal_merge_size
    host = types.SimpleNamespace(config=config)
    host.get_vision_position_ids = types.MethodType(hfe.Ernie4_5_VLMoeModel.get_vision_position_ids, host)
    gen, checked = torch.Generator().manual_seed(1), 0
    for _ in range(12):
        token_types, mask, grids, _ = _batch(gen, 3, pad=pad)
        if "video_grid_thw" not in grids:
            continue
        ernie = dict(grids, video_grid_thw=grids["video_grid_thw"] * torch.tensor([merge_t, 1, 1]))
        masks = {"attention_mask": mask} if pad else {}
        want = hfe.Ernie4_5_VLMoeModel.get_rope_index(host, token_types, token_types, **ernie, **masks)
        merged = dict(ernie, video_grid_thw=ernie["video_grid_thw"] // torch.tensor([merge_t, 1, 1]))
        got = mrope_positions(token_types, **merged, spatial_merge_size=2, **masks)
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
        torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)
        checked += 1
    assert checked >= 4


def test_video_time_scale_as_qwen2_5_vl():
    # 3 merged frames at 0.37 s per grid and 4 tokens per second: time 0, 1.48 -> 1, 2.96 -> 2 (floored)
    token_types = torch.tensor([[0] + [2] * 3 + [0]])
    grid = torch.tensor([[3, 2, 2]])
    want, deltas = _get_rope_index(
        "qwen2_5_vl", token_types, video_grid_thw=grid, second_per_grid_ts=torch.tensor([0.37])
    )
    got, got_deltas = mrope_positions(
        token_types, video_grid_thw=grid, video_time_scale=torch.tensor([0.37]) * 4
    )
    assert got.tolist() == want.tolist() == [[[0, 1, 2, 3, 2]], [[0, 1, 1, 1, 2]], [[0, 1, 1, 1, 2]]]
    assert got_deltas.tolist() == deltas.tolist() == [[-1]]
    # a number stands for every video
    assert torch.equal(mrope_positions(token_types, video_grid_thw=grid, video_time_scale=1.48)[0], got)


def test_text_only_is_plain_positions():
    positions, deltas = mrope_positions(torch.zeros(2, 5, dtype=torch.int32))
    assert torch.equal(positions, torch.arange(5).expand(3, 2, 5))
    assert deltas.tolist() == [[0], [0]]


def test_left_padding_gives_the_positions_of_the_row_alone():
    gen = torch.Generator().manual_seed(1)
    kinds, images, videos = _document(gen)
    grids = {
        "image_grid_thw": torch.tensor(images or [[1, 2, 2]]),
        "video_grid_thw": torch.tensor(videos or [[1, 2, 2]]),
    }
    kinds += [1] * (0 if images else 1) + [0] + [2] * (0 if videos else 1)
    alone, alone_delta = mrope_positions(torch.tensor([kinds]), **grids)
    padded = torch.tensor([[0, 0, 0, *kinds]])
    mask = torch.tensor([[0, 0, 0] + [1] * len(kinds)])
    positions, deltas = mrope_positions(padded, **grids, attention_mask=mask)
    assert torch.equal(positions[..., 3:], alone) and not positions[..., :3].any()  # padding at 0
    assert torch.equal(deltas, alone_delta)


def test_packed_documents_each_as_if_alone():
    gen = torch.Generator().manual_seed(2)
    docs = [_document(gen) for _ in range(4)]
    while not any(d[1] or d[2] for d in docs):
        docs = [_document(gen) for _ in range(4)]
    rows = ([docs[0], docs[1]], [docs[2], docs[3], docs[0]])
    t = max(sum(len(d[0]) for d in row) for row in rows) + 1
    token_types = torch.zeros(2, t, dtype=torch.long)
    packed_mask = torch.zeros(
        2, t, dtype=torch.long
    )  # LlamaFactory's packed mask: 1, 1, 2, 2, 2, 0 (padding)
    for r, row in enumerate(rows):
        at = 0
        for n, (kinds, _, _) in enumerate(row):
            token_types[r, at : at + len(kinds)] = torch.tensor(kinds)
            packed_mask[r, at : at + len(kinds)] = n + 1
            at += len(kinds)
    grids = {}
    for name, i in (("image_grid_thw", 1), ("video_grid_thw", 2)):
        found = [g for row in rows for d in row for g in d[i]]
        grids[name] = torch.tensor(found) if found else None
    scale = (
        torch.rand(len(grids["video_grid_thw"]) if grids["video_grid_thw"] is not None else 0, generator=gen)
        * 8
    )
    positions, deltas = mrope_positions(
        token_types,
        **grids,
        video_time_scale=scale,
        attention_mask=packed_mask != 0,
        document_ids=packed_mask,
    )
    videos = 0
    for r, row in enumerate(rows):
        at = 0
        for kinds, images, vids in row:
            alone, delta = mrope_positions(
                torch.tensor([kinds]),
                image_grid_thw=torch.tensor(images) if images else None,
                video_grid_thw=torch.tensor(vids) if vids else None,
                video_time_scale=scale[videos : videos + len(vids)],
            )
            if images or vids:  # transformers needs a vision token
                want, want_delta = _get_rope_index(
                    "qwen2_5_vl",
                    torch.tensor([kinds]),
                    image_grid_thw=torch.tensor(images) if images else None,
                    video_grid_thw=torch.tensor(vids) if vids else None,
                    second_per_grid_ts=scale[videos : videos + len(vids)] / 4,
                )
                assert torch.equal(alone, want) and torch.equal(delta, want_delta)
            videos += len(vids)
            assert torch.equal(positions[:, r : r + 1, at : at + len(kinds)], alone)
            at += len(kinds)
        assert not positions[:, r, at:].any()  # right padding
        # decoding continues the last document: next position = tokens so far + delta
        assert int(deltas[r]) + at == int(alone.max()) + 1


def test_adjacent_images_are_split_by_their_token_counts():
    # two 1x2x4 images (1x2 tokens each at merge 2) with no text between: the second starts 2 later
    positions, deltas = mrope_positions(
        torch.tensor([[1, 1, 1, 1, 0]]), image_grid_thw=torch.tensor([[1, 2, 4]] * 2)
    )
    assert positions[:, 0].tolist() == [[0, 0, 2, 2, 4], [0, 0, 2, 2, 4], [0, 1, 2, 3, 4]]
    assert deltas.tolist() == [[0]]


@pytest.mark.parametrize("model", MODELS)
def test_positions_rotate_as_the_model(model):
    """The positions through posenc's MRoPE equal the model's rotary module and apply function on them."""
    gen = torch.Generator().manual_seed(3)
    token_types, mask, grids, seconds = _batch(gen, 2, pad=True)
    while not grids:
        token_types, mask, grids, seconds = _batch(gen, 2, pad=True)
    positions, _ = mrope_positions(token_types, **grids, video_time_scale=seconds * 4, attention_mask=mask)
    head_dim, section = 32, [4, 6, 6]
    module, config_cls = (
        (hf2, transformers.Qwen2VLConfig) if model == "qwen2_vl" else (hf25, transformers.Qwen2_5_VLConfig)
    )
    text = config_cls(
        text_config=dict(
            hidden_size=64,
            num_attention_heads=2,
            head_dim=head_dim,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section},
        )
    ).text_config
    rotary = next(
        getattr(module, n) for n in dir(module) if n.endswith("RotaryEmbedding") and "Vision" not in n
    )
    q, k = (torch.randn(2, 2, token_types.shape[1], head_dim, generator=gen) for _ in range(2))
    cos, sin = rotary(text)(q, positions)
    want = module.apply_rotary_pos_emb(q, k, cos, sin)
    pos = axes_last(positions)
    got = posenc.MRoPE(head_dim, mrope_section=section)(q, k, pos, pos)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(
            a, b, atol=2e-5, rtol=0
        )  # float64 (posenc) vs float32 (transformers) angles


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_results_on_the_device_of_the_tokens():
    token_types = torch.tensor([[0, 1, 1, 0]], device="cuda")
    positions, deltas = mrope_positions(token_types, image_grid_thw=torch.tensor([[1, 2, 4]], device="cuda"))
    assert positions.device == deltas.device == token_types.device
    assert (
        positions.cpu().tolist()
        == mrope_positions(token_types.cpu(), image_grid_thw=torch.tensor([[1, 2, 4]]))[0].tolist()
    )
    # Qwen3-Omni's float32 positions: frames at 1 and 1 + 0.5 * 13, the text after from 8.5
    video, grid, seconds = (torch.tensor(x, device="cuda") for x in ([[0, 2, 2, 0]], [[2, 2, 2]], [0.5]))
    got = mrope_positions(
        video, video_grid_thw=grid, second_per_grids=seconds, position_id_per_seconds=13, omni="qwen3"
    )
    assert got[0].device == got[1].device == video.device and got[0].dtype == got[1].dtype == torch.float32
    assert got[0][0, 0].tolist() == [0, 1, 7.5, 8.5] and got[1].tolist() == [[5.5]]


G = torch.tensor([[1, 2, 4]])
IMG = torch.tensor([[0, 1, 1, 0]])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"token_types": [[0, 1]]}, TypeError, r"token_types must be an integer torch.Tensor .* got list"),
        ({"token_types": torch.zeros(2, 3)}, TypeError, "token_types must have an integer dtype.*float32"),
        (
            {"token_types": torch.zeros(3, dtype=torch.long)},
            ValueError,
            r"token_types must have shape \(batch, seq\), got shape \(3,\)",
        ),
        (
            {"token_types": torch.tensor([[0, 3]])},
            ValueError,
            r"0 \(text\), 1 \(image\) or 2 \(video\), got 3 at \(0, 1\)",
        ),
        (
            {"token_types": IMG},
            ValueError,
            "image_grid_thw has 0 grids, but row 0 has more image tokens from token 1",
        ),
        (
            {"token_types": IMG, "image_grid_thw": torch.tensor([[1, 4, 4]])},
            ValueError,
            r"image_grid_thw\[0\] = \[1, 4, 4\] is 4 tokens at spatial_merge_size=2, but row 0 has a run of 2",
        ),
        (
            {"token_types": IMG, "image_grid_thw": torch.tensor([[1, 2, 4]] * 2)},
            ValueError,
            "image_grid_thw has 2 grids, but the tokens hold 1 images",
        ),
        (
            {"token_types": IMG, "image_grid_thw": torch.tensor([1, 2, 4])},
            ValueError,
            r"image_grid_thw must have shape \(n, 3\).*got \(3,\)",
        ),
        (
            {"token_types": IMG, "image_grid_thw": torch.tensor([[1, 1, 4]])},
            ValueError,
            r"image_grid_thw\[0\] = \[1, 1, 4\]: .*h, w >= spatial_merge_size = 2",
        ),
        (
            {"token_types": IMG, "image_grid_thw": torch.tensor([[1.0, 2, 4]])},
            TypeError,
            "image_grid_thw must have an integer dtype",
        ),
        (
            {"token_types": IMG, "image_grid_thw": G, "spatial_merge_size": 0},
            ValueError,
            "spatial_merge_size must be a positive int, got 0",
        ),
        (
            {"token_types": IMG, "image_grid_thw": G, "attention_mask": torch.ones(1, 3, dtype=torch.long)},
            ValueError,
            r"attention_mask must have the shape of token_types \(1, 4\), got \(1, 3\)",
        ),
        (
            {"token_types": IMG, "image_grid_thw": G, "attention_mask": [[1, 1, 1, 1]]},
            TypeError,
            "attention_mask must be a .* got list",
        ),
        (  # (an additive mask, 0 to keep, read as nonzero: the other way round)
            {"token_types": IMG, "image_grid_thw": G, "attention_mask": torch.zeros(1, 4)},
            TypeError,
            "attention_mask must be bool or 0/1 integers, got dtype torch.float32",
        ),
        (
            {"token_types": IMG, "image_grid_thw": G, "document_ids": torch.zeros(5, dtype=torch.long)},
            ValueError,
            r"document_ids must have shape \(batch, seq\) = \(1, 4\) \(or \(seq,\)\), got \(5,\)",
        ),
        (
            {"token_types": IMG, "image_grid_thw": G, "document_ids": torch.zeros(4)},
            TypeError,
            "document_ids must have an integer dtype",
        ),
        (
            {"token_types": IMG, "video_grid_thw": G, "video_time_scale": [1.0, 2.0]},
            ValueError,
            r"video_time_scale must be a number or have shape \(n_videos,\) = \(1,\).*got shape \(2,\)",
        ),
        (
            {"token_types": IMG, "video_grid_thw": G, "video_time_scale": -1.0},
            ValueError,
            "video_time_scale must be finite and >= 0, got -1.0 for video 0",
        ),
        (
            {"token_types": IMG, "video_grid_thw": G, "video_time_scale": float("nan")},
            ValueError,
            "video_time_scale must be finite and >= 0, got nan",
        ),
        (
            {"token_types": IMG, "video_grid_thw": G, "video_time_scale": "fast"},
            TypeError,
            "video_time_scale must be a number, a list of numbers or a .* got 'fast'",
        ),
    ],
)
def test_bad_inputs_name_argument_value_and_expectation(kwargs, error, match):
    kwargs = dict(kwargs)
    with pytest.raises(error, match=match):
        mrope_positions(kwargs.pop("token_types"), **kwargs)


def test_a_row_of_padding_only_and_documents_given_once_for_every_row():
    token_types = torch.tensor([[0, 1, 1, 0, 0], [0, 0, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 0, 0, 0]])
    positions, deltas = mrope_positions(token_types, image_grid_thw=G, attention_mask=mask)
    assert not positions[:, 1].any() and deltas[1].item() == 0
    # (t,) document ids hold for every row: [0, 1, 1 | 0, 1] restarts at token 3
    positions, deltas = mrope_positions(
        token_types[:1], image_grid_thw=G, document_ids=torch.tensor([5, 5, 5, 6, 6])
    )
    assert positions[:, 0].tolist() == [[0, 1, 1, 0, 1], [0, 1, 1, 0, 1], [0, 1, 2, 0, 1]]
    assert deltas.tolist() == [[2 - 5]]  # the last document's next position (2) minus the tokens (5)


# --- Qwen2.5-Omni: time-aligned videos, audio, and videos with their audio interleaved
_THINKER = transformers.Qwen2_5OmniThinkerConfig()
# the thinker's config has no vision start/end ids in transformers 5.24 (its checkpoints' config.json do)
_TALKER = transformers.Qwen2_5OmniTalkerConfig()
OMNI_IDS = {
    "text": 1000,
    IMAGE: _THINKER.image_token_id,
    VIDEO: _THINKER.video_token_id,
    AUDIO: _THINKER.audio_token_id,
    "vision_start": _TALKER.vision_start_token_id,
    "vision_end": _TALKER.vision_end_token_id,
    "audio_start": _THINKER.audio_start_token_id,
    "audio_end": _THINKER.audio_end_token_id,
}
RATE, CHUNK = _THINKER.position_id_per_seconds, _THINKER.seconds_per_chunk  # 25 positions a second, 2 s


def _omni_get_rope_index(input_ids, **kwargs):
    """Qwen2.5-Omni thinker's own get_rope_index on its default config (no weights)."""
    cls = hfo.Qwen2_5OmniPreTrainedModelForConditionalGeneration
    fields = {
        k: getattr(_THINKER, k)
        for k in ("image_token_id", "video_token_id", "audio_token_id", "audio_start_token_id")
    }
    config = types.SimpleNamespace(
        **fields,
        vision_start_token_id=OMNI_IDS["vision_start"],
        position_id_per_seconds=RATE,
        seconds_per_chunk=CHUNK,
    )
    host = types.SimpleNamespace(config=config, spatial_merge_size=_THINKER.vision_config.spatial_merge_size)
    for name in ("get_llm_pos_ids_for_vision", "get_chunked_index"):
        setattr(host, name, types.MethodType(getattr(cls, name), host))
    return cls.get_rope_index(host, input_ids, **kwargs)


def _interleaved(grid: list[int], seconds: float, audio: int) -> list[int]:
    """The token types of a video with its audio as Qwen2.5-Omni's processor lays them out (its own chunking)."""
    t, h, w = grid
    frames = torch.arange(t).repeat_interleave((h // 2) * (w // 2)).double().numpy() * seconds * RATE
    chunks = int(RATE * CHUNK)
    chunked = hfo_proc.Qwen2_5OmniProcessor.get_chunked_index
    video, sound = chunked(None, frames, chunks), chunked(None, torch.arange(audio).numpy(), chunks)
    kinds: list[int] = []
    for j in range(max(len(video), len(sound))):
        for kind, spans in ((VIDEO, video), (AUDIO, sound)):
            if j < len(spans):
                kinds += [kind] * (spans[j][1] - spans[j][0])
    return kinds


def _omni_document(gen: torch.Generator, audio_in_video: bool, qwen3: bool = False):
    """(token ids, image grids, video grids, seconds per grid, audio feature lengths) of one random document
    (laid out as Qwen3-Omni's processor does if ``qwen3``)."""
    ids, images, videos, seconds, audios = [], [], [], [], []
    pick = lambda lo, hi: int(torch.randint(lo, hi, (1,), generator=gen))  # noqa: E731
    for _ in range(pick(1, 5)):
        ids += [OMNI_IDS["text"]] * pick(1, 4)
        kind = pick(0, 4)
        if kind == IMAGE:
            images.append([1, 2 * pick(1, 3), 2 * pick(1, 3)])
            count = images[-1][1] * images[-1][2] // 4
            ids += [OMNI_IDS["vision_start"], *[OMNI_IDS[IMAGE]] * count, OMNI_IDS["vision_end"]]
        elif kind == AUDIO or (kind == VIDEO and audio_in_video):
            n = pick(1, 160)  # audio tokens: 25 a second
            audios.append(4 * n)  # feature frames: ((4n - 1) // 2 + 1 - 2) // 2 + 1 = n tokens
            if qwen3:  # its encoder's own count
                audios[-1] = pick(1, 1600)
                n = int(hfq3._get_feat_extract_output_lengths(torch.tensor(audios[-1]), Q3_WINDOW))
            body = [OMNI_IDS[AUDIO]] * n
            if kind == VIDEO:
                videos.append([pick(1, 5), 2 * pick(1, 3), 2 * pick(1, 3)])
                seconds.append(float(torch.rand((), generator=gen) * 2.5))
                interleave = _interleaved_by_time if qwen3 else _interleaved
                body = [OMNI_IDS[k] for k in interleave(videos[-1], seconds[-1], n)]
                body = [OMNI_IDS["vision_start"], OMNI_IDS["audio_start"], *body, OMNI_IDS["audio_end"]]
                ids += [*body, OMNI_IDS["vision_end"]]
            else:
                ids += [OMNI_IDS["audio_start"], *body, OMNI_IDS["audio_end"]]
        elif kind == VIDEO:
            videos.append([pick(1, 5), 2 * pick(1, 3), 2 * pick(1, 3)])
            seconds.append(float(torch.rand((), generator=gen) * 2.5))
            count = videos[-1][0] * videos[-1][1] * videos[-1][2] // 4
            ids += [OMNI_IDS["vision_start"], *[OMNI_IDS[VIDEO]] * count, OMNI_IDS["vision_end"]]
    return ids, images, videos, seconds, audios


def _omni_types(input_ids: torch.Tensor) -> torch.Tensor:
    """transformers' mm_token_type_ids: 1 image, 2 video, 3 audio, 0 the rest."""
    token_types = torch.zeros_like(input_ids)
    for kind in (IMAGE, VIDEO, AUDIO):
        token_types[input_ids == OMNI_IDS[kind]] = kind
    return token_types


def _omni_batch(docs, pad: int):
    """Left-padded (input_ids, mask) and the inputs both functions share, from documents."""
    t = max(len(d[0]) for d in docs) + pad
    input_ids = torch.zeros(len(docs), t, dtype=torch.long)
    mask = torch.zeros(len(docs), t, dtype=torch.long)
    for r, d in enumerate(docs):
        input_ids[r, t - len(d[0]) :] = torch.tensor(d[0])
        mask[r, t - len(d[0]) :] = 1
    grids = {
        name: torch.tensor([g for d in docs for g in d[i]]) if any(d[i] for d in docs) else None
        for name, i in (("image_grid_thw", 1), ("video_grid_thw", 2))
    }
    seconds = torch.tensor([s for d in docs for s in d[3]])  # float32, as the processor gives
    audio_seqlens = torch.tensor([a for d in docs for a in d[4]], dtype=torch.long)
    return input_ids, mask, grids, seconds, audio_seqlens


@pytest.mark.parametrize("use_audio_in_video", [False, True])
@pytest.mark.parametrize("rows", [1, 3])
def test_equals_qwen2_5_omni_get_rope_index(use_audio_in_video, rows):
    """Text, images, time-aligned videos, audio and (use_audio_in_video) videos interleaved with their
    audio, one row or three left padded: whole tensors equal to Qwen2.5-Omni's own, but for the padding,
    which it sets to 1."""
    gen = torch.Generator().manual_seed(4)
    checked, pad = 0, rows > 1
    for _ in range(16):
        docs = [_omni_document(gen, use_audio_in_video) for _ in range(rows)]
        input_ids, mask, grids, seconds, audio_seqlens = _omni_batch(docs, 2 if pad else 0)
        if grids["image_grid_thw"] is None and grids["video_grid_thw"] is None:
            continue  # transformers needs a grid to go past plain text positions
        masks = {"attention_mask": mask} if pad else {}
        want, want_deltas = _omni_get_rope_index(
            input_ids,
            **grids,
            **masks,
            use_audio_in_video=use_audio_in_video,
            audio_seqlens=audio_seqlens,
            second_per_grids=seconds,
        )
        got, deltas = mrope_positions(
            _omni_types(input_ids),
            **grids,
            **masks,
            position_id_per_seconds=RATE,
            second_per_grids=seconds,
            use_audio_in_video=use_audio_in_video,
        )
        assert torch.equal(want.masked_fill(mask == 0, 1), want)  # transformers' padding: 1
        assert torch.equal(got, want.masked_fill(mask == 0, 0))
        assert torch.equal(deltas, want_deltas)
        checked += 1
    assert checked >= 10


@pytest.mark.parametrize(
    ("seconds", "want"),
    [
        # frames at 0 s and 1 s: both in the first 2 s chunk, before the audio; the run ends with audio, so
        # the end markers follow the audio (12) although the second frame sits at time 27
        (1.0, [0, 1, 1, 2, 27, *range(2, 12), 12, 12, 13]),
        # frames at 0 s and 2 s: two chunks, the audio between; the run ends with the frame at 52
        (2.0, [0, 1, 1, 2, *range(2, 12), 52, 53, 53, 54]),
    ],
)
def test_video_with_its_audio_by_hand(seconds, want):
    """A 2-frame video of 1 token a frame with 10 audio tokens: the start markers share one position, as do
    the end markers; video time = frame * seconds * 25; audio = 1 position per token from the video's start."""
    grid = torch.tensor([[2, 2, 2]])
    body = _interleaved([2, 2, 2], seconds, 10)
    text, start, end = OMNI_IDS["text"], OMNI_IDS["vision_start"], OMNI_IDS["vision_end"]
    ids = [
        text,
        start,
        OMNI_IDS["audio_start"],
        *(OMNI_IDS[k] for k in body),
        OMNI_IDS["audio_end"],
        end,
        text,
    ]
    input_ids = torch.tensor([ids])
    seconds_t = torch.tensor([seconds])
    got, deltas = mrope_positions(
        _omni_types(input_ids),
        video_grid_thw=grid,
        position_id_per_seconds=25,
        second_per_grids=seconds_t,
        use_audio_in_video=True,
    )
    assert got[0, 0].tolist() == want
    assert got[1, 0].tolist() == [
        p if k != VIDEO else 2 for p, k in zip(want, _omni_types(input_ids)[0], strict=True)
    ]
    expected = _omni_get_rope_index(
        input_ids,
        video_grid_thw=grid,
        use_audio_in_video=True,
        audio_seqlens=torch.tensor([40]),
        second_per_grids=seconds_t,
    )
    assert torch.equal(got, expected[0]) and torch.equal(deltas, expected[1])
    assert deltas.item() == max(want) + 1 - len(ids)


def test_qwen2_5_omni_text_and_audio_only():
    """No image or video: transformers' plain positions (its other branch), audio tokens count as text."""
    gen = torch.Generator().manual_seed(5)
    docs = [_omni_document(gen, False) for _ in range(4)]
    docs = [d for d in docs if not d[1] and not d[2]] + [
        ([1000] * 3, [], [], [], []),
        ([1000, *[OMNI_IDS[AUDIO]] * 4], [], [], [], [8]),
    ]
    input_ids, mask, _, _, _ = _omni_batch(docs, 1)
    want, want_deltas = _omni_get_rope_index(input_ids, attention_mask=mask)
    got, deltas = mrope_positions(_omni_types(input_ids), attention_mask=mask, position_id_per_seconds=25)
    assert (_omni_types(input_ids) == AUDIO).any()
    assert torch.equal(got, want.masked_fill(mask == 0, 0)) and torch.equal(deltas, want_deltas)


@pytest.mark.parametrize(("omni", "seed"), [("qwen2.5", 20), ("qwen3", 32)])
def test_omni_packed_documents_each_as_if_alone(omni, seed):
    gen = torch.Generator().manual_seed(seed)
    docs = [_omni_document(gen, True, omni == "qwen3") for _ in range(3)]
    ids = torch.tensor([[t for d in docs for t in d[0]] + [0]])  # one row of 3 documents and 1 padding token
    doc_ids = torch.tensor([[n + 1 for n, d in enumerate(docs) for _ in d[0]] + [0]])
    assert all(d[2] and d[4] for d in docs)  # every document holds videos with their audio
    grids, seconds = _omni_batch(docs, 0)[2:4]
    kwargs = dict(position_id_per_seconds=25, use_audio_in_video=True, omni=omni)
    positions, deltas = mrope_positions(
        _omni_types(ids),
        **grids,
        second_per_grids=seconds,
        attention_mask=doc_ids != 0,
        document_ids=doc_ids,
        **kwargs,
    )
    at, videos = 0, 0
    for d in docs:
        alone, _ = mrope_positions(
            _omni_types(torch.tensor([d[0]])),
            image_grid_thw=torch.tensor(d[1]) if d[1] else None,
            video_grid_thw=torch.tensor(d[2]) if d[2] else None,
            second_per_grids=seconds[videos : videos + len(d[2])],
            **kwargs,
        )
        assert torch.equal(positions[:, :, at : at + len(d[0])], alone)
        at, videos = at + len(d[0]), videos + len(d[2])
    assert deltas + at == alone.max() + 1  # decoding continues the last document
    assert not positions[:, 0, -1].any()


# --- Qwen3-Omni: float32 times, not floored; a video's audio interleaved token by token in time
_Q3 = transformers.Qwen3OmniMoeThinkerConfig()
Q3_RATE, Q3_WINDOW = 13, _Q3.audio_config.n_window  # 13: its processor's default (its config class: 25)


def _qwen3_omni_get_rope_index(input_ids, **kwargs):
    """Qwen3-Omni thinker's own get_rope_index on its default config (no weights) at Q3_RATE."""
    cls = hfq3.Qwen3OmniMoePreTrainedModelForConditionalGeneration
    ids = {f"{k}_token_id": OMNI_IDS[v] for k, v in (("image", IMAGE), ("video", VIDEO), ("audio", AUDIO))}
    config = types.SimpleNamespace(
        **ids,
        vision_start_token_id=OMNI_IDS["vision_start"],
        audio_start_token_id=OMNI_IDS["audio_start"],
        position_id_per_seconds=Q3_RATE,
        audio_config=_Q3.audio_config,
    )
    host = types.SimpleNamespace(config=config, spatial_merge_size=_Q3.vision_config.spatial_merge_size)
    host.get_llm_pos_ids_for_vision = types.MethodType(cls.get_llm_pos_ids_for_vision, host)
    return cls.get_rope_index(host, input_ids, **kwargs)


def _interleaved_by_time(grid: list[int], seconds: float, audio: int) -> list[int]:
    """The token types of a video with its audio as Qwen3-Omni's processor lays them out: token by token,
    a video token first when its time (float32, as the model's) is at most the audio token's index."""
    t, h, w = grid
    times = (torch.arange(t) * torch.tensor(seconds) * Q3_RATE).repeat_interleave((h // 2) * (w // 2))
    kinds, v, a = [], 0, 0
    while v < len(times) and a < audio:
        kinds.append(VIDEO if times[v] <= a else AUDIO)
        v, a = (v + 1, a) if kinds[-1] == VIDEO else (v, a + 1)
    return kinds + [VIDEO] * (len(times) - v) + [AUDIO] * (audio - a)


@pytest.mark.parametrize("use_audio_in_video", [False, True])
@pytest.mark.parametrize("rows", [1, 3])
def test_equals_qwen3_omni_get_rope_index(use_audio_in_video, rows):
    """Text, images, videos at fractional times, audio and (use_audio_in_video) videos interleaved with their
    audio, one row or three left padded: float32 whole tensors equal to Qwen3-Omni's own, padding included."""
    gen = torch.Generator().manual_seed(6)
    checked = fractional = 0
    for _ in range(16):
        docs = [_omni_document(gen, use_audio_in_video, qwen3=True) for _ in range(rows)]
        input_ids, mask, grids, seconds, audio_seqlens = _omni_batch(docs, 2 if rows > 1 else 0)
        if grids["image_grid_thw"] is None and grids["video_grid_thw"] is None:
            continue  # transformers needs a grid to go past plain text positions
        want, want_deltas = _qwen3_omni_get_rope_index(
            input_ids,
            **grids,
            attention_mask=mask,
            use_audio_in_video=use_audio_in_video,
            audio_seqlens=audio_seqlens,
            second_per_grids=seconds,
        )
        got, deltas = mrope_positions(
            _omni_types(input_ids),
            **grids,
            attention_mask=mask,
            position_id_per_seconds=Q3_RATE,
            second_per_grids=seconds,
            use_audio_in_video=use_audio_in_video,
            omni="qwen3",
        )
        assert got.dtype == deltas.dtype == want.dtype == torch.float32
        assert torch.equal(got, want) and torch.equal(deltas, want_deltas)
        fractional += bool((got != got.round()).any())
        checked += 1
    assert checked >= 10 and fractional >= 4, (checked, fractional)


@pytest.mark.parametrize(
    ("seconds", "audio", "want"),
    [
        # the processor's default 2 s a grid: frames at 0, 26, 52; the audio (10 tokens) between the first
        # two; the 2 start and 2 end markers at consecutive positions; the run ends with the frame at 55
        (None, 10, [0, 1, 2, 3, *range(3, 13), 29, 55, 56, 57, 58]),
        # 0.5 s a grid: frames at 0, 6.5, 13 (not floored); the audio around the second frame; the run ends
        # with a frame, so the end markers follow the frame's time, fraction and all
        (0.5, 10, [0, 1, 2, 3, *range(3, 10), 9.5, 10, 11, 12, 16, 17, 18, 19]),
    ],
)
def test_qwen3_omni_video_with_its_audio_by_hand(seconds, audio, want):
    """A 3-frame video of 1 token a frame with its audio: video time = frame * seconds * 13 from the run's
    first position, audio 1 position per token from there, what follows after the run's last kind."""
    grid = torch.tensor([[3, 2, 2]])
    body = _interleaved_by_time([3, 2, 2], 2.0 if seconds is None else seconds, audio)
    start, end = OMNI_IDS["vision_start"], OMNI_IDS["vision_end"]
    ids = [
        1000,
        start,
        OMNI_IDS["audio_start"],
        *(OMNI_IDS[k] for k in body),
        OMNI_IDS["audio_end"],
        end,
        1000,
    ]
    input_ids = torch.tensor([ids])
    spg = {} if seconds is None else {"second_per_grids": seconds}
    got, deltas = mrope_positions(
        _omni_types(input_ids),
        video_grid_thw=grid,
        position_id_per_seconds=Q3_RATE,
        use_audio_in_video=True,
        omni="qwen3",
        **spg,
    )
    assert got[0, 0].tolist() == want
    assert got[1, 0].tolist() == [
        p if k != VIDEO else 3 for p, k in zip(want, _omni_types(input_ids)[0], strict=True)
    ]
    expected = _qwen3_omni_get_rope_index(
        input_ids,
        video_grid_thw=grid,
        attention_mask=torch.ones_like(input_ids),
        use_audio_in_video=True,
        audio_seqlens=torch.tensor([audio * 8 - 7]),  # 10 tokens from its encoder
        second_per_grids=torch.tensor([2.0 if seconds is None else seconds]),
    )
    assert torch.equal(got, expected[0]) and torch.equal(deltas, expected[1])
    assert deltas.item() == max(want) + 1 - len(ids)


@pytest.mark.parametrize("seconds_per_grid", [None, 0.5])
def test_qwen3_omni_positions_rotate_as_the_model(seconds_per_grid):
    """Qwen3-Omni's float32 positions, whole (the processor's default 2 s a grid) or fractional (0.5 s a
    grid at 13 a second), through posenc's interleaved MRoPE as they are equal its rotary module and
    apply function on the same positions."""
    gen = torch.Generator().manual_seed(3)
    input_ids, mask, grids, seconds, _ = _omni_batch(
        [_omni_document(gen, False, qwen3=True) for _ in range(2)], 2
    )
    assert grids["video_grid_thw"] is not None
    kwargs = dict(position_id_per_seconds=Q3_RATE, omni="qwen3", attention_mask=mask)
    if seconds_per_grid is not None:
        kwargs["second_per_grids"] = torch.full_like(seconds, seconds_per_grid)
    positions, _ = mrope_positions(_omni_types(input_ids), **grids, **kwargs)
    whole = torch.equal(positions, positions.round())
    assert positions.dtype == torch.float32 and whole == (seconds_per_grid is None) and positions.max() > 30
    head_dim, section = 32, [4, 6, 6]
    text = transformers.Qwen3OmniMoeThinkerConfig(
        text_config=dict(
            hidden_size=64,
            num_attention_heads=2,
            head_dim=head_dim,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section},
        )
    ).text_config
    q, k = (torch.randn(2, 2, input_ids.shape[1], head_dim, generator=gen) for _ in range(2))
    cos, sin = hfq3.Qwen3OmniMoeThinkerTextRotaryEmbedding(text)(q, positions)
    want = hfq3.apply_rotary_pos_emb(q, k, cos, sin)
    pos = axes_last(positions)
    got = posenc.MRoPE(head_dim, mrope_section=section, interleaved=True)(q, k, pos, pos)
    for a, b in zip(got, want, strict=True):
        # float64 angles (posenc) against float32 (transformers)
        torch.testing.assert_close(a, b, atol=1e-4, rtol=0)


def test_qwen3_omni_text_and_audio_only():
    """No image or video: transformers' plain float positions (its other branch), audio counts as text."""
    docs = [
        ([1000] * 3, [], [], [], []),
        ([1000, OMNI_IDS["audio_start"], *[OMNI_IDS[AUDIO]] * 4, 1000], [], [], [], []),
    ]
    input_ids, mask, _, _, _ = _omni_batch(docs, 1)
    want, want_deltas = _qwen3_omni_get_rope_index(input_ids, attention_mask=mask)
    got, deltas = mrope_positions(
        _omni_types(input_ids), attention_mask=mask, position_id_per_seconds=13, omni="qwen3"
    )
    assert torch.equal(got, want.masked_fill(mask == 0, 0)) and torch.equal(deltas, want_deltas)


V = torch.tensor([[2, 2, 2]])
AV = torch.tensor([[0, 0, 2, 3, 2, 0, 0]])  # markers, a video of 2 frames with 1 audio token, markers


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"token_types": AV, "use_audio_in_video": True},
            ValueError,
            "use_audio_in_video=True is the Omni models': give position_id_per_seconds too",
        ),
        (
            {"token_types": AV, "video_grid_thw": V, "omni": "qwen3"},
            ValueError,
            "omni='qwen3' is time-aligned: give position_id_per_seconds too",
        ),
        (
            {"token_types": AV, "video_grid_thw": V, "position_id_per_seconds": 13, "omni": "qwen3.5"},
            ValueError,
            r"omni must be one of \['qwen2.5', 'qwen3'\], got 'qwen3.5'",
        ),
        (
            {"token_types": AV, "video_grid_thw": V, "position_id_per_seconds": 25, "video_time_scale": 1.0},
            ValueError,
            "video_time_scale is Qwen2.5-VL's; with position_id_per_seconds give second_per_grids",
        ),
        (
            {"token_types": IMG, "image_grid_thw": G, "second_per_grids": 1.0},
            ValueError,
            "second_per_grids is the Omni models': give position_id_per_seconds too",
        ),
        (
            {"token_types": AV, "video_grid_thw": V, "position_id_per_seconds": 0},
            ValueError,
            "position_id_per_seconds must be a finite number > 0, got 0",
        ),
        (
            {"token_types": AV, "video_grid_thw": V, "position_id_per_seconds": 25, "use_audio_in_video": 1},
            TypeError,
            "use_audio_in_video must be a bool, got 1",
        ),
        (
            {
                "token_types": AV,
                "video_grid_thw": V,
                "position_id_per_seconds": 25,
                "second_per_grids": [-1.0],
            },
            ValueError,
            "second_per_grids must be finite and >= 0, got -1.0 for video 0",
        ),
        (
            {"token_types": torch.tensor([[0, 4]]), "position_id_per_seconds": 25},
            ValueError,
            r"0 \(text\), 1 \(image\), 2 \(video\) or 3 \(audio\), got 4 at \(0, 1\)",
        ),
        (
            {"token_types": torch.tensor([[0, 3]])},
            ValueError,
            "got 3 at .*audio tokens are the Omni models': give position_id_per_seconds",
        ),
        (
            {
                "token_types": AV[:, 1:],
                "video_grid_thw": V,
                "position_id_per_seconds": 25,
                "use_audio_in_video": True,
            },
            ValueError,
            r"the video with its audio at row 0, token 1 needs 2 text tokens \(its start markers\) just before",
        ),
        (
            {
                "token_types": AV[:, :-1],
                "video_grid_thw": V,
                "position_id_per_seconds": 25,
                "use_audio_in_video": True,
            },
            ValueError,
            "the video with its audio at row 0, token 2 needs .* 2 \\(its end markers\\) just after it",
        ),
        (
            {
                "token_types": torch.tensor([[0, 0, 2, 3, 2, 2, 0, 0]]),
                "video_grid_thw": torch.tensor([[2, 2, 2], [1, 2, 2]]),
                "position_id_per_seconds": 25,
                "use_audio_in_video": True,
            },
            ValueError,
            r"one video with its audio, but the one at row 0, token 2 holds the tokens of video_grid_thw\[0:2\]",
        ),
        (
            {
                "token_types": torch.tensor([[0, 0, 2, 2, 2, 2, 0, 0]]),
                "video_grid_thw": torch.tensor([[1, 4, 4]]),
                "position_id_per_seconds": 25,
                "use_audio_in_video": True,
            },
            ValueError,
            "the video at row 0, token 2 has no audio tokens beside it; pass use_audio_in_video=False",
        ),
    ],
)
def test_bad_omni_inputs_name_argument_value_and_expectation(kwargs, error, match):
    kwargs = dict(kwargs)
    with pytest.raises(error, match=match):
        mrope_positions(kwargs.pop("token_types"), **kwargs)
