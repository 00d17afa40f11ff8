"""The suite's report as text or markdown: the run's header, the targets with their status, the
RoPE targets case by case, then every section's tables (:func:`render`). Re-exported by
:mod:`benchmarks`."""

from __future__ import annotations

from typing import Any

from .baseline import verdict_line
from .bias import bias_tables
from .common import fmt, format_table, threads_text
from .model import model_tables
from .packed import packed_tables
from .relative import relative_tables
from .rope import rope_tables
from .targets import ROPE_TARGETS, _posenc_rows, _rope_reliable, _shape_str

__all__ = ["header_lines", "render", "rope_case_table"]


def _load(values: list[float] | None) -> str:
    return "-" if not values else "/".join(f"{v:g}" for v in values)


def _posenc_line(source: dict[str, Any] | None) -> str:
    if not source:
        return "posenc ?"
    if source.get("error"):
        return f"posenc (not importable: {source['error']})"
    text = f"posenc {source.get('version')} ({source.get('path')}"
    if source.get("git_commit"):
        text += f", git {source['git_commit'][:10]}"
        if source.get("git_dirty"):
            text += " with local changes"
    return text + f", source {source.get('source_sha256')})"


def header_lines(report: dict[str, Any]) -> list[str]:
    """What the run was: command, dates and total time, software, machine, threads and load per section."""
    machine = report["machine"]
    sections = report.get("sections", {})
    times = ", ".join(f"{name} {s['wall_s']:.0f} s" for name, s in sections.items() if "wall_s" in s)
    threads = ", ".join(f"{name} {s['threads']}" for name, s in sections.items())
    if report.get("threads_override") is not None:
        threads += " (--threads)"
    loads = "; ".join(
        f"{name} {_load(s.get('load_average_start'))} to {_load(s.get('load_average_end'))}"
        for name, s in sections.items()
    )
    return [
        f"- Command: `{report.get('command', 'python -m benchmarks')}`",
        f"- Run: {report.get('started_utc', machine.get('date_utc'))} to {report.get('finished_utc', '?')}, "
        f"{report.get('wall_s', 0):.0f} s in all ({times or 'no section'})",
        f"- Software: torch {machine['torch']}, {_posenc_line(machine.get('posenc_source'))}, "
        f"transformers {machine.get('transformers')}, rotary-embedding-torch {machine.get('rotary_embedding_torch')}, "
        f"x-transformers {machine.get('x_transformers')}, Python {machine.get('python')}",
        f"- Machine: {machine['cpu_model']}, {machine.get('cpus_usable')} usable CPUs of {machine.get('cpu_count')}, "
        f"{machine.get('memory_total_gib')} GiB, {machine.get('platform')}",
        f"- Torch threads (torch.set_num_threads) per section: {threads or '-'}",
        f"- Allocator: {report.get('allocator', 'default')}",
        f"- Load average (1/5/15 min): {_load(machine.get('load_average'))} at the start, "
        f"{_load(report.get('load_average_end'))} at the end; per section: {loads or '-'}",
    ]


def _status(target: dict[str, Any]) -> str:
    if target["met"] is None:
        text = "not measured"
    elif target["met"]:
        text = "met"
    else:
        cases = target.get("met_cases")
        text = "NOT met"
        if cases and not cases.startswith("0/"):
            text += f" (met in {cases} layout/shape cases)"
        if target.get("missing_shapes"):
            text += f" ({len(target['missing_shapes'])} target shapes not measured)"
    if target.get("reliable") is False and target["met"] is not None:
        text += " - UNRELIABLE: the clone baseline does not scale"
    return text


def rope_case_table(report: dict[str, Any], *, markdown: bool) -> str | None:
    """The eager RoPE targets case by case: shape, dtype, pass, layout."""
    rope = report.get("rope")
    if not rope:
        return None
    eager_specs = [s for s in ROPE_TARGETS if s.mode == "eager"]
    body = []
    for row in _posenc_rows(rope):
        specs = [s for s in eager_specs if s.applies(row) and row.get(s.key) is not None]
        if not specs:
            continue
        failed = [s for s in specs if not s.ok(row)]
        reasons = [
            f"{'x clone' if s.key == 'x_clone' else 'vs transformers'} {fmt(row[s.key])}"
            f" {'<' if s.higher_is_better else '>'} {s.limit:g}"
            for s in failed
        ]
        verdict = "NOT met: " + ", ".join(reasons) if reasons else "met"
        if row.get("check_ok") is False:
            verdict += " (output wrong)"
        body.append(
            [
                _shape_str(row["shape"]),
                row["dtype"],
                row["pass"],
                row["layout"],
                fmt(row.get("x_clone")),
                fmt(row.get("speedup_vs_transformers")),
                verdict,
            ]
        )
    if not body:
        return None
    title = (
        f"RoPE targets per case (eager, {threads_text(rope.get('threads'))}; float32 and bfloat16: "
        ">= 1.5x faster than transformers)"
    )
    if _rope_reliable(rope) is False:
        title += " - UNRELIABLE: the clone baseline does not scale"
    headers = [
        "shape (b, h, t, dh)",
        "dtype",
        "pass",
        "layout",
        "x clone",
        "x faster than transformers",
        "targets",
    ]
    return title + "\n" + format_table(headers, body, markdown=markdown)


def render(report: dict[str, Any], *, markdown: bool) -> str:
    """The report as text (``markdown=False``, for the terminal) or as the markdown file."""
    heading = "### " if markdown else "== "
    lines = [f"{heading}posenc benchmarks ({report['suite']} run)", "", *header_lines(report)]
    rope = report.get("rope")
    if rope and rope.get("clone_scaling") and rope["clone_scaling"].get("scales") is False:
        lines += [
            "",
            ("**" if markdown else "") + verdict_line(rope["clone_scaling"]) + ("**" if markdown else ""),
        ]
    if report.get("targets"):
        lines += [
            "",
            f"{heading}Targets",
            format_table(
                ["target", "measured", "status"],
                [[t["target"], t["measured"], _status(t)] for t in report["targets"]],
                markdown=markdown,
            ),
        ]
    cases = rope_case_table(report, markdown=markdown)
    if cases:
        lines += ["", cases]
    sections = report.get("sections", {})
    if rope:
        threads = sections.get("rope", {}).get("threads", rope.get("threads"))
        lines += ["", f"{heading}RoPE (torch {report['machine']['torch']}, {threads_text(threads)})"]
        lines += [rope_tables(rope, markdown=markdown)]
        lines += ["", *[f"- {note}" for note in rope["notes"]]]
    if report.get("bias"):
        bias = report["bias"]
        threads = sections.get("bias", {}).get("threads", bias.get("threads"))
        lines += [
            "",
            f"{heading}Bias attention (torch {report['machine']['torch']}, {threads_text(threads)})",
        ]
        lines += [bias_tables(bias, markdown=markdown)]
    if report.get("model"):
        model = report["model"]
        threads = sections.get("model", {}).get("threads", model.get("threads"))
        lines += ["", f"{heading}Model (torch {report['machine']['torch']}, {threads_text(threads)})"]
        lines += [model_tables(model, markdown=markdown)]
    for name, title, tables in (
        ("relative", "Relative family", relative_tables),
        ("packed", "Packed documents", packed_tables),
    ):
        if report.get(name):
            threads = sections.get(name, {}).get("threads", report[name].get("threads"))
            lines += ["", f"{heading}{title} (torch {report['machine']['torch']}, {threads_text(threads)})"]
            lines += [tables(report[name], markdown=markdown)]
    return "\n".join(lines)
