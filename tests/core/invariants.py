"""The decision core's invariants, asserted by the tests (pure: no event loop, so it runs on 3.10 too)."""

from __future__ import annotations

import math

from boundedgate._core import GateState, Status


def check_invariants(state: GateState, now: float | None = None) -> None:
    """Assert a gate state's invariants (costs O(queue)). ``now`` is the time of its last event."""
    # Running may exceed C only while a lowered C (or a pause) drains; waiting may exceed Q only while
    # a lowered Q drains; in both cases nothing joins the excess (see GateState's invariants).
    assert state.running >= 0, state.running
    assert state.running <= state.max_running or state.limit_changes or state.pauses, (
        state.running,
        state.max_running,
    )
    assert state.waiting >= 0, state.waiting
    assert state.waiting <= state._queue_limit or state.limit_changes, (state.waiting, state.max_waiting)
    if state.paused_until == math.inf:
        assert state.max_running == state.limit, (state.max_running, state.limit)
    else:
        assert state.max_running == 0, state.max_running
    if state.waiting and state.running < state.max_running:
        assert state._buckets, (state.running, state.waiting)  # only tokens may keep a slot free
        if now is not None:
            assert not state._affordable(state._queue.peek(), now), "the next ticket could start"
    live = list(state._queue)
    assert len(live) == state.waiting, (len(live), state.waiting)
    assert len(set(map(id, live))) == len(live)
    assert all(t.status is Status.QUEUED for t in live)
    if state._buckets:
        # What the queue owes the buckets, kept as tickets join and leave: the live queue's sums.
        by_class = state._class_queued
        if by_class is None:
            assert state._queue.classes == 1
            assert math.isclose(state._queued_cost, sum(t.cost for t in live), abs_tol=1e-9), (
                state._queued_cost,
                [t.cost for t in live],
            )
        else:
            classes = {t.priority for t in live}
            assert set(by_class) == classes, (by_class, classes)
            for priority in classes:
                mine = [t.cost for t in live if t.priority == priority]
                count, cost = by_class[priority]
                assert count == len(mine), (priority, count, mine)
                assert math.isclose(cost, sum(mine), abs_tol=1e-9), (priority, cost, mine)
    if now is not None:
        for bucket in state._buckets:
            tokens = bucket.tokens(now)
            assert bucket.floor - 1e-6 <= tokens <= bucket.limit.burst, tokens
