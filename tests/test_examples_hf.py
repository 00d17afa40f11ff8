"""Runs examples/from_hugging_face.py (the README's "Coming from Hugging Face" example)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "from_hugging_face.py"

# The example must run where transformers is not installed: make it unimportable, then run the file.
_RUN_WITHOUT_TRANSFORMERS = (
    "import runpy, sys; sys.modules['transformers'] = None; runpy.run_path(sys.argv[1], run_name='__main__')"
)


def test_example_runs_without_transformers():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-c", _RUN_WITHOUT_TRANSFORMERS, str(EXAMPLE)],
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
