"""Totals over many gates: which statistics are summed, which are maxima, and folding dropped gates."""

from __future__ import annotations

import dataclasses

from boundedgate._core import GateState, GateStatistics, Ticket, Totals, total
from boundedgate._core._totals import MAXIMA, SUMS


def test_every_statistic_is_summed_a_maximum_or_set_by_the_caller() -> None:
    fields = {f.name for f in dataclasses.fields(GateStatistics)}
    current = {"name", "max_running", "max_waiting", "running", "waiting", "peak_running", "peak_waiting"}
    current |= {"tokens"}  # each key's own buckets: no total
    current |= {"paused_until"}  # a moment of one gate, not a history
    assert set(SUMS) | set(MAXIMA) | current == fields
    assert not set(SUMS) & set(MAXIMA)
    assert set(MAXIMA) == {"queue_seconds_max", "run_seconds_max", "end_to_end_seconds_max"}
    state = GateState(1, 0)
    for name in SUMS + MAXIMA:
        assert hasattr(state, name), name  # folded straight from the state, by name


def _state_with_one_run(arrival: float, start: float, end: float) -> GateState:
    """Two start at 0 (one never ends); a third arrives, waits until the first ends, runs, ends."""
    state = GateState(2, 2)
    holder, ticket = Ticket(), Ticket()
    state.arrive(holder, 0.0)
    state.arrive(Ticket(), 0.0)
    state.arrive(ticket, arrival)
    state.release(holder, start)
    state.release(ticket, end)
    return state


def test_dropped_gates_are_summed_and_maxed_with_the_live_ones() -> None:
    dropped = Totals()
    dropped.add(_state_with_one_run(1.0, 3.0, 10.0))  # runs of 3 and 7; a wait of 2
    live = _state_with_one_run(0.0, 5.0, 6.0)  # runs of 5 and 1; a wait of 5
    stats = total("k", dropped, [live], running=1, waiting=0, peak_running=3, peak_waiting=1)
    assert (stats.name, stats.running, stats.peak_running, stats.peak_waiting) == ("k", 1, 3, 1)
    assert (stats.max_running, stats.max_waiting) == (2, 2)  # the live gates' limits only
    assert (stats.admitted, stats.completed) == (6, 4)
    assert (stats.queue_seconds_total, stats.queue_seconds_max) == (7.0, 5.0)
    assert (stats.run_seconds_total, stats.run_seconds_max) == (16.0, 7.0)
    assert (stats.end_to_end_seconds_total, stats.end_to_end_seconds_max) == (23.0, 9.0)
    assert isinstance(stats.queue_seconds_total, float)
    assert isinstance(stats.admitted, int)
    empty = total("k", Totals(), [], 0, 0, 0, 0)
    assert (empty.admitted, empty.run_seconds_max, empty.max_running, empty.max_waiting) == (0, 0.0, 0, 0)


def test_an_unbounded_live_gate_makes_the_total_limit_unbounded() -> None:
    rate_limiter = GateState(None, None)
    stats = total("k", Totals(), [GateState(2, 1), rate_limiter], 0, 0, 0, 0)
    assert (stats.max_running, stats.max_waiting, stats.tokens) == (None, None, ())
