"""Attention layers and a small transformer whose position encoding is a config string.

:mod:`posenc.nn.layers` holds :class:`MultiheadAttention` and :class:`TransformerBlock`,
:mod:`posenc.nn.model` holds :class:`TransformerLM`; every name is importable from here.

``position`` is anything :func:`posenc.build` accepts (``"rope"``, ``"alibi"``,
``"rope(scaling={'rope_type': 'yarn', 'factor': 4.0})"``, a dict, or a built module), so
swapping encodings changes nothing else in the model code::

    model = posenc.nn.TransformerLM(vocab_size=256, d_model=128, num_layers=2, num_heads=4,
                                    position="alibi", max_len=512)
    logits = model(input_ids)                          # (b, t, vocab)
    out = model.generate(input_ids, max_new_tokens=20)  # (b, t + 20)

Shape key: ``b`` batch, ``t`` new tokens, ``tk`` all keys (cached + new), ``d`` model
width, ``h`` heads, ``dh`` head width, ``v`` vocabulary.
"""

from __future__ import annotations

from .cache import KVCache, describe_encoding
from .layers import MultiheadAttention, TransformerBlock
from .model import TransformerLM
from .schedule import layer_specs

__all__ = [
    "KVCache",
    "MultiheadAttention",
    "TransformerBlock",
    "TransformerLM",
    "describe_encoding",
    "layer_specs",
]
