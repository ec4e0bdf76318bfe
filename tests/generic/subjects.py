"""The subjects of the generic behaviour suite, each behind one small adapter.

Every generic test is written once, against :class:`Subject` (how to make a gate with C and Q,
how its clock runs) and :class:`Gate` (how to admit one request, how to read its counts). The
adapters are the only place that knows which subject is which: where a subject differs by
design, its adapter says so, with the README's reason, and the tests read that one flag.

Times in the tests are in *units*: ``subject.t(2)`` is two units in seconds. The in-process
subjects run on looptime's virtual clock, a unit is a second, and every instant is exact. The
Redis subject runs on the real clock against a real server, a unit is a quarter of a second, and
an instant is observed up to ``slack`` late, never early.
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import time
import uuid
from collections.abc import Callable
from typing import Any, TypedDict

from boundedgate import BoundedGate, GateStatistics, KeyedGate, RateLimit, admit_all
from tests.helpers import checked_gate

__all__ = ("OUTCOMES", "Counts", "Gate", "Subject", "make_subject", "sleep_until")

#: The outcomes the generic tests produce, as ``GateStatistics`` names its counters.
OUTCOMES = ("rejected", "expired", "cancelled", "completed", "late", "failed")

#: Loop turns an in-process condition may take to come true (a hand-off resumes its task in one).
TURNS = 20


@dataclasses.dataclass(frozen=True)
class Counts:
    """A subject's statistics, reduced to the fields every subject has."""

    running: int
    waiting: int
    peak_running: int
    peak_waiting: int
    admitted: int
    rejected: int
    expired: int
    cancelled: int
    completed: int
    late: int
    failed: int
    #: Outcomes no generic test can produce (evicted, rate limited): they must stay 0.
    other: int
    #: What the subject itself reports as arrived (``GateStatistics.arrived``).
    arrived: int
    #: The longest wait, run and arrival-to-end time, in seconds.
    queue_seconds_max: float
    run_seconds_max: float
    end_to_end_seconds_max: float

    @classmethod
    def of(cls, stats: GateStatistics) -> Counts:
        return cls(
            running=stats.running,
            waiting=stats.waiting,
            peak_running=stats.peak_running,
            peak_waiting=stats.peak_waiting,
            admitted=stats.admitted,
            rejected=stats.rejected,
            expired=stats.expired,
            cancelled=stats.cancelled,
            completed=stats.completed,
            late=stats.late,
            failed=stats.failed,
            other=stats.evicted + stats.rate_limited,
            arrived=stats.arrived,
            queue_seconds_max=stats.queue_seconds_max,
            run_seconds_max=stats.run_seconds_max,
            end_to_end_seconds_max=stats.end_to_end_seconds_max,
        )

    @property
    def outcomes(self) -> int:
        """Requests that reached their outcome."""
        return (
            self.rejected
            + self.expired
            + self.cancelled
            + self.completed
            + self.late
            + self.failed
            + self.other
        )

    def ended(self) -> dict[str, int]:
        """The counters of :data:`OUTCOMES`, by name."""
        return {name: getattr(self, name) for name in OUTCOMES}


class Gate(abc.ABC):
    """One gate of a subject, with C running slots and Q queue places."""

    #: Seconds a test waits for a request to end before it fails (virtual ones pass in no time).
    patience = 1000.0

    def __init__(self, name: str, max_running: int, max_waiting: int | None) -> None:
        #: The name its refusals carry.
        self.name = name
        self.max_running = max_running
        self.max_waiting = max_waiting

    @abc.abstractmethod
    def admit(self, *, timeout: float | None = None, deadline: float | None = None) -> Any:
        """A permit for one request (entering it with ``async with`` is the arrival)."""

    @abc.abstractmethod
    def counts(self) -> Counts:
        """The gate's statistics now."""

    async def peaks(self) -> tuple[int, int]:
        """The most requests ever running and waiting at once, where the gate enforces its limits."""
        counts = self.counts()
        return counts.peak_running, counts.peak_waiting

    async def quiet(self) -> None:  # noqa: B027 (a hook: only the Redis subject needs it)
        """Return once what the gate does in the background has landed (in process: nothing does)."""


class Subject(abc.ABC):
    """One kind of gate, and the clock its tests run on."""

    #: The test id.
    id: str
    #: Virtual time: every instant is exact.
    virtual = True
    #: Seconds per unit of the tests' time.
    unit = 1.0
    #: How late an instant may be observed (0 on virtual time; never early on any clock).
    slack = 0.0
    #: ``QueueFull`` is raised before the request's first suspension (DESIGN rule 3).
    refuses_before_suspending = True
    #: A queued request's place is free at the very instant its deadline passes (DESIGN rule 5).
    frees_place_at_deadline = True
    #: ``release()`` frees the slot before it returns, for the next waiter or a newcomer.
    releases_at_once = True
    #: How many steps a cancellation sweep tries, so that it lands at each of a request's awaits.
    sweep = range(14)

    def t(self, units: float) -> float:
        """``units`` of the tests' time, in seconds."""
        return units * self.unit

    @abc.abstractmethod
    def gate(self, max_running: int, max_waiting: int | None) -> Gate:
        """A new gate with these limits."""

    async def aclose(self) -> None:  # noqa: B027 (a hook: only the Redis subject needs it)
        """Release what the subject holds (clients, gates) at the end of a test."""

    def at(self, actual: float | None, expected: float) -> bool:
        """Whether ``actual`` is the instant ``expected``, as this subject's clock can observe it."""
        if actual is None:
            return False
        if self.virtual:
            return actual == expected
        return expected <= actual <= expected + self.slack

    async def step(self) -> None:
        """Let a request take its next step: one loop turn."""
        await asyncio.sleep(0)

    def same(self, one: float, other: float) -> bool:
        """Whether two readings of one instant agree (on a real clock, taken a few statements apart)."""
        # 50 ms: room for the process to be descheduled between the two statements on a shared
        # machine, and still a tenth of the shortest time the tests compare (two units).
        return one == other if self.virtual else abs(one - other) < 0.05

    async def until(self, check: Callable[[], bool], what: str) -> None:
        """Wait until ``check()``; fail if it takes longer than the subject allows."""
        for _ in range(TURNS):
            if check():
                return
            await asyncio.sleep(0)
        if not check():
            raise AssertionError(f"{what}: not within {TURNS} loop turns")


async def sleep_until(when: float) -> None:
    """Sleep until the loop's clock reads ``when`` or later: exactly ``when`` on virtual time."""
    loop = asyncio.get_running_loop()
    while loop.time() < when:
        woken = loop.create_future()
        handle = loop.call_at(when, woken.set_result, None)
        try:
            await woken
        finally:
            handle.cancel()


# -- the in-process subjects ---------------------------------------------------------------------


class _Local(Gate):
    def __init__(self, gate: BoundedGate, name: str) -> None:
        super().__init__(name, gate.max_running, gate.max_waiting)  # type: ignore[arg-type]
        self.gate = gate

    def counts(self) -> Counts:
        return Counts.of(self.gate.stats())


class _Plain(_Local):
    def admit(self, *, timeout: float | None = None, deadline: float | None = None) -> Any:
        return self.gate.admit(timeout=timeout, deadline=deadline)


class _AllOfOne(_Local):
    def admit(self, *, timeout: float | None = None, deadline: float | None = None) -> Any:
        return admit_all(self.gate, timeout=timeout, deadline=deadline)


class _Key(Gate):
    KEY = "k"

    def __init__(self, keyed: KeyedGate[str], max_running: int, max_waiting: int | None) -> None:
        super().__init__(f"{keyed.name}/{self.KEY}", max_running, max_waiting)
        self.keyed = keyed

    def admit(self, *, timeout: float | None = None, deadline: float | None = None) -> Any:
        return self.keyed.admit(self.KEY, timeout=timeout, deadline=deadline)

    def counts(self) -> Counts:
        # The key's gate is dropped whenever it is idle: the keyed gate's totals outlive it, and
        # with one key in use they are that key's.
        return Counts.of(self.keyed.stats().total)


class BoundedGateSubject(Subject):
    """A :class:`BoundedGate` (whose core checks its invariants after every event)."""

    id = "BoundedGate"

    def gate(self, max_running: int, max_waiting: int | None) -> Gate:
        return _Plain(checked_gate(max_running, max_waiting, name="generic"), "generic")


class KeyedGateSubject(Subject):
    """One key of a :class:`KeyedGate`."""

    id = "KeyedGate-key"

    def gate(self, max_running: int, max_waiting: int | None) -> Gate:
        keyed: KeyedGate[str] = KeyedGate(max_running=max_running, max_waiting=max_waiting, name="generic")
        return _Key(keyed, max_running, max_waiting)


class AdmitAllSubject(Subject):
    """``admit_all`` of one :class:`BoundedGate`."""

    id = "admit_all-of-one"

    def gate(self, max_running: int, max_waiting: int | None) -> Gate:
        return _AllOfOne(checked_gate(max_running, max_waiting, name="generic"), "generic")


# -- the cluster subject ----------------------------------------------------------------------


class _RedisSettings(TypedDict):
    """The timing keywords of ``RedisGate``, as the Redis subject sets them."""

    lease_ttl: float
    poll_interval: float
    waiter_ttl: float
    op_timeout: float


#: Settings under which nothing lapses on a loaded machine (as tests/distributed's CALM).
REDIS_SETTINGS: _RedisSettings = {
    "lease_ttl": 10.0,
    "poll_interval": 0.1,
    "waiter_ttl": 5.0,
    "op_timeout": 5.0,
}


class _Cluster(Gate):
    patience = 3 * REDIS_SETTINGS["op_timeout"]

    def __init__(self, gate: Any) -> None:
        super().__init__(gate.name, gate.max_running, gate.max_waiting)
        self.gate = gate

    def admit(self, *, timeout: float | None = None, deadline: float | None = None) -> Any:
        return self.gate.admit(timeout=timeout, deadline=deadline)

    def counts(self) -> Counts:
        # This process's requests: every generic test runs in one process, so they are all of them.
        return Counts.of(self.gate.stats())

    async def peaks(self) -> tuple[int, int]:
        # The limits are enforced in Redis, and so are its peaks; this process's own peaks (every
        # generic test runs in one process) must keep within them too: the larger of the two.
        counters = (await self.gate.cluster_stats()).counters
        local = self.gate.stats()
        return (
            max(counters.get("peak_running", 0), local.peak_running),
            max(counters.get("peak_waiting", 0), local.peak_waiting),
        )

    async def quiet(self) -> None:
        # Releases and cancellations are sent from tasks of their own (README, "release is
        # immediate" row): wait until Redis holds what this process holds, and counted what it did.
        patience = REDIS_SETTINGS["op_timeout"]
        give_up = time.monotonic() + patience
        while True:
            view = await self.gate.cluster_stats()
            local = self.counts()
            seen = {name: view.counters.get(name, 0) for name in local.ended()}
            here = (view.running, view.waiting, view.counters.get("admitted", 0), seen)
            if here == (local.running, local.waiting, local.admitted, local.ended()):
                return
            if time.monotonic() > give_up:
                raise AssertionError(
                    f"Redis does not agree with this process after {patience}s: "
                    f"Redis {here}, process {(local.running, local.waiting, local.admitted, local.ended())}"
                )
            await asyncio.sleep(0.01)


class RedisGateSubject(Subject):
    """A :class:`~boundedgate.redis.RedisGate` on a real redis-server, in real time."""

    id = "RedisGate"
    virtual = False
    unit = 0.25
    # A grant whose message is lost comes with the next poll (poll_interval); the rest is room for
    # a loaded, shared machine, far below any time a wrong design would take (waiter_ttl, 5 s).
    slack = REDIS_SETTINGS["poll_interval"] + 1.0
    # QueueFull comes after one round trip to Redis, where the decision is taken atomically
    # (README, the RedisGate table: "QueueFull before any suspension" is in-process only).
    refuses_before_suspending = False
    # QueueExpired is raised at the deadline on the loop's clock, but the place in Redis frees one
    # round trip later, by a cancellation script (README, the RedisGate table).
    frees_place_at_deadline = False
    # release() ends the permit at once and sends the release to Redis from a task of its own; the
    # `async with` exit waits for it (README, the RedisGate table: "release is immediate").
    releases_at_once = False
    # A round trip to Redis takes many loop turns: the sweep goes further, in strides.
    sweep = range(0, 120, 3)

    def __init__(self, url: str) -> None:
        self._url = url
        self._clients: list[Any] = []
        self._gates: list[Any] = []

    def _client(self) -> Any:
        import redis.asyncio

        client = redis.asyncio.Redis.from_url(self._url)
        self._clients.append(client)
        return client

    #: The gate's rate limits (none: the plain cluster gate).
    rate_limits: tuple[RateLimit, ...] = ()

    def gate(self, max_running: int, max_waiting: int | None) -> Gate:
        from boundedgate.redis import RedisGate

        # A client of its own, as a process that has just started has: its first admission also
        # opens the connection, one more await at which a cancellation can land.
        gate = RedisGate(
            self._client(),
            max_running=max_running,
            max_waiting=max_waiting,
            name=f"generic-{uuid.uuid4().hex[:12]}",
            rate_limits=self.rate_limits,
            **REDIS_SETTINGS,
        )
        self._gates.append(gate)
        return _Cluster(gate)

    async def aclose(self) -> None:
        try:
            for gate in self._gates:
                await gate.aclose()
        finally:
            for client in self._clients:
                await client.aclose()

    async def until(self, check: Callable[[], bool], what: str) -> None:
        patience = REDIS_SETTINGS["op_timeout"]
        give_up = time.monotonic() + patience
        while not check():
            if time.monotonic() > give_up:
                raise AssertionError(f"{what}: not within {patience}s")
            await asyncio.sleep(0.005)


class RatedRedisGateSubject(RedisGateSubject):
    """A :class:`~boundedgate.redis.RedisGate` with rate limits, on a real redis-server.

    Its buckets never run dry in a generic test (each is far deeper than a test's requests), so
    every behaviour holds as without them, while every admission, hand-off and cancellation goes
    through the scripts' rate-limit path: the buckets read, taken, given back.
    """

    id = "RedisGate-rated"
    rate_limits = (
        RateLimit.per_second(100_000, name="rps"),
        RateLimit.per_second(1e9, unit="tokens", name="tps"),
    )


class _ClusterKey:
    """One key of a :class:`~boundedgate.redis.RedisKeyedGate`, as :class:`_Cluster` uses a RedisGate."""

    def __init__(self, keyed: Any, key: str) -> None:
        self.keyed = keyed
        self.key = key
        self.name = f"{keyed.name}/{key}"
        self.max_running = keyed.max_running
        self.max_waiting = keyed.max_waiting

    def admit(self, *, timeout: float | None = None, deadline: float | None = None) -> Any:
        return self.keyed.admit(self.key, timeout=timeout, deadline=deadline)

    def stats(self) -> GateStatistics:
        # The key's gate object is dropped whenever it is idle: the keyed gate's totals outlive
        # it, and with one key in use they are that key's.
        return self.keyed.stats().total  # type: ignore[no-any-return]

    async def cluster_stats(self) -> Any:
        return await self.keyed.cluster_stats(self.key)


class RedisKeyedGateSubject(RedisGateSubject):
    """One key of a :class:`~boundedgate.redis.RedisKeyedGate` on a real redis-server, in real time."""

    id = "RedisKeyedGate-key"

    def gate(self, max_running: int, max_waiting: int | None) -> Gate:
        from boundedgate.redis import RedisKeyedGate

        keyed = RedisKeyedGate(
            self._client(),
            max_running=max_running,
            max_waiting=max_waiting,
            name=f"generic-{uuid.uuid4().hex[:12]}",
            **REDIS_SETTINGS,
        )
        self._gates.append(keyed)
        return _Cluster(_ClusterKey(keyed, "k"))


#: The cluster subjects, by id; they need a server (see conftest).
REDIS_SUBJECTS: dict[str, type[RedisGateSubject]] = {
    cls.id: cls for cls in (RedisGateSubject, RatedRedisGateSubject, RedisKeyedGateSubject)
}

#: The in-process subjects, by id; the Redis one needs a server (see conftest).
LOCAL_SUBJECTS: dict[str, type[Subject]] = {
    cls.id: cls for cls in (BoundedGateSubject, KeyedGateSubject, AdmitAllSubject)
}


def make_subject(id: str, redis_url: Callable[[], str]) -> Subject:
    """The subject ``id``; ``redis_url()`` is only called for the Redis ones."""
    if id in REDIS_SUBJECTS:
        return REDIS_SUBJECTS[id](redis_url())
    return LOCAL_SUBJECTS[id]()
