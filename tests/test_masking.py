"""Sliding-window attention: the rule of transformers' masks, on every path, without a (t, t) mask."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_attend import ENCODINGS, TOL, make, qkv, reference
from transformers import masking_utils

import posenc
from posenc.attend import attention
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


@pytest.mark.parametrize("backend", ["auto", "sdpa", "chunked"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", ENCODINGS)
def test_window_matches_reference(name, causal, backend):
    enc = make(name, causal)
    q, k, v = qkv(tq=13, tk=13)
    out = attention(q, k, v, enc, causal=causal, window=4, backend=backend, chunk_size=5)
    expected = reference(q, k, v, enc, causal=causal, window=4)
    torch.testing.assert_close(out, expected, **TOL[torch.float32])


@pytest.mark.parametrize("name", ["alibi", "t5", "rope", "none"])
@pytest.mark.parametrize("causal", [True, False])
def test_window_with_explicit_positions_padding_and_decoding(name, causal):
    enc = make(name, causal)
    q, k, v = qkv(tq=5, tk=12)
    positions = torch.stack([torch.arange(3, 15), torch.arange(12) * 2])  # (b, tk), per row
    keep = torch.ones(2, 1, 1, 12, dtype=torch.bool)
    keep[0, ..., :2] = False
    for kwargs in ({}, {"k_positions": positions}, {"attn_mask": keep}):
        out = attention(q, k, v, enc, causal=causal, window=3, backend="chunked", chunk_size=2, **kwargs)
        expected = reference(q, k, v, enc, causal=causal, window=3, **kwargs)
        torch.testing.assert_close(out, expected, **TOL[torch.float32])


def test_window_larger_than_the_sequence_changes_nothing():
    enc = make("alibi", True)
    q, k, v = qkv(tq=9, tk=9)
    torch.testing.assert_close(
        attention(q, k, v, enc, causal=True, window=100), attention(q, k, v, enc, causal=True)
    )


@pytest.mark.parametrize("name", ["alibi", "none"])
def test_window_at_default_positions_reads_only_the_keys_each_chunk_sees(monkeypatch, name):
    """The Toeplitz path: each chunk's mask is a view of one (h, tq + tk - 1) vector, and its keys
    are the window's, not all of them."""
    calls = []
    real_sdpa = F.scaled_dot_product_attention

    def spy_sdpa(q, k, v, attn_mask=None, **kwargs):
        calls.append((k.shape[-2], attn_mask.untyped_storage().nbytes()))
        return real_sdpa(q, k, v, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy_sdpa)
    enc = make(name, True) if name != "none" else None
    q, k, v = qkv(tq=64, tk=64)
    out = attention(q, k, v, enc, causal=True, window=8, chunk_size=16)
    assert len(calls) == 4
    # 16 queries with a window of 8 see 16 + 7 keys (fewer for the first chunk).
    assert sorted(tk for tk, _ in calls) == [16, 23, 23, 23], calls
    assert all(nbytes <= 4 * 4 * (64 + 64) for _, nbytes in calls), calls
    torch.testing.assert_close(out, reference(q, k, v, enc, causal=True, window=8), **TOL[torch.float32])


@pytest.mark.parametrize(
    ("window", "error", "match"),
    [
        (0, ValueError, r"window must be a positive int, got 0"),
        (2.0, TypeError, r"window must be a positive int"),
    ],
)
def test_bad_window(window, error, match):
    q, k, v = qkv()
    with pytest.raises(error, match=match):
        attention(q, k, v, None, causal=True, window=window)


def test_model_per_layer_window_decodes_like_the_full_forward():
    torch.manual_seed(0)
    model = posenc.nn.TransformerLM(61, 32, 3, 4, position="rope", window=[4, None, 2]).eval()
    ids = torch.randint(0, 61, (2, 12))
    full = model(ids)
    cache = posenc.nn.KVCache()
    steps = [model(ids[:, :5], cache=cache)] + [model(ids[:, i : i + 1], cache=cache) for i in range(5, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    # A window changes the outputs past it.
    plain = posenc.nn.TransformerLM(61, 32, 3, 4, position="rope").eval()
    plain.load_state_dict(model.state_dict())
    assert not torch.allclose(plain(ids)[:, 6:], full[:, 6:])
    torch.testing.assert_close(plain(ids)[:, :2], full[:, :2])
