"""Static, adaptive and deadline-feasible admission compared on the same traffic, against one provider.

:func:`compare_admission` sends one traffic, alone each time, through each way of admitting a
careful user could choose, to the same :class:`~boundedgate.sim.Provider`: a plain semaphore, a
semaphore with the budget as its timeout, the gate with the C and Q given, the best static C and Q
in hindsight (swept over the same run), the adaptive controller, deadline-feasible admission, and
both. ``benchmarks/bench_goodput.py`` and ``boundedgate plan --provider`` print it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .._core import Adaptive, check_max_running, check_max_waiting
from ._provider import Client, ClientResult, Provider, Traffic, arrival_of_request, simulate_provider

__all__ = ("Comparison", "Contender", "compare_admission", "running_grid", "waiting_grid")

#: The best static C is looked for among these multiples of the provider's peak capacity.
RUNNING_FACTORS = (0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5)
#: And its Q among 0, these (scaled by the peak capacity over 20), and unbounded.
WAITING_STEPS = (10, 20, 40, 60, 100, 150, 200)


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
    #: What became of its requests, and how its C moved (with several gates: all of theirs, and
    #: the sum of their Cs).
    result: ClientResult
    #: With several gates sharing the provider, each gate's own result, in the order given.
    keys: tuple[ClientResult, ...] = ()
    #: What became of a call still running at its deadline: ``"late"`` (ran on) or ``"cut"``.
    on_deadline: str = "late"

    def to_dict(self) -> dict[str, Any]:
        """Its settings and its counts, for JSON (with several gates, each one's under ``keys``)."""
        settings = {
            "name": self.name,
            "max_running": self.max_running,
            "max_waiting": self.max_waiting,
            "adaptive": self.adaptive is not None,
            "feasible": self.feasible,
            "deadlines": self.deadlines,
            "on_deadline": self.on_deadline,
        }
        keys = {"keys": [{"name": key.name, **_counts(key)} for key in self.keys]} if self.keys else {}
        return {**settings, **_counts(self.result), **keys}


def _counts(r: ClientResult) -> dict[str, Any]:
    return {
        "requests": r.requests,
        "on_time": r.on_time,
        "late": r.late,
        "cut": r.cut,
        "provider_refused": r.provider_refused,
        "rejected": r.rejected,
        "infeasible": r.infeasible,
        "expired": r.expired,
        "unanswered": r.unanswered,
        "mean_refusal_seconds": r.mean_refusal_seconds,
        "over_capacity": r.over_capacity,
        "wasted_seconds": r.wasted_seconds,
        "time_to_refusal": r.time_to_refusal.to_dict(),
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

    def ratio(self, contender: Contender, to: str | None = None) -> float | None:
        """Its answers on time over the best static gate's, or over those of the contender named ``to``.

        None when that one answered none on time.

        Raises:
            KeyError: No contender is named ``to``.
        """
        base = (self.best if to is None else self[to]).result.on_time
        return contender.result.on_time / base if base else None

    def to_dict(self) -> dict[str, Any]:
        """The comparison, for JSON: each contender with its ratio to the best static gate."""
        return {
            "best_static": {"max_running": self.best.max_running, "max_waiting": self.best.max_waiting},
            "tried": [list(setting) for setting in self.tried],
            "contenders": [{**c.to_dict(), "ratio": self.ratio(c)} for c in self.contenders],
        }


def _run(
    name: str,
    traffics: Mapping[str, Traffic],
    provider: Provider,
    c: int,
    q: int | None,
    adaptive: Adaptive | None = None,
    feasible: bool = False,
    deadlines: bool = True,
    on_deadline: str = "late",
) -> Contender:
    clients = [
        Client(key, jobs, c, q, adaptive, feasible, deadlines, on_deadline) for key, jobs in traffics.items()
    ]
    results = simulate_provider(clients, provider)
    settings = (name, c, q, adaptive, feasible, deadlines)
    if len(results) == 1:
        results[0].name = name
        return Contender(*settings, results[0], on_deadline=on_deadline)
    return Contender(*settings, _total(name, results), tuple(results), on_deadline)


def _total(name: str, results: Sequence[ClientResult]) -> ClientResult:
    # Every gate's counts summed, their answers on time merged, and their Cs summed at each change.
    total = ClientResult(name)
    for count in (
        "requests", "on_time", "late", "cut", "provider_refused", "rejected", "infeasible", "expired",
        "unanswered", "refusal_seconds", "over_capacity", "wasted_seconds",
    ):  # fmt: skip
        setattr(total, count, sum(getattr(result, count) for result in results))
    total.on_time_at = list(heapq.merge(*(result.on_time_at for result in results)))
    total.refused_after = [waited for result in results for waited in result.refused_after]
    current = [result.limits[0][1] for result in results]
    total.limits = [(0.0, sum(current))]
    # In time order, and at one time in each gate's own order (a gate may change twice at once).
    changes = heapq.merge(*(_changes(index, result) for index, result in enumerate(results)))
    for when, index, _, c in changes:
        current[index] = c
        if total.limits[-1][0] == when:
            total.limits[-1] = (when, sum(current))
        else:
            total.limits.append((when, sum(current)))
    return total


def _changes(index: int, result: ClientResult) -> list[tuple[float, int, int, int]]:
    return [(t, index, n, c) for n, (t, c) in enumerate(result.limits[1:])]


def _peak(provider: Provider, traffics: Iterable[Traffic]) -> float:
    # The highest capacity the traffic meets: at the start and at each arrival.
    arrivals = (arrival_of_request(request) for jobs in traffics for request in jobs)
    return max([provider.k(0.0), *(provider.k(arrival) for arrival in arrivals)])


def compare_admission(
    jobs: Traffic | Mapping[str, Traffic],
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
    * ``semaphore+timeout``: the same inside ``asyncio.timeout`` of each request's budget, around
      the whole call: it leaves the queue at its deadline, and a call still running then is cut
      off (``on_deadline="cut"``: its slot and the provider's capacity free at once, no answer);
    * ``gate Q=...``: the gate with ``max_waiting``;
    * ``best static``: the C and Q of ``runnings`` x ``waitings`` that answer most on time (then
      fewest late), swept over the same run;
    * ``adaptive Q=...``: C set by an adaptive controller (``adaptive``, default ``Adaptive()``),
      starting at ``max_running``, one per Q of ``adaptive_waiting`` (default: ``max_waiting``);
    * ``feasible``: an unbounded queue with deadline-feasible admission;
    * ``adaptive+feasible``: both;
    * ``recommended``: both, C never above ``max_running`` (the controller's ceiling), each call
      cut off at its deadline (``admit(timeout=..., on_deadline="cut")``): the configuration
      docs/adaptive.md recommends, which needs no Q.

    ::

        traffic = [(job.arrival_ms / 1000, job.service_ms / 1000, 2.5) for job in jobs]
        provider = Provider(steps(20, (20.0, 10), (45.0, 20)))
        comparison = compare_admission(traffic, provider, max_running=20, max_waiting=60)
        for contender in comparison.contenders:
            print(contender.name, contender.result.on_time, comparison.ratio(contender))

    With a mapping of traffics, each is a gate's (a key's of a :class:`~boundedgate.KeyedGate`, or
    a process's): every contender is that many gates with its settings, sharing the provider at
    once, and its result is theirs summed (each one's in :attr:`Contender.keys`).

    Args:
        jobs: The traffic, ``(arrival, service, budget)`` or a :class:`Request` (which may carry
            its sizes) per request, in seconds (a script's :class:`Job` is in milliseconds), or a
            traffic per gate, by name.
        provider: The provider each contender calls.
        max_running: C.
        max_waiting: Q of the gate (None: unbounded).
        adaptive: The adaptive contenders' settings (default ``Adaptive()``).
        adaptive_waiting: The Q of each adaptive contender (default: ``max_waiting`` alone).
        runnings: The Cs the best static gate is looked for among (default: :func:`running_grid`
            of the provider's peak capacity over the run, over the gates, and ``max_running``).
        waitings: Its Qs (default: :func:`waiting_grid` of the peak, and ``max_waiting``).
        progress: Called as ``progress(done, total)`` before the first simulation and after each.

    Returns:
        The comparison.

    Raises:
        ValueError: ``max_running < 1``, a Q below 0, or an empty sweep.
    """
    traffics: dict[str, Traffic] = dict(jobs) if isinstance(jobs, Mapping) else {"": jobs}
    if not traffics:
        raise ValueError("no traffic: give a traffic, or at least one gate's")
    c = check_max_running(max_running)
    q = check_max_waiting(max_waiting)
    settings = Adaptive() if adaptive is None else adaptive
    queues = [q] if adaptive_waiting is None else [check_max_waiting(queue) for queue in adaptive_waiting]
    tried = _static_grid(provider, traffics, c, q, runnings, waitings)
    run = _Counted(len(tried) + 6 + len(queues), progress)
    before = [
        run(_run("semaphore", traffics, provider, c, None, deadlines=False)),
        run(_run("semaphore+timeout", traffics, provider, c, None, on_deadline="cut")),
        run(_run(f"gate Q={_q(q)}", traffics, provider, c, q)),
    ]
    # The static gate that answers most on time, then fewest late: the first of equals (as max keeps).
    statics = (run(_run("best static", traffics, provider, *setting)) for setting in tried)
    best = max(statics, key=lambda contender: (contender.result.on_time, -contender.result.late))
    adaptives = [
        run(_run(f"adaptive Q={_q(queue)}", traffics, provider, c, queue, adaptive=settings))
        for queue in queues
    ]
    after = [
        *adaptives,
        run(_run("feasible", traffics, provider, c, None, feasible=True)),
        run(_run("adaptive+feasible", traffics, provider, c, None, adaptive=settings, feasible=True)),
        run(_run("recommended", traffics, provider, c, None, _below(settings, c), True, on_deadline="cut")),
    ]
    return Comparison((*before, best, *after), best, tried)


def _below(settings: Adaptive, c: int) -> Adaptive:
    """``settings`` with C never above ``c``: the recommended configuration's controller."""
    return replace(settings, ceiling=max(settings.floor, min(settings.ceiling, c)))


def _static_grid(
    provider: Provider,
    traffics: Mapping[str, Traffic],
    max_running: int,
    max_waiting: int | None,
    runnings: Iterable[int] | None,
    waitings: Iterable[int | None] | None,
) -> tuple[tuple[int, int | None], ...]:
    """The static settings among which the best in hindsight is looked for (see compare_admission)."""
    peak = math.nan
    if runnings is None or waitings is None:
        peak = _peak(provider, traffics.values()) / len(traffics)
    cs = running_grid(peak, max_running) if runnings is None else [check_max_running(c) for c in runnings]
    qs = waiting_grid(peak, max_waiting) if waitings is None else [check_max_waiting(q) for q in waitings]
    tried = tuple((c, q) for c in cs for q in qs)
    if not tried:
        raise ValueError("no static settings to sweep for the best in hindsight")
    return tried


class _Counted:
    """Tells ``progress(done, total)`` before the first contender's run and after each."""

    def __init__(self, total: int, progress: Callable[[int, int], object] | None) -> None:
        self.total = total
        self.done = 0
        self.progress = progress
        if progress is not None:
            progress(0, total)

    def __call__(self, contender: Contender) -> Contender:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total)
        return contender


def _q(q: int | None) -> str:
    return "none" if q is None else str(q)
