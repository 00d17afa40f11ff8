"""The examples in examples/ run and print what they promise (the study's example is tested with the
app, in tests/app/test_examples_extend.py)."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

import posenc
from posenc.registry import lookup

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_drop_in_example_runs_and_prints_every_encoding(capsys):
    # run_name="__main__" runs it as `python examples/drop_in.py` would; its own asserts check
    # left padding, the KV-cache step and ALiBi's key-only form against the paper's.
    runpy.run_path(str(EXAMPLES / "drop_in.py"), run_name="__main__")
    out = capsys.readouterr().out
    lines = [" ".join(line.split()) for line in out.splitlines()]  # collapse the alignment
    assert {line.split()[0] for line in lines} == {
        "sinusoidal", "sinusoidal2d", "learned", "rope", "alibi", "t5", "none",
    }  # fmt: skip
    expected = [
        "sinusoidal x = pe(x) (2, 16, 64)",
        "learned x = pe(x) (2, 16, 64)",
        "sinusoidal2d patches = pe(patches) (2, 17, 64)",
        "rope q, k = rope(q, k) (2, 4, 16, 16) -> out (2, 4, 16, 16)",
        "rope decoding step (2, 4, 1, 16)",
        "alibi scores = alibi(scores) (2, 4, 16, 16)",
        "t5 scores = t5(scores) (2, 4, 16, 16)",
    ]
    for text in expected:
        assert any(line.startswith(text) for line in lines), f"missing {text!r} in:\n{out}"


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


# The example must run where transformers is not installed: make it unimportable, then run the file.
_RUN_WITHOUT_TRANSFORMERS = (
    "import runpy, sys; sys.modules['transformers'] = None; runpy.run_path(sys.argv[1], run_name='__main__')"
)


def test_example_runs_without_transformers():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-c", _RUN_WITHOUT_TRANSFORMERS, str(EXAMPLES / "from_hugging_face.py")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "llama 3.1: RoPE(" in out
    assert "falcon-rw: FalconALiBi(" in out
    assert "t5 scores + bias: (1, 8, 10, 10)" in out
    assert "scores equal after conversion: True" in out
    assert "supported model types:" in out


@pytest.mark.slow  # ~4 s of CPU: three models trained and evaluated
def test_vit_example_runs_every_encoding_at_two_resolutions(capsys):
    main = runpy.run_path(str(EXAMPLES / "vit.py"))["main"]
    shapes = main([])
    assert shapes == {"rope_axial": (2, 10), "learned2d(grid_size=(8, 8))": (2, 10), "sinusoidal2d": (2, 10)}
    assert capsys.readouterr().out.count("logits at 48x64") == 3
    assert main(["--position", "rope_axial(freqs='pixel', layout='interleaved')"]) == {
        "rope_axial(freqs='pixel', layout='interleaved')": (2, 10)
    }
