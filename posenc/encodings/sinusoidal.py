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

from .._checks import check_int, check_positive_float
from .._compat import can_sync, wide_dtype
from .._positions import check_input, check_non_negative
from ..base import PositionalEncoding
from ..functional.sinusoidal import sinusoidal_table

__all__ = ["Sinusoidal"]


#: Rows of the 1D table built at construction when ``max_len`` is not given.
DEFAULT_INITIAL_LEN = 512
#: The most rows the 1D table holds (16384 rows of width 1024: 64 MiB), whatever ``max_len``.
#: Positions past the table are computed from the formula per call: memory follows the call.
MAX_TABLE_LEN = 16384


class Sinusoidal(PositionalEncoding):
    """The fixed sin/cos position encoding of "Attention Is All You Need" (Vaswani et al., 2017).

    ``PE[p, 2i] = sin(p·omega_i)``, ``PE[p, 2i+1] = cos(p·omega_i)`` with
    ``omega_i = base^(-2i/d_model)``, added to the token embeddings. The table is built in
    float64 and cached in float32 for ``max_len`` positions; longer sequences work (computed).

    Variants (for parity with existing checkpoints):

    * ``layout="concat"``: ``[sin | cos]`` instead of interleaved (tensor2tensor, Marian, MAE);
      ``layout="concat_cos"``: ``[cos | sin]`` (MusicGen);
    * ``freq_spacing="tensor2tensor"``: ``omega_i = base^(-i/(d_model/2 - 1))``
      (tensor2tensor's ``get_timing_signal_1d``, fairseq, Speech2Text, M2M100);
    * ``offset``: added to every position (fairseq-style models start at ``padding_idx + 1``);
    * ``scale``: multiplies the table (NeMo's and Canary's ``1/sqrt(d_model)``).

    Args:
        d_model: the embedding width, even.
        base: the wavelength scale, finite and > 0.
        layout: ``"interleaved"`` (the paper), ``"concat"`` or ``"concat_cos"``.
        max_len: positions cached at construction (default :data:`DEFAULT_INITIAL_LEN`, at
            most :data:`MAX_TABLE_LEN`); not a limit: positions past it are computed.
        offset: added to every position before the look-up, >= 0.
        freq_spacing: ``"paper"`` or ``"tensor2tensor"``.
        scale: the table's amplitude, finite and > 0 (1: the paper's).
        device: where the table is built.

    Shape:
        ``forward(x, positions)``: ``x`` is ``(b, t, d)``, ``positions`` ``(t,)`` or ``(b, t)``
        (default ``0..t-1``); returns ``(b, t, d)`` in ``x.dtype``.

    Caching: default positions within the table read a slice of it; on the CPU in eager mode,
    explicit positions within it are gathered (their largest is read, which costs no sync
    there). Everything else (longer sequences, positions past the table, explicit positions on
    an accelerator or under ``torch.compile``, exported programs, float64 inputs) is computed
    from the formula (float64, cast once): the same values, no size limit, no host sync, and
    the table is never replaced (threads share it safely).

    Example::

        pe = Sinusoidal(512)
        x = pe(token_embeddings)                      # x + PE[0..t-1]
        x = pe(x, positions=mask_to_positions(mask))  # left padding: look up by position
    """

    kind = "additive"
    cache_names = ("_table",)
    repr_optional = ("freq_spacing", "offset", "scale")
    repr_names = ("d_model", "/", "base", "layout", *repr_optional)
    _table: Tensor

    def __init__(
        self,
        d_model: int,
        base: float = 10000.0,
        layout: Literal["interleaved", "concat", "concat_cos"] = "interleaved",
        max_len: int | None = None,
        offset: int = 0,
        freq_spacing: Literal["paper", "tensor2tensor"] = "paper",
        scale: float = 1.0,
        *,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, minimum=2)
        if d_model % 2:
            raise ValueError(f"d_model must be even (sin/cos come in pairs), got {d_model}")
        # layout and freq_spacing: checked (same messages) by sinusoidal_table, which builds the table below
        if freq_spacing == "tensor2tensor" and d_model < 4:
            raise ValueError(f"freq_spacing='tensor2tensor' needs d_model >= 4, got d_model={d_model}")
        self.max_len = max_len if max_len is None else check_int("max_len", max_len, minimum=1)
        self.base = check_positive_float("base", base)
        self.layout = layout
        self.offset = check_int("offset", offset, minimum=0)
        self.freq_spacing = freq_spacing
        self.scale = check_positive_float("scale", scale)
        rows = min((max_len if max_len is not None else DEFAULT_INITIAL_LEN) + offset, MAX_TABLE_LEN)
        table = self._compute(torch.arange(rows, device=device), torch.float32)  # None: the default device
        self.register_buffer("_table", table, persistent=False)

    def _compute(self, rows: Tensor, dtype: torch.dtype) -> Tensor:
        """Encodings of table rows (positions already offset), built in float64, cast once."""
        wide = wide_dtype(rows.device)
        table = sinusoidal_table(rows, self.d_model, self.base, self.layout, self.freq_spacing, dtype=wide)
        return (table if self.scale == 1.0 else table * self.scale).to(dtype)

    def reset_caches(self) -> None:
        """Rebuild the table (on its current device and in its dtype), e.g. after ``to_empty()``."""
        table = self._table
        self._table = self._compute(torch.arange(table.shape[0], device=table.device), table.dtype)

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
            positions = torch.arange(check_int("positions", positions, minimum=0), device=self._table.device)
        elif (
            not isinstance(positions, Tensor)
            or positions.is_floating_point()
            or positions.dtype == torch.bool
        ):
            raise TypeError(f"positions must be an int or an integer tensor, got {positions!r}")
        check_non_negative("positions", positions)
        dtype = dtype or self._table.dtype
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        return self._encodings(positions, 0, dtype)

    def _encodings(self, positions: Tensor | None, length: int, dtype: torch.dtype) -> Tensor:
        """Encodings of ``positions`` (any shape ``(...)``; ``None``: ``0..length-1``), ``(..., d)`` in
        ``dtype``: rows of the table where it holds them, else computed from the formula."""
        table = self._table
        if positions is None:
            rows, needed = None, self.offset + length
            # An exported program computes, so that it serves every length; under compile ``needed``
            # is a shape, so the test below is a guard, not a sync.
            readable = not torch.compiler.is_exporting()
        else:
            rows = positions.to(table.device) + self.offset
            # on an accelerator or under compile the largest position is data: reading it would need
            # a host sync; on the meta device it has no value at all (shape propagation)
            readable = can_sync(rows)
            needed = int(rows.max()) + 1 if readable and rows.numel() else 0
        # float64 encodings for float64 inputs come from the formula (the cache is float32)
        if readable and dtype == table.dtype and needed <= table.shape[0]:
            return table[self.offset : needed] if rows is None else table[rows]
        if rows is None:
            rows = torch.arange(self.offset, needed, device=table.device)
        return self._compute(rows, dtype)

    def encode_input(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """Add the sin/cos encodings of ``positions`` to ``x``.

        Args:
            x: ``(b, t, d)`` embeddings, any floating dtype.
            positions: ``(t,)`` or ``(b, t)`` non-negative integers; ``None`` means ``0..t-1``.

        Returns:
            ``x + PE[positions + offset]``, ``(b, t, d)`` in ``x.dtype``.
        """
        positions = check_input(x, width=self.d_model, positions=positions)
        wide = torch.float64 if x.dtype == torch.float64 else self._table.dtype
        # One cast of the (t, d) table, not of the (b, t, d) sum.
        return x + self._encodings(positions, x.shape[1], wide).to(x.dtype)
