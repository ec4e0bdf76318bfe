"""The capacity planner: one script, simulated under each of several settings."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .._core import check_max_running, check_max_waiting
from ._engine import _simulate_checked
from ._results import Summary
from ._script import Job, check_jobs

__all__ = ("SweepRow", "sweep")


@dataclass(frozen=True, slots=True)
class SweepRow:
    """One setting of a sweep and what the script gave under it."""

    #: Running slots (C).
    max_running: int
    #: Queue places (Q); None when unbounded.
    max_waiting: int | None
    #: The simulation's summary.
    summary: Summary


def sweep(
    jobs: Iterable[Job],
    *,
    max_running: int | Iterable[int],
    max_waiting: int | Iterable[int | None] | None,
    progress: Callable[[int, int], object] | None = None,
) -> list[SweepRow]:
    """Simulate ``jobs`` under every pair of settings, for a table of "what if".

    ::

        rows = sweep(jobs, max_running=50, max_waiting=[0, 10, 50, 100, None])
        for row in rows:
            print(row.max_waiting, row.summary.rejected, row.summary.queue_ms.p99)

    Args:
        jobs: The script.
        max_running: One number of running slots, or several.
        max_waiting: One number of queue places (None: unbounded), or several.
        progress: Called as ``progress(done, total)`` before the first setting and after each.

    Returns:
        A row per pair, ``max_running`` varying slowest, in the order given.

    Raises:
        ScriptError: An item that is not a :class:`Job`, or a duplicate id.
        TypeError: A setting that is not an int (booleans included).
        ValueError: ``max_running < 1`` or ``max_waiting < 0``, or no settings at all.
    """
    script = check_jobs(jobs)
    runnings = [max_running] if isinstance(max_running, int) else list(max_running)
    waitings = [max_waiting] if max_waiting is None or isinstance(max_waiting, int) else list(max_waiting)
    # Check every setting before the first simulation: a typo in the last should not cost the rest.
    runnings = [check_max_running(value) for value in runnings]
    waitings = [check_max_waiting(value) for value in waitings]
    settings = [(c, q) for c in runnings for q in waitings]
    if not settings:
        raise ValueError("no settings to sweep")
    rows: list[SweepRow] = []
    if progress is not None:
        progress(0, len(settings))
    for c, q in settings:
        rows.append(SweepRow(c, q, _simulate_checked(script, c, q, trace=False).summary))
        if progress is not None:
            progress(len(rows), len(settings))
    return rows
