"""Seed 000's must-test table and worked example, each as its own test, through the real gate in
virtual time (one virtual second stands for the seed's millisecond)."""

from __future__ import annotations

import asyncio

import pytest

from boundedgate import BoundedGate, QueueFull, Status
from tests.helpers import Job, Result, checked_gate, reference, run_script

SEED_JOBS = [
    Job("A", 0, 100, 300),
    Job("B", 0, 100, 300),
    Job("C", 0, 50, 200),
    Job("D", 0, 50, 90),
    Job("E", 0, 20, 200),
]

SEED_TABLE = {
    "A": Result("completed", 0, 100),
    "B": Result("completed", 0, 100),
    "C": Result("completed", 100, 150),
    "D": Result("expired", None, 90),
    "E": Result("rejected", None, 0),
}


async def test_worked_example_gives_the_seeds_exact_table() -> None:
    gate = checked_gate(2, 2)
    assert await run_script(gate, SEED_JOBS) == SEED_TABLE


def test_reference_model_gives_the_seeds_exact_table() -> None:
    assert reference(SEED_JOBS, 2, 2) == SEED_TABLE


async def test_worked_example_statistics() -> None:
    gate = checked_gate(2, 2)
    await run_script(gate, SEED_JOBS)
    stats = gate.stats()
    assert (stats.admitted, stats.completed, stats.expired, stats.rejected) == (3, 3, 1, 1)
    assert (stats.peak_running, stats.peak_waiting) == (2, 2)
    # C ran 50 but its caller waited 150: queue time and run time are reported apart.
    assert stats.run_seconds_max == 100
    assert stats.queue_seconds_max == 100
    assert stats.end_to_end_seconds_max == 150
    assert stats.queue_seconds_total == 100 + 90  # C waited 100, D waited 90 before expiring
    assert stats.end_to_end_seconds_total == 100 + 100 + 150


async def test_five_simultaneous_arrivals_two_run_two_queue_one_rejected() -> None:
    gate = checked_gate(2, 2)
    hold = asyncio.Event()
    statuses: dict[str, Status] = {}

    async def request(name: str) -> None:
        permit = gate.admit()
        try:
            async with permit:
                await hold.wait()
        except QueueFull:
            pass
        statuses[name] = permit.status

    tasks = [asyncio.create_task(request(n)) for n in "ABCDE"]
    await asyncio.sleep(0)
    assert (gate.running, gate.waiting) == (2, 2)
    assert statuses == {"E": Status.REJECTED}
    hold.set()
    await asyncio.gather(*tasks)
    assert statuses == dict.fromkeys("ABCD", Status.COMPLETED) | {"E": Status.REJECTED}


async def test_mid_queue_expiry_frees_its_place_at_once_and_never_starts() -> None:
    # D leaves the queue at 90, so F arriving at 90 finds a place instead of being rejected.
    jobs = [*SEED_JOBS[:4], Job("F", 90, 10, 500)]
    results = await run_script(checked_gate(2, 2), jobs)
    assert results["D"] == Result("expired", None, 90)
    assert results["F"] == Result("completed", 100, 110)


async def test_queue_place_frees_at_the_deadline_not_when_a_slot_frees() -> None:
    gate = checked_gate(1, 1)
    holder = gate.try_admit()
    waiter = asyncio.create_task(gate.admit(timeout=5).__aenter__())
    await asyncio.sleep(0)
    assert gate.waiting == 1
    await asyncio.sleep(5)
    assert gate.waiting == 0  # the timer removed it at its deadline; no slot freed meanwhile
    assert waiter.done()
    holder.release()


async def test_completion_and_arrival_at_the_same_instant_old_queue_goes_first() -> None:
    # A and B finish at 10, freeing two slots; W (queued since 1) starts first, and of the two
    # newcomers arriving at 10 only one gets the slot left over; the other queues.
    jobs = [
        Job("A", 0, 10),
        Job("B", 0, 10),
        Job("W", 1, 10),
        Job("N1", 10, 10),
        Job("N2", 10, 10),
    ]
    results = await run_script(checked_gate(2, 1), jobs)
    assert results["W"] == Result("completed", 10, 20)
    assert results["N1"] == Result("completed", 10, 20)
    assert results["N2"] == Result("completed", 20, 30)


async def test_newcomers_only_get_what_the_old_queue_leaves() -> None:
    # At 10 A's slot goes to W (queued since 1); of two newcomers at 10, one takes W's queue place
    # and the other finds the queue full.
    jobs = [Job("A", 0, 10), Job("W", 1, 10), Job("N1", 10, 10), Job("N2", 10, 10)]
    results = await run_script(checked_gate(1, 1), jobs)
    assert results["W"] == Result("completed", 10, 20)
    assert results["N1"] == Result("completed", 20, 30)
    assert results["N2"] == Result("rejected", None, 10)


async def test_completion_exactly_at_the_deadline_is_late() -> None:
    results = await run_script(checked_gate(1, 0), [Job("A", 0, 10, budget=10)])
    assert results["A"] == Result("late", 0, 10)
    results = await run_script(checked_gate(1, 0), [Job("A", 0, 9, budget=10)])
    assert results["A"] == Result("completed", 0, 9)


async def test_running_request_past_its_deadline_keeps_its_slot() -> None:
    # A's deadline passes at 10 but it runs until 50: B must not start at 10 (no phantom slot).
    gate = checked_gate(1, 1)
    results = await run_script(gate, [Job("A", 0, 50, budget=10), Job("B", 5, 10, budget=100)])
    assert results["A"] == Result("late", 0, 50)
    assert results["B"] == Result("completed", 50, 60)
    assert max(running for running, _ in gate._state.counts) == 1  # type: ignore[attr-defined]


async def test_queued_request_expiring_as_a_slot_frees_never_starts() -> None:
    # W's deadline is 10, exactly when A frees the slot: expiry wins the tie.
    results = await run_script(checked_gate(1, 1), [Job("A", 0, 10), Job("W", 0, 5, budget=10)])
    assert results["W"] == Result("expired", None, 10)


@pytest.mark.parametrize(
    ("max_running", "max_waiting"),
    [(True, 1), (1, False), (0, 1), (1, -1), (1.5, 1), (1, 2.0), (float("nan"), 1), (1, float("inf"))],
)
def test_bad_settings_are_refused(max_running: object, max_waiting: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        BoundedGate(max_running=max_running, max_waiting=max_waiting)  # type: ignore[arg-type]
