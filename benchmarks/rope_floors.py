"""RoPE's performance floors, single-threaded: ``python -m benchmarks.rope_floors [--large]``.

Prints each line as it is measured and writes them, with the machine, to
``benchmarks/results/rope-floors.md`` (a ``--shape`` run: ``rope-floors-shapes.md``; ``--out`` elsewhere) once
the run is complete.

* eager ``state.encode_qk(q, k)`` (``state = RoPE(dh).prepare(t)`` outside the timed region, as a
  model prepares once per forward) against transformers' Llama ``apply_rotary_pos_emb`` with its
  cos/sin computed beforehand in the input dtype, on the same tensors; forward, and forward plus
  ``torch.autograd.grad``; float32 and bfloat16; both layouts against transformers' half layout;
* a decode step, ``RoPE.prepare(1, t + 1)`` + ``encode_qk`` (the state built inside the timed
  region), against a plain litgpt-style rotation given its cos/sin rows.

Each time is the fastest of several interleaved rounds (the machines are shared: the minimum is
what the operation costs, a median what the neighbours cost). Against transformers the ratios are
"times faster" (> 1: posenc is faster); a decode step's is posenc's time over the litgpt-style
rotation's (< 1: posenc is faster; the floor is 1.3).
"""

from __future__ import annotations

import argparse
import functools
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from .common import check_replaceable, write_whole
from .machine import machine_info

#: Where the report goes (committed: docs/benchmarks.md quotes it).
OUT = Path(__file__).parent / "results" / "rope-floors.md"

#: (b, h, t, dh): two decode steps and two training sizes.
SHAPES = [(1, 8, 1, 64), (8, 32, 1, 128), (1, 16, 2048, 128)]
LARGE = [(4, 32, 2048, 128)]
#: Interleaved rounds per timing (three times as many at t = 1); the minimum is kept.
ROUNDS = 9


def fastest(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Seconds per call of each callable: the fastest of ``rounds`` interleaved samples of ~5 ms."""
    number = {}
    for name, fn in fns.items():
        fn()
        start = time.perf_counter()
        fn()
        number[name] = max(1, int(0.005 / max(time.perf_counter() - start, 1e-7)))
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(number[name]):
                fn()
            best[name] = min(best[name], (time.perf_counter() - start) / number[name])
    return best


def litgpt_style(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """The plain half-layout rotation with ``(t, dh)`` cos/sin rows (litgpt's form, written here)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), -1)
    return (x * cos + rotated * sin).to(x.dtype)


def versus_transformers(shape: tuple[int, int, int, int], dtype: torch.dtype) -> None:
    """Prepared ``encode_qk`` in both layouts against transformers, forward and forward+backward."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    import posenc

    _, h, t, dh = shape
    config = LlamaConfig(hidden_size=h * dh, num_attention_heads=h, head_dim=dh, max_position_embeddings=4096)
    gen = torch.Generator().manual_seed(0)
    q, k, grad = (torch.randn(shape, generator=gen).to(dtype) for _ in range(3))
    cos, sin = LlamaRotaryEmbedding(config)(q, torch.arange(t)[None])  # (1, t, dh), the input dtype
    impls: dict[str, Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]] = {
        "transformers": lambda q, k: apply_rotary_pos_emb(q, k, cos, sin),
        "half": posenc.RoPE(dh).prepare(t).encode_qk,
        "interleaved": posenc.RoPE(dh, layout="interleaved").prepare(t).encode_qk,
    }
    qg, kg = q.clone().requires_grad_(), k.clone().requires_grad_()
    for mode in ("fwd", "fwd+bwd"):
        if mode == "fwd":
            fns = {name: functools.partial(impl, q, k) for name, impl in impls.items()}
        else:
            fns = {name: functools.partial(_grad, impl, qg, kg, grad) for name, impl in impls.items()}
        best = fastest(fns, rounds=ROUNDS * (3 if t == 1 else 1))
        ref = best["transformers"]
        ratios = ", ".join(f"{n} {ref / best[n]:.2f}x" for n in ("half", "interleaved"))
        _say(
            f"{shape} {str(dtype)[6:]:8} {mode:7} transformers {ref * 1e6:9.1f} us; posenc {ratios}",
        )


def _grad(
    impl: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]], q: Tensor, k: Tensor, grad: Tensor
) -> object:
    return torch.autograd.grad(impl(q, k), (q, k), (grad, grad))


def decode_step(shape: tuple[int, int, int, int], dtype: torch.dtype, cached: int = 100) -> None:
    """``RoPE.prepare(1, cached + 1)`` + ``encode_qk`` against litgpt-style code given its rows."""
    import posenc

    rope = posenc.RoPE(shape[-1])
    rows = rope.prepare(1, cached + 1)
    cos, sin = torch.cat((rows.q_cos,) * 2, -1).to(dtype), torch.cat((rows.q_sin,) * 2, -1).to(dtype)
    q, k = torch.randn(shape).to(dtype), torch.randn(shape).to(dtype)

    def litgpt() -> object:
        return litgpt_style(q, cos, sin), litgpt_style(k, cos, sin)

    def ours() -> object:
        return rope.prepare(1, cached + 1).encode_qk(q, k)

    best = fastest({"litgpt": litgpt, "posenc": ours}, rounds=3 * ROUNDS)
    _say(
        f"{shape} {str(dtype)[6:]:8} decode step: prepare + encode_qk {best['posenc'] * 1e6:.1f} us = "
        f"{best['posenc'] / best['litgpt']:.2f}x litgpt-style given its rows ({best['litgpt'] * 1e6:.1f} us)"
    )


#: How to read the ratios (the report's first line).
HEADER = "times faster than transformers (>1: posenc faster); a decode step: posenc's time over litgpt-style's (<1: posenc faster)"

#: The lines measured so far (the report written at the end).
REPORT: list[str] = []


def _say(line: str) -> None:
    REPORT.append(line)
    print(line, flush=True)


def run(shapes: list[tuple[int, int, int, int]]) -> None:
    torch.set_num_threads(1)
    _say(f"torch {torch.__version__}, 1 thread; {HEADER}")
    for shape in shapes:
        for dtype in (torch.float32, torch.bfloat16):
            versus_transformers(shape, dtype)
        for dtype in (torch.float32, torch.bfloat16):
            if shape[2] == 1:
                decode_step(shape, dtype)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", action="store_true", help=f"also {LARGE} (minutes)")
    parser.add_argument("--shape", action="append", help="b,h,t,dh instead of the defaults")
    parser.add_argument(
        "--out", type=Path, help=f"the report (default {OUT}; with --shape, {OUT.stem}-shapes.md beside it)"
    )
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    # the committed report is the default shapes': a run of others never replaces it unless --out names it
    args.out = args.out or (OUT.with_name(f"{OUT.stem}-shapes.md") if args.shape else OUT)
    try:  # before measuring: a report that cannot be written would lose the run at its end
        args.out.parent.mkdir(parents=True, exist_ok=True)
        if args.out.is_dir():
            raise IsADirectoryError(21, "a folder, not the report's file")
    except OSError as err:
        parser.error(f"--out {args.out} cannot be written: {err.strerror or err}")
    try:
        check_replaceable(args.out)
    except FileExistsError as err:
        parser.error(f"--out: {err}")
    shapes = [tuple(int(n) for n in s.split(",")) for s in args.shape] if args.shape else SHAPES
    run(shapes + (LARGE if args.large else []))  # type: ignore[arg-type]
    write_report(args.out, "RoPE's performance floors", ["benchmarks.rope_floors", *argv], REPORT)


def write_report(out: Path, title: str, command: list[str], lines: list[str]) -> None:
    """``lines`` as a text block under ``title``, the ``python -m`` command and the machine, written to ``out``."""
    info = machine_info()
    src = info["posenc_source"]
    header = [
        f"# {title} (`{shlex.join(['python', '-m', *command])}`)",
        "",
        f"{info['date_utc']}; posenc {info['posenc']} at {src.get('git_commit')} (dirty: {src.get('git_dirty')},"
        f" source {src.get('source_sha256')}); torch {info['torch']};",
        f"{info['cpu_model']}, {info['cpus_usable']} usable cores; load average {info['load_average']}",
        "",
        "```text",
    ]
    write_whole(out, "\n".join([*header, *lines, "```", ""]))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
