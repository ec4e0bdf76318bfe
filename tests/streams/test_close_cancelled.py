"""A native cancellation (``task.cancel()``, ``asyncio.timeout``) cannot cut a stream's close short.

The close of the wrapped stream (the SDK's HTTP response) runs to its end whatever is cancelled
around it, and only then does the cancellation go on propagating; the slot is given back once.
Each test runs twice: with anyio's asyncio backend loaded (as in this process, and wherever anyio
runs scopes: the close then shields itself with one), and as in a process that never loaded it
(there the close asks nothing of anyio: see ``boundedgate._scopes``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest

from boundedgate import GatedStream, _scopes
from tests.helpers import checked_gate
from tests.streams.sources import outcomes


@pytest.fixture(autouse=True, params=["anyio's backend loaded", "anyio's backend never loaded"])
def _anyio(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.param == "anyio's backend never loaded":
        monkeypatch.setattr(_scopes, "_ASYNCIO_BACKEND", "anyio._backends._never_loaded")
        assert _scopes.anyio_in_use() is None


#: How many awaits closing the source takes: a cancellation is delivered at each in turn.
AWAITS = 4


class _ClosesInSteps(AsyncIterator[int]):
    """A source with ``n`` items, a second apart, whose ``aclose()`` awaits :data:`AWAITS` times.

    ``at_await(i)`` is called just before the close's ``i``-th await, so that a test can cancel
    whatever is waiting for the close at exactly that point.
    """

    def __init__(self, n: int, at_await: Callable[[int], None]) -> None:
        self.left = n
        self.at_await = at_await
        self.awaits_done = 0
        self.closed = False

    async def __anext__(self) -> int:
        if self.left == 0:
            raise StopAsyncIteration
        await asyncio.sleep(1)
        self.left -= 1
        return self.left

    async def aclose(self) -> None:
        for i in range(AWAITS):
            self.at_await(i)
            await asyncio.sleep(0 if i % 2 == 0 else 1)  # a loop turn, then a second, ...
            self.awaits_done += 1
        self.closed = True


async def _by_aclose(stream: GatedStream[AsyncIterator[int]]) -> None:
    await stream.__anext__()
    await stream.aclose()


async def _by_async_with(stream: GatedStream[AsyncIterator[int]]) -> None:
    async with stream:
        await stream.__anext__()


async def _by_eof(stream: GatedStream[AsyncIterator[int]]) -> None:
    async for _ in stream:
        pass


ENDINGS: dict[str, Callable[[GatedStream[AsyncIterator[int]]], Coroutine[Any, Any, None]]] = {
    "aclose": _by_aclose,
    "async with": _by_async_with,
    "eof": _by_eof,
}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
@pytest.mark.parametrize("at", range(AWAITS))
async def test_task_cancel_at_any_await_of_the_close_waits_for_the_close_then_propagates(
    ending: str, at: int
) -> None:
    gate = checked_gate(1, 0)
    task: asyncio.Task[None] | None = None

    def at_await(i: int) -> None:
        if i == at:
            assert task is not None
            task.cancel()

    source = _ClosesInSteps(2, at_await)
    stream = gate.try_admit().hand_to(source)
    task = asyncio.create_task(ENDINGS[ending](stream))
    with pytest.raises(asyncio.CancelledError):
        await task
    assert source.closed  # the close ran to its end before the cancellation went on
    assert outcomes(gate) == {"running": 0, "completed": 1}
    await stream.aclose()  # nothing is left to do
    assert source.awaits_done == AWAITS


async def test_a_cancellation_at_every_await_of_the_close_still_lets_it_finish() -> None:
    gate = checked_gate(1, 0)
    task: asyncio.Task[None] | None = None

    def at_await(i: int) -> None:
        assert task is not None
        task.cancel()

    source = _ClosesInSteps(1, at_await)
    stream = gate.try_admit().hand_to(source)
    task = asyncio.create_task(_by_aclose(stream))
    with pytest.raises(asyncio.CancelledError):
        await task
    assert source.closed
    assert outcomes(gate) == {"running": 0, "completed": 1}


async def test_a_read_cancelled_then_cancelled_again_in_the_close_is_failed_and_closed() -> None:
    gate = checked_gate(1, 0)
    task: asyncio.Task[None] | None = None

    def at_await(i: int) -> None:
        if i == 1:
            assert task is not None
            task.cancel()

    source = _ClosesInSteps(5, at_await)
    stream = gate.try_admit().hand_to(source)
    task = asyncio.create_task(_by_eof(stream))
    await asyncio.sleep(1.5)
    task.cancel()  # during the second read: the close begins, and is cancelled again there
    with pytest.raises(asyncio.CancelledError):
        await task
    assert source.closed
    assert outcomes(gate) == {"running": 0, "failed": 1}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
@pytest.mark.parametrize("at", range(AWAITS))
async def test_a_timeout_expiring_at_any_await_of_the_close_raises_timeout_error_after_it(
    ending: str, at: int
) -> None:
    gate = checked_gate(1, 0)
    loop = asyncio.get_running_loop()
    expire: Callable[[], None] | None = None

    def at_await(i: int) -> None:
        if i == at:
            assert expire is not None
            expire()

    source = _ClosesInSteps(2, at_await)
    stream = gate.try_admit().hand_to(source)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(None) as timeout:
            expire = lambda: timeout.reschedule(loop.time())  # noqa: E731  # expires at once
            await ENDINGS[ending](stream)
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0
    assert source.closed
    assert outcomes(gate) == {"running": 0, "completed": 1}


class _TurnByTurn(AsyncIterator[int]):
    """Items a loop turn apart; closing takes three loop turns (the issue's reproduction)."""

    def __init__(self, n: int) -> None:
        self.left = n
        self.closed = False

    async def __anext__(self) -> int:
        if self.left == 0:
            raise StopAsyncIteration
        await asyncio.sleep(0)
        self.left -= 1
        return self.left

    async def aclose(self) -> None:
        for _ in range(3):
            await asyncio.sleep(0)
        self.closed = True


@pytest.mark.parametrize("ending", sorted(ENDINGS))
@pytest.mark.parametrize("turns", range(12))
async def test_cancelled_after_any_number_of_loop_turns_the_source_is_closed_and_the_slot_back(
    ending: str, turns: int
) -> None:
    gate = checked_gate(1, 0)
    source = _TurnByTurn(3)
    stream = gate.try_admit().hand_to(source)
    task = asyncio.create_task(ENDINGS[ending](stream))
    for _ in range(turns):
        await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):  # it may have ended before the cancellation
        await task
    if task.cancelled() and source.left == 3 and not source.closed:
        # Cancelled before it ever read: nothing was begun, and the stream is still open.
        await stream.aclose()
    assert source.closed
    stats = gate.stats()
    assert (stats.running, stats.finished) == (0, 1)
