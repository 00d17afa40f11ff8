"""Relative-family benchmark: Shaw (relative keys and values) and FIRE at long length, time and peak memory.

Paths compared on the same ``q, k, v`` of shape ``(1, h, t, dh)`` (float32, CPU, causal,
inference under ``torch.no_grad()``, default scale ``1/sqrt(dh)``):

* ``sdpa causal (no bias)`` — the baseline: the same attention without any position term;
* ``posenc shaw+values`` — :func:`posenc.attention` with :class:`posenc.ShawRelative`
  (``values=True``): the key term ``q @ a^Kᵀ`` over the clipped distances gathered by
  distance, the value term the weights summed per clipped distance times ``a^V``;
* ``naive shaw (t,t,dh)`` — the seed's form: gather ``(t, t, dh)`` tables of ``a^K`` and
  ``a^V`` by clipped distance and contract them with ``einsum`` (one table alive at a time);
* ``posenc fire`` — :func:`posenc.attention` with :class:`posenc.FIRE`;
* ``naive fire (t,t,w)`` — FIRE's MLP over every ``(i, j)`` pair at once: a ``(t, t, w)``
  hidden layer, a dense ``(1, h, t, t)`` bias with ``-inf`` above the diagonal, SDPA.

Times and peaks are ratios to the baseline measured in the same run. A naive path whose
tensors would not fit the memory limit is not run; the report says how much it would need
(``t²·dh·4`` bytes for one Shaw table: 64 GiB at t = 16384). Every path's output is compared
on a sample of query rows with a float64 computation from the papers' formulas.

Peak memory: each (path, length) runs alone in a fresh process (``python -m benchmarks.relative
--memory-case ...``, :func:`benchmarks.memory.measure_peak_memory`) after an unmeasured warm-up
on a short sequence. :mod:`benchmarks.packed` reuses this section's machinery.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .common import GIB, available_memory_bytes, set_threads
from .sections import SectionPath, memory_case, run_section, section_tables

__all__ = [
    "RelativeConfig",
    "SectionPath",
    "relative_tables",
    "run_relative",
    "run_section",
    "section_tables",
]

BASELINE = "sdpa causal (no bias)"
SHAW = "posenc shaw+values"
SHAW_NAIVE = "naive shaw (t,t,dh)"
FIRE = "posenc fire"
FIRE_NAIVE = "naive fire (t,t,w)"
#: ``max|out - ref| / max|ref|`` allowed against float64: float32 attention round-off over up
#: to 16k keys; a wrong distance, clip or mask gives errors of order 0.1-1.
CHECK_TOLERANCE = 2e-3


@dataclasses.dataclass
class RelativeConfig:
    """What the relative benchmark runs.

    Attributes:
        lengths: sequence lengths ``t`` timed.
        memory_lengths: lengths of the peak-memory cases (each path in a fresh process).
        heads, head_dim: ``h`` and ``dh``.
        max_distance: Shaw's clip ``K`` (``2K + 1`` distances).
        fire_width: FIRE's MLP width ``w``.
        paths: names to run (``None``: all; the baseline always runs).
        max_len: per path, the longest ``t`` timed (a time budget; memory cases still run).
        naive_limit_bytes: the most a path's dense tensors may need (also capped at a third
            of the memory available at the start); beyond it the path is not run.
        reps, warmup, budget_s: see :func:`benchmarks.common.time_interleaved`.
        memory_timeout_s: the limit of one memory subprocess.
        threads: torch threads of the section and its subprocesses (``None``: every CPU).
    """

    lengths: list[int]
    memory_lengths: list[int] = dataclasses.field(default_factory=list)
    heads: int = 8
    head_dim: int = 64
    max_distance: int = 16
    fire_width: int = 32
    paths: list[str] | None = None
    max_len: dict[str, int] = dataclasses.field(default_factory=dict)
    naive_limit_bytes: int = 6 * GIB
    reps: int = 5
    warmup: int = 0
    budget_s: float = 30.0
    memory_timeout_s: float = 600.0
    threads: int | None = 1


@dataclasses.dataclass
class Context:
    """Inputs and encodings shared by every path at one length."""

    q: Tensor
    k: Tensor
    v: Tensor
    shaw: Any  # posenc.ShawRelative(values=True)
    fire: Any  # posenc.FIRE

    @property
    def length(self) -> int:
        return self.q.shape[-2]


def make_context(config: RelativeConfig, length: int, seed: int = 0) -> Context:
    """Random ``(1, h, t, dh)`` inputs, Shaw tables N(0, 1) as initialised, FIRE as initialised."""
    import posenc

    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, config.heads, length, config.head_dim, generator=generator) for _ in range(3))
    torch.manual_seed(seed)  # the encodings' own initialisation
    shaw = posenc.ShawRelative(config.head_dim, max_distance=config.max_distance, values=True)
    fire = posenc.FIRE(config.heads, mlp_width=config.fire_width)
    return Context(q, k, v, shaw, fire)


def _clipped_index(shaw: Any, rows: Tensor, length: int) -> Tensor:
    """``(r, t)`` table rows of ``clip(j - i)`` for query rows ``rows`` (row 0 = distance ``-K``)."""
    distance = torch.arange(length)[None, :] - rows[:, None]
    return distance.clamp(-shaw.max_distance, shaw.right) + shaw.max_distance


def _fire_bias(fire: Any, rows: Tensor, length: int, dtype: torch.dtype) -> Tensor:
    """FIRE's bias ``f(psi(|i-j|) / psi(max(i, L)))``, ``psi(x) = log(1 + c x)``: ``(h, r, t)``."""
    c = fire.c.detach().to(dtype)
    i = rows.to(dtype)[:, None]
    j = torch.arange(length, dtype=dtype)[None, :]
    normaliser = torch.log1p(c * torch.clamp(i, min=fire.threshold.detach().to(dtype)))
    x = torch.log1p(c * (i - j).abs()) / (normaliser + fire.eps)  # (r, t)
    first, last = fire.mlp[0], fire.mlp[2]
    hidden = torch.relu(
        x[..., None] * first.weight.detach().to(dtype).view(-1) + first.bias.detach().to(dtype)
    )
    return (hidden @ last.weight.detach().to(dtype).t() + last.bias.detach().to(dtype)).permute(2, 0, 1)


def _causal_mask(rows: Tensor, length: int) -> Tensor:
    return torch.arange(length)[None, :] > rows[:, None]  # (r, t): keys after the query


def reference_rows(ctx: Context, encoding: str | None, rows: Tensor) -> Tensor:
    """Causal attention of the given query rows in float64 from the formulas: ``(1, h, r, dh)``."""
    q, k, v = ctx.q[:, :, rows].double(), ctx.k.double(), ctx.v.double()
    t, scale = ctx.length, 1.0 / math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-1, -2) * scale  # (1, h, r, t)
    index = _clipped_index(ctx.shaw, rows, t)
    if encoding == "shaw":  # e_ij = q_i · (k_j + a^K_clip(j-i)) / sqrt(dh)
        a_key = ctx.shaw.key_embeddings.weight.detach().double()
        scores = scores + (q @ a_key.t()).gather(-1, index.expand(*q.shape[:2], -1, -1)) * scale
    elif encoding == "fire":
        scores = scores + _fire_bias(ctx.fire, rows, t, torch.float64)
    probs = scores.masked_fill(_causal_mask(rows, t), float("-inf")).softmax(-1)
    out = probs @ v
    if encoding == "shaw":  # z_i += Σ_j α_ij a^V_clip(j-i): weights summed per clipped distance
        n = ctx.shaw.num_distances
        per_distance = torch.zeros(*probs.shape[:-1], n, dtype=probs.dtype)
        per_distance.scatter_add_(-1, index.expand_as(probs), probs)
        out = out + per_distance @ ctx.shaw.value_embeddings.weight.detach().double()
    return out


def check_rows(length: int, per_end: int = 8) -> Tensor:
    """Query rows checked: ``per_end`` at each end of the sequence and as many spread between."""
    rows = torch.cat(
        [
            torch.arange(min(per_end, length)),
            torch.linspace(0, length - 1, per_end).long(),
            torch.arange(max(length - per_end, 0), length),
        ]
    )
    return torch.unique(rows)


def check_error(ctx: Context, path: SectionPath, out: Tensor) -> float:
    """``max |out - ref| / max |ref|`` on :func:`check_rows`, the reference in blocks of 8 rows."""
    rows = check_rows(ctx.length)
    worst, scale = 0.0, 0.0
    for block in rows.split(8):
        ref = reference_rows(ctx, path.encoding, block)
        worst = max(worst, float((out[:, :, block].double() - ref).abs().max()))
        scale = max(scale, float(ref.abs().max()))
    return worst / scale


# ---------------------------------------------------------------------------------------
# Paths


def _sdpa_causal(ctx: Context) -> Callable[[], Tensor]:
    return lambda: F.scaled_dot_product_attention(ctx.q, ctx.k, ctx.v, is_causal=True)


def _posenc(attr: str) -> Callable[[Context], Callable[[], Tensor]]:
    def build(ctx: Context) -> Callable[[], Tensor]:
        from posenc.attend import attention

        encoding = getattr(ctx, attr)
        return lambda: attention(ctx.q, ctx.k, ctx.v, encoding, causal=True)

    return build


def _naive_shaw(ctx: Context) -> Callable[[], Tensor]:
    t = ctx.length
    rows = torch.arange(t)
    scale = 1.0 / math.sqrt(ctx.q.shape[-1])
    upper = _causal_mask(rows, t)

    def run() -> Tensor:
        index = _clipped_index(ctx.shaw, rows, t)  # (t, t)
        a_key = ctx.shaw.key_embeddings(index)  # (t, t, dh): the seed's lookup table
        scores = ctx.q @ ctx.k.transpose(-1, -2) + torch.einsum("bhid,ijd->bhij", ctx.q, a_key)
        del a_key  # one (t, t, dh) table alive at a time
        probs = (scores * scale).masked_fill_(upper, float("-inf")).softmax(-1)
        a_value = ctx.shaw.value_embeddings(index)  # (t, t, dh)
        return probs @ ctx.v + torch.einsum("bhij,ijd->bhid", probs, a_value)

    return run


def _naive_fire(ctx: Context) -> Callable[[], Tensor]:
    t = ctx.length
    rows = torch.arange(t)
    upper = _causal_mask(rows, t)

    def run() -> Tensor:
        bias = _fire_bias(ctx.fire, rows, t, torch.float32)  # (h, t, t) through a (t, t, w) hidden layer
        mask = bias.unsqueeze(0).masked_fill_(upper, float("-inf"))
        return F.scaled_dot_product_attention(ctx.q, ctx.k, ctx.v, attn_mask=mask)

    return run


def _shaw_naive_bytes(config: Any, t: int) -> int:
    """One ``(t, t, dh)`` float32 table (the figure reported), plus the scores and their softmax."""
    return 4 * t * t * config.head_dim + 3 * 4 * config.heads * t * t


def _fire_naive_bytes(config: Any, t: int) -> int:
    """The ``(t, t, w)`` hidden layer (twice: pre- and post-ReLU) plus the ``(h, t, t)`` bias and mask."""
    return 2 * 4 * t * t * config.fire_width + 3 * 4 * config.heads * t * t


PATHS: dict[str, SectionPath] = {
    p.name: p
    for p in (
        SectionPath(BASELINE, None, _sdpa_causal),
        SectionPath(SHAW, "shaw", _posenc("shaw")),
        SectionPath(SHAW_NAIVE, "shaw", _naive_shaw, need_bytes=_shaw_naive_bytes),
        SectionPath(FIRE, "fire", _posenc("fire")),
        SectionPath(FIRE_NAIVE, "fire", _naive_fire, need_bytes=_fire_naive_bytes),
    )
}


def memory_limit(limit: int) -> int:
    """``limit``, capped at a third of the memory available now."""
    available = available_memory_bytes()
    return limit if available is None else min(limit, available // 3)


def run_relative(config: RelativeConfig, *, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the relative benchmark (timing here, memory in fresh subprocesses).

    Returns:
        ``{"config", "torch", "threads", "memory_limit_bytes", "check_tolerance", "results",
        "memory"}``; ``results`` rows: ``length, path``, timing stats, ``x_baseline``,
        ``check_error``, ``check_ok``, ``skipped`` (e.g. ``"not run: would need 64 GiB ..."``),
        ``error``; ``memory`` rows: ``length, path``, the measurement, ``x_baseline`` (peak /
        the baseline's peak) and ``fraction_of_hhtt`` (peak / one ``(h, t, t)`` float32 tensor).
    """
    return run_section(
        "relative",
        config,
        PATHS,
        BASELINE,
        make_context=lambda length: make_context(config, length),
        check=check_error,
        tolerance=CHECK_TOLERANCE,
        limit=memory_limit(config.naive_limit_bytes),
        log=log,
    )


def relative_tables(report: dict[str, Any], *, markdown: bool) -> str:
    """The relative section as tables: time and peak memory per length and path."""
    config = report["config"]
    title = (
        f"Causal attention with relative terms, B=1, H={config['heads']}, Dh={config['head_dim']}, "
        f"Shaw K={config['max_distance']} (keys and values), FIRE width {config['fire_width']}, float32, no_grad"
    )
    return section_tables(report, title, markdown=markdown)


def _main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="One peak-memory case of the relative benchmark.")
    parser.add_argument("--memory-case", required=True, choices=sorted(PATHS))
    parser.add_argument("--length", type=int, required=True)
    parser.add_argument("--config", required=True, help="the RelativeConfig as JSON")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    set_threads(args.threads)
    config = RelativeConfig(**json.loads(args.config))
    result = memory_case(PATHS[args.memory_case], args.length, lambda t, seed: make_context(config, t, seed))
    print(json.dumps(result))


if __name__ == "__main__":
    _main(sys.argv[1:])
