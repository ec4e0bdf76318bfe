"""The observer hook: one RequestRecord per counted request, whatever its outcome, from real gates
and from the simulator alike."""

from __future__ import annotations

import asyncio
import gc
import logging
import math
from collections.abc import AsyncIterator

import pytest

from boundedgate import (
    OUTCOMES,
    BoundedGate,
    KeyedGate,
    QueueExpired,
    QueueFull,
    RateLimit,
    RateLimited,
    RequestRecord,
    Status,
)
from boundedgate.sim import Job, simulate
from tests.helpers import checked_gate


def observed(gate: BoundedGate | KeyedGate[str]) -> list[RequestRecord]:
    records: list[RequestRecord] = []
    gate.observe(records.append)
    return records


async def _hold(gate: BoundedGate, seconds: float, **admit: object) -> None:
    async with gate.admit(**admit):  # type: ignore[arg-type]
        await asyncio.sleep(seconds)


async def test_a_scripted_run_gives_one_record_per_request_with_its_times() -> None:
    gate = checked_gate(1, 1)
    records = observed(gate)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    first = asyncio.create_task(_hold(gate, 1.0))
    await asyncio.sleep(0)
    second = asyncio.create_task(_hold(gate, 2.0, timeout=2.5, raise_late=False))
    await asyncio.sleep(0)
    with pytest.raises(QueueFull):
        await _hold(gate, 1.0)
    await asyncio.gather(first, second)
    by_outcome = {r.outcome.name: r for r in records}
    assert [r.outcome.name for r in records] == ["rejected", "completed", "late"]
    done, late, rejected = by_outcome["completed"], by_outcome["late"], by_outcome["rejected"]
    assert (done.decision, done.waited, done.queue_depth) == ("allow", 0.0, 0)
    assert done.ran == pytest.approx(1.0)
    assert done.arrival == pytest.approx(t0)
    assert done.end_to_end == pytest.approx(1.0)
    assert (late.decision, late.queue_depth) == ("queue", 0)
    assert late.waited == pytest.approx(1.0)
    assert late.ran == pytest.approx(2.0)
    assert late.end_to_end == pytest.approx(3.0)
    assert late.deadline == pytest.approx(t0 + 2.5)
    assert (rejected.decision, rejected.queue_depth, rejected.waited, rejected.ran) == (
        "reject",
        1,
        0.0,
        None,
    )
    assert rejected.limited
    assert late.limited
    assert not done.limited
    assert all(r.gate == gate.name and r.key is None and r.first_chunk is None for r in records)


async def test_every_ending_is_told_once_and_the_counts_agree_with_stats() -> None:
    gate = checked_gate(1, 1, priorities=2)
    records = observed(gate)
    holder = gate.try_admit()
    # a low-priority waiter is evicted by an urgent one, which then expires
    low = asyncio.create_task(_hold(gate, 0, priority=1))
    await asyncio.sleep(0)
    urgent = asyncio.create_task(_hold(gate, 0, timeout=1))
    await asyncio.sleep(2)
    assert isinstance(low.exception(), Exception)
    assert isinstance(urgent.exception(), QueueExpired)
    # one cancelled while waiting, one disconnected while waiting
    waiter = gate.admit()
    task = asyncio.create_task(waiter.__aenter__())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    leaving = gate.admit()
    task = asyncio.create_task(leaving.__aenter__())
    await asyncio.sleep(0)
    leaving.disconnect()
    with pytest.raises(asyncio.CancelledError):
        await task
    holder.abort()
    with pytest.raises(ZeroDivisionError):
        async with gate.admit():
            1 / 0  # noqa: B018
    stats = gate.stats()
    names = [r.outcome.name for r in records]
    assert sorted(names) == sorted(["evicted", "expired", "cancelled", "disconnected", "aborted", "failed"])
    for outcome in OUTCOMES:
        assert names.count(outcome.name) == getattr(stats, outcome.name), outcome.name


async def test_a_rate_limited_request_names_its_bucket_and_its_retry_after() -> None:
    limit = RateLimit.per_second(1, burst=1, name="rps")
    gate = BoundedGate(max_running=None, max_waiting=0, rate_limits=[limit], name="rated")
    records = observed(gate)
    gate.try_admit().release()
    with pytest.raises(RateLimited) as caught:
        gate.try_admit()
    first, refused = records
    assert not first.borrowed_burst  # a full bucket
    assert (refused.outcome.status, refused.limited_by, refused.decision) == (
        Status.RATE_LIMITED,
        "rps",
        "reject",
    )
    assert refused.retry_after == pytest.approx(caught.value.retry_after)


async def test_settled_cost_and_the_declared_one_are_both_recorded() -> None:
    tokens = RateLimit.per_minute(6000, name="tpm")
    gate = BoundedGate(max_running=2, max_waiting=2, rate_limits=[tokens])
    records = observed(gate)
    async with gate.admit(cost=100) as permit:
        permit.settle(250)
    async with gate.admit(cost=100):
        pass
    assert [(r.cost, r.settled) for r in records] == [(100, 250), (100, 100)]
    assert records[1].borrowed_burst  # the first took from the bucket: the second is above the rate


async def test_a_keyed_gate_records_its_own_name_and_the_key_and_unobserve_stops() -> None:
    sessions: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, name="sessions")
    records = observed(sessions)
    for key in ("a", "b", "a"):
        async with sessions.admit(key):
            pass
    assert [(r.gate, r.key) for r in records] == [("sessions", "a"), ("sessions", "b"), ("sessions", "a")]
    sessions.unobserve(records.append)
    async with sessions.admit("c"):
        pass
    assert len(records) == 3


async def test_without_observers_the_core_has_no_observer_to_call() -> None:
    gate = BoundedGate(max_running=1, max_waiting=0)

    def observer() -> object:
        return gate._state.observer

    assert observer() is None
    gate.observe(print)
    assert observer() is not None
    gate.unobserve(print)
    assert observer() is None


async def test_an_observer_that_raises_is_logged_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = BoundedGate(max_running=1, max_waiting=0, name="g")
    records: list[RequestRecord] = []

    def broken(record: RequestRecord) -> None:
        raise RuntimeError("exporter bug")

    gate.observe(broken)
    gate.observe(records.append)
    with caplog.at_level(logging.ERROR, logger="boundedgate"):
        async with gate.admit():
            pass
    assert len(records) == 1
    assert "exporter bug" in caplog.text


async def test_a_stream_records_the_time_to_its_first_item() -> None:
    gate = BoundedGate(max_running=1, max_waiting=0)
    records = observed(gate)

    async def chunks() -> AsyncIterator[str]:
        await asyncio.sleep(0.5)
        yield "a"
        await asyncio.sleep(1)
        yield "b"

    async with gate.stream(chunks) as stream:
        assert [item async for item in stream] == ["a", "b"]
    (record,) = records
    assert record.first_chunk == pytest.approx(0.5)
    assert record.ran == pytest.approx(1.5)


async def test_a_leaked_permit_is_told_as_leaked() -> None:
    gate = BoundedGate(max_running=1, max_waiting=0)
    records = observed(gate)

    async def chunks() -> AsyncIterator[str]:
        yield "a"

    stream = await gate.stream(chunks)
    with pytest.warns(ResourceWarning):
        del stream
        gc.collect()
        await asyncio.sleep(0)
    assert [r.outcome.name for r in records] == ["leaked"]


async def test_the_simulator_gives_the_records_a_real_gate_gives_for_the_same_script() -> None:
    jobs = [Job("A", 0, 1000, 5000), Job("B", 0, 2000, 2500), Job("C", 0, 100, 5000)]
    planned: list[RequestRecord] = []
    simulate(jobs, max_running=1, max_waiting=1, observer=planned.append, name="g")
    gate = BoundedGate(max_running=1, max_waiting=1, name="g")
    real = observed(gate)
    loop = asyncio.get_running_loop()
    t0 = loop.time()

    async def run(job: Job) -> None:
        try:
            async with gate.admit(timeout=job.deadline_ms / 1000, raise_late=False):
                await asyncio.sleep(job.service_ms / 1000)
        except QueueFull:
            pass

    await asyncio.gather(*(run(job) for job in jobs))

    def shape(record: RequestRecord, zero: float) -> tuple[object, ...]:
        return (
            record.gate,
            record.outcome,
            record.decision,
            record.queue_depth,
            round(record.arrival - zero, 6),
            round(record.waited, 6),
            None if record.ran is None else round(record.ran, 6),
            round(record.end_to_end, 6),
        )

    assert [shape(r, t0) for r in real] == [shape(r, 0.0) for r in planned]
    assert {r.outcome.name for r in planned} == {"completed", "late", "rejected"}
    assert not math.isinf(planned[0].deadline)
