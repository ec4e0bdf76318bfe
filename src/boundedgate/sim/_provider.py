"""A provider with a capacity that moves, and gates in front of it, in virtual time.

:func:`simulate_provider` plays one or several gates (each a :class:`Client`: its traffic, C, Q,
and optionally an adaptive controller or deadline-feasible admission) against one shared
:class:`Provider`, whose capacity ``K(t)`` is a number or a function of time (:func:`steps` for a
step down and back, :func:`drift` for a slow change). Every gate is the core's own
:class:`~boundedgate._core.GateState`, and every controller the core's
:class:`~boundedgate.AdaptiveLimit`, fed exactly as the asyncio driver feeds them, so what the
simulation shows is what the library does.

Beyond its capacity the provider answers at once (after ``refuse_seconds``) with an overload (a
529, ``overload="refuse"``) or serves the request late: it queues it, and the time to first token
grows with the wait (``overload="queue"``). With ``rpm`` it also has a request bucket and answers
429 with a reset when it is empty. A refused call fails (our caller gets an error, like a 500):
only answers before the caller's deadline count as goodput. Times are in seconds.

The provider serves a request while fewer than ``K(t)`` run (a K of 2.5 serves a third request, not
a fourth); K may be 0, an outage. Its queue (``overload="queue"``) is FIFO, and starts its oldest
request the moment there is room: when a request it serves ends, or when K rises. ``steps()`` and
``drift()`` say when that is exactly; a capacity function of one's own is asked again every 0.1 s
while requests wait at the provider, for up to an hour after the oldest of them came. Every request
ends counted once in its :class:`ClientResult`: answered (on time or late), refused by the provider
or by the gate, expired, or ``unanswered``, still waiting (at the provider, or in a gate behind it)
when nothing else was left to happen, because the provider's capacity never came back.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .._core import Adaptive, AdaptiveLimit, GateState, Status, Ticket, arrival_of, start_of

__all__ = ("Client", "ClientResult", "Provider", "drift", "simulate_provider", "steps")

RUNNING = Status.RUNNING
EXPIRED = Status.EXPIRED
EVICTED = Status.EVICTED
FAILED = Status.FAILED


#: How often a capacity function of one's own is asked again while requests wait at the provider.
_RECHECK = 0.1
#: How long after the oldest request waiting at the provider came it is still asked (then: unanswered).
_PATIENCE = 3600.0


def steps(initial: float, *changes: tuple[float, float]) -> Callable[[float], float]:
    """A capacity of ``initial``, becoming ``k`` at each ``(time, k)`` of ``changes`` (0: an outage)."""
    return _Steps(initial, tuple(sorted(changes)))


def drift(start: float, end: float, over: float) -> Callable[[float], float]:
    """A capacity moving linearly from ``start`` to ``end`` over ``over`` seconds, then staying."""
    return _Drift(start, end, over)


@dataclass(frozen=True, slots=True)
class _Steps:
    initial: float
    changes: tuple[tuple[float, float], ...]

    def __call__(self, now: float) -> float:
        k = self.initial
        for at, value in self.changes:
            if now >= at:
                k = value
        return k

    def above(self, level: float, now: float) -> float:
        """The earliest time from ``now`` on at which the capacity exceeds ``level`` (inf: never)."""
        if self(now) > level:
            return now
        return next((at for at, k in self.changes if at > now and k > level), math.inf)


@dataclass(frozen=True, slots=True)
class _Drift:
    start: float
    end: float
    over: float

    def __call__(self, now: float) -> float:
        return self.start + (self.end - self.start) * min(1.0, max(0.0, now / self.over))

    def above(self, level: float, now: float) -> float:
        """The earliest time from ``now`` on at which the capacity exceeds ``level`` (inf: never)."""
        if self(now) > level:
            return now
        if self.end <= level:  # it only moves towards `end`
            return math.inf
        when = max(now, self.over * (level - self.start) / (self.end - self.start))  # where it is `level`
        while self(when) <= level:  # just past it, as the capacity computes it
            when = math.nextafter(when, math.inf)
        return when


@dataclass(frozen=True, slots=True)
class Provider:
    """The provider every client calls: its capacity and how it answers beyond it.

    Args:
        capacity: Concurrent requests it serves, a number or a function of time ``K(t)`` (0: an
            outage).
        overload: ``"refuse"``: beyond K it answers an overload (529) after ``refuse_seconds``;
            ``"queue"``: beyond K it queues the request, its first token coming after the wait
            (the queue starts as soon as there is room: see the module).
        refuse_seconds: How long an overload (or rate-limit) answer takes.
        first_token: The share of a request's service time before its first token (prefill).
        rpm: Requests per minute its bucket allows (None: no rate limit); an empty bucket answers
            429 with the time to its next token as the reset.
    """

    capacity: float | Callable[[float], float]
    overload: str = "refuse"
    refuse_seconds: float = 0.05
    first_token: float = 0.1
    rpm: float | None = None

    def k(self, now: float) -> float:
        """The capacity at ``now``."""
        return self.capacity(now) if callable(self.capacity) else float(self.capacity)

    def _room_at(self, running: int, now: float) -> float | None:
        """When it may next serve one more than ``running``: the time K exceeds it, if known, else None."""
        capacity = self.capacity
        if isinstance(capacity, _Steps | _Drift):
            return capacity.above(running, now)
        if not callable(capacity):
            return now if capacity > running else math.inf
        return now if capacity(now) > running else None


@dataclass(frozen=True, slots=True)
class Client:
    """One gate in front of the provider, and its traffic.

    Args:
        name: Its name in the results.
        jobs: ``(arrival, service, budget)`` per request, in seconds (budget None: no deadline).
        max_running: C (the initial C with ``adaptive``).
        max_waiting: Q (None: unbounded).
        adaptive: Settings of an adaptive controller that sets C (None: C is static).
        feasible: Deadline-feasible admission.
        deadlines: False for a plain semaphore: the gate knows no deadline (nothing expires in the
            queue); lateness is still judged against each budget.
    """

    name: str
    jobs: Sequence[tuple[float, float, float | None]]
    max_running: int
    max_waiting: int | None
    adaptive: Adaptive | None = None
    feasible: bool = False
    deadlines: bool = True


@dataclass(slots=True)
class ClientResult:
    """What became of one client's requests, and how its C moved."""

    name: str
    #: Requests in its traffic.
    requests: int = 0
    #: Answered before their deadline: the goodput.
    on_time: int = 0
    #: Answered at or after their deadline.
    late: int = 0
    #: Refused by the provider (429 or 529): our caller got an error.
    provider_refused: int = 0
    #: Refused by the gate at arrival (queue full, or infeasible with ``feasible``).
    rejected: int = 0
    infeasible: int = 0
    #: Left the gate's queue at their deadline.
    expired: int = 0
    #: Seconds from arrival to the "no" of every request that got one from the gate, summed.
    refusal_seconds: float = 0.0
    #: Requests sent to the provider while it was over capacity or rate limited.
    over_capacity: int = 0
    #: Still waiting, at the provider or in the gate, when nothing else was left to happen: the
    #: provider's capacity never came back (see the module).
    unanswered: int = 0
    #: ``(time, C)`` at the start and at each change.
    limits: list[tuple[float, int]] = field(default_factory=list)
    #: When each answer on time came, in time order (for goodput over time).
    on_time_at: list[float] = field(default_factory=list)

    @property
    def mean_refusal_seconds(self) -> float | None:
        """How long, on average, a request the gate refused took to learn it (None: none refused)."""
        refused = self.rejected + self.infeasible + self.expired
        return self.refusal_seconds / refused if refused else None


class _Call(Ticket):
    __slots__ = ("budget", "client", "service")

    def __init__(self, deadline: float, client: int, service: float, budget: float | None) -> None:
        super().__init__(deadline)
        self.client = client
        self.service = service
        self.budget = budget


class _Sim:
    def __init__(self, clients: Sequence[Client], provider: Provider) -> None:
        self.clients = clients
        self.provider = provider
        self.states: list[GateState] = []
        self.controllers: list[AdaptiveLimit | None] = []
        self.results = [ClientResult(c.name, requests=len(c.jobs)) for c in clients]
        self.armed = [math.inf] * len(clients)
        self.events: list[tuple[float, int, str, object]] = []
        self.seq = itertools.count()
        self.active = 0  # requests the provider is serving
        self.backlog: deque[tuple[_Call, float]] = deque()  # its own queue (overload="queue"), FIFO
        self.room_at = math.inf  # when the provider is next looked at for room for its queue
        self.tokens = provider.rpm / 60.0 if provider.rpm else 0.0
        self.bucket_at = 0.0
        for index, client in enumerate(clients):
            state = GateState(client.max_running, client.max_waiting)
            state.feasible = client.feasible
            self.states.append(state)
            adaptive = client.adaptive
            self.controllers.append(None if adaptive is None else AdaptiveLimit(adaptive, client.max_running))
            self.results[index].limits.append((0.0, state.limit))
            for arrival, service, budget in client.jobs:
                deadline = math.inf if budget is None or not client.deadlines else arrival + budget
                self.push(arrival, "arrive", _Call(deadline, index, service, budget))

    def push(self, when: float, kind: str, payload: object) -> None:
        heapq.heappush(self.events, (when, next(self.seq), kind, payload))

    def run(self) -> list[ClientResult]:
        while self.events:
            now, _, kind, payload = heapq.heappop(self.events)
            if kind == "arrive":
                call: _Call = payload  # type: ignore[assignment]
                state = self.states[call.client]
                self.woken(call.client, state.arrive(call, now), now)
                self.settled(call, now)
            elif kind == "timer":
                index: int = payload  # type: ignore[assignment]
                if self.armed[index] == now:
                    self.armed[index] = math.inf
                    self.woken(index, self.states[index].advance(now), now)
            elif kind == "answer":
                answer: tuple[_Call, bool, str | None, float] = payload  # type: ignore[assignment]
                self.answered(*answer, now)
            elif kind == "served":
                self.drain(now)
            elif kind == "room" and self.room_at == now:
                self.room_at = math.inf
                self.drain(now)
        self.count_unanswered()
        return self.results

    def woken(self, index: int, tickets: Sequence[Ticket], now: float) -> None:
        for ticket in tickets:
            self.settled(ticket, now)  # type: ignore[arg-type]
        self.rearm(index)

    def rearm(self, index: int) -> None:
        when = self.states[index].next_wakeup()
        if when < self.armed[index]:
            self.armed[index] = when
            self.push(when, "timer", index)

    def settled(self, call: _Call, now: float) -> None:
        result = self.results[call.client]
        status = call.status
        if status is RUNNING and call.started == now:
            self.send(call, now)
        elif (
            status is Status.REJECTED or status is Status.INFEASIBLE or status is EXPIRED or status is EVICTED
        ):
            result.refusal_seconds += now - arrival_of(call)
            if status is Status.INFEASIBLE:
                result.infeasible += 1
            elif status is EXPIRED:
                result.expired += 1
            else:
                result.rejected += 1
        if status is Status.QUEUED:
            self.rearm(call.client)

    def send(self, call: _Call, now: float) -> None:
        provider = self.provider
        if provider.rpm:
            rate = provider.rpm / 60.0
            self.tokens = min(rate, self.tokens + (now - self.bucket_at) * rate)  # burst: 1 s of rate
            self.bucket_at = now
            if self.tokens < 1:
                retry = (1 - self.tokens) / rate
                self.results[call.client].over_capacity += 1
                self.push(now + provider.refuse_seconds, "answer", (call, False, "rate_limited", retry))
                return
            self.tokens -= 1
        if self.backlog:
            self.drain(now)  # the provider's queue first: it is FIFO
        if self.active >= provider.k(now):
            self.results[call.client].over_capacity += 1
            if provider.overload == "refuse":
                self.push(now + provider.refuse_seconds, "answer", (call, False, "overloaded", 0.0))
                return
            self.backlog.append((call, now))
            self.watch(now)
            return
        self.serve(call, now, now)

    def serve(self, call: _Call, sent: float, now: float) -> None:
        self.active += 1
        first = (now - sent) + call.service * self.provider.first_token
        self.push(now + call.service, "answer", (call, True, None, first))

    def drain(self, now: float) -> None:
        """Start the provider's queue, oldest first, while it has room; then watch for more room."""
        while self.backlog and self.active < self.provider.k(now):
            call, sent = self.backlog.popleft()
            self.serve(call, sent, now)
        if self.backlog:
            self.watch(now)

    def watch(self, now: float) -> None:
        """Look at the provider again when it may have room for its queue (K rises, say after an outage).

        An answer looks anyway; this covers room that comes with K alone. A capacity function of
        one's own is asked every ``_RECHECK`` seconds, for up to ``_PATIENCE`` after the oldest
        request of the queue came.
        """
        when = self.provider._room_at(self.active, now)
        if when is None:
            when = now + _RECHECK if now - self.backlog[0][1] < _PATIENCE else math.inf
        if when < self.room_at:
            self.room_at = when
            self.push(when, "room", None)

    def count_unanswered(self) -> None:
        """What still waits when nothing is left to happen: the provider never came back for it."""
        for call, _ in self.backlog:
            self.results[call.client].unanswered += 1
        for result, state in zip(self.results, self.states, strict=True):
            result.unanswered += state.waiting

    def answered(self, call: _Call, ok: bool, signal: str | None, extra: float, now: float) -> None:
        index = call.client
        state = self.states[index]
        result = self.results[index]
        controller = self.controllers[index]
        woken: list[Ticket] = []
        if ok:
            self.active -= 1
            self.push(now, "served", None)
            woken += state.release(call, now)
            if call.budget is not None and now >= arrival_of(call) + call.budget:
                result.late += 1
            else:
                result.on_time += 1
                result.on_time_at.append(now)
            if controller is not None:
                controller.sample(extra, now - start_of(call), now, state.running + 1)
        else:
            result.provider_refused += 1
            woken += state.release(call, now, FAILED)
            if signal == "rate_limited":
                woken += state.pause(now + extra, now)
            elif controller is not None and signal is not None:
                controller.signal(signal, now)
        if controller is not None and controller.limit != state.limit:
            woken += state.set_limits(now, max_running=controller.limit)
            result.limits.append((now, controller.limit))
        self.woken(index, woken, now)


def simulate_provider(clients: Sequence[Client], provider: Provider) -> list[ClientResult]:
    """Run every client's traffic through its gate to the shared provider; one result per client."""
    return _Sim(clients, provider).run()
