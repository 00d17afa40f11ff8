"""Files the application writes, each whole: after Ctrl-C or a crash a file holds its old content or its new.

Used by the study (results, checkpoints) and the plots (figures); imports neither, nor torch.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["atomic_write"]


def atomic_write(path: str | Path, write: Callable[[Path], Any]) -> Path:
    """Call ``write(tmp)`` on a temporary file next to ``path``, then rename it to ``path``.

    The rename is atomic on one file system: after Ctrl-C or a crash, ``path`` holds either
    the old content or the new, never half of it. The file gets the permissions of any file
    the process makes (``0o666`` less the umask), not ``mkstemp``'s private ``0o600``.
    """
    path = Path(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
    finally:
        os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


_UMASK_LOCK = threading.Lock()


def _umask() -> int:
    """This process's umask (read by setting it and setting it back, under a lock)."""
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask
