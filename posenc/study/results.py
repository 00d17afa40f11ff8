"""The study's results: per length, per encoding, the whole study; its text table and data files."""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .config import ConfigError, StudyConfig

__all__ = ["EncodingResult", "LengthResult", "StudyResult"]


@dataclass
class LengthResult:
    """Perplexity of one encoding at one evaluation length.

    ``perplexity`` is ``exp(loss)``, the loss being the mean next-character cross-entropy
    (nats) over every position of every window. ``loss_beyond`` / ``perplexity_beyond`` score
    only the positions at or past the training length (``None`` at the training length).
    When the model cannot run at this length, the numbers are ``None`` and ``error`` says why.
    """

    eval_len: int
    chars: int
    loss: float | None = None
    perplexity: float | None = None
    loss_beyond: float | None = None
    perplexity_beyond: float | None = None
    error: str | None = None


@dataclass
class EncodingResult:
    """One trained model: its spec, training summary and a :class:`LengthResult` per length."""

    label: str
    kind: str
    parameters: int
    final_train_loss: float
    train_seconds: float
    eval_seconds: float
    lengths: list[LengthResult] = field(default_factory=list)

    def at(self, eval_len: int) -> LengthResult:
        """The result at ``eval_len``."""
        for r in self.lengths:
            if r.eval_len == eval_len:
                return r
        raise KeyError(eval_len)


@dataclass
class StudyResult:
    """The outcome of :func:`run_study`: settings, corpus summary and one entry per encoding."""

    config: StudyConfig
    corpus: dict[str, Any]
    encodings: list[EncodingResult]
    environment: dict[str, Any]

    def table(self) -> str:
        """The perplexity table as text: one row per encoding, one column per evaluation length.

        A model that cannot run at a length (the learned table past its size) shows
        ``cannot run``; a footnote says why.
        """
        lens = self.config.eval_lens
        headers = ["encoding", *(f"{n}{' (train)' if n == self.config.train_len else ''}" for n in lens)]
        rows = []
        notes: list[str] = []
        for enc in self.encodings:
            row = [enc.label]
            for n in lens:
                r = enc.at(n)
                if r.perplexity is None:
                    row.append("cannot run")
                    if r.error and not any(note.startswith(f"{enc.label}: ") for note in notes):
                        notes.append(f"{enc.label}: {r.error} (at length {n})")
                else:
                    row.append(f"{r.perplexity:.3f}")
            rows.append(row)
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
        out = [
            f"validation perplexity per character (lower is better); trained at length {self.config.train_len} "
            f"for {self.config.steps} steps",
            "  ".join(
                h.ljust(w) if i == 0 else h.rjust(w)
                for i, (h, w) in enumerate(zip(headers, widths, strict=True))
            ),
            "  ".join("-" * w for w in widths),
        ]
        for row in rows:
            out.append(
                "  ".join(
                    c.ljust(w) if i == 0 else c.rjust(w)
                    for i, (c, w) in enumerate(zip(row, widths, strict=True))
                )
            )
        out.extend(f"  note: {n}" for n in notes)
        return "\n".join(out)

    def to_dict(self) -> dict[str, Any]:
        """Everything as plain JSON-ready data."""
        return {
            "config": asdict(self.config),
            "corpus": self.corpus,
            "environment": self.environment,
            "encodings": [asdict(e) for e in self.encodings],
        }

    def save(self, out_dir: str | Path) -> dict[str, Path]:
        """Write ``results.json`` (:meth:`to_dict`) and ``results.csv`` (one row per encoding and length).

        Data only: :func:`posenc.plots.plot_extrapolation` draws the figure from this result
        (the ``posenc extrapolate`` command calls it after saving).

        Args:
            out_dir: the folder, made if missing (with its parents).

        Returns:
            The written paths by kind: ``{"json": ..., "csv": ...}``.

        Raises:
            ConfigError: ``out_dir`` exists and is not a folder.
        """
        out = Path(out_dir)
        if out.exists() and not out.is_dir():
            raise ConfigError(f"out_dir {str(out)!r} exists and is not a folder", argument="out_dir")
        out.mkdir(parents=True, exist_ok=True)
        paths = {"json": out / "results.json", "csv": out / "results.csv"}
        paths["json"].write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        with paths["csv"].open("w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(_CSV_COLUMNS)
            for enc in self.encodings:
                for r in enc.lengths:
                    writer.writerow(
                        [
                            enc.label,
                            enc.kind,
                            self.config.train_len,
                            r.eval_len,
                            r.chars,
                            _number(r.loss),
                            _number(r.perplexity),
                            _number(r.perplexity_beyond),
                            "ok" if r.error is None else f"cannot run: {r.error}",
                        ]
                    )
        return paths


_CSV_COLUMNS = (
    "encoding",
    "kind",
    "train_len",
    "eval_len",
    "chars",
    "loss",
    "perplexity",
    "perplexity_beyond_train_len",
    "status",
)


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.6f}"
