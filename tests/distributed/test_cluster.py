"""A gate on a real Redis Cluster (3 primaries on loopback), through redis-py's ``RedisCluster``.

All of a gate's keys share one hash tag, so one slot and one primary; the scripts run there by
EVALSHA. What reads a gate (``cluster_stats()``, ``read_cluster()``, ``python -m boundedgate.redis
inspect``) must reach that primary too, from any node.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys

import pytest
import redis.asyncio

from boundedgate import QueueFull
from boundedgate.redis import read_cluster
from boundedgate.redis._layout import gate_keys

from .helpers import make_gate, settles_empty, until_queued
from .servers import RedisClusterServers

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False), pytest.mark.engines]


async def test_a_gate_admits_queues_in_order_and_refuses_on_a_cluster(
    cluster_client: redis.asyncio.RedisCluster, name: str
) -> None:
    async with make_gate(cluster_client, name, 1, 2) as gate:  # type: ignore[arg-type]
        holder = await gate.try_admit()
        first = asyncio.create_task(gate.admit(timeout=10).__aenter__())
        await until_queued(first, lambda: gate.waiting >= 1)
        second = asyncio.create_task(gate.admit(timeout=10).__aenter__())
        await until_queued(second, lambda: gate.waiting >= 2)
        with pytest.raises(QueueFull):
            await gate.try_admit()
        holder.release()
        permit = await asyncio.wait_for(first, 10)
        assert not second.done()
        permit.release()
        (await asyncio.wait_for(second, 10)).release()
        await settles_empty(cluster_client, name)  # type: ignore[arg-type]


@pytest.mark.skipif(
    hasattr(redis.asyncio.RedisCluster, "pubsub"),
    reason="this redis-py's RedisCluster subscribes: `make compat-redis` runs this on redis-py 5.0.1",
)
async def test_a_cluster_client_that_cannot_subscribe_is_served_by_polls_and_says_so_once(
    cluster_client: redis.asyncio.RedisCluster, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    # redis-py 5.0's RedisCluster has no pubsub(): the grants another process's releases make reach
    # this process's waiters by its polls, and the gate says once that no message will come.
    caplog.set_level(logging.INFO, logger="boundedgate")
    async with (
        make_gate(cluster_client, name, 1, 2) as gate,  # type: ignore[arg-type]
        make_gate(cluster_client, name, 1, 2) as other,  # type: ignore[arg-type]
    ):
        for _ in range(2):
            holder = await other.try_admit()
            waiter = asyncio.create_task(gate.admit(timeout=10).__aenter__())
            await until_queued(waiter, lambda: gate.waiting >= 1)
            holder.release()
            (await asyncio.wait_for(waiter, 10)).release()
            await settles_empty(cluster_client, name)  # type: ignore[arg-type]
        said = [r for r in caplog.records if r.name == "boundedgate"]
        assert [(getattr(r, "event", None), r.levelno) for r in said] == [("no_subscription", logging.INFO)]


async def test_cluster_stats_and_read_cluster_read_a_gate_on_a_cluster(
    cluster_client: redis.asyncio.RedisCluster, name: str
) -> None:
    async with make_gate(cluster_client, name, 2, 2) as gate:  # type: ignore[arg-type]
        permit = await gate.try_admit()
        view = await gate.cluster_stats()
        assert [holder.id for holder in view.holders] == [permit.id]
        assert view.max_running == 2
        assert view.counters["admitted"] == 1
        assert 0 < view.holders[0].lease_left <= 10.0
        assert set(view.key_ttls) <= set(gate_keys(name))
        again = await read_cluster(cluster_client, name)
        assert again.epoch == view.epoch
        assert again.server_time >= view.server_time
        permit.release()
        await settles_empty(cluster_client, name)  # type: ignore[arg-type]


def _inspect(url: str, name: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "boundedgate.redis", "inspect", name, "--json", "--url", url]
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)


async def test_inspect_reads_a_gate_from_any_node_of_a_cluster(
    redis_cluster: RedisClusterServers, cluster_client: redis.asyncio.RedisCluster, name: str
) -> None:
    owner = redis_cluster.owner_of(gate_keys(name)[0])
    async with make_gate(cluster_client, name, 1, 1) as gate:  # type: ignore[arg-type]
        permit = await gate.try_admit()
        for node in redis_cluster.nodes:  # the owner of the gate's slot, and two that are not
            done = await asyncio.to_thread(_inspect, node.url, name)
            assert done.returncode == 0, (node is owner, done.stderr)
            assert [h["id"] for h in json.loads(done.stdout)["holders"]] == [permit.id]
        permit.release()
