"""The study's settings and its one error type for bad input.

Imports no torch at module load (the device check imports it when a config is made), so the
``posenc`` command can read :class:`StudyConfig`'s defaults for ``--help`` cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from .. import _checks

__all__ = ["LIMITS", "METHODS", "ConfigError", "ExtendConfig", "StudyConfig", "check_limit"]

T = TypeVar("T")

#: Upper bounds on the settings that size an allocation (a model, a batch, a table): far above
#: what a CPU study needs, far below what fails in the allocator. A value past its bound is
#: refused with the bound named, before anything is built.
LIMITS: dict[str, int] = {
    "train_len": 1 << 16,
    "eval_lens": 1 << 16,
    "batch_size": 4096,
    "d_model": 8192,
    "num_layers": 256,
    "num_heads": 256,
    "eval_chars": 1 << 26,
    "threads": 1024,
    "nproc": 256,
    "tokens_per_step": 1 << 20,
    "block_weights": 1 << 28,
    # any integer option of an encoding spec (max_len, offset, max_distance, num_buckets, ...)
    "spec_int": 1 << 20,
}


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


def check_limit(name: str, value: int, limit_key: str | None = None) -> int:
    """``value`` if it is at most ``LIMITS[limit_key or name]``, else a :class:`ConfigError` naming the bound."""
    limit = LIMITS[limit_key or name.split("[")[0]]
    if value > limit:
        raise ConfigError(
            f"{name} must be at most {limit:,} (a bound on memory), got {_short(value)}",
            argument=name.split("[")[0],
        )
    return value


def _short(value: Any, width: int = 60) -> str:
    """``repr(value)``, cut to ``width`` characters with the total length said (never a huge echo)."""
    text = repr(value)
    return text if len(text) <= width else f"{text[: width - 20]}... ({len(text):,} characters)"


def _checked(check: str, name: str, value: Any, **options: Any) -> Any:
    """The application's ``check`` (a name in :mod:`posenc.app._checks`, which imports no torch) of
    ``value``, its ValueError re-raised as a :class:`ConfigError` (TypeError kept).
    """
    try:
        return getattr(_checks, check)(name, value, **options)
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
        nproc: processes that train and evaluate data-parallel (DistributedDataParallel: gloo
            on the CPU, nccl with one CUDA device per process); each takes ``batch_size / nproc``
            windows of every batch, so ``batch_size`` must divide by it. The numbers equal one
            process's up to float rounding (see :mod:`posenc.app.study.parallel`). Under
            ``torchrun`` the process count is torchrun's: leave ``nproc`` at 1 or give the same.

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
    nproc: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.eval_lens, (str, bytes)) or not hasattr(self.eval_lens, "__iter__"):
            raise TypeError(
                f"eval_lens must be a sequence of positive ints, got {self.eval_lens!r} "
                f"({type(self.eval_lens).__name__})"
            )
        object.__setattr__(self, "eval_lens", tuple(self.eval_lens))
        for key in ("train_len", "steps", "batch_size", "d_model", "num_layers", "num_heads", "eval_chars"):
            _checked("check_positive_int", key, getattr(self, key))
            if key in LIMITS:
                check_limit(key, getattr(self, key))
        if not self.eval_lens:
            raise ConfigError(
                "eval_lens must hold at least one evaluation length, e.g. (64, 128, 256, 512); got none",
                argument="eval_lens",
            )
        for i, n in enumerate(self.eval_lens):
            _checked("check_positive_int", f"eval_lens[{i}]", n)
            check_limit(f"eval_lens[{i}]", n)
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
        tokens = self.batch_size * self.train_len
        if tokens > LIMITS["tokens_per_step"]:
            raise ConfigError(
                f"batch_size * train_len must be at most {LIMITS['tokens_per_step']:,} tokens per step (a bound "
                f"on memory), got {self.batch_size} * {self.train_len} = {tokens:,}",
                argument="batch_size",
            )
        weights = 12 * self.d_model**2 * self.num_layers  # attention 4 d^2 + MLP 8 d^2 per block
        if weights > LIMITS["block_weights"]:
            raise ConfigError(
                f"d_model={self.d_model} with num_layers={self.num_layers} makes {weights:,} block weights; the "
                f"bound is {LIMITS['block_weights']:,} (memory)",
                argument="d_model",
            )
        _checked("check_positive_float", "lr", self.lr)
        _checked("check_int", "seed", self.seed, minimum=0)
        if self.threads is not None:
            _checked("check_positive_int", "threads", self.threads)
            check_limit("threads", self.threads)
        _check_device(self.device)
        _check_nproc(self.nproc, self.batch_size, self.device)


#: The methods, in the order they are run and shown. ``ntk`` runs where the installed RoPE has
#: the static NTK rope type.
METHODS: tuple[str, ...] = ("none", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope")


@dataclass(frozen=True)
class ExtendConfig(StudyConfig):
    """Settings of :func:`run_extend`: the base model's (:class:`StudyConfig`) plus the methods'.

    Args:
        methods: names from :data:`METHODS`, run in the order given.
        factor: the extension factor given to every method that takes one; ``None`` means
            ``max(eval_lens) / train_len``.
        finetune_steps: fine-tuning steps at the longest length per method (0: zero-shot only).
        finetune_lr: the fine-tuning peak learning rate; ``None`` means ``lr / 3``.
        baselines: encoding specs trained from scratch as reference rows (``("alibi", "none")``).

    The fine-tuning batches hold as many tokens as the training batches:
    ``max(1, batch_size * train_len // max(eval_lens))`` windows of the longest length.
    """

    methods: tuple[str, ...] = METHODS
    factor: float | None = None
    finetune_steps: int = 100
    finetune_lr: float | None = None
    baselines: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("methods", "baselines"):
            value = getattr(self, key)
            if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
                raise TypeError(f"{key} must be a sequence of str, got {type(value).__name__}")
            object.__setattr__(self, key, tuple(value))
        if not self.methods:
            raise ConfigError(f"methods must name at least one of {', '.join(METHODS)}", argument="methods")
        for m in self.methods:
            if m not in METHODS:
                raise ConfigError(
                    f"methods: unknown method {str(m)[:40]!r}; accepted: {', '.join(METHODS)}",
                    argument="methods",
                )
        if len(set(self.methods)) != len(self.methods):
            raise ConfigError(f"methods must be distinct, got {list(self.methods)}", argument="methods")
        if self.factor is not None:
            _checked("check_positive_float", "factor", self.factor)
        _checked("check_int", "finetune_steps", self.finetune_steps, minimum=0)
        if self.finetune_lr is not None:
            _checked("check_positive_float", "finetune_lr", self.finetune_lr)
        if self.nproc > 1 and self.finetune_steps:
            windows = max(1, self.batch_size * self.train_len // self.eval_lens[-1])
            if windows % self.nproc:
                raise ConfigError(
                    f"nproc={self.nproc} must divide the fine-tuning batch, max(1, batch_size * train_len // "
                    f"max(eval_lens)) = {windows} windows of length {self.eval_lens[-1]}; use a batch_size that "
                    f"makes it a multiple of {self.nproc}",
                    argument="nproc",
                )
        if self.head_dim < 4:
            raise ConfigError(
                f"d_model / num_heads = {self.head_dim}: the RoPE methods need a head width of at least 4",
                argument="d_model",
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def scale_factor(self) -> float:
        """The factor every method uses: ``factor``, or ``max(eval_lens) / train_len``."""
        return float(self.factor) if self.factor is not None else self.eval_lens[-1] / self.train_len


def _check_nproc(nproc: int, batch_size: int, device: str) -> None:
    """``nproc`` a positive int within its bound that divides ``batch_size``, on a device DDP runs on."""
    _checked("check_positive_int", "nproc", nproc)
    check_limit("nproc", nproc)
    if nproc == 1:
        return
    if batch_size % nproc:
        raise ConfigError(
            f"nproc={nproc} must divide batch_size={batch_size}: each process takes batch_size / nproc windows of "
            "every batch",
            argument="nproc",
        )
    import torch

    parsed = torch.device(device)
    if parsed.type == "cuda":
        if parsed.index is not None:
            raise ConfigError(
                f"device {_short(device)} with nproc={nproc}: process r runs on cuda:r; give device='cuda'",
                argument="device",
            )
        if nproc > torch.cuda.device_count():
            raise ConfigError(
                f"nproc={nproc} processes need as many CUDA devices, found {torch.cuda.device_count()}",
                argument="nproc",
            )
    elif parsed.type != "cpu":
        raise ConfigError(
            f"nproc={nproc} runs on 'cpu' (gloo) or 'cuda' (nccl), not on {_short(device)}", argument="nproc"
        )


#: Device types the study can train on, with the module whose ``is_available()`` says if it is here.
_DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu")


def _check_device(device: str) -> None:
    import torch  # here, not at the top: reading the defaults must not import torch

    if not isinstance(device, str):
        raise TypeError(f"device must be a str such as 'cpu' or 'cuda', got {type(device).__name__}")
    accepted = "accepted: 'cpu', or 'cuda', 'cuda:1', 'mps', 'xpu' where available"
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as err:
        raise ConfigError(
            f"device {_short(device)} is not a torch device; {accepted}", argument="device"
        ) from err
    if parsed.type not in _DEVICE_TYPES:
        # meta holds no data, and other backends (xla, ...) need their own runtime set up.
        raise ConfigError(
            f"device {_short(device)} cannot train the study's models (a {parsed.type} device); {accepted}",
            argument="device",
        )
    if parsed.type == "cpu":
        return
    backend = getattr(torch, parsed.type, None)
    if parsed.type == "mps":
        backend = getattr(torch.backends, "mps", None)
    if backend is None or not backend.is_available():
        raise ConfigError(
            f"device {_short(device)} requested, but {parsed.type.upper()} is not available here; use 'cpu'",
            argument="device",
        )
    count = getattr(backend, "device_count", None)
    if parsed.index is not None and count is not None and parsed.index >= count():
        raise ConfigError(
            f"device {_short(device)} requested, but only {count()} {parsed.type} device(s) exist",
            argument="device",
        )
