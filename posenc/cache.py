"""The key/value cache of incremental decoding, which remembers the model and encodings that filled it.

Shape key: ``b`` batch, ``h_kv`` key/value heads, ``t`` new tokens, ``tk`` all keys, ``dh`` head
width, ``a`` position axes (M-RoPE).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._checks import check_int
from .base import PositionalEncoding

__all__ = ["KVCache", "describe_encoding"]


def describe_encoding(encoding: PositionalEncoding) -> str:
    """The class and settings of an encoding, e.g. ``"RoPE(head_dim=8, base=10000.0, ...)"``.

    A :class:`KVCache` records it per layer, so that keys encoded by one encoding are never
    read by a model with another.
    """
    return f"{type(encoding).__qualname__}({encoding.extra_repr()})"


class KVCache:
    """Keys, values, key positions and key padding of every layer, for incremental decoding.

    Pass one (empty) cache to :meth:`TransformerLM.forward` or
    :meth:`MultiheadAttention.forward`; each call appends the new tokens' keys and values
    (after the encoding's ``encode_qk``, so cached keys are never rotated twice) and returns
    attention over everything cached so far. Layers are indexed by ``layer``.

    A cache remembers what filled it: the number of layers of the model (set by
    :class:`TransformerLM`) and, per layer, the encoding (:func:`describe_encoding`). Another
    model, or another encoding, is refused with a ``ValueError`` instead of reading keys it did
    not encode.

    Attributes:
        keys, values: per layer, ``(b, h_kv, tk, dh)`` tensors (empty list before the first call).
        positions: per layer, ``(b, tk)`` long key positions.
        encodings: per layer, the description of the encoding that encoded the keys.
        num_layers: the number of layers of the model that fills it (``None`` until known).
    """

    def __init__(self) -> None:
        self.keys: list[Tensor] = []
        self.values: list[Tensor] = []
        self.positions: list[Tensor] = []
        self.encodings: list[str | None] = []
        self.axes: list[bool] = []
        self.num_layers: int | None = None

    def bind(self, num_layers: int) -> None:
        """Record the number of layers of the model filling the cache; refuse another model's cache."""
        if self.num_layers is None:
            if len(self.keys) > num_layers:
                raise ValueError(
                    f"this KVCache holds {len(self.keys)} layers but the model has num_layers={num_layers}"
                )
            self.num_layers = num_layers
        elif self.num_layers != num_layers:
            raise ValueError(
                f"this KVCache was filled by a model with {self.num_layers} layers, but this model has "
                f"num_layers={num_layers}; use a new KVCache()"
            )

    def _check_layer(self, layer: object) -> int:
        layer = check_int("layer", layer, minimum=0)
        if self.num_layers is not None and layer >= self.num_layers:
            raise ValueError(f"layer must be < {self.num_layers} (the model's layers), got {layer}")
        return layer

    def length(self, layer: int = 0) -> int:
        """The number of cached tokens of ``layer`` (0 before the first call)."""
        layer = self._check_layer(layer)
        return self.keys[layer].shape[-2] if layer < len(self.keys) else 0

    def __len__(self) -> int:
        return self.length(0)

    def key_positions(self, layer: int, positions: Tensor) -> Tensor:
        """The positions of every key after appending ``positions`` to ``layer``.

        ``positions``: ``(t,)``/``(b, t)``, or for an encoding whose positions have axes
        (M-RoPE) ``(t, a)``/``(b, t, a)`` (``(t,)`` then means the same position on every axis).

        Returns:
            ``(b, tk)`` or ``(b, tk, a)`` (unbatched when both sides are).
        """
        layer = self._check_layer(layer)
        if layer >= len(self.positions):
            return positions
        past = self.positions[layer]
        if self.axes[layer] and positions.dim() == 1:
            positions = positions[:, None].expand(-1, past.shape[-1])
        return _join(past, positions, self.axes[layer])

    def update(
        self,
        layer: int,
        k: Tensor,
        v: Tensor,
        positions: Tensor,
        *,
        encoding: str | None = None,
        axes: bool = False,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Append ``k``, ``v`` ``(b, h_kv, t, dh)`` and their positions; return everything cached.

        Args:
            layer: the layer (``0 <= layer``, filled in order).
            k, v: the new keys (already encoded) and values.
            positions: their ``(t,)`` or ``(b, t)`` positions (``(t, a)``/``(b, t, a)`` with ``axes``).
            encoding: the description of the encoding that encoded ``k`` (:func:`describe_encoding`);
                a layer filled by another encoding is refused.
            axes: the positions have a trailing axis dimension (M-RoPE).

        Returns:
            ``(keys, values, positions)`` of shapes ``(b, h_kv, tk, dh)``, ``(b, h_kv, tk, dv)``, ``(b, tk)``.
        """
        layer = self._check_layer(layer)
        if (
            layer < len(self.encodings)
            and encoding is not None
            and self.encodings[layer] not in (None, encoding)
        ):
            raise ValueError(
                f"layer {layer} of this KVCache holds keys encoded by {self.encodings[layer]}, not by "
                f"{encoding}; use a new KVCache() for another model or encoding"
            )
        if layer > len(self.keys):
            raise ValueError(
                f"layer {layer} updated before layer {len(self.keys)}: layers must be filled in order"
            )
        if layer == len(self.keys):
            self.keys.append(k)
            self.values.append(v)
            self.positions.append(positions)
            self.encodings.append(encoding)
            self.axes.append(axes)
        else:
            self.keys[layer] = torch.cat([self.keys[layer], k], dim=-2)
            self.values[layer] = torch.cat([self.values[layer], v], dim=-2)
            self.positions[layer] = _join(self.positions[layer], positions, self.axes[layer])
        return self.keys[layer], self.values[layer], self.positions[layer]


def _join(past: Tensor, new: Tensor, axes: bool) -> Tensor:
    """``past`` and ``new`` positions joined along the tokens; a ``(t,)`` side joins a ``(b, t)`` one
    (likewise ``(t, a)`` and ``(b, t, a)`` with ``axes``) by broadcasting over the batch."""
    rank = 3 if axes else 2
    if past.dim() == new.dim():
        return torch.cat([past, new], dim=-2 if axes else -1)
    past = past if past.dim() == rank else past.unsqueeze(0)
    new = new if new.dim() == rank else new.unsqueeze(0)
    b = max(past.shape[0], new.shape[0])
    past, new = past.expand(b, *past.shape[1:]), new.expand(b, *new.shape[1:])
    return torch.cat([past, new], dim=1)
