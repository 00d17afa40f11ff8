"""examples/extend_own_model.py: the context-extension experiment on the user's own text, tiny settings."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _in_a_fresh_folder(tmp_path, monkeypatch):
    """Every test runs in its own empty folder: none reads or writes the working directory."""
    monkeypatch.chdir(tmp_path)


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

#: A model small enough that training, 3 methods and their fine-tuning take about a second.
TINY = ["--train-len", "16", "--eval-lens", "16,32", "--steps", "20", "--finetune-steps", "3",
        "--d-model", "16", "--eval-chars", "512", "--methods", "none,linear,yarn"]  # fmt: skip


@pytest.fixture
def own_text(tmp_path: Path) -> Path:
    path = tmp_path / "notes.txt"
    lines = [f"note {i}: the value of x{i % 9} is {i * 7 % 13}.\n" for i in range(400)]
    path.write_text("".join(lines), encoding="utf-8")
    return path


def test_the_example_runs_on_own_text_and_resumes(own_text, tmp_path, capsys):
    main = runpy.run_path(str(EXAMPLES / "extend_own_model.py"))["main"]
    out = tmp_path / "run"
    main([str(own_text), "--out", str(out), *TINY])
    printed = capsys.readouterr().out
    assert f"corpus: {own_text}" in printed
    for name in ("RoPE, no scaling", "PI (linear)", "YaRN"):
        assert name in printed
    files = {p.name for p in out.iterdir()}
    assert {"results.json", "results.csv", "report.md", "base.pt"} <= files
    rows = json.loads((out / "results.json").read_text())["results"]
    # 3 methods x (zero-shot, fine-tuned) x 2 lengths, each a finite perplexity
    assert len(rows) == 12 and all(r["perplexity"] > 1.0 for r in rows)
    assert "| YaRN | 3 |" in (out / "report.md").read_text()

    # again, resumed: the saved base model is reused and gives the same numbers
    main([str(own_text), "--out", str(out), "--resume", *TINY])
    assert "reusing" in capsys.readouterr().out
    assert json.loads((out / "results.json").read_text())["results"] == rows

    # a loaded checkpoint instead of training
    main([str(own_text), "--out", str(tmp_path / "loaded"), "--model", str(out / "base.pt"), *TINY])
    assert json.loads((tmp_path / "loaded" / "results.json").read_text())["results"] == rows


def test_the_example_reports_a_bad_setting_as_a_usage_error(own_text, capsys):
    main = runpy.run_path(str(EXAMPLES / "extend_own_model.py"))["main"]
    with pytest.raises(SystemExit) as info:
        main([str(own_text), *TINY, "--methods", "bogus"])
    assert info.value.code == 2 and "unknown method 'bogus'" in capsys.readouterr().err
