"""Data-parallel studies: every global batch split across processes, the numbers of one process.

The study runs data-parallel in two ways:

* under ``torchrun`` (``WORLD_SIZE``/``RANK`` in the environment): :func:`joined` starts the
  process group (gloo on the CPU, nccl on CUDA) unless the caller already did;
* with ``nproc > 1`` and no process group: :func:`spawn` starts ``nproc`` processes itself
  (``torch.multiprocessing``, the spawn method) that meet over TCP on 127.0.0.1, a free port.

Either way each rank draws the same global batch from the same seeded generator and keeps its
``1 / W`` slice (:meth:`Ranks.batch_slice`); the model is wrapped in
:class:`~torch.nn.parallel.DistributedDataParallel`, which starts every rank from rank 0's
weights and averages the gradients, so every step equals the full-batch step (equal slices:
the mean of the ranks' means is the mean). Evaluation splits each batch across the ranks and
all-reduces loss sums and token counts (:meth:`Ranks.sum`), so perplexities are one process's
up to summation order. Only rank 0 prints, shows progress and writes files.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import pickle
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from .config import ConfigError, StudyConfig
from .results import LengthResult

__all__ = ["SPAWN_TIMEOUT_S", "Ranks", "joined", "main_process", "spawn", "wants_spawn"]

#: Wall-clock bound on a spawned study, in seconds, or ``None`` (a study may take hours). Past
#: it the ranks are killed and :func:`spawn` raises ``TimeoutError``. Tests set it.
SPAWN_TIMEOUT_S: float | None = None
#: How long a rank waits in one collective for the others (torch's own default for gloo).
COLLECTIVE_TIMEOUT = timedelta(minutes=30)


@dataclass(frozen=True)
class Ranks:
    """This process's place in a data-parallel study: ``rank`` of ``world_size``, on ``device``."""

    world_size: int
    rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that prints, shows progress and writes files."""
        return self.rank == 0

    def batch_slice(self, batch_size: int, name: str = "batch_size") -> slice:
        """This rank's rows of a global batch of ``batch_size``: equal slices, in rank order.

        Raises:
            ConfigError: ``batch_size`` does not divide by the world size (named ``name``).
        """
        if batch_size % self.world_size:
            raise ConfigError(
                f"{name}={batch_size} must be divisible by the number of processes ({self.world_size}): each "
                f"process takes {self.world_size} equal parts of every batch",
                argument="batch_size" if name == "batch_size" else "nproc",
            )
        share = batch_size // self.world_size
        return slice(self.rank * share, (self.rank + 1) * share)

    def rows(self, n: int) -> slice:
        """This rank's part of ``n`` rows split as evenly as possible (evaluation: any ``n``)."""
        start = n * self.rank // self.world_size
        return slice(start, n * (self.rank + 1) // self.world_size)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model`` in DistributedDataParallel: rank 0's weights broadcast, gradients averaged.

        Buffers are synced once, at the start, not at every forward: the only buffers are
        caches rebuilt the same way on every rank.
        """
        import inspect

        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index or 0] if self.device.type == "cuda" else None
        # Newer torch deprecates broadcast_buffers for forward_sync_buffers (the same switch).
        newer = "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
        no_sync: dict[str, Any] = {"forward_sync_buffers" if newer else "broadcast_buffers": False}
        return DistributedDataParallel(model, device_ids=ids, **no_sync)

    def sum(self, values: list[float]) -> list[float]:
        """Every rank's ``values`` summed element-wise (float64), the same list on every rank."""
        total = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(total)
        return [float(v) for v in total.cpu()]

    def scores(self, loss: torch.Tensor, eval_len: int, train_len: int, chars: int) -> LengthResult:
        """The scores of every rank's per-token ``loss`` ``(n_rank, eval_len)``: sums and counts added up.

        ``n_rank`` may differ between ranks (even be 0): one all-reduce of four numbers.
        """
        beyond = loss[:, train_len:]
        total, count, total_beyond, count_beyond = self.sum(
            [float(loss.sum()), loss.numel(), float(beyond.sum()), beyond.numel()]
        )
        mean = total / count
        result = LengthResult(eval_len, chars, loss=mean, perplexity=math.exp(mean))
        if eval_len > train_len:
            result.loss_beyond = total_beyond / count_beyond
            result.perplexity_beyond = math.exp(result.loss_beyond)
        return result

    def check_same(self, what: str, value: Any) -> None:
        """Raise a ConfigError on every rank unless all ranks hold the same ``value`` (its repr).

        Guards the collectives that follow: ranks that read different corpora or resume
        different results would otherwise wait for each other on different steps.
        """
        digest = hashlib.sha256(repr(value).encode()).hexdigest()[:16]
        digests: list[Any] = [None] * self.world_size
        dist.all_gather_object(digests, digest)
        if len(set(digests)) > 1:
            ranks = ", ".join(f"rank {r}: {d}" for r, d in enumerate(digests))
            raise ConfigError(
                f"nproc: the {self.world_size} processes disagree on {what} ({ranks}); give every process the same "
                "settings, corpus and output folder",
                argument="nproc",
            )


def _env_world() -> tuple[int, int, int] | None:
    """``(world_size, rank, local_rank)`` from torchrun's environment, or ``None`` outside it."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", str(rank)))
    except ValueError as err:
        raise ConfigError(
            f"nproc: WORLD_SIZE/RANK/LOCAL_RANK must be integers ({err})", argument="nproc"
        ) from None
    return (world, rank, local) if world > 1 else None


def main_process() -> bool:
    """Whether this process is rank 0 (or the only one): the one that prints and writes."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank() == 0
    world = _env_world()
    return world is None or world[1] == 0


def wants_spawn(config: StudyConfig) -> bool:
    """Whether :func:`run_study` must start ``config.nproc`` processes itself (no process group yet)."""
    if config.nproc == 1:
        return False
    return not (dist.is_available() and dist.is_initialized()) and _env_world() is None


def _backend(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def _rank_device(device: torch.device, local_rank: int) -> torch.device:
    """One CUDA device per rank (``cuda:local_rank``); every CPU rank on the CPU."""
    if device.type != "cuda":
        return device
    count = torch.cuda.device_count()
    if local_rank >= count:
        raise ConfigError(
            f"device: {count} CUDA device(s) for local rank {local_rank}; start at most {count} processes per machine",
            argument="device",
        )
    return torch.device("cuda", local_rank)


@contextlib.contextmanager
def joined(config: StudyConfig) -> Iterator[Ranks | None]:
    """This process's :class:`Ranks` when the study runs data-parallel, else ``None``.

    Uses the process group that is already initialised, or starts one from torchrun's
    environment (``env://``; destroyed on exit). ``None`` for one process: the study then
    runs exactly as without this module.

    Raises:
        ConfigError: ``config.nproc`` is neither 1 nor the world size; ``batch_size`` does not
            divide by the world size (before any collective).
    """
    started = False
    if dist.is_available() and dist.is_initialized():
        world, rank = dist.get_world_size(), dist.get_rank()
        local = int(os.environ.get("LOCAL_RANK", str(rank)))
    else:
        env = _env_world()
        if env is None:
            yield None
            return
        world, rank, local = env
    _check_world(config, world)
    device = _rank_device(torch.device(config.device), local)
    if not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(_backend(device), init_method="env://", timeout=COLLECTIVE_TIMEOUT)
        started = True
    try:
        yield Ranks(world, rank, device) if world > 1 else None
        if started:
            dist.barrier()  # leave together (see _worker)
    finally:
        if started:
            dist.destroy_process_group()


def _check_world(config: StudyConfig, world: int) -> None:
    if config.nproc not in (1, world):
        raise ConfigError(
            f"nproc={config.nproc} but {world} processes were started (torchrun's WORLD_SIZE or a process group); "
            f"leave nproc at 1 there, or give {world}",
            argument="nproc",
        )
    if config.batch_size % world:
        raise ConfigError(
            f"batch_size={config.batch_size} must be divisible by the number of processes ({world}): each "
            f"process takes batch_size / {world} windows of every batch",
            argument="batch_size",
        )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(
    rank: int,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    world: int,
    port: int,
    device: str,
    lines: Any,
    result_path: str,
    parent: int,
) -> None:
    """One spawned rank: join the group on 127.0.0.1, run ``fn``, rank 0 saves what it returns."""
    # A killed parent (SIGKILL, SIGTERM: no exception there to stop the ranks) released the folder's
    # lock; a rank that ran on would write its results over the next run's.
    threading.Thread(target=_exit_without, args=(parent,), daemon=True).start()
    where = _rank_device(torch.device(device), rank)
    if where.type == "cuda":
        torch.cuda.set_device(where)
    # The spawned processes share the cores: without a fixed thread count each would take them all.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    dist.init_process_group(
        _backend(where),
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=COLLECTIVE_TIMEOUT,
    )
    try:
        result = fn(*args, **kwargs, log=lines.put if rank == 0 else None)
        if rank == 0:
            Path(result_path).write_bytes(pickle.dumps(result))
        # Every rank leaves the group together: a rank that tears gloo down while a peer is still
        # in its last collective can abort that peer ("terminate called without an active exception").
        dist.barrier()
    except Exception as err:
        # The parent re-raises the first failure as itself (a ConfigError stays one), not as text.
        with contextlib.suppress(Exception):
            Path(f"{result_path}.error{rank}").write_bytes(pickle.dumps(err))
        raise
    finally:
        dist.destroy_process_group()


def _exit_without(parent: int) -> None:
    """End this process as soon as ``parent`` is no longer its parent (it was killed)."""
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(1)


def spawn(
    fn: Callable[..., Any],
    nproc: int,
    device: str,
    *args: Any,
    log: Callable[[str], Any] | None = None,
    **kwargs: Any,
) -> Any:
    """Run ``fn(*args, **kwargs, log=...)`` in ``nproc`` new processes; return rank 0's result.

    The processes are started with the spawn method and join one process group over TCP on
    127.0.0.1 (a free port): gloo on the CPU, nccl on CUDA (rank ``r`` on ``cuda:r``). Rank 0's
    log lines come back here and go to ``log``; its return value comes back pickled. When one
    rank fails the others are stopped and its exception is raised here, and each rank ends itself
    when this process is killed (its lock released, it must not write on); past
    :data:`SPAWN_TIMEOUT_S` all are stopped and ``TimeoutError`` is raised. ``fn``, ``args``
    and ``kwargs`` must pickle.
    """
    import torch.multiprocessing as mp

    lines = mp.get_context("spawn").SimpleQueue()
    with tempfile.TemporaryDirectory(prefix="posenc-ddp-") as tmp:
        result_path = str(Path(tmp) / "result.pkl")
        ctx = mp.start_processes(
            _worker,
            args=(fn, args, kwargs, nproc, _free_port(), device, lines, result_path, os.getpid()),
            nprocs=nproc,
            join=False,
            start_method="spawn",
        )
        deadline = None if SPAWN_TIMEOUT_S is None else time.monotonic() + SPAWN_TIMEOUT_S

        def drain() -> None:
            while not lines.empty():
                line = lines.get()
                if log is not None:
                    log(line)

        try:
            while not ctx.join(timeout=0.2):
                drain()  # keeps rank 0 from blocking on a full pipe
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(
                        f"the {nproc} study processes did not finish within {SPAWN_TIMEOUT_S:.0f} s"
                    )
        except BaseException as failure:
            for p in ctx.processes:  # a failure, timeout or Ctrl-C: no rank outlives the call
                if p.is_alive():
                    p.kill()
            errors = sorted(Path(tmp).glob("result.pkl.error*"), key=lambda path: path.stat().st_mtime)
            original = None
            if errors and isinstance(failure, mp.ProcessRaisedException):
                with contextlib.suppress(Exception):
                    original = pickle.loads(errors[0].read_bytes())
                if isinstance(original, Exception):
                    raise original from failure
            raise
        finally:
            for path in ctx.error_files:  # torch writes a failed rank's traceback there and never removes it
                with contextlib.suppress(OSError):
                    os.unlink(path)
        drain()
        return pickle.loads(Path(result_path).read_bytes())
