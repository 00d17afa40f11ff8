"""The output folder of a study: one run at a time, what it already holds, and never read as text.

* :func:`hold` checks that the folder can be written, makes it, and holds an exclusive lock on
  it (``fcntl.flock`` on ``.posenc.lock``) for the run: a second run into the same folder is
  refused with a :class:`ConfigError` naming the folder and the process that holds it, instead
  of both writing and the last one winning. The operating system releases the lock when its
  process dies, so a killed run never blocks the next one (its file may stay; it holds nothing).
  A folder the call made is removed again when the run is refused (nothing left behind). On a
  system without ``fcntl`` (Windows) the folder is checked but not locked.
* :func:`study_kind` and :func:`outputs` say what a folder holds (an ``extrapolate`` or an
  ``extend`` study, checkpoints), so the commands check a folder before they write to it.
* :func:`is_output` tells :class:`~posenc.app.study.Corpus` which folders to leave out of a corpus.

Imports no torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .config import ConfigError

__all__ = ["LOCK_NAME", "hold", "is_output", "made_by_posenc", "outputs", "remove_study", "study_kind"]

#: The lock file in a study's folder (hidden: a corpus folder's reader skips it anyway).
LOCK_NAME = ".posenc.lock"
#: The files a study writes, by exact name, and the checkpoint name patterns.
OUTPUT_NAMES = ("results.json", "results.csv", "report.md", "base.pt", "extrapolation.png", "extend.png")
OUTPUT_PATTERNS = ("model-*.pt", "baseline-*.pt")

#: Folders this process holds: resolved path -> (open lock file, nesting depth). A run that holds
#: a folder (the command) may call another that takes it again (the library): not a second run.
_HELD: dict[str, list[Any]] = {}


def _shown(path: str | Path) -> str:
    text = str(path)
    return repr(text) if len(text) <= 200 else f"{text[:180]!r}..."


def study_kind(folder: str | Path) -> str | None:
    """What ``folder/results.json`` holds: ``"extrapolate"``, ``"extend"``, ``"other"`` (not a
    posenc study's results) or ``None`` (no such file)."""
    path = Path(folder) / "results.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "other"
    if not isinstance(data, dict) or not {"config", "corpus"} <= set(data):
        return "other"
    if "encodings" in data:
        return "extrapolate"
    if "results" in data and "methods" in data:
        return "extend"
    return "other"


#: How a figure and a report of a study begin (``plots._figure.FIGURE_SOFTWARE`` in a PNG text chunk; the
#: heading of ``ExtendResult.report``).
_MARKS = {".png": b"tEXtSoftware\x00posenc study figure", ".md": b"# Context extension of a RoPE model\n"}


def made_by_posenc(path: str | Path) -> bool:
    """Whether the figure or report at ``path`` was written by a posenc study (by its mark; other files: True)."""
    p = Path(path)
    mark = _MARKS.get(p.suffix)
    if mark is None:
        return True
    try:
        with p.open("rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return head.startswith(mark) if p.suffix == ".md" else mark in head


def outputs(folder: str | Path) -> list[str]:
    """The names of the study files (results, figures, checkpoints) in ``folder``, sorted."""
    p = Path(folder)
    if not p.is_dir():
        return []
    found = {name for name in OUTPUT_NAMES if (p / name).is_file()}
    for pattern in OUTPUT_PATTERNS:
        found.update(q.name for q in p.glob(pattern) if q.is_file())
    return sorted(found)


def remove_study(folder: str | Path, *, keep: str | Path | None = None) -> None:
    """Remove the files of the study ``folder`` holds, before a run replaces it (``force``).

    Left beside new results, the earlier run's figures, report and checkpoints would pass for the new
    run's (and a later resume would reuse its checkpoints). Never removed: a file no posenc study made
    (a ``.pt`` that is not a study checkpoint, the ``results.*`` of something else, a figure or
    ``report.md`` without a study's mark), nor ``keep`` (the model the run loads).
    """
    from .checkpoint import load_checkpoint

    out = Path(folder)
    kind = study_kind(out)
    kept = None if keep is None else Path(keep).expanduser().resolve()
    for name in outputs(out):
        path = out / name
        if path.resolve() == kept or (name.startswith("results.") and kind in (None, "other")):
            continue
        if not made_by_posenc(path):
            continue
        if name.endswith(".pt"):
            try:
                load_checkpoint(path, argument="out_dir")
            except ConfigError:
                continue
        path.unlink(missing_ok=True)


def _check_force(force: object, resume: bool) -> None:
    """``force`` (a study's argument) is a bool, and not given with ``resume``."""
    if not isinstance(force, bool):
        raise TypeError(f"force must be a bool, got {force!r} ({type(force).__name__})")
    if force and resume:
        raise ConfigError(
            "force=True replaces the study that resume=True continues: give one", argument="force"
        )


def _check_kind(out: Path, command: str, force: bool) -> None:
    """Refuse ``out`` where it holds the other command's study or results that are no study's, unless ``force``
    (else this run's results.json replaced them, and the other study's report and figures were left beside)."""
    kind = study_kind(out)
    if force or kind in (None, command):
        return
    what = "a results.json that is not a posenc study's" if kind == "other" else f"a posenc {kind} study"
    raise ConfigError(
        f"out_dir {_shown(out)} holds {what}; use another folder, or force=True to replace it",
        argument="out_dir",
    )


def is_output(folder: str | Path) -> bool:
    """Whether ``folder`` is a study's output folder: it holds a lock file or a posenc study's
    ``results.json``, or a checkpoint beside results."""
    p = Path(folder)
    if (p / LOCK_NAME).exists():
        return True
    return study_kind(p) in ("extrapolate", "extend")


def _missing(out: Path) -> list[Path]:
    """The folders of ``out`` (itself and its parents) that do not exist yet, innermost first."""
    missing = []
    p = out
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    return missing


def _holder(path: Path) -> str:
    """Who holds the lock, as its file says (written by the holder when it took the lock)."""
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        return (
            f"process {int(info['pid'])} on {str(info.get('host'))[:60]}, {str(info.get('command'))[:100]}, "
            f"since {str(info.get('since'))[:30]}"
        )
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


@contextlib.contextmanager
def hold(out_dir: str | Path, argument: str = "out_dir", *, lock: bool = True) -> Iterator[Path]:
    """Check and make ``out_dir``, and hold it for this run; yields the folder's path.

    Args:
        out_dir: the output folder (made with its parents if missing).
        argument: the name errors give it (``"out_dir"``; the command says ``--out``).
        lock: ``False`` only checks and makes the folder (a rank other than 0, a spawned rank:
            the process that started them holds it).

    Raises:
        ConfigError: the folder cannot be written, or another run holds it. A folder made by
            this call is removed again when the body raises, if it is still empty.
    """
    from .checkpoint import check_writable

    out = Path(out_dir).expanduser()
    made = _missing(out)
    key = os.path.realpath(out)
    if not lock or key in _HELD:
        # Taken again by the run that holds it (the command, then the library), or not locked.
        if key in _HELD:
            _HELD[key][1] += 1
        try:
            yield check_writable(out, argument=argument)
        finally:
            if key in _HELD:
                _HELD[key][1] -= 1
        return
    out = check_writable(out, argument=argument)
    path = out / LOCK_NAME
    fh = _acquire(path, out, argument, made)
    _HELD[key] = [fh, 1]
    ok = False
    try:
        yield out
        ok = True
    finally:
        del _HELD[key]
        _release(fh, path)
        if not ok:
            _remove_empty(made)


def _acquire(path: Path, out: Path, argument: str, made: list[Path]) -> Any:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not a POSIX system: the folder is checked, not locked
        return None
    while True:
        fh = open(path, "a+", encoding="utf-8")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            _remove_empty(made)
            raise ConfigError(
                f"{argument} {_shown(out)} is in use by another run ({_holder(path)}); wait for it to finish, "
                "or use another folder",
                argument=argument,
            ) from None
        # The holder before us may have removed the file between our open and our lock: then
        # we locked a file no one else sees, and must lock the one at the path.
        try:
            same = os.path.samestat(os.fstat(fh.fileno()), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        fh.close()
    fh.seek(0)
    fh.truncate()
    command = " ".join(sys.argv)[:300] if sys.argv and sys.argv[0] else "python"
    fh.write(
        json.dumps(
            {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "command": command,
                "since": time.strftime("%Y-%m-%d %H:%M:%S"),
            }
        )
    )
    fh.flush()
    return fh


def _release(fh: Any, path: Path) -> None:
    if fh is None:  # pragma: no cover - not locked (no fcntl)
        return
    # Removed while still locked: a run waiting on this file sees it gone and takes the new one.
    with contextlib.suppress(OSError):
        path.unlink()
    fh.close()


def _remove_empty(made: list[Path]) -> None:
    """Remove the folders this run made (innermost first) while they are empty."""
    for p in made:
        try:
            p.rmdir()
        except OSError:
            return
