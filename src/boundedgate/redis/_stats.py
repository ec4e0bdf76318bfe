"""What a cluster gate reports: this process's statistics, and the cluster's state read from Redis."""

from __future__ import annotations

from dataclasses import dataclass, field

from .._core import OUTCOMES, RECENT_RUN_WEIGHT, GateStatistics

__all__ = ("ClusterHolder", "ClusterStatistics", "ClusterWaiter", "LocalCounters", "RedisGateStatistics")


@dataclass(frozen=True, slots=True)
class RedisGateStatistics(GateStatistics):
    """:class:`~boundedgate.GateStatistics` of one process's requests through a cluster gate.

    Every inherited field counts this process's requests only (``running`` is the slots this
    process holds, ``peak_running`` its own peak); :meth:`RedisGate.cluster_stats` reads the
    cluster's. Requests refused with :class:`~boundedgate.GateUnavailable` appear only in
    ``unavailable``.
    """

    #: Requests refused with ``GateUnavailable`` (Redis unreachable, or a queue place lost).
    unavailable: int = 0
    #: Requests admitted through the local fallback gate because Redis was unreachable.
    fallbacks: int = 0
    #: Permits whose lease lapsed, or whose server forgot them, while they ran (``permit.lease_lost``).
    lease_lost: int = 0
    #: Times the gate saw a new epoch: Redis lost the gate's state (a restart, a failover, a flush).
    epoch_changes: int = 0
    #: Releases or cancellations that failed at first and were retried in the background.
    retries: int = 0
    #: Calls whose writes fewer than ``wait_replicas`` replicas acknowledged within ``wait_timeout``.
    unreplicated: int = 0


class LocalCounters:
    """The mutable counters behind :class:`RedisGateStatistics` (one per gate object)."""

    __slots__ = (
        "aborted",
        "admitted",
        "cancelled",
        "completed",
        "cut",
        "disconnected",
        "end_to_end_seconds_max",
        "end_to_end_seconds_total",
        "epoch_changes",
        "evicted",
        "expired",
        "failed",
        "fallbacks",
        "infeasible",
        "late",
        "leaked",
        "lease_lost",
        "peak_running",
        "peak_waiting",
        "queue_seconds_max",
        "queue_seconds_total",
        "rate_limited",
        "recent_run_seconds",
        "rejected",
        "retries",
        "run_seconds_max",
        "run_seconds_total",
        "unavailable",
        "unreplicated",
    )

    def __init__(self) -> None:
        self.admitted = self.rejected = self.expired = self.cancelled = 0
        self.completed = self.late = self.failed = self.leaked = self.aborted = self.disconnected = 0
        self.rate_limited = self.infeasible = self.cut = 0
        self.evicted = 0  # a cluster gate has no priority classes: nothing is ever evicted
        self.peak_running = self.peak_waiting = 0
        self.unavailable = self.fallbacks = self.lease_lost = self.epoch_changes = self.retries = 0
        self.unreplicated = 0
        self.queue_seconds_total = self.queue_seconds_max = 0.0
        self.run_seconds_total = self.run_seconds_max = 0.0
        self.end_to_end_seconds_total = self.end_to_end_seconds_max = 0.0
        #: Moving average of recent run times, for ``retry_after`` (None before any run ended).
        self.recent_run_seconds: float | None = None

    def waited(self, seconds: float) -> None:
        """Record a wait that ended (started, expired or cancelled)."""
        self.queue_seconds_total += seconds
        if seconds > self.queue_seconds_max:
            self.queue_seconds_max = seconds

    def ran(self, run: float, total: float) -> None:
        """Record a run that ended, and its arrival-to-end time."""
        self.run_seconds_total += run
        if run > self.run_seconds_max:
            self.run_seconds_max = run
        recent = self.recent_run_seconds
        self.recent_run_seconds = run if recent is None else recent + RECENT_RUN_WEIGHT * (run - recent)
        self.end_to_end_seconds_total += total
        if total > self.end_to_end_seconds_max:
            self.end_to_end_seconds_max = total

    def snapshot(
        self, name: str, max_running: int, max_waiting: int | None, running: int, waiting: int
    ) -> RedisGateStatistics:
        """An immutable copy, with the live counts given."""
        return RedisGateStatistics(
            name=name,
            max_running=max_running,
            max_waiting=max_waiting,
            running=running,
            waiting=waiting,
            peak_running=self.peak_running,
            peak_waiting=self.peak_waiting,
            admitted=self.admitted,
            **{outcome.name: getattr(self, outcome.name) for outcome in OUTCOMES},
            queue_seconds_total=self.queue_seconds_total,
            queue_seconds_max=self.queue_seconds_max,
            run_seconds_total=self.run_seconds_total,
            run_seconds_max=self.run_seconds_max,
            end_to_end_seconds_total=self.end_to_end_seconds_total,
            end_to_end_seconds_max=self.end_to_end_seconds_max,
            unavailable=self.unavailable,
            fallbacks=self.fallbacks,
            lease_lost=self.lease_lost,
            epoch_changes=self.epoch_changes,
            retries=self.retries,
            unreplicated=self.unreplicated,
        )


@dataclass(frozen=True, slots=True)
class ClusterHolder:
    """One request holding a slot of a cluster gate, as Redis sees it."""

    #: The permit's id (``host/pid/random#n``: the process that holds it, and a serial number).
    id: str
    #: The process's agent id (``host/pid/random``).
    process: str
    #: Fencing token: increases with every grant of this gate (within one epoch).
    token: int
    #: Seconds it has held the slot, on the server's clock.
    held_for: float
    #: Seconds until its lease lapses unless renewed (<= 0: lapsed, reclaimed at the next operation).
    lease_left: float


@dataclass(frozen=True, slots=True)
class ClusterWaiter:
    """One request waiting in a cluster gate's queue, as Redis sees it."""

    #: The waiter's id.
    id: str
    #: The process's agent id.
    process: str
    #: 0 for the head of the queue.
    position: int
    #: Seconds it has waited, on the server's clock.
    waited: float
    #: Seconds until its deadline (server's copy), or None without one.
    deadline_in: float | None
    #: Seconds until its place lapses unless its process renews it (or its deadline, if sooner).
    due_in: float


@dataclass(frozen=True, slots=True)
class ClusterStatistics:
    """A cluster gate's live state and counters, read from Redis in one transaction.

    Counters are cluster-wide since the gate's state was created (``epoch``); they live as long as
    the gate's keys (``idle_ttl`` after its last use). ``max_running`` and ``max_waiting`` are the
    limits the latest admission used (None if the gate has no state in Redis).

    A gate with rate limits keeps its buckets in Redis: ``tokens`` shows their balances on the
    server's clock of the read, when the reader knows the limits (:meth:`RedisGate.cluster_stats`
    does; ``read_cluster`` when given them). Without them, ``buckets_empty_in`` shows what Redis
    holds, which no reader can turn into a balance without each limit's rate and burst.
    """

    #: The gate's name.
    name: str
    #: When the gate's state was created, on the server's clock (``"seconds.microseconds"``), or None.
    epoch: str | None
    #: The server's clock when this was read, in seconds since the epoch.
    server_time: float
    #: Running slots (C) the latest admission used.
    max_running: int | None
    #: Queue places (Q) the latest admission used (None: unbounded or unknown).
    max_waiting: int | None
    #: Holders now, each with its lease.
    holders: tuple[ClusterHolder, ...]
    #: Waiters now, head first.
    waiters: tuple[ClusterWaiter, ...]
    #: Cluster counters: admitted, rejected, expired, cancelled, completed, late, failed,
    #: leaked (permits collected without a release, given back by their process),
    #: reclaimed (leases that lapsed), reattached (holders counted again after that), failovers
    #: (new epochs because the state was found on a server of another replication history), lapsed
    #: (waiters whose process stopped renewing their place), peak_running, peak_waiting.
    counters: dict[str, int]
    #: Each existing key of the gate and its remaining TTL in seconds.
    key_ttls: dict[str, float]
    #: The balance of each rate limit's bucket, by the limit's name, at ``server_time``: as
    #: ``GateStatistics.tokens`` (below 0: a debt). Empty when the reader was not given the limits.
    tokens: dict[str, float] = field(default_factory=dict)
    #: Each bucket's "empty at" moment as Redis keeps it (meta's ``b1``, ``b2``..., by position in
    #: the gate's ``rate_limits``), in seconds from ``server_time``: negative, it emptied that long
    #: ago (a bucket refills at its rate from then, up to its burst); positive, a debt it is empty
    #: until. A bucket that was never taken from (full) is absent.
    buckets_empty_in: dict[str, float] = field(default_factory=dict)
    #: The costs of the requests waiting in the queue, summed (meta's ``qcost``).
    queued_cost: float = 0.0

    @property
    def running(self) -> int:
        """Holders now."""
        return len(self.holders)

    @property
    def waiting(self) -> int:
        """Waiters now."""
        return len(self.waiters)
