"""What GatedTransport adds to a request: an httpx client with it against a bare one, on loopback.

Run ``python benchmarks/bench_transport.py``. A keep-alive HTTP/1.1 server on 127.0.0.1 answers
every request with a small JSON body (with ``usage``, so the transport reads and settles it) or a
short SSE stream; each round times N requests through a bare ``AsyncClient`` and through one whose
transport is a ``GatedTransport`` around the same kind of inner transport, in a rotated order. The
table shows the median microseconds per request and the ratio to the bare client. The machines are
shared and noisy: compare within one run, never across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import json
import statistics
import time
from typing import Any

from boundedgate import BoundedGate, RateLimit
from boundedgate.httpx import GatedTransport

JSON = json.dumps({"id": "x", "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}})
SSE = "".join(f'data: {{"choices": [{{"delta": {{"content": "t{i}"}}}}]}}\n\n' for i in range(8))
SSE += 'data: {"choices": [], "usage": {"total_tokens": 12}}\n\ndata: [DONE]\n\n'


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            stream = b"/stream" in head.split(b"\r\n", 1)[0]
            body, kind = (SSE, "text/event-stream") if stream else (JSON, "application/json")
            data = body.encode()
            writer.write(
                f"HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ncontent-length: {len(data)}\r\n\r\n".encode()
                + data
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
        pass  # the client left, or the round is over
    finally:
        writer.close()


async def _round(flavour: Any, gated: bool, path: str, requests: int, concurrency: int) -> float:
    server = await asyncio.start_server(_serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    inner = flavour.AsyncHTTPTransport()
    if gated:
        gate = BoundedGate(
            max_running=concurrency,
            max_waiting=requests,
            rate_limits=[RateLimit(rate=1e9, burst=1e12, unit="tokens")],
        )
        transport: Any = GatedTransport(gate, inner, cost=100)
    else:
        transport = inner
    url = f"http://127.0.0.1:{port}{path}"
    async with flavour.AsyncClient(transport=transport) as client:
        await client.post(url, content=b"{}")  # open the connections outside the timing

        async def worker(count: int) -> None:
            for _ in range(count):
                async with client.stream("POST", url, content=b"{}") as response:
                    async for _ in response.aiter_raw():
                        pass

        started = time.perf_counter()
        await asyncio.gather(*(worker(requests // concurrency) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    server.close()
    await server.wait_closed()
    return elapsed / requests * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    flavours = []
    for name in ("httpx2", "httpx"):
        try:
            flavours.append(importlib.import_module(name))
        except ImportError:
            continue
    print("| client | body | concurrency | bare µs/req | gated µs/req | ratio |")
    print("|---|---|---:|---:|---:|---:|")
    for flavour in flavours:
        for path in ("/json", "/stream"):
            for concurrency in (1, 16):
                times: dict[bool, list[float]] = {False: [], True: []}
                for r in range(args.rounds):
                    for gated in (False, True) if r % 2 == 0 else (True, False):
                        gc.collect()
                        elapsed = asyncio.run(_round(flavour, gated, path, args.requests, concurrency))
                        times[gated].append(elapsed)
                bare, gated_ = statistics.median(times[False]), statistics.median(times[True])
                print(
                    f"| {flavour.__name__} | {path[1:]} | {concurrency} | {bare:.1f} | {gated_:.1f} |"
                    f" {gated_ / bare:.2f} |"
                )


if __name__ == "__main__":
    main()
