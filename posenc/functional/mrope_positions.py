"""M-RoPE positions of text, image, video and audio tokens (Qwen2-VL, Qwen2.5-VL, Qwen2.5/3-Omni).

:func:`mrope_positions` gives the ``(3, b, t)`` temporal/height/width positions that
transformers' ``get_rope_index`` gives on the same inputs, and the same rope deltas, and also
restarts them at 0 in every packed document (transformers has no such argument: packing
several samples in one row gave the later ones wrong positions, transformers#38007,
LlamaFactory#7754).

The rule, per document, reading its tokens left to right from position ``p = 0``:

* a text token, and (the Omni models) an audio token, sits at ``(p, p, p)``, then ``p += 1``;
* an image or video of ``(gt, gh, gw)`` patches is ``gt * (gh // m) * (gw // m)`` tokens after
  ``m x m`` patches are merged (``m = spatial_merge_size``), in ``(time, row, column)`` order; the
  token at ``(i, j, k)`` sits at ``(p + floor(i * s), p + j, p + k)``, with ``s`` the video's time
  scale (1 for images), then ``p += max(gh, gw) // m`` (transformers 5's rule: what follows a
  video starts after its largest spatial side even where its time positions reach further);
* time-aligned (Qwen2.5-Omni, ``position_id_per_seconds = r`` given): ``s`` is the video's
  seconds per merged frame times ``r`` (``r`` for images), and ``p`` becomes one past the grid's
  largest position on any axis, its time included;
* with ``use_audio_in_video``, a video and its audio are one run of interleaved video and audio
  tokens: its video tokens, in order, take the grid positions above and its ``a`` audio tokens,
  in order, ``p, ..., p + a - 1``; ``p`` becomes one past the largest position of the kind of the
  run's last token; and the 2 text tokens before the run (vision and audio start) share one
  position, as do the 2 after it (audio and vision end);
* Qwen3-Omni (``omni="qwen3"``): as time-aligned, without the ``floor``: positions are float32,
  as Qwen3-Omni's, and a fractional time carries its fraction to every position after it; the
  2 start and the 2 end markers of a video with its audio take consecutive positions, as text.
  As float32 rounds every sum, the sums are taken in transformers' order: a text run in 3
  pieces, each from the last (the end markers of what precedes it, its own text, the start
  markers of what follows); what follows an audio or a grid from its largest position + 1.

Shape key: ``b`` batch, ``t`` tokens, ``n`` images or videos.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

from .._checks import (
    check_bool,
    check_choice,
    check_ints,
    check_positive_float,
    check_positive_int,
    is_real,
    keep_mask,
    short,
)

__all__ = ["mrope_positions"]

TEXT, IMAGE, VIDEO, AUDIO = 0, 1, 2, 3  # transformers' mm_token_type_ids


def mrope_positions(
    token_types: Tensor,
    *,
    image_grid_thw: Tensor | None = None,
    video_grid_thw: Tensor | None = None,
    video_time_scale: float | Sequence[float] | Tensor | None = None,
    spatial_merge_size: int = 2,
    attention_mask: Tensor | None = None,
    document_ids: Tensor | None = None,
    position_id_per_seconds: float | None = None,
    second_per_grids: float | Sequence[float] | Tensor | None = None,
    use_audio_in_video: bool = False,
    omni: Literal["qwen2.5", "qwen3"] = "qwen2.5",
    row_newlines: bool = False,
) -> tuple[Tensor, Tensor]:
    """The M-RoPE positions of text, image, video and audio tokens, as Qwen2-VL's ``get_rope_index``.

    Equal to transformers' ``Qwen2VLModel.get_rope_index`` and ``Qwen2_5_VLModel.get_rope_index``
    (Wang et al., 2024, "Qwen2-VL"; Bai et al., 2025, "Qwen2.5-VL") on the same inputs and, given
    ``position_id_per_seconds``, to Qwen2.5-Omni's thinker ``get_rope_index`` (Xu et al., 2025,
    "Qwen2.5-Omni") or, with ``omni="qwen3"``, Qwen3-Omni's (Xu et al., 2025, "Qwen3-Omni"), plus
    packed documents. Feed ``posenc.functional.axes_last(positions)`` to
    :class:`~posenc.MRoPE`. ERNIE 4.5 VL's ``get_rope_index`` merges each ``temporal_merge_size`` (2)
    frames of a video into one before its tokens: give its ``video_grid_thw`` with ``t`` divided by
    that merge, and the positions equal its own. Qwen3-VL's and GLM-4V's split each video into one grid
    per frame (their processors put a timestamp between frames): give their ``video_grid_thw`` split the
    same way, ``t`` rows of ``(1, h, w)`` for each video, and the positions equal theirs (tested for
    Qwen3-VL and its MoE, Qwen3.5 and its MoE, Qwen4-Exp, Cosmos 3 Edge and Omni, Cohere Compass, GLM-4V and its
    MoE, GLM-4.6V and GLM-OCR). HunYuan V4 VL's put a newline token after each row of patches and give each
    frame a block of its own: ``row_newlines=True``.

    The images and videos are read in order: the first run of image tokens (in row 0, then row 1,
    ...) is ``image_grid_thw[0]``, and so on; a run of several adjacent images is split by their
    token counts. Padding (``attention_mask == 0``) is skipped and gets position 0 on every axis
    (Qwen2.5-Omni's own puts 1 there; attention masks it either way). In a batch with no image or video
    grid the Omni models' deltas count that 1: a row of one real token gets delta 1 there, 0 here.

    Runs on the host, like transformers' own: the token types are read value by value, so the
    inputs are copied to the CPU once and the results moved to ``token_types.device`` (one host
    sync each way on an accelerator); call it in the data pipeline, not inside a compiled forward.

    Args:
        token_types: ``(b, t)`` integer tensor: 0 for text, 1 for an image token, 2 for a video
            token, 3 for an audio token (with ``position_id_per_seconds`` only) (transformers'
            ``mm_token_type_ids``). The audio tokens are counted here, so the Omni models'
            ``audio_seqlens`` is not needed.
        image_grid_thw: ``(n_images, 3)`` integer ``(t, h, w)`` patch grid of each image, before
            merging (the processor's ``image_grid_thw``).
        video_grid_thw: ``(n_videos, 3)`` the same for each video.
        video_time_scale: temporal positions per merged frame of each video: a number for all, or
            ``(n_videos,)``; Qwen2.5-VL's ``second_per_grid_ts * vision_config.tokens_per_second``
            (a float32 tensor gives transformers' exact rounding). ``None``: 1 (Qwen2-VL).
        spatial_merge_size: ``m``, the side of the square of patches merged into one token
            (``vision_config.spatial_merge_size``; 2 in every Qwen2-VL and Qwen2.5-VL).
        attention_mask: ``(b, t)`` bool or integers, 0 for padding (left or right), nonzero for tokens.
        document_ids: ``(b, t)`` or ``(t,)`` integer ids of packed documents: a document starts
            wherever the id changes from one token (not padding) to the next, as in
            :func:`posenc.masking.document_positions`; each restarts at position 0, as if alone.
            A packed attention mask like ``[1, 1, 2, 2, 2, 0]`` is
            ``attention_mask=mask != 0, document_ids=mask``.
        position_id_per_seconds: the Omni models' time alignment (their thinker config field, 25 in
            Qwen2.5-Omni's): temporal positions per second of video, one per audio token; turns on
            the time-aligned rule of the module docstring. ``None``: Qwen2-VL / Qwen2.5-VL.
        second_per_grids: with ``position_id_per_seconds``: seconds per merged frame of each video,
            a number for all or ``(n_videos,)`` (the processor's ``video_second_per_grid``, used in
            float32 as transformers does). ``None``: the processor's default, 1.0 for Qwen2.5-Omni
            (2 frames at 2 fps), 2.0 for Qwen3-Omni (2 frames at 1 fps).
        use_audio_in_video: the Omni models' flag: a run of adjacent video and audio tokens is one
            video with its audio (interleaved in 2-second chunks by Qwen2.5-Omni's processor, token
            by token in time by Qwen3-Omni's), between 2 start and 2 end text tokens. The
            interleaving is read from the token types, so ``seconds_per_chunk`` is not needed.
        omni: with ``position_id_per_seconds``: ``"qwen2.5"`` (Qwen2.5-Omni) or ``"qwen3"``
            (Qwen3-Omni, ``qwen3_omni_moe``): float32 times, not floored, and consecutive markers
            (module docstring).
        row_newlines: HunYuan V4 VL's layout (``hy_v4_vl``): each row of ``w`` merged patches is followed by
            one more token of the image or video (its newline), so a frame is ``h * (w + 1)`` tokens; frame
            ``i`` of a grid starts a block of ``B = max(h, w + 1)`` positions on every axis, its token at row
            ``j``, column ``k`` sits at ``(p + iB, p + iB + j, p + iB + k)``, and what follows the grid starts
            at its largest position + 1 (``p + tB``). Not with the Omni models' time alignment or a
            ``video_time_scale``: its frames are spaced by the block.

    Returns:
        ``(positions, deltas)``: long ``(3, b, t)`` temporal, height and width positions, and long
        ``(b, 1)`` rope deltas, ``max position + 1 - tokens`` of each row (of its last document
        when packed), so that decoding continues at ``number of tokens so far + delta``, as
        transformers does with its ``rope_deltas``. Both float32 with ``omni="qwen3"``, as
        Qwen3-Omni's, which :class:`~posenc.MRoPE` takes as they are.
    """
    aligned = position_id_per_seconds is not None
    if check_bool("use_audio_in_video", use_audio_in_video) and not aligned:
        raise ValueError(
            "use_audio_in_video=True is the Omni models': give position_id_per_seconds too (their config field)"
        )
    check_choice("omni", omni, ("qwen2.5", "qwen3"))
    exact = omni == "qwen3"  # Qwen3-Omni: float32 times, not floored
    newline = int(check_bool("row_newlines", row_newlines))  # (its extra column of tokens: 0 or 1)
    if newline and (aligned or video_time_scale is not None):
        raise ValueError(
            "row_newlines=True is HunYuan V4 VL's layout, whose frames are spaced by their block: not with "
            "position_id_per_seconds or video_time_scale"
        )
    if exact and not aligned:
        raise ValueError("omni='qwen3' is time-aligned: give position_id_per_seconds too (its config field)")
    types, keep, docs = _host_tokens(token_types, attention_mask, document_ids, AUDIO if aligned else VIDEO)
    m = check_positive_int("spatial_merge_size", spatial_merge_size)
    grids = {
        IMAGE: _host_grids("image_grid_thw", image_grid_thw, m),
        VIDEO: _host_grids("video_grid_thw", video_grid_thw, m),
    }
    # the factors of each grid's time index, applied one at a time as transformers does
    factors: dict[int, list[tuple[Tensor | float, ...]]]
    n_videos = len(grids[VIDEO])
    if aligned:
        rate = check_positive_float("position_id_per_seconds", position_id_per_seconds)
        if video_time_scale is not None:
            raise ValueError(
                "video_time_scale is Qwen2.5-VL's; with position_id_per_seconds give second_per_grids "
                f"(seconds per merged frame), got video_time_scale={short(video_time_scale)}"
            )
        # None: the processors' 2 frames at 1 fps (Qwen3-Omni) or at 2 fps (Qwen2.5-Omni)
        seconds = _host_time_scales("second_per_grids", second_per_grids, n_videos, 2.0 if exact else 1.0)
        factors = {IMAGE: [(rate,)] * len(grids[IMAGE]), VIDEO: [(s, rate) for s in seconds.float()]}
    else:
        if second_per_grids is not None:
            raise ValueError(
                "second_per_grids is the Omni models': give position_id_per_seconds too, or for Qwen2.5-VL "
                f"video_time_scale = second_per_grid_ts * tokens_per_second; got {short(second_per_grids)}"
            )
        scales = _host_time_scales("video_time_scale", video_time_scale, n_videos, 1.0)
        factors = {IMAGE: [()] * len(grids[IMAGE]), VIDEO: [(s,) for s in scales]}
    b, t = types.shape
    dtype = torch.float32 if exact else torch.long
    positions = torch.zeros(3, b, t, dtype=dtype)
    deltas = torch.zeros(b, 1, dtype=dtype)
    zero = torch.zeros((), dtype=dtype)  # positions are sums in dtype, as transformers takes them
    used = {IMAGE: 0, VIDEO: 0}  # grids consumed so far, over the whole batch
    for row in range(b):
        index = keep[row].nonzero().flatten()  # (n,) the row's non-padding token indices
        kinds, ids, n = types[row].index_select(0, index), docs[row].index_select(0, index), len(index)
        # runs: adjacent tokens of one kind in one document (a video and its audio: one run, "mixed")
        new_doc = torch.zeros(n + 1, dtype=torch.bool)
        new_doc[1:-1] = ids[1:] != ids[:-1]
        run_kinds = kinds.masked_fill(kinds == AUDIO, VIDEO) if use_audio_in_video else kinds
        cut = torch.ones(n + 1, dtype=torch.bool)
        cut[1:-1] = new_doc[1:-1] | (run_kinds[1:] != run_kinds[:-1])
        bounds = cut.nonzero().flatten().tolist()
        runs = [
            (a, z, k, use_audio_in_video and k in (VIDEO, AUDIO) and bool((kinds[a:z] != k).any()))
            for a, z, k in zip(bounds[:-1], bounds[1:], kinds[bounds[:-1]].tolist(), strict=True)
        ]
        marks = [2 if mixed else int(k != TEXT) for _, _, k, mixed in runs]  # its text markers on each side
        row_positions = torch.empty(3, n, dtype=dtype)
        p, last_doc, free = zero, 0, 0  # free: the first token that may be a start marker
        for r, (start, end, kind, mixed) in enumerate(runs):
            if new_doc[start]:  # a new document: back to 0
                p, last_doc = zero, start
            run = row_positions[:, start:end]  # (3, tokens) a view
            if kind in (TEXT, AUDIO) and not mixed:  # one position per token, in pieces (module docstring)
                one = use_audio_in_video and not exact  # Qwen2.5-Omni: 2 markers of a mixed run share one
                pieces = kind == TEXT and (exact or one)  # else one piece gives the same integers
                e = min(marks[r - 1] if pieces and r and not new_doc[start] else 0, end - start)
                s = marks[r + 1] if pieces and r + 1 < len(runs) and not new_doc[end] else 0
                s, at = min(s, end - start - e), 0
                for size, shared in ((e, one and e == 2), (end - start - e - s, False), (s, one and s == 2)):
                    if size:
                        run[:, at : at + size] = p + torch.arange(size) // (2 if shared else 1)
                        p, at = p + (1 if shared else size), at + size
                p = run[0, -1] + 1  # equal to p but for float32's rounding of an audio's end, as transformers
                continue
            if mixed:  # a video with its audio, between 2 start and 2 end text markers in its document
                if (
                    start - 2 < free
                    or end + 2 > n
                    or new_doc[start - 1 : end + 2].any()
                    or (kinds[start - 2 : start] != TEXT).any()
                    or (kinds[end : end + 2] != TEXT).any()
                ):
                    raise ValueError(
                        f"use_audio_in_video=True: the video with its audio at row {row}, token "
                        f"{int(index[start])} needs 2 text tokens (its start markers) just before it and 2 "
                        "(its end markers) just after it, in its document"
                    )
                free = end + 2
            elif kind == VIDEO and use_audio_in_video:  # (transformers then gives its tokens text positions)
                raise ValueError(
                    f"use_audio_in_video=True: the video at row {row}, token {int(index[start])} has no audio tokens "
                    "beside it; pass use_audio_in_video=False for videos without their audio"
                )
            vision = kinds[start:end] != AUDIO  # (tokens,) all but a video's audio
            kind = VIDEO if mixed else kind
            places = index[start:end][vision]  # where the run's image or video tokens are in the row
            name = "image_grid_thw" if kind == IMAGE else "video_grid_thw"
            tokens, first, p0 = len(places), used[kind], p
            grid_pieces: list[Tensor] = []
            while tokens:
                n_grid = used[kind]
                if n_grid == len(grids[kind]):
                    raise ValueError(
                        f"{name} has {n_grid} grids, but row {row} has more {name[:5]} tokens from token "
                        f"{int(places[-tokens])} on (one grid per image or video, in order)"
                    )
                gt, gh, gw = grids[kind][n_grid]
                h, w = gh // m, gw // m + newline  # (rows and columns of tokens in a frame)
                count = gt * h * w
                if count > tokens:
                    raise ValueError(
                        f"{name}[{n_grid}] = {[gt, gh, gw]} is {count} tokens at spatial_merge_size={m}, but "
                        f"row {row} has a run of {tokens} {name[:5]} tokens from token {int(places[-tokens])}"
                    )
                time = torch.arange(gt)  # the grid's time index, times each factor in turn, as transformers
                for factor in factors[kind][n_grid]:
                    time = time * factor
                time = time * max(h, w) if newline else time  # (each frame a block of its own)
                # (3, gt * h * w) time first; long: rounds toward 0 in the factors' dtype, as transformers
                axes = torch.arange(h, dtype=dtype), torch.arange(w, dtype=dtype)
                grid = torch.stack(torch.meshgrid(time.to(dtype), *axes, indexing="ij")).reshape(3, -1)
                if newline:  # rows and columns start at their frame's block
                    grid[1:] += grid[0]
                grid_pieces.append(grid + p)
                p = grid_pieces[-1].max() + 1 if aligned or newline else p + max(gh, gw) // m
                used[kind] += 1
                tokens -= count
            if mixed and len(grid_pieces) != 1:
                raise ValueError(
                    f"use_audio_in_video=True: a run of video and audio tokens is one video with its audio, "
                    f"but the one at row {row}, token {int(index[start])} holds the tokens of "
                    f"video_grid_thw[{first}:{used[VIDEO]}]"
                )
            run[:, vision] = torch.cat(grid_pieces, dim=1)
            if mixed:  # its audio tokens, in order, from the run's first position
                run[:, ~vision] = p0 + torch.arange(int((~vision).sum()))
                if not vision[-1]:  # ends with audio: what follows starts after the audio
                    p = run[0, -1] + 1
        if n:
            positions[:, row].index_copy_(1, index, row_positions)
            deltas[row] = row_positions[:, last_doc:].max() + 1 - n
    for kind, name in ((IMAGE, "image_grid_thw"), (VIDEO, "video_grid_thw")):
        if used[kind] != len(grids[kind]):
            raise ValueError(
                f"{name} has {len(grids[kind])} grids, but the tokens hold {used[kind]} "
                f"{'images' if kind == IMAGE else 'videos'} (token_types == {kind})"
            )
    device = token_types.device
    return positions.to(device), deltas.to(device)


def _host_tokens(
    token_types: object, attention_mask: object, document_ids: object, top: int
) -> tuple[Tensor, Tensor, Tensor]:
    """``(types, keep, docs)``: ``(b, t)`` CPU tensors, checked; token types ``0..top``."""
    types = check_ints("token_types", token_types, "(batch, seq)").cpu()
    if types.dim() != 2:
        raise ValueError(f"token_types must have shape (batch, seq), got shape {tuple(types.shape)}")
    bad = (types < TEXT) | (types > top)
    if bad.any():
        at = tuple(bad.nonzero()[0].tolist())
        value = int(types[at])
        *names, last = ["0 (text)", "1 (image)", "2 (video)", "3 (audio)"][: top + 1]
        hint = " (audio tokens are the Omni models': give position_id_per_seconds)" if value == AUDIO else ""
        raise ValueError(f"token_types must hold {', '.join(names)} or {last}, got {value} at {at}{hint}")
    shape = tuple(types.shape)
    if attention_mask is None:
        keep = torch.ones(shape, dtype=torch.bool)
    else:
        keep = keep_mask(attention_mask).cpu()
        if tuple(keep.shape) != shape:
            raise ValueError(
                f"attention_mask must have the shape of token_types {shape}, got {tuple(keep.shape)}"
            )
    if document_ids is None:
        docs = torch.zeros(shape, dtype=torch.long)
    else:
        docs = check_ints("document_ids", document_ids, "(batch, seq) or (seq,)").cpu()
        if tuple(docs.shape) not in (shape, shape[1:]):
            raise ValueError(
                f"document_ids must have shape (batch, seq) = {shape} (or (seq,)), got {tuple(docs.shape)}"
            )
        docs = docs.expand(shape)
    return types, keep, docs


def _host_grids(name: str, grids: object, m: int) -> list[tuple[int, int, int]]:
    """The ``(t, h, w)`` of each grid, checked: every side at least 1 token after merging."""
    if grids is None:
        return []
    value = check_ints(name, grids, "(n, 3)").cpu()
    if value.dim() != 2 or value.shape[1] != 3:
        raise ValueError(f"{name} must have shape (n, 3), one (t, h, w) per grid, got {tuple(value.shape)}")
    rows = [tuple(g) for g in value.tolist()]
    for i, (t, h, w) in enumerate(rows):
        if t < 1 or h < m or w < m:
            raise ValueError(
                f"{name}[{i}] = {[t, h, w]}: t must be >= 1 and h, w >= spatial_merge_size = {m} "
                "(patches before merging)"
            )
    return rows


def _host_time_scales(name: str, value: object, videos: int, default: float) -> Tensor:
    """``(n_videos,)`` time scales (``default`` for ``None``), finite and ``>= 0``; float32 unless given as
    a float tensor."""
    value = default if value is None else value
    if isinstance(value, Tensor):
        if value.dtype == torch.bool or value.is_complex():
            raise TypeError(f"{name} must be a real tensor, got dtype {value.dtype}")
        scales = value.cpu() if value.is_floating_point() else value.cpu().float()
    elif is_real(value) or (isinstance(value, (list, tuple)) and all(map(is_real, value))):
        scales = torch.tensor(value, dtype=torch.float32)
    else:
        raise TypeError(
            f"{name} must be a number, a list of numbers or a (n_videos,) tensor, got {short(value)}"
        )
    if scales.dim() == 0:
        scales = scales.expand(videos)
    if tuple(scales.shape) != (videos,):
        raise ValueError(
            f"{name} must be a number or have shape (n_videos,) = ({videos},) (one per row of "
            f"video_grid_thw), got shape {tuple(scales.shape)}"
        )
    bad = ~(torch.isfinite(scales) & (scales >= 0))
    if bad.any():
        i = int(bad.nonzero()[0])
        raise ValueError(f"{name} must be finite and >= 0, got {float(scales[i])} for video {i}")
    return scales
