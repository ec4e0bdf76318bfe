"""A small fake LLM provider on 127.0.0.1: the real openai and anthropic SDKs talk HTTP/1.1 to it.

It speaks just enough of each wire format for the SDKs' streaming helpers to work: OpenAI chat
completions (``POST /v1/chat/completions``: ``data: {chunk}`` lines ending with ``data: [DONE]``,
or one JSON completion without ``stream``) and Anthropic messages (``POST /v1/messages``:
``message_start`` ... ``content_block_delta`` ... ``message_stop`` events). It runs on the test's own
event loop (plain ``asyncio.start_server``), so it works under virtual time too: what it "sleeps" is
the loop's time.

What a response does is a :class:`Behaviour`: the provider's default, overridden per request by an
``x-fake`` header of ``key=value`` pairs (``extra_headers={"x-fake": "chunks=5,fail_after=2"}``).
Every stream the provider serves is recorded as a :class:`Served`, with how it ended, so a test can
check that closing a wrapper really closed the SDK's HTTP response (``client_gone``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import socket
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import Any, Self

__all__ = ("Behaviour", "FakeProvider", "Served", "fake_provider")


@dataclasses.dataclass
class Behaviour:
    """What the provider does with one request.

    Attributes:
        chunks: Text deltas in the stream ("tok0 ", "tok1 ", ...).
        delay: Seconds (on the loop's clock) before each delta.
        hold_after: After this many deltas, wait until :meth:`FakeProvider.release` is called.
        fail_after: After this many deltas, drop the TCP connection (no clean end).
        error_after: After this many deltas, send the wire format's in-band error event.
        rate_limited: Answer this many requests (to each API, of those with the same ``x-fake``
            header) with 429 first.
        retry_after_ms: The ``retry-after-ms`` header of a 429 (``Retry-After`` is its ceiling in s).
        refuse_status: The status of those refusals: 429 (rate limited), or 529 (overloaded, in
            anthropic's error shape) or 503 (unavailable), with the same headers.
    """

    chunks: int = 3
    delay: float = 0.0
    hold_after: int | None = None
    fail_after: int | None = None
    error_after: int | None = None
    rate_limited: int = 0
    retry_after_ms: int = 20
    refuse_status: int = 429

    def updated(self, header: str | None) -> Self:
        """This behaviour, with the ``key=value,...`` pairs of an ``x-fake`` header applied."""
        if not header:
            return dataclasses.replace(self)
        changes: dict[str, object] = {}
        for pair in header.split(","):
            key, _, value = pair.strip().partition("=")
            field_type = type(getattr(self, key))
            changes[key] = float(value) if field_type is float else int(value)
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


@dataclasses.dataclass
class Served:
    """One request the provider answered, and how its response ended.

    ``ended`` is None while it streams, then one of ``"eof"`` (sent to the end), ``"client_gone"``
    (the client closed the connection first), ``"dropped"`` (``fail_after``), ``"error_event"``,
    ``"rate_limited"`` (a 429) or ``"plain"`` (a non-streamed answer).
    """

    api: str
    sent: int = 0
    ended: str | None = None
    done: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    def end(self, how: str) -> None:
        if self.ended is None:
            self.ended = how
            self.done.set()


class ClientGone(Exception):
    """The client closed its connection while the provider was streaming."""


class FakeProvider:
    """The server; see the module docstring. Start it with :func:`fake_provider`."""

    def __init__(self, behaviour: Behaviour | None = None) -> None:
        self.behaviour = behaviour or Behaviour()
        self.served: list[Served] = []
        self.port = 0
        #: Called with each request's record as it arrives (before any answer is sent).
        self.on_request: list[Callable[[Served], None]] = []
        self._release = asyncio.Event()
        # 429s answered so far, by API and x-fake header.
        self._rate_limited: dict[str, int] = {}
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    # -- what tests use -----------------------------------------------------------------------

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def streaming(self) -> int:
        """Streams being sent now."""
        return sum(1 for s in self.served if s.ended is None)

    def release(self) -> None:
        """Let every stream held at ``hold_after`` go on (and any that reach it later)."""
        self._release.set()

    async def wait_streaming(self, count: int) -> None:
        """Wait until ``count`` streams have sent their held deltas (or ended)."""
        while sum(1 for s in self.served if s.ended is None and s.sent > 0) < count:
            await asyncio.sleep(0.001)

    async def wait_all_ended(self) -> None:
        """Wait until every stream served so far has ended, however."""
        for served in list(self.served):
            await served.done.wait()

    # -- the server ---------------------------------------------------------------------------

    async def start(self, sock: socket.socket | None = None) -> None:
        """Listen on ``sock`` (already bound), or on a free port of 127.0.0.1."""
        if sock is None:
            self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        else:
            self._server = await asyncio.start_server(self._connection, sock=sock)
        self.port = self._server.sockets[0].getsockname()[1]

    @contextlib.asynccontextmanager
    async def running(self, sock: socket.socket | None = None) -> AsyncIterator[Self]:
        """Serve (see :meth:`start`) until the block ends, then let held streams go and stop."""
        await self.start(sock)
        try:
            yield self
        finally:
            self.release()
            await self.stop()

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        await asyncio.sleep(0)  # a connection accepted just now registers in its task's first step
        while self._connections:
            for task in self._connections:
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._one_request(reader, writer)
        except (ConnectionError, ClientGone, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:  # stop(): the provider is shutting down
            pass
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one request, the only one on its connection (``connection: close``).

        One request a connection keeps "the client left" simple: while a response streams, the
        client sends nothing, so a read that returns means it closed the connection.
        """
        path, headers, body = await _read_request(reader)
        behaviour = self.behaviour.updated(headers.get("x-fake"))
        api = "anthropic" if path.endswith("/messages") else "openai"
        served = Served(api)
        self.served.append(served)
        for callback in self.on_request:
            callback(served)

        key = f"{api} {headers.get('x-fake', '')}"
        if behaviour.rate_limited > self._rate_limited.get(key, 0):
            self._rate_limited[key] = self._rate_limited.get(key, 0) + 1
            self._send_429(writer, api, behaviour)
            served.end("rate_limited")
        elif not body.get("stream"):
            self._send_json(writer, 200, _plain_answer(api, behaviour), {})
            served.end("plain")
        else:
            await self._stream(reader, writer, api, behaviour, served)
            return
        await writer.drain()

    async def _stream(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        api: str,
        behaviour: Behaviour,
        served: Served,
        events: Iterable[tuple[str, bytes]] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Stream ``api``'s events for ``behaviour`` (or ``events``), with ``headers`` added."""
        extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
            b"connection: close\r\nrequest-id: req_fake\r\n" + extra.encode() + b"\r\n"
        )
        if events is None:
            events = (_openai_events if api == "openai" else _anthropic_events)(behaviour)
        # The client sends nothing while it reads a response: a read that returns means it left.
        gone = asyncio.ensure_future(reader.read(1))
        try:
            for kind, payload in events:
                if kind == "delta":
                    if behaviour.hold_after is not None and served.sent == behaviour.hold_after:
                        await self._until(self._release.wait(), gone)
                    if behaviour.fail_after is not None and served.sent == behaviour.fail_after:
                        writer.transport.abort()
                        served.end("dropped")
                        return
                    if behaviour.error_after is not None and served.sent == behaviour.error_after:
                        _write_chunk(writer, _error_event(api))
                        _write_chunk(writer, b"")
                        await writer.drain()
                        served.end("error_event")
                        return
                    if behaviour.delay:
                        await self._until(asyncio.sleep(behaviour.delay), gone)
                    served.sent += 1
                _write_chunk(writer, payload)
                await self._until(writer.drain(), gone)
            _write_chunk(writer, b"")
            await self._until(writer.drain(), gone)
            served.end("eof")
        except (ClientGone, ConnectionError):
            served.end("client_gone")
        finally:
            gone.cancel()

    @staticmethod
    async def _until(step: object, gone: asyncio.Future[bytes]) -> None:
        """Await ``step``, unless the client leaves first."""
        task = asyncio.ensure_future(step)  # type: ignore[call-overload]
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            raise ClientGone
        task.result()
        if gone.done():
            raise ClientGone

    def _send_429(self, writer: asyncio.StreamWriter, api: str, behaviour: Behaviour) -> None:
        body: dict[str, object]
        status = behaviour.refuse_status
        if api == "openai":
            code = "rate_limit_exceeded" if status == 429 else "server_overloaded"
            body = {"error": {"message": "Rate limit reached", "type": "requests", "code": code}}
        else:
            kind = "rate_limit_error" if status == 429 else "overloaded_error"
            body = {"type": "error", "error": {"type": kind, "message": "Rate limit reached"}}
        retry_after = max(1, -(-behaviour.retry_after_ms // 1000))
        headers = {"retry-after-ms": str(behaviour.retry_after_ms), "retry-after": str(retry_after)}
        self._send_json(writer, status, body, headers)

    @staticmethod
    def _send_json(writer: asyncio.StreamWriter, status: int, body: object, headers: dict[str, str]) -> None:
        data = json.dumps(body).encode()
        reason = {200: "OK", 429: "Too Many Requests", 503: "Service Unavailable", 529: "Overloaded"}[status]
        head = f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\nconnection: close\r\n"
        head += f"content-length: {len(data)}\r\n"
        head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        writer.write(head.encode() + b"\r\n" + data)


@contextlib.asynccontextmanager
async def fake_provider(
    behaviour: Behaviour | None = None, sock: socket.socket | None = None
) -> AsyncIterator[FakeProvider]:
    """A running :class:`FakeProvider` on 127.0.0.1 (on ``sock`` if given), stopped on exit."""
    async with FakeProvider(behaviour).running(sock) as provider:
        yield provider


# -- wire formats -------------------------------------------------------------------------------


def _write_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(b"%x\r\n%s\r\n" % (len(data), data))


def _sse(data: object, event: str | None = None) -> bytes:
    line = f"data: {json.dumps(data)}\n\n"
    return (f"event: {event}\n" + line if event else line).encode()


def _tokens(behaviour: Behaviour) -> Iterator[str]:
    return (f"tok{i} " for i in range(behaviour.chunks))


def _openai_chunk(delta: dict[str, str], finish: str | None = None) -> bytes:
    return _sse(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "fake-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }
    )


def _openai_events(behaviour: Behaviour) -> Iterator[tuple[str, bytes]]:
    yield "start", _openai_chunk({"role": "assistant", "content": ""})
    for token in _tokens(behaviour):
        yield "delta", _openai_chunk({"content": token})
    yield "delta", _openai_chunk({}, finish="stop")  # the end is a delta too: fail_after=chunks stops it
    yield "end", b"data: [DONE]\n\n"


def _anthropic_events(behaviour: Behaviour) -> Iterator[tuple[str, bytes]]:
    message: dict[str, Any] = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": "fake-model",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 0},
    }
    yield "start", _sse({"type": "message_start", "message": message}, "message_start")
    yield (
        "start",
        _sse(
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            "content_block_start",
        ),
    )
    for token in _tokens(behaviour):
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": token}}
        yield "delta", _sse(delta, "content_block_delta")
    yield "delta", _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
    yield (
        "end",
        _sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": behaviour.chunks},
            },
            "message_delta",
        ),
    )
    yield "end", _sse({"type": "message_stop"}, "message_stop")


def _error_event(api: str) -> bytes:
    if api == "openai":
        return _sse({"error": {"message": "The server had an error", "type": "server_error"}})
    return _sse({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "error")


def _plain_answer(api: str, behaviour: Behaviour) -> object:
    text = "".join(_tokens(behaviour))
    if api == "openai":
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": "fake-model",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
        }
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": "fake-model",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": behaviour.chunks},
    }


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], Any]:
    """One HTTP request off ``reader``: its path, its headers (names lower-cased) and its JSON body."""
    head = await reader.readuntil(b"\r\n\r\n")
    request_line, *header_lines = head.decode("latin-1").split("\r\n")
    _, path, _ = request_line.split(" ", 2)
    headers = {}
    for line in header_lines:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = json.loads(await reader.readexactly(int(headers.get("content-length", "0"))) or b"{}")
    return path, headers, body
