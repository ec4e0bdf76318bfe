"""Token usage read from a response body as it passes, without holding the stream back.

A JSON answer carries ``usage`` at its top level (both providers); a stream carries it in its
events: OpenAI chat in a last chunk when asked (``stream_options={"include_usage": True}``),
the Responses API in ``response.completed`` (``response.usage``), Anthropic in ``message_start``
(``message.usage``: the input) and ``message_delta`` (``usage``: the output so far). Later
figures replace earlier ones field by field, so the last event's count is the one settled.
"""

from __future__ import annotations

import contextlib
import json
import zlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ("UsageReader", "total_tokens")

#: A JSON answer larger than this is not kept for its usage (its cost stays as declared).
MAX_JSON = 4 << 20


def total_tokens(usage: Mapping[str, float]) -> float:
    """The tokens a usage record counts against a tokens-per-minute limit.

    ``total_tokens`` when the provider sends it (OpenAI), else input plus output plus the tokens
    written to Anthropic's prompt cache (which its input-token limits count).
    """
    total = usage.get("total_tokens")
    if total is not None:
        return total
    return (
        usage.get("prompt_tokens", 0)
        + usage.get("completion_tokens", 0)
        + usage.get("input_tokens", 0)
        + usage.get("output_tokens", 0)
        + usage.get("cache_creation_input_tokens", 0)
    )


def _numbers(record: object) -> dict[str, float]:
    if not isinstance(record, dict):
        return {}
    return {
        key: value
        for key, value in record.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }


def _usage_of(event: Any) -> dict[str, float]:
    if not isinstance(event, dict):
        return {}
    usage = _numbers(event.get("usage"))
    for container in ("message", "response"):  # anthropic message_start, openai response.completed
        inner = event.get(container)
        if isinstance(inner, dict):
            usage = {**_numbers(inner.get("usage")), **usage}
    return usage


class UsageReader:
    """Fed the raw body chunk by chunk; ``usage`` is what the body reported so far (None: nothing).

    Handles ``text/event-stream`` (line by line, parsing only ``data:`` lines that mention
    ``"usage"``) and JSON (kept up to :data:`MAX_JSON`, parsed at the end), in identity, gzip or
    deflate content-encoding; anything else is passed by unread.
    """

    __slots__ = ("_body", "_decoder", "_line", "_mode", "usage")

    def __init__(self, json_body: bool, decoder: Callable[[bytes], bytes] | None) -> None:
        #: "json", "sse", or "off" once the body turned out unreadable (too large, bad encoding).
        self._mode = "json" if json_body else "sse"
        self._decoder = decoder
        self._body = bytearray()
        self._line = b""
        self.usage: dict[str, float] | None = None

    @classmethod
    def for_response(cls, headers: Mapping[str, str]) -> UsageReader | None:
        """A reader for a response with these headers, or None when its body cannot carry usage."""
        kind = headers.get("content-type", "").partition(";")[0].strip().lower()
        if kind == "text/event-stream":
            json_body = False
        elif kind == "application/json" or kind.endswith("+json"):
            json_body = True
        else:
            return None
        encoding = headers.get("content-encoding", "identity").strip().lower()
        decoder: Callable[[bytes], bytes] | None
        if encoding in ("", "identity"):
            decoder = None
        elif encoding in ("gzip", "x-gzip", "deflate"):
            decoder = zlib.decompressobj(zlib.MAX_WBITS | 32).decompress  # gzip or zlib, by header
        else:
            return None
        return cls(json_body, decoder)

    def feed(self, chunk: bytes) -> None:
        """Read one chunk of the raw (still encoded) body."""
        if self._decoder is not None:
            try:
                chunk = self._decoder(chunk)
            except zlib.error:
                self._off()
                return
        mode = self._mode
        if mode == "json":
            if len(self._body) + len(chunk) <= MAX_JSON:
                self._body += chunk
            else:
                self._off()
            return
        if mode == "off":
            return
        lines = (self._line + chunk).split(b"\n")
        self._line = lines.pop()
        for line in lines:
            if line.startswith(b"data:") and b'"usage"' in line:
                self._event(line[5:])

    def end(self) -> dict[str, float] | None:
        """The body is complete: the usage it reported, if any."""
        if self._mode == "json" and self._body:
            with contextlib.suppress(ValueError):
                self._merge(_usage_of(json.loads(self._body)))
            self._body = bytearray()
        elif self._line:
            line, self._line = self._line, b""
            if line.startswith(b"data:") and b'"usage"' in line:
                self._event(line[5:])
        return self.usage

    def _off(self) -> None:
        self._mode = "off"
        self._decoder = None
        self._body = bytearray()
        self._line = b""

    def _event(self, data: bytes) -> None:
        try:
            event = json.loads(data)
        except ValueError:
            return
        self._merge(_usage_of(event))

    def _merge(self, usage: dict[str, float]) -> None:
        if usage:
            self.usage = usage if self.usage is None else {**self.usage, **usage}
