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
gradients) is compared with a float64 reference written here from the formula; a failing
check is reported next to the time, never hidden.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, Literal

import torch
from torch import Tensor

from .baseline import DEFAULT_MAX_RATIO, run_clone_scaling, scaling_table
from .common import fmt, fmt_ms, format_table, ratio, threads_text, time_interleaved

__all__ = [
    "EAGER_TARGET_IMPLEMENTATIONS",
    "TARGET_SHAPES",
    "RopeConfig",
    "reference_rope",
    "rope_tables",
    "run_rope",
]

Layout = Literal["half", "interleaved"]
Pass = Literal["forward", "forward+backward"]
Mode = Literal["eager", "compile"]
Shape = tuple[int, int, int, int]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
CLONE = "clone"
#: Copying into preallocated outputs: the bandwidth limit without the page faults of fresh
#: allocations (forward only). Shown for scale; ratios stay against ``clone``, which pays for
#: its outputs as every out-of-place implementation does.
COPY = "copy_ (preallocated)"
TRANSFORMERS = "transformers"
COMPETITOR = TRANSFORMERS
#: The shapes of the RoPE targets (issue "Lean core"): ``(b, h, t, dh)`` of q and of k.
TARGET_SHAPES: list[Shape] = [(1, 8, 512, 64), (1, 16, 2048, 128), (4, 8, 8192, 64)]
#: The rows that carry the eager targets: posenc as a model calls it (state prepared once per
#: forward, like transformers' cos/sin). Compiled targets use the compiled posenc rows.
EAGER_TARGET_IMPLEMENTATIONS = ("posenc half", "posenc interleaved")
#: A group's clone may differ from the scaling run's clone of the same tensors by this factor
#: before the group is flagged (the same operation, timed a little later in the same process).
CLONE_CONSISTENCY = 2.0


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


# ---------------------------------------------------------------------------------------
# The float64 reference (the formula, written independently of every implementation)


def reference_rope(x: Tensor, positions: Tensor, base: float, layout: Layout) -> Tensor:
    """RoPE from the formula in float64: pairs of channels rotated by ``position * base^(-2i/dh)``.

    Args:
        x: ``(b h t dh)``.
        positions: ``(t,)`` positions (negate them to rotate backwards, i.e. the gradient).
        base: the RoPE base.
        layout: ``"half"`` pairs channel ``i`` with ``i + dh/2`` (GPT-NeoX, Llama in
            transformers); ``"interleaved"`` pairs ``2i`` with ``2i+1`` (GPT-J, Meta Llama).

    Returns:
        ``(b h t dh)`` in float64.
    """
    x = x.double()
    dh = x.shape[-1]
    inv_freq = base ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)
    angle = positions.double()[:, None] * inv_freq  # (t, dh/2)
    cos, sin = angle.cos(), angle.sin()
    if layout == "half":
        x1, x2 = x[..., : dh // 2], x[..., dh // 2 :]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)


def check_tolerance(dtype: torch.dtype, max_position: int) -> float:
    """Allowed ``max|out - ref| / max|ref|`` of an implementation against :func:`reference_rope`.

    Two parts: the rounding of the output dtype (a few ulps), and the angles, which every
    implementation computes in float32 as ``position * inv_freq`` (relative error a few
    ``2^-24``, so an absolute angle error growing with the position). A wrong layout, sign or
    frequency gives errors of order 1, far above this.
    """
    return 8 * torch.finfo(dtype).eps + 8 * 2.0**-24 * max(max_position, 1)


# ---------------------------------------------------------------------------------------
# Implementations: one instance per head_dim and dtype, reused across lengths (as in a model)


@dataclasses.dataclass
class Implementation:
    """One RoPE implementation: its layout, how to build it, and whether it may be compiled."""

    name: str
    layout: Layout
    # (head_dim, dtype, base, max_len) -> apply(q, k) -> (q', k') for any length <= max_len
    factory: Callable[[int, torch.dtype, float, int], Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]]
    compile: bool
    fullgraph: bool = False
    note: str = ""


def _posenc_factory(layout: Layout):
    def factory(head_dim: int, dtype: torch.dtype, base: float, max_len: int):
        import posenc

        rope = posenc.RoPE(head_dim, base=base, layout=layout)
        return rope.encode_qk

    return factory


def _posenc_prepared_factory(layout: Layout):
    def factory(head_dim: int, dtype: torch.dtype, base: float, max_len: int):
        import posenc

        rope = posenc.RoPE(head_dim, base=base, layout=layout)
        states: dict[int, Any] = {}

        def apply(q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
            # Prepared once per length, as a model prepares once per forward; only the first
            # (untimed) call of a length pays for it.
            t = q.shape[-2]
            if t not in states:
                states[t] = rope.prepare(t)
            return states[t].encode_qk(q, k)

        return apply

    return factory


def _transformers_factory(head_dim: int, dtype: torch.dtype, base: float, max_len: int):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    config = LlamaConfig(
        hidden_size=8 * head_dim,
        num_attention_heads=8,
        head_dim=head_dim,
        max_position_embeddings=max_len,
        rope_parameters={"rope_type": "default", "rope_theta": base},
    )
    rotary = LlamaRotaryEmbedding(config)
    # As the model does: cos/sin once per forward, in the input dtype, shared by every layer.
    cos, sin = rotary(torch.empty(0, dtype=dtype), torch.arange(max_len)[None])

    def apply(q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        t = q.shape[-2]
        return apply_rotary_pos_emb(q, k, cos[:, :t], sin[:, :t])

    return apply


def _rotary_embedding_torch_factory(head_dim: int, dtype: torch.dtype, base: float, max_len: int):
    from rotary_embedding_torch import RotaryEmbedding

    rotary = RotaryEmbedding(dim=head_dim, theta=base, cache_max_seq_len=max(max_len, 8192))

    def apply(q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return rotary.rotate_queries_or_keys(q), rotary.rotate_queries_or_keys(k)

    return apply


def _complex_factory(head_dim: int, dtype: torch.dtype, base: float, max_len: int):
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angle = torch.outer(torch.arange(max_len, dtype=torch.float32), inv_freq)
    freqs_cis = torch.polar(torch.ones_like(angle), angle)  # (t, dh/2) complex64, computed once

    def rotate(x: Tensor) -> Tensor:
        # Meta Llama: channel pairs (2i, 2i+1) as complex numbers, multiplied by e^{i theta}.
        x_complex = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(x_complex * freqs_cis[: x.shape[-2]]).flatten(-2).type_as(x)

    def apply(q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return rotate(q), rotate(k)

    return apply


_PREPARED_NOTE = (
    "state = RoPE.prepare(t) outside the timed region (once per forward in a model, like "
    "transformers' cos/sin), state.encode_qk(q, k) timed; carries the eager targets; not compiled"
)
_UNPREPARED_NOTE = (
    "RoPE.encode_qk(q, k) timed with nothing prepared (positions, cos/sin rows and their "
    "apply-ready form on every call); shown, not judged, in eager mode; the compiled posenc rows"
)

IMPLEMENTATIONS: dict[str, Implementation] = {
    impl.name: impl
    for impl in (
        Implementation(
            "posenc half",
            "half",
            _posenc_prepared_factory("half"),
            compile=False,
            note=_PREPARED_NOTE,
        ),
        Implementation(
            "posenc interleaved",
            "interleaved",
            _posenc_prepared_factory("interleaved"),
            compile=False,
            note=_PREPARED_NOTE,
        ),
        Implementation(
            "posenc half, unprepared",
            "half",
            _posenc_factory("half"),
            compile=True,
            fullgraph=True,
            note=_UNPREPARED_NOTE,
        ),
        Implementation(
            "posenc interleaved, unprepared",
            "interleaved",
            _posenc_factory("interleaved"),
            compile=True,
            fullgraph=True,
            note=_UNPREPARED_NOTE,
        ),
        Implementation(
            TRANSFORMERS,
            "half",
            _transformers_factory,
            compile=True,
            note="Llama apply_rotary_pos_emb; cos/sin precomputed by LlamaRotaryEmbedding, apply timed",
        ),
        Implementation(
            "rotary-embedding-torch",
            "interleaved",
            _rotary_embedding_torch_factory,
            compile=False,
            note="rotate_queries_or_keys on q and k; not compiled (it recompiles for every length)",
        ),
        Implementation(
            "complex multiply",
            "interleaved",
            _complex_factory,
            compile=False,
            note="Meta Llama view_as_complex x freqs_cis (freqs_cis precomputed), written in the benchmark; "
            "not compiled (inductor has no code generation for complex operators and falls back)",
        ),
    )
}


class _CopyBoth(torch.autograd.Function):
    """The memory limit of forward+backward: copy q and k forward, copy their gradients back."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return q.clone(), k.clone()

    @staticmethod
    def backward(ctx, grad_q: Tensor, grad_k: Tensor) -> tuple[Tensor, Tensor]:
        return grad_q.clone(), grad_k.clone()


def _clone_limit(q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    if q.requires_grad or k.requires_grad:
        return _CopyBoth.apply(q, k)
    return q.clone(), k.clone()


def _step(apply: Callable, q: Tensor, k: Tensor, grads: tuple[Tensor, Tensor] | None) -> Callable[[], object]:
    """The timed callable: forward only, or forward then the gradients w.r.t. q and k."""
    if grads is None:
        return lambda: apply(q, k)

    def forward_backward():
        out_q, out_k = apply(q, k)
        return torch.autograd.grad((out_q, out_k), (q, k), grads)

    return forward_backward


def _relative_error(out: Tensor, ref: Tensor) -> float:
    return float((out.detach().double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def _check(
    apply: Callable, layout: Layout, q: Tensor, k: Tensor, grads: tuple[Tensor, Tensor] | None, base: float
) -> float:
    """The largest relative error of outputs (and gradients) against :func:`reference_rope`."""
    positions = torch.arange(q.shape[-2])
    out_q, out_k = apply(q, k)
    errors = [
        _relative_error(out_q, reference_rope(q.detach(), positions, base, layout)),
        _relative_error(out_k, reference_rope(k.detach(), positions, base, layout)),
    ]
    if grads is not None:
        grad_q, grad_k = torch.autograd.grad((out_q, out_k), (q, k), grads)
        # The gradient of a rotation by theta is the rotation of the output gradient by -theta.
        errors.append(_relative_error(grad_q, reference_rope(grads[0], -positions, base, layout)))
        errors.append(_relative_error(grad_k, reference_rope(grads[1], -positions, base, layout)))
    return max(errors)


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


def _shape_str(shape: Shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ")"


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


def rope_tables(rope: dict[str, Any], *, markdown: bool) -> str:
    """The RoPE results as tables: one line per shape, dtype and pass; ``x clone`` per implementation."""
    results = rope["results"]
    lines: list[str] = []
    if rope.get("clone_scaling"):
        lines += [
            f"Clone baseline: q.clone(); k.clone() by size ({threads_text(rope.get('threads'))})",
            scaling_table(rope["clone_scaling"], markdown=markdown),
            "",
        ]
    if not results:
        return "\n".join([*lines, "(no RoPE results)"])
    columns: list[str] = []
    for row in results:
        name = row["implementation"] if row["mode"] == "eager" else row["implementation"] + " [compiled]"
        if name not in columns:
            columns.append(name)
    groups: dict[tuple, dict[str, dict[str, Any]]] = {}
    for row in results:
        key = (tuple(row["shape"]), row["dtype"], row["pass"])
        name = row["implementation"] if row["mode"] == "eager" else row["implementation"] + " [compiled]"
        groups.setdefault(key, {})[name] = row

    def cell(row: dict[str, Any] | None) -> str:
        if row is None:
            return "-"
        if row.get("error"):
            return "error"
        if row["implementation"] == CLONE:
            return f"{fmt_ms(row['median_ms'])} ms"
        text = fmt(row.get("x_clone"))
        if row.get("check_ok") is False:
            text += " (wrong)"
        return text

    headers = [
        "shape (b, h, t, dh)",
        "dtype",
        "pass",
        *[c if c != CLONE else "clone (limit)" for c in columns],
    ]
    body = [
        [_shape_str(key[0]), key[1], key[2], *[cell(group.get(c)) for c in columns]]
        for key, group in groups.items()
    ]
    lines += [
        f"RoPE apply on q and k, {threads_text(rope.get('threads'))}: time / clone limit "
        "(lower is better; clone column: its time)",
        format_table(headers, body, markdown=markdown),
    ]
    speed_rows = []
    for key, group in groups.items():
        speed_rows.append(
            [
                _shape_str(key[0]),
                key[1],
                key[2],
                *[
                    fmt(group[c].get("speedup_vs_transformers")) if c in group else "-"
                    for c in columns
                    if c not in (CLONE, COPY)
                ],
            ]
        )
    lines += [
        "",
        "Speed-up over transformers' apply_rotary_pos_emb in the same mode (higher is better)",
        format_table(
            headers[:3] + [c for c in columns if c not in (CLONE, COPY)], speed_rows, markdown=markdown
        ),
    ]
    if rope.get("compile"):
        compile_body = [
            [
                entry["implementation"],
                _shape_str(tuple(entry["shape"])),
                entry["dtype"],
                entry["pass"],
                fmt(entry.get("compile_s"), 1),
                entry["graphs_compiled"],
            ]
            for entry in rope["compile"]
        ]
        lines += [
            "",
            "One-time torch.compile cost (first call minus the steady time; 0 graphs = no recompile)",
            format_table(
                ["implementation", "shape", "dtype", "pass", "compile s", "graphs"],
                compile_body,
                markdown=markdown,
            ),
        ]
    drifted = [
        r
        for r in results
        if r.get("clone_vs_scaling_run") is not None
        and not 1 / CLONE_CONSISTENCY <= r["clone_vs_scaling_run"] <= CLONE_CONSISTENCY
    ]
    if drifted:
        lines += [
            "",
            f"Clones that took more than {CLONE_CONSISTENCY:g}x more or less time in their group than in the "
            "scaling run (load or allocator state changed between them; that line's ratios rest on the "
            "group's clone):",
        ]
        lines += [
            f"- {_shape_str(tuple(r['shape']))} {r['dtype']}: {r['clone_vs_scaling_run']:.2f}x"
            for r in drifted
        ]
    wrong = [r for r in results if r.get("check_ok") is False]
    if wrong:
        lines += ["", "Outputs that differ from the float64 reference (timed anyway, marked 'wrong'):"]
        lines += [
            f"- {r['implementation']}{' [compiled]' if r['mode'] == 'compile' else ''} {_shape_str(tuple(r['shape']))} "
            f"{r['dtype']} {r['pass']}: relative error {r['check_error']:.3g} > tolerance {r['check_tolerance']:.3g}"
            for r in wrong
        ]
    return "\n".join(lines)
