"""What the transport reads from providers' headers and bodies: pure functions, no sockets."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time
import tracemalloc
import zlib
from email.utils import formatdate

import pytest

from boundedgate.httpx import parse_quotas, parse_retry_after, parse_signal, total_tokens
from boundedgate.httpx._usage import MAX_KEPT, UsageReader


def _sse(*events: object) -> bytes:
    return (
        b"".join(b"data: " + json.dumps(event).encode() + b"\n\n" for event in events) + b"data: [DONE]\n\n"
    )


def test_retry_after_prefers_milliseconds_then_seconds_then_a_date() -> None:
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({"retry-after": "7"}) == 7
    assert parse_retry_after({}) is None
    assert parse_retry_after({"retry-after": "soon"}) is None
    in_a_minute = parse_retry_after({"retry-after": formatdate(time.time() + 60, usegmt=True)})
    assert in_a_minute is not None
    assert 55 < in_a_minute <= 60


def test_openai_rate_limit_headers() -> None:
    headers = {
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "1m30.5s",
        "x-ratelimit-remaining-tokens": "123",
        "x-ratelimit-reset-tokens": "250ms",
        "x-ratelimit-reset-other": "whenever",
    }
    quotas = {q.resource: q for q in parse_quotas(headers)}
    assert (quotas["requests"].limit, quotas["requests"].remaining, quotas["requests"].reset) == (60, 0, 90.5)
    assert (quotas["tokens"].limit, quotas["tokens"].remaining, quotas["tokens"].reset) == (None, 123, 0.25)
    assert quotas["other"].reset is None


def test_anthropic_rate_limit_headers() -> None:
    soon = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 30))
    headers = {
        "anthropic-ratelimit-input-tokens-limit": "40000",
        "anthropic-ratelimit-input-tokens-remaining": "39000",
        "anthropic-ratelimit-input-tokens-reset": soon,
    }
    (quota,) = parse_quotas(headers)
    assert (quota.resource, quota.limit, quota.remaining) == ("input-tokens", 40_000, 39_000)
    assert quota.reset is not None
    assert 25 < quota.reset <= 30


@pytest.mark.parametrize(
    ("status", "kind"), [(429, "rate_limited"), (529, "overloaded"), (503, "unavailable"), (200, None)]
)
def test_the_kind_of_signal(status: int, kind: str | None) -> None:
    signal = parse_signal(status, {"retry-after": "2"}, "api.example", 10.0)
    if kind is None:
        assert signal is None  # a plain success with no rate-limit headers says nothing
        return
    assert signal is not None
    assert (signal.kind, signal.status, signal.retry_after, signal.host, signal.at) == (
        kind,
        status,
        2,
        "api.example",
        10.0,
    )


def test_a_429_that_says_overloaded() -> None:
    signal = parse_signal(429, {}, "h", 0, body=b'{"error": {"type": "Overloaded"}}')
    assert signal is not None
    assert signal.kind == "overloaded"


def test_total_tokens() -> None:
    assert total_tokens({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}) == 7
    assert total_tokens({"input_tokens": 3, "output_tokens": 4, "cache_creation_input_tokens": 2}) == 9


def _read(reader: UsageReader, body: bytes, size: int) -> dict[str, float] | None:
    for i in range(0, len(body), size):
        reader.feed(body[i : i + size])
    return reader.end()


@pytest.mark.parametrize("size", [1, 7, 1 << 20])
def test_usage_from_an_openai_stream_in_any_chunking(size: int) -> None:
    body = _sse({"choices": [{"delta": {"content": "x"}}]}, {"choices": [], "usage": {"total_tokens": 12}})
    reader = UsageReader.for_response({"content-type": "text/event-stream; charset=utf-8"})
    assert reader is not None
    assert _read(reader, body, size) == {"total_tokens": 12}


def test_usage_from_anthropic_events_merges_start_and_delta() -> None:
    body = (
        b'event: message_start\ndata: {"type": "message_start", "message": {"usage": {"input_tokens": 9, '
        b'"output_tokens": 1}}}\n\nevent: message_delta\ndata: {"type": "message_delta", "usage": '
        b'{"output_tokens": 30}}\n\n'
    )
    reader = UsageReader.for_response({"content-type": "text/event-stream"})
    assert reader is not None
    assert _read(reader, body, 5) == {"input_tokens": 9, "output_tokens": 30}


def test_usage_from_a_responses_api_completed_event_without_a_final_newline() -> None:
    body = b'data: {"type": "response.completed", "response": {"usage": {"total_tokens": 5}}}'
    reader = UsageReader.for_response({"content-type": "text/event-stream"})
    assert reader is not None
    assert _read(reader, body, 4) == {"total_tokens": 5}


def test_usage_from_gzipped_json() -> None:
    body = gzip.compress(json.dumps({"id": "x", "usage": {"input_tokens": 2, "output_tokens": 3}}).encode())
    reader = UsageReader.for_response({"content-type": "application/json", "content-encoding": "gzip"})
    assert reader is not None
    assert _read(reader, body, 3) == {"input_tokens": 2, "output_tokens": 3}


@pytest.mark.parametrize(
    "headers",
    [{"content-type": "text/plain"}, {"content-type": "application/json", "content-encoding": "br"}, {}],
)
def test_bodies_that_cannot_carry_usage_are_not_read(headers: dict[str, str]) -> None:
    assert UsageReader.for_response(headers) is None


def test_bodies_that_turn_out_unreadable_settle_nothing() -> None:
    too_large = UsageReader.for_response({"content-type": "application/json"})
    assert too_large is not None
    too_large.feed(b'{"usage": {"total_tokens": 1}, "pad": "' + b"x" * MAX_KEPT + b'"}')
    assert too_large.end() is None
    assert too_large.problem == "the answer is larger than 4 MiB"
    not_gzip = UsageReader.for_response({"content-type": "application/json", "content-encoding": "gzip"})
    assert not_gzip is not None
    not_gzip.feed(b'{"usage": {"total_tokens": 1}}')
    assert not_gzip.end() is None
    assert not_gzip.problem == "its content-encoding does not decode"
    not_json = UsageReader.for_response({"content-type": "application/json"})
    assert not_json is not None
    not_json.feed(b'{"usage": ')
    assert not_json.end() is None


def _kept(reader: UsageReader) -> list[bytes | bytearray]:
    """The buffers a reader holds now."""
    slots = (getattr(reader, name, None) for name in type(reader).__slots__)
    return [value for value in slots if isinstance(value, (bytes, bytearray))]


def test_an_unterminated_line_is_kept_in_one_buffer_up_to_the_bound_then_let_go() -> None:
    """16 MiB without a newline: each byte is copied once into one buffer, never past the bound.

    The reader used to rebuild the unfinished line from scratch at every chunk (quadratic: 41 s
    of the event loop for 16 MiB) and to keep all of it.
    """
    reader = UsageReader.for_response({"content-type": "text/event-stream"})
    assert reader is not None
    reader.feed(b'data: {"usage": {"input_tokens": 3}}\n\n')
    line = b"data: " + b"x" * (16 << 20)
    step = 64 << 10
    fed = 0
    first: bytes | bytearray | None = None
    for start in range(0, len(line), step):
        reader.feed(line[start : start + step])
        fed += step
        kept = _kept(reader)
        assert sum(len(buffer) for buffer in kept) <= MAX_KEPT
        if fed <= MAX_KEPT:  # within the bound: the whole line so far, in one buffer
            (buffer,) = (buffer for buffer in kept if buffer)
            assert len(buffer) == fed
            first = buffer if first is None else first
            assert buffer is first  # appended in place (amortised linear), never copied again
    assert reader.problem == "a line of the event stream is longer than 4 MiB"
    assert _kept(reader) == [b""] * len(_kept(reader))
    reader.feed(b'\ndata: {"usage": {"output_tokens": 5}}\n\n')  # after it: not looked at
    assert reader.end() is None  # nor the usage before it: a part of the usage would undercharge


def test_a_line_just_within_the_bound_is_read() -> None:
    pad = b"x" * (MAX_KEPT - 60)
    event = b'data: {"usage": {"total_tokens": 9}, "pad": "' + pad + b'"}'
    assert len(event) <= MAX_KEPT
    reader = UsageReader.for_response({"content-type": "text/event-stream"})
    assert reader is not None
    assert _read(reader, event + b"\n\n", 4096) == {"total_tokens": 9}
    assert reader.problem is None


@pytest.mark.parametrize("kind", ["application/json", "text/event-stream"])
def test_a_compressed_body_never_inflates_past_the_bound_at_once(kind: str) -> None:
    """64 KiB of gzip inflating to 64 MiB: the reader decompresses at most its bound at a time."""
    bomb = gzip.compress(b"0" * (64 << 20), compresslevel=9)
    assert len(bomb) < 128 << 10
    reader = UsageReader.for_response({"content-type": kind, "content-encoding": "gzip"})
    assert reader is not None
    tracemalloc.start()
    try:
        reader.feed(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * MAX_KEPT  # the bound, the next piece, and zlib's own buffers: not 64 MiB
    assert reader.end() is None
    assert reader.problem is not None


def test_a_compressed_stream_of_many_lines_is_read_whole() -> None:
    """Inflating a bounded amount at a time loses nothing: 10 MiB of events, usage at the end."""
    events = b'data: {"choices": []}\n\n' * (10 << 15) + b'data: {"usage": {"total_tokens": 4}}\n\n'
    compressed = zlib.compress(events)
    reader = UsageReader.for_response({"content-type": "text/event-stream", "content-encoding": "deflate"})
    assert reader is not None
    assert _read(reader, compressed, 1 << 20) == {"total_tokens": 4}


@pytest.mark.parametrize(
    ("usage", "problem"),
    [
        (b'{"total_tokens": 1' + b"0" * 400 + b"}", "total_tokens is an int of 1329 bits, not a count"),
        (b'{"input_tokens": -5}', "input_tokens is -5, not a count"),
        (b'{"output_tokens": NaN}', "output_tokens is nan, not a count"),
        (b'{"total_tokens": Infinity}', "total_tokens is inf, not a count"),
        (b'{"total_tokens": "12"}', "total_tokens is '12', not a number"),
        (b'{"total_tokens": true}', "total_tokens is True, not a number"),
    ],
)
@pytest.mark.parametrize("kind", ["application/json", "text/event-stream"])
def test_usage_that_cannot_be_trusted_is_unknown(kind: str, usage: bytes, problem: str) -> None:
    body = b'{"id": "x", "usage": ' + usage + b"}"
    if kind == "text/event-stream":
        body = b'data: {"usage": {"input_tokens": 2}}\n\ndata: ' + body + b"\n\n"
    reader = UsageReader.for_response({"content-type": kind})
    assert reader is not None
    assert _read(reader, body, 5) is None
    assert reader.problem == problem


def test_fields_that_are_not_counts_are_left_out() -> None:
    usage = {
        "input_tokens": 3,
        "cache_creation_input_tokens": None,
        "service_tier": "standard",
        "cache_creation": {"ephemeral_1h_input_tokens": -1},
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    reader = UsageReader.for_response({"content-type": "application/json"})
    assert reader is not None
    assert _read(reader, json.dumps({"usage": usage}).encode(), 7) == {"input_tokens": 3}
    assert reader.problem is None


@pytest.mark.parametrize("kind", ["application/json", "text/event-stream"])
def test_a_body_nested_too_deep_to_parse_is_read_as_no_usage(kind: str) -> None:
    nested = b'{"usage": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    reader = UsageReader.for_response({"content-type": kind})
    assert reader is not None
    body = nested if kind == "application/json" else b"data: " + nested + b"\n\n"
    assert _read(reader, body, 1 << 16) is None


def test_importing_boundedgate_imports_no_http_client() -> None:
    code = (
        "import sys, boundedgate, boundedgate.httpx, boundedgate.aiohttp; "
        "hosts = ('httpx', 'httpx2', 'httpcore', 'httpcore2', 'aiohttp'); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in hosts))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
