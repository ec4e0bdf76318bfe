"""Charts of a simulation and of a sweep, drawn with matplotlib (the ``plot`` extra), imported lazily."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._core import RateLimit
from ._compare import Comparison
from ._plan import SweepRow
from ._provider import Provider
from ._results import Simulation
from ._text import shown

#: The colour of each simulated outcome's line in the sweep chart.
OUTCOME_COLORS = {
    "completed": "tab:green",
    "late": "tab:purple",
    "expired": "tab:orange",
    "rejected": "tab:red",
    "evicted": "tab:gray",
    "rate_limited": "tab:brown",
    "infeasible": "tab:olive",
}

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ("FORMATS", "plot_comparison", "plot_simulation", "plot_sweep", "require_matplotlib")

#: The file formats a chart can be saved as, by file name suffix.
FORMATS = (".svg", ".png", ".pdf")

_INSTALL = "plotting needs matplotlib: pip install 'boundedgate[plot]'"


def require_matplotlib() -> None:
    """Check that matplotlib can be imported, before a long run that ends in a chart.

    Raises:
        ImportError: matplotlib is not installed; the message says how to install it.
    """
    _new_figure()


def _new_figure() -> Figure:
    try:
        from matplotlib.figure import Figure  # noqa: PLC0415 (an optional extra, imported when needed)
    except ImportError as error:
        raise ImportError(_INSTALL) from error
    # A bare Figure draws with the Agg canvas: no pyplot, no global state, no display needed.
    return Figure(figsize=(9, 4.8), layout="constrained")


def _legend_beside(axes: Axes) -> None:
    """The legend to the right of the plot, outside it, where it can never hide a curve."""
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize="small")


def _save(figure: Figure, path: str | Path) -> None:
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise ValueError(f"a chart is saved as {', '.join(FORMATS)}; got {path.name!r}")
    # No creation date in the file, so the same simulation gives the same SVG.
    metadata = {"Date": None} if path.suffix.lower() == ".svg" else None
    figure.savefig(path, metadata=metadata)


def plot_simulation(result: Simulation, path: str | Path, title: str | None = None) -> None:
    """Draw the running and waiting counts over time, against the gate's limits, to ``path``.

    Args:
        result: A simulation run with its trace (the default).
        path: The file to write: ``.svg``, ``.png`` or ``.pdf``.
        title: A title for the chart (default: the settings).

    Raises:
        ImportError: matplotlib is not installed.
        ValueError: A file name with another suffix, or a simulation without its trace.
    """
    if result.requests and not result.trace:
        raise ValueError("this simulation kept no trace; run simulate(..., trace=True)")
    figure = _new_figure()
    running_axes, waiting_axes = figure.subplots(2, 1, sharex=True)
    last = result.trace[-1].time_ms if result.trace else 0
    scale, unit = (1, "ms") if last < 10_000 else (1000, "s")
    # Counts start at zero before the first event; a step holds each value until the next event.
    times = [0.0] + [event.time_ms / scale for event in result.trace]
    q = "unbounded" if result.max_waiting is None else result.max_waiting
    c = "unbounded" if result.max_running is None else result.max_running
    for axes, counts, limit, name, color in (
        (running_axes, [e.running for e in result.trace], result.max_running, "running", "tab:blue"),
        (waiting_axes, [e.waiting for e in result.trace], result.max_waiting, "waiting", "tab:orange"),
    ):
        axes.step(times, [0, *counts], where="post", color=color, label=name)
        if limit is not None:
            axes.axhline(limit, linestyle=":", color="grey", label=f"max_{name} = {limit}")
        axes.set_ylabel(name)
        axes.set_ylim(bottom=0)
        _legend_beside(axes)
    waiting_axes.set_xlabel(f"time ({unit})")
    limits = "".join(f", {limit.name}" for limit in result.rate_limits)
    running_axes.set_title(title or f"max_running={c}, max_waiting={q}{limits}")
    _save(figure, path)


def plot_sweep(rows: Sequence[SweepRow], path: str | Path, title: str | None = None) -> None:
    """Draw each outcome's share, and the p99 wait, against the setting that varies, to ``path``.

    The x axis is ``max_waiting``, or the rate limits when they vary and ``max_waiting`` does not;
    its settings are evenly spaced in the order given (an unbounded queue reads ``none``), with one
    line per outcome and per value of the other settings.

    Args:
        rows: The sweep.
        path: The file to write: ``.svg``, ``.png`` or ``.pdf``.
        title: A title for the chart.

    Raises:
        ImportError: matplotlib is not installed.
        ValueError: A file name with another suffix, or no rows.
    """
    if not rows:
        raise ValueError("no rows to plot")
    figure = _new_figure()
    shares, waits = figure.subplots(1, 2)
    axis = _SweepAxis(rows)
    lines = list(dict.fromkeys(axis.line_of(row) for row in rows))
    listed = shown([row.summary for row in rows], any(row.rate_limits for row in rows))
    outcomes = [(o.name, o.column, OUTCOME_COLORS[o.name]) for o in listed]
    running = len({line[0] for line in lines}) > 1
    limits = len(axis.limit_sets) > 1 and not axis.by_limits
    for number, line in enumerate(lines):
        mine = [row for row in rows if axis.line_of(row) == line]
        xs = [axis.x_of(row) for row in mine]
        suffix = _line_label(line, running, limits)
        style = _STYLES[number % len(_STYLES)]
        for field, label, color in outcomes:
            ys = [100 * getattr(row.summary, field) / max(row.summary.requests, 1) for row in mine]
            shares.plot(xs, ys, style, marker="o", color=color, label=label + suffix)
        p99 = [(row.summary.queue_ms.p99 or 0) / 1000 for row in mine]
        waits.plot(xs, p99, style, marker="o", color="tab:blue", label="p99 wait" + suffix)
    axis.draw(shares, waits)
    shares.set_ylabel("% of requests")
    shares.set_ylim(0, 100)
    waits.set_ylabel("p99 queue time (s)")
    waits.set_ylim(bottom=0)
    if title:
        figure.suptitle(title)
    _save(figure, path)


#: The line styles of a chart's lines, in turn.
_STYLES = ("-", "--", "-.", ":")

#: A line of a sweep chart: its C, and its rate limits unless they are the x axis (then None).
_Line = tuple[int | None, tuple[RateLimit, ...] | None]


class _SweepAxis:
    """A sweep chart's x axis: ``max_waiting``, or the rate limits when they vary and it does not."""

    def __init__(self, rows: Sequence[SweepRow]) -> None:
        self.waitings = list(dict.fromkeys(row.max_waiting for row in rows))
        self.limit_sets = list(dict.fromkeys(row.rate_limits for row in rows))
        self.by_limits = len(self.waitings) == 1 and len(self.limit_sets) > 1

    def x_of(self, row: SweepRow) -> int:
        """The place of ``row``'s setting on the axis (evenly spaced, in the order given)."""
        return (
            self.limit_sets.index(row.rate_limits) if self.by_limits else self.waitings.index(row.max_waiting)
        )

    def line_of(self, row: SweepRow) -> _Line:
        """The line ``row`` is a point of: one per value of the settings that are not the axis."""
        return (row.max_running, None) if self.by_limits else (row.max_running, row.rate_limits)

    def draw(self, *axes: Axes) -> None:
        """Label the x axis of each of ``axes``, and put its legend beside it."""
        if self.by_limits:
            labels = [_limits_label(limits, "\n") for limits in self.limit_sets]
            name = "rate limits"
        else:
            labels = ["none" if q is None else str(q) for q in self.waitings]
            name = "max_waiting"
        tilt: dict[str, Any] = {"rotation": 30, "ha": "right"} if self.by_limits and len(labels) > 3 else {}
        for each in axes:
            each.set_xticks(range(len(labels)), labels, fontsize="small", **tilt)
            each.set_xlabel(name)
            _legend_beside(each)


#: How many times K(t) is sampled over the run for the chart.
CAPACITY_SAMPLES = 1000


def plot_comparison(
    comparison: Comparison, provider: Provider, path: str | Path, title: str | None = None
) -> None:
    """Draw a comparison over time: C against K(t), answers on time per second, and ahead or behind.

    Three panels, to ``path``: each adaptive contender's C (with several gates, their Cs summed)
    against the provider's K(t); each
    contender's answers on time per second; and its answers on time so far, less the best static
    gate's (where one pulls ahead or falls behind).

    Args:
        comparison: What :func:`~boundedgate.sim.compare_admission` gave.
        provider: The provider it ran against (for K(t)).
        path: The file to write: ``.svg``, ``.png`` or ``.pdf``.
        title: A title for the chart.

    Raises:
        ImportError: matplotlib is not installed.
        ValueError: A file name with another suffix.
    """
    figure = _new_figure()
    figure.set_size_inches(9, 9)
    limits_axes, rate_axes, ahead_axes = figure.subplots(3, 1, sharex=True)
    ends = [t for c in comparison.contenders for t in (*c.result.on_time_at[-1:], c.result.limits[-1][0])]
    end = max([1.0, *ends])
    times = [end * i / CAPACITY_SAMPLES for i in range(CAPACITY_SAMPLES + 1)]
    limits_axes.step(times, [provider.k(t) for t in times], where="post", color="black", label="K(t)")
    # Seconds per bin of the rate: one, or as many as keep the bins to about a thousand.
    width = float(max(1, math.ceil(end / 1000)))
    bins = [width * i for i in range(math.ceil(end / width) + 1)]
    best = comparison.best.result.on_time_at
    for number, contender in enumerate(comparison.contenders):
        color = f"C{number}"
        style = _STYLES[number // 10 % len(_STYLES)]
        result = contender.result
        if contender.adaptive is not None:
            xs = [t for t, _ in result.limits] + [end]
            ys = [c for _, c in result.limits] + [result.limits[-1][1]]
            label = f"C of {contender.name}" + (", all gates" if contender.keys else "")
            limits_axes.step(xs, ys, style, where="post", color=color, label=label)
        counts = [0] * len(bins)
        for t in result.on_time_at:
            counts[int(t // width)] += 1
        rate_axes.step(
            bins, [n / width for n in counts], style, where="post", color=color, label=contender.name
        )
        ahead = [bisect.bisect_right(result.on_time_at, t) - bisect.bisect_right(best, t) for t in times]
        ahead_axes.step(times, ahead, style, where="post", color=color, label=contender.name)
    limits_axes.set_ylabel("C, K (concurrent)")
    limits_axes.set_ylim(bottom=0)
    rate_axes.set_ylabel("on time per second" if width == 1 else f"on time per second\n(over {width:g}s)")
    rate_axes.set_ylim(bottom=0)
    ahead_axes.set_ylabel("on time so far,\nless the best static's")
    ahead_axes.axhline(0, color="grey", linewidth=0.5)
    ahead_axes.set_xlabel("time (s)")
    for axes in (limits_axes, rate_axes, ahead_axes):
        _legend_beside(axes)
    if title:
        figure.suptitle(title)
    _save(figure, path)


def _limits_label(limits: Sequence[RateLimit], between: str = " + ") -> str:
    return between.join(limit.name for limit in limits) or "none"


def _line_label(line: _Line, running: bool, limits: bool) -> str:
    # What tells a line from the others: its C when several are drawn, its rate limits likewise.
    c, rate_limits = line
    parts = []
    if running:
        parts.append(f"C={'none' if c is None else c}")
    if limits and rate_limits is not None:
        parts.append(_limits_label(rate_limits))
    return "".join(f", {part}" for part in parts)
