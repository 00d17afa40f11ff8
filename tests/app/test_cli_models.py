"""``posenc models``: the Hugging Face coverage table of tests/hf/test_zoo.py, for a few model types."""

from __future__ import annotations

import json
import sys

import pytest

from posenc.app.cli import main

transformers = pytest.importorskip("transformers")
from posenc.app import hf_zoo  # noqa: E402

#: One model type per kind of answer: by posenc's table, by rule, refused, no text rotary embedding.
TYPES = "phi3,seed_oss,hunyuan_vl_text,bert"


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_table_says_how_each_type_is_matched_or_why_it_is_refused(capsys):
    code, out, err = run(["models", "--types", TYPES], capsys)
    assert code == 0, err
    assert err == ""  # transformers' notes about the tiny configs are silenced
    assert out.startswith(
        f"transformers {transformers.__version__}: 3 model types with a text rotary embedding or an axial vision one"
    )
    assert "matched 2, refused 1, mismatched 0, not built 0" in out
    rows = {line.split()[0]: line.split(maxsplit=2)[1:] for line in out.splitlines()[3:] if line[:1].strip()}
    assert rows["phi3"] == ["matched", "by table"]
    assert rows["seed_oss"] == ["matched", "by rule"]
    assert rows["hunyuan_vl_text"][0] == "refused" and "'hunyuan_vl_text'" in rows["hunyuan_vl_text"][1]
    assert "1 other model type has neither, not checked here: bert." in out


def test_json_and_markdown_are_the_zoo_survey(capsys):
    results = hf_zoo.survey(TYPES.split(","))
    code, out, _ = run(["models", "--types", TYPES, "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["transformers"] == transformers.__version__
    assert {t: (r["outcome"], r["detail"]) for t, r in data["model_types"].items()} == results
    assert data["no_text_rotary"] == ["bert"]
    code, out, _ = run(["models", "--types", TYPES, "--markdown"], capsys)
    assert code == 0 and out == hf_zoo.report(results)  # the page docs/hf_coverage.md holds


def test_all_adds_what_from_hf_config_makes_of_the_other_types(capsys):
    code, out, _ = run(["models", "--types", "gpt2,opt,bert,mpnet,llama", "--all"], capsys)
    assert code == 0
    rest = out[out.index("4 model types without either") :]
    assert (
        "NOT checked against the model's code" in rest
        and "converted 3, refused 1, error 0, not built 0" in rest
    )
    assert "\nopt         converted  Learned(64, max_len=64, offset=2)\n" in rest  # OPT's offset of 2
    assert "\nbert        converted  Learned(64, max_len=64)\n" in rest
    assert "\nmpnet       refused    mpnet config: relative_attention_num_buckets=" in rest
    code, out, _ = run(["models", "--types", "gpt2,phi3", "--all", "--json"], capsys)
    data = json.loads(out)
    assert data["no_text_rotary_converted"] == {
        "gpt2": {"outcome": "converted", "detail": "Learned(64, max_len=64)"}
    }
    assert data["model_types"]["phi3"] == {"outcome": "matched", "detail": "table"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--types", "lama"], "--types: 'lama' is not a model type of transformers"),
        (["--types", "llama,,bert"], "expected comma-separated names"),
        (["--json", "--markdown"], "not allowed with argument"),
        (["--all", "--markdown", "--types", "llama"], "--all: not with --markdown"),
    ],
)
def test_bad_options_are_one_line_with_exit_code_2(argv, message, capsys):
    code, out, err = run(["models", *argv], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err
    if argv[1:] == ["lama"]:
        assert "did you mean llama" in err


def test_a_mismatch_exits_with_1(monkeypatch, capsys):
    monkeypatch.setattr(hf_zoo, "survey", lambda types: {"llama": ("mismatched", "layer 0: differs")})
    code, out, _ = run(["models", "--types", "llama"], capsys)
    assert code == 1 and "\nllama       mismatched  layer 0: differs\n" in out


def test_without_transformers_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers raises ImportError
    code, _, err = run(["models"], capsys)
    assert code == 2 and "pip install transformers" in err and err.count("\n") == 1
