"""Permits: released exactly once whatever path gets there, from any task; used once each."""

from __future__ import annotations

import asyncio
import gc
import math
import threading
import warnings

import pytest

from boundedgate import BoundedGate, Late, Permit, QueueExpired, QueueFull, Status
from tests.helpers import checked_gate


async def test_double_release_returns_the_slot_once() -> None:
    gate = checked_gate(2, 0)
    first = gate.try_admit()
    second = gate.try_admit()
    first.release()
    first.release()
    assert gate.running == 1
    assert second.status is Status.RUNNING
    second.release()
    assert gate.stats().completed == 2


async def test_release_inside_the_block_then_exit_releases_nothing_more() -> None:
    gate = checked_gate(1, 1)
    async with gate.admit() as permit:
        permit.release()
        assert gate.running == 0
        other = gate.try_admit()  # the slot really is free
    assert other.status is Status.RUNNING
    assert gate.running == 1
    other.release()
    assert gate.stats().completed == 2


async def test_release_after_the_block_exited_does_nothing() -> None:
    gate = checked_gate(1, 1)
    async with gate.admit() as permit:
        pass
    permit.release()
    assert gate.running == 0
    assert gate.stats().completed == 1


async def test_release_from_another_task_wakes_the_next_waiter() -> None:
    gate = checked_gate(1, 1)
    permit = gate.try_admit()
    waiter = asyncio.create_task(gate.admit().__aenter__())
    await asyncio.sleep(0)
    await asyncio.create_task(_release_soon(permit))
    next_permit = await waiter
    assert next_permit.status is Status.RUNNING
    next_permit.release()


async def _release_soon(permit: Permit) -> None:
    permit.release()


async def test_release_from_a_plain_loop_callback() -> None:
    gate = checked_gate(1, 1)
    permit = gate.try_admit()
    asyncio.get_running_loop().call_soon(permit.release)
    async with gate.admit() as second:
        assert second.started is not None
    assert gate.stats().completed == 2


async def test_try_admit_permit_can_be_entered_with_async_with() -> None:
    gate = checked_gate(1, 0)
    async with gate.try_admit() as permit:
        assert gate.running == 1
    assert permit.status is Status.COMPLETED
    assert gate.running == 0


async def test_try_admit_refuses_rather_than_queue() -> None:
    gate = checked_gate(1, 5)
    holder = gate.try_admit()
    with pytest.raises(QueueFull) as info:
        gate.try_admit()
    assert info.value.waiting == 0  # it did not queue even though the queue had room
    assert gate.waiting == 0
    holder.release()
    assert gate.stats().rejected == 1


async def test_try_admit_does_not_barge_past_waiters() -> None:
    gate = checked_gate(1, 5)
    holder = gate.try_admit()
    waiter = asyncio.create_task(gate.admit().__aenter__())
    await asyncio.sleep(0)
    holder.release()  # the slot now belongs to the waiter
    with pytest.raises(QueueFull):
        gate.try_admit()
    (await waiter).release()


async def test_try_admit_from_a_loop_callback_outside_any_task() -> None:
    gate = checked_gate(1, 0)
    loop = asyncio.get_running_loop()
    got: asyncio.Future[Permit] = loop.create_future()
    loop.call_soon(lambda: got.set_result(gate.try_admit()))
    permit = await got
    assert permit.status is Status.RUNNING
    permit.release()


def test_try_admit_without_a_running_loop_is_an_error() -> None:
    gate = checked_gate(1, 0)
    with pytest.raises(RuntimeError, match="no running event loop"):
        gate.try_admit()


async def test_a_permit_is_entered_once() -> None:
    gate = checked_gate(1, 0)
    permit = gate.admit()
    async with permit:
        pass
    with pytest.raises(RuntimeError, match="already used"):
        async with permit:
            pass


async def test_release_of_a_permit_that_never_arrived_does_nothing() -> None:
    gate = checked_gate(1, 0)
    permit = gate.admit()
    permit.release()
    assert permit.status is Status.NEW
    async with permit:
        assert gate.running == 1


async def test_late_is_raised_on_exit_when_released_late_inside_the_block() -> None:
    gate = checked_gate(1, 0)
    with pytest.raises(Late):
        async with gate.admit(timeout=1) as permit:
            await asyncio.sleep(2)
            permit.release()
    assert gate.stats().late == 1


async def test_try_admit_takes_an_absolute_deadline() -> None:
    gate = checked_gate(1, 0)
    loop = asyncio.get_running_loop()
    permit = gate.try_admit(deadline=loop.time() + 3)
    assert permit.deadline == 3
    await asyncio.sleep(3)
    permit.release()
    assert permit.status is Status.LATE
    with pytest.raises(ValueError, match="not both"):
        gate.try_admit(timeout=1, deadline=2)


async def test_release_never_raises_late() -> None:
    gate = checked_gate(1, 0)
    permit = gate.try_admit(timeout=1)
    await asyncio.sleep(2)
    permit.release()
    assert permit.status is Status.LATE


def _times(permit: Permit) -> tuple[float | None, float | None, float | None, float]:
    """The permit's times, read afresh (mypy would keep an earlier ``is None`` narrowing)."""
    return (permit.arrival, permit.started, permit.ended, permit.deadline)


async def test_permit_times_and_deadline() -> None:
    gate = checked_gate(1, 1)
    loop = asyncio.get_running_loop()
    await asyncio.sleep(10)
    permit = gate.admit(timeout=5)
    assert permit.arrival is None
    async with permit:
        await asyncio.sleep(1)
    assert _times(permit) == (10, 10, 11, 15)
    assert gate.admit().deadline == math.inf
    absolute = gate.admit(deadline=loop.time() + 3)
    assert absolute.deadline == 14
    assert absolute.gate is gate


async def test_absolute_deadline_on_the_loop_clock() -> None:
    gate = checked_gate(1, 1)
    loop = asyncio.get_running_loop()
    holder = gate.try_admit()
    with pytest.raises(QueueExpired) as info:
        async with gate.admit(deadline=loop.time() + 7):
            pass
    assert loop.time() == 7
    assert info.value.waited == 7
    holder.release()


async def test_deadline_already_passed_is_refused_before_it_is_counted() -> None:
    gate = checked_gate(1, 1)
    loop = asyncio.get_running_loop()
    await asyncio.sleep(1)
    for admission in (gate.admit(timeout=0), gate.admit(deadline=loop.time() - 1)):
        with pytest.raises(QueueExpired) as info:
            async with admission:
                pass
        assert info.value.waited == 0
        assert admission.status is Status.EXPIRED
    with pytest.raises(QueueExpired):
        gate.try_admit(timeout=0)
    assert gate.stats().arrived == 0


def test_repr() -> None:
    gate = checked_gate(1, 0, name="openai")
    assert repr(gate.admit()) == "<Permit of 'openai': new>"


async def test_a_running_permit_entered_again_is_refused_and_keeps_its_slot() -> None:
    gate = checked_gate(1, 1)
    async with gate.admit() as permit:
        with pytest.raises(RuntimeError, match=r"is already entered; a permit is entered once"):
            async with permit:
                raise AssertionError("a second body ran on one slot")
        assert (gate.running, permit.status) == (1, Status.RUNNING)
        with pytest.raises(QueueFull):
            gate.try_admit()  # the outer body still holds the one slot
    assert gate.stats().completed == 1


async def test_a_try_admit_permit_is_entered_once_too() -> None:
    gate = checked_gate(1, 1)
    permit = gate.try_admit()
    async with permit:
        with pytest.raises(RuntimeError, match="already entered"):
            await permit.__aenter__()
        assert gate.running == 1
    assert (gate.running, permit.status) == (0, Status.COMPLETED)


# -- a permit dropped while it holds its slot ----------------------------------------------------


async def test_a_dropped_permit_gives_its_slot_back_as_leaked_with_a_warning() -> None:
    gate = BoundedGate(max_running=1, max_waiting=1, name="openai")
    permit = gate.try_admit()
    waiter = asyncio.create_task(gate.admit().__aenter__())
    await asyncio.sleep(0)
    with pytest.warns(
        ResourceWarning, match=r"^a permit of gate 'openai' was dropped while it held its slot"
    ):
        del permit
        gc.collect()
    assert gate.running == 1  # given back in the loop's next turn, never in the middle of its work
    second = await asyncio.wait_for(waiter, 1)
    stats = gate.stats()
    assert (stats.leaked, stats.failed, stats.completed) == (1, 0, 0)
    second.release()


def test_a_block_whose_task_is_destroyed_releases_its_slot_at_its_exit() -> None:
    # Why only try_admit()'s permits need a finaliser: closing a destroyed task's coroutine runs the
    # exit of the block it was in, and that releases (as failed: the body never finished).
    gate = BoundedGate(max_running=1, max_waiting=0, name="g")
    loop = asyncio.new_event_loop()
    entered = []

    async def body() -> None:
        async with gate.admit():
            entered.append(True)
            await asyncio.Event().wait()

    task = loop.create_task(body())
    task._log_destroy_pending = False  # type: ignore[attr-defined]  # destroyed pending, on purpose
    loop.run_until_complete(asyncio.sleep(0))
    assert entered
    assert gate.running == 1
    loop.close()
    task.get_coro().close()  # what the collector does to a coroutine that never finished
    assert (gate.running, gate.stats().failed, gate.stats().leaked) == (0, 1, 0)
    del task


async def test_a_permit_dropped_in_another_thread_is_released_on_the_loop() -> None:
    gate = BoundedGate(max_running=1, max_waiting=0, name="g")
    held = [gate.try_admit()]
    with pytest.warns(ResourceWarning, match="gate 'g'"):
        thread = threading.Thread(target=held.clear)  # the last reference goes in that thread
        thread.start()
        thread.join()
    await asyncio.sleep(0)
    assert (gate.running, gate.stats().leaked) == (0, 1)


def test_a_permit_dropped_after_its_loop_closed_gives_its_slot_back_at_once() -> None:
    gate = BoundedGate(max_running=1, max_waiting=0, name="g")
    loop = asyncio.new_event_loop()

    async def hold() -> Permit:
        return gate.try_admit()

    held = [loop.run_until_complete(hold())]
    loop.close()
    with pytest.warns(ResourceWarning, match=r"counted as leaked \(its event loop is closed\)"):
        held.clear()
    assert (gate.running, gate.stats().leaked) == (0, 1)


async def test_permits_that_end_normally_warn_nothing_when_dropped() -> None:
    gate = BoundedGate(max_running=1, max_waiting=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        async with gate.admit():
            pass
        gate.try_admit().release()
        gate.admit()  # never entered
        with pytest.raises(QueueFull):
            held = gate.try_admit()
            gate.try_admit()
        held.release()
        gc.collect()
    assert gate.stats().leaked == 0


def test_a_permit_is_made_by_its_gate_only() -> None:
    # admit() builds its permit without the type call; a permit built by hand would lack its fields.
    with pytest.raises(TypeError, match=r"^a Permit is made by gate\.admit\(\) or gate\.try_admit\(\)$"):
        Permit()
    permit = BoundedGate(max_running=1, max_waiting=0).admit(timeout=3)
    assert type(permit) is Permit
    assert (permit.status, permit.arrival, permit.deadline, permit.max_wait) == (
        Status.NEW,
        None,
        math.inf,
        math.inf,
    )


# Entering a full gate: the arrival is when the coroutine of __aenter__ runs, not when it is made:
# whatever the gate has become by then decides.


async def test_an_entry_made_on_a_full_gate_starts_if_a_slot_is_free_when_it_runs() -> None:
    gate = checked_gate(1, 0)
    holder = gate.try_admit()
    permit = gate.admit()
    entering = permit.__aenter__()  # nothing arrives until it runs
    assert gate.stats().rejected == 0
    holder.release()
    assert await entering is permit
    assert (permit.status, gate.running, gate.stats().rejected) == (Status.RUNNING, 1, 0)
    await permit.__aexit__(None, None, None)
    assert gate.stats().completed == 2


async def test_an_entry_made_on_a_full_gate_queues_if_a_place_is_free_when_it_runs() -> None:
    gate = checked_gate(1, 1)
    holder = gate.try_admit()
    queued = asyncio.create_task(gate.admit().__aenter__())
    await asyncio.sleep(0)
    assert gate.waiting == 1  # every slot busy, the queue full
    permit = gate.admit()
    coroutine = permit.__aenter__()
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued
    entering = asyncio.create_task(coroutine)
    await asyncio.sleep(0)
    assert (permit.status, gate.waiting, gate.stats().rejected) == (Status.QUEUED, 1, 0)
    holder.release()
    assert await entering is permit
    assert permit.status is Status.RUNNING
    permit.release()


async def test_an_entry_refused_at_once_is_a_task_that_raises_queue_full() -> None:
    gate = checked_gate(1, 0, name="full")
    holder = gate.try_admit()
    permit = gate.admit()
    refused = asyncio.create_task(permit.__aenter__())
    with pytest.raises(QueueFull) as caught:
        await refused
    assert (caught.value.gate, caught.value.running, caught.value.waiting) == ("full", 1, 0)
    assert (permit.status, gate.stats().rejected) == (Status.REJECTED, 1)
    with pytest.raises(RuntimeError, match="already used"):
        await permit.__aenter__()
    holder.release()


async def test_a_held_permit_enters_a_full_gate_once() -> None:
    gate = checked_gate(1, 0)
    held = gate.try_admit()
    async with held:
        assert gate.running == 1
        with pytest.raises(RuntimeError, match="already entered"):
            await held.__aenter__()
    assert (held.status, gate.running) == (Status.COMPLETED, 0)
