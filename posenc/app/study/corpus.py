"""The study's text: read from files (or the standard library) and split into train and validation."""

from __future__ import annotations

import contextlib
import os
import platform
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .config import ConfigError

__all__ = ["SPLIT_BLOCK_CHARS", "VALIDATION_EVERY", "Corpus"]

#: Every ``VALIDATION_EVERY``-th block of ``SPLIT_BLOCK_CHARS`` characters is held out for
#: validation: interleaved blocks keep the validation text in-distribution (the same files'
#: style) while no character is in both splits.
SPLIT_BLOCK_CHARS = 8192
VALIDATION_EVERY = 10


@dataclass(frozen=True)
class Corpus:
    """A text corpus split into training and validation characters.

    Build one with :meth:`standard_library` (the default, no download), :meth:`from_path`
    (a UTF-8 file, or a folder of them) or :meth:`from_text`.

    Attributes:
        text: the whole corpus as one string.
        source: a human-readable description of where it came from.
        num_files: how many files it was read from (0 for :meth:`from_text`).
    """

    text: str
    source: str
    num_files: int = 0

    @classmethod
    def standard_library(cls) -> Corpus:
        """The top-level ``*.py`` files of the running Python's standard library.

        Read at run time, in sorted file-name order, so every machine with the same Python
        version gets the same text, and nothing is downloaded. Sub-packages (``test/``,
        ``idlelib/``, ...) and ``site-packages`` are not included.
        """
        root = Path(sysconfig.get_paths()["stdlib"])
        files = sorted(p for p in root.glob("*.py") if p.is_file())
        version = platform.python_version()
        if not files:
            raise ConfigError(
                f"corpus: no Python standard library source files found in {root}; pass a corpus path",
                argument="corpus",
            )
        text = "".join(_read_utf8(p, strict=False) for p in files)
        return cls(text, f"Python {version} standard library, top-level *.py ({root})", len(files))

    @classmethod
    def from_path(cls, path: str | Path, *, exclude: Sequence[str | Path] = ()) -> Corpus:
        """Read a UTF-8 text file, or every UTF-8 file under a folder (recursively, sorted).

        In a folder, files that are not valid UTF-8 (binaries, images), hidden files and
        folders, and posenc's own output (a study's folder: its results, report and
        checkpoints, see :func:`posenc.app.study.outdir.is_output`) are skipped, so a study whose
        output folder lies inside its corpus folder reads the same text on every run.

        Args:
            path: a file or a folder; ``~`` is expanded.
            exclude: folders whose files are never read (a study's output folder, even before
                it holds anything).

        Returns:
            The corpus; ``num_files`` counts the files read.

        Raises:
            ConfigError: the path does not exist, is posenc output, a file is not UTF-8 text,
                or no text was found.
        """
        from .outdir import is_output

        p = Path(path).expanduser()
        if not p.exists():
            raise ConfigError(
                f"corpus path {str(path)!r} does not exist; accepted: a UTF-8 text file or a folder of them",
                argument="corpus",
            )
        skipped = {os.path.realpath(Path(e).expanduser()) for e in exclude}
        output: dict[Path, bool] = {}

        def left_out(folder: Path) -> bool:
            if folder not in output:
                output[folder] = os.path.realpath(folder) in skipped or is_output(folder)
            return output[folder]

        # The folder itself (or the file's) may not be posenc output, nor lie in the excluded folders;
        # a folder above it that holds results (a study run with --out .) does not matter.
        where = p if p.is_dir() else p.parent
        if left_out(where) or any(os.path.realpath(q) in skipped for q in where.parents):
            raise ConfigError(
                f"corpus path {str(path)!r} is in a posenc output folder (results, checkpoints); pass the text's "
                "own file or folder",
                argument="corpus",
            )
        if p.is_file():
            text = _read_utf8(p, strict=True)
            corpus = cls(text, str(p), 1)
        else:
            parts = []
            for f in sorted(q for q in p.rglob("*") if q.is_file()):
                inner = f.relative_to(p).parts
                if any(part.startswith(".") for part in inner):
                    continue
                if any(left_out(p.joinpath(*inner[:i])) for i in range(1, len(inner))):
                    continue  # a study's output folder inside the corpus folder
                with contextlib.suppress(ConfigError):  # not UTF-8: a binary file, skipped
                    parts.append(_read_utf8(f, strict=True))
            corpus = cls("".join(parts), f"{p} ({len(parts)} UTF-8 files)", len(parts))
        if not corpus.text.strip():
            raise ConfigError(
                f"corpus path {str(path)!r} holds no text (empty, or no UTF-8 files); pass a non-empty corpus",
                argument="corpus",
            )
        return corpus

    @classmethod
    def from_text(cls, text: str, source: str = "text given in Python") -> Corpus:
        """Wrap a string.

        Args:
            text: the whole corpus.
            source: how :attr:`source` describes it.

        Raises:
            TypeError: ``text`` is not a str.
            ConfigError: the text is empty or only whitespace.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if not text.strip():
            raise ConfigError(
                f"text is empty or only whitespace ({len(text)} characters); pass a non-empty corpus",
                argument="text",
            )
        return cls(text, source, 0)

    def split(self) -> tuple[str, str]:
        """``(train, validation)``: every 10th block of 8,192 characters goes to validation.

        A corpus shorter than ten blocks is split 90/10 by characters instead (the last 10%
        is validation), so small files still get a validation set.
        """
        n = len(self.text)
        if n < SPLIT_BLOCK_CHARS * VALIDATION_EVERY:
            cut = n - n // VALIDATION_EVERY
            return self.text[:cut], self.text[cut:]
        train: list[str] = []
        val: list[str] = []
        for i, start in enumerate(range(0, n, SPLIT_BLOCK_CHARS)):
            block = self.text[start : start + SPLIT_BLOCK_CHARS]
            (val if i % VALIDATION_EVERY == VALIDATION_EVERY - 1 else train).append(block)
        return "".join(train), "".join(val)


def _read_utf8(path: Path, *, strict: bool) -> str:
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        if not strict:
            return data.decode("utf-8", errors="replace")
        raise ConfigError(
            f"corpus file {str(path)!r} is not UTF-8 text ({err.reason} at byte {err.start})",
            argument="corpus",
        ) from err
    # One newline convention, so the same text gives the same characters on every OS.
    return text.replace("\r\n", "\n")
