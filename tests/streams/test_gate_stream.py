"""gate.stream(...): admit, open and hand over in one call, awaited or with async with."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import pytest

from boundedgate import GatedStream, Late, QueueFull, StreamOpener
from tests.helpers import checked_gate
from tests.streams.sources import Log, outcomes, ticks

_S = TypeVar("_S", bound=AsyncIterator[Any])


async def _opened(n: int, log: Log) -> AsyncIterator[int]:
    """What ``await client...create(stream=True)`` is: a coroutine that returns a stream."""
    await asyncio.sleep(1)  # the request
    return ticks(n, log)


async def test_awaiting_it_admits_opens_and_returns_a_stream_holding_the_slot() -> None:
    gate = checked_gate(1, 0, name="openai")
    log = Log()
    opener = gate.stream(lambda: _opened(2, log), timeout=30)
    assert isinstance(opener, StreamOpener)
    assert repr(opener) == "<StreamOpener of gate 'openai'>"
    stream = await opener
    assert isinstance(stream, GatedStream)
    assert gate.running == 1
    assert [item async for item in stream] == [0, 1]
    assert outcomes(gate) == {"running": 0, "completed": 1}
    assert log.closed


async def test_async_with_closes_the_stream_on_exit() -> None:
    gate = checked_gate(1, 0)
    log = Log()
    async with gate.stream(lambda: _opened(5, log)) as stream:
        assert await stream.__anext__() == 0
        assert gate.running == 1
    assert outcomes(gate) == {"running": 0, "completed": 1}
    assert log.closed


async def test_a_coroutine_can_be_given_directly() -> None:
    gate = checked_gate(1, 0)
    stream = await gate.stream(_opened(1, Log()))
    assert [item async for item in stream] == [0]


async def test_an_async_generator_factory_is_a_stream_already() -> None:
    gate = checked_gate(1, 0)
    stream = await gate.stream(lambda: ticks(2))
    assert [item async for item in stream] == [0, 1]
    assert outcomes(gate) == {"running": 0, "completed": 1}


async def test_a_stream_manager_is_entered_after_admission_and_exited_on_close() -> None:
    gate = checked_gate(1, 0)
    log = Log()
    events: list[str] = []

    @contextlib.asynccontextmanager
    async def manager() -> AsyncIterator[AsyncIterator[int]]:  # the SDKs' .stream() shape
        events.append(f"enter, running={gate.running}")
        try:
            yield ticks(3, log)
        finally:
            events.append("exit")

    async with gate.stream(manager) as stream:
        assert await stream.__anext__() == 0
    assert events == ["enter, running=1", "exit"]
    assert outcomes(gate) == {"running": 0, "completed": 1}


async def test_a_refused_request_opens_nothing_and_closes_a_coroutine_given_directly() -> None:
    gate = checked_gate(1, 0)
    holder = gate.try_admit()
    log = Log()
    calls: list[int] = []
    with pytest.raises(QueueFull):
        await gate.stream(lambda: calls.append(1) or _opened(1, log))  # type: ignore[func-returns-value]
    assert calls == []
    # Closed unawaited: no "coroutine was never awaited" warning (which this suite turns into an error).
    with pytest.raises(QueueFull):
        await gate.stream(_opened(1, log))
    holder.release()
    assert gate.stats().rejected == 2


async def test_an_error_while_opening_releases_the_slot_as_failed() -> None:
    gate = checked_gate(1, 0)

    async def rate_limited() -> AsyncIterator[int]:
        raise ConnectionRefusedError("429")

    with pytest.raises(ConnectionRefusedError):
        await gate.stream(rate_limited)
    assert outcomes(gate) == {"running": 0, "failed": 1}


async def test_a_caller_cancelled_while_the_stream_opens_releases_the_slot_as_failed() -> None:
    gate = checked_gate(1, 0)
    task = asyncio.create_task(_await(gate.stream(lambda: _opened(1, Log()))))
    await asyncio.sleep(0.5)  # admitted, the request under way
    assert gate.running == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert outcomes(gate) == {"running": 0, "failed": 1}


async def _await(opener: StreamOpener[_S]) -> GatedStream[_S]:
    return await opener


async def test_opening_something_that_is_not_a_stream_closes_it_and_fails() -> None:
    gate = checked_gate(1, 0)
    closed = []

    class NotAStream:
        async def close(self) -> None:
            closed.append(True)

    async def opened() -> NotAStream:
        return NotAStream()

    with pytest.raises(TypeError, match="async iterator"):
        await gate.stream(opened)  # type: ignore[arg-type]
    assert closed == [True]
    assert outcomes(gate) == {"running": 0, "failed": 1}


async def test_an_opener_opens_once() -> None:
    gate = checked_gate(2, 0)
    opener = gate.stream(lambda: ticks(1))
    stream = await opener
    with pytest.raises(RuntimeError, match="opens one stream"):
        await opener
    await stream.aclose()


async def test_the_deadline_of_the_admission_is_the_stream_s() -> None:
    gate = checked_gate(1, 0)
    stream = await gate.stream(lambda: ticks(3, every=1), timeout=2.5, raise_late=False)
    assert [item async for item in stream] == [0, 1, 2]
    assert outcomes(gate) == {"running": 0, "late": 1}


async def test_an_absolute_deadline_is_the_stream_s_too() -> None:
    gate = checked_gate(1, 0)
    deadline = asyncio.get_running_loop().time() + 1.5
    stream = await gate.stream(lambda: ticks(2, every=1), deadline=deadline)
    with pytest.raises(Late) as late:
        _ = [item async for item in stream]
    assert late.value.deadline == deadline
    assert outcomes(gate) == {"running": 0, "late": 1}


async def test_the_priority_decides_who_opens_a_stream_first() -> None:
    gate = checked_gate(1, 2, priorities=2)
    holder = gate.try_admit()
    calm = asyncio.create_task(_await(gate.stream(lambda: ticks(1), priority=1)))
    await asyncio.sleep(0)
    urgent = asyncio.create_task(_await(gate.stream(lambda: ticks(1), priority=0)))
    await asyncio.sleep(0)
    holder.release()
    first = await urgent
    assert not calm.done()
    await first.aclose()
    await (await calm).aclose()
