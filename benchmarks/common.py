"""Shared machinery of the benchmark suite: timing, threads, tables (and, re-exported, peak memory
and machine info).

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

Peak memory (:mod:`benchmarks.memory`: each case in a fresh subprocess, peak RSS above the
inputs) and the machine information of the report (:mod:`benchmarks.machine`) live in their
own modules; their names are re-exported here.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

# Moved out of this module; re-exported here (private names included) so old imports keep working.
from .machine import _cpu_model as _cpu_model
from .machine import _git as _git
from .machine import _meminfo_kib as _meminfo_kib
from .machine import _version as _version
from .machine import available_memory_bytes, load_average, machine_info, now_utc, posenc_info
from .memory import _reset_peak_rss as _reset_peak_rss
from .memory import _status_kib as _status_kib
from .memory import measure_peak_memory, run_isolated

__all__ = [
    "GIB",
    "MIB",
    "TimingStats",
    "available_memory_bytes",
    "check_replaceable",
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
    "write_whole",
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
    # (the young generations, where the previous case's garbage is: a full collection walks every object
    # the process holds, 0.3-0.6 s with transformers imported, and nothing is collected while timing)
    gc.collect(1)
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


#: How every report the benchmarks write begins (the GPU's, the RoPE floors', the suite's Markdown and JSON): a
#: file that begins otherwise is not one of theirs, and is never replaced.
REPORT_STARTS = (
    "# posenc on a GPU",
    "# RoPE's performance floors",
    "# Subnormal floats in causal",
    "### posenc benchmarks",
    '{\n  "suite": ',
)


def check_replaceable(path: Path) -> Path:
    """``path``, unless a file is there that no benchmark wrote (a mistyped ``--out`` or ``--name``: README.md)."""
    if path.is_file():
        with path.open(errors="replace") as handle:
            if not handle.read(40).startswith(REPORT_STARTS):
                raise FileExistsError(f"{path} is not a benchmark report: not replaced (name another file)")
    return path


def write_whole(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a file beside it, renamed over it: a run killed while writing leaves
    the previous report whole, never half a file. A file there that is not a report is kept (an error)."""
    check_replaceable(path)
    partial = path.with_name(f".{path.name}.writing")
    partial.write_text(text)
    os.replace(partial, path)
    return path


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` as indented JSON, creating the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, json.dumps(payload, indent=2, default=str) + "\n")
