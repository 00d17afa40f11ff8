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

    Encodings are named as people say them (T5 bias, NoPE, RoPE, ...); an encoding scored at
    one length only (the learned table, which cannot run past its size) is drawn as a large
    labelled diamond so it stays visible among the others; the lengths where a model cannot
    run are marked with an ``x`` in a strip along the bottom of the plot. The title says the
    training, the corpus (its name, never a local path) and how much text each length scores.

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
    for enc in result.encodings:
        ok = [(r.eval_len, r.perplexity) for r in enc.lengths if r.perplexity is not None]
        failed = [r.eval_len for r in enc.lengths if r.perplexity is None]
        name = display_name(enc.label)
        label = name + (f" (cannot run at {', '.join(map(str, failed))})" if failed else "")
        color = None
        if len(ok) == 1:
            # one point among many at the same length: large, outlined and on top, with its name
            (line,) = ax.plot(
                *zip(*ok, strict=True),
                marker="D",
                markersize=9,
                markeredgecolor="black",
                linestyle="none",
                label=label,
                zorder=5,
            )
            color = line.get_color()
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
            (line,) = ax.plot(*zip(*ok, strict=True), marker="o", label=label)
            color = line.get_color()
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

    One colour per method; zero-shot dashed with open markers, fine-tuned solid with filled
    markers; baselines (ALiBi, NoPE) in grey tones; the training length marked.

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
    colors = {m: f"C{i % 10}" for i, m in enumerate(methods)}
    for method in methods:
        for steps in sorted({r.finetune_steps for r in result.rows if r.method == method}):
            points = sorted(
                (r.eval_len, r.perplexity)
                for r in result.rows
                if (r.method, r.finetune_steps) == (method, steps)
            )
            name = DISPLAY_NAMES.get(method, method)
            ax.plot(
                *zip(*points, strict=True),
                color=colors[method],
                linestyle="-" if steps else "--",
                marker="o",
                markerfacecolor=colors[method] if steps else "white",
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
