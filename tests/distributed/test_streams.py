"""Streams holding a cluster slot: the same GatedStream as in-process, over a RedisPermit and a real
Redis. Each way a stream ends gives the slot back in Redis exactly once and counts one outcome."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator

import pytest
import redis.asyncio

from boundedgate import GatedStream, Late, QueueFull, Status
from tests.streams.sources import Broken, Log, ticks

from .helpers import cluster, make_gate, settles_empty

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]


async def test_a_stream_holds_the_cluster_slot_until_its_end(client: redis.asyncio.Redis, name: str) -> None:
    async with make_gate(client, name, 1, 0) as gate, make_gate(client, name, 1, 0) as elsewhere:
        log = Log()
        stream = await gate.stream(lambda: ticks(3, log), timeout=30)
        assert isinstance(stream, GatedStream)
        items = []
        async for item in stream:
            items.append(item)
            with pytest.raises(QueueFull):  # another process finds the slot taken mid-stream
                await elsewhere.try_admit()
        assert items == [0, 1, 2]
        assert log.closed
        assert stream.permit.status is Status.COMPLETED
        await settles_empty(client, name)
        async with await elsewhere.try_admit():
            pass


async def test_hand_to_inside_the_admission_block(client: redis.asyncio.Redis, name: str) -> None:
    async with make_gate(client, name, 1, 0) as gate:

        async def open_stream() -> GatedStream[AsyncIterator[int]]:
            async with gate.admit(timeout=30) as permit:
                return permit.hand_to(ticks(5))

        stream = await open_stream()
        assert (await cluster(client, name)).running == 1  # the block's exit did not release
        async for item in stream:
            if item == 1:
                break  # the consumer stops early: completed, released a loop turn later
        await settles_empty(client, name)
        assert gate.stats().completed == 1


@pytest.mark.parametrize("ending", ["error", "cancelled", "aclose"])
async def test_every_ending_releases_once(client: redis.asyncio.Redis, name: str, ending: str) -> None:
    async with make_gate(client, name, 1, 0) as gate:
        stream = await gate.stream(lambda: ticks(10, every=0.02, fail_at=2 if ending == "error" else None))

        async def consume() -> None:
            async for _ in stream:
                pass

        if ending == "error":
            with pytest.raises(Broken):
                await consume()
        elif ending == "cancelled":
            task = asyncio.create_task(consume())
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        else:
            await stream.__anext__()
            await stream.aclose()
            await stream.aclose()  # twice: nothing more
        await settles_empty(client, name)
        stats = gate.stats()
        expected = "completed" if ending == "aclose" else "failed"
        assert getattr(stats, expected) == 1
        assert stats.completed + stats.failed == 1


async def test_a_stream_ending_past_its_deadline_raises_late(client: redis.asyncio.Redis, name: str) -> None:
    async with make_gate(client, name, 1, 0) as gate:
        # A second to reach Redis (room for a loaded machine); the stream's three items take more.
        stream = await gate.stream(lambda: ticks(3, every=0.4), timeout=1.0)
        with pytest.raises(Late):
            async for _ in stream:
                pass
        await settles_empty(client, name)
        assert gate.stats().late == 1


async def test_an_unclosed_stream_collected_gives_the_slot_back(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with make_gate(client, name, 1, 0) as gate:
        stream = await gate.stream(lambda: ticks(5))
        await stream.__anext__()
        with pytest.warns(ResourceWarning, match=f"unclosed <GatedStream of gate '{name}'"):
            del stream
            gc.collect()
        await settles_empty(client, name)
        assert gate.stats().leaked == 1
