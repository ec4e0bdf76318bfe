"""One path's first call and its steady state, timed in this fresh process (bench.py's scenario 8).

Run ``python first_call.py PATH`` with PATH one of :data:`PATHS`. After ``import boundedgate`` (and
httpx, for the transport) and the path's setup, it times the path's first call, then 200 more, and
prints JSON: the first call's microseconds and the median of the last 100 (the steady state).
The transport's inner httpx transport has already sent a request of its own, on the connection the
gated client then reuses, so the first gated request pays neither httpx's first request nor a connect.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from boundedgate import BoundedGate

CALLS = 200

Call = Callable[[], Awaitable[None]]


async def _ticks() -> AsyncIterator[int]:
    for i in range(3):
        yield i


async def admit() -> tuple[Call, Call]:
    gate = BoundedGate(max_running=1, max_waiting=0)

    async def call() -> None:
        async with gate.admit(timeout=30):
            pass

    return call, _nothing


async def stream() -> tuple[Call, Call]:
    gate = BoundedGate(max_running=1, max_waiting=0)

    async def call() -> None:
        async with gate.stream(_ticks, timeout=30) as items:
            async for _ in items:
                pass

    return call, _nothing


async def transport() -> tuple[Call, Call]:
    import httpx  # this path only

    from boundedgate.httpx import GatedTransport

    body = json.dumps({"usage": {"total_tokens": 12}}).encode()

    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.lower().split(b"\r\n")
                length = next((int(x.split(b":")[1]) for x in lines if x.startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                    % (len(body), body)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client left, or the run is over
        finally:
            writer.close()

    server = await asyncio.start_server(respond, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    inner = httpx.AsyncHTTPTransport()
    bare = httpx.AsyncClient(transport=inner)
    (await bare.post(url, content=b"{}")).json()  # httpx's own first request, and the connection
    gate = BoundedGate(max_running=1, max_waiting=0)
    client = httpx.AsyncClient(transport=GatedTransport(gate, inner))

    async def call() -> None:
        (await client.post(url, content=b"{}")).json()

    async def close() -> None:
        await client.aclose()
        await bare.aclose()
        server.close()
        await server.wait_closed()

    return call, close


async def _nothing() -> None:
    return None


PATHS: dict[str, Callable[[], Awaitable[tuple[Call, Call]]]] = {
    "admit": admit,
    "stream": stream,
    "transport": transport,
}


async def timed(path: str) -> dict[str, Any]:
    call, close = await PATHS[path]()
    times = []
    for _ in range(CALLS + 1):
        start = time.perf_counter()
        await call()
        times.append((time.perf_counter() - start) * 1e6)
    await close()
    return {"first": times[0], "steady": statistics.median(times[-100:])}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(timed(sys.argv[1]))))
