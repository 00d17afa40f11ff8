"""README.md and the documentation pages stay true: README's first code block holds the two commands,
and every Python example in README.md and docs/ runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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
