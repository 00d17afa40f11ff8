"""`posenc extend` / run_extend: every method scored on the same model; scalings that do what they say."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch

from posenc.app.cli import main
from posenc.app.study import METHODS, ConfigError, Corpus, ExtendConfig, run_extend, scaling_for
from posenc.app.study.extend import _with_scaling
from posenc.encodings.rope import RoPE
from posenc.functional.rope_scaling import ROPE_TYPES


@pytest.fixture(autouse=True)
def _in_a_fresh_folder(tmp_path, monkeypatch):
    """Every test runs in its own empty folder: none reads or writes the working directory."""
    monkeypatch.chdir(tmp_path)


#: Tiny settings: the whole run (7 methods, zero-shot and fine-tuned) takes about a second.
TINY = {
    "train_len": 16,
    "eval_lens": (16, 32, 64),
    "steps": 20,
    "batch_size": 8,
    "d_model": 32,
    "num_layers": 1,
    "num_heads": 2,
    "eval_chars": 2048,
}


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    lines = [f"def f{i}(x):\n    return x * {i % 7} + {i % 3}  # {i * 37 % 101}\n" for i in range(1500)]
    return Corpus.from_text("".join(lines))


@pytest.fixture(scope="module")
def result(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("extend")
    config = ExtendConfig(**TINY, finetune_steps=4)
    return out, run_extend(corpus, config, out_dir=out, progress=False)


def test_every_method_has_a_zero_shot_and_a_fine_tuned_row_at_every_length(result):
    _, res = result
    methods = [m for m in METHODS if m != "ntk" or "ntk" in ROPE_TYPES]
    keys = {(r.method, r.finetune_steps, r.eval_len) for r in res.rows}
    assert keys == {(m, s, n) for m in methods for s in (0, 4) for n in (16, 32, 64)}
    assert len(res.rows) == len(keys)
    assert all(
        math.isfinite(r.perplexity) and r.perplexity == pytest.approx(math.exp(r.loss)) for r in res.rows
    )


def test_scalings_that_silently_do_nothing_are_caught(result):
    _, res = result
    ppl = res.perplexity
    for n in (16, 32, 64):  # PI changes every position's angles: every length differs
        assert ppl("linear", n) != ppl("none", n)
    assert ppl("dynamic", 16) == ppl("none", 16)  # within the trained length dynamic NTK is plain RoPE
    assert ppl("dynamic", 64) != ppl("none", 64)
    for m in ("yarn", "llama3", "longrope") + (("ntk",) if "ntk" in ROPE_TYPES else ()):
        assert ppl(m, 64) != ppl("none", 64), m
    # YaRN's attention factor is the one its paper gives: 0.1 ln(s) + 1
    yarn = RoPE(16, scaling=scaling_for("yarn", 4.0, 16, 16), max_len=16)
    assert yarn.attention_scaling == pytest.approx(0.1 * math.log(4.0) + 1)


def test_fine_tuning_at_the_long_length_lowers_its_perplexity(result):
    _, res = result
    for m in ("none", "linear"):
        assert res.perplexity(m, 64, 4) < res.perplexity(m, 64, 0)


def test_files_json_csv_and_checkpoint(result):
    out, res = result
    res.save(out)
    data = json.loads((out / "results.json").read_text())
    assert {"config", "corpus", "environment", "methods", "results"} <= set(data)
    assert data["results"][0].keys() >= {"method", "finetune_steps", "eval_len", "perplexity", "loss"}
    with (out / "results.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == len(res.rows)
    assert (out / "base.pt").is_file()
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]  # atomic writes leave nothing behind
    report = res.report("extend.png")
    assert "| PI (linear) | 4 |" in report and "![perplexity" in report
    # the evaluation text as scored (every row's chars), in the report, the table and the figure
    assert {r.chars for r in res.rows} == {2048}
    assert "- evaluation text: 2,048 characters scored per length" in report
    assert "2,048 characters scored per length" in res.table(width=None)
    from posenc.app.plots import extend_figure

    assert "2,048 validation characters scored per length" in extend_figure(res)._suptitle.get_text()


def test_same_seed_same_numbers_and_resume_reuses_the_base_model(corpus, result):
    out, res = result
    config = ExtendConfig(**TINY, finetune_steps=4, methods=("none", "linear"))
    lines: list[str] = []
    again = run_extend(corpus, config, out_dir=out, resume=True, progress=False, log=lines.append)
    assert any("reusing" in line for line in lines)
    assert again.seconds >= round(
        res.seconds, 1
    )  # with the time of the run whose rows it reuses (saved to 0.1 s)
    for r in again.rows:
        assert r.perplexity == res.perplexity(r.method, r.eval_len, r.finetune_steps)
    fresh = run_extend(corpus, config, progress=False)  # retrained in memory: the same numbers
    asked = [r for r in again.rows if r.method in config.methods]
    assert [r.perplexity for r in fresh.rows] == [r.perplexity for r in asked]
    # the methods of the first run not asked for now are kept as they were (merged, not dropped)
    others = [r for r in res.rows if r.method not in config.methods]
    assert others and [r for r in again.rows if r.method not in config.methods] == others


def test_a_loaded_model_gives_the_numbers_of_the_trained_one(corpus, result):
    out, res = result
    config = ExtendConfig(**TINY, finetune_steps=0, methods=("yarn",))
    loaded = run_extend(corpus, config, model_path=out / "base.pt", progress=False)
    assert [r.perplexity for r in loaded.rows] == [res.perplexity("yarn", n) for n in (16, 32, 64)]


def test_swapping_the_scaling_keeps_the_weights():
    from posenc.nn import TransformerLM

    model = TransformerLM(11, 16, 1, 2, position="rope", max_len=8)
    scaled = _with_scaling(model, {"rope_type": "linear", "factor": 2.0})
    assert scaled.encoding.rope_type == "linear" and model.encoding.rope_type == "default"
    for (k, a), b in zip(model.state_dict().items(), scaled.state_dict().values(), strict=True):
        assert torch.equal(a, b), k


def test_longrope_default_factors_keep_short_lengths_and_stretch_slow_pairs():
    s = scaling_for("longrope", 8.0, 64, 16)
    assert s["short_factor"] == [1.0] * 8
    assert s["long_factor"][0] == pytest.approx(1.0) and s["long_factor"][-1] == pytest.approx(8.0)
    assert s["long_factor"] == sorted(s["long_factor"])


def test_baselines_are_trained_and_scored_like_the_methods(corpus):
    config = ExtendConfig(**TINY, finetune_steps=0, methods=("none",), baselines=("alibi", "none"))
    res = run_extend(corpus, config, progress=False)
    assert {r.method for r in res.rows if r.baseline} == {"alibi", "nope"}


@pytest.mark.parametrize(
    ("settings", "argument"),
    [
        ({"methods": ("linear", "bogus")}, "methods"),
        ({"methods": ()}, "methods"),
        ({"methods": ("linear", "linear")}, "methods"),
        ({"factor": 0.0}, "factor"),
        ({"finetune_steps": -1}, "finetune_steps"),
        ({"baselines": ("learned",)}, "baselines"),
        # the bad spec is a baseline: the error blames baselines, not encodings
        ({"baselines": ("sinusoidal2d",)}, "baselines"),
        ({"baselines": ("ropee",)}, "baselines"),
        (
            {"baselines": ("none", "nope")},
            "baselines",
        ),  # one encoding, one row: the second replaced the first
    ],
)
def test_bad_settings_fail_before_training(corpus, settings, argument):
    with pytest.raises(ConfigError) as info:
        run_extend(corpus, ExtendConfig(**{**TINY, **settings}), progress=False)
    assert info.value.argument == argument
    assert "--" not in str(info.value)  # the library speaks in its own argument names


def test_extend_command_writes_every_file_and_refuses_to_overwrite(corpus, tmp_path, capsys):
    text = tmp_path / "corpus.txt"
    text.write_text(corpus.text)
    argv = ["extend", "--corpus", str(text), "--out", str(tmp_path / "o"), "--methods", "none,yarn"]
    argv += [
        "--train-len",
        "16",
        "--eval-lens",
        "16,32",
        "--steps",
        "5",
        "--batch-size",
        "4",
        "--d-model",
        "16",
    ]
    argv += [
        "--num-layers",
        "1",
        "--num-heads",
        "2",
        "--finetune-steps",
        "2",
        "--eval-chars",
        "512",
        "--quiet",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "YaRN" in out and "16*" in out
    assert {p.name for p in (tmp_path / "o").iterdir()} >= {
        "results.json",
        "results.csv",
        "extend.png",
        "report.md",
        "base.pt",
    }
    assert main(argv) == 2
    assert "already holds results.json" in capsys.readouterr().err
    assert main([*argv, "--resume"]) == 0


def test_default_run_is_documented_in_the_help(capsys):
    with pytest.raises(SystemExit):
        main(["extend", "--help"])
    help_text = capsys.readouterr().out
    for flag in ("--methods", "--factor", "--finetune-steps", "--baselines", "--resume", "--model", "--out"):
        assert flag in help_text


def test_checkpoint_errors_are_config_errors(tmp_path, corpus):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match="cannot be read"):
        run_extend(corpus, ExtendConfig(**TINY), model_path=bad, progress=False)
    assert isinstance(Path(bad), Path)


def test_a_scaled_embedding_baseline_round_trips_through_its_checkpoint(corpus, tmp_path):
    """A sinusoidal baseline has embed_scale sqrt(d_model); resumed from its checkpoint it scores the same."""
    from posenc.app.study.checkpoint import load_checkpoint

    config = ExtendConfig(**TINY, finetune_steps=0, methods=("none",), baselines=("sinusoidal",))
    first = run_extend(corpus, config, out_dir=tmp_path, progress=False)
    model, _, _ = load_checkpoint(tmp_path / "baseline-sinusoidal.pt")
    assert model.embed_scale == math.sqrt(TINY["d_model"])
    lines: list[str] = []
    (tmp_path / "results.json").unlink()  # else its rows are reused: score the checkpoints again
    again = run_extend(corpus, config, out_dir=tmp_path, resume=True, progress=False, log=lines.append)
    assert any(line.startswith("sinusoidal: reusing") for line in lines)
    assert [r.perplexity for r in again.rows] == [r.perplexity for r in first.rows]


#: Two baselines whose specs agree in their first 60 characters (a file name keeps at most 60).
LONG_SPECS = (
    "rope(base=10000.0, rotary_dim=8, layout='interleaved', scaling={'rope_type': 'linear', 'factor': 1.0})",
    "rope(base=10000.0, rotary_dim=8, layout='interleaved', scaling={'rope_type': 'linear', 'factor': 4.0})",
)


def test_baselines_that_differ_past_60_characters_get_their_own_checkpoints(corpus, tmp_path):
    """Each baseline is saved under a name from its whole spec, and a resumed run scores each with its own."""
    from posenc.app.study.extend_base import _checkpoint_name

    assert LONG_SPECS[0][:60] == LONG_SPECS[1][:60]
    assert _checkpoint_name(LONG_SPECS[0]) != _checkpoint_name(LONG_SPECS[1])
    config = ExtendConfig(**TINY, finetune_steps=0, methods=("none",), baselines=LONG_SPECS)
    first = run_extend(corpus, config, out_dir=tmp_path, progress=False)
    assert len(list(tmp_path.glob("baseline-*.pt"))) == 2
    (tmp_path / "results.json").unlink()  # else the rows are reused: score the checkpoints again
    lines: list[str] = []
    again = run_extend(corpus, config, out_dir=tmp_path, resume=True, progress=False, log=lines.append)
    assert sum("reusing" in line for line in lines) == 3  # base.pt and each baseline's own file
    assert [(r.method, r.perplexity) for r in again.rows] == [(r.method, r.perplexity) for r in first.rows]
    ppl = {r.method: r.perplexity for r in first.rows if r.eval_len == 64}
    assert ppl[LONG_SPECS[0]] != ppl[LONG_SPECS[1]]


def test_a_checkpoint_of_another_spec_under_its_name_is_refused_on_resume(corpus, tmp_path):
    """The spec is checked on load: a file holding another spec's model is refused, not scored."""
    config = ExtendConfig(**TINY, finetune_steps=0, methods=("none",), baselines=("alibi", "t5"))
    run_extend(corpus, config, out_dir=tmp_path, progress=False)
    (tmp_path / "results.json").unlink()
    (tmp_path / "baseline-t5.pt").write_bytes((tmp_path / "baseline-alibi.pt").read_bytes())
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(
        ConfigError, match=r"baseline-t5.pt' was trained with other settings or versions \(spec 'alibi' there"
    ):
        run_extend(corpus, config, out_dir=tmp_path, resume=True, progress=False)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # refused before any write


def test_an_interrupted_extend_keeps_its_finished_methods_and_resume_reuses_them(
    corpus, tmp_path, monkeypatch
):
    import posenc.app.study.extend as extend

    config = ExtendConfig(**TINY, finetune_steps=0, methods=("none", "linear", "yarn"), baselines=("alibi",))
    whole = run_extend(corpus, config, progress=False)
    real = extend._with_scaling
    calls: list[object] = []

    def interrupted(model, scaling):
        calls.append(scaling)
        if len(calls) == 3:  # Ctrl-C while the third method runs
            raise KeyboardInterrupt
        return real(model, scaling)

    monkeypatch.setattr(extend, "_with_scaling", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_extend(corpus, config, out_dir=tmp_path, progress=False)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert {r["method"] for r in saved["results"]} == {"none", "linear"}
    assert saved["pending"] == ["yarn", "alibi"]
    monkeypatch.setattr(extend, "_with_scaling", real)
    lines: list[str] = []
    resumed = run_extend(corpus, config, out_dir=tmp_path, resume=True, progress=False, log=lines.append)
    assert "[1/4] none: reused" in " ".join(lines) and "[2/4] linear: reused" in " ".join(lines)
    assert [(r.method, r.eval_len, r.perplexity) for r in resumed.rows] == [
        (r.method, r.eval_len, r.perplexity) for r in whole.rows
    ]
    assert json.loads((tmp_path / "results.json").read_text())["pending"] == []


def test_extend_resume_with_other_methods_keeps_the_finished_ones(corpus, tmp_path):
    first = ExtendConfig(**TINY, finetune_steps=0, methods=("none", "linear"), baselines=("alibi",))
    run_extend(corpus, first, out_dir=tmp_path, progress=False)
    then = json.loads((tmp_path / "results.json").read_text())["results"]
    second = ExtendConfig(**TINY, finetune_steps=0, methods=("yarn",))
    result = run_extend(corpus, second, out_dir=tmp_path, resume=True, progress=False)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert [m for m in dict.fromkeys(r["method"] for r in saved["results"])] == [
        "yarn",
        "none",
        "linear",
        "alibi",
    ]
    assert [r for r in saved["results"] if r["method"] != "yarn"] == then
    assert saved["config"]["methods"] == ["yarn", "none", "linear"] and saved["config"]["baselines"] == [
        "alibi"
    ]
    assert len(result.rows) == len(then) + len(TINY["eval_lens"])


def test_resume_with_other_lengths_is_refused_and_points_to_loading_the_base_model(corpus, tmp_path):
    """Rows at other lengths cannot be merged: refused before any write, with the way that keeps both."""
    config = ExtendConfig(**TINY, finetune_steps=0, methods=("none",))
    run_extend(corpus, config, out_dir=tmp_path / "a", progress=False)
    before = {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()}
    longer = ExtendConfig(**{**TINY, "eval_lens": (16, 32, 64, 128)}, finetune_steps=0, methods=("none",))
    with pytest.raises(
        ConfigError, match=r"other settings \(eval_lens \[16, 32, 64\] there.*--model '.*base.pt'"
    ):
        run_extend(corpus, longer, out_dir=tmp_path / "a", resume=True, progress=False)
    assert {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()} == before
    again = run_extend(
        corpus, longer, out_dir=tmp_path / "b", model_path=tmp_path / "a" / "base.pt", progress=False
    )
    assert again.base["how"].startswith("loaded from") and again.perplexity("none", 128) > 1.0


def test_a_rope_baseline_beside_a_loaded_base_model_never_replaces_it(corpus, tmp_path):
    """The RoPE baseline trained from scratch is saved as a baseline, never as base.pt (the --model file, here)."""
    config = ExtendConfig(**TINY, finetune_steps=0, methods=("none",), baselines=("rope",))
    first = run_extend(corpus, config, out_dir=tmp_path, progress=False)
    assert not (tmp_path / "baseline-rope.pt").exists()  # without --model the base model is that baseline
    assert first.perplexity("rope", 64) == first.perplexity("none", 64)
    base = (tmp_path / "base.pt").read_bytes()
    again = ExtendConfig(**{**TINY, "steps": 10}, finetune_steps=0, methods=("none",), baselines=("rope",))
    run_extend(corpus, again, out_dir=tmp_path, model_path=tmp_path / "base.pt", progress=False)
    assert (tmp_path / "base.pt").read_bytes() == base
    assert (tmp_path / "baseline-rope.pt").is_file()


@pytest.mark.parametrize("spec", ["xpos", "rope_axial", "alibi"])
def test_a_checkpoint_of_another_encoding_is_refused_as_the_base_model(corpus, tmp_path, spec):
    """Only plain RoPE is extended: xPos and axial RoPE are rotary with rope_type 'default' too."""
    from posenc.app.study.checkpoint import save_checkpoint
    from posenc.nn import TransformerLM

    chars = sorted(set(corpus.text))
    model = TransformerLM(len(chars), d_model=32, num_layers=1, num_heads=2, position=spec, max_len=16)
    path = tmp_path / "other.pt"
    save_checkpoint(path, model, vocab=chars, position=spec, meta={})
    with pytest.raises(ConfigError, match="not a plain RoPE model"):
        run_extend(corpus, ExtendConfig(**TINY), model_path=path, progress=False)


def test_the_other_study_in_the_folder_is_refused_unless_forced(corpus, result, tmp_path):
    """run_study(out_dir=<an extend study>) replaced its results.json and left its report, figure and base model
    beside results that were not theirs; the other command's study is refused unless force=True, which
    removes it (and force with resume is refused: one replaces what the other continues)."""
    from posenc.app.study import run_study
    from posenc.app.study.outdir import study_kind

    out = tmp_path / "o"
    config = ExtendConfig(**{**TINY, "eval_lens": (16, 32)}, methods=("none",), finetune_steps=0)
    run_extend(corpus, config, out_dir=out, progress=False)
    settings = {k: v for k, v in TINY.items() if k != "eval_lens"} | {"eval_lens": (16, 32)}
    with pytest.raises(ConfigError, match="holds a posenc extend study; use another folder, or force=True"):
        run_study(corpus, ["rope"], out_dir=out, progress=False, **settings)
    assert study_kind(out) == "extend" and (out / "base.pt").is_file()
    with pytest.raises(ConfigError, match="force=True replaces the study that resume=True continues"):
        run_study(corpus, ["rope"], out_dir=out, progress=False, resume=True, force=True, **settings)
    run_study(corpus, ["rope"], out_dir=out, progress=False, force=True, **settings)
    assert study_kind(out) == "extrapolate" and not (out / "base.pt").exists()
    with pytest.raises(ConfigError, match="holds a posenc extrapolate study"):
        run_extend(corpus, config, out_dir=out, progress=False)


def test_a_loaded_model_is_extended_as_it_rotates(corpus, tmp_path):
    """run_extend(model_path=...) rebuilt the loaded RoPE without its conjugate rotation (every row, the
    no-scaling one too, measured on another model: 19.94 where the model scores 19.02), took LongRoPE's long
    factors for base 10000 whatever the model's base, and dropped a query scaling silently."""
    from posenc.app.study import run_study
    from posenc.app.study.extrapolate import checkpoint_name

    settings = {**TINY, "eval_lens": (16, 32)}
    specs = ["rope(conjugate=True)", "rope(base=500.0)"]
    study = run_study(corpus, specs, out_dir=tmp_path / "m", progress=False, **settings)
    for spec in specs:
        ckpt = tmp_path / "m" / checkpoint_name(spec)
        config = ExtendConfig(**settings, methods=("none", "longrope"), finetune_steps=0)
        ext = run_extend(corpus, config, model_path=ckpt, progress=False)
        extrapolated = next(e for e in study.encodings if e.label == spec)
        for n in settings["eval_lens"]:
            assert ext.perplexity("none", n, 0) == pytest.approx(extrapolated.at(n).perplexity, rel=1e-6)
        base = 500.0 if "500" in spec else 10000.0
        assert ext.methods["longrope"] == scaling_for(
            "longrope", config.scale_factor, 16, TINY["d_model"] // 2, base
        )
    scaled = "rope(scaling={'rope_type': 'default', 'llama_4_scaling_beta': 0.5, 'original_max_position_embeddings': 4})"
    run_study(corpus, [scaled], out_dir=tmp_path / "q", progress=False, **settings)
    with pytest.raises(ConfigError, match="scales its queries by position"):
        run_extend(corpus, ExtendConfig(**settings), model_path=next((tmp_path / "q").glob("model-*.pt")))
