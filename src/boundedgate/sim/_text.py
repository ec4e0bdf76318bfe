"""Plain-text tables for the command line: requests, trace, summary, sweep."""

from __future__ import annotations

from collections.abc import Sequence

from ._plan import SweepRow
from ._results import Simulation, Summary

__all__ = ("human_ms", "percent", "requests_table", "summary_lines", "sweep_table", "table", "trace_table")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], align: str) -> str:
    """Columns padded to their widest cell, each flush left (``l``) or right (``r``) as ``align`` says.

    None prints as ``-``.
    """
    cells = [list(headers)] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for number, row in enumerate(cells):
        parts = [
            cell.ljust(w) if a == "l" else cell.rjust(w)
            for cell, w, a in zip(row, widths, align, strict=True)
        ]
        lines.append("  ".join(parts).rstrip())
        if number == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def human_ms(ms: float | None) -> str:
    """A duration for people: ``850ms``, ``1.52s``, ``20.1s``, ``2m05s``, ``10m``; ``-`` for None."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms:g}ms"
    if ms < 10_000:
        return f"{ms / 1000:.2f}s"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    minutes, seconds = divmod(round(ms / 1000), 60)
    return f"{minutes}m" if seconds == 0 else f"{minutes}m{seconds:02d}s"


def percent(part: int, whole: int) -> str:
    """``part / whole`` as a percentage, ``0%`` only when exactly none, ``<0.1%`` when a few."""
    if part == 0 or whole == 0:
        return "0%"
    share = 100 * part / whole
    return "<0.1%" if share < 0.1 else f"{share:.1f}%"


def requests_table(result: Simulation) -> str:
    """One line per request, in the script's order, times in milliseconds."""
    rows = [
        (r.id, r.outcome.value, r.arrival_ms, r.start_ms, r.end_ms, r.queue_ms, r.end_to_end_ms)
        for r in result.requests
    ]
    return table(("id", "outcome", "arrival", "start", "end", "queue", "end-to-end"), rows, "llrrrrr")


def trace_table(result: Simulation) -> str:
    """One line per event, with the running and waiting counts just after it."""
    rows = [(e.time_ms, e.event, e.id, e.running, e.waiting) for e in result.trace]
    return table(("time", "event", "id", "running", "waiting"), rows, "rllrr")


def summary_lines(summary: Summary) -> list[str]:
    """The summary: a table of outcomes, the peaks, a table of time distributions (ms)."""
    n = summary.requests
    outcomes = [
        ("completed on time", summary.completed),
        ("late", summary.late),
        ("expired in the queue", summary.expired),
        ("rejected at once", summary.rejected),
    ]
    if summary.evicted:
        outcomes.append(("evicted from the queue", summary.evicted))
    lines = table(("outcome", "requests", "share"), [(o, c, percent(c, n)) for o, c in outcomes], "lrr")
    times = [
        (
            "queue time",
            summary.queue_ms,
            "requests that queued" if summary.evicted else "requests that started or expired",
        ),
        ("end-to-end time", summary.end_to_end_ms, "requests that ran"),
    ]
    distributions = table(
        ("time (ms)", "p50", "p95", "p99", "max", "over"),
        [(name, d.p50, d.p95, d.p99, d.max, f"{d.count} {who}") for name, d, who in times],
        "lrrrrl",
    )
    return [
        *lines.splitlines(),
        "",
        f"peaks: {summary.peak_running} running, {summary.peak_waiting} waiting",
        "",
        *distributions.splitlines(),
    ]


def sweep_table(rows: Sequence[SweepRow]) -> str:
    """A line per setting: the share of each outcome, p99 wait and end-to-end, peak waiting.

    An ``evicted`` column appears when some setting evicted anyone (with priorities).
    """
    evictions = any(row.summary.evicted for row in rows)
    lines = []
    for row in rows:
        s = row.summary
        n = s.requests
        evicted = (percent(s.evicted, n),) if evictions else ()
        lines.append(
            (
                row.max_running,
                "none" if row.max_waiting is None else row.max_waiting,
                percent(s.rejected, n),
                *evicted,
                percent(s.expired, n),
                percent(s.late, n),
                percent(s.completed, n),
                human_ms(s.queue_ms.p99),
                human_ms(s.end_to_end_ms.p99),
                s.peak_waiting,
            )
        )
    headers = (
        "max_running",
        "max_waiting",
        "rejected",
        *(("evicted",) if evictions else ()),
        "expired",
        "late",
        "on time",
        "p99 wait",
        "p99 end-to-end",
        "peak waiting",
    )
    return table(headers, lines, "r" * len(headers))
