"""The capacity planner: one script, simulated under each of several settings."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .._core import check_max_running, check_max_waiting
from .._core._settings import check_jump_share, check_priorities
from ._engine import _simulate_checked
from ._engine import check_priorities as check_job_priorities
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
    priorities: int = 1,
    jump_share: float = 0.2,
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
        priorities: Priority classes, the same for every setting (see :func:`simulate`).
        jump_share: The share of starts that may jump the queue, the same for every setting.
        progress: Called as ``progress(done, total)`` before the first setting and after each.

    Returns:
        A row per pair, ``max_running`` varying slowest, in the order given.

    Raises:
        ScriptError: An item that is not a :class:`Job`, a duplicate id, or a priority that is
            not one of the gate's classes.
        TypeError: A setting of the wrong type (booleans included).
        ValueError: ``max_running < 1``, ``max_waiting < 0``, ``priorities < 1``, a
            ``jump_share`` outside ``[0, 1)``, or no settings at all.
    """
    script = check_jobs(jobs)
    priorities = check_priorities(priorities)
    check_jump_share(jump_share)
    check_job_priorities(script, priorities)
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
        rows.append(
            SweepRow(c, q, _simulate_checked(script, c, q, priorities, jump_share, trace=False).summary)
        )
        if progress is not None:
            progress(len(rows), len(settings))
    return rows
