"""Record and replay: a real gate's traffic, recorded by its observer, replays to the same ending.

The gates run on a fast-forwarding loop (virtual time), where requests at one instant tie exactly.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import looptime
import pytest

from boundedgate import BoundedGate, GateError
from boundedgate._cli import main
from boundedgate.sim import Bursts, Job, LogNormal, Poisson, Recorder, generate, read_script, simulate

_T = TypeVar("_T")


def run_virtual(coro_fn: Callable[..., Coroutine[Any, Any, _T]], *args: object) -> _T:
    """Run ``coro_fn(*args)`` on a fresh fast-forwarding loop starting at time 0."""
    loop = looptime.new_event_loop(start=0)
    try:
        return loop.run_until_complete(coro_fn(*args))
    finally:
        loop.close()


async def serve(gate: BoundedGate, jobs: list[Job]) -> None:
    """Each job through the real gate at its arrival, its body sleeping its service time."""
    loop = asyncio.get_running_loop()
    origin = loop.time()

    async def request(job: Job) -> None:
        budget = None if job.budget_ms is None else job.budget_ms / 1000
        try:
            async with gate.admit(timeout=budget, priority=job.priority, cost=job.cost):
                await asyncio.sleep(job.service_ms / 1000)
        except GateError:
            pass

    tasks = []
    for job in jobs:
        await asyncio.sleep(max(0.0, origin + job.arrival_ms / 1000 - loop.time()))
        tasks.append(asyncio.create_task(request(job)))
    await asyncio.gather(*tasks)


def test_the_worked_example_recorded_is_its_own_script() -> None:
    gate = BoundedGate(max_running=2, max_waiting=2, name="five")
    recorder = Recorder()
    gate.observe(recorder)
    five = [
        Job("A", 0, 100, 300),
        Job("B", 0, 100, 300),
        Job("C", 0, 50, 200),
        Job("D", 0, 50, 90),
        Job("E", 0, 20, 200),
    ]
    run_virtual(serve, gate, five)
    jobs = recorder.jobs()
    assert len(recorder) == 5
    # A and B started at once, C and D queued (D left the queue at 90 ms, before C's start at
    # 100 ms), E was refused: the order the gate served them in, which a replay keeps.
    assert [(j.id, j.arrival_ms, j.budget_ms) for j in jobs] == [
        ("r1", 0, 300),
        ("r2", 0, 300),
        ("r3", 0, 90),
        ("r4", 0, 200),
        ("r5", 0, 200),
    ]
    assert [jobs[0].service_ms, jobs[1].service_ms, jobs[3].service_ms] == [100, 100, 50]
    assert {jobs[2].service_ms, jobs[4].service_ms} <= {100, 50}  # never ran: drawn from those that did
    replay = simulate(jobs, max_running=2, max_waiting=2)
    assert [r.outcome.value for r in replay.requests] == [
        "completed",
        "completed",
        "expired",
        "completed",
        "rejected",
    ]


@pytest.mark.parametrize("max_waiting", [0, 5, 40, None])
def test_a_recorded_run_replays_to_the_same_outcomes_starts_and_ends(max_waiting: int | None) -> None:
    traffic = generate(
        [Poisson(rate=50), Bursts(60, start_ms=500)],
        LogNormal(mean_ms=120, p99_ms=600),
        budget_ms=400,
        duration_ms=2000,
        seed=3,
    )
    gate = BoundedGate(max_running=6, max_waiting=max_waiting, name="live")
    recorder = Recorder()
    gate.observe(recorder)
    run_virtual(serve, gate, traffic)
    real = recorder.records
    assert len(real) == len(traffic)
    replay = simulate(recorder.jobs(), max_running=6, max_waiting=max_waiting)
    origin = min(r.arrival for r in real)
    assert Counter(r.outcome.name for r in real) == Counter(r.outcome.value for r in replay.requests)
    ran = sorted(
        (round((r.started - origin) * 1000), round((r.ended - origin) * 1000))
        for r in real
        if r.started is not None
    )
    assert ran == sorted((r.start_ms, r.end_ms) for r in replay.requests if r.start_ms is not None)


def test_keys_priorities_and_costs_are_kept_and_the_planner_reads_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recorder = Recorder()
    gate = BoundedGate(max_running=1, max_waiting=4, name="api", priorities=2)
    gate.observe(recorder)

    async def calls() -> None:
        async with gate.admit(timeout=5, priority=1, cost=300) as permit:
            await asyncio.sleep(0.25)
            permit.settle(120)
        async with gate.admit():
            await asyncio.sleep(0.5)

    run_virtual(calls)
    first, second = recorder.jobs()
    assert (first.service_ms, first.budget_ms, first.priority, first.cost, first.actual_cost) == (
        250,
        5000,
        1,
        300,
        120,
    )
    assert (second.arrival_ms, second.service_ms, second.budget_ms, second.priority) == (250, 500, None, 0)
    script = tmp_path / "yesterday.csv"
    recorder.write(script)
    assert read_script(script) == [first, second]
    status = main(["plan", "--script", str(script), "-c", "1", "-q", "0,1"])
    assert status == 0
    assert capsys.readouterr().out.startswith(f"Workload: 2 requests from {script}")


def test_nothing_recorded_is_an_empty_script_and_nothing_that_ran_is_an_error() -> None:
    recorder = Recorder()
    assert recorder.jobs() == []
    gate = BoundedGate(max_running=1, max_waiting=0, name="full")
    gate.observe(recorder)

    async def refused() -> None:
        holder = gate.try_admit()
        with pytest.raises(GateError):
            gate.try_admit()
        assert len(recorder) == 1  # the refusal; the holder is recorded when it ends
        with pytest.raises(ValueError, match="no recorded request ran"):
            recorder.jobs()
        holder.release()

    run_virtual(refused)
    # The holder ran 0 ms, written as a script's least, 1 ms; the refusal draws that run time.
    assert [job.service_ms for job in recorder.jobs()] == [1, 1]
    recorder.clear()
    assert recorder.jobs() == []
