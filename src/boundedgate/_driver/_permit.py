"""The permit: one request's claim on a gate, from arrival to the moment it gives its slot back."""

from __future__ import annotations

import asyncio
import math
import warnings
from collections.abc import AsyncIterator, Coroutine
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Self, TypeVar, cast, final

from .._core import BoolArg, FloatArg, Status, Ticket, allocates_plainly, check_cost, queue_deadline
from .._streams import GatedStream, StreamPermit, hand_over
from . import _compat
from ._compat import cancellation_pending
from ._refusing import enter_refused

if TYPE_CHECKING:
    from .._errors import Late
    from ._bounded import BoundedGate
    from ._gate import GateBase

__all__ = ("Permit", "new_held_permit", "new_permit")

NEW: Final[Status] = Status.NEW
QUEUED: Final[Status] = Status.QUEUED
RUNNING: Final[Status] = Status.RUNNING
LATE: Final[Status] = Status.LATE
CANCELLED: Final[Status] = Status.CANCELLED
FAILED: Final[Status] = Status.FAILED
ABORTED: Final[Status] = Status.ABORTED
LEAKED: Final[Status] = Status.LEAKED
DISCONNECTED: Final[Status] = Status.DISCONNECTED
_INF: Final = math.inf
# What every arrival calls, as C statics: compiled, a name imported from an interpreted module
# is a lookup in the module's dict at every use.
current_task: Final = _compat.current_task
is_cancelling: Final = _compat.is_cancelling
_ENTER_REFUSED: Final = enter_refused

_T = TypeVar("_T")
_Stream = TypeVar("_Stream", bound=AsyncIterator[Any])

# What `_waiter` holds for a permit from try_admit() until it is entered: the slot is held already.
_HELD: Final[asyncio.Future[None]] = cast("asyncio.Future[None]", object())

# What only new_permit() passes: a Permit made by hand is refused.
_BY_GATE: Final = object()


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

    # Ticket's fields, and these, are set by __init__, called by new_permit() only. A BoundedGate,
    # typed as its compiled base so that the compiled permit reads its fields natively.
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
        # Ticket.__init__ spelled out (its frame would cost more than the request's arrival).
        if by is not _BY_GATE:
            raise TypeError("a Permit is made by gate.admit() or gate.try_admit()")
        self.arrival = None
        self.deadline = deadline
        self.max_wait = _INF  # admit(max_wait=..., raise_late=...) sets these two afterwards
        self.started = None
        self.ended = None
        self.status = NEW
        self.priority = priority
        self.seq = -1
        self.cost = cost
        self._gate = gate  # type: ignore[assignment]  # new_permit() always passes one
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

    def __aenter__(self) -> Coroutine[Any, Any, Self]:
        # The compiled build's (the pure build's __aenter__ is _entering itself: see the module's end).
        # An exception that leaves a compiled function gets a traceback entry made for it (a code
        # object and a frame), which costs more than the rest of a refusal: a permit that looks bound
        # to be refused at once, every slot busy and the queue full, enters through an interpreted
        # coroutine, where the refusal is raised. Only a hint: either coroutine, when it runs, arrives
        # and handles whatever the arrival gives (a start, a place in the queue, a refusal).
        if self.status is NEW:
            state = self._gate._state
            if (
                state.running >= state.max_running
                and state.max_waiting is not None
                and state.waiting >= state.max_waiting
            ):
                return _ENTER_REFUSED(self)
        return self._entering()

    def _enter(self) -> Status:
        """Entering up to any wait: the checks, then the arrival; the status the arrival gave."""
        if self.status is RUNNING:
            if self._waiter is _HELD:  # from try_admit(): it holds its slot already
                self._waiter = None
                return RUNNING
            raise RuntimeError(f"{self!r} is already entered; a permit is entered once, by one block")
        return self._arrive(True)

    async def _entering(self) -> Self:  # noqa: PLR0915 - the arrival spelled out, for the hot path
        if self.status is not NEW:
            if self.status is RUNNING:
                if self._waiter is _HELD:  # from try_admit(): it holds its slot already
                    self._waiter = None
                    return self
                # Entered already: a second exit would free the slot under the first block's body.
                raise RuntimeError(f"{self!r} is already entered; a permit is entered once, by one block")
            raise RuntimeError(f"{self!r} was already used; call admit() for each request")
        # _arrive(True), spelled out: the uncontended pair makes one call into the core each way.
        gate = self._gate
        loop = gate._loop
        if loop is None or (task := current_task(loop)) is None:
            loop = gate._bind()
            task = current_task(loop)
        if task is not None and is_cancelling(task) and cancellation_pending(task):
            self.status = CANCELLED  # refused before it is counted, as _arrive() says
            raise asyncio.CancelledError()
        now = gate._clock()
        timeout = self._timeout
        if timeout is not None:
            self.deadline = now + timeout
        try:
            woken = gate._state.arrive(self, now, True)
        except BaseException:
            self._gate._core_failed()
            raise
        if woken:
            gate._wake(woken)
        status = self.status
        if status is RUNNING:
            return self
        gate = self._gate  # the gate it arrived at (a keyed gate may have moved it)
        if status is QUEUED:
            waiter = self._waiter = loop.create_future()
            parked = gate._parked
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
        # (_finish(), spelled out for the uncontended pair.)
        if self.status is RUNNING:
            gate = self._gate
            try:
                woken = gate._state.release(
                    self,
                    gate._clock(),
                    None if exc_type is None else FAILED,
                )
            except BaseException:
                gate._core_failed()
                raise
            if woken:
                gate._wake(woken)
            if gate._rated and gate._state.waiting:
                gate._rearm()
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

    async def _wait(self) -> None:
        """After an ``_arrive(True)`` that did not start it: wait in the queue, or raise its refusal.

        What ``__aenter__`` does after the arrival (spelled out there for the hot path), for
        ``admit_all``, whose steps arrive without a coroutine each when they start at once.
        """
        gate = self._gate  # the gate it arrived at (a keyed gate may have moved it)
        if self.status is QUEUED:
            waiter = self._waiter = gate._loop.create_future()  # type: ignore[union-attr]
            parked = gate._parked
            parked.add(self)
            expires = self.deadline if self.max_wait == _INF else queue_deadline(self)
            if gate._rated:
                gate._rearm()
            elif expires < gate._timer_at:
                gate._arm_timer(expires)
            try:
                await waiter
            except BaseException:
                self._waiter = None
                parked.discard(self)
                gate._cancel(self)
                raise
            self._waiter = None
            parked.discard(self)
            status = self.status
            if status is RUNNING:
                return
            if status is DISCONNECTED:
                raise asyncio.CancelledError()
        raise gate._refusal(self)

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

    # -- what a stream needs (boundedgate._streams.StreamPermit) -------------------------------

    @property
    def _loop(self) -> asyncio.AbstractEventLoop | None:
        return self._gate._loop

    def _late(self) -> Late:
        return self._gate._late(self.arrival, self.started, self.ended, self.deadline)  # type: ignore[arg-type]  # it ran

    def __repr__(self) -> str:
        return f"<Permit of {self._gate.name!r}: {self.status.value}>"


def new_permit(gate: GateBase, timeout: float | None, deadline: float, priority: int, cost: float) -> Permit:
    """A permit of ``gate`` that has not arrived yet: what ``admit()`` returns.

    Interpreted, ``__init__`` spelled out after a plain allocation: the type call and its frame
    cost more than the request's whole arrival in the core. Compiled, the type call is the cheap
    way (and ``object.__new__`` is refused for a native class).
    """
    if not _PLAIN_ALLOCATION:  # pragma: no mutate (either way makes the same permit)
        return Permit(_BY_GATE, gate, timeout, deadline, priority, cost)
    self: Permit = _new(Permit)
    self.arrival = None
    self.deadline = deadline
    self.max_wait = _INF
    self.started = None
    self.ended = None
    self.status = NEW
    self.priority = priority
    self.seq = -1
    self.cost = cost
    self._gate = gate
    self._timeout = timeout
    self._waiter = None
    self._handed_over = False
    self._raise_late = True
    return self


def new_held_permit(permit: Permit) -> _HeldPermit:
    """A permit like ``permit`` (made by ``admit()``, not arrived) that gives its slot back if dropped."""
    return _HeldPermit(_BY_GATE, permit._gate, permit._timeout, permit.deadline, permit.priority, permit.cost)


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


_new: Final = object.__new__
_PLAIN_ALLOCATION: Final = allocates_plainly(Permit)

if _PLAIN_ALLOCATION:  # pure: one coroutine, as a refusal raised in it costs no more than any exception
    setattr(Permit, "__aenter__", Permit._entering)  # noqa: B010 - a method replaced, not an attribute

if TYPE_CHECKING:

    def _is_a_stream_permit(permit: Permit) -> StreamPermit:  # mypy checks the contract here
        return permit
