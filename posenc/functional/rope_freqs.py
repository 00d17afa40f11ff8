"""RoPE frequencies: plain RoPE and the scaling variants' formulas. No state.

:func:`rope_inv_freq` (plain), :func:`linear_inv_freq`, :func:`dynamic_ntk_inv_freq`,
:func:`yarn_inv_freq`, :func:`llama3_inv_freq`, :func:`longrope_inv_freq`,
:func:`proportional_inv_freq`, :func:`ntk_inv_freq`, and the attention factors
:func:`yarn_attention_factor`, :func:`longrope_attention_factor`. The per-type dataclasses that
call them are in :mod:`posenc.functional.rope_params`; reading a Hugging Face dict into one is
:mod:`posenc.functional.rope_scaling`.

Frequencies are computed in float64 by default: the angle ``position * inv_freq`` then stays
exact at large positions (a float32 frequency is off by ``6e-8`` relative, 8e-3 rad at
position 131072), and callers round once to their table dtype.

Shape key: ``r`` rotated channels (``rotary_dim``), ``r/2`` rotated pairs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "dynamic_ntk_inv_freq",
    "linear_inv_freq",
    "llama3_inv_freq",
    "longrope_attention_factor",
    "longrope_inv_freq",
    "ntk_inv_freq",
    "proportional_inv_freq",
    "rope_inv_freq",
    "yarn_attention_factor",
    "yarn_inv_freq",
]

Device = torch.device | str | None


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
    between is interpolated smoothly (an empty band when ``high_freq_factor == low_freq_factor``).

    Returns:
        ``(r/2,)`` inverse frequencies.
    """
    inv_freq = rope_inv_freq(dim, base, dtype=dtype, device=device)
    low_freq_wavelen = original_max_len / low_freq_factor
    high_freq_wavelen = original_max_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    if high_freq_factor == low_freq_factor:
        return scaled  # an empty band (Llama 4 Scout: both 1): every frequency is kept or divided
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
