"""Causal ALiBi and T5 on the CPU with and without subnormal floats: ``python -m benchmarks.denormals``.

Some ``87 / slope`` keys back from the diagonal ALiBi's bias makes ``exp(score - max)`` land among float32's
subnormal numbers (below ~1.2e-38: an exponent between about -87 and -103, a band of ``16 / slope`` keys per
head; zeros beyond it), 0.3-0.4% of the weights of 8 heads at t = 1024-4096, and x86 CPUs take a slow path
for every operation that meets one. With ``torch.set_flush_denormal(True)`` they are zeros, which changes
no float32 sum they are added to (every row holds a weight of 1). posenc does not set that flag: it is
process-wide and has no getter to restore it. This measures what it buys, against bias-free causal SDPA in
the same process, forward and forward plus ``torch.autograd.grad``, and checks that the outputs agree.

Writes ``benchmarks/results/denormals.md`` (``--out`` elsewhere). Each time is the fastest of interleaved
rounds (:func:`benchmarks.rope_floors.fastest`), the flag set inside each timed call.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from .bias_paths import BASELINE, PATHS, POSENC_ALIBI, POSENC_T5, make_context
from .common import check_replaceable
from .rope_floors import fastest, write_report

#: Where the report goes (committed: docs/benchmarks.md quotes it).
OUT = Path(__file__).parent / "results" / "denormals.md"
#: (b, h, dh) of every call; the lengths are the arguments.
HEADS, HEAD_DIM = 8, 64
LENGTHS = (1024, 2048, 4096)
ROUNDS = 5


def _flagged(flush: bool, fn: Callable[[], object]) -> Callable[[], object]:
    def call() -> object:
        torch.set_flush_denormal(flush)
        return fn()

    return call


def measure(t: int, rounds: int = ROUNDS) -> list[str]:
    """The report's lines for length ``t``: each implementation and pass, flag off and on (the bias section's
    inputs and calls, :mod:`benchmarks.bias_paths`, with gradients for q, k and v)."""
    ctx = make_context(t, HEADS, HEAD_DIM)
    q, k, v = (x.requires_grad_() for x in (ctx.q, ctx.k, ctx.v))
    impls = {name: PATHS[name].build(ctx) for name in (BASELINE, POSENC_ALIBI, POSENC_T5)}
    grad = torch.ones(1, HEADS, t, HEAD_DIM)

    def timed(impl: Callable[[], torch.Tensor], pass_: str) -> Callable[[], object]:
        if pass_ == "forward":
            return torch.no_grad()(impl)
        return lambda: torch.autograd.grad(impl(), (q, k, v), grad)

    lines = []
    for pass_ in ("forward", "forward+backward"):
        fns = {
            (name, flush): _flagged(flush, timed(fn, pass_))
            for name, fn in impls.items()
            for flush in (False, True)
        }
        best = fastest(fns, rounds)  # type: ignore[arg-type]
        for name in impls:
            off, on = best[(name, False)], best[(name, True)]
            base_off, base_on = best[(BASELINE, False)], best[(BASELINE, True)]
            lines.append(
                f"t={t:5} {pass_:16} {name:22} {off * 1e3:8.1f} ms ({off / base_off:.2f}x SDPA); flushed "
                f"{on * 1e3:8.1f} ms ({on / base_on:.2f}x SDPA): flushing takes {on / off:.2f} of the time"
            )
    torch.set_flush_denormal(False)
    with torch.no_grad():
        for name, fn in impls.items():
            plain = fn()
            torch.set_flush_denormal(True)
            diff = (fn() - plain).abs().max().item()
            torch.set_flush_denormal(False)
            lines.append(f"t={t:5} {name}: outputs flushed and not differ by at most {diff:.3g}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, action="append", help=f"sequence lengths (default {LENGTHS})")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="interleaved rounds per timing")
    parser.add_argument("--out", type=Path, default=OUT, help=f"the report (default {OUT})")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    try:  # before measuring: a report that cannot be written would lose the run at its end
        check_replaceable(args.out)
        args.out.parent.mkdir(parents=True, exist_ok=True)
    except (OSError, FileExistsError) as err:
        parser.error(f"--out: {err}")
    torch.set_num_threads(1)
    if not torch.set_flush_denormal(False):
        parser.error("this CPU cannot flush subnormal numbers (no SSE3 DAZ): nothing to measure")
    lines = [f"torch {torch.__version__}, 1 thread, (1, {HEADS}, t, {HEAD_DIM}) float32, causal"]
    print(lines[0], flush=True)
    try:
        for t in args.length or LENGTHS:
            for line in measure(t, args.rounds):
                print(line, flush=True)
                lines.append(line)
    finally:  # (torch's default, whatever was measured last)
        torch.set_flush_denormal(False)
    write_report(args.out, "Subnormal floats in causal attention", ["benchmarks.denormals", *argv], lines)


if __name__ == "__main__":
    main()
