"""``attention(..., backend="flex")``: layouts, compile counts, and the BlockMask of causality by position,
windows, packed documents and the user's mask, against the SDPA and chunked paths."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor
from torch._dynamo.utils import counters

import posenc
from posenc._flex import flex_block_mask
from posenc.masking import Visibility

# float32 FlexAttention against float32 SDPA/chunked: the same softmax summed in another order,
# over <= 300 keys of width 16.
F32_TOL = {"atol": 2e-5, "rtol": 2e-5}
HEADS, HEAD_DIM = 4, 16


# tiny tensors: one thread (on a loaded 2-core machine, thread contention costs 100x)
pytestmark = pytest.mark.usefixtures("one_thread")


def make(name: str, causal: bool) -> posenc.PositionalEncoding:
    enc = posenc.build(name, num_heads=HEADS, head_dim=HEAD_DIM, causal=causal)
    with torch.no_grad():  # learned tables (T5) start small: make them matter
        for p in enc.parameters():
            p.normal_()
    return enc


def qkv(b: int, t: int, tq: int | None = None, h_kv: int = HEADS, seed: int = 0) -> tuple[Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, HEADS, t if tq is None else tq, HEAD_DIM, generator=g)
    k = torch.randn(b, h_kv, t, HEAD_DIM, generator=g)
    v = torch.randn(b, h_kv, t, HEAD_DIM, generator=g)
    return q, k, v


def graphs() -> int:
    return int(counters["stats"]["unique_graphs"])


# --- the block mask (eager at these sizes: no compile) -----------------------------------------


def _visibility(t: int, **rules) -> Visibility:
    return Visibility(t, t, torch.device("cpu"), **rules)


BLOCK_CASES = {
    "causal": {"causal": True},
    "causal window": {"causal": True, "window": 5},
    "bidirectional window": {"window": 6},
    "positions": {"causal": True, "q_pos": torch.arange(40).flip(0), "k_pos": torch.arange(40) * 2},
    "documents": {"q_doc": torch.arange(40) // 7, "k_doc": torch.arange(40) // 7},
    "user mask": {"user": torch.rand(2, HEADS, 40, 40, generator=torch.Generator().manual_seed(3)) > 0.5},
    "everything": {
        "causal": True,
        "window": 9,
        "q_pos": torch.stack([torch.arange(40), torch.arange(40) + 3]),
        "k_pos": torch.stack([torch.arange(40), torch.arange(40) + 3]),
        "q_doc": torch.arange(40) // 11,
        "k_doc": torch.arange(40) // 11,
        "user": torch.arange(40).remainder(3).ne(0).reshape(1, 1, 1, 40),
    },
}


@pytest.mark.parametrize("case", list(BLOCK_CASES))
def test_block_mask_keeps_exactly_what_visibility_keeps(case):
    vis = _visibility(40, **BLOCK_CASES[case])
    block_mask = flex_block_mask(vis, 2, HEADS)
    expected = vis.block(slice(None), slice(None))
    assert block_mask is not None and expected is not None
    b, h = block_mask.shape[:2]
    # mask_mod at every (b, h, i, j), evaluated by hand on index tensors.
    bi, hi, qi, kj = torch.meshgrid(
        torch.arange(b), torch.arange(h), torch.arange(40), torch.arange(40), indexing="ij"
    )
    got = block_mask.mask_mod(bi, hi, qi, kj)
    torch.testing.assert_close(got, expected.expand(b, h, 40, 40))


def test_no_rule_gives_no_block_mask():
    assert flex_block_mask(_visibility(40), 2, HEADS) is None


def test_causal_block_mask_skips_the_blocks_above_the_diagonal():
    # 512 keys in blocks of 128: a causal mask visits 4 + 3 + 2 + 1 of the 16 blocks.
    block_mask = flex_block_mask(_visibility(512, causal=True), 1, HEADS)
    assert block_mask.shape[:2] == (1, 1)  # nothing per batch row or head: one mask for all
    visited = block_mask.kv_num_blocks.sum() + block_mask.full_kv_num_blocks.sum()
    assert int(visited) == 10
    # Packed documents of 128 tokens: only the 4 diagonal blocks.
    docs = torch.arange(512) // 128
    block_mask = flex_block_mask(_visibility(512, q_doc=docs, k_doc=docs), 1, HEADS)
    assert int(block_mask.kv_num_blocks.sum() + block_mask.full_kv_num_blocks.sum()) == 4


# --- FlexAttention itself (compiles) ----------------------------------------------------------


def test_a_new_stride_layout_neither_fails_nor_recompiles():
    """Issue 12: a transposed view after a contiguous call failed to build (ALiBi) or recompiled."""
    enc = make("alibi", True)
    x = [torch.randn(2, 32, HEADS, HEAD_DIM, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    views = [t.transpose(1, 2) for t in x]  # (b, h, t, dh) with the heads inside the tokens
    contiguous = [t.contiguous() for t in views]
    with torch.no_grad():
        expected = posenc.attention(*contiguous, enc, causal=True, backend="chunked")
        first = posenc.attention(*contiguous, enc, causal=True, backend="flex")
        before = graphs()
        second = posenc.attention(*views, enc, causal=True, backend="flex")
    assert graphs() == before, dict(counters["stats"])
    torch.testing.assert_close(first, expected, **F32_TOL)
    torch.testing.assert_close(second, expected, **F32_TOL)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["t5", "none"])
def test_layouts_reuse_the_kernel(name):
    """Issue 12: T5 and none compiled again for every stride pattern."""
    enc = make(name, False)
    with torch.no_grad():
        posenc.attention(*qkv(2, 40), enc, backend="flex")
        before = graphs()
        for seed in (1, 2):
            x = [t.transpose(1, 2).contiguous().transpose(1, 2) for t in qkv(2, 40, seed=seed)]
            # seed 2: keys shared by the batch rows (stride 0), as attention() broadcasts a batch of 1
            views = [x[0], x[1][:1].expand(2, -1, -1, -1) if seed == 2 else x[1], x[2]]
            out = posenc.attention(*views, enc, backend="flex")
            torch.testing.assert_close(out, posenc.attention(*views, enc, backend="sdpa"), **F32_TOL)
    assert graphs() == before, dict(counters["stats"])


def _case(case: str, t: int) -> tuple[bool, dict, slice | Tensor]:
    """``(causal, attention kwargs, query rows)`` of one visibility case at length ``t``."""
    rows = torch.arange(t)
    if case == "causal":
        return True, {}, rows
    if case == "shard":  # every other query against all keys: causality by position
        rows = torch.arange(0, t, 2)
        return True, {"q_positions": rows, "k_positions": torch.arange(t)}, rows
    if case == "window":
        return True, {"window": 7}, rows
    if case == "bidirectional window":
        return False, {"window": 9}, rows
    if case == "documents":
        return True, {"document_ids": torch.arange(t) * 3 // t}, rows
    if case == "padding":
        keep = torch.ones(2, t, dtype=torch.bool)
        keep[1, : t // 3] = False
        return True, {"attn_mask": keep[:, None, None, :]}, rows
    raise AssertionError(case)


CASES = ["causal", "shard", "window", "bidirectional window", "documents", "padding"]


@pytest.mark.slow
@pytest.mark.parametrize("t", [40, 300])
@pytest.mark.parametrize("name", ["alibi", "t5", "rope", "none"])
def test_flex_equals_the_chunked_and_sdpa_paths(name, t):
    for case in CASES:
        causal, kwargs, rows = _case(case, t)
        enc = make(name, causal)
        q, k, v = qkv(2, t, seed=t)
        q = q[:, :, rows]
        with torch.no_grad():
            out = posenc.attention(q, k, v, enc, causal=causal, backend="flex", **kwargs)
            for backend in ("chunked", "sdpa"):
                expected = posenc.attention(q, k, v, enc, causal=causal, backend=backend, **kwargs)
                torch.testing.assert_close(
                    out, expected, **F32_TOL, msg=lambda m, c=case, b=backend: f"{c} {b}: {m}"
                )


@pytest.mark.slow
def test_grouped_query_heads_and_packed_documents_by_position():
    enc = make("alibi", True)
    q, k, v = qkv(2, 64, h_kv=2)
    docs = torch.tensor([0] * 20 + [1] * 30 + [2] * 14)
    positions = posenc.document_positions(docs)
    rows = torch.arange(16, 48)  # a shard across a document boundary
    with torch.no_grad():
        full = posenc.attention(q, k, v, enc, causal=True, document_ids=docs)
        shard = posenc.attention(
            q[:, :, rows],
            k,
            v,
            enc,
            causal=True,
            q_positions=positions[rows],
            k_positions=positions,
            document_ids=docs,
            q_document_ids=docs[rows],
            backend="flex",
        )
    torch.testing.assert_close(shard, full[:, :, rows], **F32_TOL)


@pytest.mark.slow
def test_queries_that_see_no_key_are_zero():
    # Queries at positions before every key: causality by position hides all keys from them.
    enc = make("t5", True)
    q, k, v = qkv(1, 32, tq=8)
    q_pos, k_pos = torch.arange(8), torch.arange(32) + 4
    with torch.no_grad():
        out = posenc.attention(
            q, k, v, enc, causal=True, q_positions=q_pos, k_positions=k_pos, backend="flex"
        )
        expected = posenc.attention(q, k, v, enc, causal=True, q_positions=q_pos, k_positions=k_pos)
    assert out[:, :, :4].eq(0).all()
    torch.testing.assert_close(out, expected, **F32_TOL)
