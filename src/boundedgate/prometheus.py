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

Multiprocess servers (gunicorn with several workers): ``prometheus_client``'s multiprocess mode
does not support custom collectors, so this collector reports the gates of the process that is
scraped, and nothing else. A gate is per process anyway (each worker has its own C and Q); scrape
each worker on its own port (``start_http_server`` in a post-fork hook), or push through
OpenTelemetry (OTLP) from every worker, and sum in the queries (``sum by (gate)``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from ._core import OUTCOMES, RequestRecord
from ._downstream import downstream_refusals, downstream_refused
from ._driver import BoundedGate, KeyedGate
from ._export import GENAI_BUCKETS, HISTOGRAMS, Buckets, Gates

__all__ = ("GateCollector", "downstream_refused")


def _prometheus_name(otel_name: str) -> str:
    """``boundedgate.request.time_in_queue`` (seconds) as Prometheus names it."""
    return otel_name.replace(".", "_") + "_seconds"


class GateCollector(Collector):
    """The metrics of some gates, for a ``prometheus_client`` registry.

    Args:
        gates: Gates and keyed gates, held weakly.
        histograms: Observe the gates and keep the four histograms (False: counts and gauges
            only, read at scrape time, no cost per request).
        buckets: The histograms' upper bounds, in seconds.
        key_label: Put the key in a ``key`` label on the histograms (only for a bounded key set).
        queue_timeouts: The queue timeout each gate's callers use, by gate name, exported as
            ``boundedgate_queue_timeout_seconds`` for the alert on p99 time in queue.

    Raises:
        TypeError: Something other than a ``BoundedGate`` or a ``KeyedGate`` (a ``RedisGate``, a
            list of gates, a key), with what to pass instead.
    """

    def __init__(
        self,
        *gates: BoundedGate | KeyedGate[Any],
        histograms: bool = True,
        buckets: tuple[float, ...] = GENAI_BUCKETS,
        key_label: bool = False,
        queue_timeouts: Mapping[str, float] | None = None,
    ) -> None:
        self._gates = Gates(gates, "GateCollector")
        self._key_label = key_label
        self._queue_timeouts = dict(queue_timeouts or {})
        self._histograms = histograms
        self._buckets = {spec.name: Buckets(tuple(buckets)) for spec in HISTOGRAMS} if histograms else {}
        if histograms:
            for gate in gates:
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

    def close(self) -> None:
        """Stop observing the gates (unregister the collector from its registry too)."""
        if self._histograms:
            for gate in self._gates.alive():
                gate.unobserve(self._record)

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
            stats, name = snapshot.stats, [snapshot.name]
            active.add_metric(name, stats.running)
            queued.add_metric(name, stats.waiting)
            if stats.max_running is not None:
                limit_running.add_metric(name, stats.max_running)
            if stats.max_waiting is not None:
                limit_waiting.add_metric(name, stats.max_waiting)
            if snapshot.keys is not None:
                keys.add_metric(name, snapshot.keys)
            for outcome in OUTCOMES:
                requests.add_metric([snapshot.name, outcome.name], getattr(stats, outcome.name))
            for limit, balance in zip(snapshot.limits, stats.tokens, strict=True):
                tokens.add_metric([snapshot.name, limit], balance)
        yield from (active, queued, limit_running, limit_waiting, keys, requests, tokens)
        names = {snapshot.name for snapshot in snapshots}
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
            yield family
