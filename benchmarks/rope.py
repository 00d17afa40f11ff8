"""RoPE benchmark: posenc's ``RoPE.encode_qk`` against the rotary code people use today.

Implementations compared on the same ``q, k`` of shape ``(b, h, t, dh)``, positions ``0..t-1``:

* ``posenc half`` / ``posenc interleaved`` — the two layouts as a model uses them: ``state =
  rope.prepare(t)`` once per length, outside the timed region (a model does it once per
  forward, like transformers' cos/sin), then ``state.encode_qk(q, k)`` timed. The state keeps
  its cos/sin rows in float32 and builds their apply-ready form for the input dtype on its
  first call (a warm-up call): the timed calls are what every layer of a model pays. These
  rows carry the eager targets;
* ``posenc half, unprepared`` / ``posenc interleaved, unprepared`` — :meth:`posenc.RoPE.encode_qk`
  with nothing prepared: positions, rows and their apply-ready form on every call (what
  hand-written code calling the module per layer pays). These are also the compiled rows;
* ``transformers`` — Llama's ``apply_rotary_pos_emb`` (half layout). Its ``cos``/``sin`` are
  computed once beforehand by ``LlamaRotaryEmbedding`` exactly as the model does (in the input
  dtype), and only the apply is timed: in a model they are computed once per forward and shared
  by every layer, so this is transformers' best case per layer;
* ``rotary-embedding-torch`` — ``RotaryEmbedding(dh).rotate_queries_or_keys`` on q and on k
  (interleaved layout; it caches its angles but takes cos/sin on every call, as in real use);
* ``complex multiply`` — Meta Llama's formulation (interleaved layout), written here:
  ``view_as_complex(x.float()) * freqs_cis`` with ``freqs_cis`` precomputed once;
* ``clone`` — ``q.clone(); k.clone()``, the memory-traffic limit (one read and one write of q
  and k). For forward+backward the limit copies in the backward too (one read and one write
  of the gradients), through the same autograd machinery as the others. For scale, the
  forward also shows ``copy_ (preallocated)``: the same copy into outputs allocated once,
  without the page faults a fresh allocation costs (glibc maps allocations above 32 MiB
  afresh on every call, so the clone of a large tensor pays them, as every out-of-place
  implementation does).

Threads: the section runs with ``torch.set_num_threads(1)`` by default (``RopeConfig.threads``):
these are memory-bound operations of a millisecond or less, and with several threads on a
loaded machine their medians measure the scheduler, not the memory. Before the groups, the
clone is timed at every shape and dtype and checked to scale with the bytes it moves
(:mod:`benchmarks.baseline`); if it does not, every ratio to it is flagged unreliable.

Forward+backward times ``torch.autograd.grad`` of the outputs w.r.t. ``q`` and ``k`` (no
gradient accumulation). Compiled variants use ``torch.compile(dynamic=True)``; their one-time
compile cost (first call minus the steady median) is reported separately.

Before anything is timed, every implementation's output (and, for forward+backward, its
gradients) is compared with a float64 reference written from the formula
(:mod:`benchmarks.rope_impls`); a failing check is reported next to the time, never hidden.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, Literal

import torch

from .baseline import DEFAULT_MAX_RATIO, run_clone_scaling
from .common import fmt, ratio, time_interleaved
from .rope_impls import _PREPARED_NOTE as _PREPARED_NOTE
from .rope_impls import _UNPREPARED_NOTE as _UNPREPARED_NOTE
from .rope_impls import (
    CLONE,
    CLONE_CONSISTENCY,
    COPY,
    DTYPES,
    IMPLEMENTATIONS,
    TRANSFORMERS,
    Implementation,
    Shape,
    _check,
    _clone_limit,
    _shape_str,
    _step,
    check_tolerance,
    reference_rope,
)
from .rope_impls import Layout as Layout
from .rope_impls import _complex_factory as _complex_factory
from .rope_impls import _CopyBoth as _CopyBoth
from .rope_impls import _posenc_factory as _posenc_factory
from .rope_impls import _posenc_prepared_factory as _posenc_prepared_factory
from .rope_impls import _relative_error as _relative_error
from .rope_impls import _rotary_embedding_torch_factory as _rotary_embedding_torch_factory
from .rope_impls import _transformers_factory as _transformers_factory
from .rope_report import rope_tables

# What is compared (rope_impls), the reference and the tables (rope_report) moved out; every name
# once defined here stays importable from here (the "as" imports re-export private names).
__all__ = [
    "EAGER_TARGET_IMPLEMENTATIONS",
    "TARGET_SHAPES",
    "RopeConfig",
    "reference_rope",
    "rope_tables",
    "run_rope",
]


Pass = Literal["forward", "forward+backward"]
Mode = Literal["eager", "compile"]
COMPETITOR = TRANSFORMERS
#: The shapes of the RoPE targets (issue "Lean core"): ``(b, h, t, dh)`` of q and of k.
TARGET_SHAPES: list[Shape] = [(1, 8, 512, 64), (1, 16, 2048, 128), (4, 8, 8192, 64)]
#: The rows that carry the eager targets: posenc as a model calls it (state prepared once per
#: forward, like transformers' cos/sin). Compiled targets use the compiled posenc rows.
EAGER_TARGET_IMPLEMENTATIONS = ("posenc half", "posenc interleaved")


@dataclasses.dataclass
class RopeConfig:
    """What the RoPE benchmark runs.

    Attributes:
        shapes: ``(b, h, t, dh)`` shapes of q and k.
        dtypes: names in :data:`DTYPES`.
        passes: ``"forward"`` and/or ``"forward+backward"``.
        modes: ``"eager"`` and/or ``"compile"``.
        implementations: names to run (``None``: all); ``clone`` always runs.
        base: the RoPE base (theta).
        reps, warmup, min_sample_s, budget_s: see :func:`benchmarks.common.time_interleaved`
            (``budget_s`` is per group of one shape, dtype and pass).
        compile_dynamic: ``dynamic=`` for ``torch.compile``.
        threads: torch threads of the section (``None``: every usable CPU).
        clone_scaling: time the clone at every shape and dtype first and check it scales with
            bytes (:func:`benchmarks.baseline.scaling_check`).
        scaling_max_ratio: the check's limit on time per byte (smaller over larger size).
        scaling_shapes: the shapes of that check (``None``: ``shapes``), each in every dtype.
    """

    shapes: list[Shape] = dataclasses.field(default_factory=lambda: list(TARGET_SHAPES))
    dtypes: list[str] = dataclasses.field(default_factory=lambda: ["float32", "bfloat16"])
    passes: list[Pass] = dataclasses.field(default_factory=lambda: ["forward", "forward+backward"])
    modes: list[Mode] = dataclasses.field(default_factory=lambda: ["eager", "compile"])
    implementations: list[str] | None = None
    base: float = 10000.0
    reps: int = 15
    warmup: int = 2
    min_sample_s: float = 0.01
    budget_s: float = 8.0
    compile_dynamic: bool = True
    threads: int | None = 1
    clone_scaling: bool = True
    scaling_max_ratio: float = DEFAULT_MAX_RATIO
    scaling_shapes: list[Shape] | None = None


def _dynamo_graph_count() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def _raise_recompile_limit() -> None:
    # Every (implementation, dtype, pass, batch-of-one or not) is a guard set on shared code
    # objects; the default limit of 8 would silently fall back to eager.
    config = torch._dynamo.config
    for attr in ("recompile_limit", "cache_size_limit"):
        if hasattr(config, attr):
            setattr(config, attr, max(getattr(config, attr), 256))
    if hasattr(config, "accumulated_recompile_limit"):
        config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, 4096)


def run_rope(config: RopeConfig, *, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the RoPE benchmark in the current torch thread setting.

    Args:
        config: what to run (``config.threads`` is applied by :func:`benchmarks.run_suite`).
        log: where progress lines go.

    Returns:
        ``{"config", "threads", "clone_scaling", "results", "compile", "notes"}``; each result
        row has ``shape, dtype, pass, mode, implementation, layout``, the timing stats,
        ``x_clone`` (time / clone limit), ``speedup_vs_transformers`` (transformers' time in the
        same mode / this time), ``check_error``, ``check_tolerance``, ``check_ok`` and ``error``;
        clone rows also have ``clone_vs_scaling_run`` (this group's clone / the scaling run's).
    """
    wanted = config.implementations or list(IMPLEMENTATIONS)
    unknown = sorted(set(wanted) - set(IMPLEMENTATIONS))
    if unknown:
        raise ValueError(f"unknown RoPE implementations {unknown}; known: {sorted(IMPLEMENTATIONS)}")
    if "compile" in config.modes:
        _raise_recompile_limit()
    impls = [IMPLEMENTATIONS[name] for name in wanted]
    results: list[dict[str, Any]] = []
    compile_rows: list[dict[str, Any]] = []
    compiled_fns: dict[tuple[str, int, str, str], Callable] = {}
    instances: dict[tuple[str, int, str], Callable] = {}
    max_len: dict[int, int] = {}
    for shape in config.shapes:
        max_len[shape[-1]] = max(max_len.get(shape[-1], 0), shape[-2])

    def instance(impl: Implementation, head_dim: int, dtype_name: str) -> Callable:
        # One instance per head_dim and dtype, reused across lengths as a model would; one
        # call at the longest length first, so caches are warm and never grow in a compiled graph.
        key = (impl.name, head_dim, dtype_name)
        if key not in instances:
            apply = impl.factory(head_dim, DTYPES[dtype_name], config.base, max_len[head_dim])
            probe = torch.zeros(1, 1, max_len[head_dim], head_dim, dtype=DTYPES[dtype_name])
            apply(probe, probe)
            instances[key] = apply
        return instances[key]

    scaling = None
    if config.clone_scaling:
        scaling = run_clone_scaling(
            config.scaling_shapes or config.shapes,
            {name: DTYPES[name] for name in config.dtypes},
            reps=config.reps,
            min_sample_s=config.min_sample_s,
            budget_s=config.budget_s,
            max_ratio=config.scaling_max_ratio,
            log=log,
        )
    scaling_clone_ms = {
        (tuple(c["shape"]), c["dtype"]): c["median_ms"] for c in (scaling or {}).get("cases", [])
    }

    generator = torch.Generator().manual_seed(0)
    for dtype_name in config.dtypes:
        dtype = DTYPES[dtype_name]
        for shape in config.shapes:
            q0 = torch.randn(shape, generator=generator).to(dtype)
            k0 = torch.randn(shape, generator=generator).to(dtype)
            g0 = (
                torch.randn(shape, generator=generator).to(dtype),
                torch.randn(shape, generator=generator).to(dtype),
            )
            tol = check_tolerance(dtype, shape[2] - 1)
            for pass_name in config.passes:
                backward = pass_name == "forward+backward"
                q = q0.clone().requires_grad_(backward)
                k = k0.clone().requires_grad_(backward)
                grads = g0 if backward else None
                label = f"{_shape_str(shape)} {dtype_name} {pass_name}"
                log(f"[rope] {label}")
                fns: dict[str, Callable[[], object]] = {CLONE: _step(_clone_limit, q, k, grads)}
                rows: dict[str, dict[str, Any]] = {
                    CLONE: {"implementation": CLONE, "mode": "eager", "layout": None, "check_error": None}
                }
                if not backward:
                    out_q, out_k = torch.empty_like(q), torch.empty_like(k)
                    fns[COPY] = lambda q=q, k=k, oq=out_q, ok=out_k: (oq.copy_(q), ok.copy_(k))
                    rows[COPY] = {
                        "implementation": COPY,
                        "mode": "eager",
                        "layout": None,
                        "check_error": None,
                    }
                for impl in impls:
                    for mode in config.modes:
                        if mode == "compile" and not impl.compile:
                            continue
                        name = impl.name if mode == "eager" else f"{impl.name} [compiled]"
                        row = rows[name] = {
                            "implementation": impl.name,
                            "mode": mode,
                            "layout": impl.layout,
                            "check_error": None,
                            "error": None,
                        }
                        try:
                            apply = instance(impl, shape[-1], dtype_name)
                            if mode == "compile":
                                key = (impl.name, shape[-1], dtype_name, pass_name)
                                if key not in compiled_fns:
                                    compiled_fns[key] = torch.compile(
                                        apply, dynamic=config.compile_dynamic, fullgraph=impl.fullgraph
                                    )
                                compiled = compiled_fns[key]
                                graphs_before = _dynamo_graph_count()
                                start = time.perf_counter()
                                _step(compiled, q, k, grads)()
                                first_call_s = time.perf_counter() - start
                                compile_rows.append(
                                    {
                                        "implementation": impl.name,
                                        "shape": list(shape),
                                        "dtype": dtype_name,
                                        "pass": pass_name,
                                        "first_call_s": first_call_s,
                                        "graphs_compiled": _dynamo_graph_count() - graphs_before,
                                    }
                                )
                                apply = compiled
                            row["check_error"] = _check(apply, impl.layout, q, k, grads, config.base)
                            row["check_ok"] = row["check_error"] <= tol
                            fns[name] = _step(apply, q, k, grads)
                        except Exception as exc:  # a failing competitor is reported, not fatal
                            row["error"] = (
                                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                            )
                            log(f"  {name}: {row['error']}")
                stats = time_interleaved(
                    fns,
                    reps=config.reps,
                    warmup=config.warmup,
                    min_sample_s=config.min_sample_s,
                    budget_s=config.budget_s,
                )
                clone_s = stats[CLONE].median
                for name, row in rows.items():
                    st = stats.get(name)
                    row.update(
                        {
                            "shape": list(shape),
                            "dtype": dtype_name,
                            "pass": pass_name,
                            "check_tolerance": tol,
                            **(st.as_dict() if st else {}),
                        }
                    )
                    row["x_clone"] = ratio(st.median, clone_s) if st else None
                    competitor = stats.get(
                        COMPETITOR if row["mode"] == "eager" else f"{COMPETITOR} [compiled]"
                    )
                    row["speedup_vs_transformers"] = (
                        ratio(competitor.median, st.median) if (st and competitor) else None
                    )
                    results.append(row)
                reference_ms = scaling_clone_ms.get((tuple(shape), dtype_name))
                if not backward and reference_ms:
                    consistency = stats[CLONE].median * 1e3 / reference_ms
                    rows[CLONE]["clone_vs_scaling_run"] = consistency
                    if not 1 / CLONE_CONSISTENCY <= consistency <= CLONE_CONSISTENCY:
                        log(f"  clone took {consistency:.2f}x its time in the scaling run")
                for entry in compile_rows:
                    if (
                        entry["shape"] == list(shape)
                        and entry["dtype"] == dtype_name
                        and entry["pass"] == pass_name
                    ):
                        name = f"{entry['implementation']} [compiled]"
                        if name in stats:
                            entry["steady_ms"] = stats[name].median * 1e3
                            entry["compile_s"] = max(entry["first_call_s"] - stats[name].median, 0.0)
                log(
                    "  "
                    + ", ".join(
                        f"{name} {fmt(rows[name]['x_clone'])}x"
                        for name in rows
                        if rows[name].get("x_clone") is not None
                    )
                )
    return {
        "config": dataclasses.asdict(config),
        "threads": torch.get_num_threads(),
        "clone_scaling": scaling,
        "results": results,
        "compile": compile_rows,
        "notes": [impl.name + ": " + impl.note for impl in impls if impl.note],
    }
