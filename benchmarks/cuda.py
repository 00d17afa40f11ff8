"""``python -m benchmarks --device cuda``: RoPE and biased causal attention on a GPU.

What is measured is in :mod:`benchmarks.cuda_cases`: RoPE (posenc eager and compiled,
transformers eager and compiled, Liger-Kernel's and flash-attn's kernels when installed) at the
CPU suite's shapes and (4, 32, 8192, 128), and causal ALiBi/T5/KERPLE/FIRE attention through every
posenc path against bias-free SDPA, its FlashAttention kernel and flash-attn; float32 and
bfloat16, forward and forward+backward.

Each time is the median of CUDA-event timings after warm-up (the warm-up includes any compile);
peak memory is ``torch.cuda.max_memory_allocated`` during one more call, above what was allocated
before it (the inputs). Results go to ``benchmarks/results/cuda-<gpu>.md`` with the GPU, driver,
CUDA and torch versions. A row that cannot run (a package not installed, a kernel refusing
float32) says why instead of a time; an error in any row is reported in it, and the run goes on.

Without a GPU the command says so and exits 2 (:func:`gpu_missing`): nothing is measured.
:func:`run` also runs on ``device="cpu"`` at tiny shapes with a given clock (the tests), which
executes every case's code without timing a GPU.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import re
import statistics
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from torch import Tensor

from .common import check_replaceable, write_whole
from .cuda_cases import (
    ATTENTION_SHAPES,
    CHUNK_SHAPES,
    ROPE_SHAPES,
    Impl,
    Shape,
    Skip,
    attention_impls,
    chunk_impls,
    rope_impls,
)
from .rope_impls import _clone_limit

__all__ = ["Row", "gpu_missing", "render", "run", "time_cuda"]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
PASSES = ("forward", "forward+backward")
WARMUP, REPEATS = 5, 30
MIB = 2**20

Timer = Callable[[Callable[[], object]], float]
Peak = Callable[[Callable[[], object]], "float | None"]


def gpu_missing() -> str | None:
    """Why no CUDA GPU can be used here, or ``None`` when one can."""
    if not torch.backends.cuda.is_built() or torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU build: no CUDA support, so no GPU can be used"
    if not torch.cuda.is_available():
        return f"no CUDA GPU on this machine (torch {torch.__version__}, CUDA {torch.version.cuda} build)"
    return None


def _driver() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return out.stdout.strip().splitlines()[0] if out.stdout.strip() else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown (nvidia-smi not found)"


def time_cuda(fn: Callable[[], object], *, warmup: int = WARMUP, repeats: int = REPEATS) -> float:
    """Median milliseconds of ``fn`` timed with CUDA events (after ``warmup`` untimed calls)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def peak_cuda(fn: Callable[[], object]) -> float:
    """MiB that one call of ``fn`` allocates at its peak, above what was allocated before it."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / MIB


@dataclasses.dataclass
class Row:
    """One measured (or skipped) row: ``ms`` and ``ratio`` are ``None`` when ``note`` says why."""

    section: str  # "rope" or "attention"
    shape: Shape
    dtype: str
    pass_: str
    label: str
    ms: float | None = None
    ratio: float | None = None  # time / the group's baseline (clone of q and k; bias-free SDPA)
    peak_mib: float | None = None
    max_diff: float | None = None  # forward only: max |output - the reference row's output|
    note: str = ""


def _step(
    apply: Callable[..., tuple[Tensor, ...]], inputs: tuple[Tensor, ...], params: list[Tensor], backward: bool
):
    """The timed call: the forward, or the forward and the gradients of inputs and parameters."""
    if not backward:

        def forward() -> object:
            with torch.no_grad():
                return apply(*inputs)

        return forward
    leaves = [*inputs, *params]
    grads = [torch.randn_like(out) for out in apply(*inputs)]

    def forward_backward() -> object:
        return torch.autograd.grad(apply(*inputs), leaves, grads)

    return forward_backward


def _measure_group(
    section: str,
    shape: Shape,
    dtype_name: str,
    pass_: str,
    impls: list[Impl],
    inputs: tuple[Tensor, ...],
    device: torch.device,
    timer: Timer,
    peak: Peak,
    compile_backend: str,
    log: Callable[[str], None],
) -> list[Row]:
    backward = pass_ == "forward+backward"
    rows: list[Row] = []
    base_ms: float | None = None
    reference: tuple[Tensor, ...] | None = None
    if section == "rope":  # the memory-bound floor: a copy of q and k (and of their gradients)
        base_ms = timer(_step(_clone_limit, inputs, [], backward))
        rows.append(Row(section, shape, dtype_name, pass_, "clone of q and k", base_ms, 1.0))
    for impl in impls:
        row = Row(section, shape, dtype_name, pass_, impl.label)
        rows.append(row)
        row.note = impl.missing() or ""
        if row.note:
            continue
        try:
            apply, params = impl.build(shape, DTYPES[dtype_name], device, compile_backend)
            step = _step(apply, inputs, params, backward)
            row.ms = timer(step)
            row.peak_mib = peak(step)
            if not backward:
                with torch.no_grad():
                    outputs = tuple(out.float() for out in apply(*inputs))
                if impl.reference:
                    reference = outputs
                elif reference is not None:
                    row.max_diff = max(
                        (o - r).abs().max().item() for o, r in zip(outputs, reference, strict=True)
                    )
        except Skip as skip:
            row.note = str(skip)
        except Exception as exc:  # reported in the row; the other rows still run
            row.note = f"error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
        if impl.baseline and row.ms is not None:
            base_ms = row.ms
        log(f"{section} {shape} {dtype_name} {pass_} | {impl.label} | {row.ms} ms | {row.note}")
    for row in rows:
        if row.ms is not None and base_ms:
            row.ratio = row.ms / base_ms
    return rows


def measure(
    device: torch.device,
    *,
    rope_shapes: Iterable[Shape] = ROPE_SHAPES,
    attention_shapes: Iterable[Shape] = ATTENTION_SHAPES,
    rope: list[Impl] | None = None,
    attention: list[Impl] | None = None,
    dtypes: Iterable[str] = DTYPES,
    passes: Iterable[str] = PASSES,
    timer: Timer = time_cuda,
    peak: Peak = peak_cuda,
    compile_backend: str = "inductor",
    log: Callable[[str], None] = print,
    progress: Callable[[list[Row]], None] | None = None,
    only: str | None = None,
) -> list[Row]:
    """Every row of both sections (or of the section ``only``) on ``device``; ``progress`` gets the
    rows so far after each group."""
    rope = rope_impls() if rope is None else rope
    attention = attention_impls() if attention is None else attention
    rows: list[Row] = []
    for section, shapes, impls, count in (
        ("rope", rope_shapes, rope, 2),
        ("attention", attention_shapes, attention, 3),
    ):
        if only not in (None, section):
            continue
        for shape in shapes:
            for dtype_name in dtypes:
                generator = torch.Generator().manual_seed(0)
                drawn = [torch.randn(shape, generator=generator) for _ in range(count)]
                for pass_ in passes:
                    inputs = tuple(
                        x.to(device, DTYPES[dtype_name]).requires_grad_(pass_ != "forward") for x in drawn
                    )
                    rows += _measure_group(
                        section,
                        shape,
                        dtype_name,
                        pass_,
                        impls,
                        inputs,
                        device,
                        timer,
                        peak,
                        compile_backend,
                        log,
                    )
                    del inputs
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                    if progress is not None:
                        progress(rows)
    return rows


def _cell(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def render(rows: list[Row], header: list[str]) -> str:
    """The markdown report: ``header`` lines, then one table per section."""
    titles = {
        "rope": ("RoPE on q and k", "× clone"),
        "attention": ("Causal attention with a position bias", "× SDPA (no bias)"),
    }
    lines = [*header]
    for section, (title, ratio_name) in titles.items():
        chosen = [r for r in rows if r.section == section]
        if not chosen:
            continue
        lines += [
            "",
            f"## {title}",
            "",
            f"| shape (b, h, t, dh) | dtype | pass | implementation | ms | {ratio_name} | peak MiB | max abs diff |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in chosen:
            ms = _cell(r.ms, 3) if r.ms is not None else r.note
            cells = [str(r.shape), r.dtype, r.pass_, r.label, ms, _cell(r.ratio, 2), _cell(r.peak_mib, 1)]
            cells.append("" if r.max_diff is None else f"{r.max_diff:.2e}")
            if r.ms is not None and r.note:
                cells[4] += f" ({r.note})"
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def describe(device: torch.device, warmup: int = WARMUP, repeats: int = REPEATS) -> tuple[str, list[str]]:
    """(the device's name, the report's header lines)."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        machine = f"GPU: {name}; driver {_driver()}; CUDA {torch.version.cuda}; torch {torch.__version__}"
    else:
        name = f"{device.type} smoke"
        machine = f"device: {device} (a smoke run of the cases: not GPU figures); torch {torch.__version__}"
    packages = ", ".join(
        f"{p} {_version(p)}" for p in ("transformers", "triton", "liger-kernel", "flash-attn")
    )
    return name, [
        "# posenc on a GPU: RoPE and biased causal attention",
        "",
        f"- {machine}",
        f"- {packages}",
        f"- time: median of {repeats} CUDA-event timings after {warmup} warm-up calls (compiles included in"
        " the warm-up); peak MiB: torch.cuda.max_memory_allocated during one call, above the inputs",
        "- max abs diff: forward outputs against the reference row (posenc's eager RoPE; posenc's"
        " backend='sdpa' for each bias), in float32",
        "- forward+backward: gradients of the inputs and of the encoding's parameters",
    ]


def run(
    out_dir: Path, log: Callable[[str], None] = print, *, device: torch.device | None = None, **options
) -> Path:
    """Measure every row on ``device`` (default ``cuda``); write the report and return its path.

    ``options`` go to :func:`measure` (shapes, implementations, dtypes, passes, timer, peak,
    compile backend, ``only`` one section: then the file is ``cuda-<gpu>-<section>.md``).
    ``only="chunks"`` is the attention section reduced to :func:`~benchmarks.cuda_cases.chunk_impls`
    at :data:`~benchmarks.cuda_cases.CHUNK_SHAPES` in bfloat16, 10 timings after 3 warm-up calls
    (a few minutes: what a GPU lease allows), written to ``cuda-<gpu>-chunks.md``.
    """
    device = torch.device("cuda") if device is None else device
    label = options.get("only")
    warmup, repeats = (3, 10) if label == "chunks" else (WARMUP, REPEATS)
    if label == "chunks":
        preset = {"attention": chunk_impls(), "attention_shapes": CHUNK_SHAPES, "dtypes": ("bfloat16",)}
        timer = functools.partial(time_cuda, warmup=warmup, repeats=repeats)
        options = {**preset, "timer": timer, **options, "only": "attention"}
    name, header = describe(device, warmup, repeats)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = "-".join(filter(None, ["cuda", name, label]))
    path = check_replaceable(out_dir / f"{re.sub(r'[^A-Za-z0-9]+', '-', stem).strip('-').lower()}.md")
    # rewritten after every group into a file of its own, so that a run stopped part way (a time limit, a
    # crash) keeps what it measured, marked as such, and leaves the report of an earlier finished run whole
    partial = path.with_name(f"{path.stem}.unfinished.md")
    unfinished = [*header, "- **unfinished**: the run stopped before every row below was measured"]
    rows = measure(
        device, log=log, progress=lambda rows: partial.write_text(render(rows, unfinished)), **options
    )
    write_whole(path, render(rows, header))
    partial.unlink(missing_ok=True)
    return path
