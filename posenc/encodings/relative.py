"""T5's relative position bias: a learned scalar per head and log-spaced distance bucket."""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor, nn

from .._checks import check_bool, check_num_heads
from .._compat import precise_dtype
from ..functional.relative import check_relative_bucket_options, relative_position_bucket
from ._bias import BiasFn, PositionBias, _lookup

__all__ = ["RelativeBias"]


class RelativeBias(PositionBias):
    """T5's relative position bias: a learned scalar per head and bucket of ``k_pos - q_pos``.

    From T5 (Raffel et al., 2020, "Exploring the Limits of Transfer Learning with a Unified
    Text-to-Text Transformer"). Relative positions are bucketed (exact below ``max_exact``,
    logarithmic up to ``max_distance``, one shared bucket beyond; see
    :func:`posenc.functional.relative_position_bucket`) and each bucket has one learned value per
    head, added to the attention scores. T5 shares one table across all layers of a stack.

    The table is an ``nn.Embedding(num_buckets, num_heads)`` named ``relative_attention_bias``,
    as in T5 and Hugging Face transformers, so a checkpoint's
    ``...relative_attention_bias.weight`` loads by name into ``relative_attention_bias.weight``.

    Since buckets saturate at ``max_distance``, the bias is gathered from a per-head table over
    the ``2 * max_distance + 1`` clamped distances (computed from the embedding at each call,
    so gradients reach it), not by bucketing every (query, key) pair.

    Args:
        num_heads: attention heads; ``q.shape[1]`` must equal it.
        num_buckets: buckets (rows of the table). Each direction needs at least 2 buckets:
            ``>= 4`` when bidirectional, ``>= 2`` otherwise.
        max_distance: distances of ``max_distance`` or more share the last bucket; must exceed
            the exact buckets (``num_buckets // 4`` bidirectional, ``num_buckets // 2`` otherwise).
        bidirectional: separate buckets for keys after the query (T5's encoder) or not (its
            decoder). ``None`` (default) means ``not causal``.
        causal: whether the attention using the bias is causal; only sets the default of
            ``bidirectional`` (``build`` passes the model's ``causal``).
        device, dtype: of the table, as for ``nn.Embedding``.

    Shape:
        ``attention_bias(q, k)``: ``(b, h, tq, dh), (b, h_kv, tk, dh) -> (1|b, h, tq, tk)``, float32
        (float64 for float64 ``q``), contiguous, heads outermost; ``b`` only for ``(b, t)`` positions.

        ``forward(scores)``: ``(b, h, tq, tk) -> (b, h, tq, tk)``, ``scores + bias`` in the scores' dtype.

    Example::

        t5 = RelativeBias(num_heads=8, causal=True)       # a T5 decoder's bias
        scores = t5(q @ k.transpose(-1, -2))              # T5 does not scale q @ k
    """

    cache_names = ("bucket_of_distance",)
    repr_names = ("num_heads", "num_buckets", "max_distance", "bidirectional", "causal")
    bucket_of_distance: Tensor

    def __init__(
        self,
        num_heads: int,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool | None = None,
        causal: bool = False,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = check_num_heads("num_heads", num_heads)
        self.causal = check_bool("causal", causal)
        self.bidirectional = (not causal) if bidirectional is None else bidirectional
        check_relative_bucket_options(num_buckets, max_distance, self.bidirectional)  # bidirectional too
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.relative_attention_bias = nn.Embedding(num_buckets, num_heads, device=device, dtype=dtype)
        # An integer cache: the base class's _apply moves it and rebuilds it after to_empty().
        self.register_buffer("bucket_of_distance", self._buckets(device), persistent=False)
        self.reset_parameters()

    def _buckets(self, device: torch.device | str | None) -> Tensor:
        # (n,): entry i is the bucket of k_pos - q_pos == i - max_distance, and (since buckets
        # saturate there) of every relative position that clamps to it
        d = self.max_distance
        distances = torch.arange(-d, d + 1, device=device)
        return relative_position_bucket(
            distances, bidirectional=self.bidirectional, num_buckets=self.num_buckets, max_distance=d
        )

    def reset_parameters(self) -> None:
        """Initialise the table from N(0, 0.02²), a small bias next to unit-scale scores.

        (Hugging Face T5 uses std ``d_model ** -0.5``, about 0.03 to 0.04, which this module
        cannot know; checkpoints overwrite it anyway.)
        """
        nn.init.normal_(self.relative_attention_bias.weight, mean=0.0, std=0.02)

    def reset_caches(self) -> None:
        """Rebuild the bucket of each distance, e.g. after ``to_empty()`` from the meta device."""
        self.bucket_of_distance = self._buckets(self.bucket_of_distance.device)

    def distance_table(self, dtype: torch.dtype = torch.float32) -> Tensor:
        """The bias of each head at each clamped distance.

        Args:
            dtype: of the result.

        Returns:
            ``(h, n)``, ``n = 2 * max_distance + 1``; entry ``[h, i]`` is head ``h``'s bias at
            ``k_pos - q_pos == i - max_distance`` (and, at the ends, every distance beyond).
            Differentiable in ``relative_attention_bias.weight``.
        """
        # Calling the embedding (not indexing its weight) keeps hooks and subclasses working.
        buckets, weight = self.bucket_of_distance, self.relative_attention_bias.weight
        if buckets.device != weight.device:  # built on meta, loaded with assign=True: the cache stayed there
            buckets = self._buckets(weight.device)  # (an embedding of meta indices read stray memory)
        return self.relative_attention_bias(buckets).t().to(dtype).contiguous()

    def prepare_table(self) -> Tensor:
        # Looked up once per forward, shared by every layer of the stack.
        return self.distance_table(precise_dtype(self.relative_attention_bias.weight))

    def bias_fn(self, dtype: torch.dtype, table: Tensor | None) -> BiasFn:
        # table[h, clamp(k - q) + max_distance], read flat inside a score_mod (see _lookup)
        table = cast(Tensor, table)
        read, reach = _lookup(table.to(dtype)), table.new_full((), self.max_distance, dtype=torch.long)
        return lambda q, k, h: read(h, torch.clamp(k - q, -reach, reach) + reach)

    def dense_bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype, table: Tensor | None) -> Tensor:
        index = (k_pos - q_pos).clamp_(-self.max_distance, self.max_distance).add_(self.max_distance)
        table = cast(Tensor, table).to(dtype)
        # One index_select of the flat (1|b, tq, tk) index, then heads outermost: no (h, tq, tk) index
        # tensor, and faster than a gather (causal T5 through posenc.attention at T=2048 with explicit
        # positions: ~15%; batch 2, T=1024: 64 ms against 88 ms for table[heads, index], one thread).
        h, (b, tq, tk) = table.shape[0], index.shape
        out = table.index_select(1, index.reshape(-1)).view(h, b, tq, tk)
        return out.transpose(0, 1).contiguous().view(b, h, tq, tk)  # a copy for more than one batch row
