"""BoundedGate: the asyncio driver around the decision core.

The gate owns a :class:`GateState` and does what it says: it parks queued permits on futures,
resolves those futures when the state hands them a slot or expires them, and keeps one loop timer
armed at the earliest queued deadline (no task and no timer per waiter).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import sys
from collections.abc import Mapping, Sequence
from types import EllipsisType
from typing import TYPE_CHECKING, final

from .._core import (
    Adaptive,
    AdaptiveLimit,
    GateState,
    GateStatistics,
    RateLimit,
    RequestRecord,
    Status,
    Ticket,
    check_deadline,
    check_max_wait,
    check_name,
    check_priority,
    check_timeout,
    queue_deadline,
)
from .._errors import Evicted, Infeasible, Late, QueueExpired, QueueFull, RateLimited
from .._streams import StreamOpener, StreamSource, StreamT
from ._observing import Observer, Observers, attach, log_event
from ._permit import _HELD, Permit, new_held_permit, new_permit

if TYPE_CHECKING:
    from ._combined import CombinedPermit

__all__ = ("BoundedGate",)

QUEUED = Status.QUEUED
RUNNING = Status.RUNNING
REJECTED = Status.REJECTED
EVICTED = Status.EVICTED
RATE_LIMITED = Status.RATE_LIMITED
INFEASIBLE = Status.INFEASIBLE
COMPLETED = Status.COMPLETED
LATE = Status.LATE
CANCELLED = Status.CANCELLED
_INF = math.inf
_MAX = sys.float_info.max
_ZERO = 0  # `priority is not _ZERO`: the identity of the small int the default is


@final
class BoundedGate:
    """At most ``max_running`` requests running, at most ``max_waiting`` waiting, the rest refused.

    ::

        gate = BoundedGate(max_running=50, max_waiting=100, name="openai")

        async with gate.admit(timeout=30):
            reply = await client.chat.completions.create(...)

    Think of a restaurant with ``max_running`` tables and a waiting room with ``max_waiting``
    chairs. A guest sits at a free table at once, or takes a chair and is seated in order of
    arrival when a table frees, or, when every chair is taken, is turned away at the door
    (:class:`QueueFull`), before anyone has spent time on them. A guest with a deadline who is
    still on a chair when it passes leaves (:class:`QueueExpired`) and frees the chair that
    instant. A guest who is eating is never thrown out: they keep their table until they leave,
    and leaving after their deadline counts as :class:`Late`.

    A freed slot goes straight to the oldest waiter, so a newcomer never jumps the queue; a
    waiter that is cancelled leaves without losing anyone's wake-up. Deadlines are measured on
    the running event loop's clock (``loop.time()``) from the moment the request enters
    ``admit()``; waiting never earns a new budget.

    With ``priorities=N`` the waiting room has N classes, 0 the most urgent: a freed slot goes to
    the most urgent waiter, FIFO within a class, but only ``jump_share`` of the starts from the
    queue may overtake an older waiter (one such jump is banked), and every other start goes to the
    oldest waiter of all. So a waiter with ``k`` older waiters ahead starts within
    ``(k + 2) / (1 - jump_share)`` starts from the queue, however many urgent requests arrive
    behind it: no class starves. When the queue is full, an arrival evicts the newest waiter of
    the least urgent class below its own (which gets :class:`Evicted`); if there is none, it is
    refused with :class:`QueueFull`.

    With ``rate_limits`` (token buckets, :class:`RateLimit`), a request starts only when it holds a
    slot *and* every bucket holds its cost; it takes from all of them at once, or from none.
    Waiting for tokens is waiting: it takes a place in the queue, honours the deadline and keeps
    FIFO order (a large request at the head makes the smaller ones behind it wait rather than
    being starved by them). A request whose tokens could not arrive before its deadline even with
    the buckets to itself is refused at once with :class:`RateLimited`, whose ``retry_after`` is
    computed from the bucket. A gate with ``max_running=None`` and rate limits is a rate limiter.

    The gate binds to the event loop that first uses it. It may move to another loop while it is
    idle (nothing running or waiting), or once its loop is closed; using it from another loop while
    it is busy on an open one is a RuntimeError. Waiters parked on a closed loop never wake: a slot
    freed after the loop closed (``release()`` never raises) is not handed to them, and a move to a
    new loop drops them (they count as cancelled). Permits still running on the closed loop keep
    their slots until released.

    Args:
        max_running: Running slots, an int >= 1, or None for no limit on running (then the gate
            only limits by its rate limits and its queue).
        max_waiting: Queue places, an int >= 0 (0: no waiting room, refuse as soon as every slot
            is busy), or None for an unbounded queue, which must be asked for explicitly.
        name: A name for errors, statistics and ``repr``.
        priorities: Number of priority classes, an int >= 1.
        jump_share: The share of starts from the queue that may overtake an older waiter, in
            [0, 1). Only matters with several classes; 0 makes them plain FIFO.
        rate_limits: Token buckets every request must pay, e.g. requests and tokens per minute.
        feasible: Deadline-feasible admission: refuse at arrival, with :class:`Infeasible`, a
            request that by the gate's recent pace would start at or after its deadline (or
            queue budget), instead of queueing it to expire. Off by default.
        adaptive: Learn C from provider signals and time to first token (see :meth:`adapt`);
            ``max_running`` is then the C to begin with.

    Raises:
        TypeError: A limit that is not an int (floats, NaN, infinities, booleans), or a name
            that is not a str.
        ValueError: ``max_running < 1``, ``max_waiting < 0``, ``priorities < 1`` or a
            ``jump_share`` outside [0, 1).
    """

    __slots__ = (
        "__weakref__",
        "_controller",
        "_loop",
        "_max_running",
        "_name",
        "_observers",
        "_parked",
        "_rated",
        "_state",
        "_timer",
        "_timer_at",
    )

    def __init__(
        self,
        *,
        max_running: int | None,
        max_waiting: int | None,
        name: str = "gate",
        priorities: int = 1,
        jump_share: float = 0.2,
        rate_limits: Sequence[RateLimit] = (),
        feasible: bool = False,
        adaptive: Adaptive | None = None,
    ) -> None:
        self._setup(GateState(max_running, max_waiting, priorities, jump_share, rate_limits), name)
        self._state.feasible = bool(feasible)
        if adaptive is not None:
            self.adapt(adaptive)

    @classmethod
    def _around(cls, state: GateState, name: str) -> BoundedGate:
        """A gate driving ``state`` (a keyed gate's per-key state, say) rather than one of its own.

        The caller gives ``state`` its hooks (a keyed gate attaches its own observers).
        """
        gate = cls.__new__(cls)
        gate._setup(state, name, attached=False)
        return gate

    def _setup(self, state: GateState, name: str, attached: bool = True) -> None:
        self._state = state
        self._max_running = None if state.max_running == sys.maxsize else state.max_running
        # With buckets, any event may move the next wake-up (tokens due), not only a new deadline.
        self._rated = bool(state.rate_limits)
        self._name = check_name(name)
        self._observers = Observers()
        if attached:
            attach(state, self._name, None, self._observers)
        self._loop: asyncio.AbstractEventLoop | None = None
        # The one loop timer, armed at the earliest queued deadline (`inf`: not armed).
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        # The permits asleep on a future in the queue: what a failed core event or a dead loop must
        # still reach, when no list of woken permits comes back.
        self._parked: set[Permit] = set()
        self._controller: AdaptiveLimit | None = None

    # -- public API -------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The gate's name."""
        return self._name

    @property
    def max_running(self) -> int | None:
        """Running slots (C); None when running is not limited."""
        return self._max_running

    @property
    def rate_limits(self) -> tuple[RateLimit, ...]:
        """The rate limits every request pays, in order."""
        return self._state.rate_limits

    @property
    def max_waiting(self) -> int | None:
        """Queue places (Q); None when the queue is unbounded."""
        return self._state.max_waiting

    @property
    def priorities(self) -> int:
        """Number of priority classes (0 is the most urgent)."""
        return self._state.priorities

    @property
    def running(self) -> int:
        """Requests holding a slot now."""
        return self._state.running

    @property
    def waiting(self) -> int:
        """Requests in the queue now."""
        return self._state.waiting

    def admit(
        self,
        *,
        timeout: float | None = None,
        deadline: float | None = None,
        max_wait: float | None = None,
        priority: int = 0,
        cost: float | None = None,
        raise_late: bool = True,
    ) -> Permit:
        """A permit for one request, to enter with ``async with``; entering it is the arrival.

        On entry the request starts at once if a slot is free and nobody is queued, or waits in
        the queue (FIFO within its priority class) if there is room, or is refused. On exit the
        slot is released; a body that raised propagates its own exception, one that finished at
        or after the deadline raises :class:`Late` (unless ``raise_late=False``).

        Args:
            timeout: Budget in seconds from arrival (>= 0), covering the wait and the run.
            deadline: Absolute deadline on the running loop's clock (``loop.time()``).
                Give at most one of the two; neither means no deadline.
            max_wait: A queue budget in seconds from arrival (>= 0): a request still queued at
                ``min(deadline, arrival + max_wait)`` leaves with :class:`QueueExpired`. Once it
                runs only the deadline counts ("wait at most 2 s, answer within 120 s"). None:
                it may wait as long as its deadline allows.
            priority: The request's class, 0 (the most urgent) to ``priorities - 1``.
            cost: The request's estimated cost for rate limits counted in tokens (default 0: pay
                it all later with :meth:`Permit.settle`). Limits counted in requests take 1.
            raise_late: False to have a block that finished late counted as late without its
                exit raising :class:`Late` (a server whose response has already started).

        Raises (on entry):
            QueueFull: Every slot busy and the queue full, at once, before any suspension.
            RateLimited: Its tokens could not arrive before its deadline, at once.
            QueueExpired: The deadline passed while waiting, or had passed on arrival.
            Evicted: A more urgent arrival took its place in a full queue.
            asyncio.CancelledError: The caller was cancelled while waiting, or had a cancellation
                pending on arrival (then nothing was counted): a ``task.cancel()`` not yet
                delivered, or a cancelled anyio scope around it. A cancellation already delivered
                and swallowed is not pending: that caller is admitted, as by ``asyncio.Semaphore``.

        Raises (at once):
            TypeError, ValueError: A malformed timeout, deadline, max_wait, priority or cost
                (a priority that is not an int, falsy ones included; a number beyond a float's
                range), both a timeout and a deadline, or a cost above a rate limit's burst (it
                could never be served). Each names its argument.
        """
        if max_wait is not None or raise_late is not True:
            permit = self.admit(timeout=timeout, deadline=deadline, priority=priority, cost=cost)
            permit.max_wait = check_max_wait(max_wait)
            permit._raise_late = bool(raise_late)
            return permit
        if priority is not _ZERO:  # the default passes untouched; anything else is checked (0.0, None)
            priority = check_priority(priority, self._state.priorities)
        cost = 0.0 if cost is None else self._state.check_cost(cost)
        if deadline is None:
            if timeout is None:
                return new_permit(self, None, _INF, priority, cost)
            # The common case inline; an int beyond a float's range (and inf, NaN) takes the full check.
            if (type(timeout) is float or type(timeout) is int) and 0 <= timeout <= _MAX:
                return new_permit(self, timeout, _INF, priority, cost)
            return new_permit(self, check_timeout(timeout), _INF, priority, cost)
        if timeout is not None:
            raise ValueError("give timeout or deadline, not both")
        if type(deadline) is float and deadline <= _INF:  # the common case inline (NaN fails <=)
            return new_permit(self, None, deadline, priority, cost)
        return new_permit(self, None, check_deadline(deadline), priority, cost)

    def try_admit(
        self, *, timeout: float | None = None, deadline: float | None = None, cost: float | None = None
    ) -> Permit:
        """A permit that holds a slot now, or a refusal now; it never waits.

        Release it with :meth:`Permit.release` or by entering and leaving it with ``async with``.
        Arguments are as for :meth:`admit`; the deadline only decides whether the request ends
        as completed or late. Must be called on the gate's event loop.

        Raises:
            QueueFull: The request cannot start at once (no free slot, or others are queued).
            RateLimited: A slot is free but the rate limits do not hold its cost now.
            QueueExpired: The deadline had already passed (nothing was counted).
            asyncio.CancelledError: The calling task has a cancellation pending, as for
                :meth:`admit` (nothing was counted).
        """
        # Dropped unreleased, a held permit gives its slot back (as leaked).
        permit: Permit = new_held_permit(self.admit(timeout=timeout, deadline=deadline, cost=cost))
        if permit._arrive(False) is not RUNNING:
            raise permit._gate._refusal(permit)  # the gate it arrived at (a keyed gate may move it)
        permit._waiter = _HELD  # held before it is entered: its first entry is not a second one
        return permit

    def stream(
        self,
        source: StreamSource[StreamT],
        *,
        timeout: float | None = None,
        deadline: float | None = None,
        max_wait: float | None = None,
        priority: int = 0,
        cost: float | None = None,
        raise_late: bool = True,
    ) -> StreamOpener[StreamT]:
        """Admit a request, open a stream, and hand the stream the slot: ``admit()`` then ``hand_to()``.

        ::

            stream = await gate.stream(lambda: client.chat.completions.create(..., stream=True))
            async with gate.stream(lambda: client.messages.stream(...), timeout=30) as stream:
                ...

        ``source`` is called once the request is admitted (so nothing is sent before then) and
        returns what opens the stream: an awaitable (``create(stream=True)``), an async context
        manager (the SDKs' ``.stream()``) or an async iterator; it may also be that object itself.
        The returned opener is awaited, or entered with ``async with`` (which closes the stream on
        exit). Arguments are as for :meth:`admit` and :meth:`Permit.hand_to`.

        Raises (when awaited or entered):
            QueueFull, RateLimited, QueueExpired, Evicted, asyncio.CancelledError: As for
                :meth:`admit`; nothing was opened.
            Exception: Whatever opening the stream raised; the slot was released as failed.
            TypeError: What was opened is not an async iterator (it was closed again).

        Raises (at once):
            TypeError, ValueError: As for :meth:`admit`.
        """
        permit = self.admit(
            timeout=timeout, deadline=deadline, max_wait=max_wait, priority=priority, cost=cost
        )
        return StreamOpener(permit, source, raise_late)

    def stats(self) -> GateStatistics:
        """An immutable snapshot of the gate's counters (see :class:`GateStatistics`)."""
        loop = self._loop
        return self._state.snapshot(self._name, None if loop is None else loop.time())

    def observe(self, callback: Observer) -> None:
        """Call ``callback`` with the :class:`RequestRecord` of every request that ends from now on.

        It is called on the event loop, in the step that ended the request, and must not use the
        gate; an exception it raises is logged to the ``boundedgate`` logger and goes no further.
        """
        self._observers.add(callback)
        attach(self._state, self._name, None, self._observers)

    def unobserve(self, callback: Observer) -> None:
        """Stop calling ``callback``; with no callback left the gate records nothing."""
        self._observers.remove(callback)
        attach(self._state, self._name, None, self._observers)

    @property
    def controller(self) -> AdaptiveLimit | None:
        """The adaptive controller that sets C (None: C changes only by :meth:`set_limits`)."""
        return self._controller

    def set_limits(
        self,
        *,
        max_running: int | EllipsisType | None = ...,
        max_waiting: int | EllipsisType | None = ...,
        evict: bool = False,
    ) -> None:
        """Change C and/or Q now; a limit not given stays as it is.

        Raising ``max_running`` starts the oldest waiters at once, FIFO. Lowering it interrupts no
        running request: the excess drains (``running`` may exceed C meanwhile) and nothing starts
        until running is below the new C. Lowering ``max_waiting`` evicts nobody already queued
        (the excess leaves as it would have, and no arrival queues until it has), unless
        ``evict=True``: then the newest waiters beyond it get :class:`Evicted`. Each change counts in
        ``stats().limit_changes`` and writes an INFO record ``limit_changed`` to the ``boundedgate``
        logger. With an adaptive controller attached, the controller may change C again later.

        Raises:
            TypeError, ValueError: A limit the constructor would refuse (nothing changed).
        """
        state = self._state
        before = (state.limit, state.max_waiting)
        loop = self._loop
        now = 0.0 if loop is None else loop.time()
        woken = state.set_limits(now, max_running, max_waiting, evict)
        self._max_running = None if state.limit == sys.maxsize else state.limit
        if before != (state.limit, state.max_waiting):
            log_event(
                self._name,
                "limit_changed",
                f"limits changed to running {self._max_running}, waiting {state.max_waiting}",
                logging.INFO,
                max_running=self._max_running,
                max_waiting=state.max_waiting,
            )
        if woken:
            self._wake(woken)
        if loop is not None and state.waiting:
            self._rearm()

    def pause(self, seconds: float) -> None:
        """Start no request for ``seconds`` from now (a provider's rate-limit reset); C is unchanged.

        Arrivals still queue up to Q (or are refused as usual), queued requests still expire at
        their deadlines, running ones run on; when the pause ends the oldest waiters start. A
        shorter pause than one in force changes nothing; a longer one extends it. Must be called
        on the gate's event loop (it binds the gate to the running loop if it has none yet).
        """
        seconds = check_timeout(seconds)
        loop = self._bind() if self._loop is None else self._loop
        now = loop.time()
        woken = self._state.pause(now + seconds, now)
        if woken:
            self._wake(woken)
        self._rearm()

    def signal(self, kind: str, *, retry_after: float | None = None) -> None:
        """Tell the gate what the provider answered: ``rate_limited``, ``overloaded`` or ``ignored``.

        ``rate_limited`` with ``retry_after`` (seconds to the provider's reset) pauses new starts
        until then and leaves C alone; ``overloaded`` (a 503, a 529) has the adaptive controller cut
        C, at most once per window (without a controller it changes nothing); ``ignored`` (a client
        that went away, another 4xx) is not congestion. See ``boundedgate.SIGNALS``. Must be
        called on the gate's event loop, as :meth:`pause`.

        Raises:
            ValueError: An unknown kind.
        """
        if kind == "rate_limited":
            if retry_after is not None and retry_after > 0:
                self.pause(retry_after)
            return
        controller = self._controller
        if controller is None:
            if kind not in ("overloaded", "ignored"):
                raise ValueError(f"unknown signal {kind!r}; expected rate_limited, overloaded or ignored")
            return
        loop = self._bind() if self._loop is None else self._loop
        wanted = controller.signal(kind, loop.time())
        if wanted != self._state.limit:
            self.set_limits(max_running=wanted)

    def sync_rate_limits(self, remaining: Mapping[str, float]) -> int:
        """Lower the rate limits' balances to what the provider says is left (never raise one).

        ``remaining`` maps a resource (``"requests"``, ``"tokens"``, or a rate limit's name) to the
        provider's remaining count, e.g. from ``x-ratelimit-remaining-*`` headers. Returns how many
        buckets were lowered.
        """
        loop = self._bind() if self._loop is None else self._loop
        lowered = self._state.sync_rate_limits(dict(remaining), loop.time())
        if lowered and self._state.waiting:
            self._rearm()
        return lowered

    def adapt(self, settings: Adaptive | None = None) -> AdaptiveLimit:
        """Have an adaptive controller set C from now on, starting from the current C; returns it.

        The controller hears every provider signal given to :meth:`signal` (or by the HTTP
        client transport) and samples every request that ran to an answer (completed or late):
        its time to first item for a stream, else its run time. Its settings and defaults are
        those of :class:`Adaptive`.
        """
        state = self._state
        if state.limit == sys.maxsize:
            raise ValueError("an adaptive limit needs a gate with max_running set")
        settings = Adaptive() if settings is None else settings
        self._controller = AdaptiveLimit(settings, state.limit)
        self.observe(self._sample)
        return self._controller

    def _sample(self, record: RequestRecord) -> None:
        # An observer: called inside the core's event, so a change of C waits for the next turn.
        controller = self._controller
        if controller is None or record.ran is None:
            return
        status = record.outcome.status
        if status is not COMPLETED and status is not LATE:
            return
        latency = record.ran if record.first_chunk is None else record.first_chunk
        before = controller.limit
        wanted = controller.sample(latency, record.ran, record.ended, self._state.running + 1)
        if wanted != before and self._loop is not None:
            self._loop.call_soon(self._follow)

    def _follow(self) -> None:
        controller = self._controller
        if controller is not None and controller.limit != self._state.limit:
            self.set_limits(max_running=controller.limit)

    def __repr__(self) -> str:
        state = self._state
        running = "unbounded" if self._max_running is None else self._max_running
        waiting = "unbounded" if state.max_waiting is None else state.max_waiting
        return (
            f"<BoundedGate {self._name!r} [running {state.running}/{running}, "
            f"waiting {state.waiting}/{waiting}]>"
        )

    # -- driver internals (used by Permit) --------------------------------------------------

    def _bind(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        old = self._loop
        if loop is not old:
            state = self._state
            if old is not None and (state.running or state.waiting):
                if not old.is_closed():
                    raise RuntimeError(
                        f"{self!r} is in use on another event loop; a gate moves only when idle, "
                        "or once its loop is closed"
                    )
                self._drop_parked(loop.time())
            if self._timer is not None:
                self._timer.cancel()
            self._loop = loop
            self._timer = None
            self._timer_at = math.inf
        return loop

    def _drop_parked(self, now: float) -> None:
        """The gate's loop closed: its parked waiters will never wake, so they leave (``cancelled``)."""
        parked = self._parked
        while parked:
            permit = parked.pop()
            permit._waiter = None
            self._state.cancel(permit, now)  # a slot handed to a dead waiter passes on, to another

    def _wake(self, woken: Sequence[Ticket]) -> None:
        """Resolve the futures of permits that left the queue (started or expired), oldest first."""
        while woken:
            passed_on: list[Ticket] = []
            for permit in woken:
                waiter: asyncio.Future[None] | None = permit._waiter  # type: ignore[attr-defined]
                if waiter is None:
                    continue
                if not waiter.done():
                    try:
                        waiter.set_result(None)
                        continue
                    except RuntimeError:  # its loop is closed: nobody will ever wake on it
                        if not self._loop.is_closed():  # type: ignore[union-attr]
                            raise
                        self._parked.discard(permit)
                        permit._waiter = None  # type: ignore[attr-defined]
                if permit.status is RUNNING:
                    # Its caller was cancelled in the turn the slot was handed to it (or its loop is
                    # gone): the slot passes on now rather than when that task wakes to find it so.
                    passed_on += self._state.cancel(permit, self._loop.time())  # type: ignore[union-attr]
            woken = passed_on

    def _core_failed(self) -> None:
        """The core raised in the middle of an event: wake whoever it had already moved out of the queue.

        The list of woken permits never came back, so every parked permit the core no longer holds
        as queued is woken (to start, or to see its refusal), and the timer is rearmed.
        """
        loop = self._loop
        if loop is None:
            return
        for permit in tuple(self._parked):
            waiter = permit._waiter
            if permit.status is not QUEUED and waiter is not None and not waiter.done():
                with contextlib.suppress(RuntimeError):  # a closed loop: _bind drops them
                    waiter.set_result(None)
        with contextlib.suppress(Exception):  # the state may be inconsistent: do what can be done
            self._timer_at = math.inf
            self._rearm()

    def _cancel(self, permit: Permit, ending: Status = CANCELLED) -> None:
        try:
            woken = self._state.cancel(permit, self._loop.time(), ending)  # type: ignore[union-attr]
        except BaseException:
            self._core_failed()
            raise
        if woken:
            self._wake(woken)
        if self._rated and self._state.waiting:
            self._rearm()

    def _rearm(self) -> None:
        """Arm the timer at the state's next wake-up, if that is earlier than it is armed for."""
        when = self._state.next_wakeup()
        if when < self._timer_at:
            self._arm_timer(when)

    def _arm_timer(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        try:
            self._timer = self._loop.call_at(when, self._on_timer)  # type: ignore[union-attr]
        except RuntimeError:  # the loop is closed (a release after it closed): nothing to wake
            self._timer = None
            if not self._loop.is_closed():  # type: ignore[union-attr]
                raise
            return
        self._timer_at = when

    def _on_timer(self) -> None:
        # The loop fires a timer once it judges its time reached, which may be a clock tick before
        # the float it was armed at: take the deadline as reached, or the timer would re-arm forever.
        now = max(self._loop.time(), self._timer_at)  # type: ignore[union-attr]
        self._timer = None
        self._timer_at = math.inf
        try:
            woken = self._state.advance(now)
        except BaseException:
            self._core_failed()
            raise
        if woken:
            self._wake(woken)
        self._rearm()

    def _refusal(self, permit: Permit) -> QueueFull | RateLimited | QueueExpired | Evicted | Infeasible:
        """The error for a permit the state refused at arrival, or that left the queue unstarted."""
        state = self._state
        status = permit.status
        if status is INFEASIBLE:
            ended: float = permit.ended  # type: ignore[assignment]
            return Infeasible(
                self._name,
                self._max_running,
                state.max_waiting,
                state.running,
                state.waiting,
                0.0,
                0.0,
                max(0.0, state.predicted_start(ended) - ended),
                queue_deadline(permit) - ended,
            )
        if status is RATE_LIMITED:
            return RateLimited(
                self._name,
                self._max_running,
                state.max_waiting,
                state.running,
                state.waiting,
                0.0,
                0.0,
                state.limiting(permit).name,  # type: ignore[union-attr]
                max(0.0, state.ready_at(permit) - permit.ended),  # type: ignore[operator]
            )
        if status is REJECTED:
            return QueueFull(
                self._name,
                self._max_running,
                state.max_waiting,
                state.running,
                state.waiting,
                0.0,
                0.0,
                state.recent_run_seconds,
            )
        waited = permit.ended - permit.arrival  # type: ignore[operator]
        if status is EVICTED:
            return Evicted(
                self._name,
                self._max_running,
                state.max_waiting,
                state.running,
                state.waiting,
                waited,
                waited,
                permit.priority,
                state.recent_run_seconds,
            )
        return QueueExpired(
            self._name,
            self._max_running,
            state.max_waiting,
            state.running,
            state.waiting,
            waited,
            waited,
            queue_deadline(permit),
            state.recent_run_seconds,
        )

    def _late(self, permit: Permit | CombinedPermit) -> Late:
        """The :class:`Late` for a request that finished at or after its deadline, naming this gate."""
        state = self._state
        ended: float = permit.ended  # type: ignore[assignment]
        arrival: float = permit.arrival  # type: ignore[assignment]
        return Late(
            self._name,
            self._max_running,
            state.max_waiting,
            state.running,
            state.waiting,
            permit.started - arrival,  # type: ignore[operator]
            ended - arrival,
            permit.deadline,
            ended - permit.deadline,
        )
