"""The bias section's tables: time (and x bias-free SDPA) per length and path, notes, and peak
memory. Re-exported by :mod:`benchmarks.bias`."""

from __future__ import annotations

from typing import Any

from .common import fmt, fmt_ms, format_bytes, format_table, threads_text

__all__ = ["bias_tables"]


def bias_tables(bias: dict[str, Any], *, markdown: bool) -> str:
    """The bias results as tables: time (and x bias-free SDPA) per length and path; peak memory."""
    results = bias["results"]
    paths: list[str] = []
    for row in results:
        if row["path"] not in paths:
            paths.append(row["path"])
    by_length: dict[int, dict[str, dict[str, Any]]] = {}
    for row in results:
        by_length.setdefault(row["length"], {})[row["path"]] = row

    def cell(row: dict[str, Any] | None) -> str:
        if row is None:
            return "-"
        if row.get("error"):
            return "error"
        if row.get("skipped"):
            return "skipped"
        text = f"{fmt_ms(row['median_ms'])} ms ({fmt(row.get('x_baseline'))}x)"
        if row.get("check_ok") is False:
            text += " wrong"
        return text

    body = [[t, *[cell(group.get(p)) for p in paths]] for t, group in by_length.items()]
    config = bias["config"]
    lines = [
        f"Causal attention, B=1, H={config['heads']}, Dh={config['head_dim']}, float32, no_grad, "
        f"torch {bias.get('torch', '?')}, {threads_text(bias.get('threads'))}: "
        f"median time (x bias-free causal SDPA)",
        format_table(["t", *paths], body, markdown=markdown),
    ]
    notes = sorted({f"{r['path']}: {r['skipped']}" for r in results if r.get("skipped")})
    notes += sorted({f"{r['path']} t={r['length']}: {r['error']}" for r in results if r.get("error")})
    dense = [r for r in results if r.get("mask_build_ms") is not None and not r.get("skipped")]
    if dense:
        notes.append(
            "alibi dense mask: time excludes building the mask, once per forward: "
            + ", ".join(f"t={r['length']} {r['mask_build_ms']:.0f} ms" for r in dense)
        )
    wrong = [r for r in results if r.get("check_ok") is False]
    notes += [
        f"{r['path']} t={r['length']}: output differs from the reference ({r['check_error']:.3g})"
        for r in wrong
    ]
    if notes:
        lines += ["", *[f"- {n}" for n in notes]]
    if bias.get("memory"):
        memory_body = []
        for entry in bias["memory"]:
            if "peak_above_inputs_bytes" in entry:
                peak = format_bytes(entry["peak_above_inputs_bytes"])
                frac = f"{entry['fraction_of_hhtt']:.3f}"
            else:
                peak = entry.get("skipped") or entry.get("error") or "-"
                frac = "-"
            memory_body.append(
                [entry["path"], entry["length"], peak, format_bytes(entry["hhtt_float32_bytes"]), frac]
            )
        lines += [
            "",
            f"Peak memory above the inputs (torch {bias.get('torch', '?')}, {threads_text(bias.get('threads'))}, "
            "fresh process per case, peak RSS; includes building any mask)",
            format_table(
                ["path", "t", "peak above inputs", "one (h, t, t) float32", "fraction"],
                memory_body,
                markdown=markdown,
            ),
        ]
    return "\n".join(lines)
