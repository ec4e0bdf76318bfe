"""The real openai and anthropic SDKs, on an httpx client whose transport is a GatedTransport."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import httpx2
import openai

from boundedgate import OUTCOMES, BoundedGate
from boundedgate.httpx import GatedTransport
from tests.http_client.provider import LimitsProvider

MESSAGES: Any = [{"role": "user", "content": "hi"}]

#: (SDK, httpx flavour): anthropic 2.15 refuses a legacy httpx client, openai takes both.
COMBOS = ["openai-httpx2", "openai-httpx", "anthropic-httpx2"]
SDKS = ["openai-httpx2", "anthropic-httpx2"]


class Sdk:
    """One SDK on one httpx flavour, through ``transport``, used the same way by every test."""

    def __init__(
        self, combo: str, provider: LimitsProvider, transport: GatedTransport, **options: Any
    ) -> None:
        self.name, _, flavour = combo.partition("-")
        self.transport = transport
        http = (httpx2 if flavour == "httpx2" else httpx).AsyncClient(transport=transport, **options)
        if self.name == "openai":
            self.client: Any = openai.AsyncOpenAI(
                base_url=provider.openai_url, api_key="test", max_retries=0, http_client=http
            )
        else:
            self.client = anthropic.AsyncAnthropic(
                base_url=provider.anthropic_url, api_key="test", max_retries=0, http_client=http
            )

    def with_retries(self, retries: int) -> Any:
        return self.client.with_options(max_retries=retries)

    async def stream(self, fake: str = "", retries: int = 0) -> Any:
        """``create(stream=True)``, asking for usage in the last event: the SDK's stream."""
        headers = {"x-fake": fake} if fake else {}
        client = self.with_retries(retries)
        if self.name == "openai":
            return await client.chat.completions.create(
                model="m",
                messages=MESSAGES,
                stream=True,
                stream_options={"include_usage": True},
                extra_headers=headers,
            )
        return await client.messages.create(
            model="m", max_tokens=16, messages=MESSAGES, stream=True, extra_headers=headers
        )

    async def plain(self, fake: str = "", retries: int = 0, model: str = "m") -> Any:
        """A non-streamed call: the SDK's parsed answer."""
        headers = {"x-fake": fake} if fake else {}
        client = self.with_retries(retries)
        if self.name == "openai":
            return await client.chat.completions.create(model=model, messages=MESSAGES, extra_headers=headers)
        return await client.messages.create(
            model=model, max_tokens=16, messages=MESSAGES, extra_headers=headers
        )

    def text(self, item: Any) -> str:
        if self.name == "openai":
            return item.choices[0].delta.content or "" if item.choices else ""
        if item.type == "content_block_delta":
            return str(item.delta.text)
        return ""

    @property
    def unavailable(self) -> type[Exception]:
        """The SDK's error for a 503."""
        return openai.InternalServerError if self.name == "openai" else anthropic.ServiceUnavailableError

    @property
    def rate_limited(self) -> type[Exception]:
        """The SDK's error for a 429."""
        return openai.RateLimitError if self.name == "openai" else anthropic.RateLimitError

    def code(self, error: Any) -> str:
        """The error code the SDK parsed from a refusal's body."""
        if self.name == "openai":
            return str(error.code)
        return str(error.body["error"]["type"])

    async def aclose(self) -> None:
        await self.client.close()


def counted(gate: BoundedGate, **expected: int) -> None:
    """Assert the gate is idle and counted exactly ``expected`` (outcome name: count), else zero."""
    stats = gate.stats()
    assert (stats.running, stats.waiting) == (0, 0), stats
    for name in (o.name for o in OUTCOMES):
        assert getattr(stats, name) == expected.get(name, 0), (name, stats)
