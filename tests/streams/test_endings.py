"""Every way a stream ends gives its slot back once, with the documented outcome, and closes the source."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator

import anyio
import pytest

from boundedgate import BoundedGate, GatedStream, Late, Status
from tests.helpers import checked_gate
from tests.streams.sources import Broken, Log, outcomes, settle, ticks


def _stream(gate: BoundedGate, log: Log, n: int = 3, **kwargs: object) -> GatedStream[AsyncIterator[int]]:
    every = float(kwargs.pop("every", 1.0))  # type: ignore[arg-type]
    fail_at = kwargs.pop("fail_at", None)
    permit = gate.try_admit(**kwargs)  # type: ignore[arg-type]
    return permit.hand_to(ticks(n, log, every=every, fail_at=fail_at))  # type: ignore[arg-type]


async def test_eof_before_the_deadline_is_completed_and_closes_the_source() -> None:
    gate = checked_gate(2, 0)
    log = Log()
    stream = _stream(gate, log, timeout=10)
    assert [item async for item in stream] == [0, 1, 2]
    assert outcomes(gate) == {"running": 0, "completed": 1}
    assert log.closed
    assert gate.stats().run_seconds_total == 3.0  # the slot was held until the end of the stream


async def test_eof_at_or_after_the_deadline_raises_late_in_place_of_stop() -> None:
    gate = checked_gate(2, 0, name="openai")
    log = Log()
    stream = _stream(gate, log, timeout=3)  # the third item arrives at 3 s: the deadline
    received = []
    with pytest.raises(Late) as raised:
        async for item in stream:
            received.append(item)
    assert received == [0, 1, 2]
    late = raised.value
    assert (late.gate, late.deadline, late.overrun, late.elapsed) == ("openai", 3.0, 0.0, 3.0)
    assert outcomes(gate) == {"running": 0, "late": 1}
    assert log.closed
    with pytest.raises(StopAsyncIteration):  # raised once; the stream is over
        await stream.__anext__()


async def test_raise_late_false_records_a_late_end_without_raising() -> None:
    gate = checked_gate(2, 0)
    stream = gate.try_admit(timeout=1).hand_to(ticks(3, every=1), raise_late=False)
    assert [item async for item in stream] == [0, 1, 2]
    assert outcomes(gate) == {"running": 0, "late": 1}


async def test_an_error_from_the_stream_is_failed_propagates_and_closes_the_source() -> None:
    gate = checked_gate(2, 0)
    log = Log()
    stream = _stream(gate, log, fail_at=1)
    with pytest.raises(Broken):
        async for _ in stream:
            pass
    assert outcomes(gate) == {"running": 0, "failed": 1}
    assert log.closed


@pytest.mark.parametrize("method", ["aclose", "close"])
async def test_aclose_and_close_release_once_and_close_the_source(method: str) -> None:
    gate = checked_gate(2, 0)
    log = Log()
    stream = _stream(gate, log, timeout=10)
    assert await stream.__anext__() == 0
    await getattr(stream, method)()
    assert outcomes(gate) == {"running": 0, "completed": 1}
    assert log.closed
    await stream.aclose()
    await stream.close()
    assert outcomes(gate) == {"running": 0, "completed": 1}
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()


async def test_closing_early_past_the_deadline_counts_late_and_raises_nothing() -> None:
    gate = checked_gate(2, 0)
    stream = _stream(gate, Log(), timeout=1, every=2)
    await stream.__anext__()
    await stream.aclose()
    assert outcomes(gate) == {"running": 0, "late": 1}


async def test_async_with_exit_releases_as_completed() -> None:
    gate = checked_gate(2, 0)
    log = Log()
    async with _stream(gate, log) as stream:
        assert await stream.__anext__() == 0
    assert outcomes(gate) == {"running": 0, "completed": 1}
    assert log.closed


async def test_async_with_exit_by_an_exception_is_failed() -> None:
    gate = checked_gate(2, 0)
    log = Log()
    with pytest.raises(KeyError):
        async with _stream(gate, log) as stream:
            async for _ in stream:
                raise KeyError("the consumer's own bug")
    assert outcomes(gate) == {"running": 0, "failed": 1}
    assert log.closed


async def test_break_releases_within_a_loop_turn_and_closes_the_source() -> None:
    gate = checked_gate(2, 0)
    log = Log()
    stream = _stream(gate, log, timeout=10)
    async for _ in stream:
        break
    # asyncio's asyncgen finaliser runs the wrapper's iterator's finally in a task of its own.
    await settle()
    assert outcomes(gate) == {"running": 0, "completed": 1}
    assert log.closed
    assert [item async for item in stream] == []  # the stream is over: iterating again yields nothing


async def test_break_from_inside_async_with_releases_at_the_exit() -> None:
    gate = checked_gate(2, 0)
    log = Log()
    async with _stream(gate, log) as stream:
        async for _ in stream:
            break
    assert outcomes(gate) == {"running": 0, "completed": 1}
    assert log.closed


async def test_a_consumer_cancelled_while_it_reads_is_failed() -> None:
    gate = checked_gate(2, 0)
    log = Log()
    stream = _stream(gate, log, every=10)

    async def consume() -> None:
        async for _ in stream:
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(15)  # one item read, waiting for the second
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert outcomes(gate) == {"running": 0, "failed": 1}
    assert log.closed


async def test_a_consumer_cancelled_in_the_loop_body_inside_async_with_is_failed() -> None:
    gate = checked_gate(2, 0)
    log = Log()
    stream = _stream(gate, log)

    async def consume() -> None:
        async with stream:
            async for _ in stream:
                await asyncio.sleep(100)

    task = asyncio.create_task(consume())
    await asyncio.sleep(5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert outcomes(gate) == {"running": 0, "failed": 1}
    assert log.closed


async def test_an_anyio_cancel_scope_cannot_interrupt_the_release_or_the_close() -> None:
    # anyio re-delivers a cancellation at every await inside a cancelled scope: the release comes
    # before any await, and the wrapper's close of the source is shielded.
    gate = checked_gate(2, 0)
    source = _SlowToClose()
    stream = gate.try_admit().hand_to(source)
    with anyio.move_on_after(15):
        async for _ in stream:
            pass
    assert outcomes(gate) == {"running": 0, "failed": 1}
    assert source.closed


class _SlowToClose(AsyncIterator[int]):
    """An item every 10 s; closing takes two awaits (an HTTP response's close awaits too)."""

    closed = False

    async def __anext__(self) -> int:
        await asyncio.sleep(10)
        return 0

    async def aclose(self) -> None:
        await asyncio.sleep(0)
        await asyncio.sleep(1)
        self.closed = True


async def test_an_unclosed_stream_collected_is_leaked_with_a_resource_warning_naming_the_gate() -> None:
    gate = checked_gate(2, 0, name="anthropic")
    log = Log()
    stream = _stream(gate, log)
    await stream.__anext__()
    gc.disable()  # reference counting alone must finalise it: the wrapper holds no cycle
    try:
        with pytest.warns(ResourceWarning, match=r"unclosed <GatedStream of gate 'anthropic': running"):
            del stream
    finally:
        gc.enable()
    assert gate.running == 1  # given back on the loop, never from inside a finaliser
    await settle()
    assert outcomes(gate) == {"running": 0, "leaked": 1}
    assert log.closed


async def test_a_stream_that_was_never_iterated_is_closed_when_collected() -> None:
    # The SDKs never close a stream nobody iterated; the wrapper does.
    gate = checked_gate(2, 0)
    closed = []

    class Unstarted(AsyncIterator[int]):
        async def __anext__(self) -> int:
            raise StopAsyncIteration

        async def close(self) -> None:
            closed.append(True)

    stream = gate.try_admit().hand_to(Unstarted())
    with pytest.warns(ResourceWarning):
        del stream
    await settle()
    assert closed == [True]
    assert outcomes(gate) == {"running": 0, "leaked": 1}


async def test_a_stream_collected_in_another_thread_is_released_on_its_loop() -> None:
    gate = checked_gate(2, 0)
    log = Log()
    held = [_stream(gate, log)]
    await held[0].__anext__()
    with pytest.warns(ResourceWarning):
        await asyncio.to_thread(held.clear)
    await settle()
    assert outcomes(gate) == {"running": 0, "leaked": 1}
    assert log.closed


def test_a_stream_collected_after_its_loop_closed_still_gives_the_slot_back() -> None:
    gate = BoundedGate(max_running=1, max_waiting=0, name="openai")
    loop = asyncio.new_event_loop()

    async def open_stream() -> GatedStream[AsyncIterator[int]]:
        return gate.try_admit().hand_to(_Endless())

    stream = loop.run_until_complete(open_stream())
    loop.close()
    with pytest.warns(ResourceWarning, match="event loop is closed: the stream could not be closed"):
        del stream
    assert gate.running == 0
    assert gate.stats().leaked == 1


class _Endless(AsyncIterator[int]):
    async def __anext__(self) -> int:
        return 0


async def test_a_stream_ended_by_its_permit_s_release_is_still_closed() -> None:
    gate = checked_gate(2, 0)
    log = Log()
    permit = gate.try_admit()
    stream = permit.hand_to(ticks(3, log))
    await stream.__anext__()
    permit.release()
    assert outcomes(gate) == {"running": 0, "completed": 1}
    await stream.aclose()
    assert log.closed
    assert outcomes(gate) == {"running": 0, "completed": 1}


async def test_status_after_each_end_is_final() -> None:
    gate = checked_gate(1, 0)
    permit = gate.try_admit()
    stream = permit.hand_to(ticks(1))
    async for _ in stream:
        pass
    assert permit.status is Status.COMPLETED
