"""The ``posenc`` command: the extrapolation study, pictures of every encoding, and the registry.

::

    posenc extrapolate                       # train short (64), test long (64..512), every encoding
    posenc extrapolate --encodings "rope(base=500000.0),alibi" --corpus my_text/ --out runs/mine
    posenc extend                            # a RoPE model at 64, each scaling method at 64..512
    posenc extend --methods linear,yarn --finetune-steps 50 --baselines alibi,none --resume
    posenc plot rope --out rope.png          # a picture of one encoding
    posenc list                              # the registered encodings
    posenc describe alibi                    # its options, defaults and accepted values
    posenc models                            # each transformers model type: matched, refused and why

Bad options print one line on stderr and exit with code 2, without a traceback; every option
is checked (including that ``--out`` can be written and that every encoding runs) before any
training starts, and options that size an allocation have stated bounds.

This package imports neither torch nor the rest of posenc at import time: each command
imports what it needs, so ``posenc --help`` starts quickly. Its modules: ``_common`` (one-line
errors, option types, the study options and their flags), ``_parser`` (every command's
options and help), ``_study`` (``extrapolate``, ``extend``) and ``_inspect`` (``plot``,
``list``, ``describe``), ``_models`` (``models``); :func:`main` below dispatches to them.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from ._common import EXIT_USAGE, _one_line, _UsageError
from ._inspect import _cmd_describe, _cmd_list, _cmd_plot
from ._models import _cmd_models
from ._parser import _build_parser
from ._study import _cmd_extend, _cmd_extrapolate

__all__ = ["main"]

_COMMANDS = {
    "extend": _cmd_extend,
    "extrapolate": _cmd_extrapolate,
    "plot": _cmd_plot,
    "list": _cmd_list,
    "describe": _cmd_describe,
    "models": _cmd_models,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``posenc`` command line; returns the exit status (0 ok, 2 bad options).

    Args:
        argv: the arguments after the program name; ``None`` reads ``sys.argv[1:]``.
    """
    # Without numpy (the `cli` extra brings it with matplotlib) torch warns at import that it
    # cannot initialise NumPy; no command needs it except through matplotlib, which says so itself.
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
    parser = _build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # reported by the sub-command, so the message names it
        print(
            f"posenc {args.command}: error: unrecognized arguments: {' '.join(unknown)} (see posenc {args.command} --help)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        status = _COMMANDS[args.command](args)
        sys.stdout.flush()  # a closed pipe raises here, not in the interpreter's exit
        return status
    except _UsageError as err:
        print(f"posenc {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader went away (``posenc list | head``): stop quietly, as Unix tools do. Later
        # writes (the interpreter's final flush) go to /dev/null instead of raising again.
        _silence_stdout()
        return 141  # 128 + SIGPIPE, what a shell reports for a command killed by it
    except KeyboardInterrupt:
        # on a line of its own, not inside a progress bar's line
        print(f"\nposenc {args.command}: interrupted{_how_to_resume(args)}", file=sys.stderr)
        return 130
    except OSError as err:  # a full disk: said in one line, with what was kept (each file is written whole)
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        where = f" writing {str(err.filename)[:200]!r}" if err.filename else ""
        print(
            f"posenc {args.command}: error: no space left on the device{where}{_how_to_resume(args)}",
            file=sys.stderr,
        )
        return 1
    except (MemoryError, RuntimeError) as err:
        if not _is_allocation_error(err):
            raise
        print(
            f"posenc {args.command}: error: out of memory ({_one_line(err)[:200]}); use smaller sizes or lengths",
            file=sys.stderr,
        )
        return EXIT_USAGE


def _how_to_resume(args: argparse.Namespace) -> str:
    """What an interrupted study keeps and how to go on (nothing to say for the other commands)."""
    if args.command not in ("extrapolate", "extend"):
        return ""
    from ..study.outdir import outputs, study_kind

    out, folder = str(args.out)[:200], Path(args.out).expanduser()
    files = outputs(folder)
    if not files:
        return f"; nothing was saved in {out!r} yet"
    # (the rule --resume applies: a study's results, or an extend's checkpoints alone)
    if study_kind(folder) != args.command and not (
        args.command == "extend" and all(f.endswith(".pt") for f in files)
    ):
        return f"; {out!r} holds no results to resume from: run it again with --force"
    return (
        f"; what finished is saved in {out!r}: run the same command with --resume to continue "
        "without redoing it"
    )


def _silence_stdout() -> None:
    """Point file descriptor 1 at /dev/null (when stdout is a real file)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a captured or replaced stdout
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _is_allocation_error(err: BaseException) -> bool:
    """Whether ``err`` is an allocator failure (host or device), not a bug."""
    if isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError":
        return True
    text = str(err)
    return any(
        s in text
        for s in ("DefaultCPUAllocator", "out of memory", "can't allocate memory", "not enough memory")
    )
