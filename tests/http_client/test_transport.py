"""GatedTransport with plain httpx and httpx2 clients: what holds the slot, what ends it, on both flavours.

The inner transport is the flavour's own ``MockTransport`` (no sockets), or a stub whose body
the test drives; the SDK tests (``test_sdk_transport.py``) do the same over loopback.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import pytest

from boundedgate import OUTCOMES, BoundedGate, RateLimit
from boundedgate.httpx import Exchange, GatedTransport, ProviderSignal, gate_call
from boundedgate.httpx._signals import BODY_LIMIT
from boundedgate.httpx._usage import MAX_KEPT
from tests.helpers import checked_gate

FLAVOURS = [httpx2, httpx]


@pytest.fixture(params=FLAVOURS, ids=lambda module: module.__name__)
def flavour(request: pytest.FixtureRequest) -> Any:
    return request.param


def _counted(gate: BoundedGate, **expected: int) -> None:
    stats = gate.stats()
    assert (stats.running, stats.waiting) == (0, 0), stats
    for name in (o.name for o in OUTCOMES):
        assert getattr(stats, name) == expected.get(name, 0), (name, stats)


def _answering(flavour: Any, status: int = 200, **kwargs: Any) -> Any:
    return flavour.MockTransport(lambda request: flavour.Response(status, **kwargs))


class Chunks:
    """A response body the test feeds: ``put()`` a chunk, ``end()``, or ``fail()`` the next read."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while (item := await self.queue.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item

    async def aclose(self) -> None:
        self.closed = True


class Fed:
    """An inner transport answering each request with a body the test feeds (``bodies``).

    ``sent``: what each body holds from the start (chunks, an exception, None for its end).
    """

    def __init__(
        self,
        flavour: Any,
        status: int = 200,
        headers: dict[str, str] | None = None,
        sent: list[bytes | BaseException | None] | None = None,
    ) -> None:
        self.flavour = flavour
        self.status = status
        self.headers = headers or {}
        self.sent = sent or []
        self.bodies: list[Chunks] = []

    async def handle_async_request(self, request: Any) -> Any:
        body = Chunks()
        for item in self.sent:
            body.queue.put_nowait(item)
        self.bodies.append(body)
        stream = type("Stream", (self.flavour.AsyncByteStream,), {"__aiter__": body.__aiter__})()
        stream.aclose = body.aclose
        return self.flavour.Response(self.status, headers=self.headers, stream=stream, request=request)

    async def aclose(self) -> None:
        pass


async def test_a_response_built_in_memory_ends_at_once_and_settles_its_usage(flavour: Any) -> None:
    """A MockTransport's (or a cache's) response has its body read already: httpx never reads or
    closes its stream again, so waiting for that would hold the slot until garbage collection."""
    gate = checked_gate(1, 0, rate_limits=[RateLimit(rate=1e-9, burst=100, unit="tokens")])
    inner = _answering(flavour, json={"usage": {"total_tokens": 7}})
    async with flavour.AsyncClient(transport=GatedTransport(gate, inner, cost=50)) as client:
        for _ in range(2):  # one slot, no waiting room: the second is admitted only if the first ended
            async with client.stream("GET", "http://provider/") as response:
                assert response.status_code == 200
                assert gate.running == 0
    _counted(gate, completed=2)
    assert gate.stats().tokens[0] == pytest.approx(100 - 2 * 7)


async def test_an_empty_body_ends_at_once(flavour: Any) -> None:
    gate = checked_gate(1, 0)
    async with flavour.AsyncClient(transport=GatedTransport(gate, _answering(flavour, 204))) as client:
        assert (await client.head("http://provider/")).status_code == 204
        assert gate.running == 0
    _counted(gate, completed=1)


async def test_a_failing_inner_transport_fails_the_request(flavour: Any) -> None:
    gate = checked_gate(1, 0)

    def refuse(request: Any) -> Any:
        raise flavour.ConnectError("no route", request=request)

    async with flavour.AsyncClient(transport=GatedTransport(gate, flavour.MockTransport(refuse))) as client:
        with pytest.raises(flavour.ConnectError):
            await client.get("http://provider/")
    _counted(gate, failed=1)


async def test_the_body_holds_the_slot_and_each_ending_releases_once(flavour: Any) -> None:
    gate = checked_gate(1, 1)
    fed = Fed(flavour)
    exchanges: list[Exchange] = []
    transport = GatedTransport(gate, fed, on_exchange=exchanges.append)
    async with flavour.AsyncClient(transport=transport) as client:
        # read to the end
        async with client.stream("GET", "http://provider/") as response:
            body = fed.bodies[-1]
            body.queue.put_nowait(b"a")
            body.queue.put_nowait(None)
            assert [chunk async for chunk in response.aiter_raw()] == [b"a"]
            assert gate.running == 0  # at the end of the body, before the block's exit
        # closed early
        async with client.stream("GET", "http://provider/"):
            assert gate.running == 1
        assert fed.bodies[-1].closed
        # a read error
        async with client.stream("GET", "http://provider/") as response:
            fed.bodies[-1].queue.put_nowait(OSError("reset"))
            with pytest.raises(OSError, match="reset"):
                await response.aread()
            assert gate.running == 0
    _counted(gate, completed=2, failed=1)
    assert [e.outcome for e in exchanges] == ["completed", "completed", "failed"]


async def test_a_request_waits_its_turn_and_a_cancelled_waiter_takes_nothing(flavour: Any) -> None:
    gate = checked_gate(1, 2)
    fed = Fed(flavour)
    async with flavour.AsyncClient(transport=GatedTransport(gate, fed)) as client:
        first = await client.send(client.build_request("GET", "http://provider/"), stream=True)
        waiting = asyncio.create_task(client.get("http://provider/"))
        cancelled = asyncio.create_task(client.get("http://provider/"))
        await asyncio.sleep(1)
        assert (gate.running, gate.waiting, len(fed.bodies)) == (1, 2, 1)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert gate.waiting == 1
        await first.aclose()
        await asyncio.sleep(0)
        fed.bodies[-1].queue.put_nowait(None)
        assert (await waiting).status_code == 200
    _counted(gate, completed=2, cancelled=1)
    assert gate.stats().queue_seconds_max == pytest.approx(1)


async def test_gate_call_deadline_makes_late_responses_count_late_never_raise(flavour: Any) -> None:
    gate = checked_gate(1, 0)
    fed = Fed(flavour)
    async with flavour.AsyncClient(transport=GatedTransport(gate, fed)) as client:
        async with gate_call(timeout=1):
            request = client.get("http://provider/")
            task = asyncio.create_task(request)
        await asyncio.sleep(2)
        fed.bodies[-1].queue.put_nowait(b"late")
        fed.bodies[-1].queue.put_nowait(None)
        assert (await task).content == b"late"
    _counted(gate, late=1)


async def test_the_default_inner_transport_is_the_requests_flavour(flavour: Any) -> None:
    transport = GatedTransport(checked_gate(1, 0))
    async with flavour.AsyncClient(transport=transport) as client:
        with pytest.raises(flavour.ConnectError):  # nothing listens on port 1: a real transport tried
            await client.get("http://127.0.0.1:1/")
    assert isinstance(transport._inner, flavour.AsyncHTTPTransport)


async def test_a_signal_hook_that_raises_gives_the_slot_back(flavour: Any) -> None:
    gate = checked_gate(1, 0)

    def broken(signal: object) -> None:
        raise RuntimeError("hook")

    fed = Fed(flavour, status=429, headers={"retry-after": "1"}, sent=[b"{}", None])
    async with flavour.AsyncClient(transport=GatedTransport(gate, fed, on_provider_signal=broken)) as client:
        with pytest.raises(RuntimeError, match="hook"):
            await client.get("http://provider/")
    assert fed.bodies[-1].closed
    _counted(gate, failed=1)  # a 429


# -- what the body says, read ahead of the client (a 429's) ---------------------------------------

OVERLOADED = json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
QUOTA = json.dumps({"error": {"message": "Rate limit reached for requests", "code": "rate_limit_exceeded"}})


@pytest.mark.parametrize(
    ("body", "encoding", "kind"),
    [
        (OVERLOADED, None, "overloaded"),
        (OVERLOADED, "gzip", "overloaded"),
        (QUOTA, None, "rate_limited"),
        (QUOTA, "gzip", "rate_limited"),
    ],
)
async def test_a_429s_body_decides_between_quota_and_overload(
    flavour: Any, body: str, encoding: str | None, kind: str
) -> None:
    gate = checked_gate(1, 0)
    signals: list[ProviderSignal] = []
    raw = body.encode() if encoding is None else gzip.compress(body.encode())
    headers = {"content-type": "application/json", **({"content-encoding": encoding} if encoding else {})}
    half = len(raw) // 2
    fed = Fed(flavour, status=429, headers=headers, sent=[raw[:half], raw[half:], None])
    transport = GatedTransport(gate, fed, on_provider_signal=signals.append)
    async with flavour.AsyncClient(transport=transport) as client:
        response = await client.get("http://provider/")
    assert response.status_code == 429
    assert response.json() == json.loads(body)  # the client gets the body whole, decoded as ever
    assert [signal.kind for signal in signals] == [kind]
    _counted(gate, failed=1)  # a 429 fails the call


async def test_a_429_answered_in_memory_is_read_too(flavour: Any) -> None:
    gate = checked_gate(1, 0)
    signals: list[ProviderSignal] = []
    inner = _answering(flavour, 429, content=OVERLOADED.encode())
    transport = GatedTransport(gate, inner, on_provider_signal=signals.append)
    async with flavour.AsyncClient(transport=transport) as client:
        assert (await client.get("http://provider/")).status_code == 429
    assert [signal.kind for signal in signals] == ["overloaded"]
    _counted(gate, failed=1)


async def test_only_the_start_of_a_long_429_is_read_ahead_and_the_client_gets_it_all(flavour: Any) -> None:
    gate = checked_gate(1, 0)
    signals: list[ProviderSignal] = []
    chunks = [b"overloaded " + b"x" * 4085] + [b"y" * 4096] * 127  # 512 KiB
    fed = Fed(flavour, status=429, sent=[*chunks, None])
    transport = GatedTransport(gate, fed, on_provider_signal=signals.append)
    async with (
        flavour.AsyncClient(transport=transport) as client,
        client.stream("GET", "http://provider/") as response,
    ):
        ahead = BODY_LIMIT // 4096
        assert ahead == 16  # read ahead: 64 KiB, not the rest
        assert fed.bodies[0].queue.qsize() == len(chunks) - ahead + 1
        assert gate.running == 1
        received = b"".join([chunk async for chunk in response.aiter_raw()])
    assert received == b"".join(chunks)
    assert [signal.kind for signal in signals] == ["overloaded"]
    _counted(gate, failed=1)


async def test_a_success_is_never_read_ahead(flavour: Any) -> None:
    gate = checked_gate(1, 0)
    fed = Fed(flavour, status=200, headers={"content-type": "application/json"}, sent=[b'{"a": 1}', None])
    async with (
        flavour.AsyncClient(transport=GatedTransport(gate, fed)) as client,
        client.stream("GET", "http://provider/") as response,
    ):
        assert fed.bodies[0].queue.qsize() == 2  # nothing read until the client reads
        assert await response.aread() == b'{"a": 1}'
    _counted(gate, completed=1)


async def test_a_read_error_while_reading_a_429_ahead_fails_and_closes(flavour: Any) -> None:
    gate = checked_gate(1, 0)
    exchanges: list[Exchange] = []
    fed = Fed(flavour, status=429, sent=[b"{", OSError("reset")])
    transport = GatedTransport(gate, fed, on_exchange=exchanges.append)
    async with flavour.AsyncClient(transport=transport) as client:
        with pytest.raises(OSError, match="reset"):
            await client.get("http://provider/")
    assert fed.bodies[0].closed
    assert [e.outcome for e in exchanges] == ["failed"]
    _counted(gate, failed=1)


async def test_a_client_cancelled_while_a_429_is_read_ahead_gives_the_slot_back(flavour: Any) -> None:
    gate = checked_gate(1, 0)
    fed = Fed(flavour, status=429, sent=[b"{"])  # the rest never comes
    async with flavour.AsyncClient(transport=GatedTransport(gate, fed)) as client:
        task = asyncio.create_task(client.get("http://provider/"))
        await asyncio.sleep(1)
        assert gate.running == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert gate.running == 0
    assert fed.bodies[0].closed
    _counted(gate, failed=1)


# -- a body the usage reader gives up on passes unchanged ------------------------------------------


async def test_a_stream_with_an_endless_line_passes_byte_for_byte(
    flavour: Any, caplog: pytest.LogCaptureFixture
) -> None:
    gate = checked_gate(1, 0, name="llm", rate_limits=[RateLimit(rate=1e-9, burst=100, unit="tokens")])
    exchanges: list[Exchange] = []
    start = b'data: {"type": "message_start", "message": {"usage": {"input_tokens": 7}}}\n\n'
    line = b"data: " + bytes(range(256)).replace(b"\n", b"") * ((16 << 20) // 255)
    chunks = [start] + [line[i : i + (64 << 10)] for i in range(0, len(line), 64 << 10)]
    fed = Fed(flavour, headers={"content-type": "text/event-stream"}, sent=[*chunks, None])
    transport = GatedTransport(gate, fed, cost=10, on_exchange=exchanges.append)
    with caplog.at_level(logging.WARNING, logger="boundedgate"):
        async with (
            flavour.AsyncClient(transport=transport) as client,
            client.stream("GET", "http://provider/") as response,
        ):
            received = [chunk async for chunk in response.aiter_raw()]
    assert len(line) > 4 * MAX_KEPT
    assert received == chunks  # every chunk, unchanged, in order
    (exchange,) = exchanges
    assert (exchange.outcome, exchange.usage, exchange.settled) == ("completed", None, None)
    assert gate.stats().tokens[0] == pytest.approx(90)  # the declared cost, nothing settled
    (record,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert record.getMessage().startswith("llm: ")
    assert "longer than 4 MiB" in record.getMessage()
    _counted(gate, completed=1)


@pytest.mark.parametrize("kind", ["application/json", "text/event-stream"])
async def test_a_body_nested_too_deep_for_the_reader_reaches_the_client(flavour: Any, kind: str) -> None:
    gate = checked_gate(1, 0)
    nested = b'{"usage": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    body = nested if kind == "application/json" else b"data: " + nested + b"\n\n"
    fed = Fed(flavour, headers={"content-type": kind}, sent=[body, None])
    async with flavour.AsyncClient(transport=GatedTransport(gate, fed)) as client:
        assert (await client.get("http://provider/")).content == body
    _counted(gate, completed=1)


async def test_the_warning_for_unreadable_usage_names_the_gate_not_the_query(
    flavour: Any, caplog: pytest.LogCaptureFixture
) -> None:
    gate = checked_gate(1, 0, name="llm")
    body = b'{"usage": {"total_tokens": -1}}'
    fed = Fed(flavour, headers={"content-type": "application/json"}, sent=[body, None])
    with caplog.at_level(logging.WARNING, logger="boundedgate"):
        async with flavour.AsyncClient(transport=GatedTransport(gate, fed)) as client:
            assert (await client.get("http://provider/v1/models?key=secret")).content == body
    (record,) = caplog.records
    assert record.getMessage() == (
        "llm: the usage of GET http://provider/v1/models cannot be settled"
        " (total_tokens is -1, not a count): its cost stays as declared"
    )
    assert (getattr(record, "event", None), getattr(record, "url", None)) == (
        "usage_unreadable",
        "http://provider/v1/models",
    )
    _counted(gate, completed=1)


@pytest.mark.parametrize("status", [429, 500, 503, 529, 400])
async def test_an_error_response_ends_the_request_failed_as_the_call_inside_admit_would(
    flavour: Any, status: int
) -> None:
    # The SDK raises for a status of 400 or above: around `await client.create()`, admit() would
    # count the call failed. A 529 counted completed in 50 ms would also make feasible admission's
    # pace look fast, which the pace is built not to let a provider failing fast do.
    gate = checked_gate(2, 0, name="llm")
    exchanges: list[Exchange] = []
    transport = GatedTransport(
        gate, _answering(flavour, status, json={"error": {}}), on_exchange=exchanges.append
    )
    async with flavour.AsyncClient(transport=transport) as client:
        response = await client.get("https://api.example/v1/x")
        assert response.status_code == status
    _counted(gate, admitted=1, failed=1)
    assert [e.outcome for e in exchanges] == ["failed"]
    assert gate._state.recent_run_seconds is None  # no run that ended normally: no pace
