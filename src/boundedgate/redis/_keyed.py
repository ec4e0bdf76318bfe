"""RedisKeyedGate: a cluster gate per key (tenant, session), with the API of ``KeyedGate``.

Theory of operation
===================

Each key is a cluster gate of its own, named ``f"{name}/{key}"``: its state lives in Redis under
its own hash tag (so the keys spread over a Redis Cluster's slots), and every process that uses
the same keyed gate name shares each key's C, Q, queue, buckets and limits set at runtime, through
the same Lua scripts as any :class:`RedisGate`. This module holds what is per process: the
key's gate *objects* (a :class:`RedisGate` each) and the table of them.

A key's gate object is made by the first call that needs it (:meth:`RedisKeyedGate._gate_for`)
and is held by nothing but its permits until a request arrives through it (``_fresh`` holds it
weakly, so that every permit taken meanwhile shares it): then a :class:`_Link` (the gate's
``side.keeper``) lists it in ``_gates``. The link hears of every ending (``ended``,
from the side's count) and looks, one loop step later, whether the gate is idle in this process:
nothing running, nothing waiting or on its way, no release or cancellation in flight. An idle
gate is kept among the ``keep_idle`` most recently idle keys, or dropped: its counters are folded
into the keyed gate's totals, its background work stopped, and it goes back to ``_fresh`` (weakly:
a permit taken from it before it was dropped still holds it, and the key's next permits share
it). So the gate objects in a process are bounded by its activity plus ``keep_idle``, never by
how many keys it ever saw. What a key learned (an adaptive C, limits set at runtime, its buckets'
balances) is in Redis, not in the object, so dropping the object forgets nothing; Redis forgets
a key ``idle_ttl`` after its last use.

A request that arrives through a gate object that is not its key's listed one (one dropped and
since replaced, which ``_fresh`` makes rare) lists that object if the key has none, or keeps it
beside the listed one (``_strays``) until it is idle. Both are gate objects of the same cluster
gate, as two processes' are: Redis holds the limits across them.

The leases of every key's holders are renewed by one thread per keyed gate and event loop (a
shared :class:`~._renewer.Renewer`), not one per key: a thousand busy tenants take one thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import EllipsisType, TracebackType
from typing import TYPE_CHECKING, Any, Never, Self, final

from .._core import (
    MAX_PAUSE,
    NOT_HISTORY,
    Adaptive,
    AdaptiveLimit,
    GateLimits,
    KeyedStatistics,
    RateLimit,
    check_count,
    check_limits,
    check_name,
    shown,
)
from .._driver import Observer
from .._streams import StreamOpener, StreamSource, StreamT
from ._gate import RedisGate, RedisPermit
from ._lacking import refuse_arguments
from ._process import ProcessSide
from ._renewer import Renewer, copier
from ._stats import ClusterStatistics, LocalCounters, RedisGateStatistics

if TYPE_CHECKING:
    from ._keyed_metrics import KeyedFeed

__all__ = ("RedisKeyedGate",)

#: A key's limits as ``overrides`` may give them: a :class:`GateLimits`, or a pair.
Limits = GateLimits | tuple[int | None, int | None]

#: The fields of RedisGateStatistics that count history (the core's rule: the others describe the
#: gate or the moment), summed over keys, the ``_max`` ones as maxima.
_FIELDS = tuple(f for f in dataclasses.fields(RedisGateStatistics) if f.name not in NOT_HISTORY)
_ZEROS: dict[str, float] = {f.name: 0.0 if f.type == "float" else 0 for f in _FIELDS}


@final
class _Link:
    """A key's gate object's tie to its keyed gate (the side's ``keeper``): see the module docstring."""

    __slots__ = ("gate", "key", "owner", "retired")

    def __init__(self, owner: RedisKeyedGate, key: str, gate: RedisGate) -> None:
        self.owner = owner
        self.key = key
        self.gate = gate
        #: True once it was dropped: an arrival lists it again, with fresh counters.
        self.retired = False

    def arrived(self) -> None:
        self.owner._arrived(self)

    def ended(self) -> None:
        loop = self.gate._side.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon(self.owner._settle, self)  # once the ending is done: holders, waiters

    def renewer(self, side: ProcessSide) -> Renewer | None:
        return self.owner._renewer_for(side)


@final
class RedisKeyedGate:
    """A cluster gate per key: a tenant's C, Q, queue and rate limits held across every process.

    ::

        client = redis.asyncio.Redis.from_url("redis://redis:6379/0")
        tenants = RedisKeyedGate(client, max_running=5, max_waiting=50, name="tenant")

        async with tenants.admit(tenant_id, timeout=30):
            reply = await client.chat.completions.create(...)

    :class:`~boundedgate.KeyedGate`'s API, with each key a :class:`RedisGate` named
    ``f"{name}/{key}"``: every process that gives the same ``name`` shares each key's limits, so a
    tenant's limit is the tenant's, not the tenant's times the number of workers. Admissions,
    refusals, errors and permits are those of the key's cluster gate (see docs/cluster.md, "Keys
    across the cluster"). What a ``KeyedGate`` has and a cluster gate lacks (priorities, deadline
    order) is refused with the way out.

    Keys are ``str`` (they name the key's state in Redis, the same in every process): convert
    others yourself, ``str(tenant_id)``, so that two processes name a key alike. In this process a
    key's gate object lives while anything runs or waits in it (plus the ``keep_idle`` most
    recently idle ones); in Redis a key's state lives until ``idle_ttl`` after its last use, so
    memory in Redis is bounded by the keys used within ``idle_ttl``. The leases of every key's
    holders are renewed by one thread for the whole keyed gate.

    Args:
        client: A ``redis.asyncio.Redis`` or ``RedisCluster`` client (the keys spread over slots).
        max_running: Running slots (C) for each key, cluster-wide, an int >= 1, or None for no limit
            on running (``rate_limits`` are then required).
        max_waiting: Queue places (Q) for each key, cluster-wide, an int >= 0, or None for unbounded.
        name: The keyed gate's name; each key's gate is named ``f"{name}/{key}"``.
        overrides: Limits for particular keys: a mapping from key to :class:`~boundedgate.GateLimits`
            (or a pair ``(max_running, max_waiting)``), or a function from key to one (or None for
            the template). Read when a key's gate object is made; limits set at runtime
            (:meth:`set_limits`) outrank them, in Redis, for every process.
        keep_idle: How many idle keys keep their gate objects (and their statistics) in this
            process, an int >= 0.
        rate_limits: Each key's own rate limits, cluster-wide (each key gets buckets of its own,
            in Redis, starting full).
        adaptive: A controller per key (as :class:`RedisGate`'s ``adaptive``): each key's C is
            learned cluster-wide from that key's signals and requests, and kept in Redis.
        feasible: Deadline-feasible admission for every key (as :class:`RedisGate`'s
            ``feasible``): each key's gate refuses at arrival, with
            :class:`~boundedgate.Infeasible`, what its own recent pace says cannot start (or
            finish) in time.
        idle_ttl: Seconds a key's state outlives its last use in Redis (default one hour; a
            ``RedisGate``'s default is a day).
        lease_ttl, poll_interval, waiter_ttl, op_timeout, max_stall, wait_replicas, wait_timeout:
            Each key's gate's, as for :class:`RedisGate`.
        **lacking: A ``KeyedGate``'s setting that a cluster gate lacks (``priorities=``...):
            refused, with the way out.

    Raises:
        TypeError, ValueError: A setting :class:`RedisGate` or :class:`~boundedgate.KeyedGate`
            would refuse, or overrides that are neither a mapping nor callable.
    """

    __slots__ = (
        "__weakref__",
        "_client",
        "_closing",
        "_created",
        "_dropped",
        "_feed",
        "_fresh",
        "_gates",
        "_idle",
        "_keep_idle",
        "_name",
        "_observers",
        "_override",
        "_overrides",
        "_peak_keys",
        "_peak_running",
        "_peak_waiting",
        "_renewer",
        "_retired",
        "_settings",
        "_strays",
        "_template",
    )

    def __init__(
        self,
        client: Any,
        *,
        max_running: int | None,
        max_waiting: int | None,
        name: str = "keyed",
        overrides: Mapping[str, Limits] | Callable[[str], Limits | None] | None = None,
        keep_idle: int = 0,
        rate_limits: Sequence[RateLimit] = (),
        adaptive: Adaptive | None = None,
        lease_ttl: float = 10.0,
        poll_interval: float = 0.5,
        waiter_ttl: float | None = None,
        op_timeout: float = 2.0,
        idle_ttl: float = 3600.0,
        max_stall: float = 60.0,
        wait_replicas: int = 0,
        wait_timeout: float = 0.1,
        feasible: bool = False,
        **lacking: Never,
    ) -> None:
        if lacking:
            raise refuse_arguments("RedisKeyedGate.__init__", lacking)
        self._settings: dict[str, Any] = {
            "rate_limits": tuple(rate_limits),
            "adaptive": adaptive,
            "lease_ttl": lease_ttl,
            "poll_interval": poll_interval,
            "waiter_ttl": waiter_ttl,
            "op_timeout": op_timeout,
            "idle_ttl": idle_ttl,
            "max_stall": max_stall,
            "wait_replicas": wait_replicas,
            "wait_timeout": wait_timeout,
            "feasible": feasible,
        }
        self._name = name = check_name(name)
        # The template, checked now as a key's gate is (RedisGate checks every setting; no I/O).
        RedisGate(client, max_running=max_running, max_waiting=max_waiting, name=name, **self._settings)
        self._client = client
        self._template = GateLimits(max_running, max_waiting)
        self._keep_idle = check_count("keep_idle", keep_idle)
        self._overrides: Mapping[str, Limits] | None = None
        self._override: Callable[[str], Limits | None] | None = None
        if isinstance(overrides, Mapping):
            for key, limits in overrides.items():
                check_limits(_checked_key(key), limits)
            self._overrides = overrides
        elif callable(overrides):
            self._override = overrides
        elif overrides is not None:
            raise TypeError(f"overrides must be a mapping or a function of the key, got {shown(overrides)}")
        #: Listed gate objects: every key with requests running or waiting here, and the idle kept.
        self._gates: dict[str, RedisGate] = {}
        #: Gate objects not listed, held by their permits alone (see the module docstring).
        self._fresh: weakref.WeakValueDictionary[str, RedisGate] = weakref.WeakValueDictionary()
        #: The idle keys among them, least recently idle first.
        self._idle: OrderedDict[str, None] = OrderedDict()
        #: Busy gate objects of keys that have another listed (see the module docstring).
        self._strays: set[RedisGate] = set()
        #: Dropped gates still stopping their background work (a waiter's poll, its listener).
        self._closing: set[asyncio.Task[None]] = set()
        #: The counters of the gate objects dropped so far, summed (maxima for the ``_max`` ones).
        self._retired: dict[str, float] = dict(_ZEROS)
        self._peak_running = self._peak_waiting = 0
        self._created = self._dropped = self._peak_keys = 0
        self._observers: list[Observer] = []
        #: The renewal thread's keeper every key's gate shares, for the loop they are bound to.
        self._renewer: Renewer | None = None
        #: The metrics exports' feed, made by the first (see ``_keyed_metrics.py``).
        self._feed: KeyedFeed | None = None

    # -- public API -------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The keyed gate's name, shared by every process that uses the same keyed gate."""
        return self._name

    @property
    def client(self) -> Any:
        """The Redis client the keys' gates talk through."""
        return self._client

    @property
    def max_running(self) -> int | None:
        """The template's running slots (C), for keys without an override."""
        return self._template.max_running

    @property
    def max_waiting(self) -> int | None:
        """The template's queue places (Q), for keys without an override."""
        return self._template.max_waiting

    @property
    def running(self) -> int:
        """Slots held by this process now, over all keys."""
        return sum(gate.running for gate in self._live())

    @property
    def waiting(self) -> int:
        """Requests of this process queued now, over all keys."""
        return sum(gate.waiting for gate in self._live())

    def admit(
        self,
        key: str,
        *,
        timeout: float | None = None,
        deadline: float | None = None,
        max_wait: float | None = None,
        raise_late: bool = True,
        cost: float | None = None,
        on_deadline: str = "late",
        **lacking: Never,
    ) -> RedisPermit:
        """A permit for one request through ``key``'s cluster gate: :meth:`RedisGate.admit` there.

        Raises (on entry): as :meth:`RedisGate.admit`, named after the key's gate (``"tenant/acme"``).

        Raises (at once):
            TypeError: A key that is not a str; a ``KeyedGate``'s ``priority=``, which a cluster
                gate lacks.
            TypeError, ValueError: As for :meth:`RedisGate.admit` (``on_deadline`` included), or
                limits from ``overrides`` out of range.
        """
        if lacking:
            raise refuse_arguments("RedisKeyedGate.admit", lacking)
        return self._gate_for(key).admit(
            timeout=timeout,
            deadline=deadline,
            max_wait=max_wait,
            raise_late=raise_late,
            cost=cost,
            on_deadline=on_deadline,
        )

    async def try_admit(
        self,
        key: str,
        *,
        timeout: float | None = None,
        deadline: float | None = None,
        cost: float | None = None,
        **lacking: Never,
    ) -> RedisPermit:
        """A permit holding a slot of ``key``'s cluster gate now, or a refusal now (one round trip).

        As :meth:`RedisGate.try_admit` on the key's gate.
        """
        if lacking:
            raise refuse_arguments("RedisKeyedGate.try_admit", lacking)
        return await self._gate_for(key).try_admit(timeout=timeout, deadline=deadline, cost=cost)

    def stream(
        self,
        key: str,
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
        """Admit a request through ``key``'s cluster gate and hand the opened stream its slot.

        As :meth:`RedisGate.stream` on the key's gate.
        """
        if lacking:
            raise refuse_arguments("RedisKeyedGate.stream", lacking)
        return self._gate_for(key).stream(
            source,
            timeout=timeout,
            deadline=deadline,
            max_wait=max_wait,
            raise_late=raise_late,
            cost=cost,
            on_deadline=on_deadline,
        )

    def get(self, key: str) -> RedisGate | None:
        """The gate object ``key`` has in this process now (running, waiting, or kept idle), if any.

        Never makes one. Use it for a key's own statistics here: ``keyed.get(key).stats()``.
        """
        return self._gates.get(key)

    def limits(self, key: str) -> GateLimits:
        """The limits a gate object for ``key`` is made with: the key's override, else the template.

        Limits set at runtime (:meth:`set_limits`) live in Redis and outrank these for every
        process while the key's state lives there: :meth:`cluster_stats` reads those.

        Raises:
            TypeError: A key that is not a str.
            TypeError, ValueError: The key's override is malformed or out of range.
        """
        limits: Limits | None = None
        key = _checked_key(key)
        if self._overrides is not None:
            limits = self._overrides.get(key)
        elif self._override is not None:
            limits = self._override(key)
        if limits is None:
            return self._template
        return check_limits(key, limits)

    async def set_limits(
        self,
        key: str,
        *,
        max_running: int | EllipsisType = ...,
        max_waiting: int | EllipsisType | None = ...,
    ) -> None:
        """Change ``key``'s C and/or Q for the whole cluster, now, as :meth:`RedisGate.set_limits`.

        Written to the key's state in Redis: every process's requests through the key follow them
        from their next step on, whatever their overrides say, until the key's state expires
        (``idle_ttl`` after its last use). The template is the constructor's: there is no
        ``set_limits`` without a key (the keys in Redis are not listed anywhere).

        Raises:
            TypeError: A key that is not a str.
            TypeError, ValueError: A limit the constructor would refuse (nothing changed).
            redis.exceptions.RedisError: Redis could not be reached within ``op_timeout``.
        """
        gate = self._held(key)
        await gate.set_limits(max_running=max_running, max_waiting=max_waiting)

    async def pause(self, key: str, seconds: float) -> None:
        """Start no request through ``key``, cluster-wide, for ``seconds``: :meth:`RedisGate.pause`."""
        await self._held(key).pause(seconds)

    async def signal(
        self, key: str, kind: str, *, retry_after: float | None = None, max_pause: float = MAX_PAUSE
    ) -> None:
        """Tell ``key``'s cluster gate what the provider answered for it, as :meth:`RedisGate.signal`.

        ``rate_limited`` with ``retry_after`` pauses that key cluster-wide; ``overloaded`` has the
        key's controller cut the key's C in Redis (with ``adaptive``); ``ignored`` changes nothing.
        A coroutine: it writes to Redis.
        """
        await self._held(key).signal(kind, retry_after=retry_after, max_pause=max_pause)

    def controller(self, key: str) -> AdaptiveLimit | None:
        """The adaptive controller of ``key``'s gate object here, None without one (or without ``adaptive``).

        What a key learned lives in Redis (its C, its window), not in the object: a key's next
        gate object starts from the cluster's C at its first reply.
        """
        gate = self._gates.get(key)
        return None if gate is None else gate.controller

    def sync_rate_limits(self, key: str, remaining: Mapping[str, float]) -> int:
        """Lower ``key``'s buckets to what the provider says is left: :meth:`RedisGate.sync_rate_limits`.

        The buckets live in Redis: a key without a gate object here is lowered too.
        """
        return self._held(key).sync_rate_limits(remaining)

    async def cluster_stats(self, key: str) -> ClusterStatistics:
        """``key``'s cluster view, read from Redis, as :meth:`RedisGate.cluster_stats`."""
        return await self._gate_for(key).cluster_stats()

    def stats(self) -> KeyedStatistics:
        """Statistics of this process's requests through every key: the gate counts, the counters summed.

        ``total`` is a :class:`RedisGateStatistics`: every key's counters summed, dropped keys'
        included; its limits are the sums of the live keys' (None if one is unbounded); its peaks
        are the largest of a single key's in this process (a lower bound of the sum's).
        """
        gates = self._live()
        values = dict(self._retired)
        max_running: int | None = 0
        max_waiting: int | None = 0
        peak_running, peak_waiting = self._peak_running, self._peak_waiting
        running = waiting = 0
        for gate in gates:
            snapshot = gate.stats()
            _fold(values, snapshot)
            slots, places = gate.max_running, gate.max_waiting
            max_running = None if max_running is None or slots is None else max_running + slots
            max_waiting = None if max_waiting is None or places is None else max_waiting + places
            peak_running = max(peak_running, snapshot.peak_running)
            peak_waiting = max(peak_waiting, snapshot.peak_waiting)
            running += snapshot.running
            waiting += snapshot.waiting
        summed = RedisGateStatistics(
            name=self._name,
            max_running=max_running,
            max_waiting=max_waiting,
            running=running,
            waiting=waiting,
            peak_running=peak_running,
            peak_waiting=peak_waiting,
            **values,  # type: ignore[arg-type]
        )
        listed = len(self._gates)
        return KeyedStatistics(
            name=self._name,
            keys=listed,
            busy_keys=listed - len(self._idle),
            peak_keys=self._peak_keys,
            created=self._created,
            dropped=self._dropped,
            total=summed,
        )

    def observe(self, callback: Observer) -> None:
        """Call ``callback`` with the record of every request of this process that ends, through any key.

        As :meth:`RedisGate.observe`; the records name the key's gate (``"tenant/acme"``).
        """
        self._observers.append(callback)
        for gate in self._live():
            gate.observe(callback)

    def unobserve(self, callback: Observer) -> None:
        """Stop calling ``callback``."""
        self._observers.remove(callback)
        for gate in self._live():
            gate.unobserve(callback)

    async def aclose(self) -> None:
        """Stop every key's background work here, as :meth:`RedisGate.aclose` does for each.

        The keyed gate may be used again afterwards; the client is not closed. The background
        work of the metrics exports stops too, after pushing this process's last counts.
        """
        feed = self._feed
        if feed is not None:
            await feed.aclose()
        for gate in self._live():
            await gate.aclose()
        while self._closing:
            await asyncio.wait(tuple(self._closing))
        renewer = self._renewer
        if renewer is not None:
            await renewer.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __len__(self) -> int:
        """The number of keys with a gate object in this process now."""
        return len(self._gates)

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` has a gate object in this process now."""
        return key in self._gates

    def __iter__(self) -> Iterator[str]:
        """The keys with a gate object in this process now (a snapshot)."""
        return iter(tuple(self._gates))

    def __repr__(self) -> str:
        return (
            f"<RedisKeyedGate {self._name!r} [here: keys {len(self._gates)} ({len(self._idle)} idle), "
            f"running {self.running}, waiting {self.waiting}]>"
        )

    def _cluster_feed(self) -> KeyedFeed:
        """The keyed gate's feed of the cluster's sums, made at the first call (by a metrics export)."""
        feed = self._feed
        if feed is None:
            from ._keyed_metrics import KeyedFeed  # noqa: PLC0415 - only for the metrics exports

            feed = self._feed = KeyedFeed(self)
        return feed

    # -- the table of keys ----------------------------------------------------------------------

    def _gate_for(self, key: str) -> RedisGate:
        """The key's listed gate object, else a fresh one (listed at its first arrival)."""
        if type(key) is not str:
            return self._create(key)  # refused there, with the way out (a str subclass is taken)
        gate = self._gates.get(key)
        if gate is None:
            gate = self._fresh.get(key)
            if gate is None:
                gate = self._create(key)
        return gate

    def _create(self, key: str) -> RedisGate:
        """A fresh gate object for ``key``, with its limits, tied to this keyed gate."""
        limits = self.limits(key)  # checks the key
        gate = RedisGate(
            self._client,
            max_running=limits.max_running,
            max_waiting=limits.max_waiting,
            name=f"{self._name}/{key}",
            **self._settings,
        )
        gate._side.keeper = _Link(self, key, gate)
        for callback in self._observers:
            gate.observe(callback)
        self._fresh[key] = gate
        self._created += 1
        return gate

    def _held(self, key: str) -> RedisGate:
        """``key``'s gate object for a call that may leave work in flight: listed until that is done."""
        gate = self._gates.get(key)
        if gate is None:
            gate = self._gate_for(key)
            link: _Link = gate._side.keeper  # type: ignore[assignment]  # a key's gate's keeper is its link
            self._list(link)
            asyncio.get_running_loop().call_soon(self._settle, link)
        return gate

    def _live(self) -> list[RedisGate]:
        """Every gate object of this keyed gate that may hold or wait: the listed, and the strays."""
        return [*self._gates.values(), *self._strays]

    def _list(self, link: _Link) -> None:
        key, gate = link.key, link.gate
        if link.retired:  # dropped before, its counters folded: it counts afresh, as a new gate
            link.retired = False
            gate._side.counters = LocalCounters()
            self._created += 1
        self._gates[key] = gate
        if self._fresh.get(key) is gate:
            del self._fresh[key]
        if len(self._gates) > self._peak_keys:
            self._peak_keys = len(self._gates)

    def _arrived(self, link: _Link) -> None:
        """A request arrives through ``link``'s gate object: it is listed (or kept as a stray)."""
        key, gate = link.key, link.gate
        listed = self._gates.get(key)
        if listed is gate:
            self._idle.pop(key, None)
        elif listed is None:
            self._list(link)
        else:
            self._strays.add(gate)

    def _renewer_for(self, side: ProcessSide) -> Renewer | None:
        """The renewal thread's keeper for ``side``'s loop, shared by every key (made at the first)."""
        loop = side.loop
        renewer = self._renewer
        if renewer is None or renewer._loop is not loop:
            make_client = copier(side.client)
            if make_client is None or loop is None:
                return None
            # The one on another loop (closed, or a test's last) ends by itself when idle.
            renewer = self._renewer = Renewer(side, loop, make_client, name=self._name)
        return renewer

    def _settle(self, link: _Link) -> None:
        """After an ending (one loop step later): drop or keep ``link``'s gate object if it is idle here."""
        gate = link.gate
        side = gate._side
        if side.holders or side.waiters:
            return
        if side.tasks:  # a release or cancellation still in flight: look again when it is done
            for task in tuple(side.tasks):
                task.add_done_callback(lambda _, link=link: self._settle(link))  # type: ignore[misc]
            return
        key = link.key
        if gate in self._strays:
            self._strays.discard(gate)
            self._retire(link)
            return
        if self._gates.get(key) is not gate:
            return
        keep = self._keep_idle
        if not keep:
            self._drop(key)
            return
        idle = self._idle
        idle[key] = None
        idle.move_to_end(key)
        if len(idle) > keep:
            self._drop(idle.popitem(last=False)[0])

    def _drop(self, key: str) -> None:
        gate = self._gates.pop(key)
        self._idle.pop(key, None)
        self._retire(gate._side.keeper)  # type: ignore[arg-type]  # a key's gate's keeper is its link

    def _retire(self, link: _Link) -> None:
        """Fold an idle gate object's counters into the totals and stop its background work."""
        gate = link.gate
        link.retired = True
        self._dropped += 1
        self._fresh.setdefault(link.key, gate)
        snapshot = gate.stats()
        _fold(self._retired, snapshot)
        self._peak_running = max(self._peak_running, snapshot.peak_running)
        self._peak_waiting = max(self._peak_waiting, snapshot.peak_waiting)
        side = gate._side
        renewer = self._renewer
        if renewer is not None:
            renewer.forget(side)
        if not side.background.running():
            return  # nothing runs for it (an uncontended key): nothing to stop
        task = side.bound().create_task(gate.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        task.add_done_callback(lambda _: _resume(side))


def _resume(side: ProcessSide) -> None:
    """After a dropped gate object's background work stopped: start it again if it is in use again."""
    if side.waiters or side.leases:
        side.background.watch()


def _fold(values: dict[str, float], snapshot: RedisGateStatistics) -> None:
    """Add ``snapshot``'s history to ``values``: counts and times summed, the ``_max`` ones maxima."""
    for field in _FIELDS:
        name = field.name
        value = getattr(snapshot, name)
        values[name] = max(values[name], value) if name.endswith("_max") else values[name] + value


def _checked_key(key: object) -> str:
    """``key``, a str; anything else is refused with the way out."""
    if not isinstance(key, str):
        raise TypeError(
            f"a RedisKeyedGate's keys are str (they name the key's state in Redis), got {shown(key)}: "
            "pass str(key), the same in every process"
        )
    return key
