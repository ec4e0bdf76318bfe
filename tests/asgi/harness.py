"""A hand-written ASGI client: drives an app as a server would, one request at a time, no sockets.

``receive()`` hands out the request body, then blocks until the test makes the client leave
(``leave()``), as a server does; ``send()`` records what the app sent. Apps for the tests are here
too: each says what it did (entered, cancelled) so a test can tell the gate's view from the app's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

# The ASGI spec's shapes, as servers and Starlette spell them.
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def http_scope(
    path: str = "/", method: str = "GET", headers: Sequence[tuple[str, str]] = (), spec_version: str = "2.3"
) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": spec_version},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


class Client:
    """One request's client side: what the server's ``receive`` returns and what ``send`` got."""

    def __init__(self, body: Sequence[bytes] = (b"",), *, gone: bool = False) -> None:
        self.incoming: asyncio.Queue[Message] = asyncio.Queue()
        for i, chunk in enumerate(body):
            self.incoming.put_nowait({"type": "http.request", "body": chunk, "more_body": i < len(body) - 1})
        if gone:
            self.leave()
        self.sent: list[Message] = []
        self.receives = 0

    async def receive(self) -> Message:
        self.receives += 1
        return await self.incoming.get()

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    def leave(self) -> None:
        self.incoming.put_nowait({"type": "http.disconnect"})

    # -- what was sent --------------------------------------------------------------------

    @property
    def status(self) -> int | None:
        starts = [m for m in self.sent if m["type"] == "http.response.start"]
        return starts[0]["status"] if starts else None

    @property
    def headers(self) -> dict[str, str]:
        starts = [m for m in self.sent if m["type"] == "http.response.start"]
        found: dict[str, str] = {}
        for name, value in starts[0]["headers"] if starts else ():
            key = name.decode().lower()
            found[key] = f"{found[key]}, {value.decode()}" if key in found else value.decode()
        return found

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def complete(self) -> bool:
        return any(m["type"] == "http.response.body" and not m.get("more_body", False) for m in self.sent)


def serve(app: App, client: Client, scope: Scope | None = None) -> asyncio.Task[None]:
    """Start serving ``client``'s request, as a server's task (an ASGI app may return any awaitable)."""
    return asyncio.ensure_future(app(scope or http_scope(), client.receive, client.send))


async def turns(count: int = 1) -> None:
    """Let the loop run ``count`` turns without moving the clock."""
    for _ in range(count):
        await asyncio.sleep(0)


class StreamingApp:
    """Sends ``chunks`` body parts ``pause`` seconds apart; records what happened to each call."""

    def __init__(self, chunks: int = 3, pause: float = 1.0, *, read_body: bool = True) -> None:
        self.chunks = chunks
        self.pause = pause
        self.read_body = read_body
        self.entered = 0
        self.cancelled = 0
        self.finished = 0
        self.release = asyncio.Event()  # with hold=True, the first chunk waits for it
        self.hold = False
        self.after_last_send: list[Callable[[], None]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.entered += 1
        try:
            if self.read_body:
                while True:
                    message = await receive()
                    if not message.get("more_body", False):
                        break
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
            )
            for i in range(self.chunks):
                if self.hold and i == 0:
                    await self.release.wait()
                await asyncio.sleep(self.pause)
                await send({"type": "http.response.body", "body": b"part%d " % i, "more_body": True})
            await send({"type": "http.response.body", "body": b"end", "more_body": False})
            for probe in self.after_last_send:
                probe()
            self.finished += 1
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
