"""Multimodal RoPE (M-RoPE) of Qwen2-VL, Qwen2.5-VL (chunked) and Qwen3-VL (interleaved).

Every token has three positions — temporal, height, width — and the rotated pairs are split
into three sections, each turning with one of them (Wang et al., 2024, "Qwen2-VL"). Text
tokens have the same position on all three axes, where M-RoPE is plain RoPE.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor

from .._checks import check_choice, check_int
from ..functional.axial import mrope_axes
from ..functional.rope_scaling import resolve_rope_scaling, rope_type_of
from .axial import _AxisRotary

__all__ = ["MRoPE"]

#: Keys of transformers' ``rope_parameters`` that describe M-RoPE itself, not the rope type.
_MROPE_KEYS = ("mrope_section", "mrope_interleaved")


class MRoPE(_AxisRotary):
    """M-RoPE: RoPE whose rotated pairs follow the temporal, height or width position.

    The frequencies are RoPE's for the rotated width ``r`` (``base ** (-2i / r)``, or those of the
    ``scaling`` rope type, with its attention factor, exactly as :class:`~posenc.RoPE`); ``r`` is the
    whole head unless ``scaling`` has a ``partial_rotary_factor`` (Qwen3.5 rotates a quarter; the other
    channels pass through). The pairs are split by ``mrope_section`` (pairs per axis, summing to ``r / 2``):

    * chunked (``interleaved=False``, Qwen2-VL, Qwen2.5-VL): the first ``section[0]`` pairs turn
      with the temporal position, the next ``section[1]`` with the height, the rest with the width;
    * interleaved (``interleaved=True``, Qwen3-VL): pairs cycle t, h, w up to ``3 * section[j]``,
      the remainder temporal (see :func:`posenc.functional.mrope_axes`); as in transformers, the
      sections need not sum to ``r / 2`` there (e.g. ``[11, 11, 10]`` on a 128-pair head);
    * height and width interleaved (``interleaved="hw"``, ERNIE 4.5 VL): pairs alternate h, w over the
      first ``2 * section[1]`` pairs (``section[1] == section[2]``), the last ``section[0]`` temporal;
      with two sections ``(h, w)`` (NeoMME's rows and columns, no time axis) they alternate over every
      pair, and positions have two axes.

    Rotation pairs channel ``i`` with ``i + r/2`` (``layout="half"``, ``rotate_half``, as the
    Qwen-VL models do), or ``2i`` with ``2i + 1`` (``"interleaved"``: GLM-4.1V, GLM-OCR, HunYuan V4
    VL); pair ``i`` follows the same axis in both.

    Positions: integer or float ``(t, a)`` or ``(b, t, a)``, one axis per section (``a = 3``: t, h, w),
    non-negative (Qwen3-Omni's times are fractional: :func:`posenc.mrope_positions` with
    ``omni="qwen3"`` gives float32 positions, which turn as they are; rounding them would rotate by
    other angles) (transformers' ``get_rope_index`` gives
    ``(3, b, t)``: use :func:`posenc.functional.axes_last`), or 1D ``(t,)``/``(b, t)`` for text,
    taken as the same position on every axis (then M-RoPE rotates as RoPE; causal masks and windows
    still follow the token order, as with every position of an encoding with axes). ``None`` means
    ``0 .. t-1`` on every axis. When ``t == 3`` a rank-2 ``(3, 3)`` tensor is read as ``(b, t)``
    if the batch is 3, else as ``(t, a)``; pass ``(1, t, 3)`` to be explicit. For the length of
    ``"dynamic"`` and ``"longrope"`` the largest position on any axis counts, as transformers does.

    Args:
        head_dim: the attention head width ``dh`` (even).
        mrope_section: pairs per axis, e.g. Qwen2-VL's ``[16, 24, 24]`` for ``dh = 128``; default
            Qwen2-VL's proportions: ``3/8`` of the pairs to height and to width, the rest to time.
        base: the wavelength base (``rope_theta``); a ``rope_theta`` in ``scaling`` must agree.
        interleaved: Qwen3-VL's interleaved sections (``True``), or ERNIE 4.5 VL's and NeoMME's (``"hw"``).
        layout: ``"half"`` or ``"interleaved"`` channel pairs, as :class:`~posenc.RoPE`.
        scaling: a Hugging Face ``rope_parameters`` dict (``rope_type`` and its keys; its
            ``mrope_section``/``mrope_interleaved``, if present, must agree with the arguments).
        max_len: transformers' ``max_position_embeddings``: the trained length of ``"dynamic"``,
            and of yarn/llama3/longrope when ``scaling`` has no ``original_max_position_embeddings``.
        device: where the caches are built.

    Shape:
        ``forward(q, k, q_positions, k_positions)``: ``(b, h, tq, dh)``, ``(b, h_kv, tk, dh)`` ->
        the rotated ``(q, k)``.
    """

    def __init__(
        self,
        head_dim: int,
        *,
        mrope_section: tuple[int, ...] | list[int] | None = None,
        base: float = 10000.0,
        interleaved: bool | Literal["hw"] = False,
        scaling: dict[str, Any] | None = None,
        layout: Literal["half", "interleaved"] = "half",
        max_len: int | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.interleaved = interleaved
        if mrope_section is None and isinstance(head_dim, int) and head_dim >= 6:
            # Qwen2-VL's proportions (16, 24, 24 of 64 pairs): 3/8 of the pairs to height and to width
            hw = 3 * (head_dim // 2) // 8
            mrope_section = [head_dim // 2 - 2 * hw, hw, hw]
        if mrope_section is None:
            raise ValueError(
                f"mrope_section is needed for head_dim={head_dim!r} (the default splits head_dim >= 6)"
            )
        if not isinstance(mrope_section, (tuple, list)) or not mrope_section:
            raise TypeError(f"mrope_section must be a list of ints like [16, 24, 24], got {mrope_section!r}")
        for i, s in enumerate(mrope_section):
            check_int(f"mrope_section[{i}]", s, minimum=1)
        mrope_axes(mrope_section, interleaved=interleaved)  # (its checks of `interleaved` and the sections)
        rest = dict(scaling) if isinstance(scaling, dict) else scaling
        if isinstance(rest, dict):
            given = rest.get("mrope_section")
            if given is not None and list(given) != list(mrope_section):
                raise ValueError(
                    f"scaling['mrope_section']={given!r} conflicts with mrope_section={list(mrope_section)}"
                )
            flag = rest.get("mrope_interleaved")  # (Qwen3-VL's dict: True, its interleaved sections)
            if flag is not None and bool(flag) != (interleaved is True):
                raise ValueError(
                    f"scaling['mrope_interleaved']={flag!r} conflicts with interleaved={interleaved!r}; "
                    f"pass interleaved={bool(flag)!r} for the sections the dict describes"
                )
            # Qwen2-VL's legacy {"type": "mrope"}: M-RoPE itself, not a rope type
            dropped = _MROPE_KEYS + (("type", "rope_type") if rope_type_of(rest) == "mrope" else ())
            rest = {k: v for k, v in rest.items() if k not in dropped}
        self.params = resolve_rope_scaling(rest, head_dim=head_dim, base=base, max_len=max_len)
        if self.params.query_scale_beta:
            raise ValueError(
                "scaling['llama_4_scaling_beta'] (Ministral 3's query scaling) is RoPE's: MRoPE has none"
            )
        pairs = self.params.rotary_dim // 2
        if interleaved is not True and sum(mrope_section) != pairs:  # (interleaved: see mrope_axes)
            raise ValueError(
                f"mrope_section={list(mrope_section)} sums to {sum(mrope_section)}, expected "
                f"{'head_dim' if pairs * 2 == head_dim else 'rotary_dim'} / 2 = {pairs} (one entry per axis)"
            )
        check_choice("layout", layout, ("half", "interleaved"))
        self.head_dim, self.layout = head_dim, layout
        self.mrope_section = tuple(mrope_section)
        self.num_axes = len(mrope_section)
        self.scaling = dict(scaling) if scaling is not None else None
        self._init_caches((self.rotary_dim // 2,), device)

    def _pairs(self, device: torch.device) -> tuple[Tensor, Tensor]:
        axes = mrope_axes(self.mrope_section, interleaved=self.interleaved, pairs=self.rotary_dim // 2)
        return self.params.inv_freq(device=device), axes.to(device)

    def _default_positions(self, length: int, device: torch.device | str | None) -> Tensor:
        return torch.arange(length, device=device)[:, None].expand(length, self.num_axes)

    def extra_repr(self) -> str:
        parts = {  # the first three always, the others where they are not the default
            f"head_dim={self.head_dim}": True,
            f"mrope_section={list(self.mrope_section)}": True,
            f"base={self.base}": True,
            f"rotary_dim={self.rotary_dim}": self.rotary_dim != self.head_dim,
            f"interleaved={self.interleaved!r}": self.interleaved,
            f"layout={self.layout!r}": self.layout != "half",
            f"rope_type={self.rope_type!r}": self.rope_type != "default",
        }
        return ", ".join(part for part, shown in parts.items() if shown)
