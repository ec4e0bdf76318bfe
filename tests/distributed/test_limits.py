"""RedisGate.set_limits: limits changed at runtime hold for every process of the cluster."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio

from boundedgate import QueueFull

from .helpers import cluster, make_gate, wait_until

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]


async def test_raising_C_in_one_process_starts_the_waiters_of_another(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with make_gate(client, name, 1, 10) as mine, make_gate(client, name, 1, 10) as theirs:
        holder = await mine.try_admit()
        started: list[int] = []

        async def wait_in(i: int) -> None:
            async with theirs.admit(timeout=30):
                started.append(i)
                await asyncio.sleep(0.5)

        tasks = []
        for i in range(3):  # one at a time, so that their order at Redis is this order
            tasks.append(asyncio.create_task(wait_in(i)))

            async def queued(count: int = i + 1) -> bool:
                return (await cluster(client, name)).waiting == count

            await wait_until(queued, 5, f"{i + 1} waiters")
        await mine.set_limits(max_running=3)

        async def two_started() -> bool:
            return len(started) == 2

        await wait_until(two_started, 2, "two started")
        view = await cluster(client, name)
        assert (view.max_running, view.running, view.waiting) == (3, 3, 1)
        assert view.counters["limit_changes"] == 1
        assert mine.max_running == 3
        assert theirs.max_running == 1  # theirs still shows its own; the scripts use the cluster's
        holder.release()
        await asyncio.gather(*tasks)
        assert started == [0, 1, 2]


async def test_lowering_C_and_Q_interrupts_and_drops_nobody(client: redis.asyncio.Redis, name: str) -> None:
    async with make_gate(client, name, 2, 5) as mine, make_gate(client, name, 2, 5) as theirs:
        first, second = await theirs.try_admit(), await theirs.try_admit()
        waiter = asyncio.create_task(theirs.admit(timeout=30).__aenter__())

        async def queued() -> bool:
            return (await cluster(client, name)).waiting == 1

        await wait_until(queued, 5, "a waiter")
        await mine.set_limits(max_running=1, max_waiting=0)
        view = await cluster(client, name)
        assert (view.running, view.waiting, view.max_running, view.max_waiting) == (2, 1, 1, 0)
        with pytest.raises(QueueFull):  # theirs was built with Q=5, the cluster's Q is 0 now
            async with theirs.admit(timeout=1):
                pass
        first.release()
        await asyncio.sleep(0.3)
        assert not waiter.done()  # running 1 == C: the excess drained, nobody started
        second.release()
        permit = await asyncio.wait_for(waiter, 5)
        permit.release()
