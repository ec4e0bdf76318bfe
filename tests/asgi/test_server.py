"""The middleware in a real server: uvicorn on loopback, a FastAPI app streaming from the fake provider
through the real openai SDK, and real clients (httpx2, the openai SDK) pointed at our service.

Real time (looptime off): every bound below comes from the settings here (the provider holds its
streams until told, so nothing waits on a clock but the bounded waits themselves). The garbage
collector is off for the whole run: whatever frees a slot must be an event the code sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from boundedgate import BoundedGate
from tests.asgi.servers import require, served
from tests.fake_provider import Behaviour, FakeProvider, fake_provider

try:  # at module level, where FastAPI resolves the route's annotations; `require` reports it missing
    from starlette.requests import Request
except ImportError:  # pragma: no cover
    Request = None  # type: ignore[assignment,misc]

pytestmark = [pytest.mark.http_server, pytest.mark.looptime(False)]

RUNNING, WAITING = 4, 4
WAIT = 10.0  # seconds any one step may take on a loaded machine; none takes more than a fraction
MESSAGES: Any = [{"role": "user", "content": "hi"}]


class Parts:
    """What the test reads back on the server's loop."""

    def __init__(self, gate: BoundedGate, provider: FakeProvider) -> None:
        self.gate = gate
        self.provider = provider
        self.samples: list[tuple[int, int, int]] = []  # (running, waiting, provider streams)

    def sample(self) -> None:
        self.samples.append((self.gate.running, self.gate.waiting, self.provider.streaming))


def _service(base_http: bool) -> Any:
    require("fastapi", "pip install 'boundedgate[test]'")
    openai = require("openai", "pip install 'boundedgate[test]'")
    from fastapi import FastAPI
    from starlette.responses import Response, StreamingResponse

    from boundedgate.asgi import GateMiddleware

    @contextlib.asynccontextmanager
    async def build() -> AsyncIterator[tuple[Any, Parts]]:
        async with fake_provider(Behaviour(chunks=3, hold_after=1)) as provider:
            gate = BoundedGate(max_running=RUNNING, max_waiting=WAITING, name="chat")
            upstream = openai.AsyncOpenAI(base_url=provider.openai_url, api_key="test", max_retries=0)
            parts = Parts(gate, provider)
            app = FastAPI()

            @app.post("/v1/chat/completions")
            async def chat(request: Request) -> Any:
                asked = await request.json()
                raw = await upstream.chat.completions.create(
                    model=asked["model"], messages=asked["messages"], stream=True
                )

                async def events() -> AsyncIterator[str]:
                    async with raw:  # the provider's response is closed however this ends
                        async for chunk in raw:
                            yield f"data: {chunk.model_dump_json()}\n\n"
                    yield "data: [DONE]\n\n"

                return StreamingResponse(events(), media_type="text/event-stream")

            if base_http:

                @app.middleware("http")
                async def passthrough(
                    request: Request, call_next: Callable[[Request], Awaitable[Response]]
                ) -> Response:
                    return await call_next(request)

            app.add_middleware(GateMiddleware, gate=gate, refusal="openai", timeout=60)
            loop = asyncio.get_running_loop()

            def tick() -> None:  # a sample every millisecond, between two of the loop's callbacks
                parts.sample()
                handle[0] = loop.call_later(0.001, tick)

            handle = [loop.call_later(0.001, tick)]
            try:
                yield app, parts
            finally:
                handle[0].cancel()
                await upstream.close()

    return build


async def _stream_with_httpx(client: Any, url: str, *, leave: asyncio.Event | None = None) -> list[str]:
    """Stream one chat completion with httpx2; with ``leave``, hang up after the first event, once set."""
    body = {"model": "m", "messages": MESSAGES, "stream": True}
    events: list[str] = []
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["server-timing"].startswith("gate;dur=")
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
                if leave is not None:
                    await leave.wait()
                    break  # leaving the block closes the connection: the client is gone
    return events


@pytest.mark.parametrize("base_http", [False, True], ids=["pure-asgi", "with-BaseHTTPMiddleware"])
async def test_a_burst_with_clients_leaving_returns_everything_to_zero(base_http: bool) -> None:
    httpx2 = require("httpx2", "pip install 'boundedgate[test]'")
    openai = require("openai", "pip install 'boundedgate[test]'")
    with served(_service(base_http), limit=60) as server:
        parts: Parts = server.parts
        gate, provider = parts.gate, parts.provider
        async with (
            httpx2.AsyncClient(timeout=WAIT) as http,
            openai.AsyncOpenAI(
                base_url=f"{server.url}/v1", api_key="test", max_retries=0, timeout=WAIT
            ) as sdk,
        ):
            # Four streams run (the provider holds them after their first delta), four queue.
            hang_up = asyncio.Event()
            runners = [
                asyncio.create_task(_stream_with_httpx(http, server.url, leave=hang_up if i < 2 else None))
                for i in range(4)
            ]
            await server.until(lambda: provider.streaming == 4, timeout=WAIT, what="four provider streams")

            async def sdk_stream() -> str:
                stream = await sdk.chat.completions.create(model="m", messages=MESSAGES, stream=True)
                parts_ = [c.choices[0].delta.content or "" async for c in stream if c.choices]
                return "".join(parts_)

            leaving = [asyncio.create_task(_stream_with_httpx(http, server.url)) for _ in range(2)]
            staying = [asyncio.create_task(sdk_stream()) for _ in range(2)]
            await server.until(lambda: gate.waiting == 4, timeout=WAIT, what="four requests queued")

            # Two more: refused at once, as the openai SDK's typed error with our code.
            for _ in range(2):
                with pytest.raises(openai.InternalServerError) as refused:
                    await sdk.chat.completions.create(model="m", messages=MESSAGES, stream=True)
                assert refused.value.status_code == 503
                assert refused.value.code == "queue_full"
                assert refused.value.response.headers["retry-after"] == "1"  # no pace yet: the fallback
                assert refused.value.response.headers["cache-control"] == "no-store"
            assert await server.call(lambda: len(provider.served)) == 4

            # Two queued clients leave: they leave the queue, and never cost a provider call.
            for task in leaving:
                task.cancel()
            await asyncio.gather(*leaving, return_exceptions=True)
            await server.until(lambda: gate.waiting == 2, timeout=WAIT, what="the queue down to two")
            # Two running clients hang up mid-stream: their slots go to the two still queued.
            hang_up.set()
            assert [len(events) for events in await asyncio.gather(*runners[:2])] == [1, 1]

            def settled() -> bool:  # the leavers' streams ended at the provider, the two new ones held
                live = [s for s in provider.served if s.ended is None]
                return (
                    gate.waiting == 0
                    and len(provider.served) == 6
                    and len(live) == 4
                    and all(s.sent for s in live)
                )

            await server.until(
                settled, timeout=WAIT, what="the queued two streaming in the slots the leavers freed"
            )
            assert await server.call(lambda: len(provider.served)) == 6  # never for a client that left
            assert await server.call(lambda: (gate.running, provider.streaming)) == (4, 4)

            await server.call(provider.release)
            finished = await asyncio.gather(*runners[2:])
            assert all(events[-1] == "[DONE]" for events in finished)
            assert await asyncio.gather(*staying) == ["tok0 tok1 tok2 "] * 2
            await server.until(
                lambda: (gate.running, gate.waiting, provider.streaming) == (0, 0, 0),
                timeout=WAIT,
                what="everything back to zero",
            )
            stats = await server.call(gate.stats)
            ended = sorted(s.ended or "" for s in await server.call(lambda: list(provider.served)))
            samples = await server.call(lambda: list(parts.samples))

    assert (stats.completed, stats.aborted, stats.disconnected, stats.rejected) == (4, 2, 2, 2)
    assert (stats.failed, stats.leaked, stats.cancelled, stats.late) == (0, 0, 0, 0)
    assert ended == ["client_gone", "client_gone", "eof", "eof", "eof", "eof"]
    assert len(samples) > 10
    # At every sample the provider served no stream the gate did not count as running (the gate
    # may count one a moment before the SDK reaches the provider, never after its stream ended:
    # a slot comes back only once the route's provider stream is closed); at the settled points
    # above the two were equal.
    assert all(streams <= running for running, _, streams in samples), samples
    assert max(streams for _, _, streams in samples) == RUNNING
    assert max(running for running, _, _ in samples) == RUNNING
    assert max(waiting for _, waiting, _ in samples) == WAITING


async def test_the_limits_document_and_a_refusal_with_curl_like_eyes() -> None:
    httpx2 = require("httpx2", "pip install 'boundedgate[test]'")
    require("fastapi", "pip install 'boundedgate[test]'")
    from boundedgate.asgi import GateMiddleware, limits_app

    gate = BoundedGate(max_running=1, max_waiting=None, name="chat")

    @contextlib.asynccontextmanager
    async def build() -> AsyncIterator[tuple[Any, None]]:
        async def app(scope: Any, receive: Any, send: Any) -> None:
            if scope["path"] == "/limits":
                await limits_app({"chat": gate})(scope, receive, send)
                return
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

        yield GateMiddleware(app, gate=gate, exempt=["/limits"], ratelimit_headers=True), None

    with served(build, limit=30) as server:
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            limits = await http.get(f"{server.url}/limits")
            answer = await http.get(f"{server.url}/")
    assert limits.status_code == 200
    assert limits.headers["cache-control"] == "max-age=60"
    assert json.loads(limits.content) == {
        "limits": {
            "chat": {
                "max_running": 1,
                "max_waiting": None,
                "max_pending": None,
                "rate_limits": [],
                "per_key": False,
            }
        }
    }
    assert answer.text == "ok"
    assert answer.headers["ratelimit-policy"] == '"chat";q=1;qu="concurrency"'
    assert answer.headers["ratelimit"] == '"chat";r=0'


async def test_a_response_ending_past_its_deadline_is_sent_whole_over_a_real_connection() -> None:
    # Before the middleware, Late raised inside a started 200 left curl with a truncated chunked
    # body (exit 18). Here the route streams for 0.3 s through its own gated stream and behind the
    # middleware, both with a deadline of 0.1 s: the client reads every byte, and both count late.
    httpx2 = require("httpx2", "pip install 'boundedgate[test]'")
    require("starlette", "pip install 'boundedgate[test]'")
    from starlette.applications import Starlette
    from starlette.routing import Route

    from boundedgate.asgi import GatedStreamingResponse, GateMiddleware

    edge = BoundedGate(max_running=1, max_waiting=0, name="edge")
    provider = BoundedGate(max_running=1, max_waiting=0, name="provider")

    async def tokens() -> AsyncIterator[str]:
        for i in range(3):
            await asyncio.sleep(0.1)
            yield f"data: tok{i}\n\n"

    async def chat(request: Any) -> Any:
        return GatedStreamingResponse(
            await provider.stream(tokens, timeout=0.1), media_type="text/event-stream"
        )

    @contextlib.asynccontextmanager
    async def build() -> AsyncIterator[tuple[Any, None]]:
        yield GateMiddleware(Starlette(routes=[Route("/chat", chat)]), gate=edge, timeout=0.1), None

    with served(build, limit=30) as server:
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            answer = await http.get(f"{server.url}/chat")
        await server.until(lambda: edge.running == provider.running == 0, timeout=WAIT, what="both released")
        late = await server.call(lambda: (edge.stats().late, provider.stats().late))
    assert answer.status_code == 200
    assert answer.text == "data: tok0\n\ndata: tok1\n\ndata: tok2\n\n"
    assert late == (1, 1)
