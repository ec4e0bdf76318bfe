"""Round trips to Redis, counted on the wire: what an uncontended admission and release cost.

Every connection the gate makes (the user's client's, and its own for renewals and wake-ups, which
copy the client's connection class) counts each command it sends and each reply it reads, so the
figures include background work, not only the calls the test makes.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest
import redis.asyncio

from boundedgate.redis import RedisGate

from .helpers import listening, make_gate, settles_empty, until_queued
from .servers import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]

PAIRS = 50

#: Background work far apart: on a loaded machine a renewal or a poll could otherwise fall inside a
#: count and be taken for the pairs' own (a poll every 0.1 s sent 5 commands more in one slow run).
QUIET = {"lease_ttl": 60.0, "poll_interval": 5.0, "waiter_ttl": 20.0}


class CountingConnection(redis.asyncio.Connection):
    """A connection that counts the commands it sends and the replies it reads, for every instance."""

    sent: ClassVar[int] = 0
    read: ClassVar[int] = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        await super().send_packed_command(command, check_health)

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        CountingConnection.read += 1
        return await super().read_response(*args, **kwargs)

    @classmethod
    def reset(cls) -> None:
        cls.sent = cls.read = 0

    @classmethod
    def counts(cls) -> tuple[int, int]:
        return cls.sent, cls.read


@pytest.fixture
async def counting(redis_server: RedisServer) -> AsyncIterator[redis.asyncio.Redis]:
    pool = redis.asyncio.ConnectionPool.from_url(redis_server.url, connection_class=CountingConnection)
    client = redis.asyncio.Redis(connection_pool=pool)
    try:
        yield client
    finally:
        await client.aclose()
        await pool.disconnect()


async def test_an_uncontended_admission_and_release_cost_two_round_trips(
    counting: redis.asyncio.Redis, name: str
) -> None:
    async with make_gate(counting, name, 1, 10, **QUIET) as gate:
        async with gate.admit(timeout=5):  # warm up: the scripts are loaded, a connection is open
            pass
        CountingConnection.reset()
        for _ in range(PAIRS):
            async with gate.admit(timeout=5):
                pass
        await asyncio.sleep(0.05)  # anything the pairs left to the background would be sent by now
        assert CountingConnection.counts() == (2 * PAIRS, 2 * PAIRS)


async def test_a_refusal_costs_one_round_trip(counting: redis.asyncio.Redis, name: str) -> None:
    async with make_gate(counting, name, 1, 0, **QUIET) as gate:
        held = await gate.try_admit()
        CountingConnection.reset()
        for _ in range(PAIRS):
            with pytest.raises(Exception, match="full"):
                async with gate.admit(timeout=5):
                    pass
        assert CountingConnection.counts() == (PAIRS, PAIRS)
        held.release()


async def _publishes(client: redis.asyncio.Redis) -> int:
    stats = await client.info("commandstats")
    return int(stats.get("cmdstat_publish", {}).get("calls", 0))


@pytest.mark.parametrize(
    "settings",
    [{}, {"protocol": 2, "decode_responses": True}, {"protocol": 3}, {"health_check_interval": 30}],
    ids=["read-directly", "resp2-decoded", "resp3", "through-get_message"],
)
async def test_a_hand_off_is_announced_to_the_waiting_process_only(
    own_server: RedisServer, name: str, settings: dict[str, Any]
) -> None:
    # Polls every 5 s: a waiter that starts within a second was told by a reply or a message. The
    # listener reads its connection directly, whatever the protocol and decoding, or through
    # get_message when health checks are asked for.
    slow = {"poll_interval": 5.0, "waiter_ttl": 20.0}
    mine_client = redis.asyncio.Redis.from_url(own_server.url)
    theirs_client = redis.asyncio.Redis.from_url(own_server.url, **settings)
    try:
        async with (
            make_gate(mine_client, name, 1, 10, **slow) as mine,
            make_gate(theirs_client, name, 1, 10, **slow) as theirs,
        ):
            for waiting_gate, publishes in ((mine, 0), (theirs, 1)):
                holder = await mine.try_admit()
                waiter = asyncio.create_task(waiting_gate.admit(timeout=30).__aenter__())
                await until_queued(waiter, functools.partial(_waits, waiting_gate))
                await listening(mine_client, waiting_gate)  # a message would reach it
                await mine_client.config_resetstat()
                holder.release()
                permit = await asyncio.wait_for(waiter, 1.0)
                # The releasing process's own waiter hears it in the release's reply: no message;
                # another process's hears it on its own channel: one message.
                assert await _publishes(mine_client) == publishes
                permit.release()
                await settles_empty(mine_client, name)
    finally:
        await mine_client.aclose()
        await theirs_client.aclose()


async def _calls_in_scripts(client: redis.asyncio.Redis) -> dict[str, int]:
    stats = await client.info("commandstats")
    outside = ("cmdstat_evalsha", "cmdstat_fcall", "cmdstat_info", "cmdstat_config")
    return {k: int(v["calls"]) for k, v in stats.items() if not k.startswith(outside)}


#: Redis calls the two scripts of an uncontended pair make in all: each costs the server far more
#: than the command it runs, so the uncontended admission touches only what it needs: meta, the
#: holders, the request's info, the sequence and the counters; the queue only to see it empty; the
#: release looks up outcomes only for an id that held no slot (a retry).
CALLS_PER_PAIR = 22


async def test_an_uncontended_pair_makes_few_redis_calls_in_its_scripts(
    own_server: RedisServer, name: str
) -> None:
    client = redis.asyncio.Redis.from_url(own_server.url)
    try:
        async with make_gate(client, name, 1, 10) as gate:
            async with gate.admit(timeout=5):
                pass
            await client.config_resetstat()
            for _ in range(PAIRS):
                async with gate.admit(timeout=5):
                    pass
            calls = await _calls_in_scripts(client)
        assert sum(calls.values()) <= CALLS_PER_PAIR * PAIRS, calls
    finally:
        await client.aclose()


async def test_uncontended_pairs_start_no_task_of_the_gate(counting: redis.asyncio.Redis, name: str) -> None:
    # A task costs a pair more than its own work: the background loops outlive a pair, not one each.
    loop = asyncio.get_running_loop()
    started: list[str] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        code = getattr(coro, "cr_code", None)
        if code is not None and "boundedgate" in code.co_filename:
            started.append(coro.__qualname__)
        return asyncio.Task(coro, loop=loop, **kwargs)

    async with make_gate(counting, name, 1, 10) as gate:
        async with gate.admit(timeout=5):
            pass
        await asyncio.sleep(0.05)
        loop.set_task_factory(factory)
        try:
            for _ in range(PAIRS):
                async with gate.admit(timeout=5):
                    pass
        finally:
            loop.set_task_factory(None)
    assert started == []


class _OwnRedis(redis.asyncio.Redis):
    """A client subclass: the gate's calls go through its own execute_command, as any client's."""


@pytest.mark.parametrize(
    "settings",
    [{"decode_responses": True}, {"single_connection_client": True}, {"subclass": True}],
    ids=["decoding", "single-connection", "subclass"],
)
async def test_a_gate_works_through_every_kind_of_client(
    redis_server: RedisServer, name: str, settings: dict[str, bool]
) -> None:
    # Whatever the client decodes, however it pools its connections, whatever its class.
    kind = _OwnRedis if settings.pop("subclass", False) else redis.asyncio.Redis
    client = kind.from_url(redis_server.url, **settings)
    try:
        async with make_gate(client, name, 1, 1) as gate:
            async with gate.admit(timeout=5):
                with pytest.raises(Exception, match="full"):
                    await gate.try_admit()
            permit = await gate.try_admit()
            assert permit.token is not None
            permit.release()
            await settles_empty(client, name)
    finally:
        await client.aclose()


async def test_admissions_go_on_after_redis_dropped_the_clients_connections(
    redis_server: RedisServer, name: str
) -> None:
    # The pooled connections are dead: the client finds out as it takes one and connects anew,
    # rather than the gate failing closed.
    client = redis.asyncio.Redis.from_url(redis_server.url)
    killer = redis.asyncio.Redis.from_url(redis_server.url)
    try:
        async with make_gate(client, name, 1, 1) as gate:
            async with gate.admit(timeout=5):
                pass
            me = await killer.client_id()
            for entry in await killer.client_list():
                if int(entry["id"]) != me:
                    await killer.client_kill_filter(_id=entry["id"])
            for _ in range(3):
                async with gate.admit(timeout=5):
                    pass
            assert gate.stats().unavailable == 0
    finally:
        await client.aclose()
        await killer.aclose()


def _waits(gate: RedisGate) -> bool:
    return gate.waiting > 0
