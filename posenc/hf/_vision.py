"""Converters for the vision towers that rotate patches by their grid position: :class:`~posenc.AxialRoPE`.

DINOv3 (and EoMT's), Pixtral, Llama 4's, SAM 3's and SAM 2's memory attention, EfficientLoFTR, and any tower whose
``rope_type`` is ``"axial"`` (Qwen2-VL's kin, by rule: :func:`vision_axial`).
"""

from __future__ import annotations

from typing import Any

from .._checks import check_int, check_positive_float, check_positive_int
from ..base import PositionalEncoding
from ..encodings import AxialRoPE
from ._read import Config, get, positive_int, rope_dict
from ._rope import RopeDefaults, _theta, heads_and_head_dim


def _sides(cfg: Config, model_type: str, key: str, default: int) -> list[int]:
    """An image's or a patch's ``[height, width]``, given as an int or a pair."""
    value = get(cfg, key, default=default)
    sides = list(value) if isinstance(value, (list, tuple)) else [value, value]
    if len(sides) != 2:
        raise ValueError(f"{model_type} config: {key} must be an int or (height, width), got {value!r}")
    return [check_positive_int(f"{model_type} config: {key}", side) for side in sides]


def dinov3(cfg: Config, model_type: str, causal: bool | None) -> AxialRoPE:
    """DINOv3's 2D RoPE: periods ``rope_theta ** (2i / (dh / 2))`` per axis on patch centres in (-1, 1),
    CLS and register tokens unrotated (HF DINOv3ViT reads no other rope field; eval: no augmentation)."""
    # (the head width is hidden_size // heads in its code: no head_dim key)
    _, head_dim = heads_and_head_dim(cfg, model_type, RopeDefaults(384, 6, None), read_head_dim=False)
    image_h, image_w = _sides(cfg, model_type, "image_size", 224)
    patch_h, patch_w = _sides(cfg, model_type, "patch_size", 16)
    registers = check_int(
        f"{model_type} config: num_register_tokens", get(cfg, "num_register_tokens", default=0), minimum=0
    )
    return AxialRoPE(
        head_dim,
        freqs="period",
        base=check_positive_float(f"{model_type} config: rope_theta", get(cfg, "rope_theta", default=100.0)),
        grid_size=(image_h // patch_h, image_w // patch_w),
        num_prefix_tokens=1 + registers,
    )


#: EoMT's config class defaults (DINOv3-large sizes) for keys a config.json leaves out
_EOMT = {"hidden_size": 1024, "num_attention_heads": 16, "image_size": 640, "num_register_tokens": 4}
_EOMT |= {"num_hidden_layers": 24, "num_blocks": 4, "num_queries": 200}


def eomt_dinov3(cfg: Config, model_type: str, causal: bool | None) -> list[PositionalEncoding]:
    """EoMT (DINOv3 backbone): DINOv3's RoPE, base from its default-type ``rope_parameters``; its last
    ``num_blocks`` layers put ``num_queries`` query tokens before the class and register tokens, unrotated too."""
    cfg = {**_EOMT, **cfg}
    cfg["rope_theta"] = _only_theta(cfg, model_type, 100.0)
    n, blocks, queries = (
        positive_int(cfg, model_type, k) for k in ("num_hidden_layers", "num_blocks", "num_queries")
    )
    early = dinov3(cfg, model_type, causal)
    late = dinov3({**cfg, "num_register_tokens": early.num_prefix_tokens - 1 + queries}, model_type, causal)
    layers: list[PositionalEncoding] = [early] * n  # its queries join at layer n - num_blocks (if it has one)
    return layers[: n - blocks] + [late] * blocks if blocks <= n else layers


def _only_theta(
    cfg: Config,
    model_type: str,
    default: float | None,
    rope_type: str = "default",
    also: tuple[str, ...] = (),
) -> float:
    """The ``rope_theta`` of a model whose code reads nothing else of its ``rope_parameters`` (but ``also``), which
    must then be ``{"rope_type": rope_type, "rope_theta": ...}`` (a top-level ``partial_rotary_factor`` is one key
    more: transformers writes it in): the dict's own, else the config's, else ``default`` (EoMT, the vision
    towers)."""
    params = rope_dict(cfg, model_type)
    if cfg.get("partial_rotary_factor") is not None:  # (transformers writes a top-level one into the dict)
        params = {"partial_rotary_factor": cfg["partial_rotary_factor"], **params}
    if params.get("rope_type", rope_type) != rope_type or set(params) - {"rope_type", "rope_theta", *also}:
        more = "".join(f", {key!r}: ..." for key in also)
        raise ValueError(
            f"{model_type} config: rope_parameters must be {{'rope_type': {rope_type!r}, 'rope_theta': ...{more}}} "
            f"(its code reads nothing else), got {params!r}"
        )
    theta = _theta(cfg, model_type, params, "rope_parameters", default)
    if theta is None:
        raise ValueError(
            f"{model_type} config: missing 'rope_theta' (in rope_parameters or at the top level)"
        )
    return check_positive_float(f"{model_type} config: rope_theta", theta)


def _columns_first(head_dim: int, model_type: str, theta: float, **grid: Any) -> AxialRoPE:
    """Per axis ``dh / 4`` frequencies ``rope_theta ** (-2i / (dh / 2))`` on neighbouring pairs, columns first: the
    2D rotary of Llama 4's vision tower and of SAM's models."""
    if head_dim % 4:  # (their code's frequencies then miss the head's pairs)
        raise ValueError(f"{model_type} config: its head width {head_dim} must be a multiple of 4")
    return AxialRoPE(head_dim, base=theta, layout="interleaved", axis_order=(1, 0), **grid)


def pixtral(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    """Pixtral's vision encoder: 2D RoPE with alternating frequencies (even to rows, odd to columns),
    ``rope_type: "axial"`` at ``rope_theta``, on the ``image_size // patch_size`` grid of patches."""
    _, head_dim = heads_and_head_dim(cfg, model_type, RopeDefaults(1024, 16, None, head_dim=64))
    theta = _only_theta(cfg, model_type, 10000.0, "axial")
    side = positive_int(cfg, model_type, "image_size", default=1024)
    side //= positive_int(cfg, model_type, "patch_size", default=16)
    return AxialRoPE(head_dim, axis_layout="alternate", base=theta, grid_size=(side, side))


def llama4_vision(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    """Llama 4's vision tower: per axis ``dh / 4`` frequencies ``rope_theta ** (-2i / (dh / 2))`` on neighbouring
    pairs, columns first, on the ``image_size // patch_size`` square grid numbered from 1, then its class token,
    unrotated (``Llama4VisionRotaryEmbedding``: every tile has this grid)."""
    _, head_dim = heads_and_head_dim(cfg, model_type, RopeDefaults(768, 16, None), read_head_dim=False)
    # (a config.json without image_size or patch_size: config_dict fills its class's, _DEFAULTS_BY_KEY)
    side = positive_int(cfg, model_type, "image_size") // positive_int(cfg, model_type, "patch_size")
    theta = _only_theta(cfg, model_type, 10000.0)
    return _columns_first(
        head_dim, model_type, theta, grid_size=(side, side), num_suffix_tokens=1, first_index=1
    )


#: SAM 3's ViT's config class defaults for keys a config.json leaves out
_SAM3_VIT: dict[str, Any] = {
    "hidden_size": 1024,
    "num_attention_heads": 16,
    "num_hidden_layers": 32,
    "image_size": 1008,
    "patch_size": 14,
}  # (its window_size and global_attn_indexes: _read._DEFAULTS_BY_KEY)


def sam3_vit(cfg: Config, model_type: str, causal: bool | None) -> list[PositionalEncoding]:
    """SAM 3's ViT: per axis ``dh / 4`` frequencies ``rope_theta ** (-2i / (dh / 2))`` on neighbouring pairs,
    columns first. A windowed layer rotates each ``window_size`` square window's patches by their place in it;
    a global layer (``global_attn_indexes``) the whole ``image_size // patch_size`` grid, its coordinates scaled
    to span a window (``ref_grid``, EVA's rule)."""
    cfg = {**_SAM3_VIT, **cfg}
    _, head_dim = heads_and_head_dim(cfg, model_type, RopeDefaults(None, None, None), read_head_dim=False)
    image_h, image_w = _sides(cfg, model_type, "image_size", 0)
    patch_h, patch_w = _sides(cfg, model_type, "patch_size", 0)
    side = image_h // patch_h
    if side != image_w // patch_w:  # (its code lays a non-square grid's positions out transposed)
        raise ValueError(
            f"{model_type} config: image_size={cfg['image_size']!r} over patch_size={cfg['patch_size']!r} is not a "
            "square grid of patches, which its code positions as the transposed grid"
        )
    window, layers = (positive_int(cfg, model_type, key) for key in ("window_size", "num_hidden_layers"))
    global_layers = cfg["global_attn_indexes"]
    if not isinstance(global_layers, (list, tuple)) or not all(type(i) is int for i in global_layers):
        raise TypeError(
            f"{model_type} config: global_attn_indexes must be a list of ints, got {global_layers!r}"
        )
    theta = _only_theta(cfg, model_type, 10000.0, "axial")
    in_window = _columns_first(head_dim, model_type, theta, grid_size=(window, window))
    whole = _columns_first(head_dim, model_type, theta, grid_size=(side, side), ref_grid=(window, window))
    return [whole if i in global_layers else in_window for i in range(layers)]


def sam_memory(cfg: Config, model_type: str, causal: bool | None) -> AxialRoPE:
    """SAM 2's, SAM 3's and EdgeTAM's video trackers, their memory attention (its layers: the model's): per axis ``dh / 4`` frequencies
    ``rope_theta ** (-2i / (dh / 2))`` on neighbouring pairs, columns first, on the current frame's
    ``memory_attention_rope_feat_sizes`` ``(w, h)`` grid of features (SAM 3's: ``image_size // patch_size``
    squared, as its class sets them) (its self-attention: the default positions).
    Its cross-attention's keys are that grid once per memory frame, then the object pointer tokens, unrotated:
    ``k_positions = torch.cat((rope.grid_positions().repeat(frames, 1), torch.zeros(pointers, 2).long()))``.
    EdgeTAM's memory frames are each its temporal tokens, unrotated, then its spatial ones on the grid of
    ``memory_attention_rope_k_sizes`` ``(w, h)``: ``rope.grid_positions((h, w), num_prefix_tokens=temporal)`` per
    frame."""
    width = positive_int(cfg, model_type, "memory_attention_hidden_size", default=256)
    heads = positive_int(cfg, model_type, "memory_attention_num_attention_heads", default=1)
    rate = positive_int(cfg, model_type, "memory_attention_downsample_rate", default=1)
    if width % (rate * heads):  # (its rotary's width, width // (rate * heads), is then not its attention's)
        raise ValueError(
            f"{model_type} config: memory_attention_hidden_size={width} does not split into downsample_rate * "
            f"heads = {rate} * {heads}"
        )
    if model_type == "sam3_tracker_video":  # (its class writes image_size // patch_size over the sizes given)
        patch = (cfg.get("vision_config") or {}).get("backbone_config") or {}
        side = positive_int(cfg, model_type, "image_size", default=1008)
        sizes = [side // positive_int(patch, f"{model_type} backbone_config", "patch_size", default=14)] * 2
    else:
        sizes = get(cfg, "memory_attention_rope_feat_sizes", default=[64, 64])
    if not isinstance(sizes, (list, tuple)) or len(sizes) != 2:
        raise ValueError(
            f"{model_type} config: memory_attention_rope_feat_sizes must be (w, h), got {sizes!r}"
        )
    w, h = (check_positive_int(f"{model_type} config: memory_attention_rope_feat_sizes", s) for s in sizes)
    theta = _only_theta(cfg, model_type, 10000.0, "axial")
    return _columns_first(width // (rate * heads), model_type, theta, grid_size=(h, w))


#: EfficientLoFTR's config class defaults for keys a config.json leaves out
_EFFICIENTLOFTR: dict[str, Any] = {
    "hidden_size": 256,
    "num_attention_heads": 8,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 4.0},
}


def efficientloftr(cfg: Config, model_type: str, causal: bool | None) -> AxialRoPE:
    """EfficientLoFTR's 2D RoPE, turning the whole ``hidden_size`` vector of each query and key before its heads are
    split (the encoding's ``head_dim`` is ``hidden_size``): neighbouring pairs, the row and then the column at each
    frequency ``rope_theta ** (-4n / hidden_size)`` (``axis_layout="cycle"``), on its aggregated feature grid
    numbered from 1. The grid follows the image, so there is no default: ``rope.grid_positions((h, w))`` with
    ``h = (feature_height - q_aggregation_kernel_size) // q_aggregation_stride + 1``, ``w`` likewise."""
    cfg = {**_EFFICIENTLOFTR, **cfg}
    hidden = positive_int(cfg, model_type, "hidden_size")
    head_dim = get(cfg, "head_dim", default=hidden // positive_int(cfg, model_type, "num_attention_heads"))
    theta = _only_theta(cfg, model_type, 10000.0, also=("partial_rotary_factor",))
    # (the dict's own factor, else the top-level one that transformers writes into it)
    top = get(cfg, "partial_rotary_factor", default=1.0)
    factor = rope_dict(cfg, model_type).get("partial_rotary_factor", top)
    pairs = int(head_dim * factor) // 2  # (its code's frequencies: one per row pair and column pair)
    if 4 * pairs != hidden or int(head_dim * factor) % 2:
        raise ValueError(
            f"{model_type} config: rope_parameters['partial_rotary_factor']={factor} gives {pairs} frequencies, "
            f"but its code turns hidden_size / 4 = {hidden / 4:g} pairs per axis with them: the factor must be "
            "hidden_size / (2 * head_dim)"
        )
    return AxialRoPE(hidden, base=theta, axis_layout="cycle", layout="interleaved", first_index=1)


def vision_axial(cfg: Config, model_type: str, axes: int = 2, **options: Any) -> AxialRoPE:
    """A vision tower with ``rope_type: "axial"`` (Qwen2-VL's and its kin's ``*VisionRotaryEmbedding``):
    per axis ``s / 2`` frequencies ``rope_theta ** (-2i / s)``, ``s = 2 * (head_dim // axes // 2)``, the
    angles laid out ``[rows | columns]`` twice (:class:`AxialRoPE`'s default ``axis_layout="cat"``,
    ``layout="half"``; ``axes=3``: ``[t | h | w]``, the channels left over pass through; ``options``: the
    other :class:`AxialRoPE` keywords of a tower laid out otherwise), on the patch indices of
    ``get_vision_position_ids`` (no default grid: images vary in size)."""
    theta = _only_theta(cfg, model_type, None, "axial")
    # the attention width: Qwen2-VL's embed_dim where it has one (its hidden_size is the merger's output)
    width = {"hidden_size": cfg["embed_dim"]} if cfg.get("embed_dim") is not None else {}
    _, head_dim = heads_and_head_dim({**cfg, **width}, model_type, RopeDefaults(None, None, None))
    if head_dim < 2 * axes or (axes == 2 and head_dim % 4):  # (its code's frequencies then overrun the head)
        raise ValueError(
            f"{model_type} config: head_dim={head_dim} does not split into {axes} axes of even width"
        )
    return AxialRoPE(head_dim, (2 * (head_dim // axes // 2),) * axes, base=theta, **options)
