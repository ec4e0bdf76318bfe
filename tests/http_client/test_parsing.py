"""What the transport reads from providers' headers and bodies: pure functions, no sockets."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time
from email.utils import formatdate

import pytest

from boundedgate.httpx import parse_quotas, parse_retry_after, parse_signal, total_tokens
from boundedgate.httpx._usage import MAX_JSON, UsageReader


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
    too_large.feed(b'{"usage": {"total_tokens": 1}, "pad": "' + b"x" * MAX_JSON + b'"}')
    assert too_large.end() is None
    not_gzip = UsageReader.for_response({"content-type": "application/json", "content-encoding": "gzip"})
    assert not_gzip is not None
    not_gzip.feed(b'{"usage": {"total_tokens": 1}}')
    assert not_gzip.end() is None
    not_json = UsageReader.for_response({"content-type": "application/json"})
    assert not_json is not None
    not_json.feed(b'{"usage": ')
    assert not_json.end() is None


def test_importing_boundedgate_imports_no_http_client() -> None:
    code = (
        "import sys, boundedgate, boundedgate.httpx, boundedgate.aiohttp; "
        "hosts = ('httpx', 'httpx2', 'httpcore', 'httpcore2', 'aiohttp'); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in hosts))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
