"""Running the extrapolation study: one model per encoding, saved and scored as each one finishes.

With ``out_dir``, each model is saved as a checkpoint (``model-<name>.pt``, the format of
:mod:`~posenc.app.study.checkpoint`) and ``results.json`` / ``results.csv`` are rewritten,
atomically, with every finished encoding: a crash or Ctrl-C loses at most the model in
training, and ``resume=True`` picks up from the saved results instead of training again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from .checkpoint import save_checkpoint
from .config import ConfigError, StudyConfig
from .corpus import Corpus
from .outdir import _check_force, _check_kind, hold, remove_study, study_kind
from .parallel import Ranks, joined, main_process, spawn, wants_spawn
from .plan import default_encodings
from .results import EncodingResult, StudyResult
from .specs import _check_specs
from .training import (
    _check_versions,
    _checked_split,
    _corpus_info,
    _corpus_summary,
    _deterministic,
    _eval_chunks,
    _evaluate,
    _kind_of,
    _progress_bar,
    _Vocabulary,
    environment,
    study_model,
    train_study_model,
    versions,
)

__all__ = ["checkpoint_name", "run_study"]


def run_study(
    corpus: Corpus | str | Path | None = None,
    encodings: Sequence[Any] | str | None = None,
    config: StudyConfig | None = None,
    *,
    out_dir: str | Path | None = None,
    resume: bool = False,
    force: bool = False,
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
        out_dir: a folder that receives, as each encoding finishes, its checkpoint
            (:func:`checkpoint_name`) and the results so far (``results.json``, ``results.csv``,
            both rewritten atomically; ``"pending"`` in the JSON lists the encodings not yet
            done); ``None`` writes nothing. The folder is held by this call alone
            (:func:`posenc.app.study.outdir.hold`): a second run into it is refused.
        resume: reuse the encodings already in ``out_dir``'s ``results.json`` instead of training
            them again; those not asked for now are kept in the results after the asked ones
            (merged, never dropped). The file must come from the same settings and corpus, else
            a :class:`ConfigError`. Without ``resume`` the folder's results are replaced (a folder
            holding an extend study, or a results.json of something else, is refused unless ``force``).
        force: first remove the files of the study ``out_dir`` holds
            (:func:`posenc.app.study.outdir.remove_study`), once every check has passed (a refused
            run leaves them); not with ``resume``.
        progress: show a tqdm progress bar per encoding (on stderr), with "k/n" overall.
        log: a callable taking one line of text (e.g. ``print``) for the corpus summary and
            each finished encoding, or ``None``.

    Data-parallel (``nproc > 1``, or under ``torchrun``): see :mod:`posenc.app.study.parallel`.
    With ``nproc > 1`` and no process group, this call checks everything, then runs itself in
    ``nproc`` spawned processes (so a script calling it needs ``if __name__ == "__main__":``)
    and returns rank 0's result: ``corpus`` and ``encodings`` reach every rank by pickle, and
    rank 0's log lines come back to ``log`` here. Only rank 0 writes ``out_dir`` and logs.

    Returns:
        A :class:`StudyResult`; ``.table()`` formats it, ``.save(dir)`` writes the data files and
        :func:`posenc.app.plots.plot_extrapolation` draws it.

    Raises:
        ConfigError: a bad setting, corpus, encoding or output folder, or results to resume that
            were made with other settings, before any training starts.
        TypeError: both ``config`` and ``settings``, or a setting of the wrong type.
    """
    if config is None:
        config = StudyConfig(**settings)
    elif settings:
        raise TypeError(f"run_study: pass either config or settings, not both (got {sorted(settings)})")
    if not isinstance(resume, bool):
        raise TypeError(f"resume must be a bool, got {resume!r} ({type(resume).__name__})")
    if resume and out_dir is None:
        raise ConfigError("resume=True needs out_dir, the folder holding the results", argument="resume")
    _check_force(force, resume)
    specs = _check_specs(default_encodings() if encodings is None else encodings, config)
    if corpus is None:
        corpus = Corpus.standard_library()
    elif isinstance(corpus, (str, Path)):  # never the output folder, even when it lies inside
        corpus = Corpus.from_path(corpus, exclude=() if out_dir is None else (out_dir,))
    train_text, val_text = check_corpus(corpus, config)
    # Every option is checked: now the folder, held by this run alone (the process that spawns
    # the ranks, or rank 0 under torchrun; a spawned rank runs inside its parent's hold).
    with contextlib.ExitStack() as stack:
        out = None
        if out_dir is not None:
            lock = main_process() and not (dist.is_available() and dist.is_initialized())
            out = stack.enter_context(hold(out_dir, lock=lock))
            if not resume:  # (resuming, the results are checked as such)
                _check_kind(out, "extrapolate", force)
        return _study(corpus, train_text, val_text, specs, config, out, out_dir, resume, force, progress, log)


def check_corpus(corpus: Corpus, config: StudyConfig) -> tuple[str, str]:
    """``corpus.split()`` (training, validation text), or a ConfigError when either is too short for ``config``.

    Lengths only, so ``posenc extrapolate`` checks it before it prints its plan.
    """
    return _checked_split(corpus, config, config.train_len, f"train_len={config.train_len}")


def _study(
    corpus: Corpus,
    train_text: str,
    val_text: str,
    specs: list[tuple[str, Any]],
    config: StudyConfig,
    out: Path | None,
    out_dir: str | Path | None,
    resume: bool,
    force: bool,
    progress: bool,
    log: Any,
) -> StudyResult:
    """:func:`run_study` once its options are checked and its folder is held."""
    device = torch.device(config.device)

    vocab = _Vocabulary(corpus.text)
    train_ids, val_ids = vocab.encode(train_text), vocab.encode(val_text)
    chunks = _eval_chunks(val_ids, config)
    corpus_info = _corpus_info(corpus, train_text, val_text, vocab)
    done = _resumable(out, config, corpus_info) if resume and out is not None else {}
    # Finished encodings of the earlier run that are not asked for now: kept in the results, never dropped.
    asked = {label for label, _ in specs}
    kept = [result for label, result in done.items() if label not in asked]
    if wants_spawn(config):  # everything is checked: now the same call in nproc processes
        return spawn(
            run_study,
            config.nproc,
            config.device,
            corpus,
            [spec for _, spec in specs],
            config,
            out_dir=out_dir,
            resume=resume,
            force=force,
            progress=progress,
            log=log,
        )
    with joined(config) as parallel:
        main = parallel is None or parallel.is_main
        if parallel is not None:  # the ranks must run the same plan, or their collectives would not match
            parallel.check_same(
                "the plan", (_settings(config), corpus_info, [label for label, _ in specs], done)
            )
            device = parallel.device
        if force and out is not None and main:  # every check has passed: now the earlier study goes
            remove_study(out)
        say = log if log is not None and main else (lambda line: None)
        say(
            _corpus_summary(corpus, train_text, val_text, vocab, config)
            + ("" if parallel is None else f"; {parallel.world_size} processes, DDP")
        )
        if kept:
            say(
                f"kept from {out / 'results.json' if out else ''} (not asked for this time): "
                + ", ".join(e.label for e in kept)
            )
        env = environment(config, parallel)
        finished: dict[str, EncodingResult] = {}
        n = len(specs)
        with _deterministic(config.threads):
            for k, (label, spec) in enumerate(specs, 1):
                if label in done:
                    finished[label] = done[label]
                    say(f"[{k}/{n}] {label}: reused from {out / 'results.json' if out else ''}")
                    continue
                result, model = _train_and_evaluate(
                    label,
                    spec,
                    len(vocab.chars),
                    train_ids,
                    chunks,
                    config,
                    device,
                    progress and main,
                    f"[{k}/{n}]",
                    parallel,
                )
                finished[label] = result
                saved = ""
                if out is not None and main:
                    if isinstance(spec, (str, dict)):  # a built module is not plain data: no checkpoint
                        meta = {**_settings(config), "corpus_sha256": corpus_info["sha256"], "label": label}
                        meta |= versions()
                        path = out / checkpoint_name(label)
                        save_checkpoint(path, model, vocab=vocab.chars, position=spec, meta=meta)
                        saved = f"; saved {path.name}"
                    _partial(config, corpus_info, specs, finished, env, kept).save(out)
                say(
                    f"[{k}/{n}] {label}: trained in {result.train_seconds:.0f} s, scored in "
                    f"{result.eval_seconds:.0f} s{saved}"
                )
    return StudyResult(config, corpus_info, [*(finished[label] for label, _ in specs), *kept], env)


def checkpoint_name(label: str) -> str:
    """The file name of the checkpoint of the encoding ``label`` in the study's folder.

    ``model-rope.pt`` for a plain name; a spec with options keeps its letters and digits and
    gains 8 hex digits of its SHA-256, so two specs never share a file
    (``model-rope_base_500000.0_-1a2b3c4d.pt``).
    """
    import re

    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("._")[:60] or "encoding"
    if safe != label:
        safe += "-" + hashlib.sha256(label.encode()).hexdigest()[:8]
    return f"model-{safe}.pt"


def _settings(config: StudyConfig) -> dict[str, Any]:
    """``config`` as plain JSON data (tuples as lists), as ``results.json`` holds it."""
    plain: dict[str, Any] = json.loads(json.dumps(asdict(config)))
    return plain


def _partial(
    config: StudyConfig,
    corpus_info: dict[str, Any],
    specs: list[tuple[str, Any]],
    finished: dict[str, EncodingResult],
    env: dict[str, Any],
    kept: Sequence[EncodingResult] = (),
) -> StudyResult:
    done = [finished[label] for label, _ in specs if label in finished]
    pending = [label for label, _ in specs if label not in finished]
    return StudyResult(config, corpus_info, [*done, *kept], env, pending=pending)


def _resumable(out: Path, config: StudyConfig, corpus_info: dict[str, Any]) -> dict[str, EncodingResult]:
    """The finished encodings of ``out/results.json``, by label; a ConfigError if made otherwise."""
    path = out / "results.json"
    if not path.is_file():
        return {}
    kind = study_kind(out)
    if kind == "extend":
        raise ConfigError(
            f"resume: {str(path)[:200]!r} holds the results of posenc extend, not of an extrapolation study; use "
            "another folder",
            argument="resume",
        )
    try:
        saved = StudyResult.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, KeyError, TypeError) as err:  # a file that is not a study's results
        raise ConfigError(
            f"resume: {str(path)[:200]!r} cannot be read as study results ({type(err).__name__}); use another "
            "folder, or start over (posenc extrapolate --force)",
            argument="resume",
        ) from None
    _check_versions(saved.environment, path, "extrapolate")
    now, then = _settings(config), _settings(saved.config)
    # The process count changes no result (beyond float rounding): a study may resume with another.
    changed = [
        f"{key} {then[key]!r} there, {now[key]!r} now"
        for key in now
        if key != "nproc" and now[key] != then.get(key)
    ]
    if saved.corpus.get("sha256") != corpus_info["sha256"]:
        changed.append("another corpus text")
    if changed:
        raise ConfigError(
            f"resume: {str(path)[:200]!r} was made with other settings ({'; '.join(changed)[:300]}); resume with "
            "the same settings and corpus, use another folder, or start over (posenc extrapolate --force)",
            argument="resume",
        )
    return {e.label: e for e in saved.encodings}


def _train_and_evaluate(
    label: str,
    spec: Any,
    vocab_size: int,
    train_ids: torch.Tensor,
    chunks: torch.Tensor,
    config: StudyConfig,
    device: torch.device,
    progress: bool,
    counter: str,
    parallel: Ranks | None = None,
) -> tuple[EncodingResult, torch.nn.Module]:
    model = study_model(spec, vocab_size, config).to(device)
    short = label if len(label) <= 30 else f"{label[:27]}..."  # a bar's label leaves room for the bar
    bar = _progress_bar(config.steps, f"{counter} {short}", progress)
    start = time.perf_counter()
    loss_value = train_study_model(model, train_ids, config, device=device, bar=bar, parallel=parallel)
    train_seconds = time.perf_counter() - start

    start = time.perf_counter()
    lengths = []
    with torch.inference_mode():
        for n in config.eval_lens:
            if bar is not None:
                bar.set_postfix(loss=f"{loss_value:.3f}", eval=n)
            lengths.append(_evaluate(model, chunks, n, config.train_len, device, parallel))
    eval_seconds = time.perf_counter() - start
    if bar is not None:
        bar.close()
    result = EncodingResult(
        label=label,
        kind=_kind_of(spec),
        parameters=sum(p.numel() for p in model.parameters()),
        final_train_loss=loss_value,
        train_seconds=round(train_seconds, 2),
        eval_seconds=round(eval_seconds, 2),
        lengths=lengths,
    )
    return result, model
