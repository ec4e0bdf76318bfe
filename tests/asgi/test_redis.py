"""GateMiddleware over a cluster gate in a real Redis: the published counts are the cluster's.

Real time (looptime off), as every Redis test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio

from boundedgate.asgi import GateMiddleware, limits_document
from tests.asgi.harness import Client, serve
from tests.distributed.conftest import client, name, redis_server, server_binary
from tests.distributed.helpers import make_gate, settles_empty

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]

__all__ = ("client", "name", "redis_server", "server_binary")  # the fixtures, shared with tests/distributed

WAIT = 10.0


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait (real time, at most WAIT s) until ``condition`` holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not condition():
        if loop.time() > deadline:
            pytest.fail(f"not within {WAIT} s: {what}")
        await asyncio.sleep(0.005)


# -- the published counts are the cluster's -----------------------------------------------------


async def _ok(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def test_ratelimit_headers_and_the_live_limits_count_every_process(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with make_gate(client, name, 3, 0) as one, make_gate(client, name, 3, 0) as other:
        held = [await one.try_admit() for _ in range(2)]  # one process holds two of the three slots
        try:
            answer = Client()
            await serve(GateMiddleware(_ok, gate=other, ratelimit_headers=True), answer)
            # The other's request took the last one while it ran: no slot was free, cluster-wide.
            assert answer.headers["ratelimit"] == f'"{name}";r=0'

            def live() -> tuple[int, int]:
                counts = limits_document({"llm": other}, live=True)["limits"]["llm"]
                return counts["running"], counts["waiting"]

            assert live() == (3, 0)
            # Its own release's reply brings the cluster's counts: the two the first one holds.
            await until(lambda: live() == (2, 0), "the other's release answered")
            assert (other.running, one.running) == (0, 2)  # what each process holds itself
        finally:
            for permit in held:
                await permit.__aexit__(None, None, None)
        await settles_empty(client, name)
