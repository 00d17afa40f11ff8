"""What every ``posenc`` command shares: one-line errors, the parser class and the option types.

Also the study options (the :class:`~posenc.app.study.StudyConfig` fields that ``extrapolate`` and
``extend`` both set, as flags) and the translation of the library's argument names into those
flags. Nothing here imports torch: the option checks are the application's own
(:mod:`posenc.app._checks`), which need none.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from .. import _checks

if TYPE_CHECKING:  # pragma: no cover
    from ..study import ConfigError

#: Exit status for a bad command line or bad input (the same as argparse's usage errors).
EXIT_USAGE = 2


class _UsageError(Exception):
    """A bad option found after parsing; its message is printed as one line."""


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line on stderr (no usage block) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {_one_line(message)} (see {self.prog} --help)\n")


#: The longest message printed; a longer one (a huge input echoed) is cut in the middle.
MAX_MESSAGE = 500


def _one_line(message: object) -> str:
    text = " ".join(str(message).split())
    if len(text) <= MAX_MESSAGE:
        return text
    cut = len(text) - MAX_MESSAGE + 100
    return f"{text[: MAX_MESSAGE - 200]} [... {cut:,} characters cut ...] {text[-100:]}"


def _option_type(
    parse: Callable[[str], Any], check_name: str, accepted: str, **options: Any
) -> Callable[[str], Any]:
    """An argparse ``type=``: ``parse`` the text, then apply the check ``check_name`` to it.

    The check (a name in :mod:`posenc.app._checks`) raises TypeError/ValueError, which becomes
    argparse's one-line error, naming the flag (``argument --steps: expected a positive integer, got '0'``).
    """

    def convert(text: str) -> Any:
        check = getattr(_checks, check_name)
        try:
            return check("value", parse(text), **options)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected {accepted}, got {text!r}") from None

    return convert


def _parse_int(text: str) -> int:
    if len(text) > 30:  # int() of a huge digit string is slow, and no option needs one
        raise ValueError("too many digits")
    return int(text)


_positive_int = _option_type(_parse_int, "check_positive_int", "a positive integer")
_non_negative_int = _option_type(_parse_int, "check_int", "a non-negative integer", minimum=0)
_positive_float = _option_type(float, "check_positive_float", "a positive finite number")


def _bounded(limit: int) -> Callable[[str], int]:
    """A positive-int ``type=`` with an upper bound (for options that size an allocation)."""

    def convert(text: str) -> int:
        value = _positive_int(text)
        if value > limit:
            raise argparse.ArgumentTypeError(f"expected at most {limit:,} (a bound on memory), got {text!r}")
        return int(value)

    return convert


def _name_list(text: str) -> list[str]:
    parts = [p.strip() for p in text.split(",")]
    if not parts or any(not p for p in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated names like linear,yarn, got {text!r}")
    return parts


def _length_list(text: str) -> list[int]:
    parts = [p.strip() for p in text.split(",")]
    if not parts or any(not p for p in parts):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers like 64,128,256, got {text!r}"
        )
    return [_positive_int(p) for p in parts]


#: The StudyConfig fields ``posenc extrapolate`` sets: (field, type, metavar, help, advanced).
#: The flag is the field with dashes (``--train-len``); the default is StudyConfig's.
_STUDY_OPTIONS: tuple[tuple[str, Callable[[str], Any], str, str, bool], ...] = (
    ("train_len", _positive_int, "N", "training length in characters (default %(default)s)", False),
    (
        "eval_lens",
        _length_list,
        "N,N,...",
        "evaluation lengths, each >= --train-len (default %(default)s)",
        False,
    ),
    ("steps", _positive_int, "N", "training steps per encoding (default %(default)s)", False),
    ("seed", _non_negative_int, "N", "seed for initialisation and batch order (default %(default)s)", False),
    (
        "device",
        str,
        "DEVICE",
        "torch device (default %(default)s; the CPU gives bit-identical reruns)",
        False,
    ),
    ("batch_size", _positive_int, "N", "windows per step (default %(default)s)", True),
    ("d_model", _positive_int, "N", "model width (default %(default)s)", True),
    ("num_layers", _positive_int, "N", "transformer blocks (default %(default)s)", True),
    ("num_heads", _positive_int, "N", "attention heads (default %(default)s)", True),
    ("lr", _positive_float, "X", "peak AdamW learning rate (default %(default)s)", True),
    (
        "eval_chars",
        _positive_int,
        "N",
        "about this many validation characters scored at every length (default %(default)s)",
        True,
    ),
    (
        "threads",
        _positive_int,
        "N",
        "torch CPU threads during the study (default %(default)s: a fixed count keeps reruns bit-identical)",
        True,
    ),
    (
        "nproc",
        _positive_int,
        "N",
        "processes that split every batch (DDP: gloo on the CPU, nccl on GPUs; default %(default)s)",
        True,
    ),
)

#: The library's argument names (StudyConfig fields, run_study and save arguments) as the flags
#: of ``posenc extrapolate``, to report the library's errors in the command's words.
_FLAGS = {
    **{field: "--" + field.replace("_", "-") for field, *_ in _STUDY_OPTIONS},
    "corpus": "--corpus",
    "encodings": "--encodings",
    "out_dir": "--out",
    "methods": "--methods",
    "factor": "--factor",
    "finetune_steps": "--finetune-steps",
    "finetune_lr": "--finetune-lr",
    "baselines": "--baselines",
    "model": "--model",
    "resume": "--resume",
}
#: Arguments whose messages quote the user's own text (left as typed, not turned into flags).
_ECHOING = ("corpus", "encodings", "out_dir", "baselines", "model", "methods", "resume")
#: The longest --encodings / --baselines text read (a spec is at most a few hundred characters).
MAX_SPECS_TEXT = 10_000
_NAME_EQUALS = re.compile(r"(?<![\w-])(" + "|".join(_FLAGS) + r")=")


def _in_flags(err: ConfigError) -> str:
    """A study ConfigError's message with the library's argument names as this command's flags.

    The message starts with its argument's name (``steps must be ...`` -> ``--steps must
    be ...``); other settings it quotes as ``name=value`` (``train_len=64`` ->
    ``--train-len=64``), except in messages about the corpus, encodings or output folder,
    which echo the user's own text.
    """
    message = _one_line(err)
    argument = err.argument or ""
    if argument in _FLAGS and message.startswith(argument):
        message = _FLAGS[argument] + message[len(argument) :]
    if argument not in _ECHOING:
        message = _NAME_EQUALS.sub(lambda match: f"{_FLAGS[match[1]]}=", message)
    return message


def _add_study_options(parser: argparse.ArgumentParser, defaults: dict[str, Any]) -> None:
    model = parser.add_argument_group("model and training (advanced)")
    for field, kind, metavar, help_text, advanced in _STUDY_OPTIONS:
        default = defaults[field].default
        (model if advanced else parser).add_argument(
            _FLAGS[field],
            type=kind,
            # a tuple as the text one would type: argparse parses a str default with `type`
            default=",".join(map(str, default)) if isinstance(default, tuple) else default,
            metavar=metavar,
            help=help_text,
        )


def _specs_text(text: str, flag: str) -> str:
    if len(text) > MAX_SPECS_TEXT:
        raise _UsageError(f"{flag}: {len(text):,} characters; the limit is {MAX_SPECS_TEXT:,}")
    return text


def _figure_note(command: str) -> str | None:
    """Why the figure will not be drawn (matplotlib missing), said before the run, or ``None``."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return f"posenc {command}: note: matplotlib is not installed (pip install 'posenc[cli]'); the data files are written, the figure is skipped (and an earlier run's removed)"
    return None


def _terminal_width() -> int:
    """The terminal's columns (80 when not a terminal), for tables that must not wrap."""
    import shutil

    return max(40, shutil.get_terminal_size((80, 24)).columns)
