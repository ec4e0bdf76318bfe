"""The simulator: the gate's own decision core, driven through a script in virtual time.

There is no model of the gate here. Each request is a :class:`Ticket` handed to the same
:class:`GateState` the asyncio driver uses; this module only plays the part of the event loop,
jumping from one instant to the next, with no asyncio and no sleeping.

At each instant, in seed 000's order:

1. ``advance(now)``: the clock reached ``now``, and whatever the core has due then happens
   (queued requests whose deadline is ``now`` expire, then queued requests whose tokens have come
   start);
2. the bodies whose service ends ``now`` end, in the script's order: each settles its actual cost
   first if it has one (``settle``, as a body calling ``permit.settle()`` does), then releases its
   slot (``release``), which hands it to the next queued request inside the core;
3. the requests arriving ``now`` arrive, in the script's order: they get only what the old queue
   left.

The next instant is the earliest of the next arrival, the next end of a body, and the core's own
``next_wakeup()``: the engine never reads a deadline or a bucket itself.

The clock
=========

Scripts are in whole milliseconds, so arrivals, deadlines and the ends of bodies that started on a
whole millisecond all fall on whole milliseconds: the engine keeps them as ints, and two of them at
the same instant are equal ints, so no float rounding decides which comes first. Only rate limits
make the core ask for an instant between two milliseconds, when the next waiter's tokens are due;
the engine visits it as the float the core computed (and a body that starts then ends at that float
plus its service time). A due time within float noise of a whole millisecond *is* that millisecond
(60 a minute is 0.001 a millisecond, which binary floats cannot hold, so the token due at 1000 ms
may be computed as 999.9999999999999 ms): the engine snaps it to the int, so that it ties exactly
with the events there and takes its place in the order above.

A core that asks for an instant already reached is woken at that instant once more, after its
arrivals, as the asyncio gate's timer fires at once; if that changes nothing, the clock moves on (to
the core's time if it is later, else by a microsecond), so the engine always moves on.

The core is told times in milliseconds and given rate limits per millisecond: callers give them
per second, as in production, and they are converted here, so ``RateLimit.per_minute(60)`` means 60
a minute in both. At every instant the engine first brings the buckets up to that instant
(``GateState.tokens``), whether or not it keeps a trace, so that reading the balances for the trace
changes nothing.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence

from .._core import GateState, RateLimit, Status, Ticket
from .._core._settings import check_priorities as check_priorities_setting
from ._results import ClassSummary, Percentiles, RequestResult, Simulation, Summary, TraceEvent
from ._script import Job, ScriptError, check_jobs

__all__ = ("check_costs", "check_priorities", "check_rate_limits", "simulate")

RUNNING = Status.RUNNING
QUEUED = Status.QUEUED
COMPLETED = Status.COMPLETED
LATE = Status.LATE
EXPIRED = Status.EXPIRED
EVICTED = Status.EVICTED
REJECTED = Status.REJECTED
RATE_LIMITED = Status.RATE_LIMITED

#: The outcomes a simulated request can end in, in the order summaries count them.
OUTCOMES = (COMPLETED, LATE, EXPIRED, REJECTED, EVICTED, RATE_LIMITED)

#: Milliseconds per second, to turn a rate per second into a rate per millisecond.
_MS_PER_SECOND = 1000
#: How far from a whole millisecond a wake-up time may be and still be float noise: absolute (a
#: picosecond) and relative to the time (at most 10 ns in the first three hours).
_NOISE = 1e-9
_RELATIVE_NOISE = 1e-12
#: How far the clock moves on when the core asks, twice, for an instant already reached (1 µs).
_STEP = 1e-3
_FINAL = frozenset(status.value for status in OUTCOMES)


def _instant(wakeup: float) -> float:
    """The core's wake-up time, as the whole millisecond it is within float noise of, if it is."""
    whole = round(wakeup)
    if abs(wakeup - whole) <= _NOISE + _RELATIVE_NOISE * abs(wakeup):
        return whole
    return wakeup


def _whole(ms: float) -> float:
    """``ms``, as an int if it is whole."""
    return int(ms) if ms == int(ms) else ms


def _per_millisecond(limit: RateLimit) -> RateLimit:
    return RateLimit(limit.rate / _MS_PER_SECOND, limit.burst, limit.unit, limit.floor, limit.name)


class _Request(Ticket):
    """A ticket that knows which job it is, and whether it queued."""

    __slots__ = ("index", "queued")

    def __init__(self, job: Job, index: int) -> None:
        super().__init__(job.deadline_ms, job.priority, float(job.cost))
        self.index = index
        self.queued = False


def _events(tickets: Sequence[Ticket]) -> list[tuple[str, _Request]]:
    """What became of the queued tickets the core started, expired or evicted, in its order."""
    return [("started" if t.status is RUNNING else t.status.value, t) for t in tickets]  # type: ignore[misc]


class _Run:
    """One simulation in progress: the core, the pending ends of bodies, the counts and the trace."""

    def __init__(self, jobs: Sequence[Job], state: GateState, trace: bool) -> None:
        self.jobs = jobs
        self.state = state
        self.requests = [_Request(job, index) for index, job in enumerate(jobs)]
        self.started: list[float | None] = [None] * len(jobs)
        self.ended: list[float] = [0] * len(jobs)
        # (end of the body, index of its job): bodies ending at one instant end in script order.
        self.ends: list[tuple[float, int]] = []
        self.running = 0
        self.waiting = 0
        self.limits = state.rate_limits
        # Only a limit counted in tokens has anything to settle.
        self.settles = any(not limit.per_request for limit in self.limits)
        self.trace: list[TraceEvent] | None = [] if trace else None

    def apply(self, now: float, events: Sequence[tuple[str, _Request]]) -> None:
        """Act on one step of the core, given as its events in the order they happened."""
        balances = self.balances(now, events) if self.trace is not None and self.limits else None
        for number, (event, request) in enumerate(events):
            index = request.index
            if event == "started":
                if request.queued:
                    self.waiting -= 1
                self.running += 1
                self.started[index] = now
                heapq.heappush(self.ends, (now + self.jobs[index].service_ms, index))
            elif event == "queued":
                request.queued = True
                self.waiting += 1
            elif event in _FINAL:
                self.ended[index] = now
                if request.status is COMPLETED or request.status is LATE:
                    self.running -= 1
                elif request.queued:
                    self.waiting -= 1
            if self.trace is not None:
                tokens = balances[number] if balances is not None else ()
                job_id = self.jobs[index].id
                self.trace.append(TraceEvent(now, event, job_id, self.running, self.waiting, tokens))

    def balances(self, now: float, events: Sequence[tuple[str, _Request]]) -> list[tuple[float, ...]]:
        """Each bucket's balance just after each of a step's events.

        The core answers for the whole step; walking back from its balances, each start gives back
        what it took (nothing else in a step changes a balance: the buckets were brought up to
        ``now`` before it, and a settle is a step of its own).
        """
        after = self.state.tokens(now)
        if len(events) == 1:
            return [after]
        current = list(after)
        balances = [after] * len(events)
        for number in range(len(events) - 1, 0, -1):
            event, request = events[number]
            if event == "started":
                for k, limit in enumerate(self.limits):
                    current[k] += 1.0 if limit.per_request else request.cost
                balances[number - 1] = tuple(current)
            else:
                balances[number - 1] = balances[number]
        return balances

    def arrive(self, now: float, request: _Request) -> None:
        woken = self.state.arrive(request, now)
        status = request.status
        event = "started" if status is RUNNING else status.value
        self.apply(now, [*_events(woken), (event, request)] if woken else ((event, request),))

    def end(self, now: float, request: _Request) -> None:
        actual = self.jobs[request.index].actual_cost
        if actual is not None and self.settles:
            woken = self.state.settle(request, float(actual), now)
            self.apply(now, [("settled", request), *_events(woken)])
        woken = self.state.release(request, now)
        event = request.status.value
        self.apply(now, [(event, request), *_events(woken)] if woken else ((event, request),))

    def run(self) -> None:
        state, jobs, requests, ends = self.state, self.jobs, self.requests, self.ends
        order = sorted(range(len(jobs)), key=lambda index: jobs[index].arrival_ms)  # stable
        arrivals = [jobs[index].arrival_ms for index in order]
        total, next_arrival = len(order), 0
        refill = bool(self.limits)
        now: float = -1
        again = False  # whether `now` has been visited twice
        while True:
            wakeup = state.next_wakeup()
            instant: float
            if wakeup == math.inf:
                if not ends and next_arrival == total:
                    return
                instant = math.inf
            else:
                instant = wakeup if type(wakeup) is int else _instant(wakeup)  # deadlines are ints
                if instant <= now:
                    instant = now if not again else wakeup if wakeup > now else now + _STEP
            again = instant == now
            if ends and ends[0][0] < instant:
                instant = ends[0][0]
            if next_arrival < total and arrivals[next_arrival] < instant:
                instant = arrivals[next_arrival]
            now = instant
            if refill:
                state.tokens(now)
            woken = state.advance(now)
            if woken:
                self.apply(now, _events(woken))
            while ends and ends[0][0] == now:
                self.end(now, requests[heapq.heappop(ends)[1]])
            while next_arrival < total and arrivals[next_arrival] == now:
                self.arrive(now, requests[order[next_arrival]])
                next_arrival += 1

    def rows(self) -> list[RequestResult]:
        rows: list[RequestResult] = []
        for job, request in zip(self.jobs, self.requests, strict=True):
            outcome = request.status
            arrival = job.arrival_ms
            start = self.started[request.index]
            end = self.ended[request.index]
            if start is not None:
                queue: float | None = _whole(start - arrival)
            elif outcome is REJECTED or outcome is RATE_LIMITED:
                queue = None  # refused at the door: it never queued
            else:
                queue = _whole(end - arrival)
            start = None if start is None else _whole(start)
            rows.append(
                RequestResult(job.id, outcome, arrival, start, _whole(end), queue, _whole(end - arrival))
            )
        return rows


def _tally(rows: Iterable[RequestResult]) -> tuple[int, dict[Status, int], Percentiles, Percentiles]:
    """How many rows, their count per outcome, and the distributions of queue and end-to-end time."""
    counts = dict.fromkeys(OUTCOMES, 0)
    queue: list[float] = []
    end_to_end: list[float] = []
    total = 0
    for row in rows:
        total += 1
        counts[row.outcome] += 1
        if row.queue_ms is not None:
            queue.append(row.queue_ms)
        if row.start_ms is not None:
            end_to_end.append(row.end_to_end_ms)
    return total, counts, Percentiles.of(queue), Percentiles.of(end_to_end)


def _summary(jobs: Sequence[Job], rows: Sequence[RequestResult], state: GateState) -> Summary:
    classes: list[ClassSummary] = []
    if state.priorities > 1:
        for priority in range(state.priorities):
            mine = (row for job, row in zip(jobs, rows, strict=True) if job.priority == priority)
            n, counts, queue, end_to_end = _tally(mine)
            classes.append(
                ClassSummary(
                    priority=priority,
                    requests=n,
                    completed=counts[COMPLETED],
                    late=counts[LATE],
                    expired=counts[EXPIRED],
                    rejected=counts[REJECTED],
                    evicted=counts[EVICTED],
                    rate_limited=counts[RATE_LIMITED],
                    queue_ms=queue,
                    end_to_end_ms=end_to_end,
                )
            )
    n, counts, queue, end_to_end = _tally(rows)
    return Summary(
        requests=n,
        completed=counts[COMPLETED],
        late=counts[LATE],
        expired=counts[EXPIRED],
        rejected=counts[REJECTED],
        evicted=counts[EVICTED],
        rate_limited=counts[RATE_LIMITED],
        peak_running=state.peak_running,
        peak_waiting=state.peak_waiting,
        queue_ms=queue,
        end_to_end_ms=end_to_end,
        classes=tuple(classes),
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


def check_rate_limits(rate_limits: Iterable[RateLimit]) -> tuple[RateLimit, ...]:
    """Return ``rate_limits`` as a tuple, checking that the simulator can replay them.

    Raises:
        TypeError: ``rate_limits`` is a single limit rather than a list, or holds something else
            than :class:`RateLimit` objects.
    """
    if isinstance(rate_limits, RateLimit):
        raise TypeError("rate_limits is a list of RateLimit objects, e.g. [RateLimit.per_minute(60)]")
    limits = tuple(rate_limits)
    for limit in limits:
        if not isinstance(limit, RateLimit):
            raise TypeError(f"rate_limits must hold RateLimit objects, got {limit!r}")
    return limits


def check_costs(jobs: Sequence[Job], rate_limits: Sequence[RateLimit]) -> None:
    """Check that every job's cost can be served by the rate limits counted in tokens.

    Raises:
        ScriptError: A job whose cost exceeds such a limit's burst (``admit()`` would refuse it
            with ``ValueError``), naming it.
    """
    if not jobs or all(limit.per_request for limit in rate_limits):
        return
    state = GateState(None, None, rate_limits=rate_limits)
    try:
        state.check_cost(max(job.cost for job in jobs))
    except ValueError:
        for index, job in enumerate(jobs):
            try:
                state.check_cost(job.cost)
            except ValueError as error:
                raise ScriptError(str(error), f"job {index}", job.id) from None


def _simulate_checked(
    jobs: Sequence[Job],
    max_running: int | None,
    max_waiting: int | None,
    priorities: int,
    jump_share: float,
    rate_limits: tuple[RateLimit, ...],
    trace: bool,
) -> Simulation:
    per_ms = [_per_millisecond(limit) for limit in rate_limits]
    state = GateState(max_running, max_waiting, priorities, jump_share, per_ms)
    run = _Run(jobs, state, trace)
    run.run()
    rows = run.rows()
    return Simulation(
        max_running,
        max_waiting,
        tuple(rows),
        () if run.trace is None else tuple(run.trace),
        _summary(jobs, rows, state),
        state.priorities,
        jump_share,
        rate_limits,
    )


def simulate(
    jobs: Iterable[Job],
    *,
    max_running: int | None,
    max_waiting: int | None,
    priorities: int = 1,
    jump_share: float = 0.2,
    rate_limits: Iterable[RateLimit] = (),
    trace: bool = True,
) -> Simulation:
    """Replay a script through a gate's decision core in virtual time.

    Every request ends completed, late, expired, rejected, evicted or rate limited, exactly as it
    would through a :class:`~boundedgate.BoundedGate` with these settings whose bodies take
    ``service_ms`` (and, with an ``actual_cost``, settle it just before they end). The script need
    not be sorted: requests arriving at the same instant arrive in the script's order.

    ::

        >>> from boundedgate.sim import Job, simulate
        >>> jobs = [Job("A", 0, 100, 300), Job("B", 0, 100, 300), Job("C", 0, 50, 200),
        ...         Job("D", 0, 50, 90), Job("E", 0, 20, 200)]
        >>> result = simulate(jobs, max_running=2, max_waiting=2)
        >>> [(r.id, r.outcome.value, r.start_ms, r.end_ms) for r in result.requests]
        ... # doctest: +NORMALIZE_WHITESPACE
        [('A', 'completed', 0, 100), ('B', 'completed', 0, 100), ('C', 'completed', 100, 150),
         ('D', 'expired', None, 90), ('E', 'rejected', None, 0)]

    Rate limits are given as for ``BoundedGate``, with rates per second (``RateLimit.per_minute(60)``
    is 60 a minute here too); the simulator converts them to its millisecond clock. A request
    whose tokens come between two milliseconds starts then, and its times are floats
    (``333.3333333333333``); all other times stay whole milliseconds, as ints.

    Args:
        jobs: The script (see :class:`Job`).
        max_running: Running slots (C), an int >= 1, or None for no limit on running (a pure rate
            limiter).
        max_waiting: Queue places (Q), an int >= 0, or None for an unbounded queue.
        priorities: Priority classes, as ``BoundedGate``'s; every job's ``priority`` must be below.
        jump_share: The share of starts that may jump ahead of an older waiter, as ``BoundedGate``'s.
        rate_limits: Token buckets every request pays, as ``BoundedGate``'s (rates per second).
        trace: Whether to keep the trace of events (a sweep over many settings need not).

    Returns:
        The settings, a row per request in the script's order, the trace, and a summary.

    Raises:
        ScriptError: An item that is not a :class:`Job`, a duplicate id, a priority that is not
            one of the gate's classes, or a cost above the burst of a rate limit counted in tokens.
        TypeError: A setting of the wrong type (booleans included), or rate limits that are not a
            list of :class:`RateLimit` objects.
        ValueError: ``max_running < 1``, ``max_waiting < 0``, ``priorities < 1``, or a
            ``jump_share`` outside ``[0, 1)``.
    """
    script = check_jobs(jobs)
    priorities = check_priorities_setting(priorities)
    check_priorities(script, priorities)
    limits = check_rate_limits(rate_limits)
    check_costs(script, limits)
    return _simulate_checked(script, max_running, max_waiting, priorities, jump_share, limits, trace)
