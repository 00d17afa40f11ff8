"""The machinery of the benchmark sections that compare attention paths per length:
:mod:`benchmarks.relative` and :mod:`benchmarks.packed`.

Each section names its paths (:class:`SectionPath`), a baseline and a correctness check;
:func:`run_section` times every path per length in the current process (interleaved, as the
other sections do; ratios to the baseline of the same run) and measures each path's peak
memory in a fresh ``python -m benchmarks.<section> --memory-case`` process
(:func:`memory_case`); :func:`section_tables` renders the results.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .common import (
    fmt,
    fmt_ms,
    format_bytes,
    format_table,
    measure_peak_memory,
    ratio,
    run_isolated,
    threads_text,
    time_interleaved,
)

__all__ = ["SectionPath", "memory_case", "run_section", "section_tables"]

# ---------------------------------------------------------------------------------------
# The machinery shared with benchmarks.packed: paths, timing, memory subprocesses, tables

#: Length of the unmeasured warm-up call of a memory case.
WARMUP_LENGTH = 256


@dataclasses.dataclass
class SectionPath:
    """One attention path: how to build its per-call function and what its dense tensors need."""

    name: str
    encoding: str | None  # which reference checks it
    build: Callable[[Any], Callable[[], Tensor]]
    # bytes its dense tensors need at length t (0: none), for the memory limit
    need_bytes: Callable[[Any, int], int] = lambda config, t: 0


def _not_run(config: Any, path: SectionPath, length: int, limit: int) -> str | None:
    need = path.need_bytes(config, length)
    if need > limit:
        return f"not run: would need {format_bytes(need)}, limit {format_bytes(limit)}"
    return None


def _time_length(
    config: Any,
    paths: dict[str, SectionPath],
    baseline: str,
    ctx: Any,
    check: Callable[[Any, SectionPath, Tensor], float],
    tolerance: float,
    limit: int,
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    length = ctx.length
    entries: dict[str, dict[str, Any]] = {}
    fns: dict[str, Callable[[], object]] = {}
    estimates: dict[str, float] = {}
    for name in [baseline, *[n for n in (config.paths or paths) if n != baseline]]:
        path = paths[name]
        entry = entries[name] = {"length": length, "path": name, "skipped": None, "error": None}
        entry["skipped"] = _not_run(config, path, length, limit)
        if entry["skipped"] is None and length > config.max_len.get(name, length):
            entry["skipped"] = f"not timed above t={config.max_len[name]} (time budget of the suite)"
        if entry["skipped"]:
            continue
        try:
            with torch.no_grad():
                fn = path.build(ctx)
                start = time.perf_counter()
                out = fn()
                estimates[name] = time.perf_counter() - start
                entry["check_error"] = check(ctx, path, out)
            entry["check_ok"] = entry["check_error"] <= tolerance
            fns[name] = fn
        except Exception as exc:  # a failing path is reported, not fatal
            entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            log(f"  {name}: {entry['error']}")
    with torch.no_grad():
        stats = time_interleaved(
            fns, reps=config.reps, warmup=config.warmup, budget_s=config.budget_s, estimates=estimates
        )
    base = stats.get(baseline)
    for name, entry in entries.items():
        if name in stats:
            entry.update(stats[name].as_dict())
            entry["x_baseline"] = ratio(stats[name].median, base.median if base else None)
    log(
        "  "
        + ", ".join(f"{e['path']} {fmt_ms(e['median_ms'])} ms" for e in entries.values() if "median_ms" in e)
    )
    return list(entries.values())


def run_section(
    section: str,
    config: Any,
    paths: dict[str, SectionPath],
    baseline: str,
    *,
    make_context: Callable[[int], Any],
    check: Callable[[Any, SectionPath, Tensor], float],
    tolerance: float,
    limit: int,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Time every path of ``section`` per length in this process, then measure each one's peak
    memory in a fresh ``python -m benchmarks.<section> --memory-case`` process.

    ``config`` has ``lengths, memory_lengths, heads, paths, max_len, reps, warmup, budget_s,
    memory_timeout_s``; see :func:`run_relative` for what comes back.
    """
    unknown = sorted(set(config.paths or []) - set(paths))
    if unknown:
        raise ValueError(f"unknown {section} paths {unknown}; known: {sorted(paths)}")
    threads = torch.get_num_threads()
    results: list[dict[str, Any]] = []
    for length in config.lengths:
        log(f"[{section}] t={length}")
        results += _time_length(config, paths, baseline, make_context(length), check, tolerance, limit, log)
    failed = {r["path"] for r in results if r.get("error")}
    memory = []
    names = [baseline, *[n for n in (config.paths or paths) if n != baseline]]
    for length in config.memory_lengths:
        base_peak = None
        for name in names:
            entry: dict[str, Any] = {"length": length, "path": name}
            entry["hhtt_float32_bytes"] = 4 * config.heads * length * length
            entry["skipped"] = _not_run(config, paths[name], length, limit)
            if name in failed:
                entry["skipped"] = "not run: failed in the timing"
            if not entry["skipped"]:
                args = ["-m", f"benchmarks.{section}", "--memory-case", name, "--length", str(length)]
                args += ["--config", json.dumps(dataclasses.asdict(config)), "--threads", str(threads)]
                log(f"[{section} memory] {name} t={length}")
                entry.update(run_isolated(args, timeout_s=config.memory_timeout_s))
                peak = entry.get("peak_above_inputs_bytes")
                if peak is not None:
                    base_peak = peak if name == baseline else base_peak
                    entry["x_baseline"] = ratio(peak, base_peak)
                    entry["fraction_of_hhtt"] = peak / entry["hhtt_float32_bytes"]
                    log(f"  peak above inputs {format_bytes(peak)}")
                else:
                    log(f"  {entry.get('error')}")
            memory.append(entry)
    return {
        "config": dataclasses.asdict(config),
        "torch": torch.__version__,
        "threads": threads,
        "memory_limit_bytes": limit,
        "check_tolerance": tolerance,
        "results": results,
        "memory": memory,
    }


def memory_case(path: SectionPath, length: int, make: Callable[[int, int], Any]) -> dict[str, Any]:
    """One peak-memory case, in this (fresh) process: warm up on a short sequence, then measure."""
    with torch.no_grad():
        warmup = path.build(make(min(length, WARMUP_LENGTH), 1))
        run = path.build(make(length, 0))
        result = measure_peak_memory(run, warmup=warmup)
    result.update({"path": path.name, "length": length, "threads": torch.get_num_threads()})
    return result


def section_tables(report: dict[str, Any], title: str, *, markdown: bool) -> str:
    """Time (x baseline) per length and path, then peak memory (x baseline, fraction of ``(h, t, t)``)."""
    rows = report["results"]
    paths = list(dict.fromkeys(r["path"] for r in rows))
    by_length: dict[int, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_length.setdefault(row["length"], {})[row["path"]] = row

    def cell(row: dict[str, Any] | None) -> str:
        if row is None:
            return "-"
        if row.get("error") or row.get("skipped"):
            return "error" if row.get("error") else "not run"
        wrong = " WRONG" if row.get("check_ok") is False else ""
        return f"{fmt_ms(row['median_ms'])} ms ({fmt(row.get('x_baseline'))}x){wrong}"

    body = [[t, *[cell(group.get(p)) for p in paths]] for t, group in by_length.items()]
    lines = [
        f"{title}, torch {report.get('torch', '?')}, {threads_text(report.get('threads'))}: "
        "median time (x the baseline, same process)",
        format_table(["t", *paths], body, markdown=markdown),
    ]
    notes = [
        f"{r['path']} t={r['length']}: {r['skipped'] or r['error']}"
        for r in rows
        if r.get("skipped") or r.get("error")
    ]
    notes += [
        f"{r['path']} t={r['length']}: output differs from the float64 reference ({r['check_error']:.3g})"
        for r in rows
        if r.get("check_ok") is False
    ]
    if notes:
        lines += ["", *[f"- {n}" for n in notes]]
    if report.get("memory"):
        body = []
        for m in report["memory"]:
            peak = m.get("peak_above_inputs_bytes")
            body.append(
                [
                    m["path"],
                    m["length"],
                    format_bytes(peak) if peak is not None else (m.get("skipped") or m.get("error") or "-"),
                    fmt(m.get("x_baseline")),
                    format_bytes(m["hhtt_float32_bytes"]),
                    "-" if m.get("fraction_of_hhtt") is None else f"{m['fraction_of_hhtt']:.3f}",
                ]
            )
        lines += [
            "",
            "Peak memory above the inputs (fresh process per case, peak RSS, after a warm-up at t=256)",
            format_table(
                ["path", "t", "peak above inputs", "x baseline", "one (h, t, t) float32", "fraction"],
                body,
                markdown=markdown,
            ),
        ]
    return "\n".join(lines)
