"""A first request pays what every later one pays: no path imports a module on its first call.

Each case runs in a fresh interpreter (``tests/first_call.py``), after ``import boundedgate`` (and
the extra's module), with a gate made: the first call of the path must leave ``sys.modules`` as it
found it. A third party's client (httpx, aiohttp, OpenTelemetry's SDK) is warmed with a call of its
own first, so only what boundedgate adds is counted. The Redis gate's case is in
``tests/distributed/test_first_call.py``.
"""

from __future__ import annotations

import textwrap

import pytest

from tests.first_call import first_call_imports

HELPERS = """
from boundedgate import *
from tests.streams.sources import SdkLike

async def ticks(n=3):
    for i in range(n):
        yield i

class Opened:
    # What an SDK's .stream() returns: an async context manager that opens the stream.
    async def __aenter__(self):
        return ticks()
    async def __aexit__(self, *exc):
        return None

async def swallow_a_cancellation():
    task = asyncio.ensure_future(asyncio.sleep(3600))
    me = asyncio.current_task()
    asyncio.get_running_loop().call_soon(me.cancel)
    try:
        await task
    except asyncio.CancelledError:
        pass  # delivered and swallowed: the task's cancelling() stays 1
    task.cancel()
"""

GATE = "gate = BoundedGate(max_running=1, max_waiting=1)"

#: Each path's first call, after ``GATE`` (name: the call).
CORE = {
    "admit": "async with gate.admit(timeout=30): pass",
    "try_admit": "gate.try_admit().release()",
    "a queued request handed a slot": """
        held = gate.try_admit()
        async def wait():
            async with gate.admit(timeout=30): pass
        waiter = asyncio.ensure_future(wait())
        await asyncio.sleep(0)
        held.release()
        await waiter
    """,
    "QueueFull, QueueExpired and Late": """
        held = gate.try_admit()
        waiter = asyncio.ensure_future(gate.admit(timeout=0.01).__aenter__())
        await asyncio.sleep(0)
        try:
            async with gate.admit(): pass
        except QueueFull as error:
            str(error), error.to_dict(), error.headers()
        try:
            await waiter
        except QueueExpired as error:
            str(error), error.to_dict(), error.headers()
        held.release()
        try:
            async with gate.admit(timeout=0.001):
                await asyncio.sleep(0.002)
        except Late as error:
            str(error), error.to_dict()
    """,
    "RateLimited": """
        limited = BoundedGate(max_running=1, max_waiting=1, rate_limits=[RateLimit.per_second(1)])
        async with limited.admit(): pass
        try:
            async with limited.admit(timeout=0.01): pass
        except RateLimited as error:
            str(error), error.to_dict(), error.headers()
    """,
    "a waiter cancelled": """
        held = gate.try_admit()
        waiter = asyncio.ensure_future(gate.admit(timeout=30).__aenter__())
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        held.release()
    """,
    "a caller that swallowed a cancellation": """
        await swallow_a_cancellation()
        async with gate.admit(): pass
    """,
    "gate.stream(), awaited and read to its end": """
        stream = await gate.stream(ticks)
        async for _ in stream: pass
    """,
    "gate.stream() with async with, left by break": """
        async with gate.stream(lambda: ticks()) as stream:
            async for _ in stream:
                break
        await asyncio.sleep(0)
    """,
    "gate.stream() of an async context manager (an SDK's .stream())": """
        async with gate.stream(Opened) as stream:
            async for _ in stream: pass
    """,
    "a stream closed with aclose()": """
        stream = await gate.stream(ticks())
        await stream.__anext__()
        await stream.aclose()
    """,
    "a stream closed by a cancelled reader": """
        stream = await gate.stream(ticks())
        async def read():
            async for _ in stream:
                await asyncio.sleep(3600)
        reader = asyncio.ensure_future(read())
        await asyncio.sleep(0)
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
    """,
    "an SDK-shaped stream's helpers (text_stream, get_final_message())": """
        async with gate.stream(lambda: SdkLike(3)) as stream:
            async for _ in stream.text_stream: pass
        async with gate.stream(lambda: SdkLike(3)) as stream:
            await stream.get_final_message()
    """,
    "permit.hand_to()": """
        async with gate.admit() as permit:
            stream = permit.hand_to(ticks())
        async for _ in stream: pass
    """,
    "KeyedGate: admit and stream": """
        keyed = KeyedGate(max_running=1, max_waiting=1)
        async with keyed.admit("a", timeout=30): pass
        async with keyed.stream("b", ticks()) as stream:
            async for _ in stream: pass
        keyed.stats()
    """,
    "admit_all": """
        keyed = KeyedGate(max_running=1, max_waiting=1)
        other = BoundedGate(max_running=1, max_waiting=0, name="other")
        async with admit_all((keyed, "a"), gate, other, timeout=30): pass
    """,
    "observe() and stats()": """
        gate.observe(lambda record: None)
        async with gate.admit(): pass
        gate.stats(), repr(gate)
    """,
}


@pytest.mark.parametrize("first", CORE.values(), ids=CORE.keys())
def test_the_first_call_imports_nothing(first: str) -> None:
    assert first_call_imports(first, setup=GATE, imports=HELPERS) == []


def test_the_first_stream_under_anyio_run_imports_nothing() -> None:
    # anyio's loop already has anyio's asyncio backend: a stream's close shields itself with it.
    imports = f"import anyio\n{HELPERS}"
    first = CORE["a stream closed by a cancelled reader"]
    assert first_call_imports(first, setup=GATE, imports=imports, run="anyio.run(main)") == []


def test_importing_boundedgate_loads_no_anyio_backend() -> None:
    # What the first stream no longer needs is not paid at import instead.
    setup = "assert 'anyio._backends._asyncio' not in sys.modules, 'imported with boundedgate'"
    assert first_call_imports("pass", setup=setup) == []


RESPONDER = """
import json

USAGE = json.dumps({"usage": {"total_tokens": 3}}).encode()
SSE = b'data: {"usage": {"total_tokens": 3}}\\n\\ndata: [DONE]\\n\\n'

async def respond(reader, writer):
    # A keep-alive HTTP/1.1 server: JSON, or an SSE stream for a path ending in /stream.
    try:
        while True:
            head = await reader.readuntil(b"\\r\\n\\r\\n")
            length = 0
            for line in head.split(b"\\r\\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            streamed = b"/stream " in head.split(b"\\r\\n", 1)[0]
            body, kind = (SSE, b"text/event-stream") if streamed else (USAGE, b"application/json")
            writer.write(
                b"HTTP/1.1 200 OK\\r\\ncontent-type: %s\\r\\ncontent-length: %d\\r\\n\\r\\n%s"
                % (kind, len(body), body)
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()

async def serve():
    server = await asyncio.start_server(respond, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
"""

EDGES = {
    "httpx: GatedTransport's first request and first stream": (
        "import httpx\nfrom boundedgate.httpx import GatedTransport",
        """
        server, url = await serve()
        async with httpx.AsyncClient() as bare:  # httpx's own first request
            (await bare.post(url + "/v1", json={})).json()
            async with bare.stream("POST", url + "/v1/stream", json={}) as response:
                async for _ in response.aiter_lines(): pass
        client = httpx.AsyncClient(transport=GatedTransport(gate))
        """,
        """
        (await client.post(url + "/v1", json={})).json()
        async with client.stream("POST", url + "/v1/stream", json={}) as response:
            async for _ in response.aiter_lines(): pass
        await client.aclose()
        server.close()
        """,
    ),
    "aiohttp: gate_middleware's first request": (
        "import aiohttp\nfrom boundedgate.aiohttp import gate_middleware",
        """
        server, url = await serve()
        async with aiohttp.ClientSession() as bare, bare.post(url + "/v1", json={}) as response:
            await response.json()
        session = aiohttp.ClientSession(middlewares=(gate_middleware(gate),))
        """,
        """
        async with session.post(url + "/v1", json={}) as response:
            await response.json()
        await session.close()
        server.close()
        """,
    ),
    "asgi: GateMiddleware's first request and first refusal": (
        "from boundedgate.asgi import GateMiddleware",
        """
        async def app(scope, receive, send):
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
        gate = BoundedGate(max_running=1, max_waiting=0)  # a refusal as soon as it is busy
        middleware = GateMiddleware(app, gate=gate)
        scope = {"type": "http", "method": "GET", "path": "/", "headers": [], "query_string": b""}
        def receive():
            # A client's request, with no body, and no disconnect (the middleware must not wait for one).
            messages = [{"type": "http.request", "body": b""}]
            async def next_message():
                if messages:
                    return messages.pop()
                await asyncio.Event().wait()
            return next_message
        sent = []
        async def send(message):
            sent.append(message)
        """,
        """
        await middleware(scope, receive(), send)
        held = gate.try_admit()
        await middleware(scope, receive(), send)
        assert [m.get("status") for m in sent if "status" in m] == [200, 503], sent
        """,
    ),
    "otel: an instrumented gate's first record and collection": (
        "import boundedgate.otel\n"
        "from opentelemetry.sdk.metrics import MeterProvider\n"
        "from opentelemetry.sdk.metrics.export import InMemoryMetricReader",
        """
        reader = InMemoryMetricReader()
        boundedgate.otel.instrument(gate, meter_provider=MeterProvider(metric_readers=[reader]))
        """,
        """
        async with gate.admit(): pass
        reader.get_metrics_data()
        """,
    ),
    "prometheus: GateCollector's first collection": (
        "import boundedgate.prometheus\nfrom prometheus_client import CollectorRegistry, generate_latest",
        """
        registry = CollectorRegistry()
        registry.register(boundedgate.prometheus.GateCollector(gate))
        """,
        """
        async with gate.admit(): pass
        generate_latest(registry)
        """,
    ),
}


@pytest.mark.parametrize(("imports", "setup", "first"), EDGES.values(), ids=EDGES.keys())
def test_an_edge_first_request_imports_nothing(imports: str, setup: str, first: str) -> None:
    setup = f"{GATE}\n{textwrap.dedent(setup)}"
    assert first_call_imports(first, setup=setup, imports=f"{HELPERS}\n{RESPONDER}\n{imports}") == []
