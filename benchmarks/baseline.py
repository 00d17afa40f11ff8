"""The clone baseline and the check that it measures memory traffic, not scheduling latency.

RoPE's times are reported as ratios to ``q.clone(); k.clone()`` (one read and one write of q
and k: the memory-traffic limit of any out-of-place RoPE). That ratio only means something if
the clone's time is set by the bytes it moves. On a loaded 2-core machine with several torch
threads it is not: every parallel region waits for a scheduler time slice, medians of small
ops sit on ~8 ms steps, and a 1 MiB clone "took" 16 ms (0.02 ms single-threaded).

So before the RoPE groups, the suite times clones of q and k at every benchmark shape and
dtype (in the RoPE section's thread setting) and checks that the time grows with
the bytes (:func:`scaling_check`). When it does not, the report says so at the top and every
ratio to the clone is marked unreliable.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .common import fmt, fmt_ms, format_table, threads_text, time_interleaved

__all__ = [
    "CRITERION",
    "DEFAULT_MAX_RATIO",
    "MIN_SPAN",
    "run_clone_scaling",
    "scaling_check",
    "scaling_table",
    "verdict_line",
]

#: A smaller clone may cost at most this many times more per byte than a larger one.
DEFAULT_MAX_RATIO = 2.0
#: The check needs sizes spanning at least this factor in bytes to say anything.
MIN_SPAN = 8.0

CRITERION = (
    "time grows with bytes: for every pair of sizes, the smaller clone's time per byte is at most "
    "{max_ratio:g}x the larger one's (caches make small copies faster per byte and page faults make "
    "large ones slower, never the reverse; a latency floor such as scheduler time slices makes small "
    "copies slower per byte)"
)


def _loglog_exponent(points: Sequence[tuple[float, float]]) -> float | None:
    """The least-squares slope of ``log(seconds)`` against ``log(bytes)`` (1: time proportional to bytes)."""
    xs = [math.log(b) for b, _ in points]
    ys = [math.log(s) for _, s in points]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    var_x = sum((x - mean_x) ** 2 for x in xs)
    if var_x == 0:
        return None
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / var_x


def scaling_check(
    points: Sequence[tuple[float, float]], *, max_ratio: float = DEFAULT_MAX_RATIO, min_span: float = MIN_SPAN
) -> dict[str, Any]:
    """Whether a copy's time scales with the bytes it moves.

    Args:
        points: ``(bytes, seconds)`` of one operation at several sizes.
        max_ratio: the most a smaller size's time per byte may exceed a larger one's.
        min_span: the sizes must span at least this factor in bytes, else nothing is concluded.

    Returns:
        ``scales`` (True, False, or None when the sizes do not span ``min_span``), ``criterion``
        (the rule in words), ``worst_ratio`` and ``worst_pair`` (the bytes of the pair that came
        closest to, or broke, the rule), ``exponent`` (the log-log least-squares slope of time
        against bytes: about 1 or more when the time follows the bytes, near 0 for a latency
        floor), ``span`` and ``points`` (with ``ns_per_byte``).
    """
    clean = sorted((float(b), float(s)) for b, s in points if b > 0 and s > 0)
    result: dict[str, Any] = {
        "criterion": CRITERION.format(max_ratio=max_ratio),
        "max_ratio": max_ratio,
        "min_span": min_span,
        "points": [{"bytes": int(b), "seconds": s, "ns_per_byte": s / b * 1e9} for b, s in clean],
        "scales": None,
        "worst_ratio": None,
        "worst_pair": None,
        "exponent": None,
        "span": None,
    }
    if len(clean) < 2:
        result["reason"] = "fewer than two sizes measured"
        return result
    span = clean[-1][0] / clean[0][0]
    result["span"] = span
    result["exponent"] = _loglog_exponent(clean)
    worst, worst_pair = 0.0, None
    for (b1, s1), (b2, s2) in itertools.combinations(clean, 2):
        per_byte_small, per_byte_large = s1 / b1, s2 / b2
        if b1 == b2:  # the same size twice: neither may be much slower than the other
            r = max(per_byte_small, per_byte_large) / min(per_byte_small, per_byte_large)
        else:
            r = per_byte_small / per_byte_large
        if r > worst:
            worst, worst_pair = r, [int(b1), int(b2)]
    result["worst_ratio"], result["worst_pair"] = worst, worst_pair
    if span < min_span:
        result["reason"] = f"the sizes span only {span:.1f}x in bytes (need {min_span:g}x)"
        return result
    result["scales"] = worst <= max_ratio
    return result


def _pair_bytes(shape: Sequence[int], dtype: torch.dtype) -> int:
    return 2 * math.prod(shape) * torch.empty((), dtype=dtype).element_size()


def run_clone_scaling(
    shapes: Sequence[Sequence[int]],
    dtypes: dict[str, torch.dtype],
    *,
    reps: int,
    min_sample_s: float,
    budget_s: float,
    max_ratio: float = DEFAULT_MAX_RATIO,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Time ``q.clone(); k.clone()`` at every shape and dtype and check the time scales with bytes.

    One size after the other, smallest first, each timed alone (``budget_s`` is shared among
    them): interleaving sizes would let the large clones' fresh mappings change what the
    allocator hands the small ones (measured: a 32 MiB clone 2-5x slower when interleaved with
    128 MiB ones), and the RoPE groups each time one size alone.

    Returns:
        :func:`scaling_check`'s result plus ``cases``: ``shape, dtype, bytes`` (q and k
        together) and the timing stats of each clone, and ``threads``.
    """
    generator = torch.Generator().manual_seed(0)
    sizes = sorted(
        ((tuple(shape), name, dtype) for name, dtype in dtypes.items() for shape in shapes),
        key=lambda case: _pair_bytes(case[0], case[2]),
    )
    log(f"[baseline] clone of q and k at {len(sizes)} sizes, {threads_text(torch.get_num_threads())}")
    cases = []
    for shape, dtype_name, dtype in sizes:
        q = torch.randn(shape, generator=generator).to(dtype)
        k = torch.randn(shape, generator=generator).to(dtype)
        stats = time_interleaved(
            {"clone": lambda q=q, k=k: (q.clone(), k.clone())},
            reps=reps,
            min_sample_s=min_sample_s,
            budget_s=budget_s / max(len(sizes), 1),
        )["clone"]
        cases.append(
            {"shape": list(shape), "dtype": dtype_name, "bytes": _pair_bytes(shape, dtype), **stats.as_dict()}
        )
        del q, k
    result = scaling_check([(c["bytes"], c["median_ms"] / 1e3) for c in cases], max_ratio=max_ratio)
    result["cases"] = cases
    result["threads"] = torch.get_num_threads()
    verdict = {True: "scales with bytes", False: "DOES NOT scale with bytes", None: "not conclusive"}
    log(
        f"  {verdict[result['scales']]}: worst time-per-byte ratio {fmt(result['worst_ratio'])}, "
        f"log-log exponent {fmt(result['exponent'])}"
    )
    return result


def verdict_line(scaling: dict[str, Any]) -> str:
    """One sentence on the clone baseline: scales, does not (ratios unreliable), or not conclusive."""
    threads = scaling.get("threads")
    where = f" ({threads_text(threads)})" if threads is not None else ""
    details = (
        f"worst time-per-byte ratio {fmt(scaling.get('worst_ratio'))} (limit {scaling['max_ratio']:g}), "
        f"log-log exponent {fmt(scaling.get('exponent'))}"
    )
    if scaling["scales"] is True:
        return f"The clone baseline scales with bytes{where}: {details}."
    if scaling["scales"] is False:
        return (
            f"WARNING: the clone baseline does NOT scale with bytes{where}: {details}. Its times are set "
            "by something other than memory traffic (thread scheduling on a loaded machine, or per-call "
            "overhead at tiny sizes), so every ratio to the clone, and the RoPE targets, are UNRELIABLE "
            "in this run."
        )
    return f"The clone baseline's scaling was not checked{where}: {scaling.get('reason', 'no data')}."


def scaling_table(scaling: dict[str, Any], *, markdown: bool) -> str:
    """The clone timings by size, with the verdict and the criterion."""
    body = [
        [
            "(" + ", ".join(map(str, c["shape"])) + ")",
            c["dtype"],
            f"{c['bytes'] / 2**20:.3g}",
            fmt_ms(c["median_ms"]),
            f"{c['median_ms'] / 1e3 / c['bytes'] * 1e9:.3f}",
            f"{c['bytes'] / (c['median_ms'] / 1e3) / 1e9:.1f}",
        ]
        for c in scaling.get("cases", [])
    ]
    lines = [
        verdict_line(scaling),
        f"Criterion: {scaling['criterion']}.",
    ]
    if body:
        lines += [
            "",
            format_table(
                ["shape (b, h, t, dh)", "dtype", "q+k MiB", "clone ms", "ns/byte", "GB/s read"],
                body,
                markdown=markdown,
            ),
        ]
    return "\n".join(lines)
