"""GateState.check: the invariants of the core's header, each one caught when a state breaks it.

Every other test of the core calls ``check`` after each step (``tests/core/invariants.py``); these
tests break one invariant by hand at a time, so that a check that could never fail would show here.
"""

from __future__ import annotations

import pytest

from boundedgate._core import GateState, RateLimit, Status, Ticket


def busy(max_waiting: int = 5) -> tuple[GateState, Ticket]:
    """A state with its one slot taken and one ticket queued (returned)."""
    state = GateState(1, max_waiting)
    state.arrive(Ticket(), 0)
    waiter = Ticket()
    state.arrive(waiter, 0)
    assert waiter.status is Status.QUEUED
    return state, waiter


def rated(classes: int = 1) -> tuple[GateState, Ticket]:
    """A state with a slot free and one ticket queued for its tokens (returned), at 0."""
    state = GateState(2, 5, classes, rate_limits=[RateLimit(1.0, 1, unit="tokens")])
    state.arrive(Ticket(cost=1), 0)
    waiter = Ticket(cost=1)
    state.arrive(waiter, 0)
    assert waiter.status is Status.QUEUED
    assert state.running == 1
    return state, waiter


def broken(state: GateState, now: float | None = None) -> str:
    with pytest.raises(AssertionError) as caught:
        state.check(now)
    return str(caught.value)


def test_sound_states_pass() -> None:
    GateState(None, None).check()
    busy()[0].check(0)
    for classes in (1, 3):
        rated(classes)[0].check(0)
    paused = busy()[0]
    paused.pause(10, 0)
    paused.check(0)


def test_a_negative_count_is_caught() -> None:
    state = busy()[0]
    state.running = -1
    assert broken(state).startswith("running < 0")
    state = busy()[0]
    state.waiting = -1
    assert broken(state).startswith("waiting < 0")


def test_more_running_than_C_is_caught_unless_a_lowered_C_or_a_pause_drains() -> None:
    state = busy()[0]
    state.running = 2
    assert broken(state).startswith("running > max_running")
    state.limit_changes = 1
    state.check()
    state.limit_changes = 0
    state.pauses = 1
    state.check()


def test_more_waiting_than_Q_is_caught_unless_a_lowered_Q_drains() -> None:
    state = busy(max_waiting=1)[0]
    state._queue_limit = 0
    assert broken(state).startswith("waiting > max_waiting")
    state.limit_changes = 1
    state.check()


def test_max_running_is_C_or_zero_while_paused() -> None:
    state = busy()[0]
    state.max_running = 2
    assert broken(state).startswith("max_running is neither")
    state = busy()[0]
    state.pause(10, 0)
    state.max_running = 1
    assert broken(state).startswith("max_running is neither")


def test_a_free_slot_with_tickets_waiting_is_caught_without_rate_limits() -> None:
    state = busy()[0]
    state.running = 0
    assert broken(state).startswith("a slot is free while tickets wait")


def test_a_next_ticket_that_could_start_is_caught_with_rate_limits() -> None:
    state, _ = rated()
    state.check(0)
    assert broken(state, 5).startswith("the next ticket could start")  # its token came; no advance


def test_the_queue_must_hold_waiting_distinct_queued_tickets() -> None:
    state, waiter = busy()
    state.waiting = 2
    assert broken(state).startswith("queued tickets != waiting")
    state, waiter = busy()
    state._queue.push(waiter)
    state.waiting = 2
    assert broken(state).startswith("a ticket is queued twice")


def test_the_queued_sums_are_the_queue_s() -> None:
    state, _ = rated()
    state._queued_cost += 1
    assert broken(state).startswith("queued cost")
    state, waiter = rated(3)
    assert state._class_queued is not None
    state._class_queued[waiter.priority][0] += 1
    assert broken(state).startswith("queued count of a class")
    state, waiter = rated(3)
    assert state._class_queued is not None
    state._class_queued[waiter.priority][1] += 1
    assert broken(state).startswith("queued cost of a class")
    state, waiter = rated(3)
    assert state._class_queued is not None
    state._class_queued[2] = [0.0, 0.0]
    assert broken(state).startswith("sums kept for other classes")
    state, waiter = rated(3)
    state._class_queued = None
    assert broken(state).startswith("no sums per class for several classes")


def test_a_balance_below_the_floor_is_caught() -> None:
    state, _ = rated()
    state._buckets[0].empty = 100.0  # a debt of 100 tokens at 0, below the floor of -1
    assert broken(state, 0).startswith("a balance out of range")
