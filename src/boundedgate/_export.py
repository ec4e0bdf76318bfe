"""What the metrics exports share: weak references to gates, their snapshots, the histograms.

Imports neither OpenTelemetry nor prometheus_client (nor redis): ``boundedgate.otel`` and
``boundedgate.prometheus`` are thin layers over this module.

An in-process gate is read from its ``stats()`` at each collection. A cluster gate
(``boundedgate.redis.RedisGate``) is read from the cluster's state in Redis, which the gate's feed
(``boundedgate/redis/_metrics.py``) reads in the background: a collection takes its latest
snapshot and never waits for Redis, whichever process collects, so every worker of a service
reports the same cluster-wide series. A cluster keyed gate (``RedisKeyedGate``) is read the same
way from the sums every process pushes (``boundedgate/redis/_keyed_metrics.py``), under the keyed
gate's name, as an in-process ``KeyedGate`` is.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._core import OUTCOMES, GateStatistics, Outcome, RequestRecord
from ._driver import BoundedGate, KeyedGate, is_cluster_gate, is_cluster_keyed

if TYPE_CHECKING:
    from .redis._keyed_metrics import KeyedFeed
    from .redis._metrics import ClusterFeed

__all__ = (
    "CLUSTER_EVENTS",
    "DEFAULT_INTERVAL",
    "GENAI_BUCKETS",
    "HISTOGRAMS",
    "REFUSALS",
    "Buckets",
    "ClusterView",
    "Gates",
    "HistogramSpec",
    "Snapshot",
    "measured",
    "refusal",
)

#: The GenAI semantic conventions' advisory buckets (seconds): powers of two from 10 ms to 82 s.
GENAI_BUCKETS: tuple[float, ...] = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip

#: The outcomes that are refusals: the caller got one of the gate's errors and never ran.
REFUSALS: tuple[Outcome, ...] = tuple(o for o in OUTCOMES if o.error_code is not None and not o.ran)

Gate = BoundedGate | KeyedGate[Any]

#: Seconds between two background reads of a cluster gate's state, unless an export says otherwise.
DEFAULT_INTERVAL = 5.0

#: The cluster counters (a cluster gate's ``stats`` hash in Redis) exported as events, not outcomes.
CLUSTER_EVENTS: tuple[str, ...] = ("unavailable", "reclaimed", "reattached", "lapsed")
#: Those a cluster keyed gate exports: what every process counts of its own and pushes.
KEYED_EVENTS: tuple[str, ...] = ("unavailable",)


@dataclass(frozen=True, slots=True)
class HistogramSpec:
    """One histogram fed by the records: its name (OpenTelemetry's), what it measures, and how."""

    name: str
    description: str
    #: The value a record gives it, or None when the record has nothing to give.
    value: Callable[[RequestRecord], float | None]
    #: It carries the outcome as an attribute.
    by_outcome: bool


def _queued(record: RequestRecord) -> float | None:
    return None if record.outcome.at_arrival else record.waited


HISTOGRAMS: tuple[HistogramSpec, ...] = (
    HistogramSpec(
        "boundedgate.request.time_in_queue",
        "Time requests spent in the gate's queue, by how they left it.",
        _queued,
        True,
    ),
    HistogramSpec(
        "boundedgate.request.lease.duration",
        "Time requests held a running slot.",
        lambda record: record.ran,
        True,
    ),
    HistogramSpec(
        "boundedgate.request.duration",
        "Time from a request's arrival at the gate to its outcome.",
        lambda record: record.end_to_end,
        True,
    ),
    HistogramSpec(
        "boundedgate.stream.time_to_first_chunk",
        "Time from a streamed request's start to the stream's first item.",
        lambda record: record.first_chunk,
        False,
    ),
)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One gate's numbers at one collection (a cluster gate's: the cluster's, as last read)."""

    name: str
    #: Requests holding a slot, and waiting, now.
    running: int
    waiting: int
    #: C and Q (None: not limited).
    max_running: int | None
    max_waiting: int | None
    #: Requests that ended, by outcome name, for every one of ``OUTCOMES``.
    outcomes: dict[str, int]
    #: Keys with a gate now (None for a plain gate).
    keys: int | None
    #: Its rate limits' names and balances, in one order (none for a keyed gate).
    limits: tuple[str, ...]
    tokens: tuple[float, ...]

    @classmethod
    def of(cls, name: str, stats: GateStatistics, keys: int | None, limits: tuple[str, ...]) -> Snapshot:
        """An in-process gate's snapshot from its statistics."""
        return cls(
            name,
            stats.running,
            stats.waiting,
            stats.max_running,
            stats.max_waiting,
            {outcome.name: getattr(stats, outcome.name) for outcome in OUTCOMES},
            keys,
            limits,
            stats.tokens if limits else (),
        )


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What only a cluster gate exports, at one collection: its read of Redis and its events."""

    name: str
    #: Seconds since the feed last read the cluster (since it started, before its first read).
    age: float
    #: The cluster's counters of what only a cluster has (``CLUSTER_EVENTS``); empty before a read.
    events: dict[str, int]
    #: The cluster's histograms as cumulative ``(le, count)`` pairs and sums, by (histogram,
    #: outcome): for the feed's buckets, when an export asked for them (else empty).
    histograms: dict[tuple[str, str], tuple[list[tuple[str, int]], float]]


def measured(record: RequestRecord) -> Iterator[tuple[tuple[str, str], float]]:
    """The value ``record`` gives each histogram, by (histogram, outcome): "" for none."""
    for spec in HISTOGRAMS:
        value = spec.value(record)
        if value is not None:
            yield (spec.name, record.outcome.name if spec.by_outcome else ""), value


def _fed(gate: object) -> bool:
    """True for a gate whose export reads Redis: a ``RedisGate`` or a ``RedisKeyedGate``."""
    return is_cluster_gate(gate) or is_cluster_keyed(gate)


def refusal(export: str, given: object) -> TypeError:
    """Why ``export`` (``"GateCollector"``, ``"instrument"``) takes no ``given``, and what to do instead."""
    kind = type(given)
    if (
        isinstance(given, tuple)
        and len(given) == 2
        and (isinstance(given[0], KeyedGate) or is_cluster_keyed(given[0]))
    ):
        keyed = type(given[0]).__name__
        return TypeError(
            f"{export}() exports a {keyed} whole (all its keys together, one series per outcome): "
            f"pass the {keyed} itself, not a ({keyed}, key) pair"
        )
    if isinstance(given, list | tuple | set | frozenset):
        return TypeError(
            f"{export}() takes each gate as an argument, {export}(*gates), not a {kind.__name__} of them"
        )
    return TypeError(
        f"{export}() takes BoundedGate, KeyedGate, RedisGate and RedisKeyedGate objects, got {given!r} "
        '(see docs/metrics.md, "Metrics, traces and logs")'
    )


class Gates:
    """The gates an export reads, held weakly: a gate nobody else holds drops out of the export.

    Args:
        gates: The gates, each a ``BoundedGate``, a ``KeyedGate``, a ``RedisGate`` or a
            ``RedisKeyedGate``.
        export: The export's name, for the error that refuses anything else (see :func:`refusal`).
        cluster_histograms: For a cluster gate: the buckets of the cluster's histograms to keep
            and read (None: the export does not read them).
        interval: For a cluster gate: seconds between two background reads of the cluster.
    """

    def __init__(
        self,
        gates: tuple[Any, ...],
        export: str,
        cluster_histograms: tuple[float, ...] | None = None,
        interval: float = DEFAULT_INTERVAL,
    ) -> None:
        for gate in gates:
            if not isinstance(gate, BoundedGate | KeyedGate) and not _fed(gate):
                raise refusal(export, gate)
        self._refs: list[weakref.ref[Any]] = [weakref.ref(gate) for gate in gates]
        self._bounds = cluster_histograms
        self._attached: list[weakref.ref[ClusterFeed | KeyedFeed]] = []
        try:
            for gate in gates:
                if _fed(gate):
                    feed = gate._cluster_feed()
                    feed.attach(cluster_histograms, interval, measured)
                    self._attached.append(weakref.ref(feed))
        except BaseException:
            self.close()  # the feeds attached before the one that refused are read no more
            raise

    def alive(self) -> Iterator[Any]:
        """The gates still alive."""
        self._refs = [ref for ref in self._refs if ref() is not None]
        for ref in self._refs:
            gate = ref()
            if gate is not None:
                yield gate

    def local(self) -> Iterator[Gate]:
        """The in-process gates still alive (those whose records the export observes itself)."""
        for gate in self.alive():
            if not _fed(gate):
                yield gate

    def feeds(self) -> Iterator[ClusterFeed | KeyedFeed]:
        """The feeds of the cluster gates (plain and keyed) still alive."""
        for gate in self.alive():
            if _fed(gate):
                yield gate._cluster_feed()

    def snapshots(self) -> Iterator[Snapshot]:
        """A snapshot of every gate still alive (of a cluster gate once its feed has read Redis)."""
        for gate in self.alive():
            if isinstance(gate, KeyedGate):
                # Each key has buckets of its own, whose balances add up to nothing: none exported.
                keyed = gate.stats()
                yield Snapshot.of(keyed.name, keyed.total, keyed.keys, ())
            elif isinstance(gate, BoundedGate):
                limits = tuple(limit.name for limit in gate.rate_limits)
                yield Snapshot.of(gate.name, gate.stats(), None, limits)
            else:
                read = gate._cluster_feed().snapshot
                if read is not None:
                    counters = read.counters
                    outcomes = {outcome.name: counters.get(outcome.name, 0) for outcome in OUTCOMES}
                    yield Snapshot(
                        gate.name, read.running, read.waiting, read.max_running, read.max_waiting,
                        outcomes, read.keys, (), (),
                    )  # fmt: skip

    def clusters(self) -> Iterator[ClusterView]:
        """What only the cluster gates still alive export."""
        for gate in self.alive():
            if not _fed(gate):
                continue
            feed = gate._cluster_feed()
            read = feed.snapshot
            kinds = CLUSTER_EVENTS if is_cluster_gate(gate) else KEYED_EVENTS
            events = {} if read is None else {event: read.counters.get(event, 0) for event in kinds}
            histograms = {}
            if read is not None and self._bounds is not None and feed.bounds == self._bounds:
                from .redis._metrics import bucketed  # noqa: PLC0415 - redis is there: a RedisGate is

                histograms = bucketed(read, self._bounds)
            yield ClusterView(feed.name, feed.age(), events, histograms)

    async def refresh(self) -> None:
        """Read every cluster gate's state now (a no-op without one); never raises for Redis."""
        for feed in list(self.feeds()):
            await feed.refresh()

    def close(self) -> None:
        """The export stops: the feeds it read stop reading, unless another export reads them."""
        attached, self._attached = self._attached, []
        for ref in attached:
            feed = ref()
            if feed is not None:
                feed.detach()


class Buckets:
    """Cumulative histograms kept by label values: bucket counts, sum and count, for Prometheus."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        # labels -> [counts per bound..., count above every bound], sum
        self.series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def add(self, labels: tuple[str, ...], value: float) -> None:
        """Count ``value`` under ``labels``."""
        entry = self.series.get(labels)
        if entry is None:
            entry = self.series[labels] = ([0] * (len(self.bounds) + 1), [0.0])
        counts, total = entry
        for index, bound in enumerate(self.bounds):
            if value <= bound:
                counts[index] += 1
                break
        else:
            counts[-1] += 1
        total[0] += value

    def cumulative(self, labels: tuple[str, ...]) -> tuple[list[tuple[str, int]], float]:
        """``(le, cumulative count)`` pairs ending at ``+Inf``, and the sum."""
        counts, total = self.series[labels]
        pairs: list[tuple[str, int]] = []
        running = 0
        for bound, count in zip((*self.bounds, math.inf), counts, strict=True):
            running += count
            pairs.append(("+Inf" if bound == math.inf else repr(bound), running))
        return pairs, total[0]
