"""What every figure shares: a matplotlib Figure (imported lazily), saving it, and title helpers."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .._files import atomic_write

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

#: The figure resolution: keeps every PNG well under 300 KB while staying sharp on screen.
DPI = 110
#: The PNG text chunk every figure carries (``outdir.made_by_posenc`` reads it back).
FIGURE_SOFTWARE = "posenc study figure"


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
    # (whole, or the old file kept); its Software names posenc: `posenc ... --force` removes only such figures
    return atomic_write(
        out, lambda tmp: fig.savefig(tmp, format="png", metadata={"Software": FIGURE_SOFTWARE})
    )


#: What a title says of an encoding whose parameters have not been trained.
UNTRAINED = "untrained: initial values (random init, seed 0)"


def _wrap(text: str, width: int = 60) -> str:
    """``text`` broken into lines of at most ``width`` characters (long specs do not run off a title)."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width)) or text
