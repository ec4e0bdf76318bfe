"""Priority classes through the real gate: urgent first, FIFO within a class, no class starves,
and a full queue evicts the least urgent newest waiter for a more urgent arrival (seed 004's L04)."""

from __future__ import annotations

import asyncio

import pytest

from boundedgate import BoundedGate, Evicted, QueueFull, Status
from tests.helpers import checked_gate


def prioritised(
    max_running: int, max_waiting: int | None, priorities: int, share: float = 0.2
) -> BoundedGate:
    return checked_gate(max_running, max_waiting, name="p", priorities=priorities, jump_share=share)


async def test_L04_urgent_and_background_arriving_together_urgent_starts_first() -> None:
    gate = prioritised(1, 10, priorities=4)
    holder = gate.try_admit()
    order: list[str] = []

    async def request(name: str, priority: int) -> None:
        async with gate.admit(priority=priority):
            order.append(name)
            await asyncio.sleep(1)

    # P3 is even first in line: P0 still goes first.
    tasks = [asyncio.create_task(request("P3", 3)), asyncio.create_task(request("P0", 0))]
    await asyncio.sleep(0)
    holder.release()
    await asyncio.gather(*tasks)
    assert order == ["P0", "P3"]


async def test_L04_under_a_sustained_urgent_flood_background_still_gets_its_share() -> None:
    # C=1, a queue kept full of P0 requests (a new one arrives for every one that starts), and a
    # single P3 waiting at the back. jump_share=0.2: after its banked jump, P0 may overtake an older
    # waiter on at most one start in five, so P3, once the oldest, starts within a few starts.
    gate = prioritised(1, None, priorities=4, share=0.2)
    holder = gate.try_admit()
    started: list[int] = []
    stop = asyncio.Event()

    async def request(priority: int) -> None:
        async with gate.admit(priority=priority):
            started.append(priority)
            await asyncio.sleep(1)

    async def flood() -> None:
        tasks = []
        while not stop.is_set():
            while gate.waiting < 20:
                tasks.append(asyncio.create_task(request(0)))
                await asyncio.sleep(0)
            await asyncio.sleep(0.5)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    flooder = asyncio.create_task(flood())
    await asyncio.sleep(0.1)
    background = asyncio.create_task(request(3))
    await asyncio.sleep(0.1)
    holder.release()
    await background
    stop.set()
    await flooder
    # 20 P0 were older than P3: it starts within (k + 2) / (1 - share) = 27.5 starts from the queue.
    position = started.index(3)
    assert position <= (20 + 2) / (1 - 0.2)
    # And P0 did jump ahead, within its share: 20 older P0s, at most 0.2 * n + 1 jumps.
    assert position >= 20
    assert position - 20 <= 0.2 * (position + 1) + 1


async def test_a_full_queue_evicts_the_newest_least_urgent_waiter() -> None:
    gate = prioritised(1, 3, priorities=3)
    holder = gate.try_admit()
    waiters = {name: gate.admit(priority=p, timeout=100) for name, p in [("a1", 1), ("b2", 2), ("c2", 2)]}
    tasks = {name: asyncio.create_task(w.__aenter__()) for name, w in waiters.items()}
    await asyncio.sleep(5)
    urgent = gate.admit(priority=0)
    urgent_task = asyncio.create_task(urgent.__aenter__())
    await asyncio.sleep(0)
    assert urgent.status is Status.QUEUED
    assert waiters["c2"].status is Status.EVICTED  # the newest of the least urgent class
    with pytest.raises(Evicted) as info:
        await tasks["c2"]
    evicted = info.value
    assert (evicted.code, evicted.http_status, evicted.priority) == ("evicted", 503, 2)
    assert (evicted.waited, evicted.running, evicted.waiting) == (5, 1, 3)
    assert "evicted from the queue of gate 'p'" in str(evicted)
    # A second urgent arrival evicts b2; then a class-1 arrival finds nothing less urgent to evict.
    second = asyncio.create_task(gate.admit(priority=0).__aenter__())
    await asyncio.sleep(0)
    assert waiters["b2"].status is Status.EVICTED
    with pytest.raises(QueueFull):
        async with gate.admit(priority=1):
            pass
    holder.release()
    for task in asyncio.as_completed([urgent_task, second, tasks["a1"]]):
        (await task).release()
    with pytest.raises(Evicted):
        await tasks["b2"]
    stats = gate.stats()
    assert (stats.evicted, stats.rejected, stats.completed) == (2, 1, 4)
    assert stats.arrived == 7


async def test_try_admit_never_evicts() -> None:
    gate = prioritised(1, 1, priorities=2)
    holder = gate.try_admit()
    waiter = asyncio.create_task(gate.admit(priority=1).__aenter__())
    await asyncio.sleep(0)
    with pytest.raises(QueueFull):
        gate.try_admit()
    assert gate.waiting == 1
    holder.release()
    (await waiter).release()


async def test_one_class_gate_rejects_rather_than_evicts() -> None:
    gate = checked_gate(1, 1)
    holder = gate.try_admit()
    waiter = asyncio.create_task(gate.admit().__aenter__())
    await asyncio.sleep(0)
    with pytest.raises(QueueFull):
        async with gate.admit():
            pass
    holder.release()
    (await waiter).release()


async def test_fifo_within_a_class() -> None:
    gate = prioritised(1, None, priorities=2)
    holder = gate.try_admit()
    order: list[int] = []

    async def request(i: int) -> None:
        async with gate.admit(priority=1):
            order.append(i)

    tasks = [asyncio.create_task(request(i)) for i in range(10)]
    await asyncio.sleep(0)
    holder.release()
    await asyncio.gather(*tasks)
    assert order == list(range(10))


@pytest.mark.parametrize(
    ("priority", "error", "message"),
    [
        (4, ValueError, r"^priority must be >= 0 and < 4 \(the gate's priorities\), got 4$"),
        (-1, ValueError, r"^priority must be >= 0 and < 4 \(the gate's priorities\), got -1$"),
        (True, TypeError, r"^priority must be an int, not bool$"),
        (1.0, TypeError, r"^priority must be an int, got 1.0$"),
    ],
)
def test_priority_is_checked(priority: object, error: type, message: str) -> None:
    gate = BoundedGate(max_running=1, max_waiting=1, priorities=4)
    with pytest.raises(error, match=message):
        gate.admit(priority=priority)  # type: ignore[arg-type]


def test_a_one_class_gate_only_takes_priority_zero() -> None:
    gate = BoundedGate(max_running=1, max_waiting=1)
    assert gate.priorities == 1
    gate.admit(priority=0)
    with pytest.raises(ValueError, match="< 1"):
        gate.admit(priority=1)
