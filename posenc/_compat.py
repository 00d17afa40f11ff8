"""What the running torch can do and what it is doing: one leaf module, imported by everything.

Nothing here imports from posenc, so ``functional/`` and the encodings can use it without
import cycles.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch
from torch import Tensor


def is_compiling() -> bool:
    """Whether ``torch.compile`` (dynamo) is tracing the current call."""
    return bool(torch.compiler.is_compiling())


def is_tracing() -> bool:
    """Compile or export: data-dependent Python branches and host syncs are not allowed."""
    return bool(torch.compiler.is_compiling() or torch.compiler.is_exporting())


_ACCELERATOR_PATHS = contextvars.ContextVar("posenc_accelerator_paths", default=False)


def can_sync(t: Tensor | torch.device) -> bool:
    """Whether a forward may read the values of ``t`` (a tensor, or its device) on the host.

    ``.item()``, ``int(t)``, ``bool(t)``, ``.tolist()``, ``nonzero()`` and boolean indexing all
    wait for the device.

    Only for a CPU tensor in eager mode, where reading a value costs no device stall: there the
    checks raise the usual ``ValueError`` with the offending value, and tables are sized from
    the largest position. On an accelerator (or the meta device, or under compile/export, or
    inside :func:`accelerator_paths`) a forward never syncs: checks become
    ``torch._assert_async`` and sizes come from shapes, so a GPU never stalls and a decode step
    can be captured in a CUDA graph.
    """
    device = t if isinstance(t, torch.device) else t.device
    return device.type == "cpu" and not is_tracing() and not _ACCELERATOR_PATHS.get()


@contextlib.contextmanager
def accelerator_paths() -> Iterator[None]:
    """Run CPU tensors through the code an accelerator runs (no host sync), e.g. to count syncs in tests."""
    token = _ACCELERATOR_PATHS.set(True)
    try:
        yield
    finally:
        _ACCELERATOR_PATHS.reset(token)


def check_values(ok: Tensor, message: str, detail: Callable[[], str] | None = None) -> None:
    """Refuse values where ``ok`` (a bool tensor, one entry per value checked) is not all true.

    Where :func:`can_sync` allows it (a CPU tensor, eager), a ``ValueError`` with ``detail()`` (which
    may read the offending values) or ``message``; elsewhere a kernel assert with ``message``, so the
    check costs no host sync. Nothing on the meta device (no values) or for no values.
    """
    if ok.numel() == 0 or ok.device.type == "meta":
        return
    if not can_sync(ok):
        torch._assert_async(ok.all(), message)
    elif not bool(ok.all()):
        raise ValueError(detail() if detail is not None else message)


def precise_dtype(t: Tensor | torch.dtype) -> torch.dtype:
    """The dtype tables and biases are computed in for ``t``: float64 for float64, else float32.

    This is posenc's one precision rule: position tables are never computed or kept in half
    precision (angles at large positions would be wrong), and float64 work stays float64.
    """
    dtype = t if isinstance(t, torch.dtype) else t.dtype
    return torch.float64 if dtype == torch.float64 else torch.float32


def wide_dtype(device: torch.device | str | None) -> torch.dtype:
    """The dtype position tables are *computed* in before being stored: float64 wherever the
    device has it (MPS does not), so that stored float32 values are rounded once."""
    return torch.float32 if torch.device(device or "cpu").type == "mps" else torch.float64


_T = TypeVar("_T")

#: Devices with an autocast mode, which would run a matmul or SDPA in half precision.
_AUTOCAST_DEVICES = ("cpu", "cuda", "xpu", "mps")


def autocast_dtype(device: torch.device, dtype: torch.dtype) -> torch.dtype | None:
    """The dtype an autocast region on ``device`` hands a matmul or SDPA for ``dtype`` (its half precision for
    every float dtype but float64, which autocast leaves alone), or ``None`` outside autocast."""
    if device.type not in _AUTOCAST_DEVICES or not torch.is_autocast_enabled(device.type):
        return None
    return dtype if dtype == torch.float64 else torch.get_autocast_dtype(device.type)


def outside_autocast(op: Callable[..., _T], first: Tensor, *args: Any, **kwargs: Any) -> _T:
    """``op(first, *args, **kwargs)`` on the operands' own dtypes, also inside an autocast region.

    Autocast would run a matmul or SDPA in bfloat16/float16: position terms (a bias, Shaw's relative
    keys) and the float32 masks and scores :func:`posenc.attention` builds are float32 or better whatever
    the inputs, like the caches.
    """
    if autocast_dtype(first.device, first.dtype) is None:  # (entering the context costs ~5 us on the CPU)
        return op(first, *args, **kwargs)
    with torch.autocast(first.device.type, enabled=False):
        return op(first, *args, **kwargs)
