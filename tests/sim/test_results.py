"""Nearest-rank percentiles, and the summary's populations."""

from __future__ import annotations

import math
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundedgate import Status
from boundedgate.sim import ClassSummary, Job, Percentiles, simulate
from boundedgate.sim._results import percentile


def test_nearest_rank_on_known_samples() -> None:
    values = list(range(1, 101))  # 1..100
    assert percentile(values, 50) == 50
    assert percentile(values, 95) == 95
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100
    assert percentile([10, 20, 30, 40], 50) == 20  # rank ceil(2.0) = 2
    assert percentile([10, 20, 30, 40], 51) == 30  # rank ceil(2.04) = 3
    assert percentile([7], 99) == 7
    assert percentile([1, 2], 0.1) == 1
    assert percentile([], 50) is None


@pytest.mark.parametrize("p", [0, -1, 100.5, math.nan])
def test_percentile_outside_0_100_is_refused(p: float) -> None:
    with pytest.raises(ValueError, match="p must be"):
        percentile([1, 2, 3], p)


@given(st.lists(st.integers(0, 1000), min_size=1), st.floats(0.01, 100))
def test_nearest_rank_definition(values: list[int], p: float) -> None:
    ordered = sorted(values)
    value = percentile(ordered, p)
    assert value in ordered
    n = len(ordered)
    # At least p% of the sample is at or below it, and fewer than p% strictly below it.
    assert sum(v <= value for v in ordered) >= p / 100 * n
    assert sum(v < value for v in ordered) < p / 100 * n


def test_percentiles_of_any_order() -> None:
    assert Percentiles.of([5, 1, 3]) == Percentiles(3, 3, 5, 5, 5)
    assert Percentiles.of([]) == Percentiles(0, None, None, None, None)


def test_rejected_requests_do_not_shorten_the_wait() -> None:
    # One request waits 10; ninety-nine are rejected at once. Counting the rejected as zero waits
    # would put p99 at 0; they never queued, so the wait's p99 is 10.
    jobs = [Job("run", 0, 10), Job("wait", 0, 10), *(Job(f"r{i}", 0, 10) for i in range(99))]
    summary = simulate(jobs, max_running=1, max_waiting=1).summary
    assert summary.rejected == 99
    assert summary.queue_ms == Percentiles(2, 0, 10, 10, 10)
    assert summary.end_to_end_ms == Percentiles(2, 10, 20, 20, 20)


def test_shares() -> None:
    summary = simulate([Job("a", 0, 10), Job("b", 0, 10)], max_running=1, max_waiting=0).summary
    assert summary.share(Status.COMPLETED) == summary.share(Status.REJECTED) == 0.5
    assert summary.admitted == 1
    with pytest.raises(ValueError, match="no cancelled"):
        summary.share(Status.CANCELLED)
    assert simulate([], max_running=1, max_waiting=0).summary.share(Status.LATE) == 0.0


def test_to_dict_is_json_ready() -> None:
    data = simulate([Job("a", 0, 10, 5)], max_running=1, max_waiting=0).to_dict()
    assert data["requests"] == [
        {
            "id": "a",
            "outcome": "late",
            "arrival_ms": 0,
            "start_ms": 0,
            "end_ms": 10,
            "queue_ms": 0,
            "end_to_end_ms": 10,
        }
    ]
    assert data["summary"]["late"] == 1
    assert data["trace"][-1] == {"time_ms": 10, "event": "late", "id": "a", "running": 0, "waiting": 0}


def test_the_summary_breaks_down_counts_and_waits_by_priority_class() -> None:
    # The eviction example: `urgent` evicts `low2` from the full queue and starts first.
    jobs = [
        Job("run", 0, 10),
        Job("low1", 0, 5, None, 1),
        Job("low2", 1, 5, None, 1),
        Job("urgent", 2, 5, None, 0),
    ]
    summary = simulate(jobs, max_running=1, max_waiting=2, priorities=2).summary
    assert summary.classes == (
        ClassSummary(0, 2, 2, 0, 0, 0, 0, 0, Percentiles.of([0, 8]), Percentiles.of([10, 13])),
        ClassSummary(1, 2, 1, 0, 0, 0, 1, 0, Percentiles.of([15, 1]), Percentiles.of([20])),
    )
    data = summary.to_dict()["classes"]
    assert [(c["priority"], c["requests"], c["evicted"], c["queue_ms"]["max"]) for c in data] == [
        (0, 2, 0, 8),
        (1, 2, 1, 15),
    ]
    assert simulate(jobs, max_running=1, max_waiting=2, priorities=2).summary.evicted == 1


def test_one_class_has_no_breakdown() -> None:
    summary = simulate([Job("a", 0, 1)], max_running=1, max_waiting=0).summary
    assert summary.classes == ()
    assert summary.to_dict()["classes"] == []


@given(
    st.lists(
        st.tuples(st.integers(0, 20), st.integers(1, 10), st.none() | st.integers(1, 30), st.integers(0, 2))
    ),
    st.integers(1, 3),
    st.none() | st.integers(0, 3),
)
def test_the_classes_add_up_to_the_whole(
    rows: list[tuple[int, int, int | None, int]], max_running: int, max_waiting: int | None
) -> None:
    jobs = [Job(f"j{i}", *row) for i, row in enumerate(rows)]
    summary = simulate(jobs, max_running=max_running, max_waiting=max_waiting, priorities=3).summary
    assert [c.priority for c in summary.classes] == sorted({job.priority for job in jobs})
    for field in ("requests", "completed", "late", "expired", "rejected", "evicted", "rate_limited"):
        assert sum(getattr(c, field) for c in summary.classes) == getattr(summary, field), field
    assert sum(c.queue_ms.count for c in summary.classes) == summary.queue_ms.count
    assert sum(c.end_to_end_ms.count for c in summary.classes) == summary.end_to_end_ms.count
    maxima = [c.queue_ms.max for c in summary.classes if c.queue_ms.max is not None]
    assert max(maxima, default=None) == summary.queue_ms.max


def test_the_breakdown_has_the_classes_with_requests_whatever_the_number_of_classes() -> None:
    """A class nobody is in has nothing to count: a million classes cost what two do."""
    jobs = [Job("a", 0, 10, None, 0), Job("b", 0, 10, None, 10**5)]
    tracemalloc.start()
    try:
        summary = simulate(jobs, max_running=1, max_waiting=1, priorities=10**5 + 1).summary
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [(c.priority, c.requests, c.completed) for c in summary.classes] == [(0, 1, 1), (10**5, 1, 1)]
    assert peak < 1024 * 1024
