"""Streams admitted with ``on_deadline="cut"``: closed at their deadline, counted ``cut`` (issue 29)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncGenerator

import pytest

from boundedgate import BoundedGate, DeadlineCut
from tests.helpers import checked_gate
from tests.streams.sources import Log, ticks


async def slow_close(n: int, log: Log, every: float, closing: float) -> AsyncGenerator[int, None]:
    """``ticks``, whose close takes ``closing`` seconds (an HTTP response shut down politely)."""
    try:
        for i in range(n):
            await asyncio.sleep(every)
            log.sent += 1
            yield i
    finally:
        await asyncio.sleep(closing)
        log.closed = True


async def test_a_stream_is_closed_at_its_deadline_and_its_next_read_raises() -> None:
    gate = checked_gate(1, 0)
    log = Log()
    loop = asyncio.get_running_loop()
    async with gate.admit(timeout=2.5, on_deadline="cut") as permit:
        stream = permit.hand_to(ticks(10, log, every=1))
    assert await stream.__anext__() == 0
    assert await stream.__anext__() == 1
    await asyncio.sleep(5)  # the consumer dawdles past the deadline
    assert log.closed
    assert gate.running == 0
    with pytest.raises(DeadlineCut) as caught:
        await stream.__anext__()
    assert caught.value.elapsed == 2.5
    with pytest.raises(DeadlineCut):
        await stream.__anext__()  # and every read after
    stats = gate.stats()
    assert (stats.cut, stats.completed, stats.late, stats.failed) == (1, 0, 0, 0)
    assert loop.time() == 7.0


async def test_a_read_in_flight_at_the_deadline_is_interrupted_and_raises() -> None:
    gate = checked_gate(1, 0)
    log = Log()
    stream = await gate.stream(lambda: ticks(10, log, every=1), timeout=2.5, on_deadline="cut")
    received = []
    with pytest.raises(DeadlineCut):
        async for item in stream:
            received.append(item)
    assert received == [0, 1]
    assert asyncio.get_running_loop().time() == 2.5
    assert log.closed
    assert gate.stats().cut == 1


async def test_the_slot_is_held_until_the_cut_streams_close_is_over() -> None:
    gate = checked_gate(1, 1)
    log = Log()
    loop = asyncio.get_running_loop()
    stream = await gate.stream(lambda: slow_close(10, log, 1, 3), timeout=2.5, on_deadline="cut")
    started: list[float] = []
    assert await stream.__anext__() == 0  # at 1 s: the source is open, its close will take 3 s

    async def next_one() -> None:
        async with gate.admit(timeout=100):
            started.append(loop.time())

    waiter = asyncio.create_task(next_one())
    await asyncio.sleep(3)
    assert (gate.running, gate.waiting, log.closed) == (1, 1, False)  # still closing
    await waiter
    assert started == [5.5]
    assert log.closed
    with pytest.raises(DeadlineCut):
        await stream.__anext__()
    assert gate.stats().cut == 1


async def test_a_stream_that_ends_before_its_deadline_is_completed_and_never_cut() -> None:
    gate = checked_gate(1, 0)
    async with gate.stream(lambda: ticks(3, every=0.5), timeout=5, on_deadline="cut") as stream:
        assert [i async for i in stream] == [0, 1, 2]
    await asyncio.sleep(10)
    stats = gate.stats()
    assert (stats.completed, stats.cut) == (1, 0)


async def test_an_item_due_at_the_deadline_is_cut_as_in_the_simulator() -> None:
    gate = checked_gate(1, 0)
    async with gate.admit(deadline=1.0, on_deadline="cut") as permit:
        stream = permit.hand_to(ticks(1, every=1))
    with pytest.raises(DeadlineCut):
        await stream.__anext__()
    assert gate.stats().cut == 1


async def test_a_stream_closed_by_its_consumer_before_the_deadline_is_completed() -> None:
    gate = checked_gate(1, 0)
    async with gate.admit(timeout=3, on_deadline="cut") as permit:
        stream = permit.hand_to(ticks(10, every=1))
    await stream.__anext__()
    await stream.aclose()
    await asyncio.sleep(5)
    stats = gate.stats()
    assert (stats.completed, stats.cut) == (1, 0)


async def test_a_stream_dropped_before_its_deadline_is_not_kept_alive_by_its_timer() -> None:
    gate = BoundedGate(max_running=1, max_waiting=0)
    async with gate.admit(timeout=30, on_deadline="cut") as permit:
        stream = permit.hand_to(ticks(10, every=1))
    with pytest.warns(ResourceWarning, match="unclosed"):
        del stream
        gc.collect()
    await asyncio.sleep(1)
    assert gate.stats().leaked == 1


async def test_opening_the_stream_past_the_deadline_is_cut() -> None:
    gate = checked_gate(1, 0)

    async def opening() -> AsyncGenerator[int, None]:
        await asyncio.sleep(10)  # the provider takes its time to answer
        return ticks(1)

    with pytest.raises(DeadlineCut):
        await gate.stream(opening, timeout=2, on_deadline="cut")
    assert gate.stats().cut == 1
