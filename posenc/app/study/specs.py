"""The study's check of the encodings it is given: every spec is built and run once on the
model's sizes, so that a bad one fails before any training.

Re-exported by :mod:`posenc.app.study.training`, where these were first defined.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any

import torch

from .config import LIMITS, ConfigError, StudyConfig
from .plan import split_specs

__all__ = ["check_spec_ints", "probe_spec"]


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


def build_study_model(
    spec: Any, vocab_size: int, config: StudyConfig, *, embed_scale: float | None = None
) -> Any:
    """A causal ``TransformerLM`` of the config's sizes whose layers use ``spec`` (not seeded)."""
    from posenc.nn import TransformerLM

    return TransformerLM(
        vocab_size,
        config.d_model,
        config.num_layers,
        config.num_heads,
        position=spec,
        max_len=config.train_len,
        causal=True,
        embed_scale=embed_scale,
    )


def probe_spec(spec: Any, config: StudyConfig) -> None:
    """Build ``spec`` into the study's model and run two tokens through it, or raise a ConfigError."""
    try:
        model = build_study_model(spec, 2, config)
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
