"""posenc.masking: which keys each query sees; the sliding-window rule against transformers' mask functions."""

from __future__ import annotations

import pytest
import torch
from transformers import masking_utils

from posenc.masking import Visibility

# tiny tensors: one thread (on a loaded 2-core machine, thread contention costs 100x)
pytestmark = pytest.mark.usefixtures("one_thread")


def hf_mask(mask_function, tq: int, tk: int) -> torch.Tensor:
    """transformers' mask function evaluated at every (query, key), queries the last tq keys."""
    zero = torch.tensor(0)
    rows = [
        [bool(mask_function(zero, zero, torch.tensor(i + tk - tq), torch.tensor(j))) for j in range(tk)]
        for i in range(tq)
    ]
    return torch.tensor(rows)


@pytest.mark.parametrize("window", [1, 2, 5, 16])
@pytest.mark.parametrize(("tq", "tk"), [(9, 9), (3, 9), (1, 9)])
def test_causal_window_is_transformers_sliding_window(window, tq, tk):
    """Mistral / Gemma: key visible iff 0 <= q - k < sliding_window."""
    ours = Visibility(tq, tk, torch.device("cpu"), causal=True, window=window).block(slice(None), slice(None))
    theirs = hf_mask(masking_utils.sliding_window_causal_mask_function(window), tq, tk)
    torch.testing.assert_close(ours[0, 0], theirs)


@pytest.mark.parametrize("window", [1, 2, 5, 8, 128])
def test_bidirectional_window_is_modernbert_local_attention(window):
    """ModernBERT's local_attention=w: transformers' bidirectional sliding window of w // 2."""
    ours = Visibility(11, 11, torch.device("cpu"), window=window).block(slice(None), slice(None))
    theirs = hf_mask(masking_utils.sliding_window_bidirectional_mask_function(window // 2), 11, 11)
    torch.testing.assert_close(ours[0, 0], theirs)
