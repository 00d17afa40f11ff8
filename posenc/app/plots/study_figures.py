"""Figures of the studies' results: :func:`extrapolation_figure` (``posenc extrapolate``) and
:func:`extend_figure` (``posenc extend``). They read a result's data only, so they need no torch;
the study itself is never imported here except for its display names, inside a call.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._figure import _new_figure, _save

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

    # For the annotations only: the study never imports this module, and this module does
    # not import the study, so each can be used without the other.
    from ..study import ExtendResult, StudyResult

__all__ = ["extend_figure", "extrapolation_figure", "plot_extend", "plot_extrapolation"]


def extrapolation_figure(result: StudyResult) -> Figure:
    """Perplexity against evaluation length, one line per encoding, the training length marked.

    Encodings are named as people say them (T5 bias, NoPE, RoPE, ...), each in its own colour,
    marker and line style; a line with the same numbers as one drawn before it (M-RoPE on text
    is RoPE) is drawn dashed over it with open markers and ``(= RoPE)`` in the legend, so both
    stay visible. An encoding scored at one length only (the learned table, which cannot run
    past its size) is drawn as a large labelled diamond so it stays visible among the others;
    the lengths where a model cannot run are marked with an ``x`` in a strip along the bottom
    of the plot. The title says the training, the corpus (its name, never a local path) and how much text each length scored.

    Args:
        result: a :class:`~posenc.app.study.StudyResult` (from :func:`~posenc.app.study.run_study`).

    Returns:
        A matplotlib :class:`~matplotlib.figure.Figure`.
    """
    from ..study.results import display_name

    fig = _new_figure(9.5, 5.0)
    ax = fig.add_subplot()
    config = result.config
    lens = list(config.eval_lens)
    values = [r.perplexity for e in result.encodings for r in e.lengths if r.perplexity is not None]
    top = max(values) if values else 1.0
    bottom = min(values) if values else 1.0
    log_y = top / max(bottom, 1e-9) > 3.0  # a log scale only when the spread needs it
    any_failed = False
    drawn: dict[tuple[tuple[int, str], ...], str] = {}  # the points of each line drawn, by name
    for i, enc in enumerate(result.encodings):
        ok = [(r.eval_len, r.perplexity) for r in enc.lengths if r.perplexity is not None]
        failed = [r.eval_len for r in enc.lengths if r.perplexity is None]
        name = display_name(enc.label)
        label = name + (f" (cannot run at {', '.join(map(str, failed))})" if failed else "")
        color, marker, linestyle = _line_style(i)
        if len(ok) == 1:
            # one point among many at the same length: large, outlined and on top, with its name
            ax.plot(
                *zip(*ok, strict=True),
                color=color,
                marker="D",
                markersize=9,
                markeredgecolor="black",
                linestyle="none",
                label=label,
                zorder=5,
            )
            ax.annotate(
                name,
                xy=ok[0],
                xytext=(10, -16),
                textcoords="offset points",
                fontsize=8,
                bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none", "alpha": 0.85},
                zorder=6,
            )
        elif ok:
            key = tuple((n, f"{p:.3f}") for n, p in ok)  # equal as the table shows them
            same = drawn.get(key)
            if same is None:
                drawn[key] = name
                ax.plot(*zip(*ok, strict=True), color=color, marker=marker, linestyle=linestyle, label=label)
            else:
                # the same numbers as a line already drawn (M-RoPE on text is RoPE): dashed, over
                # it, with large open markers, so both stay visible, and said in the legend
                ax.plot(
                    *zip(*ok, strict=True),
                    color=color,
                    marker=marker,
                    markersize=11,
                    markerfacecolor="none",
                    markeredgewidth=1.5,
                    linestyle=(0, (4, 3)),
                    linewidth=2.0,
                    label=f"{label} (= {same})",
                    zorder=3,
                )
        if failed:
            any_failed = True
            ax.scatter(
                failed,
                [0.04] * len(failed),
                transform=ax.get_xaxis_transform(),
                marker="x",
                s=60,
                color=color,
                label=None if ok else label,
                zorder=5,
            )
    if any_failed:
        # the bottom strip holds the "cannot run" marks: keep every line above it
        ax.annotate(
            "x: cannot run at this length",
            xy=(0.01, 0.04),
            xycoords="axes fraction",
            va="center",
            fontsize=8,
            color="0.3",
        )
        low, high = (math.log(bottom), math.log(top)) if log_y else (bottom, top)
        span = (high - low) or 1.0
        lo_lim, hi_lim = low - 0.16 * span, high + 0.08 * span
        ax.set_ylim(*((math.exp(lo_lim), math.exp(hi_lim)) if log_y else (lo_lim, hi_lim)))
    _train_length_mark(ax, config.train_len)
    ax.set_xscale("log", base=2)
    ax.set_xticks(lens, [str(n) for n in lens])
    ax.minorticks_off()
    if log_y:
        ax.set_yscale("log")
        _plain_log_ticks(ax, bottom, top)
    ax.set_xlabel("evaluation length (characters)")
    ax.set_ylabel("validation perplexity per character" + (" (log scale)" if log_y else ""))
    # a figure title (not the axes'), so constrained layout keeps every line inside the image
    fig.suptitle(
        f"Train short, test long: {config.steps} steps at length {config.train_len}\n"
        f"corpus: {_corpus_label(result.corpus)}; {result.scored().replace('characters', 'validation characters', 1)}",
        fontsize=10,
    )
    ax.grid(True, which="major", alpha=0.3)
    # outside the axes, so it covers neither the lines nor the training-length label
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    return fig


#: Line markers in drawing order: with the ten colours of matplotlib's cycle, no two of up to
#: 13 lines look alike (past ten, the colours come back with another line style and marker).
_MARKERS = ("o", "s", "^", "v", "P", "X", "*", "<", ">", "h", "p", "d", "8")
_LINESTYLES = ("-", (0, (5, 2)), (0, (1, 1.5)), (0, (6, 2, 1, 2)))


def _line_style(i: int) -> tuple[str, str, Any]:
    """``(colour, marker, line style)`` of the ``i``-th line of a figure."""
    return f"C{i % 10}", _MARKERS[i % len(_MARKERS)], _LINESTYLES[(i // 10) % len(_LINESTYLES)]


def _train_length_mark(ax: Any, train_len: int) -> None:
    ax.axvline(train_len, color="0.4", linestyle="--", linewidth=1)
    ax.annotate(
        f"training length {train_len}",
        xy=(train_len, 1.0),
        xycoords=("data", "axes fraction"),
        xytext=(4, -14),
        textcoords="offset points",
        color="0.3",
        fontsize=9,
    )


def _corpus_label(corpus: dict[str, Any]) -> str:
    """The corpus as a title shows it: its name and size, without a local path."""
    source = str(corpus.get("source", ""))
    if source.startswith("Python ") and source.endswith(")") and " (" in source:
        source = source[: source.rindex(" (")]  # "Python 3.11 standard library, top-level *.py"
    elif "/" in source or "\\" in source:
        source = Path(source).name or source
    characters = corpus.get("characters")
    return f"{source[:60]}, {characters:,} characters" if isinstance(characters, int) else source[:60]


def _plain_log_ticks(ax: Any, low: float, high: float) -> None:
    """Log-scale ticks at round numbers written plainly (6, 8, 10, 20), not as ``6×10⁰``."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    ticks: list[float] = []
    for mantissas in ((1,), (1, 2, 5), (1, 2, 3, 5), (1, 1.5, 2, 3, 4, 5, 6, 8)):
        ticks = [
            m * 10.0**e
            for e in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1)
            for m in mantissas
            if low * 0.98 <= m * 10.0**e <= high * 1.02
        ]
        if len(ticks) >= 4:
            break
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_minor_formatter(NullFormatter())


def plot_extrapolation(result: StudyResult, path: str | Path) -> Path:
    """Draw :func:`extrapolation_figure` and save it as a PNG at ``path``.

    Args:
        result: a :class:`~posenc.app.study.StudyResult`.
        path: the PNG file; missing parent folders are made.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    return _save(extrapolation_figure(result), path)


def extend_figure(result: ExtendResult) -> Figure:
    """Perplexity against evaluation length per context-extension method (:func:`~posenc.app.study.run_extend`).

    One colour and marker per method; zero-shot dashed with open markers, fine-tuned solid with
    filled markers; the training length marked; the title (two lines) says the run.

    Args:
        result: an :class:`~posenc.app.study.ExtendResult`.

    Returns:
        A matplotlib :class:`~matplotlib.figure.Figure`.
    """
    from ..study.extend_results import DISPLAY_NAMES

    fig = _new_figure(9.5, 4.8)
    ax = fig.add_subplot()
    config = result.config
    lens = list(config.eval_lens)
    methods = list(dict.fromkeys(r.method for r in result.rows))
    styles = {m: _line_style(i) for i, m in enumerate(methods)}
    for method in methods:
        color, marker, _ = styles[method]
        for steps in sorted({r.finetune_steps for r in result.rows if r.method == method}):
            points = sorted(
                (r.eval_len, r.perplexity)
                for r in result.rows
                if (r.method, r.finetune_steps) == (method, steps)
            )
            name = DISPLAY_NAMES.get(method, method)
            ax.plot(
                *zip(*points, strict=True),
                color=color,
                linestyle="-" if steps else "--",
                marker=marker,
                markerfacecolor=color if steps else "white",
                label=f"{name}, {steps} fine-tuning steps" if steps else f"{name}, zero-shot",
            )
    _train_length_mark(ax, config.train_len)
    ax.set_xscale("log", base=2)
    ax.set_xticks(lens, [str(n) for n in lens])
    ax.minorticks_off()
    ax.set_xlabel("evaluation length (characters)")
    ax.set_ylabel("validation perplexity per character")
    tuned = f", then {config.finetune_steps} steps at {lens[-1]}" if config.finetune_steps else ""
    # a figure title (not the axes'), in two lines: constrained layout keeps it inside the image
    fig.suptitle(
        f"Context extension of RoPE: {config.steps} steps at length {config.train_len}{tuned}\n"
        f"factor {config.scale_factor:g}; {result.scored().replace('characters', 'validation characters', 1)}",
        fontsize=10,
    )
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    return fig


def plot_extend(result: ExtendResult, path: str | Path) -> Path:
    """Draw :func:`extend_figure` and save it as a PNG at ``path`` (parents made)."""
    return _save(extend_figure(result), path)
