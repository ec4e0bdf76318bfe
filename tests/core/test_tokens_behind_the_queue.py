"""Tokens behind the queue: an arrival's tokens come after those the tickets queued ahead of it take
first, and what cannot come before its queue deadline is refused at arrival (RATE_LIMITED), with the
moment it could have had them; the sums behind that prediction; and two properties: the prediction
never refuses a request that could have started in time, and with one class and one bucket it is
exact (no queued request expires, each starts when predicted, a retry then is admitted at once)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundedgate._core import GateState, RateLimit, RequestRecord, Status, Ticket
from tests.core.invariants import check_invariants


def test_the_issue_in_the_core_refuses_at_arrival_what_the_queue_ahead_leaves_no_time_for() -> None:
    # Issue 26, item 7: 10 tokens a second (burst 5), 20 requests of 5 tokens, max_wait=2. The
    # k-th has its tokens once the bucket has supplied 5k: at (5k - 5) / 10 s. The 5th's come at
    # 2.0, its queue deadline: refused, as are all after it, each at 2.0 behind the same queue.
    state = GateState(None, None, rate_limits=[RateLimit(10, 5, unit="tokens", name="tpm")])
    tickets = [Ticket(cost=5, max_wait=2) for _ in range(20)]
    for t in tickets:
        due = state.tokens_ready_at(t, 0)
        state.arrive(t, 0)
        check_invariants(state, 0)
        if t.status is Status.RATE_LIMITED:
            assert due == 2.0
            assert (t._notes["ready_at"], t._notes["limited_by"]) == (2.0, "tpm")
    assert [t.status for t in tickets] == [Status.RUNNING] + [Status.QUEUED] * 3 + [Status.RATE_LIMITED] * 16
    assert state.snapshot("s").rate_limited == 16
    for now, t in zip((0.5, 1.0, 1.5), tickets[1:4], strict=True):
        assert state.next_wakeup() == now
        assert state.advance(now) == [t]
        check_invariants(state, now)
    assert state.next_wakeup() == math.inf
    assert state.snapshot("s").expired == 0


def test_a_limit_counted_in_requests_counts_the_requests_ahead() -> None:
    # One a second, burst 2: two start, then each queued request takes the next token, whatever
    # its cost. A newcomer with 3 s to wait behind two queued ones gets the token at 3: refused.
    state = GateState(None, None, rate_limits=[RateLimit(1, 2)])
    for _ in range(4):
        state.arrive(Ticket(cost=99), 0)
    assert (state.running, state.waiting) == (2, 2)
    newcomer, patient = Ticket(3, cost=99), Ticket(3.5)
    assert state.tokens_ready_at(newcomer, 0) == 3
    state.arrive(newcomer, 0)
    state.arrive(patient, 0)
    assert (newcomer.status, patient.status) == (Status.RATE_LIMITED, Status.QUEUED)
    check_invariants(state, 0)


def test_two_buckets_each_supply_the_queue_ahead_and_the_latest_decides() -> None:
    rpm, tpm = RateLimit(1, 2, name="rpm"), RateLimit(10, 20, unit="tokens", name="tpm")
    state = GateState(None, None, rate_limits=[rpm, tpm])
    state.arrive(Ticket(cost=20), 0)  # 1 request and every token: both buckets below their burst
    queued = Ticket(cost=5)
    state.arrive(queued, 0)  # its request token is there, its tokens come at 0.5
    assert queued.status is Status.QUEUED
    small, large = Ticket(cost=1), Ticket(cost=30 - 5)
    # small: the requests bucket supplies the one ahead and its own at 1.0, tokens at 0.6
    assert state.tokens_ready_at(small, 0) == 1.0
    assert state.limiting(small, 0) is rpm
    # large: 5 + 25 tokens from an empty bucket at 10 a second, 3.0
    assert state.tokens_ready_at(large, 0) == 3.0
    assert state.limiting(large, 0) is tpm


def test_a_full_bucket_supplies_no_more_than_its_burst() -> None:
    # A queue waiting for slots, with a full bucket: it holds 10 tokens, then gains one a second.
    # The ticket queued ahead takes all 10, so a newcomer's 5 come 5 s from now (not at once, as
    # a bucket counting what accrued while it was full would say); with 4 s to wait it is refused.
    state = GateState(2, None, rate_limits=[RateLimit(1, 10, unit="tokens")])
    holders = [Ticket(cost=0), Ticket(cost=0)]
    for t in holders:
        state.arrive(t, 0)
    ahead = Ticket(cost=10)
    state.arrive(ahead, 0)  # waits for a slot
    assert state.tokens(100) == (10,)  # full since 0
    hurried, patient = Ticket(104, cost=5), Ticket(106, cost=5)
    assert state.tokens_ready_at(hurried, 100) == 105
    state.arrive(hurried, 100)
    state.arrive(patient, 100)
    assert (hurried.status, patient.status) == (Status.RATE_LIMITED, Status.QUEUED)
    assert hurried._notes["ready_at"] == 105
    assert state.release(holders[0], 100) == [ahead]
    assert state.release(holders[1], 100) == []  # a slot for the patient one, and its tokens at 105
    assert state.advance(105) == [patient]


@pytest.mark.parametrize("feasible", [False, True])
def test_a_wait_for_a_slot_is_not_a_shortfall_of_tokens(feasible: bool) -> None:
    # C = 1, busy, runs of 10 s by the recent pace. A request with 5 s to go whose token comes in
    # 1 s cannot start in time for want of a slot, which is not RATE_LIMITED: it queues, or with
    # feasible admission it is INFEASIBLE (the pace's guess). One whose tokens could not come in
    # time either is RATE_LIMITED, behind the first if it queued: that much is known.
    state = GateState(1, None, rate_limits=[RateLimit(1, 10, unit="tokens")])
    state.feasible = feasible
    first = Ticket(cost=0)
    state.arrive(first, 0)
    state.release(first, 10)
    state.arrive(Ticket(cost=10), 10)  # holds the slot, and the bucket is empty
    slotless, tokenless = Ticket(15, cost=1), Ticket(15, cost=5)
    state.arrive(slotless, 10)
    assert slotless.status is (Status.INFEASIBLE if feasible else Status.QUEUED)
    state.arrive(tokenless, 10)
    assert tokenless.status is Status.RATE_LIMITED
    assert tokenless._notes["ready_at"] == (15 if feasible else 16)
    check_invariants(state, 10)


def test_several_classes_count_their_own_class_and_the_more_urgent_ones() -> None:
    # A newcomer starts after every queued ticket of its class and of the more urgent ones; an older
    # one of a less urgent class may go after it (it can jump), so it is not counted.
    state = GateState(None, None, priorities=3, rate_limits=[RateLimit(1, 10, unit="tokens")])
    state.arrive(Ticket(cost=10), 0)  # empties the bucket
    for priority, cost in ((2, 4), (0, 2), (1, 3)):
        state.arrive(Ticket(priority=priority, cost=cost), 0)
    check_invariants(state, 0)
    assert state._class_queued == {0: [1.0, 2.0], 1: [1.0, 3.0], 2: [1.0, 4.0]}
    assert [state.tokens_ready_at(Ticket(priority=p, cost=1), 0) for p in range(3)] == [3, 6, 10]


def test_every_way_out_of_the_queue_pays_back_what_it_owed() -> None:
    # Started, expired, cancelled, disconnected, evicted by an arrival or by set_limits: each leaves
    # the sums as the live queue's (checked after every step), and an emptied queue owes nothing.
    state = GateState(1, 6, priorities=2, rate_limits=[RateLimit(1, 10, unit="tokens")])
    holder = Ticket(cost=10)
    state.arrive(holder, 0)
    starts, expires = Ticket(cost=1), Ticket(2, cost=0.1)
    cancelled, gone = Ticket(priority=1, cost=0.2), Ticket(priority=1, cost=0.3)
    squeezed, dropped = Ticket(priority=1, cost=0.7), Ticket(priority=1, cost=0.4)
    for t in (starts, expires, cancelled, gone, squeezed, dropped):
        state.arrive(t, 0)
        check_invariants(state, 0)
    assert state.advance(2) == [expires]  # its tokens were there, but no slot
    check_invariants(state, 2)
    assert state.release(holder, 2) == [starts]
    check_invariants(state, 2)
    state.cancel(cancelled, 2)
    state.cancel(gone, 2, Status.DISCONNECTED)
    check_invariants(state, 2)
    state.set_limits(2, max_waiting=1, evict=True)
    assert (dropped.status, squeezed.status) == (Status.EVICTED, Status.QUEUED)
    check_invariants(state, 2)
    urgent = Ticket(priority=0, cost=5)
    assert state.arrive(urgent, 2) == [squeezed]  # a full queue: it takes the less urgent one's place
    assert squeezed.status is Status.EVICTED
    check_invariants(state, 2)
    assert state.release(starts, 3) == []
    assert state.advance(8) == [urgent]
    check_invariants(state, 8)
    assert state._class_queued == {}

    one = GateState(None, None, rate_limits=[RateLimit(1, 10, unit="tokens")])
    one.arrive(Ticket(cost=10), 0)
    costs = (0.1, 0.2, 0.7, 0.3)  # sums that do not round back to 0
    waiters = [Ticket(cost=c) for c in costs]
    for t in waiters:
        one.arrive(t, 0)
    for t in waiters:
        one.cancel(t, 0)
        check_invariants(one, 0)
    assert one._queued_cost == 0.0  # exactly: nothing left of the rounding


def test_a_refusal_s_record_carries_the_wait_behind_the_queue() -> None:
    state = GateState(None, None, rate_limits=[RateLimit(10, 5, unit="tokens", name="tpm")])
    records: list[RequestRecord] = []
    state.observer = lambda t: records.append(RequestRecord.of(t, state, "g"))
    for _ in range(3):
        state.arrive(Ticket(cost=5, max_wait=1), 0)
    (refused,) = records
    assert (refused.outcome.name, refused.retry_after, refused.limited_by) == ("rate_limited", 1.0, "tpm")
    assert refused.queue_depth == 1


# -- properties ------------------------------------------------------------------------------

# Rates, costs and times whose token times are exact in binary, so that the prediction (a sum)
# and the bucket (a step per start) agree to the last bit.
RATES = (0.5, 1, 2, 4)
UNITS: tuple[Literal["requests", "tokens"], ...] = ("requests", "tokens")


@dataclass(frozen=True)
class Call:
    """One scripted request: arrival, cost, run time, deadline budget, queue budget, class."""

    arrival: int
    cost: int
    run: int
    budget: int | None
    max_wait: int | None
    priority: int


@st.composite
def scripts(draw: st.DrawFn, max_cost: int, priorities: int) -> list[Call]:
    calls = draw(
        st.lists(
            st.builds(
                Call,
                st.integers(0, 16),
                st.integers(0, max_cost),
                st.integers(1, 6),
                st.none() | st.integers(1, 12),
                st.none() | st.integers(1, 8),
                st.integers(0, priorities - 1),
            ),
            max_size=24,
        )
    )
    return sorted(calls, key=lambda c: c.arrival)


class Forcing(GateState):
    """A state that lets one ticket past the refusal for tokens: it queues as if predicted in time."""

    __slots__ = ("forced",)

    def tokens_ready_at(self, ticket: Ticket, now: float) -> float:
        if ticket is getattr(self, "forced", None):
            return -math.inf
        return super().tokens_ready_at(ticket, now)


@dataclass
class Run:
    """A replay: the tickets in script order, what each met queued ahead, what each was predicted."""

    tickets: list[Ticket]
    ahead: list[list[Ticket]]
    predicted: list[float]


def replay(state: GateState, script: list[Call], forced: int | None = None, upto: int | None = None) -> Run:
    """Drive ``state`` through ``script`` (``upto``: only its first calls), checking its invariants.

    At each instant: the core's due events, the bodies that end, then the arrivals in script order.
    """
    calls = script if upto is None else script[:upto]
    tickets = [
        Ticket(
            math.inf if c.budget is None else c.arrival + c.budget,
            c.priority,
            c.cost,
            math.inf if c.max_wait is None else c.max_wait,
        )
        for c in calls
    ]
    if forced is not None:
        state.forced = tickets[forced]  # type: ignore[attr-defined]
    run = Run(tickets, [[] for _ in calls], [math.nan] * len(calls))
    ends: dict[int, float] = {}  # ticket index -> when its body ends
    index = {id(t): i for i, t in enumerate(tickets)}
    arrivals = list(range(len(calls)))
    now = 0.0

    def started(woken: Iterable[Ticket]) -> None:
        for t in woken:
            if t.status is Status.RUNNING:
                i = index[id(t)]
                ends[i] = now + calls[i].run

    while arrivals or ends or state.waiting:
        now = min(
            state.next_wakeup(),
            calls[arrivals[0]].arrival if arrivals else math.inf,
            min(ends.values(), default=math.inf),
        )
        assert now < math.inf
        started(state.advance(now))
        for i in sorted(i for i, end in ends.items() if end <= now):
            del ends[i]
            started(state.release(tickets[i], now))
        while arrivals and calls[arrivals[0]].arrival <= now:
            i = arrivals.pop(0)
            t = tickets[i]
            run.ahead[i] = [w for w in state._queue if w.priority <= t.priority or state.priorities == 1]
            run.predicted[i] = state.tokens_ready_at(t, now)
            started(state.arrive(t, now))
            started([t])
        check_invariants(state, now)
    return run


@st.composite
def buckets(draw: st.DrawFn, count: int) -> tuple[list[RateLimit], int]:
    """``count`` rate limits, and the largest cost they all serve."""
    limits = [
        RateLimit(
            draw(st.sampled_from(RATES)), draw(st.integers(1, 8)), draw(st.sampled_from(UNITS)), name=f"L{i}"
        )
        for i in range(count)
    ]
    return limits, int(min((b.burst for b in limits if not b.per_request), default=8))


@given(data=st.data())
def test_a_request_refused_for_tokens_could_not_have_started_in_time(data: st.DataObject) -> None:
    # Replay a script; for each request refused as RATE_LIMITED, replay it again with that one let
    # past the refusal. If none of the tickets queued ahead of it (its class and the more urgent
    # ones) left the queue unstarted before it could start, and nothing settles (no refund), it did
    # not start: every bucket had to supply their costs and its own first, and could not in time.
    # Any C and Q, one to three classes, jumps or not, one or two buckets.
    limits, max_cost = data.draw(buckets(data.draw(st.integers(1, 2))))
    priorities = data.draw(st.integers(1, 3))
    script = data.draw(scripts(max_cost, priorities))
    settings = (
        data.draw(st.none() | st.integers(1, 3)),
        data.draw(st.none() | st.integers(0, 5)),
        priorities,
        data.draw(st.sampled_from([0, 0.5])),
        limits,
    )
    first = replay(GateState(*settings), script)
    for i, t in enumerate(first.tickets):
        if t.status is not Status.RATE_LIMITED:
            continue
        assert first.predicted[i] >= min(t.deadline, t.arrival + t.max_wait)  # type: ignore[operator]
        again = replay(Forcing(*settings), script, forced=i)
        forced = again.tickets[i]
        ahead = [again.tickets[first.tickets.index(w)] for w in first.ahead[i]]
        begun = forced.started if forced.started is not None else forced.ended
        left = [w for w in ahead if w.started is None and w.ended <= begun]  # type: ignore[operator]
        if not left:
            assert forced.started is None, (i, forced.status, forced.started)


@given(data=st.data())
def test_with_one_class_and_one_bucket_the_prediction_is_exact(data: st.DataObject) -> None:
    # No limit on running, nothing settled or cancelled: no queued request expires, each queued one
    # starts exactly when predicted at its arrival, and each refused one, had it come back
    # retry_after later (behind the same earlier requests), would have started at once then, and
    # not a moment sooner.
    (limit,), max_cost = data.draw(buckets(1))
    script = data.draw(scripts(max_cost, 1))
    waiting = data.draw(st.none() | st.integers(0, 5))
    first = replay(GateState(None, waiting, rate_limits=[limit]), script)
    assert not any(t.status is Status.EXPIRED for t in first.tickets)
    for i, t in enumerate(first.tickets):
        if t.status is Status.REJECTED:
            continue
        if t.started == t.arrival:
            assert first.predicted[i] <= t.arrival  # type: ignore[operator]
        elif t.status is not Status.RATE_LIMITED:
            assert t.started == first.predicted[i]
        else:
            due = t._notes["ready_at"]
            assert due == first.predicted[i] > t.arrival  # type: ignore[operator]
            for at, admitted in ((due, True), (due - 1 / 64, False)):
                if at < t.arrival:
                    continue
                state = GateState(None, waiting, rate_limits=[limit])
                earlier = replay_until(state, script, i, at)
                retry = Ticket(cost=t.cost)
                state.arrive(retry, at, wait=False)
                assert (retry.status is Status.RUNNING) is admitted, (i, at, retry.status, earlier)
                if retry.status is Status.RATE_LIMITED:  # (else a free request is still queued)
                    assert retry._notes["ready_at"] == due


def replay_until(state: GateState, script: list[Call], upto: int, at: float) -> list[Status]:
    """The requests of ``script`` before the ``upto``-th, through ``state`` with the clock brought
    to ``at`` (nothing after them arrives); returns their statuses then."""
    prefix = script[:upto]
    tickets = [
        Ticket(
            math.inf if c.budget is None else c.arrival + c.budget,
            c.priority,
            c.cost,
            math.inf if c.max_wait is None else c.max_wait,
        )
        for c in prefix
    ]
    # The bodies never release here: with no limit on running, releases change nothing else.
    pending = list(zip(prefix, tickets, strict=True))
    now = 0.0
    while True:
        now = min(state.next_wakeup(), pending[0][0].arrival if pending else math.inf)
        if now > at:
            break
        state.advance(now)
        while pending and pending[0][0].arrival <= now:
            state.arrive(pending.pop(0)[1], now)
        check_invariants(state, now)
    state.advance(at)
    return [t.status for t in tickets]
