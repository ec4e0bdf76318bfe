"""The waiting room: lanes per class (FIFO or by deadline), the jump credit and its bound, eviction,
compaction."""

from __future__ import annotations

import math
import tracemalloc
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundedgate._core import Status, Ticket
from boundedgate._core._queue import WaitQueue
from boundedgate._core._settings import check_jump_share


def queued(priority: int = 0, deadline: float = math.inf) -> Ticket:
    t = Ticket(deadline, priority=priority)
    t.status = Status.QUEUED
    return t


def take(q: WaitQueue) -> Ticket:
    t = q.take()
    t.status = Status.RUNNING
    return t


def test_WaitQueue_one_class_is_plain_fifo() -> None:
    q = WaitQueue()
    tickets = [queued() for _ in range(5)]
    for t in tickets:
        q.push(t)
    tickets[1].status = Status.CANCELLED
    assert q.peek() is tickets[0]
    assert [take(q) for _ in range(4)] == [tickets[0], tickets[2], tickets[3], tickets[4]]


def test_WaitQueue_peek_skips_tickets_that_left_in_one_class_and_in_several() -> None:
    for classes in (1, 2):
        q = WaitQueue(classes)
        gone, first, second = queued(), queued(), queued()
        for t in (gone, first, second):
            q.push(t)
        gone.status = Status.EXPIRED
        assert q.peek() is first
        first.status = Status.CANCELLED
        assert q.peek() is second
        assert take(q) is second


def test_WaitQueue_the_most_urgent_head_goes_first_when_it_is_also_the_oldest() -> None:
    q = WaitQueue(3)
    urgent, calm = queued(0), queued(2)
    q.push(urgent)
    q.push(calm)
    assert [take(q), take(q)] == [urgent, calm]


def test_WaitQueue_an_urgent_arrival_jumps_once_then_pays_for_the_next_jump() -> None:
    # jump_share 1/4: one jump banked, then one jump per four starts from the queue.
    q = WaitQueue(2, jump_share=0.25)
    background = [queued(1) for _ in range(10)]
    for t in background:
        q.push(t)
    urgent = [queued(0) for _ in range(3)]
    for t in urgent:
        q.push(t)
    order = [take(q) for _ in range(13)]
    assert order[0] is urgent[0]  # the banked jump
    assert order[1:4] == background[:3]  # credit refills at 1/4 per start
    assert order[4] is urgent[1]
    assert order[5:8] == background[3:6]
    assert order[8] is urgent[2]
    assert order[9:] == background[6:]


def test_WaitQueue_taking_the_oldest_waiter_spends_no_jump() -> None:
    q = WaitQueue(2, jump_share=0.5)  # one jump banked, and no more than that
    oldest = queued(0)
    q.push(oldest)
    assert take(q) is oldest  # urgent, but also the oldest: not a jump
    calm, urgent = queued(1), queued(0)
    q.push(calm)
    q.push(urgent)
    assert take(q) is urgent  # the banked jump is still there
    assert take(q) is calm


def test_WaitQueue_zero_jump_share_is_fifo_across_classes() -> None:
    q = WaitQueue(2, jump_share=0)
    calm, urgent = queued(1), queued(0)
    q.push(calm)
    q.push(urgent)
    assert [take(q), take(q)] == [calm, urgent]


@given(
    share=st.sampled_from([Fraction(0), Fraction(1, 5), Fraction(1, 3), Fraction(1, 2), Fraction(9, 10)]),
    script=st.lists(st.tuples(st.booleans(), st.integers(0, 3)), min_size=1, max_size=200),
)
def test_WaitQueue_jumps_are_bounded_and_every_other_start_is_the_oldest(
    share: Fraction, script: list[tuple[bool, int]]
) -> None:
    """Over any window of n starts at most share*n + 1 overtake an older waiter."""
    q = WaitQueue(4, jump_share=share)  # type: ignore[arg-type]  # a Fraction: exact, and WaitQueue takes one
    live: list[Ticket] = []  # in arrival order
    jumps: list[bool] = []
    for is_take, priority in script:
        if is_take and live:
            t = take(q)
            oldest = live[0]
            jumps.append(t is not oldest)
            if t is not oldest:
                # a jump always serves the most urgent waiter present
                assert t.priority == min(w.priority for w in live)
                assert t.priority < oldest.priority
            live.remove(t)
        else:
            t = queued(priority)
            q.push(t)
            live.append(t)
    for start in range(len(jumps)):
        for end in range(start + 1, len(jumps) + 1):
            assert sum(jumps[start:end]) <= share * (end - start) + 1


def test_WaitQueue_evicts_the_newest_of_the_least_urgent_class_below() -> None:
    q = WaitQueue(4)
    a1, a3, b3, c2 = queued(1), queued(3), queued(3), queued(2)
    for t in (a1, a3, b3, c2):
        q.push(t)
    assert q.evict_for(0) is b3
    b3.status = Status.EVICTED
    assert q.evict_for(2) is a3
    a3.status = Status.EVICTED
    assert q.evict_for(2) is None  # nothing less urgent than class 2 is left
    assert q.evict_for(1) is c2
    c2.status = Status.EVICTED
    assert q.evict_for(1) is None
    assert list(q) == [a1]


def test_WaitQueue_eviction_skips_tickets_that_already_left() -> None:
    q = WaitQueue(2)
    live, gone = queued(1), queued(1)
    q.push(live)
    q.push(gone)
    gone.status = Status.CANCELLED
    assert q.evict_for(0) is live


def test_WaitQueue_compacts_dead_entries_in_every_lane() -> None:
    q = WaitQueue(2)
    tickets = [queued(i % 2) for i in range(100)]
    for t in tickets:
        q.push(t)
    for t in tickets[:90]:
        t.status = Status.EXPIRED
    q.compact(50)
    assert len(q) == 10
    assert list(q) == tickets[90::2] + tickets[91::2]
    q.compact(50)
    assert len(q) == 10


def test_WaitQueue_seq_orders_arrivals_and_breaks_deadline_ties() -> None:
    q = WaitQueue(2)
    first, second = queued(1), queued(0)
    q.push(first)
    q.push(second)
    assert first._seq < second._seq
    assert first < second


def test_WaitQueue_by_deadline_starts_the_earliest_due_first_and_equals_by_arrival() -> None:
    q = WaitQueue(by_deadline=True)
    late, never, soon, also_soon, sooner, gone = (queued(0, d) for d in (30, math.inf, 10, 10, 5, 1))
    for t in (late, never, soon, also_soon, sooner, gone):
        q.push(t)
    gone.status = Status.CANCELLED
    assert list(q) == [sooner, soon, also_soon, late, never]
    assert q.peek() is sooner
    assert [take(q) for _ in range(5)] == [sooner, soon, also_soon, late, never]


def test_WaitQueue_by_deadline_orders_inside_a_class_and_chooses_between_classes_as_in_fifo() -> None:
    q = WaitQueue(2, jump_share=0, by_deadline=True)
    calm_late, urgent_late, calm_soon, urgent_soon = queued(1, 20), queued(0, 20), queued(1, 5), queued(0, 5)
    for t in (calm_late, urgent_late, calm_soon, urgent_soon):
        q.push(t)
    # Each lane's head is its earliest due; with no jumps, the lane whose head arrived first goes.
    assert [take(q) for _ in range(4)] == [calm_soon, calm_late, urgent_soon, urgent_late]


def test_WaitQueue_by_deadline_evicts_the_one_due_last_of_the_least_urgent_class() -> None:
    q = WaitQueue(2, by_deadline=True)
    due_last, due_first, urgent = queued(1, 50), queued(1, 5), queued(0, 100)
    for t in (due_last, due_first, urgent):
        q.push(t)
    assert q.evict_for(0) is due_last
    assert list(q) == [urgent, due_first]


def test_WaitQueue_due_by_and_due_after_split_the_live_waiters_of_every_class() -> None:
    for by_deadline in (False, True):
        q = WaitQueue(2, by_deadline=by_deadline)
        tickets = [queued(0, 10), queued(1, 10), queued(0, 20), queued(1, math.inf), queued(0, 5)]
        for t in tickets:
            q.push(t)
        tickets[4].status = Status.EXPIRED
        assert [q.due_by(d) for d in (4, 5, 10, 19, 20, math.inf)] == [0, 0, 2, 2, 3, 4]
        assert q.due_after(5) == [tickets[0], tickets[1], tickets[2], tickets[3]]
        assert q.due_after(10) == [tickets[2], tickets[3]]
        assert q.due_after(math.inf) == []


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"classes": 0}, ValueError, r"^priorities must be >= 1, got 0$"),
        ({"classes": True}, TypeError, r"^priorities must be an int, not bool$"),
        ({"classes": 2.0}, TypeError, r"^priorities must be an int, got 2.0$"),
        ({"jump_share": 1}, ValueError, r"^jump_share must be >= 0 and < 1, got 1$"),
        ({"jump_share": -0.1}, ValueError, r"^jump_share must be >= 0 and < 1, got -0.1$"),
        ({"jump_share": float("nan")}, ValueError, r"^jump_share must not be NaN$"),
        ({"jump_share": "0.2"}, TypeError, r"^jump_share must be a number, got '0.2'$"),
        ({"jump_share": True}, TypeError, r"^jump_share must be a number, got True$"),
    ],
)
def test_WaitQueue_settings_refused(kwargs: dict[str, object], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        WaitQueue(**kwargs)  # type: ignore[arg-type]


def test_WaitQueue_has_one_class_by_default() -> None:
    assert WaitQueue().classes == 1


def test_WaitQueue_costs_the_same_whatever_the_number_of_classes() -> None:
    """Lanes exist only for the classes in use: a million classes cost what two do."""
    tracemalloc.start()
    try:
        q = WaitQueue(10**6)
        first, last = queued(10**6 - 1), queued(0)
        q.push(first)
        q.push(last)
        assert q.evict_for(0) is first
        first.status = Status.EVICTED
        assert take(q) is last
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024
    assert len(q) == 0
    assert list(q) == []


@given(script=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 10**9)), max_size=60))
def test_WaitQueue_with_classes_far_apart_decides_as_with_classes_side_by_side(
    script: list[tuple[int, int]],
) -> None:
    # 0: take; 1: push; 2: a waiter leaves; 3: evict for a class; 4: compact. Class p of the near
    # queue is class p * 10**8 of the far one.
    near, far = WaitQueue(10, jump_share=0.5), WaitQueue(9 * 10**8 + 1, jump_share=0.5)
    mate: dict[int, Ticket] = {}
    live: list[Ticket] = []
    for op, value in script:
        if op == 0 and live:
            a = take(near)
            assert take(far) is mate[id(a)]
            live.remove(a)
        elif op == 2 and live:
            a = live.pop(value % len(live))
            a.status = mate[id(a)].status = Status.CANCELLED
        elif op == 3:
            evicted = near.evict_for(value % 10)
            evicted_far = far.evict_for(value % 10 * 10**8)
            assert (evicted, evicted_far) == (None, None) or evicted_far is mate[id(evicted)]
            if evicted is not None:
                live.remove(evicted)
                evicted.status = evicted_far.status = Status.EVICTED  # type: ignore[union-attr]
        elif op == 4:
            near.compact(0)
            far.compact(0)
        else:
            a, b = queued(value % 10), queued(value % 10 * 10**8)
            near.push(a)
            far.push(b)
            mate[id(a)] = b
            live.append(a)
        assert [mate[id(a)] for a in near] == list(far)
        assert len(near) == len(far)


@pytest.mark.parametrize("share", [0.9995, 0.9999, 0.99995, Fraction(99_999, 100_000), 0.2, 1 / 3])
@pytest.mark.parametrize("older", [0, 1, 3])
def test_WaitQueue_no_class_starves_at_any_share_below_one(share: float | Fraction, older: int) -> None:
    """A waiter with k older waiters starts within (k + 2) / (1 - share) starts, however close to 1."""
    q = WaitQueue(2, jump_share=share)  # type: ignore[arg-type]  # a Fraction too: WaitQueue takes one
    for _ in range(older):
        q.push(queued(1))
    victim = queued(1)
    q.push(victim)
    bound = (older + 2) / (1 - share)
    starts = 0
    while starts <= bound:  # an urgent arrival before every start, forever
        q.push(queued(0))
        starts += 1
        if take(q) is victim:
            break
    assert victim.status is Status.RUNNING, f"still waiting after {starts} starts"


@pytest.mark.parametrize(
    ("share", "fraction"),
    [
        (0.2, Fraction(1, 5)),
        (1 / 3, Fraction(1, 3)),
        (0.999, Fraction(999, 1000)),
        (0.9995, Fraction(0.9995)),
        (Fraction(99_999, 100_000), Fraction(99_999, 100_000)),
        (0, Fraction(0)),
    ],
)
def test_jump_share_is_the_fraction_it_stands_for_never_rounded_to_one(
    share: float | Fraction, fraction: Fraction
) -> None:
    assert check_jump_share(share) == fraction < 1
