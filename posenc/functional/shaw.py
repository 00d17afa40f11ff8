"""Shaw et al.'s clipped relative positions: the key and value terms, by distance. No state.

Shaw, Uszkoreit & Vaswani (2018), "Self-Attention with Relative Position Representations",
learn one vector per clipped relative distance ``clip(j - i)`` and use it twice:

* in the scores (eq. 4): ``e_ij = q_i · (k_j + a^K_ij) / sqrt(dh)``, and
* in the output (eq. 3): ``z_i = Σ_j α_ij (v_j + a^V_ij)``.

Both terms go through the ``n`` distinct distances, never a ``(b, h, tq, tk, dh)`` tensor:
the key term is ``q @ a^Kᵀ`` ``(b, h, tq, n)`` then gathered by distance into ``(b, h, tq, tk)``;
the value term sums the weights of each distance (``scatter_add`` into ``(b, h, tq, n)``) and
multiplies by ``a^V``. Distances beyond the clip share the end rows, so their weights simply
collapse into them.

Shape key: ``b`` batch, ``h`` heads, ``tq`` queries, ``tk`` keys, ``dh`` head width,
``n = left + right + 1`` clipped distances.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._compat import outside_autocast, precise_dtype

__all__ = ["clipped_distance_index", "shaw_value_term"]


def clipped_distance_index(q_positions: Tensor, k_positions: Tensor, left: int, right: int) -> Tensor:
    """Row of each (query, key) pair in a table over clipped distances.

    ``clamp(k_pos - q_pos, -left, right) + left``: row 0 is every key ``left`` or more before
    the query, row ``left`` the query itself, row ``left + right`` every key ``right`` or more
    after it (Wav2Vec2-BERT's ``distance_embedding`` rows).

    Args:
        q_positions: ``(tq,)`` or ``(b, tq)`` integer positions of the queries.
        k_positions: ``(tk,)`` or ``(b, tk)`` integer positions of the keys.
        left, right: clip for keys before / after the query (``>= 0`` in a table; a block of queries
            past its keys passes a window of distances ``-left .. right`` on one side of 0).

    Returns:
        ``(tq, tk)`` when both positions are 1-D, else ``(b, tq, tk)``; long, in ``[0, n)``.
    """
    # (either may be negative: a block of queries past its keys clips to distances -left .. right, all > 0)
    if isinstance(left, int) and isinstance(right, int) and left + right < 0:  # (symbolic when traced)
        raise ValueError(f"the distances -left .. right must not be empty, got left={left}, right={right}")
    relative = k_positions.unsqueeze(-2) - q_positions.unsqueeze(-1)
    return relative.clamp(-left, right).add_(left).long()


def shaw_value_term(probs: Tensor, table: Tensor, index: Tensor) -> Tensor:
    """The output's relative term ``Σ_j probs[i, j] · a^V[index[i, j]]``.

    Args:
        probs: ``(b, h, tq, tk)`` attention weights (after softmax, masking and dropout).
        table: ``(n, dv)`` shared by the heads or ``(h, n, dv)`` per head.
        index: ``(tq, tk)`` or ``(b, tq, tk)`` rows from :func:`clipped_distance_index`.

    Returns:
        ``(b, h, tq, dv)`` in ``probs``' dtype, summed in float32 (float64 for float64): the
        weights of each distance are added up (``(b, h, tq, n)``), then times ``table``.
    """
    dtype = precise_dtype(probs)
    b, h, tq, tk = probs.shape
    index = index.unsqueeze(-3).expand(b, h, tq, tk)  # a view, stride 0 over h (and b for (tq, tk))
    weights = probs.new_zeros(b, h, tq, table.shape[-2], dtype=dtype).scatter_add(-1, index, probs.to(dtype))
    return outside_autocast(torch.matmul, weights, table.to(dtype)).to(probs.dtype)
