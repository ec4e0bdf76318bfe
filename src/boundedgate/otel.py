"""OpenTelemetry metrics and span events for gates (``pip install 'boundedgate[otel]'``).

::

    from boundedgate.otel import instrument

    handle = instrument(openai_gate, sessions)   # the global MeterProvider; the current span
    ...
    handle.close()

The names follow ASP.NET Core's ``aspnetcore.rate_limiting.*`` meters and the
``db.client.connection.*`` pool conventions. Counts and gauges (``boundedgate.request.active``,
``.queued``, ``boundedgate.limit.*``, ``boundedgate.requests`` by outcome, rate-limit balances,
keys) are observable instruments read from ``stats()`` at collection time: nothing per request.
The histograms (time in queue, lease duration, request duration, time to first chunk; seconds,
with the GenAI conventions' advisory buckets) and the span events are fed by the gate's observer
hook. Every series carries ``boundedgate.gate``, the gate's name; never the key, unless
``key_attribute=True`` (on the histograms only: keys are unbounded).

The gates are held weakly: a gate that is dropped stops being reported.

A cluster gate (``boundedgate.redis.RedisGate``) is reported from the cluster's state in Redis,
read in the background every ``refresh_interval`` seconds (a collection never waits for Redis):
its counts and gauges are the cluster's, the same in every process that reports them (aggregate
them across processes with ``max``, not ``sum``), with the age of the read
(``boundedgate.cluster.read.age``) and what only a cluster counts (``boundedgate.cluster.events``).
Its histograms and span events are this process's requests', from its observer hook, as for an
in-process gate: each process exports its own, and a backend sums them. A cluster keyed gate
(``boundedgate.redis.RedisKeyedGate``) is reported as a ``KeyedGate`` is, under its own name: its
counts and gauges from the sums every process pushes to Redis, its histograms this process's.

The gates cannot see what the provider answers: call :func:`downstream_refused` (``"openai"``,
429) for each refusal your code gets from it (``GatedTransport`` does, for the requests it sends),
and it is counted in ``boundedgate.downstream.refusals``, by gate and status.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Observation

from ._core import OUTCOMES, RequestRecord, check_positive
from ._downstream import downstream_refusals, downstream_refused
from ._driver import BoundedGate, KeyedGate, is_cluster_keyed
from ._export import CLUSTER_EVENTS, DEFAULT_INTERVAL, GENAI_BUCKETS, HISTOGRAMS, Gates, Snapshot

if TYPE_CHECKING:
    from .redis import RedisGate, RedisKeyedGate

__all__ = ("SPAN_EVENT", "Instrumentation", "downstream_refused", "instrument")

#: The name of the event added to the caller's current span for each request.
SPAN_EVENT = "boundedgate.admission"

_GATE = "boundedgate.gate"
_OUTCOME = "boundedgate.outcome"

# Outcomes decided in the caller's own task (its span is the current one then); the others are
# decided by the gate's timer or by another request (an expiry, an eviction, a leak), whose
# current span is someone else's.
_IN_CALLER = frozenset(o.name for o in OUTCOMES if o.ran or o.at_arrival) - {"leaked"}


class Instrumentation:
    """The instruments of :func:`instrument` for some gates; :meth:`close` stops them."""

    def __init__(
        self,
        gates: tuple[Any, ...],
        meter_provider: metrics.MeterProvider | None,
        histograms: bool,
        spans: bool,
        key_attribute: bool,
        refresh_interval: float = DEFAULT_INTERVAL,
    ) -> None:
        self._gates = Gates(gates, "instrument", None, check_positive("refresh_interval", refresh_interval))
        self._closed = False
        self._key_attribute = key_attribute
        meter = metrics.get_meter("boundedgate", _version(), meter_provider)
        self._spans = spans
        self._histograms = (
            [
                (
                    spec,
                    meter.create_histogram(
                        spec.name,
                        unit="s",
                        description=spec.description,
                        explicit_bucket_boundaries_advisory=list(GENAI_BUCKETS),
                    ),
                )
                for spec in HISTOGRAMS
            ]
            if histograms
            else []
        )
        gauges = (
            ("boundedgate.request.active", "{request}", "Requests holding a running slot.", _active),
            ("boundedgate.request.queued", "{request}", "Requests waiting in the gate's queue.", _queued),
            ("boundedgate.limit.running", "{request}", "The gate's running slots (C).", _limit_running),
            ("boundedgate.limit.waiting", "{request}", "The gate's queue places (Q).", _limit_waiting),
            ("boundedgate.keys.active", "{key}", "Keys of a keyed gate that have a gate now.", _keys),
        )
        for name, unit, description, read in gauges:
            meter.create_observable_up_down_counter(
                name, callbacks=[self._callback(read)], unit=unit, description=description
            )
        meter.create_observable_counter(
            "boundedgate.requests",
            callbacks=[self._callback(_requests)],
            unit="{request}",
            description="Requests that ended, by outcome.",
        )
        meter.create_observable_gauge(
            "boundedgate.rate_limit.tokens",
            callbacks=[self._callback(_tokens)],
            unit="{token}",
            description="Each rate limit's balance (requests, for a limit counted in requests).",
        )
        meter.create_observable_counter(
            "boundedgate.downstream.refusals",
            callbacks=[self._downstream],
            unit="{request}",
            description="Refusals from the service behind the gate (downstream_refused()).",
        )
        meter.create_observable_gauge(
            "boundedgate.cluster.read.age",
            callbacks=[self._age],
            unit="s",
            description="Seconds since this process last read the cluster gate's state from Redis.",
        )
        meter.create_observable_counter(
            "boundedgate.cluster.events",
            callbacks=[self._events],
            unit="{event}",
            description="What only a cluster gate counts: requests refused as unavailable, leases "
            "reclaimed, holders counted again after their lease lapsed, waiters' places lapsed.",
        )
        self._observing = histograms or spans
        # A RedisKeyedGate's records name the key's gate (``tenant/acme``): reported as its own.
        self._observers: list[tuple[Any, Callable[[RequestRecord], None]]] = []
        if self._observing:
            for gate in gates:
                callback = _renaming(gate.name, self._record) if is_cluster_keyed(gate) else self._record
                gate.observe(callback)
                self._observers.append((weakref.ref(gate), callback))

    def _callback(self, read: Any) -> Any:
        def callback(options: CallbackOptions) -> Iterable[Observation]:
            if self._closed:
                return []
            return [obs for snapshot in self._gates.snapshots() for obs in read(snapshot)]

        return callback

    def _downstream(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._closed:
            return []
        names = {snapshot.name for snapshot in self._gates.snapshots()}
        return [
            Observation(count, {_GATE: gate, "http.response.status_code": status})
            for (gate, status), count in downstream_refusals().items()
            if gate in names
        ]

    def _age(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._closed:
            return []
        return [Observation(cluster.age, {_GATE: cluster.name}) for cluster in self._gates.clusters()]

    def _events(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._closed:
            return []
        return [
            Observation(cluster.events[event], {_GATE: cluster.name, "boundedgate.event": event})
            for cluster in self._gates.clusters()
            for event in CLUSTER_EVENTS
            if event in cluster.events
        ]

    def _record(self, record: RequestRecord) -> None:
        attributes: dict[str, Any] = {_GATE: record.gate}
        if self._key_attribute and record.key is not None:
            attributes["boundedgate.key"] = str(record.key)
        with_outcome = {**attributes, _OUTCOME: record.outcome.name}
        for spec, histogram in self._histograms:
            value = spec.value(record)
            if value is not None:
                histogram.record(value, with_outcome if spec.by_outcome else attributes)
        if self._spans and record.outcome.name in _IN_CALLER:
            span = trace.get_current_span()
            if span.is_recording():
                span.add_event(SPAN_EVENT, span_attributes(record))

    async def refresh(self) -> None:
        """Read the cluster gates' state from Redis now, for the next collection.

        Never raises for Redis (the last read stays, with its age); a no-op without cluster gates.
        """
        await self._gates.refresh()

    def close(self) -> None:
        """Stop: the observable instruments report nothing more, and the gates stop being observed.

        A cluster gate's background read stops too, unless another export reads it.
        """
        if self._closed:
            return
        self._closed = True
        observers, self._observers = self._observers, []
        for ref, callback in observers:
            gate = ref()
            if gate is not None:
                gate.unobserve(callback)
        self._gates.close()


def _renaming(name: str, record: Callable[[RequestRecord], None]) -> Callable[[RequestRecord], None]:
    """``record``, given each record of keyed gate ``name``'s keys as a ``KeyedGate`` gives them.

    The key's gate ``name/key`` becomes the keyed gate ``name``, with the key.
    """
    prefix = name + "/"

    def renamed(given: RequestRecord) -> None:
        if given.key is None and given.gate.startswith(prefix):
            given = dataclasses.replace(given, gate=name, key=given.gate.removeprefix(prefix))
        record(given)

    return renamed


def _version() -> str:
    import boundedgate  # noqa: PLC0415 - this module is imported from boundedgate's own import

    return boundedgate.__version__


def span_attributes(record: RequestRecord) -> dict[str, Any]:
    """The admission fields of one request, as span attributes."""
    key = record.gate if record.key is None else f"{record.gate}/{record.key}"
    attributes: dict[str, Any] = {
        _GATE: record.gate,
        "rate_limit_key": key,
        "waited_ms": record.waited * 1000.0,
        "limited": record.limited,
        "decision": record.decision,
        "borrowed_burst": record.borrowed_burst,
        _OUTCOME: record.outcome.name,
        "boundedgate.priority": record.priority,
    }
    if record.queue_depth is not None:
        attributes["queue_depth"] = record.queue_depth
    if record.limited_by is not None:
        attributes["boundedgate.rate_limit.name"] = record.limited_by
    if record.retry_after is not None:
        attributes["retry_after"] = record.retry_after
    return attributes


def instrument(
    *gates: BoundedGate | KeyedGate[Any] | RedisGate | RedisKeyedGate,
    meter_provider: metrics.MeterProvider | None = None,
    histograms: bool = True,
    spans: bool = True,
    key_attribute: bool = False,
    refresh_interval: float = DEFAULT_INTERVAL,
) -> Instrumentation:
    """Report ``gates`` through OpenTelemetry; returns a handle whose ``close()`` stops it.

    Args:
        gates: Gates, keyed gates and cluster gates (``RedisGate``, ``RedisKeyedGate``), held
            weakly.
        meter_provider: Where the instruments are made (default: the global one).
        histograms: Observe the gates and record the four histograms. False: only the counts
            and gauges read at collection time, with no cost per request at all.
        spans: Add a ``boundedgate.admission`` event (the request's admission fields) to the current span of
            each request whose ending its own task decides (started, refused at arrival).
        key_attribute: Put ``boundedgate.key`` on the histograms (only for a bounded key set).
        refresh_interval: Seconds between two background reads of a cluster gate's state.

    Raises:
        TypeError: Something other than a gate (a list of gates, a key), with what to pass instead.
    """
    return Instrumentation(gates, meter_provider, histograms, spans, key_attribute, refresh_interval)


def _attrs(snapshot: Snapshot) -> dict[str, str]:
    return {_GATE: snapshot.name}


def _active(snapshot: Snapshot) -> list[Observation]:
    return [Observation(snapshot.running, _attrs(snapshot))]


def _queued(snapshot: Snapshot) -> list[Observation]:
    return [Observation(snapshot.waiting, _attrs(snapshot))]


def _limit_running(snapshot: Snapshot) -> list[Observation]:
    limit = snapshot.max_running
    return [] if limit is None else [Observation(limit, _attrs(snapshot))]


def _limit_waiting(snapshot: Snapshot) -> list[Observation]:
    limit = snapshot.max_waiting
    return [] if limit is None else [Observation(limit, _attrs(snapshot))]


def _keys(snapshot: Snapshot) -> list[Observation]:
    return [] if snapshot.keys is None else [Observation(snapshot.keys, _attrs(snapshot))]


def _requests(snapshot: Snapshot) -> list[Observation]:
    return [
        Observation(snapshot.outcomes[outcome.name], {_GATE: snapshot.name, _OUTCOME: outcome.name})
        for outcome in OUTCOMES
    ]


def _tokens(snapshot: Snapshot) -> list[Observation]:
    return [
        Observation(balance, {_GATE: snapshot.name, "boundedgate.rate_limit.name": name})
        for name, balance in zip(snapshot.limits, snapshot.tokens, strict=True)
    ]
