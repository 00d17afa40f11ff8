"""The study's settings and its one error type for bad input.

Imports no torch at module load (the device check imports it when a config is made), so the
``posenc`` command can read :class:`StudyConfig`'s defaults for ``--help`` cheaply.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from .._checks import check_int, check_positive_float, check_positive_int

__all__ = ["ConfigError", "StudyConfig"]

T = TypeVar("T")


class ConfigError(ValueError):
    """A bad study setting (lengths, steps, corpus, encodings): the user's input, not a bug.

    The message is one line that starts with the argument's name and says the value received
    and what is accepted, e.g. ``steps must be a positive int, got 0``. The ``posenc`` command
    prints it with its own flag names (``--steps``) and exits with code 2.

    Args:
        message: the one-line message.
        argument: the library argument it is about (``"steps"``, ``"eval_lens"``, ``"corpus"``,
            ``"encodings"``, ``"out_dir"``, ...), or ``None``.

    Attributes:
        argument: as given.
    """

    def __init__(self, message: str, *, argument: str | None = None) -> None:
        super().__init__(message)
        self.argument = argument


def _checked(check: Callable[..., T], name: str, value: Any, **options: Any) -> T:
    """``check(name, value)`` with its ValueError re-raised as a :class:`ConfigError` (TypeError kept)."""
    try:
        return check(name, value, **options)
    except ValueError as err:
        raise ConfigError(str(err), argument=name.split("[")[0]) from None


@dataclass(frozen=True)
class StudyConfig:
    """Settings of the study (the defaults are the ``posenc extrapolate`` defaults).

    Args:
        train_len: characters per training window (the training context length).
        eval_lens: evaluation lengths, distinct, each at least ``train_len`` (stored sorted).
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

    Raises:
        ConfigError: a value out of range (a ``ValueError``); the message starts with the
            setting's name, e.g. ``steps must be a positive int, got 0``.
        TypeError: a setting of the wrong type (``steps="3"``).
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
        if isinstance(self.eval_lens, (str, bytes)) or not hasattr(self.eval_lens, "__iter__"):
            raise TypeError(
                f"eval_lens must be a sequence of positive ints, got {self.eval_lens!r} "
                f"({type(self.eval_lens).__name__})"
            )
        object.__setattr__(self, "eval_lens", tuple(self.eval_lens))
        for key in ("train_len", "steps", "batch_size", "d_model", "num_layers", "num_heads", "eval_chars"):
            _checked(check_positive_int, key, getattr(self, key))
        if not self.eval_lens:
            raise ConfigError(
                "eval_lens must hold at least one evaluation length, e.g. (64, 128, 256, 512); got none",
                argument="eval_lens",
            )
        for i, n in enumerate(self.eval_lens):
            _checked(check_positive_int, f"eval_lens[{i}]", n)
            if n < self.train_len:
                raise ConfigError(
                    f"eval_lens: length {n} is below train_len={self.train_len}; evaluation lengths must be "
                    ">= the training length",
                    argument="eval_lens",
                )
        if len(set(self.eval_lens)) != len(self.eval_lens):
            raise ConfigError(f"eval_lens must be distinct, got {list(self.eval_lens)}", argument="eval_lens")
        object.__setattr__(self, "eval_lens", tuple(sorted(self.eval_lens)))
        if self.d_model % self.num_heads:
            raise ConfigError(
                f"d_model={self.d_model} must be divisible by num_heads={self.num_heads}", argument="d_model"
            )
        _checked(check_positive_float, "lr", self.lr)
        _checked(check_int, "seed", self.seed, minimum=0)
        if self.threads is not None:
            _checked(check_positive_int, "threads", self.threads)
        _check_device(self.device)


def _check_device(device: str) -> None:
    import torch  # here, not at the top: reading the defaults must not import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ConfigError(
            f"device {device!r} is not a torch device; accepted: e.g. 'cpu', 'cuda', 'cuda:1', 'mps'",
            argument="device",
        ) from err
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"device {device!r} requested, but CUDA is not available here; use 'cpu'", argument="device"
        )
    if parsed.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ConfigError(
            f"device {device!r} requested, but MPS is not available here; use 'cpu'", argument="device"
        )
