"""The RoPE section's tables: ``x clone`` and the speed-up over transformers per shape, dtype and
pass, the compile cost, drifting clones and wrong outputs. Re-exported by :mod:`benchmarks.rope`."""

from __future__ import annotations

from typing import Any

from .baseline import scaling_table
from .common import fmt, fmt_ms, format_table, threads_text
from .rope_impls import CLONE, CLONE_CONSISTENCY, COPY, _shape_str

__all__ = ["rope_tables"]


def rope_tables(rope: dict[str, Any], *, markdown: bool) -> str:
    """The RoPE results as tables: one line per shape, dtype and pass; ``x clone`` per implementation."""
    results = rope["results"]
    lines: list[str] = []
    if rope.get("clone_scaling"):
        lines += [
            f"Clone baseline: q.clone(); k.clone() by size ({threads_text(rope.get('threads'))})",
            scaling_table(rope["clone_scaling"], markdown=markdown),
            "",
        ]
    if not results:
        return "\n".join([*lines, "(no RoPE results)"])
    columns: list[str] = []
    for row in results:
        name = row["implementation"] if row["mode"] == "eager" else row["implementation"] + " [compiled]"
        if name not in columns:
            columns.append(name)
    groups: dict[tuple, dict[str, dict[str, Any]]] = {}
    for row in results:
        key = (tuple(row["shape"]), row["dtype"], row["pass"])
        name = row["implementation"] if row["mode"] == "eager" else row["implementation"] + " [compiled]"
        groups.setdefault(key, {})[name] = row

    def cell(row: dict[str, Any] | None) -> str:
        if row is None:
            return "-"
        if row.get("error"):
            return "error"
        if row["implementation"] == CLONE:
            return f"{fmt_ms(row['median_ms'])} ms"
        text = fmt(row.get("x_clone"))
        if row.get("check_ok") is False:
            text += " (wrong)"
        return text

    headers = [
        "shape (b, h, t, dh)",
        "dtype",
        "pass",
        *[c if c != CLONE else "clone (limit)" for c in columns],
    ]
    body = [
        [_shape_str(key[0]), key[1], key[2], *[cell(group.get(c)) for c in columns]]
        for key, group in groups.items()
    ]
    lines += [
        f"RoPE apply on q and k, {threads_text(rope.get('threads'))}: time / clone limit "
        "(lower is better; clone column: its time)",
        format_table(headers, body, markdown=markdown),
    ]
    speed_rows = []
    for key, group in groups.items():
        speed_rows.append(
            [
                _shape_str(key[0]),
                key[1],
                key[2],
                *[
                    fmt(group[c].get("speedup_vs_transformers")) if c in group else "-"
                    for c in columns
                    if c not in (CLONE, COPY)
                ],
            ]
        )
    lines += [
        "",
        "Speed-up over transformers' apply_rotary_pos_emb in the same mode (higher is better; transformers is "
        "given its cos/sin, compiled posenc computes its own in the call)",
        format_table(
            headers[:3] + [c for c in columns if c not in (CLONE, COPY)], speed_rows, markdown=markdown
        ),
    ]
    if rope.get("compile"):
        compile_body = [
            [
                entry["implementation"],
                _shape_str(tuple(entry["shape"])),
                entry["dtype"],
                entry["pass"],
                fmt(entry.get("compile_s"), 1),
                entry["graphs_compiled"],
            ]
            for entry in rope["compile"]
        ]
        lines += [
            "",
            "One-time torch.compile cost (first call minus the steady time; 0 graphs = no recompile)",
            format_table(
                ["implementation", "shape", "dtype", "pass", "compile s", "graphs"],
                compile_body,
                markdown=markdown,
            ),
        ]
    drifted = [
        r
        for r in results
        if r.get("clone_vs_scaling_run") is not None
        and not 1 / CLONE_CONSISTENCY <= r["clone_vs_scaling_run"] <= CLONE_CONSISTENCY
    ]
    if drifted:
        lines += [
            "",
            f"Clones that took more than {CLONE_CONSISTENCY:g}x more or less time in their group than in the "
            "scaling run (load or allocator state changed between them; that line's ratios rest on the "
            "group's clone):",
        ]
        lines += [
            f"- {_shape_str(tuple(r['shape']))} {r['dtype']}: {r['clone_vs_scaling_run']:.2f}x"
            for r in drifted
        ]
    wrong = [r for r in results if r.get("check_ok") is False]
    if wrong:
        lines += ["", "Outputs that differ from the float64 reference (timed anyway, marked 'wrong'):"]
        lines += [
            f"- {r['implementation']}{' [compiled]' if r['mode'] == 'compile' else ''} {_shape_str(tuple(r['shape']))} "
            f"{r['dtype']} {r['pass']}: relative error {r['check_error']:.3g} > tolerance {r['check_tolerance']:.3g}"
            for r in wrong
        ]
    return "\n".join(lines)
