"""A learned table of absolute positions (BERT, GPT-2, OPT), looked up by position ids."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import allocate, check_choice, check_int, is_real, short
from .._compat import check_values
from .._positions import check_input, resolve_positions
from ..base import PositionalEncoding
from ..functional.axial import resample_grid_table

__all__ = ["Learned"]


class Learned(PositionalEncoding):
    """A trained embedding per absolute position, added to the token embeddings.

    The position embeddings of BERT and GPT (Radford et al., 2018; Devlin et al., 2019): row
    ``p + offset`` of ``weight`` is added at position ``p``. The parameter is named ``weight``
    with shape ``(max_len + offset, d_model)``, so GPT-2's ``wpe.weight`` (``offset=0``) and
    OPT's ``embed_positions.weight`` (``offset=2``: OPT keeps two unused leading rows) load
    by name.

    Unlike the fixed encodings, the table has a hard limit: a sequence longer than
    ``max_len``, or a position ``>= max_len``, raises a ValueError naming both numbers.
    Explicit positions are checked in eager mode with a ValueError; under ``torch.compile`` a
    host-side check would need a device sync, so the compiled graph asserts instead (a
    RuntimeError naming the table on the CPU, a device-side assert on CUDA). :meth:`resize` changes ``max_len`` by interpolation, for
    fine-tuning on longer inputs.

    Args:
        d_model: the embedding width, >= 1.
        max_len: the number of positions, >= 1.
        offset: leading rows of the table that no position uses (2 for OPT), >= 0.
        init_std: standard deviation of the normal initialisation (0.02, as GPT-2 and BERT).
        device, dtype: of the parameter.

    Shape:
        ``forward(x, positions)``: ``x`` is ``(b, t, d)``, ``positions`` ``(t,)`` or ``(b, t)``
        (default ``0..t-1``); returns ``(b, t, d)`` in ``x.dtype``.
    """

    kind = "additive"
    repr_names = ("d_model", "/", "max_len", "offset")
    repr_optional = ("offset",)

    def __init__(
        self,
        d_model: int,
        max_len: int,
        offset: int = 0,
        init_std: float = 0.02,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.max_len = check_int("max_len", max_len, minimum=1)
        self.offset = check_int("offset", offset, minimum=0)
        if not is_real(init_std):
            raise TypeError(f"init_std must be a float, got {init_std!r} ({type(init_std).__name__})")
        if not (0 <= init_std < float("inf")):
            raise ValueError(f"init_std must be finite and >= 0, got {init_std}")
        self.init_std = float(init_std)
        size = f"max_len={short(max_len)}, offset={short(offset)}, d_model={d_model}"
        self.weight = nn.Parameter(allocate(size, (max_len + offset, d_model), device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw the table from ``N(0, init_std²)``."""
        nn.init.normal_(self.weight, mean=0.0, std=self.init_std)

    def _rows(self, positions: Tensor | None, length: int) -> Tensor:
        """Rows of ``positions`` (``(...)`` integers), or of ``0..length-1`` when ``None``: ``(..., d)``."""
        if positions is None:
            # ``length`` is a shape: under torch.compile this is a guard, not a sync.
            if length > self.max_len:
                raise ValueError(
                    f"sequence length {length} exceeds max_len={self.max_len} of the learned position table; "
                    "use a shorter input or resize() the table"
                )
            return self.weight[self.offset : self.offset + length]  # a view, no gather

        def detail() -> str:
            largest = int(positions.max())
            return (
                f"position {largest} is beyond the learned position table: it needs {largest + 1} positions, "
                f"max_len={self.max_len} allows 0..{self.max_len - 1}; resize() the table for longer inputs"
            )

        # A position past the table must fail, not read out of bounds (a kernel assert off the CPU).
        message = f"a position is beyond the learned table (max_len={self.max_len})"
        check_values(positions < self.max_len, message, detail)
        return F.embedding(positions.to(self.weight.device) + self.offset, self.weight)

    def table(self, positions: Tensor | int) -> Tensor:
        """The rows added at ``positions``: an int ``n`` (``0..n-1``) or ``(t,)`` / ``(b, t)`` integers.

        Returns:
            ``(n, d)``, ``(t, d)`` or ``(b, t, d)``, in the parameter's dtype, with gradient.
        """
        if isinstance(positions, int) and not isinstance(positions, bool):
            return self._rows(None, check_int("positions", positions, minimum=0))
        if not isinstance(positions, Tensor):
            raise TypeError(f"positions must be an int or an integer tensor, got {type(positions).__name__}")
        return self._rows(resolve_positions(positions, positions.shape[-1] if positions.dim() else 0), 0)

    def encode_input(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """Add the learned rows of ``positions`` to ``x``.

        Args:
            x: ``(b, t, d)`` embeddings.
            positions: ``(t,)`` or ``(b, t)`` integers in ``0..max_len-1``; ``None`` means ``0..t-1``.

        Returns:
            ``x + weight[positions + offset]``, ``(b, t, d)`` in ``x.dtype``.

        Raises:
            ValueError: ``t > max_len``, or (eager) a position ``>= max_len``.
        """
        positions = check_input(x, width=self.d_model, positions=positions)
        return x + self._rows(positions, x.shape[1]).to(x.dtype)

    @torch.no_grad()
    def resize(self, new_max_len: int, mode: Literal["linear", "nearest", "repeat"] = "linear") -> None:
        """Change the number of positions in place, keeping ``weight`` a trainable Parameter.

        * ``"linear"``: the table is stretched over the new length by linear interpolation
          (half-pixel centres, ``align_corners=False``, as timm resamples ViT position tables);
        * ``"nearest"``: each new row copies the old row nearest to it (half-pixel centres);
        * ``"repeat"``: the old table is tiled (Longformer's initialisation for 4096 positions
          from RoBERTa's 512), so positions below the old ``max_len`` keep their rows.

        The ``offset`` rows are kept as they are. ``weight`` becomes a new Parameter: build
        the optimizer after resizing.

        Args:
            new_max_len: the new number of positions, >= 1.
            mode: ``"linear"``, ``"nearest"`` or ``"repeat"``.
        """
        check_int("new_max_len", new_max_len, minimum=1)
        old = self.weight
        what = f"new_max_len={short(new_max_len)} (d_model={self.d_model})"
        new = allocate(what, (new_max_len + self.offset, self.d_model), device=old.device, dtype=old.dtype)
        check_choice("mode", mode, ("linear", "nearest", "repeat"))
        if mode == "repeat":
            rows = torch.arange(new_max_len, device=old.device) % self.max_len + self.offset
            new.copy_(torch.cat((old[: self.offset], old[rows])))
        else:
            # the table as a 1-row image: bilinear is linear along the positions (in float32 or better)
            mode_2d = "bilinear" if mode == "linear" else "nearest-exact"
            grids = (1, self.max_len), (1, new_max_len)
            new.copy_(resample_grid_table(old, *grids, num_prefix_tokens=self.offset, mode=mode_2d))
        self.weight = nn.Parameter(new, requires_grad=old.requires_grad)
        self.max_len = new_max_len
