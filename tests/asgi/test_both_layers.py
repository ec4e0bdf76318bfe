"""One gate at both layers, the ASGI middleware and the SDK's GatedTransport, is admitted twice.

docs/http.md once showed one FastAPI app with ``GateMiddleware(gate=[(tenants, tenant_of),
cluster])`` and an openai client through ``GatedTransport([tenant_header, cluster])``. Each request
then holds its tenant slot in the middleware while its SDK call waits for a second one in the
transport: a tenant at its C has every slot held by a request whose call waits for one, and
nothing is served until the transport's wait runs out; below C each request takes two slots of
every gate. Here on virtual time, with in-process gates, a FastAPI app served in-process and the
real openai SDK over a MockTransport provider that answers with its usage. The split the page
shows now (the middleware on the tenant, the transport on the cluster with its tokens) serves a
tenant at its C with one slot of each gate per request, and the page's block has no gate at both.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from boundedgate import BoundedGate, KeyedGate, RateLimit
from tests.asgi.harness import Client, http_scope, serve
from tests.asgi.servers import require

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "http.md"
TENANT_C = 2
#: The openai SDK's default pool timeout (its 600 s default timeout): the transport's queue budget.
SDK_POOL_TIMEOUT = 600.0
USAGE = 7


def _tenant_of(scope: Any) -> str:
    return str(dict(scope["headers"]).get(b"x-tenant", b"").decode())


def _gates() -> tuple[KeyedGate[str], BoundedGate]:
    tpm = RateLimit(rate=1e-9, burst=10_000, unit="tokens", name="tpm")
    tenants: KeyedGate[str] = KeyedGate(max_running=TENANT_C, max_waiting=20, name="tenant", keep_idle=1)
    return tenants, BoundedGate(max_running=50, max_waiting=100, rate_limits=[tpm], name="openai")


class Service:
    """A FastAPI app calling the provider through the openai SDK, gated at the layers given."""

    def __init__(self, middleware_gate: Any, transport_gate: Any, **middleware: Any) -> None:
        require("fastapi", "pip install 'boundedgate[test]'")
        openai = require("openai", "pip install 'boundedgate[test]'")
        httpx2 = require("httpx2", "pip install 'boundedgate[test]'")
        from fastapi import FastAPI, Header

        from boundedgate.asgi import GateMiddleware
        from boundedgate.httpx import GatedTransport

        self.calls = 0
        provider = httpx2.MockTransport(self._answer)
        transport = GatedTransport(transport_gate, provider, cost=2_000)
        http = httpx2.AsyncClient(transport=transport)
        url = "http://provider/v1"
        self.sdk = openai.AsyncOpenAI(base_url=url, api_key="k", max_retries=0, http_client=http)
        app = FastAPI()

        @app.post("/chat")
        async def chat(x_tenant: str = Header()) -> str:
            answer = await self.sdk.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], extra_headers={"x-tenant": x_tenant}
            )
            return str(answer.choices[0].message.content)

        app.add_middleware(GateMiddleware, gate=middleware_gate, timeout=60, **middleware)
        self.app = app

    async def _answer(self, request: Any) -> Any:
        import httpx2

        self.calls += 1
        await asyncio.sleep(1)  # the provider's time: every call of a burst is in flight at once
        message = {"role": "assistant", "content": "hello"}
        return httpx2.Response(
            200,
            json={
                "id": "c", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 2, "completion_tokens": 5, "total_tokens": USAGE},
            },
        )  # fmt: skip

    async def ask(self, tenant: str, n: int) -> list[int]:
        """``n`` concurrent requests of ``tenant``; their statuses."""
        import httpx2

        transport = httpx2.ASGITransport(app=self.app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://service", timeout=None) as http:
            headers = {"x-tenant": tenant}
            replies = await asyncio.gather(*(http.post("/chat", headers=headers) for _ in range(n)))
        return [reply.status_code for reply in replies]

    async def aclose(self) -> None:
        await self.sdk.close()


async def test_the_same_gates_at_both_layers_deadlock_a_tenant_at_its_c() -> None:
    tenants, cluster = _gates()
    both = Service([(tenants, _tenant_of), cluster], [(tenants, lambda r: r.headers["x-tenant"]), cluster])
    try:
        started = asyncio.get_running_loop().time()
        statuses = await both.ask("acme", TENANT_C)
        waited = asyncio.get_running_loop().time() - started
    finally:
        await both.aclose()
    # Each request holds one of the tenant's C slots in the middleware, and its SDK call waits for
    # another in the transport: none is free, nothing reaches the provider until the wait runs out.
    assert both.calls == 0
    assert statuses == [503] * TENANT_C
    assert waited >= SDK_POOL_TIMEOUT
    assert tenants.stats().total.expired == TENANT_C  # the transport's admissions, at its pool timeout
    assert cluster.stats().peak_running == TENANT_C  # and a cluster slot held by each, for nothing


async def test_the_same_gates_at_both_layers_take_two_slots_of_each_per_request() -> None:
    tenants, cluster = _gates()
    both = Service([(tenants, _tenant_of), cluster], [(tenants, lambda r: r.headers["x-tenant"]), cluster])
    try:
        assert await both.ask("acme", 1) == [200]
    finally:
        await both.aclose()
    assert cluster.stats().peak_running == 2
    assert cluster.stats().completed == 2  # one request, counted twice


async def test_the_tenant_in_the_middleware_and_the_cluster_in_the_transport_serve_a_tenant_at_c() -> None:
    tenants, cluster = _gates()
    split = Service(tenants, cluster, key=_tenant_of)
    try:
        statuses = await split.ask("acme", TENANT_C + 1)  # one more than C: it waits its turn
    finally:
        await split.aclose()
    assert statuses == [200] * (TENANT_C + 1)
    assert split.calls == TENANT_C + 1
    acme = tenants.stats().total
    assert (acme.completed, acme.peak_running) == (TENANT_C + 1, TENANT_C)
    stats = cluster.stats()
    assert (stats.completed, stats.peak_running) == (TENANT_C + 1, TENANT_C)
    assert stats.tokens[0] == pytest.approx(10_000 - (TENANT_C + 1) * USAGE)  # settled from the usage


async def test_in_the_split_a_hang_up_takes_the_sdk_call_out_of_the_clusters_queue() -> None:
    tenants, cluster = _gates()
    held = [cluster.try_admit() for _ in range(50)]  # the cluster is full: the SDK call queues there
    split = Service(tenants, cluster, key=_tenant_of)
    try:
        client = Client()
        task = serve(split.app, client, http_scope("/chat", "POST", [("x-tenant", "acme")]))
        await asyncio.sleep(1)
        assert (tenants.running, cluster.waiting) == (1, 1)
        client.leave()
        await task
    finally:
        for permit in held:
            permit.release()
        await split.aclose()
    assert split.calls == 0
    assert cluster.waiting == 0
    assert cluster.stats().cancelled == 1
    assert tenants.stats().total.aborted == 1


async def test_in_the_split_a_refusal_at_the_cluster_is_the_services_503() -> None:
    tenants, _ = _gates()
    cluster = BoundedGate(max_running=1, max_waiting=0, name="openai")
    held = cluster.try_admit()  # full, and no waiting room: the SDK call is refused at once
    split = Service(tenants, cluster, key=_tenant_of)
    client = Client()
    try:
        await serve(split.app, client, http_scope("/chat", "POST", [("x-tenant", "acme")]))
    finally:
        held.release()
        await split.aclose()
    assert client.status == 503
    assert "retry-after" in client.headers
    assert (split.calls, cluster.stats().rejected) == (0, 1)
    assert tenants.stats().total.failed == 1


def test_the_page_puts_no_gate_at_both_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    require("fastapi", "pip install 'boundedgate[test]'")
    monkeypatch.setenv("OPENAI_API_KEY", "test")  # the block makes a client; it calls nothing
    section = PAGE.read_text().split("## Several gates for one request", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```py(?:thon)?\n(.*?)```", section, flags=re.DOTALL)
    assert blocks
    for block in blocks:
        namespace: dict[str, Any] = {"__name__": "page"}
        exec(compile(block, str(PAGE), "exec"), namespace)
        middleware = [entry.kwargs["gate"] for entry in namespace["app"].user_middleware]
        in_middleware = {id(gate) for gate in _gates_of(middleware)}
        in_transport = {id(gate) for gate in _gates_of([namespace["transport"].gate])}
        assert in_middleware
        assert in_transport
        assert not in_middleware & in_transport, "a gate at both layers is admitted twice per request"


def _gates_of(given: list[Any]) -> list[Any]:
    """The gates in ``given``: gates, chains of them, and (keyed gate, key function) pairs."""
    found = []
    for item in given:
        if isinstance(item, (list, tuple)):
            found += _gates_of([part for part in item if not callable(part) or hasattr(part, "admit")])
        else:
            found.append(item)
    return found
