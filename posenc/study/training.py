"""Running the study: train one small character-level model per encoding, score it at every length."""

from __future__ import annotations

import ast
import contextlib
import math
import platform
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ..base import PositionalEncoding
from ..registry import describe, lookup, parse_spec
from .config import LIMITS, ConfigError, StudyConfig
from .corpus import Corpus
from .plan import default_encodings, has_fixed_length, split_specs
from .results import EncodingResult, LengthResult, StudyResult

__all__ = ["run_study"]


class _Vocabulary:
    """Characters to ids: every distinct character of the corpus, in code-point order."""

    def __init__(self, text: str) -> None:
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}

    def encode(self, text: str) -> torch.Tensor:
        return torch.tensor([self.index[c] for c in text], dtype=torch.long)


def _check_specs(specs: Sequence[Any] | str, config: StudyConfig) -> list[tuple[str, Any]]:
    """Build and run every spec once on the model's sizes so that a bad one fails before any training.

    Each spec gets a tiny forward pass through the study's model (``TransformerLM`` with the
    config's sizes, two tokens): an encoding that builds but cannot run in a causal text model
    (a 2D grid encoding) is refused here, not after the others have trained.
    """
    if isinstance(specs, str):
        specs = split_specs(specs)
    if not specs:
        raise ConfigError(
            f"encodings must name at least one encoding, e.g. ['rope', 'alibi']; got {specs!r}",
            argument="encodings",
        )
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
            raise ConfigError(f"encodings: {_short(label)} is given twice", argument="encodings")
        seen.add(label)
        check_spec_ints(spec)
        probe_spec(spec, config)
        labelled.append((label, spec))
    return labelled


def _short(value: Any, width: int = 80) -> str:
    text = repr(value) if not isinstance(value, str) else repr(value.strip())
    return text if len(text) <= width else f"{text[: width - 25]}...' ({len(text):,} characters)"


def check_spec_ints(spec: Any) -> None:
    """Refuse an integer option above ``LIMITS["spec_int"]`` anywhere in a spec (``max_len=10**12``).

    Every integer of an encoding's options sizes something (a table's rows, an offset into
    one, a distance bucket count); none needs to exceed a million in a study. A spec that
    does not parse is left to :func:`probe_spec`, which reports it.
    """
    limit = LIMITS["spec_int"]
    values: list[Any] = []
    if isinstance(spec, str):
        try:
            tree = ast.parse(spec.strip(), mode="eval") if len(spec) <= 100_000 else None
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            tree = None
        if tree is not None:
            values = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]
    elif isinstance(spec, dict):
        stack: list[Any] = [spec]
        while stack and len(values) < 10_000:
            item = stack.pop()
            if isinstance(item, dict):
                stack.extend(item.values())
            elif isinstance(item, (list, tuple)):
                stack.extend(item)
            else:
                values.append(item)
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > limit:
            raise ConfigError(
                f"encodings: {_short(spec)} has the integer {_short(value, 30)}; options that size tables and "
                f"offsets must be at most {limit:,} in magnitude (a bound on memory)",
                argument="encodings",
            )


def probe_spec(spec: Any, config: StudyConfig) -> None:
    """Build ``spec`` into the study's model and run two tokens through it, or raise a ConfigError."""
    from ..nn import TransformerLM

    try:
        model = TransformerLM(
            2,
            config.d_model,
            config.num_layers,
            config.num_heads,
            position=spec,
            max_len=config.train_len,
            causal=True,
        )
        with torch.inference_mode():
            model(torch.zeros(1, min(2, config.train_len), dtype=torch.long))
    except (ValueError, TypeError) as err:
        raise ConfigError(f"encodings: {_one_line(err)}", argument="encodings") from err
    except Exception as err:  # any failure of the probe: this spec cannot run in the study
        raise ConfigError(
            f"encodings: {_short(spec)} cannot run in a causal text model: {type(err).__name__}: {_one_line(err)}",
            argument="encodings",
        ) from err


def _one_line(message: object, width: int = 400) -> str:
    text = " ".join(str(message).split())
    return text if len(text) <= width else f"{text[: width - 40]}... ({len(text):,} characters)"


def _dims(config: StudyConfig) -> dict[str, Any]:
    return {
        "d_model": config.d_model,
        "num_heads": config.num_heads,
        "head_dim": config.d_model // config.num_heads,
        "max_len": config.train_len,
        "causal": True,
    }


def _lr_at(step: int, steps: int, lr: float) -> float:
    """Linear warm-up over the first tenth of ``steps``, then cosine decay from ``lr`` to ``lr / 10``."""
    warmup = max(1, steps // 10)
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train_steps(
    model: torch.nn.Module,
    train_ids: torch.Tensor,
    *,
    steps: int,
    seq_len: int,
    batch_size: int,
    lr: float,
    seed: int,
    device: torch.device,
    bar: Any = None,
) -> float:
    """``steps`` AdamW steps on random windows of ``seq_len`` ids; returns the last training loss.

    The windows come from a generator seeded with ``seed``, so every model trained with the
    same arguments sees the same batches in the same order.

    Args:
        model: ids ``(b, t)`` -> logits ``(b, t, v)``, already on ``device``.
        train_ids: ``(n,)`` training ids, ``n >= seq_len + 1``.
        steps, seq_len, batch_size: the schedule's length, the window length and windows per step.
        lr: the peak learning rate (see :func:`_lr_at`).
        seed: seeds the batch order.
        device: where the batches go.
        bar: a tqdm bar advanced once per step, or ``None``.
    """
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    span = seq_len + 1
    offsets = torch.arange(span)
    model.train()
    loss_value = float("nan")
    for step in range(steps):
        starts = torch.randint(0, train_ids.numel() - span + 1, (batch_size,), generator=generator)
        windows = train_ids[starts[:, None] + offsets].to(device)
        for group in optimizer.param_groups:
            group["lr"] = _lr_at(step, steps, lr)
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
    model.eval()
    return loss_value


def scale_embeddings(model: Any) -> float | None:
    """Give a fixed additive table and the token embeddings the same scale, as the original Transformer.

    Vaswani et al. (2017, §3.4) multiply the embeddings by ``sqrt(d_model)`` before adding the
    sinusoidal table; their embeddings start at std ``d_model ** -0.5`` (tensor2tensor), so
    tokens enter at std 1, the scale of the table (amplitude 1). ``TransformerLM`` starts its
    embeddings at GPT-2's std 0.02, where a unit-amplitude table drowns the tokens. This
    applies the original recipe — embedding weights re-drawn at std ``d_model ** -0.5`` and
    the embedding output multiplied by ``sqrt(d_model)`` — to models whose encoding adds a
    fixed table (additive and no learned parameters). A learned table starts at the
    embeddings' own scale and every other kind adds nothing to the embeddings, so those
    models are left as they are: the comparison changes only where it was unfair.

    Returns:
        The scale applied, or ``None`` when the model is left alone.
    """
    encoding = model.encoding  # None when the layers use different encodings (never additive then)
    if encoding is None or encoding.kind != "additive" or any(True for _ in encoding.parameters()):
        return None
    d_model = model.d_model
    scale = math.sqrt(d_model)
    with torch.no_grad():
        torch.nn.init.normal_(model.embed.weight, mean=0.0, std=d_model**-0.5)
    model.embed.register_forward_hook(_Scale(scale))
    return scale


class _Scale:
    """A forward hook multiplying a module's output by a constant (picklable, unlike a lambda)."""

    def __init__(self, scale: float) -> None:
        self.scale = scale

    def __call__(self, module: Any, inputs: Any, output: torch.Tensor) -> torch.Tensor:
        return output * self.scale


def _eval_chunks(val_ids: torch.Tensor, config: StudyConfig) -> torch.Tensor:
    """``(n, longest + 1)`` chunks of validation ids, spread evenly over the validation text."""
    longest = config.eval_lens[-1]
    span = longest + 1
    if val_ids.numel() < span:
        raise ConfigError(
            f"eval_lens: the validation text has {val_ids.numel()} characters but length {longest} needs at least "
            f"{span}; use a larger corpus or shorter evaluation lengths",
            argument="eval_lens",
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
    """Mean cross-entropy over windows of ``eval_len`` cut from the validation chunks.

    Args:
        model: ids ``(b, t)`` -> logits ``(b, t, vocab)``.
        chunks: ``(n, longest + 1)`` validation ids (see :func:`_eval_chunks`).
        eval_len: the window length ``t``; ``(longest + 1 - 1) // eval_len`` windows per chunk.
        train_len: positions from here on are also scored apart (``loss_beyond``).
        device: where the model runs.

    Returns:
        The scores; or, when a position table in ``model`` is shorter than ``eval_len``, a
        result whose ``error`` says so (the model is not run). Any error the model raises
        propagates.
    """
    per_chunk = (chunks.shape[1] - 1) // eval_len
    inputs = torch.cat([chunks[:, j * eval_len : (j + 1) * eval_len] for j in range(per_chunk)])
    targets = torch.cat([chunks[:, j * eval_len + 1 : (j + 1) * eval_len + 1] for j in range(per_chunk)])
    limit = _length_limit(model)
    if limit is not None and eval_len > limit:
        # The one case the study expects to fail: a fixed-size table has no rows past its size.
        return LengthResult(
            eval_len,
            inputs.numel(),
            error=f"sequence length {eval_len} exceeds max_len={limit}, the size of the position table",
        )
    # About 8k characters per forward keeps the peak memory small at any length.
    batch = max(1, 8192 // eval_len)
    losses = []
    for i in range(0, inputs.shape[0], batch):
        logits = model(inputs[i : i + batch].to(device))
        loss = F.cross_entropy(
            logits.float().flatten(0, 1), targets[i : i + batch].to(device).flatten(), reduction="none"
        )
        losses.append(loss.view(-1, eval_len).cpu().double())
    loss = torch.cat(losses)
    mean = float(loss.mean())
    result = LengthResult(eval_len, inputs.numel(), loss=mean, perplexity=math.exp(mean))
    if eval_len > train_len:
        beyond = float(loss[:, train_len:].mean())
        result.loss_beyond, result.perplexity_beyond = beyond, math.exp(beyond)
    return result


def _length_limit(model: torch.nn.Module) -> int | None:
    """The longest sequence ``model`` can encode: the smallest ``max_len`` of its fixed-size tables.

    ``None`` when it has none. A fixed-size table is an encoding whose ``max_len`` option is
    required (:func:`~posenc.study.plan.has_fixed_length`, the rule :func:`encoding_plan` uses).
    """
    limits = [
        max_len
        for module in model.modules()
        if isinstance(module, PositionalEncoding)
        and isinstance(max_len := getattr(module, "max_len", None), int)
        and has_fixed_length(describe(type(module)))
    ]
    return min(limits, default=None)


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
        A :class:`StudyResult`; ``.table()`` formats it, ``.save(dir)`` writes the data files and
        :func:`posenc.plots.plot_extrapolation` draws it.

    Raises:
        ConfigError: a bad setting, corpus or encoding, before any training starts.
        TypeError: both ``config`` and ``settings``, or a setting of the wrong type.
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

    from ..nn import TransformerLM  # imported here: the model module is only needed to run the study

    device = torch.device(config.device)

    train_text, val_text = corpus.split()
    vocab = _Vocabulary(corpus.text)
    train_ids, val_ids = vocab.encode(train_text), vocab.encode(val_text)
    if train_ids.numel() < config.train_len + 2:
        raise ConfigError(
            f"corpus: the training text has {train_ids.numel()} characters; train_len={config.train_len} needs at "
            f"least {config.train_len + 2}",
            argument="corpus",
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
    return StudyResult(config, corpus_info, results, environment(config))


def environment(config: StudyConfig) -> dict[str, Any]:
    """Python, torch, platform and thread count, recorded beside every result."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "threads": torch.get_num_threads() if config.threads is None else config.threads,
    }


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
    )
    scale_embeddings(model)
    model.to(device)
    bar = _progress_bar(config.steps, label, progress)
    start = time.perf_counter()
    loss_value = train_steps(
        model,
        train_ids,
        steps=config.steps,
        seq_len=config.train_len,
        batch_size=config.batch_size,
        lr=config.lr,
        seed=config.seed,
        device=device,
        bar=bar,
    )
    train_seconds = time.perf_counter() - start

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
    if isinstance(spec, str):
        try:
            return lookup(parse_spec(spec)[0]).kind
        except ValueError:  # a per-layer pattern such as "rope*3 + none"
            return "per-layer"
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
