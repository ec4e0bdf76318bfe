"""A smoke run of the asyncio driver on real event loops, for Pythons the test suite cannot run on.

The suite needs Python >= 3.11 (its virtual clock, looptime, does), but the library supports 3.10,
where the driver takes other paths to the current task and to a pending cancellation. This script
walks those paths with deterministic waits (events and orderings, never speed) and exits non-zero
on the first wrong answer. `make compat` runs it on every Python it finds.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

from boundedgate import BoundedGate, Late, QueueExpired, QueueFull, Status


async def already_cancelled_is_refused_uncounted() -> None:
    gate = BoundedGate(max_running=1, max_waiting=1)

    async def request() -> None:
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        async with gate.admit():
            raise AssertionError("a cancelled caller started")

    task = asyncio.create_task(request())
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert task.cancelled()
    assert gate.stats().arrived == 0, gate.stats()


async def hand_off_cancellation_race_and_fifo() -> None:
    gate = BoundedGate(max_running=1, max_waiting=3)
    holder = gate.try_admit()
    first = asyncio.create_task(gate.admit().__aenter__())
    second = asyncio.create_task(gate.admit().__aenter__())
    await asyncio.sleep(0)
    assert gate.waiting == 2
    holder.release()  # the slot goes to `first` ...
    first.cancel()  # ... which is cancelled before it resumes: it passes on to `second`
    with contextlib.suppress(asyncio.CancelledError):
        await first
    permit = await second
    assert permit.status is Status.RUNNING
    try:
        gate.try_admit()
    except QueueFull:
        pass
    else:
        raise AssertionError("try_admit barged in")
    permit.release()
    stats = gate.stats()
    assert (stats.admitted, stats.cancelled, stats.running, stats.waiting) == (2, 1, 0, 0), stats


async def deadlines_expire_and_late_is_raised() -> None:
    gate = BoundedGate(max_running=1, max_waiting=1)
    holder = gate.try_admit()
    try:
        async with gate.admit(timeout=0.01):
            raise AssertionError("started while the slot was held")
    except QueueExpired:
        pass
    holder.release()
    try:
        async with gate.admit(timeout=0.01):
            await asyncio.sleep(0.02)
    except Late:
        pass
    else:
        raise AssertionError("no Late")
    assert gate.stats().expired == gate.stats().late == 1


async def a_stream_holds_its_slot_to_its_end() -> None:
    gate = BoundedGate(max_running=1, max_waiting=0)

    async def chunks():  # type: ignore[no-untyped-def]
        for i in range(3):
            await asyncio.sleep(0)
            yield i

    stream = await gate.stream(chunks)
    assert gate.running == 1
    assert [i async for i in stream] == [0, 1, 2]
    assert gate.running == 0
    assert gate.stats().completed == 1


async def main() -> None:
    for check in (
        already_cancelled_is_refused_uncounted,
        hand_off_cancellation_race_and_fifo,
        deadlines_expire_and_late_is_raised,
        a_stream_holds_its_slot_to_its_end,
    ):
        await check()
        print(f"ok  {check.__name__}")


if __name__ == "__main__":
    asyncio.run(main())
    print(f"boundedgate smoke run passed on Python {sys.version.split()[0]}")
