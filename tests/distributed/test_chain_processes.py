"""Three OS processes, each with a tenant's KeyedGate, share one RedisGate through admit_all().

"The tenant, then the cluster" never goes over either limit: at most C bodies run across the
processes (the witness in Redis, the cluster's own peak), at most the tenant's limit per tenant in
each process (each process's witness), and the queue never holds more than Q.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
import redis.asyncio

from .helpers import cluster, settles_empty
from .servers import RedisServer
from .test_processes import workers
from .worker import witness_keys

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]


def chain_worker(server: RedisServer, name: str, c: int, q: int, tenant_c: int, index: int) -> list[str]:
    script = Path(__file__).with_name("chain_worker.py")
    return [
        sys.executable, str(script), "--url", server.url, "--name", name, "--c", str(c), "--q", str(q),
        "--tenant-c", str(tenant_c), "--tasks", "12", "--index", str(index),
    ]  # fmt: skip


async def test_a_tenant_and_cluster_chain_in_three_processes_never_goes_over_either_limit(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> None:
    c, q, tenant_c = 2, 1, 2
    seen_running = seen_waiting = 0
    with workers(*(chain_worker(redis_server, name, c, q, tenant_c, i) for i in range(3))) as processes:
        while any(p.poll() is None for p in processes):  # sample the cluster independently meanwhile
            view = await cluster(client, name)
            seen_running = max(seen_running, view.running)
            seen_waiting = max(seen_waiting, view.waiting)
            await asyncio.sleep(0.005)
        reports = [json.loads(p.stdout.read()) for p in processes]  # type: ignore[union-attr]
        assert [p.returncode for p in processes] == [0, 0, 0]
    now_key, max_key, bodies_key, _ = witness_keys(name)
    witness_max = int(await client.get(max_key))  # type: ignore[arg-type]  # a counter, set
    bodies = int(await client.get(bodies_key))  # type: ignore[arg-type]
    completed = sum(r["outcomes"].get("completed", 0) for r in reports)
    assert sum(sum(r["outcomes"].values()) for r in reports) == 36
    assert sum(r["outcomes"].get("queue_full", 0) for r in reports) >= 1  # the cluster refused some
    assert 1 <= witness_max <= c
    assert seen_running <= c
    assert seen_waiting <= q
    # (A process whose every request the cluster refused ran no body: its most is 0.)
    assert all(r["tenant_most"] <= tenant_c for r in reports), reports
    assert max(r["tenant_most"] for r in reports) >= 1, reports
    assert bodies == completed >= 1
    assert int(await client.get(now_key)) == 0  # type: ignore[arg-type]
    view = await settles_empty(client, name)
    assert view.counters["admitted"] == view.counters["completed"] == completed
    assert view.counters["peak_running"] <= c
    assert view.counters["peak_waiting"] <= q
    # A request refused at the cluster gave its tenant slot back: each process's tenant admissions
    # are its completed requests, never more.
    assert [r["tenant"] for r in reports] == [r["outcomes"].get("completed", 0) for r in reports]
