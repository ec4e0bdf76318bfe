"""Regressions: defects of the decision core found while replaying rate-limited traffic in the
simulator, each fixed in the core (buckets kept as the moment they are empty, a requests limit's
burst of at least 1, and a more urgent newcomer who can pay starting at once)."""

from __future__ import annotations

import pytest

from boundedgate import RateLimit, Status
from boundedgate._core import GateState, Ticket
from tests.core.invariants import check_invariants


def test_a_newcomer_that_jumps_to_the_head_with_its_tokens_there_starts() -> None:
    # The header's invariant: waiting > 0 implies every slot is busy, or the next ticket's tokens
    # are not there yet. Two classes, no limit on running, a bucket of 2 tokens (0.5 a second).
    state = GateState(None, None, priorities=2, jump_share=0.5, rate_limits=[RateLimit(0.5, 2, "tokens")])
    big = Ticket(cost=2)
    state.arrive(big, 0.0)  # takes both tokens
    low = Ticket(priority=1, cost=1)
    state.arrive(low, 0.0)  # queued: its token comes at 2 s
    urgent = Ticket(priority=0, cost=0)
    state.arrive(urgent, 0.0)  # next in line (one jump is banked), and it costs nothing
    assert urgent.status is Status.RUNNING  # it is QUEUED, and nothing will start it but advance()
    check_invariants(state, 0.0)


def test_a_requests_limit_whose_burst_is_below_one_is_refused() -> None:
    # Its bucket never holds 1 token, so every request waits for ever (or until its deadline), and
    # next_wakeup() keeps naming a new instant at which nothing can start.
    with pytest.raises(ValueError, match="burst"):
        RateLimit(1.0, 0.5, unit="requests")


def test_tokens_due_exactly_at_the_deadline_are_refused_at_arrival_whatever_the_float_noise() -> None:
    # 60 requests a minute on a clock in milliseconds (0.001 a millisecond, not exact in binary),
    # burst 1. The token taken at 0 is back at 1000 exactly; a request arriving at t with a deadline
    # of 1000 cannot start before its deadline, so it is RATE_LIMITED at arrival. For about one t in
    # eight, float noise puts the computed due time a hair before 1000: the request queues and
    # expires at 1000 instead.
    outcomes = set()
    for t in range(1, 1000):
        state = GateState(None, 10, rate_limits=[RateLimit(0.001, 1)])
        state.arrive(Ticket(), 0)
        late = Ticket(deadline=1000)
        state.arrive(late, t)
        if late.status is Status.QUEUED:
            state.advance(1000)
        outcomes.add(late.status)
    assert outcomes == {Status.RATE_LIMITED}, outcomes


def test_the_arrival_decision_is_exact_when_the_arithmetic_is() -> None:
    # The same tie at 1 token a millisecond (exact in binary): always refused at arrival.
    for t in (0.125, 0.25, 0.5, 0.75):
        state = GateState(None, 10, rate_limits=[RateLimit(1.0, 1)])
        state.arrive(Ticket(), 0)
        late = Ticket(deadline=1)
        state.arrive(late, t)
        assert late.status is Status.RATE_LIMITED
