"""Plain-text tables for the command line: requests, trace, summary, sweep."""

from __future__ import annotations

from collections.abc import Sequence

from .._core import BY_NAME, SIMULATED, Outcome
from ._compare import Comparison, Contender
from ._plan import SweepRow
from ._results import ClassSummary, KeySummary, Simulation, Summary

__all__ = (
    "classes_table",
    "comparison_table",
    "human_ms",
    "key_name",
    "keys_comparison_table",
    "keys_table",
    "number",
    "percent",
    "printable",
    "requests_table",
    "summary_lines",
    "sweep_table",
    "table",
    "trace_table",
)


#: The order of the sweep table's outcome columns: refusals first, answers last.
SWEEP_ORDER = tuple(
    BY_NAME[name]
    for name in ("rejected", "evicted", "rate_limited", "infeasible", "expired", "late", "completed")
)


def shown(
    parts: Sequence[Summary | ClassSummary | KeySummary],
    rate_limits: bool,
    order: Sequence[Outcome] = SIMULATED,
) -> list[Outcome]:
    """The outcomes a table of ``parts`` lists, in ``order``.

    Those shown always, those some part ended in, and ``rate_limited`` whenever ``rate_limits``
    is true (the reader asked about them: a zero is news).
    """
    return [
        outcome
        for outcome in order
        if outcome.always_shown
        or any(getattr(part, outcome.name) for part in parts)
        or (rate_limits and outcome.name == "rate_limited")
    ]


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


def printable(text: str) -> str:
    r"""``text`` for a terminal: characters that are not printable escaped as in a Python literal.

    So a key or an id can hold no escape sequence, control character or lone surrogate that the
    terminal would act on or fail to encode: ``"\x1b[2J"`` prints as ``\x1b[2J``.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def key_name(key: str) -> str:
    """A key for a table: printable, and the default key, ``""``, shows as ``""``."""
    return printable(key) or '""'


def requests_table(result: Simulation) -> str:
    """One line per request, in the script's order, times in milliseconds.

    With several keys, a column names each request's key.
    """
    keyed = bool(result.summary.keys)
    rows = [
        (
            printable(r.id),
            *((key_name(r.key),) if keyed else ()),
            r.outcome.value,
            *map(number, (r.arrival_ms, r.start_ms, r.end_ms, r.queue_ms, r.end_to_end_ms)),
        )
        for r in result.requests
    ]
    headers = (
        "id",
        *(("key",) if keyed else ()),
        "outcome",
        "arrival",
        "start",
        "end",
        "queue",
        "end-to-end",
    )
    return table(headers, rows, "ll" + "l" * keyed + "rrrrr")


def trace_table(result: Simulation) -> str:
    """One line per event, with the running and waiting counts just after it.

    With rate limits, a column per limit (named after it) shows its balance just after the event.
    With several keys, a column names the event's key, ``running`` and ``waiting`` are the totals
    over every key, and ``key running`` and ``key waiting`` the counts of the event's key's gate
    (whose buckets the balances are).
    """
    keyed = bool(result.summary.keys)
    names = tuple(limit.name for limit in result.rate_limits)
    rows = [
        (
            number(e.time_ms),
            e.event,
            printable(e.id),
            *((key_name(e.key),) if keyed else ()),
            e.running,
            e.waiting,
            *((e.key_running, e.key_waiting) if keyed else ()),
            *map(number, e.tokens),
        )
        for e in result.trace
    ]
    headers = (
        "time",
        "event",
        "id",
        *(("key",) if keyed else ()),
        "running",
        "waiting",
        *(("key running", "key waiting") if keyed else ()),
        *names,
    )
    align = "rll" + "l" * keyed + "rr" + "rr" * keyed + "r" * len(names)
    return table(headers, rows, align)


def summary_lines(summary: Summary, rate_limits: bool = False) -> list[str]:
    """The summary: a table of outcomes, the peaks, a table of time distributions (ms).

    The outcome "rate limited at once" is listed when ``rate_limits`` is true or any request was;
    with several priority classes, a table of the classes follows, and with several keys, a table
    of the keys (the peaks above are then those of all keys' gates together).
    """
    n = summary.requests
    outcomes = [(o.label, getattr(summary, o.name)) for o in shown([summary], rate_limits)]
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
        f"peaks: {summary.peak_running} running, {summary.peak_waiting} waiting"
        + (" (all keys together)" if summary.keys else ""),
        "",
        *distributions.splitlines(),
    ]
    if summary.classes:
        result += ["", *classes_table(summary.classes, rate_limits).splitlines()]
    if summary.keys:
        result += ["", *keys_table(summary.keys, rate_limits).splitlines()]
    return result


def _breakdown(
    parts: Sequence[ClassSummary | KeySummary],
    rate_limits: bool,
    leading: Sequence[tuple[str, Sequence[object], str]],
) -> str:
    """A line per class or key: its requests, their outcomes, and their queue and end-to-end times.

    ``leading`` gives the columns before those, each as its header, a cell per part, and its
    alignment.

    The ``evicted`` and ``rate limited`` columns appear when some part has any (or, for the
    latter, when ``rate_limits`` is true).
    """
    outcomes = shown(parts, rate_limits)
    rows = [
        (
            *(cells[n] for _, cells, _ in leading),
            p.requests,
            *(getattr(p, o.name) for o in outcomes),
            number(p.queue_ms.p50),
            number(p.queue_ms.p99),
            number(p.end_to_end_ms.p99),
        )
        for n, p in enumerate(parts)
    ]
    headers = (
        *(header for header, _, _ in leading),
        "requests",
        *(o.column for o in outcomes),
        "p50 wait",
        "p99 wait",
        "p99 end-to-end",
    )
    align = "".join(a for _, _, a in leading) + "r" * (len(headers) - len(leading))
    return table(headers, rows, align)


def classes_table(classes: Sequence[ClassSummary], rate_limits: bool = False) -> str:
    """A line per priority class: its requests, their outcomes, and their queue and end-to-end times.

    The ``evicted`` and ``rate limited`` columns appear when some class has any (or, for the
    latter, when ``rate_limits`` is true).
    """
    return _breakdown(classes, rate_limits, [("class", [c.priority for c in classes], "r")])


def keys_table(keys: Sequence[KeySummary], rate_limits: bool = False) -> str:
    """A line per key: its gate's limits and peaks, then as :func:`classes_table`.

    Limits that are None (not limited, unbounded) show as ``none``.
    """
    leading: list[tuple[str, Sequence[object], str]] = [
        ("key", [key_name(k.key) for k in keys], "l"),
        ("max_running", ["none" if k.max_running is None else k.max_running for k in keys], "r"),
        ("max_waiting", ["none" if k.max_waiting is None else k.max_waiting for k in keys], "r"),
        ("peak running", [k.peak_running for k in keys], "r"),
        ("peak waiting", [k.peak_waiting for k in keys], "r"),
    ]
    return _breakdown(keys, rate_limits, leading)


def sweep_table(rows: Sequence[SweepRow]) -> str:
    """A line per setting: the share of each outcome, p99 wait and end-to-end, peak waiting.

    An ``evicted`` column appears when some setting evicted anyone (with priorities); with rate
    limits, a column names each setting's limits and a ``rate limited`` column gives the share
    refused at once for them.
    """
    limited = any(row.rate_limits for row in rows)
    outcomes = shown([row.summary for row in rows], limited, SWEEP_ORDER)
    lines = []
    for row in rows:
        s = row.summary
        n = s.requests
        limits = (" + ".join(limit.name for limit in row.rate_limits) or "none",) if limited else ()
        lines.append(
            (
                "none" if row.max_running is None else row.max_running,
                "none" if row.max_waiting is None else row.max_waiting,
                *limits,
                *(percent(getattr(s, o.name), n) for o in outcomes),
                human_ms(s.queue_ms.p99),
                human_ms(s.end_to_end_ms.p99),
                s.peak_waiting,
            )
        )
    headers = (
        "max_running",
        "max_waiting",
        *(("rate limits",) if limited else ()),
        *(o.column for o in outcomes),
        "p99 wait",
        "p99 end-to-end",
        "peak waiting",
    )
    align = "rr" + ("l" if limited else "") + "r" * (len(headers) - 2 - limited)
    return table(headers, lines, align)


def _running(contender: Contender) -> str:
    # A static C as it is; an adaptive one as the range it took over the run (each gate's).
    if contender.adaptive is None:
        return str(contender.max_running)
    seen = [c for result in contender.keys or (contender.result,) for _, c in result.limits]
    low, high = min(seen), max(seen)
    return str(low) if low == high else f"{low}-{high}"


def comparison_table(comparison: Comparison) -> str:
    """A line per contender: C, Q, on time and its ratio to the best static gate's, and the rest.

    The rest: late answers, calls cut off at their deadline, the provider's refusals, the gate's
    refusals, expiries, the mean time to a "no" from the gate, and the provider's time spent on
    answers nobody waited for (late or cut off).
    """
    lines = []
    for contender in comparison.contenders:
        r = contender.result
        ratio = comparison.ratio(contender)
        told = r.mean_refusal_seconds
        lines.append(
            (
                contender.name,
                _running(contender),
                "none" if contender.max_waiting is None else contender.max_waiting,
                r.on_time,
                None if ratio is None else f"{ratio:.3f}",
                r.late,
                r.cut,
                r.provider_refused,
                r.rejected + r.infeasible,
                r.expired,
                None if told is None else human_ms(round(told * 1000)),
                f"{r.wasted_seconds:.0f}s",
            )
        )
    headers = (
        "contender", "C", "Q", "on time", "ratio", "late", "cut", "529/429", "refused", "expired", "no in",
        "wasted",
    )  # fmt: skip
    return table(headers, lines, "lll" + "r" * 9)


def keys_comparison_table(comparison: Comparison, keys: Sequence[str]) -> str:
    """A line per contender, a column per gate (``keys`` names them): each gate's answers on time."""
    lines = [(c.name, *(key.on_time for key in c.keys)) for c in comparison.contenders]
    headers = ("on time by key", *(key_name(key) for key in keys))
    return table(headers, lines, "l" + "r" * len(keys))
