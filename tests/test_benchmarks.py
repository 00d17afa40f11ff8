"""Tests of the benchmark suite (``python -m benchmarks``) that time nothing.

The suite's verdicts (does the clone baseline scale with bytes, is a target met, what the
report says about torch and threads) are tested on synthetic timings. One tiny run of every
section executes every code path, correctness checks included, under a fake clock: no test
measures a speed or asserts on one.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

# benchmarks/ sits beside posenc/ and is not installed: make the repository root importable
# (bare `pytest` does not put it on sys.path; `python -m pytest` does).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import benchmarks
from benchmarks import baseline as baseline_bench
from benchmarks import bias as bias_bench
from benchmarks import model as model_bench
from benchmarks import packed as packed_bench
from benchmarks import relative as relative_bench
from benchmarks import rope as rope_bench
from benchmarks.__main__ import default_stem
from benchmarks.__main__ import main as cli_main
from benchmarks.common import format_bytes, format_table, machine_info, ratio, time_interleaved
from benchmarks.compare import compare

MIB = 2**20


class FakeClock:
    """A ``time`` module whose ``perf_counter`` advances by ``step`` seconds at every call."""

    def __init__(self, step: float = 1e-3) -> None:
        self.now = 0.0
        self.step = step

    def perf_counter(self) -> float:
        self.now += self.step
        return self.now


def _fake_time(patcher: pytest.MonkeyPatch) -> FakeClock:
    clock = FakeClock()
    fake = types.SimpleNamespace(perf_counter=clock.perf_counter)
    for module in (benchmarks, benchmarks.common, rope_bench, bias_bench, model_bench):
        patcher.setattr(module, "time", fake)
    return clock


# ---------------------------------------------------------------------------------------
# The clone baseline's scaling check, on synthetic timings


def test_scaling_check_detects_a_latency_floor():
    # What a loaded 2-core machine gave with 2 threads: medians on ~8 ms scheduler steps.
    points = [(1 * MIB, 0.016), (2 * MIB, 0.016), (16 * MIB, 0.016), (32 * MIB, 0.024), (128 * MIB, 0.040)]
    result = baseline_bench.scaling_check(points)
    assert result["scales"] is False
    assert result["worst_ratio"] > 10
    assert result["worst_pair"] == [1 * MIB, 128 * MIB]
    assert result["exponent"] < 0.5
    assert "WARNING" in baseline_bench.verdict_line(result)
    assert "UNRELIABLE" in baseline_bench.verdict_line(result)


def test_scaling_check_accepts_caches_and_page_faults():
    # Single-threaded clones measured on this project's machine: small copies run from cache
    # (faster per byte), large ones pay page faults (slower per byte). Time still follows bytes.
    points = [
        (1 * MIB, 20e-6),
        (2 * MIB, 42e-6),
        (16 * MIB, 0.52e-3),
        (32 * MIB, 2.15e-3),
        (64 * MIB, 28.6e-3),
    ]
    points.append((128 * MIB, 55.9e-3))
    result = baseline_bench.scaling_check(points)
    assert result["scales"] is True
    assert result["exponent"] > 1
    assert result["worst_ratio"] <= baseline_bench.DEFAULT_MAX_RATIO
    assert baseline_bench.verdict_line(result).startswith("The clone baseline scales with bytes")


def test_scaling_check_on_proportional_times_and_its_limit():
    proportional = [(b * MIB, b * MIB / 10e9) for b in (1, 4, 16, 64)]
    result = baseline_bench.scaling_check(proportional)
    assert result["scales"] is True
    assert result["worst_ratio"] == pytest.approx(1.0)
    assert result["exponent"] == pytest.approx(1.0)
    assert [p["ns_per_byte"] for p in result["points"]] == pytest.approx([0.1] * 4)
    # The smallest size 2.5x slower per byte than the rest breaks a limit of 2, not one of 3.
    slow_small = [(MIB, 2.5 * MIB / 10e9), *proportional[1:]]
    assert baseline_bench.scaling_check(slow_small)["scales"] is False
    assert baseline_bench.scaling_check(slow_small, max_ratio=3.0)["scales"] is True


def test_scaling_check_needs_a_span_of_sizes():
    narrow = baseline_bench.scaling_check([(MIB, 1e-4), (2 * MIB, 2e-4)])
    assert narrow["scales"] is None and "span only 2.0x" in narrow["reason"]
    assert baseline_bench.scaling_check([(MIB, 1e-4)])["scales"] is None
    assert baseline_bench.scaling_check([])["reason"] == "fewer than two sizes measured"
    # The same size twice (e.g. two shapes of equal bytes) must agree too.
    twice = baseline_bench.scaling_check([(MIB, 1e-4), (MIB, 3e-4), (16 * MIB, 1.6e-3)])
    assert twice["scales"] is False and twice["worst_pair"] == [MIB, MIB]
    assert "not checked" in baseline_bench.verdict_line(narrow)


# ---------------------------------------------------------------------------------------
# Targets and the report, on a synthetic report


def _rope_rows(x_clone: float, speedup: float, shapes=rope_bench.TARGET_SHAPES) -> list[dict]:
    rows = []
    for dtype in ("float32", "bfloat16"):
        for shape in shapes:
            base = {"shape": list(shape), "dtype": dtype, "pass": "forward", "mode": "eager"}
            rows.append({**base, "implementation": "clone", "layout": None, "median_ms": 1.0, "x_clone": 1.0})
            for layout in ("half", "interleaved"):
                rows.append(
                    {
                        **base,
                        "implementation": f"posenc {layout}",
                        "layout": layout,
                        "median_ms": x_clone,
                        "x_clone": x_clone,
                        "speedup_vs_transformers": speedup,
                        "check_ok": True,
                    }
                )
    return rows


def _synthetic_report(*, scales: bool, x_clone: float = 1.2, speedup: float = 3.5, shapes=None) -> dict:
    if scales:
        points = [(b * MIB, b * MIB / 10e9) for b in (1, 16, 128)]
    else:
        points = [(b * MIB, 0.016) for b in (1, 16, 128)]
    scaling = baseline_bench.scaling_check(points)
    scaling["threads"] = 1
    scaling["cases"] = [
        {"shape": [1, 1, 1, b * MIB // 8], "dtype": "float32", "bytes": b * MIB, "median_ms": s * 1e3}
        for b, s in ((1, points[0][1]), (16, points[1][1]), (128, points[2][1]))
    ]
    rope = {
        "config": dataclasses.asdict(benchmarks.RopeConfig()),
        "threads": 1,
        "clone_scaling": scaling,
        "results": _rope_rows(x_clone, speedup, shapes or rope_bench.TARGET_SHAPES),
        "compile": [],
        "notes": [],
    }
    bias = {
        "config": dataclasses.asdict(benchmarks.BiasConfig(lengths=[1024])),
        "torch": torch.__version__,
        "threads": 1,
        "results": [
            {"length": 1024, "path": name, "median_ms": ms, "x_baseline": ms / 10.0, "check_ok": True}
            for name, ms in ((bias_bench.BASELINE, 10.0), (bias_bench.POSENC_ALIBI, 11.0))
        ],
        "memory": [],
    }
    model = {
        "config": dataclasses.asdict(benchmarks.ModelConfig()),
        "torch": torch.__version__,
        "threads": 1,
        "results": [
            {
                "position": p,
                "pass": "inference",
                "median_ms": ms,
                "iqr_ms": 1.0,
                "x_none": ms / 400,
                "check": None,
            }
            for p, ms in (("none", 400.0), ("rope", 440.0), ("t5", 600.0))
        ],
    }
    report = {
        "suite": "synthetic",
        "command": "python -m benchmarks --quick",
        "started_utc": "2026-01-01T00:00:00+00:00",
        "finished_utc": "2026-01-01T00:03:00+00:00",
        "wall_s": 180.0,
        "machine": machine_info(),
        "load_average_end": [1.5, 1.0, 0.5],
        "threads_override": None,
        "sections": {
            name: {
                "threads": 1,
                "wall_s": 60.0,
                "load_average_start": [1.0, 1.0, 1.0],
                "load_average_end": [2.0, 1.0, 1.0],
            }
            for name in ("rope", "bias", "model")
        },
        "rope": rope,
        "bias": bias,
        "model": model,
    }
    report["targets"] = benchmarks.evaluate_targets(report)
    return report


def _target(report: dict, text: str) -> dict:
    (target,) = [t for t in report["targets"] if t["target"] == text]
    return target


def test_rope_targets_per_layout_and_shape():
    report = _synthetic_report(scales=True)
    fp32 = _target(report, "RoPE eager float32 forward: >= 1.5x faster than transformers")
    assert fp32["met"] is True and fp32["reliable"] is True
    assert fp32["met_cases"] == "6/6" and fp32["threads"] == 1
    assert {(tuple(c["shape"]), c["layout"]) for c in fp32["cases"]} == {
        (s, layout) for s in rope_bench.TARGET_SHAPES for layout in ("half", "interleaved")
    }
    assert _target(report, "RoPE eager bfloat16 forward: >= 1.5x faster than transformers")["met"] is True
    # Not run: compiled, and every forward+backward target.
    assert _target(report, "RoPE compile float32 forward: <= 1.5x the clone of q and k")["met"] is None
    assert (
        _target(report, "RoPE eager float32 forward+backward: >= 1.5x faster than transformers")["met"]
        is None
    )
    # the eager clone target went with 0.2 (it bought CPU-only code); the compiled one stays
    assert not [
        t for t in report["targets"] if t["target"].startswith("RoPE eager") and "clone" in t["target"]
    ]

    slow = _synthetic_report(scales=True, x_clone=1.6, speedup=1.4)
    assert _target(slow, "RoPE eager float32 forward: >= 1.5x faster than transformers")["met"] is False
    assert _target(slow, "RoPE eager bfloat16 forward: >= 1.5x faster than transformers")["met"] is False
    table = benchmarks.rope_case_table(slow, markdown=True)
    assert "NOT met: vs transformers 1.40 < 1.5" in table and "x clone 1.60" not in table

    # A target shape that was not measured leaves the target unmet, whatever the others say.
    partial = _synthetic_report(scales=True, shapes=rope_bench.TARGET_SHAPES[:2])
    target = _target(partial, "RoPE eager float32 forward: >= 1.5x faster than transformers")
    assert target["met"] is False and target["missing_shapes"] == [list(rope_bench.TARGET_SHAPES[2])]


def test_a_baseline_that_does_not_scale_flags_the_rope_ratios():
    report = _synthetic_report(scales=False)
    rope_targets = [t for t in report["targets"] if t["target"].startswith("RoPE") and t["met"] is not None]
    assert rope_targets and all(t["reliable"] is False for t in rope_targets)
    assert all(
        t.get("reliable") is not False for t in report["targets"] if not t["target"].startswith("RoPE")
    )
    markdown = benchmarks.render(report, markdown=True)
    warning = "**WARNING: the clone baseline does NOT scale with bytes (1 thread)"
    assert warning in markdown
    # Prominent: before the targets table.
    assert markdown.index(warning) < markdown.index("### Targets")
    assert "met - UNRELIABLE: the clone baseline does not scale" in markdown
    good = benchmarks.render(_synthetic_report(scales=True), markdown=True)
    assert "WARNING" not in good and "UNRELIABLE" not in good
    assert "The clone baseline scales with bytes (1 thread)" in good


def test_report_names_torch_threads_machine_load_date_and_time():
    report = _synthetic_report(scales=True)
    for markdown in (True, False):
        text = benchmarks.render(report, markdown=markdown)
        assert f"torch {torch.__version__}" in text
        assert "Torch threads (torch.set_num_threads) per section: rope 1, bias 1, model 1" in text
        assert "180 s in all (rope 60 s, bias 60 s, model 60 s)" in text
        assert "2026-01-01T00:00:00+00:00 to 2026-01-01T00:03:00+00:00" in text
        assert "Load average (1/5/15 min):" in text and "1.5/1/0.5 at the end" in text
        assert report["machine"]["cpu_model"] in text
        assert "`python -m benchmarks --quick`" in text
        # Every section's own heading and table name the torch version and the threads.
        for section in ("RoPE", "Bias attention", "Model"):
            assert f"{section} (torch {torch.__version__}, 1 thread)" in text
        assert f"float32, no_grad, torch {torch.__version__}, 1 thread:" in text
        assert f"float32, torch {torch.__version__}, 1 thread: median time per forward" in text
    assert json.loads(json.dumps(report, default=str))["machine"]["torch"] == torch.__version__


def test_machine_info_records_the_software_and_the_load():
    machine = machine_info()
    for key in ("cpu_model", "cpu_count", "torch", "date_utc", "transformers", "python", "argv"):
        assert machine[key] not in (None, ""), key
    assert machine["torch"] == torch.__version__
    source = machine["posenc_source"]
    assert Path(source["path"], "__init__.py").is_file() and len(source["source_sha256"]) == 16
    if machine["load_average"] is not None:
        assert len(machine["load_average"]) == 3


def test_compare_two_reports():
    old = _synthetic_report(scales=True)
    new = _synthetic_report(scales=True)
    new["machine"] = {**new["machine"], "torch": "9.9.9"}
    for row in new["model"]["results"]:
        row["median_ms"] /= 2
    text = compare(old, new, markdown=True)
    assert f"| torch | {torch.__version__} | 9.9.9 | differs |" in text
    assert "| model rope inference | 440 | 220 | 0.50 | x none 1.10 -> 1.10 |" in text
    assert "| bias posenc alibi t=1024 | 11.0 | 11.0 | 1.00 | x sdpa 1.10 -> 1.10 |" in text
    assert "rope posenc half (1, 8, 512, 64) float32 forward" in text
    # the relative and packed sections too (they were left out of a comparison of "every case")
    for section in ("relative", "packed"):
        old[section] = {
            "results": [{"path": "posenc t5", "length": 512, "median_ms": 4.0, "x_baseline": 2.0}]
        }
        new[section] = {
            "results": [{"path": "posenc t5", "length": 512, "median_ms": 2.0, "x_baseline": 1.0}]
        }
    text = compare(old, new, markdown=True)
    assert "| relative posenc t5 t=512 | 4 | 2 | 0.50 | x sdpa 2.00 -> 1.00 |" in text
    assert "| packed posenc t5 t=512 |" in text


# ---------------------------------------------------------------------------------------
# One tiny run of every section, under a fake clock

TINY_ROPE = benchmarks.RopeConfig(
    shapes=[(1, 2, 32, 16)],
    scaling_shapes=[(1, 2, 32, 16), (1, 2, 256, 16)],
    modes=["eager"],
    reps=3,
    warmup=1,
    budget_s=1.0,
    min_sample_s=0.0005,
)
# FlexAttention is left out: its first call compiles for ~15 s.
TINY_BIAS = benchmarks.BiasConfig(
    lengths=[96],
    heads=2,
    head_dim=8,
    paths=[name for name in bias_bench.PATHS if name != bias_bench.POSENC_T5_FLEX],
    memory_lengths=[96],
    memory_paths=[bias_bench.POSENC_T5],
    reps=3,
    warmup=1,
    budget_s=1.0,
    threads=2,
)
TINY_MODEL = benchmarks.ModelConfig(d_model=32, num_layers=2, num_heads=4, length=48, reps=3, budget_s=1.0)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    config = benchmarks.SuiteConfig("tiny", TINY_ROPE, TINY_BIAS, TINY_MODEL)
    with pytest.MonkeyPatch.context() as patcher:
        _fake_time(patcher)
        result = benchmarks.run_suite(config, out_dir=out, stem="tiny", command="tiny", log=lambda line: None)
    return result, out


def test_run_suite_from_python_names_its_files_or_writes_none(tmp_path):
    """From Python, run_suite wrote latest.* into benchmarks/results by default: the committed results of the full
    run, replaced by any other. Now it writes nothing unless given out_dir, and out_dir needs a stem."""
    config = benchmarks.SuiteConfig("tiny", None, None, None)
    assert benchmarks.run_suite(config, command="tiny", log=lambda line: None)["suite"] == "tiny"
    with pytest.raises(ValueError, match="needs stem=, the name of the files it writes there"):
        benchmarks.run_suite(config, out_dir=tmp_path, command="tiny", log=lambda line: None)
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_run_keeps_its_finished_sections_apart(tmp_path, monkeypatch):
    """Ctrl-C in the model section: the RoPE section's rows are written to STEM.unfinished.*, and a whole
    run's STEM.* stay as they were (it kept nothing)."""
    (tmp_path / "tiny.md").write_text("the last whole run")

    def log(line):
        if "[model]" in line:
            raise KeyboardInterrupt

    _fake_time(monkeypatch)
    config = benchmarks.SuiteConfig("tiny", TINY_ROPE, None, TINY_MODEL)
    with pytest.raises(KeyboardInterrupt):
        benchmarks.run_suite(config, out_dir=tmp_path, stem="tiny", command="tiny", log=log)
    kept = json.loads((tmp_path / "tiny.unfinished.json").read_text())
    assert kept["rope"] and kept["model"] is None and list(kept["sections"]) == ["rope"]
    assert (tmp_path / "tiny.unfinished.md").read_text().startswith("#")
    assert (tmp_path / "tiny.md").read_text() == "the last whole run" and not (
        tmp_path / "tiny.json"
    ).exists()


def test_tiny_run_writes_both_files_with_threads_per_section(report):
    result, out = report
    on_disk = json.loads((out / "tiny.json").read_text())
    assert on_disk["suite"] == "tiny" and on_disk["format"] == benchmarks.REPORT_FORMAT
    assert {"machine", "rope", "bias", "model", "targets", "wall_s", "sections", "started_utc"} <= set(
        on_disk
    )
    assert {name: s["threads"] for name, s in result["sections"].items()} == {
        "rope": 1,
        "bias": 2,
        "model": 1,
    }
    assert result["rope"]["threads"] == 1 and result["bias"]["threads"] == 2
    markdown = (out / "tiny.md").read_text()
    assert "| target | measured | status |" in markdown
    # The timed sections ran with the allocator the report names (glibc: pinned thresholds).
    assert on_disk["allocator"] and f"- Allocator: {on_disk['allocator']}" in markdown
    if sys.platform == "linux" and platform.libc_ver()[0] == "glibc":
        assert on_disk["allocator"].startswith("glibc malloc: mmap threshold pinned at 32 MiB")
    assert f"torch {torch.__version__}" in markdown
    assert "per section: rope 1, bias 2, model 1" in markdown


def test_tiny_run_checks_the_clone_scaling(report):
    scaling = report[0]["rope"]["clone_scaling"]
    assert len(scaling["cases"]) == 4 and scaling["threads"] == 1
    assert {c["bytes"] for c in scaling["cases"]} == {2 * 2 * 32 * 16 * n for n in (2, 4, 16, 32)}
    # Under the fake clock every clone "takes" the same time: the check must refuse it.
    assert scaling["scales"] is False
    assert all(t["reliable"] is False for t in report[0]["targets"] if t["target"].startswith("RoPE"))
    clones = [r for r in report[0]["rope"]["results"] if r["implementation"] == rope_bench.CLONE]
    assert all(r["clone_vs_scaling_run"] == pytest.approx(1.0) for r in clones if r["pass"] == "forward")


def test_tiny_run_rope_rows_cover_every_implementation_dtype_and_pass(report):
    rows = report[0]["rope"]["results"]
    expected = {rope_bench.CLONE, *rope_bench.IMPLEMENTATIONS}
    for shape in TINY_ROPE.shapes:
        for dtype in ("float32", "bfloat16"):
            for pass_name in ("forward", "forward+backward"):
                group = {
                    r["implementation"]: r
                    for r in rows
                    if r["dtype"] == dtype and r["pass"] == pass_name and r["shape"] == list(shape)
                }
                assert set(group) == (expected | {rope_bench.COPY} if pass_name == "forward" else expected)
                assert group[rope_bench.CLONE]["x_clone"] == pytest.approx(1.0)
                for name, row in group.items():
                    assert row.get("error") is None, (name, row.get("error"))
                    assert row["samples"] >= 3
    # posenc and every competitor compute the same rotation as the float64 reference
    # (rotary-embedding-torch rounds its positions to bfloat16: at 32 positions still exact).
    for row in rows:
        if row["implementation"] not in (rope_bench.CLONE, rope_bench.COPY):
            assert row["check_ok"], (row["implementation"], row["dtype"], row["check_error"])


def test_tiny_run_bias_rows_check_every_path_and_measure_memory(report):
    bias = report[0]["bias"]
    rows = {r["path"]: r for r in bias["results"]}
    assert set(rows) == set(TINY_BIAS.paths)
    for name, row in rows.items():
        assert row["error"] is None and row["skipped"] is None, (name, row)
        assert row["check_ok"], (name, row["check_error"])
    assert rows[bias_bench.BASELINE]["x_baseline"] == pytest.approx(1.0)
    assert bias["torch"] == torch.__version__
    (memory,) = bias["memory"]
    assert memory["path"] == bias_bench.POSENC_T5 and memory.get("error") is None, memory
    assert memory["threads"] == 2  # the memory subprocess runs with the section's threads
    assert memory["method"] in ("VmHWM reset", "ru_maxrss")
    assert memory["peak_above_inputs_bytes"] >= 0
    assert memory["hhtt_float32_bytes"] == 4 * 2 * 96 * 96


def test_tiny_run_model_rows(report):
    model = report[0]["model"]
    assert model["config"]["length"] == 48 and model["torch"] == torch.__version__
    rows = {(r["position"], r["pass"]): r for r in model["results"]}
    assert set(rows) == {(p, s) for p in model_bench.POSITIONS for s in ("inference", "forward+backward")}
    for key, row in rows.items():
        assert row["error"] is None and row["check"] is None, (key, row)
        assert row["parameters"] > 0 and row["samples"] >= 3
    assert rows[("none", "inference")]["x_none"] == pytest.approx(1.0)
    # T5 holds a bias table the others do not.
    assert rows[("t5", "inference")]["parameters"] > rows[("none", "inference")]["parameters"]


def test_tiny_run_targets_are_listed_with_a_status(report):
    targets = report[0]["targets"]
    texts = [t["target"] for t in targets]
    assert any("ALiBi" in t for t in texts) and any("T5" in t for t in texts)
    assert any("eager float32" in t for t in texts) and any("compile bfloat16" in t for t in texts)
    assert all(t["met"] in (True, False, None) for t in targets)
    # No target shape, no t=4096/16384 and no compiled RoPE in the tiny run.
    assert {t["met"] for t in targets if "16384" in t["target"] or "compile" in t["target"]} == {None}
    assert {t["met"] for t in targets if t["target"].startswith("RoPE eager")} == {False}


# ---------------------------------------------------------------------------------------
# Pieces


def test_model_check_reports_bad_outputs():
    config = benchmarks.ModelConfig(vocab_size=5, length=3)
    assert model_bench._check(torch.zeros(1, 3, 5), config, "inference") is None
    assert "shape" in model_bench._check(torch.zeros(1, 4, 5), config, "inference")
    assert model_bench._check(torch.full((1, 3, 5), float("nan")), config, "inference") == "non-finite logits"
    grads = (torch.tensor(1.0), torch.ones(2), torch.tensor([float("inf")]))
    assert model_bench._check(grads, config, "forward+backward") == "non-finite gradients"


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_check_catches_the_wrong_layout(layout):
    # The check the suite runs before timing must fail an implementation of the other layout.
    other = "interleaved" if layout == "half" else "half"
    q, k = torch.randn(2, 1, 2, 64, 16).unbind(0)
    right = rope_bench.IMPLEMENTATIONS["transformers"].factory(16, torch.float32, 10000.0, 64)
    assert rope_bench.IMPLEMENTATIONS["transformers"].layout == "half"
    apply = (
        right
        if layout == "half"
        else rope_bench.IMPLEMENTATIONS["complex multiply"].factory(16, torch.float32, 10000.0, 64)
    )
    tol = rope_bench.check_tolerance(torch.float32, 63)
    assert rope_bench._check(apply, layout, q, k, None, 10000.0) <= tol
    assert rope_bench._check(apply, other, q, k, None, 10000.0) > 100 * tol


def test_rope_reference_gradient_is_the_backward_rotation():
    # The forward+backward check relies on: d<out, g>/dx = rotation of g by -theta.
    x = torch.randn(1, 2, 8, 6, dtype=torch.float64, requires_grad=True)
    g = torch.randn(1, 2, 8, 6, dtype=torch.float64)
    positions = torch.arange(8)
    for layout in ("half", "interleaved"):
        (grad,) = torch.autograd.grad(rope_bench.reference_rope(x, positions, 100.0, layout), x, g)
        torch.testing.assert_close(grad, rope_bench.reference_rope(g, -positions, 100.0, layout))


def test_bias_reference_matches_a_dense_computation():
    ctx = bias_bench.make_context(40, heads=3, head_dim=8)
    rows = bias_bench.check_rows(40)
    scores = ctx.q.double() @ ctx.k.double().transpose(-1, -2) / 8**0.5
    i = torch.arange(40)
    # 3 heads, by the paper's rule: the 2-head slopes (2^-4, 2^-8), then the first odd-indexed
    # 4-head slope (2^-2).
    slopes = torch.tensor([2.0**-4, 2.0**-8, 2.0**-2], dtype=torch.float64)
    dense = scores + slopes.view(1, 3, 1, 1) * (i[None, :] - i[:, None])
    dense = dense.masked_fill(i[None, :] > i[:, None], float("-inf"))
    expected = (dense.softmax(-1) @ ctx.v.double())[:, :, rows]
    torch.testing.assert_close(bias_bench.reference_rows(ctx, "alibi", rows), expected)


def test_time_interleaved_gives_stats_for_every_callable(monkeypatch):
    clock = _fake_time(monkeypatch)
    calls = {"a": 0, "b": 0}

    def make(name):
        def fn():
            calls[name] += 1

        return fn

    stats = time_interleaved({"a": make("a"), "b": make("b")}, reps=4, warmup=1, min_sample_s=0.0)
    assert set(stats) == {"a", "b"}
    for name, st in stats.items():
        assert st.samples == 4 and st.number == 1
        assert st.minimum <= st.q1 <= st.median <= st.q3
        assert st.median == pytest.approx(clock.step)
        assert calls[name] == 1 + 4
    # One fake call lasts 1 ms: a 2.5 ms sample repeats it 3 times; a 4 ms budget per round of
    # 6 ms allows no repetition beyond min_reps.
    stats = time_interleaved({"a": make("a"), "b": make("b")}, reps=10, min_sample_s=0.0025, budget_s=0.004)
    assert stats["a"].number == 3 and stats["a"].samples == 3


def test_peak_memory_sees_a_large_temporary():
    # 64 MiB (16 Mi float32) written and freed inside the case must show as ~64 MiB above the inputs.
    # In a fresh process, as measure_peak_memory expects: in the test process, memory that earlier
    # tests freed but the allocator kept may serve the case without a new peak.
    code = (
        "import json, torch\n"
        "from benchmarks.common import measure_peak_memory\n"
        "print(json.dumps(measure_peak_memory(lambda: torch.ones(16 * 2**20).sum())))\n"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["peak_above_inputs_bytes"] >= 60 * MIB
    if result["method"] == "VmHWM reset":
        assert result["peak_above_inputs_bytes"] < 200 * MIB


def test_format_table_markdown_and_text():
    text = format_table(["a", "bb"], [[1, None], ["xyz", 2.5]])
    assert text.splitlines()[0].split() == ["a", "bb"] and "-" in text.splitlines()[2]
    md = format_table(["a", "bb"], [[1, None]], markdown=True)
    assert md.splitlines() == ["| a | bb |", "| --- | --- |", "| 1 | - |"]


def test_presets_time_the_target_shapes_single_threaded():
    for name in ("full", "quick"):
        config = benchmarks.preset(name)
        assert config.rope.shapes == rope_bench.TARGET_SHAPES
        assert config.rope.threads == config.bias.threads == config.model.threads == 1
        assert config.rope.clone_scaling
        assert (config.model.d_model, config.model.num_layers, config.model.num_heads) == (256, 4, 8)
        assert (config.model.vocab_size, config.model.length, config.model.batch) == (256, 2048, 1)
        assert {"rope", "alibi", "t5"} <= set(config.model.positions)
    assert benchmarks.preset("full").bias.lengths == [1024, 2048, 4096, 8192, 16384]
    assert rope_bench.TARGET_SHAPES == [(1, 8, 512, 64), (1, 16, 2048, 128), (4, 8, 8192, 64)]


def test_output_names():
    assert default_stem("full", None) == "latest"
    assert default_stem("full", ["packed", "model", "bias", "relative", "rope"]) == "latest"
    assert default_stem("full", ["relative"]) == "full-relative"
    assert default_stem("quick", None) == "quick"
    assert default_stem("full", ["model"]) == "full-model"
    assert default_stem("quick", ["bias", "rope"]) == "quick-rope+bias"
    assert default_stem("quick", ["rope"], ["no-memory", "threads2"]) == "quick-rope-no-memory-threads2"


def test_a_run_with_other_options_never_replaces_the_committed_results(monkeypatch, tmp_path):
    """--no-compile, --no-memory or --threads N (a run without some cases, or measured otherwise) wrote
    latest.*, the committed full run's files; they name their own files."""
    import benchmarks.__main__ as bench_main

    stems = []

    class Stop(Exception):
        pass

    def stop(config, *, stem, **_):
        stems.append(stem)
        raise Stop  # what would run is known: nothing is measured

    monkeypatch.setattr(bench_main, "run_suite", stop)
    for argv in (
        ["--no-compile"],
        ["--no-memory"],
        ["--threads", "2"],
        ["--name", "latest", "--no-memory"],
        [],
    ):
        with pytest.raises(Stop):
            cli_main([*argv, "--out", str(tmp_path)])
    assert stems == ["full-no-compile", "full-no-memory", "full-threads2", "latest", "latest"]


def test_rope_floors_of_other_shapes_never_replace_the_committed_report(monkeypatch, tmp_path, capsys):
    """``rope_floors --shape`` wrote the committed rope-floors.md (the default shapes' report), its header
    naming the plain command; it writes rope-floors-shapes.md beside it, naming its shapes."""
    from benchmarks import rope_floors

    committed = tmp_path / "rope-floors.md"
    committed.write_text("the committed report")
    monkeypatch.setattr(rope_floors, "OUT", committed)
    rope_floors.main(["--shape", "1,1,2,8"])
    assert committed.read_text() == "the committed report"
    report = (tmp_path / "rope-floors-shapes.md").read_text()
    assert report.startswith(
        "# RoPE's performance floors (`python -m benchmarks.rope_floors --shape 1,1,2,8`)"
    )


def test_cli_rejects_bad_arguments(capsys, tmp_path):
    with pytest.raises(SystemExit):
        cli_main(["--only", "everything"])
    assert "--only" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main(["--threads", "0"])
    assert "--threads must be a positive integer, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main(["--posenc", str(tmp_path)])
    assert "posenc/__init__.py does not exist" in capsys.readouterr().err


def test_an_out_that_cannot_be_written_is_refused_before_measuring(capsys, tmp_path):
    """A minutes-long run whose --out is a file, under a file or a folder (for one report) failed at its end."""
    from benchmarks import rope_floors

    a_file = tmp_path / "report.md"
    a_file.write_text("kept")
    for out in (a_file, a_file / "below"):
        with pytest.raises(SystemExit):
            cli_main(["--only", "packed", "--out", str(out)])
        assert f"--out {out} cannot be a folder" in capsys.readouterr().err
    for out in (tmp_path, a_file / "below.md"):
        with pytest.raises(SystemExit):
            rope_floors.main(["--shape", "1,1,2,8", "--out", str(out)])
        assert f"--out {out} cannot be written" in capsys.readouterr().err
    assert a_file.read_text() == "kept"


def test_a_file_no_benchmark_wrote_is_never_replaced(capsys, tmp_path):
    """``--out README.md`` (rope_floors) or ``--name README`` (the suite) replaced that file with a report; they are
    refused before measuring now, and a report is still replaced by the next one."""
    from benchmarks import rope_floors
    from benchmarks.common import write_whole

    notes = tmp_path / "README.md"
    notes.write_text("# my notes\n")
    with pytest.raises(SystemExit):
        rope_floors.main(["--shape", "1,1,2,8", "--out", str(notes)])
    assert "README.md is not a benchmark report: not replaced" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main(["--only", "packed", "--out", str(tmp_path), "--name", "README"])
    assert "README.md is not a benchmark report" in capsys.readouterr().err
    with pytest.raises(FileExistsError, match="not a benchmark report"):
        write_whole(notes, "# RoPE's performance floors (`...`)\n")
    assert notes.read_text() == "# my notes\n"
    report = tmp_path / "rope.md"
    rope_floors.main(["--shape", "1,1,2,8", "--out", str(report)])
    rope_floors.main(["--shape", "1,1,2,4", "--out", str(report)])  # (its own report: replaced)
    assert "--shape 1,1,2,4" in report.read_text().splitlines()[0]


def test_denormals_reports_each_pass_with_and_without_flushing_and_leaves_the_flag_off(capsys, tmp_path):
    """``benchmarks.denormals`` times causal SDPA, ALiBi and T5 with subnormals kept and flushed, checks their
    outputs agree, and restores torch's default (kept subnormals) after the run; it never replaces another file."""
    from benchmarks import denormals

    if not torch.set_flush_denormal(False):
        pytest.skip("this CPU cannot flush subnormal numbers")
    notes = tmp_path / "notes.md"
    notes.write_text("# my notes\n")
    with pytest.raises(SystemExit):
        denormals.main(["--length", "32", "--out", str(notes)])
    assert "notes.md is not a benchmark report" in capsys.readouterr().err
    report = tmp_path / "denormals.md"
    denormals.main(["--length", "32", "--rounds", "1", "--out", str(report)])
    lines = report.read_text().splitlines()
    assert lines[0].startswith(
        "# Subnormal floats in causal attention (`python -m benchmarks.denormals --length 32"
    )
    timed = [line for line in lines if "flushing takes" in line]
    assert len(timed) == 6 and all("t=   32" in line for line in timed)
    assert sum("outputs flushed and not differ by at most 0" in line for line in lines) == 3
    tiny = torch.tensor(1e-39)  # a subnormal float32: kept, so the flag is off again
    assert (tiny * 1.0).item() != 0.0


def test_unknown_names_are_rejected():
    with pytest.raises(ValueError, match="unknown RoPE implementations"):
        rope_bench.run_rope(
            benchmarks.RopeConfig(shapes=[(1, 1, 4, 4)], implementations=["nope"], clone_scaling=False)
        )
    with pytest.raises(ValueError, match="unknown bias paths"):
        bias_bench.run_bias(benchmarks.BiasConfig(lengths=[4], paths=["nope"]))
    with pytest.raises(ValueError, match="preset must be 'full' or 'quick'"):
        benchmarks.preset("medium")


# ---------------------------------------------------------------------------------------
# The relative and packed sections (issues 15 and 16), tiny sizes, real clock, no speed asserted

TINY_RELATIVE = benchmarks.RelativeConfig(
    lengths=[24, 40], heads=2, head_dim=8, max_distance=3, fire_width=4, reps=3, budget_s=0.5
)


def test_relative_section_checks_every_path_and_reports_what_the_naive_form_would_need():
    import dataclasses as dc

    # a limit between the naive forms' needs at 24 and at 40: they run at 24 and are reported at 40
    limit = relative_bench._shaw_naive_bytes(TINY_RELATIVE, 32)
    config = dc.replace(TINY_RELATIVE, naive_limit_bytes=limit)
    with pytest.MonkeyPatch.context() as patcher:
        patcher.setattr(relative_bench, "available_memory_bytes", lambda: None)
        report = relative_bench.run_relative(config, log=lambda line: None)
    rows = {(r["path"], r["length"]): r for r in report["results"]}
    assert {p for p, _ in rows} == set(relative_bench.PATHS)
    for (path, length), row in rows.items():
        assert row["error"] is None, row
        naive = path in (relative_bench.SHAW_NAIVE, relative_bench.FIRE_NAIVE)
        if naive and length == 40:
            need = format_bytes(relative_bench.PATHS[path].need_bytes(config, 40))
            assert row["skipped"] == f"not run: would need {need}, limit {format_bytes(limit)}"
            assert "median_ms" not in row
            continue
        assert row["skipped"] is None and row["check_ok"], row
        assert row["median_ms"] > 0 and row["x_baseline"] > 0
    assert rows[(relative_bench.BASELINE, 24)]["x_baseline"] == pytest.approx(1.0)
    text = relative_bench.relative_tables(report, markdown=True)
    assert "naive shaw (t,t,dh) t=40: not run: would need" in text and "Shaw K=3" in text


def test_relative_full_preset_states_the_naive_need_at_16384():
    config = benchmarks.preset("full").relative
    assert config.lengths == [4096, 16384] and (config.heads, config.head_dim) == (8, 64)
    need = relative_bench._shaw_naive_bytes(config, 16384)
    assert need >= 16384**2 * 64 * 4  # one (t, t, dh) float32 table: 64 GiB
    assert "64" in format_bytes(16384**2 * 64 * 4) and need > config.naive_limit_bytes


def test_relative_check_catches_a_wrong_term():
    ctx = relative_bench.make_context(TINY_RELATIVE, 40)
    with torch.no_grad():
        shaw_out = relative_bench.PATHS[relative_bench.SHAW].build(ctx)()
        naive_out = relative_bench.PATHS[relative_bench.SHAW_NAIVE].build(ctx)()
        fire_out = relative_bench.PATHS[relative_bench.FIRE].build(ctx)()
        path = relative_bench.PATHS[relative_bench.SHAW]
        assert relative_bench.check_error(ctx, path, shaw_out) < relative_bench.CHECK_TOLERANCE
        assert relative_bench.check_error(ctx, path, naive_out) < relative_bench.CHECK_TOLERANCE
        assert relative_bench.check_error(ctx, path, fire_out) > 100 * relative_bench.CHECK_TOLERANCE
        ctx.shaw.value_embeddings.weight.mul_(2.0)  # a value term twice too large
        assert relative_bench.check_error(ctx, path, shaw_out) > 100 * relative_bench.CHECK_TOLERANCE


def test_packed_section_times_checks_and_measures_memory():
    config = benchmarks.PackedConfig(
        lengths=[48],
        memory_lengths=[48],
        documents=3,
        heads=2,
        head_dim=8,
        max_distance=3,
        paths=[packed_bench.SHAW],
        reps=3,
        budget_s=0.5,
    )
    report = packed_bench.run_packed(config, log=lambda line: None)
    rows = {r["path"]: r for r in report["results"]}
    assert set(rows) == {packed_bench.BASELINE, packed_bench.SHAW}
    for row in rows.values():
        assert row["error"] is None and row["skipped"] is None and row["check_ok"], row
        assert row["median_ms"] > 0 and row["x_baseline"] > 0
    memory = {m["path"]: m for m in report["memory"]}
    assert set(memory) == set(rows)
    for entry in memory.values():
        assert entry.get("error") is None, entry
        assert entry["peak_above_inputs_bytes"] >= 0 and entry["hhtt_float32_bytes"] == 4 * 2 * 48 * 48
        assert entry["method"] in ("VmHWM reset", "ru_maxrss")
    shaw, base = memory[packed_bench.SHAW], memory[packed_bench.BASELINE]
    assert shaw["fraction_of_hhtt"] == shaw["peak_above_inputs_bytes"] / shaw["hhtt_float32_bytes"]
    # the ratio to the baseline's peak (None when that peak rounds to 0 at this tiny size)
    assert shaw["x_baseline"] == ratio(shaw["peak_above_inputs_bytes"], base["peak_above_inputs_bytes"])
    # the targets and the rendering pick the section up
    suite = {"packed": report, "relative": None}
    texts = [t["target"] for t in benchmarks.evaluate_targets(suite)]
    assert any("posenc t5 packed" in t and "t=16384" in t for t in texts)
    assert "peak above inputs" in packed_bench.packed_tables(report, markdown=False)


def test_packed_check_catches_attention_across_documents():
    config = benchmarks.PackedConfig(lengths=[40], documents=4, heads=2, head_dim=8)
    ctx = packed_bench.make_context(config, 40)
    assert ctx.document_ids.unique().numel() == 4
    path = packed_bench.PATHS[packed_bench.T5]
    from posenc.attend import attention

    with torch.no_grad():
        across = attention(
            ctx.q, ctx.k, ctx.v, ctx.encodings[packed_bench.T5], causal=True
        )  # no document_ids
        assert packed_bench.check_error(ctx, path, across) > 100 * packed_bench.CHECK_TOLERANCE
        assert packed_bench.check_error(ctx, path, path.build(ctx)()) < packed_bench.CHECK_TOLERANCE
    with pytest.raises(ValueError, match=r"documents must be in 1\.\.40"):
        packed_bench.document_bounds(40, 41)


def test_new_sections_are_registered_and_quick():
    assert benchmarks.SECTIONS[-2:] == ("relative", "packed")
    quick = benchmarks.preset("quick")
    assert quick.relative.threads == quick.packed.threads == 1
    assert max(quick.relative.lengths) <= 1024 and max(quick.packed.lengths) <= 2048
    assert benchmarks.preset("full").packed.memory_lengths == [16384]
    assert benchmarks.preset("full").packed.documents == 8
    with pytest.raises(ValueError, match="unknown relative paths"):
        relative_bench.run_relative(benchmarks.RelativeConfig(lengths=[4], paths=["nope"]))
