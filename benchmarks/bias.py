"""Bias attention benchmark: causal attention with ALiBi and T5 bias, time and peak memory.

Paths compared on the same ``q, k, v`` of shape ``(1, h, t, dh)`` (float32, CPU, inference
under ``torch.no_grad()``, default scale ``1/sqrt(dh)``):

* ``sdpa causal (no bias)`` — ``F.scaled_dot_product_attention(..., is_causal=True)``: the
  limit (the same attention without any position bias);
* ``posenc alibi`` / ``posenc t5`` — :func:`posenc.attend.attention` with
  :class:`posenc.ALiBi` / :class:`posenc.RelativeBias` (``causal=True``, ``backend="auto"``);
  ``posenc t5 [flex]`` — the same with ``backend="flex"`` (FlexAttention, compiled once);
* ``alibi dense mask`` — SDPA with a materialised ``(1, h, t, t)`` float mask (ALiBi plus
  ``-inf`` above the diagonal), built once beforehand (its build time is reported apart);
* ``x-transformers alibi`` / ``x-transformers t5`` — x-transformers' ``AlibiPositionalBias`` /
  ``RelativePositionBias`` produce the ``(h, t, t)`` bias; as x-transformers' ``Attend`` does
  on its SDPA path, it is expanded to ``(b, h, t, t)``, the causal positions are filled with
  a large negative value, and SDPA runs with that mask;
* ``transformers t5`` — transformers' ``T5Attention.compute_bias`` (bucket every ``(i, j)``,
  gather a ``(1, h, t, t)`` bias, heads innermost in memory as it comes), ``-inf`` above the
  diagonal, SDPA.

Every T5 path uses the same learned table (posenc's weights copied into the others). Before
timing, every path's output on a sample of query rows (first, middle and last) is compared
with a float64 reference computed here from the formulas (slopes from the ALiBi paper's
rule, buckets from transformers' T5 bucket function).

Threads: ``torch.set_num_threads(1)`` by default (``BiasConfig.threads``), in the timing and
in the memory subprocesses. Attention at these lengths is compute-bound and would use more
cores, but the times here are ratios to SDPA on the same inputs, and on a shared 2-core
machine every multi-threaded parallel region may wait for a scheduler time slice: one
thread keeps the ratios about the code. ``--threads N`` measures the other setting.

Peak memory: each (path, length) runs in a fresh subprocess (see
:func:`benchmarks.memory.measure_peak_memory`) after an unmeasured warm-up call on a short
sequence (at the full length for compiled FlexAttention, whose recompile is not the case's
memory); the case includes building any mask. Paths whose dense tensors would not fit the
memory limit are skipped, in the timing and in the memory cases, and the report says so.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .bias_paths import (
    ALIBI_DENSE,
    BASELINE,
    PATHS,
    AttentionPath,
    _alibi_dense_mask,
    check_rows,
    make_context,
    reference_rows,
)
from .bias_paths import CHECK_ROWS as CHECK_ROWS
from .bias_paths import HF_T5 as HF_T5
from .bias_paths import POSENC_ALIBI as POSENC_ALIBI
from .bias_paths import POSENC_T5 as POSENC_T5
from .bias_paths import POSENC_T5_FLEX as POSENC_T5_FLEX
from .bias_paths import XT_ALIBI as XT_ALIBI
from .bias_paths import XT_T5 as XT_T5
from .bias_paths import Context as Context
from .bias_paths import _alibi_dense as _alibi_dense
from .bias_paths import _causal_upper as _causal_upper
from .bias_paths import _hf_t5 as _hf_t5
from .bias_paths import _hf_t5_attention as _hf_t5_attention
from .bias_paths import _paper_slopes as _paper_slopes
from .bias_paths import _posenc as _posenc
from .bias_paths import _sdpa_causal as _sdpa_causal
from .bias_paths import _xt_alibi as _xt_alibi
from .bias_paths import _xt_attend_mask as _xt_attend_mask
from .bias_paths import _xt_t5 as _xt_t5
from .bias_report import bias_tables as bias_tables
from .common import (
    GIB,
    available_memory_bytes,
    fmt,
    format_bytes,
    measure_peak_memory,
    ratio,
    run_isolated,
    set_threads,
    time_interleaved,
)

# The paths and the reference (bias_paths) and the tables (bias_report) moved out; every name once
# defined here stays importable from here (the "as" imports re-export private names).
__all__ = ["BiasConfig", "run_bias"]

#: Allowed ``max|out - ref| / max|ref|`` against the float64 reference: float32 attention
#: round-off over up to 16k keys plus the key-only ALiBi form's drift (~2e-4 in the bias at
#: 8k, measured); a wrong slope, bucket or mask gives errors of order 0.1-1.
CHECK_TOLERANCE = 2e-3
#: Length of the unmeasured warm-up call of a memory case.
WARMUP_LENGTH = 256


@dataclasses.dataclass
class BiasConfig:
    """What the bias benchmark runs.

    Attributes:
        lengths: sequence lengths ``t`` timed.
        heads, head_dim: ``h`` and ``dh``.
        paths: names to run (``None``: all).
        max_len: per path, the longest ``t`` timed (slow dense paths stop early; the report
            says so).
        memory_lengths: lengths of the peak-memory cases (each path, in a subprocess).
        memory_paths: paths with memory cases (``None``: all).
        dense_limit_bytes: the most a path's dense tensors may need; longer lengths are
            skipped (also capped at a third of the memory available at the start).
        reps, warmup, budget_s: see :func:`benchmarks.common.time_interleaved` (per length;
            the correctness check's call is always a first warm-up).
        memory_timeout_s: the limit of one memory subprocess.
        threads: torch threads of the section, timing and memory subprocesses (``None``:
            every usable CPU).
    """

    lengths: list[int]
    heads: int = 8
    head_dim: int = 64
    paths: list[str] | None = None
    max_len: dict[str, int] = dataclasses.field(default_factory=dict)
    memory_lengths: list[int] = dataclasses.field(default_factory=list)
    memory_paths: list[str] | None = None
    dense_limit_bytes: int = int(4.5 * GIB)
    reps: int = 10
    warmup: int = 0
    budget_s: float = 30.0
    memory_timeout_s: float = 300.0
    threads: int | None = 1


# ---------------------------------------------------------------------------------------
# Timing


def _selected(names: list[str] | None, *, with_baseline: bool) -> list[str]:
    names = list(PATHS) if names is None else list(names)
    unknown = sorted(set(names) - set(PATHS))
    if unknown:
        raise ValueError(f"unknown bias paths {unknown}; known: {sorted(PATHS)}")
    if with_baseline and BASELINE not in names:
        names = [BASELINE, *names]
    return names


def _skip_reason(
    config: BiasConfig, path: AttentionPath, length: int, memory_limit: int, *, for_memory: bool = False
) -> str | None:
    """Why a path does not run at ``length``, or ``None``.

    The memory limit applies to everything; the per-path length limit (a time budget) only to
    the timing, since a memory case runs once.
    """
    need = path.dense_bytes(length, config.heads)
    if need > memory_limit:
        return f"skipped: needs ~{format_bytes(need)} of dense tensors, limit {format_bytes(memory_limit)}"
    limit_len = config.max_len.get(path.name)
    if not for_memory and limit_len is not None and length > limit_len:
        return f"not run above t={limit_len} (time budget of the suite)"
    return None


def _memory_limit(config: BiasConfig) -> int:
    available = available_memory_bytes()
    return config.dense_limit_bytes if available is None else min(config.dense_limit_bytes, available // 3)


def run_bias(config: BiasConfig, *, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the bias attention benchmark (timing in this process, memory in subprocesses).

    The timing runs in the current torch thread setting (``config.threads`` is applied by
    :func:`benchmarks.run_suite`); the memory subprocesses get the same number of threads.

    Args:
        config: what to run.
        log: where progress lines go.

    Returns:
        ``{"config", "torch", "threads", "memory_limit_bytes", "check_tolerance", "results",
        "memory"}``: ``results`` rows have
        ``length, path``, timing stats, ``x_baseline`` (time / bias-free causal SDPA),
        ``check_error``, ``check_ok``, ``skipped``, ``error`` and, for the dense mask,
        ``mask_build_ms``; ``memory`` rows have ``length, path``, the measurement and
        ``fraction_of_hhtt`` (peak above inputs / one ``(h, t, t)`` float32 tensor).
    """
    threads = torch.get_num_threads()
    names = _selected(config.paths, with_baseline=True)
    memory_names = _selected(config.memory_paths, with_baseline=False)
    memory_limit = _memory_limit(config)
    results: list[dict[str, Any]] = []
    failed: dict[str, int] = {}  # a path that raised is not retried at longer lengths
    for length in config.lengths:
        log(f"[bias] t={length}")
        ctx = make_context(length, config.heads, config.head_dim)
        rows = check_rows(length)
        references: dict[str | None, Tensor] = {}
        fns: dict[str, Callable[[], object]] = {}
        entries: dict[str, dict[str, Any]] = {}
        for name in names:
            path = PATHS[name]
            entry = entries[name] = {"length": length, "path": name, "skipped": None, "error": None}
            reason = _skip_reason(config, path, length, memory_limit)
            if name in failed:
                reason = f"not run: failed at t={failed[name]}"
            if reason:
                entry["skipped"] = reason
                continue
            try:
                with torch.no_grad():
                    if name == ALIBI_DENSE:
                        start = time.perf_counter()
                        _alibi_dense_mask(ctx)
                        entry["mask_build_ms"] = (time.perf_counter() - start) * 1e3
                    fn = path.build(ctx)
                    start = time.perf_counter()
                    out = fn()
                    entry["first_call_s"] = time.perf_counter() - start
                    if path.encoding not in references:
                        references[path.encoding] = reference_rows(ctx, path.encoding, rows)
                    ref = references[path.encoding]
                    error = float((out[:, :, rows].double() - ref).abs().max() / ref.abs().max())
                    del out
                entry["check_error"] = error
                entry["check_ok"] = error <= CHECK_TOLERANCE
                fns[name] = fn
            except Exception as exc:  # a failing path is reported, not fatal
                entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                failed[name] = length
                log(f"  {name}: {entry['error']}")
        # The check call above was each path's warm-up; its time calibrates the samples.
        estimates = {name: entries[name]["first_call_s"] for name in fns}
        with torch.no_grad():
            stats = time_interleaved(
                fns, reps=config.reps, warmup=config.warmup, budget_s=config.budget_s, estimates=estimates
            )
        baseline = stats.get(BASELINE)
        for name, entry in entries.items():
            st = stats.get(name)
            if st:
                entry.update(st.as_dict())
                entry["x_baseline"] = ratio(st.median, baseline.median if baseline else None)
            results.append(entry)
        log(
            "  "
            + ", ".join(
                f"{e['path']} {e['median_ms']:.1f} ms ({fmt(e['x_baseline'])}x)"
                for e in entries.values()
                if "median_ms" in e
            )
        )
        del ctx, fns, references
    memory = []
    for length in config.memory_lengths:
        for name in memory_names:
            entry = {"length": length, "path": name, "hhtt_float32_bytes": 4 * config.heads * length * length}
            reason = _skip_reason(config, PATHS[name], length, memory_limit, for_memory=True)
            if name in failed:
                entry["skipped"] = f"not run: failed at t={failed[name]} in the timing"
            elif reason:
                entry["skipped"] = reason
            else:
                args = ["-m", "benchmarks.bias", "--memory-case", name, "--length", str(length)]
                args += ["--heads", str(config.heads), "--head-dim", str(config.head_dim)]
                args += ["--threads", str(threads)]
                log(f"[memory] {name} t={length}")
                entry.update(run_isolated(args, timeout_s=config.memory_timeout_s))
                if "peak_above_inputs_bytes" in entry:
                    entry["fraction_of_hhtt"] = entry["peak_above_inputs_bytes"] / entry["hhtt_float32_bytes"]
                    log(f"  peak above inputs {format_bytes(entry['peak_above_inputs_bytes'])}")
                else:
                    log(f"  {entry.get('error')}")
            memory.append(entry)
    return {
        "config": dataclasses.asdict(config),
        "torch": torch.__version__,
        "threads": threads,
        "memory_limit_bytes": memory_limit,
        "check_tolerance": CHECK_TOLERANCE,
        "results": results,
        "memory": memory,
    }


# ---------------------------------------------------------------------------------------
# The memory subprocess: python -m benchmarks.bias --memory-case NAME --length T


def _memory_case_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="One peak-memory case of the bias benchmark (run in a fresh process)."
    )
    parser.add_argument("--memory-case", required=True, choices=sorted(PATHS))
    parser.add_argument("--length", type=int, required=True)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    set_threads(args.threads)
    path = PATHS[args.memory_case]
    build = path.build_full or path.build
    with torch.no_grad():
        # The warm-up runs the same path on a short sequence (compilation, thread pools); the
        # measured call then builds everything its own length needs, caches included.
        warmup_length = args.length if path.warmup_full_length else min(args.length, WARMUP_LENGTH)
        warmup = build(make_context(warmup_length, args.heads, args.head_dim, seed=1))
        ctx = make_context(args.length, args.heads, args.head_dim)
        run = build(ctx)
        result = measure_peak_memory(run, warmup=warmup)
    result.update(
        {
            "path": path.name,
            "length": args.length,
            "warmup_length": warmup_length,
            "threads": torch.get_num_threads(),
            "posenc_path": str(Path(sys.modules["posenc"].__file__).resolve().parent),
        }
    )
    print(json.dumps(result))


if __name__ == "__main__":
    _memory_case_main(sys.argv[1:])
