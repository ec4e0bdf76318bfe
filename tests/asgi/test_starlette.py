"""GateMiddleware inside real Starlette / FastAPI stacks, and the per-route forms, on virtual time.

Starlette's own middleware sit around and inside the gate (``BaseHTTPMiddleware``, GZip, CORS):
whichever stack it is, a client leaving mid-stream frees the gate's slot and closes the route's
provider stream (a :class:`GatedStream` of a second gate) without the garbage collector, which is
disabled throughout.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import Depends, FastAPI
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from boundedgate import BoundedGate, GatedStream, GateError
from boundedgate.asgi import GatedStreamingResponse, GateMiddleware, gate_dependency, refusal_handler
from tests.asgi.harness import Client, http_scope, serve, turns
from tests.helpers import checked_gate


class Provider:
    """A stand-in provider: a gate of its own, and streams that record how they ended."""

    def __init__(self) -> None:
        self.gate = checked_gate(10, 10, name="provider")
        self.closed = 0
        self.opened = 0

    async def tokens(self) -> AsyncIterator[str]:
        self.opened += 1
        try:
            for i in range(5):
                await asyncio.sleep(30)
                yield f"data: tok{i}\n\n"
        finally:
            self.closed += 1

    async def stream(self) -> GatedStream[AsyncIterator[str]]:
        return await self.gate.stream(self.tokens)


async def _noop_dispatch(request: Request, call_next: Any) -> Any:
    return await call_next(request)


def _stack(kind: str, gate: BoundedGate, provider: Provider, *, gated_response: bool) -> Any:
    async def chat(request: Request) -> Any:
        stream = await provider.stream()
        if gated_response:
            return GatedStreamingResponse(stream, media_type="text/event-stream")

        async def body() -> AsyncIterator[str]:
            async with stream:
                async for item in stream:
                    yield item

        return StreamingResponse(body(), media_type="text/event-stream")

    routes = [Route("/chat", chat)]
    gated = Middleware(GateMiddleware, gate=gate)
    others = {
        "bare": [],
        "base-http-outside": [Middleware(BaseHTTPMiddleware, dispatch=_noop_dispatch), gated],
        "base-http-inside": [gated, Middleware(BaseHTTPMiddleware, dispatch=_noop_dispatch)],
        "gzip-cors-outside": [
            Middleware(CORSMiddleware, allow_origins=["*"]),
            Middleware(GZipMiddleware, minimum_size=1),
            gated,
        ],
        "gzip-cors-inside": [
            gated,
            Middleware(GZipMiddleware, minimum_size=1),
            Middleware(CORSMiddleware, allow_origins=["*"]),
        ],
    }[kind] or [gated]
    return Starlette(routes=routes, middleware=others)


STACKS = ["bare", "base-http-outside", "base-http-inside", "gzip-cors-outside", "gzip-cors-inside"]
CASES = [(kind, gated) for kind in STACKS for gated in (True, False)]


@pytest.mark.parametrize(
    ("kind", "gated_response"),
    CASES,
    ids=[f"{kind}-{'gated' if gated else 'plain'}-response" for kind, gated in CASES],
)
async def test_a_client_leaving_mid_stream_frees_everything_without_the_collector(
    kind: str, gated_response: bool
) -> None:
    gate = checked_gate(1, 1, name="http")
    provider = Provider()
    app = _stack(kind, gate, provider, gated_response=gated_response)
    client = Client()
    headers = [("accept", "text/event-stream"), ("accept-encoding", "gzip"), ("origin", "http://x")]
    task = serve(app, client, http_scope("/chat", headers=headers))
    await asyncio.sleep(31)
    assert gate.running == 1
    assert provider.gate.running == 1
    loop = asyncio.get_running_loop()
    before = loop.time()
    client.leave()
    # Turn by turn, until everything has stopped: the gate never shows a free slot while the
    # provider's stream still runs, and it is all over without the clock moving.
    for _ in range(30):
        assert gate.running >= provider.gate.running
        if task.done():
            break
        await turns(1)
    await task
    assert (gate.running, provider.gate.running) == (0, 0)
    assert loop.time() == before
    assert provider.closed == provider.opened == 1
    stats = gate.stats()
    assert (stats.aborted, stats.completed, stats.arrived) == (1, 0, 1)


async def test_the_gated_response_closes_its_stream_on_a_normal_end_and_on_an_error() -> None:
    provider = Provider()

    async def failing() -> AsyncIterator[str]:
        yield "a"
        raise RuntimeError("provider dropped")

    async def ok(request: Request) -> Any:
        return GatedStreamingResponse(await provider.stream(), media_type="text/plain")

    async def bad(request: Request) -> Any:
        stream = await provider.gate.stream(failing)
        return GatedStreamingResponse(stream, media_type="text/plain")

    app = Starlette(routes=[Route("/ok", ok), Route("/bad", bad)])
    done = Client()
    await serve(app, done, http_scope("/ok"))
    assert done.complete
    assert provider.closed == 1
    with pytest.raises(RuntimeError, match="provider dropped"):
        await serve(app, Client(), http_scope("/bad"))
    stats = provider.gate.stats()
    assert (stats.completed, stats.failed, stats.running) == (1, 1, 0)


async def test_a_stream_ending_past_its_deadline_never_cuts_the_gated_response_short(
    caplog: pytest.LogCaptureFixture,
) -> None:
    provider = Provider()

    async def chat(request: Request) -> Any:
        stream = await provider.gate.stream(provider.tokens, timeout=60)  # the tokens take 150 s
        return GatedStreamingResponse(stream, media_type="text/event-stream")

    client = Client()
    await serve(Starlette(routes=[Route("/chat", chat)]), client, http_scope("/chat"))
    assert client.complete
    assert client.body.count(b"data: tok") == 5
    assert provider.gate.stats().late == 1
    assert provider.closed == 1
    assert "ended past its deadline" in caplog.text


def _fastapi(gate: BoundedGate, provider: Provider, style: str = "openai") -> FastAPI:
    app = FastAPI()
    app.add_exception_handler(GateError, refusal_handler(style))

    @app.post("/chat", dependencies=[Depends(gate_dependency(gate, timeout=1000))])
    async def chat() -> Any:
        return GatedStreamingResponse(await provider.stream(), media_type="text/event-stream")

    @app.get("/hand-over")
    async def hand_over(permit: Any = Depends(gate_dependency(gate))) -> Any:  # noqa: B008
        return GatedStreamingResponse(permit.hand_to(provider.tokens()), media_type="text/event-stream")

    @app.get("/plain", dependencies=[Depends(gate_dependency(gate, timeout=1))])
    async def plain() -> Any:
        await asyncio.sleep(2)
        return JSONResponse({"ok": True})

    return app


async def test_the_dependency_holds_the_slot_until_the_stream_has_been_sent() -> None:
    gate = checked_gate(1, 0, name="route")
    provider = Provider()
    app = _fastapi(gate, provider)
    client = Client()
    task = serve(app, client, http_scope("/chat", method="POST"))
    await asyncio.sleep(31)
    assert gate.running == 1
    refused = Client()
    await serve(app, refused, http_scope("/chat", method="POST"))
    assert refused.status == 503
    assert refused.headers["retry-after"] == "1"
    assert refused.headers["cache-control"] == "no-store"
    assert refused.json()["error"]["code"] == "queue_full"
    await task
    assert client.complete
    assert (gate.running, gate.stats().completed) == (0, 1)


async def test_a_permit_handed_to_the_stream_is_the_stream_s() -> None:
    gate = checked_gate(1, 0, name="route")
    provider = Provider()
    client = Client()
    await serve(_fastapi(gate, provider), client, http_scope("/hand-over"))
    assert client.complete
    assert (gate.running, gate.stats().completed, provider.closed) == (0, 1, 1)


async def test_the_dependency_counts_late_and_never_raises_it() -> None:
    gate = checked_gate(1, 0, name="route")
    client = Client()
    await serve(_fastapi(gate, Provider()), client, http_scope("/plain"))
    assert client.status == 200
    assert client.json() == {"ok": True}
    assert gate.stats().late == 1


@pytest.mark.parametrize("style", ["public", "detailed", "openai", "anthropic", "session", "problem"])
async def test_the_refusal_handler_answers_as_the_middleware_does(style: str) -> None:
    gate = checked_gate(1, 0, name="route")
    provider = Provider()
    held = serve(_fastapi(gate, provider, style), Client(), http_scope("/chat", method="POST"))
    await turns(5)
    by_handler = Client()
    await serve(_fastapi(gate, provider, style), by_handler, http_scope("/chat", method="POST"))
    by_middleware = Client()

    async def never(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("the app is not called for a refused request")

    await serve(GateMiddleware(never, gate=gate, refusal=style), by_middleware)
    assert by_handler.status == by_middleware.status == 503
    assert by_handler.json() == by_middleware.json()
    assert by_handler.headers["content-type"] == by_middleware.headers["content-type"]
    assert by_handler.headers["retry-after"] == by_middleware.headers["retry-after"]
    held.cancel()
    with pytest.raises(asyncio.CancelledError):
        await held


def test_the_dependency_checks_its_settings() -> None:
    gate = BoundedGate(max_running=1, max_waiting=0)
    with pytest.raises(TypeError, match="key="):
        gate_dependency(gate, key=lambda scope: "a")
    with pytest.raises(ValueError, match="timeout"):
        gate_dependency(gate, timeout=-1)


async def test_the_dependency_gates_a_missing_key_and_lets_ungated_through() -> None:
    from boundedgate import KeyedGate
    from boundedgate.asgi import UNGATED

    tenants: KeyedGate[str | None] = KeyedGate(max_running=1, max_waiting=0, name="tenant")
    app = FastAPI()
    app.add_exception_handler(GateError, refusal_handler())

    def tenant(scope: Any) -> Any:
        value = dict(scope["headers"]).get(b"x-tenant")
        if value == b"internal":
            return UNGATED
        return None if value is None else value.decode()

    @app.get("/slow", dependencies=[Depends(gate_dependency(tenants, key=tenant))])
    async def slow() -> Any:
        await asyncio.sleep(30)
        return {"ok": True}

    held = serve(app, Client(), http_scope("/slow"))  # no header: the None key
    await turns(5)
    refused, internal = Client(), Client()
    await serve(app, refused, http_scope("/slow"))
    assert refused.status == 503  # another without a header waits on the same key, not past it
    await serve(app, internal, http_scope("/slow", headers=[("x-tenant", "internal")]))
    assert internal.status == 200
    await held
    assert tenants.stats().total.rejected == 1


class _ProviderError(Exception):
    """What an LLM SDK raises for the provider's answer: a status and the HTTP response."""

    def __init__(self, status_code: int, headers: dict[str, str]) -> None:
        super().__init__(f"Error code: {status_code}")
        self.status_code = status_code
        self.response = type("Response", (), {"headers": headers})()


@pytest.mark.parametrize(("status", "answered"), [(429, 429), (529, 503), (400, 500)])
async def test_the_provider_error_handler_answers_the_provider_s_refusals(status: int, answered: int) -> None:
    from starlette.middleware.errors import ServerErrorMiddleware

    from boundedgate.asgi import provider_error_handler

    async def chat(request: Request) -> Any:
        raise _ProviderError(status, {"retry-after-ms": "1500"})

    app = Starlette(routes=[Route("/chat", chat)])
    app.add_exception_handler(_ProviderError, provider_error_handler("openai"))
    client = Client()
    if answered == 500:  # any other status error goes on, as without the handler
        with pytest.raises(_ProviderError):
            await serve(ServerErrorMiddleware(app), client, http_scope("/chat"))
        assert client.status == 500
        return
    await serve(app, client, http_scope("/chat"))
    assert client.status == answered
    assert client.headers["retry-after"] == "2"
    assert client.headers["x-should-retry"] == "false"
    assert client.json()["error"]["code"] == (
        "provider_rate_limited" if status == 429 else "provider_overloaded"
    )
