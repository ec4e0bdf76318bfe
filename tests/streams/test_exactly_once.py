"""Any sequence of ways to end a stream counts exactly one outcome, the first one's, and frees the slot."""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from collections.abc import AsyncIterator

from hypothesis import given
from hypothesis import strategies as st

from boundedgate import GatedStream, Late, Permit
from tests.helpers import checked_gate, run_virtual
from tests.streams.sources import Broken, Log, settle, ticks

#: Each way to end a stream, and the outcome it gives when it comes first: "by time" is completed,
#: or late at or after the deadline.
ENDINGS = {
    "eof": "by time",
    "error": "failed",
    "aclose": "by time",
    "close": "by time",
    "aexit": "by time",
    "aexit_raising": "failed",
    "break": "by time",
    "cancel": "failed",
    "gc": "leaked",
    "release": "by time",
}


async def _end(how: str, held: list[GatedStream[AsyncIterator[int]]], permit: Permit) -> None:
    if how == "release":
        permit.release()
        return
    if not held:
        return
    if how == "gc":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            held.clear()
        await settle()
        return
    stream = held[0]
    if how == "eof":
        with contextlib.suppress(Late):
            async for _ in stream:
                pass
    elif how == "error":
        with contextlib.suppress(Broken, StopAsyncIteration):
            await stream.__anext__()
    elif how in ("aclose", "close"):
        await getattr(stream, how)()
    elif how == "aexit":
        await stream.__aexit__(None, None, None)
    elif how == "aexit_raising":
        error = KeyError("body")
        await stream.__aexit__(KeyError, error, None)
    elif how == "break":
        async for _ in stream:
            break
    elif how == "cancel":
        task = asyncio.create_task(_read_one(stream))
        await asyncio.sleep(0.5)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
            await task
    del stream
    await settle()


async def _read_one(stream: GatedStream[AsyncIterator[int]]) -> None:
    await stream.__anext__()


async def _scenario(endings: list[str], n: int, read: int, timeout: float | None) -> None:
    gate = checked_gate(1, 0)
    log = Log()
    first = endings[0]
    permit = gate.try_admit(timeout=timeout)
    source = ticks(n, log, every=1, fail_at=read if first == "error" else None)
    held: list[GatedStream[AsyncIterator[int]]] = [permit.hand_to(source)]
    for _ in range(read):
        await held[0].__anext__()
    loop = asyncio.get_running_loop()
    started = loop.time()
    for how in endings:
        await _end(how, held, permit)
        if how == first:
            ended_at = loop.time()
    stats = gate.stats()
    assert (stats.running, stats.finished) == (0, 1)
    expected = ENDINGS[first]
    if expected == "by time":
        # "eof" and "break" read on before ending; the others end where the reading stopped.
        end = {"eof": started + (n - read), "break": started + 1}.get(first, started)
        assert ended_at >= end
        expected = "late" if timeout is not None and end >= timeout else "completed"
    assert getattr(stats, expected) == 1, (expected, stats)
    if held:
        await held[0].aclose()
    await settle()
    assert gate.stats().finished == 1
    assert log.closed or (read == 0 and first not in ("eof", "error", "break"))


@given(
    endings=st.lists(st.sampled_from(sorted(ENDINGS)), min_size=1, max_size=4),
    n=st.integers(1, 4),
    read=st.integers(0, 3),
    timeout=st.none() | st.integers(1, 6).map(float),
)
def test_any_sequence_of_endings_counts_exactly_the_first_one(
    endings: list[str], n: int, read: int, timeout: float | None
) -> None:
    read = min(read, n - 1)  # at least one item left, for "error", "break" and "cancel" to read
    run_virtual(_scenario, endings, n, read, timeout)
