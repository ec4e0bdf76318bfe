"""RedisGate.adapt(): a process's adaptive controller turned on or replaced at runtime, as in process.

Processes are RedisGate objects with clients of their own; every test runs in real time against a
real redis-server, with windows long enough (30 s) that no decision depends on the machine's speed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio

from boundedgate import Adaptive, AdaptiveLimit, RateLimit
from boundedgate.redis import RedisGate

from .helpers import cluster, make_gate
from .servers import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]


@pytest.fixture
async def clients(redis_server: RedisServer) -> AsyncIterator[list[redis.asyncio.Redis]]:
    own = [redis.asyncio.Redis.from_url(redis_server.url) for _ in range(2)]
    try:
        yield own
    finally:
        for client in own:
            await client.aclose()


async def test_adapt_turns_a_controller_on_that_moves_the_clusters_c(
    clients: list[redis.asyncio.Redis], name: str
) -> None:
    async with make_gate(clients[0], name, 20, 50) as gate:
        before = gate.controller
        async with gate.admit():  # the gate's state in Redis
            pass
        await gate.signal("overloaded")  # no controller yet: nothing cuts C
        assert (await cluster(clients[0], name)).max_running == 20
        limit = gate.adapt(Adaptive(floor=2, window=30.0))
        assert isinstance(limit, AdaptiveLimit)
        assert gate.controller is limit
        assert before is None
        assert limit.limit == 20  # it starts from the cluster's C
        await gate.signal("overloaded")
        view = await cluster(clients[0], name)
        assert view.max_running == 18  # 20 x 0.9, in Redis: every process's C
        assert view.counters["cuts"] == 1
        assert (limit.limit, limit.cuts) == (18, 1)


async def test_adapt_replaces_the_controller_given_at_construction(
    clients: list[redis.asyncio.Redis], name: str
) -> None:
    async with make_gate(clients[0], name, 20, 50, adaptive=Adaptive(floor=2, window=30.0)) as gate:
        first = gate.controller
        assert first is not None
        second = gate.adapt(Adaptive(floor=15, decrease=0.5, window=30.0))
        assert gate.controller is second
        assert second is not first
        await gate.signal("overloaded")
        assert (await cluster(clients[0], name)).max_running == 15  # the new settings: max(15, 20 x 0.5)
        assert (first.cuts, second.cuts) == (0, 1)  # the old one hears nothing more
        assert second.limit == 15


async def test_adapt_without_settings_gives_the_defaults(
    clients: list[redis.asyncio.Redis], name: str
) -> None:
    async with make_gate(clients[0], name, 20, 50) as gate:
        assert gate.adapt().settings == Adaptive()


def test_adapt_refuses_what_in_process_adapt_refuses(clients: list[redis.asyncio.Redis], name: str) -> None:
    gate = RedisGate(
        clients[0], max_running=None, max_waiting=1, name=name, rate_limits=[RateLimit.per_second(1)]
    )
    with pytest.raises(ValueError, match="needs a gate with max_running set"):
        gate.adapt()
    gate = make_gate(clients[0], name, 2, 1)
    with pytest.raises(TypeError, match="Adaptive settings"):
        gate.adapt(3)  # type: ignore[arg-type]
    assert gate.controller is None
