"""``python -m benchmarks [--quick] [--only rope|bias] [--out DIR] [--threads N]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import RESULTS_DIR, preset, render, run_suite


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run the chosen preset and print the tables; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="posenc benchmarks: RoPE against transformers, rotary-embedding-torch and the complex "
        "multiply; causal ALiBi/T5 attention time and peak memory. Prints tables and writes "
        "latest.json and latest.md.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a short run (a few minutes) instead of the full one"
    )
    parser.add_argument("--only", choices=["rope", "bias"], help="run only one part")
    parser.add_argument(
        "--out", type=Path, default=RESULTS_DIR, help=f"output folder (default: {RESULTS_DIR})"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: the usable CPUs)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile variants of RoPE")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    args = parser.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be a positive integer, got {args.threads}")

    config = preset("quick" if args.quick else "full")
    if args.only == "rope":
        config.bias = None
    elif args.only == "bias":
        config.rope = None
    if args.no_compile and config.rope is not None:
        config.rope.modes = [m for m in config.rope.modes if m != "compile"]
    if args.no_memory and config.bias is not None:
        config.bias.memory_lengths = []
    report = run_suite(
        config, threads=args.threads, out_dir=args.out, log=lambda line: print(line, flush=True)
    )
    print()
    print(render(report, markdown=False))
    print(f"\nwrote {args.out / 'latest.json'} and {args.out / 'latest.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
