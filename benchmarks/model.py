"""Model benchmark: a small ``posenc.nn.TransformerLM`` forward, per position encoding.

``TransformerLM(vocab_size=256, d_model=256, num_layers=4, num_heads=8, position=P)`` on one
sequence of 2048 random tokens (float32, CPU), for ``P`` in ``none`` (the floor: no position
information at all), ``rope``, ``alibi`` and ``t5``:

* ``inference`` — ``model.eval()`` and ``model(ids)`` under ``torch.no_grad()``: the time of
  one forward;
* ``forward+backward`` — ``model.train()`` (dropout is 0), the forward, the next-token
  cross-entropy, and ``torch.autograd.grad`` of the loss with respect to every parameter (no
  optimizer step, no gradient accumulation): the time of one training step without the update.

The models are timed interleaved round-robin in one process (one thread by default, see
:class:`ModelConfig`), after a first call that checks the logits (and gradients) are finite
and of the right shape; ``x none`` is each time over the ``none`` model's in the same pass.

Comparing two commits of posenc: run this section with each (``python -m benchmarks --only
model --posenc DIR --out OUT``, see :mod:`benchmarks.__main__`) and compare the two JSON files
with ``python -m benchmarks.compare OLD.json NEW.json``; the JSON records which posenc source
was measured (path, git commit, a hash of its files), the torch version and the threads.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, Literal

import torch
import torch.nn.functional as F

from .common import fmt, fmt_ms, format_table, ratio, threads_text, time_interleaved

__all__ = ["POSITIONS", "ModelConfig", "model_tables", "run_model"]

ModelPass = Literal["inference", "forward+backward"]
#: The position encodings compared; ``none`` is the floor every other one is divided by.
POSITIONS = ["none", "rope", "alibi", "t5"]
FLOOR = "none"


@dataclasses.dataclass
class ModelConfig:
    """What the model benchmark runs.

    Attributes:
        positions: ``position=`` specs for ``TransformerLM`` (``"none"`` gives the ``x none`` column).
        passes: ``"inference"`` and/or ``"forward+backward"``.
        vocab_size, d_model, num_layers, num_heads: the model.
        length, batch: the input ``(batch, length)``.
        max_len: ``max_len=`` of the model (``None``: not passed).
        reps, warmup, min_sample_s, budget_s: see :func:`benchmarks.common.time_interleaved`
            (``budget_s`` per pass); the checking call is a first, extra warm-up.
        threads: torch threads of the section (``None``: every usable CPU).
        seed: weights and tokens.
    """

    positions: list[str] = dataclasses.field(default_factory=lambda: list(POSITIONS))
    passes: list[ModelPass] = dataclasses.field(default_factory=lambda: ["inference", "forward+backward"])
    vocab_size: int = 256
    d_model: int = 256
    num_layers: int = 4
    num_heads: int = 8
    length: int = 2048
    batch: int = 1
    max_len: int | None = None
    reps: int = 10
    warmup: int = 1
    min_sample_s: float = 0.0
    budget_s: float = 60.0
    threads: int | None = 1
    seed: int = 0


def _build(config: ModelConfig, position: str) -> torch.nn.Module:
    from posenc.nn import TransformerLM

    torch.manual_seed(config.seed)
    kwargs: dict[str, Any] = {}
    if config.max_len is not None:
        kwargs["max_len"] = config.max_len
    return TransformerLM(
        vocab_size=config.vocab_size,
        d_model=config.d_model,
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        position=position,
        **kwargs,
    )


def _step(
    model: torch.nn.Module, ids: torch.Tensor, targets: torch.Tensor, pass_name: str
) -> Callable[[], Any]:
    if pass_name == "inference":
        model.eval()

        def forward() -> torch.Tensor:
            with torch.no_grad():
                return model(ids)

        return forward
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]

    def forward_backward() -> tuple[torch.Tensor, ...]:
        logits = model(ids)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return (loss.detach(), *torch.autograd.grad(loss, params))

    return forward_backward


def _check(out: Any, config: ModelConfig, pass_name: str) -> str | None:
    """``None`` when the first call's output is sane, else what is wrong with it."""
    if pass_name == "inference":
        expected = (config.batch, config.length, config.vocab_size)
        if tuple(out.shape) != expected:
            return f"logits of shape {tuple(out.shape)}, expected {expected}"
        return None if bool(torch.isfinite(out).all()) else "non-finite logits"
    loss, *grads = out
    if not bool(torch.isfinite(loss)):
        return "non-finite loss"
    if not all(bool(torch.isfinite(g).all()) for g in grads):
        return "non-finite gradients"
    return None


def run_model(config: ModelConfig, *, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the model benchmark in the current torch thread setting.

    Returns:
        ``{"config", "torch", "threads", "results"}``; each result row has ``position, pass``,
        the timing stats (per forward, or per forward+backward step), ``x_none``,
        ``tokens_per_s``, ``parameters``, ``first_call_s``, ``check`` (``None`` when the
        first call's output was sane) and ``error``.
    """
    generator = torch.Generator().manual_seed(config.seed)
    ids = torch.randint(config.vocab_size, (config.batch, config.length), generator=generator)
    targets = torch.roll(ids, -1, dims=1)
    models: dict[str, torch.nn.Module] = {}
    errors: dict[str, str] = {}
    for position in config.positions:
        try:
            models[position] = _build(config, position)
        except Exception as exc:  # reported, not fatal (e.g. an encoding an older posenc lacks)
            errors[position] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    results: list[dict[str, Any]] = []
    for pass_name in config.passes:
        log(
            f"[model] {pass_name}: TransformerLM d={config.d_model} layers={config.num_layers} "
            f"heads={config.num_heads}, ({config.batch}, {config.length}) tokens, {threads_text(torch.get_num_threads())}"
        )
        fns: dict[str, Callable[[], Any]] = {}
        rows: dict[str, dict[str, Any]] = {}
        for position in config.positions:
            row = rows[position] = {
                "position": position,
                "pass": pass_name,
                "error": errors.get(position),
                "check": None,
            }
            model = models.get(position)
            if model is None:
                continue
            row["parameters"] = sum(p.numel() for p in model.parameters())
            try:
                fn = _step(model, ids, targets, pass_name)
                start = time.perf_counter()
                out = fn()
                row["first_call_s"] = time.perf_counter() - start
                row["check"] = _check(out, config, pass_name)
                del out
                fns[position] = fn
            except Exception as exc:  # reported, not fatal
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                log(f"  {position}: {row['error']}")
        stats = time_interleaved(
            fns,
            reps=config.reps,
            warmup=config.warmup,
            min_sample_s=config.min_sample_s,
            budget_s=config.budget_s,
            estimates={name: rows[name]["first_call_s"] for name in fns},
        )
        floor = stats.get(FLOOR)
        for position, row in rows.items():
            st = stats.get(position)
            if st:
                row.update(st.as_dict())
                row["x_none"] = ratio(st.median, floor.median if floor else None)
                row["tokens_per_s"] = config.batch * config.length / st.median
            results.append(row)
        log(
            "  "
            + ", ".join(
                f"{r['position']} {fmt_ms(r['median_ms'])} ms ({fmt(r.get('x_none'))}x)"
                for r in rows.values()
                if "median_ms" in r
            )
        )
    return {
        "config": dataclasses.asdict(config),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "results": results,
    }


def model_tables(model: dict[str, Any], *, markdown: bool) -> str:
    """One line per position encoding: median time per pass and its ratio to ``none``."""
    config = model["config"]
    passes = list(dict.fromkeys(r["pass"] for r in model["results"]))
    by_position: dict[str, dict[str, dict[str, Any]]] = {}
    for row in model["results"]:
        by_position.setdefault(row["position"], {})[row["pass"]] = row

    def cells(row: dict[str, Any] | None) -> list[str]:
        if row is None:
            return ["-", "-", "-"]
        if row.get("error"):
            return ["error", "-", "-"]
        wrong = " (wrong)" if row.get("check") else ""
        return [fmt_ms(row["median_ms"]) + wrong, fmt(row.get("x_none")), fmt_ms(row["iqr_ms"])]

    body = []
    for position, group in by_position.items():
        params = next((r.get("parameters") for r in group.values() if r.get("parameters")), None)
        body.append([position, *[c for p in passes for c in cells(group.get(p))], params])
    headers = ["position", *[h for p in passes for h in (f"{p} ms", f"x {FLOOR}", "IQR ms")], "parameters"]
    lines = [
        f"TransformerLM(vocab_size={config['vocab_size']}, d_model={config['d_model']}, "
        f"num_layers={config['num_layers']}, num_heads={config['num_heads']}), input "
        f"({config['batch']}, {config['length']}), float32, torch {model.get('torch', '?')}, "
        f"{threads_text(model.get('threads'))}: median time per forward (inference, no_grad) and per "
        f"forward+backward step",
        format_table(headers, body, markdown=markdown),
    ]
    notes = [f"{r['position']} {r['pass']}: {r['error']}" for r in model["results"] if r.get("error")]
    notes += [f"{r['position']} {r['pass']}: {r['check']}" for r in model["results"] if r.get("check")]
    if notes:
        lines += ["", *[f"- {n}" for n in notes]]
    return "\n".join(lines)
