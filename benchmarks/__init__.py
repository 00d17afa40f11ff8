"""posenc's benchmark suite: RoPE against the rotary code in use today, bias attention at long length.

Run it with ``python -m benchmarks`` (``--quick`` for a short run, ``--only rope|bias``,
``--out DIR``); it prints tables and writes ``latest.json`` and ``latest.md`` to
``benchmarks/results/``. See :mod:`benchmarks.common` for the timing and memory method,
:mod:`benchmarks.rope` and :mod:`benchmarks.bias` for what is compared.

Nothing here is a timed test: the tests check the suite's structure and its correctness
checks; speed is reported, with each of issue 7's targets marked met or not met.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import torch

from . import bias as bias_module
from .bias import BiasConfig, bias_tables, run_bias
from .common import fmt, format_bytes, format_table, machine_info, set_threads, write_json
from .rope import RopeConfig, rope_tables, run_rope

__all__ = [
    "BiasConfig",
    "RopeConfig",
    "SuiteConfig",
    "evaluate_targets",
    "preset",
    "render",
    "run_suite",
]

Preset = Literal["full", "quick"]
RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclasses.dataclass
class SuiteConfig:
    """The whole suite: ``None`` for a part that does not run."""

    name: str
    rope: RopeConfig | None
    bias: BiasConfig | None


def preset(name: Preset) -> SuiteConfig:
    """The ``full`` run (about 15 minutes on a 2-core CPU) or the ``quick`` one (a few minutes)."""
    if name == "full":
        rope = RopeConfig(
            shapes=[(1, 8, 512, 64), (1, 8, 2048, 64), (1, 32, 2048, 128), (4, 8, 8192, 64)],
            reps=15,
            budget_s=5.0,
        )
        bias = BiasConfig(
            lengths=[1024, 2048, 4096, 8192, 16384],
            max_len={
                bias_module.HF_T5: 4096,
                bias_module.XT_T5: 4096,
                bias_module.XT_ALIBI: 4096,
                bias_module.ALIBI_DENSE: 8192,
                # FlexAttention without a block mask computes every (i, j): ~6x SDPA at 8192
                bias_module.POSENC_T5_FLEX: 8192,
            },
            memory_lengths=[4096, 16384],
            reps=10,
            budget_s=15.0,
        )
    elif name == "quick":
        rope = RopeConfig(shapes=[(1, 32, 2048, 128)], reps=7, budget_s=2.0, min_sample_s=0.005)
        bias = BiasConfig(lengths=[1024, 2048], memory_lengths=[2048], reps=5, budget_s=4.0)
    else:
        raise ValueError(f"preset must be 'full' or 'quick', got {name!r}")
    return SuiteConfig(name, rope, bias)


# ---------------------------------------------------------------------------------------
# Issue 7's targets


def _target(target: str, measured: str, met: bool | None) -> dict[str, Any]:
    return {"target": target, "measured": measured, "met": met}


def _shape_str(shape: list[int]) -> str:
    return "(" + ", ".join(map(str, shape)) + ")"


def _rope_targets(rope: dict[str, Any]) -> list[dict[str, Any]]:
    rows = [
        r
        for r in rope["results"]
        if r["implementation"].startswith("posenc") and r.get("median_ms") is not None
    ]
    targets = []

    def worst(
        select: Callable[[dict], bool], key: str, limit: float, higher_is_better: bool, text: str
    ) -> None:
        chosen = [r for r in rows if select(r) and r.get(key) is not None]
        if not chosen:
            targets.append(_target(text, "not measured", None))
            return

        def ok(r: dict) -> bool:
            good = r[key] >= limit if higher_is_better else r[key] <= limit
            return good and r.get("check_ok", True)

        parts = []
        for layout in ("half", "interleaved"):
            of_layout = [r for r in chosen if r["layout"] == layout]
            if not of_layout:
                continue
            pick = min if higher_is_better else max
            bad, good = (
                pick(of_layout, key=lambda r: r[key]),
                (max if pick is min else min)(of_layout, key=lambda r: r[key]),
            )
            text_layout = f"{layout} {fmt(good[key])}"
            if len(of_layout) > 1:
                text_layout = f"{layout} {fmt(good[key])} at {_shape_str(good['shape'])} to {fmt(bad[key])} at {_shape_str(bad['shape'])}"
            parts.append(text_layout)
        passed = sum(ok(r) for r in chosen)
        entry = _target(text, "; ".join(parts), passed == len(chosen))
        # Small shapes are dominated by per-call overhead: say how many (layout, shape) cases passed.
        entry["met_cases"] = f"{passed}/{len(chosen)}"
        targets.append(entry)

    for pass_name in ("forward", "forward+backward"):

        def eager(dtype: str, p: str = pass_name) -> Callable[[dict], bool]:
            return lambda r: r["mode"] == "eager" and r["dtype"] == dtype and r["pass"] == p

        def compiled(dtype: str, p: str = pass_name) -> Callable[[dict], bool]:
            return lambda r: r["mode"] == "compile" and r["dtype"] == dtype and r["pass"] == p

        worst(
            eager("float32"),
            "x_clone",
            1.5,
            False,
            f"RoPE eager float32 {pass_name}: <= 1.5x the clone limit",
        )
        worst(
            eager("float32"),
            "speedup_vs_transformers",
            3.0,
            True,
            f"RoPE eager float32 {pass_name}: >= 3x faster than transformers",
        )
        worst(
            eager("bfloat16"),
            "speedup_vs_transformers",
            1.5,
            True,
            f"RoPE eager bfloat16 {pass_name}: >= 1.5x faster than transformers",
        )
        for dtype in ("float32", "bfloat16"):
            worst(
                compiled(dtype),
                "x_clone",
                1.5,
                False,
                f"RoPE compiled {dtype} {pass_name}: <= 1.5x the clone limit",
            )
    return targets


def _bias_targets(bias: dict[str, Any]) -> list[dict[str, Any]]:
    results = [r for r in bias["results"] if r.get("median_ms") is not None]
    targets = []
    alibi = [r for r in results if r["path"] == bias_module.POSENC_ALIBI and r.get("x_baseline") is not None]
    text = "Causal ALiBi through posenc.attention: <= 1.5x bias-free causal SDPA"
    if alibi:
        row = max(alibi, key=lambda r: r["x_baseline"])
        met = row["x_baseline"] <= 1.5 and all(r.get("check_ok") for r in alibi)
        targets.append(_target(text, f"{fmt(row['x_baseline'])} (worst, at t={row['length']})", met))
    else:
        targets.append(_target(text, "not measured", None))
    by_key = {(r["path"], r["length"]): r for r in results}
    hf = by_key.get((bias_module.HF_T5, 4096))
    for path in (bias_module.POSENC_T5, bias_module.POSENC_T5_FLEX):
        text = f"Causal T5 at t=4096 ({path}): >= 4x faster than transformers-style (bucket, gather (h,t,t), SDPA)"
        ours = by_key.get((path, 4096))
        if hf and ours:
            speedup = hf["median_ms"] / ours["median_ms"]
            targets.append(
                _target(
                    text,
                    f"{fmt(speedup)}x ({ours['median_ms']:.0f} ms vs {hf['median_ms']:.0f} ms)",
                    speedup >= 4.0 and bool(ours.get("check_ok")),
                )
            )
        else:
            targets.append(_target(text, "not measured", None))
    memory = {(m["path"], m["length"]): m for m in bias.get("memory", [])}
    for path in (bias_module.POSENC_ALIBI, bias_module.POSENC_T5, bias_module.POSENC_T5_FLEX):
        text = f"Peak memory above inputs at t=16384 ({path}): <= 1/10 of one (h,t,t) float32 tensor"
        entry = memory.get((path, 16384))
        if entry and "peak_above_inputs_bytes" in entry:
            frac = entry["fraction_of_hhtt"]
            measured = f"{format_bytes(entry['peak_above_inputs_bytes'])} = {frac:.3f} of {format_bytes(entry['hhtt_float32_bytes'])}"
            targets.append(_target(text, measured, frac <= 0.1))
        else:
            targets.append(_target(text, (entry or {}).get("error", "not measured"), None))
    return targets


def evaluate_targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 7's targets next to what this run measured: ``met`` is True, False or None (not measured).

    A RoPE target is met when every measured (layout, shape) case meets it (``met_cases`` says
    how many did: small shapes are dominated by per-call overhead). A target counts as met only
    if the outputs it rests on also passed their correctness check.
    """
    targets = []
    if report.get("rope"):
        targets += _rope_targets(report["rope"])
    if report.get("bias"):
        targets += _bias_targets(report["bias"])
    return targets


# ---------------------------------------------------------------------------------------
# Running and rendering


def run_suite(
    config: SuiteConfig,
    *,
    threads: int | None = None,
    out_dir: Path | None = RESULTS_DIR,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the configured parts, evaluate the targets and write ``latest.json`` and ``latest.md``.

    Args:
        config: what to run (see :func:`preset`).
        threads: torch threads (default: the CPUs this process may use).
        out_dir: where the two files go; ``None`` writes nothing.
        log: where progress lines go.

    Returns:
        The report: ``{"suite", "machine", "rope", "bias", "targets", "wall_s"}``.
    """
    threads = set_threads(threads)
    start = time.perf_counter()
    user_log = log

    def log(line: str) -> None:
        user_log(f"{time.perf_counter() - start:6.0f}s {line}")

    report: dict[str, Any] = {"suite": config.name, "machine": machine_info(), "rope": None, "bias": None}
    log(
        f"[suite] {config.name}: {report['machine']['cpu_model']}, torch {torch.__version__}, {threads} threads"
    )
    if config.rope is not None:
        report["rope"] = run_rope(config.rope, log=log)
    if config.bias is not None:
        report["bias"] = run_bias(config.bias, threads=threads, log=log)
    report["targets"] = evaluate_targets(report)
    report["wall_s"] = time.perf_counter() - start
    if out_dir is not None:
        write_json(Path(out_dir) / "latest.json", report)
        (Path(out_dir) / "latest.md").write_text(render(report, markdown=True) + "\n")
    return report


def _machine_line(machine: dict[str, Any]) -> str:
    return (
        f"{machine['cpu_model']}, {machine['cpus_usable']} usable CPUs, {machine['memory_total_gib']} GiB, "
        f"torch {machine['torch']} ({machine['torch_threads']} threads), transformers {machine['transformers']}, "
        f"rotary-embedding-torch {machine['rotary_embedding_torch']}, x-transformers {machine['x_transformers']}; "
        f"{machine['date_utc']}, load average {machine['load_average_1m']} at the start"
    )


def _status(target: dict[str, Any]) -> str:
    if target["met"] is None:
        return "not measured"
    if target["met"]:
        return "met"
    cases = target.get("met_cases")
    if cases and not cases.startswith("0/"):
        return f"NOT met (met in {cases} layout/shape cases)"
    return "NOT met"


def render(report: dict[str, Any], *, markdown: bool) -> str:
    """The report as text (``markdown=False``, for the terminal) or as the markdown file."""
    heading = "### " if markdown else "== "
    lines = [
        f"{heading}posenc benchmarks ({report['suite']} run, {report.get('wall_s', 0):.0f} s)",
        "",
        "Machine: " + _machine_line(report["machine"]),
        "",
        f"{heading}Targets (issue 7)",
        format_table(
            ["target", "measured", "status"],
            [[t["target"], t["measured"], _status(t)] for t in report.get("targets", [])],
            markdown=markdown,
        ),
    ]
    if report.get("rope"):
        lines += ["", f"{heading}RoPE", rope_tables(report["rope"], markdown=markdown)]
        lines += ["", *[f"- {note}" for note in report["rope"]["notes"]]]
    if report.get("bias"):
        lines += ["", f"{heading}Bias attention", bias_tables(report["bias"], markdown=markdown)]
    return "\n".join(lines)
