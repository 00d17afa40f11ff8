"""The ``device`` fixture of every test directory: the CPU, plus ``cuda`` (and ``mps``) wherever
torch sees one, so ``pytest`` on a GPU machine tests the GPU with no edits.

On a machine with only the CPU the fixture is not parametrized: test ids and counts are the same
as without it (``test_x``, not ``test_x[cpu]``). A test's own ``parametrize("device", ...)``
overrides it.
"""

from __future__ import annotations

import pytest
import torch

#: The devices a ``device`` test runs on: the CPU, and every accelerator torch sees here.
DEVICES = ["cpu"] + [
    name
    for name, present in (
        ("cuda", torch.cuda.is_available()),
        ("mps", getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()),
    )
    if present
]


@pytest.fixture(params=DEVICES if len(DEVICES) > 1 else None)
def device(request: pytest.FixtureRequest) -> torch.device:
    """Each device of this machine in turn (only ``cpu``, unparametrized, without an accelerator)."""
    return torch.device(getattr(request, "param", "cpu"))


@pytest.fixture
def one_thread():
    """torch on one thread for the test (modules of tiny tensors use it through their ``pytestmark``)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
