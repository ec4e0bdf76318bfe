"""Limits that move, in the pure core: set_limits, pause, and deadline-feasible admission."""

from __future__ import annotations

import math

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from boundedgate._core import GateState, Status, Ticket

from .invariants import check_invariants
from .test_state import GateStateMachine


def ticket(deadline: float = math.inf) -> Ticket:
    return Ticket(deadline)


def test_raising_C_starts_the_oldest_waiters_at_once_in_order() -> None:
    state = GateState(1, 10)
    first = ticket()
    state.arrive(first, 0)
    queued = [ticket() for _ in range(4)]
    for t in queued:
        state.arrive(t, 1)
    woken = state.set_limits(2, max_running=3)
    assert list(woken) == queued[:2]
    assert all(t.status is Status.RUNNING and t.started == 2 for t in queued[:2])
    assert (state.running, state.waiting, state.limit_changes) == (3, 2, 1)
    assert state.snapshot("g").max_running == 3
    check_invariants(state, 2)


def test_lowering_C_interrupts_nobody_and_the_excess_drains() -> None:
    state = GateState(3, 10)
    running = [ticket() for _ in range(3)]
    for t in running:
        state.arrive(t, 0)
    waiter = ticket()
    state.arrive(waiter, 0)
    assert not state.set_limits(1, max_running=1)
    assert all(t.status is Status.RUNNING for t in running)
    check_invariants(state, 1)  # running 3 > C 1 while it drains
    late = ticket()
    state.arrive(late, 1)
    assert late.status is Status.QUEUED  # no slot while the excess drains
    assert not state.release(running[0], 2)
    assert not state.release(running[1], 3)  # running 1 == C: still nobody starts
    assert state.release(running[2], 4) == [waiter]  # the oldest, once running < C
    assert (state.running, state.waiting) == (1, 1)
    check_invariants(state, 4)


def test_lowering_Q_evicts_nobody_unless_asked() -> None:
    state = GateState(1, 5)
    state.arrive(ticket(), 0)
    queued = [ticket() for _ in range(5)]
    for t in queued:
        state.arrive(t, 0)
    assert not state.set_limits(1, max_waiting=2)
    assert state.waiting == 5
    assert all(t.status is Status.QUEUED for t in queued)
    newcomer = ticket()
    state.arrive(newcomer, 1)
    assert newcomer.status is Status.REJECTED  # no arrival joins the excess
    check_invariants(state, 1)
    woken = state.set_limits(2, max_waiting=1, evict=True)
    assert list(woken) == [queued[4], queued[3], queued[2], queued[1]]  # the newest leave
    assert all(t.status is Status.EVICTED for t in woken)
    assert queued[0].status is Status.QUEUED
    assert (state.waiting, state.evicted, state.limit_changes) == (1, 4, 2)
    check_invariants(state, 2)


def test_set_limits_without_a_change_counts_nothing_and_bad_limits_change_nothing() -> None:
    state = GateState(2, 3)
    assert not state.set_limits(0, max_running=2, max_waiting=3)
    assert state.limit_changes == 0
    with pytest.raises(ValueError, match="max_running"):
        state.set_limits(0, max_running=0)
    with pytest.raises(TypeError):
        state.set_limits(0, max_waiting=True)
    assert (state.limit, state.max_waiting, state.limit_changes) == (2, 3, 0)
    state.set_limits(0, max_running=None, max_waiting=None)
    assert state.snapshot("g").max_running is None
    assert state.max_waiting is None


def test_a_pause_queues_arrivals_expires_waiters_and_starts_the_oldest_at_its_end() -> None:
    state = GateState(2, 3)
    busy = ticket()
    state.arrive(busy, 0)
    assert not state.pause(10, 0)
    assert (state.limit, state.max_running, state.pauses) == (2, 0, 1)
    a, b, c, d = ticket(), ticket(5), ticket(), ticket()
    for t in (a, b, c, d):
        state.arrive(t, 1)
    assert [t.status for t in (a, b, c, d)] == [Status.QUEUED] * 3 + [Status.REJECTED]  # Q holds
    assert not state.release(busy, 2)  # a freed slot starts nobody during the pause
    assert state.next_wakeup() == 5
    assert state.advance(5) == [b]  # queued ones still expire
    assert state.next_wakeup() == 10
    assert not state.pause(8, 6)
    assert state.paused_until == 10
    check_invariants(state, 6)
    assert state.advance(10) == [a, c]  # the oldest start at the reset, C unchanged
    assert (state.running, state.max_running, state.paused_until) == (2, 2, math.inf)
    assert state.snapshot("g").paused_until is None


def test_C_changed_during_a_pause_takes_effect_at_its_end() -> None:
    state = GateState(1, 5)
    state.pause(3, 0)
    waiters = [ticket() for _ in range(3)]
    for t in waiters:
        state.arrive(t, 0)
    assert not state.set_limits(1, max_running=3)
    assert state.max_running == 0
    assert state.snapshot("g").max_running == 3
    assert state.advance(3) == waiters


def feasible_state(running: int, waiting: int | None) -> GateState:
    state = GateState(running, waiting)
    state.feasible = True
    return state


def test_feasible_admission_refuses_what_cannot_start_before_its_deadline() -> None:
    state = feasible_state(2, None)
    first = [ticket() for _ in range(2)]
    for t in first:
        state.arrive(t, 0)
    state.release(first[0], 1)  # the recent pace: runs of 1 s
    state.arrive(ticket(), 1)  # fills the slot again
    # Two running, none queued: a newcomer needs 1 completion at 2 slots: start at 1 + 0.5.
    assert state.predicted_start(1) == 1.5
    hopeless = ticket(1.5)
    state.arrive(hopeless, 1)
    assert hopeless.status is Status.INFEASIBLE
    assert state.infeasible == 1
    assert state.waiting == 0
    assert state.snapshot("g").infeasible == 1
    unfinished = ticket(2.4)  # it could start at 1.5, but a recent run ends at 2.5
    state.arrive(unfinished, 1)
    assert unfinished.status is Status.INFEASIBLE
    short = ticket(3.4)  # a recent run would end at 2.5, but a long one (two runs) at 3.5
    state.arrive(short, 1)
    assert short.status is Status.INFEASIBLE
    assert state.infeasible == 3
    hopeful = ticket(3.6)
    state.arrive(hopeful, 1)
    assert hopeful.status is Status.QUEUED
    assert state.predicted_start(1) == 2.0  # one more ahead now
    check_invariants(state, 1)


def busy_at_a_pace_of_one_second(by_deadline: bool) -> tuple[GateState, Ticket]:
    """A feasible gate of one slot whose recent runs took 1 s, its slot taken at 1 s: and the holder."""
    state = feasible_state(1, None)
    state.by_deadline = by_deadline
    first = ticket()
    state.arrive(first, 0)
    state.release(first, 1)
    holder = ticket()
    state.arrive(holder, 1)
    return state, holder


@pytest.mark.parametrize("by_deadline", [False, True])
def test_feasible_admission_in_deadline_order_counts_only_the_waiters_due_sooner(by_deadline: bool) -> None:
    state, holder = busy_at_a_pace_of_one_second(by_deadline)
    patient = [ticket(100) for _ in range(5)]
    for t in patient:
        state.arrive(t, 1)
    # In arrival order the five queued are ahead of a newcomer; in deadline order only those due
    # no later than it.
    assert state.predicted_start(1, 100) == 7.0
    assert state.predicted_start(1, 10) == (2.0 if by_deadline else 7.0)
    urgent = ticket(4.5)  # it starts at 2 and a long run ends at 4, if nobody is ahead of it
    state.arrive(urgent, 1)
    assert urgent.status is (Status.QUEUED if by_deadline else Status.INFEASIBLE)
    assert state.predicted_start(1, 4.5) == (3.0 if by_deadline else 7.0)
    started = state.release(holder, 2)
    assert started == [urgent if by_deadline else patient[0]]
    check_invariants(state, 2)


@pytest.mark.parametrize(("due", "kept"), [(4.8, False), (5.5, True)])
def test_in_deadline_order_an_arrival_keeps_the_waiters_room_for_a_long_run(due: float, kept: bool) -> None:
    state, holder = busy_at_a_pace_of_one_second(by_deadline=True)
    waiter = ticket(due)  # it starts by 2, and a long run (2 s) ends at 4: it fits
    state.arrive(waiter, 1)
    assert waiter.status is Status.QUEUED
    # Due sooner, the newcomer would start at 2 and fit (4 < 4.5); the waiter would then start at
    # 3 and its long run end at 5: past 4.8, which it was admitted to meet, and not past 5.5.
    newcomer = ticket(4.5)
    state.arrive(newcomer, 1)
    assert newcomer.status is (Status.QUEUED if kept else Status.INFEASIBLE)
    started = state.release(holder, 2)
    assert started == [newcomer if kept else waiter]
    check_invariants(state, 2)


def test_feasible_admission_counts_a_pause_and_the_queue_budget() -> None:
    state = feasible_state(1, 10)
    t = ticket()
    state.arrive(t, 0)
    state.release(t, 1)  # runs of 1 s
    state.pause(20, 1)
    budgeted = Ticket(math.inf)
    budgeted.max_wait = 5
    state.arrive(budgeted, 1)
    assert budgeted.status is Status.INFEASIBLE  # the pause alone outlasts its queue budget
    patient = ticket()
    state.arrive(patient, 1)
    assert patient.status is Status.QUEUED


@pytest.mark.parametrize("ending", [Status.FAILED, Status.ABORTED, Status.LEAKED])
def test_feasible_admission_keeps_the_pace_of_runs_that_ended_normally(ending: Status) -> None:
    # A provider failing fast (529s in 50 ms) must not make the pace look fast: only completed
    # and late runs count, so what cannot start in time is still refused after the failures.
    state = feasible_state(1, None)
    t = ticket()
    state.arrive(t, 0)
    state.release(t, 2)  # the recent pace: runs of 2 s
    now = 2.0
    for _ in range(10):
        failing = ticket()
        state.arrive(failing, now)
        now += 0.05
        state.release(failing, now, ending)
    state.arrive(ticket(), now)  # busy: a newcomer needs one 2 s run to end first
    hopeless = ticket(now + 1.5)
    state.arrive(hopeless, now)
    assert hopeless.status is Status.INFEASIBLE
    assert state.predicted_start(now) == now + 2
    assert state.recent_run_seconds == 2
    check_invariants(state, now)


def test_the_pace_averages_over_rounds_of_C_runs_so_one_long_run_barely_moves_it() -> None:
    # At C = 20 a mean over the last five runs is a quarter of one round of the slots: one 3 s run
    # among 0.3 s ones would move a queue of 100's predicted start by 1.35 s. Weighted 0.2 / C,
    # the mean spans about five rounds of C runs (five mean run times at full load) whatever C.
    state = feasible_state(20, None)
    now = 0.0
    for seconds in [0.3] * 200 + [3.0]:
        t = ticket()
        state.arrive(t, now)
        now += seconds
        state.release(t, now)
    assert state.recent_run_seconds == pytest.approx(0.3 + 0.2 / 20 * 2.7)
    state.set_limits(now, max_running=1)  # C = 1: the newest run weighs 0.2 again
    t = ticket()
    state.arrive(t, now)
    state.release(t, now + 1.3)
    assert state.recent_run_seconds == pytest.approx(0.327 + 0.2 * (1.3 - 0.327))


def test_without_feasible_the_semantics_are_today_s() -> None:
    state = GateState(1, None)
    t = ticket()
    state.arrive(t, 0)
    state.release(t, 10)
    state.arrive(ticket(), 10)
    doomed = ticket(10.5)
    state.arrive(doomed, 10)
    assert doomed.status is Status.QUEUED  # queued to expire, as before
    assert state.advance(10.5) == [doomed]
    assert doomed.status.value == "expired"  # (mypy narrowed `status` to QUEUED above)


class LimitsMachine(GateStateMachine):
    """The core's random walk, with limits that move and pauses, and starts that stay FIFO."""

    @precondition(lambda self: self.state is not None)
    @rule(
        running=st.sampled_from([..., 1, 2, 3, 5]),
        waiting=st.sampled_from([..., None, 0, 1, 3]),
        evict=st.booleans(),
    )
    def set_limits(self, running: int, waiting: int | None, evict: bool) -> None:
        state = self.state
        assert state is not None
        queued = list(state._queue)
        woken = state.set_limits(self.now, running, waiting, evict)
        evicted = [t for t in woken if t.status is Status.EVICTED]
        assert all(t.status in (Status.RUNNING, Status.EXPIRED, Status.EVICTED) for t in woken)
        if not evict:
            assert not evicted
        if state.priorities == 1:
            started = [t for t in woken if t.status is Status.RUNNING]
            assert started == [t for t in queued if t.status is Status.RUNNING]  # the oldest, FIFO
        assert not [t for t in woken if t.status is Status.RUNNING] or state.running <= state.max_running

    @precondition(lambda self: self.state is not None)
    @rule(seconds=st.sampled_from([0.5, 1, 4]))
    def pause(self, seconds: float) -> None:
        state = self.state
        assert state is not None
        self._woken(state.pause(self.now + seconds, self.now))
        assert state.max_running == 0 or state.paused_until == math.inf

    @precondition(lambda self: self.state is not None)
    @rule()
    def expire(self) -> None:
        # The clock may also end a pause: then the oldest start.
        self._woken(self.state.advance(self.now))  # type: ignore[union-attr]

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
        assert state.next_wakeup() == min([*finite, state.paused_until])
        snap = state.snapshot("m")
        assert snap.arrived == len(self.tickets)
        assert snap.admitted == snap.finished + snap.running


TestLimitsMachine = LimitsMachine.TestCase
