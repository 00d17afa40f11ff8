"""Every installed transformers model type with a text rotary embedding, checked against posenc.

The survey itself (tiny configs, the model's own rotary module and apply function against posenc's
encoding of each layer type) lives in :mod:`posenc.app.hf_zoo`, which ``posenc models`` also prints;
this test fails on any mismatch and keeps the committed report, docs/hf_coverage.md, current.

Outcomes: matched; refused (posenc raised ValueError, naming the field); mismatched (fails the
test); not built (the tiny config or the rotary module could not be made, with the reason); no rotary of
its own (a tower or VQ model beside the text model whose model builds no rotary module: listed apart).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")
from posenc.app.hf_zoo import report, survey  # noqa: E402

#: The committed coverage report, docs/hf_coverage.md: `python tests/hf/test_zoo.py` writes it.
REPORT = Path(__file__).resolve().parents[2] / "docs" / "hf_coverage.md"


def test_every_model_with_a_text_rotary_embedding() -> None:
    results = survey()
    text = report(results)
    print(text)
    mismatched = {t: d for t, (o, d) in results.items() if o == "mismatched"}
    assert not mismatched, mismatched
    for model_type, (outcome, detail) in results.items():
        if outcome == "refused":
            assert "'" in detail or "=" in detail, (model_type, detail)  # names the field(s) at fault
    counts = Counter(outcome for outcome, _ in results.values())
    assert counts["matched"] >= 100
    if f"transformers {transformers.__version__} " in REPORT.read_text(encoding="utf-8"):
        assert text == REPORT.read_text(encoding="utf-8"), f"{REPORT} is stale: python tests/hf/test_zoo.py"


if __name__ == "__main__":
    REPORT.write_text(report(survey()), encoding="utf-8")
    print(f"wrote {REPORT}")
