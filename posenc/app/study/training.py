"""The study's mechanics: the model, its training loop, the validation windows and their scores.

:func:`posenc.app.study.run_study` (:mod:`~posenc.app.study.extrapolate`) and
:func:`posenc.app.study.run_extend` (:mod:`~posenc.app.study.extend`) are built from these.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import platform
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

import posenc
from posenc import PositionalEncoding
from posenc.registry import describe, lookup, parse_spec

from .config import ConfigError, StudyConfig
from .corpus import Corpus
from .parallel import Ranks
from .plan import has_fixed_length
from .results import LengthResult
from .specs import build_study_model

__all__ = ["fair_embed_scale", "study_model", "train_steps"]


class _Vocabulary:
    """Characters to ids: every distinct character of the corpus, in code-point order."""

    def __init__(self, text: str) -> None:
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}

    def encode(self, text: str) -> torch.Tensor:
        return torch.tensor([self.index[c] for c in text], dtype=torch.long)


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
    parallel: Ranks | None = None,
) -> float:
    """``steps`` AdamW steps on random windows of ``seq_len`` ids; returns the last training loss.

    The windows come from a generator seeded with ``seed``, so every model trained with the
    same arguments sees the same batches in the same order. Data-parallel (``parallel``), every
    rank draws the same global batch and trains on its slice of it in DistributedDataParallel:
    the averaged gradients are the full batch's, and the loss returned is the full batch's.

    Args:
        model: ids ``(b, t)`` -> logits ``(b, t, v)``, already on ``device``.
        train_ids: ``(n,)`` training ids, ``n >= seq_len + 1``.
        steps, seq_len, batch_size: the schedule's length, the window length and windows per step.
        lr: the peak learning rate (see :func:`_lr_at`).
        seed: seeds the batch order.
        device: where the batches go.
        bar: a tqdm bar advanced once per step, or ``None``.
        parallel: this process's rank when training data-parallel, else ``None``.
    """
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    span = seq_len + 1
    offsets = torch.arange(span)
    # Data-parallel: the same global batch on every rank (same generator), this rank's rows of it.
    net = model if parallel is None else parallel.wrap(model)
    mine = slice(None) if parallel is None else parallel.batch_slice(batch_size)
    net.train()
    loss_value = float("nan")
    for step in range(steps):
        starts = torch.randint(0, train_ids.numel() - span + 1, (batch_size,), generator=generator)[mine]
        windows = train_ids[starts[:, None] + offsets].to(device)
        for group in optimizer.param_groups:
            group["lr"] = _lr_at(step, steps, lr)
        logits = net(windows[:, :-1])
        loss = F.cross_entropy(logits.float().flatten(0, 1), windows[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        loss_value = loss.item() if parallel is None else parallel.sum([loss.item()])[0] / parallel.world_size
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss_value:.3f}", refresh=False)
    net.eval()
    return loss_value


def train_study_model(
    model: torch.nn.Module,
    train_ids: torch.Tensor,
    config: StudyConfig,
    *,
    device: torch.device,
    bar: Any = None,
    parallel: Ranks | None = None,
) -> float:
    """:func:`train_steps` with the config's steps, length, batch, learning rate and seed."""
    return train_steps(
        model,
        train_ids,
        steps=config.steps,
        seq_len=config.train_len,
        batch_size=config.batch_size,
        lr=config.lr,
        seed=config.seed,
        device=device,
        bar=bar,
        parallel=parallel,
    )


def fair_embed_scale(spec: Any, config: StudyConfig) -> float | None:
    """The ``embed_scale`` of the study's model for ``spec``: ``sqrt(d_model)`` for a fixed additive table.

    Vaswani et al. (2017, §3.4) multiply the embeddings by ``sqrt(d_model)`` before adding the
    sinusoidal table; their embeddings start at std ``d_model ** -0.5`` (tensor2tensor), so
    tokens enter at std 1, the scale of the table (amplitude 1). ``TransformerLM`` starts its
    embeddings at GPT-2's std 0.02, where a unit-amplitude table drowns the tokens. So a model
    whose encoding adds a fixed table (additive, no learned parameters) gets the original
    recipe (:class:`~posenc.nn.TransformerLM`'s ``embed_scale``). A learned table starts at the
    embeddings' own scale and every other kind adds nothing to the embeddings, so those models
    keep the default: the comparison changes only where it was unfair.

    The encoding is built once to read its kind, on a forked random state, so deciding does
    not change the weights any model draws afterwards.

    Returns:
        ``sqrt(d_model)``, or ``None`` for no scaling.
    """
    with torch.random.fork_rng(devices=[]):
        probe = build_study_model(spec, 2, config)
    encoding = probe.encoding  # None when the layers use different encodings (never additive then)
    if encoding is None or encoding.kind != "additive" or any(True for _ in encoding.parameters()):
        return None
    return math.sqrt(config.d_model)


def study_model(spec: Any, vocab_size: int, config: StudyConfig) -> Any:
    """The study's model for ``spec``: a causal ``TransformerLM`` of the config's sizes, seeded.

    Seeded with ``config.seed`` just before it is built, so every encoding starts from the
    same weights where shapes agree.
    """
    scale = fair_embed_scale(spec, config)
    torch.manual_seed(config.seed)
    return build_study_model(spec, vocab_size, config, embed_scale=scale)


def _corpus_info(corpus: Corpus, train_text: str, val_text: str, vocab: _Vocabulary) -> dict[str, Any]:
    """What results.json records of the corpus (and what ``--resume`` compares)."""
    return {
        "source": corpus.source,
        "files": corpus.num_files,
        "characters": len(corpus.text),
        "sha256": hashlib.sha256(corpus.text.encode()).hexdigest(),
        "train_characters": len(train_text),
        "validation_characters": len(val_text),
        "vocabulary": len(vocab.chars),
    }


def _checked_split(corpus: Corpus, config: StudyConfig, train_len: int, purpose: str) -> tuple[str, str]:
    """``corpus.split()``, refused (a ConfigError) when a text is too short for the run.

    The training text needs windows of ``train_len`` (``purpose`` says what for), the
    validation text one evaluation chunk of the longest length. Lengths only: cheap enough to
    check before anything else is printed or written.
    """
    train_text, val_text = corpus.split()
    if len(train_text) < train_len + 2:
        raise ConfigError(
            f"corpus: the training text has {len(train_text)} characters; {purpose} needs at least {train_len + 2}",
            argument="corpus",
        )
    longest = config.eval_lens[-1]
    if len(val_text) < longest + 1:
        raise ConfigError(
            f"eval_lens: the validation text has {len(val_text)} characters but length {longest} needs at least "
            f"{longest + 1}; use a larger corpus or shorter evaluation lengths",
            argument="eval_lens",
        )
    return train_text, val_text


def _chunk_count(val_chars: int, config: StudyConfig) -> int:
    """How many evaluation chunks of the longest length: ``eval_chars`` asks, the validation text caps."""
    longest = config.eval_lens[-1]
    return max(1, min(config.eval_chars // longest, (val_chars - 1) // longest))


def _corpus_summary(
    corpus: Corpus, train_text: str, val_text: str, vocab: _Vocabulary, config: StudyConfig
) -> str:
    """The log line on the corpus and the evaluation text, with the characters each length will score."""
    from .results import scored_per_length

    n, longest = _chunk_count(len(val_text), config), config.eval_lens[-1]
    scored = scored_per_length([n * (longest // length) * length for length in config.eval_lens], 0)
    capped = n < config.eval_chars // longest
    return (
        f"corpus: {corpus.source}: {len(corpus.text):,} characters ({len(train_text):,} train, "
        f"{len(val_text):,} validation), {len(vocab.chars)} distinct; evaluation: {scored}"
        + (
            f" (fewer than the {config.eval_chars:,} asked for: {n} whole windows of {longest} fit in the "
            "validation text)"
            if capped
            else ""
        )
    )


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
    n = _chunk_count(val_ids.numel(), config)
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
    model: torch.nn.Module,
    chunks: torch.Tensor,
    eval_len: int,
    train_len: int,
    device: torch.device,
    parallel: Ranks | None = None,
) -> LengthResult:
    """Mean cross-entropy over windows of ``eval_len`` cut from the validation chunks.

    Args:
        model: ids ``(b, t)`` -> logits ``(b, t, vocab)``.
        chunks: ``(n, longest + 1)`` validation ids (see :func:`_eval_chunks`).
        eval_len: the window length ``t``; ``(longest + 1 - 1) // eval_len`` windows per chunk.
        train_len: positions from here on are also scored apart (``loss_beyond``).
        device: where the model runs.
        parallel: this process's rank when evaluating data-parallel: it scores its part of every
            batch, and the ranks' loss sums and counts are added up (the same result on every rank).

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
    losses = [torch.zeros(0, eval_len, dtype=torch.float64)]
    for i in range(0, inputs.shape[0], batch):
        rows = slice(i, min(i + batch, inputs.shape[0]))
        if parallel is not None:  # this rank's part of the batch (maybe none of a short one)
            part = parallel.rows(rows.stop - rows.start)
            rows = slice(i + part.start, i + part.stop)
            if rows.start == rows.stop:
                continue
        logits = model(inputs[rows].to(device))
        loss = F.cross_entropy(
            logits.float().flatten(0, 1), targets[rows].to(device).flatten(), reduction="none"
        )
        losses.append(loss.view(-1, eval_len).cpu().double())
    loss = torch.cat(losses)
    if parallel is not None:
        return parallel.scores(loss, eval_len, train_len, inputs.numel())
    mean = float(loss.mean())
    result = LengthResult(eval_len, inputs.numel(), loss=mean, perplexity=math.exp(mean))
    if eval_len > train_len:
        beyond = float(loss[:, train_len:].mean())
        result.loss_beyond, result.perplexity_beyond = beyond, math.exp(beyond)
    return result


def _length_limit(model: torch.nn.Module) -> int | None:
    """The longest sequence ``model`` can encode: the smallest ``max_len`` of its fixed-size tables.

    ``None`` when it has none. A fixed-size table is an encoding whose ``max_len`` option is
    required (:func:`~posenc.app.study.plan.has_fixed_length`, the rule :func:`encoding_plan` uses).
    """
    limits = [
        max_len
        for module in model.modules()
        if isinstance(module, PositionalEncoding)
        and isinstance(max_len := getattr(module, "max_len", None), int)
        and has_fixed_length(describe(type(module)))
    ]
    return min(limits, default=None)


def environment(config: StudyConfig, parallel: Ranks | None = None) -> dict[str, Any]:
    """posenc, Python, torch, platform, thread count and process count, recorded beside every result."""
    return {
        "posenc": posenc.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "threads": torch.get_num_threads() if config.threads is None else config.threads,
        "processes": 1 if parallel is None else parallel.world_size,
    }


def versions() -> dict[str, str]:
    """posenc's and torch's versions, recorded in every checkpoint's ``meta`` (a resume compares them)."""
    return {"posenc": posenc.__version__, "torch": str(torch.__version__)}  # (plain str: weights_only loads)


def _check_versions(saved: dict[str, Any], path: Any, command: str) -> None:
    """Refuse to resume into results (their ``environment``, read from ``path``) that another posenc or
    torch made: their rows would be merged with this run's as if one version had measured them all."""
    now = versions()
    then = {key: saved.get(key) or "not recorded" for key in now}
    if then != now:
        changed = "; ".join(
            f"{key} {then[key]} there, {now[key]} now" for key in now if then[key] != now[key]
        )
        raise ConfigError(
            f"resume: {str(path)[:200]!r} was made by another version ({changed}); resume with the versions "
            f"that made it, use another folder, or start over (posenc {command} --force)",
            argument="resume",
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
    return tqdm(total=total, desc=label, unit="step", leave=True, dynamic_ncols=True)
