"""Cancellation: no slot leaks, no wake-up is lost, under plain task cancellation and anyio scopes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import anyio
import pytest

from boundedgate import BoundedGate, Permit, Status
from tests.helpers import checked_gate, status_of


async def _queued(gate: BoundedGate) -> tuple[Permit, asyncio.Task[Permit]]:
    """A task waiting in ``gate``'s queue, and its permit."""
    permit = gate.admit()
    task = asyncio.create_task(permit.__aenter__())
    await asyncio.sleep(0)
    assert permit.status is Status.QUEUED
    return permit, task


async def test_cancelled_waiter_leaves_the_queue_and_counts_as_cancelled() -> None:
    gate = checked_gate(1, 2)
    holder = gate.try_admit()
    permit, task = await _queued(gate)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert permit.status is Status.CANCELLED
    assert (gate.running, gate.waiting) == (1, 0)
    holder.release()
    stats = gate.stats()
    assert (stats.cancelled, stats.admitted, stats.completed) == (1, 1, 1)


async def test_waiter_cancelled_in_the_turn_it_is_handed_a_slot_passes_it_on() -> None:
    # The slot is handed over first (the future holds a result), then the task is cancelled
    # before it can resume: the task sees CancelledError and the slot must go to the next waiter.
    gate = checked_gate(1, 2)
    holder = gate.try_admit()
    first, first_task = await _queued(gate)
    second, second_task = await _queued(gate)
    holder.release()
    assert first.status is Status.RUNNING
    first_task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first_task
    assert status_of(first) is Status.CANCELLED
    assert await second_task is second
    assert second.status is Status.RUNNING
    second.release()
    stats = gate.stats()
    assert (stats.admitted, stats.cancelled, stats.completed, stats.running) == (2, 1, 2, 0)


async def test_slot_handed_to_an_already_cancelled_waiter_passes_on_at_once() -> None:
    # The task is cancelled first (its future is cancelled), then a slot frees in the same turn:
    # the gate skips the cancelled waiter without waiting for its task to wake.
    gate = checked_gate(1, 2)
    holder = gate.try_admit()
    first, first_task = await _queued(gate)
    second, second_task = await _queued(gate)
    first_task.cancel()
    holder.release()
    assert first.status is Status.CANCELLED
    assert second.status is Status.RUNNING
    with pytest.raises(asyncio.CancelledError):
        await first_task
    assert await second_task is second
    second.release()
    assert gate.stats().admitted == 2


async def test_many_waiters_cancelled_at_once_while_slots_free() -> None:
    gate = checked_gate(4, None)
    holders = [gate.try_admit() for _ in range(4)]
    queued = [await _queued(gate) for _ in range(200)]
    for i, (_, task) in enumerate(queued):
        if i % 3:
            task.cancel()
    for holder in holders:
        holder.release()
    survivors = [task for i, (_, task) in enumerate(queued) if i % 3 == 0]
    started = 0
    while survivors:
        done, _ = await asyncio.wait(survivors, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            survivors.remove(task)
            task.result().release()
            started += 1
    await asyncio.gather(*(task for _, task in queued), return_exceptions=True)
    stats = gate.stats()
    assert started == 67
    assert (stats.running, stats.waiting) == (0, 0)
    assert stats.cancelled == 133
    assert stats.admitted == 4 + 67


async def test_mass_cancellation_of_waiters_whose_futures_are_all_cancelled() -> None:
    # Thousands of cancelled waiters ahead of one live one: passing the slot along must not recurse.
    gate = checked_gate(1, None)
    holder = gate.try_admit()
    doomed = [await _queued(gate) for _ in range(3000)]
    survivor, survivor_task = await _queued(gate)
    for _, task in doomed:
        task.cancel()
    holder.release()
    assert survivor.status is Status.RUNNING
    assert (await survivor_task) is survivor
    survivor.release()
    await asyncio.gather(*(task for _, task in doomed), return_exceptions=True)
    assert gate.stats().cancelled == 3000


@pytest.mark.parametrize("error", [asyncio.CancelledError, KeyboardInterrupt, SystemExit, GeneratorExit])
async def test_body_raising_a_base_exception_frees_its_slot_exactly_once(
    error: type[BaseException],
) -> None:
    gate = checked_gate(1, 1)
    permit = gate.admit()
    with pytest.raises(error):
        async with permit:
            raise error
    assert permit.status is Status.FAILED
    assert gate.running == 0
    permit.release()
    assert gate.stats().failed == 1
    assert gate.stats().admitted == 1


async def test_cancelled_running_body_fails_and_frees_its_slot() -> None:
    gate = checked_gate(1, 1)
    entered = asyncio.Event()

    async def body() -> None:
        async with gate.admit():
            entered.set()
            await asyncio.sleep(100)

    task = asyncio.create_task(body())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gate.running == 0
    assert gate.stats().failed == 1


async def test_already_cancelled_caller_is_refused_before_it_is_counted() -> None:
    gate = checked_gate(1, 1)

    async def request() -> None:
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        async with gate.admit():
            pytest.fail("a cancelled caller must not start")

    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(request())
    stats = gate.stats()
    assert stats.arrived == 0
    assert stats.admitted == stats.cancelled == 0


async def test_already_cancelled_caller_at_a_full_gate_is_refused_before_it_is_counted() -> None:
    # A full gate (every slot busy, the queue full): the compiled build enters such a permit through
    # another coroutine; a pending cancellation still comes first, and nothing is counted.
    gate = checked_gate(1, 0)
    holder = gate.try_admit()

    async def request() -> None:
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        async with gate.admit():
            pytest.fail("a cancelled caller must not start")

    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(request())
    stats = gate.stats()
    assert (stats.arrived, stats.admitted, stats.rejected, stats.cancelled) == (1, 1, 0, 0)
    holder.release()


async def test_already_cancelled_caller_is_refused_by_try_admit_too() -> None:
    gate = checked_gate(1, 1)

    async def request() -> None:
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        gate.try_admit()

    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(request())
    assert gate.stats().arrived == 0


async def _swallow_one_cancellation() -> None:
    task = asyncio.current_task()
    assert task is not None
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):  # delivered and swallowed; nobody uncancels
        await asyncio.sleep(0)
    assert task.cancelling() == 1  # asyncio still counts it, but will not raise it again


async def test_a_task_that_swallowed_a_cancellation_is_admitted_as_a_semaphore_would() -> None:
    # Before: Task.cancelling() > 0 refused it for ever, and a retrying loop spun on the refusal.
    gate = checked_gate(1, 1)
    semaphore = asyncio.Semaphore(1)

    async def request() -> list[str]:
        await _swallow_one_cancellation()
        ran = []
        async with semaphore:
            ran.append("semaphore")
        for _ in range(3):  # the loop the issue saw spin: it ends at the first attempt now
            try:
                async with gate.admit(timeout=5):
                    await asyncio.sleep(1)  # the cancellation is not raised again
                    ran.append("gate")
                    break
            except asyncio.CancelledError:
                continue
        gate.try_admit().release()
        return ran

    assert await asyncio.create_task(request()) == ["semaphore", "gate"]
    assert (gate.stats().completed, gate.stats().cancelled) == (2, 0)


async def test_a_cancellation_requested_again_after_one_was_swallowed_is_refused() -> None:
    gate = checked_gate(1, 1)

    async def request() -> None:
        await _swallow_one_cancellation()
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        async with gate.admit():
            pytest.fail("a pending cancellation must refuse the caller")

    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(request())
    assert gate.stats().arrived == 0


async def test_an_uncancelled_task_is_admitted() -> None:
    gate = checked_gate(1, 1)

    async def request() -> Status:
        await _swallow_one_cancellation()
        asyncio.current_task().uncancel()  # type: ignore[union-attr]
        async with gate.admit() as permit:
            pass
        return permit.status

    assert await asyncio.create_task(request()) is Status.COMPLETED


async def test_inside_an_expired_asyncio_timeout_whose_cancellation_was_swallowed_it_is_admitted() -> None:
    # asyncio.timeout cancels once; the block's exit decides (no TimeoutError when the body ended
    # normally). The gate does not second-guess it, as asyncio's own primitives do not.
    gate = checked_gate(1, 1)
    async with asyncio.timeout(1):
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(5)
        async with gate.admit() as permit:
            await asyncio.sleep(1)
    assert permit.status is Status.COMPLETED


async def test_inside_a_cancelled_anyio_scope_the_caller_is_refused_even_after_swallowing() -> None:
    # anyio cancels at every checkpoint while its scope is cancelled: that cancellation is pending.
    gate = checked_gate(1, 1)
    with anyio.CancelScope() as scope:
        scope.cancel()
        try:
            await anyio.sleep(0)
        except anyio.get_cancelled_exc_class():
            pass
        with pytest.raises(anyio.get_cancelled_exc_class()):
            async with gate.admit():
                pytest.fail("a caller in a cancelled scope must not start")
        with anyio.CancelScope(shield=True):  # shielded from it: admitted
            async with gate.admit() as permit:
                pass
        assert permit.status is Status.COMPLETED
    assert gate.stats().arrived == 1


# -- anyio cancel scopes on the asyncio backend -------------------------------------------------


async def test_move_on_after_while_waiting_leaves_the_queue() -> None:
    gate = checked_gate(1, 1)
    holder = gate.try_admit()
    with anyio.move_on_after(5) as scope:
        async with gate.admit():
            pytest.fail("must not start while the slot is held")
    assert scope.cancelled_caught
    assert (gate.running, gate.waiting) == (1, 0)
    holder.release()
    assert gate.stats().cancelled == 1


async def test_move_on_after_while_running_releases_without_awaiting() -> None:
    # anyio keeps cancelling the task until it leaves the scope; the exit must not need an await.
    gate = checked_gate(1, 1)
    with anyio.move_on_after(5):
        async with gate.admit():
            await anyio.sleep(100)
    assert gate.running == 0
    assert gate.stats().failed == 1


async def test_task_group_failure_cancels_waiters_and_holders_cleanly() -> None:
    gate = checked_gate(2, 10)

    async def worker() -> None:
        async with gate.admit():
            await anyio.sleep(100)

    async def failer() -> None:
        await anyio.sleep(1)
        raise RuntimeError("boom")

    with pytest.RaisesGroup(pytest.RaisesExc(RuntimeError, match="boom")):
        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(worker)
            tg.start_soon(failer)
    stats = gate.stats()
    assert (stats.running, stats.waiting) == (0, 0)
    assert stats.failed == 2
    assert stats.cancelled == 6
    async with gate.admit():
        pass


async def test_cancel_scope_cancelled_repeatedly_during_the_hand_off() -> None:
    gate = checked_gate(1, 2)
    holder = gate.try_admit()
    with anyio.CancelScope() as scope:
        waiter = asyncio.create_task(gate.admit().__aenter__())
        await asyncio.sleep(0)
        holder.release()  # the slot is handed to the waiter ...
        waiter.cancel()  # ... which is cancelled before it resumes
        scope.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
    assert (gate.running, gate.waiting) == (0, 0)
    assert gate.stats().cancelled == 1


# -- enter in one task, exit in another ---------------------------------------------------------


async def test_exit_from_another_task() -> None:
    gate = checked_gate(1, 1)
    permit = await asyncio.create_task(gate.admit().__aenter__())
    assert gate.running == 1
    await asyncio.create_task(permit.__aexit__(None, None, None))
    assert gate.running == 0
    assert permit.status is Status.COMPLETED


async def test_async_generator_finalised_after_break_releases_its_slot() -> None:
    gate = checked_gate(1, 1)

    async def chunks() -> AsyncIterator[int]:
        async with gate.admit():
            for i in range(10):
                yield i
                await asyncio.sleep(1)

    async for chunk in chunks():
        if chunk == 2:
            break
    # Dropped by the loop, the generator is finalised by the event loop's asyncgen hook, which
    # closes it in a task of its own.
    for _ in range(5):
        await asyncio.sleep(0)
    assert gate.running == 0
    assert gate.stats().failed == 1  # it ended with GeneratorExit, not by finishing
