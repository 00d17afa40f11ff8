"""Porting Gemma 3's attention to posenc: per-layer RoPE and sliding windows from its config.

Gemma 3 rotates its sliding-window layers with base 10k and its global layers with base 1M and
linear scaling ×8. ``posenc.hf.layer_encodings`` reads that from the config (a ``config.json``
dict here, so nothing is downloaded and transformers is not needed), with one shared encoding
per layer type; ``posenc.hf.layer_windows`` gives each layer's window. The attention of every
layer is then a few lines. Run: ``python examples/gemma3_attention.py``.
"""

from __future__ import annotations

import torch
from torch import nn

import posenc

# The position-relevant part of a Gemma 3 config.json (transformers 5 layout), tiny sizes.
CONFIG = {
    "model_type": "gemma3_text",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "num_hidden_layers": 6,
    "sliding_window": 8,
    "max_position_embeddings": 32,
    "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
    },
}


class Attention(nn.Module):
    """One Gemma-style attention layer: q/k/v projections, then posenc does position and masking."""

    def __init__(self, encoding: posenc.PositionalEncoding, window: int | None) -> None:
        super().__init__()
        d, h, kv, dh = (
            CONFIG[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim")
        )
        self.h, self.kv, self.dh = h, kv, dh
        self.q, self.k, self.v = nn.Linear(d, h * dh), nn.Linear(d, kv * dh), nn.Linear(d, kv * dh)
        self.o = nn.Linear(h * dh, d)
        self.encoding, self.window = encoding, window

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        # (b, t, heads * dh) -> (b, heads, t, dh)
        q = self.q(x).view(b, t, self.h, self.dh).transpose(1, 2)
        k = self.k(x).view(b, t, self.kv, self.dh).transpose(1, 2)
        v = self.v(x).view(b, t, self.kv, self.dh).transpose(1, 2)
        q, k = self.encoding.encode_qk(q, k)  # this layer's RoPE (local or global base)
        k, v = k.repeat_interleave(self.h // self.kv, 1), v.repeat_interleave(self.h // self.kv, 1)
        y = posenc.attention(q, k, v, causal=True, window=self.window)
        return self.o(y.transpose(1, 2).reshape(b, t, -1))


def main() -> None:
    torch.manual_seed(0)
    encodings = posenc.hf.layer_encodings(CONFIG)
    windows = posenc.hf.layer_windows(CONFIG)
    layers = nn.ModuleList(Attention(e, w) for e, w in zip(encodings, windows, strict=True))
    for i, (e, w) in enumerate(zip(encodings, windows, strict=True)):
        print(f"layer {i}: base {e.base:>9.0f}, rope_type {e.rope_type:<7}, window {w}")  # type: ignore[attr-defined]
    print("distinct encodings:", len({id(e) for e in encodings}))  # one per layer type: tables built twice
    x = torch.randn(2, 40, CONFIG["hidden_size"])  # 40 tokens: past the window and the trained 32
    for layer in layers:
        x = x + layer(x)
    print("output", tuple(x.shape), "finite:", bool(x.isfinite().all()))


if __name__ == "__main__":
    main()
