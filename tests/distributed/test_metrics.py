"""A cluster gate's records and metrics: observe(), GateCollector and instrument() on a real Redis.

Two gate objects of one name stand for two processes (each with its own client, agent id and
feed); what each export reports must be what the callers of both saw, summed, whichever of the
two is collected. Real time (looptime off), as every Redis test.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, NumberDataPoint
from prometheus_client import CollectorRegistry, generate_latest

from boundedgate import OUTCOMES, GateError, QueueFull, RequestRecord
from boundedgate._export import HISTOGRAMS
from boundedgate.otel import instrument
from boundedgate.prometheus import GateCollector
from boundedgate.redis import RedisGate
from boundedgate.redis._metrics import _PUSH, hist_keys

from .helpers import make_gate, settles_empty, wait_until
from .servers import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(registry: CollectorRegistry) -> Samples:
    """Every sample of a scrape, by name and labels."""
    found: Samples = {}
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith("#"):
            continue
        match = re.fullmatch(r"(\w+)(?:\{(.*)\})? (\S+)", line)
        assert match, line
        labels = frozenset(re.findall(r'(\w+)="([^"]*)"', match[2] or ""))
        found[match[1], labels] = float(match[3])
    return found


def series(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def histograms_are_the_records(
    found: Samples, name: str, records: list[RequestRecord], bound: float | None = None
) -> None:
    """Each exported histogram of gate ``name`` counts and sums what ``records`` measured.

    With ``bound``, its bucket there counts the values at or below it.
    """
    for spec in HISTOGRAMS:
        metric = spec.name.replace(".", "_") + "_seconds"
        values: dict[str, list[float]] = {}
        for record in records:
            value = spec.value(record)
            if value is not None:
                values.setdefault(record.outcome.name if spec.by_outcome else "", []).append(value)
        for ending, seen in values.items():
            labels: dict[str, str] = {"gate": name}
            if spec.by_outcome:
                labels["outcome"] = ending
            assert series(found, metric + "_count", **labels) == len(seen)
            assert series(found, metric + "_sum", **labels) == pytest.approx(sum(seen))
            if bound is not None:
                below = sum(1 for value in seen if value <= bound)
                assert series(found, metric + "_bucket", le=repr(bound), **labels) == below
            assert series(found, metric + "_bucket", le="+Inf", **labels) == len(seen)


async def traffic(gates: list[RedisGate]) -> None:
    """Requests through the gates (C=1, Q=1 across them) ending in several outcomes."""

    async def run(gate: RedisGate, seconds: float, fail: bool = False) -> None:
        with contextlib.suppress(GateError, RuntimeError):
            async with gate.admit(timeout=30):
                await asyncio.sleep(seconds)
                if fail:
                    raise RuntimeError("the call failed")

    first, second = gates
    holder = asyncio.create_task(run(first, 0.3))
    await wait_until(lambda: _true(first.running == 1), 5, "the first holder")
    queued = asyncio.create_task(run(second, 0.05, fail=True))
    await wait_until(lambda: _true(second.waiting == 1), 5, "the queued one")
    await run(first, 0.0)  # rejected: one running, one queued
    with pytest.raises(QueueFull):
        async with second.admit(timeout=30):
            pass
    await asyncio.gather(holder, queued)
    expiring = asyncio.create_task(run(first, 0.3))
    await wait_until(lambda: _true(first.running == 1), 5, "the next holder")
    with contextlib.suppress(GateError):
        async with second.admit(timeout=0.1):  # expires in the queue
            pass
    await expiring
    async with second.admit(timeout=30):
        pass


async def _true(value: bool) -> bool:
    return value


def counted(gates: list[RedisGate]) -> Counter[str]:
    """What the callers of every gate saw, by outcome: their gates' statistics summed."""
    total: Counter[str] = Counter()
    for gate in gates:
        stats = gate.stats()
        for outcome in OUTCOMES:
            total[outcome.name] += getattr(stats, outcome.name)
    return total


@pytest.fixture
async def two(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> AsyncIterator[list[RedisGate]]:
    """Two gate objects of one name, each with a client of its own: two processes as Redis sees them."""
    other = redis.asyncio.Redis.from_url(redis_server.url)
    gates = [make_gate(client, name, 1, 1), make_gate(other, name, 1, 1)]
    try:
        yield gates
    finally:
        for gate in gates:
            await gate.aclose()
        await other.aclose()


async def test_records_are_what_the_callers_saw_one_per_counted_request(
    two: list[RedisGate], client: redis.asyncio.Redis, name: str
) -> None:
    records: list[RequestRecord] = []
    for gate in two:
        gate.observe(records.append)
    await traffic(two)
    await settles_empty(client, name)
    assert Counter(record.outcome.name for record in records) == +counted(two)
    assert {record.gate for record in records} == {name}
    for record in records:
        assert record.key is None
        assert record.end_to_end == pytest.approx(record.ended - record.arrival)
        if record.outcome.at_arrival:
            assert (record.decision, record.waited, record.ran, record.queue_depth) == (
                "reject",
                0.0,
                None,
                1,
            )
        elif record.decision == "queue":
            assert record.started is not None or record.outcome.name == "expired"
            assert record.waited > 0
        else:
            assert (record.decision, record.waited, record.queue_depth) == ("allow", 0.0, 0)
    ran = [record for record in records if record.outcome.ran]
    assert all(record.ran is not None and record.ran >= 0 for record in ran)
    assert {record.decision for record in ran} == {"allow", "queue"}


async def test_unobserve_stops_the_records_and_an_observer_that_raises_is_logged(
    two: list[RedisGate], caplog: pytest.LogCaptureFixture
) -> None:
    gate = two[0]
    records: list[RequestRecord] = []

    def broken(record: RequestRecord) -> None:
        raise ValueError("an exporter bug")

    gate.observe(broken)
    gate.observe(records.append)
    with caplog.at_level(logging.ERROR, logger="boundedgate"):
        async with gate.admit(timeout=30):
            pass
    assert [record.outcome.name for record in records] == ["completed"]
    assert "observer" in caplog.text
    assert "an exporter bug" in caplog.text
    gate.unobserve(records.append)
    gate.unobserve(broken)
    async with gate.admit(timeout=30):
        pass
    assert len(records) == 1


async def test_each_process_scrape_reports_the_clusters_totals(
    two: list[RedisGate], client: redis.asyncio.Redis, name: str
) -> None:
    records: list[RequestRecord] = []
    registries = []
    collectors = []
    for gate in two:
        gate.observe(records.append)
        registry = CollectorRegistry()
        collector = GateCollector(gate, queue_timeouts={name: 30})
        registry.register(collector)
        registries.append(registry)
        collectors.append(collector)
    await traffic(two)
    await settles_empty(client, name)
    for collector in collectors:
        await collector.refresh()  # each pushes its own records
    await collectors[0].refresh()  # and reads the other's
    saw = counted(two)
    for registry, collector in zip(registries, collectors, strict=True):
        await collector.refresh()
        found = samples(registry)
        for outcome in OUTCOMES:
            assert (
                series(found, "boundedgate_requests_total", gate=name, outcome=outcome.name)
                == saw[outcome.name]
            )
        assert series(found, "boundedgate_request_active", gate=name) == 0
        assert series(found, "boundedgate_request_queued", gate=name) == 0
        assert series(found, "boundedgate_limit_running", gate=name) == 1
        assert series(found, "boundedgate_limit_waiting", gate=name) == 1
        assert series(found, "boundedgate_queue_timeout_seconds", gate=name) == 30
        assert 0 <= series(found, "boundedgate_cluster_read_age_seconds", gate=name) < 5
        assert series(found, "boundedgate_cluster_events_total", gate=name, event="unavailable") == 0
        histograms_are_the_records(found, name, records, bound=0.32)
    for collector in collectors:
        collector.close()


async def test_opentelemetry_reports_the_clusters_counts_and_this_processs_histograms(
    two: list[RedisGate], client: redis.asyncio.Redis, name: str
) -> None:
    records: list[RequestRecord] = []
    readers = [InMemoryMetricReader() for _ in two]
    handles = []
    for gate, reader in zip(two, readers, strict=True):
        gate.observe(records.append)
        handles.append(instrument(gate, meter_provider=MeterProvider(metric_readers=[reader])))
    await traffic(two)
    await settles_empty(client, name)
    saw = counted(two)
    durations: Counter[str] = Counter()
    for handle, reader in zip(handles, readers, strict=True):
        await handle.refresh()
        data = reader.get_metrics_data()
        assert data is not None
        metrics = {m.name: m for m in data.resource_metrics[0].scope_metrics[0].metrics}
        requests = {
            dict(point.attributes or {})["boundedgate.outcome"]: point.value
            for point in metrics["boundedgate.requests"].data.data_points
            if isinstance(point, NumberDataPoint)
        }
        assert requests == {outcome.name: saw[outcome.name] for outcome in OUTCOMES}
        (age,) = metrics["boundedgate.cluster.read.age"].data.data_points
        assert isinstance(age, NumberDataPoint)
        assert 0 <= age.value < 5
        for point in metrics["boundedgate.request.duration"].data.data_points:
            assert isinstance(point, HistogramDataPoint)
            durations[str(dict(point.attributes or {})["boundedgate.outcome"])] += point.count
    # Each process's histogram has its own requests: summed over the processes, every record.
    assert durations == Counter(record.outcome.name for record in records)
    for handle in handles:
        handle.close()


async def test_a_scrape_never_waits_for_redis_and_shows_the_age_of_its_read(
    own_server: RedisServer, name: str
) -> None:
    client = redis.asyncio.Redis.from_url(own_server.url)
    gate = make_gate(client, name, 1, 1, op_timeout=0.5)
    registry = CollectorRegistry()
    collector = GateCollector(gate, refresh_interval=0.05)
    registry.register(collector)
    try:
        async with gate.admit(timeout=30):
            pass
        await collector.refresh()
        before = samples(registry)
        assert series(before, "boundedgate_requests_total", gate=name, outcome="completed") == 1
        own_server.kill()
        await asyncio.sleep(0.3)  # background reads fail meanwhile
        started = time.monotonic()
        await collector.refresh()  # gives up within op_timeout, raises nothing
        assert time.monotonic() - started < 5 * 0.5
        started = time.monotonic()
        after = samples(registry)
        assert time.monotonic() - started < 1.0  # a scrape reads the snapshot: no round trip
        assert series(after, "boundedgate_requests_total", gate=name, outcome="completed") == 1
        age = series(after, "boundedgate_cluster_read_age_seconds", gate=name)
        assert age >= 0.3
        assert series(samples(registry), "boundedgate_cluster_read_age_seconds", gate=name) > age
    finally:
        collector.close()
        await gate.aclose()
        await client.aclose()


async def test_the_background_read_follows_the_cluster_and_stops_with_the_gate(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> None:
    gate = make_gate(client, name, 2, 2)
    other = redis.asyncio.Redis.from_url(redis_server.url)
    elsewhere = make_gate(other, name, 2, 2)
    registry = CollectorRegistry()
    registry.register(GateCollector(gate, refresh_interval=0.05))

    def completed() -> float:
        return series(samples(registry), "boundedgate_requests_total", gate=name, outcome="completed")

    try:
        async with gate.admit(timeout=30):  # its first record starts the feed on its loop
            pass
        async with elsewhere.admit(timeout=30):  # another process's request
            pass
        await wait_until(lambda: _true(completed() == 2), 5, "the background read")
        feeds = [task for task in asyncio.all_tasks() if "boundedgate metrics" in task.get_name()]
        assert len(feeds) == 1
    finally:
        await gate.aclose()
        await elsewhere.aclose()
        await other.aclose()
    assert feeds[0].done()


async def test_the_last_exports_close_stops_the_read(client: redis.asyncio.Redis, name: str) -> None:
    gate = make_gate(client, name, 1, 1)
    first = GateCollector(gate, refresh_interval=0.05)
    second = instrument(gate, meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]))
    try:
        await first.refresh()
        (task,) = [task for task in asyncio.all_tasks() if "boundedgate metrics" in task.get_name()]
        first.close()
        await asyncio.sleep(0.1)
        assert not task.done()  # the other export still reads it
        second.close()
        await asyncio.sleep(0)
        assert task.cancelled() or task.done()
    finally:
        await gate.aclose()


async def test_exports_of_one_gate_share_its_histograms_buckets(
    client: redis.asyncio.Redis, name: str
) -> None:
    gate = make_gate(client, name, 1, 1)
    other = make_gate(client, name + "-other", 1, 1)
    first = GateCollector(gate)
    with pytest.raises(ValueError, match="give every export of a cluster gate the same buckets"):
        GateCollector(other, gate, buckets=(0.1, 1.0))
    first.close()
    # Nothing exports either now: any buckets will do, for both (the refused export let go of other).
    GateCollector(other, gate, buckets=(0.1, 1.0)).close()
    await gate.aclose()
    await other.aclose()


async def test_a_push_sent_again_after_a_lost_reply_counts_once(
    client: redis.asyncio.Redis, name: str
) -> None:
    hist, pushed = hist_keys(name)
    push: Callable[..., object] = client.eval
    for _ in range(2):
        await push(
            _PUSH, 2, hist, pushed, "agent", 1, 60_000, "h|completed|0.01", 3, "h|completed|sum", "0.5"
        )  # type: ignore[misc]
    await push(_PUSH, 2, hist, pushed, "agent", 2, 60_000, "h|completed|0.01", 1)  # type: ignore[misc]
    stored = {str(k, "ascii"): str(v, "ascii") for k, v in (await client.hgetall(hist)).items()}  # type: ignore[arg-type]
    assert stored == {"h|completed|0.01": "4", "h|completed|sum": "0.5"}
    assert math.isclose(float(stored["h|completed|sum"]), 0.5)
    await client.delete(hist, pushed)
