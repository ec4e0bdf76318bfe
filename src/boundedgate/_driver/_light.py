"""A keyed gate's key state: light (counts only) while it needs nothing else, full from the moment it does.

A :class:`KeyedGate` makes each key's gate around a :class:`KeyState`, a :class:`GateState` that
tells its keyed gate when it arrives idle, changes its counts or becomes idle. Without rate limits,
a controller or observers, a key starts *light*: it is made without the parts a full state builds
(its own queue, deadline heap and buckets: it shares its keyed gate's empty queue, and has no
bucket), and arriving at a free slot and completing are all it does, in full, in its own few
lines. Every field of a light key holds what a full state's would (nothing is queued, nothing
refused, nothing failed), so reading one needs nothing; the events it does not handle (a request
that must queue or is refused, a failure, a late or cancelled one, a change of limits, a pause, a
hook) first *promote* it, in place: it gets a queue and a heap of its own and its keyed gate's
hooks, and from then on it is a full state, the same object, so whatever holds it (its gate, a
caller's local) is never out of step. A light key that is dropped folds its few counters into its
keyed gate's totals in a few additions, with nothing else to undo.

This module is compiled with mypyc where the build compiles (a native subclass of the compiled
``GateState``, whose fields the compiled gate and permit read and write natively).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Hashable, Sequence
from types import EllipsisType
from typing import TYPE_CHECKING, Any, Final, final

from .._core import GateState, IntArg, Status, Ticket, WaitQueue, note, pace_weight

if TYPE_CHECKING:
    from ._bounded import BoundedGate
    from ._gate import GateBase
    from ._keyed import KeyedGate
    from ._keyed_base import KeyedBase

__all__ = ("FRESH", "LISTED", "RETIRED", "KeyState", "key_gate_name", "light_of")

RUNNING: Final[Status] = Status.RUNNING
COMPLETED: Final[Status] = Status.COMPLETED
CANCELLED: Final[Status] = Status.CANCELLED
_INF: Final = math.inf

#: A key state's phases (see ``_keyed.py``): made, not yet its key's gate; its key's gate; dropped.
FRESH: Final = 0
LISTED: Final = 1
RETIRED: Final = 2
_PHASES: Final = ("fresh", "listed", "retired")

_NOBODY: Final[tuple[Ticket, ...]] = ()
# A light key's deadline heap: it never holds one (a light key never queues; promoted, it has its own).
_NO_DEADLINES: Final[list[tuple[float, Ticket]]] = []


@final
class KeyState(GateState):
    """A key's gate state: light or full (see the module docstring); its phases are ``_keyed.py``'s."""

    __slots__ = ("_gate", "_key", "_keys", "_light", "_owner", "_phase", "_told_running", "_told_waiting")

    _owner: KeyedGate[Any]
    # The owner again, as its compiled base: the fields every arrival and release update, read and
    # written natively (``_owner`` is interpreted: its methods, off the common paths).
    _keys: KeyedBase
    _key: Hashable
    _phase: int
    # True while it is light (it shares its owner's empty queue, has no buckets, and no hooks).
    _light: bool
    # A light key's gate, once the gate around it is made, while it is listed or fresh: what it
    # lists for its key. None once dropped (the gate and its state no longer hold each other), and
    # for a full state.
    _gate: GateBase | None
    # The running and waiting counts the owner's totals include for this key (a light key's: all).
    _told_running: int
    _told_waiting: int

    def __init__(
        self,
        owner: KeyedGate[Any],
        key: Hashable,
        max_running: int | None,
        max_waiting: int | None,
        empty: WaitQueue | None = None,
    ) -> None:
        self._owner = self._keys = owner
        self._key = key
        self._phase = FRESH
        self._told_running = 0
        self._told_waiting = 0
        self._gate = None  # a light key's is set by the keyed gate once the gate around it is made
        if empty is None:  # full from the start
            self._light = False
            rate_limits = owner._rate_limits
            super().__init__(max_running, max_waiting, owner._priorities, owner._jump_share, rate_limits)
            return
        # Light: GateState.__init__ without its checks (the keyed gate checked the limits) and
        # without a queue, a heap or buckets of its own.
        self._light = True
        self.max_running = self.limit = limit = sys.maxsize if max_running is None else max_running
        self._pace_weight = pace_weight(limit)
        self.max_waiting = max_waiting
        self._queue_limit = sys.maxsize if max_waiting is None else max_waiting
        self._queue = empty
        self._deadlines = _NO_DEADLINES
        self._buckets = ()
        self._queued_cost = 0.0  # (what the queue owes the buckets: it has none)
        self._class_queued = None
        self.running = self.waiting = self.peak_running = self.peak_waiting = self.admitted = 0
        self.rejected = self.expired = self.cancelled = self.completed = self.late = self.failed = 0
        self.leaked = self.aborted = self.disconnected = self.evicted = self.rate_limited = 0
        self.infeasible = self.limit_changes = self.pauses = 0
        self.feasible = False
        self.paused_until = _INF
        self.queue_seconds_total = self.queue_seconds_max = 0.0
        self.run_seconds_total = self.run_seconds_max = 0.0
        self.end_to_end_seconds_total = self.end_to_end_seconds_max = 0.0
        self.recent_run_seconds = None
        self.observer = None
        self.reporter = None

    def full(self) -> KeyState:
        """Promote a light key in place (a queue and a heap of its own, its owner's hooks); returns it."""
        if self._light:
            owner = self._owner
            self._light = False
            self._queue = WaitQueue(owner._priorities, owner._jump_share)
            self._deadlines = []
            self._told_running = self.running  # the totals count them already
            gate = self._gate
            self._gate = None
            if gate is not None:  # not dropped (a dropped one's counts are folded already)
                owner._attach(self._key, gate)
        return self

    def reuse(self, gate: GateBase, key: Hashable, max_running: int | None, max_waiting: int | None) -> bool:
        """Make a dropped light key, and ``gate`` around it, new for ``key`` (False: it is not one).

        ``KeyedBase.admit()`` spells out its case of the template's limits: keep the two in step.
        """
        if not self._light or self._phase != RETIRED:
            return False
        self._gate = gate
        self._key = key
        self._phase = FRESH
        limit = sys.maxsize if max_running is None else max_running
        if self.limit != limit or self.max_waiting != max_waiting:  # an override's
            gate._max_running = max_running
            self.max_running = self.limit = limit
            self._pace_weight = pace_weight(limit)
            self.max_waiting = max_waiting
            self._queue_limit = sys.maxsize if max_waiting is None else max_waiting
        self.completed = self.peak_running = self.admitted = 0
        self.run_seconds_total = self.run_seconds_max = 0.0
        self.end_to_end_seconds_total = self.end_to_end_seconds_max = 0.0
        self.recent_run_seconds = None
        return True

    # -- events -------------------------------------------------------------------------------

    def arrive(self, ticket: Ticket, now: float, wait: bool = True) -> Sequence[Ticket]:
        """Start ``ticket`` at a free slot of a light key (listing a fresh one), else as a full state."""
        if self._light:
            running = self.running
            if running < self.limit and ticket.deadline > now:
                owner = self._keys
                phase = self._phase
                if phase == LISTED:
                    if not running and owner._idle_keys:
                        owner._idle_keys.pop(self._key, None)  # it was kept idle
                elif (
                    phase == FRESH
                    # listed now, unless the key listed another gate meanwhile (set at creation)
                    and (gates := owner._gates).setdefault(self._key, self._gate) is self._gate  # type: ignore[arg-type]
                ):
                    self._phase = LISTED
                    if (keys := len(gates)) > owner._peak_keys:
                        owner._peak_keys = keys
                else:  # retired, or the key listed another gate meanwhile: the full state moves it on
                    return self.full()._arrive(ticket, now, wait)
                ticket.arrival = ticket.started = now
                ticket.status = RUNNING
                self.running = running = running + 1
                self.admitted += 1
                if running > self.peak_running:
                    self.peak_running = running
                owner._running = total = owner._running + 1
                if total > owner._peak_running:
                    owner._peak_running = total
                return _NOBODY
            self.full()
        return self._arrive(ticket, now, wait)

    def _arrive(self, ticket: Ticket, now: float, wait: bool) -> Sequence[Ticket]:
        if self.running or self.waiting:  # busy, hence listed
            woken = super().arrive(ticket, now, wait)
            self._owner._tell(self)
            return woken
        return self._owner._arrive_idle(self, ticket, now, wait)

    def release(self, ticket: Ticket, now: float, ending: Status | None = None) -> Sequence[Ticket]:
        """Complete ``ticket`` (a light key's other endings promote it first, then end there)."""
        if not self._light or ending is not None or ticket.status is not RUNNING or now >= ticket.deadline:
            return self._end(ticket, now, ending)
        # A light key's request completed in time: GateState.release's counts, then the keyed gate's.
        ticket.status = COMPLETED
        ticket.ended = now
        self.completed += 1
        self.running = running = self.running - 1
        ran: float = now - ticket.started  # type: ignore[operator]
        self.run_seconds_total += ran
        self.end_to_end_seconds_total += ran  # it started on arrival
        if ran > self.run_seconds_max:
            self.run_seconds_max = self.end_to_end_seconds_max = ran
        recent = self.recent_run_seconds
        self.recent_run_seconds = ran if recent is None else recent + self._pace_weight * (ran - recent)
        owner = self._keys
        owner._running -= 1
        if not running and self._phase == LISTED:
            if owner._keep_idle:
                self._owner._light_idle(self)
            else:  # dropped now (KeyedGate._drop_light, spelled out for the gate made per call)
                owner._spare = owner._gates.pop(self._key)
                self._phase = RETIRED
                self._gate = None  # the gate and its state no longer hold each other
                owner._done += self.completed
                ran = self.run_seconds_total
                if ran:
                    owner._done_run_total += ran
                    if self.run_seconds_max > owner._done_run_max:
                        owner._done_run_max = self.run_seconds_max
                owner._dropped += 1
        if owner._resting and owner._resting[0][0] <= now:
            self._owner._rested(now)
        return _NOBODY

    def _end(self, ticket: Ticket, now: float, ending: Status | None) -> Sequence[Ticket]:
        # Any ending but a light key's completion in time: as a full state's (a light key's ticket
        # that is not running changes nothing).
        if self._light:
            if ticket.status is not RUNNING:
                return _NOBODY
            self.full()
        woken = super().release(ticket, now, ending)
        self._owner._freed(self, now)
        return woken

    def cancel(self, ticket: Ticket, now: float, ending: Status = CANCELLED) -> Sequence[Ticket]:
        """As a full state's, after a promotion."""
        self.full()
        woken = super().cancel(ticket, now, ending)
        self._owner._freed(self, now)
        return woken

    def advance(self, now: float) -> list[Ticket]:
        """The driver's timer: waiters expired (the last may leave the key idle) or started on tokens."""
        woken = super().advance(now)
        if woken:
            self._owner._tell(self)  # starts on accrued tokens can raise the running peak
            self._owner._freed(self, now)
        return woken

    def set_limits(
        self,
        now: float,
        max_running: IntArg | EllipsisType | None = ...,
        max_waiting: IntArg | EllipsisType | None = ...,
        evict: bool = False,
    ) -> Sequence[Ticket]:
        """As a full state's, after a promotion."""
        self.full()
        woken = super().set_limits(now, max_running, max_waiting, evict)
        if woken:
            self._owner._tell(self)  # starts can raise the running peak
            self._owner._freed(self, now)
        return woken

    def pause(self, until: float, now: float) -> Sequence[Ticket]:
        """As a full state's, after a promotion."""
        self.full()
        woken = super().pause(until, now)
        if woken:
            self._owner._freed(self, now)
        return woken

    def settle(self, ticket: Ticket, cost: float, now: float) -> Sequence[Ticket]:
        """Record a started ticket's real cost; after its key was dropped, the key's gate of now pays."""
        if self._light and (ticket.started is None or cost == ticket.cost):
            return _NOBODY
        if self._phase != LISTED:  # retired after the release: the key's gate now pays
            return self._owner._settle_retired(self, ticket, cost, now)
        if self._light:  # no buckets: nothing to charge
            if "declared" not in getattr(ticket, "_notes", ()):
                note(ticket, "declared", ticket.cost)
            ticket.cost = cost
            return _NOBODY
        woken = super().settle(ticket, cost, now)
        if woken:  # a refund let waiters start
            self._owner._tell(self)
        elif not self.running and not self.waiting:
            self._owner._charged_idle(self, now)
        return woken

    def __repr__(self) -> str:
        kind = "light" if self._light else "full"
        return f"<KeyState {self._key!r} {_PHASES[self._phase]}, {kind}>"


def light_of(gate: BoundedGate) -> KeyState | None:
    """The light key ``gate`` drives, if it drives one (else its state is a full one)."""
    state: object = gate._state
    return state if type(state) is KeyState and state._light else None


def key_gate_name(prefix: str, key: Hashable) -> str:
    """The name of a key's gate: its keyed gate's name and ``/`` (``prefix``), then the key."""
    return prefix + key if type(key) is str else f"{prefix}{key}"
