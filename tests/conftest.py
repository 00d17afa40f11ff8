"""The ``device`` fixture of every test directory: the CPU, plus ``cuda`` (and ``mps``) wherever
torch sees one, so ``pytest`` on a GPU machine tests the GPU with no edits.

On a machine with only the CPU the fixture is not parametrized: test ids and counts are the same
as without it (``test_x``, not ``test_x[cpu]``). A test's own ``parametrize("device", ...)``
overrides it.
"""

from __future__ import annotations

import os

import pytest
import torch


def _share_the_cores_between_workers() -> None:
    """Under pytest-xdist (``pytest -n auto``), torch's intra-op threads of each worker, and of the
    processes its tests start, are the worker's share of the cores: with torch's default (every core
    per worker) the workers' threads outnumber the cores and wait on each other (measured on 2 cores,
    2 workers: tests/hf/test_absolute.py's survey used 31-34 s of CPU with 2 threads, 18-20 s with 1).
    Results do not depend on the thread count; an ``OMP_NUM_THREADS`` set by the user wins."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers < 2 or "OMP_NUM_THREADS" in os.environ:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = max(1, cores // workers)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # the subprocesses' torch (memory, CLI, README tests)
    torch.set_num_threads(threads)


_share_the_cores_between_workers()
# oneMKL picks each math function's kernel on its first call, and a first call run on several threads at once can
# give one thread's share from a low-accuracy kernel (pytorch#188792: float32 cos 1.5e-4 off, in 9 of 24 fresh
# processes on a 2-core Xeon). The references tests compare with compute in float32: one call on one
# element, per function and dtype, settles the choice before any test runs.
for _dtype in (torch.float32, torch.float64):
    for _op in (torch.cos, torch.sin, torch.exp, torch.log, torch.log1p, torch.sqrt, torch.rsqrt, torch.tanh):
        _op(torch.ones(1, dtype=_dtype))
# Tests compile the same methods (RoPE.encode_qk, ...) for many differently configured modules on purpose,
# each one a recompile of the same code object: with dynamo's default limit (8) a fullgraph test would fail
# or pass depending on which tests ran before it in the same process.
torch._dynamo.config.recompile_limit = 64

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
