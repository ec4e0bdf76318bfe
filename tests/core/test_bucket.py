"""Token buckets and rate limits in the pure core: the arithmetic, settling, and the bound that over
any window the granted cost never exceeds rate x window + burst."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundedgate._core import GateState, RateLimit, Status, Ticket, TokenBucket
from tests.core.invariants import check_invariants


def test_RateLimit_constructors_and_defaults() -> None:
    rpm = RateLimit.per_minute(60)
    assert (rpm.rate, rpm.burst, rpm.unit, rpm.floor, rpm.name) == (
        1.0,
        60,
        "requests",
        -60,
        "60 requests/min",
    )
    assert rpm.per_request
    tpm = RateLimit.per_minute(80_000, burst=120_000, unit="tokens", name="tpm")
    assert (tpm.burst, tpm.name, tpm.per_request) == (120_000, "tpm", False)
    rps = RateLimit.per_second(5, burst=7, floor=0)
    assert (rps.rate, rps.burst, rps.floor, rps.name) == (5, 7, 0, "5 requests/s")
    assert RateLimit.per_minute(60, floor=-10).floor == -10
    assert RateLimit(2.0, 4.0).name == "2 rps"
    assert RateLimit(2.0, 4.0, unit="tokens").name == "2 tps"


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"rate": 0, "burst": 1}, ValueError, r"^rate must be a finite number > 0, got 0$"),
        ({"rate": math.inf, "burst": 1}, ValueError, r"^rate must be a finite number > 0, got inf$"),
        ({"rate": True, "burst": 1}, TypeError, r"^rate must be a number, got True$"),
        ({"rate": 1, "burst": -1}, ValueError, r"^burst must be a finite number > 0, got -1$"),
        ({"rate": 1, "burst": math.nan}, ValueError, r"^burst must be a finite number > 0, got nan$"),
        ({"rate": 1, "burst": 1, "unit": "calls"}, ValueError, r"^unit must be 'requests' or 'tokens'"),
        ({"rate": 1, "burst": 1, "floor": 1}, ValueError, r"^floor must be a finite number <= 0, got 1$"),
        ({"rate": 1, "burst": 1, "floor": "0"}, TypeError, r"^floor must be a number, got '0'$"),
        ({"rate": 1, "burst": 1, "name": 3}, TypeError, r"^name must be a str, got 3$"),
        (
            {"rate": 1, "burst": 0.5},
            ValueError,
            r"^burst must be >= 1 for a limit counted in requests, got 0.5$",
        ),
    ],
)
def test_RateLimit_refuses_bad_settings(kwargs: dict[str, object], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        RateLimit(**kwargs)  # type: ignore[arg-type]


def test_RateLimit_per_minute_refuses_a_bad_amount() -> None:
    with pytest.raises(ValueError, match=r"^amount must be a finite number > 0, got 0$"):
        RateLimit.per_minute(0)


def test_TokenBucket_refills_up_to_its_burst() -> None:
    bucket = TokenBucket(RateLimit(rate=2, burst=10))
    assert bucket.tokens(0) == 10
    assert bucket.covers(10, 0)
    bucket.take(10, 0)
    assert not bucket.covers(1, 0)
    assert bucket.ready_at(3) == 1.5
    assert bucket.covers(3, 1.5)
    assert not bucket.covers(3, 1.4999)
    assert bucket.tokens(1) == 2
    assert bucket.tokens(100) == 10
    assert bucket.full_at() == 5


def test_TokenBucket_a_full_bucket_takes_from_full() -> None:
    bucket = TokenBucket(RateLimit(rate=1, burst=4))
    bucket.take(1, 100)  # full long before 100: 3 left, not 99
    assert bucket.tokens(100) == 3
    assert bucket.ready_at(4) == 101


def test_TokenBucket_refund_and_charge_stay_within_floor_and_burst() -> None:
    bucket = TokenBucket(RateLimit(rate=1, burst=10, floor=-5))
    bucket.give(100, 0)
    assert bucket.tokens(0) == 10
    bucket.charge(12, 0)
    assert bucket.tokens(0) == -2
    bucket.charge(100, 0)
    assert bucket.tokens(0) == -5
    assert bucket.ready_at(1) == 6
    bucket.give(3, 0)
    assert bucket.tokens(0) == -2


def test_TokenBucket_times_are_exact_when_the_period_is() -> None:
    # 60 a minute on a millisecond clock: a token every 1000 ms, with no float drift over many takes.
    bucket = TokenBucket(RateLimit(rate=60 / 60_000, burst=1))
    for second in range(1, 10_000):
        assert bucket.covers(1, second * 1000 - 1000)
        bucket.take(1, second * 1000 - 1000)
        assert bucket.ready_at(1) == second * 1000
        assert not bucket.covers(1, second * 1000 - 0.001)


def test_TokenBucket_need_by_unit() -> None:
    assert TokenBucket(RateLimit(1, 10)).need(7) == 1
    assert TokenBucket(RateLimit(1, 10, unit="tokens")).need(7) == 7


def test_GateState_settle_refunds_and_charges_only_token_buckets() -> None:
    rpm, tpm = RateLimit(1, 10), RateLimit(100, 1000, unit="tokens", floor=-200)
    state = GateState(None, None, rate_limits=[rpm, tpm])
    t = Ticket(cost=300)
    state.arrive(t, 0)
    assert state.tokens(0) == (9, 700)
    assert state.settle(t, 100, 0) == ()
    assert state.tokens(0) == (9, 900)  # refunded 200
    state.settle(t, 100, 0)
    assert state.tokens(0) == (9, 900)  # settling the same figure again changes nothing
    state.settle(t, 2000, 0)
    assert state.tokens(0) == (9, -200)  # charged 1900, stopped at the floor
    state.settle(t, 0, 0)
    assert state.tokens(0) == (9, 1000)  # refunded 2000, stopped at the burst
    never = Ticket(cost=5)
    assert state.settle(never, 50, 0) == ()
    assert never.cost == 5


def test_GateState_a_refund_lets_the_waiting_head_start() -> None:
    tpm = RateLimit(1, 100, unit="tokens")
    state = GateState(None, None, rate_limits=[tpm])
    first, second = Ticket(cost=100), Ticket(cost=50)
    state.arrive(first, 0)
    state.arrive(second, 0)
    assert second.status is Status.QUEUED
    assert state.next_wakeup() == 50
    assert state.settle(first, 40, 1) == [second]
    assert second.started == 1


def test_GateState_takes_from_all_buckets_or_from_none() -> None:
    rpm, tpm = RateLimit(1, 10), RateLimit(1, 100, unit="tokens")
    state = GateState(None, None, rate_limits=[rpm, tpm])
    big = Ticket(cost=150 - 60)
    state.arrive(Ticket(cost=60), 0)
    state.arrive(big, 0, wait=False)
    assert big.status is Status.RATE_LIMITED
    assert state.tokens(0) == (9, 40)  # the requests bucket was not charged for the refused one
    assert state.ready_at(big) == state.tokens_ready_at(big, 0) == 50
    assert state.limiting(big, 0) is tpm


def test_GateState_refuses_a_request_whose_tokens_cannot_come_before_its_deadline() -> None:
    state = GateState(1, 10, rate_limits=[RateLimit(1, 5)])
    for _ in range(5):  # spend the burst
        t = Ticket()
        state.arrive(t, 0)
        state.release(t, 0)
    soon, later, sooner = Ticket(deadline=1), Ticket(deadline=2), Ticket(deadline=0.5)
    for t in (soon, later):
        state.arrive(t, 0)
    check_invariants(state, 0)
    assert soon.status is Status.RATE_LIMITED  # its token is due at 1, its deadline is 1
    assert soon.ended == 0
    assert later.status is Status.QUEUED
    assert state.snapshot("s").rate_limited == 1
    state.arrive(sooner, 0)
    assert sooner.status is Status.RATE_LIMITED
    assert state.snapshot("s").rate_limited == 2


def test_GateState_cost_above_a_burst_can_never_be_served() -> None:
    state = GateState(1, 1, rate_limits=[RateLimit(1, 10), RateLimit(1, 100, unit="tokens", name="tpm")])
    assert state.check_cost(100) == 100
    with pytest.raises(ValueError, match=r"^cost 101 exceeds the burst of rate limit 'tpm' \(100\)"):
        state.check_cost(101)
    with pytest.raises(ValueError, match=r"^cost must be a finite number >= 0, got -1$"):
        state.check_cost(-1)
    with pytest.raises(TypeError, match=r"^cost must be a number, got True$"):
        state.check_cost(True)


def test_GateState_rate_limits_must_be_RateLimit_objects() -> None:
    with pytest.raises(TypeError, match="rate_limits must hold RateLimit objects"):
        GateState(1, 1, rate_limits=[(1, 10)])  # type: ignore[list-item]


def test_GateState_revoked_grant_gives_its_tokens_back() -> None:
    state = GateState(1, 5, rate_limits=[RateLimit(1, 3, unit="tokens")])
    holder, granted = Ticket(cost=1), Ticket(cost=2)
    state.arrive(holder, 0)
    state.arrive(granted, 0)
    assert state.release(holder, 0) == [granted]
    assert state.tokens(0) == (0,)
    state.cancel(granted, 0)
    assert state.tokens(0) == (2,)


@st.composite
def rated_traffic(draw: st.DrawFn) -> tuple[RateLimit, list[tuple[int, float, float]]]:
    """A rate limit, and arrivals (time, cost, run time) in time order."""
    unit: Literal["requests", "tokens"] = draw(st.sampled_from(["requests", "tokens"]))
    limit = RateLimit(
        rate=draw(st.sampled_from([0.5, 1, 2, 3])), burst=draw(st.sampled_from([1, 2, 5, 10])), unit=unit
    )
    arrivals = sorted(
        draw(
            st.lists(
                st.tuples(
                    st.integers(0, 40),
                    st.floats(0, limit.burst) if unit == "tokens" else st.just(1.0),
                    st.sampled_from([0.5, 1, 4]),
                ),
                max_size=60,
            )
        )
    )
    return limit, arrivals


@given(traffic=rated_traffic(), running=st.none() | st.integers(1, 3), waiting=st.none() | st.integers(0, 6))
def test_GateState_granted_cost_never_exceeds_rate_times_window_plus_burst(
    traffic: tuple[RateLimit, list[tuple[int, float, float]]], running: int | None, waiting: int | None
) -> None:
    limit, arrivals = traffic
    state = GateState(running, waiting, rate_limits=[limit])
    started: list[tuple[float, float]] = []  # (time, cost taken)
    ends: list[tuple[float, Ticket]] = []
    pending = list(arrivals)
    tickets: list[tuple[Ticket, float]] = []
    now = 0.0

    def record(woken: Iterable[Ticket]) -> None:
        for t in woken:
            if t.status is Status.RUNNING:
                started.append((now, 1.0 if limit.per_request else t.cost))
                run = next(r for tk, r in tickets if tk is t)
                ends.append((now + run, t))

    while pending or ends or state.waiting:
        candidates = [state.next_wakeup()]
        if pending:
            candidates.append(pending[0][0])
        if ends:
            candidates.append(min(e[0] for e in ends))
        now = max(now, min(candidates))
        assert now < math.inf
        record(state.advance(now))
        for ending in sorted([e for e in ends if e[0] <= now], key=lambda e: e[0]):
            ends.remove(ending)
            record(state.release(ending[1], now))
        while pending and pending[0][0] <= now:
            _, cost, run = pending.pop(0)
            t = Ticket(deadline=now + 20, cost=cost)
            tickets.append((t, run))
            record(state.arrive(t, now))
            if t.status is Status.RUNNING:
                record([t])
        check_invariants(state, now)
    times = sorted({s for s, _ in started})
    for i, begin in enumerate(times):
        for end in times[i:]:
            granted = sum(c for s, c in started if begin <= s <= end)
            assert granted <= limit.rate * (end - begin) + limit.burst + 1e-6


def test_GateState_an_urgent_newcomer_that_jumps_can_let_the_oldest_start_behind_it() -> None:
    # The head (class 1, jumping the older class 2 waiter on the banked jump) waits for 5 tokens;
    # the class 2 waiter, 1 token, waits behind it. An urgent newcomer that can pay jumps and spends
    # the jump: the head is the oldest waiter again, who can pay too. Both start, and the core
    # must report the one that was waiting, or its caller would never hear of it.
    state = GateState(10, 10, priorities=3, jump_share=0.5, rate_limits=[RateLimit(1, 10, unit="tokens")])
    spender = Ticket(cost=10)
    state.arrive(spender, 0)
    oldest, big = Ticket(priority=2, cost=1), Ticket(priority=1, cost=5)
    for t in (oldest, big):
        assert not state.arrive(t, 0)
    assert state.advance(2) == []  # 2 tokens: not enough for the head
    urgent = Ticket(priority=0, cost=1)
    assert list(state.arrive(urgent, 2)) == [oldest]
    assert (urgent.status, oldest.status, big.status) == (Status.RUNNING, Status.RUNNING, Status.QUEUED)
    check_invariants(state, 2)


def test_GateState_without_rate_limits_is_never_waiting_for_tokens() -> None:
    state = GateState(1, 1)
    assert state.ready_at(Ticket()) == state.tokens_ready_at(Ticket(), 0) == -math.inf
    assert state.full_at() == -math.inf
    assert state.limiting(Ticket(), 0) is None


def test_GateState_settling_a_little_more_charges_it_even_from_a_full_bucket() -> None:
    state = GateState(None, 0, rate_limits=[RateLimit(1, 10, unit="tokens")])
    free = Ticket(cost=0)
    state.arrive(free, 0)
    state.settle(free, 1, 10)  # the bucket has been full since 0: one token less than full
    assert state.tokens(10) == (9,)
    state.settle(free, 1.5, 10)
    assert state.tokens(10) == (8.5,)
