"""README.md and the documentation pages stay true: README's first code block holds the two commands,
and every Python example in README.md and docs/ runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parents[1] / "README.md"
TEXT = README.read_text(encoding="utf-8")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
BLOCKS = FENCE.findall(TEXT)
DOCS = README.parent / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
#: (page, code) of every Python block, README's first.
PYTHON_BLOCKS = [
    (page, code)
    for page in PAGES
    for lang, code in FENCE.findall(page.read_text(encoding="utf-8"))
    if lang == "python"
]


def test_first_code_block_is_the_two_commands():
    _lang, first = BLOCKS[0]
    lines = [line for line in first.splitlines() if line.strip()]
    assert len(lines) == 2, f"README's first code block must hold exactly two commands, got {lines}"
    assert "posenc extrapolate" in lines[0] or "examples/" in lines[0]
    assert "pytest" in lines[1]


def test_the_cpu_torch_hint_stands_just_before_the_two_commands():
    """pip picks torch's CUDA build (a 5.6-6.0 GB venv) unless the CPU build is installed first: the
    hint is the paragraph right above the two commands, not a sentence below them."""
    before = TEXT[: TEXT.index("```")].rstrip().split("\n\n")[-1]
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in before
    assert "first" in before and "CUDA" in before


def test_ci_runs_the_readme_test_command():
    """.ci/run extracts the second command of the first block; check it picks the same line."""
    import subprocess

    script = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    extractor = next(line for line in script.splitlines() if line.startswith("test_cmd="))
    awk = extractor.split("$(", 1)[1].rsplit(")", 1)[0]
    out = subprocess.run(["bash", "-c", awk], cwd=README.parent, capture_output=True, text=True, check=True)
    lines = [line for line in BLOCKS[0][1].splitlines() if line.strip()]
    assert out.stdout.strip() == lines[1]


@pytest.mark.parametrize(
    ("page", "code"),
    PYTHON_BLOCKS,
    ids=[f"{page.relative_to(README.parent)}-{i}" for i, (page, _) in enumerate(PYTHON_BLOCKS)],
)
def test_python_examples_run(page, code, tmp_path, monkeypatch):
    import posenc

    monkeypatch.chdir(tmp_path)
    before = set(posenc.available())
    try:
        exec(compile(code, str(page), "exec"), {"__name__": "__readme__"})
    finally:
        # the examples may register encodings: take them out again, for the other tests
        for name in sorted(set(posenc.available()) - before):
            if name in posenc.available():  # an alias goes with its class's first name
                posenc.registry.unregister(name)


def test_benchmark_figures_are_the_committed_results():
    """Every table row and the run's header lines of docs/benchmarks.md stand verbatim in
    benchmarks/results/latest.md, the file `python -m benchmarks` writes: no figure is typed in."""
    section = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    results = (README.parent / "benchmarks" / "results" / "latest.md").read_text(encoding="utf-8")
    quoted = [
        line
        for line in section.splitlines()
        if (line.startswith("| ") and not line.startswith("| ---")) or line.startswith("- Run: ")
    ]
    assert len(quoted) >= 10, "docs/benchmarks.md lost its tables"
    missing = [line for line in quoted if line not in results.splitlines()]
    assert not missing, f"docs/benchmarks.md figures not in benchmarks/results/latest.md: {missing[:3]}"


#: README's first command at a unit test's size: it still runs every default encoding on the
#: standard library, with the default --out, in the folder it is run from.
TINY_STUDY = [
    "--train-len", "16", "--eval-lens", "16,32", "--steps", "2", "--batch-size", "2", "--eval-chars", "256",
    "--d-model", "16", "--num-layers", "1", "--num-heads", "2", "--quiet",
]  # fmt: skip


def test_readme_first_command_then_the_cli_tests_in_the_same_folder(tmp_path):
    """README's two commands in order, from one folder: the study leaves ``posenc-extrapolation/``
    there, and the command-line tests still pass in that folder and leave it as it was."""
    import os
    import subprocess
    import sys

    first = next(line for line in BLOCKS[0][1].splitlines() if line.strip())
    study = first.split("&&")[-1].split()
    assert study == ["posenc", "extrapolate"], first
    folder = tmp_path / "checkout"
    folder.mkdir()
    env = {**os.environ, "PYTHONPATH": str(README.parent)}  # this tree's posenc, whatever is installed
    done = subprocess.run(
        [sys.executable, "-m", "posenc", *study[1:], *TINY_STUDY],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert (folder / "posenc-extrapolation" / "results.json").is_file()

    def state() -> dict[str, tuple[int, int]]:
        return {
            str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")
        }

    before = state()
    # The tests the issue saw fail there: bad options (default --out included), refused runs, --corpus .
    tests = subprocess.run(
        [
            sys.executable, "-m", "pytest", str(README.parent / "tests" / "app" / "test_cli.py"),
            "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "inner"),
            "-k", "bad_options or refused_run or corpus_dot or default_out",
        ],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
    assert " passed" in tests.stdout and " failed" not in tests.stdout
    assert state() == before, "the tests wrote into the folder they were run from"


def test_the_readme_s_own_encoding_scales_by_its_factor_at_every_length_and_dtype(monkeypatch):
    """README's ScaledSinusoidal set `self.scale`, Sinusoidal's own attribute (which its table reads): past
    512 rows or in float64 the signal was scaled twice (0.25 instead of 0.5)."""
    import posenc

    code = next(code for page, code in PYTHON_BLOCKS if page == README and "ScaledSinusoidal" in code)
    space: dict = {"__name__": "__readme__"}
    try:
        exec(compile(code, "README.md", "exec"), space)
        pe = space["pe"]
        for t, dtype in ((10, torch.float32), (600, torch.float32), (10, torch.float64)):
            x = torch.zeros(1, t, pe.d_model, dtype=dtype)
            torch.testing.assert_close(pe(x), 0.5 * posenc.Sinusoidal(pe.d_model)(x))
    finally:
        posenc.registry.unregister("scaled_sinusoidal")
