"""Context extension of a RoPE model: which scaling method works at 2×, 4×, 8× the trained length.

One small causal character-level RoPE :class:`~posenc.nn.TransformerLM` is trained at
``train_len`` (or loaded); then each method — no scaling, position interpolation (Chen et
al., 2023), static NTK-aware scaling, dynamic NTK, YaRN (Peng et al., 2023), Llama 3's rule,
LongRoPE (Ding et al., 2024) — replaces only the model's RoPE scaling dict and is scored at
every evaluation length zero-shot, and again after ``finetune_steps`` steps at the longest
length. Every method gets the same weights, seed, batches and fine-tuning budget.

Python API (the ``posenc extend`` command runs the same)::

    from posenc.app.study import Corpus, ExtendConfig, run_extend

    config = ExtendConfig(train_len=64, eval_lens=(64, 128, 256), steps=300, finetune_steps=50)
    result = run_extend(Corpus.from_path("my_notes.txt"), config, out_dir="runs/extend")
    print(result.table())
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from posenc.functional import ROPE_TYPES, YarnRope, rope_inv_freq

from .._checks import check_bool
from .checkpoint import load_checkpoint
from .config import METHODS, ConfigError, ExtendConfig
from .corpus import Corpus
from .extend_base import (
    _base_model,
    _checkpoint_name,
    _config_of_loaded,
    _LoadedVocabulary,
    _spec_key,
    _train_settings,
)
from .extend_results import ExtendResult, ExtendRow
from .outdir import _check_force, _check_kind, hold, remove_study, study_kind
from .parallel import Ranks, joined, main_process, spawn, wants_spawn
from .specs import _check_specs
from .training import (
    _check_versions,
    _checked_split,
    _corpus_info,
    _corpus_summary,
    _deterministic,
    _eval_chunks,
    _evaluate,
    _length_limit,
    _progress_bar,
    _Vocabulary,
    environment,
    train_steps,
    versions,
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
        yarn = YarnRope(
            rotary_dim=rotary_dim, base=base, factor=factor, original_max_len=train_len, attention_factor=1.0
        )
        long = (plain / yarn.inv_freq()[0]).tolist()
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
    from posenc import RoPE

    rope = model.encoding
    scaled = copy.deepcopy(model)
    scaled.encoding = RoPE(
        rope.head_dim,
        base=rope.base,
        layout=rope.layout,
        rotary_dim=rope.rotary_dim,
        rotary_offset=rope.rotary_offset,
        conjugate=rope.conjugate,
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
    force: bool = False,
    model_path: str | Path | None = None,
    scalings: dict[str, Any] | None = None,
    progress: bool = True,
    log: Any = None,
) -> ExtendResult:
    """Train (or load) a RoPE model at ``train_len`` and score every method at every length.

    Args:
        corpus: a :class:`Corpus`, a path, or ``None`` for the Python standard library.
        config: an :class:`ExtendConfig` (default settings when ``None``).
        out_dir: where the base model (``base.pt``), the baseline models and the results so far
            (``results.json``, ``results.csv``, rewritten after each method; ``"pending"`` lists
            the rest) are written; ``None`` keeps everything in memory. The folder is held by this
            call alone (:func:`posenc.app.study.outdir.hold`): a second run into it is refused.
        resume: continue the run in ``out_dir``: reuse its ``base.pt``, baseline models and the
            finished methods of its ``results.json``, and keep the rows of methods and baselines
            not asked for now (merged, never dropped). The folder must hold an extend study of
            the same settings, corpus and base model, else a :class:`ConfigError` before anything
            is written. Without ``resume`` the folder's files are replaced (a folder holding an
            extrapolation study, or a results.json of something else, is refused unless ``force``).
        force: first remove the files of the study ``out_dir`` holds (but ``model_path``:
            :func:`posenc.app.study.outdir.remove_study`), once every check has passed (a refused
            run leaves them); not with ``resume``.
        model_path: a checkpoint to load as the base model instead of training; its sizes and
            training settings (length, steps, batch size, learning rate, seed, as it records them)
            replace the config's.
        scalings: per method, a scaling dict that replaces :func:`scaling_for`'s (e.g. searched
            LongRoPE factors).
        progress: tqdm bars on stderr.
        log: a callable taking one line of text, or ``None``.

    Data-parallel with ``config.nproc > 1`` or under ``torchrun``, as :func:`run_study`: every
    training and fine-tuning batch split across the processes, rank 0 writing and logging.

    Raises:
        ConfigError: a bad setting, corpus, baseline, checkpoint or output folder, before training.
    """

    config = ExtendConfig() if config is None else config
    if not isinstance(config, ExtendConfig):
        raise TypeError(f"config must be an ExtendConfig, got {type(config).__name__}")
    check_bool("resume", resume)
    _check_force(force, resume)
    # One process speaks: rank 0 under torchrun, and not this one when it is about to spawn the ranks.
    quiet = log is None or not main_process() or wants_spawn(config)
    say = (lambda line: None) if quiet else log
    loaded = None
    if model_path is not None:
        loaded = load_checkpoint(model_path)
        config = _config_of_loaded(loaded[0], loaded[2], config, str(model_path))
    methods = [m for m in config.methods if m != "ntk" or "ntk" in ROPE_TYPES]
    for m in set(config.methods) - set(methods):
        say(f"method {m!r} skipped: this posenc's RoPE has no {m!r} rope type")
    baselines = _check_baselines(config)
    given = scalings
    # the rotation each method rescales: the loaded model's (its base, its rotated width), else the trained one's
    rope = None if loaded is None else loaded[0].encoding
    rotary_dim, base = (config.head_dim, 10000.0) if rope is None else (rope.rotary_dim, rope.base)
    scalings = {
        m: (scalings or {}).get(m, scaling_for(m, config.scale_factor, config.train_len, rotary_dim, base))
        for m in methods
    }
    for m, scaling in scalings.items():  # every dict checked before any training
        try:
            from posenc import RoPE

            RoPE(config.head_dim, base=base, rotary_dim=rotary_dim, scaling=scaling, max_len=config.train_len)
        except (TypeError, ValueError) as err:
            raise ConfigError(
                f"methods: {m}: {' '.join(str(err).split())[:300]}", argument="methods"
            ) from err
    if isinstance(corpus, (str, Path)):  # never the output folder, even when it lies inside
        corpus = Corpus.from_path(corpus, exclude=() if out_dir is None else (out_dir,))
    corpus = Corpus.standard_library() if corpus is None else corpus

    start = time.perf_counter()
    train_text, val_text = check_corpus(corpus, config)
    longest = config.eval_lens[-1]
    vocab = _Vocabulary(corpus.text) if loaded is None else _LoadedVocabulary(loaded[1], corpus)
    train_ids, val_ids = vocab.encode(train_text), vocab.encode(val_text)
    chunks = _eval_chunks(val_ids, config)
    corpus_info = _corpus_info(corpus, train_text, val_text, vocab)
    summary = _corpus_summary(corpus, train_text, val_text, vocab, config)
    meta = {**_train_settings(config), "corpus_sha256": corpus_info["sha256"], **versions()}
    # Every option is checked: now the folder, held by this run alone (the process that spawns
    # the ranks, or rank 0 under torchrun), and what it holds, before anything is written there.
    with contextlib.ExitStack() as stack:
        out = None
        if out_dir is not None:
            lock = main_process() and not (dist.is_available() and dist.is_initialized())
            out = stack.enter_context(hold(out_dir, lock=lock))
            if not resume:  # (resuming, the results are checked as such)
                _check_kind(out, "extend", force)
        previous = None
        if resume and out is not None:
            previous = _resumable(out, config, corpus_info)
            if previous is not None:  # before any training: the base model its rows were measured on
                _check_base(previous, loaded, out)
            files = [] if loaded is not None else [("base.pt", "rope")]
            for file, spec in files + [(_checkpoint_name(_spec_key(spec)), spec) for _, spec in baselines]:
                _check_checkpoint(out / file, spec, meta, vocab.chars)
        if wants_spawn(config):  # everything is checked: now the same call in nproc processes
            return spawn(
                run_extend,
                config.nproc,
                config.device,
                corpus,
                config,
                out_dir=out_dir,
                resume=resume,
                force=force,
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
            if force and out is not None and main:  # every check has passed: now the earlier study goes
                remove_study(out, keep=model_path)
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
                previous,
            )


def check_corpus(corpus: Corpus, config: ExtendConfig) -> tuple[str, str]:
    """``corpus.split()`` (training, validation text), or a ConfigError when either is too short for ``config``.

    The training text is read at the longest length when fine-tuning. Lengths only, so
    ``posenc extend`` checks it before it prints anything.
    """
    longest = config.eval_lens[-1]
    return _checked_split(corpus, config, longest, f"fine-tuning at length {longest}")


def _check_baselines(config: ExtendConfig) -> list[tuple[str, Any]]:
    """The baselines as ``(label, spec)``, each checked; errors name ``baselines``."""
    from posenc.nn import TransformerLM

    if not config.baselines:
        return []
    try:
        baselines = _check_specs(list(config.baselines), config)
    except ConfigError as err:
        message = str(err)
        if err.argument == "encodings":  # the shared spec check speaks of encodings
            message = "baselines" + message.removeprefix("encodings")
        raise ConfigError(message, argument="baselines") from err
    rows = [_row_label(label) for label, _ in baselines]
    if twice := next((row for row in rows if rows.count(row) > 1), None):
        raise ConfigError(
            f"baselines: {twice!r} is given twice ('none' and 'nope' are one encoding, one row)",
            argument="baselines",
        )
    for label, spec in baselines:
        if _length_limit(TransformerLM(2, 8, 1, 1, position=spec, max_len=config.train_len)) is not None:
            raise ConfigError(
                f"baselines: {label[:60]!r} has a fixed-size position table and cannot run past train_len",
                argument="baselines",
            )
    return baselines


#: The settings that may differ between a run and the one it resumes: which methods and baselines
#: run (the results are merged), and the process count (it changes no result beyond rounding).
_MAY_DIFFER = ("nproc", "methods", "baselines")


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _resumable(out: Path, config: ExtendConfig, corpus_info: dict[str, Any]) -> ExtendResult | None:
    """``out/results.json`` as an :class:`ExtendResult`, or ``None``; a ConfigError if made otherwise."""
    path = out / "results.json"
    kind = study_kind(out)
    if kind is None:
        return None
    start_over = "use another folder, or start over (posenc extend --force)"
    if kind != "extend":
        what = (
            "an extrapolation study (posenc extrapolate)"
            if kind == "extrapolate"
            else "no posenc extend study"
        )
        raise ConfigError(f"resume: {str(path)[:200]!r} holds {what}; {start_over}", argument="resume")
    try:
        saved = ExtendResult.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, KeyError, TypeError) as err:
        raise ConfigError(
            f"resume: {str(path)[:200]!r} cannot be read as extend results ({type(err).__name__}); {start_over}",
            argument="resume",
        ) from None
    _check_versions(saved.environment, path, "extend")
    now, then = _plain(asdict(config)), _plain(asdict(saved.config))
    changed = [
        f"{key} {then.get(key)!r} there, {now[key]!r} now"
        for key in now
        if key not in _MAY_DIFFER and now[key] != then.get(key)
    ]
    if saved.corpus.get("sha256") != corpus_info["sha256"]:
        changed.append("another corpus text")
    if "fingerprint" not in saved.base:
        changed.append("no record of its base model (made by an older posenc)")
    if changed:
        base = out / "base.pt"
        scoring_only = saved.corpus.get("sha256") == corpus_info["sha256"] and all(
            now[key] == then.get(key) for key in _train_settings(config)
        )
        hint = (
            f"; to score its base model with the new settings, load it into another folder (posenc extend "
            f"--model {str(base)[:200]!r} --out NEW)"
            if scoring_only and base.is_file()
            else ""
        )
        raise ConfigError(
            f"resume: {str(path)[:200]!r} was made with other settings ({'; '.join(changed)[:300]}); resume with "
            f"the same settings and corpus, {start_over}{hint}",
            argument="resume",
        )
    return saved


def _check_base(previous: ExtendResult, loaded: Any, out: Path) -> None:
    """Refuse to resume rows measured on a loaded model without it, before this run trains a base model.

    (Another base model than the rows' is refused once it is trained or loaded: :func:`_reusable`.)
    """
    how = str(previous.base.get("how", ""))
    if loaded is None and how.startswith("loaded from ") and not (out / "base.pt").is_file():
        raise ConfigError(
            f"resume: {str(out)[:200]!r}: its results were measured on the model {how[:200]}; resume with "
            "model_path (posenc extend --model) set to it, use another folder, or start over (posenc extend "
            "--force)",
            argument="resume",
        )


def _check_checkpoint(path: Path, spec: Any, meta: dict[str, Any], chars: list[str]) -> None:
    """Refuse the checkpoint at ``path`` where another run made it (other settings, text or spec)."""
    key = _spec_key(spec)
    if not path.is_file():
        return
    _, saved_chars, saved = load_checkpoint(path, argument="out_dir")
    expected = {**meta, "spec": key}
    if saved != expected or saved_chars != chars:
        changed = [
            f"{key} {saved.get(key)!r} there, {expected[key]!r} now"
            for key in expected
            if saved.get(key) != expected[key]
        ]
        if saved_chars != chars:
            changed.append("another corpus text")
        raise ConfigError(
            f"resume: {str(path)[:200]!r} was trained with other settings or versions ({'; '.join(changed)[:300]}); "
            "resume with the same settings, corpus and versions, use another folder, or start over (posenc extend "
            "--force)",
            argument="resume",
        )


def _fingerprint(model: Any) -> str:
    """The SHA-256 of a model's weights (which base model a row was measured on)."""
    digest = hashlib.sha256()
    for key, value in sorted(model.state_dict().items()):
        digest.update(key.encode())
        digest.update(value.detach().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


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
    previous: ExtendResult | None = None,
) -> ExtendResult:
    """:func:`run_extend` once everything is checked: train, fine-tune and score (each rank's part).

    With ``out``, the results so far are saved after each method (``pending`` lists the rest),
    so an interrupt loses at most the method being scored. With ``previous`` (the folder's
    results, same settings and base model), its finished methods are reused, and those not
    asked for now are kept in the results (merged, never dropped).
    """
    say(summary)
    longest = config.eval_lens[-1]
    meta = {**_train_settings(config), "corpus_sha256": corpus_info["sha256"], **versions()}
    main = parallel is None or parallel.is_main
    env = environment(config, parallel)
    specs: dict[str, Any] = {m: scalings[m] for m in methods}
    specs.update({_row_label(label): spec for label, spec in baselines})
    done: dict[str, list[ExtendRow]] = {}  # by row label: this run's rows, or reused ones
    total = len(specs)

    def trained(spec: Any, file: str | None = None) -> tuple[Any, dict[str, Any]]:
        """The model of ``spec`` trained (or, resuming, loaded from ``out``); ``file``: its checkpoint's name."""
        args = (config, vocab, train_ids, out, resume, meta, progress, say, device, parallel)
        return _base_model(spec, *args, file)

    with _deterministic(config.threads):
        if loaded is not None:
            base, base_info = loaded[0], {"how": f"loaded from {model_path}"}
        else:
            base, base_info = trained("rope", "base.pt")
        base_info["fingerprint"] = _fingerprint(base)
        reused, kept = _reusable(previous, base_info, specs, out)
        if previous is not None:  # the same base model (checked): its training record is kept, not dropped
            base_info = {**previous.base, **base_info}
        if parallel is not None:
            parallel.check_same("the results to reuse", (sorted(reused), sorted(kept)))
        merged = _merged_config(config, previous, kept)
        extra_specs = {label: previous.methods[label] for label in kept} if previous is not None else {}

        def result() -> ExtendResult:
            labels = [*methods, *(k for k, got in kept.items() if not got[0].baseline)]
            labels += [_row_label(label) for label, _ in baselines]
            labels += [k for k, got in kept.items() if got[0].baseline]
            rows = [r for label in labels for r in done.get(label, kept.get(label, []))]
            return ExtendResult(
                config=merged,
                corpus=corpus_info,
                environment=env,
                methods={**specs, **extra_specs},
                base=base_info,
                rows=rows,
                # (resumed: the earlier runs' time too, which the reused rows took)
                seconds=(previous.seconds if previous is not None else 0.0) + time.perf_counter() - start,
                pending=[label for label in specs if label not in done],
            )

        base.to(device)

        def score(model: Any, label: str, k: int, baseline: bool) -> None:
            if label in reused:
                done[label] = reused[label]
                say(f"[{k}/{total}] {label}: reused from {out / 'results.json' if out else ''}")
                return
            rows: list[ExtendRow] = []
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
            done[label] = rows
            if out is not None and main:
                result().save(out)
            say(f"[{k}/{total}] {label}: done")

        if kept:
            say(
                f"kept from {out / 'results.json' if out else ''} (not asked for this time): {', '.join(kept)}"
            )
        for k, m in enumerate(methods, 1):
            score(_with_scaling(base, scalings[m]) if m not in reused else None, m, k, False)
        for k, (label, spec) in enumerate(baselines, len(methods) + 1):
            if _row_label(label) in reused:
                score(None, _row_label(label), k, True)
                continue
            if label == "rope" and loaded is None:  # the base model is this baseline: trained once
                model = base
            else:
                model, _ = trained(spec)
            score(model.to(device), _row_label(label), k, True)
    return result()


def _row_label(label: str) -> str:
    """A baseline's name in the rows: ``none`` is ``nope`` (``none`` is the method without scaling)."""
    return "nope" if label == "none" else label


def _reusable(
    previous: ExtendResult | None, base_info: dict[str, Any], specs: dict[str, Any], out: Path | None
) -> tuple[dict[str, list[ExtendRow]], dict[str, list[ExtendRow]]]:
    """``(reused, kept)``: the earlier run's rows of the methods asked for now with the same scaling
    or spec, and of those not asked for now; both by row label. Refuses rows of another base model."""
    if previous is None:
        return {}, {}
    if previous.base.get("fingerprint") != base_info["fingerprint"]:
        raise ConfigError(
            f"resume: {str(out)[:200]!r}: its results were measured on another base model than "
            f"{base_info.get('checkpoint') or base_info['how']}; use another folder, or start over "
            "(posenc extend --force)",
            argument="resume",
        )
    rows: dict[str, list[ExtendRow]] = {}
    for r in previous.rows:
        rows.setdefault(r.method, []).append(r)
    finished = {label: got for label, got in rows.items() if label not in previous.pending}
    reused = {
        label: got
        for label, got in finished.items()
        if label in specs and _plain(previous.methods.get(label)) == _plain(specs[label])
    }
    kept = {label: got for label, got in finished.items() if label not in specs}
    return reused, kept


def _merged_config(config: ExtendConfig, previous: ExtendResult | None, kept: dict[str, Any]) -> ExtendConfig:
    """``config`` with the methods and baselines of the kept rows added after its own."""
    if previous is None or not kept:
        return config
    methods = [
        *config.methods,
        *(m for m in previous.config.methods if m in kept and m not in config.methods),
    ]
    baselines = [
        *config.baselines,
        *(b for b in previous.config.baselines if _row_label(b) in kept and b not in config.baselines),
    ]
    return dataclasses.replace(config, methods=tuple(methods), baselines=tuple(baselines))
