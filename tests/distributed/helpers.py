"""Helpers for the Redis tests: gates with test settings, waiting on a condition, another "process"."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import redis.asyncio

from boundedgate import QueueFull
from boundedgate.redis import ClusterStatistics, RedisGate, RedisPermit, read_cluster
from boundedgate.redis._layout import wake_prefix

T = TypeVar("T")

#: Settings for tests that do not exercise leases: nothing lapses on a slow machine.
CALM = {"lease_ttl": 10.0, "poll_interval": 0.1, "waiter_ttl": 5.0, "op_timeout": 5.0}


def make_gate(client: redis.asyncio.Redis, name: str, c: int, q: int | None, **settings: Any) -> RedisGate:
    return RedisGate(client, max_running=c, max_waiting=q, name=name, **{**CALM, **settings})


async def cluster(client: redis.asyncio.Redis, name: str) -> ClusterStatistics:
    return await read_cluster(client, name)


async def listening(client: redis.asyncio.Redis, gate: RedisGate, within: float = 10.0) -> None:
    """Return once ``gate``'s listener has subscribed to its wake channel: a grant's message reaches it."""
    channel = wake_prefix(gate.name) + gate.process

    async def subscribed() -> bool:
        return bool((await client.pubsub_numsub(channel))[0][1])

    await wait_until(subscribed, within, f"{gate.name}'s listener")


async def wait_until(check: Callable[[], Awaitable[bool]], within: float, what: str = "condition") -> float:
    """Poll ``check`` every 10 ms until it is true; return the seconds it took; fail after ``within``."""
    start = time.monotonic()
    while not await check():
        if time.monotonic() - start > within:
            raise AssertionError(f"{what} not reached within {within}s")
        await asyncio.sleep(0.01)
    return time.monotonic() - start


async def until_queued(
    request: asyncio.Future[Any], queued: Callable[[], bool], within: float = 10.0
) -> None:
    """Wait until ``queued()`` says ``request`` (an admission in a task) waits in the queue.

    Fails, saying why, if the request ended first (refused, or unreachable: it would never queue)
    or ``within`` seconds passed, rather than poll for ever until the test's timeout kills it.
    """
    start = time.monotonic()
    while not queued():
        if request.done():
            why = "cancelled" if request.cancelled() else repr(request.exception() or request.result())
            raise AssertionError(f"the request ended instead of queueing: {why}")
        if time.monotonic() - start > within:
            raise AssertionError(f"the request did not queue within {within}s")
        await asyncio.sleep(0.01)


async def settles_empty(client: redis.asyncio.Redis, name: str, within: float = 5.0) -> ClusterStatistics:
    """Wait until the gate has no holder and no waiter in Redis, and return its state then."""

    async def empty() -> bool:
        view = await cluster(client, name)
        return view.running == 0 and view.waiting == 0

    await wait_until(empty, within, f"gate {name} empty")
    return await cluster(client, name)


class OtherProcess:
    """An event loop in a thread with its own client and gate: another process, as Redis sees it.

    It keeps running while the test's own loop is blocked, which is how tests make the test's
    process stall.
    """

    def __init__(self, url: str, name: str, c: int, q: int | None, **settings: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.client: redis.asyncio.Redis = self.run(self._connect(url))
        self.gate = make_gate(self.client, name, c, q, **settings)

    @staticmethod
    async def _connect(url: str) -> redis.asyncio.Redis:
        return redis.asyncio.Redis.from_url(url)

    def run(self, call: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run ``call`` on the other loop and wait for its result (blocking this thread)."""
        return asyncio.run_coroutine_threadsafe(call, self.loop).result(timeout)

    def submit(self, call: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        """Start ``call`` on the other loop; await the returned future from the test's loop."""
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call, self.loop))

    async def take_when_free(self) -> RedisPermit:
        """A slot of the other process's gate as soon as one is free (asked every 50 ms); run it there."""
        while True:
            try:
                return await self.gate.try_admit()
            except QueueFull:
                await asyncio.sleep(0.05)

    def release(self, permit: RedisPermit) -> None:
        """Release ``permit``, admitted by the other process, on its loop."""

        async def release() -> None:
            permit.release()

        self.run(release())

    def close(self) -> None:
        """End the other process: its gate and client closed, then its loop.

        Raises:
            AssertionError: Tasks of the test were still running there (they are cancelled first,
                as a process's end would).
        """

        async def shutdown() -> list[asyncio.Task[Any]]:
            await self.gate.aclose()
            await self.client.aclose()
            left = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in left:
                task.cancel()
            await asyncio.gather(*left, return_exceptions=True)
            return left

        try:
            left = self.run(shutdown())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()
        assert not left, f"tasks still running in the other process at its end: {left}"
