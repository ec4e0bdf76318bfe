"""``admit(on_deadline="cut")``: a body still running at its deadline is cancelled then (issue 29).

The slot is held until the body has really stopped, the request counts as ``cut`` (never ``failed``
nor ``late``), and the block's exit raises :class:`DeadlineCut`, a ``TimeoutError``; a caller's own
cancellation stays a cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundedgate import BoundedGate, DeadlineCut, GateError, KeyedGate, Late
from tests.helpers import checked_gate, run_virtual


def counts(gate: BoundedGate) -> tuple[int, int, int, int]:
    s = gate.stats()
    return (s.completed, s.late, s.cut, s.failed)


async def test_a_body_past_its_deadline_is_cancelled_then_and_counted_cut_once() -> None:
    gate = checked_gate(1, 0)
    loop = asyncio.get_running_loop()
    seen: list[float] = []
    with pytest.raises(DeadlineCut) as caught:
        async with gate.admit(timeout=2, on_deadline="cut"):
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                seen.append(loop.time())
                raise
    assert seen == [2.0]
    assert loop.time() == 2.0
    error = caught.value
    assert isinstance(error, TimeoutError)
    assert isinstance(error, GateError)
    assert (error.code, error.gate, error.waited, error.elapsed, error.overrun) == (
        "cut",
        "test",
        0,
        2.0,
        0.0,
    )
    assert isinstance(error.__cause__, asyncio.CancelledError)
    assert counts(gate) == (0, 0, 1, 0)
    assert gate.stats().finished == 1
    assert gate.running == 0
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0  # the cut was taken back


async def test_without_the_option_the_body_runs_on_and_is_late() -> None:
    gate = checked_gate(1, 0)
    with pytest.raises(Late):
        async with gate.admit(timeout=2):
            await asyncio.sleep(10)
    assert asyncio.get_running_loop().time() == 10.0
    assert counts(gate) == (0, 1, 0, 0)


async def test_the_slot_is_held_until_a_body_that_shields_its_clean_up_has_stopped() -> None:
    gate = checked_gate(1, 1)
    loop = asyncio.get_running_loop()
    started: list[float] = []

    async def cut_one() -> None:
        async with gate.admit(timeout=2, on_deadline="cut"):
            try:
                await asyncio.sleep(10)
            finally:
                await asyncio.shield(asyncio.sleep(3))  # the clean-up: 2 s to 5 s

    async def next_one() -> None:
        async with gate.admit(timeout=100):
            started.append(loop.time())

    first = asyncio.create_task(cut_one())
    await asyncio.sleep(0)
    second = asyncio.create_task(next_one())
    await asyncio.sleep(2.5)
    assert (gate.running, gate.waiting) == (1, 1)  # cut at 2 s, but its clean-up still runs
    with pytest.raises(DeadlineCut) as caught:
        await first
    await second
    assert started == [5.0]
    assert caught.value.overrun == 3.0
    assert counts(gate) == (1, 0, 1, 0)


async def test_a_body_finishing_before_its_deadline_is_completed_and_never_cancelled() -> None:
    gate = checked_gate(1, 0)
    async with gate.admit(timeout=2, on_deadline="cut"):
        await asyncio.sleep(1.5)
    await asyncio.sleep(5)  # the timer was disarmed: nothing is cancelled later
    assert counts(gate) == (1, 0, 0, 0)


async def test_a_body_ending_at_its_deadline_is_cut_as_in_the_simulator() -> None:
    gate = checked_gate(1, 0)
    loop = asyncio.get_running_loop()

    async def work() -> None:
        async with gate.admit(deadline=2.0, on_deadline="cut"):
            # No await that the cut could land on: the body reaches its end at the deadline.
            while loop.time() < 2.0:
                await asyncio.sleep(2.0 - loop.time())

    with pytest.raises(DeadlineCut):
        await work()
    assert counts(gate) == (0, 0, 1, 0)


async def test_a_body_that_raises_before_its_deadline_is_failed_and_its_error_propagates() -> None:
    gate = checked_gate(1, 0)
    with pytest.raises(KeyError):
        async with gate.admit(timeout=2, on_deadline="cut"):
            await asyncio.sleep(1)
            raise KeyError("x")
    assert counts(gate) == (0, 0, 0, 1)


async def test_a_body_that_turns_the_cut_into_its_own_error_is_cut_and_keeps_its_error() -> None:
    gate = checked_gate(1, 0)
    with pytest.raises(ConnectionError):
        async with gate.admit(timeout=2, on_deadline="cut"):
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                raise ConnectionError("the SDK's own") from None
    assert counts(gate) == (0, 0, 1, 0)


async def test_a_body_that_swallows_the_cut_is_cut_at_its_end() -> None:
    gate = checked_gate(1, 0)
    with pytest.raises(DeadlineCut):
        async with gate.admit(timeout=2, on_deadline="cut"):
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(10)
            await asyncio.sleep(1)  # never cancelled a second time
    assert asyncio.get_running_loop().time() == 3.0
    assert counts(gate) == (0, 0, 1, 0)


async def test_a_callers_own_cancellation_at_the_deadline_stays_a_cancellation() -> None:
    gate = checked_gate(1, 0)
    loop = asyncio.get_running_loop()

    async def work() -> None:
        async with gate.admit(timeout=2, on_deadline="cut"):
            await asyncio.sleep(10)

    task = asyncio.create_task(work())
    loop.call_at(2.0, task.cancel)  # the caller's own, at the very deadline
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
    assert counts(gate) == (0, 0, 0, 1)  # the caller's cancellation: failed, as without the option


async def test_a_cancellation_the_caller_had_before_the_entry_stays_the_callers() -> None:
    # An outer asyncio.timeout that fires first: its TimeoutError, not ours.
    gate = checked_gate(1, 0)
    with pytest.raises(TimeoutError) as caught:
        async with asyncio.timeout(1):
            async with gate.admit(timeout=2, on_deadline="cut"):
                await asyncio.sleep(10)
    assert not isinstance(caught.value, DeadlineCut)
    assert counts(gate) == (0, 0, 0, 1)


async def test_an_inner_asyncio_timeout_that_fires_after_the_cut_does_not_swallow_it() -> None:
    gate = checked_gate(1, 0)
    with pytest.raises(DeadlineCut):
        async with gate.admit(timeout=2, on_deadline="cut"):
            async with asyncio.timeout(5):
                await asyncio.sleep(10)
    assert counts(gate) == (0, 0, 1, 0)


async def test_release_and_abort_disarm_the_cut() -> None:
    gate = checked_gate(2, 0)
    async with gate.admit(timeout=2, on_deadline="cut") as permit:
        permit.release()
        await asyncio.sleep(3)  # past the deadline: nothing cancels the block
    async with gate.admit(timeout=2, on_deadline="cut") as permit:
        permit.abort()
        await asyncio.sleep(3)
    assert counts(gate) == (1, 0, 0, 0)
    assert gate.stats().aborted == 1


async def test_a_permit_without_a_deadline_is_never_cut() -> None:
    gate = checked_gate(1, 0)
    async with gate.admit(on_deadline="cut"):
        await asyncio.sleep(100)
    assert counts(gate) == (1, 0, 0, 0)


async def test_a_queued_request_is_cut_at_its_deadline_measured_from_arrival() -> None:
    gate = checked_gate(1, 1)

    async def hold() -> None:
        async with gate.admit():
            await asyncio.sleep(1)

    holder = asyncio.create_task(hold())
    await asyncio.sleep(0)
    with pytest.raises(DeadlineCut) as caught:
        async with gate.admit(timeout=3, on_deadline="cut"):
            await asyncio.sleep(10)
    await holder
    assert (caught.value.waited, caught.value.elapsed) == (1.0, 3.0)


def test_a_bad_on_deadline_is_refused_by_name() -> None:
    gate = BoundedGate(max_running=1, max_waiting=0)
    with pytest.raises(ValueError, match=r"on_deadline must be 'late'.*or 'cut'"):
        gate.admit(on_deadline="stop")
    assert type(gate.admit(on_deadline="late")) is type(gate.admit())


async def test_a_keyed_gate_passes_the_option_to_its_keys() -> None:
    gate: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0)
    with pytest.raises(DeadlineCut):
        async with gate.admit("a", timeout=2, on_deadline="cut"):
            await asyncio.sleep(10)
    assert gate.stats().total.cut == 1


@given(
    st.lists(
        st.tuples(
            st.floats(0, 5),  # arrival
            st.floats(0.5, 6),  # the body's own length
            st.floats(0.5, 6),  # its timeout
            st.floats(0, 3),  # a clean-up, shielded, after a cut
            st.booleans(),  # cut, or late
        ),
        min_size=1,
        max_size=12,
    ),
    st.integers(1, 3),
)
def test_every_request_is_counted_once_and_no_slot_is_freed_before_its_body_stopped(
    jobs: list[tuple[float, float, float, float, bool]], c: int
) -> None:
    async def main() -> None:
        gate = checked_gate(c, None)
        inside = 0
        elapsed: list[tuple[float, float]] = []  # a cut one's, and its timeout
        outcomes: list[str] = []

        async def one(arrival: float, length: float, timeout: float, clean_up: float, cut: bool) -> None:
            nonlocal inside
            await asyncio.sleep(arrival)
            try:
                async with gate.admit(timeout=timeout, on_deadline="cut" if cut else "late"):
                    inside += 1
                    assert inside <= c  # no slot freed early: bodies never overlap beyond C
                    try:
                        await asyncio.sleep(length)
                        if clean_up:  # its own clean-up, which the cut interrupts too
                            await asyncio.shield(asyncio.sleep(clean_up))
                    except asyncio.CancelledError:
                        if clean_up:  # a clean-up after a cut, which nothing cancels again
                            await asyncio.sleep(clean_up)
                        raise
                    finally:
                        inside -= 1
                outcomes.append("completed")
            except DeadlineCut as cut_off:
                outcomes.append("cut" if cut else "cut without the option")
                elapsed.append((cut_off.elapsed, timeout))
            except Late:
                outcomes.append("late" if not cut else "late with the option")
            except TimeoutError:
                outcomes.append("expired")

        await asyncio.gather(*(one(*job) for job in jobs))
        stats = gate.stats()
        assert stats.arrived == len(jobs) == len(outcomes)
        assert stats.cut == outcomes.count("cut")
        assert stats.late == outcomes.count("late")
        assert stats.completed == outcomes.count("completed")
        assert stats.expired == outcomes.count("expired")
        assert stats.failed == 0
        assert gate.running == 0
        # asyncio runs a timer up to its clock's resolution early
        assert all(seconds >= timeout - 1e-9 for seconds, timeout in elapsed)

    run_virtual(main)
