"""Saving and loading the study's models (each file written whole: :func:`posenc.app._files.atomic_write`).

A checkpoint is one ``torch.save`` file holding plain data only (loaded with
``weights_only=True``): the :class:`~posenc.nn.TransformerLM` arguments, the character
vocabulary, the embedding scale (``TransformerLM(embed_scale=...)``, see
:func:`posenc.app.study.training.fair_embed_scale`), what it was trained on (``meta``) and the
``state_dict``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from .._files import atomic_write
from .config import ConfigError

__all__ = ["FORMAT", "check_writable", "load_checkpoint", "save_checkpoint"]

#: The ``format`` entry of every checkpoint this module writes.
FORMAT = "posenc.study.checkpoint/1"


def check_writable(out_dir: str | Path, argument: str = "out_dir") -> Path:
    """Make ``out_dir`` (and its parents) and check a file can be written there, before any work.

    Raises:
        ConfigError: a path under a file, a read-only place (``/proc``), or no permission.
    """
    out = Path(out_dir).expanduser()
    shown = repr(str(out_dir)) if len(str(out_dir)) <= 200 else f"{str(out_dir)[:180]!r}..."
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{argument} {shown} exists and is not a folder", argument=argument)
    if out.is_symlink() and not out.exists():  # (mkdir would say "File exists")
        target = os.readlink(out)
        raise ConfigError(
            f"{argument} {shown} is a symbolic link to {target[:200]!r}, which does not exist; make that folder "
            "or give another",
            argument=argument,
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".posenc-write-test.", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise ConfigError(
            f"{argument} {shown} cannot be written: {reason}; give a writable folder", argument=argument
        ) from None
    return out


def save_checkpoint(
    path: str | Path,
    model: Any,
    *,
    vocab: list[str],
    position: Any,
    meta: dict[str, Any],
) -> Path:
    """Save a study model (atomically) to ``path``.

    Args:
        path: the file to write.
        model: a :class:`~posenc.nn.TransformerLM`.
        vocab: the characters, in id order.
        position: the spec the model was built with (a str or a dict of plain data).
        meta: plain data on how it was trained (settings, corpus fingerprint, final loss).
    """
    payload = {
        "format": FORMAT,
        "model": {
            "vocab_size": model.vocab_size,
            "d_model": model.d_model,
            "num_layers": model.num_layers,
            "num_heads": model.num_heads,
            "position": position,
            "max_len": model.max_len,
        },
        "embed_scale": model.embed_scale,
        "vocab": "".join(vocab),
        "meta": meta,
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
    }
    return atomic_write(path, lambda tmp: torch.save(payload, tmp))


def load_checkpoint(path: str | Path, argument: str = "model") -> tuple[Any, list[str], dict[str, Any]]:
    """Load a checkpoint written by :func:`save_checkpoint`.

    Returns:
        ``(model, vocab, meta)``: the model on the CPU in eval mode, the characters in id order,
        and the ``meta`` dict.

    Raises:
        ConfigError: the file is missing, unreadable, or not a posenc study checkpoint.
    """
    from posenc.nn import TransformerLM

    p = Path(path).expanduser()
    shown = repr(str(path)) if len(str(path)) <= 200 else f"{str(path)[:180]!r}..."
    if not p.is_file():
        raise ConfigError(f"{argument} checkpoint {shown} is not a file", argument=argument)
    try:
        payload = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as err:  # any unreadable file: truncated, not a torch file, unsafe pickle
        raise ConfigError(
            f"{argument} checkpoint {shown} cannot be read ({type(err).__name__}); expected a file written by "
            "posenc extend or posenc extrapolate",
            argument=argument,
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ConfigError(
            f"{argument} checkpoint {shown} is not a posenc study checkpoint (format {FORMAT!r})",
            argument=argument,
        )
    try:
        scale = payload.get("embed_scale")
        model = TransformerLM(
            **payload["model"], causal=True, embed_scale=None if scale is None else float(scale)
        )
        model.load_state_dict(payload["state_dict"])
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise ConfigError(
            f"{argument} checkpoint {shown} does not describe a TransformerLM: {' '.join(str(err).split())[:300]}",
            argument=argument,
        ) from None
    model.eval()
    return model, list(payload["vocab"]), dict(payload.get("meta") or {})
