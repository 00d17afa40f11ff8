"""Use it in a model: posenc's transformer, or your own attention layer, with any encoding.

Run: ``python examples/use_in_model.py``. This is the README's "Use it in a model" example.
"""

import torch
from torch import nn

import posenc
from posenc.nn import KVCache, TransformerLM

# 1. A ready model: the position encoding is one config string.
model = TransformerLM(vocab_size=256, d_model=64, num_layers=2, num_heads=4, position="alibi", max_len=512)
ids = torch.randint(0, 256, (2, 16))
logits = model(ids)  # (2, 16, 256)

# Padded batches: positions come from the mask, so real tokens get their unpadded outputs.
mask = torch.ones(2, 16, dtype=torch.bool)
mask[1, :4] = False  # row 1 is left-padded
padded_logits = model(ids, attention_mask=mask)

# Decoding with a KV cache, and generation (greedy or sampled).
cache = KVCache()
prompt_logits = model(ids[:, :12], cache=cache)
step_logits = model(ids[:, 12:13], cache=cache)
torch.testing.assert_close(step_logits[:, 0], logits[:, 12])  # the same as the full forward
continuation = model.generate(ids, max_new_tokens=8, do_sample=True, top_k=20)  # (2, 24)


# 2. Your own attention layer: posenc.attention applies whatever encoding it is given.
class MyAttention(nn.Module):
    def __init__(self, d_model: int, num_heads: int, position: str = "rope") -> None:
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)
        self.pe = posenc.build(position, head_dim=d_model // num_heads, num_heads=num_heads, causal=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)  # 3 x (b, h, t, dh)
        y = posenc.attention(q, k, v, self.pe, causal=True)  # RoPE rotates q/k, ALiBi/T5 add a bias
        return self.out(y.transpose(1, 2).reshape(b, t, -1))


x = torch.randn(2, 16, 64)
for spec in ["rope", "rope(base=500000.0)", "alibi", "t5", "none"]:
    print(f"{spec:>22}: {tuple(MyAttention(64, 4, spec)(x).shape)}")

# 3. The three hooks, for a kernel of your own: every encoding has all three (no-ops where it does not act).
pe = posenc.build("t5", num_heads=4, causal=True)
q, k = torch.randn(2, 4, 16, 16), torch.randn(2, 4, 16, 16)
q, k = pe.encode_qk(q, k)  # unchanged for T5
bias = pe.attention_bias(q, k)  # (1, 4, 16, 16) float32, added to the scores before softmax

print("logits", tuple(logits.shape), "| generated", tuple(continuation.shape), "| bias", tuple(bias.shape))
