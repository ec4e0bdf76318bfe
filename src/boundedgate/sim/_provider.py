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

A request is given by its service time (the provider's first token then comes after a share of
it), or by its sizes, a :class:`Request` with ``prompt_tokens`` and ``output_tokens``: the
provider derives its time to first token and its whole service from them with its own speeds
(documented constants a user sets), so that a long answer does not look like a slow provider.
A client's ``on_deadline="cut"`` cancels a call still running at its deadline, as
``asyncio.timeout`` around the whole call does, freeing its slot and the provider's capacity then.

The provider serves a request while fewer than ``K(t)`` run (a K of 2.5 serves a third request, not
a fourth); K may be 0, an outage. Its queue (``overload="queue"``) is FIFO, and starts its oldest
request the moment there is room: when a request it serves ends, or when K rises. ``steps()`` and
``drift()`` say when that is exactly; a capacity function of one's own is asked again every 0.1 s
while requests wait at the provider, for up to an hour after the oldest of them came. Every request
ends counted once in its :class:`ClientResult`: answered (on time or late), cut at its deadline,
refused by the provider or by the gate, expired, or ``unanswered``, still waiting (at the provider,
or in a gate behind it) when nothing else was left to happen, because the provider's capacity never
came back.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .._core import Adaptive, AdaptiveLimit, GateState, Status, Ticket, arrival_of, start_of
from ._results import Percentiles

__all__ = ("Client", "ClientResult", "Provider", "Request", "drift", "simulate_provider", "steps")

RUNNING = Status.RUNNING
EXPIRED = Status.EXPIRED
EVICTED = Status.EVICTED
FAILED = Status.FAILED
CUT = Status.CUT


#: What a call still running at its deadline may become (see :class:`Client`).
ON_DEADLINE = ("late", "cut")

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
        first_token: For a request given by its service time alone: the share of that time before
            its first token (prefill).
        rpm: Requests per minute its bucket allows (None: no rate limit); an empty bucket answers
            429 with the time to its next token as the reset.
        overhead_seconds: For a request with its sizes (a :class:`Request` with ``prompt_tokens``
            and ``output_tokens``): the fixed time before any token, network and scheduling.
        prefill_tokens_per_second: How fast it reads a prompt: a sized request's first token
            comes ``overhead_seconds + prompt_tokens / prefill_tokens_per_second`` after it is
            served (plus any wait in the provider's own queue).
        decode_tokens_per_second: How fast it streams an answer, per request: a sized request
            ends ``output_tokens / decode_tokens_per_second`` after its first token.

    The speeds' defaults are a mid-size model (70 billion parameters) served on a few data-centre
    GPUs, rounded from vLLM's published serving benchmarks (its performance dashboard, Llama 3
    70B with tensor parallelism over four GPUs: a time per output token of 25 to 45 ms at light
    load, and prompts read at thousands of tokens a second): 0.2 s of overhead, 5,000 prompt
    tokens a second, 40 output tokens a second. A hosted API's figures differ by model and by
    hour: set them from your own dashboard's time to first token and tokens per second.

    Raises:
        ValueError: A speed that is not a finite number > 0, or an overhead below 0.
    """

    capacity: float | Callable[[float], float]
    overload: str = "refuse"
    refuse_seconds: float = 0.05
    first_token: float = 0.1
    rpm: float | None = None
    overhead_seconds: float = 0.2
    prefill_tokens_per_second: float = 5000.0
    decode_tokens_per_second: float = 40.0

    def __post_init__(self) -> None:
        for name in ("prefill_tokens_per_second", "decode_tokens_per_second"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 < value < math.inf):
                raise ValueError(f"{name} must be a finite number > 0 (tokens a second), got {value!r}")
        overhead = self.overhead_seconds
        if not (isinstance(overhead, (int, float)) and 0 <= overhead < math.inf):
            raise ValueError(f"overhead_seconds must be a finite number >= 0, got {overhead!r}")

    def first_token_seconds(self, prompt_tokens: int) -> float:
        """How long after it is served a request of ``prompt_tokens`` gets its first token."""
        return self.overhead_seconds + prompt_tokens / self.prefill_tokens_per_second

    def service_seconds(self, prompt_tokens: int, output_tokens: int) -> float:
        """How long it serves a request of these sizes: its first token, then its whole answer."""
        return self.first_token_seconds(prompt_tokens) + output_tokens / self.decode_tokens_per_second

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
class Request:
    """One request of a client's traffic, which may carry its sizes.

    ``Request(arrival, service, budget)`` is the same as the tuple ``(arrival, service, budget)``,
    which a traffic may hold instead. With both ``prompt_tokens`` and ``output_tokens`` the
    provider derives the request's time from its sizes and its own speeds (see
    :class:`Provider`), and ``service`` is not used (None, or what the gate-only simulator runs
    the body for): its first token comes ``overhead + prompt / prefill`` after it is served, its
    answer ``output / decode`` after that. The first token is then the latency an adaptive
    controller sees; without sizes it is the provider's ``first_token`` share of ``service``.

    Args:
        arrival: When it arrives, in seconds.
        service: How long the provider serves it, in seconds; None with both sizes.
        budget: Its budget from arrival, in seconds (None: no deadline).
        prompt_tokens: Its prompt's size, in tokens.
        output_tokens: Its answer's size, in tokens.

    Raises:
        ValueError: No service and not both sizes, or a size below 0.
    """

    arrival: float
    service: float | None = None
    budget: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("prompt_tokens", "output_tokens"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value!r}")
        if self.service is None and not self.sized:
            raise ValueError(
                "a request needs its service time, or both its prompt_tokens and output_tokens "
                "(the provider derives its time from them)"
            )

    @property
    def sized(self) -> bool:
        """Whether it carries both sizes (then the provider derives its time from them)."""
        return self.prompt_tokens is not None and self.output_tokens is not None


#: A client's traffic: ``(arrival, service, budget)`` tuples or :class:`Request` records, in seconds.
Traffic = Sequence[tuple[float, float, float | None] | Request]


def arrival_of_request(request: tuple[float, float, float | None] | Request) -> float:
    """When a request of a traffic arrives, whether a tuple or a :class:`Request`."""
    return request.arrival if isinstance(request, Request) else request[0]


@dataclass(frozen=True, slots=True)
class Client:
    """One gate in front of the provider, and its traffic.

    Args:
        name: Its name in the results.
        jobs: ``(arrival, service, budget)`` per request, in seconds (budget None: no deadline),
            or a :class:`Request` per request, which may carry its sizes.
        max_running: C (the initial C with ``adaptive``).
        max_waiting: Q (None: unbounded).
        adaptive: Settings of an adaptive controller that sets C (None: C is static). It hears
            each 529 with the requests the gate had in flight, and compares a sized request's
            latency with those of requests of its prompt's size (as a real gate does with the
            cost a request declares: ``AdaptiveLimit.sample``).
        feasible: Deadline-feasible admission.
        deadlines: False for a plain semaphore: the gate knows no deadline (nothing expires in the
            queue); lateness is still judged against each budget.
        on_deadline: What becomes of a call still running at its deadline (arrival + budget):
            ``"late"`` (the default): it runs on to its answer, which comes late and is counted
            ``late``, its slot held to the end, as the gate's ``Late`` does; ``"cut"``: it is
            cancelled then, as ``asyncio.timeout`` around the whole call cancels it. A cut call's
            slot and the provider's capacity come free at its deadline, wherever it is (running,
            waiting at the provider's own queue, or waiting for a 529 or 429): a timeout closes
            the connection, and the provider is assumed to stop work on a closed connection. Its
            answer never comes; it is counted ``cut``. With ``deadlines`` this is the gate's own
            ``admit(timeout=..., on_deadline="cut")``: its gate counts the call ``cut`` too, as
            the real gate does; without, a gate that knows no deadline inside ``asyncio.timeout``,
            whose gate saw the body fail (``failed``). With ``deadlines`` a cut call's wait in the
            gate's queue also ends at its deadline: the whole call within its budget, a
            ``Semaphore`` inside ``asyncio.timeout``.
        by_deadline: Its queue in deadline order, as ``BoundedGate(by_deadline=True)``.

    Raises:
        ValueError: ``on_deadline`` is neither ``"late"`` nor ``"cut"``.
    """

    name: str
    jobs: Traffic
    max_running: int
    max_waiting: int | None
    adaptive: Adaptive | None = None
    feasible: bool = False
    deadlines: bool = True
    on_deadline: str = "late"
    by_deadline: bool = False

    def __post_init__(self) -> None:
        if self.on_deadline not in ON_DEADLINE:
            raise ValueError(
                f"on_deadline must be 'late' (run on, answer late) or 'cut' (cancel at the deadline), "
                f"got {self.on_deadline!r}"
            )


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
    #: Cancelled at their deadline while at the provider, with ``on_deadline="cut"``: no answer.
    cut: int = 0
    #: Refused by the provider (429 or 529): our caller got an error.
    provider_refused: int = 0
    #: Refused by the gate at arrival (queue full, or infeasible with ``feasible``).
    rejected: int = 0
    infeasible: int = 0
    #: Left the gate's queue at their deadline.
    expired: int = 0
    #: Seconds from arrival to the "no" of every request that got one from the gate, summed.
    refusal_seconds: float = 0.0
    #: Seconds from arrival to each "no" a caller got, whoever said it: the gate (refused at
    #: arrival, or expired in its queue), the provider (a 429 or 529 passed on, after any wait in
    #: the gate), or the deadline (a call cut off there); one per such request, in the order they
    #: came. An answer, on time or late, is no refusal.
    refused_after: list[float] = field(default_factory=list)
    #: Requests sent to the provider while it was over capacity or rate limited.
    over_capacity: int = 0
    #: Seconds of the provider's service spent on answers nobody waited for: the whole service of
    #: each late answer, and the part of each cut call served before its deadline.
    wasted_seconds: float = 0.0
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

    @property
    def time_to_refusal(self) -> Percentiles:
        """The distribution of :attr:`refused_after`, in seconds: how long a caller waited for a "no"."""
        return Percentiles.of(self.refused_after)


class _Call(Ticket):
    __slots__ = ("budget", "client", "done", "prefill", "served_at", "service", "size")

    def __init__(
        self,
        deadline: float,
        client: int,
        service: float,
        budget: float | None,
        prefill: float | None,
        size: int | None = None,
    ) -> None:
        super().__init__(deadline)
        self.client = client
        self.service = service  # how long the provider serves it
        self.budget = budget
        self.prefill = prefill  # from being served to its first token (None: a share of service)
        self.size = size  # its prompt's tokens, which the controller compares its latency by
        self.served_at: float | None = None  # while the provider serves it: since when
        self.done = False  # answered, refused by the provider, or cut: nothing more comes of it


def _timing(
    request: tuple[float, float, float | None] | Request, provider: Provider
) -> tuple[float, float, float | None, float | None]:
    """A request's arrival, service, budget and time to first token once served (None: a share)."""
    if not isinstance(request, Request):
        arrival, service, budget = request
        return arrival, service, budget, None
    if request.prompt_tokens is not None and request.output_tokens is not None:
        service = provider.service_seconds(request.prompt_tokens, request.output_tokens)
        return request.arrival, service, request.budget, provider.first_token_seconds(request.prompt_tokens)
    assert request.service is not None  # Request checks it
    return request.arrival, request.service, request.budget, None


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
            state.by_deadline = client.by_deadline
            self.states.append(state)
            adaptive = client.adaptive
            self.controllers.append(None if adaptive is None else AdaptiveLimit(adaptive, client.max_running))
            self.results[index].limits.append((0.0, state.limit))
            for request in client.jobs:
                arrival, service, budget, prefill = _timing(request, provider)
                deadline = math.inf if budget is None or not client.deadlines else arrival + budget
                size = request.prompt_tokens if isinstance(request, Request) else None
                self.push(arrival, "arrive", _Call(deadline, index, service, budget, prefill, size))
        self.cuts = [client.on_deadline == "cut" for client in clients]

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
            elif kind == "cut":
                self.cut(payload, now)  # type: ignore[arg-type]
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
            result.refused_after.append(now - arrival_of(call))
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
        if self.cuts[call.client] and call.budget is not None:
            # Before any answer is scheduled: at the same instant, the cut comes first (at the
            # deadline an answer is late, and a cut call gets none).
            self.push(max(now, arrival_of(call) + call.budget), "cut", call)
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
        call.served_at = now
        prefill = call.service * self.provider.first_token if call.prefill is None else call.prefill
        self.push(now + call.service, "answer", (call, True, None, (now - sent) + prefill))

    def drain(self, now: float) -> None:
        """Start the provider's queue, oldest first, while it has room; then watch for more room."""
        self.forget_cut()
        while self.backlog and self.active < self.provider.k(now):
            call, sent = self.backlog.popleft()
            self.serve(call, sent, now)
            self.forget_cut()
        if self.backlog:
            self.watch(now)

    def forget_cut(self) -> None:
        """Drop the calls cut while they waited at the provider from the head of its queue."""
        backlog = self.backlog
        while backlog and backlog[0][0].done:
            backlog.popleft()

    def cut(self, call: _Call, now: float) -> None:
        """A call's deadline, with ``on_deadline="cut"``: cancelled, wherever it is, unless it has ended.

        The provider's capacity comes free now if it was serving it (a call in the provider's own
        queue is dropped from it as the queue moves), and the gate's slot too: cut, where the gate
        knows the deadline (``admit(on_deadline="cut")``), else failed (a gate inside a timeout).
        """
        if call.done:
            return
        call.done = True
        index = call.client
        result = self.results[index]
        result.cut += 1
        result.refused_after.append(now - arrival_of(call))
        if call.served_at is not None:
            self.active -= 1
            result.wasted_seconds += now - call.served_at
            self.push(now, "served", None)
        ending = CUT if self.clients[index].deadlines else FAILED
        self.woken(index, self.states[index].release(call, now, ending), now)

    def watch(self, now: float) -> None:
        """Look at the provider again when it may have room for its queue (K rises, say after an outage).

        An answer looks anyway; this covers room that comes with K alone. A capacity function of
        one's own is asked every ``_RECHECK`` seconds, for up to ``_PATIENCE`` after the oldest
        request of the queue came.
        """
        self.forget_cut()
        if not self.backlog:
            return
        when = self.provider._room_at(self.active, now)
        if when is None:
            when = now + _RECHECK if now - self.backlog[0][1] < _PATIENCE else math.inf
        if when < self.room_at:
            self.room_at = when
            self.push(when, "room", None)

    def count_unanswered(self) -> None:
        """What still waits when nothing is left to happen: the provider never came back for it."""
        for call, _ in self.backlog:
            if not call.done:
                self.results[call.client].unanswered += 1
        for result, state in zip(self.results, self.states, strict=True):
            result.unanswered += state.waiting

    def answered(self, call: _Call, ok: bool, signal: str | None, extra: float, now: float) -> None:
        if call.done:  # cut at its deadline: its answer never comes
            return
        call.done = True
        index = call.client
        state = self.states[index]
        result = self.results[index]
        controller = self.controllers[index]
        woken: list[Ticket] = []
        if ok:
            self.active -= 1
            call.served_at = None
            self.push(now, "served", None)
            woken += state.release(call, now)
            if call.budget is not None and now >= arrival_of(call) + call.budget:
                result.late += 1
                result.wasted_seconds += call.service
            else:
                result.on_time += 1
                result.on_time_at.append(now)
            if controller is not None:
                controller.sample(extra, now - start_of(call), now, state.running + 1, call.size)
        else:
            result.provider_refused += 1
            result.refused_after.append(now - arrival_of(call))
            # As a real gate hears it: while the refused call still holds its slot, so that a cut
            # of C (or a pause) comes before the hand-off of that slot.
            if signal == "rate_limited":
                woken += state.pause(now + extra, now)
            elif controller is not None and signal is not None:
                controller.signal(signal, now, state.running)
                woken += self.follow(index, now)
            woken += state.release(call, now, FAILED)
        woken += self.follow(index, now)
        self.woken(index, woken, now)

    def follow(self, index: int, now: float) -> Sequence[Ticket]:
        """Set the gate's C to what its controller wants, if that differs; the tickets it started."""
        controller, state = self.controllers[index], self.states[index]
        if controller is None or controller.limit == state.limit:
            return ()
        self.results[index].limits.append((now, controller.limit))
        return state.set_limits(now, max_running=controller.limit)


def simulate_provider(clients: Sequence[Client], provider: Provider) -> list[ClientResult]:
    """Run every client's traffic through its gate to the shared provider; one result per client."""
    return _Sim(clients, provider).run()
