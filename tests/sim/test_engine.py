"""The simulator is the gate: seed 000's table and must-test cases, and, for random scripts, the same
outcome, start and end for every request as the real asyncio gate under virtual time, and as the
independent reference model."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

import boundedgate.sim._engine
from boundedgate import Permit, Status
from boundedgate._core import Ticket
from boundedgate.sim import Job, ScriptError, simulate
from tests import helpers
from tests.helpers import CheckedState, Result, checked_gate, reference, run_script, run_virtual

SEED_JOBS = [
    Job("A", 0, 100, 300),
    Job("B", 0, 100, 300),
    Job("C", 0, 50, 200),
    Job("D", 0, 50, 90),
    Job("E", 0, 20, 200),
]


def outcomes(jobs: list[Job], max_running: int, max_waiting: int | None) -> dict[str, Result]:
    result = simulate(jobs, max_running=max_running, max_waiting=max_waiting)
    return {r.id: Result(r.outcome.value, r.start_ms, r.end_ms) for r in result.requests}


@pytest.fixture(autouse=True)
def _checked_core(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every simulation in this module runs on a core that asserts its invariants after each event.
    monkeypatch.setattr(boundedgate.sim._engine, "GateState", CheckedState)


# -- seed 000 -----------------------------------------------------------------------------------


def test_worked_example_gives_the_seeds_table() -> None:
    result = simulate(SEED_JOBS, max_running=2, max_waiting=2)
    rows = [
        (r.id, r.outcome, r.arrival_ms, r.start_ms, r.end_ms, r.queue_ms, r.end_to_end_ms)
        for r in result.requests
    ]
    assert rows == [
        ("A", Status.COMPLETED, 0, 0, 100, 0, 100),
        ("B", Status.COMPLETED, 0, 0, 100, 0, 100),
        ("C", Status.COMPLETED, 0, 100, 150, 100, 150),  # ran 50 ms, its caller waited 150
        ("D", Status.EXPIRED, 0, None, 90, 90, 90),
        ("E", Status.REJECTED, 0, None, 0, None, 0),
    ]


def test_worked_example_trace_follows_the_seeds_timeline() -> None:
    # The seed's table: at 0 A, B start, C, D queue, E is rejected; at 90 D expires; at 100 A and
    # B complete and C starts; at 150 C completes. Each hand-off happens inside its release.
    trace = [
        (e.time_ms, e.event, e.id, e.running, e.waiting)
        for e in simulate(SEED_JOBS, max_running=2, max_waiting=2).trace
    ]
    assert trace == [
        (0, "started", "A", 1, 0),
        (0, "started", "B", 2, 0),
        (0, "queued", "C", 2, 1),
        (0, "queued", "D", 2, 2),
        (0, "rejected", "E", 2, 2),
        (90, "expired", "D", 2, 1),
        (100, "completed", "A", 1, 1),
        (100, "started", "C", 2, 0),
        (100, "completed", "B", 1, 0),
        (150, "completed", "C", 0, 0),
    ]


def test_worked_example_summary() -> None:
    summary = simulate(SEED_JOBS, max_running=2, max_waiting=2).summary
    assert (summary.requests, summary.completed, summary.late, summary.expired, summary.rejected) == (
        5,
        3,
        0,
        1,
        1,
    )
    assert (summary.peak_running, summary.peak_waiting) == (2, 2)
    assert summary.queue_ms.count == 4  # A, B, C started, D expired; E never queued
    assert (summary.queue_ms.p50, summary.queue_ms.max) == (0, 100)
    assert summary.end_to_end_ms.count == 3
    assert (summary.end_to_end_ms.p50, summary.end_to_end_ms.p99) == (100, 150)


def test_five_simultaneous_arrivals_two_run_two_queue_one_rejected() -> None:
    jobs = [Job(name, 0, 10) for name in "ABCDE"]
    result = simulate(jobs, max_running=2, max_waiting=2)
    assert [e.event for e in result.trace[:5]] == ["started", "started", "queued", "queued", "rejected"]


def test_mid_queue_expiry_never_starts_and_frees_its_place_at_once() -> None:
    jobs = [*SEED_JOBS[:4], Job("F", 90, 10, 500)]
    result = simulate(jobs, max_running=2, max_waiting=2)
    assert not any(e.event == "started" and e.id == "D" for e in result.trace)
    assert result["D"].outcome is Status.EXPIRED
    assert (result["F"].outcome, result["F"].start_ms) == (Status.COMPLETED, 100)


def test_completion_and_arrival_at_the_same_instant_old_queue_goes_first() -> None:
    jobs = [Job("A", 0, 10), Job("B", 0, 10), Job("W", 1, 10), Job("N1", 10, 10), Job("N2", 10, 10)]
    assert outcomes(jobs, 2, 1) == {
        "A": Result("completed", 0, 10),
        "B": Result("completed", 0, 10),
        "W": Result("completed", 10, 20),
        "N1": Result("completed", 10, 20),
        "N2": Result("completed", 20, 30),
    }


def test_newcomers_only_get_what_the_old_queue_leaves() -> None:
    jobs = [Job("A", 0, 10), Job("W", 1, 10), Job("N1", 10, 10), Job("N2", 10, 10)]
    results = outcomes(jobs, 1, 1)
    assert results["W"] == Result("completed", 10, 20)
    assert results["N1"] == Result("completed", 20, 30)
    assert results["N2"] == Result("rejected", None, 10)


def test_completion_exactly_at_the_deadline_is_late() -> None:
    assert outcomes([Job("A", 0, 10, 10)], 1, 0)["A"] == Result("late", 0, 10)
    assert outcomes([Job("A", 0, 9, 10)], 1, 0)["A"] == Result("completed", 0, 9)


def test_running_request_past_its_deadline_keeps_its_slot() -> None:
    result = simulate([Job("A", 0, 50, 10), Job("B", 5, 10, 100)], max_running=1, max_waiting=1)
    assert (result["A"].outcome, result["A"].end_ms) == (Status.LATE, 50)
    assert (result["B"].start_ms, result["B"].end_ms) == (50, 60)
    assert max(e.running for e in result.trace) == 1


def test_queued_request_expiring_as_a_slot_frees_never_starts() -> None:
    assert outcomes([Job("A", 0, 10), Job("W", 0, 5, 10)], 1, 1)["W"] == Result("expired", None, 10)


def test_queue_expiry_at_an_arrival_instant_frees_the_place_for_the_newcomer() -> None:
    # W's deadline is 10, when N arrives to a full queue: expiries come before arrivals.
    jobs = [Job("A", 0, 100), Job("W", 0, 5, 10), Job("N", 10, 5)]
    results = outcomes(jobs, 1, 1)
    assert results["W"] == Result("expired", None, 10)
    assert results["N"] == Result("completed", 100, 105)


def test_same_instant_arrivals_follow_the_script_order_even_when_unsorted() -> None:
    jobs = [Job("late", 5, 1), Job("x", 0, 10), Job("y", 0, 10), Job("z", 0, 10)]
    results = outcomes(jobs, 1, 1)
    assert results["x"] == Result("completed", 0, 10)
    assert results["y"] == Result("completed", 10, 20)
    assert results["z"] == Result("rejected", None, 0)
    assert results["late"] == Result("rejected", None, 5)


def test_unbounded_queue_never_rejects() -> None:
    result = simulate([Job(str(i), 0, 10) for i in range(100)], max_running=3, max_waiting=None)
    assert result.summary.rejected == 0
    assert result.summary.peak_waiting == 97
    assert result.max_waiting is None


def test_empty_script() -> None:
    result = simulate([], max_running=1, max_waiting=0)
    assert result.requests == ()
    assert result.trace == ()
    assert result.summary.requests == 0
    assert result.summary.queue_ms.p99 is None


def test_without_trace_the_outcomes_are_the_same() -> None:
    with_trace = simulate(SEED_JOBS, max_running=2, max_waiting=2)
    without = simulate(SEED_JOBS, max_running=2, max_waiting=2, trace=False)
    assert without.trace == ()
    assert without.requests == with_trace.requests
    assert without.summary == with_trace.summary


def test_an_urgent_arrival_evicts_the_newest_least_urgent_waiter() -> None:
    jobs = [
        Job("run", 0, 10),
        Job("low1", 0, 5, None, 1),
        Job("low2", 1, 5, None, 1),
        Job("urgent", 2, 5, None, 0),
    ]
    result = simulate(jobs, max_running=1, max_waiting=2, priorities=2)
    assert result["low2"].outcome is Status.EVICTED
    assert (result["low2"].end_ms, result["low2"].queue_ms) == (2, 1)
    assert result["urgent"].start_ms == 10  # the most urgent goes first (one jump is banked)
    assert result["low1"].start_ms == 15
    assert (2, "evicted", "low2", 1, 1) in [
        (e.time_ms, e.event, e.id, e.running, e.waiting) for e in result.trace
    ]
    assert result.summary.evicted == 1
    assert result.summary.queue_ms.count == 4
    assert (result.priorities, result.jump_share) == (2, 0.2)


def test_a_priority_the_gate_does_not_have_is_refused_naming_the_job() -> None:
    with pytest.raises(ScriptError, match=r"job 1 \(id 'b'\): priority 2 is not one of the gate's 2 classes"):
        simulate([Job("a", 0, 1), Job("b", 0, 1, None, 2)], max_running=1, max_waiting=0, priorities=2)
    with pytest.raises(ValueError, match="priorities must be >= 1"):
        simulate([Job("a", 0, 1)], max_running=1, max_waiting=0, priorities=0)
    with pytest.raises(ValueError, match="jump_share"):
        simulate([Job("a", 0, 1)], max_running=1, max_waiting=0, jump_share=1)


def test_lookup_by_id() -> None:
    result = simulate(SEED_JOBS, max_running=2, max_waiting=2)
    assert result["C"].start_ms == 100
    with pytest.raises(KeyError):
        result["nope"]


@pytest.mark.parametrize(
    ("max_running", "max_waiting", "error"),
    [
        (0, 1, ValueError),
        (True, 1, TypeError),
        (1, -1, ValueError),
        (1, 1.0, TypeError),
        (1, False, TypeError),
    ],
)
def test_bad_settings_are_refused(max_running: object, max_waiting: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        simulate(SEED_JOBS, max_running=max_running, max_waiting=max_waiting)  # type: ignore[arg-type]


def test_duplicate_ids_and_foreign_items_are_refused_naming_the_row() -> None:
    with pytest.raises(ScriptError, match=r"job 2 \(id 'A'\): duplicate id \(first used at job 0\)"):
        simulate([Job("A", 0, 1), Job("B", 0, 1), Job("A", 1, 1)], max_running=1, max_waiting=0)
    with pytest.raises(ScriptError, match=r"job 1: expected a Job"):
        simulate([Job("A", 0, 1), ("B", 0, 1)], max_running=1, max_waiting=0)  # type: ignore[list-item]


# -- random scripts: the simulator, the real gate and the reference model agree ----------------


@st.composite
def scripts(draw: st.DrawFn, priorities: int = 1) -> list[Job]:
    count = draw(st.integers(1, 14))
    return [
        Job(
            f"J{i}",
            draw(st.integers(0, 30)),
            draw(st.integers(1, 20)),
            draw(st.none() | st.integers(1, 40)),
            draw(st.integers(0, priorities - 1)),
        )
        for i in range(count)
    ]


limits = st.tuples(st.integers(1, 4), st.none() | st.integers(0, 4))


def as_helper_jobs(jobs: list[Job]) -> list[helpers.Job]:
    return [helpers.Job(j.id, j.arrival_ms, j.service_ms, j.budget_ms, priority=j.priority) for j in jobs]


@given(jobs=scripts(priorities=3), limits=limits, jump_share=st.sampled_from([0, 0.2, 0.5]))
def test_simulator_equals_the_real_gate_with_priorities(
    jobs: list[Job], limits: tuple[int, int | None], jump_share: float
) -> None:
    # Priority classes, queue-jumping and eviction: still the gate, request by request.
    gate = checked_gate(*limits, priorities=3, jump_share=jump_share)
    real = run_virtual(run_script, gate, as_helper_jobs(jobs))
    result = simulate(jobs, max_running=limits[0], max_waiting=limits[1], priorities=3, jump_share=jump_share)
    assert {r.id: Result(r.outcome.value, r.start_ms, r.end_ms) for r in result.requests} == real
    assert result.summary.evicted == gate.stats().evicted


@given(jobs=scripts(priorities=2), limits=limits, feasible=st.booleans())
def test_simulator_equals_the_real_gate_in_deadline_order(
    jobs: list[Job], limits: tuple[int, int | None], feasible: bool
) -> None:
    # Each class's waiters by deadline, with feasible admission counting those due sooner.
    gate = checked_gate(*limits, priorities=2)
    gate._state.by_deadline = True
    gate._state.feasible = feasible
    real = run_virtual(run_script, gate, as_helper_jobs(jobs))
    result = simulate(
        jobs, max_running=limits[0], max_waiting=limits[1], priorities=2, feasible=feasible, by_deadline=True
    )
    assert {r.id: Result(r.outcome.value, r.start_ms, r.end_ms) for r in result.requests} == real


@given(jobs=scripts(), limits=limits)
def test_simulator_equals_the_real_gate_under_virtual_time(
    jobs: list[Job], limits: tuple[int, int | None]
) -> None:
    gate = checked_gate(*limits)
    real = run_virtual(run_script, gate, as_helper_jobs(jobs))
    assert outcomes(jobs, *limits) == real
    summary = simulate(jobs, max_running=limits[0], max_waiting=limits[1]).summary
    stats = gate.stats()
    assert (summary.peak_running, summary.peak_waiting) == (stats.peak_running, stats.peak_waiting)
    assert (summary.completed, summary.late, summary.expired, summary.rejected) == (
        stats.completed,
        stats.late,
        stats.expired,
        stats.rejected,
    )


@given(jobs=scripts(), limits=limits)
def test_simulator_equals_the_reference_model(jobs: list[Job], limits: tuple[int, int | None]) -> None:
    assert outcomes(jobs, *limits) == reference(as_helper_jobs(jobs), *limits)


@given(jobs=scripts(), limits=limits)
def test_trace_counts_are_the_requests_in_flight(jobs: list[Job], limits: tuple[int, int | None]) -> None:
    # After the last event of each instant, the trace's counts are what the per-request rows say
    # was running and waiting then; every request has exactly one final event, at its end.
    result = simulate(jobs, max_running=limits[0], max_waiting=limits[1])
    last_at: dict[float, tuple[int, int]] = {}
    for event in result.trace:
        last_at[event.time_ms] = (event.running, event.waiting)
        assert event.running <= limits[0]
        assert limits[1] is None or event.waiting <= limits[1]
    for t, counts in last_at.items():
        running = sum(1 for r in result.requests if r.start_ms is not None and r.start_ms <= t < r.end_ms)
        waiting = sum(
            1
            for r in result.requests
            if r.outcome is not Status.REJECTED
            and r.arrival_ms <= t < (r.start_ms if r.start_ms is not None else r.end_ms)
        )
        assert counts == (running, waiting), t
    finals = [e for e in result.trace if e.event not in ("started", "queued")]
    assert sorted((e.id, e.time_ms, e.event) for e in finals) == sorted(
        (r.id, r.end_ms, r.outcome.value) for r in result.requests
    )


def test_large_random_script_matches_the_reference_model() -> None:
    rng = random.Random(7)
    jobs = [
        Job(f"J{i}", rng.randrange(200), rng.randrange(1, 30), rng.choice([None, rng.randrange(1, 60)]))
        for i in range(300)
    ]
    assert outcomes(jobs, 5, 12) == reference(as_helper_jobs(jobs), 5, 12)


def test_a_core_that_asks_for_an_instant_already_past_moves_the_clock_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Float noise could make the core name an instant the engine has already visited (or one
    # that rounds to it): the engine wakes it there once more, as the asyncio gate's timer would
    # fire at once, and then moves on by a microsecond rather than visit that instant for ever.
    visited: list[float] = []

    class Stale(CheckedState):
        def next_wakeup(self) -> float:
            real = super().next_wakeup()
            return min(real, 5.0000000000001) if len(visited) < 20 else real

        def advance(self, now: float) -> list[Ticket]:
            visited.append(now)
            return super().advance(now)

    monkeypatch.setattr(boundedgate.sim._engine, "GateState", Stale)
    result = simulate([Job("a", 0, 10), Job("b", 5, 10)], max_running=1, max_waiting=1)
    assert [(r.id, r.start_ms, r.end_ms) for r in result.requests] == [("a", 0, 10), ("b", 10, 20)]
    assert visited == sorted(visited)
    assert max(Counter(visited).values()) == 2
    assert visited[:4] == [0, 5, 5, 5.0000000000001]  # 5.0000000000001 ms is 5 ms, but for the core


@given(
    jobs=scripts(),
    limits=limits,
    waits=st.lists(st.none() | st.integers(0, 30), min_size=14, max_size=14),
)
def test_simulator_equals_the_real_gate_with_queue_budgets(
    jobs: list[Job], limits: tuple[int, int | None], waits: list[int | None]
) -> None:
    # max_wait_ms is admit(max_wait=...): it bounds the wait, and the budget alone decides Late.
    jobs = [dataclasses.replace(job, max_wait_ms=wait) for job, wait in zip(jobs, waits, strict=False)]
    max_wait = {job.id: job.max_wait_ms for job in jobs}
    gate = checked_gate(*limits)

    def admit(job: helpers.Job) -> Permit:
        return gate.admit(timeout=job.budget, max_wait=max_wait[job.id])

    real = run_virtual(run_script, gate, as_helper_jobs(jobs), admit)
    result = simulate(jobs, max_running=limits[0], max_waiting=limits[1])
    assert {r.id: Result(r.outcome.value, r.start_ms, r.end_ms) for r in result.requests} == real


def test_a_queue_budget_expires_a_waiter_that_its_deadline_would_have_let_run() -> None:
    jobs = [Job("A", 0, 50), Job("B", 0, 10, 100, max_wait_ms=20), Job("C", 0, 10, 100)]
    result = simulate(jobs, max_running=1, max_waiting=2)
    assert [(r.id, r.outcome, r.end_ms) for r in result.requests] == [
        ("A", Status.COMPLETED, 50),
        ("B", Status.EXPIRED, 20),
        ("C", Status.COMPLETED, 60),
    ]
