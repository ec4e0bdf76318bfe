"""GateMiddleware(app, gate=[...]): a chain of gates, taken by one admit_all per request.

On virtual time with the hand-written client: the tenant's keyed gate, then a shared gate; one
deadline, a refusal answered with the refusing gate's error, a client that hangs up while queued
counted ``disconnected`` at every gate, a hang-up while the app streams ``aborted`` at each, and
the rate-limit fields of every gate. The same with a RedisGate is in test_redis.py.
"""

from __future__ import annotations

import asyncio

import pytest

from boundedgate import BoundedGate, KeyedGate, RateLimit
from boundedgate.asgi import UNGATED, GateMiddleware
from tests.asgi.harness import Client, Scope, StreamingApp, http_scope, serve, turns
from tests.helpers import checked_gate


def _tenant(scope: Scope) -> str:
    return str(dict(scope["headers"]).get(b"x-tenant", b"").decode())


def _chain(c: int = 1, q: int = 1) -> tuple[KeyedGate[str], BoundedGate]:
    return KeyedGate(max_running=2, max_waiting=2, name="tenant"), checked_gate(c, q, name="shared")


def _scope(tenant: str = "a") -> Scope:
    return http_scope(headers=[("x-tenant", tenant)])


async def test_a_request_holds_every_gate_of_the_chain_until_its_response_ends() -> None:
    tenants, shared = _chain()
    app = StreamingApp(chunks=2, pause=1)
    middleware = GateMiddleware(app, gate=[(tenants, _tenant), shared], timeout=30)
    client = Client()
    task = serve(middleware, client, _scope())
    await asyncio.sleep(0.5)
    assert (tenants.running, shared.running) == (1, 1)
    await task
    assert client.status == 200
    assert client.complete
    assert (tenants.running, shared.running) == (0, 0)
    assert (tenants.stats().total.completed, shared.stats().completed) == (1, 1)
    assert "gate;dur=" in client.headers["server-timing"]


async def test_a_keyed_gate_alone_in_the_chain_takes_its_key_from_key() -> None:
    tenants, shared = _chain()
    middleware = GateMiddleware(StreamingApp(chunks=1, pause=0), gate=(tenants, shared), key=_tenant)
    await serve(middleware, Client(), _scope("acme"))
    assert tenants.stats().total.completed == 1
    assert shared.stats().completed == 1


async def test_a_refusal_answers_with_the_refusing_gates_error_and_gives_back_the_others() -> None:
    tenants, shared = _chain(c=1, q=0)
    app = StreamingApp(chunks=1, pause=30)
    middleware = GateMiddleware(app, gate=[(tenants, _tenant), shared], refusal="detailed")
    first = serve(middleware, Client(), _scope("a"))
    await turns(3)
    refused = Client()
    await serve(middleware, refused, _scope("b"))
    assert refused.status == 503
    assert refused.json()["gate"] == "shared"  # the refusing gate, by name
    tenant = tenants.stats().total
    assert (tenant.cancelled, tenant.admitted) == (1, 1)  # b's tenant slot given back unused
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_a_hang_up_while_queued_at_any_gate_of_the_chain_is_disconnected_at_each() -> None:
    tenants, shared = _chain(c=1, q=1)
    app = StreamingApp(chunks=1, pause=30)
    middleware = GateMiddleware(app, gate=[(tenants, _tenant), shared], timeout=60)
    first = serve(middleware, Client(), _scope("a"))
    await turns(3)
    queued = Client()
    task = serve(middleware, queued, _scope("b"))
    await asyncio.sleep(1)
    assert (tenants.running, shared.running, shared.waiting) == (2, 1, 1)  # held first, queued last
    queued.leave()
    await turns(1)  # out of the queue in the turn the hang-up is read...
    assert shared.waiting == 0
    await turns(1)  # ...and its tenant slot back as its admission resumes
    assert tenants.running == 1
    await task
    assert queued.sent == []
    await first
    assert app.entered == 1
    tenant = tenants.stats().total
    assert (tenant.disconnected, tenant.cancelled, tenant.admitted, tenant.completed) == (1, 0, 1, 1)
    stats = shared.stats()
    assert (stats.disconnected, stats.cancelled, stats.completed) == (1, 0, 1)


async def test_a_hang_up_while_the_app_streams_is_aborted_at_every_gate() -> None:
    tenants, shared = _chain()
    app = StreamingApp(chunks=3, pause=10)
    middleware = GateMiddleware(app, gate=[(tenants, _tenant), shared])
    client = Client()
    task = serve(middleware, client, _scope())
    await asyncio.sleep(5)
    client.leave()
    await task
    assert app.cancelled == 1
    assert (tenants.stats().total.aborted, shared.stats().aborted) == (1, 1)


async def test_a_request_ungated_at_every_keyed_gate_skips_only_those() -> None:
    tenants, shared = _chain()

    def tenant_or_none(scope: Scope) -> object:
        return UNGATED if scope["path"] == "/internal" else _tenant(scope)

    middleware = GateMiddleware(StreamingApp(chunks=1, pause=0), gate=[(tenants, tenant_or_none), shared])
    await serve(middleware, Client(), http_scope(path="/internal"))
    assert (tenants.stats().total.completed, shared.stats().completed) == (0, 1)  # the shared gate still
    only_keyed = GateMiddleware(StreamingApp(chunks=1, pause=0), gate=[(tenants, tenant_or_none)])
    await serve(only_keyed, Client(), http_scope(path="/internal"))
    assert tenants.stats().total.completed == 0


async def test_the_rate_limit_fields_name_every_gate_of_the_chain() -> None:
    tenants = KeyedGate(max_running=2, max_waiting=0, name="tenant")
    rpm = RateLimit.per_minute(60, name="rpm")
    shared = BoundedGate(max_running=4, max_waiting=0, rate_limits=[rpm], name="shared")
    middleware = GateMiddleware(
        StreamingApp(chunks=1, pause=0), gate=[(tenants, _tenant), shared], ratelimit_headers=True
    )
    client = Client()
    await serve(middleware, client, _scope("acme"))
    policy = client.headers["ratelimit-policy"]
    assert policy.startswith('"tenant/acme";q=2;qu="concurrency", "shared";q=4;qu="concurrency", "shared/')
    assert client.headers["ratelimit"].startswith('"tenant/acme";r=1, "shared";r=3, "shared/rpm";r=59')


def test_a_chain_is_checked_when_the_middleware_is_made() -> None:
    tenants, shared = _chain()
    app = StreamingApp()
    with pytest.raises(TypeError, match=r"the keyed gate 'tenant' in gate=\[\.\.\.\] needs its key"):
        GateMiddleware(app, gate=[tenants, shared])
    with pytest.raises(TypeError, match="key= is for a keyed gate given alone"):
        GateMiddleware(app, gate=[(tenants, _tenant), shared], key=_tenant)
    with pytest.raises(TypeError, match="got 'openai'"):
        GateMiddleware(app, gate=[(tenants, _tenant), "openai"])
    with pytest.raises(ValueError, match="has no gates"):
        GateMiddleware(app, gate=[])
    with pytest.raises(ValueError, match="appears twice"):
        GateMiddleware(app, gate=[shared, shared])
    with pytest.raises(ValueError, match="priority must be >= 0 and < 1"):
        GateMiddleware(app, gate=[(tenants, _tenant), shared], priority=1)
    with pytest.raises(TypeError, match="on_deadline='cut' takes one gate, not a chain"):
        GateMiddleware(app, gate=[(tenants, _tenant), shared], timeout=5, on_deadline="cut")
    GateMiddleware(app, gate=[(tenants, _tenant), shared])
    with pytest.raises(ValueError, match="opposite orders can deadlock"):
        GateMiddleware(app, gate=[shared, (tenants, _tenant)])
