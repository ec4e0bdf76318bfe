"""Random scripts through the real gate under virtual time, against the independent reference model.

Every request's outcome, start and end must equal the model's (with one priority class; the
model knows no classes, and ``tests/core/test_queue.py`` proves the class order and its bound);
the gate's invariants hold after every event (``CheckedState``); counters agree with the outcomes;
and at the end nothing runs, nothing waits, and a fresh admission starts at once.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from boundedgate import BoundedGate
from tests.helpers import Job, checked_gate, reference, run_script, run_virtual


@st.composite
def scripts(
    draw: st.DrawFn, cancellations: bool = False, failures: bool = False, priorities: int = 1
) -> list[Job]:
    count = draw(st.integers(1, 12))
    jobs = []
    for i in range(count):
        arrival = draw(st.integers(0, 30))
        cancel_at = None
        if cancellations and draw(st.booleans()):
            cancel_at = arrival + draw(st.integers(1, 40))
        jobs.append(
            Job(
                id=f"J{i}",
                arrival=arrival,
                service=draw(st.integers(1, 20)),
                budget=draw(st.none() | st.integers(1, 40)),
                cancel_at=cancel_at,
                raises=failures and draw(st.booleans()),
                priority=draw(st.integers(0, priorities - 1)),
            )
        )
    return jobs


limits = st.tuples(st.integers(1, 4), st.none() | st.integers(0, 4))


async def _run_and_check(
    jobs: list[Job], max_running: int, max_waiting: int | None, priorities: int = 1
) -> None:
    gate = checked_gate(max_running, max_waiting, priorities=priorities)
    results = await run_script(gate, jobs)
    if priorities == 1:
        assert results == reference(jobs, max_running, max_waiting)
    _assert_accounts(gate, Counter(r.outcome for r in results.values()), len(jobs))
    # Nothing is left behind: a fresh admission starts at once.
    async with gate.admit() as permit:
        assert permit.started is not None


def _assert_accounts(gate: BoundedGate, outcomes: Counter[str], arrivals: int) -> None:
    stats = gate.stats()
    assert (stats.running, stats.waiting) == (0, 0)
    assert stats.arrived == arrivals
    for outcome in ("rejected", "expired", "cancelled", "completed", "late", "failed", "evicted"):
        assert getattr(stats, outcome) == outcomes[outcome], outcome
    assert stats.admitted == stats.finished
    assert gate.max_running is not None
    assert stats.peak_running <= gate.max_running
    assert gate.max_waiting is None or stats.peak_waiting <= gate.max_waiting


@given(jobs=scripts(), limits=limits)
def test_gate_matches_the_reference_model(jobs: list[Job], limits: tuple[int, int | None]) -> None:
    run_virtual(_run_and_check, jobs, *limits)


@given(jobs=scripts(cancellations=True, failures=True), limits=limits)
def test_gate_matches_the_reference_model_with_cancellations_and_failures(
    jobs: list[Job], limits: tuple[int, int | None]
) -> None:
    run_virtual(_run_and_check, jobs, *limits)


@given(jobs=scripts(cancellations=True, failures=True, priorities=3), limits=limits)
def test_gate_with_priorities_keeps_its_invariants_and_accounts(
    jobs: list[Job], limits: tuple[int, int | None]
) -> None:
    run_virtual(_run_and_check, jobs, *limits, 3)
