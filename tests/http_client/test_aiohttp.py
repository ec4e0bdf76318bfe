"""gate_middleware on a real aiohttp ClientSession, over loopback to the fake provider, in virtual time."""

from __future__ import annotations

import asyncio
import json
from contextlib import AbstractAsyncContextManager

import aiohttp
import pytest

from boundedgate import QueueFull
from boundedgate.aiohttp import gate_middleware
from boundedgate.httpx import Exchange, ProviderSignal, gate_call
from tests.helpers import checked_gate
from tests.http_client.clients import counted
from tests.http_client.provider import LimitsProvider

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _post(
    session: aiohttp.ClientSession, provider: LimitsProvider, fake: str = "", stream: bool = True
) -> AbstractAsyncContextManager[aiohttp.ClientResponse]:
    return session.post(
        f"{provider.openai_url}/chat/completions", json={**BODY, "stream": stream}, headers={"x-fake": fake}
    )


async def test_the_slot_is_held_while_the_body_streams(provider: LimitsProvider) -> None:
    gate = checked_gate(1, 0, name="llm")
    exchanges: list[Exchange] = []
    signals: list[ProviderSignal] = []
    middleware = gate_middleware(gate, on_exchange=exchanges.append, on_provider_signal=signals.append)
    async with aiohttp.ClientSession(middlewares=(middleware,)) as session:
        async with _post(session, provider, "chunks=3,delay=1") as response:
            assert gate.running == 1
            with pytest.raises(QueueFull):  # refused before anything is sent
                async with _post(session, provider):
                    pass
            lines = [line async for line in response.content if line.startswith(b"data:")]
            assert gate.running == 0  # at the end of the body, inside the block
        assert lines[-1] == b"data: [DONE]\n"
    assert len(provider.served) == 1
    counted(gate, completed=1, rejected=1)
    assert [(e.status, e.outcome) for e in exchanges] == [(200, "completed")]
    assert signals[0].kind == "quota"


@pytest.mark.parametrize("leave", ["async with", "release", "close"])
async def test_leaving_mid_body_releases(provider: LimitsProvider, leave: str) -> None:
    gate = checked_gate(1, 0, name="llm")
    async with aiohttp.ClientSession(middlewares=(gate_middleware(gate),)) as session:
        async with _post(session, provider, "hold_after=1") as response:
            await response.content.readline()
            assert gate.running == 1
            if leave == "release":
                response.release()
                assert gate.running == 0
            elif leave == "close":
                response.close()
                assert gate.running == 0
        assert gate.running == 0
    counted(gate, completed=1)


async def test_a_plain_answer_and_a_failed_request(provider: LimitsProvider) -> None:
    gate = checked_gate(1, 0, name="llm")
    async with aiohttp.ClientSession(middlewares=(gate_middleware(gate),)) as session:
        async with _post(session, provider, stream=False) as response:
            answer = json.loads(await response.read())
        assert answer["usage"]["total_tokens"] == 8
        with pytest.raises(aiohttp.ClientConnectionError):
            await session.get("http://127.0.0.1:1/")
    counted(gate, completed=1, failed=1)


async def test_one_deadline_across_requests_of_a_call(provider: LimitsProvider) -> None:
    gate = checked_gate(1, 5, name="llm")
    async with (
        aiohttp.ClientSession(middlewares=(gate_middleware(gate),)) as session,
        gate_call(timeout=1.5),
        _post(session, provider, "chunks=2,delay=1") as response,
    ):
        await response.read()  # ends at 3 s: after the call's deadline
    counted(gate, late=1)
    assert asyncio.get_running_loop().time() >= 1.5


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_a_429_that_says_overloaded_is_an_overload(provider: LimitsProvider, api: str) -> None:
    gate = checked_gate(1, 0, name="llm")
    signals: list[ProviderSignal] = []
    middleware = gate_middleware(gate, on_provider_signal=signals.append)
    path = "/chat/completions" if api == "openai" else "/messages"
    url = f"{provider.openai_url}{path}"  # the provider answers by the path's end
    fake = {"x-fake": "overloaded=1,overloaded_status=429"}
    async with aiohttp.ClientSession(middlewares=(middleware,)) as session:
        async with session.post(url, json=BODY, headers=fake) as response:
            assert response.status == 429
            said = await response.json()  # read again, as the caller would
        quota = {"x-fake": "rate_limited=1"}
        async with session.post(url, json=BODY, headers=quota) as response:
            assert response.status == 429
    assert "overloaded" in json.dumps(said)
    assert [(s.kind, s.status) for s in signals] == [("overloaded", 429), ("rate_limited", 429)]
    counted(gate, failed=2)  # each 429 fails its call


async def test_a_provider_error_ends_the_request_failed(provider: LimitsProvider) -> None:
    gate = checked_gate(1, 0, name="llm")
    exchanges: list[Exchange] = []
    async with aiohttp.ClientSession(
        middlewares=(gate_middleware(gate, on_exchange=exchanges.append),)
    ) as session:
        url = f"{provider.openai_url}/messages"  # anthropic's API: its overload is a 529
        async with session.post(url, json=BODY, headers={"x-fake": "overloaded=1"}) as response:
            assert response.status == 529
            await response.read()
    counted(gate, failed=1)
    assert [(e.status, e.outcome) for e in exchanges] == [(529, "failed")]
