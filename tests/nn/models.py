"""The tiny language models the tests of ``posenc.nn`` build, their sizes and inputs (shared by the
files of ``tests/nn/`` and by ``tests/test_packed.py``)."""

from __future__ import annotations

import pytest
import torch
from test_attend import ENCODINGS  # one name per encoding class that takes 1-D positions

from posenc.nn import TransformerLM

# float32 logits of a 2-layer model computed two ways (cached vs full, padded vs alone):
# the same math in a different order, a few ulps of values of order 1.
LOGITS_TOL = {"atol": 1e-5, "rtol": 1e-5}


VOCAB, D, LAYERS, HEADS, MAX_LEN = 61, 32, 2, 4, 64


# The config strings the issue names; swapping them changes nothing else.
SPECS = [
    "sinusoidal",
    "learned",
    "rope",
    "rope(scaling={'rope_type': 'yarn', 'factor': 4.0})",
    "t5",
    "alibi",
    "none",
]


# Sinusoidal2D needs a 2D grid of patches: a language model's 1D positions are not its input.
LM_ENCODINGS = [n for n in ENCODINGS if n != "sinusoidal2d"] + [SPECS[3]]


def make_model(position, causal=True, seed=0, **kwargs) -> TransformerLM:
    torch.manual_seed(seed)
    try:
        model = TransformerLM(
            VOCAB, D, LAYERS, HEADS, position=position, max_len=MAX_LEN, causal=causal, **kwargs
        )
    except ValueError as err:
        if not causal and "causal" in str(err):
            pytest.skip(f"{position} is causal only: {err}")
        raise
    # Learned position tables may start at zero: randomise every parameter of the encoding.
    with torch.no_grad():
        for p in model.encoding.parameters() if model.encoding is not None else model.encodings.parameters():
            p.normal_(std=0.5)
    return model.eval()


def ids(b=2, t=11, seed=1):
    return torch.randint(0, VOCAB, (b, t), generator=torch.Generator().manual_seed(seed))


def count_calls(module: torch.nn.Module, method: str) -> list:
    """Record each call of the public ``module.method``: ``module`` records it, its class is untouched."""
    calls, real = [], getattr(module, method)

    def counting(*args, **kwargs):
        calls.append(module)
        return real(*args, **kwargs)

    setattr(module, method, counting)
    return calls
