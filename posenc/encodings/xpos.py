"""xPos (Sun et al., 2023): RoPE's rotation times a per-frequency exponential decay."""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from .._checks import check_bool, check_positive_float
from .._compat import autocast_dtype, check_values, is_tracing
from .rope import RoPE
from .rotary import RotaryState

__all__ = ["XPos", "XPosState"]


class XPosState(RotaryState):
    """xPos's position state: RoPE's cos/sin rows, scaled by ``zeta ** (±position / scale_base)``
    (:meth:`XPos._scale`), exact only in causal attention."""

    #: The decay grows without bound for keys after the query: exact only in causal attention.
    causal_only = True
    causal_only_reason = (
        "its decay grows without bound for keys after the query, and xPos has no bidirectional "
        "form; use RoPE (or another encoding) for bidirectional attention"
    )


class XPos(RoPE):
    """xPos: the RoFormer rotation times a per-frequency decay with relative distance.

    Sun et al. (2023), "A Length-Extrapolatable Transformer". Pair ``i`` of a query at
    position ``m`` is rotated as in :class:`RoPE` and scaled by ``zeta_i ** (m / scale_base)``;
    the key at ``n`` by ``zeta_i ** (-n / scale_base)``, with
    ``zeta_i = (2i / r + gamma) / (1 + gamma)``. Scores then hold
    ``zeta_i ** ((m - n) / scale_base)``: an exponential decay with distance for keys before
    the query. This is rotary-embedding-torch's ``use_xpos=True`` (which centres the exponent
    on the sequence middle; the shift cancels in every score).

    Causal only: for keys after the query the factor grows without bound. ``causal=False``
    (what :func:`posenc.build` passes for a bidirectional model) raises. The hooks cannot see
    whether the attention that uses them is causal: calling ``posenc.attention(..., causal=False)``
    with an xPos built as causal is the caller's error.

    Range: the scales are computed from float64 exponents and rounded once. A query's scale
    ``zeta_0 ** (m / scale_base)`` shrinks and a key's grows with the position, so they stay
    finite and normal only up to :meth:`max_position` (about ``61 * scale_base`` in float32 and
    bfloat16, 31,000 with the defaults; ``6.8 *`` in float16; ``495 *`` in float64). Past it an
    eager call raises a ``ValueError`` naming the position and the limit instead of returning NaN
    (traced calls are not checked: that needs a host sync). The reference position is 0 in every
    call, so that the keys a KV cache holds pair up with later queries.

    Args:
        head_dim: the head width ``dh`` (even).
        base: the rotation's wavelength base (10000).
        layout: ``"half"`` or ``"interleaved"`` (rotary-embedding-torch), as :class:`RoPE`.
        rotary_dim: rotated (and scaled) channels, default all.
        scale_base: the decay's length scale (512).
        gamma: the decay's ``gamma`` (0.4), a positive float.
        causal: must be ``True``.
        max_len: rows of the cos/sin table (not a limit), as :class:`RoPE`.
        device: where the caches are built.

    Shape:
        ``forward(q, k)``: ``(b, h, tq, dh), (b, h_kv, tk, dh) ->`` the same shapes and dtypes.

    Example::

        xpos = XPos(64)
        q, k = xpos(q, k)
        scores = q @ k.transpose(-1, -2) / 8.0      # then a causal mask
    """

    state_class = XPosState

    def __init__(
        self,
        head_dim: int,
        base: float | None = None,
        layout: Literal["half", "interleaved"] = "half",
        rotary_dim: int | None = None,
        scale_base: float = 512.0,
        gamma: float = 0.4,
        causal: bool = True,
        max_len: int | None = None,
        *,
        device: torch.device | str | None = None,
    ) -> None:
        self.scale_base = check_positive_float("scale_base", scale_base)
        self.gamma = check_positive_float("gamma", gamma)
        if not check_bool("causal", causal):
            raise ValueError(
                "xpos is causal only (causal=False): its factor zeta ** ((m - n) / scale_base) grows without "
                "bound for keys after the query; use 'rope' for bidirectional attention"
            )
        self.causal = causal
        super().__init__(
            head_dim, base=base, layout=layout, rotary_dim=rotary_dim, max_len=max_len, device=device
        )
        self.by_role = True  # keys at the queries' positions are scaled the other way

    def _scale(self, state: RotaryState, side: str, role: str, dtype: torch.dtype) -> Tensor | None:
        """``zeta ** (±position / scale_base)``, ``(t, r/2)`` or ``(b, t, r/2)``: + for queries, − for keys.

        Queries get ``zeta ** (m / scale_base)``, keys ``zeta ** (-n / scale_base)``, so that
        ``q_m · k_n`` carries ``zeta ** ((m - n) / scale_base)``: a decay with distance for
        causal attention (``n <= m``). The reference position is 0 for every call, so that keys
        rotated in an earlier call (a KV cache) and queries of a later one still pair up.
        """
        positions = state._positions(side)
        dtype = autocast_dtype(positions.device, dtype) or dtype  # what the kernel is given, in autocast too
        limit = None if is_tracing() else self.max_position(dtype)
        if limit is not None and (state.end is None or state.end - 1 > limit):
            why = (
                f"the largest whose scale zeta ** (±position / scale_base) {dtype} holds (scale_base="
                f"{self.scale_base}, gamma={self.gamma}); use a larger scale_base, or float64 inputs"
            )
            if state.end is not None:
                raise ValueError(f"xpos: position {state.end - 1} is past {limit}, {why}")
            # given positions off the CPU: a kernel assert, no host sync
            check_values(positions <= limit, f"xpos: a position is past {limit}, {why}")
        # the decay base of each rotated pair, zeta_i = (2i / r + gamma) / (1 + gamma), (r/2,) float64
        # on the positions' device (no CPU tensor)
        i = torch.arange(0, self.rotary_dim, 2, dtype=torch.float64, device=positions.device)
        log_zeta = ((i / self.rotary_dim + self.gamma) / (1 + self.gamma)).log()
        sign = 1.0 if role == "query" else -1.0
        power = positions.to(torch.float64)[..., None] * (sign / self.scale_base)
        return (power * log_zeta).exp()  # float64 exponent

    def max_position(self, dtype: torch.dtype = torch.float32) -> int:
        """The largest position whose scales ``zeta_i ** (±position / scale_base)`` keep 7/8 of
        ``dtype``'s exponent range: ``7/8 * scale_base * log(smallest normal) / log(zeta_0)``, rounded
        down. The other 1/8 is left to the values they multiply (up to ~5e4 in float32, ~13 in float16)."""
        info = torch.finfo(dtype)
        limit = 0.875 * min(math.log(info.max), -math.log(info.tiny))
        smallest_zeta = self.gamma / (1 + self.gamma)  # zeta_0 (see _scale), in Python: no tensor read
        return int(limit * self.scale_base / -math.log(smallest_zeta))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, scale_base={self.scale_base}, gamma={self.gamma}"
