"""The results of :func:`posenc.app.study.run_extend`: tidy rows, a text table, data files and a report."""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .._files import atomic_write
from .results import format_table, scored_per_length, wrap

__all__ = ["DISPLAY_NAMES", "ExtendResult", "ExtendRow"]

#: How tables, figures and reports name each method (the ``method`` field keeps the short name).
DISPLAY_NAMES = {
    "none": "RoPE, no scaling",
    "linear": "PI (linear)",
    "ntk": "NTK-aware",
    "dynamic": "dynamic NTK",
    "yarn": "YaRN",
    "llama3": "Llama 3",
    "longrope": "LongRoPE",
    "alibi": "ALiBi",
    "nope": "NoPE",
    "t5": "T5 bias",
}


@dataclass
class ExtendRow:
    """One method at one evaluation length, zero-shot (``finetune_steps == 0``) or fine-tuned.

    ``loss`` is the mean next-character cross-entropy (nats) over every position,
    ``perplexity = exp(loss)``; ``baseline`` marks a reference model trained with another
    encoding (``--baselines``) instead of the RoPE base model with a scaling.
    """

    method: str
    finetune_steps: int
    eval_len: int
    perplexity: float
    loss: float
    chars: int
    baseline: bool = False


@dataclass
class ExtendResult:
    """Everything :func:`~posenc.app.study.run_extend` measured, with the settings it ran with.

    Attributes:
        config: the :class:`~posenc.app.study.extend.ExtendConfig`.
        corpus: the corpus summary (source, characters, split sizes, vocabulary).
        environment: Python, torch, platform, threads.
        methods: per method, the RoPE scaling dict it ran with (``None`` for no scaling), or for
            a baseline its encoding spec.
        base: how the base model was obtained (trained, resumed or loaded; loss, seconds).
        rows: one :class:`ExtendRow` per (method, fine-tuning steps, evaluation length).
        seconds: the run's wall time (resumed: with the earlier runs').
        pending: the methods and baselines asked for but not yet scored (results saved while
            the run goes on, or interrupted).
    """

    config: Any
    corpus: dict[str, Any]
    environment: dict[str, Any]
    methods: dict[str, Any]
    base: dict[str, Any]
    rows: list[ExtendRow]
    seconds: float = 0.0
    pending: list[str] = field(default_factory=list)

    def perplexity(self, method: str, eval_len: int, finetune_steps: int = 0) -> float:
        """The perplexity of ``method`` at ``eval_len`` (zero-shot unless ``finetune_steps``)."""
        for r in self.rows:
            if (r.method, r.eval_len, r.finetune_steps) == (method, eval_len, finetune_steps):
                return r.perplexity
        raise KeyError((method, eval_len, finetune_steps))

    def table(self, width: int | None = 80) -> str:
        """Perplexity per method (rows) and evaluation length (columns).

        Args:
            width: the widest line (a terminal's columns); lengths that do not fit are shown as
                further blocks of columns, each with the method names. ``None``: one block.
        """
        lens = list(self.config.eval_lens)
        keys = list(dict.fromkeys((r.method, r.finetune_steps) for r in self.rows))
        header = ["method", "tuned", *(f"{n}{'*' if n == self.config.train_len else ''}" for n in lens)]
        body = []
        for method, steps in keys:
            cells = [DISPLAY_NAMES.get(method, method), str(steps) if steps else "-"]
            cells += [f"{self.perplexity(method, n, steps):.3f}" for n in lens]
            body.append(cells)
        title = (
            f"validation perplexity per character (lower is better); * = training length {self.config.train_len}; "
            f"tuned = fine-tuning steps at length {lens[-1]}; {self.scored()}"
        )
        lines = [*wrap(title, width), *format_table(header, body, keep=2, width=width)]
        if self.pending:
            lines += wrap(f"not yet run: {', '.join(self.pending)}", width, indent="  ")
        return "\n".join(lines)

    def scored(self) -> str:
        """How many validation characters each length scored, from the rows (not the setting)."""
        return scored_per_length([r.chars for r in self.rows], self.config.eval_chars)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data: ``config``, ``corpus``, ``environment``, ``methods``, ``base``, ``results``."""
        return {
            "config": asdict(self.config),
            "corpus": self.corpus,
            "environment": self.environment,
            "methods": self.methods,
            "base": self.base,
            "seconds": round(self.seconds, 1),
            "results": [asdict(r) for r in self.rows],
            "pending": list(self.pending),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExtendResult:
        """The result :meth:`to_dict` (``results.json``) describes.

        Raises:
            KeyError, TypeError, ValueError: ``data`` is not such a description.
        """
        from .config import ExtendConfig

        return cls(
            config=ExtendConfig(**data["config"]),
            corpus=dict(data["corpus"]),
            environment=dict(data.get("environment") or {}),
            methods=dict(data["methods"]),
            base=dict(data.get("base") or {}),
            rows=[ExtendRow(**r) for r in data["results"]],
            seconds=float(data.get("seconds") or 0.0),
            pending=list(data.get("pending") or []),
        )

    def save(self, out_dir: str | Path) -> dict[str, Path]:
        """Write ``results.json`` and ``results.csv`` to ``out_dir`` (each atomically; the folder must exist)."""
        out = Path(out_dir)
        paths = {"json": out / "results.json", "csv": out / "results.csv"}
        text = json.dumps(self.to_dict(), indent=2) + "\n"
        atomic_write(paths["json"], lambda tmp: tmp.write_text(text, encoding="utf-8"))

        def write_csv(tmp: Path) -> None:
            with tmp.open("w", newline="", encoding="utf-8") as fh:
                writer = csv.writer(fh)
                writer.writerow(_CSV_COLUMNS)
                for r in self.rows:
                    family = "baseline" if r.baseline else "rope"
                    loss, ppl = f"{r.loss:.6f}", f"{r.perplexity:.6f}"
                    row = [
                        r.method,
                        family,
                        r.finetune_steps,
                        self.config.train_len,
                        r.eval_len,
                        r.chars,
                        loss,
                        ppl,
                    ]
                    writer.writerow(row)

        atomic_write(paths["csv"], write_csv)
        return paths

    def report(self, figure: str | None = "extend.png") -> str:
        """A markdown note: what was run, the table, the figure (when given) and the settings."""
        c = self.config
        factor = c.scale_factor
        lines = [
            "# Context extension of a RoPE model",
            "",
            f"A causal character-level `TransformerLM` (d_model {c.d_model}, {c.num_layers} layers, {c.num_heads} "
            f"heads, RoPE) trained at length {c.train_len} ({self.base.get('how', 'trained')}), evaluated at "
            f"{', '.join(map(str, c.eval_lens))} with each method zero-shot (factor {factor:g})"
            + (
                f" and after {c.finetune_steps} fine-tuning steps at length {c.eval_lens[-1]} "
                f"(same batches, seed and learning rate for every method)."
                if c.finetune_steps
                else "."
            ),
            "",
            "| method | fine-tuning steps | " + " | ".join(str(n) for n in c.eval_lens) + " |",
            "| --- | ---: | " + " | ".join("---:" for _ in c.eval_lens) + " |",
        ]
        for method, steps in dict.fromkeys((r.method, r.finetune_steps) for r in self.rows):
            cells = " | ".join(f"{self.perplexity(method, n, steps):.3f}" for n in c.eval_lens)
            lines.append(f"| {DISPLAY_NAMES.get(method, method)} | {steps} | {cells} |")
        lines += ["", "Perplexity per character on held-out text (lower is better)."]
        if figure:
            lines += ["", f"![perplexity against evaluation length]({figure})"]
        lines += ["", "## Settings", ""]
        for name, value in self.methods.items():
            lines.append(f"- `{name}`: `{json.dumps(value)}`")
        lines.append(
            f"- corpus: {self.corpus.get('source')} ({self.corpus.get('characters', 0):,} characters)"
        )
        lines.append(f"- evaluation text: {self.scored()}")
        config = ", ".join(f"{k}={v}" for k, v in asdict(c).items() if k not in ("methods", "baselines"))
        lines.append(f"- config: {config}")
        env = self.environment
        lines.append(
            f"- environment: Python {env.get('python')}, torch {env.get('torch')}, {env.get('threads')} thread(s); "
            f"{self.seconds:.0f} s"
        )
        return "\n".join(lines) + "\n"


_CSV_COLUMNS = ("method", "family", "finetune_steps", "train_len", "eval_len", "chars", "loss", "perplexity")
