"""The key/value cache of incremental decoding, which remembers the model and encodings that filled it.

Shape key: ``b`` batch, ``h_kv`` key/value heads, ``t`` new tokens, ``tk`` all keys, ``dh`` head
width, ``a`` position axes (M-RoPE).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import check_float_tensor, check_int, short
from .._compat import check_values
from ..base import PositionalEncoding

__all__ = ["KVCache", "describe_encoding"]


def describe_encoding(encoding: PositionalEncoding) -> str:
    """The class and settings of an encoding, e.g. ``"RoPE(head_dim=8, base=10000.0, ...)"``.

    A :class:`KVCache` records it per layer, so that keys encoded by one encoding are never
    read by a model with another.
    """
    if not isinstance(encoding, PositionalEncoding):
        raise TypeError(f"encoding must be a posenc.PositionalEncoding, got {type(encoding).__name__}")
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

    New tokens without explicit positions continue each row from its largest cached position
    (``max + 1``; on every axis for M-RoPE, as Qwen-VL continues text after an image), so a
    prompt prefilled at explicit positions is followed where it ended, not at the cache length.

    Decoding equals the full forward except with a length-dependent RoPE scaling (dynamic NTK,
    LongRoPE) past its trained length: each step's keys keep the frequencies of the length when they
    were cached, as in transformers' generation; the full forward rotates all with those of its length.

    **Static cache** (``KVCache(capacity=n)``): each layer's keys, values and positions live in
    buffers of ``n`` slots allocated at the first call, and each call writes its tokens with
    ``index_copy_`` at the fill index, a device tensor. A decode step then has the same tensor
    shapes at every step and never reads a value on the host, so it can be captured in a CUDA
    graph (``torch.compile(mode="reduce-overhead")``). Attention reads all ``n`` slots; the
    slots past the filled length are masked out. An attention mask then
    covers the ``n`` slots: ``(b, n)``. Writing past ``n`` tokens is an error (a
    ``ValueError`` on the CPU, a device-side assert elsewhere).

    Attributes:
        keys, values: per layer, ``(b, h_kv, tk, dh)`` tensors (empty list before the first call);
            ``tk = capacity`` for a static cache.
        positions: per layer, ``(b, tk)`` key positions (``(tk,)`` where every call gave ``(t,)``: growing).
        encodings: per layer, the description of the encoding that encoded the keys.
        num_layers: the number of layers of the model that fills it (``None`` until known).
        capacity: the slots of a static cache, ``None`` for a growing one.
        fill: static cache only: per layer, a 0-d long device tensor, the number of filled slots.
    """

    def __init__(self, capacity: int | None = None) -> None:
        self.keys: list[Tensor] = []
        self.values: list[Tensor] = []
        self.positions: list[Tensor] = []
        self.encodings: list[str | None] = []
        self.axes: list[bool] = []
        self.num_layers: int | None = None
        self.capacity = None if capacity is None else check_int("capacity", capacity, minimum=1)
        #: Whether the cache has a fixed capacity (see the class docstring).
        self.static = self.capacity is not None
        self.fill: list[Tensor] = []

    def bind(self, num_layers: int) -> None:
        """Record the number of layers of the model filling the cache; refuse another model's cache."""
        filled = self.num_layers if self.num_layers is not None else len(self.keys)
        if filled != num_layers and (self.num_layers is not None or filled > num_layers):
            raise ValueError(
                f"this KVCache was filled by a model with {filled} layers, but this model has "
                f"num_layers={num_layers}; use a new KVCache()"
            )
        self.num_layers = num_layers

    def _check_layer(self, layer: object) -> int:
        layer = check_int("layer", layer, minimum=0)
        if self.num_layers is not None and layer >= self.num_layers:
            raise ValueError(f"layer must be < {self.num_layers} (the model's layers), got {layer}")
        return layer

    def length(self, layer: int = 0) -> int:
        """The number of cached tokens of ``layer`` (0 before the first call).

        For a static cache this reads the fill index (a host sync): a forward never calls it.
        """
        layer = self._check_layer(layer)
        if layer >= len(self.keys):
            return 0
        return int(self.fill[layer]) if self.static else self.keys[layer].shape[-2]

    def __len__(self) -> int:
        return self.length(0)

    def mask_length(self, layer: int, new: int) -> int:
        """The keys an attention mask covers once ``new`` tokens are added: cached + new, or the capacity."""
        return self.capacity if self.capacity is not None else self.length(layer) + new

    def check_batch(self, layer: int, batch: int) -> None:
        """Refuse new tokens whose batch size differs from the cached one (``ValueError``)."""
        layer = self._check_layer(layer)
        if layer < len(self.keys) and self.keys[layer].shape[0] != batch:
            raise ValueError(
                f"this KVCache holds a batch of {self.keys[layer].shape[0]} sequences, but the new tokens have "
                f"batch size {batch}; use a new KVCache() for another batch"
            )

    def next_positions(self, layer: int, new: int) -> Tensor | None:
        """Default positions of ``new`` tokens after the cached ones: each row's largest cached
        position + 1 onwards, ``(t,)`` or ``(b, t)`` (the same on every axis for M-RoPE, from the
        largest position on any axis); ``None`` before the first call. No host sync."""
        layer = self._check_layer(layer)
        if layer >= len(self.positions):
            return None
        past = self.positions[layer]
        if self.axes[layer]:
            past = past.amax(dim=-1)  # the largest position on any axis
        if self.static:  # empty slots do not count
            past = torch.where(torch.arange(past.shape[-1], device=past.device) < self.fill[layer], past, -1)
        start = past.amax(dim=-1, keepdim=True) + 1 if past.shape[-1] else past.new_zeros(*past.shape[:-1], 1)
        return start + torch.arange(new, device=past.device)  # (1,) + (t,) is (t,); (b, 1) + (t,) is (b, t)

    def slots(self, layer: int, new: int, device: torch.device | str | None = None) -> Tensor:
        """The ``(t,)`` key indices the ``new`` tokens of ``layer`` go to, after the cached ones.

        A static cache reads its fill index as a device tensor (no host sync); too many tokens for
        its capacity are an error.
        """
        if not self.static:
            past = self.length(layer)
            return torch.arange(past, past + new, device=device)
        capacity = self.capacity or 0
        if new > capacity:
            raise ValueError(f"{new} new tokens do not fit this KVCache(capacity={capacity})")
        layer = self._check_layer(layer)
        fill = (
            self.fill[layer] if layer < len(self.fill) else torch.zeros((), dtype=torch.long, device=device)
        )
        check_values(
            fill + new <= capacity,
            f"KVCache(capacity={capacity}) overflows",
            lambda: f"this KVCache(capacity={capacity}) holds {int(fill)} tokens: {new} more do not fit",
        )
        return fill + torch.arange(new, device=fill.device)

    def key_positions(self, layer: int, positions: Tensor, *, axes: bool = False) -> Tensor:
        """The positions of every key after appending ``positions`` to ``layer``.

        ``positions``: ``(t,)``/``(b, t)``, or with ``axes`` (an encoding whose positions have axes,
        M-RoPE) ``(t, a)``/``(b, t, a)``.

        Returns:
            ``(b, tk)`` or ``(b, tk, a)`` (unbatched when both sides are); ``tk`` is the capacity
            for a static cache, whose empty slots hold 0 (masked out by the attention).
        """
        layer = self._check_layer(layer)
        past = self.positions[layer] if layer < len(self.positions) else self._empty(positions, axes)
        if not self.static:
            return _join(past, positions, axes)
        slots = self.slots(layer, positions.shape[-2 if axes else -1], positions.device)
        dtype = torch.promote_types(past.dtype, positions.dtype)  # float times (Qwen3-Omni) stay fractional
        return past.to(dtype).index_copy(1, slots, _rows(positions, past).to(dtype))

    def _empty(self, positions: Tensor, axes: bool, batch: int | None = None) -> Tensor:
        """The positions of a layer before its first call: none for a growing cache; for a static
        one ``(b, capacity[, a])`` zeros. (Empty slots are masked out; at 0 they add no length: dynamic
        and longrope RoPE read one past the largest position, and tables check their last row.)"""
        if not self.static:
            return positions.narrow(-2 if axes else -1, 0, 0)
        if batch is None:
            batch = positions.shape[0] if positions.dim() == (3 if axes else 2) else 1
        shape = (batch, self.capacity or 0, *positions.shape[-1:]) if axes else (batch, self.capacity or 0)
        return positions.new_zeros(shape)

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

        A static cache writes them at the fill index with ``index_copy_`` (fixed shapes, no host sync).

        Args:
            layer: the layer (``0 <= layer``, filled in order).
            k, v: the new keys (already encoded) and values.
            positions: their ``(t,)`` or ``(b, t)`` positions (``(t, a)``/``(b, t, a)`` with ``axes``).
            encoding: the description of the encoding that encoded ``k`` (:func:`describe_encoding`);
                a layer filled by another encoding is refused.
            axes: the positions have a trailing axis dimension (M-RoPE).

        Returns:
            ``(keys, values, positions)`` of shapes ``(b, h_kv, tk, dh)``, ``(b, h_kv, tk, dv)``, ``(b, tk)``
            (``(tk,)`` where every call gave ``(t,)`` positions to a growing cache).
        """
        layer = self._check_layer(layer)
        check_float_tensor("k", k, rank=4, shape="(batch, kv_heads, t, head_dim)")
        check_float_tensor("v", v, rank=4, shape="(batch, kv_heads, t, v_dim)")
        if not isinstance(positions, Tensor) or positions.dtype == torch.bool or positions.is_complex():
            raise TypeError(
                f"positions must be a real torch.Tensor of shape (t,) or (batch, t), got {short(positions)}"
            )
        ranks = (2, 3) if axes else (1, 2)
        if positions.dim() not in ranks or (
            positions.dim() == ranks[1] and positions.shape[0] not in (1, k.shape[0])
        ):
            shape = "(t, axes) or (batch, t, axes)" if axes else "(t,) or (batch, t)"
            raise ValueError(
                f"positions must have shape {shape} with batch {k.shape[0]} or 1, got {tuple(positions.shape)}"
            )
        t = positions.shape[-2] if axes else positions.shape[-1]
        if k.shape[:3] != v.shape[:3] or t != k.shape[2]:
            raise ValueError(
                f"k {tuple(k.shape)}, v {tuple(v.shape)} and positions {tuple(positions.shape)} must agree in "
                "batch, heads and tokens"
            )
        known = self.encodings[layer] if layer < len(self.encodings) else None
        if None not in (known, encoding) and known != encoding:
            raise ValueError(
                f"layer {layer} of this KVCache holds keys encoded by {known}, not by "
                f"{encoding}; use a new KVCache() for another model or encoding"
            )
        if layer > len(self.keys):
            raise ValueError(
                f"layer {layer} updated before layer {len(self.keys)}: layers must be filled in order"
            )
        self.check_batch(layer, k.shape[0])
        if layer < len(self.keys):  # what a layer's tensors are joined to must be of their kind
            for name, new, held in (("k", k, self.keys[layer]), ("v", v, self.values[layer])):
                same_shape = (new.shape[1], new.shape[-1]) == (held.shape[1], held.shape[-1])
                if not same_shape or new.dtype != held.dtype:
                    hint = " (or autocast on in every call, or in none)" if same_shape else ""
                    raise ValueError(
                        f"layer {layer} of this KVCache holds {name} of {held.shape[1]} heads of width "
                        f"{held.shape[-1]} in {held.dtype}, got {new.shape[1]} of width {new.shape[-1]} in "
                        f"{new.dtype}; use a new KVCache() for another model{hint}"
                    )
            if axes != self.axes[layer]:
                raise ValueError(
                    f"layer {layer} of this KVCache holds positions {'with' if self.axes[layer] else 'without'} "
                    f"axes, got axes={axes}; use a new KVCache() for another encoding"
                )
        if layer == len(self.keys):  # the first call: empty (growing) or zero (static) buffers
            n = self.capacity or 0
            self.encodings.append(encoding)
            self.axes.append(axes)
            self.keys.append(k.new_zeros(*k.shape[:2], n, k.shape[-1]))
            self.values.append(v.new_zeros(*v.shape[:2], n, v.shape[-1]))
            self.positions.append(self._empty(positions, axes, k.shape[0]))
            if self.static:
                self.fill.append(torch.zeros((), dtype=torch.long, device=k.device))
        if not self.static:
            self.keys[layer] = torch.cat([self.keys[layer], k], dim=-2)
            self.values[layer] = torch.cat([self.values[layer], v], dim=-2)
            self.positions[layer] = _join(self.positions[layer], positions, self.axes[layer])
        else:
            slots = self.slots(layer, k.shape[-2], k.device)
            self.keys[layer].index_copy_(2, slots, k)  # (of the layer's dtype: checked above)
            self.values[layer].index_copy_(2, slots, v)
            held = self.positions[layer]
            if positions.dtype != held.dtype:  # promoted as a growing cache's cat does (int32 then int64)
                held = self.positions[layer] = held.to(torch.promote_types(held.dtype, positions.dtype))
            held.index_copy_(1, slots, _rows(positions, held).to(held.dtype))
            self.fill[layer].add_(k.shape[-2])
        return self.keys[layer], self.values[layer], self.positions[layer]


def _rows(positions: Tensor, past: Tensor) -> Tensor:
    """``positions`` with the batch dimension of ``past`` (broadcast from none or 1)."""
    new = positions if positions.dim() == past.dim() else positions.unsqueeze(0)
    return new.expand(past.shape[0], *new.shape[1:])


def _join(past: Tensor, new: Tensor, axes: bool) -> Tensor:
    """``past`` and ``new`` positions joined along the tokens; a ``(t,)`` side joins a ``(b, t)`` one
    (likewise ``(t, a)`` and ``(b, t, a)`` with ``axes``) by broadcasting over the batch."""
    if past.dim() != new.dim():
        batched = past if past.dim() > new.dim() else new
        past, new = _rows(past, batched), _rows(new, batched)
    return torch.cat([past, new], dim=-2 if axes else -1)
