"""Reading a Hugging Face RoPE scaling dict into its rope type's dataclass. No state.

* :func:`resolve_rope_scaling` reads a Hugging Face ``rope_scaling`` / ``rope_parameters`` dict
  into one frozen dataclass per ``rope_type`` (:class:`DefaultRope`, :class:`LinearRope`,
  :class:`DynamicRope`, :class:`YarnRope`, :class:`Llama3Rope`, :class:`LongRope`,
  :class:`ProportionalRope`, :class:`NtkRope`, all :class:`RopeParameters`); every check is
  raised here, before any tensor exists;
* the attention factors a dict implies when it gives none (YaRN's, LongRoPE's), computed there;
* each dataclass (:mod:`posenc.functional.rope_freqs`, with the formulas) gives its
  frequencies, ``params.inv_freq()``.

Shape key: ``r`` rotated channels (``rotary_dim``), ``r/2`` rotated pairs.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from .._checks import (
    check_bool,
    check_choice,
    check_positive_float,
    check_positive_int,
    check_rotary_channels,
    is_real,
    short,
)
from .rope_freqs import RopeParameters

__all__ = ["ROPE_TYPES", "resolve_rope_scaling"]


#: The dataclass of each rope type, by name (the shape of transformers' ``ROPE_INIT_FUNCTIONS``): the
#: subclasses of RopeParameters, in the order rope_freqs defines them.
_CLASSES: dict[str, type[RopeParameters]] = {cls.rope_type: cls for cls in RopeParameters.__subclasses__()}
#: The ``rope_type`` values understood: transformers' ``ROPE_INIT_FUNCTIONS`` plus ``"default"``, and
#: ``"ntk"`` (static NTK-aware scaling, as vLLM's and x-transformers').
ROPE_TYPES: tuple[str, ...] = tuple(_CLASSES)
_ORIGINAL = "original_max_position_embeddings"
#: The dict keys each type reads besides rope_type/type, rope_theta, partial_rotary_factor
#: (transformers' ``_validate_<type>_rope_parameters``); posenc.hf copies exactly these.
_TYPE_KEYS: dict[str, frozenset[str]] = {
    kind: frozenset(keys.split())
    for kind, keys in {
        "default": "",
        "linear": "factor",
        "dynamic": "factor",
        "yarn": f"factor {_ORIGINAL} attention_factor beta_fast beta_slow mscale mscale_all_dim truncate",
        "llama3": f"factor {_ORIGINAL} low_freq_factor high_freq_factor",
        "longrope": f"short_factor long_factor factor {_ORIGINAL} attention_factor",
        "proportional": "factor",
        "ntk": "factor",
    }.items()
}
#: The smallest scale factor accepted: below it the scaled frequencies overflow (``1e-320`` gives NaN).
MIN_FACTOR = 1e-6
_COMMON_KEYS = frozenset({"rope_type", "type", "rope_theta", "partial_rotary_factor", "llama_4_scaling_beta"})


def _reads(rope_type: str, query_scale: bool) -> frozenset[str]:
    """The keys a dict of ``rope_type`` is read for (``query_scale``: its trained length too, for Ministral 3)."""
    return _COMMON_KEYS | _TYPE_KEYS[rope_type] | ({_ORIGINAL} if query_scale else frozenset())


# --- reading a Hugging Face dict -------------------------------------------------------------------


def _number(key: str, value: Any, *, positive: bool = False, minimum: float | None = None) -> float:
    """``value`` as a finite float; ``positive``: ``> 0``; ``minimum``: ``>= minimum``. Bools and strings are refused."""
    if not is_real(value):
        raise TypeError(f"scaling[{key!r}] must be a number, got {short(value)} ({type(value).__name__})")
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


def _optional(scaling: Mapping[str, Any], key: str, **bounds: Any) -> float | None:
    value = scaling.get(key)
    return None if value is None else _number(key, value, **bounds)


def _mscale(factor: float, m: float = 1.0) -> float:
    """YaRN's attention factor (Peng et al., 2023; transformers' ``get_mscale``): ``0.1 * m * ln(factor) + 1``, 1 if ``factor <= 1``."""
    return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0


def _read_type(
    scaling: dict[str, Any], kind: str, max_len: int | None, trained: int | None, common: dict[str, Any]
) -> RopeParameters:
    """The dataclass of rope type ``kind`` from its keys in ``scaling``; ``trained``: the checked trained
    context length (the dict's, else ``max_len``); ``common``: the checked base and rotary_dim."""

    def needs(what: str) -> ValueError:
        return ValueError(f"scaling with rope_type={kind!r} needs {what}")

    def required(key: str) -> float:
        if scaling.get(key) is None:
            raise needs(f"{key!r} (a number > 0), got {short(scaling, 100)}")
        return _number(key, scaling[key], positive=True)

    def factor_list(key: str) -> tuple[float, ...]:
        value, pairs = scaling.get(key), common["rotary_dim"] // 2
        if value is None:
            raise needs(f"{key!r} (a list of {pairs} numbers)")
        if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
            raise TypeError(
                f"scaling[{key!r}] must be a list of {pairs} numbers (rotary_dim / 2), got {type(value).__name__}"
            )
        if len(value) != pairs:
            raise ValueError(f"scaling[{key!r}] must have {pairs} entries (rotary_dim / 2), got {len(value)}")
        return tuple(_number(f"{key}[{i}]", v, minimum=MIN_FACTOR) for i, v in enumerate(value))

    if kind in ("dynamic", "ntk") and common["rotary_dim"] < 4:
        raise ValueError(
            f"rope_type={kind!r} needs rotary_dim >= 4 (its base exponent is r/(r-2)), got {common['rotary_dim']}"
        )
    if kind == "yarn" and common["base"] <= 1:
        raise ValueError(
            f"rope_type='yarn' needs a base (rope_theta) > 1 (its ramp divides by log(base)), got {common['base']}"
        )
    fields: dict[str, Any] = {}
    if kind == "dynamic":
        if max_len is None:
            raise needs("max_len (the trained context length, transformers' max_position_embeddings)")
        fields["original_max_len"] = max_len
    elif _ORIGINAL in _TYPE_KEYS[kind]:  # yarn, llama3, longrope
        if trained is None:
            raise needs(f"the trained context length: give scaling[{_ORIGINAL!r}] or max_len")
        fields["original_max_len"] = trained
    factor = _optional(scaling, "factor", minimum=MIN_FACTOR) if kind != "default" else None
    # transformers' rule for yarn and longrope dicts without one (DeepSeek-V3, Phi-3): the context ratio (a
    # longrope dict without its trained length trained at max_len, as transformers fills it in: 1)
    given = scaling.get(_ORIGINAL) or kind == "longrope"
    if factor is None and kind in ("yarn", "longrope") and max_len is not None and given:
        factor = max_len / fields["original_max_len"]
    if factor is None and kind not in ("default", "longrope", "proportional"):
        raise needs(f"a 'factor' (a number >= {MIN_FACTOR:g}), got {short(scaling, 100)}")
    if factor is not None:  # else the dataclass's default: proportional's 1, longrope's None
        fields["factor"] = factor
    if "attention_factor" in _TYPE_KEYS[kind]:  # yarn, longrope: the dict's, else computed below
        fields["attention_factor"] = _optional(scaling, "attention_factor", positive=True)
    if kind == "proportional":
        # p-RoPE: partial_rotary_factor (checked by resolve_rope_scaling) is the rotated fraction of the
        # pairs; the exponents span rotary_dim
        fields["fraction"] = float(scaling.get("partial_rotary_factor") or 1.0)
    elif kind == "yarn":
        # none given: with both mscales (DeepSeek-V2/V3) their ratio, as transformers
        if fields["attention_factor"] is None:
            m, m_all = (_optional(scaling, key, minimum=0.0) for key in ("mscale", "mscale_all_dim"))
            f = fields["factor"]
            fields["attention_factor"] = _mscale(f, m) / _mscale(f, m_all) if m and m_all else _mscale(f)
        # transformers treats 0/None as "use the default" (``get("beta_fast") or 32``)
        # (the ramp takes log(original / (2 pi beta)): both must be > 0)
        fields["beta_fast"] = _number("beta_fast", scaling.get("beta_fast") or 32.0, positive=True)
        fields["beta_slow"] = _number("beta_slow", scaling.get("beta_slow") or 1.0, positive=True)
        fields["truncate"] = check_bool("scaling['truncate']", scaling.get("truncate", True))
    elif kind == "llama3":
        low, high = (required(key) for key in ("low_freq_factor", "high_freq_factor"))
        if high < low:  # equal: no smooth band (Llama 4 Scout), as transformers and vLLM compute it
            raise ValueError(
                "scaling['high_freq_factor'] must be greater than or equal to scaling['low_freq_factor'], got "
                f"{high} and {low}"
            )
        fields |= {"low_freq_factor": low, "high_freq_factor": high}
    elif kind == "longrope":
        fields |= {key: factor_list(key) for key in ("short_factor", "long_factor")}
        if fields["attention_factor"] is None:
            if factor is None:
                raise needs(
                    "'factor' or 'attention_factor' (or max_len with 'original_max_position_embeddings', whose "
                    "ratio is the factor)"
                )
            # LongRoPE's (Ding et al., 2024; Phi-3): sqrt(1 + ln(factor) / ln(L0)), 1 if factor <= 1
            fields["attention_factor"] = (
                1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(fields["original_max_len"]))
            )
    return _CLASSES[kind](**fields, **common)


def rope_type_of(params: Mapping[str, Any]) -> Any:
    """The rope type a Hugging Face dict names: ``rope_type``, else the legacy ``type``, else ``"default"``."""
    return params.get("rope_type", params.get("type", "default"))


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
    as transformers does for DeepSeek-V3 and Phi-3. ``llama_4_scaling_beta`` (Ministral 3,
    any rope type) scales queries by position (:meth:`RopeParameters.query_scale`). Keys the
    variant does not read are ignored with a warning, as transformers does.

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
    base = None if base is None else check_positive_float("base", base)
    max_len = None if max_len is None else check_positive_int("max_len", max_len)
    if scaling is not None and not isinstance(scaling, Mapping):
        raise TypeError(
            f"scaling must be a dict like {{'rope_type': 'linear', 'factor': 2.0}} or None, got {type(scaling).__name__}"
        )
    scaling = dict(scaling or {})

    rope_type = rope_type_of(scaling)
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
    if fraction is not None and rope_type != "proportional":  # p-RoPE's picks the rotated pairs (below)
        from_fraction = int(head_dim * fraction)
        if rotary_dim is not None and rotary_dim != from_fraction:
            raise ValueError(
                f"rotary_dim={rotary_dim} conflicts with scaling['partial_rotary_factor']={fraction} "
                f"(head_dim {head_dim} × {fraction} = {from_fraction}); give one of them"
            )
        rotary_dim = from_fraction
    rotary_dim = check_rotary_channels(head_dim, rotary_dim)

    common: dict[str, Any] = {"base": base, "rotary_dim": rotary_dim}
    beta = _optional(scaling, "llama_4_scaling_beta", minimum=0.0)
    reads = _reads(rope_type, bool(beta))
    # the trained context length: the dict's, where read, else max_len
    original = scaling.get(_ORIGINAL) if _ORIGINAL in reads else None
    trained = max_len if original is None else check_positive_int(f"scaling[{_ORIGINAL!r}]", original)
    if beta:  # Ministral 3 / Mistral 4: queries scaled by position, from the trained length
        if trained is None:
            raise ValueError(
                f"scaling['llama_4_scaling_beta'] needs the trained context length: give scaling[{_ORIGINAL!r}] "
                "or max_len"
            )
        common |= {"query_scale_beta": beta, "query_scale_len": trained}
    if unread := sorted(set(scaling) - reads):
        warnings.warn(
            f"scaling: rope_type={rope_type!r} does not read the key(s) {unread}; they are ignored "
            f"(it reads {sorted(reads - {'type', 'llama_4_scaling_beta'})})",
            stacklevel=3,
        )
    return _read_type(scaling, rope_type, max_len, trained, common)
