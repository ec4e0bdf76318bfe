"""What an openai or anthropic SDK client of the service sees, over a real connection to uvicorn.

The service is a FastAPI app behind GateMiddleware that calls the fake provider through the real
SDKs; its clients are the real SDKs too, with their default retries (2). Real time (looptime
off): nothing here waits on a clock but the bounded waits themselves.

- A refusal of the gate is the SDK's typed error at once: one request, no retry (the middleware
  sends ``x-should-retry: false``), with our ``Retry-After``.
- The provider's own 429, 503 or 529 is not a 500: the middleware answers 429 or 503 with the
  provider's ``Retry-After``, which the SDK raises as its typed error, again without a retry.
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


@pytest.mark.parametrize(
    ("sdk", "provider_status", "status", "typed"),
    [
        ("openai", 429, 429, "RateLimitError"),
        ("openai", 503, 503, "InternalServerError"),
        ("anthropic", 429, 429, "RateLimitError"),
        ("anthropic", 529, 503, "InternalServerError"),
    ],
)
async def test_the_provider_s_own_refusal_reaches_the_sdk_client_with_the_provider_s_retry_after(
    sdk: str, provider_status: int, status: int, typed: str
) -> None:
    module = require(sdk, "pip install 'boundedgate[test]'")
    with served(_service(sdk), limit=60) as server:
        parts: Parts = server.parts
        fake = f"rate_limited=1,refuse_status={provider_status},retry_after_ms=2500"
        with pytest.raises(getattr(module, typed)) as caught:
            await _ask(sdk, server.url, fake)
        stats = await server.call(parts.gate.stats)
        served_by_provider = await server.call(lambda: [s.ended for s in parts.provider.served])
    assert served_by_provider == ["rate_limited"]  # the provider was asked once...
    assert (stats.arrived, stats.failed, stats.running) == (1, 1, 0)  # ...by one request: no retry
    error = caught.value
    assert error.status_code == status
    assert error.response.headers["retry-after"] == "3"  # the provider's 2.5 s, rounded up
    assert error.response.headers["x-should-retry"] == "false"
    if sdk == "openai":
        assert error.code == ("provider_rate_limited" if status == 429 else "provider_overloaded")
    else:
        assert error.body["error"]["type"] == ("rate_limit_error" if status == 429 else "overloaded_error")


async def test_without_provider_errors_the_provider_s_429_stays_the_app_s_exception() -> None:
    openai = require("openai", "pip install 'boundedgate[test]'")
    with (
        served(_service("openai", provider_errors=False), limit=60) as server,
        pytest.raises(openai.InternalServerError) as caught,
    ):
        await _ask("openai", server.url, "rate_limited=3,retry_after_ms=10")
    assert caught.value.status_code == 500  # FastAPI's own answer to an exception nobody handled
