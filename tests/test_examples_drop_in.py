"""examples/drop_in.py runs and shows every encoding in its drop-in form."""

from __future__ import annotations

import runpy
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "drop_in.py"


def test_drop_in_example_runs_and_prints_every_encoding(capsys):
    # run_name="__main__" runs it as `python examples/drop_in.py` would; its own asserts check
    # left padding, the KV-cache step and ALiBi's key-only form against the paper's.
    runpy.run_path(str(EXAMPLE), run_name="__main__")
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
