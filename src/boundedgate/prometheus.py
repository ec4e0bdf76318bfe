"""A Prometheus collector for gates (``pip install 'boundedgate[prometheus]'``).

::

    from prometheus_client import REGISTRY
    from boundedgate.prometheus import GateCollector

    REGISTRY.register(GateCollector(openai_gate, sessions))

Counts and gauges are read from ``stats()`` at each scrape (nothing per request); the histograms
are kept by the collector from the gates' observer hook, with the GenAI conventions' buckets.
Names follow Prometheus' rules (``_total`` counters, ``_seconds`` units) and match what an
OpenTelemetry export of ``boundedgate.otel`` becomes, with the labels ``gate`` and ``outcome``
(``boundedgate_gate`` / ``boundedgate_outcome`` there). The gates are held weakly.

The gates cannot see what the provider answers: call :func:`downstream_refused` (``"openai"``,
429) for each refusal your code gets from it (``GatedTransport`` does, for the requests it sends),
and it is counted as ``boundedgate_downstream_refusals_total{gate="openai",status="429"}``, the
series the dashboard's panel and alert read.

A cluster gate (``boundedgate.redis.RedisGate``) is reported from the cluster's state in Redis,
read in the background every ``refresh_interval`` seconds (a scrape never waits for Redis): its
counts, gauges and histograms are the cluster's, the same whichever process is scraped, so a
service under ``uvicorn --workers N`` serves them from any worker, with nothing to merge. Serve the
scrape from an ``async`` route that first awaits :meth:`GateCollector.refresh`, and every scrape
reads Redis after the one before it: each counter is at least what the previous scrape reported,
whichever worker answers. ``boundedgate_cluster_read_age_seconds`` says how old the read is, and
``boundedgate_cluster_events_total`` counts what only a cluster has (requests refused as
unavailable, leases reclaimed, holders counted again, waiters' places lapsed). A cluster keyed
gate (``boundedgate.redis.RedisKeyedGate``) is reported as a ``KeyedGate`` is, under its own name,
from the sums every process pushes to Redis each ``refresh_interval`` (docs/cluster.md, "Keys
across the cluster"): cluster-wide too, the same from any worker.

In-process gates in multiprocess servers: ``prometheus_client``'s multiprocess mode does not
support custom collectors, so this collector reports the in-process gates of the process that is
scraped, and nothing else. Such a gate is per process anyway (each worker has its own C and Q);
push through OpenTelemetry (OTLP) from every worker and sum in the queries (``sum by (gate)``), or
use a cluster gate, whose series are cluster-wide.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from ._core import OUTCOMES, RequestRecord, check_positive
from ._downstream import downstream_refusals, downstream_refused
from ._driver import BoundedGate, KeyedGate
from ._export import CLUSTER_EVENTS, DEFAULT_INTERVAL, GENAI_BUCKETS, HISTOGRAMS, Buckets, ClusterView, Gates

if TYPE_CHECKING:
    from .redis import RedisGate, RedisKeyedGate

__all__ = ("GateCollector", "downstream_refused")


def _prometheus_name(otel_name: str) -> str:
    """``boundedgate.request.time_in_queue`` (seconds) as Prometheus names it."""
    return otel_name.replace(".", "_") + "_seconds"


class GateCollector(Collector):
    """The metrics of some gates, for a ``prometheus_client`` registry.

    Args:
        gates: Gates, keyed gates and cluster gates (``RedisGate``, ``RedisKeyedGate``), held
            weakly.
        histograms: Observe the gates and keep the four histograms (False: counts and gauges
            only, read at scrape time, no cost per request).
        buckets: The histograms' upper bounds, in seconds (the same in every process that
            exports a cluster gate: its histograms are summed bucket by bucket in Redis).
        key_label: Put the key in a ``key`` label on the histograms (only for a bounded key set).
        queue_timeouts: The queue timeout each gate's callers use, by gate name, exported as
            ``boundedgate_queue_timeout_seconds`` for the alert on p99 time in queue.
        refresh_interval: Seconds between two background reads of a cluster gate's state (and
            pushes of this process's records to its histograms in Redis).

    Raises:
        TypeError: Something other than a gate (a list of gates, a key), with what to pass instead.
        ValueError: A cluster gate that another export of this process reports with other
            buckets.
    """

    def __init__(
        self,
        *gates: BoundedGate | KeyedGate[Any] | RedisGate | RedisKeyedGate,
        histograms: bool = True,
        buckets: tuple[float, ...] = GENAI_BUCKETS,
        key_label: bool = False,
        queue_timeouts: Mapping[str, float] | None = None,
        refresh_interval: float = DEFAULT_INTERVAL,
    ) -> None:
        bounds = tuple(buckets)
        interval = check_positive("refresh_interval", refresh_interval)
        self._gates = Gates(gates, "GateCollector", bounds if histograms else None, interval)
        self._key_label = key_label
        self._queue_timeouts = dict(queue_timeouts or {})
        self._histograms = histograms
        self._buckets = {spec.name: Buckets(bounds) for spec in HISTOGRAMS} if histograms else {}
        if histograms:
            for gate in self._gates.local():
                gate.observe(self._record)

    def _record(self, record: RequestRecord) -> None:
        labels: tuple[str, ...] = (record.gate,)
        if self._key_label:
            labels += ("" if record.key is None else str(record.key),)
        for spec in HISTOGRAMS:
            value = spec.value(record)
            if value is not None:
                self._buckets[spec.name].add(
                    (*labels, record.outcome.name) if spec.by_outcome else labels, value
                )

    async def refresh(self) -> None:
        """Read the cluster gates' state from Redis now, for the next collection.

        Await it in the ``async`` route that serves the scrape, before ``generate_latest``: then
        each scrape reports the cluster as it is, at least what any earlier scrape reported,
        whichever worker answers. It never raises for Redis: when Redis does not answer within
        the gate's ``op_timeout``, the scrape reports the last read (and its age). A no-op without
        cluster gates.
        """
        await self._gates.refresh()

    def close(self) -> None:
        """Stop observing the gates (unregister the collector from its registry too).

        A cluster gate's background read stops too, unless another export reads it.
        """
        if self._histograms:
            for gate in self._gates.local():
                gate.unobserve(self._record)
        self._gates.close()

    def collect(self) -> Iterator[Metric]:
        """The metrics now: called by the registry at each scrape."""
        snapshots = list(self._gates.snapshots())
        active = GaugeMetricFamily(
            "boundedgate_request_active", "Requests holding a running slot.", labels=["gate"]
        )
        queued = GaugeMetricFamily(
            "boundedgate_request_queued", "Requests waiting in the gate's queue.", labels=["gate"]
        )
        limit_running = GaugeMetricFamily(
            "boundedgate_limit_running", "The gate's running slots (C).", labels=["gate"]
        )
        limit_waiting = GaugeMetricFamily(
            "boundedgate_limit_waiting", "The gate's queue places (Q).", labels=["gate"]
        )
        keys = GaugeMetricFamily(
            "boundedgate_keys_active", "Keys of a keyed gate that have a gate now.", labels=["gate"]
        )
        requests = CounterMetricFamily(
            "boundedgate_requests", "Requests that ended, by outcome.", labels=["gate", "outcome"]
        )
        tokens = GaugeMetricFamily(
            "boundedgate_rate_limit_tokens", "Each rate limit's balance.", labels=["gate", "limit"]
        )
        for snapshot in snapshots:
            name = [snapshot.name]
            active.add_metric(name, snapshot.running)
            queued.add_metric(name, snapshot.waiting)
            if snapshot.max_running is not None:
                limit_running.add_metric(name, snapshot.max_running)
            if snapshot.max_waiting is not None:
                limit_waiting.add_metric(name, snapshot.max_waiting)
            if snapshot.keys is not None:
                keys.add_metric(name, snapshot.keys)
            for outcome in OUTCOMES:
                requests.add_metric([snapshot.name, outcome.name], snapshot.outcomes[outcome.name])
            for limit, balance in zip(snapshot.limits, snapshot.tokens, strict=True):
                tokens.add_metric([snapshot.name, limit], balance)
        yield from (active, queued, limit_running, limit_waiting, keys, requests, tokens)
        clusters = list(self._gates.clusters())
        if clusters:
            yield from _cluster_families(clusters)
        names = {snapshot.name for snapshot in snapshots} | {cluster.name for cluster in clusters}
        downstream = CounterMetricFamily(
            "boundedgate_downstream_refusals",
            "Refusals from the service behind the gate (downstream_refused()).",
            labels=["gate", "status"],
        )
        for (gate, status), count in sorted(downstream_refusals().items()):
            if gate in names:
                downstream.add_metric([gate, str(status)], count)
        yield downstream
        timeouts = GaugeMetricFamily(
            "boundedgate_queue_timeout_seconds", "The queue timeout the gate's callers use.", labels=["gate"]
        )
        for gate, seconds in sorted(self._queue_timeouts.items()):
            if gate in names:
                timeouts.add_metric([gate], seconds)
        yield timeouts
        base = ["gate", "key"] if self._key_label else ["gate"]
        for spec in HISTOGRAMS:
            if spec.name not in self._buckets:
                continue
            buckets = self._buckets[spec.name]
            family = HistogramMetricFamily(
                _prometheus_name(spec.name),
                spec.description,
                labels=[*base, "outcome"] if spec.by_outcome else base,
            )
            for labels in sorted(buckets.series):
                if labels[0] in names:
                    pairs, total = buckets.cumulative(labels)
                    family.add_metric(list(labels), pairs, total)
            for cluster in clusters:
                for (histogram, ending), (pairs, total) in sorted(cluster.histograms.items()):
                    if histogram == spec.name:
                        series = [cluster.name, *([""] if self._key_label else [])]
                        family.add_metric([*series, ending] if spec.by_outcome else series, pairs, total)
            yield family


def _cluster_families(clusters: list[ClusterView]) -> Iterator[Metric]:
    """What only the cluster gates export: the age of their read, and their events."""
    age = GaugeMetricFamily(
        "boundedgate_cluster_read_age_seconds",
        "Seconds since this process last read the cluster gate's state from Redis.",
        labels=["gate"],
    )
    events = CounterMetricFamily(
        "boundedgate_cluster_events",
        "What only a cluster gate counts: requests refused as unavailable, leases reclaimed, "
        "holders counted again after their lease lapsed, waiters' places lapsed.",
        labels=["gate", "event"],
    )
    for cluster in clusters:
        age.add_metric([cluster.name], cluster.age)
        for event in CLUSTER_EVENTS:
            if event in cluster.events:
                events.add_metric([cluster.name, event], cluster.events[event])
    yield age
    yield events
