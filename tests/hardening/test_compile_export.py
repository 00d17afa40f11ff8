"""Compile and export: ``torch.compile(fullgraph=True)`` across sequence lengths with a bounded
number of recompiles (counted with dynamo's own counters), and ``torch.export.export`` of each
encoding's hooks and of a small ``TransformerLM``, with a dynamic sequence length."""

from __future__ import annotations

import pytest
import torch
from entries_table import Entry, make_input, make_qk
from torch._dynamo.utils import counters

import posenc
from posenc.nn import TransformerLM

#: Lengths for the compiled calls; the last crosses RoPE's initial 2048-row table.
LENGTHS = (8, 17, 33, 64, 100, 3000)
#: Graphs allowed across all LENGTHS: one specialised to the first length, one with a dynamic
#: length after the first change (automatic dynamic shapes), and one more where a cache-size
#: guard is crossed (RoPE reads its table while it covers the length, computes past it).
MAX_GRAPHS = 3
#: Compiled against eager: the same float32 operations, possibly fused or reordered.
COMPILE_ATOL = 1e-5


class Hooks(torch.nn.Module):
    """Every hook of an encoding in one ``forward``, for compile and export."""

    def __init__(self, encoding: posenc.PositionalEncoding, explicit: bool) -> None:
        super().__init__()
        self.encoding = encoding
        self.explicit = explicit

    def forward(self, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor):
        p = positions if self.explicit else None
        out = [self.encoding.encode_input(x, p), *self.encoding.encode_qk(q, k, p, p)]
        bias = self.encoding.attention_bias(q, k, p, p)
        return (*out, bias) if bias is not None else tuple(out)


def _inputs(entry: Entry, length: int, seed: int = 0):
    if entry.fixed_len is not None:
        length = entry.fixed_len
    elif entry.max_position is not None:
        length = min(length, entry.max_position + 1)
    gen = torch.Generator().manual_seed(seed)
    x = make_input(entry, 2, length, torch.float32, generator=gen)
    q, k = make_qk(entry, 2, length, length, torch.float32, generator=gen)
    positions = torch.arange(length) + (0 if entry.max_position is not None or entry.fixed_len else 7)
    if entry.fixed_len is not None:
        positions = positions.flip(0)  # patch indices, in another order
    return x, q, k, positions


def _compare(got, want) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=0, atol=COMPILE_ATOL)


def _compile_across_lengths(entry: Entry, explicit: bool, backend: str) -> int:
    module = Hooks(entry.build(), explicit)
    lengths = (
        LENGTHS if entry.max_position is None else tuple(t for t in LENGTHS if t <= entry.max_position + 1)
    )
    # Eager results first, from a twin: eager calls grow its caches (a grown table is a new
    # shape, so a legitimate recompile); the compiled module's caches must stay as built.
    reference = Hooks(entry.build(), explicit)
    reference.load_state_dict(module.state_dict())
    expected = [reference(*_inputs(entry, length)) for length in lengths]
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(module, fullgraph=True, backend=backend)
    for length, want in zip(lengths, expected, strict=True):
        _compare(compiled(*_inputs(entry, length)), want)
    return counters["stats"]["unique_graphs"]


@pytest.mark.parametrize("explicit", [False, True], ids=["default-positions", "explicit-positions"])
def test_compile_fullgraph_with_bounded_recompiles(entry: Entry, explicit: bool) -> None:
    """No graph break (``fullgraph=True`` raises on one) and at most MAX_GRAPHS graphs for all lengths.

    The "eager" backend runs dynamo (tracing, guards, recompiles) without inductor's code
    generation, which is what graph breaks and recompiles are about; inductor is in the slow test.
    """
    graphs = _compile_across_lengths(entry, explicit, backend="eager")
    # (NoPE's hooks return their inputs: there is no graph at all)
    assert (1 if entry.hooks else 0) <= graphs <= MAX_GRAPHS, (
        f"{graphs} graphs compiled for {len(LENGTHS)} lengths"
    )


@pytest.mark.slow
@pytest.mark.parametrize("explicit", [False, True], ids=["default-positions", "explicit-positions"])
def test_compile_inductor_matches_eager(entry: Entry, explicit: bool) -> None:
    graphs = _compile_across_lengths(entry, explicit, backend="inductor")
    assert graphs <= MAX_GRAPHS


@pytest.mark.parametrize(
    "explicit",
    [False, pytest.param(True, marks=pytest.mark.slow)],  # the explicit path is also compiled above
    ids=["default-positions", "explicit-positions"],
)
def test_export_hooks_with_a_dynamic_length(
    entry: Entry, explicit: bool, request: pytest.FixtureRequest
) -> None:
    """One exported program serves every length (no length baked in by a cache-size guard)."""
    module = Hooks(entry.build(), explicit).eval()
    args = _inputs(entry, 40)
    if entry.fixed_len is not None:
        dynamic = None
    else:
        t = torch.export.Dim("t", min=2, max=(entry.max_position + 1) if entry.max_position else 100_000)
        dynamic = ({1: t}, {2: t}, {2: t}, {0: t})
    program = torch.export.export(module, args, dynamic_shapes=dynamic)
    for length in (40, 9, 3000):
        args = _inputs(entry, length, seed=length)
        _compare(program.module()(*args), module(*args))


@pytest.mark.slow
@pytest.mark.parametrize("position", ["rope", "alibi", "t5", "sinusoidal", "learned", "none"])
def test_export_transformer_lm(position: str) -> None:
    torch.manual_seed(0)
    model = TransformerLM(50, 32, 2, 4, position=position, max_len=256).eval()
    ids = torch.randint(0, 50, (2, 20))
    t = torch.export.Dim("t", min=2, max=256)
    program = torch.export.export(model, (ids,), dynamic_shapes=({1: t},))
    for length in (20, 7, 256):
        ids = torch.randint(0, 50, (2, length))
        with torch.no_grad():
            torch.testing.assert_close(program.module()(ids), model(ids), rtol=0, atol=COMPILE_ATOL)


@pytest.mark.slow
@pytest.mark.parametrize("position", ["rope", "alibi", "t5"])
def test_compile_transformer_lm_fullgraph(position: str) -> None:
    torch.manual_seed(0)
    model = TransformerLM(50, 32, 2, 4, position=position, max_len=512).eval()
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, fullgraph=True)
    for length in (16, 33, 100, 300):
        ids = torch.randint(0, 50, (2, length))
        with torch.no_grad():
            torch.testing.assert_close(compiled(ids), model(ids), rtol=0, atol=COMPILE_ATOL)
    assert counters["stats"]["unique_graphs"] <= MAX_GRAPHS
