"""Three OS processes share the cluster's tenants (a RedisKeyedGate) and one RedisGate through admit_all().

"The tenant, then the cluster" never goes over either limit, counted over every process: at most C
bodies run (the witness in Redis, the cluster's own peak), at most the tenant's limit per tenant
(a witness per tenant in Redis, each tenant gate's peak), and the queue never holds more than Q.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio

from .helpers import cluster, settles_empty
from .servers import RedisClusterServers, RedisServer
from .test_processes import workers
from .worker import witness_keys

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]


def chain_worker(server: list[str], name: str, c: int, q: int, tenant_c: int, index: int) -> list[str]:
    script = Path(__file__).with_name("chain_worker.py")
    return [
        sys.executable, str(script), "--url", *server, "--name", name, "--c", str(c), "--q", str(q),
        "--tenant-c", str(tenant_c), "--tasks", "12", "--index", str(index),
    ]  # fmt: skip


@pytest.mark.engines("redis", "valkey")
async def test_a_tenant_and_cluster_chain_in_three_processes_never_goes_over_either_limit(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> None:
    await _a_chain_in_three_processes(client, [redis_server.url], name)


@pytest.mark.engines
async def test_the_chain_in_three_processes_on_a_cluster(
    cluster_client: redis.asyncio.RedisCluster, redis_cluster: RedisClusterServers, name: str
) -> None:
    # Each tenant's gate and the shared one have a hash tag of their own: spread over the primaries.
    await _a_chain_in_three_processes(cluster_client, [redis_cluster.url, "--cluster"], name)


async def _a_chain_in_three_processes(client: Any, server: list[str], name: str) -> None:
    c, q, tenant_c = 2, 0, 1  # three tenants of one slot each want more than C: some are refused
    seen_running = seen_waiting = 0
    with workers(*(chain_worker(server, name, c, q, tenant_c, i) for i in range(3))) as processes:
        while any(p.poll() is None for p in processes):  # sample the cluster independently meanwhile
            view = await cluster(client, name)
            seen_running = max(seen_running, view.running)
            seen_waiting = max(seen_waiting, view.waiting)
            await asyncio.sleep(0.005)
        reports = [json.loads(p.stdout.read()) for p in processes]  # type: ignore[union-attr]
        assert [p.returncode for p in processes] == [0, 0, 0]
    now_key, max_key, bodies_key, _ = witness_keys(name)
    witness_max = int(await client.get(max_key))  # a counter, set
    bodies = int(await client.get(bodies_key))
    completed = sum(r["outcomes"].get("completed", 0) for r in reports)
    assert sum(sum(r["outcomes"].values()) for r in reports) == 36
    assert sum(r["outcomes"].get("queue_full", 0) for r in reports) >= 1  # the cluster refused some
    assert 1 <= witness_max <= c
    assert seen_running <= c
    assert seen_waiting <= q
    tenant_most = [int(await client.get(witness_keys(f"{name}/t{i}")[1]) or 0) for i in range(3)]
    assert max(tenant_most) >= 1, tenant_most
    assert all(most <= tenant_c for most in tenant_most), tenant_most
    assert bodies == completed >= 1
    assert int(await client.get(now_key)) == 0
    view = await settles_empty(client, name)
    assert view.counters["admitted"] == view.counters["completed"] == completed
    assert view.counters["peak_running"] <= c
    assert view.counters.get("peak_waiting", 0) <= q
    for i in range(3):
        tenant = await settles_empty(client, f"{name}-tenant/t{i}")
        assert tenant.counters["peak_running"] <= tenant_c
    # A request refused at the cluster gave its tenant slot back: each process's tenant admissions
    # are its completed requests, never more.
    assert [r["tenant"] for r in reports] == [r["outcomes"].get("completed", 0) for r in reports]
