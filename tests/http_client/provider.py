"""The fake provider of ``tests/fake_provider.py``, extended with what a provider says about its limits.

A subclass, so the base provider (which other tests use) is unchanged. On top of it:

- rate-limit headers on every answer: OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``
  or Anthropic's ``anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}``;
- ``overloaded=N``: answer the first N requests (per API and ``x-fake`` header) with 529 (Anthropic's
  overloaded_error) or, for OpenAI, 503 (its "overloaded" error), or with ``overloaded_status``
  (``overloaded_status=429``: a gateway that says overloaded with a 429);
- usage: in the plain JSON answer of both APIs, in OpenAI's last stream chunk when the request asks
  (``stream_options={"include_usage": True}``), and in Anthropic's ``message_start`` (input) and
  ``message_delta`` (output) events; ``prompt_tokens`` is the input count;
- the connections open right now (``active``) and the most ever open at once (``peak_active``), and
  every request's headers (``requests``);
- ``usage``: fields merged as they are into the usage of every answer, JSON and streamed (a test's
  malformed counts: ``provider.usage = {"total_tokens": 10**400}``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import socket
from collections.abc import AsyncIterator, Iterator

from tests.fake_provider import (
    Behaviour,
    FakeProvider,
    Served,
    _openai_chunk,
    _plain_answer,
    _read_request,
    _sse,
    _tokens,
)

__all__ = ("LimitsBehaviour", "LimitsProvider", "limits_provider")


@dataclasses.dataclass
class LimitsBehaviour(Behaviour):
    """:class:`Behaviour` and the limits the provider reports (see the module docstring)."""

    overloaded: int = 0
    overloaded_status: int = 0
    prompt_tokens: int = 5
    remaining_requests: int = 59
    remaining_tokens: int = 79_000
    reset_ms: int = 1500


class LimitsProvider(FakeProvider):
    """The fake provider with rate-limit headers, 529s and usage; see the module docstring."""

    behaviour: LimitsBehaviour

    def __init__(self, behaviour: LimitsBehaviour | None = None) -> None:
        super().__init__(behaviour or LimitsBehaviour())
        self.requests: list[dict[str, str]] = []
        self.peak_active = 0
        self._overloaded: dict[str, int] = {}
        self.usage: dict[str, object] = {}

    @property
    def active(self) -> int:
        """Connections open now (each carries one request)."""
        return len(self._connections)

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.peak_active = max(self.peak_active, self.active)
        path, headers, body = await _read_request(reader)
        behaviour = self.behaviour.updated(headers.get("x-fake"))
        api = "anthropic" if path.endswith("/messages") else "openai"
        served = Served(api)
        self.served.append(served)
        self.requests.append(headers)
        for callback in self.on_request:
            callback(served)
        limits = _limit_headers(api, behaviour)
        key = f"{api} {headers.get('x-fake', '')}"
        if behaviour.rate_limited > self._rate_limited.get(key, 0):
            self._rate_limited[key] = self._rate_limited.get(key, 0) + 1
            retry_after = max(1, -(-behaviour.retry_after_ms // 1000))
            retry = {"retry-after-ms": str(behaviour.retry_after_ms), "retry-after": str(retry_after)}
            _send(writer, 429, _error(api, "rate_limit_error"), {**limits, **retry})
            served.end("rate_limited")
        elif behaviour.overloaded > self._overloaded.get(key, 0):
            self._overloaded[key] = self._overloaded.get(key, 0) + 1
            status = behaviour.overloaded_status or (529 if api == "anthropic" else 503)
            _send(writer, status, _overloaded(api), {"retry-after": "1"})
            served.end("overloaded")
        elif not body.get("stream"):
            _send(writer, 200, _plain(api, behaviour, self.usage), limits)
            served.end("plain")
        else:
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            if api == "openai":
                events = _openai_events(behaviour, usage, self.usage)
            else:
                events = _anthropic_events(behaviour, self.usage)
            await self._stream(reader, writer, api, behaviour, served, events, limits)
            return
        await writer.drain()


@contextlib.asynccontextmanager
async def limits_provider(
    behaviour: LimitsBehaviour | None = None, sock: socket.socket | None = None
) -> AsyncIterator[LimitsProvider]:
    """A running :class:`LimitsProvider` on 127.0.0.1, stopped on exit."""
    async with LimitsProvider(behaviour).running(sock) as provider:
        yield provider


def usage_of(behaviour: LimitsBehaviour) -> int:
    """The total tokens the provider reports for an answer with this behaviour."""
    return behaviour.prompt_tokens + behaviour.chunks


def _limit_headers(api: str, behaviour: LimitsBehaviour) -> dict[str, str]:
    if api == "openai":
        return {
            "x-ratelimit-limit-requests": "60",
            "x-ratelimit-remaining-requests": str(behaviour.remaining_requests),
            "x-ratelimit-reset-requests": f"{behaviour.reset_ms}ms",
            "x-ratelimit-limit-tokens": "80000",
            "x-ratelimit-remaining-tokens": str(behaviour.remaining_tokens),
            "x-ratelimit-reset-tokens": "6m0s",
        }
    return {
        "anthropic-ratelimit-requests-limit": "60",
        "anthropic-ratelimit-requests-remaining": str(behaviour.remaining_requests),
        "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:00Z",
        "anthropic-ratelimit-tokens-limit": "80000",
        "anthropic-ratelimit-tokens-remaining": str(behaviour.remaining_tokens),
        "anthropic-ratelimit-tokens-reset": "2026-01-01T00:00:00Z",
    }


def _error(api: str, kind: str) -> object:
    if api == "openai":
        return {"error": {"message": kind, "type": kind, "code": kind}}
    return {"type": "error", "error": {"type": kind, "message": kind}}


def _overloaded(api: str) -> object:
    """The providers' own overload errors: Anthropic's ``overloaded_error``, OpenAI's message."""
    if api == "openai":
        message = "That model is currently overloaded with other requests. You can retry your request."
        return {"error": {"message": message, "type": "server_error", "param": None, "code": None}}
    return {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def _plain(api: str, behaviour: LimitsBehaviour, extra: dict[str, object]) -> object:
    answer = _plain_answer(api, behaviour)
    assert isinstance(answer, dict)
    if api == "openai":
        answer["usage"] = {
            "prompt_tokens": behaviour.prompt_tokens,
            "completion_tokens": behaviour.chunks,
            "total_tokens": usage_of(behaviour),
            **extra,
        }
    else:
        answer["usage"] = {
            "input_tokens": behaviour.prompt_tokens,
            "output_tokens": behaviour.chunks,
            **extra,
        }
    return answer


def _send(writer: asyncio.StreamWriter, status: int, body: object, headers: dict[str, str]) -> None:
    data = json.dumps(body).encode()
    reason = {200: "OK", 429: "Too Many Requests", 503: "Service Unavailable", 529: "Overloaded"}[status]
    head = f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\nconnection: close\r\n"
    head += f"content-length: {len(data)}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    writer.write(head.encode() + b"\r\n" + data)


def _openai_events(
    behaviour: LimitsBehaviour, usage: bool, extra: dict[str, object]
) -> Iterator[tuple[str, bytes]]:
    yield "start", _openai_chunk({"role": "assistant", "content": ""})
    for token in _tokens(behaviour):
        yield "delta", _openai_chunk({"content": token})
    yield "delta", _openai_chunk({}, finish="stop")
    if usage:
        chunk = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "fake-model",
            "choices": [],
            "usage": {
                "prompt_tokens": behaviour.prompt_tokens,
                "completion_tokens": behaviour.chunks,
                "total_tokens": usage_of(behaviour),
                **extra,
            },
        }
        yield "end", _sse(chunk)
    yield "end", b"data: [DONE]\n\n"


def _anthropic_events(behaviour: LimitsBehaviour, extra: dict[str, object]) -> Iterator[tuple[str, bytes]]:
    message: dict[str, object] = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": "fake-model",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": behaviour.prompt_tokens, "output_tokens": 1, **extra},
    }
    yield "start", _sse({"type": "message_start", "message": message}, "message_start")
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    yield "start", _sse(block, "content_block_start")
    for token in _tokens(behaviour):
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": token}}
        yield "delta", _sse(delta, "content_block_delta")
    yield "delta", _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
    end = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": behaviour.chunks, **extra},
    }
    yield "end", _sse(end, "message_delta")
    yield "end", _sse({"type": "message_stop"}, "message_stop")
