"""What an openai or anthropic SDK client of the service sees, over a real connection to uvicorn.

The service is a FastAPI app behind GateMiddleware that calls the fake provider through the real
SDKs; its clients are the real SDKs too, with their default retries (2). Real time (looptime
off): nothing here waits on a clock but the bounded waits themselves.

- A refusal of the gate is the SDK's typed error at once: one request, no retry (the middleware
  sends ``x-should-retry: false``), with our ``Retry-After``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from boundedgate import BoundedGate
from tests.asgi.servers import require, served
from tests.fake_provider import FakeProvider, fake_provider

try:  # at module level, where FastAPI resolves the route's annotations
    from starlette.requests import Request
except ImportError:  # pragma: no cover
    Request = None  # type: ignore[assignment,misc]

pytestmark = [pytest.mark.http_server, pytest.mark.looptime(False)]

WAIT = 10.0
MESSAGES: Any = [{"role": "user", "content": "hi"}]


class Parts:
    def __init__(self, gate: BoundedGate, provider: FakeProvider) -> None:
        self.gate = gate
        self.provider = provider


def _service(refusal: str, **options: Any) -> Any:
    require("fastapi", "pip install 'boundedgate[test]'")
    openai = require("openai", "pip install 'boundedgate[test]'")
    anthropic = require("anthropic", "pip install 'boundedgate[test]'")
    from fastapi import FastAPI

    from boundedgate.asgi import GateMiddleware

    @contextlib.asynccontextmanager
    async def build() -> AsyncIterator[tuple[Any, Parts]]:
        async with fake_provider() as provider:
            gate = BoundedGate(max_running=2, max_waiting=0, name="llm")
            gpt = openai.AsyncOpenAI(base_url=provider.openai_url, api_key="k", max_retries=0)
            claude = anthropic.AsyncAnthropic(base_url=provider.anthropic_url, api_key="k", max_retries=0)
            app = FastAPI()

            @app.post("/v1/chat/completions")
            async def chat(request: Request) -> Any:
                asked = await request.json()
                fake = {"x-fake": request.headers.get("x-fake", "")}
                answer = await gpt.chat.completions.create(
                    model=asked["model"], messages=asked["messages"], extra_headers=fake
                )
                return answer.model_dump()

            @app.post("/v1/messages")
            async def messages(request: Request) -> Any:
                asked = await request.json()
                fake = {"x-fake": request.headers.get("x-fake", "")}
                answer = await claude.messages.create(
                    model=asked["model"], max_tokens=8, messages=asked["messages"], extra_headers=fake
                )
                return answer.model_dump()

            app.add_middleware(GateMiddleware, gate=gate, refusal=refusal, **options)
            try:
                yield app, Parts(gate, provider)
            finally:
                await gpt.close()
                await claude.close()

    return build


async def _ask(sdk: str, url: str, fake: str = "") -> Any:
    """One call of the SDK's client, default retries, against the service; returns the answer."""
    headers = {"x-fake": fake} if fake else {}
    if sdk == "openai":
        openai = require("openai", "pip install 'boundedgate[test]'")
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k", timeout=WAIT) as gpt:
            assert gpt.max_retries == 2
            return await gpt.chat.completions.create(model="m", messages=MESSAGES, extra_headers=headers)
    anthropic = require("anthropic", "pip install 'boundedgate[test]'")
    async with anthropic.AsyncAnthropic(base_url=url, api_key="k", timeout=WAIT) as claude:
        assert claude.max_retries == 2
        return await claude.messages.create(model="m", max_tokens=8, messages=MESSAGES, extra_headers=headers)


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
async def test_an_sdk_client_gets_the_refusal_as_its_typed_error_once_without_a_retry(sdk: str) -> None:
    openai = require("openai", "pip install 'boundedgate[test]'")
    anthropic = require("anthropic", "pip install 'boundedgate[test]'")
    with served(_service(sdk), limit=60) as server:
        parts: Parts = server.parts
        held = await server.call(lambda: [parts.gate.try_admit() for _ in range(2)])  # the gate is full
        try:
            expected = openai.InternalServerError if sdk == "openai" else anthropic.InternalServerError
            with pytest.raises(expected) as caught:
                await _ask(sdk, server.url)
        finally:
            for permit in held:
                await server.call(permit.release)
        stats = await server.call(parts.gate.stats)
    assert stats.rejected == 1  # one request reached the service: the SDK did not retry it
    error = caught.value
    assert error.status_code == 503
    assert error.response.headers["x-should-retry"] == "false"
    assert error.response.headers["retry-after"] == "1"
    if sdk == "openai":
        assert error.code == "queue_full"
    else:
        assert error.body["error"]["type"] == "overloaded_error"
