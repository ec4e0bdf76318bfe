"""The capacity planner: one script, simulated under each of several settings."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from .._core import (
    GateLimits,
    RateLimit,
    check_jump_share,
    check_max_running,
    check_max_waiting,
    check_priorities,
)
from ._engine import _simulate_checked, check_costs, check_overrides, check_rate_limits
from ._engine import check_priorities as check_job_priorities
from ._results import Summary
from ._script import Job, check_jobs

__all__ = ("SweepRow", "sweep")


@dataclass(frozen=True, slots=True)
class SweepRow:
    """One setting of a sweep and what the script gave under it."""

    #: Running slots (C); None when running is not limited.
    max_running: int | None
    #: Queue places (Q); None when unbounded.
    max_waiting: int | None
    #: The simulation's summary.
    summary: Summary
    #: The rate limits (rates per second); empty for none.
    rate_limits: tuple[RateLimit, ...] = ()


def _rate_limit_sets(
    rate_limits: Sequence[RateLimit] | Iterable[Sequence[RateLimit]],
) -> list[tuple[RateLimit, ...]]:
    # One set (a list of RateLimit, possibly empty) or several (a list of such lists).
    if isinstance(rate_limits, RateLimit):
        raise TypeError("rate_limits is a list of RateLimit objects, or a list of such lists")
    items: list[RateLimit | Sequence[RateLimit]] = list(rate_limits)
    limits = [item for item in items if isinstance(item, RateLimit)]
    if len(limits) == len(items):
        return [check_rate_limits(limits)]
    return [check_rate_limits(item) for item in items]


def sweep(
    jobs: Iterable[Job],
    *,
    max_running: int | Iterable[int | None] | None,
    max_waiting: int | Iterable[int | None] | None,
    priorities: int = 1,
    jump_share: float = 0.2,
    rate_limits: Sequence[RateLimit] | Iterable[Sequence[RateLimit]] = (),
    overrides: Mapping[str, GateLimits] | None = None,
    progress: Callable[[int, int], object] | None = None,
    feasible: bool = False,
    by_deadline: bool = False,
) -> list[SweepRow]:
    """Simulate ``jobs`` under every combination of settings, for a table of "what if".

    ::

        rows = sweep(jobs, max_running=50, max_waiting=[0, 10, 50, 100, None])
        for row in rows:
            print(row.max_waiting, row.summary.rejected, row.summary.queue_ms.p99)

        rpm = [RateLimit.per_minute(n, name=f"{n} rpm") for n in (30, 60, 120)]
        rows = sweep(jobs, max_running=10, max_waiting=50, rate_limits=[[], *([r] for r in rpm)])

    With keys in the script, each setting is every key's gate's (but for the keys in
    ``overrides``), and each row's summary has a :class:`KeySummary` per key.

    Args:
        jobs: The script.
        max_running: One number of running slots (None: not limited), or several.
        max_waiting: One number of queue places (None: unbounded), or several.
        priorities: Priority classes, the same for every setting (see :func:`simulate`).
        jump_share: The share of starts that may jump the queue, the same for every setting.
        rate_limits: One set of rate limits (a list of :class:`RateLimit`, rates per second, as for
            :func:`simulate`), or several sets to try (a list of such lists; ``[]`` for none).
        overrides: Limits for particular keys, the same for every setting (see :func:`simulate`):
            ``max_running`` and ``max_waiting`` are swept for the other keys.
        progress: Called as ``progress(done, total)`` before the first setting and after each.
        feasible: Deadline-feasible admission in every setting (see :func:`simulate`).
        by_deadline: Queues in deadline order in every setting (see :func:`simulate`).

    Returns:
        A row per combination, ``max_running`` varying slowest, then ``max_waiting``, then the
        rate limits, each in the order given.

    Raises:
        ScriptError: An item that is not a :class:`Job`, a duplicate id, a priority that is not
            one of the gate's classes, or a cost above the burst of a rate limit counted in tokens.
        TypeError: A setting of the wrong type (booleans included), rate limits that are not
            :class:`RateLimit` objects, or overrides that are not a mapping from str to
            ``GateLimits``.
        ValueError: ``max_running < 1``, ``max_waiting < 0`` (in a setting or an override),
            ``priorities < 1``, a ``jump_share`` outside ``[0, 1)``, or no settings at all.
    """
    script = check_jobs(jobs)
    priorities = check_priorities(priorities)
    check_jump_share(jump_share)
    check_job_priorities(script, priorities)
    runnings = [max_running] if max_running is None or isinstance(max_running, int) else list(max_running)
    waitings = [max_waiting] if max_waiting is None or isinstance(max_waiting, int) else list(max_waiting)
    # Check every setting before the first simulation: a typo in the last should not cost the rest.
    runnings = [None if value is None else check_max_running(value) for value in runnings]
    waitings = [check_max_waiting(value) for value in waitings]
    limit_sets = _rate_limit_sets(rate_limits)
    for limits in limit_sets:
        check_costs(script, limits)
    per_key = check_overrides(overrides)
    settings = [(c, q, limits) for c in runnings for q in waitings for limits in limit_sets]
    if not settings:
        raise ValueError("no settings to sweep")
    rows: list[SweepRow] = []
    if progress is not None:
        progress(0, len(settings))
    for c, q, limits in settings:
        result = _simulate_checked(
            script,
            c,
            q,
            priorities,
            jump_share,
            limits,
            False,
            per_key,
            feasible=bool(feasible),
            by_deadline=bool(by_deadline),
        )
        rows.append(SweepRow(c, q, result.summary, limits))
        if progress is not None:
            progress(len(rows), len(settings))
    return rows
