"""The outcome registry: every report that lists outcomes agrees with ``boundedgate.OUTCOMES``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import boundedgate
from boundedgate import OUTCOMES, GateStatistics, Status
from boundedgate._core import BY_NAME, BY_STATUS, NEVER_RAN, RAN, SIMULATED, GateState, Ticket
from boundedgate._errors import DeadlineCut, Evicted, Infeasible, Late, QueueExpired, QueueFull, RateLimited
from boundedgate.sim import ClassSummary, Job, KeySummary, Summary, simulate
from boundedgate.sim._engine import OUTCOMES as SIMULATED_STATUSES
from boundedgate.sim._plot import OUTCOME_COLORS
from boundedgate.sim._text import SWEEP_ORDER, summary_lines

PENDING = {Status.NEW, Status.QUEUED, Status.RUNNING}


def test_every_final_status_has_exactly_one_outcome_and_no_pending_one_has() -> None:
    assert isinstance(OUTCOMES, tuple)
    assert {o.status for o in OUTCOMES} == set(Status) - PENDING
    assert len({o.status for o in OUTCOMES}) == len(OUTCOMES)
    assert len({o.name for o in OUTCOMES}) == len(OUTCOMES)
    for outcome in OUTCOMES:
        assert outcome.status.is_final
        assert outcome.name == outcome.status.value
        assert BY_STATUS[outcome.status] is outcome
        assert BY_NAME[outcome.name] is outcome
        assert outcome.description.endswith(".")
        assert not (outcome.ran and outcome.at_arrival), outcome
    assert set(RAN) | set(NEVER_RAN) == set(OUTCOMES)
    assert not set(RAN) & set(NEVER_RAN)
    assert boundedgate.OUTCOMES is OUTCOMES


def test_the_statistics_count_every_outcome_and_add_up_from_the_registry() -> None:
    fields = {f.name: f.type for f in dataclasses.fields(GateStatistics)}
    state = GateState(1, 1)
    for outcome in OUTCOMES:
        assert fields[outcome.name] == "int", outcome.name
        assert getattr(state, outcome.name) == 0, outcome.name
    base = GateState(1, 1).snapshot("g")
    for outcome in OUTCOMES:
        one = dataclasses.replace(base, **{outcome.name: 1})  # type: ignore[arg-type]  # a counter, by name
        assert one.arrived == (0 if outcome.ran else 1), outcome.name  # a run counts in `admitted`
        assert one.finished == (1 if outcome.ran else 0), outcome.name


def test_the_core_counts_each_abnormal_ending_apart() -> None:
    state = GateState(1, 0)
    endings = (None, Status.FAILED, Status.ABORTED, Status.LEAKED, Status.CUT)
    tickets = [Ticket(deadline=100.0) for _ in endings]
    for n, (ticket, ending) in enumerate(zip(tickets, endings, strict=True)):
        state.arrive(ticket, float(n))
        state.release(ticket, n + 0.5, ending)
    assert [t.status for t in tickets] == [
        Status.COMPLETED, Status.FAILED, Status.ABORTED, Status.LEAKED, Status.CUT
    ]  # fmt: skip
    stats = state.snapshot("g")
    counts = (
        stats.completed,
        stats.failed,
        stats.aborted,
        stats.leaked,
        stats.cut,
        stats.finished,
        stats.arrived,
    )
    assert counts == (1, 1, 1, 1, 1, 5, 5)
    assert stats.run_seconds_total == 2.5


def test_a_client_that_went_away_while_waiting_is_disconnected_not_cancelled() -> None:
    state = GateState(1, 2)
    running, queued, handed = Ticket(), Ticket(), Ticket()
    state.arrive(running, 0.0)
    state.arrive(queued, 0.0)
    state.arrive(handed, 0.0)
    state.cancel(queued, 1.0, Status.DISCONNECTED)
    state.release(running, 2.0)  # hands the slot to `handed`, whose client then leaves unstarted
    state.cancel(handed, 2.0, Status.DISCONNECTED)
    assert (queued.status, handed.status) == (Status.DISCONNECTED, Status.DISCONNECTED)
    stats = state.snapshot("g")
    assert (stats.disconnected, stats.cancelled, stats.admitted, stats.running, stats.arrived) == (
        2,
        0,
        1,
        0,
        3,
    )


def test_an_ending_that_does_not_fit_is_refused_before_anything_changes() -> None:
    state = GateState(1, 1)
    running, queued = Ticket(), Ticket()
    state.arrive(running, 0.0)
    state.arrive(queued, 0.0)
    with pytest.raises(ValueError, match="cannot end as cancelled"):
        state.release(running, 1.0, Status.CANCELLED)
    with pytest.raises(ValueError, match="cannot end as aborted"):
        state.cancel(queued, 1.0, Status.ABORTED)
    assert (running.status, queued.status, state.running, state.waiting) == (
        Status.RUNNING,
        Status.QUEUED,
        1,
        1,
    )


def test_the_simulator_summaries_and_tables_follow_the_registry() -> None:
    assert tuple(o.status for o in SIMULATED) == SIMULATED_STATUSES
    for summary in (Summary, ClassSummary, KeySummary):
        names = {f.name for f in dataclasses.fields(summary)}
        assert {o.name for o in SIMULATED} <= names, summary
        assert not {o.name for o in OUTCOMES if not o.simulated} & names, summary
    assert set(SWEEP_ORDER) == set(SIMULATED)
    assert len(SWEEP_ORDER) == len(SIMULATED)
    assert set(OUTCOME_COLORS) == {o.name for o in SIMULATED}


def test_the_summary_table_lists_the_outcomes_by_their_labels() -> None:
    # C=1, Q=1: A runs late, B waits and expires, C is refused at once.
    result = simulate(
        [Job("A", 0, 100, 50), Job("B", 0, 10, 40), Job("C", 0, 10, 40)],
        max_running=1,
        max_waiting=1,
    )
    lines = summary_lines(result.summary)
    first_column = [line.split("  ")[0].strip() for line in lines]
    labels = [o.label for o in SIMULATED if o.always_shown]
    at = first_column.index(labels[0])
    assert first_column[at : at + len(labels)] == labels
    assert (result.summary.late, result.summary.expired, result.summary.rejected) == (1, 1, 1)
    assert "rate limited at once" in "\n".join(summary_lines(result.summary, rate_limits=True))
    assert "evicted from the queue" not in "\n".join(lines)  # shown only when someone was


def test_error_codes_are_the_registry_s() -> None:
    codes = {o.error_code for o in OUTCOMES if o.error_code is not None}
    errors = (QueueFull, QueueExpired, Late, DeadlineCut, Evicted, RateLimited, Infeasible)
    assert codes == {e.code for e in errors}
    assert BY_STATUS[Status.REJECTED].error_code == QueueFull.code
    assert BY_STATUS[Status.EXPIRED].error_code == QueueExpired.code
    assert BY_STATUS[Status.LATE].error_code == Late.code
    assert BY_STATUS[Status.CUT].error_code == DeadlineCut.code
    assert BY_STATUS[Status.EVICTED].error_code == Evicted.code
    assert BY_STATUS[Status.RATE_LIMITED].error_code == RateLimited.code


def test_the_cluster_gate_s_statistics_count_every_outcome() -> None:
    from boundedgate.redis._stats import LocalCounters

    counters = LocalCounters()
    snapshot = counters.snapshot("g", 1, 0, 0, 0)
    for outcome in OUTCOMES:
        assert getattr(snapshot, outcome.name) == 0
        setattr(counters, outcome.name, 7)
    snapshot = counters.snapshot("g", 1, 0, 0, 0)
    assert all(getattr(snapshot, o.name) == 7 for o in OUTCOMES)


def test_the_readme_describes_every_outcome() -> None:
    root = Path(__file__).parent.parent
    for page in (root / "README.md", root / "docs" / "outcomes.md"):
        text = page.read_text(encoding="utf-8")
        section = text[text.index("## What happens to a request") :]
        table = section[: section.index("\n## ")] if "\n## " in section else section
        for outcome in OUTCOMES:
            assert f"| `{outcome.name}` |" in table, (page.name, outcome.name)
    metrics = (root / "docs" / "metrics.md").read_text(encoding="utf-8")
    for outcome in OUTCOMES:
        assert f"`{outcome.name}`" in metrics[metrics.index("## Statistics") :], outcome.name
