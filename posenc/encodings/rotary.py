"""Rotary position embedding (RoPE, Su et al., 2021) with the Hugging Face scaling variants.

The module holds only caches; the math is in :mod:`posenc.functional.rotary`. The cos/sin
table is a non-persistent buffer computed in float64 and stored in float32 (float64 once a
float64 input is seen, or after ``.double()``); ``.to(torch.bfloat16)`` / ``.half()`` move it
but never downcast it (a bfloat16 table has angle errors near 2 past position 8k). It grows
on demand to the next power of two past the longest position seen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch
from torch import Tensor

from .._checks import check_float_tensor
from ..base import (
    _CACHE_DTYPES,
    PositionalEncoding,
    _is_compiling,
    _is_exporting,
    _precise_dtype,
    check_qk,
    resolve_positions,
    resolve_qk_positions,
)
from ..functional.rotary import (
    RopeParameters,
    apply_rotary,
    dynamic_ntk_inv_freq,
    resolve_rope_scaling,
    rope_cos_sin,
    scaled_inv_freq,
)
from ..registry import register

__all__ = ["RoPE"]

#: Table rows built at construction when ``max_len`` is not given (it grows on demand).
DEFAULT_INITIAL_LEN = 2048


def _next_power_of_two(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _cos_sin_from_formula(
    positions: Tensor, inv_freq: Tensor, scale: Tensor, scaled: bool, compute: torch.dtype
) -> Tensor:
    """``(2, ..., r/2)``: cos then sin of ``positions * inv_freq`` (times ``scale`` when ``scaled``).

    The one place cos/sin are computed without the table (compile past the table, export,
    meta device). Tensors only, no Python float: it is also a ``torch.cond`` branch.
    """
    angles = positions.to(inv_freq.dtype)[..., None] * inv_freq
    rows = torch.stack((angles.cos(), angles.sin()))
    return (rows * scale if scaled else rows).to(compute)


@register("rope", "rotary")
class RoPE(PositionalEncoding):
    """Rotary position embedding: queries and keys rotated by position-dependent angles.

    Su et al., 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding". Channel
    pair ``i`` of the token at position ``m`` is rotated by the angle ``m * inv_freq[i]`` with
    ``inv_freq[i] = base ** (-2i / r)``, so that ``q_m · k_n`` depends only on ``m − n``.

    * ``layout="half"`` pairs channel ``i`` with ``i + r/2`` (GPT-NeoX, Hugging Face Llama's
      ``rotate_half``); ``"interleaved"`` pairs ``2i`` with ``2i + 1`` (GPT-J, RoFormer,
      Meta Llama's complex multiply, rotary-embedding-torch).
    * ``rotary_dim``: only the first ``r`` channels rotate (GPT-NeoX ``rotary_pct``, GPT-J
      ``rotary_dim``); the rest pass through. The layout applies within those ``r`` channels.
    * ``scaling``: a Hugging Face ``rope_scaling`` / ``rope_parameters`` dict, passed through
      as found in a model config: ``rope_type`` (or legacy ``type``) ``"default"``,
      ``"linear"``, ``"dynamic"``, ``"yarn"``, ``"llama3"`` or ``"longrope"`` with their keys
      (see :func:`posenc.functional.rotary.resolve_rope_scaling`). A ``rope_theta`` inside the
      dict is the base; a ``partial_rotary_factor`` gives ``rotary_dim``. YaRN's and
      LongRoPE's attention factor is multiplied into cos and sin, exactly as transformers
      does, and exposed as :attr:`attention_scaling`.

    Length-dependent variants are stateless functions of ``L = max position + 1`` over the
    queries and keys of the call (written with tensor ops, so they compile without graph
    breaks): ``"dynamic"`` uses the NTK base for ``L = max(L, max_len)``; ``"longrope"``
    uses the long factors when ``L > original_max_position_embeddings``, else the short ones
    (as transformers does per call). Transformers' dynamic module is stateful instead: it
    keeps the frequencies of the longest sequence seen until one shorter than
    ``max_position_embeddings`` resets them, so it equals this module on a fresh
    transformers module, or whenever the lengths do not shrink above ``max_len``.

    Args:
        head_dim: the attention head width ``dh`` (even).
        base: the wavelength base (``rope_theta``): 10000 in the paper, 500000 in Llama 3.
        layout: ``"half"`` or ``"interleaved"``.
        rotary_dim: the number of rotated channels ``r`` (even, ``<= head_dim``); default all.
        scaling: the Hugging Face scaling dict, or ``None`` for plain RoPE.
        max_len: the model's context length (transformers' ``max_position_embeddings``): the
            trained length for ``"dynamic"``, and for yarn/llama3/longrope when the dict has
            no ``original_max_position_embeddings``; also the table length built up front.
            Not a limit: longer sequences work.
        device: where the caches are built.

    Shape:
        ``forward(q, k)``: ``q`` ``(b, h, tq, dh)``, ``k`` ``(b, h_kv, tk, dh)`` with ``h_kv``
        dividing ``h`` (grouped-query attention) -> the rotated ``(q, k)``, same shapes and dtypes.

    Attributes:
        params: the validated :class:`~posenc.functional.rotary.RopeParameters`.
        rope_type, rotary_dim, base, attention_scaling: read from ``params``.
        table_builds: how many times the cos/sin table was (re)built (it is cached).

    Example::

        rope = RoPE(64, base=500000.0, scaling={"rope_type": "llama3", "factor": 8.0,
                    "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 8192})
        q, k = rope(q, k)                       # (b, h, t, 64) each
    """

    kind = "rotary"

    def __init__(
        self,
        head_dim: int,
        base: float = 10000.0,
        layout: Literal["half", "interleaved"] = "half",
        rotary_dim: int | None = None,
        scaling: dict[str, Any] | None = None,
        max_len: int | None = None,
        *,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        if layout not in ("half", "interleaved"):
            raise ValueError(f"layout must be 'half' or 'interleaved', got {layout!r}")
        self.params: RopeParameters = resolve_rope_scaling(
            scaling, head_dim=head_dim, rotary_dim=rotary_dim, base=base, max_len=max_len
        )
        self.head_dim = head_dim
        self.layout = layout
        self.scaling = dict(scaling) if scaling is not None else None
        self.max_len = max_len
        self.table_builds = 0
        self._initial_len = _next_power_of_two(max_len or self.params.original_max_len or DEFAULT_INITIAL_LEN)
        self.register_buffer("inv_freq", scaled_inv_freq(self.params, device=device), persistent=False)
        self.register_buffer(
            "_cos_sin", self._build_table(self._initial_len, torch.float32, self.inv_freq), persistent=False
        )

    # --- read-only views of the configuration -------------------------------------------------

    @property
    def rope_type(self) -> str:
        """The scaling variant: one of ``"default"``, ``"linear"``, ``"dynamic"``, ``"yarn"``, ``"llama3"``, ``"longrope"``."""
        return self.params.rope_type

    @property
    def rotary_dim(self) -> int:
        """The number of rotated channels ``r``."""
        return self.params.rotary_dim

    @property
    def base(self) -> float:
        """The wavelength base (``rope_theta``), after the scaling dict's ``rope_theta``."""
        return self.params.base

    @property
    def attention_scaling(self) -> float:
        """The factor multiplied into cos and sin (YaRN / LongRoPE attention factor; 1 otherwise)."""
        return self.params.attention_scaling

    @property
    def cached_len(self) -> int:
        """How many positions the cos/sin table covers now."""
        return self._cos_sin.shape[1] // self.inv_freq.shape[0]

    def extra_repr(self) -> str:
        parts = [f"head_dim={self.head_dim}", f"base={self.base}", f"layout={self.layout!r}"]
        if self.rotary_dim != self.head_dim:
            parts.append(f"rotary_dim={self.rotary_dim}")
        if self.rope_type != "default":
            parts.append(f"rope_type={self.rope_type!r}")
        if self.max_len is not None:
            parts.append(f"max_len={self.max_len}")
        return ", ".join(parts)

    # --- the cache ----------------------------------------------------------------------------

    def _build_table(self, length: int, dtype: torch.dtype, inv_freq: Tensor) -> Tensor:
        """``(2, s*length, r/2)``: cos then sin of ``position * inv_freq`` for each frequency set.

        Set ``j``'s rows are ``j*length .. (j+1)*length - 1`` (longrope: 0 short, 1 long).
        """
        self.table_builds += 1
        positions = torch.arange(length, dtype=inv_freq.dtype, device=inv_freq.device)
        cos, sin = rope_cos_sin(positions, inv_freq[:, None, :], self.attention_scaling, dtype=dtype)
        return torch.stack((cos.flatten(0, 1), sin.flatten(0, 1)))

    def _ensure_table(self, need: int, dtype: torch.dtype, device: torch.device) -> Tensor:
        """Eager only: the table, grown/moved/upgraded to float64 when needed, as one reference."""
        table = self._cos_sin  # one read: another thread may swap the buffer meanwhile
        sets = self.inv_freq.shape[0]
        wanted = torch.float64 if torch.float64 in (dtype, table.dtype) else torch.float32
        if table.shape[1] // sets >= need and table.device == device and table.dtype == wanted:
            return table
        length = max(table.shape[1] // sets, _next_power_of_two(need))
        inv_freq = self.inv_freq
        if inv_freq.device != device:
            inv_freq = inv_freq.to(device)
            self.inv_freq = inv_freq
        table = self._build_table(length, wanted, inv_freq)
        self._cos_sin = table  # build first, then assign: readers never see a half-built table
        return table

    def reset_caches(self) -> None:
        """Rebuild the frequencies and the cos/sin table where they are, e.g. after ``to_empty()``."""
        table = self._cos_sin
        device = table.device
        self.inv_freq = scaled_inv_freq(self.params, device=device)
        self._cos_sin = self._build_table(
            table.shape[1] // self.inv_freq.shape[0], table.dtype, self.inv_freq
        )

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True):
        caches = {name: self._buffers.pop(name) for name in ("inv_freq", "_cos_sin")}
        try:
            super()._apply(fn, recurse)
        finally:
            self._buffers.update(caches)
        table = caches["_cos_sin"]
        # Ask `fn` where and in what dtype it would put the table, on an empty probe; follow
        # the device, keep float32/float64, never a half-precision dtype.
        probe = fn(torch.empty(0, dtype=table.dtype, device=table.device))
        dtype = probe.dtype if probe.dtype in _CACHE_DTYPES else table.dtype
        if table.device.type == "meta" or probe.device.type == "meta":
            # Rebuilding is exact and also covers `to_empty()` from the meta device.
            self._buffers["inv_freq"] = inv_freq = scaled_inv_freq(self.params, device=probe.device)
            self._buffers["_cos_sin"] = self._build_table(
                table.shape[1] // inv_freq.shape[0], dtype, inv_freq
            )
            return self
        if probe.device != table.device:
            self._buffers["inv_freq"] = self._buffers["inv_freq"].to(probe.device)
            table = table.to(probe.device)
        if dtype != table.dtype:
            inv_freq = self._buffers["inv_freq"]
            table = self._build_table(table.shape[1] // inv_freq.shape[0], dtype, inv_freq)
        self._buffers["_cos_sin"] = table
        return self

    # --- cos/sin for given positions ------------------------------------------------------------

    def _length_dependent(self) -> bool:
        return self.rope_type in ("dynamic", "longrope")

    def _rows(self, positions: list[Tensor], x: Tensor) -> list[tuple[Tensor, Tensor]]:
        """cos/sin for each positions tensor ``(t,)`` / ``(b, t)``, shaped ``(t, r/2)`` / ``(b, 1, t, r/2)``.

        All share ``L = max position + 1`` (dynamic / longrope), so queries and keys of one
        call are rotated by the same frequencies.
        """
        compute = _precise_dtype(x)
        device = x.device
        sets = self.inv_freq.shape[0]
        length = None
        if self._length_dependent():
            # over every non-empty positions tensor: keys may be empty while queries are not
            flat = torch.cat([p.reshape(-1) for p in positions])
            length = flat.max() + 1 if flat.numel() else None

        if self.rope_type == "dynamic":
            # On the fly: the frequencies themselves depend on L (no table to reuse).
            inv_freq = self.inv_freq[0].to(device)
            if length is not None:
                p = self.params
                inv_freq = dynamic_ntk_inv_freq(
                    p.rotary_dim,
                    p.base,
                    p.factor,
                    p.original_max_len,
                    length,
                    dtype=inv_freq.dtype,
                    device=device,
                )
            return [
                self._shape(*rope_cos_sin(pos, inv_freq, self.attention_scaling, dtype=compute))
                for pos in positions
            ]

        select = None
        if self.rope_type == "longrope" and length is not None:
            select = (length > self.params.original_max_len).long()  # 0 short, 1 long factors

        if _is_compiling() or device.type == "meta":
            # no `int(positions.max())`: under compile it is data (a sync), on meta it has no value
            return [self._traced_rows(pos, select, compute, device) for pos in positions]

        need = max((int(p.max()) + 1 if p.numel() else 0) for p in positions)
        table = self._ensure_table(need, compute, device)
        out = []
        for pos in positions:
            index = pos.to(device)
            if select is not None:
                index = index + select * (table.shape[1] // sets)
            rows = table[:, index].to(compute)
            out.append(self._shape(rows[0], rows[1]))
        return out

    def _formula_parts(self, select: Tensor | None, device: torch.device) -> tuple[Tensor, Tensor, bool]:
        """The frequencies (longrope: the set ``select`` picks), the attention factor as a tensor,
        and whether to apply it: the operands of :func:`_cos_sin_from_formula`."""
        inv_freq = self.inv_freq.to(device)
        # longrope: pick the short or long set with a tensor op (no data-dependent indexing)
        inv_freq = (
            torch.where(select.bool(), inv_freq[-1], inv_freq[0]) if select is not None else inv_freq[0]
        )
        # A tensor, not a Python float: dynamo may trace floats as symbols, which torch.cond
        # cannot lift into its branches.
        scale = torch.full((), self.attention_scaling, dtype=inv_freq.dtype, device=device)
        return inv_freq, scale, self.attention_scaling != 1.0

    def _traced_rows(
        self, positions: Tensor, select: Tensor | None, compute: torch.dtype, device: torch.device
    ) -> tuple[Tensor, Tensor]:
        """Explicit positions without reading their maximum (under ``torch.compile`` / export,
        and on the meta device): rows from the table when it covers the positions, else exact
        rows from the formula. ``torch.cond`` makes this one graph with a runtime branch: no
        data-dependent Python branch, no table growth inside the graph."""
        inv_freq, scale, scaled = self._formula_parts(select, device)
        table = self._cos_sin
        rows_per_set = table.shape[1] // self.inv_freq.shape[0]
        offset = (
            select * rows_per_set if select is not None else torch.zeros((), dtype=torch.long, device=device)
        )

        def on_the_fly(pos: Tensor, inv: Tensor, table: Tensor, offset: Tensor, scale: Tensor) -> Tensor:
            return _cos_sin_from_formula(pos, inv, scale, scaled, compute)

        def from_table(pos: Tensor, inv: Tensor, table: Tensor, offset: Tensor, scale: Tensor) -> Tensor:
            return table[:, pos + offset].to(compute)

        operands = (positions, inv_freq, table, offset, scale)
        usable = (
            table.device == device
            and device.type != "meta"  # meta: nothing to compare against the table size
            and (compute != torch.float64 or table.dtype == compute)
        )
        if not usable or positions.numel() == 0 or not hasattr(torch, "cond"):
            rows = on_the_fly(*operands)
        else:
            rows = torch.cond(positions.max() < rows_per_set, from_table, on_the_fly, operands)
        return self._shape(rows[0], rows[1])

    def _contiguous_rows(self, start: int, length: int, x: Tensor) -> tuple[Tensor, Tensor]:
        """cos/sin for positions ``start .. start+length-1``: ``(t, r/2)`` each.

        A slice of the table, except where the formula serves better: in an exported program
        (a slice would add the guard ``start+length <= cached rows``, which export turns into a
        length limit), on the meta device (shapes only), and under ``torch.compile`` past the
        table (which cannot grow inside a graph; the guard costs one recompile, not one per length).
        """
        compute = _precise_dtype(x)
        table = self._cos_sin
        if _is_compiling():
            from_formula = (
                _is_exporting()
                or table.shape[1] < start + length
                or table.device != x.device
                or (compute == torch.float64 and table.dtype != compute)
            )
        else:
            from_formula = x.device.type == "meta"
        if from_formula:
            pos = torch.arange(start, start + length, device=x.device)
            rows = _cos_sin_from_formula(pos, *self._formula_parts(None, x.device), compute)
        else:
            if not _is_compiling():
                table = self._ensure_table(start + length, compute, x.device)
            rows = table[:, start : start + length].to(compute)
        return rows[0], rows[1]

    @staticmethod
    def _shape(cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
        # (b, t, r/2) -> (b, 1, t, r/2): broadcast over heads
        if cos.dim() == 3:
            cos, sin = cos[:, None], sin[:, None]
        return cos, sin

    # --- the hooks --------------------------------------------------------------------------------

    def encode_qk(
        self,
        q: Tensor,
        k: Tensor,
        q_positions: Tensor | None = None,
        k_positions: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Rotate queries and keys by their positions.

        Args:
            q: ``(b, h, tq, dh)`` queries.
            k: ``(b, h_kv, tk, dh)`` keys; ``h_kv`` may divide ``h`` (grouped-query attention).
            q_positions, k_positions: ``(t,)`` or ``(b, t)`` integer positions; by default keys
                sit at ``0..tk-1`` and queries are the last ``tq`` of them (KV-cache decoding).

        Returns:
            ``(q, k)`` rotated, same shapes and dtypes.
        """
        check_qk(q, k, head_dim=self.head_dim)
        tq, tk = q.shape[-2], k.shape[-2]
        if q_positions is None and k_positions is None and not self._length_dependent():
            q_start = max(tk - tq, 0)
            q_cos, q_sin = self._contiguous_rows(q_start, tq, q)
            k_cos, k_sin = self._contiguous_rows(0, tk, k)
        else:
            q_positions, k_positions = resolve_qk_positions(q, k, q_positions, k_positions)
            (q_cos, q_sin), (k_cos, k_sin) = self._rows([q_positions, k_positions], q)
        return apply_rotary(q, q_cos, q_sin, self.layout), apply_rotary(k, k_cos, k_sin, self.layout)

    def forward(
        self,
        q: Tensor,
        k: Tensor,
        q_positions: Tensor | None = None,
        k_positions: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """The drop-in call: ``q, k = rope(q, k)``; the same as :meth:`encode_qk`."""
        return self.encode_qk(q, k, q_positions, k_positions)

    def rotate(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """Rotate one tensor (queries or keys) by its positions.

        For ``"dynamic"`` and ``"longrope"`` the length ``L`` is ``max(positions) + 1`` of this
        tensor alone; rotate queries and keys together with :meth:`encode_qk` when their
        positions differ.

        Args:
            x: ``(b, h, t, dh)``.
            positions: ``(t,)`` or ``(b, t)`` integer positions; ``None`` means ``0..t-1``.

        Returns:
            ``(b, h, t, dh)`` rotated, same dtype.
        """
        check_float_tensor("x", x, rank=4, shape="(batch, heads, seq, head_dim)")
        if x.shape[-1] != self.head_dim:
            raise ValueError(f"x has head_dim {x.shape[-1]}, expected head_dim={self.head_dim}")
        if positions is None and not self._length_dependent():
            cos, sin = self._contiguous_rows(0, x.shape[-2], x)
        else:
            positions = resolve_positions(positions, x.shape[-2], batch=x.shape[0], device=x.device)
            ((cos, sin),) = self._rows([positions], x)
        return apply_rotary(x, cos, sin, self.layout)
