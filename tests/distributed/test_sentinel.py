"""A gate behind Sentinel: the primary killed under traffic, the replica promoted by Sentinel.

A primary, one replica and one Sentinel (quorum 1); the gate's client is
``Sentinel(...).master_for(...)``, whose pool asks Sentinel where the primary is whenever it
connects. The primary is SIGKILLed while tasks admit and release through the gate: callers get
``GateUnavailable`` until Sentinel has promoted the replica and the pool has found it, then the gate
admits there again, under a new epoch (``stats().epoch_changes``, the ``failovers`` counter), and
no fencing token ``(epoch, n)`` is handed out twice over the whole run. On Redis 7 and on Valkey
(whose server is its own Sentinel too, ``--sentinel``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio
from redis.asyncio.sentinel import Sentinel

from boundedgate.redis import read_cluster

from .helpers import make_gate, wait_until
from .servers import SentinelServers
from .traffic import Traffic

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False), pytest.mark.engines("redis", "valkey")]

#: Sentinel's ``down-after-milliseconds``: how long a silent primary has before the failover starts.
DOWN_AFTER = 1000
#: The gate's settings: short enough that callers see the outage as it happens.
SETTINGS = {"lease_ttl": 3.0, "poll_interval": 0.2, "op_timeout": 1.0, "waiter_ttl": 3.0}


@pytest.fixture
def sentinel_servers(server_binary: str) -> Iterator[SentinelServers]:
    """A primary, its replica and a Sentinel watching them, of the test's own (it kills the primary)."""
    servers = SentinelServers(server_binary, down_after=DOWN_AFTER)
    try:
        servers.start()
        yield servers
    finally:
        servers.close()


@pytest.fixture
async def sentinel_client(sentinel_servers: SentinelServers) -> AsyncIterator[redis.asyncio.Redis]:
    """A client of whichever server Sentinel names the primary (``master_for``)."""
    sentinel = Sentinel([("127.0.0.1", sentinel_servers.sentinel_port)], socket_timeout=0.5)
    client = sentinel.master_for(sentinel_servers.service, socket_timeout=0.5)
    try:
        yield client
    finally:
        await client.aclose()
        for each in sentinel.sentinels:
            await each.aclose()


async def test_a_gate_on_a_sentinel_client_serves(
    sentinel_servers: SentinelServers, sentinel_client: redis.asyncio.Redis, name: str
) -> None:
    async with make_gate(sentinel_client, name, 1, 1) as gate, gate.admit(timeout=5) as permit:
        view = await read_cluster(sentinel_client, name)
        assert [holder.id for holder in view.holders] == [permit.id]


async def test_the_primary_killed_under_traffic_fails_closed_then_the_promoted_replica_serves_a_new_epoch(
    sentinel_servers: SentinelServers, sentinel_client: redis.asyncio.Redis, name: str
) -> None:
    # Sentinel notices after DOWN_AFTER, elects itself (up to a second of random delay), promotes;
    # the bound leaves plenty of room on a loaded machine.
    within = (DOWN_AFTER + sentinel_servers.failover_timeout) / 1000 * 3 + 10
    async with make_gate(sentinel_client, name, 4, 40, **SETTINGS) as gate:
        traffic = Traffic(gate)
        async with traffic.running(tasks=32):
            await traffic.admits(20, within, "admissions before the kill")
            (old_epoch,) = {epoch for epoch, _ in traffic.tokens}
            # The gate's state on the replica before the kill: a busy machine may otherwise kill
            # the primary before it replicated, and the promoted replica starts the gate afresh (a
            # new epoch too, but not a failover: no other replication history to find). Read from
            # the replica's acknowledged offset, not with WAIT, whose wait outlasts the client's
            # 0.5 s socket timeout when the replica acknowledges late.
            written = (await sentinel_client.info("replication"))["master_repl_offset"]

            async def replicated() -> bool:
                replica = (await sentinel_client.info("replication")).get("slave0")
                return replica is not None and replica["offset"] >= written

            await wait_until(replicated, within, "the replica's copy of the gate's state")
            sentinel_servers.primary.kill()
            await traffic.unavailable_seen(within)

            async def promoted() -> bool:
                return sentinel_servers.serving() is sentinel_servers.replica

            await wait_until(promoted, within, "Sentinel's promotion of the replica")
            await traffic.admits(20, within, "admissions on the promoted replica")

        assert traffic.raw == [], f"callers got errors not the gate's: {traffic.raw!r}"
        assert set(traffic.typed) <= {"QueueExpired"}, traffic.typed  # a waiter the outage outlasted
        assert traffic.repeated_tokens() == []
        assert {epoch for epoch, _ in traffic.tokens} - {old_epoch}, "no token under a new epoch"
        assert gate.stats().epoch_changes >= 1
        view = await read_cluster(sentinel_client, name)
        assert view.counters.get("failovers", 0) >= 1
