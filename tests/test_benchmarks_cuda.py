"""``python -m benchmarks --device cuda`` on a machine without a GPU: it says so and exits 2."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import cuda, cuda_cases
from benchmarks.__main__ import main as cli_main

ROOT = Path(__file__).resolve().parents[1]


def test_no_gpu_is_said_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(cuda, "run", lambda *a, **k: pytest.fail("nothing may be measured without a GPU"))
    assert cli_main(["--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "--device cuda" in err and "nothing was measured" in err
    assert "CPU build" in err or "no CUDA GPU" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the command would measure it")
def test_command_line_exit_status_without_gpu() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--device", "cuda"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "nothing was measured" in done.stderr
    assert done.stdout == ""


def test_device_choice_is_checked() -> None:
    with pytest.raises(SystemExit):
        cli_main(["--device", "tpu"])


# --- the GPU command's cases and report, exercised on the CPU under a fake clock ------------------

TINY_ROPE = [(1, 2, 8, 8)]
TINY_ATTENTION = [(1, 2, 16, 8)]


def _fake_timer(fn) -> float:
    fn()  # the case runs (forward, or forward and backward) once; nothing is timed
    return 2.0


def _smoke(tmp_path: Path, **options) -> tuple[Path, list[cuda.Row]]:
    """One tiny run on the CPU: the rows, and the report written from them."""
    rows: list[cuda.Row] = []
    real_measure = cuda.measure

    def keep(*args, **kwargs):
        rows.extend(real_measure(*args, **kwargs))
        return rows

    options = {
        "rope_shapes": TINY_ROPE,
        "attention_shapes": TINY_ATTENTION,
        "timer": _fake_timer,
        "peak": lambda fn: None,
        "compile_backend": "eager",  # dynamo traces every compiled case; no inductor build on the CPU
        **options,
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cuda, "measure", keep)
        path = cuda.run(tmp_path, lambda line: None, device=torch.device("cpu"), **options)
    return path, rows


def test_every_case_builds_and_runs_on_the_cpu_at_a_tiny_size(tmp_path: Path) -> None:
    attention = cuda_cases.attention_impls(backends=("auto", "sdpa", "chunked"))  # flex: the slow test
    path, rows = _smoke(tmp_path, attention=attention)
    assert path == tmp_path / "cuda-cpu-smoke.md"
    labels = {row.label for row in rows}
    assert {impl.label for impl in cuda_cases.rope_impls()} <= labels
    assert {impl.label for impl in attention} <= labels
    for row in rows:
        assert not row.note.startswith("error"), (row.label, row.note)
        if row.note:  # on the CPU only a package not installed, or a GPU-only kernel, skips a row
            assert row.note.startswith("skipped:"), row
            assert "not installed" in row.note or "CUDA GPU only" in row.note, row
            continue
        assert row.ms == 2.0 and row.ratio == 1.0
    for spec in cuda_cases.BIAS_SPECS:
        assert any(r.label == f"posenc {spec} [chunked]" and r.pass_ == "forward+backward" for r in rows)
    # forward outputs agree with the reference row: posenc's eager RoPE, posenc's sdpa path
    checked = [r for r in rows if r.max_diff is not None]
    expected = {
        impl.label
        for impl in [*cuda_cases.rope_impls(), *attention]
        if not (impl.reference or impl.missing() or impl.requires in ("liger_kernel", "flash_attn"))
    } - {"SDPA causal, no bias", "SDPA FlashAttention kernel, no bias"}  # (nothing to compare with)
    assert {r.label for r in checked} == expected
    for row in checked:
        tolerance = 1e-5 if row.dtype == "float32" else 0.05  # bfloat16: an ulp of values ~4
        assert row.max_diff <= tolerance, row
    text = path.read_text()
    assert "not GPU figures" in text and torch.__version__ in text
    assert "## RoPE on q and k" in text and "## Causal attention with a position bias" in text


@pytest.mark.slow
def test_posenc_flex_paths_run_on_the_cpu(tmp_path: Path) -> None:
    attention = cuda_cases.attention_impls(backends=("sdpa", "flex"))
    # forward only: FlexAttention has no backward on the CPU (posenc says so; CUDA has one)
    options = {"rope_shapes": [], "attention": attention, "dtypes": ["float32"], "passes": ["forward"]}
    _, rows = _smoke(tmp_path, **options)
    flex = [r for r in rows if r.label.endswith("[flex]")]
    assert len(flex) == len(cuda_cases.BIAS_SPECS)
    assert all(r.ms is not None for r in flex), [r.note for r in flex]
    assert all(r.max_diff is not None and r.max_diff <= 1e-5 for r in flex), [r.max_diff for r in flex]


def test_shapes_include_the_long_context_training_batch() -> None:
    assert (4, 32, 8192, 128) in cuda_cases.ROPE_SHAPES
    assert {"transformers apply_rotary_pos_emb (compiled)", "posenc RoPE (compiled)"} <= {
        impl.label for impl in cuda_cases.rope_impls() if impl.compiled
    }
    requires = {impl.requires for impl in [*cuda_cases.rope_impls(), *cuda_cases.attention_impls()]}
    assert {"liger_kernel", "flash_attn"} <= requires


def test_report_writer_with_fake_timings() -> None:
    shape = (4, 32, 8192, 128)
    rows = [
        cuda.Row("rope", shape, "bfloat16", "forward", "clone of q and k", 2.0, 1.0),
        cuda.Row("rope", shape, "bfloat16", "forward", "posenc RoPE (eager)", 3.0, 1.5, 512.0, 0.0078125),
        cuda.Row(
            "rope", shape, "bfloat16", "forward", "Liger-Kernel liger_rotary_pos_emb", note="skipped: x"
        ),
        cuda.Row(
            "attention", (1, 16, 8192, 64), "float32", "forward+backward", "posenc fire [flex]", 12.5, 1.25
        ),
        cuda.Row(
            "attention",
            (1, 16, 8192, 64),
            "float32",
            "forward",
            "SDPA FlashAttention kernel",
            note="skipped: y",
        ),
    ]
    text = cuda.render(rows, ["# title", "", "- GPU: fake"])
    lines = text.splitlines()
    assert lines[:3] == ["# title", "", "- GPU: fake"]
    assert (
        "| (4, 32, 8192, 128) | bfloat16 | forward | posenc RoPE (eager) | 3.000 | 1.50 | 512.0 | 7.81e-03 |"
        in lines
    )
    assert (
        "| (4, 32, 8192, 128) | bfloat16 | forward | Liger-Kernel liger_rotary_pos_emb | skipped: x |  |  |  |"
        in lines
    )
    assert (
        "| (1, 16, 8192, 64) | float32 | forward+backward | posenc fire [flex] | 12.500 | 1.25 |  |  |"
        in lines
    )
    assert (
        "| (1, 16, 8192, 64) | float32 | forward | SDPA FlashAttention kernel | skipped: y |  |  |  |"
        in lines
    )
    assert text.count("| shape (b, h, t, dh) |") == 2  # one table per section
    assert "× clone" in text and "× SDPA (no bias)" in text
    # a section without rows gets no table
    assert "## Causal attention" not in cuda.render(rows[:3], [])


def test_an_error_in_one_row_is_reported_and_the_others_still_run(tmp_path: Path) -> None:
    def broken(*args):
        raise RuntimeError("no kernel image is available\nsecond line")

    rope = [*cuda_cases.rope_impls()[:1], cuda_cases.Impl("broken kernel", broken)]
    _, rows = _smoke(tmp_path, rope=rope, attention_shapes=[], dtypes=["float32"], passes=["forward"])
    by_label = {r.label: r for r in rows}
    assert by_label["broken kernel"].note == "error: RuntimeError: no kernel image is available"
    assert by_label["broken kernel"].ms is None and by_label["posenc RoPE (eager)"].ms == 2.0


def test_a_run_stopped_part_way_keeps_what_it_measured(tmp_path: Path) -> None:
    """The report is rewritten after every group, into a file of its own: a run killed by a time limit keeps
    its rows, marked unfinished, beside the untouched report of an earlier finished run; a finished run
    replaces both with its report, which has no mark."""
    groups = 0

    def stop_after_two(fn) -> float:
        nonlocal groups
        fn()
        groups += 1
        if groups > 2 * 3:  # the third group's first timing (a group: the clone and two rows)
            raise KeyboardInterrupt
        return 2.0

    rope = [impl for impl in cuda_cases.rope_impls() if impl.label == "posenc RoPE (eager)"]
    rope.append(dataclasses.replace(rope[0], label="again", reference=False))
    options = {"rope": rope, "attention": [], "rope_shapes": TINY_ROPE, "peak": lambda fn: None}
    earlier = tmp_path / "cuda-cpu-smoke.md"
    earlier.write_text("# posenc on a GPU: an earlier run's report\n")
    with pytest.raises(KeyboardInterrupt):
        cuda.run(tmp_path, lambda line: None, device=torch.device("cpu"), timer=stop_after_two, **options)
    assert earlier.read_text() == "# posenc on a GPU: an earlier run's report\n"
    text = (tmp_path / "cuda-cpu-smoke.unfinished.md").read_text()
    assert "**unfinished**" in text
    assert text.count("| posenc RoPE (eager) | 2.000 |") == 2  # two groups measured, none lost
    path = cuda.run(tmp_path, lambda line: None, device=torch.device("cpu"), timer=_fake_timer, **options)
    assert path == earlier and "unfinished" not in path.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cuda-cpu-smoke.md"]


def test_one_section_only_goes_to_its_own_file(tmp_path: Path) -> None:
    path, rows = _smoke(
        tmp_path, only="attention", attention=cuda_cases.attention_impls(("alibi",), ("sdpa",))
    )
    assert path == tmp_path / "cuda-cpu-smoke-attention.md"
    assert rows and {row.section for row in rows} == {"attention"}
    with pytest.raises(SystemExit):
        cli_main(["--cuda-only", "rope"])  # without --device cuda


def test_the_chunks_preset_times_auto_beside_the_single_call_and_fixed_chunks(tmp_path: Path) -> None:
    path, rows = _smoke(tmp_path, only="chunks")
    assert path == tmp_path / "cuda-cpu-smoke-chunks.md"
    assert {row.label for row in rows} == {impl.label for impl in cuda_cases.chunk_impls()}
    assert {row.dtype for row in rows} == {"bfloat16"} and {row.section for row in rows} == {"attention"}
    assert all(row.ms == 2.0 and not row.note for row in rows), [row.note for row in rows if row.note]
    # every auto and chunked forward is checked against its bias's single call
    checked = [row for row in rows if row.max_diff is not None]
    per_shape = len(cuda_cases.BIAS_SPECS) * (1 + len(cuda_cases.CHUNK_ROWS))
    assert len(checked) == per_shape * len(TINY_ATTENTION)
    assert all(row.max_diff <= 0.05 for row in checked), [row.max_diff for row in checked]
    assert "median of 10 CUDA-event timings after 3 warm-up calls" in path.read_text()
