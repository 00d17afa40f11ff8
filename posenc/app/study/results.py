"""The study's results: per length, per encoding, the whole study; its text table and data files."""

from __future__ import annotations

import csv
import json
import textwrap
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .._files import atomic_write
from .config import ConfigError, StudyConfig

__all__ = ["DISPLAY_NAMES", "EncodingResult", "LengthResult", "StudyResult", "display_name", "format_table"]

#: How figures and reports name the registered encodings and RoPE scaling methods (the data
#: files keep the names as given).
DISPLAY_NAMES = {
    "alibi": "ALiBi",
    "fire": "FIRE",
    "kerple": "KERPLE",
    "learned": "learned table",
    "mrope": "M-RoPE",
    "none": "NoPE",
    "nope": "NoPE",
    "query_temperature": "query temperature",
    "relative_bias": "T5 bias",
    "t5": "T5 bias",
    "rope": "RoPE",
    "rope_axial": "axial RoPE",
    "shaw": "Shaw relative",
    "sinusoidal": "sinusoidal",
    "transformer_xl": "Transformer-XL",
    "xpos": "xPos",
}


def display_name(label: str) -> str:
    """A readable name for an encoding spec: ``"t5"`` -> ``"T5 bias"``, ``"rope(base=5e5)"`` -> ``"RoPE (base=5e5)"``.

    The spec's name is looked up through the registry's aliases; options are kept as written.
    A label the registry does not know is returned as it is.
    """
    name, _, rest = label.strip().partition("(")
    name = name.strip()
    shown = DISPLAY_NAMES.get(name)
    if shown is None:
        try:
            from posenc.registry import describe

            shown = DISPLAY_NAMES.get(describe(name)["name"])
        except (ValueError, TypeError, KeyError):
            shown = None
    if shown is None:
        return label
    return f"{shown} ({rest[:-1]})" if rest.endswith(")") and rest[:-1].strip() else shown


def scored_per_length(chars: list[int], asked: int) -> str:
    """What a table, figure or log says of the evaluation text: the characters each length scores.

    ``chars`` are the counts actually scored (one per length, or per result); ``asked`` the
    ``eval_chars`` setting, said only when nothing was scored yet.
    """
    if not chars:
        return f"about {asked:,} characters scored per length"
    low, high = min(chars), max(chars)
    counts = f"{high:,}" if low == high else f"{low:,} to {high:,}"
    return f"{counts} characters scored per length"


def format_table(
    header: list[str], rows: list[list[str]], *, keep: int = 1, width: int | None = 80
) -> list[str]:
    """Rows of text cells as aligned lines, split into blocks of columns to fit ``width``.

    The first ``keep`` columns (the row names) are left-aligned and repeated in every block;
    the others are right-aligned. ``width=None`` never splits.
    """
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    fixed = sum(widths[:keep]) + 2 * keep
    blocks: list[list[int]] = [[]]
    used = fixed
    for i in range(keep, len(header)):
        if blocks[-1] and width is not None and used + widths[i] > width:
            blocks.append([])
            used = fixed
        blocks[-1].append(i)
        used += widths[i] + 2

    def line(cells: list[str], columns: list[int]) -> str:
        left = [cells[i].ljust(widths[i]) for i in range(keep)]
        return "  ".join(left + [cells[i].rjust(widths[i]) for i in columns]).rstrip()

    out: list[str] = []
    for b, columns in enumerate(blocks):
        if b:
            out.append("")
        out.append(line(header, columns))
        out.append("  ".join("-" * widths[i] for i in [*range(keep), *columns]))
        out.extend(line(r, columns) for r in rows)
    return out


def wrap(text: str, width: int | None, indent: str = "") -> list[str]:
    """``text`` wrapped at ``width`` (continuation lines indented), or as one line when ``None``."""
    if width is None:
        return [text]
    return textwrap.wrap(text, width, subsequent_indent=indent + "  ", initial_indent=indent) or [""]


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
    #: The encodings asked for but not yet run (a study saved while it runs, or interrupted).
    pending: list[str] = field(default_factory=list)

    def table(self, width: int | None = 80) -> str:
        """The perplexity table as text: one row per encoding, one column per evaluation length.

        A model that cannot run at a length (the learned table past its size) shows
        ``cannot run``; a footnote says why.

        Args:
            width: the widest line (a terminal's columns): more lengths than fit are shown as
                further blocks of columns, each with the encoding names; an encoding spec wider
                than a third of it is shortened and given in full in a footnote. ``None``: one
                block, names in full.
        """
        lens = self.config.eval_lens
        headers = ["encoding", *(f"{n}{' (train)' if n == self.config.train_len else ''}" for n in lens)]
        rows = []
        notes: list[str] = []
        longest = None if width is None else max(12, width // 3)
        for enc in self.encodings:
            name = enc.label
            if longest is not None and len(name) > longest:
                name = f"{name[: longest - 3]}..."
                notes.append(f"{name} is {enc.label}")
            row = [name]
            for n in lens:
                r = enc.at(n)
                if r.perplexity is None:
                    row.append("cannot run")
                    if r.error and not any(note.startswith(f"{name}: ") for note in notes):
                        notes.append(f"{name}: {r.error} (at length {n})")
                else:
                    row.append(f"{r.perplexity:.3f}")
            rows.append(row)
        title = (
            f"validation perplexity per character (lower is better); trained at length {self.config.train_len} "
            f"for {self.config.steps} steps; {self.scored()}"
        )
        out = wrap(title, width)
        out += format_table(headers, rows, width=width)
        for note in notes:
            out += wrap(f"note: {note}", width, indent="  ")
        if self.pending:
            out += wrap(f"not yet run: {', '.join(self.pending)}", width, indent="  ")
        return "\n".join(out)

    def scored(self) -> str:
        """How many validation characters each length scored, from the results (not the setting)."""
        # (a length the model cannot run scored nothing: not counted)
        return scored_per_length(
            [r.chars for e in self.encodings for r in e.lengths if r.error is None], self.config.eval_chars
        )

    def to_dict(self) -> dict[str, Any]:
        """Everything as plain JSON-ready data."""
        return {
            "config": asdict(self.config),
            "corpus": self.corpus,
            "environment": self.environment,
            "encodings": [asdict(e) for e in self.encodings],
            "pending": list(self.pending),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StudyResult:
        """The result :meth:`to_dict` (``results.json``) describes.

        Raises:
            KeyError, TypeError, ValueError: ``data`` is not such a description.
        """
        encodings = []
        for e in data["encodings"]:
            fields = dict(e)
            fields["lengths"] = [LengthResult(**r) for r in fields["lengths"]]
            encodings.append(EncodingResult(**fields))
        return cls(
            StudyConfig(**data["config"]),
            dict(data["corpus"]),
            encodings,
            dict(data.get("environment") or {}),
            pending=list(data.get("pending") or []),
        )

    def save(self, out_dir: str | Path) -> dict[str, Path]:
        """Write ``results.json`` (:meth:`to_dict`) and ``results.csv`` (one row per encoding and length).

        Each file is written to a temporary name and renamed: an interrupt leaves the old file
        or the new one, never half of one.

        Data only: :func:`posenc.app.plots.plot_extrapolation` draws the figure from this result
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
        text = json.dumps(self.to_dict(), indent=2) + "\n"
        atomic_write(paths["json"], lambda tmp: tmp.write_text(text, encoding="utf-8"))
        atomic_write(paths["csv"], self._write_csv)
        return paths

    def _write_csv(self, path: Path) -> None:
        with path.open("w", newline="", encoding="utf-8") as fh:
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
