"""Attention sinks (``posenc.attention(..., sinks=)``): one logit per head whose value row is zero.

Every path of :func:`posenc.attention` against a float64 softmax-with-an-extra-logit written out,
transformers' gpt-oss ``eager_attention_forward``, gradients w.r.t. the sinks, and the misuse errors.
"""

from __future__ import annotations

import pytest
import torch
from test_attend import reference as attend_reference
from torch import Tensor

import posenc
import posenc._flex
import posenc.attend
from posenc.attend import attention

TOL = {torch.float32: {"atol": 2e-5, "rtol": 2e-5}, torch.float64: {"atol": 1e-10, "rtol": 1e-10}}
DIMS = {"d_model": 32, "num_heads": 4, "head_dim": 8, "max_len": 128}


# tiny tensors: one thread (on a loaded 2-core machine, thread contention costs 100x)
pytestmark = pytest.mark.usefixtures("one_thread")


def make(name: str, causal: bool, dtype: torch.dtype) -> posenc.PositionalEncoding | None:
    if name == "none":
        return None
    enc = posenc.build("shaw(values=True)" if name == "shaw" else name, causal=causal, **DIMS)
    with torch.no_grad():
        for p in enc.parameters():
            p.normal_()
    return enc.to(dtype)


def qkv(b=2, h=4, h_kv=None, tq=7, tk=7, dh=8, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    h_kv = h if h_kv is None else h_kv
    return tuple(
        torch.randn(b, n, t, dh, generator=g, dtype=dtype) for n, t in ((h, tq), (h_kv, tk), (h_kv, tk))
    )


def sink_logits(h=4, dtype=torch.float32) -> Tensor:
    return torch.tensor([-1.0, 0.0, 1.5, 3.0][:h], dtype=dtype)


def reference(q, k, v, enc, sinks, *, causal=False, docs=None, **kwargs) -> Tensor:
    """test_attend's float64 reference with the sinks; ``docs``: packed documents, positions per document."""
    if docs is not None:
        kwargs.update(k_positions=posenc.document_positions(docs), k_docs=docs)
    return attend_reference(q, k, v, enc, causal=causal, sinks=sinks, **kwargs)


def dense_mask(b: int, tq: int, tk: int) -> Tensor:
    g = torch.Generator().manual_seed(1)
    mask = torch.rand(b, 1, tq, tk, generator=g) > 0.3
    mask[0, 0, 1] = False  # a query that sees no key at all
    return mask


ENCODINGS = ["none", "rope", "alibi", "t5", "shaw"]  # shaw: the explicit-weights path (value term)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("backend", ["auto", "sdpa", "chunked"])
@pytest.mark.parametrize("mask", ["none", "dense"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", ENCODINGS)
def test_matches_softmax_with_an_extra_logit(name, causal, mask, backend, dtype):
    """auto: bias-free causal (no is_causal), Toeplitz (alibi/t5 without a mask) or one dense call."""
    enc = make(name, causal, dtype)
    q, k, v = qkv(dtype=dtype)
    sinks = sink_logits(dtype=dtype)
    m = dense_mask(2, 7, 7) if mask == "dense" else None
    out = attention(q, k, v, enc, causal=causal, attn_mask=m, backend=backend, chunk_size=3, sinks=sinks)
    expected = reference(q, k, v, enc, sinks, causal=causal, attn_mask=m)
    torch.testing.assert_close(out, expected, **TOL[dtype])
    if m is not None:
        assert (out[0, :, 1] == 0).all()  # the row that sees no key: zero with a sink


@pytest.mark.parametrize("backend", ["auto", "chunked"])
@pytest.mark.parametrize("name", ENCODINGS)
@pytest.mark.parametrize(
    "case",
    [
        {"tq": 1, "tk": 9},  # one decoding step
        {"tq": 3, "tk": 9, "h_kv": 2},  # KV cache, grouped-query attention
        {"tq": 9, "tk": 4},  # more queries than keys: the first rows see no key (keys the last 4 positions)
        {"window": 3},
        {"window": 4, "causal": False},
        {"docs": True},
    ],
    ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()),
)
def test_decode_gqa_windows_and_documents(name, backend, case):
    case = dict(case)
    causal = case.pop("causal", True)
    window = case.pop("window", None)
    docs = case.pop("docs", None)
    enc = make(name, causal, torch.float32)
    q, k, v = qkv(tq=case.get("tq", 7), tk=case.get("tk", 7), h_kv=case.get("h_kv"))
    ids = torch.tensor([[0, 0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 1, 1, 1]]) if docs else None
    tq, tk = q.shape[-2], k.shape[-2]
    given = {"q_positions": torch.arange(tq), "k_positions": torch.arange(tk) + tq - tk} if tq > tk else {}
    sinks = sink_logits()
    out = attention(
        q,
        k,
        v,
        enc,
        causal=causal,
        window=window,
        document_ids=ids,
        backend=backend,
        chunk_size=2,
        sinks=sinks,
        **given,
    )
    expected = reference(q, k, v, enc, sinks, causal=causal, window=window, docs=ids, **given)
    torch.testing.assert_close(out, expected, **TOL[torch.float32])


def test_toeplitz_path_with_sinks_over_many_chunks(monkeypatch):
    """A distance bias at default positions takes the Toeplitz path; chunks of 4 over 13 queries."""
    calls = []
    toeplitz = posenc.attend._toeplitz
    monkeypatch.setattr(posenc.attend, "_toeplitz", lambda *a: calls.append(1) or toeplitz(*a))
    enc = make("alibi", False, torch.float32)
    q, k, v = qkv(tq=13, tk=13)
    sinks = sink_logits()
    for causal in (True, False):
        out = attention(q, k, v, enc, causal=causal, chunk_size=4, sinks=sinks)
        torch.testing.assert_close(out, reference(q, k, v, enc, sinks, causal=causal), **TOL[torch.float32])
    assert len(calls) == 2


def test_zero_sinks_at_minus_infinity_are_no_sinks():
    q, k, v = qkv()
    out = attention(q, k, v, causal=True, sinks=torch.full((4,), float("-inf")))
    torch.testing.assert_close(out, attention(q, k, v, causal=True))


def test_half_precision_sinks_in_float32_scores():
    q, k, v = (t.bfloat16() for t in qkv())
    sinks = sink_logits(dtype=torch.bfloat16)
    out = attention(q, k, v, causal=True, sinks=sinks)
    expected = reference(q.float(), k.float(), v.float(), None, sinks.float(), causal=True)
    torch.testing.assert_close(out.float(), expected, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("masked", [True, False])  # without a mask, alibi takes the Toeplitz path
@pytest.mark.parametrize("backend", ["auto", "sdpa", "chunked"])
@pytest.mark.parametrize("name", ["none", "alibi", "shaw"])
def test_gradcheck_wrt_sinks(name, backend, masked):
    enc = make(name, True, torch.float64)
    q, k, v = qkv(b=1, h=4, h_kv=2, tq=3, tk=4, dh=8, dtype=torch.float64)
    sinks = torch.tensor([0.3, -0.5, 0.0, 1.0], dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([True, True, False, True])[None, None, None] if masked else None

    def f(s: Tensor) -> Tensor:
        return attention(q, k, v, enc, causal=True, attn_mask=mask, backend=backend, chunk_size=2, sinks=s)

    torch.autograd.gradcheck(f, (sinks,))


def test_sinks_gradient_matches_the_reference():
    q, k, v = qkv()
    sinks = sink_logits().requires_grad_()
    ref_sinks = sink_logits().double().requires_grad_()
    attention(q, k, v, causal=True, sinks=sinks).sum().backward()
    reference(q.double(), k.double(), v.double(), None, ref_sinks, causal=True).sum().backward()
    torch.testing.assert_close(sinks.grad, ref_sinks.grad.float(), atol=1e-5, rtol=1e-5)


def test_matches_transformers_gpt_oss_eager_attention():
    gpt_oss = pytest.importorskip("transformers.models.gpt_oss.modeling_gpt_oss")
    q, k, v = qkv(h=4, h_kv=2, tq=5, tk=5, dtype=torch.float64)
    sinks = sink_logits(dtype=torch.float64)
    module = torch.nn.Module()
    module.sinks, module.num_key_value_groups, module.training = sinks, 2, False
    causal = torch.zeros(5, 5, dtype=torch.float64).masked_fill(
        torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf")
    )[None, None]
    theirs, _ = gpt_oss.eager_attention_forward(module, q, k, v, causal, scaling=8**-0.5, dropout=0.0)
    ours = attention(q, k, v, causal=True, sinks=sinks)
    torch.testing.assert_close(ours.transpose(1, 2), theirs, **TOL[torch.float64])


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("name", ["none", "alibi", "t5", "rope"])
def test_flex_scales_by_the_sigmoid_of_the_log_sum_exp(monkeypatch, name):
    """The log-sum-exp correction, through eager FlexAttention (compiled, the CPU returns no lse)."""
    from torch.nn.attention import flex_attention as fa

    monkeypatch.setattr(posenc._flex, "_compiled", lambda fn, device: getattr(fa, fn))
    monkeypatch.setattr(posenc.attend, "lse_supported", lambda device: True)
    enc = make(name, True, torch.float32)
    q, k, v = qkv(tq=9, tk=9, h_kv=2)
    sinks = sink_logits()
    mask = dense_mask(2, 9, 9)
    with torch.no_grad():
        out = attention(q, k, v, enc, causal=True, window=4, attn_mask=mask, backend="flex", sinks=sinks)
    expected = reference(q, k, v, enc, sinks, causal=True, window=4, attn_mask=mask)
    torch.testing.assert_close(out, expected, **TOL[torch.float32])


def test_flex_on_the_cpu_with_sinks_runs_the_sdpa_paths():
    q, k, v = qkv()
    sinks = sink_logits()
    out = attention(q, k, v, causal=True, backend="flex", sinks=sinks)
    torch.testing.assert_close(out, reference(q, k, v, None, sinks, causal=True), **TOL[torch.float32])


@pytest.mark.parametrize(
    ("sinks", "err", "match"),
    [
        ([0.0] * 4, TypeError, "sinks must be None or a float tensor of shape \\(heads,\\), got list"),
        (torch.zeros(4, dtype=torch.long), TypeError, "got dtype torch.int64"),
        (torch.zeros(2), ValueError, "sinks must have shape \\(heads,\\) = \\(4,\\).*got \\(2,\\)"),
        (torch.zeros(1, 4), ValueError, "got \\(1, 4\\)"),
        (torch.zeros(4, device="meta"), ValueError, "sinks is on meta but q is on cpu"),
    ],
)
def test_misuse(sinks, err, match):
    q, k, v = qkv()
    with pytest.raises(err, match=match):
        attention(q, k, v, sinks=sinks)


# --- posenc.nn: a learned sink per head ----------------------------------------------------------------------


def test_layer_holds_zero_sinks_and_passes_them_to_attention():
    from posenc.nn import MultiheadAttention

    torch.manual_seed(0)
    layer = MultiheadAttention(32, 4, "alibi", causal=True, attention_sinks=True).eval()
    assert isinstance(layer.sinks, torch.nn.Parameter) and torch.equal(layer.sinks, torch.zeros(4))
    assert "attention_sinks=True" in repr(layer)
    plain = MultiheadAttention(32, 4, "alibi", causal=True).eval()
    assert plain.sinks is None
    missing = plain.load_state_dict(layer.state_dict(), strict=False)
    assert missing.unexpected_keys == ["sinks"]
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        layer.sinks.fill_(-1e4)  # a sink that takes no weight: the layer without sinks
        torch.testing.assert_close(layer(x), plain(x))
        layer.sinks.copy_(sink_logits())
        q, k, v = (p(x).view(2, 5, -1, 8).transpose(1, 2) for p in (layer.q_proj, layer.k_proj, layer.v_proj))
        out = reference(q, k, v, layer.encoding, layer.sinks, causal=True)
        torch.testing.assert_close(
            layer(x), layer.out_proj(out.transpose(1, 2).reshape(2, 5, 32)), **TOL[torch.float32]
        )


@pytest.mark.parametrize("capacity", [None, 16])
@pytest.mark.parametrize("position", ["rope", "alibi", "t5", "shaw"])
def test_lm_decode_with_a_kv_cache_matches_the_full_forward(position, capacity):
    from posenc.nn import KVCache, TransformerLM

    torch.manual_seed(0)
    model = TransformerLM(
        32, 32, 2, 4, position=position, max_len=64, num_kv_heads=2, attention_sinks=True
    ).eval()
    with torch.no_grad():
        for block in model.blocks:
            block.attn.sinks.normal_()
    ids = torch.randint(0, 32, (2, 9))
    with torch.no_grad():
        full = model(ids)
        cache = KVCache(capacity=capacity)
        steps = [model(ids[:, :6], cache=cache)] + [
            model(ids[:, i : i + 1], cache=cache) for i in range(6, 9)
        ]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_lm_sinks_learn():
    from posenc.nn import TransformerLM

    model = TransformerLM(32, 32, 2, 4, position="rope", attention_sinks=True)
    model(torch.randint(0, 32, (2, 7))).logsumexp(-1).mean().backward()
    for block in model.blocks:
        assert block.attn.sinks.grad is not None and block.attn.sinks.grad.abs().sum() > 0


def test_attention_sinks_must_be_a_bool():
    from posenc.nn import TransformerLM

    with pytest.raises(TypeError, match="attention_sinks"):
        TransformerLM(32, 32, 1, 4, attention_sinks="yes")


def test_sinks_with_falcon_s_key_only_bias_are_refused():
    """Causal FalconALiBi's bias is read at each key (Falcon's rounding has no full form): with a sink the rows,
    shifted by their positions, moved the sink's weight (0.105 off the relative form at 40 positions). Refused;
    bidirectional Falcon (the full symmetric form) and Falcon without sinks run."""
    from posenc.encodings.alibi import FalconALiBi

    q = torch.randn(1, 4, 10, 8)
    with pytest.raises(ValueError, match="sinks with a causal FalconALiBi"):
        posenc.attention(q, q, q, FalconALiBi(4, 8), causal=True, sinks=torch.zeros(4))
    assert posenc.attention(q, q, q, FalconALiBi(4, 8, causal=False), sinks=torch.zeros(4)).shape == q.shape
    assert posenc.attention(q, q, q, FalconALiBi(4, 8), causal=True).shape == q.shape
