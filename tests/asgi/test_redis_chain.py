"""GateMiddleware(gate=[tenants, cluster_gate]): one middleware for "the tenant, then the cluster".

Real time (looptime off) and a real Redis: a client that hangs up while its request waits in the
cluster's queue is *disconnected* at both gates (under uvicorn: test_redis.py, stacked and chained);
a cluster keyed gate given alone takes its key from ``key=``.
"""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio

from boundedgate import KeyedGate
from boundedgate.asgi import GateMiddleware
from boundedgate.redis import RedisKeyedGate
from tests.asgi.harness import Client, Scope, StreamingApp, http_scope, serve
from tests.asgi.test_redis import until
from tests.distributed.conftest import client, name, redis_server, server_binary
from tests.distributed.helpers import make_gate, settles_empty

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]

__all__ = ("client", "name", "redis_server", "server_binary")  # the fixtures, shared with tests/distributed


def _tenant(scope: Scope) -> str:
    return str(dict(scope["headers"]).get(b"x-tenant", b"-").decode())


async def test_a_hang_up_in_the_cluster_queue_is_disconnected_at_the_tenant_and_the_cluster(
    client: redis.asyncio.Redis, name: str
) -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=0, name="tenant", keep_idle=4)
    async with make_gate(client, name, 1, 1) as shared:
        app = StreamingApp(chunks=1, pause=0)
        app.hold = True
        middleware = GateMiddleware(app, gate=[(tenants, _tenant), shared], timeout=30)
        scope = http_scope(headers=[("x-tenant", "a")])
        first = serve(middleware, Client(), scope)
        await until(lambda: app.entered == 1, "the first request in the app")
        leaving = Client()
        task = serve(middleware, leaving, http_scope(headers=[("x-tenant", "a")]))
        await until(lambda: shared.waiting == 1, "the second request queued in Redis")
        assert tenants.running == 2  # its tenant slot held while it waits for the cluster
        leaving.leave()
        await task
        assert leaving.sent == []
        assert (tenants.running, shared.waiting) == (1, 0)
        app.release.set()
        await first
        await settles_empty(client, name)
    tenant = tenants.stats().total
    assert (tenant.disconnected, tenant.cancelled, tenant.admitted, tenant.completed) == (1, 0, 1, 1)
    stats = shared.stats()
    assert (stats.disconnected, stats.cancelled, stats.completed) == (1, 0, 1)
    assert app.entered == 1


async def test_a_cluster_keyed_gate_alone_takes_its_key_from_key(
    client: redis.asyncio.Redis, name: str
) -> None:
    # A RedisKeyedGate is a keyed gate like a KeyedGate: given alone, with key=, each tenant
    # queues in its own cluster gate; and without key= it is refused, naming the way.
    async with RedisKeyedGate(client, max_running=1, max_waiting=0, name=name) as tenants:
        with pytest.raises(TypeError, match="needs key="):
            GateMiddleware(StreamingApp(), gate=tenants)
        app = StreamingApp(chunks=1, pause=0)
        app.hold = True
        middleware = GateMiddleware(app, gate=tenants, key=_tenant, timeout=30)
        first = serve(middleware, Client(), http_scope(headers=[("x-tenant", "a")]))
        await until(lambda: app.entered == 1, "tenant a's request in the app")
        other = serve(middleware, Client(), http_scope(headers=[("x-tenant", "b")]))
        await until(lambda: app.entered == 2, "tenant b's request in the app: a's gate is not b's")
        refused = Client()
        await serve(middleware, refused, http_scope(headers=[("x-tenant", "a")]))
        assert refused.sent[0]["status"] == 503  # a's one slot is taken, and a has no queue
        app.release.set()
        await asyncio.gather(first, other)
        for tenant in ("a", "b"):
            await settles_empty(client, f"{name}/{tenant}")
        assert tenants.stats().total.completed == 2
