"""``python -m benchmarks --device cuda`` on a machine without a GPU: it says so and exits 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import cuda
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
