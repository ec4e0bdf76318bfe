"""User code over the SDKs' streams through a gate, and keyed gates: mypy --strict accepts it all."""

from __future__ import annotations

from collections.abc import AsyncIterator, Hashable
from typing import assert_type

import httpx
import httpx2
from anthropic import AsyncAnthropic
from anthropic.lib.streaming import AsyncMessageStream
from anthropic.types import ParsedMessage
from openai import AsyncOpenAI, AsyncStream
from openai.lib.streaming.chat import AsyncChatCompletionStream
from openai.types.chat import ChatCompletionChunk, ParsedChatCompletion

from boundedgate import BoundedGate, GatedStream, GateLimits, KeyedGate
from boundedgate.httpx import GatedTransport

gate = BoundedGate(max_running=4, max_waiting=8, name="llm")


async def anthropic_helpers(client: AsyncAnthropic) -> str:
    async with gate.stream(
        lambda: client.messages.stream(model="claude-sonnet-5-5", max_tokens=64, messages=[])
    ) as stream:
        assert_type(stream, GatedStream[AsyncMessageStream[None]])
        assert_type(stream.text_stream, AsyncIterator[str])
        assert_type(await stream.until_done(), None)
        assert_type(await stream.get_final_message(), ParsedMessage[None])
        assert_type(await stream.get_final_text(), str)
        assert_type(stream.response, httpx2.Response)
        return "".join([text async for text in stream.text_stream])


async def openai_chunks(client: AsyncOpenAI) -> list[str]:
    stream = await gate.stream(
        lambda: client.chat.completions.create(model="gpt-5.5", messages=[], stream=True)
    )
    assert_type(stream, GatedStream[AsyncStream[ChatCompletionChunk]])
    assert_type(stream.response, httpx2.Response)
    parts = []
    async with stream:
        async for chunk in stream:
            assert_type(chunk, ChatCompletionChunk)
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
    return parts


async def openai_helper_stream(client: AsyncOpenAI) -> None:
    async with gate.admit(timeout=30) as permit:
        manager = client.chat.completions.stream(model="gpt-5.5", messages=[])
        raw = await manager.__aenter__()
        stream = permit.hand_to(raw)
    assert_type(stream, GatedStream[AsyncChatCompletionStream[None]])
    assert_type(await stream.until_done(), GatedStream[AsyncChatCompletionStream[None]])
    assert_type(await stream.get_final_completion(), ParsedChatCompletion[None])


async def tokens() -> AsyncIterator[str]:
    yield "a"


async def any_async_iterator() -> list[str]:
    stream = await gate.stream(tokens)
    return [token async for token in stream]


# A keyed gate needs no annotation: its keys are any hashable, or the overrides' key type.
tenants = KeyedGate(max_running=5, max_waiting=50, name="tenant")
assert_type(tenants, KeyedGate[Hashable])
models = KeyedGate(max_running=8, max_waiting=20, overrides={"gpt-5.5": GateLimits(2, 4)})
assert_type(models, KeyedGate[str])


async def keyed(tenant: str) -> None:
    async with tenants.admit(tenant, timeout=30), models.admit("gpt-5.5"):
        pass


def gated_clients() -> tuple[AsyncOpenAI, AsyncAnthropic, httpx.AsyncClient, httpx2.AsyncClient]:
    """docs/http.md's clients: a GatedTransport is the transport of an httpx2 or a legacy httpx client."""
    openai = AsyncOpenAI(http_client=httpx2.AsyncClient(transport=GatedTransport(gate)))
    anthropic = AsyncAnthropic(http_client=httpx2.AsyncClient(transport=GatedTransport(gate)))
    legacy = httpx.AsyncClient(transport=GatedTransport(gate, httpx.AsyncHTTPTransport()))
    mounted = httpx2.AsyncClient(mounts={"https://api.openai.com": GatedTransport(gate)})
    return openai, anthropic, legacy, mounted
