"""GateMiddleware over a cluster gate in a real Redis: hang-ups, stacked gates, the published counts.

Real time (looptime off), as every Redis test. The grant race is made deterministic by having the
client hang up from inside the grant's own callback, just before it is delivered: the middleware
then reads the hang-up in the very loop turn the waiter is woken with its slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis.asyncio

from boundedgate import KeyedGate, QueueFull, RateLimit
from boundedgate.asgi import GateMiddleware, limits_document
from boundedgate.redis import RedisGate, RedisPermit
from boundedgate.redis._process import ProcessSide
from boundedgate.redis._scripts import ADMIT
from tests.asgi.harness import Client, StreamingApp, serve
from tests.asgi.servers import require, served
from tests.distributed.conftest import client, name, redis_server, server_binary
from tests.distributed.helpers import make_gate, settles_empty
from tests.distributed.servers import RedisServer
from tests.fake_provider import Behaviour, fake_provider
from tests.helpers import checked_gate

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


async def hang_up_queued_inside(
    stacked: GateMiddleware, app: StreamingApp, queued: Callable[[], bool], outer_running: Callable[[], int]
) -> None:
    """A first request holds the app; a second, queued at the inner gate, hangs up; the first ends.

    Between the two, the outer gate holds the first request's slot alone: the one the second
    request took was given back unused when it left.
    """
    first = serve(stacked, Client())
    await until(lambda: app.entered == 1, "the first request in the app")
    leaving = Client()
    task = serve(stacked, leaving)
    await until(queued, "the second request queued at the inner gate")
    leaving.leave()
    await task
    assert outer_running() == 1
    app.release.set()
    await first


def hang_up_as_the_grant_arrives(monkeypatch: pytest.MonkeyPatch, leaving: Client) -> None:
    """``leaving`` hangs up in the callback that delivers its permit's grant, just before it does."""
    granted = RedisPermit._granted

    def leave_then_grant(permit: RedisPermit, token: Any, epoch: Any) -> None:
        leaving.leave()
        granted(permit, token, epoch)

    monkeypatch.setattr(RedisPermit, "_granted", leave_then_grant)


async def test_a_hang_up_in_the_turn_redis_grants_the_slot_never_reaches_the_app(
    client: redis.asyncio.Redis, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with make_gate(client, name, 1, 1) as gate:
        app = StreamingApp(chunks=1, pause=0)
        app.hold = True
        middleware = GateMiddleware(app, gate=gate)
        first = serve(middleware, Client())
        await until(lambda: app.entered == 1, "the first request in the app")
        queued = Client()
        hang_up_as_the_grant_arrives(monkeypatch, queued)
        task = serve(middleware, queued)
        await until(lambda: gate.waiting == 1, "the second request queued in Redis")
        app.release.set()  # the first ends: its release hands the slot to the second
        await first
        await task
        view = await settles_empty(client, name)
        stats = gate.stats()
    assert app.entered == 1  # the app (and the provider behind it) never saw the request that left
    assert queued.sent == []
    assert (stats.disconnected, stats.aborted, stats.cancelled, stats.completed) == (1, 0, 0, 1)
    assert (stats.admitted, stats.running, stats.waiting) == (1, 0, 0)
    assert view.counters["disconnected"] == 1
    assert view.counters["admitted"] == 1  # the slot it never used is not counted as a run


async def test_an_app_past_its_deadline_is_cut_and_the_cluster_counts_it(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with make_gate(client, name, 1, 0) as gate, make_gate(client, name, 1, 0) as elsewhere:
        cleaning, may_finish = asyncio.Event(), asyncio.Event()

        async def app(scope: Any, receive: Any, send: Any) -> None:
            try:
                await asyncio.sleep(WAIT * 10)  # the provider call
            finally:
                cleaning.set()
                await asyncio.shield(may_finish.wait())  # closing the provider's stream

        answered = Client()
        task = serve(GateMiddleware(app, gate=gate, timeout=0.2, on_deadline="cut"), answered)
        await until(cleaning.is_set, "the app cut at its deadline")
        with pytest.raises(QueueFull):  # the slot is held in Redis while the cut app cleans up
            await elsewhere.try_admit()
        may_finish.set()
        await task
        view = await settles_empty(client, name)
        stats = gate.stats()
    assert answered.status == 504
    assert answered.json()["code"] == "cut"
    assert (stats.cut, stats.failed, stats.late) == (1, 0, 0)
    assert (view.counters.get("cut"), view.counters.get("failed")) == (1, None)


async def test_a_hang_up_while_the_admission_is_on_its_way_to_redis_is_disconnected(
    client: redis.asyncio.Redis, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = asyncio.Event()
    run = ProcessSide.run

    async def admission_held_until_told(side: ProcessSide, script: Any, *args: Any) -> Any:
        if script is ADMIT:
            await answer.wait()
        return await run(side, script, *args)

    monkeypatch.setattr(ProcessSide, "run", admission_held_until_told)
    async with make_gate(client, name, 1, 1) as gate:
        app = StreamingApp(chunks=0)
        gone = Client()
        task = serve(GateMiddleware(app, gate=gate), gone)
        await until(lambda: bool(gate._side.waiters), "the admission on its way to Redis")
        gone.leave()
        await until(gone.incoming.empty, "the hang-up read while the admission is out")
        answer.set()  # then Redis grants it a slot, which it will never use
        await task
        view = await settles_empty(client, name)
        stats = gate.stats()
    assert app.entered == 0
    assert (stats.disconnected, stats.cancelled, stats.admitted) == (1, 0, 0)
    assert view.counters["disconnected"] == 1


async def test_stacked_over_a_redis_gate_a_hang_up_in_its_queue_is_disconnected_at_both(
    client: redis.asyncio.Redis, name: str
) -> None:
    outer = checked_gate(2, 0, name="tenant")
    async with make_gate(client, name, 1, 1) as inner:
        app = StreamingApp(chunks=1, pause=0)
        app.hold = True
        stacked = GateMiddleware(GateMiddleware(app, gate=inner), gate=outer)
        await hang_up_queued_inside(stacked, app, lambda: inner.waiting == 1, lambda: outer.running)
        view = await settles_empty(client, name)
        inner_stats, outer_stats = inner.stats(), outer.stats()
    assert app.entered == 1
    assert (inner_stats.disconnected, inner_stats.cancelled, inner_stats.completed) == (1, 0, 1)
    assert (outer_stats.disconnected, outer_stats.aborted, outer_stats.completed) == (1, 0, 1)
    assert view.counters["disconnected"] == 1


async def test_over_a_cluster_gate_s_fallback_a_hang_up_in_the_inner_queue_is_disconnected() -> None:
    # Redis is out of reach: the outer cluster gate admits through its fallback gate, whose slot
    # a request queued at the inner gate never used: its hang-up gives that slot back unused.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: nothing listens there
    dead = redis.asyncio.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5)
    fallback = checked_gate(2, 0, name="local")
    inner = checked_gate(1, 1, name="inner")
    try:
        async with RedisGate(dead, max_running=2, max_waiting=0, op_timeout=0.5, fallback=fallback) as outer:
            app = StreamingApp(chunks=1, pause=0)
            app.hold = True
            stacked = GateMiddleware(GateMiddleware(app, gate=inner), gate=outer)
            await hang_up_queued_inside(stacked, app, lambda: inner.waiting == 1, lambda: fallback.running)
    finally:
        await dead.aclose()
    stats = fallback.stats()
    assert (stats.disconnected, stats.aborted, stats.completed) == (1, 0, 1)
    assert outer.stats().fallbacks == 2


@pytest.mark.parametrize("chain", [False, True], ids=["stacked", "chain"])
async def test_a_tenant_gate_over_a_cluster_gate_in_uvicorn_counts_a_queued_hang_up_as_disconnected(
    redis_server: RedisServer, name: str, chain: bool
) -> None:
    # The tenant's gate and the cluster's, as two stacked middlewares or as one middleware's chain.
    httpx2 = require("httpx2", "pip install 'boundedgate[test]'")
    openai = require("openai", "pip install 'boundedgate[test]'")
    require("fastapi", "pip install 'boundedgate[test]'")
    from fastapi import FastAPI
    from starlette.responses import StreamingResponse

    @contextlib.asynccontextmanager
    async def build() -> AsyncIterator[tuple[Any, Any]]:
        async with (
            fake_provider(Behaviour(chunks=2, hold_after=1)) as provider,
            redis.asyncio.Redis.from_url(redis_server.url) as connection,
            make_gate(connection, name, 1, 1) as shared,
        ):
            tenants: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=0, name="tenant", keep_idle=4)
            upstream = openai.AsyncOpenAI(base_url=provider.openai_url, api_key="k", max_retries=0)
            app = FastAPI()

            @app.post("/chat")
            async def chat() -> Any:
                raw = await upstream.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}], stream=True
                )

                async def events() -> AsyncIterator[str]:
                    async with raw:
                        async for chunk in raw:
                            yield f"data: {chunk.model_dump_json()}\n\n"

                return StreamingResponse(events(), media_type="text/event-stream")

            def tenant(scope: Any) -> str:
                return str(dict(scope["headers"]).get(b"x-tenant", b"-").decode())

            if chain:
                app.add_middleware(GateMiddleware, gate=[(tenants, tenant), shared])
            else:
                app.add_middleware(GateMiddleware, gate=shared)
                app.add_middleware(GateMiddleware, gate=tenants, key=tenant)  # added last: outermost
            try:
                yield app, (tenants, shared, provider, connection)
            finally:
                await upstream.close()

    with served(build, limit=60) as server:
        tenants, shared, provider, _ = server.parts
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            headers = {"x-tenant": "a"}

            async def stream() -> bytes:
                async with http.stream("POST", f"{server.url}/chat", headers=headers) as response:
                    return bytes(await response.aread())

            first = asyncio.create_task(stream())
            await server.until(lambda: provider.streaming == 1, timeout=WAIT, what="the first stream")
            leaving = asyncio.create_task(stream())
            await server.until(lambda: shared.waiting == 1, timeout=WAIT, what="the second queued in Redis")
            leaving.cancel()  # the client hangs up while its request waits in the cluster's queue
            await asyncio.gather(leaving, return_exceptions=True)
            await server.until(lambda: shared.waiting == 0, timeout=WAIT, what="its place given up")
            await server.call(provider.release)
            await first
            await server.until(lambda: tenants.running == 0, timeout=WAIT, what="the tenant's slots back")
            tenant = await server.call(lambda: tenants.get("a").stats())
            stats = await server.call(shared.stats)
            served_streams = await server.call(lambda: len(provider.served))
    assert served_streams == 1  # the provider was never called for the client that left
    assert (tenant.disconnected, tenant.aborted, tenant.completed) == (1, 0, 1)
    assert (stats.disconnected, stats.cancelled, stats.aborted, stats.completed) == (1, 0, 0, 1)


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


async def test_ratelimit_headers_over_a_rate_limited_cluster_gate_show_its_concurrency_only(
    client: redis.asyncio.Redis, name: str
) -> None:
    # Its rate limits' balances live in Redis, not in this process's stats(): the headers show the
    # cluster's concurrency, and the limits document lists the rate limits, rather than failing.
    tpm = RateLimit.per_minute(1000, unit="tokens", name="tpm")
    async with RedisGate(client, max_running=3, max_waiting=0, name=name, rate_limits=[tpm]) as gate:
        answer = Client()
        await serve(GateMiddleware(_ok, gate=gate, ratelimit_headers=True), answer)
        assert answer.status == 200
        assert answer.headers["ratelimit"] == f'"{name}";r=2'
        assert [
            limit["name"] for limit in limits_document({"llm": gate})["limits"]["llm"]["rate_limits"]
        ] == ["tpm"]
        await settles_empty(client, name)
