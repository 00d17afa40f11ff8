"""A picture of one encoding, chosen by where it acts: :func:`encoding_figure` and :func:`plot_encoding`.

Additive tables and their similarity, RoPE's cos per channel and its decay of ``q · k``,
axial RoPE on its grid, NoPE's mask; bias encodings are drawn by :mod:`.bias_figures`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from posenc import PositionalEncoding
from posenc.registry import build

from .._checks import check_positive_int
from ._figure import UNTRAINED, _new_figure, _save, _wrap
from .bias_figures import _bias_figure

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

__all__ = ["encoding_figure", "plot_encoding"]


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
        from posenc.registry import parse_spec

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


def _takes_grid(spec: Any) -> bool:
    """Whether ``spec`` names a registered encoding with a ``grid_size`` option (a 2D image encoding)."""
    from posenc.registry import describe, lookup, parse_spec

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
    # (xPos's decay and YaRN's attention factor scale the cosines: the colour range holds them, the title says so)
    bound = max(1.0, float(cos_table.abs().max()))
    image = axes[0].imshow(
        cos_table.numpy(), aspect="auto", cmap="RdBu_r", vmin=-bound, vmax=bound, interpolation="nearest"
    )
    axes[0].set_xlabel("channel of the head")
    axes[0].set_ylabel("position")
    scaled = not torch.allclose(
        rotated.float().norm(dim=-1), torch.ones(()), atol=1e-4
    )  # (not a pure rotation)
    what = "cos(position · θ) × its scale" if scaled else "cos(position · θ)"
    axes[0].set_title(_wrap(f"{name}: {what} per channel (head_dim {head_dim})", 55), fontsize=10)
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
    coords = pe.grid_positions(grid, num_prefix_tokens=0, num_suffix_tokens=0)  # (n, a), row-major
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
