"""BoundedGate: the asyncio driver around the decision core.

The gate owns a :class:`GateState` and does what it says: it parks queued permits on futures,
resolves those futures when the state hands them a slot or expires them, and keeps one loop timer
armed at the earliest queued deadline (no task and no timer per waiter).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import final

from .._core import GateState, GateStatistics, Status, Ticket, check_deadline, check_name, check_timeout
from .._errors import Late, QueueExpired, QueueFull
from ._permit import Permit

__all__ = ("BoundedGate",)

RUNNING = Status.RUNNING
REJECTED = Status.REJECTED
_INF = math.inf


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

    The gate binds to the event loop that first uses it. It may move to another loop while it is
    idle (nothing running or waiting); using it from another loop while busy is a RuntimeError.

    Args:
        max_running: Running slots, an int >= 1.
        max_waiting: Queue places, an int >= 0 (0: no waiting room, refuse as soon as every slot
            is busy), or None for an unbounded queue, which must be asked for explicitly.
        name: A name for errors, statistics and ``repr``.

    Raises:
        TypeError: A limit that is not an int (floats, NaN, infinities, booleans), or a name
            that is not a str.
        ValueError: ``max_running < 1`` or ``max_waiting < 0``.
    """

    __slots__ = ("__weakref__", "_loop", "_name", "_state", "_timer", "_timer_at")

    def __init__(self, *, max_running: int, max_waiting: int | None, name: str = "gate") -> None:
        self._state = GateState(max_running, max_waiting)
        self._name = check_name(name)
        self._loop: asyncio.AbstractEventLoop | None = None
        # The one loop timer, armed at the earliest queued deadline (`inf`: not armed).
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    # -- public API -------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The gate's name."""
        return self._name

    @property
    def max_running(self) -> int:
        """Running slots (C)."""
        return self._state.max_running

    @property
    def max_waiting(self) -> int | None:
        """Queue places (Q); None when the queue is unbounded."""
        return self._state.max_waiting

    @property
    def running(self) -> int:
        """Requests holding a slot now."""
        return self._state.running

    @property
    def waiting(self) -> int:
        """Requests in the queue now."""
        return self._state.waiting

    def admit(self, *, timeout: float | None = None, deadline: float | None = None) -> Permit:
        """A permit for one request, to enter with ``async with``; entering it is the arrival.

        On entry the request starts at once if a slot is free and nobody is queued, or waits in
        the queue (FIFO) if there is room, or is refused. On exit the slot is released; a body
        that raised propagates its own exception, one that finished at or after the deadline
        raises :class:`Late`.

        Args:
            timeout: Budget in seconds from arrival (>= 0), covering the wait and the run.
            deadline: Absolute deadline on the running loop's clock (``loop.time()``).
                Give at most one of the two; neither means no deadline.

        Raises (on entry):
            QueueFull: Every slot busy and the queue full, at once, before any suspension.
            QueueExpired: The deadline passed while waiting, or had passed on arrival.
            asyncio.CancelledError: The caller was cancelled while waiting, or was already
                cancelled on arrival (then nothing was counted).

        Raises (at once):
            TypeError, ValueError: A malformed timeout or deadline, or both given.
        """
        if deadline is None:
            if timeout is None:
                return Permit(self, None, _INF)
            if (type(timeout) is float or type(timeout) is int) and timeout >= 0:  # the common case inline
                return Permit(self, timeout, _INF)
            return Permit(self, check_timeout(timeout), _INF)
        if timeout is not None:
            raise ValueError("give timeout or deadline, not both")
        return Permit(self, None, check_deadline(deadline))

    def try_admit(self, *, timeout: float | None = None, deadline: float | None = None) -> Permit:
        """A permit that holds a slot now, or :class:`QueueFull` now; it never waits.

        Release it with :meth:`Permit.release` or by entering and leaving it with ``async with``.
        Arguments are as for :meth:`admit`; the deadline only decides whether the request ends
        as completed or late. Must be called from a task on the gate's event loop.

        Raises:
            QueueFull: The request cannot start at once (no free slot, or others are queued).
            QueueExpired: The deadline had already passed (nothing was counted).
            asyncio.CancelledError: The calling task is being cancelled (nothing was counted).
        """
        permit = self.admit(timeout=timeout, deadline=deadline)
        if permit._arrive(False) is not RUNNING:
            raise permit._gate._refusal(permit)  # the gate it arrived at (a keyed gate may move it)
        return permit

    def stats(self) -> GateStatistics:
        """An immutable snapshot of the gate's counters (see :class:`GateStatistics`)."""
        return self._state.snapshot(self._name)

    def __repr__(self) -> str:
        state = self._state
        waiting = "unbounded" if state.max_waiting is None else state.max_waiting
        return (
            f"<BoundedGate {self._name!r} [running {state.running}/{state.max_running}, "
            f"waiting {state.waiting}/{waiting}]>"
        )

    # -- driver internals (used by Permit) --------------------------------------------------

    def _bind(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        old = self._loop
        if loop is not old:
            state = self._state
            if old is not None and (state.running or state.waiting) and not old.is_closed():
                raise RuntimeError(f"{self!r} is in use on another event loop")
            if self._timer is not None:
                self._timer.cancel()
            self._loop = loop
            self._timer = None
            self._timer_at = math.inf
        return loop

    def _wake(self, woken: Sequence[Ticket]) -> None:
        """Resolve the futures of permits that left the queue (started or expired), oldest first."""
        while woken:
            passed_on: list[Ticket] = []
            for permit in woken:
                waiter: asyncio.Future[None] | None = permit._waiter  # type: ignore[attr-defined]
                if waiter is None:
                    continue
                if not waiter.done():
                    waiter.set_result(None)
                elif permit.status is RUNNING:
                    # Its caller was cancelled in the turn the slot was handed to it: the slot
                    # passes on now rather than when that task wakes to find it cancelled.
                    passed_on += self._state.cancel(permit, self._loop.time())  # type: ignore[union-attr]
            woken = passed_on

    def _cancel(self, permit: Permit) -> None:
        woken = self._state.cancel(permit, self._loop.time())  # type: ignore[union-attr]
        if woken:
            self._wake(woken)

    def _arm_timer(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_at(when, self._on_timer)  # type: ignore[union-attr]
        self._timer_at = when

    def _on_timer(self) -> None:
        # The loop fires a timer once it judges its time reached, which may be a clock tick before
        # the float it was armed at: take the deadline as reached, or the timer would re-arm forever.
        now = max(self._loop.time(), self._timer_at)  # type: ignore[union-attr]
        self._timer = None
        self._timer_at = math.inf
        woken = self._state.advance(now)
        if woken:
            self._wake(woken)
        when = self._state.next_wakeup()
        if when != math.inf:
            self._arm_timer(when)

    def _refusal(self, permit: Permit) -> QueueFull | QueueExpired:
        """The error for a permit the state refused at arrival or expired in the queue."""
        state = self._state
        if permit.status is REJECTED:
            return QueueFull(
                self._name,
                state.max_running,
                state.max_waiting,
                state.running,
                state.waiting,
                0.0,
                0.0,
                state.recent_run_seconds,
            )
        waited = permit.ended - permit.arrival  # type: ignore[operator]
        return QueueExpired(
            self._name,
            state.max_running,
            state.max_waiting,
            state.running,
            state.waiting,
            waited,
            waited,
            permit.deadline,
            state.recent_run_seconds,
        )

    def _late(self, permit: Permit) -> Late:
        state = self._state
        ended: float = permit.ended  # type: ignore[assignment]
        arrival: float = permit.arrival  # type: ignore[assignment]
        return Late(
            self._name,
            state.max_running,
            state.max_waiting,
            state.running,
            state.waiting,
            permit.started - arrival,  # type: ignore[operator]
            ended - arrival,
            permit.deadline,
            ended - permit.deadline,
        )
