"""Plain-text tables for the command line: requests, trace, summary, sweep."""

from __future__ import annotations

from collections.abc import Sequence

from ._plan import SweepRow
from ._results import ClassSummary, Simulation, Summary

__all__ = (
    "classes_table",
    "human_ms",
    "number",
    "percent",
    "requests_table",
    "summary_lines",
    "sweep_table",
    "table",
    "trace_table",
)


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


def number(value: float | None) -> str | None:
    """A time in ms or a balance for a table: whole numbers as they are, others to three decimals.

    None stays None (the table prints ``-``).
    """
    if value is None:
        return None
    if value == int(value):
        return str(int(value))
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


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
        (
            r.id,
            r.outcome.value,
            *map(number, (r.arrival_ms, r.start_ms, r.end_ms, r.queue_ms, r.end_to_end_ms)),
        )
        for r in result.requests
    ]
    return table(("id", "outcome", "arrival", "start", "end", "queue", "end-to-end"), rows, "llrrrrr")


def trace_table(result: Simulation) -> str:
    """One line per event, with the running and waiting counts just after it.

    With rate limits, a column per limit (named after it) shows its balance just after the event.
    """
    names = tuple(limit.name for limit in result.rate_limits)
    rows = [
        (number(e.time_ms), e.event, e.id, e.running, e.waiting, *map(number, e.tokens)) for e in result.trace
    ]
    return table(("time", "event", "id", "running", "waiting", *names), rows, "rllrr" + "r" * len(names))


def summary_lines(summary: Summary, rate_limits: bool = False) -> list[str]:
    """The summary: a table of outcomes, the peaks, a table of time distributions (ms).

    The outcome "rate limited at once" is listed when ``rate_limits`` is true or any request was;
    with several priority classes, a table per class follows.
    """
    n = summary.requests
    outcomes = [
        ("completed on time", summary.completed),
        ("late", summary.late),
        ("expired in the queue", summary.expired),
        ("rejected at once", summary.rejected),
    ]
    if summary.evicted:
        outcomes.append(("evicted from the queue", summary.evicted))
    if rate_limits or summary.rate_limited:
        outcomes.append(("rate limited at once", summary.rate_limited))
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
        [(name, *map(number, (d.p50, d.p95, d.p99, d.max)), f"{d.count} {who}") for name, d, who in times],
        "lrrrrl",
    )
    result = [
        *lines.splitlines(),
        "",
        f"peaks: {summary.peak_running} running, {summary.peak_waiting} waiting",
        "",
        *distributions.splitlines(),
    ]
    if summary.classes:
        result += ["", *classes_table(summary.classes, rate_limits).splitlines()]
    return result


def classes_table(classes: Sequence[ClassSummary], rate_limits: bool = False) -> str:
    """A line per priority class: its requests, their outcomes, and their queue and end-to-end times.

    The ``evicted`` and ``rate limited`` columns appear when some class has any (or, for the
    latter, when ``rate_limits`` is true).
    """
    evictions = any(c.evicted for c in classes)
    limited = rate_limits or any(c.rate_limited for c in classes)
    rows = [
        (
            c.priority,
            c.requests,
            c.completed,
            c.late,
            c.expired,
            c.rejected,
            *((c.evicted,) if evictions else ()),
            *((c.rate_limited,) if limited else ()),
            number(c.queue_ms.p50),
            number(c.queue_ms.p99),
            number(c.end_to_end_ms.p99),
        )
        for c in classes
    ]
    headers = (
        "class",
        "requests",
        "on time",
        "late",
        "expired",
        "rejected",
        *(("evicted",) if evictions else ()),
        *(("rate limited",) if limited else ()),
        "p50 wait",
        "p99 wait",
        "p99 end-to-end",
    )
    return table(headers, rows, "r" * len(headers))


def sweep_table(rows: Sequence[SweepRow]) -> str:
    """A line per setting: the share of each outcome, p99 wait and end-to-end, peak waiting.

    An ``evicted`` column appears when some setting evicted anyone (with priorities); with rate
    limits, a column names each setting's limits and a ``rate limited`` column gives the share
    refused at once for them.
    """
    evictions = any(row.summary.evicted for row in rows)
    limited = any(row.rate_limits for row in rows)
    lines = []
    for row in rows:
        s = row.summary
        n = s.requests
        evicted = (percent(s.evicted, n),) if evictions else ()
        limits = (" + ".join(limit.name for limit in row.rate_limits) or "none",) if limited else ()
        rate_limited = (percent(s.rate_limited, n),) if limited else ()
        lines.append(
            (
                "none" if row.max_running is None else row.max_running,
                "none" if row.max_waiting is None else row.max_waiting,
                *limits,
                percent(s.rejected, n),
                *evicted,
                *rate_limited,
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
        *(("rate limits",) if limited else ()),
        "rejected",
        *(("evicted",) if evictions else ()),
        *(("rate limited",) if limited else ()),
        "expired",
        "late",
        "on time",
        "p99 wait",
        "p99 end-to-end",
        "peak waiting",
    )
    align = "rr" + ("l" if limited else "") + "r" * (len(headers) - 2 - limited)
    return table(headers, lines, align)
