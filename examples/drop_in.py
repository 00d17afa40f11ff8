"""Every posenc encoding used by hand, a few lines each, in plain attention code.

Position enters attention in one of three places; each encoding's own call is the drop-in:

    x = pe(x)                  # additive: Sinusoidal, Sinusoidal2D, Learned (and NoPE: nothing)
    q, k = rope(q, k)          # rotary: rotates queries and keys in every layer
    scores = alibi(scores)     # bias: ALiBi or T5's relative bias, added before softmax

Run: ``python examples/drop_in.py`` (CPU, under a second).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

import posenc

BATCH, SEQ, D_MODEL, HEADS = 2, 16, 64, 4
HEAD_DIM = D_MODEL // HEADS


def causal_softmax(scores: Tensor) -> Tensor:
    """Softmax over keys with future keys masked out; ``scores`` is ``(b, h, tq, tk)``."""
    tq, tk = scores.shape[-2:]
    # queries are the last tq of the tk positions (also true for a KV-cache decoding step)
    future = torch.ones(tq, tk, dtype=torch.bool).triu(tk - tq + 1)
    return scores.masked_fill(future, float("-inf")).softmax(dim=-1)


def main() -> None:
    torch.manual_seed(0)
    vocab = nn.Embedding(100, D_MODEL)
    to_qkv = nn.Linear(D_MODEL, 3 * D_MODEL, bias=False)
    tokens = torch.randint(0, 100, (BATCH, SEQ))

    def heads(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = rearrange(to_qkv(x), "b t (three h d) -> three b h t d", three=3, h=HEADS)
        return q, k, v

    with torch.no_grad():
        # 1. Additive encodings: added once to the token embeddings, before the first block.
        x = vocab(tokens)  # (b t d)
        sinusoidal = posenc.Sinusoidal(D_MODEL)  # Vaswani et al.: sin on even, cos on odd channels
        learned = posenc.Learned(D_MODEL, max_len=128)  # BERT / GPT-2: a trained row per position
        nope = posenc.NoPE()  # the baseline: no position at all
        for name, pe in (("sinusoidal", sinusoidal), ("learned", learned), ("none", nope)):
            print(f"{name:<12} x = pe(x)                {tuple(pe(x).shape)}")

        # Left padding: look the encodings up by position, not by index.
        mask = torch.ones(BATCH, SEQ, dtype=torch.bool)
        mask[0, :5] = False  # row 0 starts with 5 pad tokens
        padded = sinusoidal(x, positions=posenc.mask_to_positions(mask))
        assert torch.allclose(padded[0, 5:], sinusoidal(x[:1, 5:])[0])  # first real token at position 0
        print(f"{'sinusoidal':<12} x = pe(x, positions)     {tuple(padded.shape)}  (left-padded batch)")

        # Image patches: MAE's 2D sin/cos over a 4 x 4 grid, plus a class token left unencoded.
        patches = torch.randn(BATCH, 1 + 4 * 4, D_MODEL)
        pe_2d = posenc.Sinusoidal2D(D_MODEL, grid_size=(4, 4), num_prefix_tokens=1)
        print(f"{'sinusoidal2d':<12} patches = pe(patches)    {tuple(pe_2d(patches).shape)}")

        # 2. RoPE: rotate queries and keys inside attention; q @ k then depends on i - j only.
        x = vocab(tokens)  # rotary models add nothing to the embeddings
        q, k, v = heads(x)  # (b h t dh) each
        rope = posenc.RoPE(HEAD_DIM)
        q, k = rope(q, k)
        scores = q @ k.transpose(-1, -2) / math.sqrt(HEAD_DIM)  # (b h t t)
        out = causal_softmax(scores) @ v
        print(f"{'rope':<12} q, k = rope(q, k)        {tuple(q.shape)} -> out {tuple(out.shape)}")

        # A KV-cache decoding step: one new query against all keys. Default positions put
        # the query at the last key position, so no extra argument is needed.
        q_all, k_all, v_all = heads(x)
        q_new, k_new = rope(q_all[:, :, -1:], k_all)
        step = causal_softmax(q_new @ k_new.transpose(-1, -2) / math.sqrt(HEAD_DIM)) @ v_all
        assert torch.allclose(step, out[:, :, -1:], atol=1e-5)
        print(f"{'rope':<12} decoding step            {tuple(step.shape)}  (equals the last row)")

        # 3. Bias encodings: added to the scores before softmax.
        q, k, v = heads(x)
        scores = q @ k.transpose(-1, -2) / math.sqrt(HEAD_DIM)
        alibi = posenc.ALiBi(HEADS)  # causal: a per-key bias m*j, same softmax as -m*(i-j)
        attn = causal_softmax(alibi(scores))
        # the paper's form, -m * (i - j) on every (i, j): the same attention
        distance = torch.arange(SEQ)[:, None] - torch.arange(SEQ)[None, :]  # i - j
        assert torch.allclose(
            attn, causal_softmax(scores - alibi.slopes[:, None, None] * distance), atol=1e-6
        )
        out = attn @ v
        print(f"{'alibi':<12} scores = alibi(scores)   {tuple(out.shape)}  slopes {alibi.slopes.tolist()}")

        t5 = posenc.RelativeBias(HEADS, num_buckets=32, max_distance=128)  # encoder: bidirectional
        scores = q @ k.transpose(-1, -2)  # T5 does not scale q @ k
        out = F.softmax(t5(scores), dim=-1) @ v
        print(f"{'t5':<12} scores = t5(scores)      {tuple(out.shape)}")

        # NoPE in attention: nothing to do, which is the point.
        out = causal_softmax(q @ k.transpose(-1, -2) / math.sqrt(HEAD_DIM)) @ v
        print(f"{'none':<12} (no call)                {tuple(out.shape)}")


if __name__ == "__main__":
    main()
