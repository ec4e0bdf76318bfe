"""Rate limits through the real gate under virtual time: seed 004's L01-L03, FIFO for tokens,
deadlines, RateLimited with an exact retry_after, settling, cancellation, and a pure rate limiter."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundedgate import BoundedGate, Late, QueueExpired, QueueFull, RateLimit, RateLimited, Status
from boundedgate.asgi._refusal import retry_after_seconds
from tests.helpers import checked_gate, run_virtual


async def test_L01_100_calls_in_a_minute_against_60_rpm() -> None:
    # 60 requests per minute with a burst of 10: 100 calls at once, each willing to wait a minute.
    gate = checked_gate(None, 100, rate_limits=[RateLimit.per_minute(60, burst=10)])
    loop = asyncio.get_running_loop()
    starts: list[float] = []

    async def call() -> None:
        async with gate.admit(timeout=60):
            starts.append(loop.time())

    results = await asyncio.gather(*(call() for _ in range(100)), return_exceptions=True)
    stats = gate.stats()
    # The burst at once, then one a second until the budgets run out at 60: about the RPM. The
    # 70th and later would get their tokens at 60 s or after: refused at once, not queued to expire.
    assert starts == [0.0] * 10 + [float(s) for s in range(1, 60)]
    assert stats.admitted == 69 <= 60 + 10  # never more than rate x window + burst
    assert (stats.rate_limited, stats.expired) == (31, 0)
    refused = [r for r in results if isinstance(r, RateLimited)]
    assert len(refused) == len([r for r in results if r is not None]) == 31
    assert [r.retry_after for r in refused] == [60.0] * 31  # theirs by 59 for the 59 queued, its own at 60


async def test_L02_a_burst_on_a_write_tool_does_not_exceed_its_quota() -> None:
    # The write tool allows 30 per minute (burst 30); 50 writes arrive at once and do not wait.
    gate = checked_gate(None, 0, name="update_ticket", rate_limits=[RateLimit.per_minute(30)])
    passed, refused = 0, []
    for _ in range(50):
        try:
            gate.try_admit().release()
            passed += 1
        except RateLimited as error:
            refused.append(error)
    assert passed == 30
    assert len(refused) == 20
    first = refused[0]
    assert (first.code, first.http_status, first.limit) == ("rate_limited", 429, "30 requests/min")
    assert first.retry_after == pytest.approx(2.0)  # one token every 2 s
    assert first.headers() == {"Retry-After": "2"}
    assert first.to_dict()["limit"] == "30 requests/min"


async def test_L03_a_full_queue_returns_a_typed_refusal() -> None:
    gate = checked_gate(None, 5, rate_limits=[RateLimit.per_second(1, burst=1)])
    gate.try_admit().release()  # the bucket is empty now
    waiters = [asyncio.create_task(gate.admit().__aenter__()) for _ in range(5)]
    await asyncio.sleep(0)
    assert gate.waiting == 5
    coro = gate.admit().__aenter__()
    with pytest.raises(QueueFull):
        coro.send(None)  # refused before any suspension
    for w in waiters:
        (await w).release()
    assert asyncio.get_running_loop().time() == 5


async def test_waiting_for_tokens_is_fifo_a_large_head_is_not_starved() -> None:
    tpm = RateLimit.per_second(10, burst=100, unit="tokens")
    gate = checked_gate(None, None, rate_limits=[tpm])
    loop = asyncio.get_running_loop()
    gate.try_admit(cost=100).release()  # empty the bucket
    order: list[tuple[str, float]] = []

    async def call(name: str, cost: float) -> None:
        async with gate.admit(cost=cost):
            order.append((name, loop.time()))

    await asyncio.gather(call("large", 80), call("small-1", 5), call("small-2", 5))
    # The small ones could have gone at 0.5 s, but they queue behind the large one.
    assert order == [("large", 8.0), ("small-1", 8.5), ("small-2", 9.0)]


async def test_tokens_that_cannot_come_before_the_deadline_are_refused_at_once() -> None:
    gate = checked_gate(None, 10, rate_limits=[RateLimit.per_second(10, burst=50, unit="tokens", name="tpm")])
    gate.try_admit(cost=50).release()
    with pytest.raises(RateLimited) as info:
        async with gate.admit(cost=50, timeout=3):
            pass
    assert info.value.retry_after == 5.0  # 50 tokens at 10 per second
    assert info.value.limit == "tpm"
    assert str(info.value).startswith("rate limit 'tpm' of gate 'test'")
    assert asyncio.get_running_loop().time() == 0  # refused at once, not after waiting
    async with gate.admit(cost=50, timeout=6) as permit:  # this one can make it
        assert permit.started == 5
    assert gate.stats().rate_limited == 1


@pytest.mark.parametrize(("burst", "admitted"), [(5, 4), (10, 5)])
async def test_tokens_the_queue_ahead_takes_first_are_counted_at_arrival(burst: int, admitted: int) -> None:
    # Issue 26, item 7: 10 tokens a second, 20 requests of 5 tokens at once, each willing to queue
    # 2 s. The k-th (from 1) has its tokens once the bucket has supplied 5k: at (5k - burst) / 10 s.
    # Those that cannot start before 2 s are refused at once (429), each with the exact wait for
    # its cost behind the ones queued ahead of it; none is queued only to expire.
    tpm = RateLimit.per_second(10, burst=burst, unit="tokens", name="tpm")
    gate = checked_gate(None, None, rate_limits=[tpm])
    loop = asyncio.get_running_loop()
    starts: list[float] = []
    refused: list[tuple[float, RateLimited]] = []

    async def call() -> None:
        try:
            async with gate.admit(cost=5, max_wait=2):
                starts.append(loop.time())
        except RateLimited as error:
            refused.append((loop.time(), error))

    await asyncio.gather(*(call() for _ in range(20)))
    stats = gate.stats()
    assert starts == [max(0.0, (5 * k - burst) / 10) for k in range(1, admitted + 1)]
    assert (stats.admitted, stats.rate_limited, stats.expired) == (admitted, 20 - admitted, 0)
    assert [at for at, _ in refused] == [0.0] * (20 - admitted)  # at arrival, not after 2 s
    for _, error in refused:
        # Behind the admitted ones still queued: the bucket supplies their 5 tokens each and its
        # own 5 at 2.0 s, which is its queue budget (a deadline of now never starts).
        assert (error.retry_after, error.limit, error.waiting) == (2.0, "tpm", 3)
        assert error.headers() == {"Retry-After": "2"}
        assert retry_after_seconds(error, fallback=1) == 2  # what the ASGI edge sends
    # Exact both ways: once the queue ahead has taken its tokens (the last at 1.5 s), a request
    # with the same cost is admitted at once at 2.0 s; earlier it still lacks tokens, and is told
    # how long.
    assert loop.time() == 1.5
    await asyncio.sleep(0.25)
    with pytest.raises(RateLimited) as early:
        gate.try_admit(cost=5)
    assert early.value.retry_after == 0.25
    await asyncio.sleep(0.25)
    permit = gate.try_admit(cost=5)
    assert permit.started == 2.0
    permit.release()


async def test_a_cost_above_the_burst_is_refused_with_a_clear_error() -> None:
    gate = checked_gate(1, 1, rate_limits=[RateLimit.per_minute(1000, unit="tokens", name="tpm")])
    with pytest.raises(ValueError, match="it could never be served"):
        gate.admit(cost=1001)


async def test_settle_refunds_the_over_estimate_and_wakes_the_waiter() -> None:
    gate = checked_gate(None, None, rate_limits=[RateLimit.per_second(1, burst=100, unit="tokens")])
    loop = asyncio.get_running_loop()
    first = gate.try_admit(cost=100)
    second = asyncio.create_task(gate.admit(cost=60).__aenter__())
    await asyncio.sleep(10)
    assert not second.done()  # it would wait 60 s for its tokens
    first.settle(30)  # the call used 30: 70 come back
    permit = await second
    assert permit.started == 10
    assert loop.time() == 10
    first.release()
    permit.release()
    assert gate.stats().tokens == pytest.approx((100 - 100 + 10 + 70 - 60,))  # +10 accrued by t=10


async def test_settle_charges_an_under_estimate_as_a_debt_later_requests_wait_out() -> None:
    gate = checked_gate(None, None, rate_limits=[RateLimit.per_second(10, burst=100, unit="tokens")])
    async with gate.admit(cost=10) as permit:
        pass
    permit.settle(190)  # a stream's usage, known only at its end, after the release
    assert gate.stats().tokens == (-90,)
    async with gate.admit(cost=10) as later:
        assert later.started == 10  # 100 tokens at 10 per second to get back to 10
    assert permit.cost == 190


async def test_settle_before_any_admission_and_malformed_costs() -> None:
    gate = checked_gate(None, None, rate_limits=[RateLimit.per_second(10, unit="tokens")])
    permit = gate.admit(cost=5)
    permit.settle(50)  # never started: nothing to settle
    assert permit.cost == 5
    with pytest.raises(ValueError, match="cost must be a finite number >= 0"):
        permit.settle(-1)
    with pytest.raises(TypeError, match="cost must be a number"):
        permit.settle(True)


async def test_cancelled_token_waiter_takes_nothing() -> None:
    gate = checked_gate(None, 5, rate_limits=[RateLimit.per_second(1, burst=2)])
    gate.try_admit().release()
    gate.try_admit().release()
    waiter = asyncio.create_task(gate.admit().__aenter__())
    await asyncio.sleep(0.5)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await asyncio.sleep(1.5)
    assert gate.stats().tokens == (2,)
    assert gate.stats().cancelled == 1


async def test_a_slot_and_tokens_are_both_needed() -> None:
    gate = checked_gate(1, 5, rate_limits=[RateLimit.per_second(1, burst=1)])
    loop = asyncio.get_running_loop()
    holder = gate.try_admit()  # takes the slot and the only token
    loop.call_later(0.25, holder.release)
    async with gate.admit() as permit:  # the slot frees at 0.25, the token comes at 1
        assert permit.started == 1
    assert repr(gate) == "<BoundedGate 'test' [running 0/1, waiting 0/5]>"


async def test_a_pure_rate_limiter_has_no_limit_on_running() -> None:
    limiter = checked_gate(None, 10, name="rpm", rate_limits=[RateLimit.per_second(2, burst=4)])
    permits = [limiter.try_admit() for _ in range(4)]
    assert limiter.running == 4
    assert limiter.max_running is None
    assert limiter.stats().max_running is None
    assert repr(limiter) == "<BoundedGate 'rpm' [running 4/unbounded, waiting 0/10]>"
    with pytest.raises(RateLimited) as info:
        limiter.try_admit()
    assert info.value.max_running is None
    assert info.value.retry_after == 0.5
    for p in permits:
        p.release()
    assert limiter.rate_limits == (RateLimit.per_second(2, burst=4),)


async def test_try_admit_with_a_busy_slot_is_queue_full_not_rate_limited() -> None:
    gate = checked_gate(1, 5, rate_limits=[RateLimit.per_second(1, burst=5)])
    holder = gate.try_admit()
    with pytest.raises(QueueFull):
        gate.try_admit()
    holder.release()


async def test_waiters_for_tokens_expire_at_their_deadline() -> None:
    # Queued, a request's tokens were due before its deadline; a charge settled meanwhile pushes
    # them past it: it leaves the queue at its deadline, never started.
    gate = checked_gate(None, 5, rate_limits=[RateLimit.per_second(1, burst=10, unit="tokens")])
    gate.try_admit(cost=10).release()
    first = asyncio.create_task(gate.admit(cost=10, timeout=20).__aenter__())
    second = asyncio.create_task(gate.admit(cost=4, timeout=15).__aenter__())
    permit = await first  # its tokens come at 10; the second's would at 14
    permit.settle(14)  # 4 more: the second's now come at 18
    permit.release()
    with pytest.raises(QueueExpired):
        await second
    assert asyncio.get_running_loop().time() == 15


Call = tuple[int, float, int, "int | None", float]


@st.composite
def rated_script(draw: st.DrawFn) -> list[Call]:
    """(arrival, cost, run, budget, settled) in arrival order."""
    calls = draw(
        st.lists(
            st.tuples(
                st.integers(0, 30),
                st.sampled_from([0, 1, 5, 20]),
                st.integers(1, 5),
                st.none() | st.integers(1, 30),
                st.sampled_from([0, 2, 10, 40]),  # refunds, charges, and charges the floor cuts short
            ),
            max_size=25,
        )
    )
    return sorted(calls, key=lambda call: call[0])


async def _run_rated(script: list[Call], running: int | None) -> None:
    rpm = RateLimit.per_second(0.5, burst=3)
    tpm = RateLimit.per_second(5, burst=20, unit="tokens")
    gate = checked_gate(running, 8, rate_limits=[rpm, tpm])
    loop = asyncio.get_running_loop()
    starts: list[tuple[float, float]] = []
    # What the token bucket was charged, net: (time, tokens), a cost taken at a start or what a
    # settle moved the balance by (a charge, or minus a refund).
    charged: list[tuple[float, float]] = []

    async def call(arrival: int, cost: float, run: int, budget: int | None, settled: float) -> None:
        await asyncio.sleep(arrival)
        try:
            async with gate.admit(cost=cost, timeout=budget) as permit:
                starts.append((loop.time(), cost))
                charged.append((loop.time(), cost))
                await asyncio.sleep(run)
                # The README's rule: a charge stops at the floor, a refund at the burst. (The balance
                # after the settle may include the starts a refund let in: those record themselves.)
                balance, extra = gate.stats().tokens[1], settled - permit.cost
                floor: float = tpm.floor  # type: ignore[assignment]
                applied = min(extra, balance - floor) if extra > 0 else max(extra, balance - tpm.burst)
                permit.settle(settled)
                charged.append((loop.time(), applied))
                assert floor - 1e-9 <= gate.stats().tokens[1] <= tpm.burst + 1e-9  # to rounding
        except (QueueFull, QueueExpired, RateLimited, Late):
            pass

    await asyncio.gather(*(call(*c) for c in script))
    stats = gate.stats()
    assert (stats.running, stats.waiting) == (0, 0)
    assert stats.arrived == len(script)
    times = sorted({t for t, _ in charged})
    for i, begin in enumerate(times):
        for end in times[i:]:
            window = [c for t, c in starts if begin <= t <= end]
            assert len(window) <= rpm.rate * (end - begin) + rpm.burst + 1e-6
            # The README's bound with settle: net of refunds, at most rate x w + burst - floor
            # (the balance starts a window at most full and ends it at least at the floor).
            net = sum(c for t, c in charged if begin <= t <= end)
            assert net <= tpm.rate * (end - begin) + tpm.burst - tpm.floor + 1e-6  # type: ignore[operator]
    async with gate.admit(timeout=1000):  # nothing left behind
        pass


@given(script=rated_script(), running=st.none() | st.integers(1, 3))
def test_random_traffic_through_a_rated_gate_keeps_every_invariant(
    script: list[Call], running: int | None
) -> None:
    run_virtual(_run_rated, script, running)


def test_status_of_a_rate_limited_permit() -> None:
    assert Status.RATE_LIMITED.is_final
    assert BoundedGate(max_running=1, max_waiting=0).rate_limits == ()


async def test_a_stream_settles_its_usage_at_its_end() -> None:
    gate = checked_gate(2, 2, rate_limits=[RateLimit.per_second(10, burst=100, unit="tokens")])

    async def chunks() -> AsyncIterator[str]:
        for word in ("a", "b", "c"):
            await asyncio.sleep(1)
            yield word

    stream = await gate.stream(chunks, cost=60)
    assert gate.stats().tokens == (40,)
    async with stream:
        words = [w async for w in stream]
    stream.permit.settle(20)  # the usage reported in the stream's last chunk
    assert words == ["a", "b", "c"]
    assert gate.stats().tokens == (100,)  # 40 + 30 accrued, + 40 refunded, capped at the burst
