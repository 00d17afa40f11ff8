"""Pictures: a PNG for every registered name, readable axes, and the plotted numbers checked."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import pytest
import torch

import posenc
from posenc.app.cli import main
from posenc.app.plots import encoding_figure, extrapolation_figure
from posenc.app.study import EncodingResult, LengthResult, StudyConfig, StudyResult


@pytest.fixture(autouse=True)
def _in_a_fresh_folder(tmp_path, monkeypatch):
    """Every test runs in its own empty folder: none reads or writes the working directory."""
    monkeypatch.chdir(tmp_path)


#: The README images must stay small.
MAX_PNG_BYTES = 300_000
#: float32 cos/sin and bias values against float64 formulas: a few float32 ulps at these positions.
PLOT_ATOL = 1e-5


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def content_axes(fig):
    """The plotting axes, colour bars left out (matplotlib labels those '<colorbar>')."""
    return [ax for ax in fig.get_axes() if ax.get_visible() and ax.get_label() != "<colorbar>"]


@pytest.mark.parametrize("name", sorted({posenc.describe(n)["name"] for n in posenc.available()}))
def test_plot_command_writes_a_png_for_every_encoding(name, tmp_path, capsys):
    """(Under its canonical name: an alias draws the same figure, and the registry's tests resolve aliases.)"""
    out = tmp_path / f"{name}.png"
    assert main(["plot", name, "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    width, height = png_size(out)
    assert width >= 400 and height >= 300
    assert out.stat().st_size < MAX_PNG_BYTES


def test_plot_default_file_name_and_spec_names(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["plot", "alibi(max_bias=4.0)"]) == 0
    assert png_size(tmp_path / "alibi_max_bias_4.0.png")


def test_plot_refuses_to_overwrite_a_file_without_force(tmp_path, monkeypatch, capsys):
    """A file at --out (or the default NAME.png) that the user made is kept; --force replaces it."""
    monkeypatch.chdir(tmp_path)
    for argv, path in ((["plot", "rope", "--out", "mine.png"], "mine.png"), (["plot", "rope"], "rope.png")):
        (tmp_path / path).write_text("my own figure")
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err == (
            f"posenc plot: error: --out {path!r} already exists; give another file, or add --force to overwrite it\n"
        )
        assert (tmp_path / path).read_text() == "my own figure"
    assert main(["plot", "rope", "--force"]) == 0
    assert png_size(tmp_path / "rope.png")


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["plot", "alibj"], "Did you mean 'alibi'?"),
        (["plot", "rope(base='x')"], "base='x' has the wrong type"),
        # a value outside the accepted ones is a wrong value, not a wrong type
        (
            ["plot", "rope(layout='split')"],
            "layout='split' is not one of ['half', ",
        ),
        # a missing folder is refused, not made (relative: a regression would write in tmp_path only)
        (["plot", "rope", "--out", "no/such/dir/rope.png"], "--out: the folder 'no/such/dir' does not exist"),
        (["plot", "rope", "--length", "0"], "argument --length: expected a positive integer, got '0'"),
        (
            ["plot", "rope", "--d-model", "100", "--num-heads", "8"],
            "--d-model: 100 must be divisible by --num-heads 8",
        ),
    ],
)
def test_plot_bad_input_is_one_line_and_exit_2(argv, fragment, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and fragment in err, err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("sizes", "error", "message"),
    [
        (dict(length=0), ValueError, "length must be a positive int, got 0"),
        (dict(d_model=-8), ValueError, "d_model must be a positive int, got -8"),
        (dict(num_heads=2.0), TypeError, "num_heads must be a positive int, got 2.0 (float)"),
        (dict(length=True), TypeError, "length must be a positive int, got True (bool)"),
        (dict(d_model=100, num_heads=8), ValueError, "d_model=100 must be divisible by num_heads=8"),
    ],
)
def test_encoding_figure_checks_its_sizes(sizes, error, message):
    with pytest.raises(error) as info:
        encoding_figure("rope", **sizes)
    assert str(info.value) == message


@pytest.mark.parametrize("name", sorted({posenc.describe(n)["name"] for n in posenc.available()}))
def test_every_encoding_figure_has_titles_and_labelled_axes(name):
    fig = encoding_figure(name, length=64)
    axes = content_axes(fig)
    assert axes
    for ax in axes:
        assert ax.get_title() or ax.get_xlabel(), f"{name}: an axis without title or label"
        assert ax.get_xlabel() and ax.get_ylabel(), f"{name}: unlabelled axis {ax.get_title()!r}"
    titles = " ".join(ax.get_title() for ax in axes) + " ".join(
        t.get_text() for sub in getattr(fig, "subfigs", []) for t in [sub._suptitle] if t is not None
    )
    assert name in titles


def test_rope_figure_shows_cos_of_position_times_frequency():
    head_dim, length = 16, 40
    fig = encoding_figure("rope", length=length, d_model=head_dim * 2, num_heads=2)
    table = torch.as_tensor(content_axes(fig)[0].images[0].get_array().data, dtype=torch.float64)
    # Half layout: channel c and c + dh/2 share the frequency base^(-2c/dh) (Su et al., eq. 15).
    inv_freq = 10000.0 ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    expected = torch.cos(torch.arange(length, dtype=torch.float64)[:, None] * inv_freq.repeat(2)[None, :])
    torch.testing.assert_close(table, expected, atol=PLOT_ATOL, rtol=0)

    decay = torch.as_tensor(content_axes(fig)[1].lines[0].get_ydata(), dtype=torch.float64)
    # q = k = all-ones: q_m . k_0 / dh = mean over pairs of cos(m * theta_i), drawn for a real
    # model's head width (128), where 64 frequencies make a decay curve rather than noise.
    assert "head_dim 128" in content_axes(fig)[1].get_title()
    wide_freq = 10000.0 ** (-torch.arange(0, 128, 2, dtype=torch.float64) / 128)
    distance = torch.arange(decay.numel(), dtype=torch.float64)
    expected_decay = torch.cos(distance[:, None] * wide_freq[None, :]).mean(-1)
    torch.testing.assert_close(decay, expected_decay, atol=PLOT_ATOL, rtol=0)


def test_alibi_figure_shows_the_textbook_matrix_per_head():
    num_heads = 8
    fig = encoding_figure("alibi", num_heads=num_heads, d_model=64)
    heads = [ax for ax in content_axes(fig) if ax.get_title().startswith("head ")]
    assert len(heads) == num_heads
    i = torch.arange(32, dtype=torch.float64)
    distance = i[:, None] - i[None, :]
    for h, ax in enumerate(heads):
        shown = torch.as_tensor(ax.images[0].get_array().filled(math.nan), dtype=torch.float64)
        slope = 2.0 ** (-8.0 * (h + 1) / num_heads)  # Press et al., the geometric slopes for 8 heads
        expected = (-slope * distance).masked_fill(distance < 0, math.nan)  # future keys blank
        torch.testing.assert_close(shown, expected, atol=PLOT_ATOL, rtol=0, equal_nan=True)


def test_sinusoidal_figure_shows_the_paper_table_and_its_similarity():
    d_model, length = 32, 50
    fig = encoding_figure("sinusoidal", length=length, d_model=d_model, num_heads=4)
    table_ax, similarity_ax, _ = content_axes(fig)
    table = torch.as_tensor(table_ax.images[0].get_array().data, dtype=torch.float64)
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    angle = pos * 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    expected = torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)  # sin on even, cos on odd channels
    torch.testing.assert_close(table, expected, atol=PLOT_ATOL, rtol=0)
    similarity = torch.as_tensor(similarity_ax.images[0].get_array().data, dtype=torch.float64)
    torch.testing.assert_close(similarity, expected @ expected.T, atol=1e-4, rtol=0)


def _fake_result() -> StudyResult:
    config = StudyConfig(train_len=64, eval_lens=(64, 128, 256), eval_chars=2048)

    def enc(label, values):
        lengths = [
            LengthResult(n, 1000, math.log(v), v) if v else LengthResult(n, 1000, error="past max_len")
            for n, v in zip(config.eval_lens, values, strict=True)
        ]
        return EncodingResult(label, "bias", 1, 1.0, 0.0, 0.0, lengths)

    encodings = [
        enc("alibi", [5.0, 4.8, 4.7]),
        enc("sinusoidal", [5.0, 30.0, 200.0]),
        enc("t5", [5.1, 5.2, 5.3]),
        enc("none", [5.0, 6.0, 7.0]),
        enc("learned", [4.9, None, None]),
    ]
    corpus = {
        "source": "Python 3.11.7 standard library, top-level *.py (/usr/lib/python3.11)",
        "characters": 9000,
    }
    return StudyResult(config, corpus, encodings, {})


def test_extrapolation_figure_has_one_line_per_encoding_and_marks_the_training_length():
    fig = extrapolation_figure(_fake_result())
    (ax,) = content_axes(fig)
    assert ax.get_xlabel() and ax.get_ylabel()
    assert ax.get_yscale() == "log"  # a 40x spread between lines
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    # readable names, not registry names
    assert legend == ["ALiBi", "sinusoidal", "T5 bias", "NoPE", "learned table (cannot run at 128, 256)"]
    data_lines = [line for line in ax.lines if len(line.get_xdata()) > 0 and line.get_label() in legend]
    assert [list(line.get_ydata()) for line in data_lines] == [
        [5.0, 4.8, 4.7], [5.0, 30.0, 200.0], [5.1, 5.2, 5.3], [5.0, 6.0, 7.0], [4.9]
    ]  # fmt: skip
    vertical = [line for line in ax.lines if list(line.get_xdata()) == [64, 64]]
    assert vertical, "the training length is not marked"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["64", "128", "256"]


def test_extrapolation_figure_is_readable():
    fig = extrapolation_figure(_fake_result())
    (ax,) = content_axes(fig)
    title = fig._suptitle.get_text()
    # the evaluation text as scored (the results' chars, not the eval_chars asked for); the corpus is
    # named without its local path
    assert "1,000 validation characters scored per length" in title and "2,048" not in title
    assert "Python 3.11.7 standard library, top-level *.py, 9,000 characters" in title
    assert "/usr/lib" not in title and "\n" in title and not ax.get_title()
    # log ticks are plain round numbers (5, 10, 20, ...), not 10^k with mantissas
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert len(ticks) >= 4 and all(t.replace(".", "").isdigit() for t in ticks), ticks
    assert all(float(t) == float(f"{float(t):.2g}") for t in ticks)
    # the one learned point is drawn large, outlined and above every line, and named beside it
    (learned,) = [line for line in ax.lines if line.get_label().startswith("learned table")]
    assert learned.get_markersize() >= 9 and learned.get_zorder() > max(
        line.get_zorder() for line in ax.lines if line is not learned
    )
    assert any(t.get_text() == "learned table" for t in ax.texts)
    # the "cannot run" marks sit inside the axes, in a strip below every line, not in the title area
    (marks,) = ax.collections
    assert marks.get_offset_transform() == ax.get_xaxis_transform()  # y in axes fractions
    heights = [y for _, y in marks.get_offsets()]
    assert all(0.0 < y < 0.1 for y in heights)
    low = ax.get_ylim()[0]
    lowest = min(min(line.get_ydata()) for line in ax.lines if not line.get_label().startswith("_"))
    assert math.log(lowest / low) / math.log(ax.get_ylim()[1] / low) > 0.1


def test_t5_figure_shows_its_buckets_and_learned_tables_are_seeded_and_said_untrained():
    from posenc.functional import relative_position_bucket

    fig = encoding_figure("t5", length=100, d_model=64, num_heads=4)
    heat = next(ax for ax in content_axes(fig) if ax.images)
    shown = torch.as_tensor(heat.images[0].get_array().filled(math.nan), dtype=torch.float64)
    i = torch.arange(32)
    expected = relative_position_bucket(i[None, :] - i[:, None], bidirectional=False).double()
    expected = expected.masked_fill(i[None, :] > i[:, None], math.nan)  # a causal model: future keys blank
    torch.testing.assert_close(shown, expected, equal_nan=True)  # the T5 paper's buckets, causal
    title = fig.subfigs[0]._suptitle.get_text().replace("\n", " ")
    assert "bucket" in title and "the first 32 of 100 positions" in title  # the cap is said
    curve = next(ax for ax in content_axes(fig) if not ax.images).lines[0].get_ydata()
    assert list(curve[:4]) == [0, 1, 2, 3] and curve[-1] == 31  # exact near, one shared bucket far

    state = torch.random.get_rng_state()
    first = encoding_figure("learned", length=16, d_model=16, num_heads=2)
    second = encoding_figure("learned", length=16, d_model=16, num_heads=2)
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's random state untouched
    table = [content_axes(f)[0].images[0].get_array().data for f in (first, second)]
    assert (table[0] == table[1]).all()  # seeded: the same picture on every run
    assert "untrained" in content_axes(first)[0].get_title()


def test_long_spec_titles_are_wrapped():
    spec = "rope(scaling={'rope_type': 'yarn', 'factor': 4.0, 'original_max_position_embeddings': 64})"
    title = content_axes(encoding_figure(spec, length=32))[0].get_title()
    assert spec.replace(" ", "") in title.replace("\n", "").replace(" ", "")
    assert max(len(line) for line in title.splitlines()) <= 60


def test_plot_without_matplotlib_says_that_nothing_is_written(tmp_path, monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a)
    )
    assert main(["plot", "rope", "--out", str(tmp_path / "rope.png")]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == "posenc plot: error: matplotlib is not installed (pip install 'posenc[cli]'); posenc plot draws with it\n"
    )
    assert not list(tmp_path.iterdir())


def _inside_the_image(fig) -> None:
    """Every title of ``fig`` (the figure's, each axes') lies inside the image once drawn."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    titles = [t for t in [fig._suptitle, *(ax.title for ax in fig.axes)] if t is not None and t.get_text()]
    assert titles
    for text in titles:
        box = text.get_window_extent(renderer)
        assert box.x0 >= 0 and box.x1 <= fig.bbox.width, f"title cut off: {text.get_text()!r}"
        assert box.y0 >= 0 and box.y1 <= fig.bbox.height, f"title cut off: {text.get_text()!r}"


def test_thirteen_encodings_are_thirteen_distinct_lines_and_equal_ones_stay_visible():
    config = StudyConfig(train_len=64, eval_lens=(64, 128, 256), eval_chars=2048)
    names = [
        "alibi", "fire", "kerple", "query_temperature", "mrope", "none", "relative_bias",
        "transformer_xl", "rope", "shaw", "sinusoidal", "xpos", "learned",
    ]  # fmt: skip
    values = {name: [4.0 + i, 4.5 + i, 5.0 + 2 * i] for i, name in enumerate(names)}
    values["rope"] = values["mrope"]  # M-RoPE on text is RoPE
    values["none"] = values["query_temperature"]  # below its floor, Llama 4's temperature is NoPE
    encodings = [
        EncodingResult(
            name,
            "bias",
            1,
            1.0,
            0.0,
            0.0,
            [
                LengthResult(n, 1000, math.log(v), v)
                for n, v in zip(config.eval_lens, values[name], strict=True)
            ],
        )
        for name in names
    ]
    fig = extrapolation_figure(StudyResult(config, {"source": "x", "characters": 9}, encodings, {}))
    (ax,) = content_axes(fig)
    lines = [line for line in ax.lines if not line.get_label().startswith("_")]
    assert len(lines) == 13
    looks = [(line.get_color(), line.get_marker(), str(line.get_linestyle())) for line in lines]
    assert len(set(looks)) == 13, looks
    assert len({line.get_marker() for line in lines}) == 13  # no two alike even in grey print
    # A line equal to one drawn before it says so, and is drawn over it hollow and dashed: both visible.
    by_label = {line.get_label(): line for line in lines}
    for copy, first in (("RoPE (= M-RoPE)", "M-RoPE"), ("NoPE (= query temperature)", "query temperature")):
        over, under = by_label[copy], by_label[first]
        assert list(over.get_ydata()) == list(under.get_ydata())
        assert over.get_markerfacecolor() == "none" and over.get_zorder() > under.get_zorder()
        assert over.get_linestyle() != under.get_linestyle() and over.get_color() != under.get_color()
    _inside_the_image(fig)


def test_extend_figure_title_is_inside_the_image_and_methods_differ_in_marker():
    import json

    from posenc.app.plots import extend_figure
    from posenc.app.study import ExtendResult

    committed = Path(__file__).resolve().parents[2] / "docs" / "extend" / "results.json"
    result = ExtendResult.from_dict(json.loads(committed.read_text(encoding="utf-8")))
    fig = extend_figure(result)
    _inside_the_image(fig)
    (ax,) = content_axes(fig)
    zero_shot = [line for line in ax.lines if line.get_label().endswith("zero-shot")]
    assert len(zero_shot) == len({r.method for r in result.rows})
    assert len({line.get_marker() for line in zero_shot}) == len(zero_shot)


@pytest.mark.parametrize("name", ["shaw", "transformer_xl"])
def test_a_bias_shared_by_the_heads_is_one_panel_and_a_causal_model_masks_future_keys(name):
    fig = encoding_figure(name, length=32, d_model=64, num_heads=8)
    heat = [ax for ax in content_axes(fig) if ax.images]
    curve = next(ax for ax in content_axes(fig) if not ax.images)
    if name == "shaw":  # the paper's table is shared by the heads: one panel and one curve, said so
        assert [ax.get_title() for ax in heat] == ["every head"]
        assert [t.get_text() for t in curve.get_legend().get_texts()] == ["every head"]
        assert "the same for all 8 heads" in fig.subfigs[0]._suptitle.get_text().replace("\n", " ")
    else:  # one table per head: a panel each
        assert [ax.get_title() for ax in heat] == [f"head {h}" for h in range(8)]
    # the figure is of a causal model, as ALiBi's and T5's are: future keys are blank
    shown = torch.as_tensor(heat[0].images[0].get_array().filled(math.nan), dtype=torch.float64)
    future = torch.ones(32, 32, dtype=torch.bool).triu(1)
    assert shown[future].isnan().all() and not shown[~future].isnan().any()
    assert "future keys masked" in fig.subfigs[0]._suptitle.get_text().replace("\n", " ")


def test_per_head_shaw_tables_are_drawn_per_head():
    fig = encoding_figure("shaw(per_head=True)", length=16, d_model=64, num_heads=4)
    assert [ax.get_title() for ax in content_axes(fig) if ax.images] == [f"head {h}" for h in range(4)]


def test_a_rotary_figure_says_when_its_cosines_are_scaled():
    """xPos's decay and YaRN's attention factor scale the rotation's diagonal, which the figure titled plain
    cos(position · θ) and clipped at ±1 (YaRN reaches 1.14)."""
    yarn = "rope(scaling={'rope_type': 'yarn', 'factor': 4.0, 'original_max_position_embeddings': 64})"
    for spec, scaled in (("rope", False), ("xpos", True), (yarn, True)):
        figure = encoding_figure(spec)
        assert ("× its scale" in figure.axes[0].get_title()) is scaled, spec
        assert figure.axes[0].images[0].get_clim()[1] >= 1.0
