"""What the edges of a user's stack need from a gate: a queue budget apart from the deadline
(``max_wait``), lateness recorded without raising (``raise_late=False``), and a client that went away
told apart from a caller that gave up (``disconnect()`` while waiting, ``abort()`` while running)."""

from __future__ import annotations

import asyncio
import math

import pytest

from boundedgate import Late, Permit, QueueExpired, Status
from tests.helpers import checked_gate


async def _queued(permit: Permit) -> asyncio.Task[Permit]:
    task = asyncio.create_task(permit.__aenter__())
    await asyncio.sleep(0)
    return task


async def test_a_queued_request_leaves_at_its_queue_budget_not_its_deadline() -> None:
    gate = checked_gate(1, 1)
    holder = gate.try_admit()
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(QueueExpired) as caught:
        async with gate.admit(timeout=120, max_wait=2):
            pytest.fail("it never starts")
    assert loop.time() - start == pytest.approx(2)
    assert caught.value.waited == pytest.approx(2)
    assert caught.value.deadline == pytest.approx(start + 2)  # the moment it had to leave
    assert gate.stats().expired == 1
    holder.release()


async def test_the_deadline_still_wins_when_it_comes_before_the_queue_budget() -> None:
    gate = checked_gate(1, 1)
    holder = gate.try_admit()
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(QueueExpired):
        async with gate.admit(timeout=1, max_wait=5):
            pytest.fail("it never starts")
    assert loop.time() - start == pytest.approx(1)
    holder.release()


async def test_once_running_only_the_deadline_decides_late() -> None:
    gate = checked_gate(1, 1)
    holder = gate.try_admit()

    async def request() -> None:
        async with gate.admit(timeout=10, max_wait=2):
            await asyncio.sleep(5)  # started at 1, ends at 6: past max_wait, well before the deadline

    task = asyncio.create_task(request())
    await asyncio.sleep(1)
    holder.release()
    await task
    assert gate.stats().completed == 2
    assert gate.stats().late == 0


async def test_max_wait_zero_expires_at_once_if_it_cannot_start() -> None:
    gate = checked_gate(1, 1)
    holder = gate.try_admit()
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(QueueExpired):
        async with gate.admit(max_wait=0):
            pytest.fail("it never starts")
    assert loop.time() == start
    holder.release()
    async with gate.admit(max_wait=0) as permit:  # a free slot: it starts
        assert permit.status is Status.RUNNING


@pytest.mark.parametrize(
    ("max_wait", "error"),
    [(-1, ValueError), (math.nan, ValueError), ("2", TypeError), (True, TypeError)],
)
def test_a_malformed_queue_budget_is_refused_at_once_naming_it(max_wait: object, error: type) -> None:
    gate = checked_gate(1, 1)
    with pytest.raises(error, match="max_wait"):
        gate.admit(max_wait=max_wait)  # type: ignore[arg-type]


async def test_raise_late_false_counts_late_without_raising() -> None:
    gate = checked_gate(1, 0)
    async with gate.admit(timeout=1, raise_late=False) as permit:
        await asyncio.sleep(2)
    assert permit.status is Status.LATE
    assert gate.stats().late == 1
    with pytest.raises(Late):
        async with gate.admit(timeout=1):
            await asyncio.sleep(2)


async def test_a_queued_request_whose_client_went_away_is_disconnected_and_never_starts() -> None:
    gate = checked_gate(1, 2)
    holder = gate.try_admit()
    left = gate.admit(timeout=30)
    task = await _queued(left)
    behind = gate.admit(timeout=30)
    behind_task = await _queued(behind)
    left.disconnect()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (gate.waiting, left.status) == (1, Status.DISCONNECTED)
    holder.release()
    await asyncio.sleep(0)
    assert behind.status is Status.RUNNING  # the place it left went to the one behind
    (await behind_task).release()
    stats = gate.stats()
    assert (stats.disconnected, stats.cancelled, stats.completed, stats.arrived) == (1, 0, 2, 3)


async def test_a_disconnect_in_the_turn_a_slot_was_handed_over_passes_the_slot_on() -> None:
    gate = checked_gate(1, 2)
    holder = gate.try_admit()
    left = gate.admit()
    task = await _queued(left)
    behind = gate.admit()
    behind_task = await _queued(behind)
    holder.release()  # hands the slot to `left`, whose task has not resumed yet
    assert left.status is Status.RUNNING
    left.disconnect()
    assert (left.status, behind.status) == (Status.DISCONNECTED, Status.RUNNING)
    with pytest.raises(asyncio.CancelledError):
        await task
    (await behind_task).release()
    assert gate.stats().disconnected == 1
    assert gate.stats().admitted == 2  # holder and behind: the handed slot was never used


async def test_disconnect_leaves_a_running_request_alone_and_abort_ends_it() -> None:
    gate = checked_gate(1, 0)
    async with gate.admit() as permit:
        permit.disconnect()  # it runs: nothing to leave, and no phantom free slot
        assert (permit.status, gate.running) == (Status.RUNNING, 1)
        permit.abort()
        assert (permit.status, gate.running) == (Status.ABORTED, 0)
    stats = gate.stats()
    assert (stats.aborted, stats.failed, stats.completed, stats.finished) == (1, 0, 0, 1)
