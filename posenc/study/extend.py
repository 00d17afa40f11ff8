"""Context extension of a RoPE model: which scaling method works at 2×, 4×, 8× the trained length.

One small causal character-level RoPE :class:`~posenc.nn.TransformerLM` is trained at
``train_len`` (or loaded); then each method — no scaling, position interpolation (Chen et
al., 2023), static NTK-aware scaling, dynamic NTK, YaRN (Peng et al., 2023), Llama 3's rule,
LongRoPE (Ding et al., 2024) — replaces only the model's RoPE scaling dict and is scored at
every evaluation length zero-shot, and again after ``finetune_steps`` steps at the longest
length. Every method gets the same weights, seed, batches and fine-tuning budget.

Python API (the ``posenc extend`` command runs the same)::

    from posenc.study import Corpus, ExtendConfig, run_extend

    config = ExtendConfig(train_len=64, eval_lens=(64, 128, 256), steps=300, finetune_steps=50)
    result = run_extend(Corpus.from_path("my_notes.txt"), config, out_dir="runs/extend")
    print(result.table())
"""

from __future__ import annotations

import copy
import hashlib
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from .._checks import check_bool
from ..functional.rope_scaling import ROPE_TYPES, rope_inv_freq, yarn_inv_freq
from .checkpoint import check_writable, load_checkpoint
from .config import METHODS, ConfigError, ExtendConfig
from .corpus import Corpus

# The base model (trained, resumed or loaded) lives in ``extend_base``; re-exported here, where it
# was first defined.
from .extend_base import (  # noqa: F401
    _base_model,
    _config_of_loaded,
    _file_name,
    _LoadedVocabulary,
    _train_settings,
)
from .extend_results import ExtendResult, ExtendRow
from .parallel import Ranks, joined, main_process, spawn, wants_spawn
from .training import (
    _check_specs,
    _deterministic,
    _eval_chunks,
    _evaluate,
    _length_limit,
    _progress_bar,
    _Vocabulary,
    environment,
    train_steps,
)

__all__ = ["METHODS", "ExtendConfig", "run_extend", "scaling_for"]


def scaling_for(method: str, factor: float, train_len: int, rotary_dim: int, base: float = 10000.0) -> Any:
    """The RoPE ``scaling`` dict (Hugging Face keys) of ``method``, or ``None`` for no scaling.

    ``llama3`` uses Llama 3.1's ``low_freq_factor`` 1 and ``high_freq_factor`` 4. ``longrope``
    needs per-pair factors that LongRoPE finds by an evolutionary search; without a search,
    the default here is the paper's YaRN-shaped starting point: short factors all 1 (no
    change up to ``train_len``), long factors ``λ_i = θ_i / θ'_i`` with ``θ'`` YaRN's
    frequencies (1 for the fast pairs, ``factor`` for the slow ones, a ramp between), and
    LongRoPE's own attention factor ``sqrt(1 + ln(factor) / ln(train_len))``. Pass your own
    dict to :func:`run_extend` (``scalings=``) to run searched factors.
    """
    original = {"original_max_position_embeddings": train_len}
    if method == "none":
        return None
    if method in ("linear", "dynamic"):
        return {"rope_type": method, "factor": factor}
    if method == "ntk":
        return {"rope_type": "ntk", "factor": factor}
    if method == "yarn":
        return {"rope_type": "yarn", "factor": factor, **original}
    if method == "llama3":
        return {
            "rope_type": "llama3",
            "factor": factor,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            **original,
        }
    if method == "longrope":
        plain = rope_inv_freq(rotary_dim, base)
        long = (plain / yarn_inv_freq(rotary_dim, base, factor, train_len)).tolist()
        return {
            "rope_type": "longrope",
            "factor": factor,
            "short_factor": [1.0] * (rotary_dim // 2),
            "long_factor": [round(x, 6) for x in long],
            **original,
        }
    raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")


def _with_scaling(model: Any, scaling: Any) -> Any:
    """A copy of the RoPE ``model`` whose encoding has ``scaling`` (its weights untouched)."""
    from ..encodings.rotary import RoPE

    rope = model.encoding
    scaled = copy.deepcopy(model)
    scaled.encoding = RoPE(
        rope.head_dim,
        base=rope.base,
        layout=rope.layout,
        rotary_dim=rope.rotary_dim,
        scaling=scaling,
        max_len=model.max_len,
    ).to(next(model.parameters()).device)
    return scaled


def run_extend(
    corpus: Corpus | str | Path | None = None,
    config: ExtendConfig | None = None,
    *,
    out_dir: str | Path | None = None,
    resume: bool = False,
    model_path: str | Path | None = None,
    scalings: dict[str, Any] | None = None,
    progress: bool = True,
    log: Any = None,
) -> ExtendResult:
    """Train (or load) a RoPE model at ``train_len`` and score every method at every length.

    Args:
        corpus: a :class:`Corpus`, a path, or ``None`` for the Python standard library.
        config: an :class:`ExtendConfig` (default settings when ``None``).
        out_dir: where the base model (``base.pt``), baseline models and, on return, nothing else is
            written; ``None`` keeps everything in memory.
        resume: reuse ``out_dir``'s ``base.pt`` and baseline models when they were trained with the
            same settings and corpus (else they are trained and saved).
        model_path: a checkpoint to load as the base model instead of training; its sizes and
            training length replace the config's.
        scalings: per method, a scaling dict that replaces :func:`scaling_for`'s (e.g. searched
            LongRoPE factors).
        progress: tqdm bars on stderr.
        log: a callable taking one line of text, or ``None``.

    Data-parallel with ``config.nproc > 1`` or under ``torchrun``, as :func:`run_study`: every
    training and fine-tuning batch split across the processes, rank 0 writing and logging.

    Raises:
        ConfigError: a bad setting, corpus, baseline, checkpoint or output folder, before training.
    """
    from ..nn import TransformerLM

    config = ExtendConfig() if config is None else config
    if not isinstance(config, ExtendConfig):
        raise TypeError(f"config must be an ExtendConfig, got {type(config).__name__}")
    check_bool("resume", resume)
    # One process speaks: rank 0 under torchrun, and not this one when it is about to spawn the ranks.
    quiet = log is None or not main_process() or wants_spawn(config)
    say = (lambda line: None) if quiet else log
    out = None if out_dir is None else check_writable(out_dir)
    loaded = None
    if model_path is not None:
        loaded = load_checkpoint(model_path)
        config = _config_of_loaded(loaded[0], config, str(model_path))
    methods = [m for m in config.methods if m != "ntk" or "ntk" in ROPE_TYPES]
    for m in set(config.methods) - set(methods):
        say(f"method {m!r} skipped: this posenc's RoPE has no {m!r} rope type")
    baselines = _check_specs(list(config.baselines), config) if config.baselines else []
    for label, spec in baselines:
        if _length_limit(TransformerLM(2, 8, 1, 1, position=spec, max_len=config.train_len)) is not None:
            raise ConfigError(
                f"baselines: {label[:60]!r} has a fixed-size position table and cannot run past train_len",
                argument="baselines",
            )
    given = scalings
    scalings = {
        m: (scalings or {}).get(m, scaling_for(m, config.scale_factor, config.train_len, config.head_dim))
        for m in methods
    }
    for m, scaling in scalings.items():  # every dict checked before any training
        try:
            from ..encodings.rotary import RoPE

            RoPE(config.head_dim, scaling=scaling, max_len=config.train_len)
        except (TypeError, ValueError) as err:
            raise ConfigError(
                f"methods: {m}: {' '.join(str(err).split())[:300]}", argument="methods"
            ) from err
    if isinstance(corpus, (str, Path)):
        corpus = Corpus.from_path(corpus)
    corpus = Corpus.standard_library() if corpus is None else corpus

    start = time.perf_counter()
    train_text, val_text = corpus.split()
    vocab = _Vocabulary(corpus.text) if loaded is None else _LoadedVocabulary(loaded[1], corpus)
    train_ids, val_ids = vocab.encode(train_text), vocab.encode(val_text)
    longest = config.eval_lens[-1]
    if train_ids.numel() < longest + 2:
        raise ConfigError(
            f"corpus: the training text has {train_ids.numel()} characters; fine-tuning at length {longest} "
            f"needs at least {longest + 2}",
            argument="corpus",
        )
    chunks = _eval_chunks(val_ids, config)
    corpus_info = {
        "source": corpus.source,
        "files": corpus.num_files,
        "characters": len(corpus.text),
        "sha256": hashlib.sha256(corpus.text.encode()).hexdigest(),
        "train_characters": len(train_text),
        "validation_characters": len(val_text),
        "vocabulary": len(vocab.chars),
    }
    summary = (
        f"corpus: {corpus.source}: {len(corpus.text):,} characters ({len(train_text):,} train, "
        f"{len(val_text):,} validation), {len(vocab.chars)} distinct; evaluation: about "
        f"{config.eval_chars:,} characters per length"
    )
    if wants_spawn(config):  # everything is checked: now the same call in nproc processes
        return spawn(
            run_extend,
            config.nproc,
            config.device,
            corpus,
            config,
            out_dir=out_dir,
            resume=resume,
            model_path=model_path,
            scalings=given,
            progress=progress,
            log=log,
        )
    with joined(config) as parallel:
        main = parallel is None or parallel.is_main
        device = torch.device(config.device)
        if parallel is not None:  # the same plan on every rank, or their collectives would not match
            parallel.batch_slice(
                max(1, config.batch_size * config.train_len // longest), "the fine-tuning batch"
            )
            parallel.check_same("the plan", (asdict(config), corpus_info, scalings, baselines))
            device = parallel.device
        return _run(
            config,
            summary + ("" if parallel is None else f"; {parallel.world_size} processes, DDP"),
            vocab,
            train_ids,
            chunks,
            corpus_info,
            methods,
            baselines,
            scalings,
            loaded,
            model_path,
            out,
            resume,
            progress and main,
            say,
            device,
            parallel,
            start,
        )


def _run(
    config: ExtendConfig,
    summary: str,
    vocab: Any,
    train_ids: torch.Tensor,
    chunks: torch.Tensor,
    corpus_info: dict[str, Any],
    methods: list[str],
    baselines: list[tuple[str, Any]],
    scalings: dict[str, Any],
    loaded: Any,
    model_path: str | Path | None,
    out: Path | None,
    resume: bool,
    progress: bool,
    say: Any,
    device: torch.device,
    parallel: Ranks | None,
    start: float,
) -> ExtendResult:
    """:func:`run_extend` once everything is checked: train, fine-tune and score (each rank's part)."""
    say(summary)
    longest = config.eval_lens[-1]
    meta = {**_train_settings(config), "corpus_sha256": corpus_info["sha256"]}
    rows: list[ExtendRow] = []
    total = len(methods) + len(baselines)
    with _deterministic(config.threads):
        if loaded is not None:
            base, base_info = loaded[0], {"how": f"loaded from {model_path}"}
        else:
            base, base_info = _base_model(
                "rope", config, vocab, train_ids, out, resume, meta, progress, say, device, parallel
            )
        base.to(device)

        def score(model: Any, label: str, k: int, baseline: bool) -> None:
            runs = [0, config.finetune_steps] if config.finetune_steps else [0]
            for steps in runs:
                if steps:
                    bar = _progress_bar(steps, f"[{k}/{total}] {label} fine-tune", progress)
                    train_steps(
                        model,
                        train_ids,
                        steps=steps,
                        seq_len=longest,
                        batch_size=max(1, config.batch_size * config.train_len // longest),
                        lr=config.finetune_lr or config.lr / 3,
                        seed=config.seed + 1,
                        device=device,
                        bar=bar,
                        parallel=parallel,
                    )
                    if bar is not None:
                        bar.close()
                with torch.inference_mode():
                    for n in config.eval_lens:
                        r = _evaluate(model, chunks, n, config.train_len, device, parallel)
                        # every model here runs at any length (fixed-size tables were refused above)
                        rows.append(
                            ExtendRow(label, steps, n, r.perplexity or 0.0, r.loss or 0.0, r.chars, baseline)
                        )
            say(f"[{k}/{total}] {label}: done")

        for k, m in enumerate(methods, 1):
            score(_with_scaling(base, scalings[m]), m, k, False)
        for k, (label, spec) in enumerate(baselines, len(methods) + 1):
            model, _ = _base_model(
                spec, config, vocab, train_ids, out, resume, meta, progress, say, device, parallel
            )
            score(model.to(device), "nope" if label == "none" else label, k, True)
    return ExtendResult(
        config=config,
        corpus=corpus_info,
        environment=environment(config, parallel),
        methods={**scalings, **{("nope" if label == "none" else label): spec for label, spec in baselines}},
        base=base_info,
        rows=rows,
        seconds=time.perf_counter() - start,
    )
