"""GatedTransport(on_deadline="cut"): a request past its gate_call() deadline is cut off (issue 29)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import httpx2
import pytest

from boundedgate import DeadlineCut
from boundedgate.httpx import GatedTransport, gate_call
from boundedgate.redis import RedisGate
from tests.helpers import checked_gate
from tests.http_client.test_transport import Fed

FLAVOURS = [httpx2, httpx]


@pytest.fixture(params=FLAVOURS, ids=lambda module: module.__name__)
def flavour(request: pytest.FixtureRequest) -> Any:
    return request.param


class SlowHeaders:
    """An inner transport whose response headers take ``delay`` seconds; records when it stopped."""

    def __init__(self, flavour: Any, delay: float, clean_up: float = 0.0) -> None:
        self.flavour = flavour
        self.delay = delay
        self.clean_up = clean_up
        self.stopped: list[float] = []

    async def handle_async_request(self, request: Any) -> Any:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.sleep(self.delay)
        finally:
            if self.clean_up:
                await asyncio.shield(asyncio.sleep(self.clean_up))
            self.stopped.append(loop.time())
        return self.flavour.Response(200, request=request)

    async def aclose(self) -> None:
        pass


async def test_a_request_waiting_for_its_headers_at_the_deadline_is_cut(flavour: Any) -> None:
    gate = checked_gate(1, 1)
    inner = SlowHeaders(flavour, 60, clean_up=1)
    async with flavour.AsyncClient(transport=GatedTransport(gate, inner, on_deadline="cut")) as client:
        with pytest.raises(DeadlineCut):
            async with gate_call(timeout=2):
                await client.get("http://provider/")
    assert inner.stopped == [3.0]  # cut at 2 s, its clean-up held the slot to 3 s
    stats = gate.stats()
    assert (stats.cut, stats.failed, stats.running) == (1, 0, 0)


async def test_a_body_read_in_flight_at_the_deadline_is_cut(flavour: Any) -> None:
    gate = checked_gate(1, 0)
    fed = Fed(flavour, sent=[b"a"])
    transport = GatedTransport(gate, fed, on_deadline="cut")
    async with (
        flavour.AsyncClient(transport=transport) as client,
        gate_call(timeout=2),
        client.stream("GET", "http://provider/") as response,
    ):
        chunks = []
        with pytest.raises(DeadlineCut):
            async for chunk in response.aiter_raw():
                chunks.append(chunk)  # then the body waits for more, past the deadline
        assert chunks == [b"a"]
        assert asyncio.get_running_loop().time() == 2.0
    stats = gate.stats()
    assert (stats.cut, stats.failed, stats.running) == (1, 0, 0)


async def test_a_body_nobody_reads_at_the_deadline_is_closed_then_released(flavour: Any) -> None:
    gate = checked_gate(1, 0)
    fed = Fed(flavour, sent=[b"a"])
    transport = GatedTransport(gate, fed, on_deadline="cut")
    async with (
        flavour.AsyncClient(transport=transport) as client,
        gate_call(timeout=2),
        client.stream("GET", "http://provider/") as response,
    ):
        await asyncio.sleep(3)
        assert fed.bodies[0].closed
        assert gate.running == 0
        with pytest.raises(DeadlineCut):
            await response.aread()
    assert gate.stats().cut == 1


async def test_a_body_read_before_the_deadline_is_completed(flavour: Any) -> None:
    gate = checked_gate(1, 0)
    fed = Fed(flavour, sent=[b"a", None])
    async with flavour.AsyncClient(transport=GatedTransport(gate, fed, on_deadline="cut")) as client:
        async with gate_call(timeout=2):
            assert (await client.get("http://provider/")).content == b"a"
        await asyncio.sleep(5)
    stats = gate.stats()
    assert (stats.completed, stats.cut) == (1, 0)


def test_the_option_is_checked_when_made() -> None:
    gate = checked_gate(1, 0)
    with pytest.raises(ValueError, match="on_deadline must be 'late' or 'cut'"):
        GatedTransport(gate, on_deadline="stop")  # type: ignore[arg-type]
    redis_gate = RedisGate(None, max_running=1, max_waiting=0, name="cluster")
    GatedTransport(redis_gate, on_deadline="cut")  # a cluster gate cuts too
