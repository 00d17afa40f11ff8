"""RoPE frequencies: the formulas, and one frozen dataclass per rope type (``rope_type``). No state.

* :func:`rope_inv_freq`: plain RoPE's frequencies, which every other type rescales;
* :class:`RopeParameters` (base and rotated width), subclassed by :class:`DefaultRope`,
  :class:`LinearRope`, :class:`DynamicRope`, :class:`YarnRope`, :class:`Llama3Rope`,
  :class:`LongRope`, :class:`ProportionalRope` and :class:`NtkRope`: each holds its settings and
  gives its frequencies, ``params.inv_freq()`` (each type's formula is its own method). They are built, and checked, by
  :func:`posenc.functional.rope_scaling.resolve_rope_scaling` (reading a Hugging Face dict).

Frequencies are computed in float64 by default: the angle ``position * inv_freq`` then stays
exact at large positions (a float32 frequency is off by ``6e-8`` relative, 8e-3 rad at
position 131072), and callers round once to their table dtype.

Shape key: ``r`` rotated channels (``rotary_dim``), ``r/2`` rotated pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from torch import Tensor

from .._checks import check_int, check_positive_float

__all__ = [
    "DefaultRope",
    "DynamicRope",
    "LinearRope",
    "Llama3Rope",
    "LongRope",
    "NtkRope",
    "ProportionalRope",
    "RopeParameters",
    "YarnRope",
    "rope_inv_freq",
]

Device = torch.device | str | None
RopeType = Literal["default", "linear", "dynamic", "yarn", "llama3", "longrope", "proportional", "ntk"]


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
    if check_int("dim", dim, minimum=2) % 2:
        raise ValueError(f"dim must be even (RoPE rotates channel pairs), got {dim}")
    return 1.0 / (check_positive_float("base", base) ** _exponents(dim, dtype, device))


# --- one dataclass per rope type ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RopeParameters:
    """What every RoPE variant has: the base and the rotated width. Subclassed once per rope type.

    Built by :func:`~posenc.functional.rope_scaling.resolve_rope_scaling`; :meth:`inv_freq` gives
    the frequencies, :meth:`inv_freq_at` those of a sequence of a given length.

    Attributes:
        base: the wavelength base (``rope_theta``).
        rotary_dim: the number of rotated channels ``r`` (even).
        rope_type: the class's type name, one of :data:`~posenc.functional.rope_scaling.ROPE_TYPES`.
        attention_scaling: the factor multiplied into cos and sin (YaRN's and LongRoPE's
            attention factor; 1 otherwise).
        length_dependent: whether the frequencies depend on the sequence length (dynamic, longrope).
        query_scale_beta, query_scale_len: Mistral 3's query scaling by position (the dict's
            ``llama_4_scaling_beta`` and ``original_max_position_embeddings``; beta 0: none).
    """

    rope_type: ClassVar[RopeType] = "default"
    length_dependent: ClassVar[bool] = False

    base: float = 10000.0
    rotary_dim: int
    query_scale_beta: float = 0.0
    query_scale_len: int = 1

    def query_scale(self, positions: Tensor) -> Tensor:
        """``1 + beta * log(1 + floor(p / query_scale_len))`` at each position, float64, same shape:
        what Ministral 3 multiplies its queries by (transformers' ``get_llama_4_attn_scale``)."""
        steps = torch.floor(positions.to(torch.float64) / self.query_scale_len)
        return 1.0 + self.query_scale_beta * torch.log1p(steps)

    @property
    def attention_scaling(self) -> float:
        return float(getattr(self, "attention_factor", 1.0))

    def inv_freq(self, *, dtype: torch.dtype = torch.float64, device: Device = None) -> Tensor:
        """``(s, r/2)`` frequencies, one row per set: ``s = 2`` for longrope (short, long), else 1.

        For ``"dynamic"`` this is the set used up to the trained length (plain RoPE's); see
        :meth:`inv_freq_at` for longer sequences.
        """
        return self._formula(dtype, device).reshape(-1, self.rotary_dim // 2)

    def _formula(self, dtype: torch.dtype, device: Device) -> Tensor:
        """The type's frequencies, ``(r/2,)`` (longrope: ``(2, r/2)``)."""
        return rope_inv_freq(self.rotary_dim, self.base, dtype=dtype, device=device)

    def inv_freq_at(
        self,
        seq_len: Tensor | int | None,
        *,
        dtype: torch.dtype = torch.float64,
        device: Device = None,
        sets: Tensor | None = None,
    ) -> Tensor:
        """``(r/2,)`` frequencies for a sequence of length ``seq_len`` (``None``: up to the trained length).

        Only dynamic and longrope depend on it. Dynamic NTK's base grows past the trained length
        (:class:`DynamicRope`): ``seq_len`` may be an int, ``None`` (plain RoPE's frequencies) or a
        tensor of any shape ``(...)`` (e.g. ``positions.max() + 1``: the formula has no Python
        branch on it), giving ``(..., r/2)``; it needs no ``sets`` (computed on the device).
        Longrope takes its long factors past it (a tensor ``seq_len``, of any shape as dynamic's, picks
        them without a Python branch, as under compile/export). ``sets``: :meth:`inv_freq` already on the device (a
        module's cache), instead of computed here (longrope's factors would be copied from the host).
        """
        if isinstance(self, DynamicRope):  # base' = base * (factor * L / L0 - (factor - 1)) ** (r / (r - 2))
            r, factor, trained = self.rotary_dim, self.factor, self.original_max_len
            if isinstance(seq_len, Tensor):
                length = seq_len.to(device=device, dtype=dtype)
            else:  # a fill on the device, not a copy from the host (which waits for a GPU's stream)
                length = torch.full((), seq_len or 0, dtype=dtype, device=device)
            length = length.clamp_min(trained)
            scaled_base = self.base * (factor * length / trained - (factor - 1)) ** (r / (r - 2))
            return 1.0 / (scaled_base[..., None] ** _exponents(r, dtype, length.device))
        sets = self.inv_freq(dtype=dtype, device=device) if sets is None else sets
        long = isinstance(self, LongRope) and seq_len is not None and seq_len > self.original_max_len
        if isinstance(long, Tensor):
            return torch.where(long.to(sets.device)[..., None], sets[1], sets[0])  # (..., r/2), as dynamic's
        return sets[int(long)]


@dataclass(frozen=True, kw_only=True)
class DefaultRope(RopeParameters):
    """Plain RoPE (Su et al., 2021): ``inv_freq[i] = base ** (-2i / r)``."""


@dataclass(frozen=True, kw_only=True)
class LinearRope(RopeParameters):
    """Position interpolation (``"linear"``; Chen et al., 2023; kaiokendev): every frequency divided by ``factor``."""

    rope_type: ClassVar[RopeType] = "linear"
    factor: float

    def _formula(self, dtype: torch.dtype, device: Device) -> Tensor:
        return rope_inv_freq(self.rotary_dim, self.base, dtype=dtype, device=device) / self.factor


@dataclass(frozen=True, kw_only=True)
class DynamicRope(RopeParameters):
    """Dynamic NTK scaling (``"dynamic"``; bloc97 / emozilla): plain RoPE up to ``original_max_len``, a larger base past it.

    The base grows with the sequence length ``L = max(seq_len, original_max_len)``:
    ``base' = base * (factor * L / original_max_len - (factor - 1)) ** (r / (r - 2))``, so below
    ``original_max_len`` the frequencies are plain RoPE's (:meth:`inv_freq`); :meth:`inv_freq_at`
    gives those of a sequence length (an int, or a tensor of any shape, without a Python branch).

    Attributes:
        factor: the scaling factor.
        original_max_len: the trained context length (the model's ``max_len``, transformers'
            ``max_position_embeddings``).
    """

    rope_type: ClassVar[RopeType] = "dynamic"
    length_dependent: ClassVar[bool] = True
    factor: float
    original_max_len: int


@dataclass(frozen=True, kw_only=True)
class YarnRope(RopeParameters):
    """YaRN (``"yarn"``, Peng et al., 2023): "NTK-by-parts" frequencies and an attention factor.

    Pairs that turn more than ``beta_fast`` times over the trained context keep their
    frequency (extrapolation), pairs that turn fewer than ``beta_slow`` times are divided by
    ``factor`` (interpolation), with a linear ramp between the two pair indices.

    Attributes:
        factor, original_max_len: the extension factor and the trained context length.
        beta_fast, beta_slow: the rotation counts bounding the ramp (32 and 1 in the paper).
        truncate: round the ramp's ends outward to whole pair indices (transformers' default).
        attention_factor: multiplied into cos and sin (also :attr:`attention_scaling`;
            ``0.1 * ln(factor) + 1`` when a dict gives none).
    """

    rope_type: ClassVar[RopeType] = "yarn"
    factor: float
    original_max_len: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    truncate: bool = True
    attention_factor: float

    def _formula(self, dtype: torch.dtype, device: Device) -> Tensor:
        r, trained = self.rotary_dim, self.original_max_len

        def correction_dim(rotations: float) -> float:
            # the pair index whose wavelength fits `rotations` times into the trained context
            return (r * math.log(trained / (rotations * 2 * math.pi))) / (2 * math.log(self.base))

        low, high = correction_dim(self.beta_fast), correction_dim(self.beta_slow)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, r - 1)
        if low == high:
            high += 0.001  # as transformers: avoid dividing by zero in the ramp
        ramp = ((torch.arange(r // 2, dtype=dtype, device=device) - low) / (high - low)).clamp(0, 1)
        extrapolation = rope_inv_freq(r, self.base, dtype=dtype, device=device)
        keep = 1 - ramp  # 1 where the frequency is kept, 0 where it is interpolated
        return extrapolation / self.factor * (1 - keep) + extrapolation * keep


@dataclass(frozen=True, kw_only=True)
class Llama3Rope(RopeParameters):
    """Llama 3.1's scaling (``"llama3"``, Meta, 2024): high frequencies kept, low ones divided by ``factor``.

    Wavelengths shorter than ``original_max_len / high_freq_factor`` are kept, those longer
    than ``original_max_len / low_freq_factor`` are divided by ``factor``, and the band
    between is interpolated smoothly (an empty band when ``high_freq_factor == low_freq_factor``).
    """

    rope_type: ClassVar[RopeType] = "llama3"
    factor: float
    original_max_len: int
    low_freq_factor: float
    high_freq_factor: float

    def _formula(self, dtype: torch.dtype, device: Device) -> Tensor:
        low, high = self.low_freq_factor, self.high_freq_factor
        factor, trained = self.factor, self.original_max_len
        inv_freq = rope_inv_freq(self.rotary_dim, self.base, dtype=dtype, device=device)
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > trained / low, inv_freq / factor, inv_freq)
        if high == low:
            return scaled  # an empty band (Llama 4 Scout: both 1): every frequency is kept or divided
        smooth = (trained / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        return torch.where((wavelen >= trained / high) & (wavelen <= trained / low), smoothed, scaled)


@dataclass(frozen=True, kw_only=True)
class LongRope(RopeParameters):
    """LongRoPE (``"longrope"``, Ding et al., 2024; Phi-3): short factors up to ``original_max_len``, long ones past it.

    Pair ``i`` turns at ``1 / (ext_i * base ** (2i/r))`` with ``ext`` the short or the long factors;
    :meth:`inv_freq` gives both sets, ``(2, r/2)``.

    Attributes:
        short_factor, long_factor: ``r/2`` per-pair rescale factors each.
        factor: the extension factor (``None`` when only the attention factor was given).
        original_max_len: the trained context length.
        attention_factor: multiplied into cos and sin (also :attr:`attention_scaling`).
    """

    rope_type: ClassVar[RopeType] = "longrope"
    length_dependent: ClassVar[bool] = True
    short_factor: tuple[float, ...]
    long_factor: tuple[float, ...]
    factor: float | None = None
    original_max_len: int
    attention_factor: float

    def _formula(self, dtype: torch.dtype, device: Device) -> Tensor:
        ext = torch.as_tensor([self.short_factor, self.long_factor], dtype=dtype, device=device)
        return 1.0 / (ext * self.base ** _exponents(self.rotary_dim, dtype, device))


@dataclass(frozen=True, kw_only=True)
class ProportionalRope(RopeParameters):
    """Proportional RoPE (``"proportional"``, p-RoPE; Gemma 4's global layers): only a fraction of pairs rotate.

    The exponents run over the whole rotated width ``r`` (``base ** (-2i / r)``), but only the
    first ``int(fraction * r // 2)`` pairs rotate: the others get frequency 0 and pass through
    unchanged. Unlike a partial rotation (``rotary_dim``), the pairs stay ``r/2`` apart in the
    half layout. Every frequency is divided by ``factor``.

    Attributes:
        fraction: the rotated fraction of the pairs (the dict's ``partial_rotary_factor``, in (0, 1]);
            it does not shrink ``rotary_dim``.
        factor: every frequency is divided by it (1 by default).
    """

    rope_type: ClassVar[RopeType] = "proportional"
    fraction: float = 1.0
    factor: float = 1.0

    def _formula(self, dtype: torch.dtype, device: Device) -> Tensor:
        inv_freq = rope_inv_freq(self.rotary_dim, self.base, dtype=dtype, device=device) / self.factor
        rotated = int(self.fraction * self.rotary_dim // 2)
        keep = torch.arange(self.rotary_dim // 2, device=inv_freq.device) < rotated
        return torch.where(keep, inv_freq, torch.zeros_like(inv_freq))


@dataclass(frozen=True, kw_only=True)
class NtkRope(RopeParameters):
    """Static NTK-aware scaling (``"ntk"``; bloc97, 2023; vLLM's and x-transformers'): a larger base.

    ``base' = base * factor ** (r / (r - 2))``: the highest frequency is kept and the lowest is
    divided by ``factor``, so a model trained on ``L`` positions sees ``factor * L`` without
    fine-tuning.
    """

    rope_type: ClassVar[RopeType] = "ntk"
    factor: float

    def _formula(self, dtype: torch.dtype, device: Device) -> Tensor:
        r = self.rotary_dim
        return rope_inv_freq(r, self.base * self.factor ** (r / (r - 2)), dtype=dtype, device=device)
