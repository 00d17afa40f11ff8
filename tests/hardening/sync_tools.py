"""Tools to prove a forward is ready for a GPU without owning one (used by ``test_gpu_ready.py``).

:class:`SyncCounter` counts the operations that make the host wait for the device; :func:`fake_cuda`
makes tensors that claim to be on ``cuda`` (a CUDA build of torch, no GPU needed), on which device
mixing fails as on a GPU and a host sync raises.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

#: Whether this torch can make (fake) cuda tensors: a CUDA build, with or without a GPU.
CUDA_BUILD = bool(torch.backends.cuda.is_built() and torch.version.cuda)
NO_CUDA_BUILD_REASON = (
    f"torch {torch.__version__} is a CPU build (torch.version.cuda is None): FakeTensorMode cannot make "
    "cuda tensors; install a CUDA build of torch to run these checks (no GPU needed)"
)

#: Operators that read device values on the host. ``.tolist()`` is invisible to a dispatch mode on
#: the CPU (it reads memory directly); the fake-CUDA tests catch it.
SYNC_OPS = frozenset(
    {
        "_local_scalar_dense",  # .item(), int(t), float(t), bool(t)
        "nonzero",
        "masked_select",
        "equal",
        "_unique2",
        "unique_dim",
        "unique_consecutive",
        "is_nonzero",
    }
)


def _is_sync(func: object, args: tuple, kwargs: dict) -> bool:
    name = func.overloadpacket.__name__  # type: ignore[attr-defined]
    if name in SYNC_OPS:
        return True
    if name in ("index", "index_put", "index_put_") and len(args) > 1 and isinstance(args[1], (list, tuple)):
        # boolean indexing: a nonzero() inside the kernel
        return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1])
    # repeat_interleave with a tensor of repeats and no output_size sizes its output from values
    return name == "repeat_interleave" and len(args) == 1 and kwargs.get("output_size") is None


class SyncCounter(TorchDispatchMode):
    """Counts host syncs (:data:`SYNC_OPS`, boolean indexing) and where in posenc they happen.

    With ``shapes=True`` it also records ``(op, output shapes)`` of every operation, so that two
    decode steps can be compared (a CUDA graph replays one fixed sequence of shapes).
    """

    def __init__(self, *, shapes: bool = False) -> None:
        super().__init__()
        self.syncs: list[str] = []
        self.shapes: list[tuple[str, tuple]] | None = [] if shapes else None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        if _is_sync(func, args, kwargs):
            self.syncs.append(f"{func} at {_posenc_frame()}")
        out = func(*args, **kwargs)
        if self.shapes is not None:
            flat = out if isinstance(out, (tuple, list)) else (out,)
            self.shapes.append(
                (str(func), tuple(tuple(t.shape) for t in flat if isinstance(t, torch.Tensor)))
            )
        return out


def _posenc_frame() -> str:
    frames = [f for f in traceback.extract_stack() if "/posenc/" in f.filename.replace("\\", "/")]
    return f"{frames[-1].filename.split('posenc')[-1]}:{frames[-1].lineno}" if frames else "?"


class HostToDevice(TorchDispatchMode):
    """Records every copy of a CPU tensor onto an accelerator made by posenc outside a module's
    construction (``__init__``, ``reset_caches``), and where in posenc it happens.

    On a GPU such a copy (``torch.tensor(list, device=...)``, ``cpu_tensor.to(device)``) waits for
    the stream (torch synchronizes after a blocking copy; ``non_blocking=True`` does not), which ``torch.cuda.set_sync_debug_mode("error")`` reports and a
    CUDA graph cannot capture. A 0-d CPU tensor mixed into an accelerator op is a scalar argument,
    not a copy, and is not recorded. Copies with no posenc frame (the test's own inputs) are not
    recorded.
    """

    def __init__(self) -> None:
        super().__init__()
        self.copies: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__  # type: ignore[attr-defined]
        source = target = None
        blocking = not (kwargs.get("non_blocking") or (name == "copy_" and len(args) > 2 and args[2]))
        if name == "_to_copy" and isinstance(args[0], torch.Tensor):
            source, target = args[0].device, kwargs.get("device") or args[0].device
        elif name == "copy_" and isinstance(args[1], torch.Tensor):
            source, target = args[1].device, args[0].device
        if not blocking:  # (queued on the stream: torch waits for it only in a blocking copy)
            source = None
        if (
            source is not None
            and torch.device(source).type == "cpu"
            and torch.device(target).type != "cpu"
            and _posenc_frame() != "?"
        ):
            frames = [f for f in traceback.extract_stack() if "/posenc/" in f.filename.replace("\\", "/")]
            if not any(f.name in ("__init__", "reset_caches") for f in frames):  # building a module
                self.copies.append(f"{func} at {_posenc_frame()}")
        return func(*args, **kwargs)


@contextlib.contextmanager
def fake_cuda() -> Iterator[torch.device]:
    """A ``FakeTensorMode`` in which modules and tensors made on ``cuda`` claim to be on a GPU.

    Build modules inside it (their parameters and caches are then fake) and move them with
    ``.to(device)``. A host sync raises ``DataDependentOutputException``; mixing devices raises.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=False):
        yield torch.device("cuda")
