"""Pure tensor functions for rotary position embedding (RoPE, Su et al., 2021). No state.

* :func:`resolve_rope_scaling` — validate a Hugging Face ``rope_scaling`` / ``rope_parameters``
  dict into a :class:`RopeParameters` (every check raised here, before any tensor exists);
* inverse frequencies: :func:`rope_inv_freq` (plain), :func:`linear_inv_freq`,
  :func:`dynamic_ntk_inv_freq`, :func:`yarn_inv_freq`, :func:`llama3_inv_freq`,
  :func:`longrope_inv_freq`, and :func:`scaled_inv_freq` dispatching on the rope type;
  attention factors :func:`yarn_attention_factor`, :func:`longrope_attention_factor`;
* :func:`rope_cos_sin` — the cos/sin of ``position * inv_freq`` (times the attention factor);
* :func:`apply_rotary` — rotate the first ``rotary_dim`` channels of ``x`` by those angles,
  in the half-split layout (GPT-NeoX, Hugging Face Llama) or the interleaved one (GPT-J,
  RoFormer, Meta Llama), with the fastest formulation for the dtype and mode.

The frequency and angle functions compute in float64 by default: a float32 angle
``position * inv_freq`` is off by about ``1e-7 × position`` (4e-4 at position 4096), so
callers build in float64 and round once to the table dtype.

Shape key: ``b`` batch, ``h`` heads, ``t`` sequence, ``dh`` head width, ``r`` rotated
channels (``rotary_dim``), ``r/2`` rotated pairs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from .._checks import check_bool, check_choice, check_positive_float, check_positive_int
from ..base import _is_compiling

__all__ = [
    "ROPE_TYPES",
    "RopeParameters",
    "apply_rotary",
    "dynamic_ntk_inv_freq",
    "linear_inv_freq",
    "llama3_inv_freq",
    "longrope_attention_factor",
    "longrope_inv_freq",
    "resolve_rope_scaling",
    "rope_cos_sin",
    "rope_inv_freq",
    "rotary_reference",
    "scaled_inv_freq",
    "yarn_attention_factor",
    "yarn_inv_freq",
]

RopeLayout = Literal["half", "interleaved"]
RopeType = Literal["default", "linear", "dynamic", "yarn", "llama3", "longrope"]

#: The ``rope_type`` values understood, as in transformers' ``ROPE_INIT_FUNCTIONS`` plus ``"default"``.
ROPE_TYPES: tuple[str, ...] = ("default", "linear", "dynamic", "yarn", "llama3", "longrope")

# Keys each rope type reads (besides rope_type/type, rope_theta, partial_rotary_factor),
# following transformers' ``_validate_<type>_rope_parameters``. Other keys are warned about;
# posenc.hf copies exactly these from a model config.
_TYPE_KEYS: dict[str, frozenset[str]] = {
    "default": frozenset(),
    "linear": frozenset({"factor"}),
    "dynamic": frozenset({"factor"}),
    "yarn": frozenset(
        {
            "factor",
            "original_max_position_embeddings",
            "attention_factor",
            "beta_fast",
            "beta_slow",
            "mscale",
            "mscale_all_dim",
            "truncate",
        }
    ),
    "llama3": frozenset(
        {"factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"}
    ),
    "longrope": frozenset(
        {"short_factor", "long_factor", "factor", "original_max_position_embeddings", "attention_factor"}
    ),
}
_COMMON_KEYS = frozenset({"rope_type", "type", "rope_theta", "partial_rotary_factor"})


# --- the scaling dict ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RopeParameters:
    """A validated RoPE configuration: everything needed to compute the frequencies.

    Built by :func:`resolve_rope_scaling` from a Hugging Face ``rope_scaling`` dict.

    Attributes:
        rope_type: one of :data:`ROPE_TYPES`.
        base: the wavelength base (``rope_theta``).
        rotary_dim: the number of rotated channels ``r`` (even).
        factor: the context-extension factor (``None`` for ``"default"``).
        original_max_len: the trained context length (yarn, llama3, longrope: the dict's
            ``original_max_position_embeddings`` or ``max_len``; dynamic: ``max_len``).
        attention_scaling: the factor multiplied into cos and sin (YaRN's / LongRoPE's
            attention factor; 1 otherwise).
        low_freq_factor, high_freq_factor: llama3's band edges.
        beta_fast, beta_slow, truncate: YaRN's correction range.
        short_factor, long_factor: LongRoPE's per-pair rescale factors (``r/2`` each).
    """

    rope_type: str = "default"
    base: float = 10000.0
    rotary_dim: int = 0
    factor: float | None = None
    original_max_len: int | None = None
    attention_scaling: float = 1.0
    low_freq_factor: float | None = None
    high_freq_factor: float | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    truncate: bool = True
    short_factor: tuple[float, ...] | None = None
    long_factor: tuple[float, ...] | None = None


def _number(key: str, value: Any, *, positive: bool = False, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"scaling[{key!r}] must be a number, got {value!r} ({type(value).__name__})")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"scaling[{key!r}] must be finite, got {value}")
    if positive and value <= 0:
        raise ValueError(f"scaling[{key!r}] must be > 0, got {value}")
    return value


def _factor_list(key: str, value: Any, pairs: int) -> tuple[float, ...]:
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        raise TypeError(
            f"scaling[{key!r}] must be a list of {pairs} numbers (rotary_dim / 2), got {type(value).__name__}"
        )
    if len(value) != pairs:
        raise ValueError(f"scaling[{key!r}] must have {pairs} entries (rotary_dim / 2), got {len(value)}")
    return tuple(_number(f"{key}[{i}]", v, positive=True) for i, v in enumerate(value))  # type: ignore[misc]


def resolve_rope_scaling(
    scaling: Mapping[str, Any] | None,
    *,
    head_dim: int,
    rotary_dim: int | None = None,
    base: float = 10000.0,
    max_len: int | None = None,
) -> RopeParameters:
    """Validate a Hugging Face ``rope_scaling`` / ``rope_parameters`` dict.

    The dict is read as transformers reads it: ``rope_type`` (or the legacy ``type``) picks
    the variant, default ``"default"``; ``rope_theta``, when present, is the base (newer
    configs carry it inside ``rope_parameters``); ``partial_rotary_factor``, when present,
    gives ``rotary_dim = int(head_dim * partial_rotary_factor)``. The trained context length
    of yarn, llama3 and longrope is ``original_max_position_embeddings`` when the dict gives
    it, else ``max_len`` (transformers fills it from ``max_position_embeddings`` the same
    way); ``dynamic`` uses ``max_len`` (transformers' ``max_position_embeddings``). A yarn or
    longrope dict without ``factor`` uses ``max_len / original_max_position_embeddings``,
    as transformers does for DeepSeek-V3 and Phi-3. Keys the variant does not read are
    ignored with a warning, as transformers does.

    Args:
        scaling: the dict, or ``None`` for plain RoPE.
        head_dim: the attention head width ``dh``.
        rotary_dim: the rotated channels (even, ``<= head_dim``); ``None`` means all.
        base: the wavelength base, used when the dict has no ``rope_theta``.
        max_len: the model's context length (transformers' ``max_position_embeddings``).

    Returns:
        The validated :class:`RopeParameters`.

    Raises:
        TypeError: a wrong type (the dict itself, a number, a list).
        ValueError: an unknown rope type (the known ones are listed), a missing key, a
            non-positive or non-finite factor/base, lists of the wrong length, odd or
            too large ``rotary_dim``, conflicting ``base``/``rope_theta``.
    """
    head_dim = check_positive_int("head_dim", head_dim)
    if head_dim % 2:
        raise ValueError(f"head_dim must be even (RoPE rotates channel pairs), got {head_dim}")
    base = check_positive_float("base", base)
    if max_len is not None:
        max_len = check_positive_int("max_len", max_len)
    if scaling is None:
        scaling = {}
    if not isinstance(scaling, Mapping):
        raise TypeError(
            f"scaling must be a dict like {{'rope_type': 'linear', 'factor': 2.0}} or None, got {type(scaling).__name__}"
        )
    scaling = dict(scaling)

    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if "rope_type" in scaling and "type" in scaling and scaling["type"] != scaling["rope_type"]:
        raise ValueError(
            f"scaling gives both rope_type={scaling['rope_type']!r} and type={scaling['type']!r}; give one of them"
        )
    check_choice("scaling['rope_type']", rope_type, ROPE_TYPES)

    if scaling.get("rope_theta") is not None:
        theta = _number("rope_theta", scaling["rope_theta"], positive=True)
        if base != 10000.0 and base != theta:
            raise ValueError(f"base={base} conflicts with scaling['rope_theta']={theta}; give the base once")
        base = theta  # type: ignore[assignment]

    if scaling.get("partial_rotary_factor") is not None:
        fraction = _number("partial_rotary_factor", scaling["partial_rotary_factor"], positive=True)
        if fraction > 1:  # type: ignore[operator]
            raise ValueError(f"scaling['partial_rotary_factor'] must be in (0, 1], got {fraction}")
        from_fraction = int(head_dim * fraction)  # type: ignore[operator]
        if rotary_dim is not None and rotary_dim != from_fraction:
            raise ValueError(
                f"rotary_dim={rotary_dim} conflicts with scaling['partial_rotary_factor']={fraction} "
                f"(head_dim {head_dim} × {fraction} = {from_fraction}); give one of them"
            )
        rotary_dim = from_fraction
    if rotary_dim is None:
        rotary_dim = head_dim
    rotary_dim = check_positive_int("rotary_dim", rotary_dim)
    if rotary_dim % 2:
        raise ValueError(f"rotary_dim must be even (RoPE rotates channel pairs), got {rotary_dim}")
    if rotary_dim > head_dim:
        raise ValueError(f"rotary_dim must be <= head_dim={head_dim}, got {rotary_dim}")

    unread = sorted(set(scaling) - _COMMON_KEYS - _TYPE_KEYS[rope_type])
    if unread:
        import warnings

        warnings.warn(
            f"scaling: rope_type={rope_type!r} does not read the key(s) {unread}; they are ignored "
            f"(it reads {sorted(_TYPE_KEYS[rope_type] | {'rope_type', 'rope_theta', 'partial_rotary_factor'})})",
            stacklevel=3,
        )

    def required_factor() -> float:
        if scaling.get("factor") is None:
            raise ValueError(
                f"scaling with rope_type={rope_type!r} needs a 'factor' (a number > 0), got {scaling}"
            )
        return _number("factor", scaling["factor"], positive=True)  # type: ignore[return-value]

    def original_len() -> int:
        value = scaling.get("original_max_position_embeddings")
        if value is None:
            if max_len is None:
                raise ValueError(
                    f"scaling with rope_type={rope_type!r} needs the trained context length: give "
                    "scaling['original_max_position_embeddings'] or max_len"
                )
            return max_len
        return check_positive_int("scaling['original_max_position_embeddings']", value)

    params: dict[str, Any] = {"rope_type": rope_type, "base": base, "rotary_dim": rotary_dim}
    if rope_type == "linear":
        params["factor"] = required_factor()
    elif rope_type == "dynamic":
        params["factor"] = required_factor()
        if max_len is None:
            raise ValueError(
                "scaling with rope_type='dynamic' needs max_len (the trained context length, transformers' "
                "max_position_embeddings)"
            )
        if rotary_dim < 4:
            raise ValueError(
                f"rope_type='dynamic' needs rotary_dim >= 4 (its base exponent is r/(r-2)), got {rotary_dim}"
            )
        params["original_max_len"] = max_len
    elif rope_type == "yarn":
        original = original_len()
        if (
            scaling.get("factor") is None
            and max_len is not None
            and scaling.get("original_max_position_embeddings")
        ):
            factor = max_len / original
        else:
            factor = required_factor()
        params.update(factor=factor, original_max_len=original)
        # transformers treats 0/None as "use the default" (``get("beta_fast") or 32``).
        params["beta_fast"] = _number("beta_fast", scaling.get("beta_fast") or 32.0)
        params["beta_slow"] = _number("beta_slow", scaling.get("beta_slow") or 1.0)
        params["truncate"] = check_bool("scaling['truncate']", scaling.get("truncate", True))
        attention = _number(
            "attention_factor", scaling.get("attention_factor"), positive=True, allow_none=True
        )
        if attention is None:
            mscale = _number("mscale", scaling.get("mscale"), allow_none=True)
            mscale_all_dim = _number("mscale_all_dim", scaling.get("mscale_all_dim"), allow_none=True)
            attention = yarn_attention_factor(factor, mscale, mscale_all_dim)
        params["attention_scaling"] = attention
    elif rope_type == "llama3":
        params["factor"] = required_factor()
        params["original_max_len"] = original_len()
        for key in ("low_freq_factor", "high_freq_factor"):
            if scaling.get(key) is None:
                raise ValueError(
                    f"scaling with rope_type='llama3' needs {key!r} (a number > 0), got {scaling}"
                )
            params[key] = _number(key, scaling[key], positive=True)
        if params["high_freq_factor"] <= params["low_freq_factor"]:
            raise ValueError(
                "scaling['high_freq_factor'] must be greater than scaling['low_freq_factor'], got "
                f"{params['high_freq_factor']} and {params['low_freq_factor']}"
            )
    elif rope_type == "longrope":
        original = original_len()
        pairs = rotary_dim // 2
        for key in ("short_factor", "long_factor"):
            if scaling.get(key) is None:
                raise ValueError(
                    f"scaling with rope_type='longrope' needs {key!r} (a list of {pairs} numbers)"
                )
            params[key] = _factor_list(key, scaling[key], pairs)
        attention = _number(
            "attention_factor", scaling.get("attention_factor"), positive=True, allow_none=True
        )
        factor = _number("factor", scaling.get("factor"), positive=True, allow_none=True)
        if factor is None and max_len is not None and scaling.get("original_max_position_embeddings"):
            factor = max_len / original
        if attention is None:
            if factor is None:
                raise ValueError(
                    "scaling with rope_type='longrope' needs 'factor' or 'attention_factor' (or max_len with "
                    "'original_max_position_embeddings', whose ratio is the factor)"
                )
            attention = longrope_attention_factor(factor, original)
        params.update(factor=factor, original_max_len=original, attention_scaling=attention)
    return RopeParameters(**params)


# --- inverse frequencies --------------------------------------------------------------------------


def _exponents(dim: int, dtype: torch.dtype, device: torch.device | str | None) -> Tensor:
    # 2i / dim for i = 0 .. dim/2 - 1
    return torch.arange(0, dim, 2, dtype=torch.int64, device=device).to(dtype) / dim


def rope_inv_freq(
    dim: int,
    base: float = 10000.0,
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    """The ``dim / 2`` rotation frequencies of plain RoPE: ``base ** (-2i / dim)`` (Su et al., 2021).

    Args:
        dim: the rotated width ``r`` (even).
        base: the wavelength base (``rope_theta``; 10000 in the paper).
        dtype, device: of the result.

    Returns:
        ``(r/2,)`` inverse frequencies, the first equal to 1.
    """
    return 1.0 / (base ** _exponents(dim, dtype, device))


def linear_inv_freq(dim: int, base: float, factor: float, **kwargs: Any) -> Tensor:
    """Position interpolation (Chen et al., 2023; kaiokendev): every frequency divided by ``factor``.

    Returns:
        ``(r/2,)`` inverse frequencies. ``kwargs`` go to :func:`rope_inv_freq`.
    """
    return rope_inv_freq(dim, base, **kwargs) / factor


def dynamic_ntk_inv_freq(
    dim: int,
    base: float,
    factor: float,
    max_len: int,
    seq_len: Tensor | int,
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    """Dynamic NTK-aware scaling (bloc97 / emozilla; transformers' ``"dynamic"``).

    The base grows with the sequence length ``L = max(seq_len, max_len)``:
    ``base' = base * (factor * L / max_len - (factor - 1)) ** (r / (r - 2))``, so below
    ``max_len`` the frequencies are plain RoPE's. Written as a tensor formula (``L`` may be a
    tensor, e.g. ``positions.max() + 1``) so that it stays free of Python branches.

    Args:
        dim: the rotated width ``r`` (even, >= 4).
        base: the wavelength base.
        factor: the scaling factor.
        max_len: the trained context length (transformers' ``max_position_embeddings``).
        seq_len: the current length, an int or a tensor of any shape ``(...)``.
        dtype, device: of the result.

    Returns:
        ``(..., r/2)`` inverse frequencies.
    """
    length = torch.as_tensor(seq_len, device=device).to(dtype).clamp_min(float(max_len))
    scaled_base = base * (factor * length / max_len - (factor - 1)) ** (dim / (dim - 2))
    return 1.0 / (scaled_base[..., None] ** _exponents(dim, dtype, length.device))


def yarn_attention_factor(
    factor: float, mscale: float | None = None, mscale_all_dim: float | None = None
) -> float:
    """YaRN's attention factor (Peng et al., 2023): ``0.1 * ln(factor) + 1`` (1 for ``factor <= 1``).

    With both ``mscale`` and ``mscale_all_dim`` (DeepSeek-V2/V3) it is the ratio
    ``get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)``, as in transformers.
    """

    def get_mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if mscale and mscale_all_dim:
        return float(get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim))
    return get_mscale(factor)


def yarn_inv_freq(
    dim: int,
    base: float,
    factor: float,
    original_max_len: int,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    truncate: bool = True,
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    """YaRN's "NTK-by-parts" frequencies (Peng et al., 2023; transformers' ``"yarn"``).

    Pairs that turn more than ``beta_fast`` times over the trained context keep their
    frequency (extrapolation), pairs that turn fewer than ``beta_slow`` times are divided by
    ``factor`` (interpolation), with a linear ramp between the two pair indices.

    Args:
        dim: the rotated width ``r``.
        base: the wavelength base.
        factor: the context-extension factor.
        original_max_len: the trained context length.
        beta_fast, beta_slow: the rotation counts bounding the ramp (32 and 1 in the paper).
        truncate: round the ramp's ends outward to whole pair indices (transformers' default).
        dtype, device: of the result.

    Returns:
        ``(r/2,)`` inverse frequencies. The attention factor is :func:`yarn_attention_factor`.
    """

    def correction_dim(rotations: float) -> float:
        # the pair index whose wavelength fits `rotations` times into the trained context
        return (dim * math.log(original_max_len / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # as transformers: avoid dividing by zero in the ramp
    ramp = ((torch.arange(dim // 2, dtype=dtype, device=device) - low) / (high - low)).clamp(0, 1)
    extrapolation = rope_inv_freq(dim, base, dtype=dtype, device=device)
    interpolation = extrapolation / factor
    keep = 1 - ramp  # 1 where the frequency is kept, 0 where it is interpolated
    return interpolation * (1 - keep) + extrapolation * keep


def llama3_inv_freq(
    dim: int,
    base: float,
    factor: float,
    low_freq_factor: float,
    high_freq_factor: float,
    original_max_len: int,
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    """Llama 3.1's frequency scaling (Meta, 2024; transformers' ``"llama3"``).

    Wavelengths shorter than ``original_max_len / high_freq_factor`` are kept, those longer
    than ``original_max_len / low_freq_factor`` are divided by ``factor``, and the band
    between is interpolated smoothly.

    Returns:
        ``(r/2,)`` inverse frequencies.
    """
    inv_freq = rope_inv_freq(dim, base, dtype=dtype, device=device)
    low_freq_wavelen = original_max_len / low_freq_factor
    high_freq_wavelen = original_max_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (original_max_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def longrope_attention_factor(factor: float, original_max_len: int) -> float:
    """LongRoPE's attention factor (Ding et al., 2024; Phi-3): ``sqrt(1 + ln(factor) / ln(L0))``, 1 if ``factor <= 1``."""
    if factor <= 1.0:
        return 1.0
    return math.sqrt(1 + math.log(factor) / math.log(original_max_len))


def longrope_inv_freq(
    dim: int,
    base: float,
    ext_factors: Sequence[float] | Tensor,
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    """LongRoPE's frequencies (Ding et al., 2024; transformers' ``"longrope"``): ``1 / (ext_i * base ** (2i/r))``.

    Args:
        dim: the rotated width ``r``.
        base: the wavelength base.
        ext_factors: ``(..., r/2)`` per-pair factors (the short or the long list, or both stacked).
        dtype, device: of the result.

    Returns:
        ``(..., r/2)`` inverse frequencies.
    """
    ext = torch.as_tensor(ext_factors, dtype=dtype, device=device)
    return 1.0 / (ext * base ** _exponents(dim, dtype, device))


def scaled_inv_freq(
    params: RopeParameters,
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    """The inverse frequencies of a :class:`RopeParameters`, one row per frequency set.

    Returns:
        ``(s, r/2)``: ``s = 2`` for longrope (row 0 short, row 1 long factors), else 1. For
        ``"dynamic"`` this is the set used up to the trained length (plain RoPE's); longer
        sequences use :func:`dynamic_ntk_inv_freq`.
    """
    dim, base, kind = params.rotary_dim, params.base, params.rope_type
    kw: dict[str, Any] = {"dtype": dtype, "device": device}
    if kind in ("default", "dynamic"):
        inv_freq = rope_inv_freq(dim, base, **kw)
    elif kind == "linear":
        inv_freq = linear_inv_freq(dim, base, params.factor, **kw)
    elif kind == "yarn":
        inv_freq = yarn_inv_freq(
            dim,
            base,
            params.factor,
            params.original_max_len,
            params.beta_fast,
            params.beta_slow,
            params.truncate,
            **kw,
        )
    elif kind == "llama3":
        inv_freq = llama3_inv_freq(
            dim,
            base,
            params.factor,
            params.low_freq_factor,
            params.high_freq_factor,
            params.original_max_len,
            **kw,
        )
    elif kind == "longrope":
        return longrope_inv_freq(dim, base, [params.short_factor, params.long_factor], **kw)
    else:
        raise ValueError(f"rope_type must be one of {list(ROPE_TYPES)}, got {kind!r}")
    return inv_freq[None]


def rope_cos_sin(
    positions: Tensor,
    inv_freq: Tensor,
    attention_scaling: float = 1.0,
    *,
    dtype: torch.dtype | None = None,
) -> tuple[Tensor, Tensor]:
    """``cos`` and ``sin`` of the angles ``position * inv_freq``, times ``attention_scaling``.

    The angles are computed in ``inv_freq``'s dtype (pass float64 frequencies for exact
    angles at large positions) and the results rounded once to ``dtype``.

    Args:
        positions: ``(...)`` integer (or float) positions, e.g. ``(t,)`` or ``(b, t)``.
        inv_freq: ``(r/2,)`` frequencies, or ``(..., r/2)`` broadcastable against positions.
        attention_scaling: multiplied into both (YaRN / LongRoPE attention factor).
        dtype: of the results; ``None`` keeps ``inv_freq``'s.

    Returns:
        ``(cos, sin)``, each ``(..., r/2)``.
    """
    angles = positions.to(inv_freq.dtype)[..., None] * inv_freq
    cos, sin = angles.cos(), angles.sin()
    if attention_scaling != 1.0:
        cos, sin = cos * attention_scaling, sin * attention_scaling
    if dtype is not None:
        cos, sin = cos.to(dtype), sin.to(dtype)
    return cos, sin


# --- applying the rotation ----------------------------------------------------------------------------


def _compute_dtype(x: Tensor, cos: Tensor) -> torch.dtype:
    # Half-precision inputs are rotated in float32 and rounded once; float64 stays float64.
    return torch.promote_types(torch.promote_types(x.dtype, cos.dtype), torch.float32)


def _split_pairs(x: Tensor, layout: RopeLayout) -> tuple[Tensor, Tensor]:
    """The two members of every rotated pair, as views: ``(..., r/2)`` each."""
    if layout == "half":
        half = x.shape[-1] // 2
        return x[..., :half], x[..., half:]
    pairs = x.unflatten(-1, (-1, 2))
    return pairs[..., 0], pairs[..., 1]


def rotary_reference(x: Tensor, cos: Tensor, sin: Tensor, layout: RopeLayout = "half") -> Tensor:
    """The rotation written as plain tensor algebra (differentiable, compiles to one fused kernel).

    ``(x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)`` on every pair; ``x`` is only the
    rotated channels (width ``r``). This is the formulation used under ``torch.compile``,
    where inductor fuses it into a single pass; see :func:`apply_rotary` for the eager paths.

    Args:
        x: ``(..., t, r)``.
        cos, sin: ``(..., t, r/2)`` broadcastable against ``x``'s pairs.
        layout: ``"half"`` pairs channel ``i`` with ``i + r/2``; ``"interleaved"`` pairs ``2i`` with ``2i+1``.

    Returns:
        ``(..., t, r)`` in the compute dtype (float32 for half-precision ``x``).
    """
    dtype = _compute_dtype(x, cos)
    x1, x2 = _split_pairs(x.to(dtype), layout)
    cos, sin = cos.to(dtype), sin.to(dtype)
    first, second = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    if layout == "half":
        return torch.cat((first, second), dim=-1)
    return torch.stack((first, second), dim=-1).flatten(-2)


def _rotate_block(out: Tensor, x: Tensor, cos: Tensor, sin: Tensor, layout: RopeLayout) -> None:
    """Write the rotation of ``x`` (``(..., t, r)``, float32/float64) into ``out`` (a view, same dtype)."""
    if layout == "interleaved":
        # Interleaved pairs are complex numbers: one complex multiply, one pass over memory.
        out_c = torch.view_as_complex(out.unflatten(-1, (-1, 2)))
        x_c = torch.view_as_complex(x.unflatten(-1, (-1, 2)))
        torch.mul(x_c, torch.complex(cos, sin), out=out_c)
        return
    # Half layout, without rotate_half's cat: out = x * [cos, cos], then add ∓ x_other * sin per half.
    half = x.shape[-1] // 2
    torch.mul(x, torch.cat((cos, cos), dim=-1), out=out)
    out[..., :half].addcmul_(x[..., half:], sin, value=-1)
    out[..., half:].addcmul_(x[..., :half], sin)


def _complex_ok(t: Tensor) -> bool:
    # view_as_complex needs unit stride inside a pair and even strides/offset elsewhere
    return t.stride(-1) == 1 and t.storage_offset() % 2 == 0 and all(s % 2 == 0 for s in t.stride()[:-1])


def _rotate_eager(x: Tensor, cos: Tensor, sin: Tensor, layout: RopeLayout) -> Tensor:
    """The eager forward kernel: rotate into one preallocated output (no ``cat``)."""
    rot = 2 * cos.shape[-1]
    compute = _compute_dtype(x, cos)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    x_rot, out_rot = x[..., :rot], out[..., :rot]
    cos, sin = cos.to(compute), sin.to(compute)
    if x.dtype == compute:
        if layout == "interleaved" and not _complex_ok(x_rot):
            x_rot = x_rot.contiguous()
        _rotate_block(out_rot, x_rot, cos, sin, layout)
    else:
        _rotate_half_precision(out_rot, x_rot, cos, sin, layout, compute)
    if rot < x.shape[-1]:
        out[..., rot:].copy_(x[..., rot:])
    return out


def _rotate_half_precision(
    out: Tensor, x: Tensor, cos: Tensor, sin: Tensor, layout: RopeLayout, compute: torch.dtype
) -> None:
    """Rotate ``x`` (half precision) in float32 and round once into ``out``.

    A converting copy to float32, the float32 kernel (an in-place complex multiply for the
    interleaved layout, the cat-free form for the half layout), and a converting copy back:
    each step is one large operation over the whole tensor. Cache-sized blocks measured
    faster on an idle CPU but up to 10x slower on a loaded one (each small parallel op
    waits for a time slice); gathering the half layout into complex pairs in the first copy
    measured slower too (a strided, unvectorised read).
    """
    work = x.to(compute, memory_format=torch.contiguous_format)
    if layout == "interleaved":
        torch.view_as_complex(work.unflatten(-1, (-1, 2))).mul_(torch.complex(cos, sin))
        out.copy_(work)
        return
    rotated = torch.empty_like(work)
    _rotate_block(rotated, work, cos, sin, layout)
    out.copy_(rotated)


class _Rotate(torch.autograd.Function):
    """Autograd for the eager kernel: the gradient of a rotation by θ is the rotation by −θ."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, cos: Tensor, sin: Tensor, layout: RopeLayout) -> Tensor:
        ctx.save_for_backward(cos, sin)
        ctx.layout = layout
        return _rotate_eager(x, cos, sin, layout)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        cos, sin = ctx.saved_tensors
        # (a R(θ))ᵀ = a R(−θ): the same kernel with sin negated. With create_graph (grad mode
        # on here) the out= kernel cannot record a graph: apply this Function again instead,
        # whose own backward is the rotation by θ, so derivatives of any order exist.
        if torch.is_grad_enabled():
            return _Rotate.apply(grad.contiguous(), cos, -sin, ctx.layout), None, None, None
        return _rotate_eager(grad.contiguous(), cos, -sin, ctx.layout), None, None, None


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor, layout: RopeLayout = "half") -> Tensor:
    """Rotate the first ``r = 2 * cos.shape[-1]`` channels of ``x``; the rest pass through.

    Each pair ``(x1, x2)`` becomes ``(x1 cos θ − x2 sin θ, x2 cos θ + x1 sin θ)`` (Su et al.,
    2021, eq. 34). ``layout="half"`` pairs channel ``i`` with ``i + r/2`` (GPT-NeoX,
    Hugging Face Llama: ``rotate_half``); ``"interleaved"`` pairs ``2i`` with ``2i + 1``
    (GPT-J, RoFormer, Meta Llama's complex form). The layout applies within the rotated
    channels, as GPT-NeoX and GPT-J do for partial rotation.

    Precision: the rotation is computed in float32 for half-precision ``x`` (float64 for
    float64) and rounded once to ``x``'s dtype. Speed: in eager mode the interleaved layout
    is one complex multiply and the half layout writes into a preallocated output without
    ``cat``, both through a custom autograd function whose backward is the rotation by −θ;
    under ``torch.compile`` the plain formula (:func:`rotary_reference`) is used, which
    inductor fuses into one kernel.

    Args:
        x: ``(b, h, t, dh)`` (or any ``(..., t, dh)``).
        cos, sin: ``(t, r/2)``, ``(b, 1, t, r/2)`` or anything broadcastable against
            ``(..., t, r/2)``: one angle per pair, NOT duplicated to width ``r``. Float32
            (or float64), e.g. from :func:`rope_cos_sin`.
        layout: ``"half"`` or ``"interleaved"``.

    Returns:
        ``(..., t, dh)``, same dtype as ``x``.

    Raises:
        ValueError: ``r`` larger than ``dh``, or an unknown layout.
    """
    if layout not in ("half", "interleaved"):
        raise ValueError(f"layout must be 'half' or 'interleaved', got {layout!r}")
    for name, t in (("x", x), ("cos", cos), ("sin", sin)):
        if not isinstance(t, Tensor) or not t.is_floating_point():
            got = t.dtype if isinstance(t, Tensor) else type(t).__name__
            raise TypeError(f"{name} must be a floating-point torch.Tensor, got {got}")
    if cos.shape != sin.shape:
        raise ValueError(
            f"cos and sin must have the same shape, got {tuple(cos.shape)} and {tuple(sin.shape)}"
        )
    rot = 2 * cos.shape[-1]
    if rot > x.shape[-1]:
        raise ValueError(
            f"cos/sin rotate {rot} channels (2 × {cos.shape[-1]} pairs) but x has only {x.shape[-1]}"
        )
    shape = (*torch.broadcast_shapes(x.shape[:-1], cos.shape[:-1], sin.shape[:-1]), x.shape[-1])
    if shape != x.shape:
        x = x.expand(shape)  # e.g. per-row positions for a batch-1 tensor
    if _is_compiling() or cos.requires_grad or sin.requires_grad or x.device.type == "meta":
        rotated = rotary_reference(x[..., :rot], cos, sin, layout).to(x.dtype)
        if rot == x.shape[-1]:
            return rotated
        return torch.cat((rotated, x[..., rot:]), dim=-1)
    if x.requires_grad and torch.is_grad_enabled():
        return _Rotate.apply(x, cos, sin, layout)
    return _rotate_eager(x, cos, sin, layout)
