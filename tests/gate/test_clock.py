"""The gate reads its loop's clock: ``time.monotonic`` itself for asyncio's own loops, else ``loop.time``.

Every async test here runs on looptime's fast-forwarding loop, whose class has a clock of its own;
the tests of asyncio's stock loop run one themselves, with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from boundedgate import BoundedGate, Late, Status
from boundedgate._driver._compat import clock_of


def test_an_asyncio_loop_is_read_through_time_monotonic() -> None:
    loop = asyncio.new_event_loop()
    try:
        assert clock_of(loop) is time.monotonic
    finally:
        loop.close()


def test_a_loop_with_a_clock_of_its_own_is_read_through_it() -> None:
    class Shifted(asyncio.SelectorEventLoop):
        def time(self) -> float:
            return super().time() + 1000.0

    loop = Shifted()
    try:
        clock = clock_of(loop)
        assert clock == loop.time
        assert clock() >= time.monotonic() + 999.0
    finally:
        loop.close()


def test_a_time_set_on_the_loop_itself_is_read() -> None:
    loop = asyncio.new_event_loop()
    try:
        loop.time = lambda: 5.0  # type: ignore[method-assign]
        assert clock_of(loop)() == 5.0
    finally:
        loop.close()


async def test_a_fast_forwarding_loop_is_read_through_its_method() -> None:
    loop = asyncio.get_running_loop()
    assert clock_of(loop) == loop.time
    gate = BoundedGate(max_running=1, max_waiting=1)
    with pytest.raises(Late):
        async with gate.admit(timeout=30) as permit:
            await asyncio.sleep(100)  # virtual: the gate's readings are the loop's
    assert permit.arrival is not None
    assert permit.ended is not None
    assert permit.ended - permit.arrival == pytest.approx(100)
    assert permit.status is Status.LATE


def test_on_asyncio_s_loop_the_gate_reads_the_clock_its_timers_use() -> None:
    # A waiter's expiry is a loop timer armed at a deadline the gate read: read on another clock,
    # the deadline would not lie within the budget ahead of the loop's now. Nothing sleeps.
    async def run() -> None:
        loop = asyncio.get_running_loop()
        gate = BoundedGate(max_running=1, max_waiting=1)
        async with gate.admit():
            waiter = gate.admit(timeout=30)
            entering = asyncio.create_task(waiter.__aenter__())
            await asyncio.sleep(0)
            now = loop.time()
            assert waiter.status is Status.QUEUED
            assert waiter.arrival is not None
            assert now - 1 < waiter.arrival <= now
            assert waiter.deadline == waiter.arrival + 30
            assert gate._timer is not None
            assert gate._timer.when() == waiter.deadline
            entering.cancel()
            with pytest.raises(asyncio.CancelledError):
                await entering
        assert (gate.running, gate.waiting, gate.stats().cancelled) == (0, 0, 1)

    asyncio.run(run())
