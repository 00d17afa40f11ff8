"""The extrapolation study's Python API: corpus, spec splitting, default encodings, training, scoring."""

from __future__ import annotations

import csv
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import posenc
from posenc import registry
from posenc.app.study import (
    ConfigError,
    Corpus,
    StudyConfig,
    StudyResult,
    default_encodings,
    encoding_plan,
    run_study,
    split_specs,
)
from posenc.app.study.training import _evaluate


@pytest.fixture(autouse=True)
def _in_a_fresh_folder(tmp_path, monkeypatch):
    """Every test runs in its own empty folder: none reads or writes the working directory."""
    monkeypatch.chdir(tmp_path)


REPO = Path(__file__).resolve().parents[2]

#: The tiniest study that still trains and evaluates every code path: it runs in about a second.
TINY = dict(
    train_len=16,
    eval_lens=(16, 32),
    steps=3,
    batch_size=4,
    d_model=16,
    num_layers=1,
    num_heads=2,
    eval_chars=256,
)


def make_text(chars: int, seed: int = 0) -> str:
    """Deterministic pseudo-words, so the corpus has structure a model can learn."""
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "pos", "enc", "rope", "bias", "def", "return", "(x)", "\n"]
    out: list[str] = []
    total = 0
    while total < chars:
        out.append(rng.choice(words) + " ")
        total += len(out[-1])
    return "".join(out)[:chars]


@pytest.fixture
def text_file(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text(make_text(6000), encoding="utf-8")
    return path


# --- spec splitting --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("rope", ["rope"]),
        ("rope,alibi, t5 ", ["rope", "alibi", "t5"]),
        ("rope(base=500000.0, layout='half'),alibi", ["rope(base=500000.0, layout='half')", "alibi"]),
        (
            "rope(scaling={'rope_type': 'yarn', 'factor': 4.0}),t5(num_buckets=8)",
            ["rope(scaling={'rope_type': 'yarn', 'factor': 4.0})", "t5(num_buckets=8)"],
        ),
        ("x(a=[1, 2], b=(3, 4)),y", ["x(a=[1, 2], b=(3, 4))", "y"]),
        ("x(s='a,b'),y(s=\"c,)d\")", ["x(s='a,b')", 'y(s="c,)d")']),
        (r"x(s='it\'s, here'),y", [r"x(s='it\'s, here')", "y"]),
        ("(rope) , alibi(max_bias=4.0)", ["(rope)", "alibi(max_bias=4.0)"]),
        ("x(s='é,ü'),y(s='日本,語')", ["x(s='é,ü')", "y(s='日本,語')"]),
        ("rope,\nalibi", ["rope", "alibi"]),
    ],
)
def test_split_specs_splits_only_at_top_level_commas(text, expected):
    assert split_specs(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rope(base=1", "'(' was never closed"),
        ("rope)", "unmatched ')'"),
        ("rope(a=[1)]", "')' does not match opening parenthesis '['"),
        ("rope(s='x)", "unterminated string literal"),
        ("rope,,alibi", "an empty spec"),
        ("rope,", "an empty spec"),
        (",rope", "an empty spec"),
        ("rope alibi", "Perhaps you forgot a comma?"),
        ("rope # alibi", "'#' comments are not allowed"),
        ("  ", "must name at least one spec"),
    ],
)
def test_split_specs_rejects_malformed_lists(text, message):
    with pytest.raises(ConfigError) as info:
        split_specs(text)
    # A library message: it names the argument and the value, not a command-line flag.
    assert str(info.value).startswith("encodings") and info.value.argument == "encodings"
    assert message in str(info.value) and "--" not in str(info.value)
    if text.strip():
        assert repr(text) in str(info.value)


def test_split_specs_wants_a_str():
    with pytest.raises(TypeError, match="encodings must be a str"):
        split_specs(["rope", "alibi"])


# --- which encodings run by default ---------------------------------------------------------------


def test_plan_covers_every_registered_class_once_by_canonical_name():
    plan = encoding_plan()
    classes = {registry.lookup(name) for name in posenc.available()}
    assert len(plan) == len(classes)
    assert {registry.lookup(c.name) for c in plan} == classes
    assert {c.name for c in plan} == {posenc.describe(cls)["name"] for cls in classes}


def test_plan_includes_learned_as_the_one_that_cannot_run_and_leaves_out_2d():
    plan = {c.name: c for c in encoding_plan()}
    assert plan["learned"].included and "cannot run" in plan["learned"].reason
    assert not plan["sinusoidal2d"].included and "grid" in plan["sinusoidal2d"].reason
    for name in ("sinusoidal", "rope", "relative_bias", "alibi", "none"):
        assert plan[name].included, plan[name]
    assert default_encodings() == [c.name for c in encoding_plan() if c.included]


def test_plan_follows_the_registry_for_encodings_registered_later():
    # Scoped registrations: the test-local classes are gone from the registry after the block.
    class Anywhere(posenc.PositionalEncoding):
        kind = "bias"

        def __init__(self, num_heads: int, slope: float = 1.0) -> None:
            super().__init__()

    class NeedsFile(posenc.PositionalEncoding):
        def __init__(self, d_model: int, path: str) -> None:
            super().__init__()

    with (
        registry.registered(Anywhere, "test_anywhere", "test_anywhere_alias"),
        registry.registered(NeedsFile, "test_needs_file"),
    ):
        plan = {c.name: c for c in encoding_plan()}
    assert "test_anywhere" not in posenc.available()
    assert plan["test_anywhere"].included and "test_anywhere_alias" not in plan
    assert not plan["test_needs_file"].included and "path" in plan["test_needs_file"].reason


# --- corpus ------------------------------------------------------------------------------------------


def test_standard_library_corpus_is_the_sorted_top_level_sources():
    corpus = Corpus.standard_library()
    assert corpus.num_files > 50
    assert "standard library" in corpus.source and sys.version.split()[0] in corpus.source
    assert "def " in corpus.text and len(corpus.text) > 1_000_000
    assert Corpus.standard_library().text == corpus.text  # read again: the same characters


def test_corpus_from_folder_reads_utf8_files_in_order_and_skips_binaries_and_hidden(tmp_path):
    (tmp_path / "b.txt").write_text("second ", encoding="utf-8")
    (tmp_path / "a.txt").write_text("first ", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.md").write_text("third", encoding="utf-8")
    (tmp_path / "image.bin").write_bytes(b"\xff\xfe\x00\x81")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("hidden", encoding="utf-8")
    corpus = Corpus.from_path(tmp_path)
    assert corpus.text == "first second third"
    assert corpus.num_files == 3


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "missing.txt", "does not exist"),
        (lambda p: (p / "empty.txt").write_text("   \n") and p / "empty.txt", "holds no text"),
        (lambda p: (p / "d").mkdir() or p / "d", "holds no text"),
        (lambda p: (p / "x.bin").write_bytes(b"ok \xff\xfe") and p / "x.bin", "not UTF-8"),
    ],
    ids=["missing", "empty-file", "empty-folder", "not-utf8"],
)
def test_bad_corpus_paths_raise_config_errors_naming_the_path(tmp_path, make, message):
    path = make(tmp_path)
    with pytest.raises(ConfigError, match=message) as info:
        Corpus.from_path(path)
    assert str(path) in str(info.value) and str(info.value).startswith("corpus ")
    assert info.value.argument == "corpus" and "--" not in str(info.value)


@pytest.mark.parametrize("chars", [1000, 200_000])
def test_split_is_disjoint_complete_and_mostly_training(chars):
    corpus = Corpus.from_text(make_text(chars))
    train, val = corpus.split()
    assert len(train) + len(val) == chars
    assert 0.05 * chars < len(val) < 0.15 * chars
    if chars == 1000:  # short text: the last 10% is validation
        assert train + val == corpus.text
    else:  # long text: every 10th block of 8192 characters
        assert val[:8192] == corpus.text[9 * 8192 : 10 * 8192]


# --- settings -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "argument", "message"),
    [
        (dict(steps=0), "steps", "steps must be a positive int, got 0"),
        (dict(train_len=-4), "train_len", "train_len must be a positive int, got -4"),
        (dict(eval_lens=(64, 0)), "eval_lens", "eval_lens[1] must be a positive int, got 0"),
        (
            dict(eval_lens=(32, 128)),
            "eval_lens",
            "eval_lens: length 32 is below train_len=64; evaluation lengths must be >= the training length",
        ),
        (dict(eval_lens=()), "eval_lens", "eval_lens must hold at least one evaluation length"),
        (dict(eval_lens=(64, 64)), "eval_lens", "eval_lens must be distinct, got [64, 64]"),
        (dict(d_model=30, num_heads=4), "d_model", "d_model=30 must be divisible by num_heads=4"),
        (dict(lr=0.0), "lr", "lr must be a finite number > 0, got 0.0"),
        (dict(seed=-1), "seed", "seed must be >= 0, got -1"),
        (dict(threads=0), "threads", "threads must be a positive int, got 0"),
        (dict(device="gpu7"), "device", "device 'gpu7' is not a torch device"),
    ],
)
def test_bad_settings_name_the_argument_and_the_value(settings, argument, message):
    with pytest.raises(ConfigError) as info:
        StudyConfig(**settings)
    # The library speaks in its own argument names; the posenc command translates them to flags.
    assert str(info.value).startswith(message) and info.value.argument == argument
    assert "--" not in str(info.value)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (dict(steps="3"), "steps must be a positive int, got '3' (str)"),
        (dict(train_len=True), "train_len must be a positive int, got True (bool)"),
        (dict(eval_lens=64), "eval_lens must be a sequence of positive ints, got 64 (int)"),
        (dict(lr="fast"), "lr must be a float"),
    ],
)
def test_settings_of_the_wrong_type_raise_type_errors(settings, message):
    with pytest.raises(TypeError) as info:
        StudyConfig(**settings)
    assert str(info.value).startswith(message)


def test_eval_lens_are_sorted():
    assert StudyConfig(eval_lens=(256, 64, 128)).eval_lens == (64, 128, 256)


# --- scoring -----------------------------------------------------------------------------------------


class _Oracle(nn.Module):
    """Logits that put all mass on the true next character: the loss must come out ~0."""

    def __init__(self, stream: torch.Tensor, vocab: int) -> None:
        super().__init__()
        self.stream, self.vocab = stream, vocab

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        # Find each window in the stream, then read off the character that follows each position.
        rows = []
        for window in ids:
            starts = (self.stream.unfold(0, window.numel(), 1) == window).all(-1).nonzero()
            start = int(starts[0])
            rows.append(self.stream[start + 1 : start + 1 + window.numel()])
        return torch.nn.functional.one_hot(torch.stack(rows), self.vocab).float() * 100.0


def test_evaluation_scores_the_next_character_of_every_position():
    vocab = 50
    generator = torch.Generator().manual_seed(0)
    stream = torch.randint(0, vocab, (2000,), generator=generator)
    chunks = torch.stack([stream[s : s + 129] for s in (0, 500, 1000)])
    for eval_len in (32, 64, 128):
        result = _evaluate(_Oracle(stream, vocab), chunks, eval_len, 32, torch.device("cpu"))
        assert result.chars == 3 * 128
        assert result.loss < 1e-6 and result.perplexity == pytest.approx(1.0)
        assert (result.loss_beyond is None) == (eval_len == 32)


def test_evaluation_reports_a_table_shorter_than_the_length_instead_of_running():
    class TooShort(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.position = posenc.Learned(8, max_len=16)

        def forward(self, ids):
            raise AssertionError("a model whose table is too short is not run")

    chunks = torch.zeros(2, 65, dtype=torch.long)
    result = _evaluate(TooShort(), chunks, 64, 16, torch.device("cpu"))
    assert result.perplexity is None and result.loss is None and result.chars == 2 * 64
    assert result.error == "sequence length 64 exceeds max_len=16, the size of the position table"


def test_evaluation_lets_other_errors_propagate():
    """Only the expected "cannot run" case becomes a result; a bug in the model is not hidden."""

    class Broken(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.position = posenc.Learned(8, max_len=64)  # long enough: not the expected case

        def forward(self, ids):
            raise ValueError("an unrelated bug")

    chunks = torch.zeros(2, 65, dtype=torch.long)
    with pytest.raises(ValueError, match="an unrelated bug"):
        _evaluate(Broken(), chunks, 32, 16, torch.device("cpu"))


# --- the study end to end ---------------------------------------------------------------------------


def _numbers(result) -> list:
    return [
        (e.label, e.final_train_loss, [(r.eval_len, r.loss, r.loss_beyond) for r in e.lengths])
        for e in result.encodings
    ]


def test_tiny_study_runs_every_default_encoding_and_writes_the_files(text_file, tmp_path):
    result = run_study(text_file, None, progress=False, **TINY)
    labels = [e.label for e in result.encodings]
    assert labels == default_encodings()
    assert result.corpus["characters"] == 6000 and result.corpus["source"] == str(text_file)
    vocab = result.corpus["vocabulary"]
    for enc in result.encodings:
        for r in enc.lengths:
            if enc.label == "learned" and r.eval_len > TINY["train_len"]:
                assert r.perplexity is None and r.error.endswith("max_len=16, the size of the position table")
                continue
            assert r.error is None and r.chars == 256
            assert math.isclose(r.perplexity, math.exp(r.loss))
            # Three steps from a random start: about as unsure as a uniform guess, never absurd.
            assert 1.0 < r.perplexity < 3 * vocab

    table = result.table(width=None)  # one block, one title line
    lines = table.splitlines()
    assert "16 (train)" in lines[1] and "32" in lines[1]
    for label in labels:
        assert any(line.startswith(label) for line in lines[3:])
    learned_row = next(line for line in lines[3:] if line.startswith("learned"))
    assert learned_row.split()[-2:] == ["cannot", "run"]
    assert any(line.strip().startswith("note: learned:") for line in lines)

    paths = result.save(tmp_path / "out")
    data = json.loads(paths["json"].read_text())
    assert data["config"]["eval_lens"] == [16, 32]
    assert [e["label"] for e in data["encodings"]] == labels
    with paths["csv"].open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(labels) * 2
    bad = [r for r in rows if r["status"] != "ok"]
    assert [(r["encoding"], r["eval_len"]) for r in bad] == [("learned", "32")]
    # Data only: drawing the figure is posenc.app.plots' job (the command does both).
    assert set(paths) == {"json", "csv"}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["results.csv", "results.json"]


def test_save_refuses_a_file_as_the_folder(tmp_path):
    result = run_study(Corpus.from_text(make_text(6000)), "none", progress=False, **TINY)
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ConfigError, match=r"out_dir .* exists and is not a folder") as info:
        result.save(tmp_path / "a_file")
    assert info.value.argument == "out_dir"


def test_a_dangling_link_as_the_folder_is_named_as_such(tmp_path):
    """A symbolic link to a folder that does not exist was refused with mkdir's "File exists"."""
    from posenc.app.study.checkpoint import check_writable

    (tmp_path / "out").symlink_to(tmp_path / "nowhere")
    with pytest.raises(
        ConfigError, match=r"out_dir .*out' is a symbolic link to .*nowhere', which does not exist"
    ):
        check_writable(tmp_path / "out")


@pytest.mark.parametrize(
    ("code", "absent"),
    [
        (
            "import posenc.app.study as s; s.run_study, s.StudyResult, s.Corpus, s.split_specs",
            "posenc.app.plots",
        ),
        ("import posenc.app.plots", "posenc.app.study"),
    ],
    ids=["study-without-plots", "plots-without-study"],
)
def test_the_study_and_the_plots_import_without_each_other(code, absent):
    check = f"import sys; {code}; assert {absent!r} not in sys.modules, sorted(sys.modules)"
    proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_same_seed_same_corpus_gives_the_same_numbers(text_file):
    first = run_study(text_file, "rope,alibi,learned", progress=False, seed=3, **TINY)
    second = run_study(text_file, ["rope", "alibi", "learned"], progress=False, seed=3, **TINY)
    assert _numbers(first) == _numbers(second)
    other_seed = run_study(text_file, "rope", progress=False, seed=4, **TINY)
    assert _numbers(other_seed)[0] != _numbers(first)[0]


def test_training_lowers_the_loss(text_file):
    settings = {**TINY, "steps": 40}
    result = run_study(text_file, "alibi", progress=False, **settings)
    untrained = run_study(text_file, "alibi", progress=False, **{**TINY, "steps": 1})
    assert result.encodings[0].at(16).loss < untrained.encodings[0].at(16).loss - 0.3


def test_study_rejects_bad_specs_and_short_corpora_before_training(text_file):
    with pytest.raises(ConfigError, match=r"unknown position encoding 'ropee'\. Did you mean 'rope'"):
        run_study(text_file, "ropee", progress=False, **TINY)
    with pytest.raises(ConfigError, match="'alibi' is given twice"):
        run_study(text_file, "alibi,alibi", progress=False, **TINY)
    with pytest.raises(ConfigError, match="rope: unknown option"):
        run_study(text_file, "rope(bass=1.0)", progress=False, **TINY)
    with pytest.raises(
        ConfigError, match="eval_lens: the validation text has 40 characters but length 64 needs at least 65"
    ):
        run_study(Corpus.from_text(make_text(400)), "none", progress=False, **{**TINY, "eval_lens": (16, 64)})


def test_the_own_text_example_runs(text_file, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "examples" / "extrapolate_own_text.py"),
            str(text_file),
            "--steps",
            "1",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "cannot run" in proc.stdout and "512" in proc.stdout
    files = {p.name for p in out.iterdir()}
    assert {"results.json", "results.csv", "extrapolation.png", "model-rope.pt"} <= files
    assert {name for name in files if not name.startswith("model-")} == {
        "results.json",
        "results.csv",
        "extrapolation.png",
    }
    # the folder is checked as the command checks it: another study there is refused before training
    (out / "results.json").write_text('{"config": {}, "corpus": {}, "results": [], "methods": {}}')
    again = subprocess.run(
        [
            sys.executable,
            str(REPO / "examples" / "extrapolate_own_text.py"),
            str(text_file),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 2 and "holds a posenc extend study" in again.stderr, again.stderr


def test_a_per_layer_pattern_is_one_model_in_the_study(text_file):
    """A pattern spec (``"rope + none"``: RoPE then a NoPE layer) trains as one model, next to a
    plain spec, as ``--encodings "rope+none,alibi"`` does."""
    result = run_study(text_file, ["rope + none", "alibi"], progress=False, **{**TINY, "num_layers": 2})
    assert [e.label for e in result.encodings] == ["rope + none", "alibi"]
    for enc in result.encodings:
        assert all(r.error is None and math.isfinite(r.loss) for r in enc.lengths)


# --- the embedding scale (TransformerLM(embed_scale=...)) ------------------------------------------


class _Hook:
    """The study's former recipe: a forward hook multiplying the embedding output by a constant."""

    def __init__(self, scale: float) -> None:
        self.scale = scale

    def __call__(self, module, inputs, output):
        return output * self.scale


@pytest.mark.parametrize(("d_model", "num_heads"), [(64, 4), (48, 4), (8, 2)])
def test_embed_scale_gives_the_numbers_of_the_former_hook(d_model, num_heads):
    from posenc.nn import TransformerLM

    torch.manual_seed(5)
    hooked = TransformerLM(40, d_model, 2, num_heads, position="sinusoidal", max_len=32)
    nn.init.normal_(hooked.embed.weight, mean=0.0, std=d_model**-0.5)
    hooked.embed.register_forward_hook(_Hook(math.sqrt(d_model)))
    torch.manual_seed(5)
    scaled = TransformerLM(
        40, d_model, 2, num_heads, position="sinusoidal", max_len=32, embed_scale=d_model**0.5
    )
    for (name, a), b in zip(hooked.state_dict().items(), scaled.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    ids = torch.randint(0, 40, (2, 24))
    assert torch.equal(hooked(ids), scaled(ids))


def test_embed_scale_multiplies_the_embeddings_drawn_at_its_inverse():
    from posenc.nn import TransformerLM

    torch.manual_seed(0)
    plain = TransformerLM(4000, 32, 1, 2, position="none")
    torch.manual_seed(0)
    scaled = TransformerLM(4000, 32, 1, 2, position="none", embed_scale=8.0)
    # Every weight but the embedding (tied to the head) is drawn as without the option.
    for (name, a), b in zip(plain.state_dict().items(), scaled.state_dict().values(), strict=True):
        assert torch.equal(a, b) != (name in ("embed.weight", "head.weight")), name
    assert plain.embed.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert scaled.embed.weight.std().item() == pytest.approx(1 / 8, rel=0.05)
    seen = []
    scaled.blocks[0].register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(args[0]), with_kwargs=True
    )
    ids = torch.tensor([[3, 1, 3999]])
    scaled(ids)
    assert torch.equal(seen[0], scaled.embed(ids) * 8.0)  # NoPE adds nothing: the block sees s * embedding
    scaled.reset_parameters()  # redrawn at 1 / s, not at GPT-2's 0.02
    assert scaled.embed.weight.std().item() == pytest.approx(1 / 8, rel=0.05)


@pytest.mark.parametrize(("value", "error"), [(0.0, ValueError), (-2.0, ValueError), (math.inf, ValueError),
                                              ("8", TypeError), (True, TypeError)])  # fmt: skip
def test_embed_scale_is_checked(value, error):
    from posenc.nn import TransformerLM

    with pytest.raises(error, match="embed_scale"):
        TransformerLM(10, 16, 1, 2, embed_scale=value)


def test_only_a_fixed_additive_table_gets_the_original_embedding_scale():
    from posenc.app.study.training import fair_embed_scale

    config = StudyConfig(**{**TINY, "num_layers": 2})
    state = torch.random.get_rng_state()
    assert fair_embed_scale("sinusoidal", config) == math.sqrt(16)
    for spec in ("learned", "rope", "alibi", "none", "t5", "rope + none"):
        assert fair_embed_scale(spec, config) is None, spec
    assert torch.equal(torch.random.get_rng_state(), state)  # deciding draws nothing


# --- results written as each model finishes, and resumed ------------------------------------------


def test_each_model_is_saved_and_its_checkpoint_gives_the_same_numbers(text_file, tmp_path):
    from posenc.app.study.checkpoint import load_checkpoint
    from posenc.app.study.extrapolate import checkpoint_name
    from posenc.app.study.training import _eval_chunks

    out = tmp_path / "out"
    result = run_study(text_file, "sinusoidal,rope(base=100.0)", out_dir=out, progress=False, **TINY)
    names = {checkpoint_name("sinusoidal"), checkpoint_name("rope(base=100.0)")}
    assert names == {
        "model-sinusoidal.pt",
        f"model-rope_base_100.0-{checkpoint_name('rope(base=100.0)')[-11:-3]}.pt",
    }
    assert {p.name for p in out.iterdir()} == {"results.json", "results.csv", *names}
    config = StudyConfig(**TINY)
    for enc in result.encodings:
        model, chars, meta = load_checkpoint(out / checkpoint_name(enc.label))
        assert meta["label"] == enc.label and meta["corpus_sha256"] == result.corpus["sha256"]
        assert model.embed_scale == (4.0 if enc.label == "sinusoidal" else None)
        _, val = Corpus.from_path(text_file).split()
        chunks = _eval_chunks(torch.tensor([chars.index(c) for c in val]), config)
        with torch.inference_mode():
            again = [_evaluate(model, chunks, n, 16, torch.device("cpu")).loss for n in (16, 32)]
        assert again == [enc.at(16).loss, enc.at(32).loss]


def test_an_interrupted_study_resumes_without_training_the_finished_models(text_file, tmp_path, monkeypatch):
    import posenc.app.study.extrapolate as extrapolate

    trained: list[int] = []
    real = extrapolate.train_study_model

    def counting(*args, **kwargs):
        trained.append(1)
        if len(trained) == 2:
            raise KeyboardInterrupt  # Ctrl-C while the second model trains
        return real(*args, **kwargs)

    monkeypatch.setattr(extrapolate, "train_study_model", counting)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        run_study(text_file, "rope,alibi", out_dir=out, progress=False, **TINY)
    partial = json.loads((out / "results.json").read_text())
    assert [e["label"] for e in partial["encodings"]] == ["rope"] and partial["pending"] == ["alibi"]
    assert not list(out.glob(".*.tmp"))  # no half-written file left behind

    trained.clear()
    lines: list[str] = []
    monkeypatch.setattr(extrapolate, "train_study_model", real)
    resumed = run_study(
        text_file, "rope,alibi", out_dir=out, resume=True, progress=False, log=lines.append, **TINY
    )
    assert "[1/2] rope: reused from" in "\n".join(lines) and "[2/2] alibi: trained" in "\n".join(lines)
    assert [e.label for e in resumed.encodings] == ["rope", "alibi"]
    assert resumed.encodings[0] == StudyResult.from_dict(partial).encodings[0]
    alone = run_study(text_file, "alibi", progress=False, **TINY)  # each model seeded alike: same numbers
    assert _numbers(resumed)[1] == _numbers(alone)[0]
    assert json.loads((out / "results.json").read_text())["pending"] == []


@pytest.mark.parametrize(
    ("change", "message"),
    [({"steps": 4}, "steps 3 there, 4 now"), ({"eval_chars": 128}, "eval_chars 256 there, 128 now"),
     ({"corpus": "other"}, "another corpus text")],
)  # fmt: skip
def test_resume_refuses_results_of_other_settings_or_text(text_file, tmp_path, change, message):
    out = tmp_path / "out"
    run_study(text_file, "none", out_dir=out, progress=False, **TINY)
    corpus = Corpus.from_text(make_text(6000, seed=1)) if "corpus" in change else text_file
    settings = {**TINY, **{k: v for k, v in change.items() if k != "corpus"}}
    with pytest.raises(ConfigError, match=message) as info:
        run_study(corpus, "none", out_dir=out, resume=True, progress=False, **settings)
    assert info.value.argument == "resume"
    with pytest.raises(ConfigError, match="needs out_dir"):
        run_study(corpus, "none", resume=True, progress=False, **TINY)


# --- the table on an 80-column terminal -------------------------------------------------------------


def _made_up(labels: list[str], lens: tuple[int, ...]) -> StudyResult:
    from posenc.app.study import EncodingResult, LengthResult

    config = StudyConfig(train_len=lens[0], eval_lens=lens)
    encodings = [
        EncodingResult(label, "rotary", 1, 1.0, 0.0, 0.0,
                       [LengthResult(n, 10, loss=1.0 + i, perplexity=100.0 + i + j / 1000) for j, n in enumerate(lens)])
        for i, label in enumerate(labels)
    ]  # fmt: skip
    return StudyResult(config, {"source": "x"}, encodings, {})


def test_the_table_fits_80_columns_in_blocks_of_lengths():
    lens = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
    long_spec = "rope(scaling={'rope_type': 'yarn', 'factor': 8.0, 'original_max_position_embeddings': 64})"
    result = _made_up(["rope", "alibi", long_spec], lens)
    text = result.table(width=80)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80
    headers = [line for line in lines if line.startswith("encoding")]
    assert len(headers) >= 2  # the lengths come in blocks, each with the names
    shown = " ".join(headers).split()
    assert [int(w) for w in shown if w.isdigit()] == list(lens)
    # every number is still there, in its row, and the long spec is given in full in a note
    for i, label in enumerate(["rope", "alibi"]):
        cells = [c for line in lines if line.startswith(f"{label} ") for c in line.split()[1:]]
        assert cells == [f"{100.0 + i + j / 1000:.3f}" for j in range(len(lens))]
    assert long_spec in " ".join(line.strip() for line in lines)  # wrapped at spaces only
    assert max(map(len, result.table(width=None).splitlines())) > 80  # unwrapped when asked


def test_a_corpus_folder_never_reads_posenc_output(tmp_path):
    """A study's folder inside the corpus folder (results, report, a running study's lock, the folder
    given as ``exclude``) is skipped: the corpus is the same text before and after a run."""
    (tmp_path / "notes.txt").write_text(make_text(3000), encoding="utf-8")
    before = Corpus.from_path(tmp_path)
    study = tmp_path / "posenc-extrapolation"
    _made_up(["rope", "alibi"], (16, 32)).save(study)  # results.json, results.csv
    (study / "notes-of-the-run.txt").write_text("not the user's text", encoding="utf-8")
    running = tmp_path / "runs" / "busy"
    running.mkdir(parents=True)
    (running / ".posenc.lock").write_text("{}")
    (running / "partial.txt").write_text("a run's output", encoding="utf-8")
    out = tmp_path / "out"  # a study's folder before it holds anything
    out.mkdir()
    (out / "draft.txt").write_text("written by the run", encoding="utf-8")
    after = Corpus.from_path(tmp_path, exclude=[out])
    assert (after.text, after.num_files) == (before.text, before.num_files)
    with pytest.raises(ConfigError, match="is in a posenc output folder"):
        Corpus.from_path(study)
    with pytest.raises(ConfigError, match="is in a posenc output folder"):
        Corpus.from_path(study / "results.csv")
    with pytest.raises(ConfigError, match="is in a posenc output folder"):
        Corpus.from_path(out / "draft.txt", exclude=[out])
    # a text folder inside a folder that also holds a study's results is read as usual
    texts = study / "texts"
    texts.mkdir()
    (texts / "a.txt").write_text("the user's own text", encoding="utf-8")
    assert Corpus.from_path(texts).text == "the user's own text"


def test_the_characters_scored_at_lengths_that_do_not_divide_the_longest_are_said_as_a_range(text_file):
    """A window of 24 fits once in a chunk of 32 (+1): that length scores fewer characters, and the
    table says the range scored, not the --eval-chars asked for."""
    from posenc.app.study.results import scored_per_length

    settings = {**TINY, "eval_lens": (16, 24, 32), "eval_chars": 128}
    result = run_study(text_file, "rope", progress=False, **settings)
    chars = {r.eval_len: r.chars for r in result.encodings[0].lengths}
    assert chars == {16: 128, 24: 96, 32: 128}  # 4 chunks of 32: 2 windows of 16, 1 of 24, 1 of 32
    assert "96 to 128 characters scored per length" in result.table(width=None)
    assert scored_per_length([], 16384) == "about 16,384 characters scored per length"  # nothing scored yet


def test_lengths_a_model_cannot_run_are_not_counted_as_scored(text_file):
    """The title's "characters scored per length" counted the characters of lengths the learned table cannot
    run (none scored there): "800 to 1,000" where 800 were scored at every length that ran."""
    result = run_study(
        text_file, ["learned"], progress=False, **{**TINY, "eval_lens": (16, 40), "eval_chars": 1000}
    )
    ran = [r.chars for r in result.encodings[0].lengths if r.error is None]
    assert len(ran) == 1 and result.scored() == f"{ran[0]:,} characters scored per length"
