"""The table cache shared by the sin/cos encodings (:mod:`posenc.encodings.sinusoidal`,
:mod:`posenc.encodings.sinusoidal2d`): one non-persistent buffer kept float32/float64."""

from __future__ import annotations

import threading

import torch
from torch import Tensor

from ..base import PositionalEncoding

#: Held while a sin/cos table is replaced in eager mode: threads that share a module grow or
#: switch its table while others read it. One for the process, so that modules still pickle.
TABLE_LOCK = threading.Lock()


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
