"""Cancellation at every await: while queued, while being handed a slot, in the body; nothing leaks."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from boundedgate import Status

from .calls import Call, hold, queue, queued
from .subjects import Subject, sleep_until


async def test_a_waiter_cancelled_while_queued_leaves_and_no_wake_up_is_lost(subject: Subject) -> None:
    gate = subject.gate(1, 3)
    holder = await hold(gate)
    first, second = await queue(subject, gate, 2)
    first.task.cancel()
    assert isinstance(await first.outcome(), asyncio.CancelledError)
    assert (first.permit.status, first.permit.started, first.entered) == (Status.CANCELLED, None, False)
    counts = gate.counts()
    assert (counts.running, counts.waiting, counts.cancelled) == (1, 1, 1)
    holder.release()
    await subject.until(lambda: second.entered, "the second waiter started")
    second.finish()
    assert await second.outcome() is None
    await gate.quiet()
    counts = gate.counts()
    assert (counts.admitted, counts.completed, counts.cancelled, counts.running, counts.waiting) == (
        2,
        2,
        1,
        0,
        0,
    )


@pytest.mark.parametrize("turns", [0, 1, 2, 3, 5, 8])
async def test_a_waiter_cancelled_as_it_is_handed_a_slot_passes_the_slot_on(
    subject: Subject, turns: int
) -> None:
    # The holder releases, and the head waiter is cancelled `turns` steps later: in the same turn
    # as the hand-off (its future holds the slot, its task has not resumed), or once it has resumed.
    gate = subject.gate(1, 3)
    holder = await hold(gate)
    first, second = await queue(subject, gate, 2)
    holder.release()
    for _ in range(turns):
        await subject.step()
    handed_over = gate.counts().running == 1 and not first.entered
    first.task.cancel()
    assert isinstance(await first.outcome(), asyncio.CancelledError)
    if first.entered:  # it had resumed into its body: cancelled there, it ran and failed
        assert first.permit.status is Status.FAILED
    else:  # it never used the slot: cancelled, never started, never admitted
        assert (first.permit.status, first.permit.started) == (Status.CANCELLED, None)
    if subject.virtual and turns == 0:  # the hand-off is synchronous: the cancellation landed on it
        assert handed_over
        assert not first.entered
    await subject.until(lambda: second.entered, "the slot passed on to the second waiter")
    second.finish()
    assert await second.outcome() is None
    await gate.quiet()
    counts = gate.counts()
    ran = int(first.entered)
    assert (counts.admitted, counts.completed, counts.failed, counts.cancelled) == (2 + ran, 2, ran, 1 - ran)
    assert (counts.running, counts.waiting) == (0, 0)


@pytest.mark.parametrize("past_deadline", [False, True], ids=["on-time", "past-its-deadline"])
async def test_cancelled_in_its_body_a_request_fails_and_frees_its_slot(
    subject: Subject, past_deadline: bool
) -> None:
    gate = subject.gate(1, 1)
    runner = Call(gate, timeout=subject.t(1))
    await subject.until(lambda: runner.entered, "the body started")
    (waiter,) = await queue(subject, gate, 1)
    if past_deadline:  # cancelled, not Late: the body did not finish
        await sleep_until(runner.permit.deadline + subject.t(1))
    runner.task.cancel()
    assert isinstance(await runner.outcome(), asyncio.CancelledError)
    assert runner.permit.status is Status.FAILED
    assert runner.permit.started is not None
    await subject.until(lambda: waiter.entered, "the waiter started")
    waiter.finish()
    assert await waiter.outcome() is None
    await gate.quiet()
    counts = gate.counts()
    assert (counts.admitted, counts.failed, counts.completed, counts.running) == (2, 1, 1, 0)


@pytest.mark.parametrize("busy", [False, True], ids=["free-slot", "queued"])
async def test_cancelled_after_any_number_of_steps_a_request_leaks_nothing(
    subject: Subject, busy: bool
) -> None:
    # A sweep: the request is cancelled before it arrives, while it waits, as it is handed the
    # slot, in its body, or as it exits, depending on how many steps it got first.
    for steps in subject.sweep:
        gate = subject.gate(1, 2)

        async def body(call: Call) -> None:
            for _ in range(3):
                await subject.step()

        holder = await hold(gate) if busy else None
        call = Call(gate, timeout=subject.t(40), body=body)
        if holder is not None:
            await subject.until(queued(call), "queued")
            holder.release()
        for _ in range(steps):
            await subject.step()
        call.task.cancel()
        error = await call.outcome()
        assert error is None or isinstance(error, asyncio.CancelledError), (steps, error)
        status = call.permit.status
        if call.finished:
            expected = {"completed": 1}
            assert status is Status.COMPLETED, steps
        elif call.entered:
            expected = {"failed": 1}
            assert status is Status.FAILED, steps
        elif status is Status.NEW:  # cancelled before it ran at all: it never arrived
            expected = {}
        else:
            expected = {"cancelled": 1}
            assert (status, call.permit.started) == (Status.CANCELLED, None), steps
        if holder is not None:
            expected["completed"] = expected.get("completed", 0) + 1
        await gate.quiet()
        counts = gate.counts()
        assert {k: v for k, v in counts.ended().items() if v} == expected, steps
        assert (counts.running, counts.waiting, counts.arrived) == (0, 0, sum(expected.values())), steps
        async with gate.admit() as fresh:  # the slot is free: a new request starts at once
            assert subject.at(fresh.started, fresh.arrival)


async def test_an_already_cancelled_caller_is_refused_uncounted(subject: Subject) -> None:
    gate = subject.gate(1, 1)
    permit = gate.admit()

    async def caller() -> None:
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        async with permit:
            pytest.fail("an already cancelled caller started")

    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(caller())
    assert permit.status is Status.CANCELLED
    assert permit.started is None
    counts = gate.counts()
    assert (counts.arrived, counts.outcomes, counts.running, counts.waiting) == (0, 0, 0, 0)
    async with gate.admit() as fresh:
        assert fresh.status is Status.RUNNING


@pytest.mark.parametrize("scope", ["asyncio.timeout", "asyncio.wait_for", "anyio.move_on_after"])
async def test_a_waiter_whose_scope_times_out_leaves_as_cancelled(subject: Subject, scope: str) -> None:
    # The caller's own timeout, not the gate's deadline: the gate sees a cancellation.
    gate = subject.gate(1, 1)
    holder = await hold(gate)
    permit = gate.admit()
    if scope == "asyncio.timeout":
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(subject.t(1)), permit:
                pytest.fail("started on a busy gate")
    elif scope == "asyncio.wait_for":
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(permit.__aenter__(), subject.t(1))
    else:
        with anyio.move_on_after(subject.t(1)) as cancel_scope:
            async with permit:
                pytest.fail("started on a busy gate")
        assert cancel_scope.cancelled_caught
    assert (permit.status, permit.started) == (Status.CANCELLED, None)
    counts = gate.counts()
    assert (counts.running, counts.waiting, counts.cancelled) == (1, 0, 1)
    holder.release()
    if not subject.releases_at_once:
        await gate.quiet()
    async with gate.admit() as again:  # the scope is over: this task is admitted as any other
        assert again.status is Status.RUNNING
    await gate.quiet()
    counts = gate.counts()
    assert (counts.admitted, counts.completed, counts.cancelled) == (2, 2, 1)


async def test_a_task_that_swallowed_a_cancellation_is_admitted_again(subject: Subject) -> None:
    # Once delivered and caught, a cancellation is no longer pending: refusing the task's next
    # request as "already cancelled" would refuse it forever (asyncio.Semaphore admits it).
    gate = subject.gate(1, 1)
    holder = await hold(gate)

    async def caller() -> Status:
        try:
            async with gate.admit():
                pytest.fail("started on a busy gate")
        except asyncio.CancelledError:
            pass  # swallowed, as an `except CancelledError: continue` loop does
        holder.release()
        await gate.quiet()
        async with gate.admit() as again:
            return again.status  # type: ignore[no-any-return]

    task = asyncio.create_task(caller())
    await subject.until(lambda: gate.counts().waiting == 1, "the caller queued")
    task.cancel()
    assert await task is Status.RUNNING
    await gate.quiet()
    counts = gate.counts()
    assert (counts.cancelled, counts.completed, counts.running) == (1, 2, 0)
