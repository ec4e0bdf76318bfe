"""A RedisKeyedGate's metrics served for real: uvicorn --workers 2, a real Redis, many scrapes.

The service admits each call through its tenant's key of a ``RedisKeyedGate`` (C=2, Q=1 per
tenant, two tenants) and serves ``GateCollector(tenants)`` from an ``async`` route that awaits
``refresh()`` first. Each request and each scrape is a connection of its own, so it lands on either
worker. The keyed gate's series are one set under its name; once every worker has pushed its
counts (within the background interval), every scrape, whichever worker answers, must give what
the clients saw summed over both workers, and no counter may go down from one scrape to the next.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from tests.asgi.servers import require
from tests.asgi.test_cluster_metrics import Clients, Scrape, value, workers
from tests.distributed.conftest import redis_server, server_binary
from tests.distributed.servers import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.http_server, pytest.mark.looptime(False)]

__all__ = ("redis_server", "server_binary")  # the fixtures, shared with tests/distributed

#: The background push and read of each worker (seconds), and how long a scrape may wait for the
#: other worker's counts to reach Redis: many intervals, with room for a loaded machine.
INTERVAL = 0.2
SETTLE = 30.0

APP = """
import asyncio
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis.asyncio
from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from boundedgate import QueueFull
from boundedgate.prometheus import GateCollector
from boundedgate.redis import RedisKeyedGate

client = redis.asyncio.Redis.from_url(os.environ["REDIS_URL"])
tenants = RedisKeyedGate(client, max_running=2, max_waiting=1, name=NAME)  # in each worker
collector = GateCollector(tenants, refresh_interval=INTERVAL)
registry = CollectorRegistry()
registry.register(collector)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    collector.close()
    await tenants.aclose()
    await client.aclose()


app = FastAPI(lifespan=lifespan)


@app.get("/call/{tenant}")
async def call(tenant: str) -> Response:
    time.sleep(0.05)  # this worker accepts nothing meanwhile: the next connection goes to the other
    try:
        async with tenants.admit(tenant, timeout=30):
            await asyncio.sleep(0.2)
    except QueueFull:
        return Response(status_code=503)
    return Response(str(os.getpid()), media_type="text/plain")


@app.get("/metrics")
async def metrics() -> Response:
    await collector.refresh()
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
"""


class TenantClients(Clients):
    """The clients, each call through one of two tenants in turn."""

    turn = 0

    async def call(self) -> None:
        self.turn += 1
        reply = await self.http.get(f"/call/tenant-{self.turn % 2}")
        if reply.status_code == 200:
            self.saw["completed"] += 1
            self.callers.add(int(reply.text))
        else:
            assert reply.status_code == 503, reply.text
            self.saw["rejected"] += 1

    def summed(self, found: Scrape) -> bool:
        """The scrape has every worker's counts: what the clients saw, and nothing running."""
        return all(
            value(found, "boundedgate_requests_total", gate=self.gate, outcome=outcome) == self.saw[outcome]
            for outcome in ("completed", "rejected", "expired", "failed")
        ) and self.idle(found)


async def test_every_scrape_of_any_worker_gives_the_keyed_gates_sums_monotonic(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    require("uvicorn", "pip install 'boundedgate[test]'")
    require("fastapi", "pip install 'boundedgate[test]'")
    name = f"tenants-{os.getpid()}-{time.monotonic_ns()}"
    app = APP.replace("name=NAME", f"name={name!r}").replace("=INTERVAL", f"={INTERVAL}")
    (tmp_path / "recipe_app.py").write_text(app)
    async with workers(tmp_path, redis_server.url) as base:
        clients = TenantClients(base, name)
        try:
            rounds = 0
            while rounds < 3 or (len(clients.callers) < 2 and rounds < 10):
                rounds += 1
                await clients.calls(8)  # per tenant: 2 run, 1 waits, the other refused
                # Each worker pushes its counts within its interval (the scraped one at once).
                settle = time.monotonic() + SETTLE
                while not clients.summed(await clients.scrape()):
                    assert time.monotonic() < settle, f"the scrapes never reached {clients.saw}"
                    await asyncio.sleep(INTERVAL / 2)
                for _ in range(4):  # whichever worker answers, the same sums
                    found = await clients.scrape()
                    assert clients.summed(found), (clients.saw, found)
                    assert value(found, "boundedgate_limit_running", gate=name) == 2
                    series = {labels for metric, labels in found if metric == "boundedgate_requests_total"}
                    assert all(dict(labels)["gate"] == name for labels in series)
                    count = "boundedgate_request_duration_seconds_count"
                    assert value(found, count, gate=name, outcome="completed") == clients.saw["completed"]
        finally:
            await clients.http.aclose()
    assert clients.saw["completed"] >= 12
    assert clients.saw["rejected"] >= 3
    assert len(clients.callers) == 2, f"one worker served every call ({clients.callers}): this proves nothing"
    clients.never_down()
