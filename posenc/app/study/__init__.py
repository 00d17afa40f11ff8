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

    from posenc.app.plots import plot_extrapolation
    from posenc.app.study import Corpus, run_study

    corpus = Corpus.from_path("my_notes.txt")          # or Corpus.standard_library()
    result = run_study(corpus, ["rope", "alibi", "learned"], train_len=64, eval_lens=[64, 256])
    print(result.table())
    result.save("runs/my_text")                         # results.json, results.csv
    plot_extrapolation(result, "runs/my_text/extrapolation.png")  # needs matplotlib

The modules: :mod:`~posenc.app.study.config` (:class:`StudyConfig`, :class:`ConfigError`),
:mod:`~posenc.app.study.corpus` (:class:`Corpus`), :mod:`~posenc.app.study.plan` (which encodings
run, :func:`split_specs`), :mod:`~posenc.app.study.extrapolate` (:func:`run_study`; the model and training loop are in
:mod:`~posenc.app.study.training`), :mod:`~posenc.app.study.extend` (:func:`run_extend`) and
:mod:`~posenc.app.study.results` (:class:`StudyResult` and its table and files); the output folder
(one run at a time, what it holds, never read as corpus) is :mod:`~posenc.app.study.outdir`. Every name below
is importable from ``posenc.app.study``; each module is imported on first use, so reading
:class:`StudyConfig` (as ``posenc --help`` does) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what __getattr__ below provides, for type checkers and IDEs
    from .config import METHODS, ConfigError, ExtendConfig, StudyConfig
    from .corpus import SPLIT_BLOCK_CHARS as SPLIT_BLOCK_CHARS
    from .corpus import VALIDATION_EVERY as VALIDATION_EVERY
    from .corpus import Corpus
    from .extend import run_extend, scaling_for
    from .extend_results import ExtendResult, ExtendRow
    from .extrapolate import run_study
    from .plan import EncodingChoice, default_encodings, encoding_plan, split_specs
    from .results import EncodingResult, LengthResult, StudyResult

__all__ = [
    "METHODS",
    "ConfigError",
    "Corpus",
    "EncodingChoice",
    "EncodingResult",
    "ExtendConfig",
    "ExtendResult",
    "ExtendRow",
    "LengthResult",
    "StudyConfig",
    "StudyResult",
    "default_encodings",
    "encoding_plan",
    "run_extend",
    "run_study",
    "scaling_for",
    "split_specs",
]

#: The module of each name this package exports.
_HOME = {
    "ConfigError": "config",
    "StudyConfig": "config",
    "Corpus": "corpus",
    "SPLIT_BLOCK_CHARS": "corpus",
    "VALIDATION_EVERY": "corpus",
    "EncodingChoice": "plan",
    "default_encodings": "plan",
    "encoding_plan": "plan",
    "split_specs": "plan",
    "EncodingResult": "results",
    "LengthResult": "results",
    "StudyResult": "results",
    "run_study": "extrapolate",
    "METHODS": "config",
    "ExtendConfig": "config",
    "run_extend": "extend",
    "scaling_for": "extend",
    "ExtendResult": "extend_results",
    "ExtendRow": "extend_results",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
