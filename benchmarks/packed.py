"""Packed-documents benchmark: causal attention over several documents in one row, time and peak memory.

``q, k, v`` of shape ``(1, h, t, dh)`` (float32, CPU, inference) hold ``documents`` packed
documents of uneven lengths (fixed by a seed); :func:`posenc.attention` runs with
``document_ids=`` so that each query sees only the earlier keys of its own document, and
positions restart in each document. Paths:

* ``sdpa causal (no bias, not packed)`` — the baseline: one causal SDPA call over the whole row;
* ``posenc none packed``, ``posenc alibi packed``, ``posenc t5 packed``,
  ``posenc shaw+values packed`` — no encoding, :class:`posenc.ALiBi`,
  :class:`posenc.RelativeBias` (T5) and :class:`posenc.ShawRelative` (``values=True``).

Each packed output is checked against every document run alone (the definition of packing).
The issue's target: at t = 16384 with 8 documents, each packed path's peak memory stays well
under a tenth of one ``(h, t, t)`` float32 tensor (the size a dense mask would have). Memory is
measured as in :mod:`benchmarks.relative` (fresh process per case).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .common import set_threads
from .sections import SectionPath, memory_case, run_section, section_tables

__all__ = ["PackedConfig", "packed_tables", "run_packed"]

BASELINE = "sdpa causal (no bias, not packed)"
NONE = "posenc none packed"
ALIBI = "posenc alibi packed"
T5 = "posenc t5 packed"
SHAW = "posenc shaw+values packed"
#: ``max|packed - alone| / max|alone|``: the same float32 computation over other key blocks
#: (chunking and summation order differ); attention across documents gives errors ~0.1-1.
CHECK_TOLERANCE = 1e-4


@dataclasses.dataclass
class PackedConfig:
    """What the packed benchmark runs (fields as :class:`benchmarks.relative.RelativeConfig`).

    Attributes:
        documents: documents packed in the row (uneven lengths, at least 1 token each).
        max_distance: Shaw's clip ``K``.
    """

    lengths: list[int]
    memory_lengths: list[int] = dataclasses.field(default_factory=list)
    documents: int = 8
    heads: int = 8
    head_dim: int = 64
    max_distance: int = 16
    paths: list[str] | None = None
    max_len: dict[str, int] = dataclasses.field(default_factory=dict)
    reps: int = 5
    warmup: int = 0
    budget_s: float = 30.0
    memory_timeout_s: float = 600.0
    threads: int | None = 1


@dataclasses.dataclass
class Context:
    """Inputs, document ids and encodings shared by every path at one length."""

    q: Tensor
    k: Tensor
    v: Tensor
    document_ids: Tensor  # (t,)
    encodings: dict[str, Any]

    @property
    def length(self) -> int:
        return self.q.shape[-2]


def document_bounds(length: int, documents: int, seed: int = 0) -> list[int]:
    """Start offsets of ``documents`` uneven documents in ``length`` tokens, then ``length``."""
    if not 1 <= documents <= length:
        raise ValueError(f"documents must be in 1..{length} (the length), got {documents}")
    generator = torch.Generator().manual_seed(seed)
    cuts = (torch.randperm(length - 1, generator=generator)[: documents - 1] + 1).sort().values
    return [0, *cuts.tolist(), length]


def make_context(config: PackedConfig, length: int, seed: int = 0) -> Context:
    """Random inputs, ids ``0, 0, ..., 1, ...`` per document, encodings with random tables."""
    import posenc

    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, config.heads, length, config.head_dim, generator=generator) for _ in range(3))
    bounds = document_bounds(length, config.documents, seed)
    ids = torch.repeat_interleave(torch.arange(config.documents), torch.tensor(bounds).diff())
    torch.manual_seed(seed)
    t5 = posenc.RelativeBias(config.heads, causal=True)
    with torch.no_grad():
        t5.relative_attention_bias.weight.normal_()
    encodings = {
        NONE: None,
        ALIBI: posenc.ALiBi(config.heads, causal=True),
        T5: t5,
        SHAW: posenc.ShawRelative(config.head_dim, max_distance=config.max_distance, values=True),
    }
    return Context(q, k, v, ids, encodings)


def _packed(name: str) -> Callable[[Context], Callable[[], Tensor]]:
    def build(ctx: Context) -> Callable[[], Tensor]:
        from posenc.attend import attention

        encoding = ctx.encodings[name]
        return lambda: attention(ctx.q, ctx.k, ctx.v, encoding, causal=True, document_ids=ctx.document_ids)

    return build


def _sdpa_causal(ctx: Context) -> Callable[[], Tensor]:
    return lambda: F.scaled_dot_product_attention(ctx.q, ctx.k, ctx.v, is_causal=True)


PATHS: dict[str, SectionPath] = {
    p.name: p
    for p in (
        SectionPath(BASELINE, None, _sdpa_causal),
        *(SectionPath(name, name, _packed(name)) for name in (NONE, ALIBI, T5, SHAW)),
    )
}


def check_error(ctx: Context, path: SectionPath, out: Tensor) -> float:
    """Packed output against each document run alone (the baseline: against one causal call)."""
    from posenc.attend import attention

    if path.encoding is None:
        alone = [F.scaled_dot_product_attention(ctx.q, ctx.k, ctx.v, is_causal=True)]
    else:
        encoding = ctx.encodings[path.encoding]
        ids = ctx.document_ids
        starts = [0, *((ids[1:] != ids[:-1]).nonzero().flatten() + 1).tolist(), ctx.length]
        alone = [
            attention(ctx.q[:, :, s:e], ctx.k[:, :, s:e], ctx.v[:, :, s:e], encoding, causal=True)
            for s, e in itertools.pairwise(starts)
        ]
    want = torch.cat(alone, dim=2)
    return float((out - want).abs().max() / want.abs().max())


def run_packed(config: PackedConfig, *, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the packed benchmark; the report's layout is :func:`benchmarks.relative.run_relative`'s."""
    report = run_section(
        "packed",
        config,
        PATHS,
        BASELINE,
        make_context=lambda length: make_context(config, length),
        check=check_error,
        tolerance=CHECK_TOLERANCE,
        limit=2**62,  # no path builds a dense tensor
        log=log,
    )
    report["documents"] = config.documents
    return report


def packed_tables(report: dict[str, Any], *, markdown: bool) -> str:
    """The packed section as tables: time and peak memory per length and path."""
    config = report["config"]
    title = (
        f"Causal attention over {config['documents']} packed documents (document_ids=), B=1, "
        f"H={config['heads']}, Dh={config['head_dim']}, Shaw K={config['max_distance']}, float32, no_grad"
    )
    return section_tables(report, title, markdown=markdown)


def _main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="One peak-memory case of the packed benchmark.")
    parser.add_argument("--memory-case", required=True, choices=sorted(PATHS))
    parser.add_argument("--length", type=int, required=True)
    parser.add_argument("--config", required=True, help="the PackedConfig as JSON")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    set_threads(args.threads)
    config = PackedConfig(**json.loads(args.config))
    result = memory_case(PATHS[args.memory_case], args.length, lambda t, seed: make_context(config, t, seed))
    print(json.dumps(result))


if __name__ == "__main__":
    _main(sys.argv[1:])
