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
from typing import cast

import pytest
import redis.asyncio
import redis.exceptions

from boundedgate import GateUnavailable, QueueFull, Status
from boundedgate.redis._io import pooled, text
from boundedgate.redis._layout import gate_keys

from .helpers import OtherProcess, cluster, make_gate, settles_empty, wait_until
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
    """A blocking pop on ``key``: it holds one of the pool's connections for up to ``timeout`` seconds
    (0: until something is pushed)."""
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
    op_timeout = 1.0
    client = redis.asyncio.Redis.from_url(redis_server.url, max_connections=1)
    blocker = redis.asyncio.Redis.from_url(redis_server.url)
    jobs = f"{name}:jobs"
    try:
        async with make_gate(client, name, 1, 0, op_timeout=op_timeout) as gate:
            # The pool's one connection is busy (a blocking pop) for a tenth of op_timeout: the
            # admission waits for it, and gets in once the pop gave it back.
            busy = asyncio.create_task(_blpop(client, jobs, 0))
            await wait_until(lambda: _pool_taken(client), 10, "the pool's one connection taken")
            entering = asyncio.create_task(gate.admit(timeout=30).__aenter__())
            await asyncio.sleep(op_timeout / 10)
            assert not entering.done()  # no connection to send its admission on
            await blocker.lpush(jobs, "x")
            await busy
            permit = await entering
            assert permit.status is Status.RUNNING
            permit.release()
            await settles_empty(blocker, name)
            await wait_until(lambda: _pool_free(client), 10, "the release's connection given back")
            # Busy for longer than op_timeout: then, and only then, the gate fails closed.
            busy = asyncio.create_task(_blpop(client, jobs, 0))
            await wait_until(lambda: _pool_taken(client), 10, "the pool's one connection taken")
            start = time.monotonic()
            with pytest.raises(GateUnavailable) as info:
                async with gate.admit(timeout=30):
                    pytest.fail("admitted without reaching Redis")
            assert 0.9 * op_timeout <= time.monotonic() - start < 10 * op_timeout
            assert info.value.reason == "unreachable"
            assert "pool" in str(info.value.__cause__)
            await blocker.lpush(jobs, "x")  # ends the blocking pop
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


async def _expiries(client: redis.asyncio.Redis, name: str) -> dict[str, float]:
    """Each holder's lease expiry in Redis (ms, the server's clock): a renewal moves it on."""
    holders = await client.zrange(gate_keys(name)[1], 0, -1, withscores=True)
    return {text(member): score for member, score in cast("list[tuple[bytes, float]]", holders)}


async def _renewed_twice(client: redis.asyncio.Redis, name: str, holders: int, lease: float) -> None:
    """Return once Redis has renewed each of ``holders`` leases twice; fail after ten leases.

    The expiries are read every 10 ms; a renewal sets each to the server's clock plus the lease,
    so each expiry that moves on is a renewal seen.
    """
    seen: dict[str, list[float]] = {}

    async def twice() -> bool:
        for permit_id, expiry in (await _expiries(client, name)).items():
            history = seen.setdefault(permit_id, [])
            if not history or expiry != history[-1]:
                history.append(expiry)
        return len(seen) == holders and all(len(history) >= 3 for history in seen.values())

    await wait_until(twice, 10 * lease, "two renewals of every lease")


async def test_300_tasks_retrying_do_not_starve_the_lease_renewals_of_their_process(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> None:
    # Tasks that yield between their calls leave the renewals a turn of the ready queue: what holds
    # even for renewals on the loop. The lease (6 s) is far longer than a renewal period (2 s) plus
    # two turns of the queue on a loaded machine, so the renewals are what is checked here, not the
    # machine's speed. A queue whose turn outlasts the lease is the test below.
    lease = 6.0
    async with make_gate(client, name, 2, 0, lease_ttl=lease) as gate:
        held = [await gate.try_admit(), await gate.try_admit()]
        outcomes: dict[str, int] = {}
        spinning = True

        async def retry() -> None:
            while spinning:
                try:
                    (await gate.try_admit()).release()
                    outcomes["admitted"] = outcomes.get("admitted", 0) + 1
                except QueueFull:
                    outcomes["full"] = outcomes.get("full", 0) + 1
                except GateUnavailable:
                    outcomes["unavailable"] = outcomes.get("unavailable", 0) + 1
                await asyncio.sleep(0)

        tasks = [asyncio.create_task(retry()) for _ in range(300)]
        reader = redis.asyncio.Redis.from_url(redis_server.url)  # the tasks keep the pool full
        try:
            await _renewed_twice(reader, name, 2, lease)
        finally:
            spinning = False
            await asyncio.gather(*tasks)
            await reader.aclose()
        assert (outcomes.get("admitted", 0), outcomes.get("unavailable", 0)) == (0, 0)
        assert outcomes["full"] >= 300
        assert [p.lease_lost for p in held] == [False, False]
        assert (await cluster(client, name)).counters.get("reclaimed", 0) == 0
        for permit in held:
            permit.release()
        await settles_empty(client, name)


async def test_a_ready_queue_whose_turn_outlasts_the_lease_does_not_let_it_lapse(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> None:
    # 100 tasks each hold the loop for lease / 50 between two awaits (work the loop runs, as a
    # parser's would): one turn of the ready queue takes twice the lease, however fast the machine.
    # Renewals made by a task of the loop would wait a turn to send, and another to read the reply
    # (issue 28, item 1); the gate's renewal thread does not wait for the loop, which shows progress
    # well within max_stall (a beat runs within two turns). Meanwhile another process asks for the
    # slot every 50 ms: it must never get it.
    lease = 1.0
    other = OtherProcess(redis_server.url, name, 1, 0, lease_ttl=lease)
    try:
        async with make_gate(client, name, 1, 0, lease_ttl=lease) as gate:
            held = await gate.try_admit()
            loop = asyncio.get_running_loop()
            stop = loop.time() + 3 * lease

            async def busy() -> None:
                while loop.time() < stop:
                    time.sleep(lease / 50)  # blocks the loop as work would, and spares the machine's CPU
                    await asyncio.sleep(0)

            async def elsewhere() -> int:
                admitted = 0
                while loop.time() < stop + lease:
                    try:
                        (await other.gate.try_admit()).release()
                        admitted += 1
                    except QueueFull:
                        pass
                    await asyncio.sleep(0.05)
                return admitted

            taken_elsewhere = other.submit(elsewhere())
            await asyncio.gather(*(busy() for _ in range(100)))
            try:
                assert await taken_elsewhere == 0  # the lease held: nobody else got in
                assert held.lease_lost is False
            finally:
                held.release()
                await settles_empty(client, name)
    finally:
        other.close()


async def test_renewals_go_on_while_the_process_s_own_commands_hold_every_connection_of_its_pool(
    redis_server: RedisServer, name: str
) -> None:
    # 100 consumers blocked on a queue take every connection of the pool until the test pushes
    # them their jobs: the renewals, on a connection of the gate's own, go on meanwhile.
    lease = 3.0
    client = redis.asyncio.Redis.from_url(redis_server.url, max_connections=100, socket_timeout=None)
    pusher = redis.asyncio.Redis.from_url(redis_server.url)
    try:
        async with make_gate(client, name, 1, 0, lease_ttl=lease) as gate:
            permit = await gate.try_admit()
            jobs = f"{name}:jobs"
            consumers = [asyncio.create_task(_blpop(client, jobs, 0)) for _ in range(100)]
            try:
                await wait_until(lambda: _pool_taken(client), 10, "every connection of the pool taken")
                await _renewed_twice(pusher, name, 1, lease)
                assert await _pool_taken(client)  # still all taken
            finally:
                await pusher.lpush(jobs, *range(100))
                await asyncio.gather(*consumers)
            assert permit.lease_lost is False
            assert (await cluster(pusher, name)).counters.get("reclaimed", 0) == 0
            permit.release()
            await settles_empty(pusher, name)
    finally:
        await client.aclose()
        await pusher.aclose()


async def _pool_taken(client: redis.asyncio.Redis) -> bool:
    return client.connection_pool.can_get_connection() is False


async def _pool_free(client: redis.asyncio.Redis) -> bool:
    return client.connection_pool.can_get_connection()
