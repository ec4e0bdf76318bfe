"""Charts of a simulation and of a sweep, drawn with matplotlib (the ``plot`` extra), imported lazily."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ._plan import SweepRow
from ._results import Simulation

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ("FORMATS", "plot_simulation", "plot_sweep", "require_matplotlib")

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


def _save(figure: Figure, path: str | Path) -> None:
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise ValueError(f"a chart is saved as {', '.join(FORMATS)}; got {path.name!r}")
    # No creation date in the file, so the same simulation gives the same SVG.
    metadata = {"Date": None} if path.suffix.lower() == ".svg" else None
    figure.savefig(path, metadata=metadata)


def plot_simulation(result: Simulation, path: str | Path, title: str | None = None) -> None:
    """Draw the running and waiting counts over time, with the gate's limits, to ``path``.

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
    axes = figure.add_subplot()
    times = [event.time_ms / 1000 for event in result.trace]
    axes.step(times, [e.running for e in result.trace], where="post", label="running", color="tab:blue")
    axes.step(times, [e.waiting for e in result.trace], where="post", label="waiting", color="tab:orange")
    axes.axhline(
        result.max_running, linestyle=":", color="tab:blue", label=f"max_running = {result.max_running}"
    )
    if result.max_waiting is not None:
        axes.axhline(
            result.max_waiting, linestyle=":", color="tab:orange", label=f"max_waiting = {result.max_waiting}"
        )
    axes.set_xlabel("time (s)")
    axes.set_ylabel("requests")
    q = "unbounded" if result.max_waiting is None else result.max_waiting
    axes.set_title(title or f"max_running={result.max_running}, max_waiting={q}")
    axes.legend(loc="upper right")
    _save(figure, path)


def plot_sweep(rows: Sequence[SweepRow], path: str | Path, title: str | None = None) -> None:
    """Draw each outcome's share, and the p99 wait, against ``max_waiting``, to ``path``.

    One line per ``max_running`` and outcome; an unbounded queue is drawn at the right end.

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
    bounded = [row.max_waiting for row in rows if row.max_waiting is not None]
    unbounded_at = 2 * max(bounded) if bounded and max(bounded) > 0 else 1
    outcomes = (("rejected", "tab:red"), ("expired", "tab:orange"), ("late", "tab:purple"))
    for c in dict.fromkeys(row.max_running for row in rows):
        mine = [row for row in rows if row.max_running == c]
        xs = [unbounded_at if row.max_waiting is None else row.max_waiting for row in mine]
        suffix = f" (C={c})" if len({row.max_running for row in rows}) > 1 else ""
        for outcome, color in outcomes:
            ys = [100 * getattr(row.summary, outcome) / max(row.summary.requests, 1) for row in mine]
            shares.plot(xs, ys, marker="o", color=color, label=outcome + suffix)
        p99 = [row.summary.queue_ms.p99 or 0 for row in mine]
        waits.plot(xs, [v / 1000 for v in p99], marker="o", label="p99 wait" + suffix)
    shares.set_xlabel("max_waiting")
    shares.set_ylabel("% of requests")
    shares.legend()
    waits.set_xlabel("max_waiting")
    waits.set_ylabel("p99 queue time (s)")
    waits.legend()
    if any(row.max_waiting is None for row in rows):
        for axes in (shares, waits):
            axes.annotate(
                "unbounded", (unbounded_at, 0), textcoords="offset points", xytext=(0, -28), ha="center"
            )
    if title:
        figure.suptitle(title)
    _save(figure, path)
