"""Coming from Hugging Face: the position encoding a model's config describes, as a posenc module.

Runs offline and without ``transformers``: ``from_hf_config`` also takes the dict of a
``config.json``. With ``transformers`` installed, pass ``model.config`` or an ``AutoConfig`` instead.

    python examples/from_hugging_face.py
"""

import torch

from posenc.functional import interleaved_to_half
from posenc.hf import SUPPORTED_MODEL_TYPES, from_hf_config

# 1. Llama 3.1's RoPE, from the relevant part of its config.json.
llama31 = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}
rope = from_hf_config(llama31)
q = torch.randn(1, 32, 16, 128)  # (b, h, t, dh)
k = torch.randn(1, 8, 16, 128)  # grouped-query attention: fewer key heads
q, k = rope(q, k)
print("llama 3.1:", rope)

# 2. Try YaRN on the same model: change the dict, nothing else.
yarn_scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}
yarn = from_hf_config({**llama31, "rope_scaling": yarn_scaling})
print("with yarn: attention scaling", round(yarn.attention_scaling, 4))

# 3. What other configs mean.
print(
    "gpt-neox: ", from_hf_config({"model_type": "gpt_neox", "hidden_size": 2048, "num_attention_heads": 16})
)
print(
    "falcon-rw:",
    from_hf_config({"model_type": "falcon", "hidden_size": 2048, "num_attention_heads": 32, "alibi": True}),
)
print(
    "mpt:      ", from_hf_config({"model_type": "mpt", "n_heads": 32, "attn_config": {"alibi_bias_max": 8}})
)
t5 = {"model_type": "t5", "num_heads": 8, "relative_attention_num_buckets": 32}
encoder_bias, decoder_bias = from_hf_config(t5), from_hf_config(t5, causal=True)
print("t5:       ", encoder_bias, "/", decoder_bias)
scores = torch.randn(1, 8, 10, 10)
print("t5 scores + bias:", tuple(encoder_bias(scores).shape))

# 4. Port an interleaved-RoPE checkpoint (GPT-J style) to the half-split layout: permute the rows of
#    the query and key projections; the attention scores stay the same.
heads, head_dim, width = 4, 16, 64
wq, wk = torch.randn(heads * head_dim, width), torch.randn(heads * head_dim, width)
x = torch.randn(1, 12, width)


def scores_with(rope, wq, wk):
    q = (x @ wq.T).view(1, 12, heads, head_dim).transpose(1, 2)
    k = (x @ wk.T).view(1, 12, heads, head_dim).transpose(1, 2)
    q, k = rope(q, k)
    return q @ k.transpose(-1, -2)


interleaved = from_hf_config({"model_type": "gptj", "n_embd": width, "n_head": heads, "rotary_dim": head_dim})
half = from_hf_config(
    {"model_type": "gpt_neox", "hidden_size": width, "num_attention_heads": heads, "rotary_pct": 1.0}
)
before = scores_with(interleaved, wq, wk)
after = scores_with(half, interleaved_to_half(wq, heads), interleaved_to_half(wk, heads))
print("scores equal after conversion:", torch.allclose(before, after, atol=1e-4))

print(f"{len(SUPPORTED_MODEL_TYPES)} supported model types:", ", ".join(SUPPORTED_MODEL_TYPES))
