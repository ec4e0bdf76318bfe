"""At most C running and Q waiting, FIFO, QueueFull at once beyond that: the same on every subject."""

from __future__ import annotations

import asyncio
import math

import pytest

from boundedgate import QueueExpired, QueueFull, Status

from .calls import Call, entered, hold, queue, started, waiting
from .subjects import Subject, sleep_until


async def test_a_free_slot_starts_at_once_and_is_released_on_exit(subject: Subject) -> None:
    gate = subject.gate(2, 2)
    async with gate.admit(timeout=subject.t(10)) as permit:
        inside = permit.status  # a name of its own: mypy would keep permit.status narrowed past the exit
        assert inside is Status.RUNNING
        assert subject.at(permit.started, permit.arrival)
        assert gate.counts().running == 1
    assert permit.status is Status.COMPLETED
    assert subject.at(permit.ended, permit.started)
    await gate.quiet()
    counts = gate.counts()
    assert (counts.running, counts.waiting, counts.admitted, counts.completed) == (0, 0, 1, 1)


async def test_waiters_start_in_arrival_order_as_slots_free(subject: Subject) -> None:
    gate = subject.gate(2, 4)
    log: list[Call] = []
    first = []
    for n in (1, 2):  # one after the other: the order is the order of arrival (at Redis, for a RedisGate)
        first.append(Call(gate, log=log))
        await subject.until(started(log, n), f"{n} running")
    waiters = await queue(subject, gate, 4, log=log)
    counts = gate.counts()
    assert (counts.running, counts.waiting) == (2, 4)
    assert not any(call.entered for call in waiters)
    for n, call in enumerate([*first, *waiters]):
        call.finish()
        await call.outcome()
        expected = min(n + 3, 6)  # each freed slot goes to the oldest waiter
        await subject.until(started(log, expected), f"{expected} started")
        assert log == [*first, *waiters][:expected]
        assert sum(1 for c in log if c.entered and not c.task.done()) <= 2
    for call in waiters:
        assert await call.outcome() is None
        assert call.permit.status is Status.COMPLETED
    await gate.quiet()
    counts = gate.counts()
    assert (counts.admitted, counts.completed, counts.peak_running, counts.peak_waiting) == (6, 6, 2, 4)


@pytest.mark.parametrize("max_waiting", [0, 2])
async def test_queue_full_at_exactly_q_and_nothing_is_queued(subject: Subject, max_waiting: int) -> None:
    gate = subject.gate(1, max_waiting)
    holder = await hold(gate)
    waiters = await queue(subject, gate, max_waiting)
    permit = gate.admit(timeout=subject.t(10))
    entering = permit.__aenter__()
    with pytest.raises(QueueFull) as info:
        if subject.refuses_before_suspending:
            entering.send(None)  # the first step of the coroutine raises: no suspension at all
        else:
            await entering
    error = info.value
    assert (error.code, error.http_status, error.gate) == ("queue_full", 503, gate.name)
    limits = (error.max_running, error.max_waiting, error.running, error.waiting)
    assert limits == (1, max_waiting, 1, max_waiting)
    assert error.waited == 0.0
    assert subject.at(error.elapsed, 0.0)
    assert permit.status is Status.REJECTED
    counts = gate.counts()
    assert (counts.running, counts.waiting, counts.rejected) == (1, max_waiting, 1)
    holder.release()
    for call in waiters:  # every one that was queued still gets its turn
        await subject.until(entered(call), "the next waiter started")
        call.finish()
        assert await call.outcome() is None
    await gate.quiet()
    counts = gate.counts()
    assert (counts.admitted, counts.completed, counts.rejected, counts.peak_waiting) == (
        1 + max_waiting,
        1 + max_waiting,
        1,
        max_waiting,
    )


async def test_a_newcomer_never_barges_past_the_queue(subject: Subject) -> None:
    gate = subject.gate(1, 2)
    log: list[Call] = []
    holder = await hold(gate)
    (waiter,) = await queue(subject, gate, 1, log=log)
    holder.release()
    newcomer = Call(gate, log=log)  # arrives at the instant the slot frees
    await subject.until(lambda: len(log) == 1, "one started")
    assert log == [waiter]
    waiter.finish()
    await subject.until(lambda: len(log) == 2, "the newcomer started")
    assert log == [waiter, newcomer]
    newcomer.finish()
    assert (await waiter.outcome(), await newcomer.outcome()) == (None, None)
    await gate.quiet()
    assert gate.counts().peak_running == 1


async def test_the_place_a_waiter_leaves_for_its_slot_is_free_for_a_newcomer(subject: Subject) -> None:
    # Q=1: the waiter is handed the slot, and its place takes a newcomer arriving at that instant.
    gate = subject.gate(1, 1)
    log: list[Call] = []
    holder = await hold(gate)
    (waiter,) = await queue(subject, gate, 1, log=log)
    holder.release()
    if not subject.releases_at_once:  # else the newcomer may reach Redis first, and find the queue full
        await gate.quiet()
    newcomer = Call(gate, log=log)
    await subject.until(lambda: waiter.entered and newcomer.permit.status is Status.QUEUED, "both placed")
    counts = gate.counts()
    assert (counts.running, counts.waiting, counts.rejected) == (1, 1, 0)
    assert counts.peak_waiting == 1
    waiter.finish()
    await subject.until(lambda: newcomer.entered, "the newcomer started")
    newcomer.finish()
    assert (await waiter.outcome(), await newcomer.outcome()) == (None, None)
    assert log == [waiter, newcomer]
    await gate.quiet()
    counts = gate.counts()
    assert (counts.admitted, counts.completed, counts.peak_running, counts.peak_waiting) == (3, 3, 1, 1)


async def test_a_burst_runs_c_queues_q_and_refuses_the_rest(subject: Subject) -> None:
    gate = subject.gate(2, 3)
    inside = most = 0

    async def body(call: Call) -> None:
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        try:
            await call.finished_by_test()
        finally:
            inside -= 1

    calls = [Call(gate, timeout=subject.t(40), body=body) for _ in range(12)]
    # Every request has arrived once each is running, queued or refused (a body waits for finish()).
    await subject.until(
        lambda: sum(1 for c in calls if c.entered or c.permit.status is Status.QUEUED or c.task.done()) == 12,
        "every request arrived",
    )
    refused = [c for c in calls if c.task.done()]
    assert len(refused) == 7
    assert all(isinstance(c.error, QueueFull) for c in refused)
    counts = gate.counts()
    assert (counts.running, counts.waiting, counts.rejected) == (2, 3, 7)
    for call in calls:
        call.finish()
    assert [await call.outcome() for call in calls if call not in refused] == [None] * 5
    assert most == 2
    await gate.quiet()
    counts = gate.counts()
    assert (counts.admitted, counts.completed, counts.rejected) == (5, 5, 7)
    assert (counts.peak_running, counts.peak_waiting) == (2, 3)


async def test_max_waiting_none_is_an_unbounded_queue(subject: Subject) -> None:
    gate = subject.gate(1, None)
    holder = await hold(gate)
    log: list[Call] = []
    waiters = await queue(subject, gate, 30, log=log)
    counts = gate.counts()
    assert (counts.running, counts.waiting, counts.rejected) == (1, 30, 0)
    holder.release()
    for call in waiters:
        await subject.until(entered(call), "the next waiter started")
        call.finish()
        assert await call.outcome() is None
    assert log == waiters
    await gate.quiet()
    counts = gate.counts()
    assert (counts.admitted, counts.completed, counts.peak_waiting) == (31, 31, 30)


async def test_a_refusal_says_when_to_retry_from_the_recent_pace(subject: Subject) -> None:
    gate = subject.gate(2, 0)
    keeper = await hold(gate)  # holds a slot throughout, so that a keyed gate's key stays listed

    async def two_units(call: Call) -> None:
        await sleep_until(call.permit.started + subject.t(2))

    ran = Call(gate, body=two_units)
    await subject.until(lambda: ran.entered, "the timed call started")
    with pytest.raises(QueueFull) as info:
        await gate.admit().__aenter__()
    assert info.value.retry_after is None  # nothing has finished: the gate cannot say
    assert info.value.headers() == {}
    assert await ran.outcome() is None
    holder = await hold(gate)
    with pytest.raises(QueueFull) as info:
        await gate.admit().__aenter__()
    recent = ran.permit.ended - ran.permit.started  # the only run that ended: (0 waiting + 1) x it / C
    assert info.value.retry_after is not None
    assert subject.same(info.value.retry_after, recent / 2)
    assert subject.at(info.value.retry_after, subject.t(1))
    assert info.value.headers() == {"Retry-After": str(max(1, math.ceil(info.value.retry_after)))}
    holder.release()
    keeper.release()


async def test_permits_made_in_advance_keep_c_and_q_when_they_arrive(subject: Subject) -> None:
    # Permits taken before any of them arrived (for a keyed gate: before the key had a gate) are
    # admitted by the gate as it is at each one's arrival, not as it was when it was made.
    gate = subject.gate(1, 2)
    permits = [gate.admit() for _ in range(4)]
    first = await permits[0].__aenter__()
    waiters = []
    for i in (1, 2):
        waiters.append(asyncio.create_task(permits[i].__aenter__()))
        await subject.until(waiting(gate, i), f"{i} waiting")
    with pytest.raises(QueueFull):
        await permits[3].__aenter__()
    counts = gate.counts()
    assert (counts.running, counts.waiting, counts.rejected) == (1, 2, 1)
    first.release()
    second = await waiters[0]
    assert not waiters[1].done()
    second.release()
    (await waiters[1]).release()
    await gate.quiet()
    counts = gate.counts()
    assert (counts.admitted, counts.completed, counts.rejected, counts.peak_running) == (3, 3, 1, 1)


@pytest.mark.parametrize("leaves", ["expired", "cancelled"])
async def test_fifo_holds_across_waiters_that_leave_from_the_middle(subject: Subject, leaves: str) -> None:
    # Three waiters in the middle of the queue leave at once (their common deadline, or cancelled):
    # the ones before and after them keep their order, and the places they left take newcomers.
    gate = subject.gate(1, 5)
    loop = asyncio.get_running_loop()
    log: list[Call] = []
    holder = await hold(gate)
    (head,) = await queue(subject, gate, 1, log=log)
    deadline = loop.time() + subject.t(2)
    middle = await queue(subject, gate, 3, log=log, deadline=deadline if leaves == "expired" else None)
    (tail,) = await queue(subject, gate, 1, log=log)
    if leaves == "cancelled":
        for call in middle:
            call.task.cancel()
    outcomes = [await call.outcome() for call in middle]
    assert all(
        isinstance(error, QueueExpired if leaves == "expired" else asyncio.CancelledError)
        for error in outcomes
    )
    if not subject.frees_place_at_deadline:
        await gate.quiet()
    newcomers = await queue(subject, gate, 3, log=log)  # the three places are free again (Q=5)
    holder.release()
    order = [head, tail, *newcomers]
    for n, call in enumerate(order):
        await subject.until(entered(call), "the next in line started")
        assert log == order[: n + 1]
        call.finish()
        assert await call.outcome() is None
    await gate.quiet()
    counts = gate.counts()
    assert (counts.admitted, counts.completed, getattr(counts, leaves), counts.peak_waiting) == (6, 6, 3, 5)
