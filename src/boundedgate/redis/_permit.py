"""RedisPermit: one request's claim on a cluster gate, from arrival until its slot is back in Redis."""

from __future__ import annotations

import asyncio
import math
import warnings
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn, Self, TypeVar, final

from .._core import BY_STATUS, Status, check_cost
from .._driver._compat import cancellation_pending, current_task, is_cancelling
from .._errors import Late
from .._streams import StreamPermit
from .._streams._handing import HandsOver
from ._io import UNREACHABLE, fields, text
from ._scripts import ADMIT as _ADMIT

if TYPE_CHECKING:
    from .._driver import Permit
    from ._gate import RedisGate

__all__ = ("RedisPermit",)

NEW = Status.NEW
QUEUED = Status.QUEUED
RUNNING = Status.RUNNING
REJECTED = Status.REJECTED
EXPIRED = Status.EXPIRED
CANCELLED = Status.CANCELLED
COMPLETED = Status.COMPLETED
LATE = Status.LATE
FAILED = Status.FAILED
LEAKED = Status.LEAKED
ABORTED = Status.ABORTED
DISCONNECTED = Status.DISCONNECTED
_INF = math.inf

_GRANTED = "granted"
#: What wakes a waiter whose client went away (also the outcome Redis records).
_DISCONNECTED = "disconnected"

_T = TypeVar("_T")


def _wake(future: asyncio.Future[tuple[str, Any]], what: str, value: Any = None) -> None:
    if not future.done():
        future.set_result((what, value))


@final
class RedisPermit(HandsOver):
    """A request's claim on a :class:`RedisGate`: a cluster slot, held until released.

    It behaves as :class:`~boundedgate.Permit`: ``gate.admit(...)`` returns a permit that has not
    arrived; entering it with ``async with`` is the arrival; leaving the block releases the slot
    and raises :class:`~boundedgate.Late` if the block finished at or after the deadline.
    Releasing is idempotent and synchronous: the permit ends at once, and the release is sent to
    Redis by a task of its own, retried until it lands, which no cancellation of the caller can
    interrupt. The ``async with`` exit sends the release itself and waits for it (at most
    ``op_timeout``; past that, or if the exiting task is cancelled, the release goes on in the
    background as above), so the slot is free cluster-wide when the block has exited.

    The gate holds its permits weakly: a permit that holds a slot and that nothing references any
    more is garbage-collected, warns with a ``ResourceWarning`` naming the gate, and its slot is
    released (counted in ``stats().leaked``, not ``failed``); its lease is renewed no more.

    Attributes:
        arrival: When it arrived, on the loop's clock (None before it has).
        deadline: When it must be done by, on the loop's clock (``math.inf`` for no deadline).
        started: When it got its slot (None if it has not).
        ended: When it reached its outcome (None while it is pending).
        lease_lost: True if, while it held its slot, its lease lapsed in Redis (this process
            stalled or lost Redis for longer than ``lease_ttl``) or Redis forgot it (a restart):
            its slot may have been given to another request meanwhile. It was counted again as
            soon as this process could renew it.
    """

    __slots__ = (
        "__weakref__",
        "_client_left",
        "_first_item",
        "_from_try_admit",
        "_future",
        "_gate",
        "_handed_over",
        "_id",
        "_inner",
        "_queue_by",
        "_raise_late",
        "_status",
        "_timeout",
        "_timer",
        "_token",
        "arrival",
        "deadline",
        "ended",
        "lease_lost",
        "max_wait",
        "started",
    )

    def __init__(self, gate: RedisGate, timeout: float | None, deadline: float) -> None:
        self.arrival: float | None = None
        self.deadline = deadline
        self.started: float | None = None
        self.ended: float | None = None
        self.lease_lost = False
        self._status = NEW
        self._gate = gate
        self._timeout = timeout
        self._id: str | None = None
        self._token: tuple[str, int] | None = None
        self._future: asyncio.Future[tuple[str, Any]] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._inner: Permit | None = None
        self._handed_over = False
        self._first_item: float | None = None  # when its stream gave its first item (loop clock)
        #: The longest it may wait in the queue, in seconds from arrival (``inf``: as its deadline allows).
        self.max_wait = _INF
        # When it must leave the queue if not started: min(deadline, arrival + max_wait).
        self._queue_by = deadline
        self._raise_late = True
        # True from try_admit() until its block is entered: the one entry a running permit allows.
        self._from_try_admit = False
        # True once disconnect() was called while it waited, or while its admission was on its way.
        self._client_left = False

    # -- public API -------------------------------------------------------------------------

    @property
    def gate(self) -> RedisGate:
        """The gate this permit belongs to."""
        return self._gate

    @property
    def status(self) -> Status:
        """Where the request stands (:class:`~boundedgate.Status`); its outcome once it has ended.

        A request refused with :class:`~boundedgate.GateUnavailable` ends ``REJECTED``.
        """
        inner = self._inner
        return self._status if inner is None else inner.status

    @property
    def id(self) -> str | None:
        """The request's id in Redis (``host/pid/random#n``), None before it arrived."""
        return self._id

    @property
    def token(self) -> tuple[str, int] | None:
        """A fencing token ``(epoch, n)`` while it holds a cluster slot, None otherwise.

        ``n`` grows with every grant of the gate within one ``epoch`` (the creation time of the
        gate's state in Redis), so a downstream service can refuse a holder older than one it has
        seen. A permit counted again after losing its lease gets a new token. None for a permit
        admitted through the local fallback gate.
        """
        return self._token

    @property
    def fallback(self) -> bool:
        """True if Redis was unreachable and the permit was admitted by the local fallback gate."""
        return self._inner is not None

    def release(self) -> None:
        """Give the slot back now, as a normal end (completed, or late past the deadline).

        Does nothing if the permit does not hold a slot (not yet admitted, or already released).
        Never raises: the release is sent to Redis in the background and retried until it lands
        (or until the lease has lapsed, which returns the slot too). Call it on the event loop's
        thread.
        """
        self._finish()

    def abort(self) -> None:
        """End the request now as *aborted*: its client went away while it ran.

        As :meth:`Permit.abort <boundedgate.Permit.abort>`: call it once the cancelled work has
        really stopped; it does nothing if the permit holds no slot.
        """
        self._finish(ABORTED)

    def disconnect(self) -> None:
        """Its client went away while it waited: leave the cluster's queue now, as *disconnected*.

        As :meth:`Permit.disconnect <boundedgate.Permit.disconnect>`: the waiting ``async with``
        raises ``CancelledError`` and the place in Redis is taken back. A grant that reached it in
        this loop turn, before its ``async with`` resumed, is given back unused (it passes on),
        as is one that Redis answers to an admission still on its way when the client left.
        Does nothing unless the permit is waiting or on its way to Redis.
        """
        inner = self._inner
        if inner is not None:
            inner.disconnect()
        elif self._id is not None and (self._status is QUEUED or self._status is NEW):
            self._client_left = True  # whatever wakes its entry next, it ends disconnected
            if self._future is not None:
                _wake(self._future, _DISCONNECTED)

    async def __aenter__(self) -> Self:
        if self._status is RUNNING or self._inner is not None:
            if self._from_try_admit:  # it holds its slot already: this is its one block
                self._from_try_admit = False
                return self
            raise RuntimeError(f"{self!r} is already entered; a permit is entered once, by one block")
        await self._arrive(True)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._handed_over:
            return  # a stream owns the slot now and ends it
        inner = self._inner
        if inner is not None:
            await inner.__aexit__(exc_type, exc, tb)
            return
        # The permit ends before any await. The release is sent from this task (no task of its own
        # in the common case); if this task is cancelled, or Redis does not answer within
        # op_timeout, the release goes on in the background, retried until it lands.
        release = self._end_holding(None if exc_type is None else FAILED)
        if release is not None:
            await self._gate._release_here(*release)
        if exc_type is None and self._status is LATE and self._raise_late:
            raise self._gate._late(self)

    def __repr__(self) -> str:
        return f"<RedisPermit of {self._gate.name!r}: {self.status.value}>"

    # -- the stream hand-over (boundedgate's StreamPermit contract) -------------------------

    def settle(self, cost: float) -> None:
        """Accept the request's real cost, for the same call sites as :meth:`Permit.settle`.

        A cluster gate has no rate budget to charge, so this only checks ``cost``.

        Raises:
            TypeError, ValueError: ``cost`` is not a finite number >= 0.
        """
        check_cost(cost)

    def _finish(self, ending: Status | None = None) -> None:
        """End the request now, if it holds a slot: as ``ending`` says, else completed or late.

        Synchronous and idempotent, on the loop's thread: the permit ends at once, and the
        release is sent to Redis by its own task, retried until it lands. On a closed loop (a
        stream collected after its loop ended) nothing can be sent: the lease lapses instead.
        """
        release = self._end_holding(ending)
        if release is not None:
            self._gate._release(*release)

    def _end_holding(self, ending: Status | None) -> tuple[str, str, tuple[float, float] | None] | None:
        """End the request as :meth:`_finish` does; return the release to send, None if there is none."""
        inner = self._inner
        if inner is not None:
            inner._finish(ending)
            return None
        if self._status is not RUNNING:
            return None
        gate = self._gate
        loop: asyncio.AbstractEventLoop = gate._loop  # type: ignore[assignment]
        now = loop.time()
        if ending is not None:
            if not BY_STATUS[ending].ran:
                raise ValueError(f"a running request cannot end as {ending.value}")
            self._status = status = ending
        elif now >= self.deadline:
            self._status = status = LATE
        else:
            self._status = status = COMPLETED
        counters, name = gate._counters, BY_STATUS[status].name
        setattr(counters, name, getattr(counters, name) + 1)
        self.ended = now
        gate._counters.ran(now - self.started, now - self.arrival)  # type: ignore[operator]
        gate._holders.pop(self._id, None)  # type: ignore[arg-type]
        self._token = None
        if loop.is_closed():
            return None
        sample = None
        if gate._controller is not None and (status is COMPLETED or status is LATE):
            ran = now - self.started  # type: ignore[operator]
            first = self._first_item
            sample = (ran, ran if first is None else first - self.started)  # type: ignore[operator]
        return self._id, status.value, sample  # type: ignore[return-value]

    def __del__(self) -> None:
        # The gate holds its permits weakly, so a permit dropped while it holds its slot comes here
        # and its lease is renewed no more. The release is scheduled on the gate's loop, from
        # whichever thread the collector runs in, never made here: see GatedStream.__del__.
        try:
            if self._status is not RUNNING or self._handed_over or self._inner is not None:
                return
        except AttributeError:  # __init__ never ran
            return
        what = "its slot is given back"
        loop = self._gate._loop
        try:
            loop.call_soon_threadsafe(self._leaked)  # type: ignore[union-attr]
        except (AttributeError, RuntimeError):  # no loop, or it closed
            what = "its event loop is closed: its lease lapses"
        warnings.warn(f"unreleased {self!r}: {what}", ResourceWarning, stacklevel=1, source=self)

    def _note_first_item(self) -> None:
        """Its stream gave its first item now: the adaptive controller's sample (time to first token)."""
        if self._first_item is None and self._status is RUNNING:
            self._first_item = self._gate._loop.time()  # type: ignore[union-attr]

    def _leaked(self) -> None:
        """End a permit collected while it held its slot, counted as ``leaked``, and release it."""
        self._finish(LEAKED)

    def _late(self) -> Late:
        """The :class:`~boundedgate.Late` error describing a request that ended ``LATE``."""
        inner = self._inner
        if inner is not None:
            return inner._late()
        return self._gate._late(self)

    @property
    def _loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop that owns the permit's gate (to schedule a release from another thread)."""
        return self._gate._loop

    # -- arrival ----------------------------------------------------------------------------

    async def _arrive(self, wait: bool) -> None:
        """Arrive at the gate now: hold a slot when this returns, or raise why not."""
        if self._status is not NEW or self._id is not None:  # an id: another entry is on its way
            raise RuntimeError(f"{self!r} was already used; call admit() for each request")
        gate = self._gate
        loop = gate._bind()
        task = current_task(loop)
        if task is not None and is_cancelling(task) and cancellation_pending(task):
            self._status = CANCELLED  # refused before it is counted
            raise asyncio.CancelledError()
        now = loop.time()
        self.arrival = now
        if self._timeout is not None:
            self.deadline = now + self._timeout
        deadline = self.deadline
        if deadline <= now:
            self._status = EXPIRED  # refused before it is counted
            self.ended = now
            raise gate._expired(self)
        if self.max_wait != _INF:
            deadline = min(deadline, now + self.max_wait)
        self._queue_by = deadline
        remaining = -1 if deadline == math.inf else math.ceil((deadline - now) * 1000)
        self._id = permit_id = gate._new_id()
        future = self._future = loop.create_future()
        # Registered before the request is sent: a grant message may overtake the reply.
        gate._waiters[permit_id] = self
        try:
            reply = fields(
                await gate._run(
                    _ADMIT,
                    (permit_id, remaining, 1 if wait else 0),
                    min(gate._op_timeout, deadline - now),
                )
            )
        except BaseException as error:
            del gate._waiters[permit_id]
            self._future = None
            await self._not_admitted(error, wait)
            return
        state, (value, running, waiting, epoch) = int(reply[0]), reply[1:5]
        gate._seen(running, waiting, epoch)
        if len(reply) > 5:  # its sweep handed slots to others of this process's waiters
            gate._handed(reply, 5)
        if state == 1:
            del gate._waiters[permit_id]
            self._future = None
            self._start(value)
            return
        if state != 2:
            del gate._waiters[permit_id]
            self._future = None
            if state == 3:
                self._end(REJECTED)
                gate._counters.rejected += 1
                raise gate._refused(self, int(running), int(waiting), int(value) / 1000)
            self._end(REJECTED)  # an outcome already recorded for a fresh id: state was lost
            gate._counters.unavailable += 1
            raise gate._unavailable(0.0, self.ended - now, "waiter_lease_lost")  # type: ignore[operator]
        await self._wait(future)

    async def _not_admitted(self, error: BaseException, wait: bool) -> None:
        """The admission call failed: re-raise, or raise the typed refusal, or use the fallback."""
        gate = self._gate
        permit_id: str = self._id  # type: ignore[assignment]
        if self._client_left and isinstance(error, (asyncio.CancelledError, *UNREACHABLE)):
            self._disconnected()  # its client left while Redis was being asked: nobody to admit
        if isinstance(error, asyncio.CancelledError):
            # The admission may have landed: take it back. It arrived here, so it counts here, as a
            # request cancelled while it waits does (whether or not Redis had heard of it yet).
            gate._abandon(permit_id, "cancelled")
            gate._counters.cancelled += 1
            self._end(CANCELLED)
            raise error
        if not isinstance(error, UNREACHABLE):
            raise error
        if gate._loop.time() >= self._queue_by:  # type: ignore[union-attr]
            gate._abandon(permit_id, "expired")
            self._end(EXPIRED)
            gate._counters.expired += 1
            raise gate._expired(self) from error
        gate._abandon(permit_id, "unavailable")
        fallback = gate._fallback
        if fallback is not None:
            await self._fall_back(fallback, wait)
            return
        self._end(REJECTED)
        gate._counters.unavailable += 1
        elapsed = self.ended - self.arrival  # type: ignore[operator]
        raise gate._unavailable(0.0, elapsed, "unreachable") from error

    async def _wait(self, future: asyncio.Future[tuple[str, Any]]) -> None:
        """Wait in the cluster's queue until granted, expired or cancelled."""
        gate = self._gate
        loop = gate._loop
        self._status = QUEUED
        gate._waiting += 1
        counters = gate._counters
        # A waiter granted in Redis that has not heard of it yet is counted here still, while a
        # newcomer may hold its place there: the queue never held more than Q.
        here = gate._waiting
        limit = gate._max_waiting
        if limit is not None and here > limit:
            here = limit
        if here > counters.peak_waiting:
            counters.peak_waiting = here
        gate._background.watch()
        if self._queue_by != math.inf and not future.done():
            self._timer = loop.call_at(self._queue_by, _wake, future, "deadline")  # type: ignore[union-attr]
        try:
            what, value = await future
        except asyncio.CancelledError:
            # Cancelled while waiting, or in the same turn as a grant reached it: either way the
            # cancellation script takes back the place or passes the unused slot on.
            self._leave()
            if self._client_left:
                self._disconnected()
            gate._abandon(self._id, "cancelled")  # type: ignore[arg-type]
            counters.cancelled += 1
            self._end(CANCELLED)
            raise
        self._leave()
        if what == _DISCONNECTED or self._client_left:  # a grant in the turn its client left: unused
            self._disconnected()
        now = loop.time()  # type: ignore[union-attr]
        if what == _GRANTED and now < self._queue_by:
            counters.waited(now - self.arrival)  # type: ignore[operator]
            self._start(value)
            return
        counters.waited(now - self.arrival)  # type: ignore[operator]
        if what in (_GRANTED, "deadline", "expired"):
            # Never start at or after the deadline: a grant that arrives then passes the slot on.
            if what != "expired":
                gate._abandon(self._id, "expired")  # type: ignore[arg-type]
            counters.expired += 1
            self._end(EXPIRED)
            raise gate._expired(self)
        counters.unavailable += 1
        self._end(REJECTED)
        waited = self.ended - self.arrival  # type: ignore[operator]
        if what == "unreachable":
            raise gate._unavailable(waited, waited, "unreachable") from value
        raise gate._unavailable(waited, waited, "waiter_lease_lost")

    def _disconnected(self) -> NoReturn:
        """End a request whose client left before it used a slot: its place or slot goes back in Redis."""
        self._gate._abandon(self._id, _DISCONNECTED)  # type: ignore[arg-type]
        self._gate._counters.disconnected += 1
        self._end(DISCONNECTED)
        raise asyncio.CancelledError()

    def _disconnect_unused(self) -> None:
        """End a running permit whose request never used its slot, as *disconnected*.

        For a server whose client left while the request was held back further on (queued at
        another gate inside): the slot goes back unused, as a grant nobody took up (Redis takes
        the admission back, no run time is counted here), and passes on.
        """
        if self._status is not RUNNING:
            return
        gate = self._gate
        gate._holders.pop(self._id, None)  # type: ignore[arg-type]
        self._token = None
        self.started = None
        gate._counters.admitted -= 1
        gate._counters.disconnected += 1
        self._end(DISCONNECTED)
        gate._abandon(self._id, _DISCONNECTED)  # type: ignore[arg-type]

    def _leave(self) -> None:
        gate = self._gate
        del gate._waiters[self._id]  # type: ignore[arg-type]
        gate._waiting -= 1
        self._future = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _start(self, token: object) -> None:
        if self._client_left:  # granted at once, after its client left: the slot passes on unused
            self._disconnected()
        gate = self._gate
        self._status = RUNNING
        self.started = gate._loop.time()  # type: ignore[union-attr]
        self._token = (gate._epoch or "", int(text(token)))
        gate._holders[self._id] = self  # type: ignore[index]
        counters = gate._counters
        counters.admitted += 1
        if len(gate._holders) > counters.peak_running:
            counters.peak_running = len(gate._holders)
        gate._background.watch()

    def _end(self, status: Status) -> None:
        self._status = status
        self.ended = self._gate._loop.time()  # type: ignore[union-attr]

    async def _fall_back(self, fallback: Any, wait: bool) -> None:
        deadline = None if self.deadline == math.inf else self.deadline
        self._gate._counters.fallbacks += 1
        if not wait:
            self._inner = fallback.try_admit(deadline=deadline)
            return
        max_wait = None if self.max_wait == _INF else self.max_wait
        self._inner = inner = fallback.admit(
            deadline=deadline, max_wait=max_wait, raise_late=self._raise_late
        )
        await inner.__aenter__()

    def _granted(self, token: object) -> None:
        """A message or a poll says Redis granted this waiter a slot."""
        future = self._future
        if future is not None:
            _wake(future, _GRANTED, token)

    def _told(self, what: str, value: Any = None) -> None:
        """A poll says how this waiter's place ended (expired, lapsed, ...) or that Redis is out of reach."""
        future = self._future
        if future is not None:
            _wake(future, what, value)


if TYPE_CHECKING:

    def _is_a_stream_permit(permit: RedisPermit) -> StreamPermit:  # mypy checks the contract here
        return permit
