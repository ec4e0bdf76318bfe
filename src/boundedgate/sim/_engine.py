"""The simulator: the gate's own decision core, driven through a script in virtual time.

There is no model of the gate here. Each request is a :class:`Ticket` handed to the same
:class:`GateState` the asyncio driver uses; this module only plays the part of the event loop,
jumping from one instant to the next, with no asyncio and no sleeping.

At each instant, in seed 000's order:

1. ``advance(now)``: the clock reached ``now``, and whatever the core has due then happens
   (queued requests whose deadline is ``now`` expire);
2. the bodies whose service ends ``now`` are released, in the script's order; each release hands
   its slot to the oldest queued request inside the core;
3. the requests arriving ``now`` arrive, in the script's order: they get only what the old queue
   left.

The next instant is the earliest of the next arrival, the next end of a body, and the core's own
``next_wakeup()``: the engine never reads a deadline itself, so whatever else the core learns to
schedule is driven the same way. Times are whole milliseconds, compared exactly.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence

from .._core import GateState, Status, Ticket
from .._core._settings import check_priorities as check_priorities_setting
from ._results import Percentiles, RequestResult, Simulation, Summary, TraceEvent
from ._script import Job, ScriptError, check_jobs

__all__ = ("check_priorities", "simulate")

RUNNING = Status.RUNNING
QUEUED = Status.QUEUED
EXPIRED = Status.EXPIRED
EVICTED = Status.EVICTED
REJECTED = Status.REJECTED
COMPLETED = Status.COMPLETED
LATE = Status.LATE


class _Request(Ticket):
    """A ticket that knows which job it is."""

    __slots__ = ("index",)

    def __init__(self, deadline: float, priority: int, index: int) -> None:
        super().__init__(deadline, priority)
        self.index = index


class _Run:
    """One simulation in progress: the core, the pending ends of bodies, the counts and the trace."""

    def __init__(self, jobs: Sequence[Job], state: GateState, jump_share: float, trace: bool) -> None:
        self.jobs = jobs
        self.state = state
        self.jump_share = jump_share
        self.requests = [_Request(job.deadline_ms, job.priority, index) for index, job in enumerate(jobs)]
        # (end of the body, index of its job): bodies ending at one instant end in script order.
        self.ends: list[tuple[int, int]] = []
        self.running = 0
        self.waiting = 0
        self.trace: list[TraceEvent] | None = [] if trace else None

    def record(self, now: int, event: str, request: _Request) -> None:
        if self.trace is not None:
            job_id = self.jobs[request.index].id
            self.trace.append(TraceEvent(now, event, job_id, self.running, self.waiting))

    def woken(self, now: int, tickets: Sequence[Ticket]) -> None:
        """Act on the queued tickets the core started, expired or evicted, in the order it gives them."""
        for ticket in tickets:
            request: _Request = ticket  # type: ignore[assignment]
            self.waiting -= 1
            if request.status is RUNNING:
                self.running += 1
                self.start(now, request)
            else:
                self.record(now, request.status.value, request)

    def start(self, now: int, request: _Request) -> None:
        heapq.heappush(self.ends, (now + self.jobs[request.index].service_ms, request.index))
        self.record(now, "started", request)

    def arrive(self, now: int, request: _Request) -> None:
        woken = self.state.arrive(request, now)
        if woken:
            self.woken(now, woken)
        status = request.status
        if status is RUNNING:
            self.running += 1
            self.start(now, request)
        elif status is QUEUED:
            self.waiting += 1
            self.record(now, "queued", request)
        else:
            self.record(now, status.value, request)

    def release(self, now: int, request: _Request) -> None:
        woken = self.state.release(request, now)
        self.running -= 1
        self.record(now, request.status.value, request)
        if woken:
            self.woken(now, woken)

    def run(self) -> None:
        state, jobs, requests, ends = self.state, self.jobs, self.requests, self.ends
        arrivals = sorted(range(len(jobs)), key=lambda index: jobs[index].arrival_ms)  # stable
        total, next_arrival = len(arrivals), 0
        while True:
            wakeup = state.next_wakeup()
            if wakeup == math.inf and not ends and next_arrival == total:
                return
            instant = wakeup
            if ends and ends[0][0] < instant:
                instant = ends[0][0]
            if next_arrival < total and jobs[arrivals[next_arrival]].arrival_ms < instant:
                instant = jobs[arrivals[next_arrival]].arrival_ms
            # The core wakes for queued deadlines, which are whole ms. A core that woke between two
            # milliseconds (a token bucket's refill, once the simulator has rate limits) must not be
            # truncated into an instant at which nothing is due: that would never advance.
            if instant != int(instant):
                raise RuntimeError(f"the core woke at {instant!r} ms; the simulator keeps whole milliseconds")
            now = int(instant)
            woken = state.advance(now)
            if woken:
                self.woken(now, woken)
            while ends and ends[0][0] == now:
                self.release(now, requests[heapq.heappop(ends)[1]])
            while next_arrival < total and jobs[arrivals[next_arrival]].arrival_ms == now:
                self.arrive(now, requests[arrivals[next_arrival]])
                next_arrival += 1

    def result(self) -> Simulation:
        rows: list[RequestResult] = []
        counts = dict.fromkeys((COMPLETED, LATE, EXPIRED, EVICTED, REJECTED), 0)
        queue_times: list[int] = []
        end_to_end_times: list[int] = []
        for job, request in zip(self.jobs, self.requests, strict=True):
            outcome = request.status
            counts[outcome] += 1
            arrival: int = request.arrival  # type: ignore[assignment]
            start: int | None = request.started  # type: ignore[assignment]
            end: int = request.ended  # type: ignore[assignment]
            if start is not None:
                queue: int | None = start - arrival
                end_to_end_times.append(end - arrival)
            elif outcome is REJECTED:
                queue = None
            else:
                queue = end - arrival
            if queue is not None:
                queue_times.append(queue)
            rows.append(RequestResult(job.id, outcome, arrival, start, end, queue, end - arrival))
        state = self.state
        summary = Summary(
            requests=len(rows),
            completed=counts[COMPLETED],
            late=counts[LATE],
            expired=counts[EXPIRED],
            rejected=counts[REJECTED],
            evicted=counts[EVICTED],
            peak_running=state.peak_running,
            peak_waiting=state.peak_waiting,
            queue_ms=Percentiles.of(queue_times),
            end_to_end_ms=Percentiles.of(end_to_end_times),
        )
        trace = () if self.trace is None else tuple(self.trace)
        return Simulation(
            state.max_running,
            state.max_waiting,
            tuple(rows),
            trace,
            summary,
            state.priorities,
            self.jump_share,
        )


def check_priorities(jobs: Sequence[Job], priorities: int) -> None:
    """Check that every job's priority is one of the gate's classes.

    Raises:
        ScriptError: A job whose priority is ``priorities`` or more, naming it.
    """
    for index, job in enumerate(jobs):
        if job.priority >= priorities:
            raise ScriptError(
                f"priority {job.priority} is not one of the gate's {priorities} classes "
                f"(0 to {priorities - 1}; raise priorities)",
                f"job {index}",
                job.id,
            )


def _simulate_checked(
    jobs: Sequence[Job],
    max_running: int,
    max_waiting: int | None,
    priorities: int,
    jump_share: float,
    trace: bool,
) -> Simulation:
    run = _Run(jobs, GateState(max_running, max_waiting, priorities, jump_share), jump_share, trace)
    run.run()
    return run.result()


def simulate(
    jobs: Iterable[Job],
    *,
    max_running: int,
    max_waiting: int | None,
    priorities: int = 1,
    jump_share: float = 0.2,
    trace: bool = True,
) -> Simulation:
    """Replay a script through a gate's decision core in virtual time.

    Every request ends completed, late, expired or rejected, exactly as it would through a
    :class:`~boundedgate.BoundedGate` with these settings whose bodies take ``service_ms``. The
    script need not be sorted: requests arriving at the same instant arrive in the script's order.

    ::

        >>> from boundedgate.sim import Job, simulate
        >>> jobs = [Job("A", 0, 100, 300), Job("B", 0, 100, 300), Job("C", 0, 50, 200),
        ...         Job("D", 0, 50, 90), Job("E", 0, 20, 200)]
        >>> result = simulate(jobs, max_running=2, max_waiting=2)
        >>> [(r.id, r.outcome.value, r.start_ms, r.end_ms) for r in result.requests]
        ... # doctest: +NORMALIZE_WHITESPACE
        [('A', 'completed', 0, 100), ('B', 'completed', 0, 100), ('C', 'completed', 100, 150),
         ('D', 'expired', None, 90), ('E', 'rejected', None, 0)]

    Args:
        jobs: The script (see :class:`Job`).
        max_running: Running slots (C), an int >= 1.
        max_waiting: Queue places (Q), an int >= 0, or None for an unbounded queue.
        priorities: Priority classes, as ``BoundedGate``'s; every job's ``priority`` must be below.
        jump_share: The share of starts that may jump ahead of an older waiter, as ``BoundedGate``'s.
        trace: Whether to keep the trace of events (a sweep over many settings need not).

    Returns:
        The settings, a row per request in the script's order, the trace, and a summary.

    Raises:
        ScriptError: An item that is not a :class:`Job`, a duplicate id, or a priority that is
            not one of the gate's classes.
        TypeError: A setting of the wrong type (booleans included).
        ValueError: ``max_running < 1``, ``max_waiting < 0``, ``priorities < 1``, or a
            ``jump_share`` outside ``[0, 1)``.
        RuntimeError: The core asked to be woken between two milliseconds, which only a rate
            limit could (the simulator has none yet): a guard, not an outcome.
    """
    script = check_jobs(jobs)
    priorities = check_priorities_setting(priorities)
    check_priorities(script, priorities)
    return _simulate_checked(script, max_running, max_waiting, priorities, jump_share, trace)
