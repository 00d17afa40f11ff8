"""The value-term hook: attention with explicit weights, checked against Shaw et al.'s two equations.

A tiny test encoding (its own code here, independent of ``posenc.ShawRelative``) has a content key
term ``q_i . a_K(clip(j - i)) / sqrt(dh)`` and a value term ``sum_j p_ij a_V(clip(j - i))``; the
float64 reference writes the paper's ``(tq, tk, dh)`` tables out.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from test_attend import qkv
from torch import Tensor, nn

from posenc._positions import resolve_qk_positions
from posenc.attend import attention
from posenc.base import PositionalEncoding

K = 3  # clipping distance
DH = 8


# tiny tensors: one thread (on a loaded 2-core machine, thread contention costs 100x)
pytestmark = pytest.mark.usefixtures("one_thread")


class TinyShaw(PositionalEncoding):
    """Clipped relative keys and values; ``encode_qk`` doubles the queries (to see that the key
    term reads the encoded queries)."""

    kind = "bias"

    def __init__(self, head_dim: int = DH, max_distance: int = K) -> None:
        super().__init__()
        self.max_distance = max_distance
        g = torch.Generator().manual_seed(3)
        self.key_table = nn.Parameter(torch.randn(2 * max_distance + 1, head_dim, generator=g))
        self.value_table = nn.Parameter(torch.randn(2 * max_distance + 1, head_dim, generator=g))
        self.bias_calls: list[tuple[int, int]] = []
        self.value_calls: list[tuple[int, int]] = []

    def _index(self, qp: Tensor, kp: Tensor) -> Tensor:
        """(b|1, 1, tq, tk) index of the clipped distance j - i."""
        qp, kp = qp.reshape(-1, 1, qp.shape[-1], 1), kp.reshape(-1, 1, 1, kp.shape[-1])
        return (kp - qp).clamp(-self.max_distance, self.max_distance) + self.max_distance

    def encode_qk(self, q, k, *, q_positions=None, k_positions=None):
        return q * 2, k

    def attention_bias(self, q, k, *, q_positions=None, k_positions=None):
        self.bias_calls.append((q.shape[-2], k.shape[-2]))
        qp, kp = resolve_qk_positions(q, k, q_positions, k_positions)
        rel = q @ self.key_table.to(q.dtype).T / math.sqrt(q.shape[-1])  # (b, h, tq, 2K+1)
        index = self._index(qp, kp).expand(q.shape[0], q.shape[1], -1, -1)
        return rel.gather(-1, index)

    def value_term(self, probs, *, q_positions=None, k_positions=None):
        self.value_calls.append(tuple(probs.shape[-2:]))
        tq, tk = probs.shape[-2:]
        # The state passes both; the defaults serve a direct call (keys 0..tk-1, queries the last tq).
        qp = torch.arange(tk - tq, tk) if q_positions is None else q_positions
        kp = torch.arange(tk) if k_positions is None else k_positions
        index = self._index(qp, kp).expand_as(probs)
        per_distance = probs.new_zeros(*probs.shape[:-1], 2 * self.max_distance + 1)
        per_distance.scatter_add_(-1, index, probs)  # weights summed per clipped distance
        return per_distance @ self.value_table.to(probs.dtype)


def paper(q, k, v, enc: TinyShaw, *, causal, q_positions=None, k_positions=None, attn_mask=None, window=None):
    """Shaw et al.'s equations in float64 with the full (tq, tk, dh) tables; masked rows give 0."""
    qp, kp = resolve_qk_positions(q, k, q_positions, k_positions)
    q, k, v = (q * 2).double(), k.double(), v.double()
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    tq, tk = q.shape[-2], k.shape[-2]
    qp, kp = qp.reshape(-1, tq, 1), kp.reshape(-1, 1, tk)
    clip = (kp - qp).clamp(-K, K) + K  # (b|1, tq, tk)
    a_k = enc.key_table.double()[clip]  # (b|1, tq, tk, dh)
    a_v = enc.value_table.double()[clip]
    e = (torch.einsum("bhid,bhjd->bhij", q, k) + torch.einsum("bhid,bijd->bhij", q, a_k)) / math.sqrt(DH)
    keep = torch.ones(e.shape, dtype=torch.bool)
    if causal:
        keep = keep & (kp <= qp)[:, None]
    if window is not None:
        near = ((qp - kp) < window) & ((qp - kp) >= 0) if causal else (qp - kp).abs() <= window // 2
        keep = keep & near[:, None]
    if attn_mask is not None:
        keep = keep & attn_mask
    alpha = e.masked_fill(~keep, float("-inf")).softmax(-1).nan_to_num(0.0)
    return alpha @ v + torch.einsum("bhij,bijd->bhid", alpha, a_v)


@pytest.mark.parametrize("backend", ["auto", "sdpa", "chunked"])
@pytest.mark.parametrize("causal", [True, False])
def test_key_and_value_terms_match_the_paper(causal, backend):
    enc = TinyShaw()
    q, k, v = qkv(tq=11, tk=11)
    out = attention(q, k, v, enc, causal=causal, backend=backend, chunk_size=4)
    torch.testing.assert_close(out.double(), paper(q, k, v, enc, causal=causal), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize(
    "kwargs",
    [
        {
            "q_positions": torch.tensor([[3, 9], [0, 1]]),
            "k_positions": torch.tensor([[0, 2, 3, 5, 7, 9], [0, 1, 0, 1, 0, 1]]),
        },
        {"attn_mask": torch.tensor([True, False, True, True, True, True])[None, None, None]},
        {"window": 2},
    ],
)
def test_value_term_with_positions_masks_windows_and_gqa(kwargs):
    enc = TinyShaw()
    q, k, v = qkv(tq=2, tk=6, h=4, h_kv=2)
    for backend in ("auto", "chunked"):
        out = attention(q, k, v, enc, causal=True, backend=backend, chunk_size=1, **kwargs)
        torch.testing.assert_close(
            out.double(), paper(q, k, v, enc, causal=True, **kwargs), atol=2e-5, rtol=2e-5
        )


def test_packed_documents_with_a_value_term_equal_each_document_alone():
    enc = TinyShaw()
    q, k, v = qkv(b=1, tq=9, tk=9)
    docs = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 1])
    out = attention(q, k, v, enc, causal=False, document_ids=docs)
    for part in (slice(0, 4), slice(4, 9)):
        alone = attention(q[:, :, part], k[:, :, part], v[:, :, part], enc, causal=False)
        torch.testing.assert_close(out[:, :, part], alone, atol=2e-5, rtol=2e-5)


def test_chunks_ask_only_for_their_block():
    """O(chunk * tk) memory: each chunk asks for the bias and value term of its rows and the keys it sees."""
    enc = TinyShaw()
    q, k, v = qkv(b=1, tq=12, tk=12)
    attention(q, k, v, enc, causal=True, chunk_size=4)
    # longest key range first: later chunks reuse the memory the earlier ones freed
    assert enc.bias_calls == [(4, 12), (4, 8), (4, 4)]
    assert enc.value_calls == [(4, 12), (4, 8), (4, 4)]


def test_gradients_reach_both_tables_and_match_the_paper():
    enc = TinyShaw().double()
    q, k, v = (t.double().requires_grad_() for t in qkv(tq=7, tk=7))
    out = attention(q, k, v, enc, causal=True, chunk_size=3)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v, enc.key_table, enc.value_table))
    ref = paper(q, k, v, enc, causal=True)
    expected = torch.autograd.grad(ref.square().sum(), (q, k, v, enc.key_table, enc.value_table))
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want)
    assert grads[3].abs().sum() > 0 and grads[4].abs().sum() > 0


def test_dropout_acts_on_the_weights_both_terms_see():
    """out = d(p) @ v + value_term(d(p)) with the same dropped weights d(p) (one chunk, same RNG draw)."""
    enc = TinyShaw()
    q, k, v = qkv(b=1, tq=6, tk=6)
    torch.manual_seed(7)
    with torch.no_grad():
        out = attention(q, k, v, enc, causal=False, dropout_p=0.5)
        qe = q * 2
        scores = qe @ k.transpose(-1, -2) / math.sqrt(DH) + enc.attention_bias(qe, k)
        torch.manual_seed(7)
        dropped = F.dropout(scores.softmax(-1), p=0.5, training=True)
        expected = dropped @ v + enc.value_term(dropped)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(out, attention(q, k, v, enc, causal=False))


def test_bias_is_computed_from_each_calls_encoded_queries():
    """One state shared by two layers: each call's content bias comes from its own queries."""
    enc = TinyShaw()
    q, k, v = qkv(tq=5, tk=5)
    state = enc.prepare(5)
    first = attention(q, k, v, state, causal=True)
    second = attention(q * 3, k, v, state, causal=True)
    torch.testing.assert_close(second, attention(q * 3, k, v, enc, causal=True))
    assert not torch.allclose(first, second)


def test_flex_refuses_a_value_term():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"backend='flex' cannot apply the value term of TinyShaw"):
        attention(q, k, v, TinyShaw(), backend="flex")
