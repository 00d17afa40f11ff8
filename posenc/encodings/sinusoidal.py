"""Fixed sin/cos encodings: 1D (Vaswani et al., 2017) here; 2D for image patch grids (MAE) and 3D
for video patch grids (CogVideoX / diffusers) in :mod:`posenc.encodings.sinusoidal2d`.

Both keep their table as a non-persistent buffer computed in float64 and stored in float32
(float64 after ``.double()``). ``.to(torch.bfloat16)`` / ``.half()`` move the table but do not
downcast it: a bfloat16 table has random phases past a few thousand positions. Outputs are
cast to the input's dtype once, at the end.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from .._checks import check_choice, check_int, check_positive_float
from .._compat import can_sync, check_values, is_compiling, is_exporting, wide_dtype
from .._positions import check_input, resolve_positions
from ..functional.sinusoidal import sinusoidal_table
from ._table_cache import TABLE_LOCK, _TableCache

__all__ = ["Sinusoidal"]


#: Rows of the 1D table built at construction when ``max_len`` is not given.
DEFAULT_INITIAL_LEN = 512
#: The most rows the 1D table ever holds (16384 rows of width 1024: 64 MiB). Positions past it
#: are computed from the formula per call, so memory is bounded by what the call needs.
MAX_TABLE_LEN = 16384


class Sinusoidal(_TableCache):
    """The fixed sin/cos position encoding of "Attention Is All You Need" (Vaswani et al., 2017).

    ``PE[p, 2i] = sin(p·omega_i)``, ``PE[p, 2i+1] = cos(p·omega_i)`` with
    ``omega_i = base^(-2i/d_model)``, added to the token embeddings. The table is built in
    float64, cached in float32 and grows on demand: ``max_len`` is only its initial size.

    Variants (for parity with existing checkpoints):

    * ``layout="concat"``: ``[sin | cos]`` instead of interleaved (tensor2tensor, Marian, MAE);
    * ``freq_spacing="tensor2tensor"``: ``omega_i = base^(-i/(d_model/2 - 1))``
      (tensor2tensor's ``get_timing_signal_1d``, fairseq, Speech2Text, M2M100);
    * ``offset``: added to every position (fairseq-style models start at ``padding_idx + 1``).

    Args:
        d_model: the embedding width, even.
        base: the wavelength scale, finite and > 0.
        layout: ``"interleaved"`` (the paper) or ``"concat"``.
        max_len: rows built at construction (default :data:`DEFAULT_INITIAL_LEN`); longer
            sequences grow the table.
        offset: added to every position before the look-up, >= 0.
        freq_spacing: ``"paper"`` or ``"tensor2tensor"``.
        device: where the table is built.

    Shape:
        ``forward(x, positions)``: ``x`` is ``(b, t, d)``, ``positions`` ``(t,)`` or ``(b, t)``
        (default ``0..t-1``); returns ``(b, t, d)`` in ``x.dtype``.

    Caching: default positions read a slice of the table. Explicit positions are gathered;
    in eager mode the largest one is read (one device sync) to grow the table when needed
    (to the next power of two, never past :data:`MAX_TABLE_LEN` rows; a few positions far past
    the table, and any past that bound, are computed instead: memory follows the call).
    Under ``torch.compile`` the table cannot grow (a graph does not reassign buffers), so
    lengths past it, explicit positions and exported programs compute the encodings from
    the formula inside the graph (float64, cast once): the same values, no size limit.

    Example::

        pe = Sinusoidal(512)
        x = pe(token_embeddings)                      # x + PE[0..t-1]
        x = pe(x, positions=mask_to_positions(mask))  # left padding: look up by position
    """

    kind = "additive"

    def __init__(
        self,
        d_model: int,
        base: float = 10000.0,
        layout: Literal["interleaved", "concat"] = "interleaved",
        max_len: int | None = None,
        offset: int = 0,
        freq_spacing: Literal["paper", "tensor2tensor"] = "paper",
        *,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        check_int("d_model", d_model, minimum=2)
        if d_model % 2:
            raise ValueError(f"d_model must be even (sin/cos come in pairs), got {d_model}")
        check_choice("layout", layout, ("interleaved", "concat"))
        check_choice("freq_spacing", freq_spacing, ("paper", "tensor2tensor"))
        if freq_spacing == "tensor2tensor" and d_model < 4:
            raise ValueError(f"freq_spacing='tensor2tensor' needs d_model >= 4, got d_model={d_model}")
        if max_len is not None:
            check_int("max_len", max_len, minimum=1)
        self.d_model = d_model
        self.base = check_positive_float("base", base)
        self.layout = layout
        self.max_len = max_len
        self.offset = check_int("offset", offset, minimum=0)
        self.freq_spacing = freq_spacing
        self._initial_rows = min(
            (max_len if max_len is not None else DEFAULT_INITIAL_LEN) + offset, MAX_TABLE_LEN
        )
        device = torch.device(device) if device is not None else torch.get_default_device()
        self.register_buffer(
            "_table", self._build_table(torch.float32, device, self._initial_rows), persistent=False
        )

    def _build_table(self, dtype: torch.dtype, device: torch.device, rows: int | None = None) -> Tensor:
        rows = rows if rows is not None else max(self._initial_rows, self._table.shape[0])
        positions = torch.arange(rows, dtype=torch.float64, device=device)
        return self._compute(positions, dtype)

    def _compute(self, rows: Tensor, dtype: torch.dtype) -> Tensor:
        """Encodings of table rows (positions already offset), built in float64, cast once."""
        wide = wide_dtype(rows.device)
        return sinusoidal_table(rows, self.d_model, self.base, self.layout, self.freq_spacing, dtype=wide).to(
            dtype
        )

    def _grow(self, rows: int) -> Tensor | None:
        """Eager only: the table grown to at least ``rows`` rows (the next power of two, at most
        :data:`MAX_TABLE_LEN`); ``None`` when ``rows`` is past that bound (compute instead).

        Under a lock and never smaller than it is: threads sharing the module grow it while
        others read it, and a thread that grew it to 2048 rows must not replace another's 4096.
        Callers slice the table this returns, not ``self._table`` again.
        """
        if rows > MAX_TABLE_LEN:
            return None
        with TABLE_LOCK:
            table = self._table
            if table.shape[0] < rows:
                new_rows = min(1 << max(rows - 1, 1).bit_length(), MAX_TABLE_LEN)
                table = self._table = self._build_table(table.dtype, table.device, new_rows)
        return table

    def table(self, positions: Tensor | int, *, dtype: torch.dtype | None = None) -> Tensor:
        """The encodings of ``positions`` (what :meth:`encode_input` adds), in float32 or better.

        Args:
            positions: an int ``n`` (positions ``0..n-1``) or an integer tensor of any shape
                ``(...)``; ``offset`` is added.
            dtype: ``torch.float32`` (default: the table's dtype) or ``torch.float64``.

        Returns:
            ``(..., d)`` tensor (``(n, d)`` for an int).
        """
        if isinstance(positions, int) and not isinstance(positions, bool):
            check_int("positions", positions, minimum=0)
            positions = torch.arange(positions, device=self._table.device)
        elif (
            not isinstance(positions, Tensor)
            or positions.is_floating_point()
            or positions.dtype == torch.bool
        ):
            raise TypeError(f"positions must be an int or an integer tensor, got {positions!r}")
        check_values(
            positions >= 0,
            "positions must be non-negative",
            lambda: f"positions must be non-negative, got minimum {int(positions.min())}",
        )
        dtype = dtype or self._table.dtype
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        return self._lookup(positions.to(self._table.device), dtype)

    def _lookup(self, positions: Tensor, dtype: torch.dtype) -> Tensor:
        """Encodings of explicit ``positions`` (any shape) in ``dtype`` (float32/float64)."""
        rows = positions + self.offset
        if dtype != self._table.dtype or not can_sync(rows):
            # float64 encodings for float64 inputs come from the formula (the cache is float32);
            # on an accelerator or under compile the largest position is data, and reading it
            # would need a host sync; on the meta device it has no value at all (shape propagation).
            return self._compute(rows, dtype)
        needed = int(rows.max()) + 1 if rows.numel() else 0
        table = self._table  # read once: other threads may replace the attribute meanwhile
        if needed > table.shape[0]:
            grown = self._grow(needed) if needed <= 2 * max(table.shape[0], rows.numel()) else None
            if grown is None:
                # A few far positions (say one decoding step at 10**7), or any past the bound:
                # computing them costs what the call needs, while a table up to there could
                # take gigabytes and would be kept.
                return self._compute(rows, dtype)
            table = grown
        return table[rows]

    def _prefix(self, length: int, dtype: torch.dtype) -> Tensor:
        """Encodings of positions ``0..length-1``: a slice of the table, ``(length, d)``."""
        rows = length + self.offset
        table = self._table  # read once: other threads may replace the attribute meanwhile
        usable = dtype == table.dtype and not is_exporting()
        if usable and rows > table.shape[0]:
            # Under compile ``length`` is a shape, so this test is a guard, not a sync.
            grown = None if is_compiling() else self._grow(rows)
            usable, table = grown is not None, table if grown is None else grown
        if not usable:
            # An exported program computes, so that it serves every length.
            return self._compute(torch.arange(self.offset, rows, device=table.device), dtype)
        return table[self.offset : rows]

    def encode_input(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """Add the sin/cos encodings of ``positions`` to ``x``.

        Args:
            x: ``(b, t, d)`` embeddings, any floating dtype.
            positions: ``(t,)`` or ``(b, t)`` non-negative integers; ``None`` means ``0..t-1``.

        Returns:
            ``x + PE[positions + offset]``, ``(b, t, d)`` in ``x.dtype``.
        """
        check_input(x, width=self.d_model)
        wide = torch.float64 if x.dtype == torch.float64 else self._table.dtype
        if positions is None:
            pe = self._prefix(x.shape[1], wide)
        else:
            positions = resolve_positions(positions, x.shape[1], batch=x.shape[0])
            pe = self._lookup(positions.to(self._table.device), wide)
        # One cast of the (t, d) table, not of the (b, t, d) sum.
        return x + pe.to(x.dtype)

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """Drop-in call: ``x + PE``; see :meth:`encode_input`. ``(b, t, d) -> (b, t, d)``."""
        return self.encode_input(x, positions)

    def extra_repr(self) -> str:
        extra = f"{self.d_model}, base={self.base}, layout={self.layout!r}"
        if self.freq_spacing != "paper":
            extra += f", freq_spacing={self.freq_spacing!r}"
        if self.offset:
            extra += f", offset={self.offset}"
        return extra
