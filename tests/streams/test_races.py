"""Races between the tasks around one stream: a close while another task reads, reading after a break.

The rule: a close ends the stream at once for every reader. A read in flight in another task is
interrupted (it never yields what it was reading, and ends as the end of the stream), and the
close returns once the wrapped stream is closed; a stream has one reader at a time; once the
consumer has left an ``async for`` early, or the stream is closed, every read is the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator

import pytest

from boundedgate import GatedStream
from tests.helpers import checked_gate
from tests.streams.sources import Log, SdkLike, outcomes, settle, ticks


def _cancelling(task: asyncio.Task[object]) -> int:
    return task.cancelling() if sys.version_info >= (3, 11) else 0


async def _read_all(stream: GatedStream[AsyncIterator[int]], into: list[int]) -> str:
    async for item in stream:
        into.append(item)
    return "ended"


@pytest.mark.parametrize("method", ["aclose", "close", "__aexit__"])
async def test_a_close_while_another_task_reads_interrupts_the_read_and_closes_the_source(
    method: str,
) -> None:
    gate = checked_gate(1, 0)
    log = Log()
    stream = gate.try_admit().hand_to(ticks(5, log, every=10))
    received: list[int] = []
    reader = asyncio.create_task(_read_all(stream, received))
    await asyncio.sleep(15)  # one item read, the second on its way
    close = getattr(stream, method)
    await (close(None, None, None) if method == "__aexit__" else close())  # no RuntimeError
    assert log.closed  # the close returned once the async generator was closed
    assert asyncio.get_running_loop().time() == 15  # the read was interrupted, not waited for
    assert outcomes(gate) == {"running": 0, "completed": 1}
    assert await reader == "ended"  # the reader sees the end of the stream, not a cancellation
    assert _cancelling(reader) == 0
    assert received == [0]
    assert log.sent == 1


async def test_the_interrupted_reader_sees_the_end_once_the_source_is_closed() -> None:
    gate = checked_gate(1, 0)
    source = _SlowToClose()
    stream = gate.try_admit().hand_to(source)
    reader = asyncio.create_task(stream.__anext__())
    await asyncio.sleep(5)
    closing = asyncio.create_task(stream.aclose())
    with pytest.raises(StopAsyncIteration):
        await reader
    assert source.closed  # as at the end of a stream: closed by the time the end is seen
    await closing


class _SlowToClose(AsyncIterator[int]):
    """An item every 10 s; closing takes a second."""

    closed = False

    async def __anext__(self) -> int:
        await asyncio.sleep(10)
        return 0

    async def aclose(self) -> None:
        await asyncio.sleep(1)
        self.closed = True


async def test_an_item_that_arrives_as_the_stream_is_closed_is_never_yielded() -> None:
    gate = checked_gate(1, 0)
    stream = gate.try_admit().hand_to(_Ready())
    reader = asyncio.create_task(stream.__anext__())
    await asyncio.sleep(0)  # the reader is inside the read, its item ready
    await stream.aclose()
    with pytest.raises(StopAsyncIteration):
        await reader
    assert _cancelling(reader) == 0
    assert outcomes(gate) == {"running": 0, "completed": 1}


class _Ready(AsyncIterator[int]):
    """A source whose read takes one loop turn, and that returns its item even when cancelled."""

    async def __anext__(self) -> int:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)
        return 1


async def test_a_close_while_a_helper_drains_the_stream_ends_the_helper_with_an_error() -> None:
    gate = checked_gate(1, 0)
    sdk = SdkLike(5, every=10)
    stream = gate.try_admit().hand_to(sdk)
    drain = asyncio.create_task(stream.get_final_message())
    await asyncio.sleep(15)
    await stream.aclose()
    with pytest.raises(RuntimeError, match=r"closed while until_done\(\) read it"):
        await drain
    assert _cancelling(drain) == 0
    assert sdk.log.closed
    assert outcomes(gate) == {"running": 0, "completed": 1}


@pytest.mark.parametrize("when", ["just before", "just after"])
async def test_the_reader_s_own_cancellation_in_the_same_loop_turn_as_the_interruption_is_kept(
    when: str,
) -> None:
    gate = checked_gate(1, 0)
    log = Log()
    stream = gate.try_admit().hand_to(_slow_to_clean_up(log))
    reader = asyncio.create_task(_read_all(stream, []))
    await asyncio.sleep(15)
    if when == "just before":
        reader.cancel()  # pending: the reader has not run since
        closing = asyncio.create_task(stream.aclose())
        await asyncio.sleep(0)
    else:
        closing = asyncio.create_task(stream.aclose())
        await asyncio.sleep(0)  # the close has interrupted the read; the reader has not run yet
        reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    assert _cancelling(reader) == 1  # its own: the interruption's, if any, was taken back
    await closing
    assert log.closed
    assert outcomes(gate) == {"running": 0, "completed": 1}


async def _slow_to_clean_up(log: Log) -> AsyncIterator[int]:
    """An item every 10 s, and a cleanup that takes a second, however the generator ends."""
    try:
        while True:
            await asyncio.sleep(10)
            log.sent += 1
            yield log.sent
    finally:
        await asyncio.sleep(1)
        log.closed = True


async def test_a_second_reader_is_refused_and_the_first_reads_on() -> None:
    gate = checked_gate(1, 0)
    stream = gate.try_admit().hand_to(ticks(3, every=10))
    received: list[int] = []
    first = asyncio.create_task(_read_all(stream, received))
    await asyncio.sleep(5)
    with pytest.raises(RuntimeError, match="another task is reading"):
        await stream.__anext__()
    assert outcomes(gate) == {"running": 1}  # the refused read ended nothing
    assert await first == "ended"
    assert received == [0, 1, 2]
    assert outcomes(gate) == {"running": 0, "completed": 1}


async def test_iterating_again_at_once_after_a_break_reads_nothing_more() -> None:
    gate = checked_gate(1, 0)
    log = Log()
    stream = gate.try_admit().hand_to(ticks(5, log, every=1))
    async for _ in stream:
        break
    assert [item async for item in stream] == []  # before the break's release has even run
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()
    assert log.sent == 1  # nothing was read without the slot
    await settle()
    assert outcomes(gate) == {"running": 0, "completed": 1}
    assert log.closed


async def test_reading_ahead_inside_the_loop_body_is_not_leaving_the_loop() -> None:
    gate = checked_gate(1, 0)
    stream = gate.try_admit().hand_to(ticks(4, every=1))
    pairs = []
    async for item in stream:
        pairs.append((item, await stream.__anext__()))
    assert pairs == [(0, 1), (2, 3)]
    assert outcomes(gate) == {"running": 0, "completed": 1}


async def test_an_iterator_made_but_never_started_ends_nothing() -> None:
    gate = checked_gate(1, 0)
    sdk = SdkLike(2)
    stream = gate.try_admit().hand_to(sdk)
    aiter(stream)  # dropped at once, unstarted
    assert hasattr(stream, "text_stream")  # makes a loop over the SDK's text_stream, and drops it
    await settle()
    assert outcomes(gate) == {"running": 1}
    assert [item async for item in stream] == [0, 1]
    assert outcomes(gate) == {"running": 0, "completed": 1}


async def test_leaving_a_loop_over_text_stream_early_ends_the_stream() -> None:
    gate = checked_gate(1, 0)
    sdk = SdkLike(3)
    stream = gate.try_admit().hand_to(sdk)
    async for _ in stream.text_stream:
        break
    assert [item async for item in stream] == []
    await settle()
    assert sdk.log.closed
    assert outcomes(gate) == {"running": 0, "completed": 1}


async def test_a_loop_closed_explicitly_releases_at_once() -> None:
    gate = checked_gate(1, 0)
    log = Log()
    stream = gate.try_admit().hand_to(ticks(3, log))
    loop: AsyncIterator[int] = aiter(stream)
    assert await anext(loop) == 0
    await loop.aclose()  # type: ignore[attr-defined]  # what contextlib.aclosing calls
    assert outcomes(gate) == {"running": 0, "completed": 1}
    assert log.closed
