"""A client hanging up before the app ran: disconnected at every gate it waited in, the app never called.

Two stacked middlewares (a tenant's gate outside a shared one) and the race of a hang-up with the
grant of a slot, on virtual time with the hand-written client (gc off, as everywhere here). The
same with a RedisGate is in test_redis.py.
"""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from boundedgate import BoundedGate, KeyedGate
from boundedgate.asgi import GateMiddleware
from tests.asgi.harness import Client, Message, Scope, StreamingApp, http_scope, serve, turns
from tests.helpers import checked_gate, live_gate, run_virtual


def _tenant(scope: Scope) -> str:
    return str(dict(scope["headers"]).get(b"x-tenant", b"").decode())


async def test_stacked_gates_each_count_a_hang_up_in_the_inner_queue_as_disconnected() -> None:
    outer = checked_gate(2, 2, name="tenant")
    inner = checked_gate(1, 1, name="cluster")
    app = StreamingApp(chunks=1, pause=30)
    stacked = GateMiddleware(GateMiddleware(app, gate=inner), gate=outer)
    first = serve(stacked, Client())
    await turns(3)
    queued = Client()
    task = serve(stacked, queued)
    await asyncio.sleep(1)
    assert (outer.running, inner.running, inner.waiting) == (2, 1, 1)  # held outside, queued inside
    queued.leave()
    await turns(1)  # out of the inner queue in the turn the outer middleware reads the hang-up
    assert (outer.running, inner.waiting) == (2, 0)
    await task  # the outer slot comes back once its app, the inner middleware, has stopped
    assert outer.running == 1
    assert queued.sent == []
    await first
    assert app.entered == 1  # the app never saw the request that left
    inner_stats, outer_stats = inner.stats(), outer.stats()
    assert (inner_stats.disconnected, inner_stats.cancelled, inner_stats.completed) == (1, 0, 1)
    # The outer gate held a slot while the request queued inside, but the app never ran: the
    # slot is counted as never used (its admission taken back), the request as disconnected.
    assert (outer_stats.disconnected, outer_stats.aborted, outer_stats.failed) == (1, 0, 0)
    assert (outer_stats.admitted, outer_stats.completed, outer_stats.running) == (1, 1, 0)


async def test_a_keyed_tenant_gate_outside_a_shared_gate_counts_the_hang_up_per_tenant() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=0, name="tenant", keep_idle=1)
    shared = checked_gate(1, 4, name="shared")
    app = StreamingApp(chunks=1, pause=30)
    stacked = GateMiddleware(GateMiddleware(app, gate=shared), gate=tenants, key=_tenant)
    scope_a = http_scope(headers=[("x-tenant", "a")])
    first = serve(stacked, Client(), scope_a)
    await turns(3)
    queued = Client()
    task = serve(stacked, queued, http_scope(headers=[("x-tenant", "a")]))
    await asyncio.sleep(1)
    assert (tenants.running, shared.waiting) == (2, 1)
    queued.leave()
    await task
    assert (tenants.running, shared.waiting) == (1, 0)
    await first
    assert app.entered == 1
    tenant = live_gate(tenants, "a").stats()
    assert (tenant.disconnected, tenant.aborted, tenant.completed) == (1, 0, 1)
    assert (shared.stats().disconnected, shared.stats().cancelled) == (1, 0)


async def test_three_stacked_gates_and_a_hang_up_in_the_middle_one() -> None:
    outer, middle, inner = (
        checked_gate(2, 0, name="outer"),
        checked_gate(1, 1, name="middle"),
        checked_gate(1, 0),
    )
    app = StreamingApp(chunks=1, pause=30)
    stacked = GateMiddleware(GateMiddleware(GateMiddleware(app, gate=inner), gate=middle), gate=outer)
    first = serve(stacked, Client())
    await turns(3)
    queued = Client()
    task = serve(stacked, queued)
    await asyncio.sleep(1)
    queued.leave()
    await task
    await first
    assert app.entered == 1
    assert (outer.stats().disconnected, middle.stats().disconnected, inner.stats().arrived) == (1, 1, 1)
    assert (outer.stats().aborted, middle.stats().cancelled) == (0, 0)


async def test_a_hang_up_while_the_app_streams_is_aborted_at_every_gate() -> None:
    outer, inner = checked_gate(1, 0, name="outer"), checked_gate(1, 0, name="inner")
    app = StreamingApp(chunks=3, pause=60)
    client = Client()
    task = serve(GateMiddleware(GateMiddleware(app, gate=inner), gate=outer), client)
    await asyncio.sleep(61)
    client.leave()
    await task
    assert app.cancelled == 1
    assert (outer.stats().aborted, inner.stats().aborted) == (1, 1)
    assert (outer.stats().disconnected, inner.stats().disconnected) == (0, 0)


async def test_a_refusal_from_the_inner_gate_is_an_answer_the_outer_gate_completes() -> None:
    outer, inner = checked_gate(2, 0, name="outer"), checked_gate(1, 0, name="inner")
    app = StreamingApp(chunks=1, pause=30)
    stacked = GateMiddleware(GateMiddleware(app, gate=inner), gate=outer)
    first = serve(stacked, Client())
    await turns(3)
    refused = Client()
    await serve(stacked, refused)
    assert refused.status == 503
    assert (outer.stats().completed, inner.stats().rejected) == (1, 1)
    await first


async def test_a_hang_up_in_the_turn_a_slot_is_handed_over_is_disconnected_and_never_runs() -> None:
    gate = checked_gate(1, 1)
    app = StreamingApp(chunks=1, pause=10)
    middleware = GateMiddleware(app, gate=gate)
    queued = Client()
    first = Client()

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            queued.leave()  # the hang-up is read in the turn the slot is handed to the waiter
        await first.send(message)

    running = asyncio.ensure_future(middleware(http_scope(), first.receive, send))
    await turns(3)
    task = serve(middleware, queued)
    await asyncio.sleep(1)
    assert gate.waiting == 1
    await running
    await task
    assert app.entered == 1
    assert queued.sent == []
    stats = gate.stats()
    assert (stats.disconnected, stats.cancelled, stats.aborted, stats.completed) == (1, 0, 0, 1)
    assert (stats.running, stats.admitted) == (0, 1)


async def test_nothing_of_a_request_stays_in_its_scope_after_it_ended() -> None:
    # The middlewares list themselves in the scope while the request lasts: the list is emptied at
    # its end, so the scope holds no exchange (and no cycle through it) afterwards.
    gate = BoundedGate(max_running=1, max_waiting=0)
    scope = http_scope()
    client = Client()
    await GateMiddleware(GateMiddleware(StreamingApp(chunks=0), gate=gate), gate=gate)(
        scope, client.receive, client.send
    )
    assert client.status == 503  # the inner admission of the same gate finds its one slot taken
    assert not any(scope.get(name) for name in scope if name.startswith("boundedgate"))


#: One request: when it arrives, and after how long its client hangs up (None: it stays).
Request = tuple[int, int | None]


async def _stacked_traffic(requests: list[Request], outer_places: int, inner_places: int) -> None:
    outer = checked_gate(2, outer_places, name="outer")
    inner = checked_gate(1, inner_places, name="inner")
    app = StreamingApp(chunks=2, pause=1)
    stacked = GateMiddleware(GateMiddleware(app, gate=inner), gate=outer)
    loop = asyncio.get_running_loop()

    async def one(arrival: int, leaves_after: int | None) -> Client:
        await asyncio.sleep(arrival)
        client = Client()
        if leaves_after is not None:
            loop.call_later(leaves_after, client.leave)
        await serve(stacked, client)
        return client

    clients = await asyncio.gather(*(one(arrival, leaves) for arrival, leaves in requests))
    o, i = outer.stats(), inner.stats()
    assert (o.running, o.waiting, i.running, i.waiting) == (0, 0, 0, 0)
    # The app ran exactly for the requests the inner gate admitted, and for nothing else.
    assert app.entered == i.admitted
    # A hang-up is never a caller's cancellation nor a failure, at either gate; one while the app
    # ran is aborted at both; one before is disconnected at every gate it had reached.
    assert (o.cancelled, i.cancelled, o.failed, i.failed) == (0, 0, 0, 0)
    assert o.aborted == i.aborted == app.cancelled
    assert o.disconnected >= i.disconnected
    # Whatever the inner gate answered (the app's response, or its refusal) the outer completed.
    assert o.completed == i.completed + i.rejected
    answered = [c for c in clients if c.complete]
    assert sum(c.status == 200 for c in answered) == i.completed
    assert sum(c.status == 503 for c in answered) == o.rejected + i.rejected


@given(
    requests=st.lists(
        st.tuples(st.integers(0, 4), st.none() | st.integers(0, 5)),
        min_size=1,
        max_size=7,
    ),
    outer_places=st.integers(0, 2),
    inner_places=st.integers(0, 2),
)
def test_any_hang_ups_through_stacked_gates_count_each_request_once_at_each(
    requests: list[Request], outer_places: int, inner_places: int
) -> None:
    run_virtual(_stacked_traffic, requests, outer_places, inner_places)
