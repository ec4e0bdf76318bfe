"""RedisGate and RedisPermit: one limit for the whole cluster, with the API of BoundedGate's.

The decisions are taken in Redis by the Lua scripts (see ``lua/prelude.lua``). The gate is the
public face, and composes the parts that do the work: this process's side of the gate
(:mod:`._process`: its settings, its tables of holders and waiters, its counters, the calls it
sends and the refusals it builds), its permits (here: a request's claim, from arrival until its
slot is back in Redis), its background work (:mod:`._background`: leases renewed, waiters polled,
grants heard) and its adaptive controller (:mod:`._adaptive`). Each of them works through the side
alone. The gate and its permit share this module as a container and its element do: each is typed
for the other (``gate.admit() -> RedisPermit``, ``permit.gate -> RedisGate``).
"""

from __future__ import annotations

import asyncio
import functools
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from types import EllipsisType, TracebackType
from typing import TYPE_CHECKING, Any, Never, NoReturn, Self, TypeVar, final

import redis.asyncio

from .._core import (
    MAX_PAUSE,
    SIGNALS,
    Adaptive,
    AdaptiveLimit,
    RateLimit,
    Status,
    check_cost,
    check_count,
    check_flag,
    check_max_running,
    check_max_wait,
    check_max_waiting,
    check_name,
    check_pause,
    check_positive,
    check_remaining,
    check_timeout,
    ended_as,
    provider_pause,
    shown,
)
from .._core import check_deadline as _check_deadline
from .._driver import Cutter, Observer, Observers, cancellation_pending, check_on_deadline, log_event
from .._errors import DeadlineCut, Infeasible, Late
from .._streams import HandsOver, StreamOpener, StreamPermit, StreamSource, StreamT
from . import _buckets, _scripts
from ._adaptive import ClusterController
from ._background import Background
from ._inspect import read_cluster
from ._io import UNREACHABLE, fields, pooled, text
from ._lacking import no_attribute, refuse_arguments
from ._process import Ending, Field, ProcessSide, Sample, ms
from ._records import record_of
from ._stats import ClusterStatistics, RedisGateStatistics

if TYPE_CHECKING:
    from .._driver import BoundedGate, Permit
    from ._metrics import ClusterFeed

__all__ = ("RedisGate", "RedisPermit")

_INF = math.inf

#: The largest count the scripts hold exactly: Lua's numbers are doubles (Redis 7's and before).
_LUA_COUNT = 2**53


def _cluster_limits(max_running: object, max_waiting: object, rated: bool = False) -> tuple[int, int | None]:
    """C and Q as the scripts can hold them: ``check_max_running``'s, up to 2**53 (Lua's doubles).

    With rate limits (``rated``), ``max_running=None`` is no limit on running: C is 2**53.
    """
    if max_running is None and rated:
        max_running = _LUA_COUNT
    running = check_count("max_running", check_max_running(max_running), 1, most=_LUA_COUNT)
    waiting = check_max_waiting(max_waiting)
    if waiting is not None:
        check_count("max_waiting", waiting, 0, "an unbounded queue", most=_LUA_COUNT)
    return running, waiting


def _wait_setting(
    client: Any, replicas: object, timeout: object, op_timeout: float
) -> tuple[int, int] | None:
    """``(replicas, milliseconds)`` for a ``WAIT`` after every call, or None for none."""
    count = check_count("wait_replicas", replicas, 0)
    seconds = check_positive("wait_timeout", timeout)
    if seconds >= op_timeout:
        raise ValueError(
            f"wait_timeout ({timeout}) must be below op_timeout ({op_timeout}): a WAIT that outlasts "
            "the call would make every shortfall look like an unreachable Redis"
        )
    if count == 0:
        return None
    if not isinstance(client, redis.asyncio.Redis):
        raise ValueError(
            f"wait_replicas needs a redis.asyncio.Redis client, got {type(client).__name__}: WAIT must "
            "follow the call on its connection, which a cluster client does not promise; leave it at 0"
        )
    return count, max(1, ms(seconds))


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
    lease on the Redis server's clock, renewed by this process every ``lease_ttl / 3`` from a
    thread of the gate's own, so a busy event loop cannot delay it (a loop stuck for ``max_stall``
    can: then its leases are let go); if the process dies, the slot comes back within
    ``lease_ttl``. A waiter keeps its place by renewing it every ``poll_interval``; if its process
    dies, its place frees within ``waiter_ttl``. Grants are recorded in Redis and announced on a
    pub/sub channel; the announcement only makes them fast, since every waiter also polls.

    Deadlines (``QueueExpired``, ``Late``) are measured on the caller's event-loop clock, as
    in-process. When Redis cannot be reached, the gate fails closed with
    :class:`~boundedgate.GateUnavailable`, unless a ``fallback`` gate was given.

    The gate binds to the event loop that first uses it, like the client it is given. Close it
    with :meth:`aclose` (or ``async with``) to stop its background work; the client stays yours.
    Lease renewals and wake-up messages use connections of the gate's own, made with the client's
    connection settings, so that the process's own traffic can never starve them; the renewal
    thread runs while this process holds slots, and :meth:`aclose` ends it. Admissions,
    releases and cancellations go through the client's ``execute_command``, with its retries.

    On Redis 7 and later the scripts run as functions of one library, loaded once per server and
    again if the server lost it; older servers, cluster clients and clients whose ACL refuses
    functions run them with ``EVALSHA`` (see docs/cluster.md, "How it works").

    Args:
        client: A ``redis.asyncio.Redis`` client (decoded responses or not).
        max_running: Running slots, cluster-wide, an int >= 1, or None for no limit on running
            (a pure rate limiter: ``rate_limits`` are then required).
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
        max_stall: Seconds a callback of the renewal thread may wait in this process's event
            loop before the thread takes the loop for stuck and stops renewing its leases (they
            then lapse within ``lease_ttl``), as Kafka's ``max.poll.interval.ms`` bounds a
            consumer whose heartbeat thread lives on. A loop merely busy, whose turns (every
            ready callback run once) take less than half of this, keeps its leases.
        fallback: A local gate to admit through when Redis is unreachable, instead of raising
            ``GateUnavailable``; each such admission is counted in ``stats().fallbacks``.
        adaptive: Learn the cluster's C from provider signals and latency (see :meth:`signal`
            and docs/adaptive.md): every process's controller proposes, Redis applies, as one.
        wait_replicas: After every call that changes the gate's state, wait (Redis ``WAIT``, in
            the same round trip) until this many replicas have its writes, so that a failover
            loses fewer grants; 0 (the default) does not wait. An admission whose grant fewer
            replicas acknowledged within ``wait_timeout`` is given back and refused with
            ``GateUnavailable`` (reason ``"unreplicated"``); every shortfall is counted in
            ``stats().unreplicated``. Needs a ``redis.asyncio.Redis`` client (not a cluster client).
        wait_timeout: Seconds ``WAIT`` may take (default 0.1), less than ``op_timeout``.
        rate_limits: Token buckets (:class:`~boundedgate.RateLimit`) shared by every process of
            the gate, kept in Redis on the server's clock, with the in-process rules: see
            docs/cluster.md, "Rate limits across the cluster". Give every process the same list.
        feasible: Deadline-feasible admission, as ``BoundedGate``'s: refuse at arrival, with
            :class:`~boundedgate.Infeasible`, a request that would queue and that, by the
            cluster's recent pace (kept in Redis, on the server's clock), could not start before
            its queue deadline or finish a long run (two recent runs) later before its deadline.
            Give every process of the gate the same (a process without it does not feed the pace).
        **lacking: A ``BoundedGate``'s setting that a RedisGate lacks (``priorities=``...):
            refused, with the way out.

    Raises:
        TypeError: A limit that is not an int, a duration that is not a number, a name that is
            not a str, ``rate_limits`` that are not ``RateLimit`` objects, ``feasible`` that is
            not True or False, or ``max_running=None`` without rate limits.
        ValueError: A limit out of range (beyond 2**53: the scripts count in Lua's doubles), a
            duration <= 0 or infinite (or an int beyond a float's range), ``waiter_ttl`` not
            above ``poll_interval``, ``wait_timeout`` not below ``op_timeout``, or
            ``wait_replicas`` with a client other than a ``redis.asyncio.Redis``.

    What a ``BoundedGate`` has and a ``RedisGate`` lacks (priorities, deadline order) is refused
    with the way out: a ``TypeError`` for an argument, a ``NotImplementedError`` for a
    method, an ``AttributeError`` for an attribute (see
    docs/cluster.md, "What RedisGate does not have").
    """

    __slots__ = ("__weakref__", "_controller", "_feed", "_observers", "_side", "_unlimited")

    def __init__(
        self,
        client: Any,
        *,
        max_running: int | None,
        max_waiting: int | None,
        name: str = "gate",
        lease_ttl: float = 10.0,
        poll_interval: float = 0.5,
        waiter_ttl: float | None = None,
        op_timeout: float = 2.0,
        idle_ttl: float = 86400.0,
        max_stall: float = 60.0,
        fallback: BoundedGate | None = None,
        adaptive: Adaptive | None = None,
        wait_replicas: int = 0,
        wait_timeout: float = 0.1,
        rate_limits: Sequence[RateLimit] = (),
        feasible: bool = False,
        **lacking: Never,
    ) -> None:
        if lacking:  # a BoundedGate's setting it has not (priorities=...): say so
            raise refuse_arguments("RedisGate.__init__", lacking)
        limits = _buckets.check_limits(rate_limits)
        if max_running is None and not limits:
            raise TypeError(
                "max_running=None (no limit on running) needs rate_limits=[...]: without them the "
                "gate would limit nothing; give max_running an int >= 1"
            )
        # Checked in the order of the arguments: the first bad one is the one named.
        running, waiting = _cluster_limits(max_running, max_waiting, bool(limits))
        self._unlimited = max_running is None  # only rate limits limit it (C: 2**53 in the scripts)
        name = check_name(name)
        lease = check_positive("lease_ttl", lease_ttl)
        poll = check_positive("poll_interval", poll_interval)
        waiter = max(4 * poll, 1.0) if waiter_ttl is None else check_positive("waiter_ttl", waiter_ttl)
        if waiter <= poll:
            raise ValueError(f"waiter_ttl ({waiter_ttl}) must exceed poll_interval ({poll_interval})")
        operation = check_positive("op_timeout", op_timeout)
        idle = check_positive("idle_ttl", idle_ttl)
        stall = check_positive("max_stall", max_stall)
        if adaptive is not None and not isinstance(adaptive, Adaptive):
            raise TypeError(f"adaptive must be an Adaptive, got {shown(adaptive)}")
        wait = _wait_setting(client, wait_replicas, wait_timeout, operation)
        feasible = check_flag("feasible", feasible)
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
            max_stall=stall,
            fallback=fallback,
            background=Background,
            wait=wait,
            rate_limits=limits,
            feasible=feasible,
        )
        self._controller = None if adaptive is None else ClusterController(side, adaptive)
        side.controller = self._controller
        self._observers = Observers()
        #: The cluster's counts for the metrics exports, read in the background (made by the first).
        self._feed: ClusterFeed | None = None

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
    def max_running(self) -> int | None:
        """Running slots (C), cluster-wide; None when only rate limits limit the gate."""
        return None if self._unlimited else self._side.max_running

    @property
    def rate_limits(self) -> tuple[RateLimit, ...]:
        """The gate's rate limits, cluster-wide (their buckets live in Redis); ``()`` without."""
        return self._side.rate_limits

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
        cost: float | None = None,
        on_deadline: str = "late",
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
            cost: The request's estimated cost for rate limits counted in tokens (default 0: pay
                it all when it settles, :meth:`RedisPermit.settle`); a limit counted in requests
                takes 1 whatever it is.
            on_deadline: What becomes of a body still running at its deadline, as for
                ``BoundedGate.admit``: ``"late"`` (the default) runs on and raises ``Late`` at
                its end; ``"cut"`` cancels the task in the block at the deadline, holds the slot
                in Redis until the body has really stopped, counts the request ``cut`` (here and
                in the cluster's counters) and raises :class:`~boundedgate.DeadlineCut` in place
                of the ``CancelledError``. A caller's own cancellation stays a cancellation.
            **lacking: A ``BoundedGate``'s ``priority=``: refused, with the way out.

        Raises (on entry):
            QueueFull: Every slot busy and the queue full, after one round trip to Redis.
            RateLimited: Its tokens could not come before its deadline (or ``max_wait``) behind
                the requests queued ahead of it, after one round trip to Redis (nothing queued,
                nothing taken); ``retry_after`` says when they could, on the server's clock.
            QueueExpired: The deadline passed while waiting, or had passed on arrival.
            GateUnavailable: Redis could not be reached in time (and no fallback was given), or
                this process could not keep its place in the queue.
            asyncio.CancelledError: The caller was cancelled while waiting, or was already
                cancelled on arrival (then nothing was counted).

        Raises (at once):
            TypeError, ValueError: A malformed timeout, deadline, max_wait or cost, both a timeout
                and a deadline, a cost above a rate limit's burst (it could never be served), or a
                raise_late that is not True or False, an on_deadline that is not "late" or "cut";
                a ``BoundedGate``'s ``priority=``, which a RedisGate lacks.
        """
        if lacking:
            raise refuse_arguments("RedisGate.admit", lacking)
        declared = 0.0 if cost is None else _buckets.cost_of(self._side.rate_limits, cost)
        kind = _RedisCutPermit if check_on_deadline(on_deadline) else RedisPermit
        if deadline is None:
            permit = kind(self, self._side, None if timeout is None else check_timeout(timeout), _INF)
        elif timeout is not None:
            raise ValueError("give timeout or deadline, not both")
        else:
            permit = kind(self, self._side, None, _check_deadline(deadline))
        if max_wait is not None:
            permit.max_wait = check_max_wait(max_wait)
        permit._raise_late = check_flag("raise_late", raise_late)
        permit.cost = permit._declared = declared
        return permit

    async def try_admit(
        self,
        *,
        timeout: float | None = None,
        deadline: float | None = None,
        cost: float | None = None,
        **lacking: Never,
    ) -> RedisPermit:
        """A permit that holds a slot now, or :class:`~boundedgate.QueueFull` now; it never waits.

        The one difference from :meth:`BoundedGate.try_admit <boundedgate.BoundedGate.try_admit>`:
        asking Redis takes a round trip, so this is a coroutine. It never jumps the queue. Release
        the permit with :meth:`RedisPermit.release` or by entering and leaving it with ``async with``.

        Raises:
            QueueFull: The request cannot start at once (no free slot, or others are queued).
            RateLimited: A slot is free and nobody is queued, but the rate limits do not hold its
                cost now (``retry_after``: when they will).
            QueueExpired: The deadline had already passed (nothing was counted).
            GateUnavailable: Redis could not be reached in time (and no fallback was given).
            asyncio.CancelledError: The calling task is being cancelled.
            TypeError, ValueError: A malformed cost (as for :meth:`admit`); a ``BoundedGate``'s
                ``priority=``, which a RedisGate lacks.
        """
        if lacking:
            raise refuse_arguments("RedisGate.try_admit", lacking)
        permit = self.admit(timeout=timeout, deadline=deadline, cost=cost)
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
        cost: float | None = None,
        on_deadline: str = "late",
        **lacking: Never,
    ) -> StreamOpener[StreamT]:
        """Admit a request, open a stream, and hand the stream the cluster slot.

        As :meth:`BoundedGate.stream <boundedgate.BoundedGate.stream>`: await the opener, or enter
        it with ``async with`` (which closes the stream on exit). The slot stays taken in Redis,
        its lease renewed, until the stream ends. With ``on_deadline="cut"`` the stream is closed
        at its deadline, and its next read raises :class:`~boundedgate.DeadlineCut`.

        Raises (when awaited or entered):
            QueueFull, RateLimited, QueueExpired, GateUnavailable, asyncio.CancelledError: As
                for :meth:`admit`; nothing was opened.
            Exception: Whatever opening the stream raised; the slot was released as failed.

        Raises (at once):
            TypeError, ValueError: As for :meth:`admit`.
        """
        if lacking:
            raise refuse_arguments("RedisGate.stream", lacking)
        permit = self.admit(
            timeout=timeout, deadline=deadline, max_wait=max_wait, cost=cost, on_deadline=on_deadline
        )
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
        if max_running is not ...:
            self._unlimited = False
        controller = self._controller
        if controller is not None and max_running is not ...:
            controller.limit.adopt(running, side.bind().time())

    @property
    def controller(self) -> AdaptiveLimit | None:
        """The adaptive controller of this process (None without ``adaptive=`` or :meth:`adapt`).

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

    def sync_rate_limits(self, remaining: Mapping[str, float]) -> int:
        """Lower the cluster's rate-limit balances to what the provider says is left (never raise one).

        As :meth:`BoundedGate.sync_rate_limits <boundedgate.BoundedGate.sync_rate_limits>`:
        ``remaining`` maps a resource (``"requests"``, ``"tokens"``, or a rate limit's name) to the
        provider's remaining count, e.g. from ``x-ratelimit-remaining-*`` headers; the limit named
        so (else the first counted in that unit) is lowered to it if it holds more, for every
        process at once. Synchronous, as in-process: the change is sent to Redis from a task of
        its own (call it on the gate's event loop), once. Returns how many of the gate's rate
        limits it names (each lowered only if it holds more when the change lands).

        Raises:
            TypeError, ValueError: ``remaining`` is not a mapping of names (str) to counts >= 0.
            RuntimeError: No event loop runs, or the gate is in use on another one.
        """
        counts = check_remaining(remaining)
        side = self._side
        pairs = _buckets.buckets_named(side.rate_limits, counts)
        if pairs:
            side.bind()
            side.spawn(_rate_call(side, ("lower", side.agent, *pairs)))
        return len(pairs) // 2

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

        With rate limits, ``tokens`` holds each bucket's balance on the server's clock of the read,
        computed with this gate's ``rate_limits`` (give every process the same list).

        Raises:
            GateUnavailable: Redis could not be reached in time.
        """
        side = self._side
        try:
            call = functools.partial(read_cluster, side.client, side.name, side.rate_limits)
            return await pooled(call, side.op_timeout)
        except UNREACHABLE as error:
            raise side.unavailable(0.0, 0.0, "unreachable") from error

    def observe(self, callback: Observer) -> None:
        """Call ``callback`` with the :class:`~boundedgate.RequestRecord` of each request that ends here.

        As :meth:`BoundedGate.observe <boundedgate.BoundedGate.observe>`, for this process's
        requests (each process observes its own): the same records, on the caller's loop clock,
        one per request counted in :meth:`stats` under one of :data:`~boundedgate.OUTCOMES`. It is
        called on the event loop, in the step that ended the request, and must not use the gate;
        an exception it raises is logged to the ``boundedgate`` logger and goes no further. A
        refusal with ``GateUnavailable`` gives no record (``stats().unavailable`` counts it); a
        request admitted through the ``fallback`` gate is that gate's to observe.
        """
        self._observers.add(callback)

    def unobserve(self, callback: Observer) -> None:
        """Stop calling ``callback``; with no callback left the gate records nothing."""
        self._observers.remove(callback)

    def _cluster_feed(self) -> ClusterFeed:
        """The gate's feed of the cluster's counts, made at the first call (by a metrics export)."""
        feed = self._feed
        if feed is None:
            from ._metrics import ClusterFeed  # noqa: PLC0415 - only for the metrics exports

            feed = self._feed = ClusterFeed(self, self._side, self._observers)
        return feed

    def adapt(self, settings: Adaptive | None = None) -> AdaptiveLimit:
        """Have an adaptive controller in this process propose the cluster's C from now on; returns it.

        As :meth:`BoundedGate.adapt <boundedgate.BoundedGate.adapt>`: the new controller starts
        from the cluster's C as this process last saw it, and replaces this process's controller
        (from ``adaptive=`` or an earlier call); ``None`` gives the default settings. Like the one
        given at construction, it hears this process's signals and samples its requests, and
        proposes its cuts and growth to Redis, which applies them to the one C of every process
        (see docs/adaptive.md, "A cluster gate"). Every process of the gate
        should use the same settings: each proposal is applied by the settings of the process
        that sent it (its window, floor, ceiling and step), so during a rolling change the old
        and the new settings both apply, each to its own processes' proposals.

        Raises:
            TypeError: ``settings`` is neither :class:`~boundedgate.Adaptive` nor None.
            ValueError: The gate has no ``max_running`` (nothing for a controller to set).
        """
        if self._unlimited:
            raise ValueError("an adaptive limit needs a gate with max_running set")
        side = self._side
        self._controller = controller = ClusterController(side, settings)  # which checks the settings
        side.controller = controller
        return controller.limit

    if not TYPE_CHECKING:  # at run time only: a type checker still flags a misspelt attribute

        def __getattr__(self, name: str) -> NoReturn:
            raise no_attribute(self, name)  # what a BoundedGate has and this lacks says the way out

    async def aclose(self) -> None:
        """Stop the gate's background work, after the releases and cancellations still in flight.

        Those get ``op_timeout`` to land; any still retrying then (Redis is out of reach) is
        abandoned, and its lease or queue place lapses in Redis instead. Permits still held stop
        being renewed: their slots come back within ``lease_ttl``. The client is not closed. The
        background read of the metrics exports (:mod:`boundedgate.prometheus`,
        :mod:`boundedgate.otel`) stops too, after pushing this process's last records.
        """
        feed = self._feed
        if feed is not None:
            await feed.aclose()
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


NEW = Status.NEW
QUEUED = Status.QUEUED
RUNNING = Status.RUNNING
REJECTED = Status.REJECTED
INFEASIBLE = Status.INFEASIBLE
EXPIRED = Status.EXPIRED
CANCELLED = Status.CANCELLED
COMPLETED = Status.COMPLETED
LATE = Status.LATE
FAILED = Status.FAILED
LEAKED = Status.LEAKED
RATE_LIMITED = Status.RATE_LIMITED
ABORTED = Status.ABORTED
DISCONNECTED = Status.DISCONNECTED
CUT = Status.CUT
UNAVAILABLE = Ending.UNAVAILABLE

_GRANTED = "granted"
#: What wakes a waiter whose client went away (also the outcome Redis records).
_DISCONNECTED = "disconnected"

_T = TypeVar("_T")


def _budget_ms(deadline: float, now: float) -> int:
    """The milliseconds from ``now`` to ``deadline``, rounded up, as the scripts take them (-1: none)."""
    return -1 if deadline == math.inf else math.ceil((deadline - now) * 1000)


async def _rate_call(side: ProcessSide, args: tuple[object, ...]) -> None:
    """Send a settle or a provider's remaining quota to the rate limits in Redis, once.

    Not retried: a settle is not idempotent (a retry after a lost reply would charge twice). A
    call Redis does not answer within ``op_timeout`` is lost, and logged.
    """
    try:
        reply = await side.run(_scripts.RATE, args)
    except UNREACHABLE as error:
        log_event(side.name, "rate_call_lost", f"a {args[0]} of the rate limits was lost: {error!r}")
        return
    side.released(reply, None, handed_at=4)


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
        cost: Its rate cost: declared at admission (``admit(cost=...)``), then as settled.
        lease_lost: True if, while it held its slot, its lease lapsed in Redis (this process
            stalled or lost Redis for longer than ``lease_ttl``) or Redis forgot it (a restart):
            its slot may have been given to another request meanwhile. It was counted again as
            soon as this process could renew it.
    """

    __slots__ = (
        "__weakref__",
        "_client_left",
        "_declared",
        "_depth",
        "_first_item",
        "_from_try_admit",
        "_future",
        "_gate",
        "_handed_over",
        "_id",
        "_inner",
        "_limited_by",
        "_queue_by",
        "_queued_once",
        "_raise_late",
        "_refused_after",
        "_side",
        "_status",
        "_timeout",
        "_timer",
        "_token",
        "arrival",
        "cost",
        "deadline",
        "ended",
        "lease_lost",
        "max_wait",
        "started",
    )

    def __init__(self, gate: RedisGate, side: ProcessSide, timeout: float | None, deadline: float) -> None:
        self.arrival: float | None = None
        self.deadline = deadline
        self.started: float | None = None
        self.ended: float | None = None
        self.lease_lost = False
        #: Its rate cost: declared at admission, then as settled by :meth:`settle`.
        self.cost = 0.0
        self._declared = 0.0  # its cost as declared, for its record
        # For the record of a RateLimited refusal: the limit that refused it, and its retry_after.
        self._limited_by: str | None = None
        self._refused_after: float | None = None
        self._status: Status | Ending = NEW
        self._gate = gate
        self._side = side
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
        # For its record: it waited in the queue; the cluster's queue ahead of it when it arrived.
        self._queued_once = False
        self._depth: int | None = None

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
        if inner is not None:
            return inner.status
        status = self._status
        return REJECTED if isinstance(status, Ending) else status  # an ending of its own shows so

    @property
    def id(self) -> str | None:
        """The request's id in Redis (``host/pid/random#n``), None before it arrived."""
        return self._id

    @property
    def token(self) -> tuple[str, int] | None:
        """A fencing token ``(epoch, n)`` while it holds a cluster slot, None otherwise.

        ``n`` grows with every grant of the gate within one ``epoch`` (the creation time of the
        gate's state in Redis, or of its copy on a replica promoted by a failover), so a downstream
        service can refuse a holder older than one it has seen; no ``(epoch, n)`` is issued twice,
        even when a failover lost grants. A permit counted again after losing its lease gets a new
        token. None for a permit admitted through the local fallback gate.
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
            await self._side.release_here(*release)
        if exc_type is None and self._status is LATE and self._raise_late:
            raise self._late()

    @property
    def priority(self) -> NoReturn:
        """Not here: the cluster queue is one FIFO; raises ``AttributeError`` with the way out."""
        raise no_attribute(self, "priority")

    def __repr__(self) -> str:
        return f"<RedisPermit of {self._side.name!r}: {self.status.value}>"

    # -- the stream hand-over (boundedgate's StreamPermit contract) -------------------------

    def settle(self, cost: float) -> None:
        """Record the request's real cost, e.g. the token usage the SDK reported.

        As :meth:`Permit.settle <boundedgate.Permit.settle>`, on the cluster's buckets: the rate
        limits counted in tokens are charged the difference to the declared cost (never below a
        limit's floor: a debt every process's later requests wait out) or refunded the
        over-estimate (never above its burst; a refund may start the head of the queue). Call it
        once the usage is known, before or after the slot was released. Settling again adjusts
        from the last settled cost. Does nothing for a request that never started, or on a gate
        without rate limits. The change is sent to Redis from a task of its own, once (it is not
        idempotent, so never retried: one Redis does not answer within ``op_timeout`` is lost).

        Raises:
            TypeError, ValueError: ``cost`` is not a finite number >= 0.
        """
        value = check_cost(cost)
        inner = self._inner
        if inner is not None:
            inner.settle(value)
            return
        side = self._side
        extra = value - self.cost
        if self.started is None or not extra:
            return
        self.cost = value
        if side.rate_limits:
            side.spawn(_rate_call(side, ("settle", side.agent, repr(extra))))

    def _finish(self, ending: Status | None = None) -> None:
        """End the request now, if it holds a slot: as ``ending`` says, else completed or late.

        Synchronous and idempotent, on the loop's thread: the permit ends at once, and the
        release is sent to Redis by its own task, retried until it lands. On a closed loop (a
        stream collected after its loop ended) nothing can be sent: the lease lapses instead.
        """
        release = self._end_holding(ending)
        if release is not None:
            self._side.release(*release)

    def _end_holding(self, ending: Status | None) -> tuple[str, str, Sample | None] | None:
        """End the request as :meth:`_finish` does; return the release to send, None if there is none."""
        inner = self._inner
        if inner is not None:
            inner._finish(ending)
            return None
        permit_id, started, arrival = self._id, self.started, self.arrival
        if self._status is not RUNNING or permit_id is None or started is None or arrival is None:
            return None
        side = self._side
        loop = side.bound()
        now = loop.time()
        self._status = status = ended_as(ending, now, self.deadline)
        side.count(status)
        self.ended = now
        ran = now - started
        side.counters.ran(ran, now - arrival)
        side.let_go(permit_id)
        self._token = None
        self._tell(status)
        if loop.is_closed():
            return None
        sample = None
        if side.controller is not None and (status is COMPLETED or status is LATE):
            first = self._first_item
            sample = (ran, ran if first is None else first - started, self._declared)
        return permit_id, status.value, sample

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
        closed = "its event loop is closed: its lease lapses"
        loop = self._side.loop
        if loop is None:
            what = closed
        else:
            try:
                loop.call_soon_threadsafe(self._leaked)
            except RuntimeError:  # the loop closed
                what = closed
        warnings.warn(f"unreleased {self!r}: {what}", ResourceWarning, stacklevel=1, source=self)

    def _note_first_item(self) -> None:
        """Its stream gave its first item now: the adaptive controller's sample (time to first token)."""
        if self._first_item is None and self._status is RUNNING:
            self._first_item = self._side.time()

    def _leaked(self) -> None:
        """End a permit collected while it held its slot, counted as ``leaked``, and release it."""
        self._finish(LEAKED)

    def _late(self) -> Late:
        """The :class:`~boundedgate.Late` error describing a request that ended ``LATE``.

        Raises:
            RuntimeError: It never ran.
        """
        inner = self._inner
        if inner is not None:
            return inner._late()
        arrival, started, ended = self.arrival, self.started, self.ended
        if arrival is None or started is None or ended is None:
            raise RuntimeError(f"{self!r} never ran: it cannot be late")
        return self._side.late(arrival, started, ended, self.deadline)

    @property
    def _loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop that owns the permit's gate (to schedule a release from another thread)."""
        return self._side.loop

    # -- what its process's side asks of it (_process.Tracked) ------------------------------

    def _queued(self) -> bool:
        """True while it waits in the cluster's queue."""
        return self._status is QUEUED

    def _granted(self, token: Field, epoch: Field) -> None:
        """A message, a reply or a poll says Redis granted this waiter a slot, under ``epoch``."""
        future = self._future
        if future is not None:
            _wake(future, _GRANTED, (token, epoch))

    def _told(self, what: str, value: object = None) -> None:
        """A poll says how this waiter's place ended (expired, lapsed, ...) or that Redis is out of reach."""
        future = self._future
        if future is not None:
            _wake(future, what, value)

    def _reattached(self, token: Field) -> bool:
        """Redis counted this holder again after its lease lapsed, with ``token``; True the first time."""
        self._token = (self._side.epoch or "", int(text(token)))
        if self.lease_lost:
            return False
        self.lease_lost = True
        return True

    # -- arrival ----------------------------------------------------------------------------

    async def _arrive(self, wait: bool) -> None:
        """Arrive at the gate now: hold a slot when this returns, or raise why not."""
        if self._status is not NEW or self._id is not None:  # an id: another entry is on its way
            raise RuntimeError(f"{self!r} was already used; call admit() for each request")
        side = self._side
        loop = side.bind()
        task = asyncio.current_task(loop)
        if task is not None and task.cancelling() and cancellation_pending(task):
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
            raise side.expired(0.0, self._queue_by)
        if self.max_wait != _INF:
            deadline = min(deadline, now + self.max_wait)
        self._queue_by = deadline
        keeper = side.keeper
        if keeper is not None:
            keeper.arrived()  # its keyed gate lists the key's gate while it is in use
        self._id = permit_id = side.new_id()
        future = self._future = loop.create_future()
        # Registered before the request is sent: a grant message may overtake the reply.
        side.waiters[permit_id] = self
        try:
            reply = fields(
                await side.run(
                    _scripts.ADMIT,
                    self._admit_args(permit_id, now, wait),
                    min(side.op_timeout, deadline - now),
                )
            )
        except BaseException as error:
            del side.waiters[permit_id]
            self._future = None
            await self._not_admitted(error, wait, permit_id, now)
            return
        state, (value, running, waiting, epoch) = int(reply[0]), reply[1:5]
        side.seen(running, waiting, epoch)
        if len(reply) > 5:  # its sweep handed slots to others of this process's waiters
            side.handed(reply, 5, epoch)
        if state == 1:
            del side.waiters[permit_id]
            self._future = None
            self._start(value, epoch, permit_id)
            return
        if state != 2:
            del side.waiters[permit_id]
            self._future = None
            raise self._refusal(state, text(value), int(running), int(waiting), now)
        self._depth = int(waiting) - 1
        if side.rate_limits:
            self._head_waits(text(value))
        await self._wait(future, permit_id, now)

    def _admit_args(self, permit_id: str, now: float, wait: bool) -> tuple[object, ...]:
        """The admit script's own arguments: its budget in ms to its queue deadline (-1: none)...

        A feasible gate's arrival sends its budget to its deadline too: a long run (two recent
        runs) after its start must end before it.
        """
        args = (permit_id, _budget_ms(self._queue_by, now), 1 if wait else 0, repr(self.cost))
        if self._side.feasible:
            return (*args, _budget_ms(self.deadline, now))
        return args

    def _refusal(self, state: int, value: str, running: int, waiting: int, arrival: float) -> Exception:
        """End a request that admit's reply refused (``state`` 3, 5, 6, or 4: ended already); the error."""
        side = self._side
        self._depth = waiting
        if state == 3:
            ended = self._end(REJECTED)
            return side.refused(ended - arrival, running, waiting, int(value) / 1000)
        if state == 6:  # value: the script's 'ms:ms', the predicted wait and the budget
            wait_ms, _, budget_ms = value.partition(":")
            # Noted before it ends, for its record: its retry_after is the predicted wait.
            predicted = self._refused_after = max(0.0, float(wait_ms) / 1000)
            ended = self._end(INFEASIBLE)
            return Infeasible(
                gate=side.name,
                max_running=self._gate.max_running,
                max_waiting=side.max_waiting,
                running=running,
                waiting=waiting,
                waited=0.0,
                elapsed=ended - arrival,
                predicted_wait=predicted,
                budget=_INF if int(budget_ms) < 0 else int(budget_ms) / 1000,
            )
        if state != 5:
            ended = self._end(UNAVAILABLE)  # an outcome already recorded for a fresh id: state was lost
            return side.unavailable(0.0, ended - arrival, "waiter_lease_lost")
        limit, retry_after = _buckets.refused_by(side.rate_limits, value)  # value: the script's 'ms:i'
        self._limited_by, self._refused_after = limit, retry_after  # before it ends: for its record
        ended = self._end(RATE_LIMITED)
        return _buckets.rate_limited(
            limit,
            retry_after,
            gate=side.name,
            max_running=self._gate.max_running,
            max_waiting=side.max_waiting,
            running=running,
            waiting=waiting,
            elapsed=ended - arrival,
        )

    def _head_waits(self, value: str) -> None:
        """A queued reply's ``'sequence@ms'``: the head, this process's, has its tokens in ``ms``."""
        _, at, wait_ms = value.partition("@")
        if at:  # its process syncs then, and the sync starts it
            self._side.background.soon(float(wait_ms) / 1000)

    async def _not_admitted(self, error: BaseException, wait: bool, permit_id: str, arrival: float) -> None:
        """The admission call failed: re-raise, or raise the typed refusal, or use the fallback."""
        side = self._side
        if self._client_left and isinstance(error, (asyncio.CancelledError, *UNREACHABLE)):
            self._disconnected(permit_id)  # its client left while Redis was being asked: nobody to admit
        if isinstance(error, asyncio.CancelledError):
            # The admission may have landed: take it back. It arrived here, so it counts here, as a
            # request cancelled while it waits does (whether or not Redis had heard of it yet).
            side.abandon(permit_id, "cancelled")
            self._end(CANCELLED)
            raise error
        unreplicated = isinstance(error, _scripts.Unreplicated)
        if not (unreplicated or isinstance(error, UNREACHABLE)):
            raise error
        if side.time() >= self._queue_by:
            side.abandon(permit_id, "expired")
            ended = self._end(EXPIRED)
            raise side.expired(ended - arrival, self._queue_by) from error
        side.abandon(permit_id, "unavailable")
        if unreplicated:  # Redis decided, but too few replicas have it: not a case for the fallback
            ended = self._end(UNAVAILABLE)
            raise side.unavailable(0.0, ended - arrival, "unreplicated") from error
        fallback = side.fallback
        if fallback is not None:
            await self._fall_back(fallback, wait)
            return
        ended = self._end(UNAVAILABLE)
        raise side.unavailable(0.0, ended - arrival, "unreachable") from error

    async def _wait(self, future: asyncio.Future[tuple[str, Any]], permit_id: str, arrival: float) -> None:
        """Wait in the cluster's queue until granted, expired or cancelled."""
        side = self._side
        loop = side.bound()
        self._status = QUEUED
        self._queued_once = True
        side.waiting += 1
        counters = side.counters
        # A waiter granted in Redis that has not heard of it yet is counted here still, while a
        # newcomer may hold its place there: the queue never held more than Q.
        here = side.waiting
        limit = side.max_waiting
        if limit is not None and here > limit:
            here = limit
        if here > counters.peak_waiting:
            counters.peak_waiting = here
        side.background.watch()
        if self._queue_by != math.inf and not future.done():
            self._timer = loop.call_at(self._queue_by, _wake, future, "deadline")
        try:
            what, value = await future
        except asyncio.CancelledError:
            # Cancelled while waiting, or in the same turn as a grant reached it: either way the
            # cancellation script takes back the place or passes the unused slot on.
            self._leave(permit_id)
            if self._client_left:
                self._disconnected(permit_id)
            side.abandon(permit_id, "cancelled")
            self._end(CANCELLED)
            raise
        self._leave(permit_id)
        if what == _DISCONNECTED or self._client_left:  # a grant in the turn its client left: unused
            self._disconnected(permit_id)
        now = loop.time()
        counters.waited(now - arrival)
        if what == _GRANTED and now < self._queue_by:
            token, epoch = value
            self._start(token, epoch, permit_id)
            return
        if what in (_GRANTED, "deadline", "expired"):
            # Never start at or after the deadline: a grant that arrives then passes the slot on.
            if what != "expired":
                side.abandon(permit_id, "expired")
            ended = self._end(EXPIRED)
            raise side.expired(ended - arrival, self._queue_by)
        ended = self._end(UNAVAILABLE)
        waited = ended - arrival
        if what == "unreachable":
            raise side.unavailable(waited, waited, "unreachable") from value
        raise side.unavailable(waited, waited, "waiter_lease_lost")

    def _disconnected(self, permit_id: str) -> NoReturn:
        """End a request whose client left before it used a slot: its place or slot goes back in Redis."""
        self._side.abandon(permit_id, _DISCONNECTED)
        self._end(DISCONNECTED)
        raise asyncio.CancelledError()

    def _give_back_unused(self, ending: Status = DISCONNECTED) -> None:
        """End the request as ``ending`` (*disconnected*) if it holds a slot it never used for its work.

        For a server whose client left while the request was held back further on (queued at
        another gate inside): the slot goes back unused, as a grant nobody took up (Redis takes
        the admission back, no run time is counted here), and passes on. ``admit_all`` gives
        back so, as ``CANCELLED``, the gates taken before a step that was refused. As a local
        ``Permit``'s method of the same name, which a permit of the fallback gate answers.
        """
        inner = self._inner
        if inner is not None:
            inner._give_back_unused(ending)
            return
        permit_id = self._id
        if self._status is not RUNNING or permit_id is None:
            return
        side = self._side
        side.let_go(permit_id)
        self._token = None
        self.started = None
        side.counters.admitted -= 1
        self._end(ending)
        side.abandon(permit_id, ending.value)

    #: What becomes of its body at its deadline (admit()'s on_deadline): run on; the fallback's too.
    _on_deadline = "late"

    def _leave(self, permit_id: str) -> None:
        side = self._side
        del side.waiters[permit_id]
        side.waiting -= 1
        self._future = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _start(self, token: Field, epoch: Field, permit_id: str) -> None:
        if self._client_left:  # granted at once, after its client left: the slot passes on unused
            self._disconnected(permit_id)
        side = self._side
        self._status = RUNNING
        self.started = side.time()
        self._token = (text(epoch), int(text(token)))
        side.hold(permit_id, self, token)
        holders = side.holders
        counters = side.counters
        counters.admitted += 1
        if len(holders) > counters.peak_running:
            counters.peak_running = len(holders)
        side.background.watch()

    def _end(self, ending: Status | Ending) -> float:
        """End the request now as ``ending``, counted in this process's statistics; returns the time."""
        side = self._side
        now = side.time()
        self._status = ending
        self.ended = now
        side.count(ending)
        if ending is not UNAVAILABLE:
            self._tell(ending)
        return now

    def _tell(self, status: Status) -> None:
        """Give the gate's observers the record of this request, which just ended as ``status``."""
        observers = self._gate._observers
        if observers.callbacks:
            side = self._side
            queued, depth = self._queued_once, self._depth
            recent, limit = side.counters.recent_run_seconds, side.max_running
            observers.tell(record_of(self, side.name, status, queued, depth, recent, limit))

    async def _fall_back(self, fallback: BoundedGate, wait: bool) -> None:
        deadline = None if self.deadline == math.inf else self.deadline
        self._side.counters.fallbacks += 1
        if not wait:
            self._inner = fallback.try_admit(deadline=deadline)
            return
        max_wait = None if self.max_wait == _INF else self.max_wait
        self._inner = inner = fallback.admit(
            deadline=deadline, max_wait=max_wait, raise_late=self._raise_late, on_deadline=self._on_deadline
        )
        await inner.__aenter__()


class _RedisCutPermit(RedisPermit):  # type: ignore[misc]  # admit(on_deadline="cut")'s permits
    """A permit whose body is cut off at its deadline: what ``admit(on_deadline="cut")`` returns.

    As a ``BoundedGate``'s: entered, it arms its :class:`~boundedgate._driver.Cutter` (the core's)
    at its deadline, which cancels the task in the block; the exit takes that cancellation back,
    ends the request as ``cut`` (sent so to Redis, which counts it so cluster-wide) and raises
    :class:`~boundedgate.DeadlineCut`, unless the caller's own cancellation came too. The release
    is sent by the exit alone, so the slot is held in Redis until the body has really stopped.
    Admitted through the fallback gate, its inner permit is a cut permit of that gate, and does it.
    """

    __slots__ = ("_cutter",)

    _on_deadline = "cut"

    def __init__(self, gate: RedisGate, side: ProcessSide, timeout: float | None, deadline: float) -> None:
        super().__init__(gate, side, timeout, deadline)
        self._cutter = Cutter()

    async def __aenter__(self) -> Self:
        await RedisPermit.__aenter__(self)
        loop = self._side.loop
        if loop is not None and self._inner is None:
            self._cutter.enter(loop, self.deadline, self._cut_body)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._handed_over or self._inner is not None:
            await RedisPermit.__aexit__(self, exc_type, exc, tb)
            return
        raised = exc_type is not None
        ending = self._cutter.leave(raised, not raised and self._side.time() >= self.deadline)
        release = self._end_holding(ending)  # before any await, as RedisPermit's exit
        if release is not None:
            await self._side.release_here(*release)
        if self._status is CUT and (exc_type is None or issubclass(exc_type, asyncio.CancelledError)):
            raise self._cut_error() from exc

    def _take_back_cut(self) -> bool:
        """True if the gate's cut cancelled the body, and no other cancellation was asked since the entry."""
        inner = self._inner
        if inner is not None:
            return bool(inner._take_back_cut())  # type: ignore[attr-defined]  # the fallback's cut permit
        return self._cutter.take_back()

    def _cut_body(self) -> None:
        """The timer, at the deadline: cancel the task in the block, if the body still runs."""
        if self._status is RUNNING and not self._handed_over:
            self._cutter.cancel_task()

    def _arm_cut(self, callback: Callable[[], object]) -> object:
        """Call ``callback`` at the deadline, on the gate's loop: the stream's cut."""
        inner = self._inner
        if inner is not None:
            return inner._arm_cut(callback)  # type: ignore[attr-defined]  # the fallback's cut permit
        return self._cutter.arm(self._side.bound(), self.deadline, callback)

    def _hand_over(self) -> None:
        RedisPermit._hand_over(self)
        self._cutter.disarm()  # the stream arms its own, and closes itself at the deadline

    def _finish(self, ending: Status | None = None) -> None:
        if self._inner is None and self._status is RUNNING:
            self._cutter.disarm()
            if ending is None and self._side.time() >= self.deadline:
                ending = CUT
        RedisPermit._finish(self, ending)

    def _cut_error(self) -> DeadlineCut:
        """The :class:`~boundedgate.DeadlineCut` error describing a request that ended ``CUT``."""
        inner = self._inner
        if inner is not None:
            error: DeadlineCut = inner._cut_error()  # type: ignore[attr-defined]  # the fallback's cut permit
            return error
        arrival, started, ended = self.arrival, self.started, self.ended
        if arrival is None or started is None or ended is None:
            raise RuntimeError(f"{self!r} never ran: it cannot be cut")
        return self._side.cut(arrival, started, ended, self.deadline)

    def __repr__(self) -> str:
        return f"<RedisPermit of {self._side.name!r}, cut at its deadline: {self.status.value}>"


if TYPE_CHECKING:

    def _is_a_stream_permit(permit: RedisPermit) -> StreamPermit:  # mypy checks the contract here
        return permit
