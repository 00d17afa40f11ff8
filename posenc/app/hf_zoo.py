"""Every installed transformers model type with a text rotary embedding (or a vision tower's axial one), checked against posenc.

For each ``model_type`` in ``CONFIG_MAPPING_NAMES`` whose modeling module defines a text
``*RotaryEmbedding`` (or only a tower's, where posenc converts the type by rule to a rotation: PE Audio's
encoder, LASR's) and an apply function (:data:`APPLY`), a tiny config is built (nothing downloaded,
no model instantiated; the class defaults where its other parts reject the tiny sizes); the model's
own rotary module gives ``(cos, sin)`` (or complex ``e^(i angle)``) for default, offset and batched
``position_ids`` (for each of its layer types, q/k as wide as that type's head), plus distinct
``(t, h, w)`` positions ``(3, b, t)`` for M-RoPE (whose default sections, sized for a full head, are
scaled to the tiny one and written into ``rope_parameters``); its apply function rotates random q/k,
and posenc's encoding of a layer of that type (from the config object and from its ``to_dict()``)
must give the same rotated q/k, or the same q·k scores where the model permutes channels
(DeepSeek's interleaved pairs come out de-interleaved).

Vision towers whose config has ``rope_type: "axial"`` (Qwen2-VL's and its kin's; a modeling module with a
``compute_axial_rope_parameters`` rotary) are checked against that vision rotary module and the tower's
``apply_rotary_pos_emb_vision`` instead, at :data:`GRIDS`' positions (:func:`_check_vision`). A rotary with
the rows of a whole, fixed sequence (Llama 4's vision tower) is checked at posenc's default positions
(:func:`_check_whole_sequence`), a DINOv3-style one per patch of two images (:func:`_check_patches`), and
one whose layers hold their own positions (SAM 3's ViT) layer by layer (:func:`_check_layer_rows`).

Outcomes: matched (by posenc's table of model types, or by rule from the standardized fields);
refused (posenc raised ValueError, naming the field; also where the rotation could not be built for
the text model but posenc refuses its config anyway); mismatched (a bug); not built (the config or
the rotary module could not be made, with the reason); no rotary of its own (a tower or VQ model beside
the text model whose own model builds no rotary module, or only in sub-models with rows of their own,
:func:`_own_rotary`; a tower that has its own, as dots3's audio encoder, is checked with it).

Used by ``tests/hf/test_zoo.py`` (which fails on any mismatch and keeps ``docs/hf_coverage.md``) and
by ``posenc models``. Needs ``transformers``; uses posenc's public API only.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import typing
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, Literal

import torch
import transformers
from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES
from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

import posenc
from posenc.hf import SUPPORTED_MODEL_TYPES, from_hf_config, layer_encodings

__all__ = ["OUTCOMES", "check_model_type", "convert_model_type", "report", "survey"]

#: The outcomes, in the order the report counts them. "no rotary of its own": a sub-config (an audio or vision
#: tower, a VQ model) whose model builds no rotary module, or only inside sub-models with rows of their own.
OUTCOMES = ("matched", "refused", "mismatched", "not built", "no rotary of its own")

TINY: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "max_position_embeddings": 64,
}
#: The model's apply function: the first of these its modeling module defines.
APPLY = ("apply_rotary_pos_emb", "apply_rotary_pos_emb_interleave", "apply_rotary_emb")
#: Fields whose class default does not fit the tiny head (GPT-J's rotary_dim 64 > 32), where the class has them.
FIT: dict[str, Any] = {"rotary_dim": 16}
#: Configs whose class default misses what is compared: ESM's is a model without RoPE (the rotary variant is
#: ESM-2; the default, ESM-1b's learned table, is surveyed by tests/hf/test_absolute.py); DeepSeek V4's two
#: layers are both compressed (a sliding layer too, so that both of its rope kinds rotate, "compress" with YaRN);
#: ERNIE 4.5 VL's rotary module cannot build its default sections (64 pairs) on the tiny head: 16 pairs;
#: Cohere Compass's class default has no RoPE dict at all (its checkpoints give one per layer type, None: NoPE);
#: LFM3's two tiny layers would be convolutions (no attention to compare): its two attention kinds; Flint's
#: would be full layers, which it does not rotate: a sliding one first;
#: Moonshine Streaming rotates 0.8 of its 40-wide heads (32 channels), of the tiny 32-wide ones an odd 25;
#: EoMT's 4 query blocks would be both tiny layers: 1, of 3 queries;
#: Zamba2 rotates only with use_mem_rope (its class default: False, NoPE), GraniteMoeHybrid only with
#: position_embedding_type 'rope' (its class default: None, NoPE); MiniMax M3 VL's class default
#: rotary_dim (64) disagrees with the 128 channels its code rotates (head_dim * partial_rotary_factor, which
#: posenc refuses): a config whose two agree.
_MINIMAX = {
    "rotary_dim": 16,
    "rope_parameters": {"rope_type": "default", "rope_theta": 5e6, "partial_rotary_factor": 0.125},
}
_COMPASS = {
    "layer_types": ["sliding_attention", "full_attention"],
    "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 5e4, "mrope_section": [6, 5, 5]},
        "full_attention": None,
    },
}
ROTARY_VARIANT: dict[str, dict[str, Any]] = {
    "lfm3": {"layer_types": ["sliding_attention", "full_attention"]},
    "flint": {"layer_types": ["sliding_attention", "full_attention"]},
    "moonshine_streaming": {"head_dim": 40},
    "cohere_compass_text": _COMPASS,
    "cohere_compass": {"text_config": {**TINY, **_COMPASS}},
    "esm": {"position_embedding_type": "rotary"},
    "zamba2": {"use_mem_rope": True},
    "granitemoehybrid": {
        "position_embedding_type": "rope",
        "layer_types": ["linear_attention", "full_attention"],
    },
    # (hybrids whose two tiny layers would both be recurrent, which rotate nothing: an attention layer second)
    **{
        hybrid: {"layer_types": ["linear_attention", "full_attention"]}
        for hybrid in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "qwen4_exp_text", "bailing_hybrid")
    },
    "bamba": {"attn_layer_indices": [1]},
    "recurrent_gemma": {"block_types": ["recurrent", "attention"]},
    "sarvam_moe": {"partial_rotary_factor": 0.5},  # (GLM-4 MoE's code, which reads it)
    # (Mellum's code reads the factor of each layer type's dict alone, and its class copies none in)
    "mellum": {"partial_rotary_factor": 0.5},
    "eomt_dinov3": {"num_blocks": 1, "num_queries": 3},
    # windows of 4x4 patches, a global layer on the 8x8 grid (coordinates halved)
    "sam3_vit_model": {
        "image_size": 112,
        "window_size": 4,
        "global_attn_indexes": [1],
        "num_hidden_layers": 3,
    },
    # two heads of 32; SAM 2: a 6 x 4 (w, h) grid of features, rows and columns told apart; SAM 3: 4 x 4 (its
    # class makes them image_size // patch_size)
    **{
        name: {
            "memory_attention_hidden_size": 64,
            "memory_attention_num_attention_heads": 2,
            "memory_attention_num_layers": 2,
            **grid,
        }
        for name, grid in (
            ("sam2_video", {"memory_attention_rope_feat_sizes": [6, 4]}),
            ("sam3_tracker_video", {"image_size": 56}),
            (
                "edgetam_video",
                {"memory_attention_rope_feat_sizes": [6, 4], "memory_attention_rope_k_sizes": [3, 2]},
            ),
        )
    },
    "minimax_m3_vl_text": _MINIMAX,
    "minimax_m3_vl": {"text_config": {**TINY, **_MINIMAX}},
    "ernie4_5_vl_moe_text": {
        "rope_parameters": {"rope_type": "default", "rope_theta": 5e5, "mrope_section": [6, 6, 4]}
    },
    "dots3_note_text": {"num_hidden_layers": 4},  # (its first two layers are DSA ones, then sliding ones)
    "dots3_note": {"text_config": {"num_hidden_layers": 4}},  # (its vision adapter's width: the text model's)
    "deepseek_v4": {
        "layer_types": ["sliding_attention", "compressed_sparse_attention"],
        "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
    },
}
#: Models whose rotary module takes a rope kind of its own instead of the layer type (DeepSeek V4's
#: attention: "main" on its sliding layers, "compress" on the others): the kind of each layer type.
ROPE_KIND: dict[str, Any] = {"deepseek_v4": lambda t: "main" if t == "sliding_attention" else "compress"}
#: A hybrid's layer types with no attention to rotate (transformers' recurrent layers; LFM3's convolutions): its
#: rotary module serves them rows that its code never applies; tests/hf/test_layers.py runs the models to check
#: that posenc gives NoPE exactly where they rotate nothing.
UNROTATED_TYPES = ("linear_attention", "conv")
T = 6
POSITIONS = {
    "default": torch.arange(T)[None].repeat(2, 1),
    "offset": torch.arange(T)[None].repeat(2, 1) + 37,
    "batched": torch.stack([torch.arange(T), torch.tensor([3, 9, 10, 11, 40, 41])]),
}
#: M-RoPE models (a rotary module with ``mrope_section``) also rotate at distinct (t, h, w) positions, (3, b, t):
#: with the same position on every axis M-RoPE equals RoPE, which would hide a plain-RoPE conversion.
AXES = torch.stack([POSITIONS["batched"], POSITIONS["batched"] // 2, POSITIONS["batched"] % 4])
#: M-RoPE models whose rotary module has no ``mrope_section`` (their axes are in their code): how many axes
AXES_OF = {"neomme": 2}  # rows and columns, (2, b, t)
TOL: dict[str, Any] = {"atol": 2e-5, "rtol": 1e-5}
#: The scalings the zoo is surveyed with again (:func:`survey`'s ``rope``; the tiny configs hold 64 positions, 16
#: of them trained): YaRN's ramp over the frequencies and its attention factor reach every model's rotation
SCALINGS: dict[str, dict[str, Any]] = {
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
}
_SKIP_NAMES = ("Vision", "Audio", "DiT", "Talker", "Encoder", "Depth", "ViT")
#: Vision towers (``rope_type: "axial"``): (t, h, w) grids of patches, a non-square one and two images
#: packed, and a two-frame video, as get_vision_position_ids orders them (merge-block-major).
GRIDS = (torch.tensor([[1, 4, 6], [1, 2, 2]]), torch.tensor([[2, 4, 4]]))


def _rotary_classes(module: Any, *, towers: bool = False) -> list[type]:
    """The module's text ``*RotaryEmbedding`` classes; with ``towers``, those of its towers (:data:`_SKIP_NAMES`)."""
    found = []
    for name in dir(module):
        obj = getattr(module, name)
        if (
            name.endswith("RotaryEmbedding")
            and isinstance(obj, type)
            and obj.__module__ == module.__name__
            and any(part in name for part in _SKIP_NAMES) == towers
        ):
            found.append(obj)
    return sorted(found, key=lambda c: ("Text" not in c.__name__, len(c.__name__)))


def _rotates_by_rule(model_type: str) -> bool:
    """Whether posenc converts the class's default config by rule (outside its table) to a rotation in some layer:
    a claim about a model whose rotary is a tower's (PE Audio's encoder, LASR's), to be checked like a text one."""
    if model_type in SUPPORTED_MODEL_TYPES:
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return any(e.kind == "rotary" for e in layer_encodings(CONFIG_MAPPING[model_type]()))
    except Exception:  # (refused, or a class that needs arguments)
        return False


def _used_rotary(module: Any, config_class: type) -> type | None:
    """The rotary class the model of ``config_class`` builds (``self.rotary_emb = X(`` in its source, Llama 4's
    vision model's ``self.rotary_embedding``):
    a module may define several (Qwen3-Omni: an M-RoPE one for the talker, a plain one for its code
    predictor), which the names alone do not tell apart."""
    for obj in vars(module).values():
        if (
            isinstance(obj, type)
            and getattr(obj, "config_class", None) is config_class
            and "__init__" in vars(obj)
        ):
            found = re.search(
                r"self\.rotary_emb(?:edding)? = (\w+)\(", inspect.getsource(vars(obj)["__init__"])
            )
            if found and isinstance(getattr(module, found.group(1), None), type):
                return getattr(module, found.group(1))
    return None


def _own_rotary(module: Any, config: Any) -> tuple[str, list[type], list[str]] | None:
    """For a config whose model does not build the text rotary: its model (a class of ``module`` whose
    ``config_class`` it is, else whose ``__init__`` takes it, built on the meta device; not where transformers'
    AutoModel builds it from another module), the rotary modules it
    builds (``*RotaryEmbedding``, or an ``inv_freq`` buffer) outside its sub-models with a model type of their
    own, and those sub-models' types that rotate; ``None`` where no such model builds."""
    cls = type(config)
    if MODEL_MAPPING_NAMES.get(cls.model_type, "") not in ("", *vars(module)):  # (Gemma 3n's vision: timm's)
        return None
    owners = [o for o in vars(module).values() if isinstance(o, type) and issubclass(o, torch.nn.Module)]
    # (not its PreTrainedModel, a base that builds nothing: it would say "no rotary" of a model that failed to build)
    built = [
        (o, [config])
        for o in owners
        if getattr(o, "config_class", None) is cls and not o.__name__.endswith("PreTrainedModel")
    ]
    for o in owners if not built else ():  # (Gemma 4 Unified's embedders: its config and the text model's)
        params = list(inspect.signature(o.__init__).parameters.values())[1:]
        takes = [
            cls if cls in typing.get_args(p.annotation) else p.annotation
            for p in params
            if p.default is p.empty
        ]
        if cls in takes and all(hasattr(a, "model_type") for a in takes):  # (the others: config classes)
            built.append((o, [config if a is cls else a() for a in takes]))
    models = []
    for owner, args in built:
        try:
            with torch.device("meta"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                models.append(owner(*args))
        except Exception:
            continue
    if models:  # the outermost (Idefics: its vision transformer, not the embeddings it holds)
        model = max(models, key=lambda m: len(list(m.modules())))
        subs = {
            name: m.config.model_type
            for name, m in model.named_modules()
            if name and getattr(getattr(m, "config", None), "model_type", "") not in ("", cls.model_type)
        }
        own, inner = [], set()
        for name, m in model.named_modules():
            if type(m).__name__.endswith("RotaryEmbedding") or "inv_freq" in dict(
                m.named_buffers(recurse=False)
            ):
                within = [t for s, t in subs.items() if name.startswith(s + ".")]
                if within:
                    inner.add(within[0])
                else:
                    own.append(type(m))
        return type(model).__name__, list(dict.fromkeys(own)), sorted(inner)
    return None


def _is_mla(text: Any) -> bool:
    """Whether the model's heads are ``[q_nope | q_pe]`` (MLA), its ``qk_nope_head_dim`` set."""
    try:
        return bool(getattr(text, "qk_nope_head_dim", None))
    except Exception:  # (dots3: a per-layer attribute, which transformers will not read globally)
        return True


def _reference(
    module: Any, text: Any, rotary: Any, q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor, layer_type: Any
):
    """The model's rotated q, k: its rotary module's (cos, sin) through its apply_rotary_pos_emb."""
    kwargs = {} if layer_type is None else {"layer_type": layer_type}
    try:
        out = rotary(q, pos, **kwargs)
    except (RuntimeError, IndexError, ValueError):
        out = rotary(q, pos[None].expand(3, -1, -1), **kwargs)  # M-RoPE: (3, b, t) positions
    apply = next(getattr(module, name) for name in APPLY if hasattr(module, name))
    # DeepSeek V3: pairs in, halves out (where rope_interleave says so, or always where there is no such field;
    # not for a tower's own rotary, a name _rotary_classes skips: dots3's audio encoder calls apply_rotary_pos_emb)
    if (
        getattr(text, "rope_interleave", True)
        and hasattr(module, "apply_rotary_pos_emb_interleave")
        and not any(part in type(rotary).__name__ for part in _SKIP_NAMES)
    ):
        apply = module.apply_rotary_pos_emb_interleave
    if isinstance(out, torch.Tensor) and out.is_complex():  # DeepSeek V2, Llama 4: e^(i angle) per pair
        r = 2 * out.shape[-1]  # (MLA: the model passes only q_pe / k_pe, the first r channels here)
        try:
            q_rot, k_rot = apply(q[..., :r], k[..., :r], out)
        except RuntimeError:  # Llama 4: q, k as (b, t, h, d)
            q_rot, k_rot = (
                x.transpose(1, 2) for x in apply(*(x[..., :r].transpose(1, 2) for x in (q, k)), out)
            )
        return torch.cat([q_rot, q[..., r:]], -1), torch.cat([k_rot, k[..., r:]], -1)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError(f"the rotary module returns {type(out).__name__}, not (cos, sin)")
    cos, sin = out
    if list(inspect.signature(apply).parameters)[1] == "cos":  # one tensor at a time (Gemma 3n)
        return apply(q, cos, sin), apply(k, cos, sin)
    if list(inspect.signature(apply).parameters)[1] == "sin":  # GPT-J, CodeGen: apply(x, sin, cos)
        r = 2 * out[0].shape[-1]  # their rotary module's (sin, cos) are half as wide as the rotated channels

        def rotate(x: torch.Tensor) -> torch.Tensor:  # their attention's x: (b, t, h, d), first r channels
            x = x.transpose(1, 2)
            return torch.cat([apply(x[..., :r], *out), x[..., r:]], -1).transpose(1, 2)

        return rotate(q), rotate(k)
    try:
        return apply(q, k, cos, sin)
    except RuntimeError:  # partial rotary: the model passes only the rotated channels
        r = cos.shape[-1]
        if _is_mla(text):  # MLA heads (Mistral 4, dots3): [q_nope | q_rot], the last r
            q_rot, k_rot = apply(q[..., -r:], k[..., -r:], cos, sin)
            return torch.cat([q[..., :-r], q_rot], -1), torch.cat([k[..., :-r], k_rot], -1)
        q_rot, k_rot = apply(q[..., :r], k[..., :r], cos, sin)
        return torch.cat([q_rot, q[..., r:]], -1), torch.cat([k_rot, k[..., r:]], -1)


def _head_dim(text: Any, rotary: Any, layer_type: Any) -> int:
    per_layer = getattr(text, "per_layer_config", None)  # (Gemma 4: a head width per layer type)
    if per_layer is not None and layer_type is not None and getattr(per_layer[layer_type], "head_dim", None):
        return per_layer[layer_type].head_dim
    try:
        head_dim = getattr(text, "head_dim", None)
    except Exception:  # (Gemma 4: a per-layer attribute)
        head_dim = None
    heads, width = getattr(text, "num_attention_heads", None), getattr(text, "hidden_size", None)
    dim = rotary.inv_freq.shape[-1] * 2 if hasattr(rotary, "inv_freq") else 32
    return head_dim or (width // heads if heads and width else dim)


def _fit_mrope(text: Any, cls: type) -> Any:
    """The rotary module of ``text`` made tiny (a composite config keeps a full-size text model) with
    its ``mrope_section`` scaled to the tiny head's rotated pairs, written into ``rope_parameters``
    (the model's default sections fill a full head: Qwen2-VL's [16, 24, 24] is 64 pairs)."""
    for key in ("hidden_size", "num_attention_heads", "num_key_value_heads"):
        setattr(text, key, TINY[key])
    if getattr(text, "head_dim", None):
        text.head_dim = TINY["hidden_size"] // TINY["num_attention_heads"]
    rotary = cls(text)
    pairs, section = rotary.inv_freq.shape[-1], list(rotary.mrope_section)
    scaled = [s * pairs // sum(section) for s in section]
    # the remainder to the time section: the first (t, h, w), or the last where the first two are equal
    # (ERNIE 4.5 VL lists (h, w, t) and alternates h and w, which must stay equal)
    scaled[-1 if section[0] == section[1] else 0] += pairs - sum(scaled)
    text.rope_parameters["mrope_section"] = scaled
    return cls(text)


def _references(module: Any, text: Any, rotary: Any) -> tuple:
    """The layer types, the position cases and, for each, random (q, k) as wide as that layer type's
    head and the model's rotation of them."""
    takes_type = "layer_type" in inspect.signature(rotary.forward).parameters
    types = list(dict.fromkeys(getattr(text, "layer_types", None) or [None])) if takes_type else [None]
    types = [t for t in types if t not in UNROTATED_TYPES]
    params = getattr(text, "rope_parameters", None) or {}
    kind = ROPE_KIND.get(getattr(text, "model_type", ""), lambda t: t)
    if any(isinstance(v, dict) for v in params.values()):  # per layer type: the types with a RoPE dict
        types = [
            t for t in types if isinstance(params.get(kind(t)), dict)
        ]  # (Beam's None: NoPE; LFM3's conv)
    if not types:
        raise ValueError(f"no layer type of the tiny config rotates ({getattr(text, 'layer_types', None)})")
    gen = torch.Generator().manual_seed(0)
    axes = 3 if hasattr(rotary, "mrope_section") else AXES_OF.get(getattr(text, "model_type", ""))
    cases = {**POSITIONS, "axes": AXES[:axes]} if axes else POSITIONS
    references = {}
    for layer_type in types:
        q, k = (torch.randn(2, 2, T, _head_dim(text, rotary, layer_type), generator=gen) for _ in range(2))
        for name, pos in cases.items():
            references[layer_type, name] = (
                q,
                k,
                *_reference(module, text, rotary, q, k, pos, kind(layer_type)),
            )
    return types, cases, references


def _check_vision(module: Any, config: Any) -> tuple[str, str]:
    """A vision tower's rotation: its ``*RotaryEmbedding`` with ``compute_axial_rope_parameters``'s
    (cos, sin) at the patches' (h, w) (or (t, h, w)) positions through its ``apply_rotary_pos_emb_vision``,
    on random ``(N, heads, head_dim)`` q, k, against posenc's encoding of the config object and dict."""
    from transformers.vision_utils import get_vision_position_ids

    rotary, reason = None, "no *RotaryEmbedding with compute_axial_rope_parameters builds from it"
    for obj in vars(module).values():
        if isinstance(obj, type) and hasattr(obj, "compute_axial_rope_parameters") and rotary is None:
            try:
                rotary = obj(config)
            except Exception as err:
                reason = f"{obj.__name__}(config): {type(err).__name__}: {str(err)[:80]}"
    apply = getattr(module, "apply_rotary_pos_emb_vision", None)
    multi = getattr(module, "apply_multidimensional_rope", None)  # Gemma 4: (x, y) positions, (b, N, h, d)
    if rotary is None or (apply is None and multi is None):
        return _unbuilt(
            config, reason if rotary is None else "no apply_rotary_pos_emb_vision in its modeling module"
        )
    gen, merge = torch.Generator().manual_seed(0), getattr(config, "spatial_merge_size", None) or 1
    cases = []
    try:  # (the head width as its compute_axial_rope_parameters reads it; apply fails on another)
        dim = getattr(config, "head_dim", None)
        dim = dim or (getattr(config, "embed_dim", None) or config.hidden_size) // config.num_attention_heads
        temporal = "self.include_temporal = True" in inspect.getsource(module)  # (t, h, w) positions
        for grid in GRIDS:
            pos = get_vision_position_ids(grid, merge, include_temporal=temporal)
            q, k = (torch.randn(len(pos), 2, dim, generator=gen) for _ in range(2))
            if apply is not None:
                cases.append((pos, q, k, *apply(q, k, *rotary(torch.zeros(1), pos))))
            elif multi is not None:  # (Gemma 4: the same positions as its pixel_position_ids, read (x, y))
                cos, sin = rotary(q, pos[None])
                cases.append((pos, q, k, *(multi(x[None], cos, sin, pos[None])[0] for x in (q, k))))
    except Exception as err:
        return _unbuilt(config, f"reference rotation: {type(err).__name__}: {str(err)[:80]}")
    for form in (config, config.to_dict()):
        try:
            enc = posenc.from_hf_config(form)
        except ValueError as err:
            return "refused", str(err)
        except Exception as err:
            return "mismatched", f"{type(form).__name__}: {type(err).__name__}: {err}"
        for pos, q, k, q_ref, k_ref in cases:
            try:  # posenc's (b, h, N, dh) against the tower's (N, h, dh)
                q_ours, k_ours = enc.encode_qk(
                    *(x.transpose(0, 1)[None] for x in (q, k)), q_positions=pos, k_positions=pos
                )
            except Exception as err:
                return "mismatched", f"{type(form).__name__}: {enc!r}: {type(err).__name__}: {err}"
            q_ours, k_ours = (x[0].transpose(0, 1) for x in (q_ours, k_ours))
            if not _same((q_ours, k_ours), (q_ref, k_ref)):
                return "mismatched", f"{type(form).__name__}, grid {pos.shape[0]} patches: {enc!r}"
    return "matched", "rule"


def _each_axial_layer(config: Any, check: Callable[[int, Any, int], str | None]) -> tuple[str, str]:
    """``check(i, encoding, layers)`` of each layer's :class:`posenc.AxialRoPE`, of the config object and of its
    dict: ``None``, or where they differ; refused where posenc raises ValueError (naming the field)."""
    for form in (config, config.to_dict()):
        try:
            encodings = layer_encodings(form)
        except ValueError as err:
            return "refused", str(err)
        except Exception as err:
            return "mismatched", f"{type(form).__name__}: {type(err).__name__}: {err}"
        for i, enc in enumerate(encodings):
            where = f"{type(form).__name__}, layer {i}"
            if not isinstance(enc, posenc.AxialRoPE):
                return "mismatched", f"{where}: {enc!r}, the model rotates by a grid"
            if (differs := check(i, enc, len(encodings))) is not None:
                return "mismatched", f"{where}{differs}: {enc!r}"
    return "matched", "table" if type(config).model_type in SUPPORTED_MODEL_TYPES else "rule"


def _same(ours: Any, ref: Any) -> bool:
    return all(torch.allclose(a, b, **TOL) for a, b in zip(ours, ref, strict=True))


def _check_patches(module: Any, config: Any, rotary: Any) -> tuple[str, str]:
    """A DINOv3-style rotary (``forward(pixel_values)``: cos, sin at each patch centre) through the module's
    apply_rotary_pos_emb, which leaves the tokens before the patches unrotated: as many as its ``*Embeddings``
    put there (class, registers), plus EoMT's ``num_queries`` in its last ``num_blocks`` layers (its forward),
    per layer, at two image sizes, against posenc's encoding of that layer and its grid_positions."""
    embed = next(
        o
        for o in vars(module).values()
        if isinstance(o, type)
        and issubclass(o, torch.nn.Module)
        and o.__name__.endswith("Embeddings")
        and "pixel_values" in inspect.signature(o.forward).parameters
    )
    p, n = config.patch_size, config.num_hidden_layers
    prefix = embed(config)(torch.zeros(1, 3, p, p)).shape[1] - 1
    first_query_layer = n - getattr(config, "num_blocks", 0)
    gen = torch.Generator().manual_seed(0)

    def check(i: int, enc: Any, _: int) -> str | None:
        want = prefix + (
            config.num_queries if getattr(config, "num_queries", 0) and i >= first_query_layer else 0
        )
        if enc.num_prefix_tokens != want:
            return f", the model leaves {want} tokens unrotated"
        for h, w in ((4, 4), (6, 3)):
            cos, sin = rotary(torch.zeros(1, 3, h * p, w * p))
            q, k = (torch.randn(2, 2, want + h * w, enc.head_dim, generator=gen) for _ in range(2))
            coords = enc.grid_positions((h, w))
            if not _same(
                enc.encode_qk(q, k, q_positions=coords, k_positions=coords),
                module.apply_rotary_pos_emb(q, k, cos, sin),
            ):
                return f", {h}x{w} patches"
        return None

    return _each_axial_layer(config, check)


def _check_whole_sequence(module: Any, config: Any, rotary: Any) -> tuple[str, str]:
    """A rotary whose rows are those of the model's whole, fixed token sequence (Llama 4's vision tower: the
    complex ``freqs_ci`` of every patch and then its class token, whatever ``forward`` is given) through the
    module's ``vision_apply_rotary_emb``, per layer, against posenc's encoding at its default positions."""
    freqs_ci = rotary(torch.zeros(1))
    gen = torch.Generator().manual_seed(0)

    def check(i: int, enc: Any, _: int) -> str | None:
        q, k = (torch.randn(2, len(freqs_ci), 2, enc.head_dim, generator=gen) for _ in range(2))
        ref = module.vision_apply_rotary_emb(q, k, freqs_ci)  # its (b, t, h, dh)
        ours = (x.transpose(1, 2) for x in enc.encode_qk(q.transpose(1, 2), k.transpose(1, 2)))
        return None if _same(ours, ref) else ""

    return _each_axial_layer(config, check)


def _holds_rows(obj: Any) -> bool:
    """A module class built from its config alone whose ``__init__`` makes both ``rotary_emb`` and ``position_ids``."""
    init = vars(obj).get("__init__") if isinstance(obj, type) else None
    if not inspect.isfunction(init) or list(inspect.signature(init).parameters) != ["self", "config"]:
        return False
    source = inspect.getsource(init)
    return "self.position_ids =" in source and "self.rotary_emb =" in source


def _check_layer_rows(module: Any, config: Any) -> tuple[str, str]:
    """A vision model whose layers each hold their rotary module and their patches' positions (SAM 3's ViT: a
    windowed layer a window's grid, a global one the whole grid scaled to span a window), or whose one such
    module serves all its layers (SAM 2's memory attention), each layer's rotation through the module's
    ``apply_rotary_pos_emb_2d`` (EdgeTAM's ``..._self_attn``), against posenc's encoding of that layer at its
    default positions, config object and dict; where the module rotates memory keys (SAM 2's cross-attention: the
    grid for each of two frames, then three object pointer tokens, unrotated; EdgeTAM's: two temporal tokens
    unrotated and its key grid, per frame), those too, at the positions posenc's docs give."""
    # the modules that hold both, built from the config alone where they can be (the trackers' memory attention:
    # not their image encoder, 2 GiB for SAM 3's), else within the whole model (SAM 3's ViT layers)
    owners = [o for o in vars(module).values() if _holds_rows(o)]
    whole = getattr(module, str(MODEL_MAPPING_NAMES[type(config).model_type]))
    try:  # (a rope_type its rotary does not take: the model cannot run the config, and posenc refuses it)
        model = torch.nn.ModuleList([o(config) for o in owners]) if owners else whole(config)
    except Exception as err:
        return _unbuilt(config, f"its model: {type(err).__name__}: {str(err)[:80]}")
    layers: list[tuple[Any, torch.Tensor]] = [
        (m, positions)
        for m in model.modules()
        if hasattr(m, "rotary_emb")
        and isinstance(positions := getattr(m, "position_ids", None), torch.Tensor)
        and getattr(m, "config", config).model_type == config.model_type  # (not a sub-model's: SAM 3's ViT)
    ]
    gen = torch.Generator().manual_seed(0)
    apply = getattr(module, "apply_rotary_pos_emb_2d", None) or module.apply_rotary_pos_emb_2d_self_attn

    def check(i: int, enc: Any, n: int) -> str | None:
        if len(layers) not in (1, n):  # (SAM 2: one for the whole stack)
            return f", one of {n} encodings for the model's {len(layers)} rotary layers"
        owner, positions = layers[i if len(layers) > 1 else 0]
        cos, sin = owner.rotary_emb(torch.zeros(1), positions)
        q, k = (torch.randn(1, 2, len(positions), enc.head_dim, generator=gen) for _ in range(2))
        if not _same(enc.encode_qk(q, k), apply(q, k, cos=cos, sin=sin)):
            return ""
        grid, pointers = enc.grid_positions(), torch.zeros(3, 2).long()
        if hasattr(module, "apply_rotary_pos_emb_2d_cross_attn"):  # EdgeTAM: its keys' own grid
            w, h = config.memory_attention_rope_k_sizes
            frame = enc.grid_positions((h, w), num_prefix_tokens=2)  # two temporal tokens, then the grid
            memory = torch.randn(1, 2, 2 * len(frame) + 3, enc.head_dim, generator=gen)
            cos_k, sin_k = owner.rotary_emb(torch.zeros(1), owner.position_ids_k)
            ref = module.apply_rotary_pos_emb_2d_cross_attn(
                q, memory, cos, sin, cos_k, sin_k, num_k_exclude_rope=3, repeat_freqs_k=2
            )
            keys = torch.cat((frame.repeat(2, 1), pointers))
        elif "num_k_exclude_rope" in inspect.signature(apply).parameters:  # SAM 2: the grid per frame
            memory = torch.randn(1, 2, 2 * len(positions) + 3, enc.head_dim, generator=gen)
            ref = apply(q, memory, cos, sin, num_k_exclude_rope=3, repeat_freqs_k=True)
            keys = torch.cat((grid.repeat(2, 1), pointers))
        else:
            return None
        ours = enc.encode_qk(q, memory, q_positions=grid, k_positions=keys)
        return None if _same(ours, ref) else ", memory keys"

    return _each_axial_layer(config, check)


def _check_feature_map(module: Any, config: Any, rotary: Any) -> tuple[str, str]:
    """A rotary whose rows follow an image's feature map (EfficientLoFTR: ``forward(x)`` of a ``(b, c, h, w)`` map,
    cos/sin per aggregated cell over the whole hidden vector), through the module's ``apply_rotary_pos_emb`` on
    ``(b, t, 1, hidden)`` queries and keys, against posenc's encoding at ``grid_positions`` of that grid, for two
    maps (one not square), per layer, config object and dict."""
    gen = torch.Generator().manual_seed(0)

    def check(i: int, enc: Any, _: int) -> str | None:
        for height, width in ((16, 16), (18, 13)):
            cos, sin = (
                x.flatten(1, 2) for x in rotary(torch.zeros(1, 1, height, width))
            )  # (1, h'w', hidden)
            q, k = (torch.randn(2, cos.shape[1], 1, enc.head_dim, generator=gen) for _ in range(2))
            ref = module.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2)
            grid = [
                (n - config.q_aggregation_kernel_size) // config.q_aggregation_stride + 1
                for n in (height, width)
            ]
            cells = enc.grid_positions(grid)
            ours = enc.encode_qk(q.transpose(1, 2), k.transpose(1, 2), q_positions=cells, k_positions=cells)
            if not _same((x.transpose(1, 2) for x in ours), ref):
                return f", a {height}x{width} map"
        return None

    return _each_axial_layer(config, check)


def _unbuilt(config: Any, reason: str) -> tuple[str, str]:
    """Not built for ``reason``, unless posenc refuses the config anyway (naming the field): refused.
    Only for a config whose model builds the rotary module (a text model, not a tower beside it)."""
    try:
        layer_encodings(config)
    except ValueError as err:
        return "refused", str(err)
    except Exception:  # (reported as not built: there is no rotation to compare with)
        pass
    return "not built", reason


def _table_gives_no_rotation(model_type: str, config: Any) -> bool:
    """Whether posenc's table converts ``config`` to an encoding that does not rotate (a vision tower's grid)."""
    if model_type not in SUPPORTED_MODEL_TYPES:
        return False
    try:
        return from_hf_config(config).kind != "rotary"
    except ValueError:
        return False


def _with_scaling(params: Any, rope: dict[str, Any]) -> Any:
    """``params`` (a RoPE dict, or one per layer type) with ``rope`` merged into each ``"default"`` one."""
    if (
        isinstance(params, dict)
        and "rope_type" not in params
        and any(isinstance(v, dict) or v is None for v in params.values())
    ):
        return {name: _with_scaling(one, rope) for name, one in params.items()}
    if not isinstance(params, dict) or params.get("rope_type", "default") != "default":
        return params
    return {**params, **rope}


def check_model_type(model_type: str, rope: dict[str, Any] | None = None) -> tuple[str, str]:
    """``(outcome, detail)`` for one model type, or ``("", "")`` when it has neither a text rotary embedding nor an axial vision one.

    ``rope`` (a scaling, ``{"rope_type": "yarn", ...}``) is merged into each ``"default"`` RoPE dict of the built text
    config (one per layer type where it has several) before the model's rotary and posenc read it.

    The outcome is one of :data:`OUTCOMES`; the detail is the reason (refused, mismatched, not
    built), or for matched how posenc converts the config: ``"table"`` (a model type of
    :data:`posenc.hf.SUPPORTED_MODEL_TYPES`, or the one its text model has) or ``"rule"`` (from
    the standardized fields).
    """
    config_class = CONFIG_MAPPING[model_type]
    name = config_class.__module__.replace("configuration_", "modeling_")
    mapped = MODEL_MAPPING_NAMES.get(model_type)
    # (no code of its own: the model its auto mapping builds, SarvamMLA's DeepSeek V3)
    if importlib.util.find_spec(name) is None and isinstance(mapped, str) and hasattr(transformers, mapped):
        name = getattr(transformers, mapped).__module__
    try:
        module = importlib.import_module(name)
    except Exception as err:  # (any import failure: a missing optional dependency)
        return ("", "") if "No module named" in str(err) else ("not built", f"modeling import: {err}")
    if model_type in SUPPORTED_MODEL_TYPES and any(
        hasattr(module, name) for name in ("apply_rotary_pos_emb_2d", "apply_rotary_pos_emb_2d_self_attn")
    ):  # SAM 3's ViT, the trackers of SAM 2, SAM 3 and EdgeTAM
        try:
            tiny = config_class(**{**TINY, **ROTARY_VARIANT.get(model_type, {})})
        except Exception as err:  # (a rope_type its class cannot take: YaRN without max_position_embeddings)
            return "not built", f"config: {type(err).__name__}: {str(err)[:80]}"
        return _check_layer_rows(module, tiny)
    if model_type not in SUPPORTED_MODEL_TYPES and any(
        isinstance(obj, type) and hasattr(obj, "compute_axial_rope_parameters")
        for obj in vars(module).values()
    ):  # a vision tower (rope_type "axial"): its own rotary and apply function, not the text model's
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                config = config_class()
        except Exception:
            config = None
        if (getattr(config, "rope_parameters", None) or {}).get("rope_type") == "axial":
            return _check_vision(module, config)
    classes = _rotary_classes(module)
    if not classes and any(hasattr(module, name) for name in APPLY):
        # (a tower's own rotary, where posenc claims a rotation for its type by rule)
        towers = _rotary_classes(module, towers=True)
        classes = towers if towers and _rotates_by_rule(model_type) else []
    if not classes:
        return "", ""
    used = _used_rotary(module, config_class)
    classes = [used, *(c for c in classes if c is not used)] if used else classes
    if not any(hasattr(module, name) for name in APPLY):
        return "not built", f"none of {', '.join(APPLY)} in its modeling module"
    fit: dict[str, Any] = {k: v for k, v in FIT.items() if hasattr(config_class, k)}
    fit.update(ROTARY_VARIANT.get(model_type, {}))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                config = config_class(**{**TINY, **fit})  # (a variant overrides the tiny sizes)
            except Exception:  # the tiny sizes do not fit its other parts (Zamba2's 54 layer types)
                config = config_class(**fit)  # its defaults
        text = config.get_text_config()
        if rope is not None and isinstance(getattr(text, "rope_parameters", None), dict):
            text.rope_parameters = _with_scaling(text.rope_parameters, rope)
    except Exception as err:
        return "not built", f"config: {type(err).__name__}: {str(err)[:80]}"
    used = used or _used_rotary(module, type(text))  # (a composite config: the rotary of its text model)
    rotary = None
    for cls in classes:
        try:
            rotary = cls(text)
            break
        except Exception as err:
            reason = f"{cls.__name__}(config): {type(err).__name__}: {str(err)[:80]}"
    own = None if rotary is not None or used else _own_rotary(module, config)
    if rotary is not None and not used and _table_gives_no_rotation(model_type, config):
        # a tower posenc's table reads as a learned grid, whose config lets its module's text rotary build (a
        # rope field given): what its own model builds
        own = _own_rotary(module, config)
    if own is not None:  # a tower (or a parent of towers) beside the text model: what its own model builds
        owner, classes, inner = own
        if not classes:
            where = (
                f"only inside its sub-models with rows of their own: {', '.join(map('`{}`'.format, inner))}"
            )
            return "no rotary of its own", f"its model ({owner}) rotates {where}" if inner else (
                f"its model ({owner}) builds no rotary module"
            )
        for cls in classes:  # its own rotary (dots3's audio encoder), where it builds from this config
            try:
                rotary = cls(text)
                break
            except Exception as err:
                reason = f"{owner} rotates with {cls.__name__}: {cls.__name__}(config): {type(err).__name__}: {str(err)[:80]}"
        used = classes[0]
    if rotary is None:
        return _unbuilt(config, reason) if used else ("not built", reason)
    if list(inspect.signature(rotary.forward).parameters) == [
        "pixel_values"
    ]:  # DINOv3's kin: per image patch
        return _check_patches(module, config, rotary.eval())  # (eval: no augmentation of the coordinates)
    if list(inspect.signature(rotary.forward).parameters) == ["x"] and hasattr(text, "q_aggregation_stride"):
        return _check_feature_map(module, config, rotary)  # EfficientLoFTR: its rows follow the feature map
    if list(inspect.signature(rotary.forward).parameters) == ["hidden_states"] and hasattr(
        module, "vision_apply_rotary_emb"
    ):  # Llama 4's vision tower: the rows of its whole, fixed sequence
        return _check_whole_sequence(module, config, rotary)
    try:
        types, cases, references = _references(module, text, rotary)
    except Exception as err:
        try:  # M-RoPE sized for a full head: fit the text model and its sections to the tiny head, once
            if not hasattr(rotary, "mrope_section"):
                raise
            rotary = _fit_mrope(text, type(rotary))
            types, cases, references = _references(module, text, rotary)
        except Exception:
            reason = f"reference rotation: {type(err).__name__}: {str(err)[:80]}"
            return _unbuilt(config, reason) if used else ("not built", reason)
    # an encoder-decoder parent whose stacks differ (Dia): the stack whose config built the rotary
    sides: tuple[Literal["encoder", "decoder"], ...] = ("encoder", "decoder")
    stack = next((s for s in sides if getattr(config, f"{s}_config", None) is text), None)
    for form in (config, config.to_dict()):
        try:
            encodings = layer_encodings(form, stack=stack)
        except ValueError as err:
            return "refused", str(err)
        except Exception as err:  # (anything but a ValueError naming the field is a failure)
            return "mismatched", f"{type(form).__name__}: {type(err).__name__}: {err}"
        # one rotary for every layer: the first layer posenc rotates (models that rotate only some layers,
        # tests/hf/test_layers.py counts which), else the first
        rotated = next((i for i, e in enumerate(encodings) if isinstance(e, (posenc.RoPE, posenc.MRoPE))), 0)
        for layer_type in types:
            layer = rotated if layer_type is None else text.layer_types.index(layer_type)
            enc = encodings[layer]
            if not isinstance(enc, (posenc.RoPE, posenc.MRoPE)):
                return "mismatched", f"layer {layer}: posenc gives {type(enc).__name__}, the model rotates"
            for name, pos in cases.items():
                if name == "axes" and not isinstance(enc, posenc.MRoPE):
                    return (
                        "mismatched",
                        f"layer {layer}: posenc gives {type(enc).__name__}, the model rotates by {len(pos)} axes",
                    )
                pos = pos.permute(1, 2, 0) if name == "axes" else pos  # (a, b, t) -> (b, t, a)
                q, k, q_ref, k_ref = references[layer_type, name]
                r, width = enc.head_dim, q_ref.shape[-1]
                # the channels posenc's encoding takes: the first r (a partial rotation; DeepSeek's q_pe), the last
                # r of MLA heads wider than q_pe (dots3: [q_nope | q_pe], as _reference rotates them)
                part = slice(width - r, width) if _is_mla(text) else slice(0, r)
                rest = [i for i in range(width) if not part.start <= i < part.stop]
                if r > width or not (
                    torch.equal(q_ref[..., rest], q[..., rest])
                    and torch.equal(k_ref[..., rest], k[..., rest])
                ):
                    return "mismatched", f"head_dim {r} vs the model's {width} rotated channels"
                q_ref, k_ref = q_ref[..., part], k_ref[..., part]  # (MLA: the model rotates only q_pe / k_pe)
                q_in, k_in = q[..., part], k[..., part]
                q_ours, k_ours = enc.encode_qk(q_in, k_in, q_positions=pos, k_positions=pos)
                same = _same((q_ours, k_ours), (q_ref, k_ref))
                scores = torch.allclose(q_ours @ k_ours.mT, q_ref @ k_ref.mT, atol=1e-4, rtol=1e-4)
                if not (same or scores):
                    where = f"{type(form).__name__}, layer {layer} ({layer_type}), {name} positions"
                    return "mismatched", f"{where}: {enc!r}"
    text_type = getattr(text, "model_type", None)
    return "matched", "table" if {model_type, text_type} & set(SUPPORTED_MODEL_TYPES) else "rule"


def convert_model_type(model_type: str) -> tuple[str, str]:
    """What :func:`posenc.from_hf_config` makes of a tiny config of ``model_type``, NOT checked
    against the model's code (for the model types :func:`check_model_type` does not check).

    Returns ``("converted", the encoding)``, ``("refused", posenc's reason)``, ``("error", an
    exception other than posenc's ValueError: a bug)`` or ``("not built", why the tiny config
    could not be made)``.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = CONFIG_MAPPING[model_type](**TINY, **ROTARY_VARIANT.get(model_type, {}))
    except Exception as err:  # (the tiny config does not fit this architecture)
        return "not built", f"tiny config: {type(err).__name__}: {str(err)[:80]}"
    try:
        encoding = posenc.from_hf_config(config)
    except ValueError as err:
        return "refused", str(err)
    except Exception as err:
        return "error", f"{type(err).__name__}: {err}"
    return "converted", " ".join(repr(encoding).split())  # (a module with children spans lines)


def resolve_math_kernels() -> None:
    """Call torch's MKL math functions once each, on one element (one thread), in float32 and float64.

    oneMKL picks a function's kernel on its first call; when that call runs on several threads at once, one
    thread's share can come from a low-accuracy kernel (pytorch#188792: here a reference's float32 cos 1.5e-4
    off in 9 of 24 fresh processes on a 2-core Xeon). The references compared with compute in float32: their first
    call must not be such a race, or the survey reports a mismatch of theirs."""
    for dtype in (torch.float32, torch.float64):
        one = torch.ones(1, dtype=dtype)
        for op in (
            torch.cos,
            torch.sin,
            torch.exp,
            torch.log,
            torch.log1p,
            torch.sqrt,
            torch.rsqrt,
            torch.tanh,
        ):
            op(one)


def survey(
    model_types: Iterable[str] | None = None, rope: dict[str, Any] | None = None
) -> dict[str, tuple[str, str]]:
    """:func:`check_model_type` of every model type of the installed transformers (or of ``model_types``),
    for those with a text rotary embedding or an axial vision one; ``rope``: as there."""
    resolve_math_kernels()
    results = {}
    for model_type in CONFIG_MAPPING_NAMES if model_types is None else model_types:
        outcome, detail = check_model_type(model_type, rope)
        if outcome:
            results[model_type] = (outcome, detail)
    return results


def report(
    results: dict[str, tuple[str, str]], scaled: dict[str, dict[str, tuple[str, str]]] | None = None
) -> str:
    """The coverage of transformers' model zoo as a Markdown page (what docs/hf_coverage.md holds); ``scaled``:
    the surveys with each of :data:`SCALINGS` (by name), counted and their outcomes that differ listed."""
    counts = Counter(outcome for outcome, _ in results.values())
    lines = [
        "# Model zoo coverage",
        "",
        f"Every model type of transformers {transformers.__version__} whose modeling code (its own, else that of",
        "the model its auto mapping builds: SarvamMLA runs DeepSeek V3's) defines a text `*RotaryEmbedding` (or only",
        "a tower's, where posenc converts the type by rule to a rotation: PE Audio's encoder, LASR's), built",
        "tiny and compared with posenc's rotation for default, offset and batched",
        "positions (and distinct positions per axis for M-RoPE), per layer type, from the config object and",
        'from its `config.json` dict; and every vision tower with `rope_type: "axial"`, compared with its own',
        "vision rotary module and `apply_rotary_pos_emb_vision` at the (h, w) patch positions of",
        "`get_vision_position_ids` (a non-square image and a second one packed, a two-frame video), and Llama 4's",
        "vision tower with its `vision_apply_rotary_emb` on its whole sequence of patches and class token, and",
        "SAM 3's ViT layer by layer (its windows, and its global layers) with its `apply_rotary_pos_emb_2d`",
        "(`tests/hf/test_zoo.py`; written by `python tests/hf/test_zoo.py`).",
        "",
        "| outcome | model types |",
        "| --- | --- |",
        *(f"| {o} | {counts[o]} |" for o in OUTCOMES),
        "",
        "| model type | outcome | why |",
        "| --- | --- | --- |",
        *(
            f"| `{t}` | {o} | {d.replace('|', '/')} |"
            for t, (o, d) in sorted(results.items())
            if o in OUTCOMES[1:4]
        ),
        "",
        "Matched: " + ", ".join(f"`{t}`" for t, (o, _) in sorted(results.items()) if o == "matched") + ".",
        "",
        "## No rotary of its own",
        "",
        "Sub-configs (audio and vision towers, VQ models) and parents of them that share a modeling module with a",
        "text rotary embedding but whose own model, built from the config on the meta device, holds no rotary",
        "module (`*RotaryEmbedding` or an `inv_freq` buffer), or holds one only inside sub-models that have a",
        "model type, and a row, of their own.",
        "",
        "| model type | why |",
        "| --- | --- |",
        *(f"| `{t}` | {d} |" for t, (o, d) in sorted(results.items()) if o == OUTCOMES[4]),
        "",
    ]
    if scaled:
        lines += [
            "## With a scaling in every RoPE dict",
            "",
            'The survey again with each scaling merged into every `"default"` RoPE dict of the built text configs',
            "(`survey(rope=SCALINGS[name])`), which the model's own rotary module and posenc then both read:",
            ", ".join(f"{name} `{SCALINGS[name]}`" for name in scaled) + ".",
            "",
            "| scaling | " + " | ".join(OUTCOMES[:4]) + " |",
            "| --- |" + " --- |" * 4,
            *(
                f"| {name} | "
                + " | ".join(str(Counter(o for o, _ in found.values())[o]) for o in OUTCOMES[:4])
                + " |"
                for name, found in scaled.items()
            ),
            "",
            "Where the outcome differs from the default type's:",
            "",
            "| model type | scaling | outcome | why |",
            "| --- | --- | --- | --- |",
            *(
                f"| `{t}` | {name} | {o} | {d.replace('|', '/')} |"
                for name, found in scaled.items()
                for t, (o, d) in sorted(found.items())
                if results.get(t, ("",))[0] != o
            ),
            "",
        ]
    return "\n".join(lines)
