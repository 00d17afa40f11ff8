"""Compile and export: ``torch.compile(fullgraph=True)`` across sequence lengths with a bounded
number of recompiles (counted with dynamo's own counters), and ``torch.export.export`` of each
encoding's hooks and of a small ``TransformerLM``, with a dynamic sequence length.

Dynamo with the "eager" backend (graph breaks, guards, recompiles) runs for every row that is
not a variant; inductor's code generation for one row per kind (see INDUCTOR_DEFAULT); the rest
run with ``-m slow``."""

from __future__ import annotations

import pytest
import torch
from entries_table import Entry, entries, make_input, make_qk
from torch._dynamo.utils import counters

import posenc
from posenc.nn import TransformerLM

#: Lengths for the compiled calls; the last is past MAX_LEN (256), the rows the caches are built
#: with (RoPE's and the sinusoid's tables), and bias matrices of that size stay cheap.
LONG = 600
LENGTHS = (8, 17, 33, 64, 100, LONG)
#: Graphs allowed across all LENGTHS: one specialised to the first length, one with a dynamic
#: length after the first change (automatic dynamic shapes), and one more where a cache-size
#: guard is crossed (RoPE reads its table while it covers the length, computes past it).
MAX_GRAPHS = 3
#: Compiled against eager: the same float32 operations, possibly fused or reordered.
COMPILE_ATOL = 1e-5


class Hooks(torch.nn.Module):
    """Every hook of an encoding in one ``forward``, for compile and export: once with default
    positions, once with explicit ones (one graph checks both paths)."""

    def __init__(self, encoding: posenc.PositionalEncoding, entry: Entry) -> None:
        super().__init__()
        self.encoding = encoding
        self.entry = entry

    def forward(self, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor):
        out: list[torch.Tensor] = []
        for p in (None, positions):
            # positions on axes; defaults made explicit off an axial grid (see Entry.qk_positions)
            qk_pos = p
            if p is None and self.entry.grid_len is not None:  # (no length test: export's length is symbolic)
                qk_pos = torch.arange(q.shape[-2])
            qk_pos = self.entry.positions(qk_pos)
            out += [
                self.encoding.encode_input(x, p),
                *self.encoding.encode_qk(q, k, q_positions=qk_pos, k_positions=qk_pos),
            ]
            bias = self.encoding.attention_bias(q, k, q_positions=p, k_positions=p)
            out += [] if bias is None else [bias]
        return tuple(out)


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


def _compile_across_lengths(entry: Entry, lengths: tuple[int, ...], **compile_options) -> int:
    """Compile the hooks, check them against eager at each length; returns the number of graphs."""
    module = Hooks(entry.build(), entry)
    if entry.max_position is not None:
        lengths = tuple(t for t in lengths if t <= entry.max_position + 1)
    # Eager results first, from a twin: eager calls grow its caches (a grown table is a new
    # shape, so a legitimate recompile); the compiled module's caches must stay as built.
    reference = Hooks(entry.build(), entry)
    reference.load_state_dict(module.state_dict())
    expected = [reference(*_inputs(entry, length)) for length in lengths]
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(module, fullgraph=True, **compile_options)
    for length, want in zip(lengths, expected, strict=True):
        _compare(compiled(*_inputs(entry, length)), want)
    return counters["stats"]["unique_graphs"]


def test_compile_fullgraph_with_bounded_recompiles(main_entry: Entry) -> None:
    """No graph break (``fullgraph=True`` raises on one) and at most MAX_GRAPHS graphs for all
    lengths, default and explicit positions alike.

    The "eager" backend runs dynamo (tracing, guards, recompiles) without inductor's code
    generation, which is what graph breaks and recompiles are about; inductor is in the next test.
    """
    graphs = _compile_across_lengths(main_entry, LENGTHS, backend="eager")
    # (NoPE's hooks return their inputs: there is no graph at all)
    assert (1 if main_entry.hooks else 0) <= graphs <= MAX_GRAPHS, (
        f"{graphs} graphs compiled for {len(LENGTHS)} lengths"
    )


#: The rows compiled with inductor in the default run, one per kind (additive, bias); the others
#: run with -m slow. The rotary kind's default inductor test is tests/encodings/test_rope.py's
#: test_compiles_fullgraph_once_for_all_lengths (the prepared state, two layers, YaRN), the
#: attention path's tests/test_attend.py's test_compiles_fullgraph_without_recompiling_per_length.
INDUCTOR_DEFAULT = ("sinusoidal", "t5-causal")


@pytest.mark.parametrize(
    "row",
    [
        pytest.param(e, id=e.id, marks=[] if e.id in INDUCTOR_DEFAULT else [pytest.mark.slow])
        for e in entries()
    ],
)
def test_compile_inductor_matches_eager(row: Entry) -> None:
    """Inductor's generated code equals eager, in one dynamic graph for lengths within the caches."""
    # (no length equal to a model size: dynamo's duck sizing would tie the two and recompile;
    # every t*t above 4096: inductor's CPU code sums more than 4096 float32 values with a cascade
    # helper, a size class it guards on — a learned bias's gradient sums over the (t, t) scores)
    graphs = _compile_across_lengths(row, (65, 81, 100), backend="inductor", dynamic=True)
    assert graphs <= 1, f"{graphs} graphs compiled for 3 lengths with dynamic=True"


def test_export_hooks_with_a_dynamic_length(main_entry: Entry) -> None:
    """One exported program serves every length (no length baked in by a cache-size guard)."""
    entry = main_entry
    module = Hooks(entry.build(), entry).eval()
    args = _inputs(entry, 40)
    if entry.fixed_len is not None:
        dynamic = None
    else:
        t = torch.export.Dim("t", min=2, max=(entry.max_position + 1) if entry.max_position else 100_000)
        dynamic = ({1: t}, {2: t}, {2: t}, {0: t})
    program = torch.export.export(module, args, dynamic_shapes=dynamic)
    for length in (40, 9, LONG):
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


# Compiling a whole TransformerLM without recompiles per length is tests/nn/test_model.py's
# test_model_compiles_fullgraph_without_recompiling_per_length (every encoding under -m slow).
