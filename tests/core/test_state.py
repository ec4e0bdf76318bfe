"""The decision core, driven by hand with no event loop: seed 000 as pure steps, each rule, and a
stateful Hypothesis machine over random events."""

from __future__ import annotations

import math

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from boundedgate._core import GateState, RateLimit, Status, Ticket
from boundedgate._core._state import _SLACK
from tests.core.invariants import check_invariants


def ticket(deadline: float = math.inf) -> Ticket:
    return Ticket(deadline)


def test_GateState_seed_worked_example_as_pure_steps() -> None:
    state = GateState(2, 2)
    a, b, c, d, e = ticket(300), ticket(300), ticket(200), ticket(90), ticket(200)
    for t in (a, b, c, d, e):
        assert state.arrive(t, 0) == ()
    assert [t.status for t in (a, b, c, d, e)] == [
        Status.RUNNING,
        Status.RUNNING,
        Status.QUEUED,
        Status.QUEUED,
        Status.REJECTED,
    ]
    assert state.next_wakeup() == 90
    assert state.advance(89) == []
    assert state.advance(90) == [d]
    assert (d.status, d.ended) == (Status.EXPIRED, 90)
    assert state.next_wakeup() == 200
    assert state.release(a, 100) == [c]
    assert (c.status, c.started) == (Status.RUNNING, 100)
    assert state.release(b, 100) == ()
    assert state.release(c, 150) == ()
    assert c.status is Status.COMPLETED
    assert state.next_wakeup() == math.inf
    check_invariants(state)
    snap = state.snapshot("seed")
    assert (snap.admitted, snap.completed, snap.expired, snap.rejected) == (3, 3, 1, 1)


def test_GateState_release_expires_due_waiters_before_handing_off() -> None:
    state = GateState(1, 2)
    holder, due, next_in_line = ticket(), ticket(10), ticket(50)
    for t in (holder, due, next_in_line):
        state.arrive(t, 0)
    woken = state.release(holder, 10)
    assert woken == [due, next_in_line]
    assert due.status is Status.EXPIRED
    assert (next_in_line.status, next_in_line.started) == (Status.RUNNING, 10)


def test_GateState_arrival_expires_due_waiters_to_free_their_places() -> None:
    state = GateState(1, 1)
    holder, due, newcomer = ticket(), ticket(10), ticket()
    state.arrive(holder, 0)
    state.arrive(due, 0)
    assert state.arrive(newcomer, 10) == [due]
    assert newcomer.status is Status.QUEUED


def late_charge() -> tuple[GateState, list[Ticket]]:
    """A token a second: b starts at 10 on the tokens a left; c's 4, due at 14 behind it, are
    pushed past c's deadline of 15 by the 4 more b settles at 10 (a charge nobody could foresee)."""
    state = GateState(None, 2, rate_limits=[RateLimit(1, 10, unit="tokens")])
    a, b, c = Ticket(cost=10), Ticket(100, cost=10), Ticket(15, cost=4)
    for t in (a, b, c):
        state.arrive(t, 0)
    assert (b.status, c.status) == (Status.QUEUED, Status.QUEUED)
    assert state.advance(10) == [b]
    state.settle(b, 14, 10)
    assert state.next_wakeup() == 15
    return state, [a, b, c]


def test_GateState_arrival_expires_due_waiters_first_with_rate_limits_too() -> None:
    # d arrives at 15, when c's deadline is reached: c expires first.
    state, (_, _, c) = late_charge()
    d = Ticket(cost=2)  # its tokens come at 16
    assert state.arrive(d, 15) == [c]
    assert (c.status, d.status, state.waiting) == (Status.EXPIRED, Status.QUEUED, 1)


def test_GateState_arrival_past_its_deadline_is_refused_uncounted() -> None:
    state = GateState(1, 1)
    late = ticket(5)
    assert state.arrive(late, 5) == ()
    assert (late.status, late.ended, late.arrival) == (Status.EXPIRED, 5, 5)
    snap = state.snapshot("s")
    assert snap.arrived == snap.expired == 0


def test_GateState_arrive_without_waiting_rejects_instead_of_queueing() -> None:
    state = GateState(1, 5)
    state.arrive(ticket(), 0)
    t = ticket()
    state.arrive(t, 0, wait=False)
    assert t.status is Status.REJECTED
    assert state.waiting == 0


def test_GateState_outcomes_of_release() -> None:
    state = GateState(3, 0)
    ok, late, failed = ticket(10), ticket(10), ticket(10)
    for t in (ok, late, failed):
        state.arrive(t, 0)
    state.release(ok, 9.999)
    state.release(late, 10)
    state.release(failed, 11, Status.FAILED)
    assert (ok.status, late.status, failed.status) == (Status.COMPLETED, Status.LATE, Status.FAILED)
    snap = state.snapshot("s")
    assert (snap.completed, snap.late, snap.failed) == (1, 1, 1)
    assert snap.run_seconds_total == pytest.approx(30.999)
    assert snap.run_seconds_max == 11


def test_GateState_release_of_a_ticket_not_running_does_nothing() -> None:
    state = GateState(1, 1)
    t = ticket()
    assert state.release(t, 0) == ()
    state.arrive(t, 0)
    state.release(t, 1)
    assert state.release(t, 2) == ()
    assert (t.ended, state.snapshot("s").completed) == (1, 1)


def test_GateState_cancel_of_a_granted_ticket_uncounts_it_and_passes_the_slot_on() -> None:
    state = GateState(1, 2)
    holder, granted, next_in_line = ticket(), ticket(), ticket()
    for t in (holder, granted, next_in_line):
        state.arrive(t, 0)
    assert state.release(holder, 5) == [granted]
    assert state.cancel(granted, 5) == [next_in_line]
    assert granted.status is Status.CANCELLED
    assert (granted.started, granted.ended) == (None, 5)  # it never used the slot
    snap = state.snapshot("s")
    assert (snap.admitted, snap.cancelled, snap.running) == (2, 1, 1)
    # Its wait is counted once, when it was granted: mean wait over admitted + cancelled.
    assert snap.queue_seconds_total == 10


def test_GateState_cancel_of_a_queued_ticket_and_of_a_finished_one() -> None:
    state = GateState(1, 2)
    holder, queued = ticket(), ticket()
    state.arrive(holder, 0)
    state.arrive(queued, 1)
    assert state.cancel(queued, 3) == ()
    assert (queued.status, queued.ended, state.waiting) == (Status.CANCELLED, 3, 0)
    assert state.cancel(queued, 4) == ()
    later = ticket()
    state.arrive(later, 2)
    state.cancel(later, 3.5)
    state.release(holder, 5)
    assert state.cancel(holder, 6) == ()
    assert holder.status is Status.COMPLETED
    snap = state.snapshot("s")
    # Waits of those who left the queue count too: 2 and 1.5 seconds.
    assert (snap.cancelled, snap.queue_seconds_total, snap.queue_seconds_max) == (2, 3.5, 2)


def test_GateState_peaks_and_times() -> None:
    state = GateState(2, 3)
    tickets = [ticket() for _ in range(5)]
    for t in tickets:
        state.arrive(t, 0)
    assert (state.peak_running, state.peak_waiting) == (2, 3)
    state.release(tickets[0], 4)
    snap = state.snapshot("s")
    assert (snap.queue_seconds_max, snap.end_to_end_seconds_max, snap.run_seconds_max) == (4, 4, 4)


def test_GateState_recent_run_is_an_exponentially_weighted_mean() -> None:
    state = GateState(1, 0)
    assert state.recent_run_seconds is None
    for run in (10.0, 20.0):
        t = ticket()
        state.arrive(t, 0)
        state.release(t, run)
    assert state.recent_run_seconds == pytest.approx(10 + 0.2 * (20 - 10))


def test_GateState_dead_entries_are_compacted() -> None:
    # One slot held forever; waiters keep arriving and being cancelled or expiring: the queue and
    # the heap must not grow with the number of waiters ever seen.
    state = GateState(1, 4)
    state.arrive(ticket(), 0)
    for i in range(10_000):
        t = ticket(i + 1.5)
        state.arrive(t, i)
        if i % 2:
            state.cancel(t, i + 0.5)
        assert len(state._queue) <= 2 * state.waiting + _SLACK + 1
        assert len(state._deadlines) <= 2 * state.waiting + _SLACK + 1
        check_invariants(state)


def test_GateState_started_waiters_leave_stale_deadlines_that_get_compacted() -> None:
    state = GateState(1, None)
    holder = ticket()
    state.arrive(holder, 0)
    for i in range(5000):
        t = ticket(10**9)
        state.arrive(t, i)
        state.release(holder, i)
        holder = t
    assert len(state._deadlines) <= 2 * state.waiting + _SLACK + 1


@pytest.mark.parametrize(("running", "waiting"), [(1, 0), (3, None)])
def test_GateState_settings(running: int, waiting: int | None) -> None:
    state = GateState(running, waiting)
    assert (state.max_running, state.max_waiting) == (running, waiting)


class GateStateMachine(RuleBasedStateMachine):
    """Random arrivals, releases, expiries and cancellations, with time moving forward."""

    def __init__(self) -> None:
        super().__init__()
        self.state: GateState | None = None
        self.now = 0.0
        self.tickets: list[Ticket] = []

    @precondition(lambda self: self.state is None)
    @rule(
        running=st.integers(1, 4),
        waiting=st.none() | st.integers(0, 5),
        priorities=st.integers(1, 3),
        share=st.sampled_from([0, 0.2, 0.5]),
        by_deadline=st.booleans(),
        feasible=st.booleans(),
    )
    def create(
        self,
        running: int,
        waiting: int | None,
        priorities: int,
        share: float,
        by_deadline: bool,
        feasible: bool,
    ) -> None:
        self.state = GateState(running, waiting, priorities, share)
        self.state.by_deadline = by_deadline
        self.state.feasible = feasible

    @precondition(lambda self: self.state is not None)
    @rule(step=st.sampled_from([0, 0, 0.5, 1, 3]))
    def tick(self, step: float) -> None:
        self.now += step

    @precondition(lambda self: self.state is not None)
    @rule(budget=st.none() | st.sampled_from([0, 0.5, 1, 2, 5]), wait=st.booleans(), data=st.data())
    def arrive(self, budget: float | None, wait: bool, data: st.DataObject) -> None:
        priority = data.draw(st.integers(0, self.state.priorities - 1))  # type: ignore[union-attr]
        t = Ticket(math.inf if budget is None else self.now + budget, priority)
        waiting_before = [w for w in self.tickets if w.status is Status.QUEUED]
        woken = self.state.arrive(t, self.now, wait)  # type: ignore[union-attr]
        for w in woken:
            if w.status is Status.EVICTED:
                # only a less urgent waiter is evicted, the newest of the least urgent class
                assert t.status is Status.QUEUED
                assert w.priority > t.priority
                assert w.priority == max(x.priority for x in waiting_before if x.deadline > self.now)
        self._woken([w for w in woken if w.status is not Status.EVICTED])
        if budget == 0:
            assert t.status is Status.EXPIRED  # refused before it is counted: not tracked
        else:
            self.tickets.append(t)

    @precondition(lambda self: self.state is not None)
    @rule(data=st.data(), ending=st.sampled_from([None, Status.FAILED, Status.ABORTED, Status.LEAKED]))
    def release(self, data: st.DataObject, ending: Status | None) -> None:
        running = [t for t in self.tickets if t.status is Status.RUNNING]
        if running:
            t = data.draw(st.sampled_from(running))
            self._woken(self.state.release(t, self.now, ending))  # type: ignore[union-attr]
            assert t.status.is_final
            assert ending is None or t.status is ending

    @precondition(lambda self: self.state is not None)
    @rule()
    def expire(self) -> None:
        for t in self.state.advance(self.now):  # type: ignore[union-attr]
            assert t.status is Status.EXPIRED
            assert t.deadline <= self.now

    @precondition(lambda self: self.state is not None)
    @rule(data=st.data(), ending=st.sampled_from([Status.CANCELLED, Status.DISCONNECTED]))
    def cancel(self, data: st.DataObject, ending: Status) -> None:
        pending = [t for t in self.tickets if t.status in (Status.QUEUED, Status.RUNNING)]
        if pending:
            t = data.draw(st.sampled_from(pending))
            self._woken(self.state.cancel(t, self.now, ending))  # type: ignore[union-attr]
            assert t.status is ending

    def _woken(self, woken: object) -> None:
        for t in woken:  # type: ignore[attr-defined]
            assert t.status in (Status.RUNNING, Status.EXPIRED)
            assert t.status is not Status.RUNNING or t.started == self.now
            if t.status is Status.RUNNING:
                # Started from the queue: ahead of every waiter of its class left behind it, by
                # deadline or by arrival.
                behind = [w for w in self.tickets if w.status is Status.QUEUED and w.priority == t.priority]
                if self.state.by_deadline:  # type: ignore[union-attr]
                    assert all(w.deadline >= t.deadline for w in behind)
                else:
                    assert all(self.tickets.index(w) > self.tickets.index(t) for w in behind)

    @invariant()
    def invariants_hold(self) -> None:
        state = self.state
        if state is None:
            return
        check_invariants(state)
        queued = [t for t in self.tickets if t.status is Status.QUEUED]
        assert state.waiting == len(queued)
        assert state.running == sum(t.status is Status.RUNNING for t in self.tickets)
        finite = [t.deadline for t in queued if t.deadline != math.inf]
        assert state.next_wakeup() == min(finite, default=math.inf)
        snap = state.snapshot("m")
        assert snap.arrived == len(self.tickets)
        for outcome in ("rejected", "expired", "cancelled", "completed", "late", "failed", "evicted"):
            assert getattr(snap, outcome) == sum(t.status.value == outcome for t in self.tickets)
        assert snap.admitted == snap.finished + snap.running


TestGateStateMachine = GateStateMachine.TestCase


def test_Ticket_starts_new_with_no_times_and_no_cost() -> None:
    t = Ticket()
    assert (t.status, t.arrival, t.started, t.ended) == (Status.NEW, None, None, None)
    assert (t.deadline, t.priority, t.cost) == (math.inf, 0, 0)


def test_GateState_rebuilds_its_queue_and_heap_exactly_when_dead_entries_pass_the_slack() -> None:
    # Departures leave their entries behind (removing from the middle of a heap or a deque costs
    # O(n)); after a departure, entries beyond twice the live ones plus the slack are dropped all at
    # once, so each rebuild is paid for by as many departures as it drops.
    state = GateState(1, None)
    state.arrive(ticket(), 0)
    waiters = [ticket(10**9) for _ in range(3 * _SLACK)]
    for t in waiters:
        state.arrive(t, 0)
    entries = len(waiters)
    for t in waiters:
        state.cancel(t, 1)
        if entries > 2 * state.waiting + _SLACK:
            entries = state.waiting
        assert len(state._deadlines) == len(state._queue) == entries


@pytest.mark.parametrize("rated", [False, True], ids=["slots", "tokens"])
def test_GateState_entries_of_started_waiters_are_dropped_by_the_same_rule(rated: bool) -> None:
    # Waiters start one at a time: as slots free, or (rated) as a token comes each second, the
    # next in line then waiting for its own. Their deadline entries stay in the heap until it
    # holds more than twice the live ones plus the slack.
    state = GateState(None, None, rate_limits=[RateLimit(1, 1)]) if rated else GateState(1, None)
    holder = ticket()
    state.arrive(holder, 0)
    waiters = [ticket(10**9) for _ in range(3 * _SLACK)]
    for t in waiters:
        state.arrive(t, 0)
    entries = len(waiters)
    for now, t in enumerate(waiters, start=1):
        started = state.advance(now) if rated else state.release(holder, now)
        assert list(started) == [t]
        holder = t
        if entries > 2 * state.waiting + _SLACK:
            entries = state.waiting
        assert len(state._deadlines) == entries


def test_GateState_has_one_class_by_default_and_obeys_its_jump_share() -> None:
    assert GateState(1, 1).priorities == 1
    state = GateState(1, 2, priorities=2, jump_share=0)  # no jumping at all: FIFO across classes
    holder, calm, urgent = ticket(), ticket(), ticket()
    calm.priority, urgent.priority = 1, 0
    for t in (holder, calm, urgent):
        state.arrive(t, 0)
    assert state.release(holder, 1) == [calm]


def test_GateState_an_urgent_arrival_evicts_from_a_full_queue_of_two_classes() -> None:
    state = GateState(1, 1, priorities=2)
    holder, calm, urgent = ticket(), ticket(), ticket()
    calm.priority, urgent.priority = 1, 0
    for t in (holder, calm):
        state.arrive(t, 0)
    assert state.arrive(urgent, 1) == [calm]
    assert (calm.status, urgent.status, state.evicted) == (Status.EVICTED, Status.QUEUED, 1)


def test_GateState_an_evicting_arrival_that_can_pay_starts_at_once() -> None:
    state = GateState(None, 1, priorities=2, rate_limits=[RateLimit(1, 5, unit="tokens")])
    spender, calm, urgent = Ticket(cost=5), Ticket(priority=1, cost=5), Ticket(priority=0, cost=1)
    for t in (spender, calm):
        state.arrive(t, 0)
    assert calm.status is Status.QUEUED  # its 5 tokens come at 5
    assert state.arrive(urgent, 1) == [calm]  # one token is there: it takes the place and starts
    assert (calm.status, urgent.status, state.waiting) == (Status.EVICTED, Status.RUNNING, 0)


@pytest.mark.parametrize("wait", [True, False])
def test_GateState_a_refused_arrival_still_reports_the_waiters_it_expired(wait: bool) -> None:
    # c, waiting for tokens due at 18, is due to expire at 15, when d arrives and is refused (its
    # tokens cannot come before its deadline, or it may not wait): c's expiry must not be lost
    # with d's refusal.
    state, (_, _, c) = late_charge()
    d = Ticket(16, cost=4)
    assert list(state.arrive(d, 15, wait=wait)) == [c]
    assert (c.status, d.status) == (Status.EXPIRED, Status.RATE_LIMITED)


def test_GateState_a_fresh_state_has_counted_nothing() -> None:
    snap = GateState(2, 3).snapshot("s")
    assert (snap.running, snap.waiting, snap.peak_running, snap.peak_waiting) == (0, 0, 0, 0)
    assert (snap.admitted, snap.rejected, snap.expired, snap.cancelled) == (0, 0, 0, 0)
    assert (snap.completed, snap.late, snap.failed, snap.evicted, snap.rate_limited) == (0, 0, 0, 0, 0)
    assert (snap.queue_seconds_total, snap.queue_seconds_max) == (0, 0)
    assert (snap.run_seconds_total, snap.run_seconds_max) == (0, 0)
    assert (snap.end_to_end_seconds_total, snap.end_to_end_seconds_max) == (0, 0)
