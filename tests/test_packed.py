"""Packed documents: positions restart per document and attention stays inside each one."""

from __future__ import annotations

import pytest
import torch
from nn.models import LM_ENCODINGS, LOGITS_TOL, VOCAB, make_model
from test_attend import ENCODINGS, TOL, make, qkv, reference

import posenc
from posenc.attend import attention
from posenc.masking import document_numbers

# Two rows packed differently: documents of 5, 3 and 6 tokens, and of 2, 9 and 3.
LENGTHS = [[5, 3, 6], [2, 9, 3]]
T = 14


# tiny tensors: one thread (on a loaded 2-core machine, thread contention costs 100x)
pytestmark = pytest.mark.usefixtures("one_thread")


def packed_ids(lengths=LENGTHS, first_id=40, unique=False) -> torch.Tensor:
    """(b, t) ids; unless ``unique``, one id value is reused in a row for non-adjacent documents on purpose."""
    rows = []
    for row in lengths:
        ids = [first_id + (i if unique else i % 2) for i, n in enumerate(row) for _ in range(n)]
        rows.append(torch.tensor(ids))
    return torch.stack(rows)


def spans(row: list[int]) -> list[slice]:
    out, start = [], 0
    for n in row:
        out.append(slice(start, start + n))
        start += n
    return out


def test_document_positions_restart_where_the_id_changes():
    ids = torch.tensor([7, 7, 7, 2, 2, 7])
    assert posenc.document_positions(ids).tolist() == [0, 1, 2, 0, 1, 0]
    batch = packed_ids()
    expected = torch.stack([torch.cat([torch.arange(n) for n in row]) for row in LENGTHS])
    torch.testing.assert_close(posenc.document_positions(batch), expected)
    assert posenc.document_positions(torch.tensor([-3])).tolist() == [0]


@pytest.mark.parametrize(
    ("ids", "error", "match"),
    [
        (torch.zeros(4), TypeError, r"document_ids must have an integer dtype.*float32"),
        (torch.zeros(2, 2, 2, dtype=torch.long), ValueError, r"document_ids must have shape.*\(2, 2, 2\)"),
        ([0, 0, 1], TypeError, r"document_ids must be an integer torch.Tensor.*list"),
    ],
)
def test_document_positions_bad_input(ids, error, match):
    with pytest.raises(error, match=match):
        posenc.document_positions(ids)


@pytest.mark.parametrize("backend", ["auto", "sdpa", "chunked"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", ENCODINGS)
def test_packed_attention_equals_each_document_alone(name, causal, backend):
    enc = make(name, causal)
    q, k, v = qkv(tq=T, tk=T)
    docs = packed_ids()
    out = attention(q, k, v, enc, causal=causal, document_ids=docs, backend=backend, chunk_size=4)
    for row, lengths in enumerate(LENGTHS):
        for part in spans(lengths):
            r = slice(row, row + 1)
            alone = attention(q[r, :, part], k[r, :, part], v[r, :, part], enc, causal=causal)
            torch.testing.assert_close(out[r, :, part], alone, **TOL[torch.float32])


@pytest.mark.parametrize("name", ["alibi", "rope", "t5", "none"])
def test_packed_attention_matches_float64_reference(name):
    """Also against the written-out formula: positions restart, keys of other documents masked."""
    enc = make(name, True)
    q, k, v = qkv(tq=T, tk=T)
    docs = packed_ids()
    positions = posenc.document_positions(docs)
    out = attention(q, k, v, enc, causal=True, document_ids=docs, backend="chunked", chunk_size=5)
    numbers = torch.stack([torch.cat([torch.full((n,), i) for i, n in enumerate(row)]) for row in LENGTHS])
    expected = reference(
        q, k, v, enc, causal=True, q_positions=positions, k_positions=positions, k_docs=numbers
    )
    torch.testing.assert_close(out, expected, **TOL[torch.float32])


class _CountSDPA(torch.overrides.TorchFunctionMode):
    """Counts scaled_dot_product_attention calls (the kernels a call runs)."""

    calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += func is torch.nn.functional.scaled_dot_product_attention
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", ["none", "rope", "alibi"])
@pytest.mark.parametrize(
    ("documents", "calls"),
    [(8, 8), (2, 2), (1, 1), (16, 1)],  # 64-row documents and longer: one call each; 32-row ones: one in all
)
def test_auto_on_the_cpu_attends_document_by_document_from_64_rows(name, documents, calls):
    """Below the budget, "auto" made one SDPA call with a (t, t) mask for packed documents: on the CPU 2-4x
    causal SDPA's time at t = 1024-4096, where a call per document took 0.2-0.8x (with or without the
    backward). Now a call per document where they average 64 rows or more; the same output."""
    t = 512
    enc = make(name, True)
    q, k, v = (torch.randn(1, 4, t, 8, generator=torch.Generator().manual_seed(s)) for s in range(3))
    docs = (torch.arange(t) * documents // t)[None]
    with _CountSDPA() as counter:
        out = attention(q, k, v, enc, causal=True, document_ids=docs)
    assert counter.calls == calls
    one_call = attention(q, k, v, enc, causal=True, document_ids=docs, backend="sdpa")
    torch.testing.assert_close(out, one_call, **TOL[torch.float32])


def test_document_numbers_are_runs_of_equal_ids():
    """The one rule of packed documents: a run of equal ids; an id that recurs later is another document."""
    assert document_numbers(torch.tensor([7, 7, 2, 7])).tolist() == [0, 0, 1, 2]
    numbers = torch.stack([torch.cat([torch.full((n,), i) for i, n in enumerate(row)]) for row in LENGTHS])
    assert torch.equal(document_numbers(packed_ids()), numbers)
    assert document_numbers(torch.zeros(0, dtype=torch.long)).shape == (0,)


@pytest.mark.parametrize("rows", [slice(4, 10), slice(0, 3), slice(7, 14)])
def test_query_shard_with_numbered_documents_equals_the_full_call(rows):
    """Recurring ids: a shard of queries with the whole sequence's document numbers equals those rows."""
    enc = make("alibi", True)
    q, k, v = qkv(tq=T, tk=T)
    docs = packed_ids()  # ids 40/41 recur for non-adjacent documents
    positions, numbers = posenc.document_positions(docs), document_numbers(docs)
    full = attention(q, k, v, enc, causal=True, document_ids=docs)
    shard = attention(
        q[:, :, rows],
        k,
        v,
        enc,
        causal=True,
        q_positions=positions[:, rows],
        k_positions=positions,
        document_ids=numbers,
        q_document_ids=numbers[:, rows],
    )
    torch.testing.assert_close(shard, full[:, :, rows], **TOL[torch.float32])


def test_query_shard_with_its_own_document_ids():
    """A shard of queries (the last 6 of 14) with q_document_ids equals those rows of the full call."""
    enc = make("alibi", True)
    q, k, v = qkv(tq=T, tk=T)
    docs = packed_ids(unique=True)  # compared as given: one id per document
    positions = posenc.document_positions(docs)
    full = attention(q, k, v, enc, causal=True, document_ids=docs)
    rows = slice(4, 10)
    shard = attention(
        q[:, :, rows],
        k,
        v,
        enc,
        causal=True,
        q_positions=positions[:, rows],
        k_positions=positions,
        document_ids=docs,
        q_document_ids=docs[:, rows],
    )
    torch.testing.assert_close(shard, full[:, :, rows], **TOL[torch.float32])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"document_ids": torch.zeros(2, 5, dtype=torch.long)},
            ValueError,
            r"document_ids has length 5, expected 7",
        ),
        ({"document_ids": torch.zeros(7)}, TypeError, r"document_ids must have an integer dtype"),
        ({"document_ids": torch.zeros(3, 7, dtype=torch.long)}, ValueError, r"document_ids has batch size 3"),
        (
            {"document_ids": torch.zeros(7, dtype=torch.long, device="meta")},
            ValueError,
            r"document_ids is on meta but q is on cpu",
        ),
        (
            {"q_document_ids": torch.zeros(7, dtype=torch.long)},
            ValueError,
            r"q_document_ids was given without",
        ),
    ],
)
def test_bad_document_ids_name_the_argument(kwargs, error, match):
    q, k, v = qkv()
    with pytest.raises(error, match=match):
        attention(q, k, v, make("rope", True), causal=True, **kwargs)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("position", LM_ENCODINGS)
def test_packed_model_equals_each_document_alone(position, causal):
    """TransformerLM(ids, document_ids=...): every document's logits are its own, additive encodings too."""
    model = make_model(position, causal=causal)
    gen = torch.Generator().manual_seed(5)
    tokens = torch.randint(0, VOCAB, (2, T), generator=gen)
    docs = packed_ids()
    packed = model(tokens, document_ids=docs)
    for row, lengths in enumerate(LENGTHS):
        for part in spans(lengths):
            alone = model(tokens[row : row + 1, part])
            torch.testing.assert_close(packed[row : row + 1, part], alone, **LOGITS_TOL)
    # one (seq,) packing for every row: as that row given for each
    torch.testing.assert_close(model(tokens, document_ids=docs[1]), model(tokens, document_ids=docs[[1, 1]]))


def test_packed_model_refuses_a_cache_and_bad_ids():
    model = make_model("rope")
    tokens = torch.zeros(2, T, dtype=torch.long)
    with pytest.raises(ValueError, match=r"document_ids cannot be combined with a cache"):
        model(tokens, document_ids=packed_ids(), cache=posenc.nn.KVCache())
    with pytest.raises(ValueError, match=r"document_ids must have shape \(batch, seq\) = \(2, 14\)"):
        model(tokens, document_ids=torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match=r"document_ids must have an integer dtype"):
        model(tokens, document_ids=torch.zeros(2, T))


@pytest.mark.parametrize(
    ("name", "causal", "window"), [("rope", False, None), ("none", True, None), ("none", False, 3)]
)
def test_a_query_shard_without_its_positions_is_refused(name, causal, window):
    """q_document_ids names queries that are not the last tq keys: their default positions would be."""
    q, k, v = qkv(tq=T, tk=T)
    docs = packed_ids(unique=True)
    with pytest.raises(ValueError, match=r"q_document_ids .* pass q_positions"):
        attention(
            q[:, :, 4:10],
            k,
            v,
            make(name, True),
            causal=causal,
            window=window,
            document_ids=docs,
            q_document_ids=docs[:, 4:10],
        )


def test_a_query_shard_without_positions_attends_bidirectionally_without_an_encoding_that_reads_them():
    """Where no rule or encoding reads positions, the shard needs none: those rows of the full call."""
    q, k, v = qkv(tq=T, tk=T)
    docs = packed_ids(unique=True)
    full = attention(q, k, v, make("sinusoidal", True), document_ids=docs)
    shard = attention(
        q[:, :, 4:10], k, v, make("sinusoidal", True), document_ids=docs, q_document_ids=docs[:, 4:10]
    )
    torch.testing.assert_close(shard, full[:, :, 4:10], **TOL[torch.float32])


@pytest.mark.parametrize("position", LM_ENCODINGS)
def test_padding_inside_packed_documents_takes_no_position(position):
    """A padding mask beside document ids: each document's real tokens as if alone and unpadded."""
    model = make_model(position, causal=True)
    gen = torch.Generator().manual_seed(6)
    tokens = torch.randint(0, VOCAB, (2, T), generator=gen)
    docs = packed_ids()
    keep = torch.ones(2, T, dtype=torch.bool)
    keep[0, 0] = keep[0, 5] = keep[1, 3] = keep[1, 4] = False  # left-padded documents, both rows
    packed = model(tokens, document_ids=docs, attention_mask=keep)
    for row, lengths in enumerate(LENGTHS):
        for part in spans(lengths):
            real = torch.arange(T)[part][keep[row, part]]
            alone = model(tokens[row : row + 1, real])
            torch.testing.assert_close(packed[row : row + 1, real], alone, **LOGITS_TOL)
