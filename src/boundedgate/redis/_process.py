"""A process's side of one cluster gate: what its permits, background work and controller share.

Theory of operation. A :class:`~boundedgate.redis.RedisGate` object is one process's participant in
a gate whose state lives in Redis. Everything that participant knows and does beyond its public
API is a :class:`ProcessSide`:

* its settings (limits, leases, polls, timeouts), its client and how its scripts reach the server,
  and the head every call sends first, encoded once;
* its tables of the requests it has in flight: the holders, by id, held weakly (a permit nobody
  references is collected and warns), with the fencing number each was last told (``leases``: a
  plain table the renewal thread copies, see :mod:`._renewer`), and the waiters, by id, from
  arrival until they start or leave (polled, and woken by messages and replies);
* its counters, and the cluster's counts and epoch as the last reply told them;
* the event loop it is bound to, and the tasks it started there;
* its verbs: run a script, note a reply, spawn a task, release or take back a request's place in
  Redis (from the caller's task, or retried in the background until it lands), and build the
  typed refusals its callers raise.

:class:`~boundedgate.redis.RedisPermit`, the background loops and the adaptive controller each take
a ``ProcessSide`` and work through it; none of them works on the gate, which composes them (a
permit holds its gate only to answer ``permit.gate``). The side knows them only as the small
protocols declared here (:class:`Tracked`, :class:`Work`, :class:`Sampler`).
"""

from __future__ import annotations

import asyncio
import enum
import functools
import itertools
import math
import weakref
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

from .._core import BY_STATUS, RateLimit, Status
from .._driver import BoundedGate, log_event
from .._errors import DeadlineCut, GateUnavailable, Late, QueueExpired, QueueFull
from . import _buckets, _scripts
from ._io import UNREACHABLE, fields, pooled, text
from ._layout import agent_id, gate_keys, wake_prefix
from ._stats import LocalCounters, RedisGateStatistics

__all__ = ("Ending", "Keeper", "ProcessSide", "Renewals", "Sample", "Sampler", "Tracked", "Work", "ms")

#: A reply's field as the client gives it: bytes, or str when it decodes responses (an int in arrays).
Field = bytes | str | int


def ms(seconds: float) -> int:
    """``seconds`` in whole milliseconds, rounded up, at least 1: how the scripts take a duration."""
    return max(1, math.ceil(seconds * 1000))


class Ending(enum.Enum):
    """How a request of this process ended where the core's :class:`~boundedgate.Status` has no word."""

    #: Refused with ``GateUnavailable`` (Redis out of reach, or its place there lost): counted in
    #: ``stats().unavailable``; the permit's ``status`` shows ``REJECTED``, as documented.
    UNAVAILABLE = "unavailable"


class Tracked(Protocol):
    """A request of this process, as its side calls it (a :class:`~boundedgate.redis.RedisPermit`)."""

    @property
    def deadline(self) -> float:
        """When it must be done by, on the loop's clock (``math.inf``: none)."""
        ...

    def _queued(self) -> bool:
        """True while it waits in the cluster's queue (not while its admission is on its way)."""
        ...

    def _granted(self, token: Field, epoch: Field) -> None:
        """Redis granted it a slot, with fencing token ``(epoch, token)``."""
        ...

    def _told(self, what: str, value: object = None) -> None:
        """Its place ended otherwise (``expired``, ``lapsed``...), or Redis stayed out of reach."""
        ...

    def _reattached(self, token: Field) -> bool:
        """Redis counted it again after its lease lapsed, with ``token``; True if that is news."""
        ...


class Work(Protocol):
    """The background work of a side on one event loop (``_background.Background``)."""

    def watch(self) -> None:
        """Make sure the loops run that the side's holders and waiters need."""
        ...

    def soon(self, seconds: float) -> None:
        """Sync in ``seconds`` at the latest: the head of the queue, this process's, has its tokens then."""
        ...

    def running(self) -> bool:
        """Whether its sync loop or its listener runs now."""
        ...

    async def aclose(self) -> None:
        """Stop the loops and wait until they have."""
        ...


#: What a release tells the adaptive controller of a run: its run time, its latency signal (time to
#: first item, else the run time) and its declared cost (its size).
Sample = tuple[float, float, float]


class Sampler(Protocol):
    """The adaptive controller, as a release feeds it (``_adaptive.ClusterController``)."""

    def sampled(self, ran: float, latency: float, in_flight: int, cluster_c: int, size: float) -> None:
        """A request of this process ran to an answer."""
        ...


class Renewals(Protocol):
    """The lease renewals of sides on one event loop: a thread's (``_renewer.Renewer``)."""

    def watch(self, side: ProcessSide | None = None) -> None:
        """Make sure a thread renews ``side``'s leases (its own side without one)."""
        ...

    def forget(self, side: ProcessSide) -> None:
        """Renew ``side``'s leases no more."""
        ...

    async def aclose(self) -> None:
        """End the threads and wait until they have."""
        ...


class Keeper(Protocol):
    """What a key's gate tells its keyed gate (``RedisKeyedGate``), and what it asks of it."""

    def arrived(self) -> None:
        """A request arrives at the gate now (it is about to be sent to Redis)."""

    def ended(self) -> None:
        """A request of the gate ended now (the gate may be idle once the ending is done)."""

    def renewer(self, side: ProcessSide) -> Renewals | None:
        """The renewal thread's keeper ``side`` shares, for its bound loop (None: the sync loop renews)."""


class ProcessSide:
    """One process's side of one cluster gate (see the module).

    Args:
        client: The user's ``redis.asyncio`` client.
        name: The gate's name.
        max_running, max_waiting: C and Q, checked.
        lease_ttl, poll_interval, waiter_ttl, op_timeout, idle_ttl, max_stall: The gate's
            durations, checked.
        fallback: The local gate to admit through when Redis is out of reach, or None.
        background: What makes the background work of the side on each event loop it binds to.
        wait: ``(replicas, milliseconds)`` of a ``WAIT`` after every script call, or None.
        rate_limits: The gate's rate limits, checked (their buckets live in Redis).
    """

    __slots__ = (
        "_make_background",
        "_serial",
        "agent",
        "background",
        "calls",
        "client",
        "common",
        "controller",
        "counters",
        "epoch",
        "fallback",
        "feasible",
        "head",
        "holders",
        "keeper",
        "keys",
        "last_running",
        "last_waiting",
        "lease_ttl",
        "leases",
        "loop",
        "max_running",
        "max_stall",
        "max_waiting",
        "name",
        "op_timeout",
        "poll_interval",
        "rate_limits",
        "tasks",
        "wait",
        "waiter_ttl",
        "waiters",
        "waiting",
        "wake_channel",
    )

    def __init__(
        self,
        client: Any,
        *,
        name: str,
        max_running: int,
        max_waiting: int | None,
        lease_ttl: float,
        poll_interval: float,
        waiter_ttl: float,
        op_timeout: float,
        idle_ttl: float,
        max_stall: float,
        fallback: BoundedGate | None,
        background: Callable[[ProcessSide], Work],
        wait: tuple[int, int] | None = None,
        rate_limits: tuple[RateLimit, ...] = (),
        feasible: bool = False,
    ) -> None:
        self.client = client
        self.wait = wait
        #: Deadline-feasible admission: arrivals send their deadline, releases keep the pace.
        self.feasible = feasible
        self.rate_limits = rate_limits
        self.name = name
        self.max_running = max_running
        self.max_waiting = max_waiting
        self.lease_ttl = lease_ttl
        self.poll_interval = poll_interval
        self.waiter_ttl = waiter_ttl
        self.op_timeout = op_timeout
        self.max_stall = max_stall
        self.fallback = fallback
        self.calls = _scripts.Calls(client)
        #: This gate object's id in Redis (``host/pid/random``).
        self.agent = agent_id()
        self.keys = gate_keys(name)
        #: The channel on which Redis announces grants to this process's waiters.
        self.wake_channel = wake_prefix(name) + self.agent
        # Outcomes are kept long enough for any late message, retry or poll about them to find them.
        outcome_ttl = 3 * max(lease_ttl, waiter_ttl, op_timeout)
        #: The settings every call sends (the scripts' ARGV[1]).
        self.common: tuple[object, ...] = (
            max_running,
            -1 if max_waiting is None else max_waiting,
            ms(lease_ttl),
            ms(waiter_ttl),
            ms(outcome_ttl),
            ms(idle_ttl),
            _buckets.encode(rate_limits),
            wake_prefix(name),
        )
        #: The common head of every call (key count, keys, common ARGV), encoded once, and what it encodes.
        self.head: tuple[tuple[object, ...], tuple[bytes, ...]] = (
            self.common,
            _scripts.encode_head(self.keys, self.common),
        )
        self._serial = itertools.count(1)
        self.loop: asyncio.AbstractEventLoop | None = None
        #: This process's permits that hold a slot, by id (the heartbeat renews their leases). Held
        #: weakly: a permit nobody references is collected, warns, and its lease is renewed no more.
        self.holders: weakref.WeakValueDictionary[str, Tracked] = weakref.WeakValueDictionary()
        #: The same holders' ids, each with the fencing number it was last told (its renewals send
        #: it, so that Redis can tell one counted again meanwhile). Written on the loop's thread
        #: only, as ``holders`` is; the renewal thread reads copies of it.
        self.leases: dict[str, int] = {}
        #: This process's permits that are arriving or queued, by id (polled, and woken by messages).
        self.waiters: dict[str, Tracked] = {}
        self.waiting = 0  # of those, the ones queued
        self.counters = LocalCounters()
        #: The epoch of the gate's state in Redis, as the latest reply told it (None before one).
        self.epoch: str | None = None
        self.last_running = 0
        self.last_waiting = 0
        #: Its keyed gate's link, for a key's gate of a ``RedisKeyedGate`` (None for a gate of its own).
        self.keeper: Keeper | None = None
        self._make_background = background
        self.background = background(self)
        self.tasks: set[asyncio.Task[None]] = set()
        #: The adaptive controller that releases feed (set by the gate when it has one).
        self.controller: Sampler | None = None

    def __repr__(self) -> str:
        """The gate's own repr: this process's counts and the cluster's limits."""
        waiting = "unbounded" if self.max_waiting is None else self.max_waiting
        return (
            f"<RedisGate {self.name!r} [here: running {len(self.holders)}, waiting {self.waiting}; "
            f"cluster limits {self.max_running}/{waiting}]>"
        )

    # -- the event loop -----------------------------------------------------------------------

    def bind(self) -> asyncio.AbstractEventLoop:
        """The running event loop, which the side is bound to from now on.

        Raises:
            RuntimeError: No event loop runs, or the side is in use on another one.
        """
        loop = asyncio.get_running_loop()
        old = self.loop
        if loop is not old:
            if old is not None and (self.holders or self.waiters) and not old.is_closed():
                raise RuntimeError(f"{self!r} is in use on another event loop")
            self.loop = loop
            self.leases = {}  # a renewal thread of the old loop keeps the old table, and ends
            self.background = self._make_background(self)
            self.tasks = set()
        return loop

    def bound(self) -> asyncio.AbstractEventLoop:
        """The event loop the side is bound to: every request of it arrived there first.

        Raises:
            RuntimeError: The side was never used on an event loop.
        """
        loop = self.loop
        if loop is None:
            raise RuntimeError(f"gate {self.name!r} has not been used on an event loop yet")
        return loop

    def time(self) -> float:
        """The bound loop's clock."""
        return self.bound().time()

    def spawn(self, call: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``call`` in its own task, which the caller's cancellation cannot reach."""
        task = self.bound().create_task(call)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def aclose(self) -> None:
        """Stop the background work, after the releases and cancellations still in flight.

        Those get ``op_timeout`` to land; any still retrying then is cancelled.
        """
        await self.background.aclose()
        tasks = list(self.tasks)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self.op_timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)

    # -- the tables ---------------------------------------------------------------------------

    def hold(self, permit_id: str, permit: Tracked, token: Field) -> None:
        """``permit`` holds a slot from now on, with fencing number ``token``: its lease is renewed."""
        self.holders[permit_id] = permit
        self.leases[permit_id] = int(text(token))

    def let_go(self, permit_id: str) -> None:
        """``permit_id`` holds no slot any more here: its lease is renewed no more."""
        self.holders.pop(permit_id, None)
        self.leases.pop(permit_id, None)

    def new_id(self) -> str:
        """A new request id of this process: ``host/pid/random#n``."""
        return f"{self.agent}#{next(self._serial)}"

    def count(self, ending: Status | Ending) -> None:
        """Count one request of this process that ended as ``ending``."""
        name = ending.value if isinstance(ending, Ending) else BY_STATUS[ending].name
        counters = self.counters
        setattr(counters, name, getattr(counters, name) + 1)
        keeper = self.keeper
        if keeper is not None:
            keeper.ended()

    def stats(self) -> RedisGateStatistics:
        """The statistics of this process's requests through the gate now."""
        return self.counters.snapshot(
            self.name, self.max_running, self.max_waiting, len(self.holders), self.waiting
        )

    def set_limits(self, running: int, waiting: int | None) -> None:
        """Take C and Q as the cluster's now, for this process's errors and its next calls."""
        self.max_running = running
        self.max_waiting = waiting
        self.common = (running, -1 if waiting is None else waiting, *self.common[2:])

    def lease_args(self, leases: dict[str, int]) -> list[object]:
        """What a ``sync`` call sends to renew ``leases``: the agent, their number, each id and number.

        ``leases``: holder id -> the fencing number it was last told. Reads nothing the loop
        changes, so the renewal thread calls it too.
        """
        args: list[object] = [self.agent, len(leases)]
        for pair in leases.items():
            args += pair
        return args

    def sync_args(self, now: float, leases: dict[str, int] | None = None) -> list[object]:
        """What a ``sync`` call sends: the agent, ``leases`` to renew, and the queued waiters' budgets.

        ``leases``: holder id -> the fencing number it was last told (none: the waiters only).
        """
        args = self.lease_args(leases or {})
        for permit_id, permit in self.waiters.items():
            if permit._queued():
                deadline = permit.deadline
                remaining = -1 if deadline == math.inf else max(0, math.ceil((deadline - now) * 1000))
                args += (permit_id, remaining)
        return args

    # -- talking to Redis ---------------------------------------------------------------------

    async def run(
        self,
        script: _scripts.Script,
        args: Sequence[object],
        seconds: float | None = None,
        client: Any = None,
    ) -> Any:
        """Run one script with the gate's keys and settings, within ``op_timeout`` (or ``seconds``).

        Through the user's client, or ``client``; a pool with no free connection is waited for.
        With the gate's ``wait_replicas``, each call is followed by a ``WAIT``; a shortfall is
        counted, and raised (:class:`~._scripts.Unreplicated`) only for an admission it granted.
        """
        seconds = self.op_timeout if seconds is None else seconds
        common, head = self.head
        if common is not self.common:  # the settings changed (set_limits): encode them again
            self.head = common, head = self.common, _scripts.encode_head(self.keys, self.common)
        call = functools.partial(script, self.client if client is None else client, head, args, self.calls)
        if self.wait is None:
            return await pooled(call, seconds)
        try:
            return await pooled(functools.partial(call, self.wait), seconds)
        except _scripts.Unreplicated as short:
            self.counters.unreplicated += 1
            if script is _scripts.ADMIT and text(fields(short.reply)[0]) == "1":
                raise  # the caller's own grant, which a failover could lose: given back and refused
            return short.reply  # its effect stands on the primary

    async def adapt(self, args: Sequence[object]) -> Any:
        """Run the ``adapt`` script (a signal, or a controller's proposal); returns its reply."""
        self.bind()
        return await self.run(_scripts.ADAPT, args)

    def seen(self, running: Field, waiting: Field, epoch: Field) -> None:
        """Note the cluster's counts and epoch from a reply."""
        self.last_running = int(running)
        self.last_waiting = int(waiting)
        new = text(epoch)
        old = self.epoch
        if old != new and (old is None or (len(new), new) > (len(old), old)):
            if old is not None:
                self.counters.epoch_changes += 1
            self.epoch = new

    # -- what Redis tells of this process's requests ------------------------------------------

    def granted(self, permit_id: str, token: Field, epoch: Field) -> None:
        """Redis granted ``permit_id`` a slot under ``epoch``: wake it, if it is a waiter here still.

        ``epoch`` is the one the grant was made under, told with it: the process may not have
        seen it yet (a sync's reply lost after a restart), and ``n`` pairs with that one only.
        """
        waiter = self.waiters.get(permit_id)
        if waiter is not None:
            waiter._granted(token, epoch)

    def told(self, permit_id: str, what: str) -> None:
        """A poll says how the place of ``permit_id`` ended (expired, lapsed...)."""
        waiter = self.waiters.get(permit_id)
        if waiter is not None:
            waiter._told(what)

    def unreachable(self, error: BaseException) -> None:
        """Redis stayed out of reach for ``waiter_ttl``: every queued waiter leaves, refused."""
        for permit in list(self.waiters.values()):
            if permit._queued():
                permit._told("unreachable", error)

    def reattached(self, permit_id: str, token: Field) -> None:
        """Redis counted the holder ``permit_id`` again after its lease lapsed: it lost its lease."""
        holder = self.holders.get(permit_id)
        if holder is None:
            return
        if permit_id in self.leases:
            self.leases[permit_id] = int(text(token))
        if holder._reattached(token):
            self.counters.lease_lost += 1
            log_event(
                self.name,
                "lease_lost",
                f"{holder!r} lost its lease while it ran, and was counted again",
                permit=permit_id,
            )

    def handed(self, reply: Sequence[Any], start: int, epoch: Field) -> None:
        """Wake the waiters of this process that a script's reply, under ``epoch``, granted a slot to."""
        for i in range(start, len(reply) - 1, 2):
            self.granted(text(reply[i]), reply[i + 1], epoch)

    # -- giving back ----------------------------------------------------------------------------

    def abandon(self, permit_id: str, how: str) -> None:
        """Take back, in the background, whatever place or unused slot ``permit_id`` has in Redis."""
        horizon = max(self.lease_ttl, self.waiter_ttl)
        self.spawn(self._until_done(_scripts.CANCEL, permit_id, how, horizon, handed_at=4))

    def release(self, permit_id: str, how: str, sample: Sample | None = None) -> asyncio.Task[None]:
        """Give the slot of ``permit_id`` back, in the background; returns the task doing it.

        ``sample`` (run time, latency signal, declared cost) is for the adaptive controller, once
        Redis answered.
        """
        return self.spawn(self._until_done(_scripts.RELEASE, permit_id, how, self.lease_ttl, sample))

    async def release_here(self, permit_id: str, how: str, sample: Sample | None) -> None:
        """Give the slot of ``permit_id`` back from the calling task, within ``op_timeout``.

        One script call, no task of its own. If Redis does not answer in time, or the caller is
        cancelled meanwhile (the release may or may not have landed: it is idempotent), it goes
        on in the background, retried as :meth:`release` does.
        """
        try:
            reply = await self.run(_scripts.RELEASE, self._ending(_scripts.RELEASE, permit_id, how))
        except UNREACHABLE:
            self.counters.retries += 1
            self.spawn(self._until_done(_scripts.RELEASE, permit_id, how, self.lease_ttl, sample, True))
            return
        except BaseException:
            self.spawn(self._until_done(_scripts.RELEASE, permit_id, how, self.lease_ttl, sample, True))
            raise
        self.released(reply, sample)

    def released(self, reply: Any, sample: Sample | None, handed_at: int = 5) -> None:
        """Note what Redis answered to a release (or a cancellation: ``handed_at=4``).

        Wakes this process's waiters that the script handed a slot to, and samples a run for the
        adaptive controller.
        """
        reply = fields(reply)
        self.seen(reply[1], reply[2], reply[3])
        if len(reply) > handed_at:
            self.handed(reply, handed_at, reply[3])
        controller = self.controller
        if sample is not None and controller is not None:
            ran, latency, size = sample
            controller.sampled(ran, latency, int(reply[1]) + 1, int(reply[4]), size)

    def _ending(self, script: _scripts.Script, permit_id: str, how: str) -> tuple[str, ...]:
        """The arguments of a release or cancellation: a feasible gate's release keeps the pace."""
        if self.feasible and script is _scripts.RELEASE:
            return (permit_id, how, "1")
        return (permit_id, how)

    async def _until_done(
        self,
        script: _scripts.Script,
        permit_id: str,
        how: str,
        horizon: float,
        sample: Sample | None = None,
        retried: bool = False,
        handed_at: int = 5,
    ) -> None:
        # Scripts are idempotent, so retrying after a lost reply is safe. Past the horizon the
        # lease (or the waiter's place) has lapsed in Redis anyway: the slot is back without us.
        loop = self.bound()
        give_up = loop.time() + horizon
        delay = 0.05
        while True:
            try:
                reply = await self.run(script, self._ending(script, permit_id, how))
            except UNREACHABLE:
                if not retried:
                    retried = True
                    self.counters.retries += 1
                if loop.time() + delay > give_up:
                    return
                await asyncio.sleep(delay)
                delay = min(2 * delay, 1.0)
                continue
            self.released(reply, sample, handed_at)
            return

    # -- refusals -------------------------------------------------------------------------------

    def refused(self, waited: float, running: int, waiting: int, paused_for: float) -> QueueFull:
        """The refusal of a full cluster; ``paused_for``: seconds of a cluster pause still to run."""
        return QueueFull(
            gate=self.name,
            max_running=self.max_running,
            max_waiting=self.max_waiting,
            running=running,
            waiting=waiting,
            waited=0.0,
            elapsed=waited,
            recent_run=self.counters.recent_run_seconds,
            paused_for=paused_for,
        )

    def expired(self, waited: float, queue_by: float) -> QueueExpired:
        """The refusal of a request that left the queue (or never entered it) at ``queue_by``."""
        return QueueExpired(
            gate=self.name,
            max_running=self.max_running,
            max_waiting=self.max_waiting,
            running=self.last_running,
            waiting=self.last_waiting,
            waited=waited,
            elapsed=waited,
            deadline=queue_by,
            recent_run=self.counters.recent_run_seconds,
        )

    def unavailable(self, waited: float, elapsed: float, reason: str) -> GateUnavailable:
        """The refusal of a request that Redis could not decide (``reason``), logged."""
        error = GateUnavailable(
            gate=self.name,
            max_running=self.max_running,
            max_waiting=self.max_waiting,
            running=self.last_running,
            waiting=self.last_waiting,
            waited=waited,
            elapsed=elapsed,
            reason=reason,
        )
        log_event(self.name, "unavailable", str(error), reason=reason, waited=waited, elapsed=elapsed)
        return error

    def cut(self, arrival: float, started: float, ended: float, deadline: float) -> DeadlineCut:
        """The :class:`~boundedgate.DeadlineCut` of a request cut off at ``deadline``, over at ``ended``."""
        return DeadlineCut(
            gate=self.name,
            max_running=self.max_running,
            max_waiting=self.max_waiting,
            running=self.last_running,
            waiting=self.last_waiting,
            waited=started - arrival,
            elapsed=ended - arrival,
            deadline=deadline,
            overrun=max(0.0, ended - deadline),  # asyncio runs a timer up to its clock's resolution early
        )

    def late(self, arrival: float, started: float, ended: float, deadline: float) -> Late:
        """The :class:`~boundedgate.Late` error of a request that ended at ``ended``, past ``deadline``."""
        return Late(
            gate=self.name,
            max_running=self.max_running,
            max_waiting=self.max_waiting,
            running=self.last_running,
            waiting=self.last_waiting,
            waited=started - arrival,
            elapsed=ended - arrival,
            deadline=deadline,
            overrun=ended - deadline,
        )
