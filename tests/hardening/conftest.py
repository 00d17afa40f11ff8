"""Parametrizes the hardening tests over the registry table in :mod:`entries_table`."""

from __future__ import annotations

import pytest
from entries_table import SUBSETS, entries


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for name in SUBSETS:
        if name in metafunc.fixturenames:
            rows = entries(name)
            metafunc.parametrize(name, rows, ids=[e.id for e in rows])
