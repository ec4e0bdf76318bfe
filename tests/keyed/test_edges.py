"""Queue budgets, quiet lateness and a client that went away, through keyed gates and admit_all."""

from __future__ import annotations

import asyncio
import logging

import pytest

from boundedgate import BoundedGate, KeyedGate, Late, QueueExpired, QueueFull, Status, admit_all


async def test_a_key_s_queue_budget_expires_its_waiter_and_raise_late_false_counts_quietly() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=1, name="tenant")
    loop = asyncio.get_running_loop()
    async with tenants.admit("a", timeout=10, raise_late=False) as holder:
        start = loop.time()
        with pytest.raises(QueueExpired):
            async with tenants.admit("a", timeout=120, max_wait=2):
                pytest.fail("it never starts")
        assert loop.time() - start == 2
        await asyncio.sleep(9)  # the holder runs past its deadline: counted, not raised
    assert holder.status is Status.LATE
    assert (tenants.stats().total.expired, tenants.stats().total.late) == (1, 1)


async def test_admit_all_s_queue_budget_covers_the_whole_call_and_only_the_deadline_decides_late() -> None:
    first = BoundedGate(max_running=1, max_waiting=1, name="first")
    second = BoundedGate(max_running=1, max_waiting=1, name="second")
    loop = asyncio.get_running_loop()
    blocker = first.try_admit()
    loop.call_later(1, blocker.release)  # the first step waits 1 s of the 3 s budget
    holder = second.try_admit()
    start = loop.time()
    with pytest.raises(QueueExpired) as caught:
        async with admit_all(first, second, timeout=60, max_wait=3):
            pytest.fail("the second step never starts")
    assert loop.time() - start == 3  # 1 s at the first step, 2 s at the second: the whole call's 3 s
    assert caught.value.gate == "second"
    assert caught.value.waited == 3
    holder.release()
    async with admit_all(first, second, timeout=1, max_wait=0.5, raise_late=False) as combined:
        await asyncio.sleep(2)
    assert combined.status is Status.LATE
    with pytest.raises(Late):
        async with admit_all(first, second, timeout=1):
            await asyncio.sleep(2)


async def test_an_aborted_combined_request_is_aborted_at_every_gate() -> None:
    first = BoundedGate(max_running=1, max_waiting=0, name="first")
    second = BoundedGate(max_running=1, max_waiting=0, name="second")
    async with admit_all(first, second) as combined:
        combined.abort()
        assert (first.running, second.running, combined.status) == (0, 0, Status.ABORTED)
    assert (first.stats().aborted, second.stats().aborted) == (1, 1)


async def test_a_key_s_refusals_are_logged_with_its_key_moved_permits_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A keyed gate's keys share one reporter, which reads the state and key from the refused permit's
    # gate: a permit taken before its key was listed by another is moved to that gate, and named so.
    keyed: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, name="k")
    early = keyed.admit("b")  # b has no gate yet: this permit's gate is a fresh one
    with caplog.at_level(logging.INFO, logger="boundedgate"):
        holder = keyed.try_admit("a")
        with pytest.raises(QueueFull):
            keyed.try_admit("a")
        other = keyed.try_admit("b")  # lists b's gate: `early` will move to it
        with pytest.raises(QueueFull):
            async with early:
                pytest.fail("b's slot is held")
        with pytest.raises(QueueExpired):
            async with keyed.admit("c", deadline=asyncio.get_running_loop().time()):
                pytest.fail("its deadline had passed")  # refused before it was counted: not logged
    refused = [(r.gate, r.rate_limit_key, r.outcome) for r in caplog.records]  # type: ignore[attr-defined]
    assert refused == [("k", "k/a", "rejected"), ("k", "k/b", "rejected")]
    holder.release()
    other.release()
