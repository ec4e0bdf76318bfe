"""docs/cluster.md's service with several workers, served for real: uvicorn --workers 2, Redis, a provider.

tests/test_docs.py only runs the block (it defines the app); here it is written to a module and
served by ``uvicorn --workers 2`` in a subprocess (the machinery of test_cluster_metrics.py), with
small limits, a tokens bucket that does not refill (so what it was charged is its burst less its
balance) and gate names of the test's own. The openai SDK in each worker talks HTTP to a provider on
loopback, served on the test's loop: it holds each call a while, counts the calls in flight by
tenant (read from the prompt, which the test writes) and in all, and answers with a usage of its
own making, which it sums. Three tenants send bursts larger than their C and Q, each request a
connection of its own (either worker accepts it); a middleware added to the module answers with
the worker's pid, and blocks its worker a moment so that the other accepts the next connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from boundedgate import RateLimit
from tests.asgi.servers import require
from tests.asgi.test_cluster_metrics import parse, value, workers
from tests.distributed.conftest import redis_server, server_binary
from tests.distributed.servers import RedisServer
from tests.fake_provider import _read_request

pytestmark = [pytest.mark.redis, pytest.mark.http_server, pytest.mark.looptime(False)]

__all__ = ("redis_server", "server_binary")  # the fixtures, shared with tests/distributed

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "cluster.md"

TENANT_C, TENANT_Q = 2, 3
CLUSTER_C = 5  # below the tenants' C summed (6: both limits bind), above a tenant's C in each of two workers
TENANTS = ("acme", "globex", "initech")
BURST = 1_000_000  # tokens: every call's estimate (2,000) fits many times over
#: How long the provider holds each call (real seconds): long beside a request's way through
#: the service, so that a burst's calls overlap at the provider.
HOLD = 0.3
#: Per tenant and round: C run, Q wait, the rest are refused at once.
PER_TENANT = TENANT_C + TENANT_Q + 2
#: How long a round may take: every request of the round served one after the other, and more.
ROUND = 60 + len(TENANTS) * PER_TENANT * HOLD * 10
#: How long the last releases and settles may take to land in Redis (each within op_timeout).
SETTLE = 60.0

ADDED = """

import time as _time


class _Worker:
    \"\"\"Answers with the worker's pid; blocks it a moment, so that the other accepts the next.\"\"\"

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != "/ask":
            return await self.app(scope, receive, send)
        _time.sleep(0.02)

        async def send_pid(message):
            if message["type"] == "http.response.start":
                pid = ("x-worker".encode(), str(os.getpid()).encode())
                message = {**message, "headers": [*message.get("headers", []), pid]}
            await send(message)

        await self.app(scope, receive, send_pid)


app.add_middleware(_Worker)
"""


def recipe() -> str:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    (found,) = [block for block in blocks if "RedisKeyedGate" in block and "FastAPI(" in block]
    return str(found)


def tpm() -> RateLimit:
    """The served recipe's tokens bucket: it never refills within the test."""
    return RateLimit(rate=1e-9, burst=BURST, unit="tokens", name="tpm")


def served_recipe(name: str) -> str:
    """The recipe with small limits, a bucket that does not refill, the test's gate names, a pid."""
    text = recipe()
    tenant = f'max_running={TENANT_C}, max_waiting={TENANT_Q}, name="{name}-tenant"'
    cluster = f'max_running={CLUSTER_C}, max_waiting=200, rate_limits=[tpm], name="{name}", op_timeout=10'
    bucket = f'RateLimit(rate=1e-9, burst={BURST}, unit="tokens", name="tpm")'
    for old, new in (
        ('max_running=5, max_waiting=20, name="tenant"', tenant),
        ('max_running=50, max_waiting=200, rate_limits=[tpm], name="openai"', cluster),
        ('RateLimit.per_minute(2_000_000, unit="tokens", name="tpm")', bucket),
    ):
        assert old in text
        text = text.replace(old, new)
    return text + ADDED


class Provider:
    """An OpenAI chat completions endpoint on loopback: calls in flight by tenant, and the usage sent."""

    def __init__(self) -> None:
        self.port = 0
        self.running: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.peak_total = 0
        self.calls: Counter[str] = Counter()
        self.usage = 0
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[Provider]:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            self._server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            await self._server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            _, _, body = await _read_request(reader)
            prompt = str(body["messages"][-1]["content"])
            tenant = prompt.split(":", 1)[0]
            self.running[tenant] += 1
            self.peak[tenant] = max(self.peak[tenant], self.running[tenant])
            self.peak_total = max(self.peak_total, sum(self.running.values()))
            try:
                await asyncio.sleep(HOLD)
            finally:  # before the answer is sent: the slots are held until the SDK has read it
                self.running[tenant] -= 1
            self.calls[tenant] += 1
            usage = _usage(prompt)
            self.usage += usage["total_tokens"]
            _answer(writer, usage)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


def _usage(prompt: str) -> dict[str, int]:
    """A usage of the provider's own making, different from one call to the next."""
    prompt_tokens, completion_tokens = len(prompt), 3 + int(prompt.rsplit(":", 1)[1]) % 7
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _answer(writer: asyncio.StreamWriter, usage: dict[str, int]) -> None:
    message = {"role": "assistant", "content": "hello"}
    data = json.dumps(
        {
            "id": "chatcmpl-recipe", "object": "chat.completion", "created": 0, "model": "gpt-5.5",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": usage,
        }
    ).encode()  # fmt: skip
    head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n"
    writer.write(f"{head}content-length: {len(data)}\r\n\r\n".encode() + data)


class Clients:
    """The service's clients: each request a connection of its own; what each tenant saw."""

    def __init__(self, base: str) -> None:
        httpx = require("httpx", "pip install 'boundedgate[test]'")
        limits = httpx.Limits(max_keepalive_connections=0)
        self.http = httpx.AsyncClient(base_url=base, limits=limits, timeout=ROUND)
        self.saw: defaultdict[str, Counter[int]] = defaultdict(Counter)
        self.workers: set[str] = set()
        self.numbers = itertools.count()

    async def ask(self, tenant: str) -> None:
        prompt = f"{tenant}:{next(self.numbers)}"
        reply = await self.http.post("/ask", json={"prompt": prompt}, headers={"x-tenant": tenant})
        assert reply.status_code in (200, 503), reply.text
        self.saw[tenant][reply.status_code] += 1
        if reply.status_code == 200:
            assert reply.json() == {"answer": "hello"}
            self.workers.add(reply.headers["x-worker"])

    async def burst(self) -> None:
        """``PER_TENANT`` requests of every tenant, interleaved, 10 ms apart."""
        tasks = []
        for tenant in itertools.chain.from_iterable(itertools.repeat(TENANTS, PER_TENANT)):
            tasks.append(asyncio.create_task(self.ask(tenant)))
            await asyncio.sleep(0.01)
        await asyncio.gather(*tasks)


async def idle(client: Any, name: str) -> bool:
    """True once no gate of the recipe holds or queues anything in Redis."""
    from boundedgate.redis import read_cluster

    for gate in (name, *(f"{name}-tenant/{tenant}" for tenant in TENANTS)):
        stats = await read_cluster(client, gate)
        if stats.holders or stats.waiters:
            return False
    return True


async def charged(client: Any, name: str) -> int:
    """The tokens the cluster's bucket was charged, net: its burst less its balance (it never refills)."""
    from boundedgate.redis import read_cluster

    return round(BURST - (await read_cluster(client, name, [tpm()])).tokens["tpm"])


async def metrics_are_the_callers(base: str, name: str, clients: Clients) -> None:
    """A scrape of ``/metrics``, whichever worker answers, counts every 200 at the tenants and the cluster.

    Scrapes until the tenants' count is complete (each worker adds its own once per interval).
    """
    import httpx

    served = sum(saw[200] for saw in clients.saw.values())
    give_up = time.monotonic() + SETTLE
    async with httpx.AsyncClient(base_url=base, limits=httpx.Limits(max_keepalive_connections=0)) as http:
        while True:
            reply = await http.get("/metrics")
            assert reply.status_code == 200
            found = parse(reply.text)
            tenants = value(found, "boundedgate_requests_total", gate=f"{name}-tenant", outcome="completed")
            if tenants >= served or time.monotonic() > give_up:
                break
            await asyncio.sleep(0.2)
    assert tenants == served
    assert value(found, "boundedgate_requests_total", gate=name, outcome="completed") == served


async def test_the_recipe_served_by_two_workers_holds_every_limit_and_settles_the_usage(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in ("uvicorn", "fastapi", "openai", "httpx2", "prometheus_client"):
        require(module, "pip install 'boundedgate[test]'")
    import redis.asyncio

    from boundedgate.redis import read_cluster

    name = f"recipe-{os.getpid()}-{time.monotonic_ns()}"
    (tmp_path / "recipe_app.py").write_text(served_recipe(name))
    client = redis.asyncio.Redis.from_url(redis_server.url)
    provider = Provider()
    try:
        async with provider.serving():
            monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{provider.port}/v1")
            monkeypatch.setenv("OPENAI_API_KEY", "test")
            async with workers(tmp_path, redis_server.url) as base:
                clients = Clients(base)
                try:
                    rounds = 0
                    while rounds < 3 or (len(clients.workers) < 2 and rounds < 10):
                        rounds += 1
                        await clients.burst()
                finally:
                    await clients.http.aclose()
                # A client has its answer a moment before its releases and its settle land.
                give_up = time.monotonic() + SETTLE
                while not (await idle(client, name) and await charged(client, name) == provider.usage):
                    if time.monotonic() > give_up:
                        break  # the assertions below say what is missing
                    await asyncio.sleep(0.1)
                cluster = await read_cluster(client, name, [tpm()])
                tenants = {t: await read_cluster(client, f"{name}-tenant/{t}") for t in TENANTS}
                # Each worker adds its tenants' counts to Redis once per refresh interval.
                await metrics_are_the_callers(base, name, clients)
    finally:
        await client.aclose()

    served = sum(saw[200] for saw in clients.saw.values())
    assert served >= rounds * len(TENANTS) * TENANT_C  # every burst served at least each tenant's C
    assert len(clients.workers) == 2, f"one worker served every call ({clients.workers}): this proves nothing"
    # The limits, at the provider: never more than a tenant's C of its calls, nor the cluster's C.
    assert max(provider.peak.values()) <= TENANT_C, provider.peak
    assert provider.peak_total <= CLUSTER_C, provider.peak_total
    assert provider.peak_total >= 2, "no two calls ever overlapped at the provider: this proves nothing"
    # And in Redis, by the gates' own peaks.
    assert cluster.counters["peak_running"] <= CLUSTER_C
    for tenant, stats in tenants.items():
        assert stats.counters["peak_running"] <= TENANT_C, (tenant, stats.counters)
    # The counts add up: every request once at its tenant, every call once at the cluster and the provider.
    for tenant, saw in clients.saw.items():
        counters = tenants[tenant].counters
        assert counters["completed"] == saw[200] == provider.calls[tenant], (tenant, saw, counters)
        refused = sum(counters.get(outcome, 0) for outcome in ("rejected", "expired", "failed"))
        assert refused == saw[503], (tenant, saw, counters)
        assert counters["completed"] + refused == rounds * PER_TENANT
    assert cluster.counters["completed"] == served == sum(provider.calls.values())
    assert cluster.counters["admitted"] == served
    assert (cluster.running, len(cluster.waiters)) == (0, 0)
    # The tokens: each call's estimate settled to the usage the provider reported.
    assert round(BURST - cluster.tokens["tpm"]) == provider.usage, (provider.usage, cluster.tokens)
