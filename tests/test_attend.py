"""posenc.attention: every path against a hand-written softmax(q kᵀ · scale + bias) v."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

import posenc
from posenc._positions import resolve_qk_positions
from posenc.attend import attention
from posenc.base import PositionalEncoding
from posenc.registry import lookup

# The module that holds posenc.attention (the tests read its path constants).

# float32 outputs against a float64 reference: dot products of width <= 16 and a softmax
# over <= 64 keys round to a few ulps of 1.
F32_TOL = {"atol": 2e-5, "rtol": 2e-5}
# float64 against float64: the same math in another order.
F64_TOL = {"atol": 1e-10, "rtol": 1e-10}
TOL = {torch.float32: F32_TOL, torch.float64: F64_TOL}

DIMS = {"d_model": 32, "num_heads": 4, "head_dim": 8, "max_len": 128}


# tiny tensors: one thread (on a loaded 2-core machine, thread contention costs 100x)
pytestmark = pytest.mark.usefixtures("one_thread")


def registered_classes() -> list[str]:
    """One registered name per encoding class (aliases dropped) that builds from sequence sizes.

    Encodings that need more than :data:`DIMS` or positions with axes (an image grid, M-RoPE
    sections) are covered by their own tests; every 1-D sequence encoding runs here.
    """
    names, seen = [], set()
    for name in posenc.available():
        cls = lookup(name)
        if cls in seen:
            continue
        seen.add(cls)
        try:
            posenc.build(name, **DIMS).prepare(4)  # default 1-D positions
        except ValueError as err:
            if "missing required size" in str(err) or "positions of shape" in str(err):
                continue  # a grid (2-D positions) encoding
            raise
        names.append(name)
    return names


ENCODINGS = registered_classes()


def make(name: str, causal: bool, dtype: torch.dtype = torch.float32, **dims) -> PositionalEncoding:
    try:
        enc = posenc.build(name, causal=causal, **{**DIMS, **dims})
    except ValueError as err:
        if "causal" in str(err) and not causal:
            pytest.skip(f"{name} is causal only: {err}")
        raise
    # Learned tables start at zero in some libraries; randomise so that they matter.
    with torch.no_grad():
        for p in enc.parameters():
            p.normal_()
    return enc.to(dtype)


def reference(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    enc: PositionalEncoding | None,
    *,
    causal: bool,
    q_positions: Tensor | None = None,
    k_positions: Tensor | None = None,
    attn_mask: Tensor | None = None,
    scale: float | None = None,
    window: int | None = None,
    q_docs: Tensor | None = None,
    k_docs: Tensor | None = None,
    sinks: Tensor | None = None,
) -> Tensor:
    """softmax(q kᵀ · scale + bias + mask) v (+ value term) in float64, written out; fully masked rows give 0.

    With ``sinks`` (``(h,)``) each row's softmax also runs over its head's sink logit, whose value
    row is zero: ``p = softmax([scores..., s_h])[:-1]`` (gpt-oss).

    ALiBi and T5 act through their drop-in ``forward`` (``scores = enc(scores)``, which adds the
    FULL bias, not the key-only form) and rotary encodings through ``q, k = enc(q, k)``, so that
    the hook-based paths of :func:`posenc.attention` are checked against the direct formula;
    other encodings (content biases, value terms) through their hooks in float64.

    Visibility, written out as a ``(b, tq, tk)`` mask: causal ``k_pos <= q_pos`` (by index,
    bottom-right aligned, for default positions), a window ``0 <= q_pos - k_pos < window``
    (causal) or ``|q_pos - k_pos| <= window // 2``, documents ``q_doc == k_doc``.
    """
    explicit = q_positions is not None or k_positions is not None
    qp, kp = resolve_qk_positions(q, k, q_positions, k_positions)
    dtype = q.dtype
    drop_in = isinstance(enc, (posenc.ALiBi, posenc.RelativeBias))
    if enc is not None and enc.kind == "rotary":
        q, k = enc.encode_qk(q, k, q_positions=qp, k_positions=kp)
    q, k, v = q.double(), k.double(), v.double()
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-1, -2) * scale
    if drop_in:
        # enc(zeros) is the full bias, computed in the input's precision (float32 for bfloat16).
        bias_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        zeros = torch.zeros(scores.shape, dtype=bias_dtype)
        scores = scores + enc(zeros, q_positions=qp, k_positions=kp).double()
    elif enc is not None:
        bias = enc.double().attention_bias(q, k, q_positions=qp, k_positions=kp)
        if bias is not None:
            scores = scores + bias
    tq, tk = scores.shape[-2:]
    if explicit:
        at_q, at_k = qp.reshape(-1, tq, 1), kp.reshape(-1, 1, tk)
    else:  # the index rule: query row i sits at key index i + tk - tq
        at_q, at_k = (torch.arange(tq) + tk - tq).reshape(1, tq, 1), torch.arange(tk).reshape(1, 1, tk)
    behind = at_q - at_k
    keep = torch.ones(1, tq, tk, dtype=torch.bool)
    if causal:
        keep = keep & (behind >= 0)
        if window is not None:
            keep = keep & (behind < window)
    elif window is not None:
        keep = keep & (behind.abs() <= window // 2)
    if k_docs is not None:
        q_docs = k_docs[..., tk - tq :] if q_docs is None else q_docs
        keep = keep & (q_docs.reshape(-1, tq, 1) == k_docs.reshape(-1, 1, tk))
    keep = keep[:, None]  # (b|1, 1, tq, tk)
    if attn_mask is not None:
        keep = keep & attn_mask
    scores = scores.masked_fill(~keep, float("-inf"))
    if sinks is not None:
        sink = sinks.double().view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        scores = torch.cat([scores, sink], dim=-1)
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    if sinks is not None:
        weights = weights[..., :-1]
    out = weights @ v
    if enc is not None and not drop_in:
        extra = enc.value_term(weights, q_positions=qp, k_positions=kp)
        if extra is not None:
            out = out + extra.double()
    if enc is not None:
        enc.to(dtype)
    return out.to(dtype)


def qkv(b=2, h=4, h_kv=None, tq=7, tk=7, dh=8, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    h_kv = h if h_kv is None else h_kv
    q = torch.randn(b, h, tq, dh, generator=g, dtype=dtype)
    k = torch.randn(b, h_kv, tk, dh, generator=g, dtype=dtype)
    v = torch.randn(b, h_kv, tk, dh, generator=g, dtype=dtype)
    return q, k, v


def masks(b: int, tq: int, tk: int) -> dict[str, Tensor | None]:
    g = torch.Generator().manual_seed(1)
    padding = torch.ones(b, tk, dtype=torch.bool)
    padding[0, :2] = False  # left padding on row 0
    padding[-1, -1] = False  # right padding on the last row
    dense = torch.rand(b, 1, tq, tk, generator=g) > 0.3
    dense[0, 0, 1] = False  # a query that sees no key at all
    return {"none": None, "padding": padding[:, None, None, :], "dense": dense, "shared": dense[:1, :1]}


# --- the hand-written formula, every encoding, every path --------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("backend", ["auto", "sdpa", "chunked"])
@pytest.mark.parametrize("mask_name", ["none", "padding", "dense", "shared"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", ENCODINGS)
def test_matches_hand_written_attention(name, causal, mask_name, backend, dtype):
    enc = make(name, causal, dtype)
    q, k, v = qkv(dtype=dtype)
    mask = masks(2, 7, 7)[mask_name]
    # chunk_size=3 splits 7 queries into uneven chunks (3, 3, 1).
    out = attention(q, k, v, enc, causal=causal, attn_mask=mask, backend=backend, chunk_size=3)
    expected = reference(q, k, v, enc, causal=causal, attn_mask=mask)
    torch.testing.assert_close(out, expected, **TOL[dtype])


@pytest.mark.parametrize("backend", ["auto", "chunked"])
@pytest.mark.parametrize("name", ENCODINGS)
def test_decoding_queries_are_the_last_keys(name, backend):
    """tq < tk (KV cache): bottom-right causal alignment and default positions tk-tq .. tk-1."""
    enc = make(name, causal=True)
    q, k, v = qkv(tq=3, tk=9)
    out = attention(q, k, v, enc, causal=True, backend=backend, chunk_size=2)
    torch.testing.assert_close(out, reference(q, k, v, enc, causal=True), **F32_TOL)
    # The same as the last 3 rows of the full square call.
    q_full = torch.cat([torch.randn(2, 4, 6, 8), q], dim=2)
    full = attention(q_full, k, v, enc, causal=True)
    torch.testing.assert_close(out, full[:, :, -3:], **F32_TOL)


@pytest.mark.parametrize("name", ENCODINGS)
def test_explicit_positions_per_batch_row(name):
    enc = make(name, causal=True)
    q, k, v = qkv(tq=5, tk=5)
    positions = torch.tensor([[0, 1, 2, 3, 4], [10, 11, 12, 13, 14]])
    out = attention(q, k, v, enc, causal=True, q_positions=positions, k_positions=positions)
    expected = reference(q, k, v, enc, causal=True, q_positions=positions, k_positions=positions)
    torch.testing.assert_close(out, expected, **F32_TOL)


@pytest.mark.parametrize("backend", ["auto", "sdpa", "chunked"])
@pytest.mark.parametrize(("q_batch", "k_batch"), [(1, 3), (3, 1)])
@pytest.mark.parametrize("name", ["none", "rope", "alibi", "t5", "shaw(values=True)"])
def test_a_batch_of_one_broadcasts_against_the_other(name, q_batch, k_batch, backend):
    """One prompt's queries against a batch of caches, or one cache for a batch of queries."""
    enc = None if name == "none" else make(name, causal=True)
    q, k, v = qkv(b=q_batch)[0], *qkv(b=k_batch, seed=1)[1:]
    out = attention(q, k, v, enc, causal=True, backend=backend, chunk_size=3)
    expected = reference(*(t.expand(3, *t.shape[1:]) for t in (q, k, v)), enc, causal=True)
    torch.testing.assert_close(out, expected, **F32_TOL)


# --- causality by position (sequence shards, context parallelism) ---------------------------------


@pytest.mark.parametrize("backend", ["auto", "sdpa", "chunked"])
@pytest.mark.parametrize("name", ["alibi", "t5", "rope", "none"])
def test_causality_follows_positions_for_a_shard_of_queries(name, backend):
    """Queries at positions 0..31 against 64 keys see no future key: the rows of the full attention.

    (Causality by index would align them with the last 32 keys and let them see the future.)
    """
    enc = make(name, True)
    q, k, v = qkv(tq=64, tk=64)
    full = attention(q, k, v, enc, causal=True)
    keys = torch.arange(64)
    head_tail = torch.cat([torch.arange(16), torch.arange(48, 64)])  # torch's load balancer, W=2, rank 0
    for rows in (torch.arange(32), torch.arange(16, 48), head_tail):
        shard = attention(
            q[:, :, rows],
            k,
            v,
            enc,
            causal=True,
            q_positions=rows,
            k_positions=keys,
            backend=backend,
            chunk_size=8,
        )
        torch.testing.assert_close(shard, full[:, :, rows], **F32_TOL)
        expected = reference(q[:, :, rows], k, v, enc, causal=True, q_positions=rows, k_positions=keys)
        torch.testing.assert_close(shard, expected, **F32_TOL)


@pytest.mark.parametrize("name", ["alibi", "t5", "rope", "none"])
def test_causality_follows_positions_for_keys_in_any_order(name):
    """Keys gathered from shards come in any order: each is visible by its position, not its index."""
    enc = make(name, True)
    q, k, v = qkv(tq=24, tk=24)
    full = attention(q, k, v, enc, causal=True)
    order = torch.randperm(24, generator=torch.Generator().manual_seed(2))
    rows = torch.arange(8, 20)
    out = attention(
        q[:, :, rows], k[:, :, order], v[:, :, order], enc, causal=True, q_positions=rows, k_positions=order
    )
    torch.testing.assert_close(out, full[:, :, rows], **F32_TOL)


def test_causality_by_position_per_batch_row_without_an_encoding():
    q, k, v = qkv(tq=4, tk=8)
    k_pos = torch.stack([torch.arange(8), torch.arange(8).flip(0)])
    q_pos = torch.tensor([[1, 3, 5, 7], [0, 2, 4, 6]])
    out = attention(
        q, k, v, None, causal=True, q_positions=q_pos, k_positions=k_pos, backend="chunked", chunk_size=3
    )
    torch.testing.assert_close(
        out, reference(q, k, v, None, causal=True, q_positions=q_pos, k_positions=k_pos)
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", ["alibi", "rope"])
def test_flex_causality_and_documents_follow_positions(name):
    enc = make(name, True, head_dim=16)
    q, k, v = qkv(b=2, h=4, tq=32, tk=32, dh=16)
    rows = torch.arange(16)
    docs = torch.tensor([0] * 10 + [1] * 22)
    with torch.no_grad():
        full = attention(q, k, v, enc, causal=True, document_ids=docs)
        shard = attention(
            q[:, :, rows],
            k,
            v,
            enc,
            causal=True,
            q_positions=posenc.document_positions(docs)[rows],
            k_positions=posenc.document_positions(docs),
            document_ids=docs,
            q_document_ids=docs[rows],
            backend="flex",
        )
    torch.testing.assert_close(shard, full[:, :, rows], **F32_TOL)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", ["rope", "alibi", "t5", "none"])
def test_grouped_query_attention(name, causal):
    enc = make(name, causal)
    q, k, v = qkv(h=4, h_kv=2)
    out = attention(q, k, v, enc, causal=causal)
    torch.testing.assert_close(out, reference(q, k, v, enc, causal=causal), **F32_TOL)


def test_scale_is_used():
    enc = make("alibi", causal=True)
    q, k, v = qkv()
    out = attention(q, k, v, enc, causal=True, scale=0.3)
    torch.testing.assert_close(out, reference(q, k, v, enc, causal=True, scale=0.3), **F32_TOL)


def test_no_encoding_is_plain_sdpa():
    q, k, v = qkv()
    torch.testing.assert_close(
        attention(q, k, v, None, causal=True), F.scaled_dot_product_attention(q, k, v, is_causal=True)
    )


# --- paths -------------------------------------------------------------------------------------


class SpyEncoding(PositionalEncoding):
    """Wraps an encoding and records the (tq, tk) of every attention_bias call."""

    kind = "bias"

    def __init__(self, inner: PositionalEncoding) -> None:
        super().__init__()
        self.inner = inner
        self.calls: list[tuple[int, int]] = []

    def attention_bias(self, q, k, q_positions=None, k_positions=None):
        self.calls.append((q.shape[-2], k.shape[-2]))
        return self.inner.attention_bias(q, k, q_positions=q_positions, k_positions=k_positions)

    def forward(self, scores, q_positions=None, k_positions=None):
        return self.inner(scores, q_positions=q_positions, k_positions=k_positions)


def test_large_full_bias_is_asked_for_in_chunks():
    """The chunked path never builds a dense mask: the T5 bias is asked per query chunk.

    (``backend="auto"`` takes this path above BIAS_BUDGET_BYTES: tests/test_memory.py.)
    """
    spy = SpyEncoding(make("t5", causal=True))
    q, k, v = qkv(b=1, tq=64, tk=64)
    out = attention(q, k, v, spy, causal=True, backend="chunked", chunk_size=16)
    assert max(tq for tq, _ in spy.calls) <= 16, spy.calls
    # no probe call: the state says which form the bias takes; causal chunks read only the keys they see
    assert sorted(spy.calls) == [(16, 16), (16, 32), (16, 48), (16, 64)], spy.calls
    torch.testing.assert_close(out, reference(q, k, v, spy, causal=True), **F32_TOL)


@pytest.mark.parametrize("name", ["alibi", "t5"])
@pytest.mark.parametrize("causal", [True, False])
def test_distance_bias_is_a_view_of_one_vector(monkeypatch, name, causal):
    """ALiBi and T5 at default positions: SDPA reads a strided view of the (h, tq + tk - 1) bias by
    distance; nothing of size tq*tk exists, and SDPA is never given attn_mask with is_causal=True
    (refused since torch 2.15)."""
    calls = []
    real_sdpa = F.scaled_dot_product_attention

    def spy_sdpa(q, k, v, attn_mask=None, **kwargs):
        calls.append((attn_mask.untyped_storage().nbytes(), kwargs.get("is_causal", False)))
        return real_sdpa(q, k, v, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy_sdpa)
    enc = make(name, causal=causal)
    q, k, v = qkv(tq=48, tk=48)
    out = attention(q, k, v, enc, causal=causal, chunk_size=16)
    assert len(calls) == (3 if causal else 1)
    assert all(not is_causal and nbytes <= 4 * 4 * (48 + 48) for nbytes, is_causal in calls), calls
    torch.testing.assert_close(out, reference(q, k, v, enc, causal=causal), **F32_TOL)


def test_bias_free_causal_uses_sdpa_causal(monkeypatch):
    calls = []
    real_sdpa = F.scaled_dot_product_attention

    def spy_sdpa(q, k, v, attn_mask=None, **kwargs):
        calls.append((attn_mask, kwargs.get("is_causal")))
        return real_sdpa(q, k, v, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy_sdpa)
    q, k, v = qkv()
    attention(q, k, v, make("rope", causal=True), causal=True)
    assert calls == [(None, True)]


def test_fused_path_falls_back_under_the_math_backend():
    """The math backend refuses attn_mask with is_causal=True: the explicit mask takes over."""
    enc = make("alibi", causal=True)
    q, k, v = qkv()
    with sdpa_kernel(SDPBackend.MATH):
        out = attention(q, k, v, enc, causal=True)
    torch.testing.assert_close(out, reference(q, k, v, enc, causal=True), **F32_TOL)


@pytest.mark.parametrize("backend", ["auto", "chunked"])
def test_fully_masked_rows_are_zero_not_nan(backend):
    enc = make("t5", causal=True)
    q, k, v = (t.requires_grad_() for t in qkv())
    mask = torch.ones(2, 1, 7, 7, dtype=torch.bool)
    mask[:, :, :2] = False  # two padding queries that see nothing
    out = attention(q, k, v, enc, causal=True, attn_mask=mask, backend=backend, chunk_size=3)
    assert torch.equal(out[:, :, :2], torch.zeros_like(out[:, :, :2]))
    out.sum().backward()
    for t in (q, k, v, enc.relative_attention_bias.weight):
        assert torch.isfinite(t.grad).all()


def test_more_queries_than_keys_causal():
    """Bottom-right alignment: the first tq - tk queries see no key and return zeros (an encoding's positions
    say the same: the keys the last tk of the queries' positions). Without an encoding a window takes the
    Toeplitz path, which zeroes those rows itself."""
    q, k, v = qkv(tq=6, tk=4)
    positions = {"q_positions": torch.arange(6), "k_positions": torch.arange(4) + 2}
    for enc, given in (
        (None, {}),
        (None, {"window": 2}),
        (make("alibi", causal=True), positions),
        (make("t5", causal=True), positions),
    ):
        for backend in ("auto", "chunked"):
            out = attention(q, k, v, enc, causal=True, backend=backend, chunk_size=2, **given)
            torch.testing.assert_close(out, reference(q, k, v, enc, causal=True, **given), **F32_TOL)
            assert torch.equal(out[:, :, :2], torch.zeros_like(out[:, :, :2]))


# --- gradients ---------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["auto", "chunked"])
def test_gradient_reaches_t5_table(backend):
    enc = make("t5", causal=True)
    q, k, v = qkv()
    attention(q, k, v, enc, causal=True, backend=backend, chunk_size=3).square().sum().backward()
    grad = enc.relative_attention_bias.weight.grad
    assert grad is not None and grad.abs().sum() > 0
    # the same gradient as the hand-written formula
    ref_enc = make("t5", causal=True)
    ref_enc.load_state_dict(enc.state_dict())
    reference(q, k, v, ref_enc, causal=True).square().sum().backward()
    torch.testing.assert_close(grad, ref_enc.relative_attention_bias.weight.grad, **F32_TOL)


@pytest.mark.parametrize("backend", ["auto", "chunked"])
@pytest.mark.parametrize("name", ["rope", "alibi", "t5"])
def test_gradients_match_reference(name, backend):
    """Also through the chunked path, whose chunks are checkpointed when gradients are needed."""
    enc = make(name, causal=True)
    q, k, v = (t.requires_grad_() for t in qkv())
    attention(q, k, v, enc, causal=True, backend=backend, chunk_size=3).square().sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    reference(q, k, v, enc, causal=True).square().sum().backward()
    for got, t in zip(grads, (q, k, v), strict=True):
        torch.testing.assert_close(got, t.grad, **F32_TOL)


# --- half precision far out --------------------------------------------------------------------

# bfloat16 inputs against a float64 reference of the same (rounded) inputs: bfloat16 keeps
# 8 significant bits, so probabilities and outputs carry relative errors of ~1e-2.
BF16_TOL = {"atol": 3e-2, "rtol": 3e-2}


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param(
            "cuda",
            marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="the bias cast needs a GPU"),
        ),
    ],
    ids=["float32-bias", "cast-bias-in-chunks"],
)
def test_bf16_alibi_at_position_100k(device):
    """Causal ALiBi in bfloat16 over 512 queries at positions 100000..100511.

    The bias must keep its resolution: either float32 into the kernel (the CPU path) or,
    where a kernel wants the query dtype (a GPU), cast per query chunk so that values near each
    chunk's diagonal stay small. The check below also shows that casting one key-only
    bias for all 512 queries to bfloat16 fails the same tolerance.
    """
    enc = posenc.build("alibi", num_heads=8, causal=True)
    t, offset = 512, 100_000
    q, k, v = qkv(b=1, h=8, tq=t, tk=t, dh=16, dtype=torch.bfloat16, seed=3)
    positions = torch.arange(offset, offset + t)
    on = [x.to(device) for x in (q, k, v, positions)]
    out = attention(*on[:3], enc.to(device), causal=True, q_positions=on[3], k_positions=on[3]).cpu()
    enc = enc.cpu()
    expected = reference(
        q.double(),
        k.double(),
        v.double(),
        enc.double(),
        causal=True,
        q_positions=positions,
        k_positions=positions,
    )
    torch.testing.assert_close(out.double(), expected, **BF16_TOL)
    # The naive bf16 key-only bias is off by whole units in the logits far from the last query.
    naive_bias = enc.attention_bias(q, k, q_positions=positions, k_positions=positions).to(torch.bfloat16)
    causal_keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    naive = F.scaled_dot_product_attention(
        q, k, v, attn_mask=naive_bias.masked_fill(~causal_keep, float("-inf"))
    )
    assert not torch.allclose(naive.double(), expected, **BF16_TOL)


# --- compile -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["alibi", "t5", pytest.param("rope", marks=pytest.mark.slow)])
def test_compiles_fullgraph_without_recompiling_per_length(name):
    torch._dynamo.reset()
    enc = make(name, causal=True)
    from torch._dynamo.utils import counters

    counters.clear()
    # inductor's build of one path (ALiBi's, 3 s) runs here; the others trace and guard the same
    # with aot_eager (T5's inductor build takes 10 s; every encoding's runs with -m slow below)
    backend = "inductor" if name == "alibi" else "aot_eager"
    fn = torch.compile(
        lambda q, k, v: attention(q, k, v, enc, causal=True), fullgraph=True, dynamic=True, backend=backend
    )
    for t in (6, 9, 13):
        q, k, v = qkv(tq=t, tk=t, seed=t)
        torch.testing.assert_close(fn(q, k, v), reference(q, k, v, enc, causal=True), **F32_TOL)
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])


@pytest.mark.slow
@pytest.mark.parametrize("name", ENCODINGS)
def test_compiles_fullgraph_every_encoding_with_mask(name):
    torch._dynamo.reset()
    enc = make(name, causal=True)
    from torch._dynamo.utils import counters

    counters.clear()
    fn = torch.compile(
        lambda q, k, v, m: attention(q, k, v, enc, causal=True, attn_mask=m), fullgraph=True, dynamic=True
    )
    for t in (6, 9, 13):
        q, k, v = qkv(tq=t, tk=t, seed=t)
        mask = masks(2, t, t)["padding"]
        torch.testing.assert_close(
            fn(q, k, v, mask), reference(q, k, v, enc, causal=True, attn_mask=mask), **F32_TOL
        )
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])


# --- FlexAttention (opt-in; compiles) ----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", ["alibi", "t5", "rope", "none"])
def test_flex_backend_matches_reference(name, causal):
    enc = make(name, causal, head_dim=16)
    q, k, v = qkv(b=2, h=4, tq=32, tk=32, dh=16)
    mask = masks(2, 32, 32)["padding"]
    with torch.no_grad():
        out = attention(q, k, v, enc, causal=causal, attn_mask=mask, backend="flex")
        expected = reference(q, k, v, enc, causal=causal, attn_mask=mask)
    torch.testing.assert_close(out, expected, **F32_TOL)


def test_flex_backend_refuses_cpu_gradients():
    q, k, v = (t.requires_grad_() for t in qkv(dh=16))
    with pytest.raises(ValueError, match=r"backend='flex'.*CPU"):
        attention(q, k, v, make("alibi", True), causal=True, backend="flex")


def test_flex_backend_refuses_float64_on_the_cpu():
    """The CPU's compiled FlexAttention takes float32 and half precision only: said before compiling."""
    q, k, v = qkv(dh=16, dtype=torch.float64)
    with torch.no_grad(), pytest.raises(ValueError, match=r"backend='flex' on the CPU .* got torch.float64"):
        attention(q, k, v, make("alibi", True, torch.float64), causal=True, backend="flex")


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (
            lambda q, k, v: (q[0], k, v),
            ValueError,
            r"q must have shape \(batch, heads, seq, head_dim\).*rank 3",
        ),
        (lambda q, k, v: (q, k[..., 0], v), ValueError, r"k must have shape.*rank 3"),
        (lambda q, k, v: (q, k, v[:, :, :5]), ValueError, r"v must have shape.*\(2, 4, 7\).*\(2, 4, 5, 8\)"),
        (lambda q, k, v: (q, k[..., :6], v), ValueError, r"same head_dim"),
        (lambda q, k, v: (q, k[:, :3], v[:, :3]), ValueError, r"4 heads and k has 3"),
        (lambda q, k, v: (q, k.double(), v), TypeError, r"same dtype"),
        (lambda q, k, v: (q.long(), k, v), TypeError, r"q must be a floating-point tensor.*int64"),
        (lambda q, k, v: (q.tolist(), k, v), TypeError, r"q must be a torch.Tensor.*list"),
    ],
)
def test_bad_tensors_name_the_argument(change, error, match):
    q, k, v = change(*qkv())
    with pytest.raises(error, match=match):
        attention(q, k, v, make("rope", True), causal=True)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"attn_mask": torch.ones(2, 7)}, TypeError, r"attn_mask must be a boolean keep-mask.*float32"),
        (
            {"attn_mask": torch.ones(2, 7, dtype=torch.bool)},
            ValueError,
            r"attn_mask must be 4-D.*\(2, 7\).*mask\[:, None, None, :\]",
        ),
        (
            {"attn_mask": torch.ones(3, 1, 1, 7, dtype=torch.bool)},
            ValueError,
            r"attn_mask.*\(2, 4, 7, 7\).*\(3, 1, 1, 7\)",
        ),
        (
            {"attn_mask": torch.ones(1, 1, 1, 1, 7, dtype=torch.bool)},
            ValueError,
            r"attn_mask must be 4-D",
        ),
        ({"causal": "False"}, TypeError, r"causal must be a bool, got 'False'"),
        ({"qk_encoded": "no"}, TypeError, r"qk_encoded must be a bool, got 'no'"),
        (
            {"q_positions": torch.arange(7, device="meta")},
            ValueError,
            r"q_positions is on meta but q is on cpu",
        ),
        (
            {"attn_mask": torch.ones(1, 1, 7, 7, dtype=torch.bool, device="meta")},
            ValueError,
            r"attn_mask is on meta but q is on cpu",
        ),
        ({"window": -2}, ValueError, r"window must be a positive int, got -2"),
        ({"dropout_p": 1.5}, ValueError, r"dropout_p.*1.5"),
        ({"scale": -1.0}, ValueError, r"scale.*-1.0"),
        ({"backend": "fast"}, ValueError, r"backend must be one of.*'fast'"),
        ({"chunk_size": 0}, ValueError, r"chunk_size.*0"),
        ({"q_positions": torch.arange(5)}, ValueError, r"q_positions has length 5, expected 7"),
        ({"k_positions": torch.arange(7.0)}, TypeError, r"k_positions must have an integer dtype"),
    ],
)
def test_bad_options_name_the_argument(kwargs, error, match):
    q, k, v = qkv()
    with pytest.raises(error, match=match):
        attention(q, k, v, make("alibi", True), **{"causal": True, **kwargs})


def test_encoding_must_be_a_module():
    q, k, v = qkv()
    with pytest.raises(TypeError, match=r"encoding must be a posenc.PositionalEncoding.*str"):
        attention(q, k, v, "alibi")


def per_head_bias_specs() -> list[str]:
    """Every registered encoding whose bias or value term is built for a number of heads.

    Found by behaviour, not by name: a bias that differs across heads (e.g. ALiBi's slopes, T5's
    table) or an encoding whose hooks refuse other head counts; Shaw only with per-head tables.
    """
    specs = []
    for name in ENCODINGS:
        enc = make(name, causal=True, num_heads=2)
        if enc.prepare(4).bias_form == "none" and not enc.prepare(4).has_value_term:
            continue
        q = torch.randn(1, 3, 4, DIMS["head_dim"])
        try:
            attention(q, q, q, enc, causal=True, backend="sdpa")
        except (ValueError, RuntimeError):
            specs.append(name)
    return [*specs, "shaw(per_head=True, values=True)"]


@pytest.mark.parametrize("positions", [False, True])
@pytest.mark.parametrize("backend", ["auto", "sdpa", "chunked", "flex"])
@pytest.mark.parametrize("kv_heads", [2, 1])
@pytest.mark.parametrize("built_heads", [1, 4])
@pytest.mark.parametrize("spec", per_head_bias_specs())
def test_a_bias_built_for_other_heads_is_refused_on_every_path(
    spec, built_heads, kv_heads, backend, positions
):
    """ALiBi(1) or T5 with 4 heads on 2-head queries: the hooks' ValueError, never a broadcast or torch's error.

    Easy to hit by building the bias with ``num_kv_heads`` in an MQA/GQA model. Modules and
    prepared states, default positions (the Toeplitz path) and explicit ones.
    """
    enc = posenc.build(spec, causal=True, **{**DIMS, "num_heads": built_heads})
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 6, DIMS["head_dim"], generator=gen)
    k, v = (torch.randn(1, kv_heads, 6, DIMS["head_dim"], generator=gen) for _ in range(2))
    kwargs = {"q_positions": torch.arange(6) + 3, "k_positions": torch.arange(6) + 3} if positions else {}
    match = rf"q has 2 heads \(shape \(1, 2, 6, 8\)\), but .*built with num_heads={built_heads}"
    for encoding in (enc, enc.prepare(6, 6, **kwargs)):
        extra = kwargs if encoding is enc else {}
        with pytest.raises(ValueError, match=match):
            attention(q, k, v, encoding, causal=True, backend=backend, chunk_size=2, **extra)


def test_per_head_bias_specs_cover_the_known_encodings():
    found = {spec.split("(")[0] for spec in per_head_bias_specs()}
    assert {"alibi", "kerple", "fire", "shaw"} <= found
    assert found & {"t5", "relative_bias"} and found & {"transformer_xl", "relpos_xl"}


# --- sliding windows ---------------------------------------------------------------------------


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


@pytest.mark.parametrize(
    "enc", [None, posenc.RoPE(8), posenc.RelativeBias(4, bidirectional=False)], ids=["none", "rope", "t5"]
)
@pytest.mark.parametrize(("causal", "window"), [(True, None), (False, 3)], ids=["causal", "window"])
def test_more_queries_than_keys_needs_positions_where_it_masks(enc, causal, window):
    """With more queries than keys the rules by index align the last query with the last key, an encoding's
    default positions both from 0: refused (distances off by tq - tk); explicit positions follow positions."""
    q, k, v = qkv(tq=6, tk=3)
    if enc is not None:
        with pytest.raises(ValueError, match=r"more queries \(6\) than keys \(3\) at default positions"):
            attention(q, k, v, enc, causal=causal, window=window)
    qp, kp = torch.arange(2, 8), torch.arange(3)
    out = attention(q, k, v, enc, causal=causal, window=window, q_positions=qp, k_positions=kp)
    ref = reference(q, k, v, enc, causal=causal, window=window, q_positions=qp, k_positions=kp)
    torch.testing.assert_close(out, ref, **TOL[torch.float32])
    attention(q, k, v, enc)  # (neither causal nor a window: nothing to align)


@pytest.mark.parametrize(("causal", "window"), [(True, None), (False, 3)], ids=["causal", "window"])
def test_more_queries_than_keys_with_positions_on_axes_is_refused_as_with_rope(causal, window):
    """M-RoPE's default positions put both sides from 0 as RoPE's do; its masks go by token order, aligned at
    the end: refused alike (it ran, the distances off by tq - tk). Given positions, the keys are the last tk
    tokens (it was refused as "at default positions", asking for the positions it had)."""
    q, k, v = qkv(tq=6, tk=3)
    mrope = posenc.MRoPE(8, mrope_section=(2, 1, 1))
    with pytest.raises(ValueError, match=r"more queries \(6\) than keys \(3\) at default positions"):
        attention(q, k, v, mrope, causal=causal, window=window)
    t = torch.arange(6)
    qp = torch.stack((t, t // 2, t % 3), -1)  # (6, 3): the keys are the last 3 tokens
    kp = qp[3:]
    out = attention(q, k, v, mrope, causal=causal, window=window, q_positions=qp, k_positions=kp)
    rq, rk = mrope.encode_qk(q, k, q_positions=qp, k_positions=kp)
    torch.testing.assert_close(
        out, reference(rq, rk, v, None, causal=causal, window=window), **TOL[torch.float32]
    )


@pytest.mark.parametrize("spec", ["rope", "alibi", "t5", "none", "mrope(mrope_section=(2, 3, 3))"])
def test_a_narrowed_state_masks_its_block_of_queries_where_they_are(spec):
    """A state narrowed to a block of queries that are not the last (``state.narrow``, one query chunk)
    kept its token starts, but attention aligned its queries with the last keys: queries 0-3 of 8 saw all
    8 keys (3.3 off). Every block equals its rows of the whole call, causal and with a window."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 8, 16) for _ in range(3))
    encoding = posenc.build(spec, num_heads=2, head_dim=16, causal=True)
    state = encoding.prepare(8)
    for window in (None, 3):
        full = posenc.attention(q, k, v, state, causal=True, window=window)
        for rows in (slice(0, 4), slice(2, 5), slice(7, 8), slice(-2, None), slice(-5, -2), slice(None, -6)):
            block = state.narrow(rows, slice(0, 8))
            got = posenc.attention(q[:, :, rows], k, v, block, causal=True, window=window)
            torch.testing.assert_close(got, full[:, :, rows])


@pytest.mark.parametrize("spec", ["rope", "alibi", "t5", "kerple", "fire", "transformer_xl", "shaw"])
def test_a_narrowed_state_reads_negative_and_open_slice_ends_from_the_end(spec):
    """``narrow(slice(-2, None), ...)`` added -2 to the token starts while its positions were the last two:
    the block attended as if it began two tokens before the first (1.2 to 2.0 off). A block's bias and
    attention equal the whole call's rows and columns; a slice with a step is refused by name."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 16, dtype=torch.float64) for _ in range(3))
    encoding = posenc.build(spec, num_heads=2, head_dim=16, causal=True).double()
    state = encoding.prepare(6)
    full = posenc.attention(q, k, v, state, causal=True)
    bias = state.attention_bias(q, k)  # (1, 2, 6, 6) where the bias is full
    for rows, cols in (
        (slice(-2, None), slice(None)),
        (slice(None), slice(-3, None)),
        (slice(1, -1), slice(-5, 5)),
    ):
        block = state.narrow(rows, cols)
        if cols == slice(None):
            got = posenc.attention(q[:, :, rows], k, v, block, causal=True)
            torch.testing.assert_close(got, full[:, :, rows])
        if bias is not None and bias.shape[-2] == 6:  # a key-only bias is exact up to a constant per row
            got_bias = block.attention_bias(q[:, :, rows], k[:, :, cols])
            torch.testing.assert_close(got_bias, bias[:, :, rows, cols])
    with pytest.raises(ValueError, match=r"rows must be a slice of step 1.*got step 2"):
        state.narrow(slice(0, 6, 2), slice(None))
    with pytest.raises(TypeError, match="cols must be a slice, got int"):
        state.narrow(slice(None), 2)


def test_causal_alibi_in_chunks_keeps_float32_precision_for_queries_far_apart():
    """A chunk's key-only ALiBi bias is relative to its last query: rows far below it (a context-parallel
    shard's two halves, a document at 1e6 beside one at 0) lost the steps between neighbouring keys
    (1.7e-2 off at 1e6 apart, 3.6e-5 at a 2,200-token shard). Those chunks take the full bias."""
    from posenc.distributed import shard_positions

    torch.manual_seed(0)
    h, dh, t = 8, 16, 600
    k, v = (torch.randn(1, h, t, dh) for _ in range(2))
    alibi = posenc.ALiBi(h, causal=True)
    slopes = posenc.functional.alibi_slopes(h, dtype=torch.float64).view(1, h, 1, 1)
    far = torch.cat([torch.arange(300) + 1_000_000, torch.arange(300)])
    for qp, kp in ((shard_positions(t, 2, 0), torch.arange(t)), (far, far)):
        q = torch.randn(1, h, qp.shape[-1], dh)
        scores = q.double() @ k.double().mT / math.sqrt(dh) + slopes * (kp - qp[:, None]).double()
        expected = scores.masked_fill(kp > qp[:, None], float("-inf")).softmax(-1) @ v.double()
        got = posenc.attention(
            q, k, v, alibi, causal=True, q_positions=qp, k_positions=kp, backend="chunked", chunk_size=64
        )
        torch.testing.assert_close(got.double(), expected, atol=2e-6, rtol=0)


def test_no_queries_or_an_empty_batch_with_given_positions_give_empty_outputs():
    """Zero queries with (b, t) positions under a causal mask, causal ALiBi's chunks with none, and
    Transformer-XL over an empty batch raised raw torch errors (a reshape of 0 elements to -1, a max and
    a min of nothing); without positions the same calls gave the empty output."""
    q0, k, v = torch.randn(2, 2, 0, 4), torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4)
    rope = posenc.build("rope", head_dim=4, num_heads=2)
    alibi = posenc.build("alibi", num_heads=2, causal=True)
    rows = torch.zeros(2, 0, dtype=torch.long)
    out = posenc.attention(
        q0, k, v, rope, causal=True, q_positions=rows, k_positions=torch.arange(5).expand(2, 5)
    )
    assert out.shape == (2, 2, 0, 4)
    none = torch.zeros(0, dtype=torch.long)
    out = posenc.attention(
        q0, k, v, alibi, causal=True, q_positions=none, k_positions=torch.arange(5), backend="chunked"
    )
    assert out.shape == (2, 2, 0, 4)
    xl = posenc.build("transformer_xl", d_model=8, num_heads=2, head_dim=4)
    empty = torch.randn(0, 2, 3, 4)
    positions = torch.zeros(0, 3, dtype=torch.long)
    for backend in ("auto", "sdpa", "chunked"):
        out = posenc.attention(
            empty, empty, empty, xl, q_positions=positions, k_positions=positions, backend=backend
        )
        assert out.shape == (0, 2, 3, 4)
