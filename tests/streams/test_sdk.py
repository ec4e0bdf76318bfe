"""The real openai and anthropic SDKs, over loopback to the fake provider, through a gate.

Nothing of the SDKs is mocked: their HTTP clients talk to ``tests/fake_provider.py`` on 127.0.0.1,
on the test's own (virtual-time) event loop. Each scenario runs several streamed calls at once
through a gate that makes some of them queue, and checks that the slots all come back, that each
request is counted in exactly one outcome, and, on the provider's side, that every stream really
ended (a stream the consumer left was closed: the provider saw the client go).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import anthropic
import httpx2
import openai
import pytest
from anthropic.lib.streaming import AsyncMessageStreamManager
from openai.lib.streaming.chat import AsyncChatCompletionStreamManager

from boundedgate import OUTCOMES, BoundedGate, GatedStream, Late, Permit, QueueExpired, Status
from tests.fake_provider import FakeProvider, fake_provider
from tests.helpers import checked_gate
from tests.streams.sources import settle

MESSAGES: Any = [{"role": "user", "content": "hi"}]
CALLS = 4  # at once, through a gate of 2 running and 2 waiting


@pytest.fixture
async def provider() -> AsyncIterator[FakeProvider]:
    async with fake_provider() as provider:
        yield provider


class RawStream(Protocol):
    """What every scenario uses of either SDK's raw stream: its events (each SDK's own), its response."""

    def __aiter__(self) -> AsyncIterator[Any]: ...

    async def __anext__(self) -> Any: ...

    @property
    def response(self) -> httpx2.Response: ...


class Sdk:
    """One SDK, used the same way by every scenario."""

    def __init__(self, name: str, provider: FakeProvider, max_retries: int = 0) -> None:
        self.name = name
        self.client: openai.AsyncOpenAI | anthropic.AsyncAnthropic
        if name == "openai":
            self.client = openai.AsyncOpenAI(
                base_url=provider.openai_url, api_key="test", max_retries=max_retries
            )
        else:
            self.client = anthropic.AsyncAnthropic(
                base_url=provider.anthropic_url, api_key="test", max_retries=max_retries
            )

    async def create(self, fake: str = "") -> RawStream:
        """``await create(stream=True)``: the SDK's raw stream."""
        headers = {"x-fake": fake} if fake else {}
        if isinstance(self.client, openai.AsyncOpenAI):
            return await self.client.chat.completions.create(
                model="m", messages=MESSAGES, stream=True, extra_headers=headers
            )
        return await self.client.messages.create(
            model="m", max_tokens=16, messages=MESSAGES, stream=True, extra_headers=headers
        )

    def openai_manager(self, fake: str = "") -> AsyncChatCompletionStreamManager[None]:
        """openai's ``.stream()``: its stream manager."""
        assert isinstance(self.client, openai.AsyncOpenAI)
        headers = {"x-fake": fake} if fake else {}
        return self.client.chat.completions.stream(model="m", messages=MESSAGES, extra_headers=headers)

    def anthropic_manager(self, fake: str = "") -> AsyncMessageStreamManager[None]:
        """anthropic's ``.stream()``: its stream manager."""
        assert isinstance(self.client, anthropic.AsyncAnthropic)
        headers = {"x-fake": fake} if fake else {}
        return self.client.messages.stream(model="m", max_tokens=16, messages=MESSAGES, extra_headers=headers)

    def text(self, item: Any) -> str:
        if self.name == "openai":
            return item.choices[0].delta.content or "" if item.choices else ""
        if item.type == "content_block_delta":
            return str(item.delta.text)
        return ""

    async def aclose(self) -> None:
        await self.client.close()


SDKS = ["openai", "anthropic"]


@pytest.fixture(params=SDKS)
async def sdk(request: pytest.FixtureRequest, provider: FakeProvider) -> AsyncIterator[Sdk]:
    sdk = Sdk(request.param, provider)
    yield sdk
    await sdk.aclose()


def _gate() -> BoundedGate:
    return checked_gate(2, 2, name="llm")


async def _all_ended(provider: FakeProvider, count: int) -> list[str | None]:
    while len(provider.served) < count:
        await asyncio.sleep(0.01)
    await asyncio.wait_for(provider.wait_all_ended(), 60)
    return [served.ended for served in provider.served]


def _assert_counted(gate: BoundedGate, outcome: str, count: int = CALLS) -> None:
    stats = gate.stats()
    assert (stats.running, stats.waiting) == (0, 0)
    assert stats.arrived == count
    for name in (o.name for o in OUTCOMES):
        assert getattr(stats, name) == (count if name == outcome else 0), (name, stats)


async def _gather(consumer: Callable[[int], Awaitable[object]]) -> list[object]:
    return await asyncio.gather(*(consumer(i) for i in range(CALLS)), return_exceptions=True)


# -- the scenarios of the issue, for both SDKs ------------------------------------------------------


async def test_normal_eof(sdk: Sdk, provider: FakeProvider) -> None:
    gate = _gate()

    async def consume(i: int) -> str:
        stream = await gate.stream(lambda: sdk.create("chunks=3,delay=1"), timeout=60)
        return "".join([sdk.text(item) async for item in stream])

    assert await _gather(consume) == ["tok0 tok1 tok2 "] * CALLS
    _assert_counted(gate, "completed")
    assert gate.stats().peak_waiting == 2
    assert await _all_ended(provider, CALLS) == ["eof"] * CALLS


async def test_early_break_closes_the_connection(sdk: Sdk, provider: FakeProvider) -> None:
    gate = _gate()

    async def consume(i: int) -> None:
        stream = await gate.stream(lambda: sdk.create("hold_after=1"))
        async for item in stream:
            if sdk.text(item):
                break

    await _gather(consume)
    assert await _all_ended(provider, CALLS) == ["client_gone"] * CALLS
    await settle()
    _assert_counted(gate, "completed")


@pytest.mark.parametrize("failure", ["fail_after=1", "error_after=1"])
async def test_mid_stream_server_failure(sdk: Sdk, provider: FakeProvider, failure: str) -> None:
    gate = _gate()

    async def consume(i: int) -> None:
        stream = await gate.stream(lambda: sdk.create(failure))
        async for _ in stream:
            pass

    errors = await _gather(consume)
    # anthropic raises httpx2's own error for a dropped connection; openai wraps it.
    assert all(isinstance(error, (openai.APIError, anthropic.APIError, httpx2.HTTPError)) for error in errors)
    _assert_counted(gate, "failed")
    expected = "dropped" if failure.startswith("fail") else "error_event"
    assert await _all_ended(provider, CALLS) == [expected] * CALLS


async def test_client_task_cancellation(sdk: Sdk, provider: FakeProvider) -> None:
    gate = _gate()
    reading: asyncio.Queue[asyncio.Task[None]] = asyncio.Queue()

    async def consume(i: int) -> None:
        stream = await gate.stream(lambda: sdk.create("hold_after=1"))
        async for item in stream:
            if sdk.text(item):
                task = asyncio.current_task()
                assert task is not None
                reading.put_nowait(task)

    tasks = [asyncio.create_task(consume(i)) for i in range(CALLS)]
    for _ in range(CALLS):  # each holds a slot and waits for its next chunk: cancel it there
        (await reading.get()).cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(result, asyncio.CancelledError) for result in results)
    _assert_counted(gate, "failed")
    assert await _all_ended(provider, CALLS) == ["client_gone"] * CALLS


async def test_an_unclosed_stream_dropped_and_collected(sdk: Sdk, provider: FakeProvider) -> None:
    gate = _gate()

    async def consume(i: int) -> None:
        stream = await gate.stream(lambda: sdk.create("hold_after=1"))
        await stream.__anext__()  # then dropped, open

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await _gather(consume)
        gc.collect()
        await settle()
    assert [str(w.message)[:32] for w in caught] == ["unclosed <GatedStream of gate 'llm'"[:32]] * CALLS
    _assert_counted(gate, "leaked")
    assert await _all_ended(provider, CALLS) == ["client_gone"] * CALLS


async def test_a_429_before_the_first_chunk(sdk: Sdk, provider: FakeProvider) -> None:
    gate = _gate()

    async def consume(i: int) -> None:
        await gate.stream(lambda: sdk.create(f"rate_limited=1,chunks={i}"))

    errors = await _gather(consume)
    assert all(isinstance(error, (openai.RateLimitError, anthropic.RateLimitError)) for error in errors)
    _assert_counted(gate, "failed")
    assert await _all_ended(provider, CALLS) == ["rate_limited"] * CALLS


async def test_a_close_from_another_task_interrupts_the_read_in_flight(
    sdk: Sdk, provider: FakeProvider
) -> None:
    gate = _gate()
    stream = await gate.stream(lambda: sdk.create("hold_after=1"))
    texts: list[str] = []
    reading = asyncio.Event()

    async def show() -> str:
        async for item in stream:
            texts.append(sdk.text(item))
            if texts[-1]:
                reading.set()  # the next read waits at the held stream
        return "ended"

    reader = asyncio.create_task(show())
    await reading.wait()
    await asyncio.sleep(1)
    await stream.aclose()  # a "stop" from another task: no RuntimeError, the SDK's read is cut
    assert await reader == "ended"
    assert "".join(texts) == "tok0 "
    _assert_counted(gate, "completed", 1)
    assert await _all_ended(provider, 1) == ["client_gone"]


@pytest.mark.parametrize("after", range(1, 4))  # the close has begun
async def test_a_close_cancelled_loop_turns_in_still_closes_the_response(
    sdk: Sdk, provider: FakeProvider, after: int
) -> None:
    gate = _gate()
    stream = await gate.stream(lambda: sdk.create("hold_after=1"))
    await stream.__anext__()
    closing = asyncio.create_task(stream.aclose())
    for _ in range(after):
        await asyncio.sleep(0)
    closing.cancel()
    with contextlib.suppress(asyncio.CancelledError):  # not cancelled if the close was over already
        await closing
    assert stream.response.is_closed  # closed before the cancellation went on, not by the collector
    _assert_counted(gate, "completed", 1)
    assert await _all_ended(provider, 1) == ["client_gone"]


# -- seed 001's proof -------------------------------------------------------------------------------


async def test_seed_001_a_live_stream_holds_its_slot_until_closed(sdk: Sdk, provider: FakeProvider) -> None:
    gate = checked_gate(1, 1)
    stream = await gate.stream(lambda: sdk.create("hold_after=1"))
    await stream.__anext__()  # streaming: create() returned long ago
    assert gate.running == 1
    # A second request waits for the slot the stream holds, and expires.
    with pytest.raises(QueueExpired):
        async with gate.admit(timeout=0.01):
            pytest.fail("admitted while the stream was live")
    await stream.aclose()
    # Now a new request is admitted at once.
    async with gate.admit(timeout=0.01) as permit:
        assert permit.started == permit.arrival
    assert await _all_ended(provider, 1) == ["client_gone"]
    stats = gate.stats()
    assert (stats.completed, stats.expired) == (2, 1)


# -- deadlines ---------------------------------------------------------------------------------------


async def test_a_stream_that_ends_past_its_deadline_raises_late(sdk: Sdk, provider: FakeProvider) -> None:
    gate = _gate()
    stream = await gate.stream(lambda: sdk.create("chunks=3,delay=10"), timeout=15)
    texts = []
    with pytest.raises(Late) as raised:
        async for item in stream:
            texts.append(sdk.text(item))
    assert "".join(texts) == "tok0 tok1 tok2 "
    assert raised.value.gate == "llm"
    assert raised.value.overrun >= 15
    _assert_counted(gate, "late", 1)


# -- the SDKs' helpers ----------------------------------------------------------------------------


async def test_openai_stream_is_a_drop_in(provider: FakeProvider) -> None:
    gate = _gate()
    sdk = Sdk("openai", provider)
    stream = await gate.stream(lambda: sdk.create("hold_after=1"))
    assert stream.response.status_code == 200  # passes through
    assert stream.response.headers["request-id"] == "req_fake"
    await stream.__anext__()
    await stream.close()
    assert stream.response.is_closed
    await stream.aclose()
    assert [chunk async for chunk in stream] == []  # closed: nothing more, and no error from the SDK
    stream = await gate.stream(sdk.create)
    async with stream:
        await stream.__anext__()
    assert stream.response.is_closed
    _assert_counted(gate, "completed", 2)
    await sdk.aclose()


async def test_openai_stream_manager_and_get_final_completion(provider: FakeProvider) -> None:
    gate = _gate()
    sdk = Sdk("openai", provider)
    async with gate.stream(lambda: sdk.openai_manager("chunks=2")) as stream:
        assert gate.running == 1
        completion = await stream.get_final_completion()
        assert gate.running == 0
    assert completion.choices[0].message.content == "tok0 tok1 "
    async with gate.stream(sdk.openai_manager) as stream:
        assert await stream.until_done() is stream
        assert stream.current_completion_snapshot.choices[0].message.content == "tok0 tok1 tok2 "
    async with gate.stream(lambda: sdk.openai_manager("hold_after=1")) as stream:
        async for event in stream:
            if event.type == "content.delta":
                break
    _assert_counted(gate, "completed", 3)
    assert await _all_ended(provider, 3) == ["eof", "eof", "client_gone"]
    await sdk.aclose()


async def test_anthropic_message_stream_helpers(provider: FakeProvider) -> None:
    gate = _gate()
    sdk = Sdk("anthropic", provider)
    async with gate.stream(sdk.anthropic_manager) as stream:
        assert stream.request_id == "req_fake"
        assert [text async for text in stream.text_stream] == ["tok0 ", "tok1 ", "tok2 "]
        assert gate.running == 0
        message = await stream.get_final_message()
    block = message.content[0]
    assert isinstance(block, anthropic.types.TextBlock)
    assert block.text == "tok0 tok1 tok2 "
    async with gate.stream(lambda: sdk.anthropic_manager("chunks=2")) as stream:
        assert await stream.get_final_text() == "tok0 tok1 "
    async with gate.stream(sdk.anthropic_manager) as stream:
        await stream.until_done()
        assert stream.current_message_snapshot.stop_reason == "end_turn"
    _assert_counted(gate, "completed", 3)
    assert await _all_ended(provider, 3) == ["eof"] * 3
    await sdk.aclose()


async def test_anthropic_text_stream_break_closes_the_connection(provider: FakeProvider) -> None:
    gate = _gate()
    sdk = Sdk("anthropic", provider)
    stream = await gate.stream(lambda: sdk.anthropic_manager("hold_after=1"))
    async for _ in stream.text_stream:
        break
    assert await _all_ended(provider, 1) == ["client_gone"]
    await settle()
    _assert_counted(gate, "completed", 1)
    await sdk.aclose()


async def test_anthropic_raw_stream_has_aclose_through_the_wrapper(provider: FakeProvider) -> None:
    gate = _gate()
    sdk = Sdk("anthropic", provider)
    stream = await gate.stream(lambda: sdk.create("hold_after=1"))
    assert not hasattr(stream._stream, "aclose")  # anthropic's AsyncStream has only close()
    await stream.__anext__()
    await stream.aclose()
    assert await _all_ended(provider, 1) == ["client_gone"]
    _assert_counted(gate, "completed", 1)
    await sdk.aclose()


async def test_hand_over_inside_the_block(sdk: Sdk, provider: FakeProvider) -> None:
    gate = _gate()

    async def open_chat() -> GatedStream[RawStream]:
        async with gate.admit(timeout=30) as permit:
            raw = await sdk.create()
            return permit.hand_to(raw)

    stream = await open_chat()
    assert gate.running == 1
    async with stream:
        assert "".join([sdk.text(item) async for item in stream]) == "tok0 tok1 tok2 "
    _assert_counted(gate, "completed", 1)


# -- retries: one logical call keeps its slot across attempts and back-off -------------------------


@pytest.mark.parametrize("name", SDKS)
async def test_sdk_retries_happen_inside_create_while_the_permit_is_held(
    provider: FakeProvider, name: str
) -> None:
    gate = checked_gate(1, 1)
    sdk = Sdk(name, provider, max_retries=2)
    seen: list[tuple[str | None, int]] = []
    provider.on_request = [lambda served: seen.append((served.ended, gate.running))]

    async def contender() -> None:
        # Arrives during the back-off: the slot is held by a call that is only sleeping.
        await asyncio.sleep(1)
        async with gate.admit(timeout=2):
            pytest.fail("admitted during the back-off")

    contending = asyncio.create_task(contender())
    stream = await gate.stream(lambda: sdk.create("rate_limited=1,retry_after_ms=5000"), timeout=60)
    with pytest.raises(QueueExpired):
        await contending
    assert "".join([sdk.text(item) async for item in stream]) == "tok0 tok1 tok2 "
    # Two attempts, both made while this call held the one slot.
    assert seen == [(None, 1), (None, 1)]
    assert [served.ended for served in provider.served] == ["rate_limited", "eof"]
    stats = gate.stats()
    assert (stats.admitted, stats.completed, stats.expired) == (1, 1, 1)
    assert stats.run_seconds_max >= 5.0  # the back-off is inside the run
    await sdk.aclose()


@pytest.mark.parametrize("name", SDKS)
async def test_application_retries_keep_the_slot_across_attempts_and_back_off(
    provider: FakeProvider, name: str
) -> None:
    gate = checked_gate(1, 0)
    sdk = Sdk(name, provider)
    attempts = 0

    async def open_with_retries() -> GatedStream[RawStream]:
        nonlocal attempts
        async with gate.admit(timeout=60) as permit:
            for attempt in range(3):
                attempts += 1
                try:
                    raw = await sdk.create("rate_limited=2")
                except (openai.RateLimitError, anthropic.RateLimitError):
                    assert gate.running == 1
                    await asyncio.sleep(2**attempt)  # back-off, slot held
                    continue
                return permit.hand_to(raw)
            raise RuntimeError("gave up")

    stream = await open_with_retries()
    assert attempts == 3
    async with stream:
        assert "".join([sdk.text(item) async for item in stream]) == "tok0 tok1 tok2 "
    stats = gate.stats()
    assert (stats.admitted, stats.completed, stats.running) == (1, 1, 0)
    assert stats.run_seconds_max >= 3.0
    assert [served.ended for served in provider.served] == ["rate_limited", "rate_limited", "eof"]
    await sdk.aclose()


async def test_the_permit_status_of_a_stream_follows_it(provider: FakeProvider) -> None:
    gate = _gate()
    sdk = Sdk("openai", provider)
    async with gate.admit() as permit:
        stream = permit.hand_to(await sdk.create())
    assert permit.status is Status.RUNNING
    async for _ in stream:
        pass
    assert _status(permit) is Status.COMPLETED
    await sdk.aclose()


def _status(permit: Permit) -> Status:
    """The permit's status now (``permit.status`` again would be narrowed to the one asserted before)."""
    return permit.status
