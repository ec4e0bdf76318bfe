"""The client's connection pool: a busy process is neither refused by its own pool nor loses its leases.

redis-py 8's asyncio pool (``Redis.from_url``, as the README's examples make it) holds at most 100
connections and raises ``MaxConnectionsError`` for the 101st command in flight (older redis-py's
holds 2**31 by default, and raises a plain ``ConnectionError`` when made smaller). That is this
process's own traffic, not an outage: the gate waits for a connection (within ``op_timeout``), and
renews its leases over a connection of its own, which that traffic cannot take.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import redis.asyncio
import redis.exceptions

from boundedgate import GateUnavailable, QueueFull, Status
from boundedgate.redis._io import pooled

from .helpers import OtherProcess, cluster, make_gate, settles_empty
from .servers import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[redis.asyncio.Redis]:
    """A client whose pool holds 100 connections: redis-py 8's default, asked for by name."""
    connection = redis.asyncio.Redis.from_url(redis_server.url, max_connections=100)
    try:
        yield connection
    finally:
        await connection.aclose()


async def _blpop(client: redis.asyncio.Redis, key: str, timeout: float) -> None:
    """A blocking pop on ``key``: it holds one of the pool's connections for up to ``timeout`` seconds."""
    await client.blpop([key], timeout=timeout)


async def test_150_concurrent_admissions_through_a_100_connection_pool_are_all_admitted(
    client: redis.asyncio.Redis, name: str
) -> None:
    assert client.connection_pool.max_connections == 100
    async with make_gate(client, name, 150, 0) as gate:
        started = 0

        async def request() -> None:
            nonlocal started
            async with gate.admit(timeout=30):
                started += 1
                await asyncio.sleep(0.05)

        results = await asyncio.gather(*(request() for _ in range(150)), return_exceptions=True)
        assert [r for r in results if r is not None] == []
        assert started == 150
        stats = gate.stats()
        assert (stats.admitted, stats.completed, stats.unavailable) == (150, 150, 0)
        await settles_empty(client, name)


async def test_a_pool_that_stays_full_is_waited_for_until_op_timeout_then_reads_as_unavailable(
    redis_server: RedisServer, name: str
) -> None:
    client = redis.asyncio.Redis.from_url(redis_server.url, max_connections=1)
    blocker = redis.asyncio.Redis.from_url(redis_server.url)
    try:
        async with make_gate(client, name, 1, 0, op_timeout=0.5) as gate:
            # The pool's one connection is busy for 0.3 s (a blocking pop): the admission waits for it.
            busy = asyncio.create_task(_blpop(client, f"{name}:nothing", 0.3))
            await asyncio.sleep(0.05)
            start = time.monotonic()
            async with gate.admit(timeout=30) as permit:
                assert permit.status is Status.RUNNING
                assert time.monotonic() - start >= 0.2
            await busy
            # Busy for longer than op_timeout: then, and only then, the gate fails closed.
            busy = asyncio.create_task(_blpop(client, f"{name}:nothing", 2))
            await asyncio.sleep(0.05)
            start = time.monotonic()
            with pytest.raises(GateUnavailable) as info:
                async with gate.admit(timeout=30):
                    pytest.fail("admitted without reaching Redis")
            assert 0.45 <= time.monotonic() - start < 1.9
            assert info.value.reason == "unreachable"
            assert "pool" in str(info.value.__cause__)
            await blocker.lpush(f"{name}:nothing", "x")  # ends the blocking pop
            await busy
            await settles_empty(blocker, name)
    finally:
        await client.aclose()
        await blocker.aclose()


@pytest.mark.parametrize(
    "refusal",
    [
        redis.exceptions.MaxConnectionsError("Too many connections"),
        redis.exceptions.ConnectionError("Too many connections"),
    ],
    ids=["redis-py 7.4 and 8", "redis-py 6.4 and before"],
)
async def test_a_full_pool_s_refusal_is_waited_out_whichever_redis_py_raised_it(
    refusal: redis.exceptions.ConnectionError,
) -> None:
    attempts = 0

    async def call() -> str:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise refusal
        return "answered"

    assert await pooled(call, 1.0) == "answered"
    assert attempts == 3


async def test_a_connection_error_other_than_a_full_pool_is_raised_at_once() -> None:
    attempts = 0

    async def call() -> str:
        nonlocal attempts
        attempts += 1
        raise redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    with pytest.raises(redis.exceptions.ConnectionError, match="refused"):
        await pooled(call, 1.0)
    assert attempts == 1


async def test_300_tasks_retrying_do_not_starve_the_lease_renewals_of_their_process(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> None:
    lease = 1.5
    other = OtherProcess(redis_server.url, name, 2, 0, lease_ttl=lease)
    try:
        async with make_gate(client, name, 2, 0, lease_ttl=lease) as gate:
            held = [await gate.try_admit(), await gate.try_admit()]
            stop = time.monotonic() + 3 * lease  # past two lease lifetimes
            outcomes: dict[str, int] = {}

            async def retry() -> None:
                while time.monotonic() < stop:
                    try:
                        (await gate.try_admit()).release()
                        outcomes["admitted"] = outcomes.get("admitted", 0) + 1
                    except QueueFull:
                        outcomes["full"] = outcomes.get("full", 0) + 1
                    except GateUnavailable:
                        outcomes["unavailable"] = outcomes.get("unavailable", 0) + 1
                    await asyncio.sleep(0)

            async def elsewhere() -> int:
                admitted = 0
                while time.monotonic() < stop:
                    try:
                        (await other.gate.try_admit()).release()
                        admitted += 1
                    except QueueFull:
                        pass
                    await asyncio.sleep(0.05)
                return admitted

            taken_elsewhere = other.submit(elsewhere())
            await asyncio.gather(*(retry() for _ in range(300)))
            assert await taken_elsewhere == 0  # the other process never got in: the leases held
            assert [p.lease_lost for p in held] == [False, False]
            assert outcomes.get("unavailable", 0) == 0
            assert outcomes.get("admitted", 0) == 0
            assert outcomes["full"] > 300
            view = await cluster(client, name)
            assert view.running == 2
            assert view.counters.get("reclaimed", 0) == 0
            for permit in held:
                permit.release()
            await settles_empty(client, name)
    finally:
        other.close()


async def test_renewals_go_on_while_the_process_s_own_commands_hold_every_connection_of_its_pool(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> None:
    lease = 1.0
    other = OtherProcess(redis_server.url, name, 1, 0, lease_ttl=lease)
    try:
        async with make_gate(client, name, 1, 0, lease_ttl=lease) as gate:
            permit = await gate.try_admit()
            # 100 consumers blocked on a queue take every connection of the pool for 3 leases.
            consumers = [asyncio.create_task(_blpop(client, f"{name}:jobs", 3 * lease)) for _ in range(100)]
            await asyncio.sleep(0.1)
            assert client.connection_pool.can_get_connection() is False

            async def elsewhere() -> int:
                admitted = 0
                stop = time.monotonic() + 2.5 * lease
                while time.monotonic() < stop:
                    try:
                        (await other.gate.try_admit()).release()
                        admitted += 1
                    except QueueFull:
                        pass
                    await asyncio.sleep(0.05)
                return admitted

            assert await other.submit(elsewhere()) == 0  # the lease held: nobody else got in
            assert permit.lease_lost is False
            await asyncio.gather(*consumers)
            assert (await cluster(client, name)).counters.get("reclaimed", 0) == 0
            permit.release()
            await settles_empty(client, name)
    finally:
        other.close()
