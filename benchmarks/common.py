"""Shared machinery of the benchmark suite: timing, peak memory, machine info, tables.

Timing method (used by every benchmark in the suite):

* one process; each section of the suite fixes its ``torch`` threads (one by default:
  memory-bound calls of a millisecond, timed with several threads on a loaded 2-core
  machine, measure the scheduler's time slices) and the report records them;
* the implementations being compared are interleaved round-robin within every repetition
  (the starting point rotates each repetition), so that slow drifts of a shared machine hit
  all of them alike;
* a warm-up first (caches filled, lazy initialisation and compilation done), then each
  sample times ``number`` back-to-back calls, with ``number`` chosen so that one sample
  lasts at least ``min_sample_s`` (sub-millisecond calls are otherwise lost in timer noise);
* the garbage collector is paused while timing; the report gives the median and the
  inter-quartile range of the per-call times.

Peak memory on the CPU: each memory case runs in a fresh subprocess. After the inputs
exist and one warm-up call has run, the kernel's peak-RSS counter (``VmHWM``) is reset by
writing ``5`` to ``/proc/self/clear_refs``; the case runs once more and the peak RSS minus
the RSS just before that run is the memory the case needed above its inputs. Where that
file cannot be written, ``resource.getrusage().ru_maxrss`` (the peak of the whole process
life) is used instead and the report says so.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import gc
import hashlib
import importlib.metadata
import json
import math
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "GIB",
    "MIB",
    "TimingStats",
    "available_memory_bytes",
    "fmt",
    "fmt_ms",
    "format_bytes",
    "format_table",
    "load_average",
    "machine_info",
    "measure_peak_memory",
    "now_utc",
    "posenc_info",
    "ratio",
    "run_isolated",
    "set_threads",
    "threads_text",
    "time_interleaved",
    "write_json",
]

MIB = 2**20
GIB = 2**30


@dataclasses.dataclass
class TimingStats:
    """Per-call wall times of one implementation, in seconds.

    Attributes:
        median: the median per-call time.
        q1, q3: the first and third quartiles (``iqr = q3 - q1``).
        minimum: the fastest sample.
        samples: how many samples were taken.
        number: how many back-to-back calls each sample timed.
    """

    median: float
    q1: float
    q3: float
    minimum: float
    samples: int
    number: int

    @property
    def iqr(self) -> float:
        """The inter-quartile range ``q3 - q1`` in seconds."""
        return self.q3 - self.q1

    def as_dict(self) -> dict[str, float | int]:
        """The stats in milliseconds, with the JSON report's key names."""
        return {
            "median_ms": self.median * 1e3,
            "iqr_ms": self.iqr * 1e3,
            "q1_ms": self.q1 * 1e3,
            "q3_ms": self.q3 * 1e3,
            "min_ms": self.minimum * 1e3,
            "samples": self.samples,
            "calls_per_sample": self.number,
        }


def _stats(times: Sequence[float], number: int) -> TimingStats:
    ordered = sorted(times)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    return TimingStats(statistics.median(ordered), q1, q3, ordered[0], len(ordered), number)


def time_interleaved(
    fns: dict[str, Callable[[], object]],
    *,
    reps: int,
    warmup: int = 2,
    min_reps: int = 3,
    min_sample_s: float = 0.005,
    budget_s: float | None = None,
    estimates: dict[str, float] | None = None,
) -> dict[str, TimingStats]:
    """Time several zero-argument callables against each other, interleaved round-robin.

    Args:
        fns: name -> callable; the callables' return values are discarded at once.
        reps: the most samples per callable.
        warmup: untimed calls per callable before timing (the last one calibrates ``number``).
        min_reps: the fewest samples per callable, whatever ``budget_s`` says.
        min_sample_s: one sample repeats the call until it lasts at least this long.
        budget_s: an optional wall-time budget for the timed rounds; fewer repetitions
            (not fewer than ``min_reps``) are taken when one round would not fit ``reps`` times.
        estimates: name -> seconds of one call measured beforehand (e.g. by a correctness
            check that already warmed the callable); with ``warmup=0`` they calibrate
            ``number`` instead of a warm-up call, which saves minutes at long sequences.

    Returns:
        name -> :class:`TimingStats` of per-call times.
    """
    if not fns:
        return {}
    names = list(fns)
    single: dict[str, float] = dict(estimates or {})
    missing = [name for name in names if name not in single]
    if missing and warmup < 1:
        raise ValueError(f"warmup=0 needs an estimate for every callable; missing {missing}")
    for _ in range(warmup):
        for name in names:
            start = time.perf_counter()
            fns[name]()
            single[name] = time.perf_counter() - start
    number = {name: max(1, math.ceil(min_sample_s / max(single[name], 1e-9))) for name in names}
    round_s = sum(single[name] * number[name] for name in names)
    if budget_s is not None and round_s > 0:
        reps = max(min_reps, min(reps, int(budget_s / round_s)))
    times: dict[str, list[float]] = {name: [] for name in names}
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for rep in range(reps):
            # Rotate the starting point so that no implementation always runs first.
            order = names[rep % len(names) :] + names[: rep % len(names)]
            for name in order:
                fn, n = fns[name], number[name]
                start = time.perf_counter()
                for _ in range(n):
                    fn()
                times[name].append((time.perf_counter() - start) / n)
    finally:
        if gc_was_enabled:
            gc.enable()
    return {name: _stats(times[name], number[name]) for name in names}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, or ``None`` when either is missing or the denominator is 0."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def set_threads(threads: int | None) -> int:
    """Fix the number of torch intra-op threads (default: the CPUs this process may use).

    Returns:
        The number of threads in effect.
    """
    if threads is None:
        threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads}")
    torch.set_num_threads(threads)
    try:
        # Only settable before any inter-op work has started; keep it at one when we can.
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    return torch.get_num_threads()


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


# ---------------------------------------------------------------------------------------
# Peak memory


def _status_kib(field: str) -> int:
    text = Path("/proc/self/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB", text, flags=re.MULTILINE)
    if match is None:
        raise RuntimeError(f"/proc/self/status has no {field} line")
    return int(match.group(1))


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS counter of this process; ``False`` where not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        return False
    return True


def measure_peak_memory(
    run: Callable[[], object], *, warmup: Callable[[], object] | None = None
) -> dict[str, Any]:
    """Peak resident memory that ``run()`` needs above what the process holds before it.

    Meant to run in a fresh process (see :func:`run_isolated`) whose inputs already exist.

    Args:
        run: the case, a zero-argument callable; its result is dropped at once.
        warmup: an optional callable run first, unmeasured (e.g. the same case on a short
            sequence: compilation and thread pools are then not counted as the case's memory,
            while caches that the case itself builds at its length still are).

    Returns:
        A dict with ``peak_above_inputs_bytes``, ``rss_before_bytes``, ``peak_rss_bytes``,
        ``method`` (``"VmHWM reset"`` or ``"ru_maxrss"``), ``warmup_s`` and ``run_s``.
    """
    warmup_s = None
    if warmup is not None:
        start = time.perf_counter()
        warmup()
        warmup_s = time.perf_counter() - start
    gc.collect()
    rss_before = _status_kib("VmRSS") * 1024
    if _reset_peak_rss():
        method = "VmHWM reset"
        start = time.perf_counter()
        run()
        run_s = time.perf_counter() - start
        peak = _status_kib("VmHWM") * 1024
    else:
        method = "ru_maxrss"
        start = time.perf_counter()
        run()
        run_s = time.perf_counter() - start
        # ru_maxrss is the peak over the whole process life (KiB on Linux): an upper bound.
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "peak_above_inputs_bytes": max(peak - rss_before, 0),
        "rss_before_bytes": rss_before,
        "peak_rss_bytes": peak,
        "method": method,
        "warmup_s": warmup_s,
        "run_s": run_s,
    }


def run_isolated(args: Sequence[str], *, timeout_s: float) -> dict[str, Any]:
    """Run ``python -m benchmarks.<...>`` in a fresh subprocess and parse its last JSON line.

    Args:
        args: the arguments after ``python``, e.g. ``["-m", "benchmarks.bias", "--memory-case", ...]``.
        timeout_s: the wall-time limit of the subprocess.

    Returns:
        The child's result dict, or ``{"error": ...}`` when it failed, timed out or printed no JSON.
    """
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        proc = subprocess.run(
            [sys.executable, *args], capture_output=True, text=True, timeout=timeout_s, env=env, cwd=root
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                break
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    # The exception line of a traceback says the most; else the last line printed.
    errors = [line for line in lines if re.match(r"^[\w.]*(Error|Exception)\b", line)]
    message = errors[-1] if errors else (lines[-1] if lines else "no output")
    return {"error": f"exit status {proc.returncode}: {message.strip()[:300]}"}


# ---------------------------------------------------------------------------------------
# Output


def format_bytes(n: float | None) -> str:
    """``n`` bytes as MiB or GiB with three significant digits; ``-`` for ``None``."""
    if n is None:
        return "-"
    if n >= 1000 * MIB:
        return f"{n / GIB:.3g} GiB"
    return f"{n / MIB:.3g} MiB"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, markdown: bool = False) -> str:
    """Render rows as an aligned plain-text table, or as a GitHub markdown table."""
    cells = [[str(c) for c in headers]] + [["-" if c is None else str(c) for c in row] for row in rows]
    if markdown:
        lines = ["| " + " | ".join(cells[0]) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in cells[1:]]
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def fmt(x: float | None, digits: int = 2) -> str:
    """A float with ``digits`` decimals, or ``-`` for ``None``."""
    return "-" if x is None else f"{x:.{digits}f}"


def fmt_ms(ms: float | None) -> str:
    """Milliseconds with about three significant digits and no exponent: ``1234``, ``56.7``, ``0.0123``."""
    if ms is None:
        return "-"
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    return f"{ms:.3g}"


def threads_text(n: int | None) -> str:
    """``"1 thread"``, ``"2 threads"``, or ``"? threads"`` when unknown."""
    return "? threads" if n is None else f"{n} thread{'' if n == 1 else 's'}"


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` as indented JSON, creating the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
