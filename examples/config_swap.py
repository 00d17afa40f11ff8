"""Swap the position encoding of one small language model by config string, nothing else.

Trains the same tiny causal character model for a few steps with every registered
encoding and prints one line per encoding: where it acts, its parameter count, the loss
before and after training, and the time taken. Only the ``position=`` string changes.

    python examples/config_swap.py              # every registered encoding, 30 steps each
    python examples/config_swap.py --steps 2    # a quick smoke run
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

import posenc
from posenc.nn import TransformerLM
from posenc.registry import describe, lookup

TEXT = (
    "Position enters attention in one of three places: added to the token embeddings, "
    "rotating queries and keys, or as a bias on the attention scores. A config string "
    "chooses which one a model uses, and nothing else in the model code changes. "
) * 8

SEQ_LEN = 16  # also a 4 x 4 grid for the 2D encodings


def spec_for(name: str) -> str:
    """The config string for a registered name; a 2D encoding (one with a ``grid_size`` option:
    sinusoidal2d, learned2d, rope_axial) reads the sequence as a square grid."""
    options = {o["name"] for o in describe(lookup(name))["options"]}
    if "grid_size" in options:
        side = int(SEQ_LEN**0.5)
        return f"{name}(grid_size=({side}, {side}))"
    return name


def batches(
    data: torch.Tensor, batch_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    starts = torch.randint(0, len(data) - SEQ_LEN - 1, (batch_size,), generator=generator)
    windows = torch.stack([data[s : s + SEQ_LEN + 1] for s in starts.tolist()])
    return windows[:, :-1], windows[:, 1:]


def run(steps: int, seed: int = 0) -> list[dict]:
    vocab = sorted(set(TEXT))
    data = torch.tensor([vocab.index(c) for c in TEXT])
    # One name per encoding class (aliases dropped), straight from the registry.
    names = list(dict.fromkeys(lookup(n).registry_name for n in posenc.available()))
    results = []
    for name in names:
        torch.manual_seed(seed)
        spec = spec_for(name)
        model = TransformerLM(
            len(vocab), d_model=32, num_layers=2, num_heads=4, position=spec, max_len=SEQ_LEN
        )
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        gen = torch.Generator().manual_seed(seed)
        eval_x, eval_y = batches(data, 16, torch.Generator().manual_seed(seed + 1))
        start = time.perf_counter()
        with torch.no_grad():
            before = F.cross_entropy(model(eval_x).flatten(0, 1), eval_y.flatten()).item()
        for _ in range(steps):
            x, y = batches(data, 16, gen)
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            after = F.cross_entropy(model(eval_x).flatten(0, 1), eval_y.flatten()).item()
        results.append(
            {
                "spec": spec,
                "kind": model.encoding.kind,
                "params": sum(p.numel() for p in model.encoding.parameters()),
                "loss_before": before,
                "loss_after": after,
                "seconds": time.perf_counter() - start,
            }
        )
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="training steps per encoding (default 30)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.steps < 0:
        parser.error(f"--steps must be >= 0, got {args.steps}")
    print(f"{'position=':<36} {'kind':<9} {'params':>6} {'loss before':>11} {'after':>7} {'time':>6}")
    for r in run(args.steps, args.seed):
        print(
            f"{r['spec']!r:<36} {r['kind']:<9} {r['params']:>6} {r['loss_before']:>11.3f} "
            f"{r['loss_after']:>7.3f} {r['seconds']:>5.1f}s"
        )


if __name__ == "__main__":
    main()
