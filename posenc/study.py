"""The length-extrapolation study: train short, test long, one small language model per encoding.

This is the experiment of Press et al., "Train Short, Test Long: Attention with Linear Biases
Enables Input Length Extrapolation" (ICLR 2022), scaled down to run on a laptop CPU in
minutes: for each position encoding, train a small causal character-level
:class:`posenc.nn.TransformerLM` on windows of ``train_len`` characters, then measure its
perplexity on held-out text cut into windows of each evaluation length.

Everything but the position encoding is the same across runs: the same corpus, the same
initial seed, the same batches in the same order, the same optimiser schedule. So the table
compares the encodings, not the luck of the draw.

Python API, the same study the ``posenc extrapolate`` command runs::

    from posenc.study import Corpus, run_study

    corpus = Corpus.from_path("my_notes.txt")          # or Corpus.standard_library()
    result = run_study(corpus, ["rope", "alibi", "learned"], train_len=64, eval_lens=[64, 256])
    print(result.table())
    result.save("runs/my_text")                         # results.json, results.csv, extrapolation.png
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import platform
import sysconfig
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from .registry import available, describe, lookup

__all__ = [
    "ConfigError",
    "Corpus",
    "EncodingChoice",
    "EncodingResult",
    "LengthResult",
    "StudyConfig",
    "StudyResult",
    "default_encodings",
    "encoding_plan",
    "run_study",
    "split_specs",
]

#: Every ``VALIDATION_EVERY``-th block of ``SPLIT_BLOCK_CHARS`` characters is held out for
#: validation: interleaved blocks keep the validation text in-distribution (the same files'
#: style) while no character is in both splits.
SPLIT_BLOCK_CHARS = 8192
VALIDATION_EVERY = 10


class ConfigError(ValueError):
    """A bad study setting (lengths, steps, corpus, encodings): the user's input, not a bug.

    The message is one line that names the setting, the value received and what is accepted;
    the ``posenc`` command prints it and exits with code 2.
    """


# --- corpus ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Corpus:
    """A text corpus split into training and validation characters.

    Build one with :meth:`standard_library` (the default, no download), :meth:`from_path`
    (a UTF-8 file, or a folder of them) or :meth:`from_text`.

    Attributes:
        text: the whole corpus as one string.
        source: a human-readable description of where it came from.
        num_files: how many files it was read from (0 for :meth:`from_text`).
    """

    text: str
    source: str
    num_files: int = 0

    @classmethod
    def standard_library(cls) -> Corpus:
        """The top-level ``*.py`` files of the running Python's standard library.

        Read at run time, in sorted file-name order, so every machine with the same Python
        version gets the same text, and nothing is downloaded. Sub-packages (``test/``,
        ``idlelib/``, ...) and ``site-packages`` are not included.
        """
        root = Path(sysconfig.get_paths()["stdlib"])
        files = sorted(p for p in root.glob("*.py") if p.is_file())
        version = platform.python_version()
        if not files:
            raise ConfigError(
                f"--corpus: no Python standard library source files found in {root}; pass --corpus PATH"
            )
        text = "".join(_read_utf8(p, strict=False) for p in files)
        return cls(text, f"Python {version} standard library, top-level *.py ({root})", len(files))

    @classmethod
    def from_path(cls, path: str | Path) -> Corpus:
        """Read a UTF-8 text file, or every UTF-8 file under a folder (recursively, sorted).

        In a folder, files that are not valid UTF-8 (binaries, images) and hidden files and
        folders are skipped.

        Raises:
            ConfigError: the path does not exist, a file is not UTF-8 text, or no text was found.
        """
        p = Path(path).expanduser()
        if not p.exists():
            raise ConfigError(
                f"--corpus: {str(path)!r} does not exist; pass a UTF-8 text file or a folder of them"
            )
        if p.is_file():
            text = _read_utf8(p, strict=True)
            corpus = cls(text, str(p), 1)
        else:
            parts = []
            for f in sorted(q for q in p.rglob("*") if q.is_file()):
                if any(part.startswith(".") for part in f.relative_to(p).parts):
                    continue
                with contextlib.suppress(ConfigError):  # not UTF-8: a binary file, skipped
                    parts.append(_read_utf8(f, strict=True))
            corpus = cls("".join(parts), f"{p} ({len(parts)} UTF-8 files)", len(parts))
        if not corpus.text.strip():
            raise ConfigError(
                f"--corpus: {str(path)!r} holds no text (empty, or no UTF-8 files); pass a non-empty corpus"
            )
        return corpus

    @classmethod
    def from_text(cls, text: str, source: str = "text given in Python") -> Corpus:
        """Wrap a string.

        Raises:
            ConfigError: the text is empty or only whitespace.
        """
        if not isinstance(text, str):
            raise TypeError(f"Corpus.from_text: text must be a str, got {type(text).__name__}")
        if not text.strip():
            raise ConfigError("corpus: the text is empty; pass a non-empty corpus")
        return cls(text, source, 0)

    def split(self) -> tuple[str, str]:
        """``(train, validation)``: every 10th block of 8,192 characters goes to validation.

        A corpus shorter than ten blocks is split 90/10 by characters instead (the last 10%
        is validation), so small files still get a validation set.
        """
        n = len(self.text)
        if n < SPLIT_BLOCK_CHARS * VALIDATION_EVERY:
            cut = n - n // VALIDATION_EVERY
            return self.text[:cut], self.text[cut:]
        train, val = [], []
        for i, start in enumerate(range(0, n, SPLIT_BLOCK_CHARS)):
            block = self.text[start : start + SPLIT_BLOCK_CHARS]
            (val if i % VALIDATION_EVERY == VALIDATION_EVERY - 1 else train).append(block)
        return "".join(train), "".join(val)


def _read_utf8(path: Path, *, strict: bool) -> str:
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        if not strict:
            return data.decode("utf-8", errors="replace")
        raise ConfigError(
            f"--corpus: {str(path)!r} is not UTF-8 text ({err.reason} at byte {err.start})"
        ) from err
    # One newline convention, so the same text gives the same characters on every OS.
    return text.replace("\r\n", "\n")


# --- which encodings -------------------------------------------------------------------------


@dataclass(frozen=True)
class EncodingChoice:
    """Whether a registered encoding is in the default study, and why."""

    name: str
    kind: str
    included: bool
    reason: str


_KIND_REASONS = {
    "additive": "a fixed function of position, defined at every position",
    "rotary": "rotates queries and keys by position, defined at every position",
    "bias": "adds a bias by query-key distance, defined at every distance",
    "none": "no position signal: the baseline",
}


def encoding_plan() -> list[EncodingChoice]:
    """Every registered encoding (aliases merged) with whether the default study runs it, and why.

    Derived from the registry's descriptions, not from a list of names, so encodings
    registered later are covered by the same rules:

    * an option without a default that is not a model size (e.g. a file path) cannot be
      guessed: out;
    * a ``grid_size`` option marks a 2D image-patch encoding; text has no grid: out;
    * a required ``max_len`` means a table with a hard size (the learned table): in, as the
      baseline that cannot run past its training length, reported as "cannot run";
    * every other encoding is defined at any position: in.
    """
    plan = []
    seen = set()
    for name in available():
        cls = lookup(name)
        if cls in seen:
            continue
        seen.add(cls)
        info = describe(cls)
        options = {o["name"]: o for o in info["options"]}
        required = [o["name"] for o in info["options"] if o["required"] and not o["is_dim"]]
        if required:
            choice = EncodingChoice(
                info["name"], info["kind"], False, f"needs option(s) {', '.join(required)}"
            )
        elif "grid_size" in options:
            choice = EncodingChoice(
                info["name"], info["kind"], False, "encodes 2D image-patch grids; text has no grid"
            )
        elif options.get("max_len", {}).get("required"):
            choice = EncodingChoice(
                info["name"],
                info["kind"],
                True,
                "a table of max_len=train_len rows: cannot run past the training length",
            )
        else:
            reason = _KIND_REASONS.get(info["kind"], "defined at every position")
            choice = EncodingChoice(info["name"], info["kind"], True, reason)
        plan.append(choice)
    return plan


def default_encodings() -> list[str]:
    """The names the study runs by default: see :func:`encoding_plan`."""
    return [c.name for c in encoding_plan() if c.included]


_OPENERS = {"(": ")", "[": "]", "{": "}"}


def split_specs(text: str) -> list[str]:
    """Split ``--encodings`` at top-level commas: ``"rope(base=5e5, scaling={'a': 1}),alibi"`` is two specs.

    A comma inside parentheses, brackets, braces or a quoted string does not split.

    Raises:
        ConfigError: unbalanced brackets or quotes, or an empty spec (e.g. ``"rope,,alibi"``).
    """
    specs: list[str] = []
    stack: list[str] = []
    quote: str | None = None
    current: list[str] = []
    escaped = False
    for ch in text:
        current.append(ch)
        if quote is not None:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
            continue
        if ch in "'\"":
            quote = ch
        elif ch in _OPENERS:
            stack.append(_OPENERS[ch])
        elif ch in ")]}":
            if not stack or stack.pop() != ch:
                raise ConfigError(f"--encodings: unbalanced {ch!r} in {text!r}")
        elif ch == "," and not stack:
            current.pop()
            specs.append("".join(current).strip())
            current = []
    if quote is not None:
        raise ConfigError(f"--encodings: unclosed quote {quote} in {text!r}")
    if stack:
        raise ConfigError(f"--encodings: unclosed bracket (expected {stack[-1]!r}) in {text!r}")
    specs.append("".join(current).strip())
    if any(not s for s in specs):
        raise ConfigError(
            f"--encodings: empty spec in {text!r}; separate specs with single commas, e.g. 'rope,alibi'"
        )
    return specs


# --- configuration and results ------------------------------------------------------------------


@dataclass(frozen=True)
class StudyConfig:
    """Settings of the study (the defaults are the ``posenc extrapolate`` defaults).

    Args:
        train_len: characters per training window (the training context length).
        eval_lens: evaluation lengths; each at least ``train_len``.
        steps: optimiser steps per encoding.
        batch_size: training windows per step.
        d_model, num_layers, num_heads: the model's size (``d_model`` divisible by ``num_heads``).
        lr: peak AdamW learning rate (linear warm-up, then cosine decay to a tenth).
        eval_chars: about how many validation characters are scored at every length; they
            are cut into chunks of the longest length spread evenly over the validation text,
            and each chunk into windows of each length, so every length scores the same
            characters when it divides the longest.
        seed: seeds the model initialisation and the batch order (the same for every encoding).
        device: a ``torch.device`` string (``"cpu"``, ``"cuda"``, ...); the CPU is deterministic.
        threads: ``torch.set_num_threads`` during the study, or ``None`` to leave it alone.
            One by default: models this small gain little from more threads, a single thread
            does not stall when other processes share the cores, and a fixed count keeps
            reruns bit-identical.
    """

    train_len: int = 64
    eval_lens: tuple[int, ...] = (64, 128, 256, 512)
    steps: int = 1000
    batch_size: int = 32
    d_model: int = 64
    num_layers: int = 2
    num_heads: int = 4
    lr: float = 3e-3
    eval_chars: int = 16384
    seed: int = 0
    device: str = "cpu"
    threads: int | None = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "eval_lens", tuple(self.eval_lens))
        for key in ("train_len", "steps", "batch_size", "d_model", "num_layers", "num_heads", "eval_chars"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"--{key.replace('_', '-')}: must be a positive integer, got {value!r}")
        if not self.eval_lens:
            raise ConfigError("--eval-lens: give at least one evaluation length, e.g. 64,128,256,512")
        for n in self.eval_lens:
            if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
                raise ConfigError(f"--eval-lens: every length must be a positive integer, got {n!r}")
            if n < self.train_len:
                raise ConfigError(
                    f"--eval-lens: length {n} is below --train-len {self.train_len}; evaluation lengths must be >= the training length"
                )
        if len(set(self.eval_lens)) != len(self.eval_lens):
            raise ConfigError(f"--eval-lens: lengths must be distinct, got {list(self.eval_lens)}")
        object.__setattr__(self, "eval_lens", tuple(sorted(self.eval_lens)))
        if self.d_model % self.num_heads:
            raise ConfigError(f"--d-model: {self.d_model} must be divisible by --num-heads {self.num_heads}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"--lr: must be a positive number, got {self.lr!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"--seed: must be a non-negative integer, got {self.seed!r}")
        if self.threads is not None and (
            isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads <= 0
        ):
            raise ConfigError(f"--threads: must be a positive integer, got {self.threads!r}")
        try:
            device = torch.device(self.device)
        except (RuntimeError, TypeError) as err:
            raise ConfigError(
                f"--device: {self.device!r} is not a torch device (e.g. 'cpu', 'cuda', 'cuda:1', 'mps')"
            ) from err
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ConfigError(
                f"--device: {self.device!r} requested but CUDA is not available here; use --device cpu"
            )
        if device.type == "mps" and not (
            hasattr(torch.backends, "mps") and torch.backends.mps.is_available()
        ):
            raise ConfigError(
                f"--device: {self.device!r} requested but MPS is not available here; use --device cpu"
            )


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
                    if r.error and not any(n.startswith(f"{enc.label}: ") for n in notes):
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

    def save(self, out_dir: str | Path, *, plot: bool = True) -> dict[str, Path]:
        """Write ``results.json``, ``results.csv`` and (when ``plot``) ``extrapolation.png`` to ``out_dir``.

        Returns:
            The written paths by kind: ``{"json": ..., "csv": ..., "png": ...}``.
        """
        out = Path(out_dir)
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--out: {str(out)!r} exists and is not a folder")
        out.mkdir(parents=True, exist_ok=True)
        paths = {"json": out / "results.json", "csv": out / "results.csv"}
        paths["json"].write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        with paths["csv"].open("w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(
                [
                    "encoding",
                    "kind",
                    "train_len",
                    "eval_len",
                    "chars",
                    "loss",
                    "perplexity",
                    "perplexity_beyond_train_len",
                    "status",
                ]
            )
            for enc in self.encodings:
                for r in enc.lengths:
                    writer.writerow(
                        [
                            enc.label,
                            enc.kind,
                            self.config.train_len,
                            r.eval_len,
                            r.chars,
                            "" if r.loss is None else f"{r.loss:.6f}",
                            "" if r.perplexity is None else f"{r.perplexity:.6f}",
                            "" if r.perplexity_beyond is None else f"{r.perplexity_beyond:.6f}",
                            "ok" if r.error is None else f"cannot run: {r.error}",
                        ]
                    )
        if plot:
            from .plots import plot_extrapolation

            paths["png"] = plot_extrapolation(self, out / "extrapolation.png")
        return paths


# --- the study -----------------------------------------------------------------------------------


class _Vocabulary:
    """Characters to ids: every distinct character of the corpus, in code-point order."""

    def __init__(self, text: str) -> None:
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}

    def encode(self, text: str) -> torch.Tensor:
        return torch.tensor([self.index[c] for c in text], dtype=torch.long)


def _check_specs(specs: Sequence[Any], config: StudyConfig) -> list[tuple[str, Any]]:
    """Build every spec once on the model's sizes so that a bad one fails before any training."""
    from .registry import build

    if isinstance(specs, str):
        specs = split_specs(specs)
    if not specs:
        raise ConfigError("--encodings: give at least one encoding, e.g. 'rope,alibi'")
    labelled = []
    seen: set[str] = set()
    for spec in specs:
        label = (
            spec.strip()
            if isinstance(spec, str)
            else str(spec.get("name", spec))
            if isinstance(spec, dict)
            else str(spec)
        )
        if label in seen:
            raise ConfigError(f"--encodings: {label!r} is given twice")
        seen.add(label)
        try:
            build(spec, **_dims(config))
        except (ValueError, TypeError) as err:
            raise ConfigError(f"--encodings: {' '.join(str(err).split())}") from err
        labelled.append((label, spec))
    return labelled


def _dims(config: StudyConfig) -> dict[str, Any]:
    return {
        "d_model": config.d_model,
        "num_heads": config.num_heads,
        "head_dim": config.d_model // config.num_heads,
        "max_len": config.train_len,
        "causal": True,
    }


def _lr_at(step: int, config: StudyConfig) -> float:
    warmup = max(1, config.steps // 10)
    if step < warmup:
        return config.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, config.steps - warmup)
    return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def _eval_chunks(val_ids: torch.Tensor, config: StudyConfig) -> torch.Tensor:
    """``(n, longest + 1)`` chunks of validation ids, spread evenly over the validation text."""
    longest = config.eval_lens[-1]
    span = longest + 1
    if val_ids.numel() < span:
        raise ConfigError(
            f"--eval-lens: the validation text has {val_ids.numel()} characters but length {longest} needs at least "
            f"{span}; use a larger --corpus or shorter --eval-lens"
        )
    n = max(1, min(config.eval_chars // longest, (val_ids.numel() - 1) // longest))
    last_start = val_ids.numel() - span
    starts = [round(i * last_start / max(1, n - 1)) if n > 1 else 0 for i in range(n)]
    return torch.stack([val_ids[s : s + span] for s in starts])


@contextlib.contextmanager
def _deterministic(threads: int | None) -> Iterator[None]:
    """Deterministic kernels (and optionally a fixed thread count) for the study, restored after."""
    previous_det = torch.are_deterministic_algorithms_enabled()
    previous_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    previous_threads = torch.get_num_threads()
    torch.use_deterministic_algorithms(True, warn_only=True)
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous_det, warn_only=previous_warn)
        torch.set_num_threads(previous_threads)


def _evaluate(
    model: torch.nn.Module, chunks: torch.Tensor, eval_len: int, train_len: int, device: torch.device
) -> LengthResult:
    """Mean cross-entropy over windows of ``eval_len`` cut from the validation chunks."""
    per_chunk = (chunks.shape[1] - 1) // eval_len
    inputs = torch.cat([chunks[:, j * eval_len : (j + 1) * eval_len] for j in range(per_chunk)])
    targets = torch.cat([chunks[:, j * eval_len + 1 : (j + 1) * eval_len + 1] for j in range(per_chunk)])
    # About 8k characters per forward keeps the peak memory small at any length.
    batch = max(1, 8192 // eval_len)
    losses = []
    try:
        for i in range(0, inputs.shape[0], batch):
            logits = model(inputs[i : i + batch].to(device))
            loss = F.cross_entropy(
                logits.float().flatten(0, 1), targets[i : i + batch].to(device).flatten(), reduction="none"
            )
            losses.append(loss.view(-1, eval_len).cpu().double())
    except ValueError as err:  # e.g. the learned table: "length 128 is past max_len 64"
        return LengthResult(eval_len, inputs.numel(), error=" ".join(str(err).split()))
    loss = torch.cat(losses)
    mean = float(loss.mean())
    result = LengthResult(eval_len, inputs.numel(), loss=mean, perplexity=math.exp(mean))
    if eval_len > train_len:
        beyond = float(loss[:, train_len:].mean())
        result.loss_beyond, result.perplexity_beyond = beyond, math.exp(beyond)
    return result


def run_study(
    corpus: Corpus | str | Path | None = None,
    encodings: Sequence[Any] | str | None = None,
    config: StudyConfig | None = None,
    *,
    progress: bool = True,
    log: Any = None,
    **settings: Any,
) -> StudyResult:
    """Train one small causal character-level language model per encoding and measure extrapolation.

    Args:
        corpus: a :class:`Corpus`, a path to a UTF-8 file or folder, or ``None`` for the
            Python standard library (:meth:`Corpus.standard_library`).
        encodings: registry specs (``["rope", "alibi(max_bias=4.0)"]``, or one string with
            top-level commas), or ``None`` for :func:`default_encodings`.
        config: a :class:`StudyConfig`; or give its fields as keyword ``settings``
            (``train_len=64, eval_lens=[64, 256], steps=200``).
        progress: show a tqdm progress bar per encoding (on stderr).
        log: a callable taking one line of text (e.g. ``print``) for the corpus summary, or ``None``.

    Returns:
        A :class:`StudyResult`; ``.table()`` formats it, ``.save(dir)`` writes the files.

    Raises:
        ConfigError: a bad setting, corpus or encoding, before any training starts.
    """
    if config is None:
        config = StudyConfig(**settings)
    elif settings:
        raise TypeError(f"run_study: pass either config or settings, not both (got {sorted(settings)})")
    specs = _check_specs(default_encodings() if encodings is None else encodings, config)
    if corpus is None:
        corpus = Corpus.standard_library()
    elif isinstance(corpus, (str, Path)):
        corpus = Corpus.from_path(corpus)

    from .nn import TransformerLM  # imported here: the model module is only needed to run the study

    device = torch.device(config.device)

    train_text, val_text = corpus.split()
    vocab = _Vocabulary(corpus.text)
    train_ids, val_ids = vocab.encode(train_text), vocab.encode(val_text)
    if train_ids.numel() < config.train_len + 2:
        raise ConfigError(
            f"--corpus: the training text has {train_ids.numel()} characters; --train-len {config.train_len} needs at "
            f"least {config.train_len + 2}"
        )
    chunks = _eval_chunks(val_ids, config)
    corpus_info = {
        "source": corpus.source,
        "files": corpus.num_files,
        "characters": len(corpus.text),
        "train_characters": len(train_text),
        "validation_characters": len(val_text),
        "vocabulary": len(vocab.chars),
    }
    if log is not None:
        log(
            f"corpus: {corpus.source}: {len(corpus.text):,} characters ({len(train_text):,} train, "
            f"{len(val_text):,} validation), {len(vocab.chars)} distinct"
        )

    results = []
    with _deterministic(config.threads):
        for label, spec in specs:
            results.append(
                _train_and_evaluate(
                    TransformerLM, label, spec, vocab, train_ids, chunks, config, device, progress
                )
            )
    environment = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "threads": torch.get_num_threads() if config.threads is None else config.threads,
    }
    return StudyResult(config, corpus_info, results, environment)


def _train_and_evaluate(
    model_cls: Any,
    label: str,
    spec: Any,
    vocab: _Vocabulary,
    train_ids: torch.Tensor,
    chunks: torch.Tensor,
    config: StudyConfig,
    device: torch.device,
    progress: bool,
) -> EncodingResult:
    # The same seed for every encoding: the same initial weights where shapes agree, the same batches.
    torch.manual_seed(config.seed)
    model = model_cls(
        len(vocab.chars),
        config.d_model,
        config.num_layers,
        config.num_heads,
        position=spec,
        max_len=config.train_len,
        causal=True,
    ).to(device)
    generator = torch.Generator().manual_seed(config.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.01)
    span = config.train_len + 1
    offsets = torch.arange(span)

    bar = _progress_bar(config.steps, label, progress)
    start = time.perf_counter()
    model.train()
    loss_value = float("nan")
    for step in range(config.steps):
        starts = torch.randint(0, train_ids.numel() - span + 1, (config.batch_size,), generator=generator)
        windows = train_ids[starts[:, None] + offsets].to(device)
        for group in optimizer.param_groups:
            group["lr"] = _lr_at(step, config)
        logits = model(windows[:, :-1])
        loss = F.cross_entropy(logits.float().flatten(0, 1), windows[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        loss_value = loss.item()
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss_value:.3f}", refresh=False)
    train_seconds = time.perf_counter() - start

    model.eval()
    start = time.perf_counter()
    lengths = []
    with torch.inference_mode():
        for n in config.eval_lens:
            if bar is not None:
                bar.set_postfix(loss=f"{loss_value:.3f}", eval=n)
            lengths.append(_evaluate(model, chunks, n, config.train_len, device))
    eval_seconds = time.perf_counter() - start
    if bar is not None:
        bar.close()
    return EncodingResult(
        label=label,
        kind=_kind_of(spec),
        parameters=sum(p.numel() for p in model.parameters()),
        final_train_loss=loss_value,
        train_seconds=round(train_seconds, 2),
        eval_seconds=round(eval_seconds, 2),
        lengths=lengths,
    )


def _kind_of(spec: Any) -> str:
    from .registry import parse_spec

    if isinstance(spec, str):
        return lookup(parse_spec(spec)[0]).kind
    if isinstance(spec, dict):
        return lookup(spec["name"]).kind
    return getattr(spec, "kind", "unknown")


def _progress_bar(total: int, label: str, enabled: bool) -> Any:
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is in the `cli` extra; without it the study simply runs quietly
        return None
    return tqdm(total=total, desc=f"{label:>14}", unit="step", leave=True, dynamic_ncols=True)
