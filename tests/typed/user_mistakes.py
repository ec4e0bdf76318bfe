"""User code with a mistake on every marked line: mypy --strict reports each one (tests/typed)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI

from boundedgate import BoundedGate, GateLimits, KeyedGate
from boundedgate.httpx import GatedTransport

gate = BoundedGate(max_running=4, max_waiting=8, name="llm")


async def anthropic_typos(client: AsyncAnthropic) -> None:
    async with gate.stream(lambda: client.messages.stream(model="m", max_tokens=64, messages=[])) as stream:
        _ = stream.text_strem  # error: a misspelt helper
        await stream.get_final_mesage()  # error: a misspelt helper
        await stream.get_final_completion()  # error: openai's helper, not anthropic's
        message = await stream.get_final_message()
        _ = message.stop_reasn  # error: a misspelt field of the SDK's own type


async def openai_typos(client: AsyncOpenAI) -> None:
    stream = await gate.stream(lambda: client.chat.completions.create(model="m", messages=[], stream=True))
    _ = stream.text_stream  # error: anthropic's helper, not on an openai chat stream
    _ = stream.respones  # error: a misspelt attribute
    async for chunk in stream:
        _ = chunk.choises  # error: a misspelt field of the chunk


async def tokens() -> AsyncIterator[str]:
    yield "a"


async def plain_typos() -> None:
    stream = await gate.stream(tokens)
    async for token in stream:
        token.uper()  # error: the items are str
    await stream.get_final_message()  # error: an async generator has no helpers


tenants = KeyedGate(max_running=5, max_waiting=50, name="tenant")
models = KeyedGate(max_running=8, max_waiting=20, overrides={"gpt-5.5": GateLimits(2, 4)})


async def keyed_typos() -> None:
    async with tenants.admit(["acme"]):  # error: a list is not hashable, so not a key
        pass
    async with models.admit(5):  # error: this gate's keys are str, as its overrides say
        pass


def synchronous_client() -> httpx2.Client:
    return httpx2.Client(transport=GatedTransport(gate))  # error: an async transport, a sync client
