"""Shaw et al.'s clipped relative position representations, with relative keys and values."""

from __future__ import annotations

import math
from typing import Literal, cast

import torch
from torch import Tensor, nn

from .._checks import check_bool, check_choice, check_float_tensor, check_int, check_positive_int, short
from .._compat import precise_dtype
from ..base import PositionalEncoding
from ..functional.shaw import clipped_distance_index, shaw_value_term
from ..state import ScoreMod
from ._bias import ContentBiasState, _add_to_scores

__all__ = ["ShawRelative", "ShawState"]


class ShawState(ContentBiasState):
    """Shaw's position state for one forward: the positions; the tables are read from the encoding
    at each call (so gradients reach them)."""

    encoding: ShawRelative

    @property
    def bias_heads(self) -> int | None:
        # The paper's table is shared by the heads: any count; per-head tables fix it.
        return self.encoding.num_heads if self.encoding.per_head else None

    def _window(self) -> tuple[int, int]:
        left, right = self.encoding._reach()
        return -left, right

    def _per_distance(self, q: Tensor, k: Tensor, lo: int, n: int) -> tuple[Tensor, Tensor | None]:
        # The key term q_i · a^K(clip(j - i)) / sqrt(dh), per clipped distance.
        dtype = precise_dtype(q)
        table = self.encoding._table("key").to(dtype).transpose(-1, -2)
        return (q.to(dtype) @ table) * (1.0 / math.sqrt(q.shape[-1])), None

    def score_mod(self, q: Tensor, k: Tensor) -> ScoreMod:
        """A FlexAttention ``score_mod`` adding the key term.

        Raises:
            ValueError: with ``values=True`` (a score_mod cannot add the value term).
        """
        if self.encoding.values:
            raise ValueError(
                "ShawRelative(values=True) adds a term to the attention output, which a FlexAttention "
                "score_mod cannot do: use posenc.attention(q, k, v, shaw) with backend='auto' or 'chunked'"
            )
        return super().score_mod(q, k)

    @property
    def has_value_term(self) -> bool:
        return bool(self.encoding.values)

    def value_term(self, probs: Tensor) -> Tensor | None:
        """The value term ``Σ_j probs[i, j] a^V(clip(j - i))``, to add to ``probs @ v``.

        Args:
            probs: ``(b, h, tq, tk)`` attention weights.

        Returns:
            ``(b, h, tq, dh)`` in ``probs``' dtype; ``None`` when ``values=False``.
        """
        enc = self.encoding
        if not enc.values:
            return None
        check_float_tensor("probs", probs, rank=4, shape="(batch, heads, q_len, k_len)")
        if enc.per_head and probs.shape[1] != enc.num_heads:
            raise ValueError(
                f"probs have {probs.shape[1]} heads, but this ShawRelative has per-head tables for "
                f"num_heads={enc.num_heads}"
            )
        self._check_lengths(probs, probs.mT)  # (the weights' last dimension: the keys)
        return shaw_value_term(probs, enc._table("value"), self._rows(*self._window()))


class ShawRelative(PositionalEncoding):
    """Clipped relative position representations (Shaw, Uszkoreit & Vaswani, 2018).

    One learned vector per relative distance ``j - i`` clipped to ``[-max_distance,
    max_distance_right]``, used in the scores (relative keys, eq. 4) and, with
    ``values=True``, in the output (relative values, eq. 3)::

        e_ij = q_i · (k_j + a^K_clip(j-i)) / sqrt(dh)        z_i = Σ_j α_ij (v_j + a^V_clip(j-i))

    The key term is what Wav2Vec2-BERT and SeamlessM4T-v2 call ``relative_key`` (clipped
    asymmetrically: ``max_distance=64`` to the left, ``max_distance_right=8``); its
    ``distance_embedding`` loads into :attr:`key_embeddings`. It depends on the query values,
    so :meth:`attention_bias` reads the (encoded) queries and returns the term already scaled
    by ``1 / sqrt(dh)``, as the attention's default score scale; an attention called with
    another ``scale`` still gets ``1 / sqrt(dh)`` here (as in Wav2Vec2-BERT). The value term is
    :meth:`value_term`, which :func:`posenc.attention` adds to ``probs @ v``.

    Memory beside the attention: ``(b, h, tq, n)`` for each term (``n`` = the number of clipped
    distances) and a ``(tq, tk)`` index; never ``(b, h, tq, tk, dh)``.

    Args:
        head_dim: the head width ``dh`` (of queries, and of values when ``values``).
        max_distance: the clip ``K >= 0`` (keys before the query, and after it unless
            ``max_distance_right`` is given). 16 by default.
        max_distance_right: the clip for keys after the query (asymmetric form), ``>= 0``.
        num_heads: attention heads; required with ``per_head``, else only recorded.
        per_head: one table per head instead of one shared by the heads (the paper shares).
        values: also learn ``a^V`` and add the value term to the attention output; ``"shared"``:
            the value term reads the key table (``a^V = a^K``, OpenNMT-py's one
            ``relative_positions_embeddings``: its checkpoints load into :attr:`key_embeddings`).
        beyond: what a key farther than the clip reads: ``"clip"`` the edge row (the paper's), ``"zero"``
            nothing, in both terms (VITS's text encoder, Glow-TTS: relative keys and values within
            ``window_size``, none beyond).
        device, dtype: of the tables.

    Attributes:
        key_embeddings: ``nn.Embedding(n, dh)`` (``(n, h * dh)`` per head); row ``r`` is distance
            ``r - max_distance``.
        value_embeddings: likewise, with ``values=True`` (else ``None``; ``"shared"``: none of its own).

    Shape:
        ``attention_bias(q, k)``: ``(b, h, tq, dh), (b, h_kv, tk, dh) -> (b, h, tq, tk)``, float32
        (float64 for float64 ``q``).

        ``value_term(probs)``: ``(b, h, tq, tk) -> (b, h, tq, dh)``, ``probs``' dtype.

        ``forward(scores, q)``: ``(b, h, tq, tk), (b, h, tq, dh) -> (b, h, tq, tk)``.

    Example::

        shaw = ShawRelative(head_dim=64, max_distance=16, values=True)
        out = posenc.attention(q, k, v, shaw, causal=True)   # both terms
        table = shaw.relative_embeddings(10)                 # the seed's (10, 10, 64) lookup
    """

    kind = "bias"
    state_class = ShawState

    def __init__(
        self,
        head_dim: int,
        max_distance: int = 16,
        max_distance_right: int | None = None,
        num_heads: int | None = None,
        per_head: bool = False,
        values: bool | Literal["shared"] = False,
        beyond: Literal["clip", "zero"] = "clip",
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.head_dim = check_positive_int("head_dim", head_dim)
        self.max_distance = check_int("max_distance", max_distance, minimum=0)
        if max_distance_right is not None:
            check_int("max_distance_right", max_distance_right, minimum=0)
        self.max_distance_right = max_distance_right
        #: The clip for keys after the query (``max_distance_right``, else ``max_distance``).
        self.right = max_distance if max_distance_right is None else max_distance_right
        #: ``n = max_distance + right + 1`` rows per table.
        self.num_distances = max_distance + self.right + 1
        self.num_heads = None if num_heads is None else check_positive_int("num_heads", num_heads)
        self.per_head = check_bool("per_head", per_head)
        if values != "shared" and not isinstance(values, bool):
            error = ValueError if isinstance(values, str) else TypeError  # (a str: the wrong value, not type)
            raise error(f"values must be a bool or 'shared', got {short(values)} ({type(values).__name__})")
        self.values = values
        check_choice("beyond", beyond, ("clip", "zero"))
        self.beyond = beyond
        if per_head and num_heads is None:
            raise ValueError("per_head=True needs num_heads (one table per head), got num_heads=None")
        width = head_dim * (num_heads if per_head and num_heads else 1)
        self.key_embeddings = nn.Embedding(self.num_distances, width, device=device, dtype=dtype)
        self.value_embeddings = (
            nn.Embedding(self.num_distances, width, device=device, dtype=dtype) if values is True else None
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """N(0, 1) rows, as ``nn.Embedding`` and the seed's ``torch.randn`` table."""
        self.key_embeddings.reset_parameters()
        if self.value_embeddings is not None:
            self.value_embeddings.reset_parameters()

    def _table(self, which: str) -> Tensor:
        """``(n, dh)``, or ``(h, n, dh)`` per head: the key or value table, differentiable; with
        ``beyond="zero"`` a zero row past each end, ``n + 2`` rows, that every farther distance reads."""
        # (the callers check values=True before asking for the value table)
        table = self.key_embeddings if which == "key" or self.values == "shared" else self.value_embeddings
        weight = cast(nn.Embedding, table).weight
        rows = weight.view(self.num_distances, -1, self.head_dim).transpose(0, 1) if self.per_head else weight
        return nn.functional.pad(rows, (0, 0, 1, 1)) if self.beyond == "zero" else rows

    def _reach(self) -> tuple[int, int]:
        """The distances before and after the query that :meth:`_table`'s rows cover."""
        zero = int(self.beyond == "zero")
        return self.max_distance + zero, self.right + zero

    def forward(
        self, scores: Tensor, q: Tensor, q_positions: Tensor | None = None, k_positions: Tensor | None = None
    ) -> Tensor:
        """The drop-in call for hand-written attention: ``scores + q·a^K / sqrt(dh)``.

        Args:
            scores: ``(b, h, tq, tk)`` scaled scores ``q @ kᵀ / sqrt(dh)``.
            q: ``(b, h, tq, dh)`` the queries of those scores.
            q_positions, k_positions: as in :meth:`attention_bias`.

        Returns:
            ``(b, h, tq, tk)`` in the scores' dtype.

        Raises:
            ValueError: with ``values=True``: the value term changes the attention output, which
                this call cannot reach. Use ``posenc.attention(q, k, v, shaw)``, or in hand-written
                attention add ``shaw.attention_bias(q, k)`` to the scaled scores and
                ``shaw.value_term(probs)`` to ``probs @ v``.
        """
        if self.values:
            raise ValueError(
                "ShawRelative(values=True)(scores, q) cannot apply the value term (it changes the attention "
                "output): use posenc.attention(q, k, v, shaw), or add shaw.attention_bias(q, k) to the scaled "
                "scores and shaw.value_term(probs) to probs @ v"
            )
        check_float_tensor("scores", scores, rank=4, shape="(batch, heads, q_len, k_len)")
        check_float_tensor("q", q, rank=4, shape="(batch, heads, seq, head_dim)")
        # Only the keys' length matters for the key term: a stand-in k of shape (b, 1, tk, dh).
        k = q.new_empty(q.shape[0], 1, scores.shape[-1], q.shape[-1])
        bias = cast(Tensor, self.attention_bias(q, k, q_positions=q_positions, k_positions=k_positions))
        return _add_to_scores(scores, bias, f"q {tuple(q.shape)}")

    def relative_embeddings(self, length: int, which: str = "key") -> Tensor:
        """The seed's ``(length, length, dh)`` lookup: entry ``[i, j]`` is ``a(clip(j - i))``.

        What ``RelativePositionalEncoding(max_relative_position, d_model)(length)`` of the
        articles this project started from returns (there without clipping); for inspection and
        teaching — attention never builds it.

        Args:
            length: the sequence length, a positive int.
            which: ``"key"`` (``a^K``) or ``"value"`` (``a^V``, needs ``values=True``).

        Returns:
            ``(length, length, dh)``, or ``(h, length, length, dh)`` per head; the tables' dtype.
        """
        check_positive_int("length", length)
        check_choice("which", which, ("key", "value"))
        if which == "value" and not self.values:
            raise ValueError("which='value' needs values=True (this ShawRelative has no value table)")
        positions = torch.arange(length, device=self.key_embeddings.weight.device)
        index = clipped_distance_index(positions, positions, *self._reach())
        return self._table(which)[..., index, :]

    def extra_repr(self) -> str:
        parts = [f"head_dim={self.head_dim}", f"max_distance={self.max_distance}"]
        if self.max_distance_right is not None:
            parts.append(f"max_distance_right={self.max_distance_right}")
        if self.per_head:
            parts.append(f"num_heads={self.num_heads}, per_head=True")
        parts.append(f"values={self.values!r}")
        if self.beyond != "clip":
            parts.append(f"beyond={self.beyond!r}")
        return ", ".join(parts)
