"""GatedTransport([...]): a chain of gates, one admit_all per request, one settle of its usage.

The tenant's keyed gate, then a shared gate with a tokens-per-minute limit, over the flavour's
MockTransport (no sockets): every gate held until the body ends, the provider's usage settled at
every gate of the chain by one settle, a refusal answered with the refusing gate's error.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import httpx
import httpx2
import pytest

from boundedgate import BoundedGate, KeyedGate, QueueFull, RateLimit
from boundedgate.aiohttp import gate_middleware
from boundedgate.httpx import GatedTransport, refusal
from tests.helpers import checked_gate
from tests.http_client.provider import LimitsProvider

FLAVOURS = [httpx2, httpx]


@pytest.fixture(params=FLAVOURS, ids=lambda module: module.__name__)
def flavour(request: pytest.FixtureRequest) -> Any:
    return request.param


def _tenant(request: Any) -> str:
    return str(request.headers["x-tenant"])


def _tokens() -> RateLimit:
    return RateLimit(rate=1e-9, burst=1000, unit="tokens", name="tpm")


def _answering(flavour: Any, status: int = 200, **kwargs: Any) -> Any:
    return flavour.MockTransport(lambda request: flavour.Response(status, **kwargs))


async def test_the_usage_settles_every_gate_of_the_chain_with_one_settle(flavour: Any) -> None:
    tenants = KeyedGate(max_running=1, max_waiting=0, rate_limits=[_tokens()], name="tenant", keep_idle=1)
    shared = checked_gate(1, 0, name="shared", rate_limits=[_tokens()])
    inner = _answering(flavour, json={"usage": {"total_tokens": 7}})
    transport = GatedTransport([(tenants, _tenant), shared], inner, cost=50)
    async with flavour.AsyncClient(transport=transport) as client:
        for _ in range(2):  # one slot at each gate: the second is admitted only if the first ended
            response = await client.get("http://provider/", headers={"x-tenant": "acme"})
            assert response.status_code == 200
            assert response.extensions["boundedgate"].key == "acme"
    assert (tenants.running, shared.running) == (0, 0)
    assert (tenants.stats().total.completed, shared.stats().completed) == (2, 2)
    assert shared.stats().tokens[0] == pytest.approx(1000 - 2 * 7)  # settled at 7, not 50
    assert tenants._gate_for("acme").stats().tokens[0] == pytest.approx(1000 - 2 * 7)


async def test_a_refusal_is_the_refusing_gates_own_and_gives_the_others_back(flavour: Any) -> None:
    tenants = KeyedGate(max_running=2, max_waiting=0, name="tenant", keep_idle=1)
    shared = BoundedGate(max_running=1, max_waiting=0, name="shared")
    held = shared.try_admit()
    transport = GatedTransport((tenants, shared), _answering(flavour), key=_tenant)
    async with flavour.AsyncClient(transport=transport) as client:
        response = await client.get("http://provider/", headers={"x-tenant": "acme"})
    assert response.status_code == 503
    error = refusal(response)
    assert isinstance(error, QueueFull)
    assert error.gate == "shared"
    assert (tenants.running, tenants.stats().total.cancelled) == (0, 1)
    held.release()


async def test_the_body_holds_every_gate_until_it_ends(flavour: Any) -> None:
    tenants = KeyedGate(max_running=1, max_waiting=0, name="tenant")
    shared = BoundedGate(max_running=1, max_waiting=0, name="shared")
    transport = GatedTransport([(tenants, _tenant), shared], _answering(flavour, content=b"x" * 10))
    async with (
        flavour.AsyncClient(transport=transport) as client,
        client.stream("GET", "http://provider/", headers={"x-tenant": "a"}) as response,
    ):
        assert response.status_code == 200
        assert (tenants.running, shared.running) == (0, 0)  # an in-memory body ended at once
    assert shared.stats().completed == 1


def test_a_chain_is_checked_when_the_transport_is_made() -> None:
    tenants = KeyedGate(max_running=1, max_waiting=0, name="tenant")
    shared = BoundedGate(max_running=1, max_waiting=0, name="shared")
    with pytest.raises(TypeError, match=r"the keyed gate 'tenant' in gate=\[\.\.\.\] needs its key"):
        GatedTransport([tenants, shared])
    with pytest.raises(ValueError, match="priority must be >= 0 and < 1"):
        GatedTransport([(tenants, _tenant), shared], retry_priority=1)
    with pytest.raises(TypeError, match="on_deadline='cut' takes one gate, not a chain"):
        GatedTransport([(tenants, _tenant), shared], on_deadline="cut")
    assert GatedTransport([(tenants, _tenant), shared]).gate == [(tenants, _tenant), shared]


async def test_the_aiohttp_middleware_takes_a_chain_too(provider: LimitsProvider) -> None:
    tenants = KeyedGate(max_running=1, max_waiting=0, rate_limits=[_tokens()], name="tenant", keep_idle=1)
    shared = checked_gate(2, 0, name="shared", rate_limits=[_tokens()])
    middleware = gate_middleware([(tenants, lambda request: request.headers["x-tenant"]), shared], cost=50)
    url = f"{provider.openai_url}/chat/completions"
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    acme = {"x-tenant": "acme"}
    held = {**acme, "x-fake": "hold_after=1"}
    async with aiohttp.ClientSession(middlewares=(middleware,)) as session:
        async with session.post(url, json={**body, "stream": True}, headers=held):
            with pytest.raises(QueueFull) as refused:  # acme's one slot is held: refused at the tenant
                async with session.post(url, json=body, headers=acme):
                    pass
            assert refused.value.gate == "tenant/acme"
            assert shared.running == 1
        async with session.post(url, json={**body, "stream": False}, headers=acme) as response:
            assert response.status == 200
    assert (tenants.running, shared.running) == (0, 0)
    assert shared.stats().completed == 2
    # The declared cost paid at every gate (aiohttp bodies are not read for usage).
    assert shared.stats().tokens[0] == pytest.approx(1000 - 2 * 50)
    assert tenants._gate_for("acme").stats().tokens[0] == pytest.approx(1000 - 2 * 50)
