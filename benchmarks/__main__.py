"""``python -m benchmarks``: the command line of the benchmark suite.

The one command that writes ``benchmarks/results/latest.md`` and ``latest.json`` (the full
run of every section with the default options; about 23 minutes on the project's 2-core CPU machine)::

    .venv/bin/python -m benchmarks

Other runs write beside them under another name (git ignores them; ``--no-compile``, ``--no-memory``,
``--threads N`` and ``--posenc DIR`` add ``-no-compile``, ``-no-memory``, ``-threadsN``, ``-posenc``)::

    .venv/bin/python -m benchmarks --quick                # quick.{md,json}: about 5 minutes
    .venv/bin/python -m benchmarks --only model           # full-model.{md,json}: the model forward alone
    .venv/bin/python -m benchmarks --quick --only rope    # quick-rope.{md,json}
    .venv/bin/python -m benchmarks --only relative        # full-relative: Shaw and FIRE at 4096 and 16384
    .venv/bin/python -m benchmarks --quick --only relative,packed   # under a minute

``--device cuda`` times RoPE and biased causal attention on a GPU instead (:mod:`benchmarks.cuda`);
without a GPU it says so and exits 2. Options: ``--only rope,bias,model,relative,packed`` (sections, comma-separated), ``--threads N`` (every
section; default one thread each), ``--no-compile``, ``--no-memory``, ``--out DIR``, ``--name
STEM``, and ``--posenc DIR`` to measure the posenc package in ``DIR`` instead of the installed
one. Comparing the model forward of two commits::

    mkdir -p /tmp/old && git archive OLD_COMMIT posenc | tar -x -C /tmp/old
    .venv/bin/python -m benchmarks --only model --posenc /tmp/old --out /tmp/bench --name model-old
    .venv/bin/python -m benchmarks --only model --out /tmp/bench --name model-new
    .venv/bin/python -m benchmarks.compare /tmp/bench/model-old.json /tmp/bench/model-new.json
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from . import POSENC_PATH_ENV, RESULTS_DIR, SECTIONS, preset, render, run_suite
from .common import check_replaceable


def _sections(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in SECTIONS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"expected sections from {', '.join(SECTIONS)} separated by commas, got {text!r}"
        )
    return names


def default_stem(preset_name: str, only: list[str] | None, changes: list[str] | None = None) -> str:
    """``latest`` for the full run of every section with the default options (the committed results); else
    e.g. ``quick``, ``full-model``, ``quick-rope+bias``, ``full-no-compile`` (``changes``: the options that
    make the run another one: ``no-compile``, ``no-memory``, ``threads2``, ``posenc``)."""
    partial = only is not None and set(only) != set(SECTIONS)
    if preset_name == "full" and not partial and not changes:
        return "latest"
    sections = ["+".join(s for s in SECTIONS if s in only)] if partial and only is not None else []
    return "-".join([preset_name, *sections, *(changes or [])])


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run the chosen preset and print the tables; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="posenc benchmarks: RoPE against transformers, rotary-embedding-torch and the complex "
        "multiply, with a clone baseline checked to scale with bytes; causal ALiBi/T5 attention time and "
        "peak memory; a 4-layer TransformerLM forward per position encoding; Shaw (with values) and FIRE beside their naive (t, t, d) forms; packed documents. Prints tables and writes "
        "STEM.json and STEM.md (latest.* for the full run of every section with the default options).",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a short run (about 5 minutes) instead of the full one"
    )
    parser.add_argument(
        "--only",
        type=_sections,
        metavar="SECTIONS",
        help=f"run only these sections, comma-separated: {','.join(SECTIONS)}",
    )
    parser.add_argument(
        "--out", type=Path, default=RESULTS_DIR, help=f"output folder (default: {RESULTS_DIR})"
    )
    parser.add_argument(
        "--name", default=None, help="output file stem (default: latest, quick, full-model, ...)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads for every section (default: each section's own, 1)",
    )
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile variants of RoPE")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    parser.add_argument(
        "--posenc",
        type=Path,
        default=None,
        metavar="DIR",
        help="import posenc from DIR/posenc (e.g. another commit: git archive COMMIT posenc | tar -x -C DIR)",
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cpu (default): the suite above; cuda: RoPE and biased causal attention on a GPU timed with "
        "CUDA events, written to cuda-<gpu>.md (exits 2 when no GPU is present)",
    )
    parser.add_argument(
        "--cuda-only",
        choices=("rope", "attention", "chunks"),
        default=None,
        help="with --device cuda: measure one section only (written to cuda-<gpu>-<section>.md); chunks: "
        "biased attention in bfloat16 through the single call, 'auto' and fixed query chunks (what set "
        "posenc.attend.BIAS_BUDGET_BYTES['cuda'])",
    )
    args = parser.parse_args(argv)
    if args.cuda_only is not None and args.device != "cuda":
        parser.error("--cuda-only needs --device cuda")
    try:  # before measuring: a folder that cannot be made would lose the run at its end
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        parser.error(f"--out {args.out} cannot be a folder: {err.strerror or err}")
    if args.device == "cuda":
        from .cuda import gpu_missing, run

        missing = gpu_missing()
        if missing is not None:
            print(f"python -m benchmarks --device cuda: {missing}; nothing was measured.", file=sys.stderr)
            return 2
        print(f"\nwrote {run(args.out, only=args.cuda_only)}")
        return 0
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be a positive integer, got {args.threads}")
    if args.posenc is not None:
        directory = args.posenc.resolve()
        if not (directory / "posenc" / "__init__.py").is_file():
            parser.error(f"--posenc: {directory}/posenc/__init__.py does not exist")
        if "posenc" in sys.modules:
            parser.error("--posenc: posenc is already imported in this process")
        os.environ[POSENC_PATH_ENV] = str(directory)  # the memory subprocesses inherit it
        sys.path.insert(0, str(directory))
        import posenc

        if Path(posenc.__file__).resolve().parent != directory / "posenc":
            parser.error(f"--posenc: posenc was imported from {posenc.__file__}, not from {directory}")

    preset_name = "quick" if args.quick else "full"
    config = preset(preset_name)
    if args.only is not None:
        for section in SECTIONS:
            if section not in args.only:
                setattr(config, section, None)
    if args.no_compile and config.rope is not None:
        config.rope.modes = [m for m in config.rope.modes if m != "compile"]
    if args.no_memory:
        for section in (config.bias, config.relative, config.packed):
            if section is not None:
                section.memory_lengths = []
    changes = {
        "no-compile": args.no_compile,
        "no-memory": args.no_memory,
        f"threads{args.threads}": args.threads is not None,
        "posenc": args.posenc is not None,
    }
    stem = args.name or default_stem(preset_name, args.only, [name for name, on in changes.items() if on])
    try:  # before measuring, as above
        for suffix in (".json", ".md"):
            check_replaceable(args.out / f"{stem}{suffix}")
    except FileExistsError as err:
        parser.error(str(err))
    command = shlex.join(["python", "-m", "benchmarks", *(sys.argv[1:] if argv is None else argv)])
    report = run_suite(
        config,
        threads=args.threads,
        out_dir=args.out,
        stem=stem,
        command=command,
        log=lambda line: print(line, flush=True),
    )
    print()
    print(render(report, markdown=False))
    print(f"\nwrote {args.out / (stem + '.json')} and {args.out / (stem + '.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
