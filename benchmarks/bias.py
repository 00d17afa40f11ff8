"""Bias attention benchmark: causal attention with ALiBi and T5 bias, time and peak memory.

Paths compared on the same ``q, k, v`` of shape ``(1, h, t, dh)`` (float32, CPU, inference
under ``torch.no_grad()``, default scale ``1/sqrt(dh)``):

* ``sdpa causal (no bias)`` — ``F.scaled_dot_product_attention(..., is_causal=True)``: the
  limit (the same attention without any position bias);
* ``posenc alibi`` / ``posenc t5`` — :func:`posenc.attention.attention` with
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
:func:`benchmarks.common.measure_peak_memory`) after an unmeasured warm-up call on a short
sequence (at the full length for compiled FlexAttention, whose recompile is not the case's
memory); the case includes building any mask. Paths whose dense tensors would not fit the
memory limit are skipped, in the timing and in the memory cases, and the report says so.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .common import (
    GIB,
    available_memory_bytes,
    fmt,
    fmt_ms,
    format_bytes,
    format_table,
    measure_peak_memory,
    ratio,
    run_isolated,
    set_threads,
    threads_text,
    time_interleaved,
)

__all__ = ["BiasConfig", "run_bias"]

BASELINE = "sdpa causal (no bias)"
POSENC_ALIBI = "posenc alibi"
POSENC_T5 = "posenc t5"
POSENC_T5_FLEX = "posenc t5 [flex]"
ALIBI_DENSE = "alibi dense mask"
XT_ALIBI = "x-transformers alibi"
XT_T5 = "x-transformers t5"
HF_T5 = "transformers t5"

#: Allowed ``max|out - ref| / max|ref|`` against the float64 reference: float32 attention
#: round-off over up to 16k keys plus the key-only ALiBi form's drift (~2e-4 in the bias at
#: 8k, measured); a wrong slope, bucket or mask gives errors of order 0.1-1.
CHECK_TOLERANCE = 2e-3
#: Query rows compared with the reference at each end of the sequence (and as many spread between).
CHECK_ROWS = 32
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
# Paths: each builder takes the context and returns the per-call function


@dataclasses.dataclass
class Context:
    """The inputs and encodings shared by every path at one length."""

    q: Tensor
    k: Tensor
    v: Tensor
    alibi: Any  # posenc.ALiBi
    t5: Any  # posenc.RelativeBias

    @property
    def length(self) -> int:
        """The sequence length ``t``."""
        return self.q.shape[-2]

    @property
    def heads(self) -> int:
        """The number of heads ``h``."""
        return self.q.shape[1]


def make_context(length: int, heads: int, head_dim: int, seed: int = 0) -> Context:
    """Random ``q, k, v`` of shape ``(1, h, t, dh)`` and the posenc encodings (random T5 table)."""
    import posenc

    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, heads, length, head_dim, generator=generator) for _ in range(3))
    alibi = posenc.ALiBi(heads, causal=True)
    t5 = posenc.RelativeBias(heads, causal=True)
    with torch.no_grad():
        t5.relative_attention_bias.weight.copy_(torch.randn(t5.num_buckets, heads, generator=generator))
    return Context(q, k, v, alibi, t5)


def _causal_upper(length: int) -> Tensor:
    """``(t, t)`` bool, true above the diagonal (the positions a causal query must not see)."""
    return torch.ones(length, length, dtype=torch.bool).triu_(1)


def _sdpa_causal(ctx: Context) -> Callable[[], Tensor]:
    return lambda: F.scaled_dot_product_attention(ctx.q, ctx.k, ctx.v, is_causal=True)


def _posenc(encoding_attr: str, backend: str) -> Callable[[Context], Callable[[], Tensor]]:
    def build(ctx: Context) -> Callable[[], Tensor]:
        from posenc.attention import attention

        encoding = getattr(ctx, encoding_attr)
        return lambda: attention(ctx.q, ctx.k, ctx.v, encoding, causal=True, backend=backend)

    return build


def _alibi_dense_mask(ctx: Context) -> Tensor:
    """The materialised ``(1, h, t, t)`` float32 mask: ``-slope * (i - j)``, ``-inf`` above the diagonal."""
    t = ctx.length
    positions = torch.arange(t, dtype=torch.float32)
    distance = positions[None, :] - positions[:, None]  # (t, t): j - i
    mask = ctx.alibi.slopes.float().view(1, -1, 1, 1) * distance
    return mask.masked_fill_(_causal_upper(t), float("-inf"))


def _alibi_dense(ctx: Context, *, prebuilt: bool) -> Callable[[], Tensor]:
    if not prebuilt:
        return lambda: F.scaled_dot_product_attention(ctx.q, ctx.k, ctx.v, attn_mask=_alibi_dense_mask(ctx))
    mask = _alibi_dense_mask(ctx)
    return lambda: F.scaled_dot_product_attention(ctx.q, ctx.k, ctx.v, attn_mask=mask)


def _xt_attend_mask(ctx: Context, bias: Tensor, upper: Tensor) -> Tensor:
    """The mask x-transformers' ``Attend`` hands SDPA for a bias with ``causal=True``.

    As its flash path does: the bias expanded to ``(b, h, t, t)`` and the causal positions
    filled with ``-finfo.max // 2`` (a 4-d mask: SDPA reads a 3-d ``(h, t, t)`` one ~2.5x
    slower on the CPU, measured).
    """
    b, h = ctx.q.shape[:2]
    mask_value = -torch.finfo(ctx.q.dtype).max
    return bias.expand(b, h, -1, -1).masked_fill(upper, mask_value // 2)


def _xt_alibi(ctx: Context) -> Callable[[], Tensor]:
    from x_transformers.x_transformers import AlibiPositionalBias

    module = AlibiPositionalBias(heads=ctx.heads)
    upper = _causal_upper(ctx.length)
    t = ctx.length

    def run() -> Tensor:
        bias = module(t, t)  # (h, t, t), cached by the module after the first call
        return F.scaled_dot_product_attention(
            ctx.q, ctx.k, ctx.v, attn_mask=_xt_attend_mask(ctx, bias, upper)
        )

    return run


def _xt_t5(ctx: Context) -> Callable[[], Tensor]:
    from x_transformers.x_transformers import RelativePositionBias

    module = RelativePositionBias(
        scale=1.0,
        causal=True,
        num_buckets=ctx.t5.num_buckets,
        max_distance=ctx.t5.max_distance,
        heads=ctx.heads,
    )
    with torch.no_grad():
        module.relative_attention_bias.weight.copy_(ctx.t5.relative_attention_bias.weight)
    upper = _causal_upper(ctx.length)
    t = ctx.length

    def run() -> Tensor:
        bias = module(t, t)  # (h, t, t)
        return F.scaled_dot_product_attention(
            ctx.q, ctx.k, ctx.v, attn_mask=_xt_attend_mask(ctx, bias, upper)
        )

    return run


def _hf_t5_attention(ctx: Context):
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    config = T5Config(
        d_model=ctx.heads * ctx.q.shape[-1],
        d_kv=ctx.q.shape[-1],
        num_heads=ctx.heads,
        relative_attention_num_buckets=ctx.t5.num_buckets,
        relative_attention_max_distance=ctx.t5.max_distance,
        is_decoder=True,
    )
    module = T5Attention(config, has_relative_attention_bias=True, layer_idx=0, is_causal=True)
    with torch.no_grad():
        module.relative_attention_bias.weight.copy_(ctx.t5.relative_attention_bias.weight)
    return module


def _hf_t5(ctx: Context) -> Callable[[], Tensor]:
    module = _hf_t5_attention(ctx)
    upper = _causal_upper(ctx.length)
    t = ctx.length

    def run() -> Tensor:
        mask = module.compute_bias(t, t).masked_fill(upper, float("-inf"))  # (1, h, t, t)
        return F.scaled_dot_product_attention(ctx.q, ctx.k, ctx.v, attn_mask=mask)

    return run


@dataclasses.dataclass
class AttentionPath:
    """One attention path: how to build its per-call function and what its dense tensors cost."""

    name: str
    encoding: str | None  # "alibi", "t5" or None (which reference to check against)
    build: Callable[[Context], Callable[[], Tensor]]
    # bytes of the dense tensors one call holds at once, for the memory limit (0: none); the
    # formulas match the peaks measured at t=4096, h=8 (dense mask 592 MiB, x-transformers
    # ALiBi 1.01 GiB and T5 1.25 GiB, transformers T5 1.0 GiB)
    dense_bytes: Callable[[int, int], int] = lambda t, h: 0
    # the per-call function of the memory case, when it differs (e.g. includes a mask build)
    build_full: Callable[[Context], Callable[[], Tensor]] | None = None
    # the memory case's warm-up runs at the full length (compiled kernels: a recompile for a
    # new length would otherwise count as the case's memory; such paths hold no length cache)
    warmup_full_length: bool = False


PATHS: dict[str, AttentionPath] = {
    p.name: p
    for p in (
        AttentionPath(BASELINE, None, _sdpa_causal),
        AttentionPath(POSENC_ALIBI, "alibi", _posenc("alibi", "auto")),
        AttentionPath(POSENC_T5, "t5", _posenc("t5", "auto")),
        AttentionPath(POSENC_T5_FLEX, "t5", _posenc("t5", "flex"), warmup_full_length=True),
        AttentionPath(
            ALIBI_DENSE,
            "alibi",
            lambda ctx: _alibi_dense(ctx, prebuilt=True),
            dense_bytes=lambda t, h: 4 * h * t * t + 5 * t * t,
            build_full=lambda ctx: _alibi_dense(ctx, prebuilt=False),
        ),
        AttentionPath(XT_ALIBI, "alibi", _xt_alibi, dense_bytes=lambda t, h: 8 * h * t * t + 2 * t * t),
        AttentionPath(XT_T5, "t5", _xt_t5, dense_bytes=lambda t, h: 10 * h * t * t + 8 * t * t),
        AttentionPath(HF_T5, "t5", _hf_t5, dense_bytes=lambda t, h: 8 * h * t * t + 8 * t * t),
    )
}


# ---------------------------------------------------------------------------------------
# The float64 reference on a sample of query rows


def _paper_slopes(heads: int) -> Tensor:
    """ALiBi slopes from the paper's rule (Press et al.; non-powers of two as in its code)."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(heads).is_integer():
        return torch.tensor(power_of_two(heads), dtype=torch.float64)
    closest = 2 ** math.floor(math.log2(heads))
    extra = power_of_two(2 * closest)[0::2][: heads - closest]
    return torch.tensor(power_of_two(closest) + extra, dtype=torch.float64)


def check_rows(length: int) -> Tensor:
    """The query rows compared with the reference: the first and last ``CHECK_ROWS`` and some between."""
    rows = torch.cat(
        [
            torch.arange(min(CHECK_ROWS, length)),
            torch.linspace(0, length - 1, CHECK_ROWS).long(),
            torch.arange(max(length - CHECK_ROWS, 0), length),
        ]
    )
    return torch.unique(rows)


def reference_rows(ctx: Context, encoding: str | None, rows: Tensor) -> Tensor:
    """Causal attention for the given query rows in float64, bias from the formulas.

    Returns:
        ``(1, h, len(rows), dh)`` float64.
    """
    from transformers.models.t5.modeling_t5 import T5Attention

    q = ctx.q[:, :, rows].double()
    k, v = ctx.k.double(), ctx.v.double()
    t = ctx.length
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (1, h, r, t)
    relative = torch.arange(t)[None, :] - rows[:, None]  # (r, t): k_pos - q_pos
    if encoding == "alibi":
        scores = scores + _paper_slopes(ctx.heads).view(1, -1, 1, 1) * relative.double()
    elif encoding == "t5":
        buckets = T5Attention._relative_position_bucket(
            relative, bidirectional=False, num_buckets=ctx.t5.num_buckets, max_distance=ctx.t5.max_distance
        )
        table = ctx.t5.relative_attention_bias.weight.detach().double()  # (buckets, h)
        scores = scores + table[buckets].permute(2, 0, 1).unsqueeze(0)
    scores = scores.masked_fill(relative > 0, float("-inf"))
    return scores.softmax(-1) @ v


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


def bias_tables(bias: dict[str, Any], *, markdown: bool) -> str:
    """The bias results as tables: time (and x bias-free SDPA) per length and path; peak memory."""
    results = bias["results"]
    paths: list[str] = []
    for row in results:
        if row["path"] not in paths:
            paths.append(row["path"])
    by_length: dict[int, dict[str, dict[str, Any]]] = {}
    for row in results:
        by_length.setdefault(row["length"], {})[row["path"]] = row

    def cell(row: dict[str, Any] | None) -> str:
        if row is None:
            return "-"
        if row.get("error"):
            return "error"
        if row.get("skipped"):
            return "skipped"
        text = f"{fmt_ms(row['median_ms'])} ms ({fmt(row.get('x_baseline'))}x)"
        if row.get("check_ok") is False:
            text += " wrong"
        return text

    body = [[t, *[cell(group.get(p)) for p in paths]] for t, group in by_length.items()]
    config = bias["config"]
    lines = [
        f"Causal attention, B=1, H={config['heads']}, Dh={config['head_dim']}, float32, no_grad, "
        f"torch {bias.get('torch', '?')}, {threads_text(bias.get('threads'))}: "
        f"median time (x bias-free causal SDPA)",
        format_table(["t", *paths], body, markdown=markdown),
    ]
    notes = sorted({f"{r['path']}: {r['skipped']}" for r in results if r.get("skipped")})
    notes += sorted({f"{r['path']} t={r['length']}: {r['error']}" for r in results if r.get("error")})
    dense = [r for r in results if r.get("mask_build_ms") is not None and not r.get("skipped")]
    if dense:
        notes.append(
            "alibi dense mask: time excludes building the mask, once per forward: "
            + ", ".join(f"t={r['length']} {r['mask_build_ms']:.0f} ms" for r in dense)
        )
    wrong = [r for r in results if r.get("check_ok") is False]
    notes += [
        f"{r['path']} t={r['length']}: output differs from the reference ({r['check_error']:.3g})"
        for r in wrong
    ]
    if notes:
        lines += ["", *[f"- {n}" for n in notes]]
    if bias.get("memory"):
        memory_body = []
        for entry in bias["memory"]:
            if "peak_above_inputs_bytes" in entry:
                peak = format_bytes(entry["peak_above_inputs_bytes"])
                frac = f"{entry['fraction_of_hhtt']:.3f}"
            else:
                peak = entry.get("skipped") or entry.get("error") or "-"
                frac = "-"
            memory_body.append(
                [entry["path"], entry["length"], peak, format_bytes(entry["hhtt_float32_bytes"]), frac]
            )
        lines += [
            "",
            f"Peak memory above the inputs (torch {bias.get('torch', '?')}, {threads_text(bias.get('threads'))}, "
            "fresh process per case, peak RSS; includes building any mask)",
            format_table(
                ["path", "t", "peak above inputs", "one (h, t, t) float32", "fraction"],
                memory_body,
                markdown=markdown,
            ),
        ]
    return "\n".join(lines)


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
