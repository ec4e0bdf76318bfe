"""Test helpers: an independent reference model of the seed's semantics, and a harness that drives
the real gate through the same scripts under virtual time.

The reference model is written from the seed's prose, not from its code or ours: it walks whole
instants one by one (no event heap), and at each instant applies, in this order:

1. queued requests whose deadline is at or before the instant expire (queue order);
2. running requests whose service ends at the instant finish: ``failed`` if they raise, else
   ``late`` at or after their deadline, else ``completed``;
3. the queue starts, oldest first, while slots are free;
4. requests cancelled at the instant: queued ones leave the queue (``cancelled``), then running
   ones end as ``failed`` (the body saw ``CancelledError``), and the queue starts again;
5. requests arriving at the instant, in input order: start if a slot is free, else queue if
   there is room, else ``rejected``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Callable, Coroutine, Hashable, Sequence
from typing import Any, Protocol, TypeVar, TypeVarTuple

import looptime

from boundedgate import (
    BoundedGate,
    DeadlineCut,
    Evicted,
    GateError,
    Infeasible,
    KeyedGate,
    Late,
    Permit,
    QueueExpired,
    QueueFull,
    RateLimit,
    RateLimited,
)
from boundedgate._core import GateState, Status, Ticket
from tests.core.invariants import check_invariants

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
_K = TypeVar("_K", bound=Hashable)


@dataclasses.dataclass(frozen=True)
class Job:
    """One scripted request: times are whole virtual seconds."""

    id: str
    arrival: int
    service: int
    budget: int | None = None
    cancel_at: int | None = None
    raises: bool = False
    priority: int = 0
    #: Declared with ``admit(cost=...)``.
    cost: float = 0
    #: Settled with ``permit.settle(...)`` as the body ends (None: nothing settled).
    actual_cost: float | None = None

    @property
    def deadline(self) -> float:
        return math.inf if self.budget is None else self.arrival + self.budget


@dataclasses.dataclass(frozen=True)
class Result:
    """What became of one request: its outcome, and when it started and ended (None if never)."""

    outcome: str
    start: float | None
    end: float | None


def reference(jobs: Sequence[Job], max_running: int, max_waiting: int | None) -> dict[str, Result]:
    """The seed's semantics, instant by instant."""
    room = math.inf if max_waiting is None else max_waiting
    queue: list[Job] = []
    running: dict[str, float] = {}  # id -> start
    done: dict[str, Result] = {}
    by_id = {j.id: j for j in jobs}

    def start_queue(t: int) -> None:
        while queue and len(running) < max_running:
            job = queue.pop(0)
            running[job.id] = t

    horizon = (
        max([j.arrival for j in jobs] + [j.cancel_at for j in jobs if j.cancel_at is not None] + [0])
        + sum(j.service for j in jobs)
        + 1
    )
    for t in range(horizon + 1):
        for job in [j for j in queue if j.deadline <= t]:
            queue.remove(job)
            done[job.id] = Result("expired", None, t)
        for jid, start in sorted(running.items(), key=lambda kv: list(by_id).index(kv[0])):
            job = by_id[jid]
            if start + job.service == t:
                del running[jid]
                outcome = "failed" if job.raises else "late" if t >= job.deadline else "completed"
                done[jid] = Result(outcome, start, t)
        start_queue(t)
        cancelled = [j for j in jobs if j.cancel_at == t]
        for job in cancelled:
            if job in queue:
                queue.remove(job)
                done[job.id] = Result("cancelled", None, t)
        for job in cancelled:
            if job.id in running:
                done[job.id] = Result("failed", running.pop(job.id), t)
        start_queue(t)
        for job in [j for j in jobs if j.arrival == t]:
            if len(running) < max_running:
                running[job.id] = t
            elif len(queue) < room:
                queue.append(job)
            else:
                done[job.id] = Result("rejected", None, t)
    assert not queue
    assert not running
    return done


class CheckedState(GateState):
    """A GateState that asserts its invariants after every event, and records every count it had."""

    __slots__ = ("counts",)

    def __init__(
        self,
        max_running: int | None,
        max_waiting: int | None,
        priorities: int = 1,
        jump_share: float = 0.2,
        rate_limits: Sequence[RateLimit] = (),
    ) -> None:
        super().__init__(max_running, max_waiting, priorities, jump_share, rate_limits)
        self.counts: list[tuple[int, int]] = []

    def _checked(self, now: float) -> None:
        check_invariants(self, now)
        self.counts.append((self.running, self.waiting))

    def arrive(self, ticket: Ticket, now: float, wait: bool = True) -> Sequence[Ticket]:
        woken = super().arrive(ticket, now, wait)
        self._checked(now)
        return woken

    def release(self, ticket: Ticket, now: float, ending: Status | None = None) -> Sequence[Ticket]:
        woken = super().release(ticket, now, ending)
        self._checked(now)
        return woken

    def advance(self, now: float) -> list[Ticket]:
        woken = super().advance(now)
        self._checked(now)
        return woken

    def cancel(self, ticket: Ticket, now: float, ending: Status = Status.CANCELLED) -> Sequence[Ticket]:
        woken = super().cancel(ticket, now, ending)
        self._checked(now)
        return woken

    def settle(self, ticket: Ticket, cost: float, now: float) -> Sequence[Ticket]:
        woken = super().settle(ticket, cost, now)
        self._checked(now)
        return woken


def checked_gate(
    max_running: int | None,
    max_waiting: int | None,
    name: str = "test",
    priorities: int = 1,
    jump_share: float = 0.2,
    rate_limits: Sequence[RateLimit] = (),
) -> BoundedGate:
    """A gate whose state checks its invariants after every event."""
    gate = BoundedGate(
        max_running=max_running,
        max_waiting=max_waiting,
        name=name,
        priorities=priorities,
        jump_share=jump_share,
        rate_limits=rate_limits,
    )
    gate._state = CheckedState(max_running, max_waiting, priorities, jump_share, rate_limits)
    return gate


def live_gate(keyed: KeyedGate[_K], key: _K) -> BoundedGate:
    """``key``'s live gate in ``keyed``; fails the test if the key has none."""
    gate = keyed.get(key)
    assert gate is not None, f"{key!r} has no live gate"
    return gate


class Boom(Exception):
    """What a scripted body raises."""


#: The exception the caller sees for each outcome (a cancelled running body sees CancelledError).
EXPECTED_EXCEPTION: dict[str, type[BaseException] | None] = {
    "rejected": QueueFull,
    "expired": QueueExpired,
    "cancelled": asyncio.CancelledError,
    "completed": None,
    "late": Late,
    "cut": DeadlineCut,
    "failed": Boom,
    "evicted": Evicted,
    "rate_limited": RateLimited,
    "infeasible": Infeasible,
}


#: Loop turns the harness lets pass at an instant before it cancels and admits, so that every
#: completion and hand-off at that instant has been seen by the tasks it concerns.
SETTLE = 5


async def run_script(
    gate: BoundedGate | None, jobs: Sequence[Job], admit: Callable[[Job], Permit] | None = None
) -> dict[str, Result]:
    """Drive the real gate through ``jobs`` on the running (virtual-time) loop; see module doc.

    ``admit(job)``, if given, makes each job's permit instead of ``gate.admit(timeout=job.budget)``.
    """
    loop = asyncio.get_running_loop()
    permits: dict[str, Permit] = {}
    tasks: dict[str, asyncio.Task[None]] = {}
    seen: dict[str, type[BaseException] | None] = {}
    if admit is None:
        assert gate is not None
        admit = lambda job: gate.admit(timeout=job.budget, priority=job.priority, cost=job.cost)  # noqa: E731

    async def request(job: Job) -> None:
        permit = permits[job.id] = admit(job)
        try:
            async with permit:
                await asyncio.sleep(job.service)
                if job.actual_cost is not None:
                    permit.settle(job.actual_cost)
                if job.raises:
                    raise Boom
        except (GateError, Boom, asyncio.CancelledError) as exc:
            seen[job.id] = type(exc)
        else:
            seen[job.id] = None

    origin = loop.time()
    instants = sorted({j.arrival for j in jobs} | {j.cancel_at for j in jobs if j.cancel_at is not None})
    for t in instants:
        await asyncio.sleep(origin + t - loop.time())
        for _ in range(SETTLE):
            await asyncio.sleep(0)
        for job in jobs:
            if job.cancel_at == t and job.id in tasks:
                tasks[job.id].cancel()
        for job in jobs:
            if job.arrival == t:
                tasks[job.id] = asyncio.create_task(request(job))
    await asyncio.gather(*tasks.values())
    results = {}
    for job in jobs:
        permit = permits[job.id]
        outcome = permit.status.value
        assert seen[job.id] is EXPECTED_EXCEPTION[outcome] or (
            outcome == "failed" and seen[job.id] is asyncio.CancelledError
        ), (job, outcome, seen[job.id])
        start = None if permit.started is None else permit.started - origin
        end = None if permit.ended is None else permit.ended - origin
        results[job.id] = Result(outcome, start, end)
    return results


def run_virtual(coro_fn: Callable[[*Ts], Coroutine[Any, Any, T]], *args: *Ts) -> T:
    """Run ``coro_fn(*args)`` to completion on a fresh fast-forwarding loop starting at time 0."""
    loop = looptime.new_event_loop(start=0)
    try:
        return loop.run_until_complete(coro_fn(*args))
    finally:
        loop.close()


class HasStatus(Protocol):
    """A permit of any gate: something with a status."""

    @property
    def status(self) -> Status: ...


def status_of(permit: HasStatus) -> Status:
    """``permit.status`` read afresh: mypy keeps an ``is`` narrowing of an attribute across awaits."""
    return permit.status
