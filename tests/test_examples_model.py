"""The model examples run: examples/use_in_model.py (README) and examples/config_swap.py."""

from __future__ import annotations

import runpy
from pathlib import Path

import posenc
from posenc.registry import lookup

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_use_in_model_runs(capsys):
    runpy.run_path(str(EXAMPLES / "use_in_model.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "logits (2, 16, 256) | generated (2, 24) | bias (1, 4, 16, 16)" in out
    for spec in ("rope", "rope(base=500000.0)", "alibi", "t5", "none"):
        assert f"{spec}: (2, 16, 64)" in out


def test_config_swap_runs_every_registered_encoding(capsys):
    example = runpy.run_path(str(EXAMPLES / "config_swap.py"))
    example["main"](["--steps", "2"])
    lines = capsys.readouterr().out.strip().splitlines()
    canonical = {lookup(n).registry_name for n in posenc.available()}
    assert len(lines) == 1 + len(canonical)  # a header, then one line per encoding
    body = "\n".join(lines[1:])
    for name in canonical:
        assert f"'{name}" in body, name
    # every line reports a finite loss before and after training
    for line in lines[1:]:
        before, after = (float(v) for v in line.split()[-3:-1])
        assert 0 < after < 10 and 0 < before < 10
