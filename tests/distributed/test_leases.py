"""Leases: renewed off the event loop, bounded for a stuck loop, and a lost one always reported.

Issue 28, items 1 and 2. The renewals run on a thread of the gate's own, over a connection of their
own, so a saturated event loop cannot make a healthy process's leases lapse; a loop that shows no
progress for ``max_stall`` is taken for stuck, and its leases are let go. A renewal that finds its
holder counted again in Redis under another token (a renewal whose reply was lost did it) reports
the loss: ``permit.lease_lost``, ``stats().lease_lost``, the new token.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import cast

import pytest
import redis.asyncio

from boundedgate.redis import RedisPermit
from boundedgate.redis._io import text
from boundedgate.redis._layout import gate_keys

from .helpers import cluster, make_gate, settles_empty, wait_until
from .servers import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]


@contextmanager
def _stopped(server: RedisServer) -> Iterator[None]:
    """SIGSTOP ``server`` for the block (the kernel keeps what clients send meanwhile), then SIGCONT."""
    assert server.process is not None
    pid = server.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


async def _expiry(client: redis.asyncio.Redis, name: str, permit_id: str) -> float | None:
    """The holder's lease expiry in Redis (ms, the server's clock), None if it holds no slot."""
    return cast("float | None", await client.zscore(gate_keys(name)[1], permit_id))


async def _renewed(client: redis.asyncio.Redis, name: str, permit_id: str, within: float) -> None:
    """Return once the lease of ``permit_id`` has been renewed (its expiry moved on)."""
    first = await _expiry(client, name, permit_id)

    async def moved() -> bool:
        return await _expiry(client, name, permit_id) != first

    await wait_until(moved, within, "a renewal of the lease")


async def _token_in_redis(client: redis.asyncio.Redis, name: str, permit_id: str) -> int:
    info = await client.hget(gate_keys(name)[4], permit_id)
    assert info is not None
    return int(text(info).rsplit("|", 1)[1])


async def _counted_again(client: redis.asyncio.Redis, name: str) -> bool:
    return (await cluster(client, name)).counters.get("reattached", 0) >= 1


async def _lost(permit: RedisPermit) -> bool:
    return bool(permit.lease_lost)


async def test_a_lease_counted_again_by_a_renewal_whose_reply_was_lost_is_reported(
    own_server: RedisServer, name: str
) -> None:
    # D4 of the distributed-engines research: Redis is stopped for twice the lease, so the lease
    # lapses there while the renewals sent meanwhile wait in the kernel and time out here. When it
    # resumes, the first of them reclaims the lapsed lease and counts the holder again under a new
    # token, and its reply is lost; the next renewal finds the holder present. It must still say so.
    lease, op_timeout = 2.0, 1.0
    client = redis.asyncio.Redis.from_url(own_server.url)
    reader = redis.asyncio.Redis.from_url(own_server.url)
    try:
        async with make_gate(client, name, 1, 0, lease_ttl=lease, op_timeout=op_timeout) as gate:
            permit = await gate.try_admit()
            assert permit.id is not None and permit.token is not None
            epoch, first = permit.token
            await _renewed(reader, name, permit.id, 5 * lease)  # the renewals have their connection
            with _stopped(own_server):
                await asyncio.sleep(2 * lease)
            await wait_until(lambda: _counted_again(reader, name), 5 * lease, "the holder counted again")
            await wait_until(lambda: _lost(permit), 5 * lease, "the lost lease reported")
            view = await cluster(reader, name)
            assert (view.counters.get("reclaimed"), view.counters.get("reattached")) == (1, 1)
            now_in_redis = await _token_in_redis(reader, name, permit.id)
            assert now_in_redis != first
            assert permit.token == (epoch, now_in_redis)
            assert gate.stats().lease_lost == 1
            permit.release()
            await settles_empty(reader, name)
    finally:
        await client.aclose()
        await reader.aclose()
