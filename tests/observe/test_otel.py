"""OpenTelemetry: the golden names, units, buckets and attributes, the accounting identity at every
collection, bounded cardinality, weak references, and seed 004's fields on the caller's span."""

from __future__ import annotations

import asyncio
import gc
import logging
import weakref
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    Gauge,
    Histogram,
    InMemoryMetricReader,
    Sum,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from boundedgate import OUTCOMES, BoundedGate, KeyedGate, QueueFull, RateLimit
from boundedgate.otel import SPAN_EVENT, downstream_refused, instrument
from tests.observe.scripted import run_script, script_gate

GENAI = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]

#: name: (unit, kind, monotonic or None, attribute keys)
GOLDEN = {
    "boundedgate.request.active": ("{request}", Sum, False, {"boundedgate.gate"}),
    "boundedgate.request.queued": ("{request}", Sum, False, {"boundedgate.gate"}),
    "boundedgate.limit.running": ("{request}", Sum, False, {"boundedgate.gate"}),
    "boundedgate.limit.waiting": ("{request}", Sum, False, {"boundedgate.gate"}),
    "boundedgate.requests": ("{request}", Sum, True, {"boundedgate.gate", "boundedgate.outcome"}),
    "boundedgate.request.time_in_queue": ("s", Histogram, None, {"boundedgate.gate", "boundedgate.outcome"}),
    "boundedgate.request.lease.duration": ("s", Histogram, None, {"boundedgate.gate", "boundedgate.outcome"}),
    "boundedgate.request.duration": ("s", Histogram, None, {"boundedgate.gate", "boundedgate.outcome"}),
}


def _reader() -> tuple[InMemoryMetricReader, MeterProvider]:
    reader = InMemoryMetricReader()
    return reader, MeterProvider(metric_readers=[reader])


def _metrics(reader: InMemoryMetricReader) -> dict[str, Any]:
    data = reader.get_metrics_data()
    if data is None:
        return {}
    return {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}


def _points(metric: Any) -> dict[tuple[tuple[str, Any], ...], Any]:
    return {tuple(sorted(p.attributes.items())): p for p in metric.data.data_points}


def _value(metrics: dict[str, Any], name: str, **attributes: Any) -> Any:
    wanted = tuple(sorted({"boundedgate.gate": "scripted", **attributes}.items()))
    return _points(metrics[name])[wanted].value


async def test_a_scripted_run_gives_the_golden_names_units_buckets_and_attributes() -> None:
    gate = script_gate()
    reader, provider = _reader()
    instrument(gate, meter_provider=provider)
    await run_script(gate)
    metrics = _metrics(reader)
    for name, (unit, kind, monotonic, keys) in GOLDEN.items():
        metric = metrics[name]
        assert (metric.unit, type(metric.data)) == (unit, kind), name
        if monotonic is not None:
            assert metric.data.is_monotonic is monotonic, name
        for point in metric.data.data_points:
            assert set(point.attributes) == keys, name
            if kind is Histogram:
                assert list(point.explicit_bounds) == GENAI, name
        assert metric.description, name
    stats = gate.stats()
    counted = {
        o.name: _value(metrics, "boundedgate.requests", **{"boundedgate.outcome": o.name}) for o in OUTCOMES
    }
    assert counted == {o.name: getattr(stats, o.name) for o in OUTCOMES}
    assert {k for k, v in counted.items() if v} == {"completed", "late", "expired", "evicted", "rejected"}
    queue = _points(metrics["boundedgate.request.time_in_queue"])
    outcomes_in_queue = {dict(k)["boundedgate.outcome"] for k in queue}
    assert outcomes_in_queue == {"completed", "late", "expired", "evicted"}  # no refusal at arrival
    lease = _points(metrics["boundedgate.request.lease.duration"])
    assert sum(p.count for p in lease.values()) == stats.completed + stats.late
    duration = _points(metrics["boundedgate.request.duration"])
    assert sum(p.count for p in duration.values()) == sum(counted.values())
    assert _value(metrics, "boundedgate.limit.running") == 2
    assert _value(metrics, "boundedgate.limit.waiting") == 2
    assert "boundedgate.keys.active" not in metrics or not metrics["boundedgate.keys.active"].data.data_points


async def test_outcomes_plus_running_plus_queued_equal_arrivals_at_every_collection() -> None:
    gate = script_gate()
    reader, provider = _reader()
    instrument(gate, meter_provider=provider, histograms=False)
    collections = 0

    def check(arrived: int) -> None:
        nonlocal collections
        metrics = _metrics(reader)
        ended = sum(p.value for p in metrics["boundedgate.requests"].data.data_points)
        active = _value(metrics, "boundedgate.request.active")
        queued = _value(metrics, "boundedgate.request.queued")
        assert ended + active + queued == arrived
        collections += 1

    assert await run_script(gate, check=check) == 10
    assert collections > 20


async def test_ten_thousand_keys_leave_the_number_of_series_constant(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sessions: KeyedGate[int] = KeyedGate(
        max_running=1, max_waiting=0, name="sessions", rate_limits=[RateLimit.per_second(100, name="rps")]
    )
    reader, provider = _reader()
    instrument(sessions, meter_provider=provider)

    def series() -> int:
        return sum(len(m.data.data_points) for m in _metrics(reader).values())

    for key in range(10):
        async with sessions.admit(key):
            pass
    few = series()
    for key in range(10, 10_000):
        async with sessions.admit(key):
            pass
    assert series() == few
    metrics = _metrics(reader)
    for metric in metrics.values():
        for point in metric.data.data_points:
            assert point.attributes["boundedgate.gate"] == "sessions"
            assert "boundedgate.key" not in point.attributes
    keyed_total = sum(p.value for p in metrics["boundedgate.requests"].data.data_points)
    assert keyed_total == 10_000
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []  # no callback failed


async def test_the_key_is_an_attribute_only_when_asked() -> None:
    sessions: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, name="tenants")
    reader, provider = _reader()
    instrument(sessions, meter_provider=provider, key_attribute=True)
    async with sessions.admit("acme"):
        pass
    (point,) = _metrics(reader)["boundedgate.request.duration"].data.data_points
    assert point.attributes["boundedgate.key"] == "acme"


async def test_the_instruments_hold_the_gates_weakly() -> None:
    reader, provider = _reader()
    gate = BoundedGate(max_running=1, max_waiting=0, name="dropped")
    instrument(gate, meter_provider=provider)
    async with gate.admit():
        pass
    assert _value(_metrics(reader), "boundedgate.request.active", **{"boundedgate.gate": "dropped"}) == 0
    ref = weakref.ref(gate)
    del gate
    gc.collect()
    assert ref() is None
    metrics = _metrics(reader)
    assert all(
        point.attributes["boundedgate.gate"] != "dropped"
        for name in ("boundedgate.request.active", "boundedgate.requests")
        if name in metrics
        for point in metrics[name].data.data_points
        if not isinstance(metrics[name].data, Gauge)
    )


async def test_close_stops_the_histograms_and_the_gauges() -> None:
    reader, provider = _reader()
    gate = BoundedGate(max_running=1, max_waiting=0, name="closed")
    handle = instrument(gate, meter_provider=provider)
    handle.close()
    assert gate._state.observer is None
    async with gate.admit():
        pass
    assert "boundedgate.request.duration" not in _metrics(reader) or not _points(
        _metrics(reader)["boundedgate.request.duration"]
    )


async def test_downstream_refusals_are_counted_by_gate_and_status() -> None:
    reader, provider = _reader()
    gate = BoundedGate(max_running=1, max_waiting=0, name="otel-downstream")
    instrument(gate, meter_provider=provider)
    downstream_refused("otel-downstream")
    downstream_refused("otel-downstream", 503)
    points = _points(_metrics(reader)["boundedgate.downstream.refusals"])
    ours = {dict(k)["http.response.status_code"]: p.value for k, p in points.items()
            if dict(k)["boundedgate.gate"] == "otel-downstream"}  # fmt: skip
    assert ours == {429: 1, 503: 1}


async def test_each_admission_is_an_event_on_the_callers_span_with_seed_004s_fields() -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = tracer_provider.get_tracer("test")
    _, provider = _reader()
    gate = BoundedGate(max_running=1, max_waiting=1, name="traced")
    instrument(gate, meter_provider=provider)

    async def call(name: str, seconds: float) -> None:
        with tracer.start_as_current_span(name):
            try:
                async with gate.admit():
                    await asyncio.sleep(seconds)
            except QueueFull:
                pass

    await asyncio.gather(call("first", 1), call("second", 1), call("third", 1))
    events = {
        span.name: [e for e in span.events if e.name == SPAN_EVENT] for span in exporter.get_finished_spans()
    }
    (first,), (second,), (third,) = events["first"], events["second"], events["third"]
    assert first.attributes is not None
    assert second.attributes is not None
    assert third.attributes is not None
    assert dict(first.attributes) == {
        "boundedgate.gate": "traced",
        "rate_limit_key": "traced",
        "waited_ms": 0.0,
        "limited": False,
        "decision": "allow",
        "queue_depth": 0,
        "borrowed_burst": False,
        "boundedgate.outcome": "completed",
        "boundedgate.priority": 0,
    }
    assert second.attributes["decision"] == "queue"
    assert second.attributes["waited_ms"] == pytest.approx(1000)
    assert second.attributes["limited"] is True
    assert second.attributes["queue_depth"] == 0
    assert (third.attributes["decision"], third.attributes["boundedgate.outcome"]) == ("reject", "rejected")
    assert third.attributes["queue_depth"] == 1
