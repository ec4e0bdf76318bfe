"""Token usage read from a response body as it passes, without holding the stream back.

A JSON answer carries ``usage`` at its top level (both providers); a stream carries it in its
events: OpenAI chat in a last chunk when asked (``stream_options={"include_usage": True}``),
the Responses API in ``response.completed`` (``response.usage``), Anthropic in ``message_start``
(``message.usage``: the input) and ``message_delta`` (``usage``: the output so far). Later
figures replace earlier ones field by field, so the last event's count is the one settled.

The reader is bounded and linear, whatever the provider sends: it keeps at most :data:`MAX_KEPT`
bytes (a JSON body, or one line of an event stream, decoded), looks at each byte of the body a
bounded number of times, and never decompresses more than :data:`MAX_KEPT` bytes at a time. A
body it cannot read, and usage it cannot trust (a count that is not a finite number >= 0, a
``*_tokens`` field that is not a number), make the response's usage unknown (``None``): the
reader stops reading that body and says why in :attr:`UsageReader.problem`, which the transport
logs. Nothing here ever raises on what the provider sent.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Mapping
from typing import Any, Literal

from .._core import shown

__all__ = ("MAX_KEPT", "UsageReader", "is_count", "total_tokens")

#: The most the reader keeps: of a JSON answer, or of one line of an event stream (decoded).
#: Beyond it, the response's usage is unknown (its cost stays as declared).
MAX_KEPT = 4 << 20

_Mode = Literal["json", "sse", "off"]


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


def is_count(value: object) -> bool:
    """Whether ``value`` is a number that can be a count or a cost: finite, >= 0, a float's size."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        number = float(value)
    except OverflowError:  # an int beyond a float's range
        return False
    return 0 <= number < math.inf  # False for NaN too


class _Unreadable(ValueError):
    """A usage record the reader cannot trust; the message says why."""


def _counts(record: object) -> dict[str, float]:
    """The counts of one usage record (its numbers); raises :class:`_Unreadable` for a bad one.

    Usage records carry more than counts (OpenAI's ``*_details`` objects, Anthropic's
    ``service_tier`` or a null ``cache_creation_input_tokens``), which are left out; but a
    number that is not a count, or a ``*_tokens`` field that is neither a number nor null,
    spoils the record.
    """
    if not isinstance(record, dict):
        return {}
    counts: dict[str, float] = {}
    for key, value in record.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not is_count(value):
                raise _Unreadable(f"{key} is {shown(value)}, not a count")
            counts[key] = value
        elif value is not None and isinstance(key, str) and key.endswith("_tokens"):
            raise _Unreadable(f"{key} is {shown(value)}, not a number")
    return counts


def _usage_of(event: Any) -> dict[str, float]:
    if not isinstance(event, dict):
        return {}
    usage = _counts(event.get("usage"))
    for container in ("message", "response"):  # anthropic message_start, openai response.completed
        inner = event.get(container)
        if isinstance(inner, dict):
            usage = {**_counts(inner.get("usage")), **usage}
    return usage


class UsageReader:
    """Fed the raw body chunk by chunk; ``usage`` is what the body reported so far (None: nothing).

    Handles ``text/event-stream`` (line by line, parsing only ``data:`` lines that mention
    ``"usage"``) and JSON (kept up to :data:`MAX_KEPT`, parsed at the end), in identity, gzip or
    deflate content-encoding; anything else is passed by unread.

    Attributes:
        usage: The counts the body reported so far (None: none yet, or unknown).
        problem: Why the body's usage is unknown, when the reader gave up on it (None: it did not).
    """

    __slots__ = ("_body", "_decoder", "_mode", "_pending", "problem", "usage")

    def __init__(self, json_body: bool, decoder: Any = None) -> None:
        #: "json", "sse", or "off" once the reader gave up on the body.
        self._mode: _Mode = "json" if json_body else "sse"
        #: A ``zlib`` decompressor for a gzip or deflate body (None: identity).
        self._decoder = decoder
        self._body = bytearray()  # the JSON answer so far
        self._pending = bytearray()  # the event stream's unfinished line
        self.usage: dict[str, float] | None = None
        self.problem: str | None = None

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
        if encoding in ("", "identity"):
            return cls(json_body)
        decoder = decoder_for(encoding)
        return None if decoder is None else cls(json_body, decoder)

    def feed(self, chunk: bytes) -> None:
        """Read one chunk of the raw (still encoded) body."""
        if not self._reading():
            return
        decoder = self._decoder
        if decoder is None:
            self._take(chunk)
            return
        try:  # at most MAX_KEPT bytes out at a time: a small chunk can inflate to gigabytes
            self._take(decoder.decompress(chunk, MAX_KEPT))
            while decoder.unconsumed_tail and self._reading():
                self._take(decoder.decompress(decoder.unconsumed_tail, MAX_KEPT))
        except zlib.error:
            self._give_up("its content-encoding does not decode")

    def end(self) -> dict[str, float] | None:
        """The body is complete: the usage it reported (None if none, or if it cannot be trusted)."""
        if self._mode == "json" and self._body:
            body, self._body = self._body, bytearray()
            self._parse(body)
        elif self._mode == "sse" and self._pending:
            line, self._pending = bytes(self._pending), bytearray()
            self._line(line)
        return self.usage

    def _reading(self) -> bool:
        """Whether the reader still reads the body (it has not given up on it)."""
        return self._mode != "off"

    def _take(self, data: bytes) -> None:
        if self._mode == "json":
            if len(self._body) + len(data) > MAX_KEPT:
                self._give_up(f"the answer is larger than {MAX_KEPT >> 20} MiB")
            else:
                self._body += data
        elif self._mode == "sse":
            self._lines(data)

    def _lines(self, data: bytes) -> None:
        """Split the stream into lines, in time linear in its length.

        Each byte is searched for a newline once and copied into the unfinished line at most
        once; a line longer than :data:`MAX_KEPT` ends the reading.
        """
        pending = self._pending
        view = memoryview(data)
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            if len(pending) + end - start > MAX_KEPT:
                self._too_long()
                return
            if pending:
                pending += view[start:end]
                line = bytes(pending)
                pending.clear()
            else:
                line = data[start:end]
            self._line(line)
            if not self._reading():
                return
            start = end + 1
        if len(pending) + len(data) - start > MAX_KEPT:
            self._too_long()
            return
        pending += view[start:]

    def _line(self, line: bytes) -> None:
        if line.startswith(b"data:") and b'"usage"' in line:
            self._parse(line[5:])

    def _parse(self, data: bytes | bytearray) -> None:
        try:
            event = json.loads(data)
        except (ValueError, RecursionError):  # not JSON, or nested too deep to parse
            if self._mode == "sse":  # a line that mentions usage, which the SDK cannot read either
                self._give_up("an event that mentions usage is not JSON")
            return  # a JSON answer that does not parse: the SDK says so to the caller
        try:
            usage = _usage_of(event)
        except _Unreadable as bad:
            self._give_up(str(bad))
            return
        if usage:
            self.usage = usage if self.usage is None else {**self.usage, **usage}

    def _too_long(self) -> None:
        self._give_up(f"a line of the event stream is longer than {MAX_KEPT >> 20} MiB")

    def _give_up(self, problem: str) -> None:
        """Stop reading this body: its usage is unknown, for the reason ``problem``."""
        self._mode = "off"
        self._decoder = None
        self._body = bytearray()
        self._pending = bytearray()
        self.usage = None
        if self.problem is None:
            self.problem = problem


def decoder_for(encoding: str) -> Any:
    """A ``zlib`` decompressor for a gzip or deflate ``content-encoding``; None for any other."""
    if encoding in ("gzip", "x-gzip", "deflate"):
        return zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib, by the header
    return None


def decoded(raw: bytes, headers: Mapping[str, str], limit: int) -> bytes | None:
    """At most ``limit`` bytes of a body's start, decoded; None when its encoding is not one we read."""
    encoding = headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return raw[:limit]
    decoder = decoder_for(encoding)
    if decoder is None:
        return None
    try:
        return bytes(decoder.decompress(raw, limit))
    except zlib.error:
        return None
