"""Converters for the RoPE models: ``rope_parameters`` / legacy ``rope_scaling`` as transformers reads them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._checks import check_bool, check_int, check_positive_float, check_positive_int
from ..base import PositionalEncoding
from ..encodings import MRoPE, RoPE
from ..functional.rope_scaling import _ORIGINAL, _TYPE_KEYS, ROPE_TYPES, _reads, rope_type_of
from ._read import Config, Convert, get, key_of, positive_int, rope_dict

# model types whose code turns rope_type "dynamic" with an `alpha` into a static NTK base ("ntk_alpha")
_NTK_ALPHA = frozenset({"hunyuan_v1_dense", "hunyuan_v1_moe", "hunyuan_vl_text"})
# model types whose code reads partial_rotary_factor only from each layer type's dict, this value
# where the dict has none, and whose config class copies no top-level one into a nested dict it is given (Step
# 3.5's and most others' classes do): their top-level one is not read there
_PER_TYPE_PARTIAL = {"mellum": 1.0, "laguna": 1.0, "zaya": 1.0, "mimo_v2_flash": 0.334}


@dataclass(frozen=True)
class RopeDefaults:
    """What a RoPE model's config class assumes for keys a ``config.json`` may leave out."""

    hidden_size: int | None  # None (models outside the table): the config must give it
    num_heads: int | None
    max_len: int | None  # max_position_embeddings
    theta: float | None = 10000.0
    head_dim: int | None = None  # None: hidden_size // num_attention_heads
    partial: float | None = None  # None: the model rotates whole heads and has no partial_rotary_factor
    layout: Literal["half", "interleaved"] = "half"
    original_max: int | None = None  # Phi-3 keeps original_max_position_embeddings outside the dict
    renamed_types: tuple[tuple[str, str], ...] = ()  # Phi-3 reads rope_type "su"/"yarn" as "longrope"
    rope_at_end: bool = False  # the rotated channels end each head (DeepSeek V4's [nope | rope])
    conjugate: bool = False  # rotates by minus the angles (NanoChat)


def _theta(cfg: Config, model_type: str, params: Mapping[str, Any], where: str, default: float | None) -> Any:
    """``rope_theta`` by transformers' priority: the RoPE dict's own, the config's top-level one, ``default``.

    Raises:
        ValueError: the dict holds a null, which transformers keeps (setdefault) and its model cannot rotate by.
    """
    if "rope_theta" in params and params["rope_theta"] is None:
        raise ValueError(
            f"{model_type} config: {where}['rope_theta'] is None; transformers keeps a null there (a top-level "
            "rope_theta does not replace it) and its model cannot rotate by it: give a number or leave the key out"
        )
    return get(params, "rope_theta", default=get(cfg, "rope_theta", default=default))


def rope_parameters(
    cfg: Config, model_type: str, d: RopeDefaults, params: Mapping[str, Any] | None, where: str
) -> tuple[float, float, dict]:
    """Standardise ``rope_parameters`` / legacy ``rope_scaling`` + ``rope_theta`` as transformers 5 does.

    ``params``: the dict of one layer type (nested ``rope_parameters``), named ``where`` in errors;
    ``None`` reads the config's flat dict.

    Returns ``(base, partial_rotary_factor, scaling)`` where ``scaling`` holds only the keys the
    ``rope_type`` reads, every implicit default resolved (for ``"proportional"`` the partial
    factor is also in ``scaling``: it picks rotated pairs, not channels).
    """
    per_type = params is not None
    # (where its code reads the factor of a layer type's dict alone: its own default there, not the top-level one)
    type_partial = _PER_TYPE_PARTIAL.get(model_type) if per_type else None
    params = dict(rope_dict(cfg, model_type) if params is None else params)  # {}: the class's default
    nested = [key for key in params if isinstance(params[key], Mapping)]
    if nested:
        raise ValueError(
            f"{model_type} config: {where} are given per layer type ({', '.join(map(repr, nested))}), but "
            f"transformers' {model_type} reads one RoPE setting for the whole model"
        )
    theta_key = f"{where}['rope_theta']" if params.get("rope_theta") is not None else "rope_theta"
    base = _theta(cfg, model_type, params, where, d.theta)
    if base is None:  # (models outside the table)
        raise ValueError(
            f"{model_type} config: missing 'rope_theta' (in {where} or at the top level); posenc has no default "
            f"for model_type {model_type!r}, which is not in its table"
        )
    base = check_positive_float(f"{model_type} config: {theta_key}", base)
    rope_type = rope_type_of(params)
    rope_type = dict(d.renamed_types).get(rope_type, rope_type)
    ntk_alpha = rope_type == "dynamic" and bool(params.get("alpha")) and model_type in _NTK_ALPHA
    if ntk_alpha:
        # Hunyuan's code reads a "dynamic" dict with a fixed `alpha` as a larger static base,
        # theta * alpha ** (d / (d - 2)): posenc's "ntk" with factor alpha. It reads no other key.
        kept = {key: params[key] for key in ("rope_theta", "partial_rotary_factor") if key in params}
        params = kept | {"rope_type": "ntk", "factor": params["alpha"]}
        rope_type = "ntk"
    if rope_type not in ROPE_TYPES:
        raise ValueError(
            f"{model_type} config: rope_type {rope_type!r} is not supported (in {where}); supported: {', '.join(ROPE_TYPES)}"
        )
    max_pos = get(cfg, "max_position_embeddings", default=d.max_len)
    if params.get("max_position_embeddings") in (None, max_pos):  # Ministral 3 copies it in, unread there
        params.pop("max_position_embeddings", None)
    beta, beta_len = params.get("llama_4_scaling_beta"), params.get(_ORIGINAL)
    if beta and beta_len is None:
        raise ValueError(  # (its attention reads the dict's own value)
            f"{model_type} config: {where} has 'llama_4_scaling_beta' but no 'original_max_position_embeddings', "
            "which the model's query scaling divides by"
        )
    unread = sorted(set(params) - _reads(rope_type, bool(beta)))
    if unread:
        raise ValueError(
            f"{model_type} config: {where} holds {', '.join(map(repr, unread))}, which rope_type {rope_type!r} "
            "does not read in posenc; the model's code may use it"
        )
    in_dict, top = params.get("partial_rotary_factor") is not None, cfg.get("partial_rotary_factor")
    if type_partial is not None and not in_dict:
        # a scaled rope type's init first copies the top-level factor into every dict of the config: read before
        # that by the rotary's first pass over a default-type dict, after it by its weight init
        scaled = sorted(
            name
            for name, one in rope_dict(cfg, model_type).items()
            if isinstance(one, Mapping) and rope_type_of(one) != "default"
        )
        if rope_type != "default":
            type_partial = 1.0 if top is None else top
        elif scaled and top is not None:
            raise ValueError(
                f"{model_type} config: {where} has no partial_rotary_factor: {model_type}'s code then rotates "
                f"{type_partial} of each head, or the top-level partial_rotary_factor where the init of a scaled "
                f"rope type ({', '.join(map(repr, scaled))}) copies it in first; give it in each layer type's dict"
            )
    partial = get(params, "partial_rotary_factor", default=top if type_partial is None else type_partial)
    partial_key = f"{where}['partial_rotary_factor']" if in_dict else "partial_rotary_factor"
    partial = check_positive_float(
        f"{model_type} config: {partial_key}", (d.partial or 1.0) if partial is None else partial
    )
    if partial > 1:
        raise ValueError(f"{model_type} config: {partial_key} must be in (0, 1], got {partial}")
    if ntk_alpha and partial != 1.0:  # its base exponent spans the whole head, posenc's the rotated part
        raise ValueError(
            f"{model_type} config: 'alpha' with partial_rotary_factor={partial} is not supported"
        )
    # (carried as the dict holds them; the top-level original_max_position_embeddings rule below is the rope's)
    query_scale = {"llama_4_scaling_beta": beta, _ORIGINAL: beta_len} if beta else {}
    if rope_type != "proportional" and d.partial is None and partial != 1.0:
        raise ValueError(
            f"{model_type} config: partial_rotary_factor={partial!r}, but transformers' {model_type} is not among the "
            "models whose code reads it (Llama's and most others rotate the whole head whatever it says); accepted: "
            "1.0 or absent"
        )
    keys = _TYPE_KEYS[rope_type]
    scaling = {"rope_type": rope_type} | {k: params[k] for k in sorted(keys) if params.get(k) is not None}
    if rope_type == "proportional":  # p-RoPE: the fraction picks rotated pairs, not channels
        scaling["partial_rotary_factor"], partial = partial, 1.0
    if _ORIGINAL in keys:
        # A top-level original_max_position_embeddings wins over a flat dict's (transformers' Phi-3 rule,
        # which it applies to every model with that attribute); a layer type's dict keeps its own, else
        # the trained length.
        top = None if per_type else get(cfg, _ORIGINAL, default=d.original_max)
        original = top if top is not None else get(params, _ORIGINAL, default=max_pos)
        if original is None:
            raise ValueError(
                f"{model_type} config: rope_type {rope_type!r} needs original_max_position_embeddings "
                "(or max_position_embeddings)"
            )
        scaling[_ORIGINAL] = original
    # (yarn and longrope without one: the context ratio, max_len / original, which RoPE computes)
    if rope_type in ("linear", "dynamic", "llama3", "ntk") and scaling.get("factor") is None:
        raise ValueError(f"{model_type} config: rope_type {rope_type!r} needs a 'factor' in {where}")
    if query_scale and scaling.setdefault(_ORIGINAL, beta_len) != beta_len:
        raise ValueError(
            f"{model_type} config: the top-level original_max_position_embeddings differs from {where}'s, which "
            "its query scaling (llama_4_scaling_beta) reads: posenc's RoPE has one"
        )
    return base, partial, scaling | query_scale


def build_rope(
    cfg: Config,
    model_type: str,
    d: RopeDefaults,
    head_dim: int | None = None,
    *,
    params: Mapping[str, Any] | None = None,
    where: str = "rope_parameters",
    mrope_section: Sequence[int] | Callable[[int], list[int]] | None = None,
    interleaved: bool | Literal["hw"] = False,
) -> RoPE | MRoPE:
    """The :class:`RoPE` of one setting (the flat dict, or one layer type's ``params``).

    With ``mrope_section`` (or a function of the rotated pairs that gives it): the :class:`MRoPE` of the
    Qwen-VL text models (``interleaved`` sections).
    ``head_dim``: the rotated head width (default: :func:`heads_and_head_dim`'s).
    """
    head_dim = heads_and_head_dim(cfg, model_type, d)[1] if head_dim is None else head_dim
    base, partial, scaling = rope_parameters(cfg, model_type, d, params, where)
    max_len = get(cfg, "max_position_embeddings", default=d.max_len)
    if max_len is not None:
        check_positive_int(f"{model_type} config: max_position_embeddings", max_len)
    rotary_dim = int(head_dim * partial)
    if mrope_section is None and (rotary_dim <= 0 or rotary_dim % 2):
        raise ValueError(
            f"{model_type} config: head_dim={head_dim} * partial_rotary_factor={partial} gives {rotary_dim} rotated "
            "channels; accepted: a positive even number"
        )
    if cfg.get("rotary_dim") not in (None, rotary_dim):  # (MiniMax M3 VL's code does not read it; M2's does)
        raise ValueError(
            f"{model_type} config: 'rotary_dim'={cfg['rotary_dim']!r} may shape this model's RoPE in its own code, "
            f"but its head_dim * partial_rotary_factor give {rotary_dim} rotated channels; which its code reads is "
            "not known from the fields"
        )
    if callable(mrope_section):  # (NeoMME: two equal sections over whatever its partial factor rotates)
        mrope_section = mrope_section(rotary_dim // 2)
    if mrope_section is not None and partial != 1.0:  # (Qwen3.5: the sections cover the rotated part)
        scaling = {**scaling, "partial_rotary_factor": partial}
    kw: dict[str, Any] = {"base": base, "layout": d.layout, "scaling": scaling, "max_len": max_len}
    try:
        if mrope_section is not None:
            return MRoPE(head_dim, mrope_section=list(mrope_section), interleaved=interleaved, **kw)
        offset = head_dim - rotary_dim if d.rope_at_end else 0
        rotary = None if rotary_dim == head_dim else rotary_dim
        return RoPE(head_dim, rotary_dim=rotary, rotary_offset=offset, conjugate=d.conjugate, **kw)
    except (TypeError, ValueError) as err:
        raise type(err)(f"{model_type} config: {err}") from None


def heads_and_head_dim(
    cfg: Config,
    model_type: str,
    d: RopeDefaults,
    *,
    heads: str = "num_attention_heads",
    read_head_dim: bool = True,
) -> tuple[int, int]:
    """``(num_heads, head_dim)`` with the config class's defaults ``d``; ``head_dim`` defaults to
    ``hidden_size // heads`` as in transformers (always, for a model whose code does not ``read_head_dim``)."""
    num_heads = positive_int(cfg, model_type, heads, default=d.num_heads)
    # absent: the config class default; an explicit null: hidden // heads
    head_dim = cfg.get("head_dim", d.head_dim) if read_head_dim else None
    if head_dim is None:
        hidden = positive_int(cfg, model_type, "hidden_size", default=d.hidden_size)
        if hidden % num_heads != 0:
            raise ValueError(
                f"{model_type} config: {key_of(cfg, 'hidden_size')}={hidden} is not a multiple of "
                f"{key_of(cfg, heads)}={num_heads}"
            )
        head_dim = hidden // num_heads
    return num_heads, check_positive_int(f"{model_type} config: head_dim", head_dim)


def rope(hidden_size: int, num_heads: int, max_len: int, **defaults: Any) -> Convert:
    """A converter for a model that reads ``rope_parameters`` (Llama and its kin): its config class's
    defaults, as :class:`RopeDefaults`."""
    d = RopeDefaults(hidden_size, num_heads, max_len, **defaults)
    return lambda cfg, model_type, causal: build_rope(cfg, model_type, d)


#: Mistral 4's class default ``rope_parameters`` (a ``config.json`` without them)
_MISTRAL4_ROPE = {
    "rope_type": "yarn",
    "rope_theta": 10000.0,
    "factor": 128.0,
    _ORIGINAL: 8192,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "mscale_all_dim": 1.0,
    "mscale": 1.0,
    "llama_4_scaling_beta": 0.1,
}


def mistral4(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    """Mistral 4's MLA heads ``[nope | rope]`` (``qk_nope_head_dim + qk_rope_head_dim`` wide, whatever
    ``head_dim`` says): RoPE on the last ``qk_rope_head_dim`` channels, in pairs unless ``rope_interleave``
    is false or null, and ``llama_4_scaling_beta`` scaling the whole query. Rotate the whole heads (as its
    attention scales them), not ``q_pe`` alone."""
    nope = check_int(
        f"{model_type} config: qk_nope_head_dim", get(cfg, "qk_nope_head_dim", default=64), minimum=0
    )
    rotated = positive_int(cfg, model_type, "qk_rope_head_dim", default=64)
    params = dict(rope_dict(cfg, model_type) or _MISTRAL4_ROPE)
    if not cfg.get("rope_scaling"):
        params.setdefault("partial_rotary_factor", rotated / (nope + rotated))  # (as its class does)
    elif "partial_rotary_factor" not in params and nope:
        raise ValueError(  # (its class fills the factor into rope_parameters, which a legacy rope_scaling replaces)
            f"{model_type} config: rope_scaling has no partial_rotary_factor: its code then computes frequencies for "
            f"the whole head, which do not fit its qk_rope_head_dim={rotated} rotated channels"
        )
    factor = params.get("partial_rotary_factor", 1.0)
    if rope_type_of(params) == "default" and nope:
        raise ValueError(  # (its default frequencies span the whole head, which fail on the rope slice)
            f"{model_type} config: rope_type 'default' with qk_nope_head_dim={nope}: its code computes default "
            "frequencies for the whole head, which do not fit its qk_rope_head_dim rotated channels"
        )
    if int((nope + rotated) * factor) != rotated:
        raise ValueError(
            f"{model_type} config: rope_parameters['partial_rotary_factor']={factor!r} does not give "
            f"qk_rope_head_dim={rotated} of the {nope + rotated} channels, which its attention rotates"
        )
    interleave = check_bool(
        f"{model_type} config: rope_interleave", cfg.get("rope_interleave", True) or False
    )
    d = RopeDefaults(
        4096, 32, 1048576, partial=factor, layout="interleaved" if interleave else "half", rope_at_end=True
    )
    return build_rope(cfg, model_type, d, nope + rotated, params=params)


def gptj(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    """GPT-J's and CodeGen's RoPE, which reads no ``rope_parameters``."""
    # GPT-J and CodeGen: interleaved pairs ("rotate_every_two"), base fixed at 10000 in the model code,
    # the first rotary_dim channels of each head (64 by default).
    _, head_dim = heads_and_head_dim(cfg, model_type, RopeDefaults(4096, 16, 2048), read_head_dim=False)
    rotary_dim = cfg.get("rotary_dim", 64)
    # None: transformers' table then spans the model width, which only fits one-head models: rotate whole heads
    try:  # (RoPE checks rotary_dim, and names it)
        return RoPE(
            head_dim,
            base=10000.0,
            layout="interleaved",
            rotary_dim=None if rotary_dim in (None, head_dim) else rotary_dim,
            max_len=get(cfg, "max_position_embeddings", default=2048),
        )
    except (TypeError, ValueError) as err:
        raise type(err)(f"{model_type} config: {err}") from None


def roformer(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
    """RoFormer's RoPE: its frozen sinusoidal table (base 10000, ``max_position_embeddings`` rows), applied to
    neighbouring pairs of queries and keys in self-attention; ``rotary_value`` (values too) is refused."""
    if check_bool(f"{model_type} config: rotary_value", cfg.get("rotary_value", False)):
        raise ValueError(
            f"{model_type} config: rotary_value=True rotates the values too, which posenc's RoPE does not; "
            "accepted: false or absent"
        )
    _, head_dim = heads_and_head_dim(cfg, model_type, RopeDefaults(768, 12, 1536), read_head_dim=False)
    return RoPE(
        head_dim,
        base=10000.0,
        layout="interleaved",
        max_len=get(cfg, "max_position_embeddings", default=1536),
    )


def mrope(d: RopeDefaults, default_section: tuple[int, ...], *, interleaved: bool | Literal["hw"]) -> Convert:
    """Qwen2-VL / Qwen2.5-VL (chunked) and Qwen3-VL (interleaved) text models: :class:`MRoPE`.

    ``mrope_section`` comes from ``rope_parameters`` (or the legacy ``rope_scaling``, whose
    ``{"type": "mrope"}`` transformers reads as ``"default"``), else the model's default; the
    rest of the dict is read as for any RoPE model. Qwen3-VL always interleaves (its
    ``mrope_interleaved`` flag, and the ``interleaved`` one of Qwen3-Omni's checkpoints, are not read by
    transformers), Qwen2/2.5-VL never do. ERNIE 4.5 VL (``interleaved="hw"``) lists its sections
    (h, w, t), posenc's (t, h, w).
    """

    def convert(cfg: Config, model_type: str, causal: bool | None) -> PositionalEncoding:
        raw = rope_dict(cfg, model_type)
        params = {
            k: v for k, v in raw.items() if k not in ("mrope_section", "mrope_interleaved", "interleaved")
        }
        if rope_type_of(params) == "mrope":
            params = {k: v for k, v in params.items() if k != "type"} | {"rope_type": "default"}
        section = get(raw, "mrope_section", default=default_section)
        if not isinstance(section, (list, tuple)):
            raise TypeError(
                f"{model_type} config: rope_parameters['mrope_section'] must be a list of ints, got {section!r}"
            )
        if interleaved == "hw" and len(section) == 3:  # (h, w, t) -> (t, h, w)
            section = [section[2], section[0], section[1]]
        return build_rope(cfg, model_type, d, params=params, mrope_section=section, interleaved=interleaved)

    return convert
