"""Peak memory of one benchmark case on the CPU, measured in a fresh subprocess.

Each memory case runs in a fresh subprocess (:func:`run_isolated`). After the inputs exist
and one warm-up call has run, the kernel's peak-RSS counter (``VmHWM``) is reset by writing
``5`` to ``/proc/self/clear_refs``; the case runs once more and the peak RSS minus the RSS
just before that run is the memory the case needed above its inputs
(:func:`measure_peak_memory`). Where that file cannot be written,
``resource.getrusage().ru_maxrss`` (the peak of the whole process life) is used instead and
the report says so. Re-exported by :mod:`benchmarks.common`.
"""

from __future__ import annotations

import gc
import json
import os
import re
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["measure_peak_memory", "run_isolated"]


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
