"""Static, adaptive and deadline-feasible admission compared on the same traffic, against one provider.

:func:`compare_admission` sends one traffic, alone each time, through each way of admitting a
careful user could choose, to the same :class:`~boundedgate.sim.Provider`: a plain semaphore, a
semaphore with the budget as its timeout, the gate with the C and Q given, the best static C and Q
in hindsight (swept over the same run), the adaptive controller, deadline-feasible admission, and
both. ``benchmarks/bench_goodput.py`` and ``boundedgate plan --provider`` print it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .._core import Adaptive, check_max_running, check_max_waiting
from ._provider import Client, ClientResult, Provider, simulate_provider
from ._script import Job

__all__ = ("Comparison", "Contender", "compare_admission", "in_seconds", "running_grid", "waiting_grid")

Traffic = Sequence[tuple[float, float, float | None]]

#: The best static C is looked for among these multiples of the provider's peak capacity.
RUNNING_FACTORS = (0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5)
#: And its Q among 0, these (scaled by the peak capacity over 20), and unbounded.
WAITING_STEPS = (10, 20, 40, 60, 100, 150, 200)


def in_seconds(jobs: Iterable[Job]) -> list[tuple[float, float, float | None]]:
    """A script's jobs as a :class:`Client`'s traffic: ``(arrival, service, budget)`` in seconds."""
    return [
        (j.arrival_ms / 1000, j.service_ms / 1000, None if j.budget_ms is None else j.budget_ms / 1000)
        for j in jobs
    ]


def running_grid(capacity: float, given: int | None = None) -> list[int]:
    """The Cs the best static gate is looked for among: ``RUNNING_FACTORS`` x ``capacity``, and ``given``."""
    values = {max(1, round(factor * capacity)) for factor in RUNNING_FACTORS}
    if given is not None:
        values.add(given)
    return sorted(values)


def waiting_grid(capacity: float, given: int | None = None) -> list[int | None]:
    """The Qs it is looked for among: 0, ``WAITING_STEPS`` x ``capacity / 20``, unbounded, ``given``."""
    values = {0, *(max(1, round(step * capacity / 20)) for step in WAITING_STEPS)}
    if given is not None:
        values.add(given)
    return [*sorted(values), None]


@dataclass(frozen=True, slots=True)
class Contender:
    """One way of admitting, its settings, and what became of the traffic through it."""

    #: Its name in the comparison: ``semaphore``, ``gate Q=60``, ``adaptive Q=60``...
    name: str
    #: C (the starting C of an adaptive one).
    max_running: int
    #: Q (None: unbounded).
    max_waiting: int | None
    #: Its adaptive controller's settings (None: C is static).
    adaptive: Adaptive | None
    #: Deadline-feasible admission.
    feasible: bool
    #: False for a plain semaphore, which knows no deadline.
    deadlines: bool
    #: What became of its requests, and how its C moved.
    result: ClientResult

    def to_dict(self) -> dict[str, Any]:
        """Its settings and its counts, for JSON."""
        r = self.result
        return {
            "name": self.name,
            "max_running": self.max_running,
            "max_waiting": self.max_waiting,
            "adaptive": self.adaptive is not None,
            "feasible": self.feasible,
            "deadlines": self.deadlines,
            "requests": r.requests,
            "on_time": r.on_time,
            "late": r.late,
            "provider_refused": r.provider_refused,
            "rejected": r.rejected,
            "infeasible": r.infeasible,
            "expired": r.expired,
            "mean_refusal_seconds": r.mean_refusal_seconds,
            "over_capacity": r.over_capacity,
            "limits": [[t, c] for t, c in r.limits],
        }


@dataclass(frozen=True, slots=True)
class Comparison:
    """Every contender on the same traffic, in order, the best static gate in hindsight among them."""

    #: The contenders, in the order they are compared.
    contenders: tuple[Contender, ...]
    #: The best static gate in hindsight (also among ``contenders``, as ``best static``).
    best: Contender
    #: The static settings swept to find it, ``(C, Q)`` in the order tried.
    tried: tuple[tuple[int, int | None], ...]

    def __getitem__(self, name: str) -> Contender:
        """The contender of that name."""
        for contender in self.contenders:
            if contender.name == name:
                return contender
        raise KeyError(name)

    def ratio(self, contender: Contender) -> float | None:
        """Its answers on time over the best static gate's (None when that answered none on time)."""
        best = self.best.result.on_time
        return contender.result.on_time / best if best else None

    def to_dict(self) -> dict[str, Any]:
        """The comparison, for JSON: each contender with its ratio to the best static gate."""
        return {
            "best_static": {"max_running": self.best.max_running, "max_waiting": self.best.max_waiting},
            "tried": [list(setting) for setting in self.tried],
            "contenders": [{**c.to_dict(), "ratio": self.ratio(c)} for c in self.contenders],
        }


def _run(
    name: str,
    jobs: Traffic,
    provider: Provider,
    c: int,
    q: int | None,
    adaptive: Adaptive | None = None,
    feasible: bool = False,
    deadlines: bool = True,
) -> Contender:
    client = Client(name, jobs, c, q, adaptive=adaptive, feasible=feasible, deadlines=deadlines)
    [result] = simulate_provider([client], provider)
    return Contender(name, c, q, adaptive, feasible, deadlines, result)


def _peak(provider: Provider, jobs: Traffic) -> float:
    # The highest capacity the traffic meets: at the start and at each arrival.
    return max([provider.k(0.0), *(provider.k(arrival) for arrival, _, _ in jobs)])


def compare_admission(
    jobs: Traffic,
    provider: Provider,
    *,
    max_running: int,
    max_waiting: int | None,
    adaptive: Adaptive | None = None,
    adaptive_waiting: Sequence[int | None] | None = None,
    runnings: Iterable[int] | None = None,
    waitings: Iterable[int | None] | None = None,
    progress: Callable[[int, int], object] | None = None,
) -> Comparison:
    """Send ``jobs`` through each way of admitting, alone each time, to ``provider``.

    The contenders, in order, all with C = ``max_running`` but the best static gate:

    * ``semaphore``: an unbounded queue that knows no deadline (``asyncio.Semaphore``);
    * ``semaphore+timeout``: the same with each request's budget as its acquire timeout;
    * ``gate Q=...``: the gate with ``max_waiting``;
    * ``best static``: the C and Q of ``runnings`` x ``waitings`` that answer most on time (then
      fewest late), swept over the same run;
    * ``adaptive Q=...``: C set by an adaptive controller (``adaptive``, default ``Adaptive()``),
      starting at ``max_running``, one per Q of ``adaptive_waiting`` (default: ``max_waiting``);
    * ``feasible``: an unbounded queue with deadline-feasible admission;
    * ``adaptive+feasible``: both.

    ::

        provider = Provider(steps(20, (20.0, 10), (45.0, 20)))
        comparison = compare_admission(in_seconds(jobs), provider, max_running=20, max_waiting=60)
        for contender in comparison.contenders:
            print(contender.name, contender.result.on_time, comparison.ratio(contender))

    Args:
        jobs: The traffic, ``(arrival, service, budget)`` per request in seconds (see :func:`in_seconds`).
        provider: The provider each contender calls.
        max_running: C.
        max_waiting: Q of the gate (None: unbounded).
        adaptive: The adaptive contenders' settings (default ``Adaptive()``).
        adaptive_waiting: The Q of each adaptive contender (default: ``max_waiting`` alone).
        runnings: The Cs the best static gate is looked for among (default:
            :func:`running_grid` of the provider's peak capacity over the run, and ``max_running``).
        waitings: Its Qs (default: :func:`waiting_grid` of the peak, and ``max_waiting``).
        progress: Called as ``progress(done, total)`` before the first simulation and after each.

    Returns:
        The comparison.

    Raises:
        ValueError: ``max_running < 1``, a Q below 0, or an empty sweep.
    """
    max_running = check_max_running(max_running)
    max_waiting = check_max_waiting(max_waiting)
    settings = Adaptive() if adaptive is None else adaptive
    queues = [max_waiting] if adaptive_waiting is None else [check_max_waiting(q) for q in adaptive_waiting]
    peak = _peak(provider, jobs) if runnings is None or waitings is None else math.nan
    cs = running_grid(peak, max_running) if runnings is None else [check_max_running(c) for c in runnings]
    qs = waiting_grid(peak, max_waiting) if waitings is None else [check_max_waiting(q) for q in waitings]
    tried = tuple((c, q) for c in cs for q in qs)
    if not tried:
        raise ValueError("no static settings to sweep for the best in hindsight")
    total = len(tried) + 5 + len(queues)
    done = 0

    def step(contender: Contender) -> Contender:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)
        return contender

    if progress is not None:
        progress(0, total)
    c, q = max_running, max_waiting
    before = [
        step(_run("semaphore", jobs, provider, c, None, deadlines=False)),
        step(_run("semaphore+timeout", jobs, provider, c, None)),
        step(_run(f"gate Q={_q(q)}", jobs, provider, c, q)),
    ]
    best: Contender | None = None
    for static_c, static_q in tried:
        candidate = step(_run("best static", jobs, provider, static_c, static_q))
        if best is None or (candidate.result.on_time, -candidate.result.late) > (
            best.result.on_time,
            -best.result.late,
        ):
            best = candidate
    assert best is not None
    after = [
        step(_run(f"adaptive Q={_q(queue)}", jobs, provider, c, queue, adaptive=settings)) for queue in queues
    ]
    after.append(step(_run("feasible", jobs, provider, c, None, feasible=True)))
    after.append(step(_run("adaptive+feasible", jobs, provider, c, None, adaptive=settings, feasible=True)))
    return Comparison((*before, best, *after), best, tried)


def _q(q: int | None) -> str:
    return "none" if q is None else str(q)
