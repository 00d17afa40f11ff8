"""The base model of a context-extension run (:mod:`posenc.app.study.extend`): trained at ``train_len``,
resumed from a checkpoint, or loaded from a given one.

Re-exported by :mod:`posenc.app.study.extend`, where these were first defined.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

import posenc

from .checkpoint import load_checkpoint, save_checkpoint
from .config import ConfigError, ExtendConfig, StudyConfig
from .corpus import Corpus
from .parallel import Ranks
from .training import _progress_bar, _Vocabulary, study_model, train_study_model

__all__: list[str] = []


def _train_settings(config: StudyConfig) -> dict[str, Any]:
    # (threads and device too: a base model trained with others is not bit for bit this run's)
    keys = (
        "train_len",
        "steps",
        "batch_size",
        "d_model",
        "num_layers",
        "num_heads",
        "lr",
        "seed",
        "threads",
        "device",
    )
    return {k: v for k, v in asdict(config).items() if k in keys}


def _base_model(
    spec: Any,
    config: ExtendConfig,
    vocab: Any,
    train_ids: torch.Tensor,
    out: Path | None,
    resume: bool,
    meta: dict[str, Any],
    progress: bool,
    say: Any,
    device: torch.device,
    parallel: Ranks | None,
    file: str | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Train the model of ``spec`` at ``train_len`` or, with ``resume``, load it from ``out`` (its ``file``:
    ``base.pt`` for the base model, a baseline's by default)."""

    label = _spec_key(spec)
    meta = {**meta, "spec": label}  # the full spec: a file is never taken for another spec's
    path = None if out is None else out / (file or _checkpoint_name(label))
    if resume and path is not None and path.is_file():
        model, chars, saved = load_checkpoint(path, argument="out_dir")
        if saved != meta or chars != vocab.chars:  # run_extend checked it first: another run wrote it since
            raise ConfigError(
                f"resume: {str(path)[:200]!r} was trained with other settings, text or spec; use another folder",
                argument="resume",
            )
        say(f"{spec}: reusing {path}")
        return model, {"how": f"resumed from {path}", "checkpoint": str(path)}
    model = study_model(spec, len(vocab.chars), config)
    model.to(device)
    bar = _progress_bar(config.steps, f"train {spec}", progress)
    start = time.perf_counter()
    loss = train_study_model(model, train_ids, config, device=device, bar=bar, parallel=parallel)
    if bar is not None:
        bar.close()
    info = {
        "how": "trained",
        "final_train_loss": loss,
        "train_seconds": round(time.perf_counter() - start, 2),
    }
    if path is not None:
        if parallel is None or parallel.is_main:  # one writer; every rank names the file
            save_checkpoint(path, model, vocab=vocab.chars, position=spec, meta=meta)
        info["checkpoint"] = str(path)
    return model, info


def _file_name(text: str) -> str:
    """``text`` as a file name: its letters and digits (at most 60), plus 8 hex digits of the
    SHA-256 of the whole text when anything was changed or cut, so two texts never share a name."""
    import hashlib
    import re

    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_.")[:60] or "model"
    if safe != text:
        safe += "-" + hashlib.sha256(text.encode()).hexdigest()[:8]
    return safe


def _spec_key(spec: Any) -> str:
    """The whole spec as text (a dict as sorted JSON): what names and identifies its checkpoint."""
    import json

    return spec.strip() if isinstance(spec, str) else json.dumps(spec, sort_keys=True, default=repr)


def _checkpoint_name(label: str) -> str:
    """The checkpoint file of a baseline's spec (never ``base.pt``: a loaded base model may be that file)."""
    return f"baseline-{_file_name(label)}.pt"


class _LoadedVocabulary(_Vocabulary):
    """A loaded model's vocabulary; a corpus character it does not know is an error, not a new id."""

    def __init__(self, chars: list[str], corpus: Corpus) -> None:
        self.chars = chars
        self.index = {c: i for i, c in enumerate(chars)}
        unknown = sorted(set(corpus.text) - set(chars))
        if unknown:
            raise ConfigError(
                f"corpus has {len(unknown)} character(s) the loaded model does not know, e.g. {unknown[:5]}; use "
                "the text the model was trained on",
                argument="corpus",
            )


def _config_of_loaded(model: Any, meta: dict[str, Any], config: ExtendConfig, path: str) -> ExtendConfig:
    """``config`` with the loaded model's sizes, training length and the training settings its checkpoint
    records (``meta``: steps, batch size, learning rate, seed); the model must be plain RoPE."""
    encoding = model.encoding
    # exactly RoPE: xPos, axial and M-RoPE are rotary with rope_type "default" too, but the methods
    # extend a 1-D rotation's frequencies and would silently mean something else for them
    if type(encoding) is not posenc.RoPE or encoding.rope_type != "default":
        raise ConfigError(
            f"model checkpoint {path[:200]!r} is not a plain RoPE model (its encoding: {type(encoding).__name__})",
            argument="model",
        )
    # each method replaces the scaling dict: a query scaling in it would be dropped (the rows measured on
    # another model than the one loaded)
    if encoding.params.query_scale_beta:
        raise ConfigError(
            f"model checkpoint {path[:200]!r} scales its queries by position (llama_4_scaling_beta), which the "
            "methods' scaling dicts would drop: extend a plain RoPE model",
            argument="model",
        )
    fields = {**asdict(config), "d_model": model.d_model, "num_layers": model.num_layers}
    fields.update(num_heads=model.num_heads, train_len=model.max_len)
    # (else the results and the figure gave this run's --steps, --lr and --seed as the loaded model's training)
    fields.update({key: meta[key] for key in ("steps", "batch_size", "lr", "seed") if key in meta})
    return ExtendConfig(**fields)
