"""Round trips to Redis, counted on the wire: what an uncontended admission and release cost.

Every connection the gate makes (the user's client's, and its own for renewals and wake-ups, which
copy the client's connection class) counts each command it sends and each reply it reads, so the
figures include background work, not only the calls the test makes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest
import redis.asyncio

from .helpers import make_gate
from .servers import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]

PAIRS = 50


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
    async with make_gate(counting, name, 1, 10) as gate:
        async with gate.admit(timeout=5):  # warm up: the scripts are loaded, a connection is open
            pass
        CountingConnection.reset()
        for _ in range(PAIRS):
            async with gate.admit(timeout=5):
                pass
        await asyncio.sleep(0.05)  # anything the pairs left to the background would be sent by now
        assert CountingConnection.counts() == (2 * PAIRS, 2 * PAIRS)


async def test_a_refusal_costs_one_round_trip(counting: redis.asyncio.Redis, name: str) -> None:
    async with make_gate(counting, name, 1, 0) as gate:
        held = await gate.try_admit()
        CountingConnection.reset()
        for _ in range(PAIRS):
            with pytest.raises(Exception, match="full"):
                async with gate.admit(timeout=5):
                    pass
        assert CountingConnection.counts() == (PAIRS, PAIRS)
        held.release()
