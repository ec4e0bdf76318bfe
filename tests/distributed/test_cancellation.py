"""Cancellation at every await of a RedisGate request: no slot or place leaks, no grant is lost."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import redis.asyncio

from boundedgate import Status

from .helpers import cluster, make_gate, settles_empty, wait_until

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]


async def _waiting(client: redis.asyncio.Redis, name: str, n: int) -> bool:
    return (await cluster(client, name)).waiting == n


@pytest.mark.parametrize("busy", [False, True], ids=["free-slot", "queued"])
@pytest.mark.parametrize("turns", [0, 1, 2, 3, 5, 8, 13, 30])
async def test_cancelled_after_any_number_of_loop_turns_leaks_nothing(
    client: redis.asyncio.Redis, name: str, busy: bool, turns: int
) -> None:
    # The request is cancelled while its admission is in flight, while it waits, in its body, or
    # while its exit waits for the release, depending on how many loop turns it got first.
    async with make_gate(client, name, 1, 2) as gate:
        holder = await gate.try_admit() if busy else None
        entered = asyncio.Event()

        async def request() -> None:
            async with gate.admit(timeout=5):  # a cancellation lost in the client would show as QueueExpired
                entered.set()
                await asyncio.sleep(0.01)

        task = asyncio.create_task(request())
        for _ in range(turns):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):  # unless it had finished already
            await task
        if holder is not None:
            holder.release()
        await settles_empty(client, name)
        stats = gate.stats()
        assert stats.running == stats.waiting == 0
        assert gate._side.holders == gate._side.waiters == {}

        # Redis and this process agree on what became of it (once the cancellation's reply is in).
        async def agreed() -> bool:
            view = await cluster(client, name)
            local = gate.stats()
            return (view.counters.get("admitted", 0), view.counters.get("cancelled", 0)) == (
                local.admitted,
                local.cancelled,
            )

        await wait_until(agreed, 5, "Redis and the process agree")
        stats = gate.stats()
        assert stats.admitted == stats.completed + stats.failed
        async with gate.admit(timeout=30):  # the gate still works
            pass


async def test_a_cancelled_waiter_racing_its_grant_passes_the_slot_on(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with make_gate(client, name, 1, 5) as gate:
        holder = await gate.try_admit()
        first = asyncio.create_task(gate.admit(timeout=30).__aenter__())
        await wait_until(lambda: _waiting(client, name, 1), 5, "1 waiting")
        second = asyncio.create_task(gate.admit(timeout=30).__aenter__())
        await wait_until(lambda: _waiting(client, name, 2), 5, "2 waiting")
        holder.release()
        await asyncio.sleep(0)
        first.cancel()  # the grant to it lands in Redis about now
        with pytest.raises(asyncio.CancelledError):
            await first
        permit = await asyncio.wait_for(second, 5)
        assert permit.status is Status.RUNNING
        permit.release()
        view = await settles_empty(client, name)
        assert view.counters["admitted"] == 2  # the holder and the second: a grant never used does not count
        assert view.counters["cancelled"] == 1


async def test_a_cancelled_holder_releases_its_slot(client: redis.asyncio.Redis, name: str) -> None:
    async with make_gate(client, name, 1, 1) as gate:
        started = asyncio.Event()

        async def body() -> None:
            async with gate.admit() as permit:
                started.set()
                try:
                    await asyncio.sleep(30)
                finally:
                    assert permit.status is Status.RUNNING

        task = asyncio.create_task(body())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        view = await settles_empty(client, name)
        assert view.counters["failed"] == 1
        assert gate.stats().failed == 1


async def test_cancelled_while_the_exit_waits_for_the_release_still_releases(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with make_gate(client, name, 1, 1) as gate:
        body_done = asyncio.Event()

        async def body() -> None:
            async with gate.admit():
                body_done.set()

        task = asyncio.create_task(body())
        await body_done.wait()
        task.cancel()  # lands on the exit's wait for the release
        with pytest.raises(asyncio.CancelledError):
            await task
        view = await settles_empty(client, name)
        assert view.counters["completed"] == 1
