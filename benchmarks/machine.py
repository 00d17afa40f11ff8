"""The machine and software a benchmark run happened on: CPU, memory, load, versions, and which
posenc was measured (path, git commit, source hash). Re-exported by :mod:`benchmarks.common`."""

from __future__ import annotations

import ctypes
import datetime as _dt
import hashlib
import importlib.metadata
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "available_memory_bytes",
    "load_average",
    "machine_info",
    "now_utc",
    "posenc_info",
    "steady_allocator",
]


def _cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    match = re.search(r"^model name\s*:\s*(.+)$", text, flags=re.MULTILINE)
    return match.group(1).strip() if match else (platform.processor() or platform.machine())


def _meminfo_kib(field: str) -> int | None:
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    match = re.search(rf"^{field}:\s+(\d+) kB", text, flags=re.MULTILINE)
    return int(match.group(1)) if match else None


def available_memory_bytes() -> int | None:
    """``MemAvailable`` from ``/proc/meminfo`` in bytes, or ``None`` where it cannot be read."""
    kib = _meminfo_kib("MemAvailable")
    return None if kib is None else kib * 1024


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, or ``None`` where the platform has none."""
    if not hasattr(os, "getloadavg"):
        return None
    return [round(x, 2) for x in os.getloadavg()]


def now_utc() -> str:
    """The current UTC date and time, ISO 8601 to the second."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _git(directory: Path, *args: str) -> str | None:
    # Read-only queries; --no-optional-locks so that a concurrent commit never meets our lock.
    try:
        proc = subprocess.run(
            ["git", "--no-optional-locks", "-C", str(directory), *args],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def posenc_info() -> dict[str, Any]:
    """Which posenc was measured: version, where it was imported from, its git commit and a source hash.

    ``source_sha256`` hashes every ``.py`` file of the imported package (names and contents):
    two runs with the same hash measured the same code, whatever git says.
    """
    try:
        import posenc
    except Exception as exc:  # reported, not fatal: the report still says what was run
        return {"error": f"{type(exc).__name__}: {exc}"}
    package = Path(posenc.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    commit = _git(package, "rev-parse", "HEAD")
    dirty = None
    if commit is not None:
        status = _git(package, "status", "--porcelain", "--untracked-files=no", "--", ".")
        dirty = None if status is None else bool(status)
    return {
        "version": getattr(posenc, "__version__", None),
        "path": str(package),
        "git_commit": commit,
        "git_dirty": dirty,
        "source_sha256": digest.hexdigest()[:16],
    }


#: glibc's ``mallopt`` parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: The largest mmap threshold glibc accepts on 64-bit (``DEFAULT_MMAP_THRESHOLD_MAX``), which its
#: dynamic rule also stops at.
_MMAP_THRESHOLD_MAX = 32 * 2**20


def steady_allocator() -> str:
    """Pin glibc malloc's thresholds at the steady state a long-running process reaches.

    glibc serves a block of at least the mmap threshold with fresh pages (page faults and
    zeroing on first touch) and raises the threshold, up to 32 MiB, each time such a block is
    freed; it also returns heap memory to the system above the trim threshold. Which timed call
    pays the page faults then depends on what ran before: at the larger RoPE shapes the same
    implementation measured 2-8x apart from run to run, the clone baseline included. A training
    loop reaches the top of that rule after a few steps; pinning the mmap threshold there (and not
    trimming) gives every implementation, the clone too, the same allocator in every repeat.
    Blocks of 32 MiB and more still come from fresh pages, in every call alike.

    Returns:
        What the timed sections ran with, for the report (``"default"`` where not glibc).
    """
    if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        return "default (not glibc)"
    try:
        libc = ctypes.CDLL("libc.so.6")
        pinned = libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX) == 1
        kept = libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1
    except (OSError, AttributeError):
        return "default (mallopt unavailable)"
    if not (pinned and kept):
        return "default (mallopt refused)"
    return (
        "glibc malloc: mmap threshold pinned at 32 MiB, no trimming (its steady state; benchmarks/machine.py)"
    )


def machine_info() -> dict[str, Any]:
    """The machine and software a run happened on, for the JSON and the report's header.

    Torch threads are not here: each section of the suite sets and records its own.
    """
    total_kib = _meminfo_kib("MemTotal")
    usable_cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "date_utc": now_utc(),
        "hostname": platform.node(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable_cpus,
        "memory_total_gib": None if total_kib is None else round(total_kib / 2**20, 1),
        "load_average": load_average(),
        "load_average_1m": (load_average() or [None])[0],
        "torch_interop_threads": torch.get_num_interop_threads(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_debug": bool(getattr(torch.version, "debug", False)),
        "torch_cuda": getattr(torch.version, "cuda", None),
        "posenc": _version("posenc"),
        "posenc_source": posenc_info(),
        "transformers": _version("transformers"),
        "rotary_embedding_torch": _version("rotary-embedding-torch"),
        "x_transformers": _version("x-transformers"),
        "argv": list(sys.argv),
    }
