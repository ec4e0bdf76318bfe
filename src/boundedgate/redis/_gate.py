"""RedisGate: one limit for the whole cluster, with the API of :class:`~boundedgate.BoundedGate`.

The decisions are taken in Redis by the Lua scripts (see ``lua/prelude.lua``). This class is the
public face, and composes the parts that do the work: this process's side of the gate
(:mod:`._process`: its settings, its tables of holders and waiters, its counters, the calls it
sends and the refusals it builds), its permits (:mod:`._permit`), its background work
(:mod:`._background`: leases renewed, waiters polled, grants heard) and its adaptive controller
(:mod:`._adaptive`). Each of them works through the side alone.
"""

from __future__ import annotations

import functools
import math
from types import EllipsisType
from typing import TYPE_CHECKING, Any, Never, NoReturn, final

from .._core import (
    MAX_PAUSE,
    SIGNALS,
    Adaptive,
    AdaptiveLimit,
    check_count,
    check_flag,
    check_max_running,
    check_max_wait,
    check_max_waiting,
    check_name,
    check_pause,
    check_positive,
    check_timeout,
    provider_pause,
    shown,
)
from .._core import check_deadline as _check_deadline
from .._streams import StreamOpener, StreamSource, StreamT
from . import _scripts
from ._adaptive import ClusterController
from ._background import Background
from ._inspect import read_cluster
from ._io import UNREACHABLE, pooled
from ._lacking import no_attribute, not_implemented, refuse_arguments
from ._permit import RedisPermit
from ._process import ProcessSide, ms
from ._stats import ClusterStatistics, RedisGateStatistics

if TYPE_CHECKING:
    from types import TracebackType
    from typing import Self

    from .._driver import BoundedGate

__all__ = ("RedisGate",)

_INF = math.inf

#: The largest count the scripts hold exactly: Lua's numbers are doubles (Redis 7's and before).
_LUA_COUNT = 2**53


def _cluster_limits(max_running: object, max_waiting: object) -> tuple[int, int | None]:
    """C and Q as the scripts can hold them: ``check_max_running``'s, up to 2**53 (Lua's doubles)."""
    running = check_count("max_running", check_max_running(max_running), 1, most=_LUA_COUNT)
    waiting = check_max_waiting(max_waiting)
    if waiting is not None:
        check_count("max_waiting", waiting, 0, "an unbounded queue", most=_LUA_COUNT)
    return running, waiting


@final
class RedisGate:
    """At most ``max_running`` requests running and ``max_waiting`` waiting across every process.

    ::

        client = redis.asyncio.Redis.from_url("redis://redis:6379/0")
        gate = RedisGate(client, max_running=50, max_waiting=100, name="openai")

        async with gate.admit(timeout=30):
            reply = await openai_client.chat.completions.create(...)

    The same API and outcomes as :class:`~boundedgate.BoundedGate`, enforced by one Redis primary
    for every process that uses the same ``name``: each admission, release and cancellation is one
    atomic Lua script; waiters are served in order of their arrival at Redis, and a freed slot is
    handed to the oldest live waiter inside the script that freed it. A holder keeps its slot by a
    lease on the Redis server's clock, renewed by this process every ``lease_ttl / 3``; if the
    process dies, the slot comes back within ``lease_ttl``. A waiter keeps its place by renewing it
    every ``poll_interval``; if its process dies, its place frees within ``waiter_ttl``. Grants are
    recorded in Redis and announced on a pub/sub channel; the announcement only makes them fast,
    since every waiter also polls.

    Deadlines (``QueueExpired``, ``Late``) are measured on the caller's event-loop clock, as
    in-process. When Redis cannot be reached, the gate fails closed with
    :class:`~boundedgate.GateUnavailable`, unless a ``fallback`` gate was given.

    The gate binds to the event loop that first uses it, like the client it is given. Close it
    with :meth:`aclose` (or ``async with``) to stop its background work; the client stays yours.
    Lease renewals and wake-up messages use connections of the gate's own, made with the client's
    connection settings, so that the process's own traffic can never starve them. Admissions,
    releases and cancellations go through the client's ``execute_command``, with its retries.

    On Redis 7 and later the scripts run as functions of one library, loaded once per server and
    again if the server lost it; older servers, cluster clients and clients whose ACL refuses
    functions run them with ``EVALSHA`` (see docs/cluster.md, "How it works").

    Args:
        client: A ``redis.asyncio.Redis`` client (decoded responses or not).
        max_running: Running slots, cluster-wide, an int >= 1.
        max_waiting: Queue places, cluster-wide, an int >= 0, or None for an unbounded queue.
        name: The gate's name: processes that give the same name share the gate.
        lease_ttl: Seconds a holder's slot survives without a renewal from its process.
        poll_interval: Seconds between polls of a waiting process (the longest a lost wake-up
            message can delay a grant).
        waiter_ttl: Seconds a waiter's place survives without a renewal from its process
            (default: ``max(4 * poll_interval, 1)``); must exceed ``poll_interval``.
        op_timeout: Seconds to wait for Redis to answer one call before failing closed, a wait
            for a free connection in the client's pool included (a full pool is this process's
            own traffic, not an outage).
        idle_ttl: Seconds the gate's keys outlive its last use in Redis.
        fallback: A local gate to admit through when Redis is unreachable, instead of raising
            ``GateUnavailable``; each such admission is counted in ``stats().fallbacks``.
        adaptive: Learn the cluster's C from provider signals and latency (see :meth:`signal`
            and docs/adaptive.md): every process's controller proposes, Redis applies, as one.
        **lacking: A ``BoundedGate``'s setting that a RedisGate lacks (``priorities=``,
            ``rate_limits=``...): refused, with the way out.

    Raises:
        TypeError: A limit that is not an int, a duration that is not a number, a name that is
            not a str.
        ValueError: A limit out of range (beyond 2**53: the scripts count in Lua's doubles), a
            duration <= 0 or infinite (or an int beyond a float's range), or ``waiter_ttl`` not
            above ``poll_interval``.

    What a ``BoundedGate`` has and a ``RedisGate`` lacks (priorities, rate limits, observers,
    ``adapt()``) is refused with the way out: a ``TypeError`` for an argument, a
    ``NotImplementedError`` for a method, an ``AttributeError`` for an attribute (see
    docs/cluster.md, "What RedisGate does not have").
    """

    __slots__ = ("_controller", "_side")

    def __init__(
        self,
        client: Any,
        *,
        max_running: int,
        max_waiting: int | None,
        name: str = "gate",
        lease_ttl: float = 10.0,
        poll_interval: float = 0.5,
        waiter_ttl: float | None = None,
        op_timeout: float = 2.0,
        idle_ttl: float = 86400.0,
        fallback: BoundedGate | None = None,
        adaptive: Adaptive | None = None,
        **lacking: Never,
    ) -> None:
        if lacking:  # a BoundedGate's setting it has not (priorities=, rate_limits=...): say so
            raise refuse_arguments("RedisGate.__init__", lacking)
        # Checked in the order of the arguments: the first bad one is the one named.
        running, waiting = _cluster_limits(max_running, max_waiting)
        name = check_name(name)
        lease = check_positive("lease_ttl", lease_ttl)
        poll = check_positive("poll_interval", poll_interval)
        waiter = max(4 * poll, 1.0) if waiter_ttl is None else check_positive("waiter_ttl", waiter_ttl)
        if waiter <= poll:
            raise ValueError(f"waiter_ttl ({waiter_ttl}) must exceed poll_interval ({poll_interval})")
        operation = check_positive("op_timeout", op_timeout)
        idle = check_positive("idle_ttl", idle_ttl)
        if adaptive is not None and not isinstance(adaptive, Adaptive):
            raise TypeError(f"adaptive must be an Adaptive, got {shown(adaptive)}")
        self._side = side = ProcessSide(
            client,
            name=name,
            max_running=running,
            max_waiting=waiting,
            lease_ttl=lease,
            poll_interval=poll,
            waiter_ttl=waiter,
            op_timeout=operation,
            idle_ttl=idle,
            fallback=fallback,
            background=Background,
        )
        self._controller = None if adaptive is None else ClusterController(side, adaptive)
        side.controller = self._controller

    # -- public API -------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The gate's name, shared by every process that uses the same gate."""
        return self._side.name

    @property
    def client(self) -> Any:
        """The Redis client the gate talks through."""
        return self._side.client

    @property
    def max_running(self) -> int:
        """Running slots (C), cluster-wide."""
        return self._side.max_running

    @property
    def max_waiting(self) -> int | None:
        """Queue places (Q), cluster-wide; None when the queue is unbounded."""
        return self._side.max_waiting

    @property
    def running(self) -> int:
        """Slots held by this process now."""
        return len(self._side.holders)

    @property
    def waiting(self) -> int:
        """Requests of this process in the queue now."""
        return self._side.waiting

    @property
    def cluster_running(self) -> int:
        """Slots held across the cluster, as this process last heard from Redis (no round trip).

        Every reply Redis gives this process carries the cluster's counts: its admissions,
        releases and cancellations, and its background sync (every ``poll_interval`` while it
        waits, ``lease_ttl / 3`` while it only holds). So this is as recent as this process's
        last such exchange: current while it is busy, older while it is idle (0 before the
        first). :meth:`cluster_stats` reads the cluster now, for a round trip.
        """
        return self._side.last_running

    @property
    def cluster_waiting(self) -> int:
        """Requests in the cluster's queue, as this process last heard from Redis (as ``cluster_running``)."""
        return self._side.last_waiting

    @property
    def process(self) -> str:
        """The id of this gate object in Redis (``host/pid/random``), as :meth:`cluster_stats` shows it."""
        return self._side.agent

    def admit(
        self,
        *,
        timeout: float | None = None,
        deadline: float | None = None,
        max_wait: float | None = None,
        raise_late: bool = True,
        **lacking: Never,
    ) -> RedisPermit:
        """A permit for one request, to enter with ``async with``; entering it is the arrival.

        As :meth:`BoundedGate.admit <boundedgate.BoundedGate.admit>`: on entry the request starts
        at once if a slot is free and nobody waits, anywhere in the cluster; or waits in the
        cluster's queue (FIFO by arrival at Redis) if there is room; or is refused. On exit the
        slot is released; a body that raised propagates its own exception, one that finished at
        or after the deadline raises :class:`~boundedgate.Late`.

        Args:
            timeout: Budget in seconds from arrival (>= 0), covering the wait and the run.
            deadline: Absolute deadline on the running loop's clock (``loop.time()``).
                Give at most one of the two; neither means no deadline.
            max_wait: A queue budget in seconds from arrival (>= 0), as for ``BoundedGate``: a
                request still queued at ``min(deadline, arrival + max_wait)`` leaves with
                :class:`~boundedgate.QueueExpired`; once it runs only the deadline counts.
            raise_late: False to count a block that finished late without raising ``Late``.
            **lacking: A ``BoundedGate``'s ``priority=`` or ``cost=``: refused, with the way out.

        Raises (on entry):
            QueueFull: Every slot busy and the queue full, after one round trip to Redis.
            QueueExpired: The deadline passed while waiting, or had passed on arrival.
            GateUnavailable: Redis could not be reached in time (and no fallback was given), or
                this process could not keep its place in the queue.
            asyncio.CancelledError: The caller was cancelled while waiting, or was already
                cancelled on arrival (then nothing was counted).

        Raises (at once):
            TypeError, ValueError: A malformed timeout, deadline or max_wait, both a timeout and a
                deadline, or a raise_late that is not True or False; a ``BoundedGate``'s
                ``priority=`` or ``cost=``, which a RedisGate lacks.
        """
        if lacking:
            raise refuse_arguments("RedisGate.admit", lacking)
        if deadline is None:
            permit = RedisPermit(self, self._side, None if timeout is None else check_timeout(timeout), _INF)
        elif timeout is not None:
            raise ValueError("give timeout or deadline, not both")
        else:
            permit = RedisPermit(self, self._side, None, _check_deadline(deadline))
        if max_wait is not None:
            permit.max_wait = check_max_wait(max_wait)
        permit._raise_late = check_flag("raise_late", raise_late)
        return permit

    async def try_admit(
        self, *, timeout: float | None = None, deadline: float | None = None, **lacking: Never
    ) -> RedisPermit:
        """A permit that holds a slot now, or :class:`~boundedgate.QueueFull` now; it never waits.

        The one difference from :meth:`BoundedGate.try_admit <boundedgate.BoundedGate.try_admit>`:
        asking Redis takes a round trip, so this is a coroutine. It never jumps the queue. Release
        the permit with :meth:`RedisPermit.release` or by entering and leaving it with ``async with``.

        Raises:
            QueueFull: The request cannot start at once (no free slot, or others are queued).
            QueueExpired: The deadline had already passed (nothing was counted).
            GateUnavailable: Redis could not be reached in time (and no fallback was given).
            asyncio.CancelledError: The calling task is being cancelled.
            TypeError: A ``BoundedGate``'s ``cost=``, which a RedisGate lacks.
        """
        if lacking:
            raise refuse_arguments("RedisGate.try_admit", lacking)
        permit = self.admit(timeout=timeout, deadline=deadline)
        await permit._arrive(False)
        permit._from_try_admit = True
        return permit

    def stream(
        self,
        source: StreamSource[StreamT],
        *,
        timeout: float | None = None,
        deadline: float | None = None,
        max_wait: float | None = None,
        raise_late: bool = True,
        **lacking: Never,
    ) -> StreamOpener[StreamT]:
        """Admit a request, open a stream, and hand the stream the cluster slot.

        As :meth:`BoundedGate.stream <boundedgate.BoundedGate.stream>`: await the opener, or enter
        it with ``async with`` (which closes the stream on exit). The slot stays taken in Redis,
        its lease renewed, until the stream ends.

        Raises (when awaited or entered):
            QueueFull, QueueExpired, GateUnavailable, asyncio.CancelledError: As for
                :meth:`admit`; nothing was opened.
            Exception: Whatever opening the stream raised; the slot was released as failed.

        Raises (at once):
            TypeError, ValueError: A malformed timeout, deadline or max_wait, both a timeout and a
                deadline, or a raise_late that is not True or False; a ``BoundedGate``'s
                ``priority=`` or ``cost=``, which a RedisGate lacks.
        """
        if lacking:
            raise refuse_arguments("RedisGate.stream", lacking)
        permit = self.admit(timeout=timeout, deadline=deadline, max_wait=max_wait)
        return StreamOpener(permit, source, raise_late)

    def stats(self) -> RedisGateStatistics:
        """Statistics of the requests of this process through the gate (see :class:`RedisGateStatistics`)."""
        return self._side.stats()

    async def set_limits(
        self,
        *,
        max_running: int | EllipsisType = ...,
        max_waiting: int | EllipsisType | None = ...,
    ) -> None:
        """Change C and/or Q for the whole cluster, now; a limit not given stays as it is.

        The new limits are written to the gate's state in Redis and every process's scripts use
        them from their next step on, whatever limits each process was constructed with: raising C
        hands free slots to the oldest waiters at once (they are woken), lowering it interrupts no
        holder (the excess drains), lowering Q drops no waiter (no arrival queues until the queue
        is below it). They last as long as the gate's state in Redis (until ``idle_ttl`` after its
        last use; then the constructors' limits apply again). Counted in the cluster counters as
        ``limit_changes``. This process's ``max_running``/``max_waiting`` (and its errors) show the
        new limits at once; another process's show its own until it sets them too (the scripts
        decide by the cluster's).

        Raises:
            TypeError, ValueError: A limit the constructor would refuse (nothing changed).
            redis.exceptions.RedisError: Redis could not be reached within ``op_timeout``.
        """
        side = self._side
        running, waiting = _cluster_limits(
            side.max_running if max_running is ... else max_running,
            side.max_waiting if max_waiting is ... else max_waiting,
        )
        reply = await side.run(
            _scripts.LIMITS,
            (
                "" if max_running is ... else running,
                "" if max_waiting is ... else (-1 if waiting is None else waiting),
            ),
        )
        side.seen(reply[0], reply[1], reply[2])
        side.set_limits(running, waiting)
        controller = self._controller
        if controller is not None and max_running is not ...:
            controller.limit.adopt(running, side.bind().time())

    @property
    def controller(self) -> AdaptiveLimit | None:
        """The adaptive controller of this process (None without ``adaptive=``).

        Its ``limit`` follows the cluster's C (every reply about C brings it in line); its
        ``cuts``, ``suppressed`` and ``grown`` count what the cluster applied of this process's
        signals and windows; ``cluster_stats().counters`` counts them for every process.
        """
        controller = self._controller
        return None if controller is None else controller.limit

    async def pause(self, seconds: float) -> None:
        """Start no request anywhere in the cluster for ``seconds`` from now (a rate-limit reset).

        As :meth:`BoundedGate.pause <boundedgate.BoundedGate.pause>`, cluster-wide: the pause is
        stored in Redis and every process's admissions honour it (arrivals queue up to Q or are
        refused, queued requests expire as usual, running ones run on); C is unchanged. A shorter
        pause than one in force changes nothing. When it ends, the oldest waiters start at the
        next step of the gate in Redis (within ``poll_interval``, the waiters' own poll). Counted
        in the cluster counters as ``pauses``.

        Raises:
            TypeError, ValueError: ``seconds`` is not a finite number >= 0 (a pause always ends).
            redis.exceptions.RedisError: Redis could not be reached within ``op_timeout``.
        """
        seconds = check_pause(seconds)
        if seconds > 0:
            reply = await self._side.adapt(("pause", ms(seconds), 0, 1, 1, 0, 0))
            self._side.seen(reply[2], reply[3], reply[4])

    async def signal(
        self, kind: str, *, retry_after: float | None = None, max_pause: float = MAX_PAUSE
    ) -> None:
        """Tell the cluster what the provider answered: ``rate_limited``, ``overloaded`` or ``ignored``.

        A coroutine (it writes to Redis). As :meth:`BoundedGate.signal
        <boundedgate.BoundedGate.signal>`, for every process at once: ``rate_limited`` with
        ``retry_after`` pauses new starts cluster-wide until the reset, for at most ``max_pause``
        seconds (:meth:`pause`), and leaves C
        alone; ``overloaded`` has the cluster's C cut by the adaptive controller, unless the
        cluster cut it within the window, whichever process did (without a controller it changes
        nothing); ``ignored`` is not congestion. See docs/adaptive.md for the rule.

        Raises:
            ValueError: An unknown kind.
            TypeError, ValueError: ``retry_after`` or ``max_pause`` is not a finite number >= 0
                (nothing changed).
            redis.exceptions.RedisError: Redis could not be reached within ``op_timeout``.
        """
        if kind not in SIGNALS:
            raise ValueError(f"unknown signal {kind!r}; expected one of {sorted(SIGNALS)}")
        pause = provider_pause(retry_after, max_pause)
        if kind == "rate_limited":
            if pause > 0:
                await self.pause(pause)
            return
        controller = self._controller
        if kind == "overloaded" and controller is not None:
            self._side.bind()
            await controller.overloaded()

    async def cluster_stats(self) -> ClusterStatistics:
        """The cluster's view, read from Redis: holders with their leases, waiters, counters.

        Raises:
            GateUnavailable: Redis could not be reached in time.
        """
        side = self._side
        try:
            call = functools.partial(read_cluster, side.client, side.name)
            return await pooled(call, side.op_timeout)
        except UNREACHABLE as error:
            raise side.unavailable(0.0, 0.0, "unreachable") from error

    def observe(self, callback: Any) -> NoReturn:
        """Not there yet: no observer hook; raises ``NotImplementedError`` with the way out."""
        raise not_implemented("observe")

    def unobserve(self, callback: Any) -> NoReturn:
        """Not there yet, as :meth:`observe`; raises ``NotImplementedError`` with the way out."""
        raise not_implemented("unobserve")

    def adapt(self, settings: Adaptive | None = None) -> NoReturn:
        """Not here: give the controller at construction, ``RedisGate(..., adaptive=Adaptive(...))``.

        Raises ``NotImplementedError`` saying so.
        """
        raise not_implemented("adapt")

    if not TYPE_CHECKING:  # at run time only: a type checker still flags a misspelt attribute

        def __getattr__(self, name: str) -> NoReturn:
            raise no_attribute(self, name)  # what a BoundedGate has and this lacks says the way out

    async def aclose(self) -> None:
        """Stop the gate's background work, after the releases and cancellations still in flight.

        Those get ``op_timeout`` to land; any still retrying then (Redis is out of reach) is
        abandoned, and its lease or queue place lapses in Redis instead. Permits still held stop
        being renewed: their slots come back within ``lease_ttl``. The client is not closed.
        """
        await self._side.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return repr(self._side)
