"""One frozen dataclass per RoPE type (``rope_type``): its settings and its frequencies. No state.

:class:`RopeParameters` (base and rotated width) is subclassed by :class:`DefaultRope`,
:class:`LinearRope`, :class:`DynamicRope`, :class:`YarnRope`, :class:`Llama3Rope`,
:class:`LongRope`, :class:`ProportionalRope` and :class:`NtkRope`; ``params.inv_freq()`` calls
the formulas of :mod:`posenc.functional.rope_freqs`. They are built, and checked, by
:func:`posenc.functional.rope_scaling.resolve_rope_scaling`.

Shape key: ``r`` rotated channels (``rotary_dim``), ``r/2`` rotated pairs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from torch import Tensor

from .rope_freqs import (
    Device,
    dynamic_ntk_inv_freq,
    linear_inv_freq,
    llama3_inv_freq,
    longrope_inv_freq,
    ntk_inv_freq,
    proportional_inv_freq,
    rope_inv_freq,
    yarn_inv_freq,
)

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
]

RopeType = Literal["default", "linear", "dynamic", "yarn", "llama3", "longrope", "proportional", "ntk"]


@dataclass(frozen=True, kw_only=True)
class RopeParameters:
    """What every RoPE variant has: the base and the rotated width. Subclassed once per rope type.

    Built by :func:`~posenc.functional.rope_scaling.resolve_rope_scaling`; :meth:`inv_freq` gives
    the frequencies, :meth:`inv_freq_at` those of a sequence of a given length.

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
    #: The formula of :mod:`posenc.functional.rope_freqs`, called as ``formula(r, base, *args)``
    #: with the fields named in ``args``.
    formula: ClassVar[Callable[..., Tensor]] = staticmethod(rope_inv_freq)
    args: ClassVar[tuple[str, ...]] = ()

    base: float = 10000.0
    rotary_dim: int

    @property
    def attention_scaling(self) -> float:
        return float(getattr(self, "attention_factor", 1.0))

    def inv_freq(self, *, dtype: torch.dtype = torch.float64, device: Device = None) -> Tensor:
        """``(s, r/2)`` frequencies, one row per set: ``s = 2`` for longrope (short, long), else 1.

        For ``"dynamic"`` this is the set used up to the trained length (plain RoPE's); see
        :meth:`inv_freq_at` for longer sequences.
        """
        values = [getattr(self, name) for name in self.args]
        return self.formula(self.rotary_dim, self.base, *values, dtype=dtype, device=device)[None]

    def inv_freq_at(
        self, seq_len: Tensor | int | None, *, dtype: torch.dtype = torch.float64, device: Device = None
    ) -> Tensor:
        """``(r/2,)`` frequencies for a sequence of length ``seq_len`` (``None``: up to the trained length).

        Only dynamic and longrope depend on it: dynamic NTK's base grows past the trained length
        (:func:`~posenc.functional.rope_freqs.dynamic_ntk_inv_freq`), longrope takes its long
        factors past it (a tensor ``seq_len``, under compile/export, picks them without a Python branch).
        """
        sets = self.inv_freq(dtype=dtype, device=device)
        long = isinstance(self, LongRope) and seq_len is not None and seq_len > self.original_max_len
        return (
            torch.where(long.to(sets.device), sets[1], sets[0])
            if isinstance(long, Tensor)
            else sets[int(long)]
        )


@dataclass(frozen=True, kw_only=True)
class DefaultRope(RopeParameters):
    """Plain RoPE (Su et al., 2021): ``inv_freq[i] = base ** (-2i / r)``."""


@dataclass(frozen=True, kw_only=True)
class LinearRope(RopeParameters):
    """Position interpolation (``"linear"``): every frequency divided by ``factor``."""

    rope_type: ClassVar[RopeType] = "linear"
    keys: ClassVar[frozenset[str]] = frozenset({"factor"})
    formula = staticmethod(linear_inv_freq)
    args = ("factor",)
    factor: float


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
        self, seq_len: Tensor | int | None, *, dtype: torch.dtype = torch.float64, device: Device = None
    ) -> Tensor:
        """``(r/2,)`` frequencies for a sequence of length ``seq_len`` (see :func:`dynamic_ntk_inv_freq`)."""
        length = 0 if seq_len is None else seq_len
        args = (self.rotary_dim, self.base, self.factor, self.original_max_len, length)
        return dynamic_ntk_inv_freq(*args, dtype=dtype, device=device)


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
    formula = staticmethod(yarn_inv_freq)
    args = ("factor", "original_max_len", "beta_fast", "beta_slow", "truncate")
    factor: float
    original_max_len: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    truncate: bool = True
    attention_factor: float


@dataclass(frozen=True, kw_only=True)
class Llama3Rope(RopeParameters):
    """Llama 3.1's scaling (``"llama3"``): high frequencies kept, low ones divided by ``factor``."""

    rope_type: ClassVar[RopeType] = "llama3"
    keys: ClassVar[frozenset[str]] = frozenset(
        {"factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"}
    )
    formula = staticmethod(llama3_inv_freq)
    args = ("factor", "low_freq_factor", "high_freq_factor", "original_max_len")
    factor: float
    original_max_len: int
    low_freq_factor: float
    high_freq_factor: float


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

    def inv_freq(self, *, dtype: torch.dtype = torch.float64, device: Device = None) -> Tensor:
        factors = [self.short_factor, self.long_factor]
        return longrope_inv_freq(self.rotary_dim, self.base, factors, dtype=dtype, device=device)


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
    formula = staticmethod(proportional_inv_freq)
    args = ("fraction", "factor")
    fraction: float = 1.0
    factor: float = 1.0


@dataclass(frozen=True, kw_only=True)
class NtkRope(RopeParameters):
    """Static NTK-aware scaling (``"ntk"``): the base times ``factor ** (r / (r - 2))``."""

    rope_type: ClassVar[RopeType] = "ntk"
    keys: ClassVar[frozenset[str]] = frozenset({"factor"})
    formula = staticmethod(ntk_inv_freq)
    args = ("factor",)
    factor: float


#: The dataclass of each rope type, by name (the shape of transformers' ``ROPE_INIT_FUNCTIONS``).
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
#: The ``rope_type`` values understood: transformers' ``ROPE_INIT_FUNCTIONS`` plus ``"default"``, and
#: ``"ntk"`` (static NTK-aware scaling, as vLLM's and x-transformers').
ROPE_TYPES: tuple[str, ...] = tuple(_CLASSES)
# Keys each rope type reads (hf copies exactly these from a model config).
_TYPE_KEYS: dict[str, frozenset[str]] = {name: cls.keys for name, cls in _CLASSES.items()}
