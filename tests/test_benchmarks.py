"""Smoke tests of the benchmark suite (``python -m benchmarks``) on a tiny configuration.

These check the suite's structure, its correctness checks and its memory method; they never
assert on a time (speed is reported by the suite, not tested).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

# benchmarks/ sits beside posenc/ and is not installed: make the repository root importable
# (bare `pytest` does not put it on sys.path; `python -m pytest` does).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import benchmarks
from benchmarks import bias as bias_bench
from benchmarks import rope as rope_bench
from benchmarks.__main__ import main as cli_main
from benchmarks.common import format_table, measure_peak_memory, time_interleaved

MIB = 2**20

TINY_ROPE = benchmarks.RopeConfig(
    shapes=[(1, 2, 32, 16)], modes=["eager"], reps=3, warmup=1, budget_s=0.05, min_sample_s=0.0005
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
    budget_s=0.2,
)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    config = benchmarks.SuiteConfig("tiny", TINY_ROPE, TINY_BIAS)
    result = benchmarks.run_suite(config, threads=1, out_dir=out, log=lambda line: None)
    return result, out


def test_report_has_machine_info_and_writes_both_files(report):
    result, out = report
    machine = result["machine"]
    for key in ("cpu_model", "cpu_count", "torch", "torch_threads", "date_utc", "transformers"):
        assert machine[key] not in (None, ""), key
    assert machine["torch_threads"] == 1
    on_disk = json.loads((out / "latest.json").read_text())
    assert on_disk["suite"] == "tiny"
    assert {"machine", "rope", "bias", "targets", "wall_s"} <= set(on_disk)
    markdown = (out / "latest.md").read_text()
    assert "| target | measured | status |" in markdown
    assert "| shape (b, h, t, dh) |" in markdown


def test_rope_rows_cover_every_implementation_dtype_and_pass(report):
    rows = report[0]["rope"]["results"]
    expected = {rope_bench.CLONE, *rope_bench.IMPLEMENTATIONS}
    for dtype in ("float32", "bfloat16"):
        for pass_name in ("forward", "forward+backward"):
            group = {r["implementation"]: r for r in rows if r["dtype"] == dtype and r["pass"] == pass_name}
            assert set(group) == (expected | {rope_bench.COPY} if pass_name == "forward" else expected)
            assert group[rope_bench.CLONE]["x_clone"] == pytest.approx(1.0)
            for name, row in group.items():
                assert row.get("error") is None, (name, row.get("error"))
                assert row["median_ms"] > 0 and row["iqr_ms"] >= 0 and row["samples"] >= 3
                assert row["x_clone"] > 0
    # posenc and every competitor compute the same rotation as the float64 reference
    # (rotary-embedding-torch rounds its positions to bfloat16: at 32 positions still exact).
    for row in rows:
        if row["implementation"] not in (rope_bench.CLONE, rope_bench.COPY):
            assert row["check_ok"], (row["implementation"], row["dtype"], row["check_error"])


def test_bias_rows_check_every_path_and_measure_memory(report):
    bias = report[0]["bias"]
    rows = {r["path"]: r for r in bias["results"]}
    assert set(rows) == set(TINY_BIAS.paths)
    for name, row in rows.items():
        assert row["error"] is None and row["skipped"] is None, (name, row)
        assert row["check_ok"], (name, row["check_error"])
        assert row["x_baseline"] > 0
    assert rows[bias_bench.BASELINE]["x_baseline"] == pytest.approx(1.0)
    (memory,) = bias["memory"]
    assert memory["path"] == bias_bench.POSENC_T5 and memory.get("error") is None, memory
    assert memory["method"] in ("VmHWM reset", "ru_maxrss")
    assert memory["peak_above_inputs_bytes"] >= 0
    assert memory["hhtt_float32_bytes"] == 4 * 2 * 96 * 96


def test_targets_are_listed_with_a_status(report):
    targets = report[0]["targets"]
    texts = [t["target"] for t in targets]
    assert any("ALiBi" in t for t in texts) and any("T5" in t for t in texts)
    assert any("eager float32" in t for t in texts) and any("compiled bfloat16" in t for t in texts)
    assert all(t["met"] in (True, False, None) for t in targets)
    # The tiny run has no t=4096/16384 and no compiled RoPE: those targets are "not measured".
    assert {t["met"] for t in targets if "16384" in t["target"] or "compiled" in t["target"]} == {None}


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


def test_time_interleaved_gives_stats_for_every_callable():
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
        assert calls[name] == 1 + 4


def test_peak_memory_sees_a_large_temporary():
    # 64 MiB (16 Mi float32) written and freed inside the case must show as ~64 MiB above the inputs.
    def case():
        torch.ones(16 * MIB).sum()

    result = measure_peak_memory(case)
    assert result["peak_above_inputs_bytes"] >= 60 * MIB
    if result["method"] == "VmHWM reset":
        assert result["peak_above_inputs_bytes"] < 200 * MIB


def test_format_table_markdown_and_text():
    text = format_table(["a", "bb"], [[1, None], ["xyz", 2.5]])
    assert text.splitlines()[0].split() == ["a", "bb"] and "-" in text.splitlines()[2]
    md = format_table(["a", "bb"], [[1, None]], markdown=True)
    assert md.splitlines() == ["| a | bb |", "| --- | --- |", "| 1 | - |"]


def test_cli_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        cli_main(["--only", "everything"])
    assert "--only" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main(["--threads", "0"])
    assert "--threads must be a positive integer, got 0" in capsys.readouterr().err


def test_unknown_names_are_rejected():
    with pytest.raises(ValueError, match="unknown RoPE implementations"):
        rope_bench.run_rope(benchmarks.RopeConfig(shapes=[(1, 1, 4, 4)], implementations=["nope"]))
    with pytest.raises(ValueError, match="unknown bias paths"):
        bias_bench.run_bias(benchmarks.BiasConfig(lengths=[4], paths=["nope"]))
    with pytest.raises(ValueError, match="preset must be 'full' or 'quick'"):
        benchmarks.preset("medium")
