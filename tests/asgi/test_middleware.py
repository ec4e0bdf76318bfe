"""GateMiddleware driven directly as an ASGI app, with a hand-written client, on virtual time.

What each test pins: the app is never entered for a refused or departed request; the permit is held
until the last body message has been sent and not a turn longer; a client leaving frees its slot
(or its queue place) in the loop turn the middleware reads ``http.disconnect``; nothing depends on
the garbage collector (``gc`` is disabled around every test here).
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from boundedgate import BoundedGate, KeyedGate, RateLimit
from boundedgate.asgi import GateMiddleware
from tests.asgi.harness import Client, Message, Receive, Scope, Send, StreamingApp, http_scope, serve, turns
from tests.helpers import checked_gate


async def test_a_refusal_is_sent_before_the_app_is_called() -> None:
    gate = checked_gate(1, 0)
    app = StreamingApp()
    app.hold = True
    middleware = GateMiddleware(app, gate=gate)
    first = Client()
    task = serve(middleware, first)
    await turns(3)
    assert gate.running == 1
    assert app.entered == 1

    second = Client()
    await serve(middleware, second)
    assert app.entered == 1  # the app never saw the refused request
    assert [m["type"] for m in second.sent] == ["http.response.start", "http.response.body"]
    assert second.status == 503
    assert second.headers["retry-after"] == "1"  # no run has finished: the documented fallback
    assert second.headers["cache-control"] == "no-store"
    assert second.headers["content-type"] == "application/json"
    assert second.json() == {
        "code": "queue_full",
        "message": "The service is at capacity. Retry later.",
        "retry_after": 1,
    }
    app.release.set()
    await task
    assert first.complete
    assert first.status == 200
    assert (gate.stats().completed, gate.stats().rejected) == (1, 1)


async def test_retry_after_comes_from_the_gate_pace_once_it_has_one() -> None:
    gate = checked_gate(1, 0)
    app = StreamingApp(chunks=2, pause=1.5)
    middleware = GateMiddleware(app, gate=gate, retry_after_fallback=7)
    refused = Client()
    await serve(middleware, Client())  # one run of 3 s: the pace is known now
    task = serve(middleware, Client())
    await turns(3)
    await serve(middleware, refused)
    assert refused.headers["retry-after"] == "3"
    await task


async def test_before_any_pace_the_fallback_is_sent() -> None:
    gate = checked_gate(1, 0)
    app = StreamingApp()
    middleware = GateMiddleware(app, gate=gate, retry_after_fallback=7)
    task = serve(middleware, Client())
    await turns(3)
    refused = Client()
    await serve(middleware, refused)
    assert refused.headers["retry-after"] == "7"
    await task


async def test_rate_limited_is_429_with_the_bucket_delay_rounded_up() -> None:
    gate = BoundedGate(max_running=5, max_waiting=5, rate_limits=[RateLimit.per_minute(1)])
    app = StreamingApp(chunks=0)
    middleware = GateMiddleware(app, gate=gate, timeout=10)
    await serve(middleware, Client())
    refused = Client()
    await serve(middleware, refused)
    assert refused.status == 429
    assert refused.headers["retry-after"] == "60"
    assert refused.json()["code"] == "rate_limited"


async def test_the_permit_is_held_until_the_last_body_message_is_sent_and_not_a_turn_longer() -> None:
    gate = checked_gate(1, 1)
    seen: list[int] = []
    app = StreamingApp(chunks=2)
    app.after_last_send.append(lambda: seen.append(gate.running))
    client = Client()

    async def send(message: Message) -> None:
        seen.append(gate.running)  # what the gate holds while each message is being sent
        await client.send(message)

    middleware = GateMiddleware(app, gate=gate)
    await middleware(http_scope(), client.receive, send)
    # start, two parts, the last body: all sent holding the slot; right after the last, none held
    assert seen == [1, 1, 1, 1, 0]
    assert gate.stats().completed == 1


async def test_work_after_the_response_is_not_counted() -> None:
    gate = checked_gate(1, 0)
    during: list[int] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        await asyncio.sleep(5)  # a background task after the response (Starlette's BackgroundTasks)
        during.append(gate.running)

    await serve(GateMiddleware(app, gate=gate), Client())
    assert during == [0]


@pytest.mark.parametrize("reads_body", [True, False], ids=["app-reads-receive", "app-never-reads"])
async def test_a_client_leaving_mid_stream_frees_the_slot_in_the_same_turn(reads_body: bool) -> None:
    gate = checked_gate(1, 1)
    app = StreamingApp(chunks=3, pause=60, read_body=reads_body)
    middleware = GateMiddleware(app, gate=gate)
    client = Client()
    task = serve(middleware, client)
    await asyncio.sleep(61)
    assert gate.running == 1
    assert client.body == b"part0 "
    loop = asyncio.get_running_loop()
    before = loop.time()
    client.leave()
    await turns(1)  # the pump reads the disconnect and cancels the app
    assert app.cancelled == 0
    await turns(1)  # the app stops, and its slot goes back as it does
    assert app.cancelled == 1
    assert gate.running == 0
    await task  # the server hears nothing of it
    assert app.finished == 0
    assert loop.time() == before
    stats = gate.stats()
    assert (stats.aborted, stats.failed, stats.completed) == (1, 0, 0)
    assert not client.complete


async def test_the_slot_stays_taken_while_the_cancelled_app_still_cleans_up() -> None:
    gate = checked_gate(1, 1)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            await asyncio.sleep(60)
        finally:
            await asyncio.shield(asyncio.sleep(5))  # closing the provider's stream takes a while

    client = Client()
    task = serve(GateMiddleware(app, gate=gate), client)
    await asyncio.sleep(1)
    client.leave()
    await asyncio.sleep(4.9)
    assert gate.running == 1  # no phantom free slot while the work still runs
    await task
    assert gate.running == 0
    assert gate.stats().aborted == 1


async def test_max_wait_bounds_the_queue_apart_from_the_deadline() -> None:
    gate = checked_gate(1, 2)
    app = StreamingApp(chunks=2, pause=3)
    middleware = GateMiddleware(app, gate=gate, timeout=100, max_wait=2)
    first = Client()
    task = serve(middleware, first)
    await turns(3)
    expired = Client()
    await serve(middleware, expired)
    assert asyncio.get_running_loop().time() == 2  # it left the queue after 2 s, not 100
    assert expired.status == 503
    assert expired.json()["code"] == "queue_expired"
    await task
    assert gate.stats().completed == 1


async def test_a_client_leaving_while_queued_never_reaches_the_app() -> None:
    gate = checked_gate(1, 1)
    app = StreamingApp(chunks=1, pause=30)
    middleware = GateMiddleware(app, gate=gate)
    first = serve(middleware, Client())
    await turns(3)
    queued = Client()
    task = serve(middleware, queued)
    await asyncio.sleep(1)
    assert gate.waiting == 1
    queued.leave()
    await turns(1)  # out of the queue in the turn the pump reads the disconnect
    assert gate.waiting == 0
    await task
    assert queued.sent == []
    await first
    assert app.entered == 1
    stats = gate.stats()
    assert (stats.completed, stats.running, stats.waiting) == (1, 0, 0)
    assert (stats.disconnected, stats.cancelled) == (1, 0)


async def test_a_client_gone_before_arrival_is_never_counted() -> None:
    gate = checked_gate(1, 1)
    app = StreamingApp()
    gone = Client(body=(), gone=True)
    await serve(GateMiddleware(app, gate=gate), gone)
    assert app.entered == 0
    assert gone.sent == []
    assert gate.stats().arrived == 0


async def test_the_next_queued_request_starts_when_a_streaming_client_leaves() -> None:
    gate = checked_gate(1, 1)
    app = StreamingApp(chunks=2, pause=60)
    middleware = GateMiddleware(app, gate=gate)
    first, second = Client(), Client()
    one = serve(middleware, first)
    await turns(3)
    two = serve(middleware, second)
    await asyncio.sleep(10)
    assert (gate.running, gate.waiting) == (1, 1)
    first.leave()
    await turns(2)
    assert (gate.running, gate.waiting) == (1, 0)  # handed off as the first app stopped
    await one
    await two
    assert second.complete
    assert second.headers["server-timing"] == 'gate;dur=10000.000;desc="queue"'


@pytest.mark.parametrize("when", ["before-start", "mid-body"])
async def test_an_app_that_raises_is_failed_once_and_the_error_reaches_the_server(when: str) -> None:
    gate = checked_gate(1, 0)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if when == "mid-body":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"x", "more_body": True})
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await serve(GateMiddleware(app, gate=gate), Client())
    stats = gate.stats()
    assert (stats.failed, stats.completed, stats.running) == (1, 0, 0)


async def test_an_app_returning_without_a_complete_response_is_failed() -> None:
    gate = checked_gate(1, 0)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})

    await serve(GateMiddleware(app, gate=gate), Client())
    assert (gate.stats().failed, gate.running) == (1, 0)


async def test_late_after_the_response_started_is_counted_and_logged_never_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = checked_gate(1, 0, name="llm")
    app = StreamingApp(chunks=3, pause=1)
    client = Client()
    with caplog.at_level(logging.WARNING, logger="boundedgate.asgi"):
        await serve(GateMiddleware(app, gate=gate, timeout=2), client, http_scope("/chat"))
    assert client.complete
    assert client.body == b"part0 part1 part2 end"
    assert gate.stats().late == 1
    assert "GET /chat on gate 'llm' finished 1.000s past its deadline" in caplog.text


async def test_a_response_that_starts_past_its_deadline_says_so_in_server_timing() -> None:
    gate = checked_gate(1, 1)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await asyncio.sleep(3)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x"})

    client = Client()
    await serve(GateMiddleware(app, gate=gate, timeout=2), client)
    assert client.headers["server-timing"] == 'gate;dur=0.000;desc="queue", gate-late;desc="deadline passed"'
    assert gate.stats().late == 1


async def test_a_queued_request_past_its_deadline_gets_503_queue_expired() -> None:
    gate = checked_gate(1, 1)
    app = StreamingApp(chunks=1, pause=30)
    middleware = GateMiddleware(app, gate=gate, timeout=5)
    first = serve(middleware, Client())
    await turns(3)
    expired = Client()
    await serve(middleware, expired)
    assert expired.status == 503
    assert expired.json()["code"] == "queue_expired"
    await first


async def test_keys_keep_sessions_apart_and_the_session_style_names_the_session() -> None:
    sessions: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, name="session")
    app = StreamingApp(chunks=1, pause=30)

    def session(scope: Scope) -> str | None:
        return dict(scope["headers"]).get(b"x-session", b"").decode() or None

    middleware = GateMiddleware(app, gate=sessions, key=session, refusal="session")
    a = serve(middleware, Client(), http_scope(headers=[("x-session", "A")]))
    await turns(3)
    b = Client()
    b_task = serve(middleware, b, http_scope(headers=[("x-session", "B")]))
    await turns(3)
    assert sessions.running == 2  # B never waits on A
    refused = Client()
    await serve(middleware, refused, http_scope(headers=[("x-session", "A")]))
    assert refused.status == 503
    assert refused.json() == {
        "code": "queue_full",
        "error": "The service is at capacity. Retry later.",
        "sessionId": "A",
        "limit": 1,
        "pendingCount": 1,
    }
    ungated = Client()
    await serve(middleware, ungated)  # no session: no key, not gated
    assert ungated.complete
    await a
    await b_task
    assert b.complete


async def test_exempt_paths_and_predicates_bypass_the_gate() -> None:
    gate = checked_gate(1, 0)
    held = serve(GateMiddleware(StreamingApp(chunks=1, pause=1000), gate=gate), Client())
    app = StreamingApp(chunks=0)
    middleware = GateMiddleware(app, gate=gate, exempt=["/healthz", "/static/"])
    await turns(3)
    for path in ("/healthz", "/static/app.js"):
        client = Client()
        await serve(middleware, client, http_scope(path))
        assert client.status == 200, path
    refused = Client()
    await serve(middleware, refused, http_scope("/healthz/more"))
    assert refused.status == 503
    by_function = GateMiddleware(app, gate=gate, exempt=lambda scope: scope["method"] == "OPTIONS")
    preflight = Client()
    await serve(by_function, preflight, http_scope(method="OPTIONS"))
    assert preflight.status == 200
    await held


async def test_the_sse_refusal_is_a_200_event_stream_an_event_source_retries() -> None:
    gate = checked_gate(1, 0)
    app = StreamingApp(chunks=1, pause=30)
    middleware = GateMiddleware(app, gate=gate, sse_refusal=True, retry_after_fallback=2)
    held = serve(middleware, Client())
    await turns(3)
    browser = Client()
    await serve(middleware, browser, http_scope(headers=[("accept", "text/event-stream")]))
    assert browser.status == 200
    assert browser.headers["content-type"] == "text/event-stream"
    assert browser.headers["retry-after"] == "2"
    assert browser.body.startswith(b'retry: 2000\nevent: error\ndata: {"code":"queue_full",')
    assert browser.body.endswith(b"}\n\n")
    plain = Client()
    await serve(middleware, plain)  # not an event-stream client: the usual 503
    assert plain.status == 503
    await held


async def test_the_pump_reads_at_most_max_buffer_bytes_ahead_of_the_app() -> None:
    gate = checked_gate(1, 0)
    reads: list[int] = []
    client = Client(body=[b"x" * 10] * 5)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await asyncio.sleep(5)
        reads.append(client.receives)  # what the pump had read before the app read anything
        body = b""
        while True:
            message = await receive()
            body += message["body"]
            if not message["more_body"]:
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    await serve(GateMiddleware(app, gate=gate, max_buffer=15), client)
    assert reads == [2]  # 20 bytes buffered (over 15): the pump waits
    assert client.body == b"x" * 50


async def test_a_reader_that_gives_up_does_not_break_the_next_one() -> None:
    # Starlette's Request.is_disconnected() reads receive() in a cancelled scope: that reader is
    # cancelled while it waits, and the next reader must still get the next message.
    gate = checked_gate(1, 0)
    client = Client(body=())
    client.incoming.put_nowait({"type": "http.request", "body": b"a", "more_body": True})
    read: list[bytes] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        read.append((await receive())["body"])
        impatient = asyncio.ensure_future(receive())
        await turns(1)
        impatient.cancel()
        with pytest.raises(asyncio.CancelledError):
            await impatient
        read.append((await receive())["body"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"".join(read)})

    task = serve(GateMiddleware(app, gate=gate), client)
    await asyncio.sleep(1)
    client.incoming.put_nowait({"type": "http.request", "body": b"b", "more_body": False})
    await task
    assert client.body == b"ab"


async def test_a_reader_waiting_when_the_response_completes_reads_the_server_itself() -> None:
    gate = checked_gate(1, 0)
    client = Client()
    seen: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        listener = asyncio.ensure_future(receive())  # as Starlette's listen_for_disconnect does
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})
        seen.append((await listener)["type"])

    task = serve(GateMiddleware(app, gate=gate), client)
    await asyncio.sleep(1)
    client.leave()  # after the response: the listener hears it from the server's receive()
    await task
    assert seen == ["http.disconnect"]
    assert gate.stats().completed == 1


async def test_a_server_cancelling_its_task_cancels_the_app_and_fails_the_request() -> None:
    gate = checked_gate(1, 0)
    app = StreamingApp(chunks=3, pause=60)
    task = serve(GateMiddleware(app, gate=gate), Client())
    await asyncio.sleep(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert app.cancelled == 1
    assert (gate.running, gate.stats().failed) == (0, 1)


async def test_a_send_raising_oserror_is_the_client_gone() -> None:
    gate = checked_gate(1, 0)
    app = StreamingApp(chunks=3, pause=1)
    client = Client()

    async def send(message: Message) -> None:
        if message.get("more_body"):
            raise OSError("connection reset")  # an ASGI 2.4 server after the client left
        await client.send(message)

    await GateMiddleware(app, gate=gate)(http_scope(), client.receive, send)
    assert gate.running == 0
    assert gate.stats().aborted == 1


async def test_websocket_and_lifespan_scopes_pass_through() -> None:
    gate = checked_gate(1, 0)
    seen: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope["type"])

    middleware = GateMiddleware(app, gate=gate)
    for kind in ("websocket", "lifespan"):
        await middleware({"type": kind}, Client().receive, Client().send)
    assert seen == ["websocket", "lifespan"]
    assert gate.stats().arrived == 0


async def test_priority_and_cost_can_come_from_the_scope() -> None:
    gate = BoundedGate(
        max_running=1, max_waiting=4, priorities=2, rate_limits=[RateLimit.per_second(100, unit="tokens")]
    )
    app = StreamingApp(chunks=1, pause=10)

    def urgent(scope: Scope) -> int:
        return 0 if scope["path"] == "/urgent" else 1

    middleware = GateMiddleware(app, gate=gate, priority=urgent, cost=lambda scope: 10.0)
    first = serve(middleware, Client(), http_scope("/slow"))
    await turns(3)
    slow, fast = Client(), Client()
    tasks = [serve(middleware, slow, http_scope("/slow")), serve(middleware, fast, http_scope("/urgent"))]
    await turns(3)
    await first
    await asyncio.gather(*tasks)
    # the urgent one started first, though it arrived second
    assert fast.headers["server-timing"] == 'gate;dur=10000.000;desc="queue"'
    assert slow.headers["server-timing"] == 'gate;dur=20000.000;desc="queue"'


def test_bad_settings_fail_at_construction() -> None:
    gate = BoundedGate(max_running=1, max_waiting=0)
    keyed: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0)
    app = StreamingApp()
    with pytest.raises(TypeError, match="needs key="):
        GateMiddleware(app, gate=keyed)
    with pytest.raises(TypeError, match="key= is for a KeyedGate"):
        GateMiddleware(app, gate=gate, key=lambda scope: "a")
    with pytest.raises(ValueError, match="unknown refusal style"):
        GateMiddleware(app, gate=gate, refusal="teapot")
    with pytest.raises(ValueError, match="retry_after_fallback must be >= 1"):
        GateMiddleware(app, gate=gate, retry_after_fallback=0)
    with pytest.raises(ValueError, match="timeout"):
        GateMiddleware(app, gate=gate, timeout=-1)
    with pytest.raises(ValueError, match="exempt path"):
        GateMiddleware(app, gate=gate, exempt=["healthz"])
    GateMiddleware(app, gate=keyed, key=lambda scope: "a", max_wait=1)  # a keyed gate takes it too
    with pytest.raises(ValueError, match="max_wait"):
        GateMiddleware(app, gate=gate, max_wait=-1)
    with pytest.raises(TypeError, match="not a single str"):
        GateMiddleware(app, gate=gate, exempt="/healthz")
    with pytest.raises(TypeError, match="gate must be a BoundedGate"):
        GateMiddleware(app, gate=object())


class _FifoGate:
    """A gate of one FIFO queue and nothing else (no priorities, no costs, no queue budget)."""

    name = "fifo"
    max_running = 1
    max_waiting = 0

    def admit(self, *, timeout: float | None = None, deadline: float | None = None) -> object:
        raise AssertionError("never admitted: the middleware refuses its options first")


def test_what_the_middleware_cannot_use_is_refused_saying_what_to_use_instead() -> None:
    gate = BoundedGate(max_running=1, max_waiting=0)
    keyed: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0)
    app = StreamingApp()
    fifo = _FifoGate()
    cases: list[tuple[dict[str, object], str]] = [
        ({"gate": keyed}, r"key=lambda scope: "),
        ({"gate": gate, "key": lambda scope: "a"}, r"remove key=, or use a KeyedGate"),
        ({"gate": object()}, r"docs/http\.md"),
        ({"gate": gate, "refusal": "teapot"}, r"or a function \(error, key\) -> dict"),
        ({"gate": gate, "exempt": "/healthz"}, r"exempt=\['/healthz'\]"),
        ({"gate": gate, "exempt": ["healthz"]}, r"write it '/healthz'"),
        ({"gate": fifo, "max_wait": 1}, r"_FifoGate\.admit\(\) takes no max_wait.*timeout="),
        (
            {"gate": fifo, "priority": 1},
            r"_FifoGate\.admit\(\) takes no priority.*BoundedGate or a KeyedGate",
        ),
        ({"gate": fifo, "priority": lambda scope: 0}, r"takes no priority"),
        ({"gate": fifo, "cost": 10}, r"_FifoGate\.admit\(\) takes no cost.*BoundedGate or a KeyedGate"),
    ]
    for settings, way_out in cases:
        with pytest.raises((TypeError, ValueError), match=way_out):
            GateMiddleware(app, **settings)  # type: ignore[arg-type]
    GateMiddleware(app, gate=fifo, timeout=5)  # what it can use, it takes


async def test_the_limits_app_on_another_scope_says_where_it_belongs() -> None:
    from boundedgate.asgi import limits_app

    with pytest.raises(RuntimeError, match="an HTTP route"):
        await limits_app({})({"type": "websocket"}, Client().receive, Client().send)
