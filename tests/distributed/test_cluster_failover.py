"""A Redis Cluster primary killed under traffic: its replica takes over the gate's slot.

3 primaries, each with a replica, through redis-py's ``RedisCluster``. The primary that owns the
gate's slot is SIGKILLed while tasks admit and release through the gate; the cluster holds it failed
after ``cluster-node-timeout`` and promotes its replica. Meanwhile callers get ``GateUnavailable``
and nothing else (redis-py's own errors on a torn-down connection, redis/redis-py#4287, included);
then the gate admits again on the promoted replica, under a new epoch, and no fencing token is ever
handed out twice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio

from boundedgate.redis import read_cluster
from boundedgate.redis._layout import gate_keys

from .helpers import make_gate, wait_until
from .servers import RedisClusterServers
from .traffic import Traffic

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False), pytest.mark.engines("redis", "valkey")]

#: The nodes' ``cluster-node-timeout`` (ms): how long a silent primary has before its replica takes over.
NODE_TIMEOUT = 1000
#: The gate's settings: short enough that callers see the outage as it happens.
SETTINGS = {"lease_ttl": 3.0, "poll_interval": 0.2, "op_timeout": 1.0, "waiter_ttl": 3.0}
#: The bound on every wait for something the cluster does (a promotion is a few node timeouts;
#: plenty of room on a loaded machine).
WITHIN = 20 * NODE_TIMEOUT / 1000 + 10


@pytest.fixture
def replicated_cluster(server_binary: str) -> Iterator[RedisClusterServers]:
    """A cluster of the test's own (it kills a node): 3 primaries, a replica each."""
    servers = RedisClusterServers(server_binary, replicas=True, node_timeout=NODE_TIMEOUT)
    try:
        servers.start()
        yield servers
    finally:
        servers.close()


@pytest.fixture
async def replicated_client(
    replicated_cluster: RedisClusterServers,
) -> AsyncIterator[redis.asyncio.RedisCluster]:
    connection = redis.asyncio.RedisCluster.from_url(replicated_cluster.url)
    try:
        yield connection
    finally:
        await connection.aclose()


async def test_a_primary_killed_under_traffic_fails_closed_then_its_replica_serves_a_new_epoch(
    replicated_cluster: RedisClusterServers, replicated_client: redis.asyncio.RedisCluster, name: str
) -> None:
    owner = replicated_cluster.owner_of(gate_keys(name)[0])
    replica = replicated_cluster.replica_of(owner)
    async with make_gate(replicated_client, name, 4, 40, **SETTINGS) as gate:  # type: ignore[arg-type]
        traffic = Traffic(gate)
        async with traffic.running(tasks=32):
            await traffic.admits(20, WITHIN, "admissions before the kill")
            (old_epoch,) = {epoch for epoch, _ in traffic.tokens}
            owner.kill()
            await traffic.unavailable_seen(WITHIN)

            async def promoted() -> bool:
                return replicated_cluster.owner_of(gate_keys(name)[0]) is replica

            await wait_until(promoted, WITHIN, "the replica's promotion")
            await traffic.admits(20, WITHIN, "admissions on the promoted replica")

        assert traffic.raw == [], f"callers got errors not the gate's: {traffic.raw!r}"
        assert set(traffic.typed) <= {"QueueExpired"}, traffic.typed  # a waiter the outage outlasted
        assert traffic.repeated_tokens() == []
        assert {epoch for epoch, _ in traffic.tokens} - {old_epoch}, "no token under a new epoch"
        assert gate.stats().epoch_changes >= 1
        view = await read_cluster(replicated_client, name)
        assert view.counters.get("failovers", 0) >= 1
