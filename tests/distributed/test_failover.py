"""A failover to a replica that lacks the latest writes: a new epoch, and no fencing token twice.

Replication is asynchronous: a primary's latest grants may never reach its replica. The writes are
lost deterministically here: the replica is paused and its link cut on the primary (``CLIENT KILL
TYPE replica``: a paused replica still reads what its kernel already had), the primary grants
more, then it is killed and the replica resumed and promoted (``REPLICAOF NO ONE``), as Sentinel
would. The process's client is then pointed at the new primary, as Sentinel's pool would be.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import redis.asyncio

from boundedgate import GateUnavailable
from boundedgate.redis import RedisGate, RedisPermit, read_cluster

from .helpers import make_gate, settles_empty
from .servers import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False), pytest.mark.engines]


@dataclass
class Pair:
    """A primary and its replica, and an admin client of each."""

    primary: RedisServer
    replica: RedisServer
    to_primary: redis.asyncio.Redis
    to_replica: redis.asyncio.Redis

    async def in_sync(self, within: float = 30.0) -> None:
        """Wait until the replica has every write the primary made."""
        give_up = time.monotonic() + within
        while time.monotonic() < give_up:
            mine = await self.to_primary.info("replication")
            theirs = await self.to_replica.info("replication")
            # The primary's own view too: it counts a replica for WAIT once that replica is online
            # and has acknowledged (once a second), which follows a full sync by up to a second.
            seen = mine.get("slave0")
            if (
                theirs.get("master_link_status") == "up"
                and theirs["slave_repl_offset"] == mine["master_repl_offset"]
                and isinstance(seen, dict)
                and seen.get("state") == "online"
                and int(seen.get("offset", -1)) == mine["master_repl_offset"]
            ):
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"the replica did not catch up within {within}s")

    async def lose_the_next_writes(self) -> None:
        """Pause the replica and cut its link: nothing the primary writes from now on reaches it."""
        assert self.replica.process is not None
        os.kill(self.replica.process.pid, signal.SIGSTOP)
        await self.to_primary.execute_command("CLIENT", "KILL", "TYPE", "replica")  # type: ignore[no-untyped-call]

    async def fail_over(self) -> None:
        """Kill the primary; resume the replica and promote it."""
        assert self.replica.process is not None
        self.primary.kill()
        os.kill(self.replica.process.pid, signal.SIGCONT)
        await self.to_replica.replicaof("NO", "ONE")


@pytest.fixture
async def pair(server_binary: str, own_server: RedisServer) -> AsyncIterator[Pair]:
    replica = RedisServer(server_binary)
    replica.start()
    to_primary = redis.asyncio.Redis.from_url(own_server.url)
    to_replica = redis.asyncio.Redis.from_url(replica.url)
    try:
        await to_primary.config_set("repl-diskless-sync-delay", 0)  # sync at once, not in 5 s
        await to_replica.replicaof("127.0.0.1", own_server.port)
        pair = Pair(own_server, replica, to_primary, to_replica)
        await pair.in_sync()
        yield pair
    finally:
        if replica.process is not None:
            os.kill(replica.process.pid, signal.SIGCONT)
        await to_primary.aclose()
        await to_replica.aclose()
        replica.close()


async def _point_at(client: redis.asyncio.Redis, server: RedisServer) -> None:
    """Send the client's next commands to ``server`` (what Sentinel's pool does after a failover)."""
    pool = client.connection_pool
    pool.connection_kwargs["port"] = server.port
    for connection in (*pool._available_connections, *pool._in_use_connections):
        connection.port = server.port  # type: ignore[attr-defined]
    await pool.disconnect()


async def test_a_failover_that_lost_grants_starts_a_new_epoch_and_repeats_no_token(
    pair: Pair, name: str
) -> None:
    client = redis.asyncio.Redis.from_url(pair.primary.url)
    permits: list[RedisPermit] = []
    try:
        async with make_gate(client, name, 4, 4) as gate:
            permits.append(await gate.try_admit())  # replicated
            await pair.in_sync()
            await pair.lose_the_next_writes()
            permits += [await gate.try_admit(), await gate.try_admit()]  # lost with the primary
            before = {permit.token for permit in permits}
            assert len(before) == 3
            (old_epoch,) = {token[0] for token in before if token}
            await pair.fail_over()
            await _point_at(client, pair.replica)

            after = [await gate.try_admit(), await gate.try_admit()]
            tokens = [permit.token for permit in after]
            assert None not in tokens
            assert not before & set(tokens), f"tokens issued twice: {before & set(tokens)}"
            assert {token[0] for token in tokens if token} != {old_epoch}
            assert gate.stats().epoch_changes == 1
            view = await read_cluster(client, name)
            assert view.epoch is not None
            assert view.epoch > old_epoch
            assert view.counters.get("failovers") == 1
            # Within the new epoch, n still grows with every grant.
            assert tokens[0] is not None
            assert tokens[1] is not None
            assert tokens[1][1] > tokens[0][1]
            for permit in permits + after:
                permit.release()
    finally:
        await client.aclose()


async def test_a_failover_that_lost_nothing_only_starts_a_new_epoch(pair: Pair, name: str) -> None:
    # The replica has every write: holders keep their tokens; new grants go on above them.
    client = redis.asyncio.Redis.from_url(pair.primary.url)
    try:
        async with make_gate(client, name, 4, 4) as gate:
            first = await gate.try_admit()
            await pair.in_sync()
            await pair.lose_the_next_writes()
            await pair.fail_over()
            await _point_at(client, pair.replica)
            second = await gate.try_admit()
            assert first.token is not None
            assert second.token is not None
            assert second.token[0] > first.token[0]
            assert second.token[1] > first.token[1]
            view = await read_cluster(client, name)
            assert [holder.id for holder in view.holders] == [first.id, second.id]
            first.release()
            second.release()
    finally:
        await client.aclose()


async def test_a_restarted_primary_keeps_its_epoch_when_nothing_failed_over(
    client: redis.asyncio.Redis, name: str
) -> None:
    # Without a failover the replication id stays: one epoch, n growing, no failover counted.
    async with make_gate(client, name, 1, 1) as gate:
        tokens = []
        for _ in range(3):
            async with gate.admit(timeout=5) as permit:
                tokens.append(permit.token)
        assert len({token[0] for token in tokens if token}) == 1
        assert [token[1] for token in tokens if token] == [1, 2, 3]
        assert gate.stats().epoch_changes == 0
        assert "failovers" not in (await read_cluster(client, name)).counters


async def test_with_wait_replicas_a_grant_returns_once_the_replica_has_it(pair: Pair, name: str) -> None:
    # WAIT in the admission's round trip: the grant is on the replica before the caller starts,
    # so a failover right after it (no time to catch up) keeps it.
    client = redis.asyncio.Redis.from_url(pair.primary.url)
    try:
        async with make_gate(client, name, 2, 2, wait_replicas=1, wait_timeout=1.0) as gate:
            permit = await gate.try_admit()
            await pair.lose_the_next_writes()
            await pair.fail_over()
            await _point_at(client, pair.replica)
            view = await read_cluster(client, name)
            assert [holder.id for holder in view.holders] == [permit.id]
            assert gate.stats().unreplicated == 0
            permit.release()
    finally:
        await client.aclose()


async def test_with_wait_replicas_a_grant_no_replica_acknowledged_is_given_back_and_refused(
    pair: Pair, name: str
) -> None:
    client = redis.asyncio.Redis.from_url(pair.primary.url)
    try:
        async with make_gate(client, name, 2, 2, wait_replicas=1, wait_timeout=0.2) as gate:
            await pair.lose_the_next_writes()  # the replica hears nothing more, so it acknowledges nothing
            with pytest.raises(GateUnavailable) as caught:
                await gate.try_admit()
            assert caught.value.reason == "unreplicated"
            assert "acknowledged" in str(caught.value.__cause__)
            with pytest.raises(GateUnavailable, match="unreplicated"):
                async with gate.admit(timeout=5):
                    pass
            stats = gate.stats()
            assert (stats.admitted, stats.unavailable, stats.running) == (0, 2, 0)
            assert stats.unreplicated >= 2  # the refused grants (their give-backs may add more)
            await settles_empty(client, name)  # the slots were given back on the primary
    finally:
        await client.aclose()


def test_wait_replicas_is_checked() -> None:
    client = redis.asyncio.Redis()
    with pytest.raises(ValueError, match="below op_timeout"):
        RedisGate(client, max_running=1, max_waiting=1, wait_replicas=1, wait_timeout=2.0, op_timeout=2.0)
    with pytest.raises(ValueError, match="wait_replicas"):
        RedisGate(client, max_running=1, max_waiting=1, wait_replicas=-1)
    with pytest.raises(TypeError, match="wait_replicas"):
        RedisGate(client, max_running=1, max_waiting=1, wait_replicas=1.5)  # type: ignore[arg-type]
    cluster = redis.asyncio.RedisCluster(host="127.0.0.1", port=7000)  # never connected
    with pytest.raises(ValueError, match="needs a redis"):
        RedisGate(cluster, max_running=1, max_waiting=1, wait_replicas=1)
    RedisGate(cluster, max_running=1, max_waiting=1)  # no WAIT: any client


async def test_a_client_refused_info_still_admits_unchecked(own_server: RedisServer, name: str) -> None:
    # The replication id is read with INFO; an ACL that refuses it (as -@dangerous does) leaves
    # the failover check out, and the gate works as before it.
    admin = redis.asyncio.Redis.from_url(own_server.url)
    await admin.acl_setuser(
        "no-info", enabled=True, passwords=["+secret"], keys=["*"], channels=["*"],
        commands=["+@all", "-info"],
    )  # fmt: skip
    client = redis.asyncio.Redis.from_url(own_server.url, username="no-info", password="secret")
    try:
        async with make_gate(client, name, 1, 1) as gate:
            tokens = []
            for _ in range(2):
                async with gate.admit(timeout=5) as permit:
                    tokens.append(permit.token)
            assert [token[1] for token in tokens if token] == [1, 2]
        assert b"replid" not in await admin.hkeys(f"boundedgate:{{{name}}}:meta")
    finally:
        await client.aclose()
        await admin.aclose()
