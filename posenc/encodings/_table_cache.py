"""The table cache shared by the sin/cos encodings (:mod:`posenc.encodings.sinusoidal`,
:mod:`posenc.encodings.sinusoidal2d`): one non-persistent buffer kept float32/float64."""

from __future__ import annotations

import torch
from torch import Tensor

from ..base import PositionalEncoding


class _TableCache(PositionalEncoding):
    """Base of the sin/cos encodings: keeps the buffer ``_table`` float32/float64 through
    ``.to()``, ``.half()`` and ``to_empty()``.

    Subclasses implement :meth:`_build_table` (float64 math, returned in the given dtype).
    """

    _table: Tensor
    cache_names = ("_table",)

    def _build_table(self, dtype: torch.dtype, device: torch.device) -> Tensor:  # pragma: no cover
        raise NotImplementedError

    def reset_caches(self) -> None:
        """Rebuild the table (on its current device), e.g. after ``to_empty()``."""
        self._table = self._build_table(self._table.dtype, self._table.device)
