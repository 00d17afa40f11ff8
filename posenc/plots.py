"""Pictures of position encodings and of the extrapolation study (matplotlib, imported lazily).

Every plot goes through the encodings' public hooks (``encode_input``, ``encode_qk``,
``attention_bias``), never through a second copy of their formulas, so a picture shows what
the library computes:

* additive encodings (sinusoidal, learned, 2D): the table as a position × channel heatmap,
  and the dot-product similarity of one position with every other;
* rotary encodings (RoPE): ``cos(position · θ_i)`` per channel, read off the rotation of
  basis vectors, and the long-distance decay of ``q · k`` (Su et al., RoFormer, §3.4.3);
* axial rotary encodings (2D RoPE): cos per channel over the patches, and the 2D similarity
  of the centre patch with every patch;
* bias encodings (ALiBi, T5, KERPLE, FIRE, Shaw's key term): the bias matrix of every head,
  and the bias against distance (a bias that reads the queries is shown for all-ones queries);
* NoPE: the causal mask, the only thing that orders tokens.

matplotlib is imported only when a plot is drawn, through :class:`matplotlib.figure.Figure`
with the Agg canvas, so the global pyplot backend of the caller is left alone.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ._checks import check_positive_int
from .base import PositionalEncoding
from .registry import build

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

    # For the annotations only: the study never imports this module, and this module does
    # not import the study, so each can be used without the other.
    from .study import ExtendResult, StudyResult

__all__ = [
    "encoding_figure",
    "extend_figure",
    "extrapolation_figure",
    "plot_encoding",
    "plot_extend",
    "plot_extrapolation",
]

#: The figure resolution: keeps every PNG well under 300 KB while staying sharp on screen.
DPI = 110


def _new_figure(width: float, height: float) -> Figure:
    try:
        from matplotlib.figure import Figure
    except ImportError as err:  # pragma: no cover - matplotlib is in the `cli` extra
        raise ImportError("plotting needs matplotlib: pip install 'posenc[cli]'") from err
    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def _save(fig: Figure, path: str | Path) -> Path:
    out = Path(path)
    if out.parent and not out.parent.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    return out


# --- the extrapolation study ---------------------------------------------------------------------


def extrapolation_figure(result: StudyResult) -> Figure:
    """Perplexity against evaluation length, one line per encoding, the training length marked.

    Encodings are named as people say them (T5 bias, NoPE, RoPE, ...); an encoding scored at
    one length only (the learned table, which cannot run past its size) is drawn as a large
    labelled diamond so it stays visible among the others; the lengths where a model cannot
    run are marked with an ``x`` in a strip along the bottom of the plot. The title says the
    training, the corpus (its name, never a local path) and how much text each length scores.

    Args:
        result: a :class:`~posenc.study.StudyResult` (from :func:`~posenc.study.run_study`).

    Returns:
        A matplotlib :class:`~matplotlib.figure.Figure`.
    """
    from .study.results import display_name

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
        f"corpus: {_corpus_label(result.corpus)}; about {config.eval_chars:,} validation characters "
        "scored per length",
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
        result: a :class:`~posenc.study.StudyResult`.
        path: the PNG file; missing parent folders are made.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    return _save(extrapolation_figure(result), path)


def extend_figure(result: ExtendResult) -> Figure:
    """Perplexity against evaluation length per context-extension method (:func:`~posenc.study.run_extend`).

    One colour per method; zero-shot dashed with open markers, fine-tuned solid with filled
    markers; baselines (ALiBi, NoPE) in grey tones; the training length marked.

    Args:
        result: an :class:`~posenc.study.ExtendResult`.

    Returns:
        A matplotlib :class:`~matplotlib.figure.Figure`.
    """
    from .study.extend_results import DISPLAY_NAMES

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
    ax.set_title(
        f"Context extension of RoPE: {config.steps} steps at length {config.train_len}{tuned}; "
        f"factor {config.scale_factor:g}; ~{config.eval_chars:,} eval characters per length",
        fontsize=9,
    )
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    return fig


def plot_extend(result: ExtendResult, path: str | Path) -> Path:
    """Draw :func:`extend_figure` and save it as a PNG at ``path`` (parents made)."""
    return _save(extend_figure(result), path)


# --- one encoding --------------------------------------------------------------------------------


def encoding_figure(spec: Any, *, length: int = 128, d_model: int = 128, num_heads: int = 8) -> Figure:
    """A picture of one encoding, chosen by where it acts (its ``kind``).

    Args:
        spec: anything :func:`posenc.build` accepts (``"rope"``, ``"alibi(max_bias=4.0)"``, ...).
        length: positions shown (the bias heatmaps show at most 32 so each cell is visible).
        d_model: model width; the head width is ``d_model // num_heads``.
        num_heads: heads (bias encodings draw one heatmap per head).

    Returns:
        A matplotlib :class:`~matplotlib.figure.Figure`.

    Raises:
        ValueError: bad spec or sizes (from :func:`posenc.build`), a size ``<= 0``, or
            ``d_model`` not divisible by ``num_heads``.
        TypeError: a size is not an int, or a spec option of the wrong type.
    """
    check_positive_int("length", length)
    check_positive_int("d_model", d_model)
    check_positive_int("num_heads", num_heads)
    if d_model % num_heads:
        raise ValueError(f"d_model={d_model} must be divisible by num_heads={num_heads}")
    head_dim = d_model // num_heads
    dims: dict[str, Any] = {"d_model": d_model, "num_heads": num_heads, "head_dim": head_dim, "causal": True}
    label = spec if isinstance(spec, str) else None
    if isinstance(spec, str) and _takes_grid(spec):
        from .registry import parse_spec

        name, options = parse_spec(spec)
        if "grid_size" not in options:
            # a 2D encoding: the largest square grid of at most `length` patches, read row by row
            side = max(1, math.isqrt(length))
            length = side * side
            spec = {"name": name, **options, "grid_size": (side, side)}
    # Learned tables start random: a fixed seed (on a forked random state, so the caller's is
    # untouched) draws the same picture on every run.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        pe = build(spec, **dims, max_len=length)
    name = label or (pe.registry_name or type(pe).__name__)

    def wide(width: int) -> PositionalEncoding:
        """``spec`` with heads ``width`` wide (for RoPE's decay); ``pe`` itself if it cannot be rebuilt."""
        if isinstance(spec, PositionalEncoding) or width == head_dim:
            return pe
        try:
            return build(spec, **{**dims, "d_model": width * num_heads, "head_dim": width}, max_len=length)
        except (TypeError, ValueError):
            return pe

    return _figure_of(pe, name, length, d_model, num_heads, head_dim, wide)


def _figure_of(
    pe: PositionalEncoding,
    name: str,
    length: int,
    d_model: int,
    num_heads: int,
    head_dim: int,
    wide: Any,
) -> Figure:
    pe.eval()
    with torch.no_grad():
        if pe.kind == "additive":
            return _additive_figure(pe, name, length, d_model)
        if pe.kind == "rotary" and hasattr(pe, "grid_positions"):
            return _axial_figure(pe, name, head_dim)
        if pe.kind == "rotary":
            return _rotary_figure(pe, name, length, head_dim, wide(DECAY_HEAD_DIM))
        if pe.kind == "bias":
            return _bias_figure(pe, name, num_heads, head_dim, length)
        return _none_figure(name)


#: The head width of RoPE's decay curve: a real model's (Llama's 128). With a few pairs only
#: (head_dim 16) the sum of cosines is noise, not the decay RoFormer §3.4.3 describes.
DECAY_HEAD_DIM = 128
#: The most positions a bias heatmap shows (more and a cell is under a pixel).
MAX_HEATMAP = 32
#: What a title says of an encoding whose parameters have not been trained.
UNTRAINED = "untrained: initial values (random init, seed 0)"


def _wrap(text: str, width: int = 60) -> str:
    """``text`` broken into lines of at most ``width`` characters (long specs do not run off a title)."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width)) or text


def _takes_grid(spec: Any) -> bool:
    """Whether ``spec`` names a registered encoding with a ``grid_size`` option (a 2D image encoding)."""
    from .registry import describe, lookup, parse_spec

    try:
        name = (
            parse_spec(spec)[0] if isinstance(spec, str) else spec["name"] if isinstance(spec, dict) else None
        )
        if name is None:
            return False
        return any(o["name"] == "grid_size" for o in describe(lookup(name))["options"])
    except (ValueError, TypeError, KeyError):
        return False


def plot_encoding(spec: Any, path: str | Path, **sizes: Any) -> Path:
    """Draw :func:`encoding_figure` for ``spec`` and save it as a PNG at ``path``.

    Args:
        spec: anything :func:`posenc.build` accepts.
        path: the PNG file; missing parent folders are made.
        **sizes: ``length``, ``d_model``, ``num_heads`` as in :func:`encoding_figure`.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    return _save(encoding_figure(spec, **sizes), path)


def _additive_table(
    pe: PositionalEncoding, length: int, d_model: int
) -> tuple[torch.Tensor, tuple[int, int] | None]:
    """``(t, d)`` signal the encoding adds to zero embeddings, and the patch grid for 2D encodings."""
    grid = getattr(pe, "grid_size", "absent")
    if grid != "absent":
        if grid is None:
            side = max(2, math.isqrt(length))
            grid = (side, side)
        elif isinstance(grid, int):
            grid = (grid, grid)
        h, w = int(grid[0]), int(grid[1])
        x = torch.zeros(1, h, w, d_model)
        table = pe.encode_input(x).reshape(-1, d_model)
        return table.float(), (h, w)
    return pe.encode_input(torch.zeros(1, length, d_model))[0].float(), None


def _additive_figure(pe: PositionalEncoding, name: str, length: int, d_model: int) -> Figure:
    table, grid = _additive_table(pe, length, d_model)
    learned = any(True for _ in pe.parameters())
    note = f" ({UNTRAINED})" if learned else ""
    rows = table.shape[0]
    fig = _new_figure(13, 4.4)
    axes = fig.subplots(1, 3)

    image = axes[0].imshow(table.numpy(), aspect="auto", cmap="RdBu_r", interpolation="nearest")
    axes[0].set_xlabel("channel")
    axes[0].set_ylabel("patch (row-major)" if grid else "position")
    axes[0].set_title(_wrap(f"{name}: the added table{note}", 50), fontsize=10)
    fig.colorbar(image, ax=axes[0], shrink=0.8)

    similarity = table @ table.T
    image = axes[1].imshow(similarity.numpy(), cmap="viridis", interpolation="nearest")
    axes[1].set_xlabel("patch" if grid else "position j")
    axes[1].set_ylabel("patch" if grid else "position i")
    axes[1].set_title("dot product  pe[i] · pe[j]", fontsize=10)
    fig.colorbar(image, ax=axes[1], shrink=0.8)

    if grid:
        h, w = grid
        center = (h // 2) * w + w // 2
        image = axes[2].imshow(
            similarity[center].reshape(h, w).numpy(), cmap="viridis", interpolation="nearest"
        )
        axes[2].plot([w // 2], [h // 2], marker="x", color="red")
        axes[2].set_xlabel("patch column")
        axes[2].set_ylabel("patch row")
        axes[2].set_title(f"similarity of patch ({h // 2}, {w // 2}) with every patch", fontsize=10)
        fig.colorbar(image, ax=axes[2], shrink=0.8)
    else:
        for ref in sorted({0, rows // 2, rows - 1}):
            axes[2].plot(range(rows), similarity[ref].numpy(), label=f"position {ref}")
        axes[2].set_xlabel("position j")
        axes[2].set_ylabel("pe[i] · pe[j]")
        axes[2].set_title("similarity of one position with all others", fontsize=10)
        axes[2].legend(fontsize=8)
        axes[2].grid(True, alpha=0.3)
    return fig


def _rotary_figure(
    pe: PositionalEncoding, name: str, length: int, head_dim: int, wide: PositionalEncoding
) -> Figure:
    # Rotating basis vector e_c gives column c of the rotation; its c-th entry is cos(position * theta_c),
    # whatever the channel layout (half or interleaved) or scaling.
    basis = torch.eye(head_dim).reshape(head_dim, 1, 1, head_dim).expand(head_dim, 1, length, head_dim)
    rotated, _ = pe.encode_qk(basis.contiguous(), basis.contiguous())
    cos_table = rotated[torch.arange(head_dim), 0, :, torch.arange(head_dim)].T.float()  # (t, dh)

    # Long-distance decay: q = k = all-ones, q at position m, k at position 0 (RoFormer §3.4.3),
    # drawn for heads DECAY_HEAD_DIM wide (`wide`: the same spec), where it is a curve, not noise.
    distances = max(length, 1024)
    decay_dim = int(getattr(wide, "head_dim", head_dim))
    ones = torch.ones(1, 1, distances, decay_dim)
    q, k = wide.encode_qk(
        ones, ones, q_positions=torch.arange(distances), k_positions=torch.arange(distances)
    )
    decay = (q[0, 0] @ k[0, 0, 0]).float() / decay_dim

    fig = _new_figure(12, 4.4)
    axes = fig.subplots(1, 2)
    image = axes[0].imshow(
        cos_table.numpy(), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest"
    )
    axes[0].set_xlabel("channel of the head")
    axes[0].set_ylabel("position")
    axes[0].set_title(_wrap(f"{name}: cos(position · θ) per channel (head_dim {head_dim})", 55), fontsize=10)
    fig.colorbar(image, ax=axes[0], shrink=0.8)

    axes[1].plot(range(distances), decay.numpy(), linewidth=1)
    axes[1].set_xscale("symlog", linthresh=8)
    axes[1].set_xlabel("relative distance m − n (symlog)")
    axes[1].set_ylabel("q·k / head_dim  (q = k = all-ones)")
    axes[1].set_title(f"long-distance decay of q·k (head_dim {decay_dim})", fontsize=10)
    axes[1].grid(True, alpha=0.3)
    return fig


def _axial_figure(pe: Any, name: str, head_dim: int) -> Figure:
    """Axial RoPE on its grid: cos per channel over the patches, and the 2D similarity of the
    centre patch with every patch (``q = k =`` all-ones, the 2D analogue of RoFormer's decay)."""
    grid = tuple(pe.grid_size) if pe.grid_size is not None else (16,) * pe.num_axes
    coords = pe.grid_positions(grid, num_prefix_tokens=0)  # (n, a), row-major
    n = coords.shape[0]
    basis = torch.eye(head_dim).reshape(head_dim, 1, 1, head_dim).expand(head_dim, 1, n, head_dim)
    rotated, _ = pe.encode_qk(basis.contiguous(), basis.contiguous(), q_positions=coords, k_positions=coords)
    cos_table = rotated[torch.arange(head_dim), 0, :, torch.arange(head_dim)].T.float()  # (n, dh)
    ones = torch.ones(1, 1, n, head_dim)
    q, k = pe.encode_qk(ones, ones, q_positions=coords, k_positions=coords)
    centre = [s // 2 for s in grid]
    flat = 0
    for size, c in zip(grid, centre, strict=True):
        flat = flat * size + c
    similarity = ((q[0, 0] @ k[0, 0, flat]).float() / head_dim).reshape(grid)
    while similarity.dim() > 2:  # video: the centre frame
        similarity = similarity[similarity.shape[0] // 2]

    fig = _new_figure(12, 4.6)
    axes = fig.subplots(1, 2)
    image = axes[0].imshow(
        cos_table.numpy(), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest"
    )
    axes[0].set_xlabel("channel of the head")
    axes[0].set_ylabel("patch (row-major)")
    axes[0].set_title(_wrap(f"{name}: cos(coordinate · θ) per channel, grid {grid}", 55), fontsize=10)
    fig.colorbar(image, ax=axes[0], shrink=0.8)
    image = axes[1].imshow(similarity.numpy(), cmap="viridis", interpolation="nearest")
    axes[1].plot([centre[-1]], [centre[-2] if len(grid) > 1 else 0], marker="x", color="red")
    axes[1].set_xlabel("patch column")
    axes[1].set_ylabel("patch row")
    axes[1].set_title(
        f"q·k / head_dim of patch {tuple(centre)} with every patch (q = k = all-ones)", fontsize=10
    )
    fig.colorbar(image, ax=axes[1], shrink=0.8)
    return fig


def _bias_rows(pe: PositionalEncoding, num_heads: int, head_dim: int, size: int) -> torch.Tensor:
    """``(h, size, size)`` bias, one query row at a time with its own position.

    Row by row because encodings may return a per-row-shifted form that is exact only under
    softmax (causal ALiBi's key-only bias); a one-query call puts that row's reference at
    its own position, so the picture shows the textbook matrix. Queries are all-ones: a bias
    that reads the queries (Shaw's ``q · a_K(j - i)``) then shows its dependence on distance.
    """
    k = torch.zeros(1, num_heads, size, head_dim)
    rows = []
    for i in range(size):
        q = torch.ones(1, num_heads, 1, head_dim)
        bias = pe.attention_bias(q, k, q_positions=torch.tensor([i]), k_positions=torch.arange(size))
        if bias is None:
            bias = torch.zeros(1, 1, 1, size)
        rows.append(bias.float().expand(1, num_heads, 1, size)[0, :, 0])
    return torch.stack(rows, dim=1)


def _bias_figure(pe: PositionalEncoding, name: str, num_heads: int, head_dim: int, length: int) -> Figure:
    causal = bool(getattr(pe, "causal", False))
    buckets = _bucket_view(pe)
    if buckets is not None:
        # T5: an untrained table is noise; its structure is which bucket each distance falls in
        pe = buckets
    size = min(length, MAX_HEATMAP)
    matrix = _bias_rows(pe, num_heads, head_dim, size)
    if causal:
        future = torch.ones(size, size, dtype=torch.bool).triu(1)
        matrix = matrix.masked_fill(future, float("nan"))  # masked: drawn blank
    learned = any(True for _ in pe.parameters())
    note = f" ({UNTRAINED})" if learned and buckets is None else ""
    content = _reads_queries(pe, num_heads, head_dim)
    if content:
        note += ", query = all-ones"
    if length > size:
        note += f"; the first {size} of {length} positions"

    # Bias against distance: one query at position `far`, keys 0..far, so distance = far - j.
    far = 256
    k = torch.zeros(1, num_heads, far + 1, head_dim)
    q = torch.ones(1, num_heads, 1, head_dim)
    row = pe.attention_bias(q, k, q_positions=torch.tensor([far]), k_positions=torch.arange(far + 1))
    if row is None:
        row = torch.zeros(1, 1, 1, far + 1)
    row = row.float().expand(1, num_heads, 1, far + 1)[0, :, 0].flip(-1)  # index = distance
    row = row - row[:, :1]  # per-row constants cancel under softmax: show bias(d) - bias(0)

    shown = 1 if buckets is not None else num_heads  # buckets are the same for every head
    cols = min(4, shown)
    grid_rows = math.ceil(shown / cols)
    fig = _new_figure(3.0 * max(cols, 2) + 4.5, 2.9 * grid_rows + 0.6 + (0.6 if buckets is not None else 0))
    subfigs = fig.subfigures(1, 2, squeeze=False, width_ratios=[3.0 * max(cols, 2), 4.5])[0]
    axes = subfigs[0].subplots(grid_rows, cols, squeeze=False)
    finite = matrix[torch.isfinite(matrix)]
    vmin, vmax = (float(finite.min()), float(finite.max())) if finite.numel() else (0.0, 0.0)
    image = None
    for h in range(grid_rows * cols):
        ax = axes[h // cols][h % cols]
        if h >= shown:
            ax.set_visible(False)
            continue
        image = ax.imshow(matrix[h].numpy(), cmap="magma", vmin=vmin, vmax=vmax, interpolation="nearest")
        ax.set_title("every head" if buckets is not None else f"head {h}", fontsize=9)
        ax.set_xlabel("key position", fontsize=8)
        ax.set_ylabel("query position", fontsize=8)
        ax.tick_params(labelsize=7)
    what = "bucket of the distance" if buckets is not None else "bias added to the score"
    if image is not None:
        subfigs[0].colorbar(image, ax=axes, shrink=0.7, label=what)
    if buckets is not None:
        title = (
            f"{name}: the bucket of each query-key pair (the table row it reads; training learns one value "
            f"per bucket and head){note}"
        )
    else:
        title = f"{name}: bias matrix per head{note}"
    title += " — future keys masked" if causal else ""
    subfigs[0].suptitle(_wrap(title, int(12 * 3.0 * max(cols, 2))), fontsize=10)

    ax = subfigs[1].subplots()
    # a content term of random initial tables is noise against distance: a few heads stay readable
    for h in range(min(num_heads, 3) if content else shown):
        ax.plot(
            range(far + 1),
            row[h].numpy(),
            label="every head" if buckets is not None else f"head {h}",
            linewidth=1,
            drawstyle="steps-post" if buckets is not None else "default",
        )
    ax.set_xlabel("query − key distance")
    ax.set_ylabel("bucket" if buckets is not None else "bias(distance) − bias(0)")
    ax.set_title("bucket against distance" if buckets is not None else "bias against distance", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return fig


def _bucket_view(pe: PositionalEncoding) -> PositionalEncoding | None:
    """A copy of a T5-style bias whose table holds each bucket's index, or ``None`` for other encodings.

    T5's bias is a learned value per (bucket, head); through the public ``attention_bias``
    hook such a copy shows the bucket of every distance (exact for near ones, logarithmic
    farther, one shared bucket past ``max_distance``), the same for every head.
    """
    table = getattr(pe, "relative_attention_bias", None)
    if not isinstance(table, torch.nn.Embedding) or not hasattr(pe, "num_buckets"):
        return None
    import copy

    view = copy.deepcopy(pe)
    embedding = view.get_submodule("relative_attention_bias")
    if not isinstance(embedding, torch.nn.Embedding):  # never: `pe`'s was one (for the type checker)
        return None
    weight = embedding.weight
    weight.copy_(torch.arange(weight.shape[0], dtype=weight.dtype)[:, None].expand_as(weight))
    return view


def _reads_queries(pe: PositionalEncoding, num_heads: int, head_dim: int) -> bool:
    """Whether the bias depends on the queries' values (a content term), not only on positions."""
    k = torch.zeros(1, num_heads, 4, head_dim)
    zero = pe.attention_bias(torch.zeros(1, num_heads, 4, head_dim), k)
    one = pe.attention_bias(torch.ones(1, num_heads, 4, head_dim), k)
    return zero is not None and one is not None and not torch.equal(zero, one)


def _none_figure(name: str) -> Figure:
    size = 16
    fig = _new_figure(5.5, 4.6)
    ax = fig.add_subplot()
    mask = torch.ones(size, size).tril()
    ax.imshow(mask.numpy(), cmap="Greys", vmin=0, vmax=1.5, interpolation="nearest")
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    ax.set_title(
        f"{name}: no position signal is added anywhere.\nIn a causal model only the mask (grey: may attend) orders tokens.",
        fontsize=10,
    )
    return fig
