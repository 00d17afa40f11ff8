"""Pictures of bias encodings (ALiBi, T5, KERPLE, FIRE, Shaw's key term): the bias matrix of every
head and the bias against distance, read through the public ``attention_bias`` hook.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from posenc import PositionalEncoding

from ._figure import UNTRAINED, _new_figure, _wrap

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

#: The most positions a bias heatmap shows (more and a cell is under a pixel).
MAX_HEATMAP = 32


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
    # The picture is of a causal model (encoding_figure builds with causal=True): an encoding
    # without a `causal` option of its own (Shaw, Transformer-XL) is masked as ALiBi and T5 are.
    causal = bool(getattr(pe, "causal", True))
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

    # Buckets are the same for every head, and so is a table the heads share (Shaw's, as in the
    # paper): one panel and one curve then, not copies of it.
    shared = buckets is not None or all(
        torch.allclose(matrix[h], matrix[0], equal_nan=True) and torch.allclose(row[h], row[0])
        for h in range(1, num_heads)
    )
    shown = 1 if shared else num_heads
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
        ax.set_title("every head" if shared else f"head {h}", fontsize=9)
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
    elif shared and num_heads > 1:
        title = f"{name}: bias matrix, the same for all {num_heads} heads (one shared table){note}"
    else:
        title = f"{name}: bias matrix per head{note}"
    title += " — future keys masked" if causal else ""
    subfigs[0].suptitle(_wrap(title, int(12 * 3.0 * max(cols, 2))), fontsize=10)

    ax = subfigs[1].subplots()
    # a content term of random initial tables is noise against distance: a few heads stay readable
    for h in range(min(shown, 3) if content else shown):
        ax.plot(
            range(far + 1),
            row[h].numpy(),
            label="every head" if shared else f"head {h}",
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
