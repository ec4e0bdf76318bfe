"""The gate reads its loop's clock: ``time.monotonic`` itself for asyncio's own loops, else ``loop.time``.

Every async test here runs on looptime's fast-forwarding loop, whose class has a clock of its own;
the tests of asyncio's stock loop run one themselves, with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from boundedgate import BoundedGate, Late, QueueExpired, Status
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
    # A waiter's expiry is a loop timer armed at a deadline the gate read: on another clock it
    # would fire at once, or never. (10 ms of real time: the outcome does not depend on speed.)
    async def run() -> tuple[float, float, float, QueueExpired]:
        loop = asyncio.get_running_loop()
        gate = BoundedGate(max_running=1, max_waiting=1)
        before = loop.time()
        async with gate.admit() as permit:
            start = time.monotonic()
            with pytest.raises(QueueExpired) as expired:
                async with gate.admit(timeout=0.01):
                    pass
            assert time.monotonic() - start >= 0.01
        after = loop.time()
        assert permit.arrival is not None
        return before, permit.arrival, after, expired.value

    before, arrival, after, expired = asyncio.run(run())
    assert before <= arrival <= after
    assert expired.waited >= 0.01 - 1e-9  # the timer fired at the deadline, on the same clock
