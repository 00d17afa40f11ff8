"""RoPE frequencies: plain RoPE and the Hugging Face scaling variants, one dataclass per type. No state.

* :func:`resolve_rope_scaling` reads a Hugging Face ``rope_scaling`` / ``rope_parameters`` dict
  into one frozen dataclass per ``rope_type`` (:class:`DefaultRope`, :class:`LinearRope`,
  :class:`DynamicRope`, :class:`YarnRope`, :class:`Llama3Rope`, :class:`LongRope`,
  :class:`ProportionalRope`, :class:`NtkRope`, all :class:`RopeParameters`); every check is
  raised here, before any tensor exists;
* each dataclass gives its frequencies, ``params.inv_freq()``, from the formulas below:
  :func:`rope_inv_freq` (plain), :func:`linear_inv_freq`, :func:`dynamic_ntk_inv_freq`,
  :func:`yarn_inv_freq`, :func:`llama3_inv_freq`, :func:`longrope_inv_freq`,
  :func:`proportional_inv_freq`, :func:`ntk_inv_freq`, and the attention
  factors :func:`yarn_attention_factor`, :func:`longrope_attention_factor`.

Frequencies are computed in float64 by default: the angle ``position * inv_freq`` then stays
exact at large positions (a float32 frequency is off by ``6e-8`` relative, 8e-3 rad at
position 131072), and callers round once to their table dtype.

Shape key: ``r`` rotated channels (``rotary_dim``), ``r/2`` rotated pairs.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from .._checks import check_bool, check_choice, check_positive_float, check_positive_int

__all__ = [
    "ROPE_TYPES",
    "DefaultRope",
    "DynamicRope",
    "LinearRope",
    "Llama3Rope",
    "LongRope",
    "NtkRope",
    "ProportionalRope",
    "RopeParameters",
    "YarnRope",
    "dynamic_ntk_inv_freq",
    "linear_inv_freq",
    "llama3_inv_freq",
    "longrope_attention_factor",
    "longrope_inv_freq",
    "ntk_inv_freq",
    "proportional_inv_freq",
    "resolve_rope_scaling",
    "rope_inv_freq",
    "scaled_inv_freq",
    "yarn_attention_factor",
    "yarn_inv_freq",
]

RopeType = Literal["default", "linear", "dynamic", "yarn", "llama3", "longrope", "proportional", "ntk"]

#: The ``rope_type`` values understood: transformers' ``ROPE_INIT_FUNCTIONS`` plus ``"default"``, and
#: ``"ntk"`` (static NTK-aware scaling, as vLLM's and x-transformers').
ROPE_TYPES: tuple[str, ...] = (
    "default",
    "linear",
    "dynamic",
    "yarn",
    "llama3",
    "longrope",
    "proportional",
    "ntk",
)
#: The smallest scale factor accepted: below it the scaled frequencies overflow (``1e-320`` gives NaN).
MIN_FACTOR = 1e-6

Device = torch.device | str | None


# --- the formulas ---------------------------------------------------------------------------------


def _exponents(dim: int, dtype: torch.dtype, device: Device) -> Tensor:
    # 2i / dim for i = 0 .. dim/2 - 1
    return torch.arange(0, dim, 2, dtype=torch.int64, device=device).to(dtype) / dim


def rope_inv_freq(
    dim: int, base: float = 10000.0, *, dtype: torch.dtype = torch.float64, device: Device = None
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
    device: Device = None,
) -> Tensor:
    """Dynamic NTK-aware scaling (bloc97 / emozilla; transformers' ``"dynamic"``).

    The base grows with the sequence length ``L = max(seq_len, max_len)``:
    ``base' = base * (factor * L / max_len - (factor - 1)) ** (r / (r - 2))``, so below
    ``max_len`` the frequencies are plain RoPE's. ``L`` may be a tensor (e.g.
    ``positions.max() + 1``): the formula has no Python branch on it.

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
    device: Device = None,
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
    device: Device = None,
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
    ext_factors: Sequence[float] | Sequence[Sequence[float]] | Tensor,
    *,
    dtype: torch.dtype = torch.float64,
    device: Device = None,
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


def ntk_inv_freq(dim: int, base: float, factor: float, **kwargs: Any) -> Tensor:
    """Static NTK-aware scaling (bloc97, 2023; vLLM's and x-transformers' "NTK"): a larger base.

    ``base' = base * factor ** (r / (r - 2))``: the highest frequency is kept and the lowest is
    divided by ``factor``, so a model trained on ``L`` positions sees ``factor * L`` without
    fine-tuning. ``kwargs`` go to :func:`rope_inv_freq`.

    Returns:
        ``(r/2,)`` inverse frequencies.
    """
    return rope_inv_freq(dim, base * factor ** (dim / (dim - 2)), **kwargs)


def proportional_inv_freq(
    dim: int,
    base: float,
    fraction: float,
    factor: float = 1.0,
    *,
    dtype: torch.dtype = torch.float64,
    device: Device = None,
) -> Tensor:
    """Proportional RoPE (p-RoPE; Gemma 4's global layers, transformers' ``"proportional"``).

    The exponents run over the whole rotated width ``r`` (``base ** (-2i / r)``), but only the
    first ``int(fraction * r // 2)`` pairs rotate: the others get frequency 0 and pass through
    unchanged. Unlike a partial rotation (``rotary_dim``), the pairs stay ``r/2`` apart in the
    half layout. Every frequency is divided by ``factor``.

    Returns:
        ``(r/2,)`` inverse frequencies, the trailing ones 0.
    """
    rotated = int(fraction * dim // 2)
    inv_freq = rope_inv_freq(dim, base, dtype=dtype, device=device) / factor
    keep = torch.arange(dim // 2, device=inv_freq.device) < rotated
    return torch.where(keep, inv_freq, torch.zeros_like(inv_freq))


# --- one dataclass per rope type ---------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RopeParameters:
    """What every RoPE variant has: the base and the rotated width. Subclassed once per rope type.

    Built by :func:`resolve_rope_scaling`; :meth:`inv_freq` gives the frequencies.

    Attributes:
        base: the wavelength base (``rope_theta``).
        rotary_dim: the number of rotated channels ``r`` (even).
        rope_type: the class's type name, one of :data:`ROPE_TYPES`.
        attention_scaling: the factor multiplied into cos and sin (YaRN's and LongRoPE's
            attention factor; 1 otherwise).
        length_dependent: whether the frequencies depend on the sequence length (dynamic, longrope).
    """

    rope_type: ClassVar[RopeType] = "default"
    length_dependent: ClassVar[bool] = False
    #: The dict keys the type reads besides rope_type/type, rope_theta, partial_rotary_factor
    #: (transformers' ``_validate_<type>_rope_parameters``); posenc.hf copies exactly these.
    keys: ClassVar[frozenset[str]] = frozenset()

    base: float = 10000.0
    rotary_dim: int

    @property
    def attention_scaling(self) -> float:
        return 1.0

    def inv_freq(self, *, dtype: torch.dtype = torch.float64, device: Device = None) -> Tensor:
        """``(s, r/2)`` frequencies, one row per set: ``s = 2`` for longrope (short, long), else 1.

        For ``"dynamic"`` this is the set used up to the trained length (plain RoPE's); see
        :meth:`DynamicRope.inv_freq_at` for longer sequences.
        """
        return rope_inv_freq(self.rotary_dim, self.base, dtype=dtype, device=device)[None]


@dataclass(frozen=True, kw_only=True)
class DefaultRope(RopeParameters):
    """Plain RoPE (Su et al., 2021): ``inv_freq[i] = base ** (-2i / r)``."""


@dataclass(frozen=True, kw_only=True)
class LinearRope(RopeParameters):
    """Position interpolation (``"linear"``): every frequency divided by ``factor``."""

    rope_type: ClassVar[RopeType] = "linear"
    keys: ClassVar[frozenset[str]] = frozenset({"factor"})
    factor: float

    def inv_freq(self, *, dtype: torch.dtype = torch.float64, device: Device = None) -> Tensor:
        return linear_inv_freq(self.rotary_dim, self.base, self.factor, dtype=dtype, device=device)[None]


@dataclass(frozen=True, kw_only=True)
class DynamicRope(RopeParameters):
    """Dynamic NTK scaling (``"dynamic"``): plain RoPE up to ``original_max_len``, a larger base past it.

    Attributes:
        factor: the scaling factor.
        original_max_len: the trained context length (the model's ``max_len``, transformers'
            ``max_position_embeddings``).
    """

    rope_type: ClassVar[RopeType] = "dynamic"
    length_dependent: ClassVar[bool] = True
    keys: ClassVar[frozenset[str]] = frozenset({"factor"})
    factor: float
    original_max_len: int

    def inv_freq_at(
        self, seq_len: Tensor | int, *, dtype: torch.dtype = torch.float64, device: Device = None
    ) -> Tensor:
        """``(r/2,)`` frequencies for a sequence of length ``seq_len`` (see :func:`dynamic_ntk_inv_freq`)."""
        return dynamic_ntk_inv_freq(
            self.rotary_dim,
            self.base,
            self.factor,
            self.original_max_len,
            seq_len,
            dtype=dtype,
            device=device,
        )


@dataclass(frozen=True, kw_only=True)
class YarnRope(RopeParameters):
    """YaRN (``"yarn"``, Peng et al., 2023): NTK-by-parts frequencies and an attention factor.

    Attributes:
        factor, original_max_len: the extension factor and the trained context length.
        beta_fast, beta_slow, truncate: the ramp between kept and interpolated pairs.
        attention_factor: multiplied into cos and sin (also :attr:`attention_scaling`).
    """

    rope_type: ClassVar[RopeType] = "yarn"
    keys: ClassVar[frozenset[str]] = frozenset(
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
    )
    factor: float
    original_max_len: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    truncate: bool = True
    attention_factor: float

    @property
    def attention_scaling(self) -> float:
        return self.attention_factor

    def inv_freq(self, *, dtype: torch.dtype = torch.float64, device: Device = None) -> Tensor:
        return yarn_inv_freq(
            self.rotary_dim,
            self.base,
            self.factor,
            self.original_max_len,
            self.beta_fast,
            self.beta_slow,
            self.truncate,
            dtype=dtype,
            device=device,
        )[None]


@dataclass(frozen=True, kw_only=True)
class Llama3Rope(RopeParameters):
    """Llama 3.1's scaling (``"llama3"``): high frequencies kept, low ones divided by ``factor``."""

    rope_type: ClassVar[RopeType] = "llama3"
    keys: ClassVar[frozenset[str]] = frozenset(
        {"factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"}
    )
    factor: float
    original_max_len: int
    low_freq_factor: float
    high_freq_factor: float

    def inv_freq(self, *, dtype: torch.dtype = torch.float64, device: Device = None) -> Tensor:
        return llama3_inv_freq(
            self.rotary_dim,
            self.base,
            self.factor,
            self.low_freq_factor,
            self.high_freq_factor,
            self.original_max_len,
            dtype=dtype,
            device=device,
        )[None]


@dataclass(frozen=True, kw_only=True)
class LongRope(RopeParameters):
    """LongRoPE (``"longrope"``, Phi-3): short factors up to ``original_max_len``, long ones past it.

    Attributes:
        short_factor, long_factor: ``r/2`` per-pair rescale factors each.
        factor: the extension factor (``None`` when only the attention factor was given).
        original_max_len: the trained context length.
        attention_factor: multiplied into cos and sin (also :attr:`attention_scaling`).
    """

    rope_type: ClassVar[RopeType] = "longrope"
    length_dependent: ClassVar[bool] = True
    keys: ClassVar[frozenset[str]] = frozenset(
        {"short_factor", "long_factor", "factor", "original_max_position_embeddings", "attention_factor"}
    )
    short_factor: tuple[float, ...]
    long_factor: tuple[float, ...]
    factor: float | None = None
    original_max_len: int
    attention_factor: float

    @property
    def attention_scaling(self) -> float:
        return self.attention_factor

    def inv_freq(self, *, dtype: torch.dtype = torch.float64, device: Device = None) -> Tensor:
        return longrope_inv_freq(
            self.rotary_dim, self.base, [self.short_factor, self.long_factor], dtype=dtype, device=device
        )


@dataclass(frozen=True, kw_only=True)
class ProportionalRope(RopeParameters):
    """Proportional RoPE (``"proportional"``, Gemma 4): exponents over ``r``, only a fraction of pairs rotate.

    Attributes:
        fraction: the rotated fraction of the pairs (the dict's ``partial_rotary_factor``, in (0, 1]);
            it does not shrink ``rotary_dim``.
        factor: every frequency is divided by it (1 by default).
    """

    rope_type: ClassVar[RopeType] = "proportional"
    keys: ClassVar[frozenset[str]] = frozenset({"factor"})
    fraction: float = 1.0
    factor: float = 1.0

    def inv_freq(self, *, dtype: torch.dtype = torch.float64, device: Device = None) -> Tensor:
        return proportional_inv_freq(
            self.rotary_dim, self.base, self.fraction, self.factor, dtype=dtype, device=device
        )[None]


@dataclass(frozen=True, kw_only=True)
class NtkRope(RopeParameters):
    """Static NTK-aware scaling (``"ntk"``): the base times ``factor ** (r / (r - 2))``."""

    rope_type: ClassVar[RopeType] = "ntk"
    keys: ClassVar[frozenset[str]] = frozenset({"factor"})
    factor: float

    def inv_freq(self, *, dtype: torch.dtype = torch.float64, device: Device = None) -> Tensor:
        return ntk_inv_freq(self.rotary_dim, self.base, self.factor, dtype=dtype, device=device)[None]


_CLASSES: dict[str, type[RopeParameters]] = {
    cls.rope_type: cls
    for cls in (
        DefaultRope,
        LinearRope,
        DynamicRope,
        YarnRope,
        Llama3Rope,
        LongRope,
        ProportionalRope,
        NtkRope,
    )
}
# Keys each rope type reads (hf copies exactly these from a model config).
_TYPE_KEYS: dict[str, frozenset[str]] = {name: cls.keys for name, cls in _CLASSES.items()}
_COMMON_KEYS = frozenset({"rope_type", "type", "rope_theta", "partial_rotary_factor"})


def scaled_inv_freq(
    params: RopeParameters, *, dtype: torch.dtype = torch.float64, device: Device = None
) -> Tensor:
    """The ``(s, r/2)`` frequencies of ``params`` (``params.inv_freq``): ``s = 2`` for longrope, else 1."""
    return params.inv_freq(dtype=dtype, device=device)


# --- reading a Hugging Face dict -------------------------------------------------------------------


def _shown(value: Any) -> str:
    # Error messages echo a value, cut short (a config may hold anything, e.g. a 10 MB string).
    text = (
        repr(value) if not isinstance(value, int) or abs(value) < 10**50 else "an int too large for a float"
    )
    return text if len(text) <= 100 else text[:97] + "..."


def _number(key: str, value: Any, *, positive: bool = False, minimum: float | None = None) -> float:
    """``value`` as a finite float; ``positive``: ``> 0``; ``minimum``: ``>= minimum``. Bools and strings are refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"scaling[{key!r}] must be a number, got {_shown(value)} ({type(value).__name__})")
    try:
        value = float(value)
    except OverflowError:  # an int past the float range, e.g. 10**400
        raise ValueError(
            f"scaling[{key!r}] must be a finite number, got an int too large for a float"
        ) from None
    if not math.isfinite(value):
        raise ValueError(f"scaling[{key!r}] must be finite, got {value}")
    if positive and value <= 0:
        raise ValueError(f"scaling[{key!r}] must be > 0, got {value}")
    if minimum is not None and value < minimum:
        bound = f"> 0 (at least {minimum:g}: smaller factors overflow)" if minimum > 0 else f">= {minimum:g}"
        raise ValueError(f"scaling[{key!r}] must be {bound}, got {value:g}")
    return value


def _optional(
    scaling: Mapping[str, Any], key: str, *, positive: bool = False, minimum: float | None = None
) -> float | None:
    value = scaling.get(key)
    return None if value is None else _number(key, value, positive=positive, minimum=minimum)


def _factor_list(key: str, value: Any, pairs: int) -> tuple[float, ...]:
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        raise TypeError(
            f"scaling[{key!r}] must be a list of {pairs} numbers (rotary_dim / 2), got {type(value).__name__}"
        )
    if len(value) != pairs:
        raise ValueError(f"scaling[{key!r}] must have {pairs} entries (rotary_dim / 2), got {len(value)}")
    return tuple(_number(f"{key}[{i}]", v, minimum=MIN_FACTOR) for i, v in enumerate(value))


class _Reader:
    """The dict being read, the common settings already resolved, and the checks of the type keys."""

    def __init__(self, scaling: dict[str, Any], rope_type: str, max_len: int | None) -> None:
        self.scaling, self.rope_type, self.max_len = scaling, rope_type, max_len

    def factor(self) -> float:
        if self.scaling.get("factor") is None:
            raise ValueError(
                f"scaling with rope_type={self.rope_type!r} needs a 'factor' (a number >= {MIN_FACTOR:g}), got "
                f"{_shown(self.scaling)}"
            )
        return _number("factor", self.scaling["factor"], minimum=MIN_FACTOR)

    def original_len(self) -> int:
        value = self.scaling.get("original_max_position_embeddings")
        if value is not None:
            return check_positive_int("scaling['original_max_position_embeddings']", value)
        if self.max_len is None:
            raise ValueError(
                f"scaling with rope_type={self.rope_type!r} needs the trained context length: give "
                "scaling['original_max_position_embeddings'] or max_len"
            )
        return self.max_len

    def required(self, key: str) -> float:
        if self.scaling.get(key) is None:
            raise ValueError(
                f"scaling with rope_type={self.rope_type!r} needs {key!r} (a number > 0), got {_shown(self.scaling)}"
            )
        return _number(key, self.scaling[key], positive=True)

    def factor_list(self, key: str, pairs: int) -> tuple[float, ...]:
        if self.scaling.get(key) is None:
            raise ValueError(
                f"scaling with rope_type={self.rope_type!r} needs {key!r} (a list of {pairs} numbers)"
            )
        return _factor_list(key, self.scaling[key], pairs)

    def length_ratio(self, original: int) -> float | None:
        # transformers' rule for dicts without a factor (DeepSeek-V3, Phi-3): max_len / original
        if self.max_len is not None and self.scaling.get("original_max_position_embeddings"):
            return self.max_len / original
        return None


def _read_type(reader: _Reader, common: dict[str, Any]) -> RopeParameters:
    scaling, kind = reader.scaling, reader.rope_type
    if kind == "default":
        return DefaultRope(**common)
    if kind == "linear":
        return LinearRope(factor=reader.factor(), **common)
    if kind == "dynamic":
        factor = reader.factor()
        if reader.max_len is None:
            raise ValueError(
                "scaling with rope_type='dynamic' needs max_len (the trained context length, transformers' "
                "max_position_embeddings)"
            )
        if common["rotary_dim"] < 4:
            raise ValueError(
                f"rope_type='dynamic' needs rotary_dim >= 4 (its base exponent is r/(r-2)), got {common['rotary_dim']}"
            )
        return DynamicRope(factor=factor, original_max_len=reader.max_len, **common)
    if kind == "ntk":
        if common["rotary_dim"] < 4:
            raise ValueError(
                f"rope_type='ntk' needs rotary_dim >= 4 (its base exponent is r/(r-2)), got {common['rotary_dim']}"
            )
        return NtkRope(factor=reader.factor(), **common)
    if kind == "proportional":
        divisor = _optional(scaling, "factor", minimum=MIN_FACTOR)
        return ProportionalRope(factor=1.0 if divisor is None else divisor, **common)
    if kind == "yarn":
        if common["base"] <= 1:
            raise ValueError(
                f"rope_type='yarn' needs a base (rope_theta) > 1 (its ramp divides by log(base)), got {common['base']}"
            )
        original = reader.original_len()
        ratio = reader.length_ratio(original) if scaling.get("factor") is None else None
        factor = ratio if ratio is not None else reader.factor()
        attention = _optional(scaling, "attention_factor", positive=True)
        if attention is None:
            attention = yarn_attention_factor(
                factor,
                _optional(scaling, "mscale", minimum=0.0),
                _optional(scaling, "mscale_all_dim", minimum=0.0),
            )
        return YarnRope(
            factor=factor,
            original_max_len=original,
            # transformers treats 0/None as "use the default" (``get("beta_fast") or 32``)
            # (the ramp takes log(original / (2 pi beta)): both must be > 0)
            beta_fast=_number("beta_fast", scaling.get("beta_fast") or 32.0, positive=True),
            beta_slow=_number("beta_slow", scaling.get("beta_slow") or 1.0, positive=True),
            truncate=check_bool("scaling['truncate']", scaling.get("truncate", True)),
            attention_factor=attention,
            **common,
        )
    if kind == "llama3":
        factor, original = reader.factor(), reader.original_len()
        low, high = (reader.required(key) for key in ("low_freq_factor", "high_freq_factor"))
        if high <= low:
            raise ValueError(
                "scaling['high_freq_factor'] must be greater than scaling['low_freq_factor'], got "
                f"{high} and {low}"
            )
        return Llama3Rope(
            factor=factor, original_max_len=original, low_freq_factor=low, high_freq_factor=high, **common
        )
    # longrope
    original = reader.original_len()
    pairs = common["rotary_dim"] // 2
    short, long = (reader.factor_list(key, pairs) for key in ("short_factor", "long_factor"))
    extension = _optional(scaling, "factor", minimum=MIN_FACTOR)
    if extension is None:
        extension = reader.length_ratio(original)
    attention = _optional(scaling, "attention_factor", positive=True)
    if attention is None:
        if extension is None:
            raise ValueError(
                "scaling with rope_type='longrope' needs 'factor' or 'attention_factor' (or max_len with "
                "'original_max_position_embeddings', whose ratio is the factor)"
            )
        attention = longrope_attention_factor(extension, original)
    return LongRope(
        short_factor=short,
        long_factor=long,
        factor=extension,
        original_max_len=original,
        attention_factor=attention,
        **common,
    )


def resolve_rope_scaling(
    scaling: Mapping[str, Any] | None,
    *,
    head_dim: int,
    rotary_dim: int | None = None,
    base: float | None = None,
    max_len: int | None = None,
) -> RopeParameters:
    """Validate a Hugging Face ``rope_scaling`` / ``rope_parameters`` dict into its rope type's dataclass.

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
        base: the wavelength base; ``None`` means the dict's ``rope_theta``, else 10000. A
            base that differs from the dict's ``rope_theta`` is an error.
        max_len: the model's context length (transformers' ``max_position_embeddings``).

    Returns:
        A :class:`RopeParameters` subclass: :class:`DefaultRope`, :class:`LinearRope`,
        :class:`DynamicRope`, :class:`YarnRope`, :class:`Llama3Rope`, :class:`LongRope`,
        :class:`ProportionalRope` (whose ``partial_rotary_factor`` is the rotated fraction of
        the pairs, not a smaller ``rotary_dim``) or :class:`NtkRope`.

    Raises:
        TypeError: a wrong type (the dict itself, a number, a list).
        ValueError: an unknown rope type (the known ones are listed), a missing key, a
            non-finite factor/base or one below its bound (factors >= :data:`MIN_FACTOR`,
            yarn's ``beta_fast``/``beta_slow`` > 0, its base > 1), lists of the wrong length, odd or
            too large ``rotary_dim``, conflicting ``base``/``rope_theta`` or
            ``rotary_dim``/``partial_rotary_factor``.
    """
    head_dim = check_positive_int("head_dim", head_dim)
    if head_dim % 2:
        raise ValueError(f"head_dim must be even (RoPE rotates channel pairs), got {head_dim}")
    if base is not None:
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

    theta = _optional(scaling, "rope_theta", positive=True)
    if theta is not None and base is not None and base != theta:
        raise ValueError(
            f"base={base} conflicts with scaling['rope_theta']={theta}; give the base once (or the same value)"
        )
    base = theta if theta is not None else base if base is not None else 10000.0

    fraction = _optional(scaling, "partial_rotary_factor", positive=True)
    if fraction is not None and fraction > 1:
        raise ValueError(f"scaling['partial_rotary_factor'] must be in (0, 1], got {fraction}")
    rotated_fraction = 1.0
    if rope_type == "proportional":
        # p-RoPE: the fraction picks the rotated pairs; the exponents still span rotary_dim
        rotated_fraction, fraction = 1.0 if fraction is None else fraction, None
    if fraction is not None:
        from_fraction = int(head_dim * fraction)
        if rotary_dim is not None and rotary_dim != from_fraction:
            raise ValueError(
                f"rotary_dim={rotary_dim} conflicts with scaling['partial_rotary_factor']={fraction} "
                f"(head_dim {head_dim} × {fraction} = {from_fraction}); give one of them"
            )
        rotary_dim = from_fraction
    rotary_dim = check_positive_int("rotary_dim", head_dim if rotary_dim is None else rotary_dim)
    if rotary_dim % 2:
        raise ValueError(f"rotary_dim must be even (RoPE rotates channel pairs), got {rotary_dim}")
    if rotary_dim > head_dim:
        raise ValueError(f"rotary_dim must be <= head_dim={head_dim}, got {rotary_dim}")

    reads = _TYPE_KEYS[rope_type]
    unread = sorted(set(scaling) - _COMMON_KEYS - reads)
    if unread:
        warnings.warn(
            f"scaling: rope_type={rope_type!r} does not read the key(s) {unread}; they are ignored "
            f"(it reads {sorted(reads | {'rope_type', 'rope_theta', 'partial_rotary_factor'})})",
            stacklevel=3,
        )
    params = _read_type(_Reader(scaling, rope_type, max_len), {"base": base, "rotary_dim": rotary_dim})
    if isinstance(params, ProportionalRope):
        params = dataclasses.replace(params, fraction=rotated_fraction)
    return params
