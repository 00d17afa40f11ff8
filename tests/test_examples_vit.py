"""examples/vit.py runs: one ViT, three encodings by config string, trained at one resolution
and evaluated at another."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "vit.py"


@pytest.mark.slow  # ~4 s of CPU: three models trained and evaluated
def test_vit_example_runs_every_encoding_at_two_resolutions(capsys):
    main = runpy.run_path(str(EXAMPLE))["main"]
    shapes = main([])
    assert shapes == {"rope_axial": (2, 10), "learned2d(grid_size=(8, 8))": (2, 10), "sinusoidal2d": (2, 10)}
    assert capsys.readouterr().out.count("logits at 48x64") == 3
    assert main(["--position", "rope_axial(freqs='pixel', layout='interleaved')"]) == {
        "rope_axial(freqs='pixel', layout='interleaved')": (2, 10)
    }
