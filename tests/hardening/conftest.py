"""Parametrizes the hardening tests over the registry table in :mod:`entries_table` (the ``device``
fixture, the CPU plus every accelerator torch sees, is in ``tests/conftest.py``)."""

from __future__ import annotations

import pytest
import torch
from entries_table import SUBSETS, entries


@pytest.fixture(autouse=True)
def _seeded_torch():
    """The tensors a test draws from torch's generator are the same on every run (reproducible CI)."""
    torch.manual_seed(0)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for name in SUBSETS:
        if name in metafunc.fixturenames:
            rows = entries(name)
            slow = name == "main_entry"  # variants of another row's code run under -m slow only
            params = [
                pytest.param(e, id=e.id, marks=[pytest.mark.slow] if slow and e.variant else []) for e in rows
            ]
            metafunc.parametrize(name, params)
