"""Compare two reports of the suite: ``python -m benchmarks.compare OLD.json NEW.json [--markdown]``.

Prints what differs in the setting (torch, threads per section, machine, posenc source, load)
and, for every case present in both runs, the two median times and their ratio ``new / old``
(below 1: the new run is faster), with each run's own ratio to its baseline (clone, bias-free
SDPA, or the ``none`` model). Absolute times on a shared machine drift (up to 2x on the
project's machines): trust the ratios within each run more than the ratio between runs,
unless both ran back to back on an idle machine with the same torch and threads.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .common import fmt, fmt_ms, format_table

__all__ = ["compare", "main"]


def _setting(report: dict[str, Any]) -> dict[str, str]:
    machine = report.get("machine", {})
    source = machine.get("posenc_source") or {}
    sections = report.get("sections", {})
    return {
        "torch": str(machine.get("torch")),
        "threads": ", ".join(f"{name} {s.get('threads')}" for name, s in sections.items()) or "-",
        "machine": f"{machine.get('cpu_model')}, {machine.get('cpus_usable')} CPUs, {machine.get('hostname', '?')}",
        "posenc": (
            f"{source.get('path')} git {str(source.get('git_commit'))[:10]}"
            f"{' (local changes)' if source.get('git_dirty') else ''} source {source.get('source_sha256')}"
            if source
            else f"posenc {machine.get('posenc')}"
        ),
        "started": str(report.get("started_utc", machine.get("date_utc"))),
        "load average at the start": str(machine.get("load_average", machine.get("load_average_1m"))),
        "command": str(report.get("command", "-")),
    }


def _rows(report: dict[str, Any]) -> dict[tuple, tuple[float, float | None, str]]:
    """``key -> (median_ms, ratio to the run's own baseline, baseline name)`` of every timed case."""
    rows: dict[tuple, tuple[float, float | None, str]] = {}
    for row in (report.get("model") or {}).get("results", []):
        if row.get("median_ms") is not None:
            rows[("model", row["position"], row["pass"])] = (row["median_ms"], row.get("x_none"), "x none")
    for row in (report.get("rope") or {}).get("results", []):
        if row.get("median_ms") is not None:
            name = row["implementation"] + (" [compiled]" if row["mode"] == "compile" else "")
            key = ("rope", name, "(" + ", ".join(map(str, row["shape"])) + ")", row["dtype"], row["pass"])
            rows[key] = (row["median_ms"], row.get("x_clone"), "x clone")
    for section in ("bias", "relative", "packed"):  # (the attention sections: one row per path and length)
        for row in (report.get(section) or {}).get("results", []):
            if row.get("median_ms") is not None:
                rows[(section, row["path"], f"t={row['length']}")] = (
                    row["median_ms"],
                    row.get("x_baseline"),
                    "x sdpa",
                )
    return rows


def compare(old: dict[str, Any], new: dict[str, Any], *, markdown: bool = False) -> str:
    """The comparison of two reports as text (or markdown)."""
    old_setting, new_setting = _setting(old), _setting(new)
    setting_rows = [
        [key, old_setting[key], new_setting[key], "" if old_setting[key] == new_setting[key] else "differs"]
        for key in old_setting
    ]
    lines = ["Setting", format_table(["", "old", "new", ""], setting_rows, markdown=markdown)]
    old_rows, new_rows = _rows(old), _rows(new)
    common = [key for key in new_rows if key in old_rows]
    if not common:
        return "\n".join([*lines, "", "No case was measured in both runs."])
    body = []
    for key in common:
        (old_ms, old_x, label), (new_ms, new_x, _) = old_rows[key], new_rows[key]
        body.append(
            [
                " ".join(map(str, key)),
                fmt_ms(old_ms),
                fmt_ms(new_ms),
                fmt(new_ms / old_ms if old_ms else None),
                f"{label} {fmt(old_x)} -> {fmt(new_x)}",
            ]
        )
    lines += [
        "",
        "Median times (ms) of the cases in both runs; new / old below 1 means faster",
        format_table(["case", "old ms", "new ms", "new / old", "own baseline"], body, markdown=markdown),
    ]
    only = sorted(" ".join(map(str, k)) for k in set(old_rows) ^ set(new_rows))
    if only:
        lines += ["", f"{len(only)} cases measured in one run only (not compared)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and print the comparison; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path, help="the earlier report (JSON)")
    parser.add_argument("new", type=Path, help="the later report (JSON)")
    parser.add_argument("--markdown", action="store_true", help="markdown tables")
    args = parser.parse_args(argv)
    old = json.loads(args.old.read_text())
    new = json.loads(args.new.read_text())
    print(compare(old, new, markdown=args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
