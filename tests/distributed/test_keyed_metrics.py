"""A RedisKeyedGate's metrics: GateCollector and instrument() on a real Redis, cluster-wide.

Two keyed gate objects of one name stand for two processes (each with its own client, agent id
and feed); each export reports the keyed gate under its own name, as a ``KeyedGate`` is reported,
with counters by outcome that are what the callers of both saw, summed, whichever is collected,
and never lower than an earlier collection's. Real time (looptime off), as every Redis test.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import redis.asyncio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, NumberDataPoint
from prometheus_client import CollectorRegistry

from boundedgate import OUTCOMES, GateError, RequestRecord
from boundedgate.otel import instrument
from boundedgate.prometheus import GateCollector
from boundedgate.redis import RedisKeyedGate
from boundedgate.redis._keyed_metrics import _PUSH, keyed_keys

from .helpers import wait_until
from .servers import RedisServer
from .test_metrics import histograms_are_the_records, samples, series
from .test_processes import workers

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]


def _busy(keyed: RedisKeyedGate, key: str, running: int, waiting: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        gate = keyed.get(key)
        return gate is not None and gate.running == running and gate.waiting == waiting

    return check


async def traffic(gates: list[RedisKeyedGate], key: str) -> None:
    """Requests through ``key`` of both gates (C=1, Q=1 across them) ending in several outcomes."""
    first, second = gates

    async def run(keyed: RedisKeyedGate, seconds: float, timeout: float = 30, fail: bool = False) -> None:
        with contextlib.suppress(GateError, RuntimeError):
            async with keyed.admit(key, timeout=timeout):
                await asyncio.sleep(seconds)
                if fail:
                    raise RuntimeError("the call failed")

    holder = asyncio.create_task(run(first, 0.3))
    await wait_until(_busy(first, key, 1, 0), 5, "the first holder")
    queued = asyncio.create_task(run(second, 0.05, fail=True))
    await wait_until(_busy(second, key, 0, 1), 5, "the queued one")
    await run(first, 0.0)  # rejected: one running, one queued
    await asyncio.gather(holder, queued)
    expiring = asyncio.create_task(run(first, 0.3))
    await wait_until(_busy(first, key, 1, 0), 5, "the next holder")
    await run(second, 0.0, timeout=0.1)  # expires in the queue
    await expiring
    await run(second, 0.0)


def counted(gates: list[RedisKeyedGate]) -> Counter[str]:
    """What the callers of every keyed gate object saw, by outcome: their totals summed."""
    total: Counter[str] = Counter()
    for gate in gates:
        stats = gate.stats().total
        for outcome in OUTCOMES:
            total[outcome.name] += getattr(stats, outcome.name)
    return total


@pytest.fixture
async def two(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> AsyncIterator[list[RedisKeyedGate]]:
    """Two keyed gate objects of one name, each with a client of its own: two processes."""
    other = redis.asyncio.Redis.from_url(redis_server.url)
    gates = [
        RedisKeyedGate(connection, max_running=1, max_waiting=1, name=name) for connection in (client, other)
    ]
    try:
        yield gates
    finally:
        for gate in gates:
            await gate.aclose()
        await other.aclose()
        await client.delete(*keyed_keys(name))


async def test_any_process_scrape_reports_the_keyed_gates_sums_under_its_name(
    two: list[RedisKeyedGate], name: str
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
    for key in ("acme", "globex"):
        await traffic(two, key)
    for collector in collectors:
        await collector.refresh()  # each pushes its own counts
    saw = counted(two)
    assert saw["completed"] >= 4
    assert saw["rejected"] >= 2
    assert saw["expired"] >= 2
    assert sum(saw.values()) == len(records)
    for registry, collector in zip(registries, collectors, strict=True):
        await collector.refresh()
        found = samples(registry)
        assert {labels for metric, labels in found if metric == "boundedgate_requests_total"} == {
            frozenset({("gate", name), ("outcome", outcome.name)}) for outcome in OUTCOMES
        }  # one series set under the keyed gate's name: no "name/key" series
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
        events = {
            dict(labels)["event"] for metric, labels in found if metric == "boundedgate_cluster_events_total"
        }
        assert events == {"unavailable"}
        assert series(found, "boundedgate_cluster_events_total", gate=name, event="unavailable") == 0
        histograms_are_the_records(found, name, records)
    for collector in collectors:
        collector.close()


async def test_counters_never_go_down_whichever_process_is_scraped(
    two: list[RedisKeyedGate], name: str
) -> None:
    registries = []
    collectors = []
    for gate in two:
        registry = CollectorRegistry()
        collector = GateCollector(gate, histograms=False)
        registry.register(collector)
        registries.append(registry)
        collectors.append(collector)
    before: dict[str, float] = dict.fromkeys((outcome.name for outcome in OUTCOMES), 0.0)
    try:
        for round_ in range(6):
            if round_ % 2 == 0:
                await traffic(two, f"key-{round_}")
            scraped = round_ % 2  # the two processes' scrapes, in turn
            await collectors[scraped].refresh()
            found = samples(registries[scraped])
            now = {
                outcome.name: series(found, "boundedgate_requests_total", gate=name, outcome=outcome.name)
                for outcome in OUTCOMES
            }
            assert all(now[outcome] >= before[outcome] for outcome in now), (before, now)
            before = now
        for collector in collectors:
            await collector.refresh()
        await collectors[0].refresh()
        final = samples(registries[0])
        saw = counted(two)
        for outcome in OUTCOMES:
            assert (
                series(final, "boundedgate_requests_total", gate=name, outcome=outcome.name)
                == saw[outcome.name]
            )
    finally:
        for collector in collectors:
            collector.close()


async def test_the_gauges_are_the_live_processes_and_a_closed_one_leaves_them(
    two: list[RedisKeyedGate], name: str
) -> None:
    first, second = two
    registry = CollectorRegistry()
    collector = GateCollector(second, histograms=False)
    registry.register(collector)
    elsewhere = GateCollector(first, histograms=False)
    release = asyncio.Event()

    async def hold() -> None:
        async with first.admit("acme", timeout=30):
            await release.wait()

    holder = asyncio.create_task(hold())
    waiter = asyncio.create_task(hold())
    try:

        async def both() -> bool:
            await elsewhere.refresh()  # the first process pushes its gauges
            await collector.refresh()  # the second reads them
            found = samples(registry)
            return (
                series(found, "boundedgate_request_active", gate=name),
                series(found, "boundedgate_request_queued", gate=name),
            ) == (1, 1)

        await wait_until(both, 5, "a holder and a waiter in the second process's scrape")
        found = samples(registry)
        assert series(found, "boundedgate_request_queued", gate=name) == 1
        assert series(found, "boundedgate_keys_active", gate=name) == 1
        release.set()
        await asyncio.gather(holder, waiter)
        await first.aclose()  # the first process leaves: its gauges go with it
        await collector.refresh()
        found = samples(registry)
        assert series(found, "boundedgate_request_active", gate=name) == 0
        assert series(found, "boundedgate_keys_active", gate=name) == 0
        assert series(found, "boundedgate_requests_total", gate=name, outcome="completed") == 2
    finally:
        release.set()
        elsewhere.close()
        collector.close()


async def test_a_dead_processs_gauges_lapse(client: redis.asyncio.Redis, name: str) -> None:
    sums, pushed, live = keyed_keys(name)
    push: Callable[..., object] = client.eval
    # A process that pushed 3 running, then died: its deadline is 200 ms away on Redis's clock.
    await push(_PUSH, 3, sums, pushed, live, "dead", 0, 60_000, 200, 3, 2, 1)  # type: ignore[misc]
    gate = RedisKeyedGate(client, max_running=4, max_waiting=4, name=name)
    registry = CollectorRegistry()
    collector = GateCollector(gate, histograms=False)
    registry.register(collector)
    try:
        await collector.refresh()
        assert series(samples(registry), "boundedgate_request_active", gate=name) == 3

        async def lapsed() -> bool:
            await collector.refresh()
            return series(samples(registry), "boundedgate_request_active", gate=name) == 0

        await wait_until(lapsed, 5, "the dead process's gauges to lapse")
        # A read past the deadline leaves the entry out; the next push, past it too, prunes it (the
        # push of the refresh that read may have come just before the deadline).
        await collector.refresh()
        assert await client.hkeys(live) == [gate._cluster_feed().agent.encode()]  # pruned
    finally:
        collector.close()
        await gate.aclose()
        await client.delete(sums, pushed, live)


async def test_a_push_sent_again_after_a_lost_reply_counts_once(
    client: redis.asyncio.Redis, name: str
) -> None:
    sums, pushed, live = keyed_keys(name)
    push: Callable[..., object] = client.eval
    for _ in range(2):
        await push(_PUSH, 3, sums, pushed, live, "agent", 1, 60_000, 1000, 0, 0, 0, "n|completed", 3)  # type: ignore[misc]
    await push(_PUSH, 3, sums, pushed, live, "agent", 2, 60_000, 1000, 0, 0, 0, "n|completed", 1)  # type: ignore[misc]
    await push(_PUSH, 3, sums, pushed, live, "agent", 0, 60_000, 1000, 0, 0, 0)  # type: ignore[misc]
    assert await client.hgetall(sums) == {b"n|completed": b"4"}
    await client.delete(sums, pushed, live)


async def test_opentelemetry_reports_the_sums_and_this_processs_histograms_under_the_name(
    two: list[RedisKeyedGate], name: str
) -> None:
    records: list[RequestRecord] = []
    readers = [InMemoryMetricReader() for _ in two]
    handles = []
    for gate, reader in zip(two, readers, strict=True):
        gate.observe(records.append)
        handles.append(
            instrument(gate, meter_provider=MeterProvider(metric_readers=[reader]), key_attribute=True)
        )
    await traffic(two, "acme")
    for handle in handles:
        await handle.refresh()
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
        for point in metrics["boundedgate.request.duration"].data.data_points:
            assert isinstance(point, HistogramDataPoint)
            attributes = dict(point.attributes or {})
            assert (attributes["boundedgate.gate"], attributes["boundedgate.key"]) == (name, "acme")
            durations[str(attributes["boundedgate.outcome"])] += point.count
    assert durations == Counter(record.outcome.name for record in records)
    for handle in handles:
        handle.close()


@pytest.mark.parametrize("export", [GateCollector, instrument])
async def test_a_key_of_a_cluster_keyed_gate_is_refused_with_how_it_is_exported(
    client: redis.asyncio.Redis, name: str, export: Callable[..., object]
) -> None:
    keyed = RedisKeyedGate(client, max_running=1, max_waiting=0, name=name)
    with pytest.raises(TypeError, match=r"exports a RedisKeyedGate whole") as refused:
        export((keyed, "acme"))
    assert "pass the RedisKeyedGate itself" in str(refused.value)


async def test_three_processes_metrics_sum_to_what_their_callers_saw(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> None:
    """Three OS processes through one keyed gate, each exporting it; a fourth process scrapes."""
    script = str(Path(__file__).with_name("keyed_worker.py"))
    common = ["--url", redis_server.url, "--name", name, "--c", "2", "--q", "2", "--keys", "3", "--metrics"]
    commands = [[sys.executable, script, *common, "--tasks", "30", "--index", str(i)] for i in range(3)]
    scraper = RedisKeyedGate(client, max_running=2, max_waiting=2, name=name)
    registry = CollectorRegistry()
    collector = GateCollector(scraper, histograms=False)
    registry.register(collector)
    by_code = {outcome.error_code: outcome.name for outcome in OUTCOMES if outcome.error_code is not None}
    scrapes: list[dict[str, float]] = []

    async def scrape() -> dict[str, float]:
        await collector.refresh()
        found = samples(registry)
        scrapes.append(
            {o.name: series(found, "boundedgate_requests_total", gate=name, outcome=o.name) for o in OUTCOMES}
        )
        return scrapes[-1]

    try:
        with workers(*commands) as processes:
            while any(p.poll() is None for p in processes):  # scrape meanwhile
                await scrape()
                await asyncio.sleep(0.02)
            reported = [json.loads(p.stdout.read()) for p in processes]  # type: ignore[union-attr]
            assert [p.returncode for p in processes] == [0, 0, 0]
        saw: Counter[str] = Counter()
        for outcomes in reported:
            for code, count in outcomes.items():
                saw["completed" if code == "completed" else by_code[code]] += count
        assert sum(saw.values()) == 90
        assert saw["completed"] > 0
        assert sum(saw.values()) > saw["completed"]  # some were refused
        final = await scrape()  # every process pushed its last counts as it closed its keyed gate
        assert final == {outcome.name: float(saw[outcome.name]) for outcome in OUTCOMES}
        found = samples(registry)
        assert series(found, "boundedgate_request_active", gate=name) == 0
        assert series(found, "boundedgate_keys_active", gate=name) == 0  # the three left
        for before, after in itertools.pairwise(scrapes):
            assert all(after[o] >= before[o] for o in before), (before, after)
    finally:
        collector.close()
        await scraper.aclose()
