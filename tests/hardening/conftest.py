"""Parametrizes the hardening tests over the registry table in :mod:`entries_table`, and over the
devices of this machine: a test taking ``device`` runs on the CPU, and on ``cuda`` (``mps``)
wherever torch sees one, so ``pytest`` on a GPU machine tests the GPU with no edits."""

from __future__ import annotations

import pytest
import torch
from entries_table import SUBSETS, entries

#: The devices a ``device`` test runs on: the CPU, and every accelerator torch sees here.
DEVICES = ["cpu"] + [
    name
    for name, present in (
        ("cuda", torch.cuda.is_available()),
        ("mps", getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()),
    )
    if present
]


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> torch.device:
    """Each device of this machine in turn (a test's own ``parametrize("device", ...)`` overrides it)."""
    return torch.device(request.param)


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
