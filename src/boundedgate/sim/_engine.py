"""The simulator: the gate's own decision core, driven through a script in virtual time.

There is no model of the gate here. Each request is a :class:`Ticket` handed to the same
:class:`GateState` the asyncio driver uses; this module only plays the part of the event loop,
jumping from one instant to the next, with no asyncio and no sleeping.

At each instant, in this order:

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

Keys
====

A script whose requests name several keys is replayed as through a ``KeyedGate``: one
:class:`GateState` per key, with the simulation's settings (or the key's override) and buckets of
its own, all told the same clock (a core knows no time until it is told one, so making them all at
the start is making each at its key's first arrival). Each key's state is visited at
exactly the instants a simulation of that key's requests alone would visit: the arrivals and ends
of its own requests, and its own wake-ups (with the same snapping and the same second visit), so a
key's requests end exactly as they would alone, whatever the other keys do. At each instant the
order above holds across keys: every key visited then is advanced (in the order the keys first
arrived), then the bodies that end now end, in the script's order, then the requests arriving now
arrive, in the script's order, each at its own key's state. The next instant is the earliest
visit of any key, end of a body or arrival; the keys' next visits are kept in a heap, so an instant
costs the same whatever the number of keys. A script with a single key (the default key, say: a
script without a ``key`` column) has one gate, visited at every instant, by a loop of its own that
skips that bookkeeping (the keyed loop, given one key, costs a quarter more instructions: 680M
against 545M for 6,600 requests); the steps, the counts, the trace and the rows are the same code
for both.

A key's gate lives for the whole simulation, as in a ``KeyedGate`` that keeps its idle keys
(``keep_idle`` at least the number of keys). One that drops an idle key's gate makes a fresh one at
the key's next request, which comes to the same (the queue is empty, and the buckets are full again
before the gate is dropped) but for one thing: with priority classes and a jump share, the fresh
gate has a jump banked that the dropped one may have spent.

The core is told times in milliseconds and given rate limits per millisecond: callers give them
per second, as in production, and they are converted here, so ``RateLimit.per_minute(60)`` means 60
a minute in both. Reading the balances for the trace (``GateState.tokens``) changes nothing: a
bucket is kept as the moment it was empty, and its balance is computed from it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypedDict, cast

from .._core import SIMULATED, GateLimits, GateState, RateLimit, RequestRecord, Status, Ticket, check_limits
from .._core import check_priorities as check_priorities_setting
from ._results import (
    ClassSummary,
    KeySummary,
    Percentiles,
    RequestResult,
    Simulation,
    Summary,
    TraceEvent,
)
from ._script import Job, ScriptError, check_jobs

__all__ = ("check_costs", "check_overrides", "check_priorities", "check_rate_limits", "simulate")

RUNNING = Status.RUNNING
QUEUED = Status.QUEUED
COMPLETED = Status.COMPLETED
LATE = Status.LATE
EXPIRED = Status.EXPIRED
EVICTED = Status.EVICTED
REJECTED = Status.REJECTED
RATE_LIMITED = Status.RATE_LIMITED

#: The outcomes a simulated request can end in, in the order summaries count them.
OUTCOMES = tuple(outcome.status for outcome in SIMULATED)
#: Those of requests that held a slot, and those of requests refused at the door (never queued).
_RAN = frozenset(outcome.status for outcome in SIMULATED if outcome.ran)
_AT_ARRIVAL = frozenset(outcome.status for outcome in SIMULATED if outcome.at_arrival)

#: Milliseconds per second, to turn a rate per second into a rate per millisecond.
_MS_PER_SECOND = 1000
#: How far from a whole millisecond a wake-up time may be and still be float noise: absolute (a
#: picosecond) and relative to the time (at most 10 ns in the first three hours).
_NOISE = 1e-9
_RELATIVE_NOISE = 1e-12
#: How far the clock moves on when the core asks, twice, for an instant already reached (1 µs).
_STEP = 1e-3
_FINAL = frozenset(status.value for status in OUTCOMES)
_NO_OVERRIDES: Mapping[str, GateLimits] = {}

#: The limits of a key's gate: its override, else the simulation's.
_Limits = Callable[[str], GateLimits]


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
        max_wait = math.inf if job.max_wait_ms is None else job.max_wait_ms
        super().__init__(job.deadline_ms, job.priority, float(job.cost), max_wait)
        self.index = index
        self.queued = False


def _observer(
    observer: Callable[[RequestRecord], None], state: GateState, name: str, key: str | None
) -> Callable[[Ticket], None]:
    # The simulator's clock is in milliseconds; records are in seconds, as a real gate's.
    def observe(ticket: Ticket) -> None:
        observer(RequestRecord.of(ticket, state, name, key, 0.001))

    return observe


def _events(tickets: Sequence[Ticket]) -> list[tuple[str, _Request]]:
    """What became of the queued tickets the core started, expired or evicted, in its order."""
    # The core hands back the tickets it was given, and every ticket it is given is a _Request.
    events = [("started" if t.status is RUNNING else t.status.value, t) for t in tickets]
    return cast("list[tuple[str, _Request]]", events)


def _next_visit(wakeup: float, now: float, again: bool) -> float:
    """When to visit a core that asks for ``wakeup`` next, after a visit at ``now``.

    ``again`` says whether that visit was already the second at ``now``: a core asking for an
    instant already reached is visited there once more, and then the clock moves on (see above).
    """
    if wakeup == math.inf:
        return math.inf
    instant = wakeup if type(wakeup) is int else _instant(wakeup)  # deadlines are ints
    if instant <= now:
        instant = now if not again else wakeup if wakeup > now else now + _STEP
    return instant


class _Gate:
    """One key's gate: its core, the requests running and waiting in it, and when to visit it."""

    __slots__ = ("again", "index", "key", "last", "running", "state", "visit", "waiting")

    def __init__(self, index: int, key: str, state: GateState) -> None:
        self.index = index  # the order of the keys' first arrivals
        self.key = key
        self.state = state
        self.running = 0
        self.waiting = 0
        self.last = -math.inf  # the last instant it was visited
        self.again = False  # whether that was its second visit at that instant
        self.visit = math.inf  # the next instant its core asks for

    def visited(self, now: float) -> float:
        """After a visit at ``now``: when the core asks to be visited next (``inf``: never)."""
        self.again = self.last == now
        self.last = now
        self.visit = _next_visit(self.state.next_wakeup(), now, self.again)
        return self.visit


class _Run:
    """One simulation in progress: a gate per key, the pending ends of bodies, the counts, the trace.

    Each gate keeps its own counts; ``running`` and ``waiting`` are their totals over every gate,
    brought up to date after each step of a core, as a ``KeyedGate``'s are, and so are their peaks.
    """

    def __init__(
        self,
        jobs: Sequence[Job],
        settings: tuple[int, float, tuple[RateLimit, ...]],
        limits: _Limits,
        trace: bool,
        observer: Callable[[RequestRecord], None] | None = None,
        name: str = "simulation",
        feasible: bool = False,
        by_deadline: bool = False,
    ) -> None:
        self.jobs = jobs
        self.requests = [_Request(job, index) for index, job in enumerate(jobs)]
        self.started: list[float | None] = [None] * len(jobs)
        self.ended: list[float] = [0] * len(jobs)
        # (end of the body, index of its job): bodies ending at one instant end in script order.
        self.ends: list[tuple[float, int]] = []
        # Job indexes by arrival; same-instant arrivals keep the script's order.
        self.order = sorted(range(len(jobs)), key=lambda index: jobs[index].arrival_ms)
        priorities, jump_share, rate_limits = settings
        by_key: dict[str, _Gate] = {}
        for index in self.order:
            key = jobs[index].key
            if key not in by_key:
                state = GateState(*limits(key), priorities, jump_share, rate_limits)
                state.feasible = feasible
                state.by_deadline = by_deadline
                by_key[key] = _Gate(len(by_key), key, state)
        self.gates = list(by_key.values())
        self.gate_of = [by_key[job.key] for job in jobs]
        self.keyed = len(self.gates) > 1
        if observer is not None:
            for gate in self.gates:
                gate.state.observer = _observer(observer, gate.state, name, gate.key if self.keyed else None)
        self.running = 0
        self.waiting = 0
        self.peak_running = 0
        self.peak_waiting = 0
        self.limits = rate_limits
        # Only a limit counted in tokens has anything to settle.
        self.settles = any(not limit.per_request for limit in rate_limits)
        self.trace: list[TraceEvent] | None = [] if trace else None

    def apply(self, now: float, gate: _Gate, events: Sequence[tuple[str, _Request]]) -> None:
        """Act on one step of a gate's core, given as its events in the order they happened."""
        trace = self.trace
        balances = (
            _balances(gate.state, self.limits, now, events) if trace is not None and self.limits else None
        )
        running = gate.running
        waiting = gate.waiting
        # What the other gates hold, which this step leaves as it is.
        others_running = self.running - running
        others_waiting = self.waiting - waiting
        for number, (event, request) in enumerate(events):
            index = request.index
            if event == "started":
                if request.queued:
                    waiting -= 1
                running += 1
                self.started[index] = now
                heapq.heappush(self.ends, (now + self.jobs[index].service_ms, index))
            elif event == "queued":
                request.queued = True
                waiting += 1
            elif event in _FINAL:
                self.ended[index] = now
                if request.status in _RAN:
                    running -= 1
                elif request.queued:
                    waiting -= 1
            if trace is not None:
                tokens = balances[number] if balances is not None else ()
                job = self.jobs[index]
                mine = (running, waiting) if self.keyed else (None, None)
                total_running, total_waiting = others_running + running, others_waiting + waiting
                trace.append(
                    TraceEvent(now, event, job.id, total_running, total_waiting, tokens, job.key, *mine)
                )
        gate.running = running
        gate.waiting = waiting
        self.running = running = others_running + running
        self.waiting = waiting = others_waiting + waiting
        if running > self.peak_running:
            self.peak_running = running
        if waiting > self.peak_waiting:
            self.peak_waiting = waiting

    def arrive(self, now: float, gate: _Gate, request: _Request) -> None:
        woken = gate.state.arrive(request, now)
        status = request.status
        event = "started" if status is RUNNING else status.value
        self.apply(now, gate, [*_events(woken), (event, request)] if woken else ((event, request),))

    def end(self, now: float, gate: _Gate, request: _Request) -> None:
        state = gate.state
        actual = self.jobs[request.index].actual_cost
        if actual is not None and self.settles:
            woken = state.settle(request, float(actual), now)
            self.apply(now, gate, [("settled", request), *_events(woken)])
        woken = state.release(request, now)
        event = request.status.value
        self.apply(now, gate, [(event, request), *_events(woken)] if woken else ((event, request),))

    def run(self) -> None:
        """Replay the script to its end."""
        if self.keyed:
            self.run_keys()
        elif self.gates:
            self.run_one(self.gates[0])

    def run_one(self, gate: _Gate) -> None:
        """The loop for a script with one key: its gate is visited at every instant."""
        state, jobs, requests, ends, order = gate.state, self.jobs, self.requests, self.ends, self.order
        arrivals = [jobs[index].arrival_ms for index in order]
        total, next_arrival = len(order), 0
        visit = math.inf
        while True:
            instant = visit
            if ends and ends[0][0] < instant:
                instant = ends[0][0]
            if next_arrival < total and arrivals[next_arrival] < instant:
                instant = arrivals[next_arrival]
            if instant == math.inf:
                return
            now = instant
            woken = state.advance(now)
            if woken:
                self.apply(now, gate, _events(woken))
            while ends and ends[0][0] == now:
                self.end(now, gate, requests[heapq.heappop(ends)[1]])
            while next_arrival < total and arrivals[next_arrival] == now:
                self.arrive(now, gate, requests[order[next_arrival]])
                next_arrival += 1
            visit = gate.visited(now)

    def run_keys(self) -> None:
        """The loop for a script with several keys: each gate at its own instants (see "Keys")."""
        requests, gate_of, ends = self.requests, self.gate_of, self.ends
        # (arrival, job's index), the next arrival last; same-instant arrivals in script order.
        arrivals = [(self.jobs[index].arrival_ms, index) for index in reversed(self.order)]
        visits: list[tuple[float, int]] = []  # (instant, gate's index), stale entries left in
        while (now := self._next_instant(visits, arrivals)) != math.inf:
            ending: list[int] = []  # the bodies that end now, in script order
            while ends and ends[0][0] == now:
                ending.append(heapq.heappop(ends)[1])
            arriving: list[int] = []
            while arrivals and arrivals[-1][0] == now:
                arriving.append(arrivals.pop()[1])
            visited = self._visited(visits, now, ending, arriving)
            for gate in visited:
                woken = gate.state.advance(now)
                if woken:
                    self.apply(now, gate, _events(woken))
            for index in ending:
                self.end(now, gate_of[index], requests[index])
            for index in arriving:
                self.arrive(now, gate_of[index], requests[index])
            for gate in visited:
                visit = gate.visited(now)
                if visit != math.inf:
                    heapq.heappush(visits, (visit, gate.index))

    def _next_instant(self, visits: list[tuple[float, int]], arrivals: list[tuple[int, int]]) -> float:
        # The earliest of the gates' next visits, the bodies' ends and the arrivals (inf: none left).
        gates = self.gates
        while visits and visits[0][0] != gates[visits[0][1]].visit:
            heapq.heappop(visits)  # stale: that gate asked for another instant since
        instant = visits[0][0] if visits else math.inf
        ends = self.ends
        if ends and ends[0][0] < instant:
            instant = ends[0][0]
        if arrivals and arrivals[-1][0] < instant:
            instant = arrivals[-1][0]
        return instant

    def _visited(
        self, visits: list[tuple[float, int]], now: float, ending: list[int], arriving: list[int]
    ) -> list[_Gate]:
        # The gates visited now, in the order of their keys' first arrivals: those whose core asked
        # for now, and those with a body ending or a request arriving now.
        gates = self.gates
        visited: set[int] = set()
        while visits and visits[0][0] == now:
            index = heapq.heappop(visits)[1]
            if gates[index].visit == now:
                visited.add(index)
        gate_of = self.gate_of
        for index in ending:
            visited.add(gate_of[index].index)
        for index in arriving:
            visited.add(gate_of[index].index)
        return [gates[index] for index in sorted(visited)]

    def rows(self) -> list[RequestResult]:
        """A row per request, in the script's order."""
        rows: list[RequestResult] = []
        for job, request in zip(self.jobs, self.requests, strict=True):
            outcome = request.status
            arrival = job.arrival_ms
            start = self.started[request.index]
            end = self.ended[request.index]
            if start is not None:
                queue: float | None = _whole(start - arrival)
            elif outcome in _AT_ARRIVAL:
                queue = None  # refused at the door: it never queued
            else:
                queue = _whole(end - arrival)
            start = None if start is None else _whole(start)
            end_to_end = _whole(end - arrival)
            rows.append(
                RequestResult(job.id, outcome, arrival, start, _whole(end), queue, end_to_end, job.key)
            )
        return rows


def _balances(
    state: GateState, limits: Sequence[RateLimit], now: float, events: Sequence[tuple[str, _Request]]
) -> list[tuple[float, ...]]:
    """Each of ``state``'s buckets' balances just after each of a step's events.

    The core answers for the whole step; walking back from its balances, each start gives back
    what it took (nothing else in a step changes a balance: a settle is a step of its own).
    """
    after = state.tokens(now)
    if len(events) == 1:
        return [after]
    current = list(after)
    balances = [after] * len(events)
    for number in range(len(events) - 1, 0, -1):
        event, request = events[number]
        if event == "started":
            for k, limit in enumerate(limits):
                current[k] += 1.0 if limit.per_request else request.cost
            balances[number - 1] = tuple(current)
        else:
            balances[number - 1] = balances[number]
    return balances


class _Tally(TypedDict):
    """What every summary counts over its requests."""

    requests: int
    completed: int
    late: int
    expired: int
    rejected: int
    evicted: int
    rate_limited: int
    infeasible: int
    queue_ms: Percentiles
    end_to_end_ms: Percentiles


def _tally(rows: Iterable[RequestResult]) -> _Tally:
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
    tally = {outcome.name: counts[outcome.status] for outcome in SIMULATED}
    return cast(
        _Tally,
        {
            "requests": total,
            **tally,
            "queue_ms": Percentiles.of(queue),
            "end_to_end_ms": Percentiles.of(end_to_end),
        },
    )


def _summary(run: _Run, rows: Sequence[RequestResult], priorities: int, limits: _Limits) -> Summary:
    classes: list[ClassSummary] = []
    if priorities > 1:
        # The classes with requests: a class nobody is in has nothing to count.
        rows_of_class: dict[int, list[RequestResult]] = {}
        for job, row in zip(run.jobs, rows, strict=True):
            rows_of_class.setdefault(job.priority, []).append(row)
        for priority in sorted(rows_of_class):
            classes.append(ClassSummary(priority=priority, **_tally(rows_of_class[priority])))
    keys: list[KeySummary] = []
    if run.keyed:
        rows_of: dict[str, list[RequestResult]] = {gate.key: [] for gate in run.gates}
        for row in rows:
            rows_of[row.key].append(row)
        for gate in sorted(run.gates, key=lambda gate: gate.key):
            max_running, max_waiting = limits(gate.key)
            keys.append(
                KeySummary(
                    key=gate.key,
                    max_running=max_running,
                    max_waiting=max_waiting,
                    peak_running=gate.state.peak_running,
                    peak_waiting=gate.state.peak_waiting,
                    **_tally(rows_of[gate.key]),
                )
            )
    # One gate's peaks are its core's, as BoundedGate.stats() reports them (a core may count a
    # request waiting for an instant within one step); several gates' are the totals' after each
    # step, as KeyedGate.stats() reports them.
    peaks = (run.peak_running, run.peak_waiting)
    if not run.keyed and run.gates:
        peaks = (run.gates[0].state.peak_running, run.gates[0].state.peak_waiting)
    return Summary(
        peak_running=peaks[0],
        peak_waiting=peaks[1],
        classes=tuple(classes),
        keys=tuple(keys),
        **_tally(rows),
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


def check_rate_limits(rate_limits: Iterable[RateLimit] | RateLimit) -> tuple[RateLimit, ...]:
    """Return ``rate_limits`` as a tuple, checking that the simulator can replay them.

    A single limit is taken only to be refused with a message that says to give a list.

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


def check_overrides(overrides: Mapping[str, GateLimits] | None) -> dict[str, GateLimits]:
    """Return per-key limits as a dict of :class:`GateLimits`, checking each.

    Raises:
        TypeError: ``overrides`` is not a mapping, a key is not a str, or limits that are not a
            pair of ``(max_running, max_waiting)`` of the right types.
        ValueError: Limits out of range (as for the simulation's own).
    """
    if overrides is None:
        return {}
    if not isinstance(overrides, Mapping):
        raise TypeError(f"overrides must be a mapping from key to GateLimits, got {overrides!r}")
    checked: dict[str, GateLimits] = {}
    for key, limits in overrides.items():
        if not isinstance(key, str):
            raise TypeError(f"overrides are keyed by the script's keys, which are strings; got {key!r}")
        checked[key] = check_limits(key, limits)
    return checked


def _simulate_checked(
    jobs: Sequence[Job],
    max_running: int | None,
    max_waiting: int | None,
    priorities: int,
    jump_share: float,
    rate_limits: tuple[RateLimit, ...],
    trace: bool,
    overrides: Mapping[str, GateLimits] = _NO_OVERRIDES,
    observer: Callable[[RequestRecord], None] | None = None,
    name: str = "simulation",
    feasible: bool = False,
    by_deadline: bool = False,
) -> Simulation:
    per_ms = tuple(_per_millisecond(limit) for limit in rate_limits)
    GateState(max_running, max_waiting, priorities, jump_share, per_ms)  # checks the settings
    template = GateLimits(max_running, max_waiting)

    def limits(key: str) -> GateLimits:
        return overrides.get(key, template)

    run = _Run(jobs, (priorities, jump_share, per_ms), limits, trace, observer, name, feasible, by_deadline)
    run.run()
    rows = run.rows()
    return Simulation(
        max_running,
        max_waiting,
        tuple(rows),
        () if run.trace is None else tuple(run.trace),
        _summary(run, rows, priorities, limits),
        priorities,
        jump_share,
        rate_limits,
        dict(overrides),
    )


def simulate(
    jobs: Iterable[Job],
    *,
    max_running: int | None,
    max_waiting: int | None,
    priorities: int = 1,
    jump_share: float = 0.2,
    rate_limits: Iterable[RateLimit] = (),
    overrides: Mapping[str, GateLimits] | None = None,
    trace: bool = True,
    observer: Callable[[RequestRecord], None] | None = None,
    name: str = "simulation",
    feasible: bool = False,
    by_deadline: bool = False,
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

    Jobs with a ``key`` go through that key's gate, as through a
    :class:`~boundedgate.KeyedGate` with these settings: each key's gate has ``max_running`` and
    ``max_waiting`` (or the key's override), the priority classes, and rate limits of its own
    (each key its own buckets, starting full), and keys never delay one another.

    Args:
        jobs: The script (see :class:`Job`).
        max_running: Running slots (C), an int >= 1, or None for no limit on running (a pure rate
            limiter); with keys, each key's.
        max_waiting: Queue places (Q), an int >= 0, or None for an unbounded queue; with keys,
            each key's.
        priorities: Priority classes, as ``BoundedGate``'s; every job's ``priority`` must be below.
        jump_share: The share of starts that may jump ahead of an older waiter, as ``BoundedGate``'s.
        rate_limits: Token buckets every request pays, as ``BoundedGate``'s (rates per second);
            with keys, every key has its own.
        overrides: Limits for particular keys, as ``KeyedGate``'s: a mapping from key to
            :class:`~boundedgate.GateLimits` ``(max_running, max_waiting)``. Keys the script
            does not use are ignored, as by a ``KeyedGate`` that never sees them.
        trace: Whether to keep the trace of events (a sweep over many settings need not).
        observer: Called with the :class:`~boundedgate.RequestRecord` of every request as it
            ends (times in seconds), as a gate's observers are: feed it to the same exports to
            put a planned run and a real one on one board.
        name: The gate name the records carry (make it the real gate's to compare the two).
        feasible: Deadline-feasible admission, as ``BoundedGate(feasible=True)``: a request the
            recent pace says cannot start before its deadline is refused at arrival (``infeasible``).
            With keys, each key's pace lasts the whole run, as in a ``KeyedGate(feasible=True)``
            that keeps every key's gate (``keep_idle``).
        by_deadline: Each class's waiters start earliest deadline first, as
            ``BoundedGate(by_deadline=True)``.

    Returns:
        The settings, a row per request in the script's order, the trace, and a summary.

    Raises:
        ScriptError: An item that is not a :class:`Job`, a duplicate id, a priority that is not
            one of the gate's classes, or a cost above the burst of a rate limit counted in tokens.
        TypeError: A setting of the wrong type (booleans included), rate limits that are not a
            list of :class:`RateLimit` objects, or overrides that are not a mapping from str to
            ``GateLimits``.
        ValueError: ``max_running < 1``, ``max_waiting < 0`` (in the settings or an override),
            ``priorities < 1``, or a ``jump_share`` outside ``[0, 1)``.
    """
    script = check_jobs(jobs)
    priorities = check_priorities_setting(priorities)
    check_priorities(script, priorities)
    limits = check_rate_limits(rate_limits)
    check_costs(script, limits)
    per_key = check_overrides(overrides)
    return _simulate_checked(
        script,
        max_running,
        max_waiting,
        priorities,
        jump_share,
        limits,
        trace,
        per_key,
        observer,
        name,
        bool(feasible),
        bool(by_deadline),
    )
