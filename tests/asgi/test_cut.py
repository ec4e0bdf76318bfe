"""GateMiddleware(on_deadline="cut"): the app still running at its deadline is cut off (issue 29)."""

from __future__ import annotations

import asyncio

import pytest

from boundedgate import DeadlineCut
from boundedgate.asgi import GateMiddleware
from boundedgate.redis import RedisGate
from tests.asgi.harness import Client, Receive, Scope, Send, StreamingApp, serve
from tests.helpers import checked_gate


async def test_an_app_past_its_deadline_before_its_response_gets_a_504() -> None:
    gate = checked_gate(1, 0)
    stopped: list[float] = []
    loop = asyncio.get_running_loop()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await asyncio.sleep(60)  # the provider call
        finally:
            stopped.append(loop.time())

    client = Client()
    await serve(GateMiddleware(app, gate=gate, timeout=2, on_deadline="cut"), client)
    assert stopped == [2.0]
    assert client.status == 504
    assert client.json()["code"] == "cut"
    stats = gate.stats()
    assert (stats.cut, stats.failed, stats.late, gate.running) == (1, 0, 0, 0)


async def test_a_started_response_is_cut_short_and_the_server_hears_why() -> None:
    gate = checked_gate(1, 0)
    app = StreamingApp(chunks=10, pause=1)
    client = Client()
    with pytest.raises(DeadlineCut):
        await serve(GateMiddleware(app, gate=gate, timeout=2.5, on_deadline="cut"), client)
    assert client.status == 200
    assert not client.complete
    assert gate.stats().cut == 1


async def test_the_slot_is_held_while_the_cut_app_cleans_up() -> None:
    gate = checked_gate(1, 1)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await asyncio.sleep(60)
        finally:
            await asyncio.shield(asyncio.sleep(3))  # closing the provider's stream

    client = Client()
    task = serve(GateMiddleware(app, gate=gate, timeout=2, on_deadline="cut"), client)
    await asyncio.sleep(4)
    assert gate.running == 1  # cut at 2 s, cleaning up until 5 s
    await task
    assert client.status == 504
    assert (gate.running, gate.stats().cut) == (0, 1)


async def test_a_response_finished_in_time_is_completed() -> None:
    gate = checked_gate(1, 0)
    client = Client()
    await serve(
        GateMiddleware(StreamingApp(chunks=2, pause=0.5), gate=gate, timeout=5, on_deadline="cut"), client
    )
    assert client.complete
    assert (gate.stats().completed, gate.stats().cut) == (1, 0)


async def test_a_client_leaving_before_the_deadline_is_aborted_not_cut() -> None:
    gate = checked_gate(1, 0)
    client = Client()
    task = serve(
        GateMiddleware(StreamingApp(chunks=10, pause=1), gate=gate, timeout=5, on_deadline="cut"), client
    )
    await asyncio.sleep(1.5)
    client.leave()
    await task
    stats = gate.stats()
    assert (stats.aborted, stats.cut, stats.failed) == (1, 0, 0)


def test_the_option_is_checked_at_construction() -> None:
    gate = checked_gate(1, 0)
    with pytest.raises(ValueError, match="on_deadline must be 'late' or 'cut'"):
        GateMiddleware(StreamingApp(), gate=gate, timeout=1, on_deadline="stop")
    with pytest.raises(ValueError, match="needs a timeout"):
        GateMiddleware(StreamingApp(), gate=gate, on_deadline="cut")


def test_a_redis_gate_cuts_too() -> None:  # its requests cut: tests/asgi/test_redis.py
    redis_gate = RedisGate(None, max_running=1, max_waiting=0, name="cluster")
    GateMiddleware(StreamingApp(), gate=redis_gate, timeout=1, on_deadline="cut")
