"""A permit gives its slot back exactly once, whatever path ends it, from any task."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

import pytest

from boundedgate import QueueFull, Status

from .calls import Call, hold, queue
from .subjects import Subject


async def test_releasing_twice_gives_the_slot_back_once(subject: Subject) -> None:
    gate = subject.gate(1, 2)
    holder = await hold(gate)
    first, second = await queue(subject, gate, 2)
    holder.release()
    holder.release()
    assert holder.status is Status.COMPLETED
    await subject.until(lambda: first.entered, "the first waiter started")
    for _ in range(5):  # room for a second slot to reach the second waiter, if one had been freed
        await subject.step()
    await gate.quiet()
    assert not second.entered
    counts = gate.counts()
    assert (counts.running, counts.waiting, counts.completed) == (1, 1, 1)
    first.finish()
    await subject.until(lambda: second.entered, "the second waiter started")
    second.finish()
    assert (await first.outcome(), await second.outcome()) == (None, None)
    await gate.quiet()
    counts = gate.counts()
    assert (counts.admitted, counts.completed, counts.peak_running) == (3, 3, 1)


async def test_release_inside_the_block_and_then_its_exit_count_once(subject: Subject) -> None:
    gate = subject.gate(1, 1)
    async with gate.admit(timeout=subject.t(10)) as permit:
        permit.release()
        assert permit.status is Status.COMPLETED
        async with gate.admit() as after:  # the slot is free again, inside the first block
            assert after.status is Status.RUNNING
            if subject.releases_at_once:
                assert after.started == after.arrival
    assert permit.status is Status.COMPLETED
    permit.release()
    await gate.quiet()
    counts = gate.counts()
    assert (counts.admitted, counts.completed, counts.running) == (2, 2, 0)


@pytest.mark.parametrize(
    "how", ["exit-in-another-task", "release-in-another-task", "release-from-a-callback"]
)
async def test_a_permit_entered_in_one_task_is_released_from_another(subject: Subject, how: str) -> None:
    gate = subject.gate(1, 1)
    permit = gate.admit(timeout=subject.t(10))
    await asyncio.create_task(permit.__aenter__())
    (waiter,) = await queue(subject, gate, 1)
    if how == "exit-in-another-task":
        await asyncio.create_task(permit.__aexit__(None, None, None))
    elif how == "release-in-another-task":

        async def release() -> None:
            permit.release()

        await asyncio.create_task(release())
    else:
        asyncio.get_running_loop().call_soon(permit.release)
    await subject.until(lambda: waiter.entered, "the waiter got the slot")
    assert permit.status is Status.COMPLETED
    await permit.__aexit__(None, None, None)  # the block's own exit, later: nothing more
    permit.release()
    waiter.finish()
    assert await waiter.outcome() is None
    await gate.quiet()
    counts = gate.counts()
    assert (counts.admitted, counts.completed, counts.running, counts.waiting) == (2, 2, 0, 0)


async def test_a_permit_without_a_slot_releases_nothing(subject: Subject) -> None:
    gate = subject.gate(1, 0)
    early = gate.admit()
    early.release()  # not arrived yet
    holder = await hold(gate)
    refused = gate.admit()
    with pytest.raises(QueueFull):
        await refused.__aenter__()
    refused.release()  # refused: it holds nothing, and must not free the holder's slot
    early.release()
    await gate.quiet()
    assert gate.counts().running == 1
    with pytest.raises(QueueFull):
        await gate.admit().__aenter__()
    holder.release()
    if not subject.releases_at_once:
        await gate.quiet()
    async with early:  # a release before arrival did not use the permit up
        assert early.status is Status.RUNNING
    await gate.quiet()
    counts = gate.counts()
    assert (counts.admitted, counts.completed, counts.rejected, counts.running) == (2, 2, 2, 0)


async def test_release_of_a_queued_permit_does_nothing(subject: Subject) -> None:
    gate = subject.gate(1, 1)
    holder = await hold(gate)
    (waiter,) = await queue(subject, gate, 1)
    waiter.permit.release()  # it holds no slot yet: nothing happens, and it keeps its place
    await gate.quiet()
    counts = gate.counts()
    assert (counts.running, counts.waiting, counts.outcomes) == (1, 1, 0)
    holder.release()
    await subject.until(lambda: waiter.entered, "the waiter started")
    assert waiter.permit.status is Status.RUNNING
    waiter.finish()
    assert await waiter.outcome() is None
    await gate.quiet()
    assert gate.counts().completed == 2


@pytest.mark.parametrize("ended", ["completed", "rejected"])
async def test_a_permit_that_ended_cannot_be_entered_again(subject: Subject, ended: str) -> None:
    gate = subject.gate(1, 0)
    if ended == "completed":
        permit = gate.admit()
        async with permit:
            pass
    else:
        holder = await hold(gate)
        permit = gate.admit()
        with pytest.raises(QueueFull):
            await permit.__aenter__()
        holder.release()
        if not subject.releases_at_once:
            await gate.quiet()
    before = gate.counts()
    with pytest.raises(RuntimeError, match="already used"):
        await permit.__aenter__()
    assert permit.status.value == ended
    await gate.quiet()
    assert gate.counts() == before  # one request, one outcome: nothing counted twice


async def test_a_slot_held_by_an_async_generator_is_released_once_when_it_is_closed_elsewhere(
    subject: Subject,
) -> None:
    gate = subject.gate(1, 1)

    async def tokens() -> AsyncGenerator[int, None]:
        async with gate.admit():
            for i in range(10):
                yield i
                await subject.step()

    agen = tokens()
    async for i in agen:
        if i == 2:
            break
    assert gate.counts().running == 1  # suspended inside its block
    (waiter,) = await queue(subject, gate, 1)
    await asyncio.create_task(agen.aclose())  # finalised by another task
    await subject.until(lambda: waiter.entered, "the waiter got the slot")
    waiter.finish()
    assert await waiter.outcome() is None
    await gate.quiet()
    counts = gate.counts()
    assert (counts.admitted, counts.running, counts.waiting) == (2, 0, 0)
    assert counts.completed + counts.failed == 2  # the generator's request ended once, either way


async def test_a_running_permit_entered_again_keeps_its_slot_for_its_body(subject: Subject) -> None:
    # `async with permit:` inside `async with permit:` must not free the slot under the outer body.
    gate = subject.gate(1, 1)
    waiter: Call | None = None
    try:
        async with gate.admit() as permit:
            (waiter,) = await queue(subject, gate, 1)
            with contextlib.suppress(RuntimeError):  # refusing the re-entry is one way to keep the rule
                async with permit:
                    pass
            for _ in range(5):
                await subject.step()
            await gate.quiet()
            assert permit.status is Status.RUNNING
            assert not waiter.entered  # C=1, and the outer body still runs
        await subject.until(lambda: waiter.entered, "the waiter started")
    finally:
        if waiter is not None:  # end it either way, so that nothing outlives the test
            waiter.finish()
            assert await waiter.outcome() is None
    await gate.quiet()
    counts = gate.counts()
    assert (counts.admitted, counts.completed, counts.peak_running) == (2, 2, 1)


@pytest.mark.parametrize("busy", [False, True], ids=["free-slot", "queued"])
async def test_a_permit_entered_from_two_tasks_at_once_is_one_request(subject: Subject, busy: bool) -> None:
    # One permit is one request: a second entry while the first is arriving (or holds the slot)
    # is refused at once, and the slot is taken, and given back, once.
    gate = subject.gate(1, 1)
    holder = await hold(gate) if busy else None
    permit = gate.admit()
    first = asyncio.create_task(permit.__aenter__())
    second = asyncio.create_task(permit.__aenter__())
    try:
        await subject.until(second.done, "the second entry answered")
        with pytest.raises(RuntimeError):
            second.result()
        if holder is not None:
            holder.release()
        await asyncio.wait((first,), timeout=gate.patience)
        assert first.done()
        assert first.result() is permit
        permit.release()
        await gate.quiet()
        counts = gate.counts()
        assert (counts.arrived, counts.admitted, counts.completed, counts.running) == (1 + busy,) * 3 + (0,)
        async with gate.admit() as fresh:  # no slot was left behind
            assert subject.at(fresh.started, fresh.arrival)
    finally:  # whatever went wrong, end both entries, so that nothing outlives the test
        for task in (first, second):
            task.cancel()
        await asyncio.wait((first, second), timeout=gate.patience)
        for task in (first, second):
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: the assertions above say what went wrong
        if holder is not None:
            holder.release()
        permit.release()
