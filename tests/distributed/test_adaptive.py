"""RedisGate's adaptive controller: N processes sharing one cluster gate behave as one controller.

Processes are simulated by RedisGate objects with clients of their own (each a distinct agent in
Redis). Every test runs in real time against the real redis-server.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator

import httpx2
import pytest
import redis.asyncio

from boundedgate import Adaptive, QueueFull
from boundedgate._core import MAX_PAUSE
from boundedgate.httpx import GatedTransport, follow_provider
from boundedgate.redis import RedisGate
from boundedgate.redis._layout import gate_keys

from .helpers import cluster, make_gate, wait_until
from .servers import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]


@pytest.fixture
async def clients(redis_server: RedisServer) -> AsyncIterator[list[redis.asyncio.Redis]]:
    own = [redis.asyncio.Redis.from_url(redis_server.url) for _ in range(3)]
    try:
        yield own
    finally:
        for client in own:
            await client.aclose()


def _gates(clients: list[redis.asyncio.Redis], name: str, c: int, settings: Adaptive) -> list[RedisGate]:
    return [make_gate(client, name, c, 50, adaptive=settings) for client in clients]


async def test_an_overload_burst_seen_by_three_processes_costs_one_cut(
    clients: list[redis.asyncio.Redis], name: str
) -> None:
    gates = _gates(clients, name, 20, Adaptive(floor=2, window=30.0))
    try:
        for _ in range(5):  # fifteen 529s of one episode, from three processes at once
            await asyncio.gather(*(gate.signal("overloaded") for gate in gates))
        view = await cluster(clients[0], name)
        assert view.max_running == 18  # 20 x 0.9, once
        assert (view.counters["cuts"], view.counters["suppressed"]) == (1, 14)
        assert view.counters["limit_changes"] == 1
        assert [gate.max_running for gate in gates] == [18, 18, 18]
        controllers = [gate.controller for gate in gates if gate.controller is not None]
        assert [c.limit for c in controllers] == [18, 18, 18]
        assert sum(c.cuts for c in controllers) == 1
        assert sum(c.suppressed for c in controllers) == 14
    finally:
        for gate in gates:
            await gate.aclose()


async def test_a_later_episode_cuts_again_once_the_window_has_passed(
    clients: list[redis.asyncio.Redis], name: str
) -> None:
    gates = _gates(clients, name, 10, Adaptive(floor=2, window=0.3))
    try:
        await asyncio.gather(*(gate.signal("overloaded") for gate in gates))
        await asyncio.sleep(0.4)
        await asyncio.gather(*(gate.signal("overloaded") for gate in gates))
        view = await cluster(clients[0], name)
        assert view.max_running == 8  # 10 -> 9 -> 8: one cut per window
        assert (view.counters["cuts"], view.counters["suppressed"]) == (2, 4)
    finally:
        for gate in gates:
            await gate.aclose()


async def test_a_rate_limit_pause_from_one_process_holds_the_starts_of_another(
    clients: list[redis.asyncio.Redis], name: str
) -> None:
    mine, theirs = _gates(clients[:2], name, 4, Adaptive())
    try:
        await mine.signal("rate_limited", retry_after=1.0)
        arrived = time.monotonic()
        permit = theirs.admit(timeout=10)
        entering = asyncio.create_task(permit.__aenter__())
        await asyncio.sleep(0.5)
        assert not entering.done()  # a slot is free, but the cluster is paused
        assert (await cluster(clients[0], name)).waiting == 1
        await asyncio.wait_for(entering, 5)
        waited = time.monotonic() - arrived
        assert 1.0 - 0.05 <= waited <= 1.0 + 0.1 + 1.0  # the reset, then within a poll (0.1 s) + slack
        permit.release()
        view = await cluster(clients[0], name)
        assert view.counters["pauses"] == 1
    finally:
        for gate in (mine, theirs):
            await gate.aclose()


async def test_rate_limit_signals_never_lower_C(clients: list[redis.asyncio.Redis], name: str) -> None:
    gates = _gates(clients, name, 6, Adaptive(floor=1))
    try:
        for _ in range(4):
            await asyncio.gather(*(gate.signal("rate_limited", retry_after=0.05) for gate in gates))
        await asyncio.gather(*(gate.signal("ignored") for gate in gates))
        view = await cluster(clients[0], name)
        assert view.counters["pauses"] == 12
        assert view.counters.get("cuts", 0) == view.counters.get("limit_changes", 0) == 0
        assert [gate.max_running for gate in gates] == [6, 6, 6]
        assert [gate.controller.limit for gate in gates if gate.controller is not None] == [6, 6, 6]
        await asyncio.sleep(0.1)
        async with gates[0].admit(timeout=5):  # the pause is over: starts at once
            pass
    finally:
        for gate in gates:
            await gate.aclose()


async def test_growth_needs_the_cluster_full_and_is_capped_by_its_peak_in_flight(
    clients: list[redis.asyncio.Redis], name: str
) -> None:
    # Two processes each run one request at a time: neither alone fills C=2, the cluster does, so
    # C grows; by increase=5 it would reach 7, but never beyond twice the cluster's peak in flight
    # (2): C=4. Then the limit no longer binds (2 in flight < 4), and C stays.
    settings = Adaptive(window=0.1, min_samples=2, increase=5.0, max_limit_factor=2.0, ceiling=50)
    gates = _gates(clients[:2], name, 2, settings)
    try:

        async def one_at_a_time(gate: RedisGate, stop: float) -> None:
            while time.monotonic() < stop:
                async with gate.admit(timeout=5):
                    await asyncio.sleep(0.02)

        stop = time.monotonic() + 2.0
        await asyncio.gather(*(one_at_a_time(gate, stop) for gate in gates))
        await asyncio.sleep(0.2)  # proposals in flight land
        view = await cluster(clients[0], name)
        assert (view.counters["grown"], view.counters["peak_running"]) == (1, 2)
        assert view.max_running == 4
        assert [gate.max_running for gate in gates] == [4, 4]
    finally:
        for gate in gates:
            await gate.aclose()


async def test_follow_provider_drives_a_redis_gate_through_the_transport(
    clients: list[redis.asyncio.Redis], name: str
) -> None:
    answers = iter([529, 529, 429, 200])

    def provider(request: httpx2.Request) -> httpx2.Response:
        status = next(answers)
        headers = {"retry-after": "1"} if status == 429 else {}
        return httpx2.Response(status, headers=headers)

    gate = make_gate(clients[0], name, 10, 50, adaptive=Adaptive(window=30.0))
    try:
        transport = GatedTransport(
            gate, on_provider_signal=follow_provider(gate), transport=httpx2.MockTransport(provider)
        )
        async with httpx2.AsyncClient(transport=transport, base_url="http://provider") as http:
            for _ in range(3):
                await http.get("/")

        async def told() -> bool:
            counters = (await cluster(clients[0], name)).counters
            return counters.get("pauses", 0) == 1 and counters.get("cuts", 0) == 1

        await wait_until(told, 5, "the cut and the pause in Redis")
        view = await cluster(clients[0], name)
        assert (view.max_running, view.counters["suppressed"]) == (9, 1)
        assert gate.controller is not None
        assert gate.controller.limit == 9
    finally:
        await gate.aclose()


async def test_a_stream_is_sampled_by_its_time_to_first_item(
    clients: list[redis.asyncio.Redis], name: str
) -> None:
    # Each stream gives its first item after 50 ms and its last a second later: the controller's
    # latency is the first (the provider's queueing and prefill), not the length of the output.
    # The bound below leaves a loaded machine ten times the first item's time, half the stream's.
    gate = make_gate(clients[0], name, 4, 10, adaptive=Adaptive(window=0.01, min_samples=2))
    try:

        async def closed() -> bool:
            return gate.controller is not None and gate.controller.windows >= 1

        # A window closes at a sample once it spans a recent run time; on a loaded machine the
        # first run can be slower than the second, so two samples may not span it yet: stream on.
        for _ in range(8):
            stream = await gate.stream(_first_soon_then_slow, timeout=30)
            async for _item in stream:
                pass
            if await closed():
                break
        await wait_until(closed, 5, "a window closed")
        assert gate.controller is not None
        assert gate.controller.baseline is not None
        assert 0.04 <= gate.controller.baseline < 0.5
    finally:
        await gate.aclose()


async def _first_soon_then_slow() -> AsyncIterator[int]:
    """A stream whose first item comes after 50 ms, and each of the five others 0.2 s later."""
    await asyncio.sleep(0.05)
    yield 0
    for item in range(1, 6):
        await asyncio.sleep(0.2)
        yield item


async def _pause_left(client: redis.asyncio.Redis, name: str) -> float:
    """Seconds of the cluster's pause still to run, read from its state in Redis (0: not paused)."""
    until = await client.hget(gate_keys(name)[0], "pause")
    seconds, micros = await client.time()
    now_ms = seconds * 1000 + micros // 1000
    return 0.0 if until is None else max(0.0, (float(until) - now_ms) / 1000)


@pytest.mark.parametrize("seconds", [math.inf, math.nan, -1.0])
async def test_a_pause_without_an_end_is_refused_and_a_providers_is_capped(
    clients: list[redis.asyncio.Redis], name: str, seconds: float
) -> None:
    gate = make_gate(clients[0], name, 2, 5, adaptive=Adaptive())
    try:
        with pytest.raises(ValueError, match=r"^seconds must be a finite number >= 0"):
            await gate.pause(seconds)
        with pytest.raises(ValueError, match=r"^retry_after must be a finite number >= 0"):
            await gate.signal("rate_limited", retry_after=seconds)
        assert await _pause_left(clients[0], name) == 0.0
        async with gate.admit(timeout=5):  # not paused
            pass
        await gate.signal("rate_limited", retry_after=1e15)  # Retry-After: 1e15
        assert 290 < await _pause_left(clients[0], name) <= MAX_PAUSE
        await gate.pause(0)
        other = make_gate(clients[1], name + "-capped", 2, 5)
        try:
            await other.signal("rate_limited", retry_after=1e15, max_pause=0.2)
            assert 0 < await _pause_left(clients[1], name + "-capped") <= 0.2
            await asyncio.sleep(0.25)
            async with other.admit(timeout=5):  # the capped pause is over
                pass
        finally:
            await other.aclose()
    finally:
        await gate.aclose()


async def test_a_refusal_during_a_cluster_pause_says_when_it_ends(
    clients: list[redis.asyncio.Redis], name: str
) -> None:
    mine, theirs = (make_gate(client, name, 1, 0) for client in clients[:2])
    try:
        await mine.pause(30)
        with pytest.raises(QueueFull) as full:  # another process, paused by the cluster
            await theirs.try_admit(timeout=5)
        assert full.value.retry_after is not None
        assert 29 <= full.value.retry_after <= 30
        assert full.value.headers() == {"Retry-After": "30"}
    finally:
        for gate in (mine, theirs):
            await gate.aclose()


async def test_an_overload_after_set_limits_cuts_the_clusters_C_in_force(
    clients: list[redis.asyncio.Redis], name: str
) -> None:
    mine, theirs = _gates(clients[:2], name, 20, Adaptive(floor=1, window=30.0))
    try:
        await mine.signal("overloaded")  # 20 -> 18, everywhere
        await mine.set_limits(max_running=4)
        assert mine.controller is not None
        assert mine.controller.limit == 4
        await theirs.signal("overloaded")  # within the window: suppressed, whoever hears it
        assert (await cluster(clients[0], name)).max_running == 4
        assert theirs.controller is not None
        assert theirs.controller.limit == 4  # the reply brought the C in force
        await mine.set_limits(max_running=10)
        fresh = make_gate(clients[2], name, 20, 50, adaptive=Adaptive(floor=1, window=0.001))
        try:
            await asyncio.sleep(0.01)
            await fresh.signal("overloaded")  # a window of 1 ms: a cut, of the cluster's C
            assert (await cluster(clients[0], name)).max_running == 9
        finally:
            await fresh.aclose()
    finally:
        for gate in (mine, theirs):
            await gate.aclose()
