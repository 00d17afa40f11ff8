"""Rotary position embedding (RoPE, Su et al., 2021) with the Hugging Face scaling variants.

The module (:class:`RoPE`) holds the settings and one bounded cos/sin table; its state
(:class:`RotaryState`) holds the cos/sin rows of one forward pass, as gpt-fast's
``freqs_cis[input_pos]``. The math is in :mod:`posenc.functional.rotary` (cos/sin, the rotation)
and :mod:`posenc.functional.rope_freqs` (the frequencies of each rope type, read from a Hugging Face
dict by :mod:`posenc.functional.rope_scaling`).

Once per forward, :meth:`RoPE.prepare` returns a :class:`RotaryState` with the cos/sin rows of the
queries' positions (the keys' are computed when first used); every layer then rotates with
``state.encode_qk(q, k)``. The rows come from the cos/sin table (``cached_len`` rows, computed in
float64 and stored in float32) when the call is eager and every position is inside it: a slice
for default consecutive positions, one gather for explicit ones. Everywhere else — positions
past the table, ``torch.compile``/``torch.export``, float64 inputs, another device than the
table's, dynamic NTK past its trained length — they are computed from the positions with float64
angles: the same values, exact to one float32 rounding at any position, and no table ever grows.

The state and the hooks that apply it are the rotary family's (:mod:`posenc.encodings.rotary`).

Shape key: ``b`` batch, ``h`` heads, ``tq`` queries, ``tk`` keys, ``dh`` head width, ``r/2``
rotated pairs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, cast

import torch
from torch import Tensor

from .._checks import check_bool, check_choice, check_rotary_channels
from .._compat import precise_dtype
from ..functional.rope_freqs import DynamicRope, LongRope, RopeParameters
from ..functional.rope_scaling import resolve_rope_scaling
from ..functional.rotary import eager_rows, rope_cos_sin
from .rotary import RotaryState, _Rotary

__all__ = ["RoPE"]


#: Table rows when neither ``max_len`` nor the scaling dict gives a context length.
DEFAULT_TABLE_LEN = 4096
#: The most rows a table holds, whatever ``max_len`` says (16384 rows of a 128-wide head: 16 MiB).
#: Positions past the table are computed from the formula, exactly.
MAX_TABLE_LEN = 16384


class RoPE(_Rotary):
    """Rotary position embedding: queries and keys rotated by position-dependent angles.

    Su et al., 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding". Channel
    pair ``i`` of the token at position ``m`` is rotated by the angle ``m * inv_freq[i]`` with
    ``inv_freq[i] = base ** (-2i / r)``, so that ``q_m · k_n`` depends only on ``m − n``.

    * ``layout="half"`` pairs channel ``i`` with ``i + r/2`` (GPT-NeoX, Hugging Face Llama's
      ``rotate_half``); ``"interleaved"`` pairs ``2i`` with ``2i + 1`` (GPT-J, RoFormer,
      Meta Llama's complex multiply, rotary-embedding-torch).
    * ``rotary_dim``: only the first ``r`` channels rotate (GPT-NeoX ``rotary_pct``, GPT-J
      ``rotary_dim``); the rest pass through. The layout applies within those ``r`` channels.
      ``rotary_offset`` moves them: channels ``rotary_offset .. rotary_offset + r - 1`` rotate
      (``head_dim - r``: the trailing slice of DeepSeek V4's ``[nope | rope]`` heads).
    * ``conjugate=True`` rotates by minus the angles, ``m * -inv_freq[i]`` (NanoChat, whose
      ``rotate_half`` flips the signs): scores then depend on ``n − m`` instead of ``m − n``.
    * ``scaling``: a Hugging Face ``rope_scaling`` / ``rope_parameters`` dict, passed through
      as found in a model config: ``rope_type`` (or legacy ``type``) ``"default"``,
      ``"linear"``, ``"dynamic"``, ``"yarn"``, ``"llama3"`` or ``"longrope"`` with their keys
      (see :func:`posenc.functional.rope_scaling.resolve_rope_scaling`). A ``rope_theta`` inside
      the dict is the base; a ``partial_rotary_factor`` gives ``rotary_dim``. YaRN's and
      LongRoPE's attention factor is multiplied into cos and sin, exactly as transformers
      does, and exposed as :attr:`attention_scaling`.

    Length-dependent variants are functions of a length ``L``: by default one past the
    largest query or key position of the call, or the ``seq_len`` given to :meth:`prepare`.
    ``"dynamic"`` uses the NTK base for ``max(L, max_len)``; ``"longrope"`` the long factors
    when ``L > original_max_position_embeddings``, else the short ones (as transformers does
    per call). Transformers' dynamic module is stateful instead: it keeps the frequencies of
    the longest sequence seen until one shorter than ``max_position_embeddings`` resets them,
    so it equals this module on a fresh transformers module, or whenever lengths do not shrink
    above ``max_len``.

    Args:
        head_dim: the attention head width ``dh`` (even).
        base: the wavelength base (``rope_theta``); ``None`` means the dict's ``rope_theta``,
            else 10000.0 (the paper's; Llama 3 uses 500000). A base that differs from the
            dict's ``rope_theta`` is an error.
        layout: ``"half"`` or ``"interleaved"``.
        rotary_dim: the number of rotated channels ``r`` (even, ``<= head_dim``); default all.
        rotary_offset: the first rotated channel, from 0 (the default: the head's first ``r``) to
            ``head_dim - r`` (its last ``r``); rotary-embedding-torch's ``start_index``.
        conjugate: rotate by minus the angles (sin negated on every path).
        scaling: the Hugging Face scaling dict, or ``None`` for plain RoPE.
        max_len: the model's context length (transformers' ``max_position_embeddings``): the
            trained length for ``"dynamic"``, and for yarn/llama3/longrope when the dict has
            no ``original_max_position_embeddings``; also the table's rows (at most
            :data:`MAX_TABLE_LEN`). Not a limit: longer sequences work.
        device: where the caches are built.

    Shape:
        ``forward(q, k)``: ``q`` ``(b, h, tq, dh)``, ``k`` ``(b, h_kv, tk, dh)`` with ``h_kv``
        dividing ``h`` (grouped-query attention) -> the rotated ``(q, k)``, same shapes and dtypes.

    Attributes:
        params: the validated :class:`~posenc.functional.rope_freqs.RopeParameters` (one
            dataclass per rope type).
        rope_type, rotary_dim, base, attention_scaling: read from ``params``.
        inv_freq: ``(s, r/2)`` frequencies (longrope: short and long), a float32 cache.
        table_builds: how many times the cos/sin table was built (at construction, and after
            ``to_empty()``, ``.double()`` or :meth:`reset_caches`; never during a call).

    Example::

        rope = RoPE(64, base=500000.0, scaling={"rope_type": "llama3", "factor": 8.0,
                    "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 8192})
        q, k = rope(q, k)                           # (b, h, t, 64) each
        state = rope.prepare(t)                     # or: once per forward ...
        q, k = state.encode_qk(q, k)                # ... and in every layer
    """

    cache_names = ("inv_freq", "_inv_freq64", "_cos_sin")
    has_table = True
    _cos_sin: Tensor

    def __init__(
        self,
        head_dim: int,
        base: float | None = None,
        layout: Literal["half", "interleaved"] = "half",
        rotary_dim: int | None = None,
        scaling: dict[str, Any] | None = None,
        max_len: int | None = None,
        *,
        rotary_offset: int = 0,
        conjugate: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        check_choice("layout", layout, ("half", "interleaved"))
        self.params: RopeParameters = resolve_rope_scaling(
            scaling, head_dim=head_dim, rotary_dim=rotary_dim, base=base, max_len=max_len
        )
        check_rotary_channels(head_dim, self.rotary_dim, rotary_offset)
        self.rotary_offset = rotary_offset
        self.conjugate = check_bool("conjugate", conjugate)
        self.head_dim, self.layout = head_dim, layout
        self.scaling = dict(scaling) if scaling is not None else None
        self.max_len = max_len
        self.axis = None
        self.by_role = bool(self.params.query_scale_beta)  # queries scaled, keys not (:meth:`_scale`)
        self.table_builds = 0
        #: dtype -> (the table, its copy rounded to that dtype): the rows of half-precision inputs (:meth:`_table`)
        self._rounded: dict[torch.dtype, tuple[Tensor, Tensor]] = {}
        trained = getattr(self.params, "original_max_len", None)
        self._table_len = min(max_len or trained or DEFAULT_TABLE_LEN, MAX_TABLE_LEN)
        sets, pairs = (2 if isinstance(self.params, LongRope) else 1), self.rotary_dim // 2
        table = torch.empty(2, sets * self._table_len, 2 * pairs, dtype=torch.float32, device=device)
        self.register_buffer("_cos_sin", table, persistent=False)
        self._init_caches((sets, pairs), device)

    # --- read-only views of the configuration -------------------------------------------------

    @property
    def cached_len(self) -> int:
        """How many positions the cos/sin table covers (fixed at construction)."""
        return self._table_len

    def extra_repr(self) -> str:
        beta = self.params.query_scale_beta
        optional = {  # each shown where it is not the default
            f"rotary_dim={self.rotary_dim}": self.rotary_dim != self.head_dim,
            f"rotary_offset={self.rotary_offset}": self.rotary_offset,
            "conjugate=True": self.conjugate,
            f"rope_type={self.rope_type!r}": self.rope_type != "default",
            f"llama_4_scaling_beta={beta:g}": beta,
            f"max_len={self.max_len}": self.max_len is not None,
        }
        parts = [f"head_dim={self.head_dim}", f"base={self.base}", f"layout={self.layout!r}"]
        return ", ".join(parts + [part for part, shown in optional.items() if shown])

    # --- the cache and the rows ------------------------------------------------------------------

    def reset_caches(self) -> None:
        """Rebuild ``inv_freq`` and the cos/sin table where they are now (e.g. after ``to_empty()``).

        The table is ``(2, s * cached_len, r)``: ``(cos, cos)`` then ``(-sin, sin)`` of ``position *
        inv_freq`` for each frequency set (longrope: rows ``0 .. L-1`` short, ``L .. 2L-1`` long), from
        float64 angles: the half layout's apply-ready form, so that a decode step rotates with a view.
        """
        super().reset_caches()
        table, inv_freq = self._cos_sin, self._inv_freq64[:, None, :]  # float64: exact angles
        positions = torch.arange(self.cached_len, device=table.device)
        cos, sin = rope_cos_sin(positions, inv_freq, self.attention_scaling, dtype=table.dtype)
        sin = -sin if self.conjugate else sin
        self._cos_sin = torch.stack(eager_rows(cos.flatten(0, 1), sin.flatten(0, 1), table.dtype, "half"))
        self.table_builds += 1

    def _table_rows(self, state: RotaryState, side: str, dtype: torch.dtype) -> Tensor | None:
        """The table's rows at the positions of ``side``, ``(2, t, r)`` or ``(2, b, 1, t, r)``, or ``None``.

        From the table when the call is eager (``state.end``, one past the largest position, is known
        without a sync) and every position is inside it: a view for default consecutive positions
        (``start``), else one gather. ``None`` elsewhere, where the rows come from the formula
        (:meth:`_Rotary._rows`): past the table, traced (a tensor ``seq_len`` picks longrope's set
        without a Python branch), dynamic NTK past its trained length, another ``dtype`` or device
        than the table's.
        """
        # the positions as given: default ones are read from their start, never made a tensor
        positions = state._q_positions if side == "q" else state._k_positions
        p, seq_len, end = self.params, state.seq_len, state.end
        # eager (a traced program serves every length: no table, no size guard), every position inside
        # the table, a table for the dtype, on the positions' device
        table = None if end is None or end > self._table_len else self._table(dtype)
        if table is None or table.device != positions.device:
            return None
        offset = 0
        if isinstance(p, (LongRope, DynamicRope)):  # the table's frequencies: up to the trained length ...
            if not isinstance(seq_len, int) or (seq_len > p.original_max_len and isinstance(p, DynamicRope)):
                return None
            offset = self._table_len if seq_len > p.original_max_len else 0  # ... or longrope's long set
        if not isinstance(positions, Tensor):  # default ones, never made a tensor: a view
            return table[:, offset + positions.start : offset + positions.start + positions.shape[0]]
        wide = table[:, positions + offset]  # one gather
        return wide[:, :, None] if wide.dim() == 4 else wide  # (2, b, t, r) -> (2, b, 1, t, r): over heads

    def _table(self, dtype: torch.dtype) -> Tensor | None:
        """The cos/sin table for rows in ``dtype``: the buffer (float32; float64 after ``.double()``), or for
        half-precision inputs its copy rounded once to ``dtype``, made when first needed (a decode step's rows
        are then a view, as in float32, not a cast per step); ``None`` for float64 rows of a float32 table
        (the formula's)."""
        # (the buffer read from _buffers: nn.Module's __getattr__ fallback costs ~2 us of a decode step)
        table = cast(Tensor, self._buffers["_cos_sin"])
        if dtype == table.dtype:
            return table
        if precise_dtype(dtype) != table.dtype:  # float64 rows of a float32 table: the formula's
            return None
        cached = self._rounded.get(dtype)
        if cached is None or cached[0] is not table:  # none yet, or of a table since rebuilt or moved
            self._rounded[dtype] = cached = (table, table.to(dtype))
        return cached[1]

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> Any:
        self._rounded = {}  # (copies of the table as it was before: not kept alive on the old device)
        return super()._apply(fn, recurse)

    def _scale(self, state: RotaryState, side: str, role: str, dtype: torch.dtype) -> Tensor | None:
        """Ministral 3's and Mistral 4's ``1 + beta * log(1 + floor(p / L))`` of the queries, ``(t, 1)`` or
        ``(b, t, 1)`` (:meth:`~posenc.functional.rope_freqs.RopeParameters.query_scale`); the keys' as they are."""
        return None if role == "key" else self.params.query_scale(state._positions(side))[..., None]
