"""A keyed gate's keys: each key's state, and the table of keys that every call goes through.

Theory of operation
===================

A :class:`KeyedGate` gives each key a gate of its own, made on the key's first use with the
template's limits (or the key's own) and dropped once the key is idle. The gate drives a
:class:`KeyState`: a :class:`GateState` like any gate's, which tells its owner, the keyed gate,
of every change through a few of its methods (``_arrived_idle``, ``_changed``, ``_freed``,
``_settle_retired``, ``_charged_idle``). The owner is :class:`KeyedBase`, the keyed gate's base:
``admit()``, and the table of keys every arrival and
release updates (the listed gates, the idle and resting keys, the running totals, the counters of
the gates dropped). The public ``KeyedGate`` (``_keyed.py``, never compiled) is its one subclass,
with everything off the per-call path and the ``__weakref__`` slot (see ``_bounded.py``: mypyc's
deallocator of a native class never clears an object's weak references, CPython's deallocator of
the interpreted subclass does).

A key's state goes through three phases:

``FRESH``
    Made by ``admit(key)`` for a key with no gate, and held by nothing but its permit: a permit
    that is never entered, or whose caller was cancelled before it arrived, takes its gate with
    it when it is garbage.

``LISTED``
    At its first counted arrival it becomes the key's gate, in ``_gates``, which holds it while
    anything runs or waits in it. When it becomes idle it is kept for reuse if ``keep_idle``
    allows (the least recently idle key goes first), else dropped; a gate whose rate limits are
    still refilling (or that is paused) rests, listed, until they are full (its key must not get a
    fresh burst by going idle for a moment).

``RETIRED``
    Dropped: its counters were folded into the keyed gate's totals, and it is out of every table.
    Nothing runs or waits in it, and nothing will.

An arrival at a gate that is not its key's listed gate (a retired one, or a fresh one when the key
was listed meanwhile, through another permit taken at the same time) moves the permit to the
key's gate of that moment. So a key never has two gates admitting at once, whatever the permits
were taken from, and every release counts.

A gate becomes idle through a release or a cancellation, or, with rate limits (whose waiters may
wait for tokens while no slot is busy), through the expiry of its last waiter; the state tells its
owner after each, and the owner keeps running totals of running and waiting across keys, for exact
aggregate peaks.

This module is compiled with mypyc where the build compiles: a key's state is a native subclass of
the compiled ``GateState``, whose fields the compiled gate and permit read natively, and
``admit()`` with the table runs compiled. ``KeyedBase`` is final to mypyc, so compiled code reads
its fields and calls its methods directly; what it needs of the subclass (a key's own limits and
controller, a controller to remember) it calls through the Python attribute protocol, off the
common path. It is not generic in the key type (a native class with a base mypyc does not
compile, ``Generic``, gets a ``__dict__`` and a weak-reference slot of its own): ``KeyedGate`` is,
and declares ``admit()``'s key a ``K`` to a type checker.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from types import EllipsisType
from typing import Any, Final, cast, final

from .._core import (
    AdaptiveLimit,
    BoolArg,
    FloatArg,
    GateState,
    IntArg,
    RateLimit,
    Status,
    Ticket,
    mypyc_attr,
)
from ._bounded import BoundedGate
from ._gate import GateBase, Permit
from ._hooks import attach, report
from ._observing import Observers

__all__ = ("FRESH", "LISTED", "RETIRED", "KeyState", "KeyedBase", "fold", "key_gate_name")

#: A key state's phases (see the module docstring): made, not yet its key's gate; its key's gate; dropped.
FRESH: Final = 0
LISTED: Final = 1
RETIRED: Final = 2
_PHASES: Final = ("fresh", "listed", "retired")

# The class of every key's gate and its allocator, read natively by compiled code, where the
# imported name is a dict look-up and the allocator a look-up by name.
_BOUNDED_GATE: Final = BoundedGate
_NEW_GATE: Final = BoundedGate.__new__


@final
class KeyState(GateState):
    """A key's gate state: a gate's, which tells its owner of every change (see the module docstring)."""

    __slots__ = ("key", "owner", "phase", "told_running", "told_waiting")

    #: The keyed gate it belongs to (called natively: KeyedBase is final to mypyc).
    owner: KeyedBase
    #: Its key.
    key: Hashable
    #: FRESH, LISTED or RETIRED; the owner moves it on.
    phase: int
    #: The running and waiting counts its owner's totals include (the owner keeps them).
    told_running: int
    told_waiting: int

    def __init__(
        self,
        owner: KeyedBase,
        key: Hashable,
        max_running: int | None,
        max_waiting: int | None,
        priorities: int,
        jump_share: FloatArg,
        rate_limits: tuple[RateLimit, ...],
    ) -> None:
        # The settings are the keyed gate's, checked when it was made (or the key's own, checked
        # when they were found): a key's state is made without checking them again.
        self._init_checked(max_running, max_waiting, priorities, jump_share, rate_limits)
        self.owner = owner
        self.key = key
        self.phase = FRESH
        self.told_running = 0
        self.told_waiting = 0

    def arrive(self, ticket: Ticket, now: float, wait: bool = True) -> Sequence[Ticket]:
        """As a gate's state; an arrival at an idle state is its owner's (it may list it, or move it)."""
        if self.running or self.waiting:  # busy, hence listed
            woken = super().arrive(ticket, now, wait)
            self.owner._changed(self)
            return woken
        return self.owner._arrived_idle(self, ticket, now, wait)

    def release(self, ticket: Ticket, now: float, ending: Status | None = None) -> Sequence[Ticket]:
        """As a gate's state; then the owner sees whether the key is idle."""
        woken = super().release(ticket, now, ending)
        self.owner._freed(self, now)
        return woken

    def cancel(self, ticket: Ticket, now: float, ending: Status = Status.CANCELLED) -> Sequence[Ticket]:
        """As a gate's state; then the owner sees whether the key is idle."""
        woken = super().cancel(ticket, now, ending)
        self.owner._freed(self, now)
        return woken

    def advance(self, now: float) -> list[Ticket]:
        """The driver's timer: waiters expired (the last may leave the key idle) or started on tokens."""
        woken = super().advance(now)
        if woken:
            self.owner._changed(self)  # starts on accrued tokens can raise the running peak
            self.owner._freed(self, now)
        return woken

    def set_limits(
        self,
        now: float,
        max_running: IntArg | EllipsisType | None = ...,
        max_waiting: IntArg | EllipsisType | None = ...,
        evict: bool = False,
    ) -> Sequence[Ticket]:
        """As a gate's state; starts can raise the running peak, evictions leave the key idle."""
        woken = super().set_limits(now, max_running, max_waiting, evict)
        if woken:
            self.owner._changed(self)
            self.owner._freed(self, now)
        return woken

    def pause(self, until: float, now: float) -> Sequence[Ticket]:
        """As a gate's state; expiries on the way may leave the key idle."""
        woken = super().pause(until, now)
        if woken:
            self.owner._freed(self, now)
        return woken

    def settle(self, ticket: Ticket, cost: float, now: float) -> Sequence[Ticket]:
        """Record a started ticket's real cost; after its key was dropped, the key's gate of now pays."""
        if self.phase != LISTED:  # retired after the release: the key's gate now pays
            return self.owner._settle_retired(self, ticket, cost, now)
        woken = super().settle(ticket, cost, now)
        if woken:  # a refund let waiters start
            self.owner._changed(self)
        elif not self.running and not self.waiting:
            self.owner._charged_idle(self, now)
        return woken

    def __repr__(self) -> str:
        return f"<KeyState {self.key!r} {_PHASES[self.phase]}>"


@final
class KeyReporter:
    """Writes the record of each refused, late or leaked request of a keyed gate's keys: one for all.

    A request's permit is at the gate whose state decides its outcome (a permit moves to its key's
    gate of the moment before it arrives there, and never moves after), so the state that reports
    it is its gate's, and the key that state's.
    """

    __slots__ = ("_gate",)

    def __init__(self, gate: str) -> None:
        self._gate = gate

    def __call__(self, ticket: Ticket) -> None:
        """Log ``ticket``'s ending, as :class:`Reporter` does for one state."""
        state: KeyState = cast(Permit, ticket)._gate._state  # type: ignore[assignment]  # a key state
        report(ticket, state, self._gate, state.key)


def fold(into: GateState, state: GateState) -> None:
    """Add the history of a dropped key's ``state`` to ``into``: its counts and times, and its longest.

    The fields of :class:`GateStatistics` that ``Totals`` sums and takes the maxima of, read
    natively, as every drop does it; ``tests/keyed/test_key_state.py`` holds it to ``Totals.add``.
    """
    into.admitted += state.admitted
    into.rejected += state.rejected
    into.expired += state.expired
    into.cancelled += state.cancelled
    into.completed += state.completed
    into.late += state.late
    into.cut += state.cut
    into.failed += state.failed
    into.leaked += state.leaked
    into.aborted += state.aborted
    into.disconnected += state.disconnected
    into.evicted += state.evicted
    into.rate_limited += state.rate_limited
    into.infeasible += state.infeasible
    into.limit_changes += state.limit_changes
    into.pauses += state.pauses
    into.queue_seconds_total += state.queue_seconds_total
    into.run_seconds_total += state.run_seconds_total
    into.end_to_end_seconds_total += state.end_to_end_seconds_total
    if state.queue_seconds_max > into.queue_seconds_max:
        into.queue_seconds_max = state.queue_seconds_max
    if state.run_seconds_max > into.run_seconds_max:
        into.run_seconds_max = state.run_seconds_max
    if state.end_to_end_seconds_max > into.end_to_end_seconds_max:
        into.end_to_end_seconds_max = state.end_to_end_seconds_max


def key_gate_name(prefix: str, key: Hashable) -> str:
    """The name of a key's gate: its keyed gate's name and ``/`` (``prefix``), then the key."""
    return prefix + key if type(key) is str else f"{prefix}{key}"


@final  # to mypyc: its fields are read and its methods called directly (KeyedGate overrides none)
@mypyc_attr(allow_interpreted_subclasses=True)
class KeyedBase:
    """A keyed gate without its weak references and its rarer parts: see ``KeyedGate`` (``_keyed.py``)."""

    __slots__ = (
        "_by_deadline",
        "_clock",
        "_created",
        "_dropped",
        "_feasible",
        "_gates",
        "_idle_keys",
        "_jump_share",
        "_keep_idle",
        "_loop",
        "_max_running",
        "_max_waiting",
        "_name",
        "_observed",
        "_observers",
        "_peak_keys",
        "_peak_running",
        "_peak_waiting",
        "_prefix",
        "_priorities",
        "_rate_limits",
        "_reporter",
        "_resting",
        "_retired",
        "_running",
        "_template",
        "_ticks",
        "_waiting",
    )

    _name: str
    # The name of its keys' gates up to the key: the name and "/".
    _prefix: str
    # The template: what a key's gate is made with, unless the key has limits of its own.
    _max_running: int | None
    _max_waiting: int | None
    _priorities: int
    _jump_share: FloatArg  # as given (checked): the keys pass it on to their queues
    _rate_limits: tuple[RateLimit, ...]
    # Every key's gate's feasible admission and deadline order, as BoundedGate's.
    _feasible: bool
    _by_deadline: bool
    # True while a new key takes the template's limits and needs no controller (no overrides, no
    # limits set for a key, no adaptive limit): its gate is made here, without asking the subclass.
    _template: bool
    # The callbacks every key's gate records to (through its state's hooks), and whether there are
    # any (KeyedGate's observe() and unobserve() keep it, for _attach to read natively).
    _observers: Observers
    _observed: bool
    # The reporter every key's state shares (a key with a controller or observed has its own hooks).
    _reporter: KeyReporter
    _keep_idle: int
    # The loop its keys' gates were last bound to, and its clock: a key's new gate starts bound to
    # it (its first arrival binds it again if another loop runs it).
    _loop: asyncio.AbstractEventLoop | None
    _clock: Callable[[], float]
    # Listed gates: every key with requests running or waiting, and the idle ones kept.
    _gates: dict[Any, GateBase]
    # The idle keys among them, least recently idle first.
    _idle_keys: OrderedDict[Any, None]
    # Idle keys whose rate limits are refilling, by when they will be full: (when, tick, key).
    _resting: list[tuple[float, int, Any]]
    _ticks: itertools.count[int]
    # The counters of the gates dropped so far, summed (see fold): a state that drives no gate.
    _retired: GateState
    _created: int
    _dropped: int
    _peak_keys: int
    # Running and waiting summed over keys, kept up to date as the keys' states tell.
    _running: int
    _waiting: int
    _peak_running: int
    _peak_waiting: int

    def _init_keys(
        self,
        name: str,
        max_running: int | None,
        max_waiting: int | None,
        priorities: int,
        jump_share: FloatArg,
        rate_limits: tuple[RateLimit, ...],
        keep_idle: int,
    ) -> None:
        """Set up an empty table of keys for the template given (checked by the caller)."""
        self._name = name
        self._prefix = name + "/"
        self._max_running = max_running
        self._max_waiting = max_waiting
        self._priorities = priorities
        self._jump_share = jump_share
        self._rate_limits = rate_limits
        self._feasible = False
        self._by_deadline = False
        self._template = True
        self._observers = Observers()
        self._observed = False
        self._reporter = KeyReporter(name)
        self._keep_idle = keep_idle
        self._loop = None
        self._clock = time.monotonic  # read by nothing before it is bound
        self._gates = {}
        self._idle_keys = OrderedDict()
        self._resting = []
        self._ticks = itertools.count()
        self._retired = GateState(None, None)
        self._created = 0
        self._dropped = 0
        self._peak_keys = 0
        self._running = 0
        self._waiting = 0
        self._peak_running = 0
        self._peak_waiting = 0

    def admit(
        self,
        key: Hashable,
        *,
        timeout: FloatArg | None = None,
        deadline: FloatArg | None = None,
        max_wait: FloatArg | None = None,
        priority: IntArg = 0,
        cost: FloatArg | None = None,
        raise_late: BoolArg = True,
        on_deadline: str = "late",
    ) -> Permit:
        """A permit for one request through ``key``'s gate: :meth:`BoundedGate.admit` on that gate.

        Args:
            key: Which gate: any hashable.
            timeout: Budget in seconds from arrival (>= 0), covering the wait and the run.
            deadline: Absolute deadline on the running loop's clock (``loop.time()``).
                Give at most one of the two; neither means no deadline.
            max_wait: A queue budget in seconds from arrival, as for :meth:`BoundedGate.admit`.
            priority: The request's priority class, as for :meth:`BoundedGate.admit`.
            cost: The request's rate cost, as for :meth:`BoundedGate.admit`.
            raise_late: False to count a late block without raising, as for :meth:`BoundedGate.admit`.
            on_deadline: ``"cut"`` to cancel a body still running at its deadline, as for
                :meth:`BoundedGate.admit`.

        Raises (on entry, named after the key's gate, e.g. ``"tenant/acme"``):
            QueueFull: Every slot of the key's gate busy and its queue full.
            RateLimited: The key's rate limits cannot pay its cost in time.
            QueueExpired: The deadline passed while waiting, or had passed on arrival.
            Evicted: A more urgent arrival took its place in the key's full queue.
            asyncio.CancelledError: The caller was cancelled while waiting, or had a cancellation
                pending when it arrived (as for :meth:`BoundedGate.admit`).

        Raises (at once):
            TypeError, ValueError: As for :meth:`BoundedGate.admit`, or (for a key without a gate
                yet) limits from ``overrides`` that are out of range.
        """
        return self._gate_for(key).admit(
            timeout=timeout,
            deadline=deadline,
            max_wait=max_wait,
            priority=priority,
            cost=cost,
            raise_late=raise_late,
            on_deadline=on_deadline,
        )

    # -- the table of keys ----------------------------------------------------------------------

    def _gate_for(self, key: Hashable) -> GateBase:
        """The key's listed gate, else a fresh one (listed at its first arrival)."""
        gate = self._gates.get(key)
        if gate is None:
            gate = self._create(key)
        return gate

    def _create(self, key: Hashable) -> GateBase:
        """A fresh gate for ``key``: with the template's limits, or the key's own and its controller."""
        controller: AdaptiveLimit | None = None
        if self._template:
            max_running, max_waiting = self._max_running, self._max_waiting
        else:
            interpreted: Any = self  # KeyedGate's, off the common path
            max_running, max_waiting, controller = interpreted._own_setup(key)
        state = KeyState(
            self, key, max_running, max_waiting, self._priorities, self._jump_share, self._rate_limits
        )
        state.feasible = self._feasible
        state.by_deadline = self._by_deadline
        gate: GateBase = _NEW_GATE(_BOUNDED_GATE)  # what its constructor makes, around this state
        gate._setup(state, key_gate_name(self._prefix, key), bool(self._rate_limits))
        if self._loop is not None:  # binding a gate reads the loop's clock; its keys' share one loop
            gate._loop = self._loop
            gate._clock = self._clock
        gate._controller = controller
        self._attach(key, gate)
        self._created += 1
        return gate

    def _attach(self, key: Hashable, gate: GateBase) -> None:
        """Give a key's gate its hooks: the keyed gate's reporter and observers, its controller's sampler."""
        state = gate._state
        if gate._controller is None:
            if not self._observed:  # the shared reporter alone: nothing made for this key
                state.reporter = self._reporter
                state.observer = None
                return
            attach(state, self._name, key, self._observers, self._reporter)
            return
        observers = Observers()
        observers.callbacks = (*self._observers.callbacks, gate._sample)
        attach(state, self._name, key, observers, self._reporter)

    def _list(self, key: Hashable, gate: GateBase) -> None:
        """Make ``gate`` (fresh) ``key``'s gate."""
        state: KeyState = gate._state  # type: ignore[assignment]  # a key's gate drives a key state
        state.phase = LISTED
        self._loop = gate._loop
        self._clock = gate._clock
        gates = self._gates
        gates[key] = gate
        if len(gates) > self._peak_keys:
            self._peak_keys = len(gates)

    def _idle(self, key: Hashable, state: KeyState, now: float) -> None:
        """``key``'s listed gate is idle: it rests, is kept among the idle keys, or is dropped."""
        full_at = state.full_at() if self._rate_limits else -math.inf
        paused = state.paused_until
        if paused != math.inf and paused > full_at:
            full_at = paused  # a pause is kept to its end, like a debt of rate
        if full_at > now:
            heapq.heappush(self._resting, (full_at, next(self._ticks), key))
            return
        keep = self._keep_idle
        if not keep:
            self._drop(key)
            return
        idle = self._idle_keys
        idle[key] = None
        if len(idle) > keep:
            self._drop(idle.popitem(last=False)[0])

    def _rested(self, now: float) -> None:
        """Resting keys whose buckets are full by ``now`` go idle (kept or dropped), if still unused."""
        resting = self._resting
        while resting and resting[0][0] <= now:
            key = heapq.heappop(resting)[2]
            gate = self._gates.get(key)
            if gate is None:
                continue
            state: KeyState = gate._state  # type: ignore[assignment]  # a key's gate drives a key state
            if not state.running and not state.waiting and key not in self._idle_keys:
                self._idle(key, state, now)

    def _drop(self, key: Hashable) -> None:
        """Drop ``key``'s (idle) gate: its counters go into the totals, its controller's lesson is kept."""
        gates = self._gates
        gate = gates[key]
        del gates[key]  # natively, where dict.pop is a method call by name
        state: KeyState = gate._state  # type: ignore[assignment]  # a key's gate drives a key state
        state.phase = RETIRED
        # Nothing ends in it any more: its hooks go, and with them the cycle they make with it.
        state.reporter = state.observer = None
        fold(self._retired, state)
        self._dropped += 1
        if gate._controller is not None:
            interpreted: Any = self  # KeyedGate's, off the common path
            interpreted._remember(key, gate._controller, bool(state.completed or state.late))

    # -- what a key's state tells its owner ---------------------------------------------------------

    def _arrived_idle(self, state: KeyState, ticket: Ticket, now: float, wait: bool) -> Sequence[Ticket]:
        """An arrival at an idle gate: a kept one leaves the idle keys, a fresh one is listed."""
        key = state.key
        phase = state.phase
        if phase == RETIRED or (phase == FRESH and key in self._gates):
            # Not the key's gate (any more): the permit arrives at the key's gate of this moment.
            state.phase = RETIRED
            permit = cast(Permit, ticket)
            gate = self._gate_for(key)
            permit._gate = gate
            gate._bind()
            woken = gate._state.arrive(permit, now, wait)
            if woken:
                gate._wake(woken)
            return ()
        woken = GateState.arrive(state, ticket, now, wait)
        if not state.running and not state.waiting:
            return woken  # refused (at once, or before it was counted): still idle
        if phase == FRESH:
            self._list(key, cast(Permit, ticket)._gate)  # the gate whose state this is
        else:
            self._idle_keys.pop(key, None)  # it was kept idle, or resting while its buckets refill
        self._changed(state)
        return woken

    def _changed(self, state: KeyState) -> None:
        """Bring the running totals up to date with ``state``'s counts."""
        running = state.running
        waiting = state.waiting
        self._running = total_running = self._running + running - state.told_running
        self._waiting = total_waiting = self._waiting + waiting - state.told_waiting
        state.told_running = running
        state.told_waiting = waiting
        if total_running > self._peak_running:
            self._peak_running = total_running
        if total_waiting > self._peak_waiting:
            self._peak_waiting = total_waiting

    def _freed(self, state: KeyState, now: float) -> None:
        """After a release, a cancellation or the timer: tell the counts, see if the gate is idle."""
        # A freed slot goes to at most one waiter, who leaves the queue: the totals cannot rise here,
        # so there is no peak to check.
        running = state.running
        waiting = state.waiting
        self._running += running - state.told_running
        self._waiting += waiting - state.told_waiting
        state.told_running = running
        state.told_waiting = waiting
        if not running and not waiting and state.phase == LISTED:
            self._idle(state.key, state, now)
        if self._resting and self._resting[0][0] <= now:
            self._rested(now)

    def _settle_retired(self, state: KeyState, ticket: Ticket, cost: float, now: float) -> Sequence[Ticket]:
        """A settle for a request whose key's gate was dropped since: the key's gate of now pays it.

        A dropped gate's buckets were full, so a refund has nothing to give back to a key with no
        gate; a charge lists a gate for the key, which rests until its buckets are full again.
        """
        if ticket.started is None:
            return ()  # never started (refused, or its slot given back unused): nothing to settle
        key = state.key
        permit = cast(Permit, ticket)
        gate = self._gates.get(key)
        if gate is None:
            if cost <= ticket.cost or not any(limit.unit == "tokens" for limit in self._rate_limits):
                ticket.cost = cost
                return ()
            gate = self._create(key)
            self._list(key, gate)
            origin = permit._gate
            gate._loop = origin._loop
            gate._clock = origin._clock
            live: KeyState = gate._state  # type: ignore[assignment]  # a key's gate drives a key state
            GateState.settle(live, ticket, cost, now)
            self._idle(key, live, now)  # rests until its buckets refill
            permit._gate = gate
            return ()
        permit._gate = gate
        return gate._state.settle(ticket, cost, now)

    def _charged_idle(self, state: KeyState, now: float) -> None:
        """A settle on an idle key: a key kept idle whose buckets a charge emptied rests instead."""
        key = state.key
        if key in self._idle_keys and state.full_at() > now:
            del self._idle_keys[key]
            heapq.heappush(self._resting, (state.full_at(), next(self._ticks), key))
