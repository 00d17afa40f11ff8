"""posenc's benchmark suite: RoPE against the rotary code in use today, bias attention at long
length, a small model's forward per position encoding, the relative family (Shaw with values,
FIRE) beside their naive ``(t, t, d)`` forms, and packed documents.

The command that writes ``benchmarks/results/latest.md`` and ``latest.json`` (the full run;
about 23 minutes on the project's 2-core CPU machine)::

    .venv/bin/python -m benchmarks

The quick run (about 5 minutes there under load, every section; writes ``benchmarks/results/quick.{md,json}``, which git
ignores)::

    .venv/bin/python -m benchmarks --quick

``--only rope,bias,model,relative,packed`` runs some sections (``--only model`` alone writes
``full-model.{md,json}``), ``--threads N`` overrides every section's thread count, ``--posenc
DIR`` measures the posenc package found in ``DIR`` (another commit), ``--out DIR`` and
``--name STEM`` choose the files; ``python -m benchmarks.compare OLD.json NEW.json`` compares
two runs. See :mod:`benchmarks.common` for the timing method, :mod:`benchmarks.memory` for
the memory one, :mod:`benchmarks.baseline` for the check of the clone baseline,
:mod:`benchmarks.rope`, :mod:`benchmarks.bias`, :mod:`benchmarks.model`, :mod:`benchmarks.relative` and
:mod:`benchmarks.packed` for what is compared, :mod:`benchmarks.targets` for the targets and
:mod:`benchmarks.report` for the report.

Every section sets its own torch thread count (one by default: on a shared 2-core machine
several threads measure the scheduler as much as the code) and the report records it, with
the torch version, the machine, the load average, the date and the run's total time.

Nothing here is a timed test: the tests check the suite's structure, its correctness checks
and its verdicts on synthetic timings; speed is reported, with each target marked met or not.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from . import bias as bias_module
from .baseline import verdict_line as verdict_line
from .bias import BiasConfig, run_bias
from .bias import bias_tables as bias_tables
from .common import fmt as fmt
from .common import format_bytes as format_bytes
from .common import format_table as format_table
from .common import load_average, machine_info, now_utc, set_threads, write_json, write_whole
from .common import threads_text as threads_text
from .machine import steady_allocator
from .model import ModelConfig, run_model
from .model import model_tables as model_tables
from .packed import PackedConfig, run_packed
from .packed import packed_tables as packed_tables
from .relative import RelativeConfig, run_relative
from .relative import relative_tables as relative_tables
from .report import _load as _load
from .report import _posenc_line as _posenc_line
from .report import _status as _status
from .report import header_lines as header_lines
from .report import render
from .report import rope_case_table as rope_case_table
from .rope import EAGER_TARGET_IMPLEMENTATIONS as EAGER_TARGET_IMPLEMENTATIONS
from .rope import TARGET_SHAPES, RopeConfig, run_rope
from .rope import rope_tables as rope_tables
from .targets import MEMORY_TARGETS as MEMORY_TARGETS
from .targets import ROPE_TARGETS as ROPE_TARGETS
from .targets import RopeTarget as RopeTarget
from .targets import _bias_targets as _bias_targets
from .targets import _memory_targets as _memory_targets
from .targets import _posenc_rows as _posenc_rows
from .targets import _rope_reliable as _rope_reliable
from .targets import _rope_targets as _rope_targets
from .targets import _shape_str as _shape_str
from .targets import _target as _target
from .targets import evaluate_targets

# The targets (targets.py) and the report writer (report.py) moved out of this module; every name
# it defined or imported stays importable from here (the "as" imports above re-export them).

#: Set by ``--posenc DIR`` (and inherited by the memory subprocesses): import posenc from
#: ``DIR`` instead of the installed package, e.g. to measure another commit.
POSENC_PATH_ENV = "POSENC_BENCH_PATH"
# (No module of the suite imports posenc at import time, so this still comes first.)
if os.environ.get(POSENC_PATH_ENV):
    sys.path.insert(0, os.environ[POSENC_PATH_ENV])

__all__ = [
    "SECTIONS",
    "BiasConfig",
    "ModelConfig",
    "PackedConfig",
    "RelativeConfig",
    "RopeConfig",
    "SuiteConfig",
    "evaluate_targets",
    "preset",
    "render",
    "run_suite",
]

Preset = Literal["full", "quick"]
RESULTS_DIR = Path(__file__).resolve().parent / "results"
#: The sections of a run, in the order they run.
SECTIONS = ("rope", "bias", "model", "relative", "packed")
#: Version of the JSON layout (2: per-section threads and times, clone scaling, model section).
REPORT_FORMAT = 2


@dataclasses.dataclass
class SuiteConfig:
    """The whole suite: ``None`` for a section that does not run."""

    name: str
    rope: RopeConfig | None
    bias: BiasConfig | None
    model: ModelConfig | None = None
    relative: RelativeConfig | None = None
    packed: PackedConfig | None = None


def preset(name: Preset) -> SuiteConfig:
    """The ``full`` run (about 23 minutes on a 2-core CPU) or the ``quick`` one (about 5 minutes).

    Both time RoPE at the three target shapes; the quick run only the eager forward.
    """
    if name == "full":
        rope = RopeConfig(shapes=list(TARGET_SHAPES), reps=15, budget_s=5.0)
        bias = BiasConfig(
            lengths=[1024, 2048, 4096, 8192, 16384],
            max_len={
                bias_module.HF_T5: 4096,
                bias_module.XT_T5: 4096,
                bias_module.XT_ALIBI: 4096,
                bias_module.ALIBI_DENSE: 8192,
                # FlexAttention without a block mask computes every (i, j): ~6x SDPA at 8192
                bias_module.POSENC_T5_FLEX: 8192,
            },
            memory_lengths=[4096, 16384],
            reps=10,
            budget_s=15.0,
        )
        model = ModelConfig(reps=10, budget_s=120.0)
        # issue 15: Shaw with values and FIRE at 4096 and 16384 beside SDPA and the naive forms
        # (the naive ones need 4 GiB and more at 4096, 64 GiB at 16384: reported, not run)
        relative = RelativeConfig(lengths=[4096, 16384], memory_lengths=[4096, 16384], reps=3, budget_s=60.0)
        # issue 16: 8 documents in 16384 tokens
        packed = PackedConfig(lengths=[4096, 16384], memory_lengths=[16384], reps=3, budget_s=60.0)
    elif name == "quick":
        rope = RopeConfig(
            shapes=list(TARGET_SHAPES),
            passes=["forward"],
            modes=["eager"],
            reps=7,
            budget_s=2.0,
            min_sample_s=0.005,
        )
        bias = BiasConfig(lengths=[1024, 2048], memory_lengths=[2048], reps=5, budget_s=4.0)
        model = ModelConfig(reps=3, warmup=0, budget_s=15.0)
        # each well under a minute: every path, one short length, memory included
        relative = RelativeConfig(lengths=[1024], memory_lengths=[1024], reps=3, budget_s=3.0)
        packed = PackedConfig(lengths=[2048], memory_lengths=[2048], reps=3, budget_s=3.0)
    else:
        raise ValueError(f"preset must be 'full' or 'quick', got {name!r}")
    return SuiteConfig(name, rope, bias, model, relative, packed)


# ---------------------------------------------------------------------------------------
# Running


def _section_threads(config: Any, override: int | None) -> int | None:
    return override if override is not None else config.threads


def run_suite(
    config: SuiteConfig,
    *,
    threads: int | None = None,
    out_dir: Path | None = None,
    stem: str | None = None,
    command: str | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the configured sections, evaluate the targets and write ``{stem}.json`` and ``{stem}.md`` (interrupted,
    the sections that finished to ``{stem}.unfinished.json`` and ``.md``).

    Args:
        config: what to run (see :func:`preset`).
        threads: torch threads for every section (default: each section's own ``threads``,
            one unless set otherwise; ``None`` there means every usable CPU).
        out_dir: where the two files go; ``None`` (the default) writes nothing.
        stem: the files' name without extension, required with ``out_dir`` (no default: ``latest``, the
            committed results, is for ``python -m benchmarks``'s full run; see ``default_stem``).
        command: the command line to record (default: this process's ``sys.argv``).
        log: where progress lines go.

    Returns:
        The report: ``suite, format, command, started_utc, finished_utc, wall_s, machine,
        load_average_end, allocator, threads_override, sections`` (per section: ``threads, wall_s,
        started_utc, load_average_start, load_average_end``), ``rope, bias, model`` (``None``
        when not run) and ``targets``.
    """
    if out_dir is not None and not stem:
        raise ValueError(
            f"run_suite(out_dir={str(out_dir)!r}) needs stem=, the name of the files it writes there (a default "
            "would replace another run's results, such as the committed latest.*)"
        )
    start = time.perf_counter()
    user_log = log

    def log(line: str) -> None:
        user_log(f"{time.perf_counter() - start:6.0f}s {line}")

    if command is None:
        command = shlex.join(["python", *sys.argv])
    report: dict[str, Any] = {
        "suite": config.name,
        "format": REPORT_FORMAT,
        "command": command.strip(),
        "started_utc": now_utc(),
        "machine": machine_info(),
        "allocator": steady_allocator(),
        "threads_override": threads,
        "sections": {},
        **{name: None for name in SECTIONS},
    }
    machine = report["machine"]
    log(
        f"[suite] {config.name}: {machine['cpu_model']}, torch {machine['torch']}, load {machine['load_average']}"
    )
    runners: dict[str, Callable[..., dict[str, Any]]] = {
        "rope": run_rope,
        "bias": run_bias,
        "model": run_model,
        "relative": run_relative,
        "packed": run_packed,
    }

    def finish(name: str | None) -> None:
        report["targets"] = evaluate_targets(report)
        report["finished_utc"] = now_utc()
        report["load_average_end"] = load_average()
        report["wall_s"] = time.perf_counter() - start
        if out_dir is not None:
            write_json(Path(out_dir) / f"{name}.json", report)
            write_whole(Path(out_dir) / f"{name}.md", render(report, markdown=True) + "\n")

    try:
        for name in SECTIONS:
            section_config = getattr(config, name)
            if section_config is None:
                continue
            n = set_threads(_section_threads(section_config, threads))
            section = {"threads": n, "started_utc": now_utc(), "load_average_start": load_average()}
            log(f"[{name}] {n} thread{'s' if n != 1 else ''}, load average {section['load_average_start']}")
            section_start = time.perf_counter()
            report[name] = runners[name](section_config, log=log)
            section["wall_s"] = time.perf_counter() - section_start
            section["load_average_end"] = load_average()
            report["sections"][name] = section
    except KeyboardInterrupt:
        # The finished sections are kept apart (a whole run's files stay as they are), as --device cuda does.
        if report["sections"] and out_dir is not None:
            finish(f"{stem}.unfinished")
            user_log(
                f"interrupted: the finished sections are in {Path(out_dir) / stem}.unfinished.json and .md"
            )
        raise
    finish(stem)
    return report
