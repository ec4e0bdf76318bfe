"""The gate and its permits: the asyncio driver around the decision core.

The gate owns a :class:`GateState` and does what it says: it parks queued permits on futures,
resolves those futures when the state hands them a slot or expires them, and keeps one loop timer
armed at the earliest queued deadline (no task and no timer per waiter). A :class:`Permit` is one
request's claim on the gate, from its arrival (entering it) to the release of its slot (leaving it,
``release()``, a stream that ends, or the garbage collector); it is the gate's ticket in the core.

Theory of operation
===================

Entering a permit is its arrival, ``_arrive``, then, unless it started at once, ``_wait``.
``_arrive`` checks the permit is new, refuses a caller with a cancellation pending before anything
is counted, reads the clock once and hands the arrival to the state; ``try_admit()`` arrives the
same way without waiting, and its permit's entry only takes the slot it holds. ``_wait`` parks a
queued permit on a future (arming the timer if its queue deadline comes first), and raises the
refusal of one that was refused or left the queue unstarted. Every way a slot is
given back goes through ``_finish``: the block's exit, ``release()``, ``abort()``, a stream that
ends, the finaliser of a dropped ``try_admit()`` permit. Whatever the state answers (the permits it
started or expired on the way) is woken by ``_wake``; if the state raises in the middle of an
event, ``_core_failed`` wakes whoever it had already moved.

:class:`GateBase` holds every slot and method of a gate; the public ``BoundedGate``
(``_bounded.py``, never compiled) is its one subclass and adds the ``__weakref__`` slot alone. This
module is compiled with mypyc, whose deallocator of a native class never clears the object's weak
references (a weakly referenced gate, freed, would leave them pointing at freed memory): a slot
added by an interpreted subclass is cleared by CPython's own deallocator of that subclass, before
it hands the object to the native one. ``GateBase`` is final to mypyc, so that compiled code calls
its methods directly (not through the Python attribute protocol that an interpreted subclass's
methods would need), and so nothing may override them.

A gate's state may be a keyed gate's key state, a native subclass of ``GateState`` that tells its
keyed gate of its changes: the gate reads its fields and calls its methods as any state's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import sys
import time
import warnings
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from types import EllipsisType, TracebackType
from typing import TYPE_CHECKING, Any, Final, Self, TypeVar, cast, final

from .._core import (
    MAX_PAUSE,
    Adaptive,
    AdaptiveLimit,
    BoolArg,
    FloatArg,
    GateState,
    GateStatistics,
    IntArg,
    RateLimit,
    RequestRecord,
    Status,
    StrArg,
    Ticket,
    check_cost,
    check_deadline,
    check_flag,
    check_max_wait,
    check_name,
    check_pause,
    check_priority,
    check_remaining,
    check_timeout,
    mypyc_attr,
    provider_pause,
    queue_deadline,
)
from .._errors import DeadlineCut, Evicted, Infeasible, Late, QueueExpired, QueueFull, RateLimited
from .._streams import GatedStream, StreamOpener, StreamPermit, StreamSource, StreamT, hand_over
from ._compat import cancellation_pending, clock_of, current_task, is_cancelling
from ._hooks import attach
from ._observing import Observer, Observers, log_event

if TYPE_CHECKING:
    from ._bounded import BoundedGate

__all__ = ("Cutter", "GateBase", "Permit", "check_on_deadline")

NEW: Final[Status] = Status.NEW
QUEUED: Final[Status] = Status.QUEUED
RUNNING: Final[Status] = Status.RUNNING
REJECTED: Final[Status] = Status.REJECTED
EVICTED: Final[Status] = Status.EVICTED
RATE_LIMITED: Final[Status] = Status.RATE_LIMITED
INFEASIBLE: Final[Status] = Status.INFEASIBLE
COMPLETED: Final[Status] = Status.COMPLETED
LATE: Final[Status] = Status.LATE
CUT: Final[Status] = Status.CUT
CANCELLED: Final[Status] = Status.CANCELLED
FAILED: Final[Status] = Status.FAILED
ABORTED: Final[Status] = Status.ABORTED
LEAKED: Final[Status] = Status.LEAKED
DISCONNECTED: Final[Status] = Status.DISCONNECTED
_INF: Final = math.inf
_MAX: Final = sys.float_info.max
_UNLIMITED: Final = sys.maxsize  # a state's C without a limit
_MONOTONIC: Final = time.monotonic
_ZERO: Final = 0  # `priority is not _ZERO`: the identity of the small int the default is
_QUEUE_FULL: Final = QueueFull  # read natively by compiled code, where the imported name is a dict look-up

_Stream = TypeVar("_Stream", bound=AsyncIterator[Any])

# What `_waiter` holds for a permit from try_admit() until it is entered: the slot is held already.
_HELD: Final[asyncio.Future[None]] = cast("asyncio.Future[None]", object())

# The parked permits of every gate nobody has waited at yet: empty, and never added to (a permit
# that parks first makes its gate a set of its own, in __aenter__).
_NOBODY_PARKED: Final[set[Permit]] = set()

# What only the gate passes: a Permit made by hand is refused.
_BY_GATE: Final = object()

# admit()'s default on_deadline: the interned literal, so that the default costs one identity test.
_LATE_MODE: Final = "late"


def check_on_deadline(value: object) -> bool:
    """True for ``on_deadline="cut"``, False for ``"late"``.

    Raises:
        ValueError: Any other value.
    """
    if value == "late":
        return False
    if value == "cut":
        return True
    raise ValueError(
        f"on_deadline must be 'late' (run on, and raise Late at the end) or 'cut' (cancel the body at "
        f"its deadline, and raise DeadlineCut), got {value!r}"
    )


@final  # to mypyc: its methods are called directly (BoundedGate, the one subclass, overrides none)
@mypyc_attr(allow_interpreted_subclasses=True)
class GateBase:
    """A gate without its weak references: see ``BoundedGate`` (``_bounded.py``), its one subclass."""

    __slots__ = (
        "_clock",
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

    _state: GateState
    # C as the public property gives it (None: not limited).
    _max_running: int | None
    # With buckets, any event may move the next wake-up (tokens due), not only a new deadline.
    _rated: bool
    _name: str
    # Its own callbacks (None until observe() is first called; a keyed gate's keys record to the
    # keyed gate's).
    _observers: Observers | None
    _loop: asyncio.AbstractEventLoop | None
    # What reads the loop's clock (see clock_of): set with _loop, read by every admission.
    _clock: Callable[[], float]
    # The one loop timer, armed at the earliest queued deadline (`inf`: not armed).
    _timer: asyncio.TimerHandle | None
    _timer_at: float
    # The permits asleep on a future in the queue: what a failed core event or a dead loop must
    # still reach, when no list of woken permits comes back.
    _parked: set[Permit]
    _controller: AdaptiveLimit | None

    def _setup(self, state: GateState, name: StrArg, rated: bool) -> None:
        """Drive ``state`` (``rated``: it has rate limits), without hooks: the maker attaches them."""
        self._state = state
        self._max_running = None if state.max_running == _UNLIMITED else state.max_running
        self._rated = rated
        self._name = check_name(name)
        self._observers = None
        self._loop = None
        self._clock = _MONOTONIC  # until it is bound: read by nothing before
        self._timer = None
        self._timer_at = math.inf
        self._parked = _NOBODY_PARKED
        self._controller = None

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
        timeout: FloatArg | None = None,
        deadline: FloatArg | None = None,
        max_wait: FloatArg | None = None,
        priority: IntArg = 0,
        cost: FloatArg | None = None,
        raise_late: BoolArg = True,
        on_deadline: str = "late",
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
            on_deadline: What becomes of a body still running at its deadline. ``"late"`` (the
                default): it runs on, holds its slot to its end, and its exit raises
                :class:`Late`. ``"cut"``: the task that entered the block is cancelled at the
                deadline, the slot is held until the body has really stopped, the request counts
                as ``cut`` and the exit raises :class:`DeadlineCut` (a ``TimeoutError``) in place
                of the ``CancelledError``; a body that ends at or after the deadline before the
                cut lands is cut too. A caller's own cancellation stays a cancellation.

        Raises (on entry):
            QueueFull: Every slot busy and the queue full, at once, before any suspension.
            RateLimited: Its tokens could not arrive before its deadline or ``max_wait``, behind
                those the requests queued ahead of it take first: at once, not after waiting.
            QueueExpired: The deadline passed while waiting, or had passed on arrival.
            Evicted: A more urgent arrival took its place in a full queue.
            asyncio.CancelledError: The caller was cancelled while waiting, or had a cancellation
                pending on arrival (then nothing was counted): a ``task.cancel()`` not yet
                delivered, or a cancelled anyio scope around it. A cancellation already delivered
                and swallowed is not pending: that caller is admitted, as by ``asyncio.Semaphore``.

        Raises (at once):
            TypeError, ValueError: A malformed timeout, deadline, max_wait, priority or cost
                (a priority that is not an int, falsy ones included; a number beyond a float's
                range), both a timeout and a deadline, a cost above a rate limit's burst (it
                could never be served), a raise_late that is not True or False, or an on_deadline
                that is not "late" or "cut". Each names its argument.
        """
        if deadline is None:
            relative = None if timeout is None else check_timeout(timeout)
            absolute = _INF
        elif timeout is not None:
            raise ValueError("give timeout or deadline, not both")
        else:
            relative = None
            absolute = check_deadline(deadline)
        state = self._state
        checked_priority = check_priority(priority, state.priorities)
        checked_cost = 0.0 if cost is None else state.check_cost(cost)
        if on_deadline is _LATE_MODE or not check_on_deadline(on_deadline):
            permit = Permit(_BY_GATE, self, relative, absolute, checked_priority, checked_cost)
        else:  # named apart, so that the default's construction stays a native call when compiled
            permit = _CutPermit(_BY_GATE, self, relative, absolute, checked_priority, checked_cost)
        if max_wait is not None:
            permit.max_wait = check_max_wait(max_wait)
        if raise_late is not True:
            permit._raise_late = check_flag("raise_late", raise_late)
        return permit

    def try_admit(
        self,
        *,
        timeout: FloatArg | None = None,
        deadline: FloatArg | None = None,
        cost: FloatArg | None = None,
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
        checked = self.admit(timeout=timeout, deadline=deadline, cost=cost)
        # Dropped unreleased, a held permit gives its slot back (as leaked).
        permit = _HeldPermit(_BY_GATE, self, checked._timeout, checked.deadline, 0, checked.cost)
        if permit._arrive(False) is not RUNNING:
            raise permit._gate._refusal(permit)  # the gate it arrived at (a keyed gate may move it)
        permit._waiter = _HELD  # held before it is entered: its first entry is not a second one
        return permit

    def stream(
        self,
        source: StreamSource[StreamT],
        *,
        timeout: FloatArg | None = None,
        deadline: FloatArg | None = None,
        max_wait: FloatArg | None = None,
        priority: IntArg = 0,
        cost: FloatArg | None = None,
        raise_late: BoolArg = True,
        on_deadline: str = "late",
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
        exit). Arguments are as for :meth:`admit` and :meth:`Permit.hand_to`; with
        ``on_deadline="cut"`` the stream is closed at its deadline, and its next read raises
        :class:`DeadlineCut`.

        Raises (when awaited or entered):
            QueueFull, RateLimited, QueueExpired, Evicted, asyncio.CancelledError: As for
                :meth:`admit`; nothing was opened.
            Exception: Whatever opening the stream raised; the slot was released as failed.
            TypeError: What was opened is not an async iterator (it was closed again).

        Raises (at once):
            TypeError, ValueError: As for :meth:`admit`.
        """
        late = check_flag("raise_late", raise_late)
        permit = self.admit(
            timeout=timeout,
            deadline=deadline,
            max_wait=max_wait,
            priority=priority,
            cost=cost,
            on_deadline=on_deadline,
        )
        return StreamOpener(permit, source, late)

    def stats(self) -> GateStatistics:
        """An immutable snapshot of the gate's counters (see :class:`GateStatistics`)."""
        loop = self._loop
        return self._state.snapshot(self.name, None if loop is None else self._clock())

    def observe(self, callback: Observer) -> None:
        """Call ``callback`` with the :class:`RequestRecord` of every request that ends from now on.

        It is called on the event loop, in the step that ended the request, and must not use the
        gate; an exception it raises is logged to the ``boundedgate`` logger and goes no further.
        """
        observers = self._observers
        if observers is None:
            observers = self._observers = Observers()
        observers.add(callback)
        attach(self._state, self._name, None, observers)

    def unobserve(self, callback: Observer) -> None:
        """Stop calling ``callback``; with no callback left the gate records nothing."""
        if self._observers is not None:
            self._observers.remove(callback)
        attach(self._state, self._name, None, self._observers)

    @property
    def controller(self) -> AdaptiveLimit | None:
        """The adaptive controller that sets C (None: C changes only by :meth:`set_limits`)."""
        return self._controller

    def set_limits(
        self,
        *,
        max_running: IntArg | EllipsisType | None = ...,
        max_waiting: IntArg | EllipsisType | None = ...,
        evict: BoolArg = False,
    ) -> None:
        """Change C and/or Q now; a limit not given stays as it is.

        Raising ``max_running`` starts the oldest waiters at once, FIFO. Lowering it interrupts no
        running request: the excess drains (``running`` may exceed C meanwhile) and nothing starts
        until running is below the new C. Lowering ``max_waiting`` evicts nobody already queued
        (the excess leaves as it would have, and no arrival queues until it has), unless
        ``evict=True``: then the newest waiters beyond it get :class:`Evicted`. Each change counts in
        ``stats().limit_changes`` and writes an INFO record ``limit_changed`` to the ``boundedgate``
        logger. With an adaptive controller attached, the controller takes the new C as its own
        (its next decision starts from it) and may change it again later.

        Raises:
            TypeError, ValueError: A limit the constructor would refuse, an ``evict`` that is not
                True or False, or ``max_running=None`` for a gate with an adaptive controller
                (nothing changed).
        """
        evict = check_flag("evict", evict)
        state = self._state
        controller = self._controller
        if max_running is None and controller is not None:
            raise ValueError(
                "max_running=None (no limit) leaves nothing for the gate's adaptive controller to set: "
                "give it a C"
            )
        before = (state.limit, state.max_waiting)
        loop = self._loop
        now = 0.0 if loop is None else self._clock()
        woken = state.set_limits(now, max_running, max_waiting, evict)
        if controller is not None:
            controller.rebase(state.limit)
        self._max_running = None if state.limit == _UNLIMITED else state.limit
        if before != (state.limit, state.max_waiting):
            log_event(
                self.name,
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

    def pause(self, seconds: FloatArg) -> None:
        """Start no request for ``seconds`` from now (a provider's rate-limit reset); C is unchanged.

        Arrivals still queue up to Q (or are refused as usual), queued requests still expire at
        their deadlines, running ones run on; when the pause ends the oldest waiters start. A
        shorter pause than one in force changes nothing; a longer one extends it. Must be called
        on the gate's event loop (it binds the gate to the running loop if it has none yet).

        Raises:
            TypeError, ValueError: ``seconds`` is not a finite number >= 0 (a pause always ends;
                nothing changed).
        """
        seconds = check_pause(seconds)
        if self._loop is None:
            self._bind()
        now = self._clock()
        woken = self._state.pause(now + seconds, now)
        if woken:
            self._wake(woken)
        self._rearm()

    def signal(
        self, kind: StrArg, *, retry_after: FloatArg | None = None, max_pause: FloatArg = MAX_PAUSE
    ) -> None:
        """Tell the gate what the provider answered: ``rate_limited``, ``overloaded`` or ``ignored``.

        ``rate_limited`` with ``retry_after`` (seconds to the provider's reset) pauses new starts
        until then, but for at most ``max_pause`` seconds (default 300: a reset further away, a
        daily quota or a ``Retry-After: 1e15``, is obeyed that long, then the gate tries again),
        and leaves C alone; ``overloaded`` (a 503, a 529) has the adaptive controller cut
        C, at most once per window (without a controller it changes nothing); ``ignored`` (a client
        that went away, another 4xx) is not congestion. See ``boundedgate.SIGNALS``. Must be
        called on the gate's event loop, as :meth:`pause`.

        Raises:
            ValueError: An unknown kind.
            TypeError, ValueError: ``retry_after`` or ``max_pause`` is not a finite number >= 0
                (nothing changed).
        """
        pause = provider_pause(retry_after, max_pause)
        if kind == "rate_limited":
            if pause > 0:
                self.pause(pause)
            return
        controller = self._controller
        if controller is None:
            if kind not in ("overloaded", "ignored"):
                raise ValueError(f"unknown signal {kind!r}; expected rate_limited, overloaded or ignored")
            return
        if self._loop is None:
            self._bind()
        state = self._state
        wanted = controller.signal(cast(Any, kind), self._clock(), state.running)  # compiled: an object
        if wanted != state.limit:
            self.set_limits(max_running=wanted)

    def sync_rate_limits(self, remaining: Mapping[str, float]) -> int:
        """Lower the rate limits' balances to what the provider says is left (never raise one).

        ``remaining`` maps a resource (``"requests"``, ``"tokens"``, or a rate limit's name) to the
        provider's remaining count, e.g. from ``x-ratelimit-remaining-*`` headers. Returns how many
        buckets were lowered.

        Raises:
            TypeError, ValueError: ``remaining`` is not a mapping of names (str) to counts >= 0.
        """
        counts = check_remaining(remaining)
        if self._loop is None:
            self._bind()
        lowered = self._state.sync_rate_limits(counts, self._clock())
        state = self._state
        if lowered and state.waiting:
            self._rearm()
        return lowered

    def adapt(self, settings: Adaptive | None = None) -> AdaptiveLimit:
        """Have an adaptive controller set C from now on, starting from the current C; returns it.

        The controller hears every provider signal given to :meth:`signal` (or by the HTTP
        client transport) and samples every request that ran to an answer (completed or late):
        its time to first item for a stream, else its run time. Its settings and defaults are
        those of :class:`Adaptive`.

        Raises:
            TypeError: ``settings`` is neither :class:`Adaptive` nor None.
            ValueError: The gate has no ``max_running`` (nothing for a controller to set).
        """
        state = self._state
        if state.limit == _UNLIMITED:
            raise ValueError("an adaptive limit needs a gate with max_running set")
        self._controller = AdaptiveLimit(settings, state.limit)  # which checks the settings
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
        state = self._state
        wanted = controller.sample(latency, record.ran, record.ended, state.running + 1, record.cost)
        if wanted != before and self._loop is not None:
            self._loop.call_soon(self._follow)

    def _follow(self) -> None:
        controller = self._controller
        state = self._state
        if controller is not None and controller.limit != state.limit:
            self.set_limits(max_running=controller.limit)

    def __repr__(self) -> str:
        state = self._state
        running = "unbounded" if self._max_running is None else self._max_running
        waiting = "unbounded" if state.max_waiting is None else state.max_waiting
        return (
            f"<BoundedGate {self.name!r} [running {state.running}/{running}, "
            f"waiting {state.waiting}/{waiting}]>"
        )

    # -- driver internals (used by the permits) ----------------------------------------------

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
            self._clock = clock_of(loop)
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
        permit: Permit  # every ticket of a gate is a permit (compiled: its fields read natively)
        while woken:
            passed_on: list[Ticket] = []
            for permit in woken:  # type: ignore[assignment]
                waiter = permit._waiter
                if waiter is None:
                    continue
                try:
                    waiter.set_result(None)  # a future already done (cancelled) refuses it
                    continue
                except asyncio.InvalidStateError:
                    pass
                except RuntimeError:  # its loop is closed: nobody will ever wake on it
                    loop = self._loop
                    if loop is None or not loop.is_closed():
                        raise
                    self._parked.discard(permit)
                    permit._waiter = None
                if permit.status is RUNNING:
                    # Its caller was cancelled in the turn the slot was handed to it (or its loop is
                    # gone): the slot passes on now rather than when that task wakes to find it so.
                    passed_on += self._state.cancel(permit, self._clock())
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
            woken = self._state.cancel(permit, self._clock(), ending)
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
        loop = self._loop
        if loop is None:  # never bound: nothing has arrived, nothing waits
            return
        if self._timer is not None:
            self._timer.cancel()
        try:
            self._timer = loop.call_at(when, self._on_timer)
        except RuntimeError:  # the loop is closed (a release after it closed): nothing to wake
            self._timer = None
            if not loop.is_closed():
                raise
            return
        self._timer_at = when

    def _on_timer(self) -> None:
        # The loop fires a timer once it judges its time reached, which may be a clock tick before
        # the float it was armed at: take the deadline as reached, or the timer would re-arm forever.
        now = max(self._clock(), self._timer_at)
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
        """The error for a permit the state refused at arrival, or that left the queue unstarted.

        Its ``retry_after`` is never sooner than the end of a pause in force: nothing starts before.
        """
        state = self._state
        status = permit.status
        name = self._name
        arrival = permit.arrival
        ended = permit.ended
        if arrival is None or ended is None:
            raise RuntimeError(f"{permit!r} was not refused: it has no refusal")
        paused_for = 0.0 if state.paused_until == _INF else state.paused_until - ended
        if status is REJECTED:
            return _QUEUE_FULL(
                gate=name,
                max_running=self._max_running,
                max_waiting=state.max_waiting,
                running=state.running,
                waiting=state.waiting,
                waited=0.0,
                elapsed=0.0,
                recent_run=state.recent_run_seconds,
                paused_for=paused_for,
            )
        if status is INFEASIBLE:  # its predicted start counts a pause already
            return Infeasible(
                gate=name,
                max_running=self._max_running,
                max_waiting=state.max_waiting,
                running=state.running,
                waiting=state.waiting,
                waited=0.0,
                elapsed=0.0,
                predicted_wait=max(0.0, state.predicted_start(ended, permit.deadline) - ended),
                budget=queue_deadline(permit) - ended,
            )
        if status is RATE_LIMITED:
            notes = permit._notes  # noted as it was refused
            ready: float = notes["ready_at"]
            return RateLimited(
                gate=name,
                max_running=self._max_running,
                max_waiting=state.max_waiting,
                running=state.running,
                waiting=state.waiting,
                waited=0.0,
                elapsed=0.0,
                limit=notes["limited_by"],
                retry_after=max(0.0, ready - ended, paused_for),
            )
        waited = ended - arrival
        if status is EVICTED:
            return Evicted(
                gate=name,
                max_running=self._max_running,
                max_waiting=state.max_waiting,
                running=state.running,
                waiting=state.waiting,
                waited=waited,
                elapsed=waited,
                priority=permit.priority,
                recent_run=state.recent_run_seconds,
                paused_for=paused_for,
            )
        return QueueExpired(
            gate=name,
            max_running=self._max_running,
            max_waiting=state.max_waiting,
            running=state.running,
            waiting=state.waiting,
            waited=waited,
            elapsed=waited,
            deadline=queue_deadline(permit),
            recent_run=state.recent_run_seconds,
            paused_for=paused_for,
        )

    def _cut(
        self, arrival: float | None, started: float | None, ended: float | None, deadline: float
    ) -> DeadlineCut:
        """The :class:`DeadlineCut` for a request cut off at its deadline, naming this gate."""
        if arrival is None or started is None or ended is None:
            raise RuntimeError("only a request that ran and ended can be cut")
        state = self._state
        return DeadlineCut(
            gate=self._name,
            max_running=self._max_running,
            max_waiting=state.max_waiting,
            running=state.running,
            waiting=state.waiting,
            waited=started - arrival,
            elapsed=ended - arrival,
            deadline=deadline,
            overrun=max(0.0, ended - deadline),  # asyncio runs a timer up to its clock's resolution early
        )

    def _late(
        self, arrival: float | None, started: float | None, ended: float | None, deadline: float
    ) -> Late:
        """The :class:`Late` for a request that finished at or after its deadline, naming this gate.

        Its times, on the gate's clock: when it arrived, started, ended, and its deadline.
        """
        if arrival is None or started is None or ended is None:
            raise RuntimeError("only a request that ran and ended can be late")
        state = self._state
        name = self._name
        return Late(
            gate=name,
            max_running=self._max_running,
            max_waiting=state.max_waiting,
            running=state.running,
            waiting=state.waiting,
            waited=started - arrival,
            elapsed=ended - arrival,
            deadline=deadline,
            overrun=ended - deadline,
        )


@final
class Permit(Ticket):
    """A request's claim on a :class:`BoundedGate`: a running slot, held until released.

    ``gate.admit(...)`` returns a permit that has not arrived yet; entering it with ``async with``
    is the arrival (it starts, waits in the queue, or is refused), and leaving the block releases
    the slot and raises :class:`Late` if the block finished at or after the deadline.
    ``gate.try_admit()`` returns a permit that already holds its slot.

    Releasing is idempotent: the slot goes back exactly once, whichever path gets there first
    (``release()``, the end of the ``async with`` block), and the block may be exited from another
    task than the one that entered it. A permit is entered once: entering it again while its block
    runs (``async with permit:`` inside ``async with permit:``) is a ``RuntimeError`` that leaves
    the slot with the outer block. A permit from ``try_admit()`` garbage-collected while it holds
    its slot gives it back (on its gate's loop, in the turn after), counted as ``leaked``, with a
    ``ResourceWarning``.

    Attributes:
        status: Where the request stands (:class:`Status`); its outcome once it has ended.
        arrival: When it arrived, on the gate's clock (None before it has).
        deadline: When it must be done by, on the gate's clock (``math.inf`` for no deadline).
        started: When it got its slot (None if it has not).
        ended: When it reached its outcome (None while it is pending).
        priority: Its priority class (0, the most urgent, unless the gate has several).
        cost: Its rate cost: declared at admission, then as settled by :meth:`settle`.
    """

    __slots__ = ("_gate", "_handed_over", "_raise_late", "_timeout", "_waiter")

    # Its gate (a BoundedGate), typed as the compiled base so that compiled code reads its fields
    # natively.
    _gate: GateBase
    # The relative budget, turned into `deadline` at arrival (None when it was absolute).
    _timeout: float | None
    # The future a queued permit sleeps on; the gate resolves it when the permit leaves the queue.
    _waiter: asyncio.Future[None] | None
    # True once a stream owns the slot: the block's exit then leaves it alone.
    _handed_over: bool
    # False: a block that finishes late is counted late, but its exit raises nothing.
    _raise_late: bool

    def __init__(
        self,
        by: object = None,
        gate: GateBase | None = None,
        timeout: float | None = None,
        deadline: float = _INF,
        priority: int = 0,
        cost: float = 0.0,
    ) -> None:
        if by is not _BY_GATE or gate is None:
            raise TypeError("a Permit is made by gate.admit() or gate.try_admit()")
        Ticket.__init__(self, deadline, priority, cost)  # named: super() costs ~800 instructions, pure
        self._gate = gate
        self._timeout = timeout
        self._waiter = None
        self._handed_over = False
        self._raise_late = True

    @property
    def gate(self) -> BoundedGate:
        """The gate this permit belongs to."""
        return cast("BoundedGate", self._gate)

    def release(self) -> None:
        """Give the slot back now, as a normal end (completed, or late past the deadline).

        Does nothing if the permit does not hold a slot (not yet admitted, or already released).
        Never raises :class:`Late`; the ``async with`` exit does that. Call it on the event
        loop's thread.
        """
        self._finish()

    def abort(self) -> None:
        """End the request now as *aborted*: its client went away while it ran.

        For a server that learns its client hung up (an HTTP disconnect): cancel the work, wait
        until it has really stopped, then call this, so the request counts as ``aborted`` rather
        than ``failed`` and the slot goes back. Like :meth:`release`, it does nothing if the permit
        holds no slot, and never raises :class:`Late`.
        """
        self._finish(ABORTED)

    def disconnect(self) -> None:
        """Its client went away while it waited: leave the queue now, as *disconnected*.

        The ``async with`` (or ``await``) waiting for a slot then raises ``CancelledError``, and
        the request never starts; a slot handed to it in this very loop turn passes on to the next
        in line. Does nothing unless the permit is waiting: a permit that runs is ended with
        :meth:`abort` once its work has stopped. Call it on the gate's event loop.
        """
        waiter = self._waiter
        if waiter is None or waiter is _HELD:
            return
        self._gate._cancel(self, DISCONNECTED)
        if not waiter.done():
            waiter.cancel()

    def settle(self, cost: FloatArg) -> None:
        """Record the request's real cost, e.g. the token usage the SDK reported.

        Rate limits counted in tokens are charged the difference to the declared cost (never below
        a bucket's floor: a debt later requests wait out) or refunded the over-estimate (never above
        its burst). Call it once the usage is known, before or after the slot was released (a
        stream's usage is only known at its end). Settling again adjusts from the last settled
        cost. Does nothing for a request that never started. For a key of a :class:`KeyedGate`,
        a settle after the key's gate was dropped charges the key's gate of now (made for it if
        need be), so the key's debt is not forgotten with the gate.

        Raises:
            TypeError, ValueError: ``cost`` is not a finite number >= 0.
        """
        value = check_cost(cost)
        gate = self._gate
        if gate._loop is None:
            return
        try:
            woken = gate._state.settle(self, value, gate._clock())
        except BaseException:
            gate._core_failed()
            raise
        gate = self._gate  # a settle after a keyed gate dropped its key's gate charges the key's gate now
        if woken:
            gate._wake(woken)
        if gate._rated and gate._state.waiting:
            gate._rearm()

    def hand_to(self, stream: _Stream, *, raise_late: BoolArg = True) -> GatedStream[_Stream]:
        """Give the slot to ``stream``: the returned wrapper releases it when the stream ends.

        From then on the ``async with`` block neither releases the slot nor raises :class:`Late`,
        whatever happens in it, so hand over last (``return permit.hand_to(raw)``); if the block
        raises before the hand-over, it releases as usual. The permit's deadline is the stream's.

        Args:
            stream: An async iterator: an SDK stream (``create(stream=True)``), the stream an SDK's
                ``.stream()`` manager yields, or any async generator.
            raise_late: Raise :class:`Late` at the end of a stream that ends at or after the
                deadline (True), or only count it as late in ``stats()`` (False).

        Returns:
            The :class:`GatedStream` that now owns the slot: a drop-in for ``stream``.

        Raises:
            TypeError: ``stream`` is not an async iterator, or ``raise_late`` is not True or False
                (the block still owns the slot).
            RuntimeError: The permit holds no slot (not admitted, or already released), or was
                already handed to a stream.
        """
        # HandsOver.hand_to(), on the class itself: a compiled class has one base that is not a trait.
        return hand_over(cast("StreamPermit", self), stream, raise_late=raise_late)

    def _hand_over(self) -> None:
        if self.status is not RUNNING:
            raise RuntimeError(f"{self!r} holds no slot to hand over")
        if self._handed_over:
            raise RuntimeError(f"{self!r} was already handed to a stream")
        self._handed_over = True

    async def __aenter__(self) -> Self:
        if self.status is RUNNING:
            if self._waiter is not _HELD:
                # Entered already: a second exit would free the slot under the first block's body.
                raise RuntimeError(f"{self!r} is already entered; a permit is entered once, by one block")
            self._waiter = None  # from try_admit(): it holds its slot already
            return self
        if self._arrive(True) is RUNNING:
            return self
        gate = self._gate  # the gate it arrived at (a keyed gate may have moved it)
        if self.status is QUEUED:
            waiter = self._waiter = gate._loop.create_future()  # type: ignore[union-attr]  # bound by now
            parked = gate._parked
            if parked is _NOBODY_PARKED:  # the gate's first waiter: its set is made now
                gate._parked = parked = set()
            parked.add(self)
            expires = self.deadline if self.max_wait == _INF else queue_deadline(self)
            if gate._rated:
                gate._rearm()
            elif expires < gate._timer_at:
                gate._arm_timer(expires)
            try:
                await waiter
            except BaseException:
                # Cancelled while waiting, or in the same loop turn as the gate handed it a slot
                # (the future holds a result but the task was cancelled before it resumed): either
                # way give back what it holds, and a slot passes on to the next in line.
                self._waiter = None
                parked.discard(self)
                gate._cancel(self)
                raise
            self._waiter = None
            parked.discard(self)
            status = self.status
            if status is RUNNING:
                return self
            if status is DISCONNECTED:  # disconnect() in the turn it was handed a slot
                raise asyncio.CancelledError()
        raise gate._refusal(self)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._handed_over:
            return  # a stream owns the slot now
        # No await before the release: a second cancellation must not be able to interrupt it.
        self._finish(None if exc_type is None else FAILED)
        if exc_type is None and self.status is LATE and self._raise_late:
            raise self._late()

    def _arrive(self, wait: bool) -> Status:
        """Arrive at the gate now, and return the status the gate gave the permit."""
        if self.status is not NEW:
            raise RuntimeError(f"{self!r} was already used; call admit() for each request")
        gate = self._gate
        loop = gate._loop
        if loop is None or (task := current_task(loop)) is None:
            loop = gate._bind()
            task = current_task(loop)
        if task is not None and is_cancelling(task) and cancellation_pending(task):
            # Refused before it is counted: a cancelled caller never touches the counters.
            self.status = CANCELLED
            raise asyncio.CancelledError()
        now = gate._clock()
        timeout = self._timeout
        if timeout is not None:
            self.deadline = now + timeout
        try:
            woken = gate._state.arrive(self, now, wait)
        except BaseException:
            self._gate._core_failed()  # the gate it arrived at (a keyed gate may have moved it)
            raise
        if woken:
            gate._wake(woken)
        return self.status

    def _finish(self, ending: Status | None = None) -> None:
        """End the request now, if it holds a slot: as ``ending`` says, else completed or late."""
        if self.status is RUNNING:
            gate = self._gate
            try:
                woken = gate._state.release(self, gate._clock(), ending)
            except BaseException:
                gate._core_failed()
                raise
            if woken:
                gate._wake(woken)
            if gate._rated and gate._state.waiting:
                gate._rearm()

    def _give_back_unused(self, ending: Status = DISCONNECTED) -> None:
        """End the request as ``ending`` (*disconnected*) if it holds a slot it never used for its work.

        For a server whose client left while the request was held back further on (queued at
        another gate inside): the slot goes back as a grant nobody took up (the admission is
        taken back, no run time is recorded), and passes on to the next in line. The HTTP
        middleware calls it on any gate's permit (a ``RedisPermit`` has the same method), and
        ``admit_all`` with ``CANCELLED`` on the gates taken before a step that was refused.
        """
        if self.status is RUNNING:
            self._gate._cancel(self, ending)  # the core's "granted, but not yet used" ending

    # -- what a stream needs (boundedgate._streams.StreamPermit) -------------------------------

    @property
    def _loop(self) -> asyncio.AbstractEventLoop | None:
        return self._gate._loop

    def _late(self) -> Late:
        return self._gate._late(self.arrival, self.started, self.ended, self.deadline)

    def __repr__(self) -> str:
        return f"<Permit of {self._gate.name!r}: {self.status.value}>"


class _HeldPermit(Permit):  # type: ignore[misc]  # the one subclass: try_admit()'s permits
    """A permit that holds its slot before anything entered it: what ``try_admit()`` returns.

    It is the one kind a caller can drop with no block's exit ever running (a permit entered with
    ``async with`` is released by the exit, even when its task is destroyed: closing the coroutine
    runs it), so it alone pays for a finaliser; permits from ``admit()`` deallocate at no extra cost.
    """

    __slots__ = ()

    def __del__(self) -> None:
        # Dropped while it holds its slot (never released, never entered): the slot comes back as
        # leaked. A stream that owns the slot has a finaliser of its own.
        if self.status is RUNNING and not self._handed_over:
            _leaked(self)


class Cutter:
    """The cut of a permit admitted with ``on_deadline="cut"``: one loop timer at its deadline.

    Shared by the cut permits of every gate (a ``BoundedGate``'s, a ``RedisGate``'s). As
    ``asyncio.timeout`` does, :meth:`enter` notes the task that entered the block and arms the
    timer, whose callback (the permit's: it knows whether the body still runs) calls
    :meth:`cancel_task`; the block's exit calls :meth:`take_back`, which takes that cancellation
    back (``uncancel()``) and says whether it was the gate's alone. Handed to a stream, the permit
    disarms the timer and arms the stream's instead (:meth:`arm`): the stream is closed at the
    deadline.
    """

    __slots__ = ("_cancelling", "_cutting", "_task", "_timer")

    # The timer at the deadline (None: not armed), the task it cancels, that task's `cancelling()`
    # at the entry, and True once the timer cancelled it (until the exit takes it back).
    _timer: asyncio.TimerHandle | None
    _task: asyncio.Task[Any] | None
    _cancelling: int
    _cutting: bool

    def __init__(self) -> None:
        self._timer = None
        self._task = None
        self._cancelling = 0
        self._cutting = False

    def enter(self, loop: asyncio.AbstractEventLoop, deadline: float, cut: Callable[[], object]) -> None:
        """Call ``cut`` at ``deadline`` for the task entering the block now, if it has a deadline."""
        task = current_task(loop)
        if task is not None and deadline != _INF and self._timer is None:
            self._task = task
            self._cancelling = task.cancelling()
            self.arm(loop, deadline, cut)

    def cancel_task(self) -> None:
        """At the deadline, the body still running: cancel the task in the block."""
        self._timer = None
        task = self._task
        if task is not None and not task.done():
            self._cutting = True
            task.cancel()

    def leave(self, raised: bool, late: bool) -> Status | None:
        """The block's exit: disarm the timer, take the cut back, and say how the request ended.

        ``CUT`` when the gate's cut stopped the body, or the body finished at or past its deadline
        (``late``) before the cut landed; ``FAILED`` when it ``raised`` otherwise; None (completed,
        on time) else.
        """
        self.disarm()
        if self.take_back():
            return CUT
        if raised:
            return FAILED
        return CUT if late else None

    def take_back(self) -> bool:
        """True if the cut cancelled the body, and no other cancellation was asked since the entry.

        The cut's cancellation is taken back (``uncancel()``) either way, once.
        """
        if not self._cutting:
            return False
        self._cutting = False
        task = self._task
        return task is not None and task.uncancel() <= self._cancelling

    def arm(
        self, loop: asyncio.AbstractEventLoop, deadline: float, callback: Callable[[], object]
    ) -> asyncio.TimerHandle:
        """Call ``callback`` at ``deadline`` on ``loop`` (whose clock is the gate's)."""
        timer = self._timer = loop.call_at(deadline, callback)
        return timer

    def disarm(self) -> None:
        """Cancel the timer, if it is armed."""
        timer = self._timer
        if timer is not None:
            self._timer = None
            timer.cancel()


class _CutPermit(Permit):  # type: ignore[misc]  # admit(on_deadline="cut")'s permits
    """A permit whose body is cut off at its deadline: what ``admit(on_deadline="cut")`` returns.

    Entered, it arms its :class:`Cutter` at its deadline (the gate's clock is the loop's): the
    timer cancels the task that entered the block. The block's exit takes that cancellation back;
    if no other cancellation was requested since the entry, the ``CancelledError`` becomes
    :class:`DeadlineCut`, else it stays the caller's. The slot is released by the exit alone, so
    it is held until the body has really stopped. Handed to a stream, the permit disarms its timer
    and arms the stream's instead (``_arm_cut``): the stream is closed at the deadline. A subclass,
    so that permits without the option pay nothing.
    """

    __slots__ = ("_cutter",)

    _cutter: Cutter

    def __init__(
        self,
        by: object = None,
        gate: GateBase | None = None,
        timeout: float | None = None,
        deadline: float = _INF,
        priority: int = 0,
        cost: float = 0.0,
    ) -> None:
        Permit.__init__(self, by, gate, timeout, deadline, priority, cost)
        self._cutter = Cutter()

    async def __aenter__(self) -> Self:
        await Permit.__aenter__(self)
        loop = self._gate._loop
        if loop is not None:
            self._cutter.enter(loop, self.deadline, self._cut_body)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._handed_over:
            return  # a stream owns the slot, and the timer, now
        raised = exc_type is not None
        ending = self._cutter.leave(raised, not raised and self._gate._clock() >= self.deadline)
        # No await before the release: a second cancellation must not be able to interrupt it.
        Permit._finish(self, ending)
        if self.status is CUT and (exc_type is None or issubclass(exc_type, asyncio.CancelledError)):
            error = self._cut_error()
            error.__cause__ = exc  # `raise ... from exc` loses it in a compiled coroutine
            raise error

    def _take_back_cut(self) -> bool:
        """True if the gate's cut cancelled the body, and no other cancellation was asked since the entry.

        The cut's cancellation is taken back (``uncancel()``) either way, once. For the block's
        exit, and for a caller that enters the permit by hand (the ASGI middleware).
        """
        return self._cutter.take_back()

    def _cut_body(self) -> None:
        """The timer, at the deadline: cancel the task in the block, if the body still runs."""
        if self.status is RUNNING and not self._handed_over:
            self._cutter.cancel_task()

    def _arm_cut(self, callback: Callable[[], object]) -> asyncio.TimerHandle:
        """Call ``callback`` at the deadline, on the gate's loop (whose clock is the gate's)."""
        loop = self._gate._loop
        assert loop is not None  # entered: the gate is bound
        return self._cutter.arm(loop, self.deadline, callback)

    def _hand_over(self) -> None:
        Permit._hand_over(self)
        self._cutter.disarm()  # the stream arms its own, and closes itself at the deadline

    def release(self) -> None:
        """Give the slot back now: completed before the deadline, cut at or after it."""
        self._finish()

    def abort(self) -> None:
        """End the request now as *aborted*, as :meth:`Permit.abort` does."""
        self._finish(ABORTED)

    def _finish(self, ending: Status | None = None) -> None:
        if self.status is not RUNNING:
            return
        self._cutter.disarm()
        if ending is None and self._gate._clock() >= self.deadline:
            ending = CUT
        Permit._finish(self, ending)

    def _cut_error(self) -> DeadlineCut:
        return self._gate._cut(self.arrival, self.started, self.ended, self.deadline)

    def __repr__(self) -> str:
        return f"<Permit of {self._gate.name!r}, cut at its deadline: {self.status.value}>"


def _leaked(permit: Permit) -> None:
    """From the finaliser: give the slot back as leaked, on the gate's loop, and warn.

    The collector may run in any thread, and in the middle of the gate's own work on its loop's
    thread: the release is a callback on that loop, in the turn after. On a closed loop nothing
    else runs the gate, and the release happens here.
    """
    loop = permit._gate._loop
    note = ""
    if loop is not None and not loop.is_closed():
        try:
            loop.call_soon_threadsafe(permit._finish, LEAKED)
        except RuntimeError:  # the loop closed in between
            permit._finish(LEAKED)
            note = " (its event loop is closed)"
    else:
        permit._finish(LEAKED)
        note = " (its event loop is closed)"
    warnings.warn(
        f"a permit of gate {permit._gate.name!r} was dropped while it held its slot; the slot is given "
        f"back, counted as leaked{note}: release it, or enter it with async with",
        ResourceWarning,
        stacklevel=1,
        source=permit,
    )


if TYPE_CHECKING:

    def _is_a_stream_permit(permit: Permit) -> StreamPermit:  # mypy checks the contract here
        return permit
