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

The modules: :mod:`~posenc.app.plots.encoding_figures` (one encoding), :mod:`~posenc.app.plots.bias_figures`
(the bias encodings' matrices) and :mod:`~posenc.app.plots.study_figures` (the studies' results, which
need no torch); every name below is importable from ``posenc.app.plots``.
"""

from __future__ import annotations

from ._figure import DPI as DPI
from ._figure import UNTRAINED as UNTRAINED
from .bias_figures import MAX_HEATMAP as MAX_HEATMAP
from .encoding_figures import DECAY_HEAD_DIM as DECAY_HEAD_DIM
from .encoding_figures import encoding_figure, plot_encoding
from .study_figures import extend_figure, extrapolation_figure, plot_extend, plot_extrapolation

__all__ = [
    "encoding_figure",
    "extend_figure",
    "extrapolation_figure",
    "plot_encoding",
    "plot_extend",
    "plot_extrapolation",
]
