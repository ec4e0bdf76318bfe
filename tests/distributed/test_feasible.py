"""Deadline-feasible admission on the cluster gate: the core's rule, decided in Redis.

The pace is a moving mean of the runs that ended normally, on the Redis server's clock. A test
cannot wait for runs of known length, so it makes one: while a request holds its slot, the start
Redis noted for it (its info's ``since``) is moved an hour back, exactly what an hour passing looks
like to the release script. Every budget below is then minutes or hours, and the few milliseconds a
step takes on the server's clock never decide anything (each bound leaves a minute of room).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator

import pytest
import redis.asyncio
from prometheus_client import CollectorRegistry, generate_latest

from boundedgate import Infeasible, QueueFull, RequestRecord, Status
from boundedgate.prometheus import GateCollector
from boundedgate.redis import RedisGate, RedisKeyedGate
from boundedgate.redis._layout import gate_keys

from .helpers import CALM, cluster, until_queued

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]

HOUR = 3600.0
#: Room for the server's clock moving on between steps (seconds); far below every budget here.
ROOM = 60.0


def feasible_gate(client: redis.asyncio.Redis, name: str, c: int = 1, **settings: object) -> RedisGate:
    return RedisGate(client, max_running=c, max_waiting=10, name=name, feasible=True, **{**CALM, **settings})  # type: ignore[arg-type]


async def pace(client: redis.asyncio.Redis, name: str) -> float | None:
    """The gate's pace in Redis, in seconds (None: none yet)."""
    value = await client.hget(gate_keys(name)[0], "pace")
    return None if value is None else float(value) / 1000


async def run_for(
    client: redis.asyncio.Redis, gate: RedisGate | RedisKeyedGate, seconds: float, ending: str = "completed"
) -> None:
    """One request through ``gate`` (key ``"slow"`` of a keyed gate) that ran ``seconds``.

    On the server's clock, as it ends.
    """
    if isinstance(gate, RedisKeyedGate):
        info, permit = gate_keys(f"{gate.name}/slow")[4], gate.admit("slow")
    else:
        info, permit = gate_keys(gate.name)[4], gate.admit()
    try:
        async with permit:
            assert permit.id is not None
            agent, deadline, since, token = (await client.hget(info, permit.id)).decode().split("|")  # type: ignore[union-attr]
            moved = f"{agent}|{deadline}|{int(since) - round(seconds * 1000)}|{token}"
            await client.hset(info, permit.id, moved)
            if ending == "failed":
                raise RuntimeError("the call failed")
    except RuntimeError:
        assert ending == "failed"


@pytest.fixture
async def holder(client: redis.asyncio.Redis, name: str) -> AsyncIterator[RedisGate]:
    """A feasible gate of C=1 whose pace is an hour, and whose one slot is held meanwhile."""
    async with feasible_gate(client, name) as gate:
        await run_for(client, gate, HOUR)
        async with gate.admit():
            yield gate


async def test_runs_that_end_normally_set_the_pace_as_the_core_weighs_them(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with feasible_gate(client, name, c=2) as gate:
        assert await pace(client, name) is None  # no run ended yet: no pace
        await run_for(client, gate, HOUR)
        first = await pace(client, name)
        assert first is not None
        assert HOUR <= first < HOUR + ROOM
        await run_for(client, gate, 3 * HOUR, ending="failed")  # a failure says nothing of the pace
        assert await pace(client, name) == first
        await run_for(client, gate, 3 * HOUR)  # the newest weighs 0.2 / C: 0.1 here
        second = await pace(client, name)
        assert second is not None
        assert math.isclose(second, first + 0.1 * (3 * HOUR - first), abs_tol=ROOM)


async def test_a_gate_without_feasible_keeps_no_pace(client: redis.asyncio.Redis, name: str) -> None:
    async with RedisGate(client, max_running=1, max_waiting=1, name=name, **CALM) as gate:  # type: ignore[arg-type]
        await run_for(client, gate, HOUR)
        assert await pace(client, name) is None


async def test_one_that_could_not_start_before_its_queue_deadline_is_refused_at_once(
    client: redis.asyncio.Redis, holder: RedisGate, name: str
) -> None:
    # One running, C=1, an hour's pace: a newcomer would start in an hour.
    records: list[RequestRecord] = []
    holder.observe(records.append)
    with pytest.raises(Infeasible) as refused:
        await holder.admit(timeout=HOUR / 2).__aenter__()
    error = refused.value
    assert error.code == "infeasible"
    assert HOUR - ROOM < error.predicted_wait < HOUR + ROOM
    assert error.retry_after == error.predicted_wait
    assert HOUR / 2 - ROOM < error.budget <= HOUR / 2 + 0.01  # budgets go as whole ms
    assert (error.running, error.waiting) == (1, 0)
    assert holder.stats().infeasible == 1
    assert (await cluster(client, name)).counters["infeasible"] == 1
    assert holder.cluster_waiting == 0  # nothing was queued
    [record] = records
    assert record.outcome.status is Status.INFEASIBLE
    assert record.decision == "reject"
    assert record.retry_after == error.predicted_wait


async def test_the_metrics_exports_count_it_as_the_other_outcomes(holder: RedisGate, name: str) -> None:
    registry = CollectorRegistry()
    collector = GateCollector(holder)
    registry.register(collector)
    try:
        with pytest.raises(Infeasible):
            await holder.admit(timeout=HOUR / 2).__aenter__()
        await collector.refresh()  # the cluster's counters, read from Redis
        scrape = generate_latest(registry).decode()
        assert f'boundedgate_requests_total{{gate="{name}",outcome="infeasible"}} 1.0' in scrape
    finally:
        collector.close()


async def test_its_queue_deadline_is_the_nearer_of_its_deadline_and_max_wait(
    holder: RedisGate,
) -> None:
    with pytest.raises(Infeasible) as refused:
        await holder.admit(max_wait=HOUR / 2).__aenter__()  # no deadline: max_wait alone
    assert HOUR / 2 - ROOM < refused.value.budget <= HOUR / 2 + 0.01


async def test_one_that_could_start_but_not_finish_before_its_deadline_is_refused(
    holder: RedisGate,
) -> None:
    # It would start in an hour, within its queue deadline, and finish a mean run by two hours;
    # but a long run (two paces) later is past its deadline of two hours and a half.
    with pytest.raises(Infeasible) as refused:
        await holder.admit(timeout=2.5 * HOUR).__aenter__()
    assert 2.5 * HOUR - ROOM < refused.value.budget <= 2.5 * HOUR + 0.01  # budgets go as whole ms


async def test_one_with_time_enough_queues_and_one_without_a_deadline_too(holder: RedisGate) -> None:
    for timeout in (4 * HOUR, None):  # a start in an hour, and a long run (two paces) by four
        task = asyncio.ensure_future(holder.admit(timeout=timeout).__aenter__())
        await until_queued(task, lambda: holder.cluster_waiting > 0)  # queued, not refused
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert holder.stats().infeasible == 0


async def test_one_that_need_not_queue_is_never_refused_so(client: redis.asyncio.Redis, name: str) -> None:
    async with feasible_gate(client, name) as gate:
        await run_for(client, gate, HOUR)
        async with gate.admit(timeout=1.0):  # a free slot: it starts, whatever the pace
            pass
        async with gate.admit():
            with pytest.raises(QueueFull):  # not waiting: refused as full, never as infeasible
                await gate.try_admit(timeout=1.0)
        assert gate.stats().infeasible == 0


async def test_a_pause_in_force_counts_before_any_run_ended(client: redis.asyncio.Redis, name: str) -> None:
    async with feasible_gate(client, name) as gate:
        await gate.pause(HOUR)
        with pytest.raises(Infeasible) as refused:
            await gate.admit(timeout=HOUR / 2).__aenter__()
        assert HOUR - ROOM < refused.value.predicted_wait <= HOUR


async def test_the_queue_ahead_counts(client: redis.asyncio.Redis, holder: RedisGate) -> None:
    # Queued with four hours, one ahead makes the next start in two: four hours are then too few
    # (two to start, two for a long run).
    task = asyncio.ensure_future(holder.admit(timeout=4 * HOUR).__aenter__())
    await until_queued(task, lambda: holder.cluster_waiting > 0)
    with pytest.raises(Infeasible) as refused:
        await holder.admit(timeout=4 * HOUR).__aenter__()
    assert 2 * HOUR - ROOM < refused.value.predicted_wait < 2 * HOUR + ROOM
    assert refused.value.waiting == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_keyed_gate_decides_each_key_by_its_own_pace(client: redis.asyncio.Redis, name: str) -> None:
    keyed = RedisKeyedGate(client, max_running=1, max_waiting=10, name=name, feasible=True, **CALM)  # type: ignore[arg-type]
    async with keyed:
        await run_for(client, keyed, HOUR)
        async with keyed.admit("slow"), keyed.admit("fast"):
            with pytest.raises(Infeasible):
                await keyed.admit("slow", timeout=HOUR / 2).__aenter__()
            task = asyncio.ensure_future(keyed.admit("fast", timeout=HOUR / 2).__aenter__())
            fast = keyed.get("fast")
            assert fast is not None
            await until_queued(task, lambda: fast.cluster_waiting > 0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert keyed.stats().total.infeasible == 1
