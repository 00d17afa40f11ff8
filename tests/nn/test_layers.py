"""posenc.nn.MultiheadAttention and posenc.nn.TransformerBlock on their own."""

from __future__ import annotations

import pytest
import torch

from nn.models import HEADS, LOGITS_TOL, D
from posenc.nn import KVCache, MultiheadAttention, TransformerBlock

# tiny tensors: one thread (on a loaded 2-core machine, thread contention costs 100x)
pytestmark = pytest.mark.usefixtures("one_thread")


def test_multihead_attention_alone_with_gqa_and_cache():
    torch.manual_seed(0)
    layer = MultiheadAttention(D, HEADS, position="rope", causal=True, num_kv_heads=2).eval()
    x = torch.randn(2, 9, D)
    full = layer(x)
    cache = KVCache()
    steps = [layer(x[:, :4], cache=cache)] + [layer(x[:, i : i + 1], cache=cache) for i in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **LOGITS_TOL)


def test_block_is_pre_norm():
    torch.manual_seed(0)
    block = TransformerBlock(D, HEADS, position="none", causal=True).eval()
    x = torch.randn(2, 5, D)
    h = x + block.attn(block.attn_norm(x))
    torch.testing.assert_close(block(x), h + block.mlp(block.mlp_norm(h)))
