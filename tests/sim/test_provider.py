"""The adaptive controller against a provider whose capacity moves, in virtual time (issue 15's proofs)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundedgate import Adaptive, AdaptiveLimit
from boundedgate.sim import (
    Client,
    ClientResult,
    Fixed,
    LogNormal,
    Poisson,
    Provider,
    drift,
    generate,
    simulate_provider,
    steps,
)


def traffic(
    rate: float, seconds: int, seed: int = 1, budget: float = 5.0
) -> list[tuple[float, float, float]]:
    jobs = generate(
        Poisson(rate=rate), LogNormal(mean_ms=300, p99_ms=1500), budget_ms=int(budget * 1000),
        duration_ms=seconds * 1000, seed=seed,
    )  # fmt: skip
    return [(j.arrival_ms / 1000, j.service_ms / 1000, j.budget_ms / 1000) for j in jobs]  # type: ignore[operator]


def limit_at(result: ClientResult, when: float) -> int:
    return [c for t, c in result.limits if t <= when][-1]


def limits_between(result: ClientResult, start: float, end: float) -> list[int]:
    return [limit_at(result, start), *(c for t, c in result.limits if start < t <= end)]


def band(k: float) -> tuple[float, float]:
    return 0.6 * k, k + 2 * math.sqrt(k)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("initial", [1, 8, 64])
def test_C_converges_to_a_band_around_K_from_any_start(initial: int, seed: int) -> None:
    jobs = traffic(rate=120, seconds=150, seed=seed)  # wants ~36 in flight: well beyond K
    [result] = simulate_provider([Client("a", jobs, initial, 200, adaptive=Adaptive())], Provider(20))
    low, high = band(20)
    seen = limits_between(result, 90, 150)
    assert low <= min(seen), seen
    assert max(seen) <= high, seen
    assert result.provider_refused < 0.05 * result.requests


def test_a_burst_of_overload_signals_costs_one_cut() -> None:
    controller = AdaptiveLimit(Adaptive(), 40)
    for i in range(100):
        controller.signal("overloaded", 10 + i * 0.001)
    assert (controller.limit, controller.cuts, controller.suppressed) == (36, 1, 99)
    for kind in ("ignored", "rate_limited"):
        controller.signal(kind, 20)
    assert controller.limit == 36
    assert controller.cuts == 1


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_C_recovers_after_K_halves_and_returns(seed: int) -> None:
    jobs = traffic(rate=120, seconds=240, seed=seed)
    provider = Provider(steps(20, (80.0, 10), (160.0, 20)))
    [result] = simulate_provider([Client("a", jobs, 20, 200, adaptive=Adaptive())], provider)
    low, high = band(10)
    assert low <= min(limits_between(result, 100, 160))
    assert max(limits_between(result, 100, 160)) <= high
    low, high = band(20)
    assert low <= min(limits_between(result, 200, 240))
    assert max(limits_between(result, 200, 240)) <= high


def test_a_large_C_climbs_back_by_a_tenth_a_window_when_K_returns() -> None:
    # Calls of 2 s on average make windows of 2 s. K halves from 60 to 30 for a minute, then comes
    # back: C climbs back by a tenth a window, within 20 s; by one slot a window it was at 41 then.
    jobs = [
        (j.arrival_ms / 1000, j.service_ms / 1000, 10.0)
        for j in generate(Poisson(rate=40), LogNormal(mean_ms=2000, p99_ms=6000), duration_ms=180_000)
    ]
    provider = Provider(steps(60, (60.0, 30), (120.0, 60)))
    climbed = {}
    for ratio in (0.1, 0.0):
        clients = [Client("a", jobs, 60, 200, adaptive=Adaptive(increase_ratio=ratio))]
        [result] = simulate_provider(clients, provider)
        low, high = band(30)
        assert low <= min(limits_between(result, 90, 120))
        assert max(limits_between(result, 90, 120)) <= high
        climbed[ratio] = limit_at(result, 140)
    assert climbed[0.1] >= 0.9 * 60
    assert climbed[0.0] < 0.75 * 60


def test_C_follows_a_slow_drift() -> None:
    jobs = traffic(rate=120, seconds=200)
    [result] = simulate_provider(
        [Client("a", jobs, 10, 200, adaptive=Adaptive())], Provider(drift(10, 30, over=150))
    )
    low, high = band(30)
    assert low <= min(limits_between(result, 170, 200))
    assert max(limits_between(result, 170, 200)) <= high


def test_rate_limit_429s_pause_and_never_lower_C() -> None:
    jobs = traffic(rate=40, seconds=60)
    provider = Provider(1000, rpm=1200)  # 20 a second: half the traffic
    [result] = simulate_provider([Client("a", jobs, 20, 100, adaptive=Adaptive())], provider)
    assert result.provider_refused > 0  # the provider did say 429
    seen = [c for _, c in result.limits]
    assert seen == sorted(seen)  # C never went down
    static = simulate_provider([Client("s", jobs, 20, 100)], provider)[0]
    assert result.provider_refused <= static.provider_refused  # the pause sent less into the limit


@pytest.mark.parametrize("scale", [1, 5])
@pytest.mark.parametrize("base", [0, 10])
def test_four_gates_sharing_a_provider_converge_to_fair_shares(base: int, scale: int) -> None:
    # A fair share of 10 grows by one a window, one of 50 by a tenth of C: both converge.
    clients = [
        Client(
            name,
            traffic(rate=60 * scale, seconds=200, seed=base + seed),
            initial * scale,
            200 * scale,
            adaptive=Adaptive(),
        )
        for name, seed, initial in (("a", 1, 1), ("b", 2, 5), ("c", 3, 20), ("d", 4, 40))
    ]
    results = simulate_provider(clients, Provider(40 * scale))
    share = 10 * scale
    for result in results:
        seen = limits_between(result, 150, 200)
        mean = sum(seen) / len(seen)
        assert 0.75 * share <= mean <= 1.25 * share + 2, (result.name, seen)
        assert min(seen) > 1  # nobody stuck at the floor


def test_no_upward_drift_when_the_app_is_the_bottleneck() -> None:
    # Offered load is K / 4: 16 a second of 0.5 s is 8 in flight, the provider serves 32.
    jobs = [
        (j.arrival_ms / 1000, 0.5, 5.0) for j in generate(Poisson(rate=16), Fixed(500), duration_ms=120_000)
    ]
    [result] = simulate_provider([Client("a", jobs, 4, 100, adaptive=Adaptive())], Provider(32))
    peak_need = 16  # 2 x the Poisson peak in flight it could plausibly see
    assert max(c for _, c in result.limits) <= max(4, 2 * peak_need)
    assert result.limits[-1][1] < 32  # C did not creep up to the provider's capacity
    assert result.provider_refused == 0


def test_deadline_feasible_admission_refuses_at_arrival_what_would_expire() -> None:
    jobs = traffic(rate=120, seconds=60, budget=2.5)
    provider = Provider(1000)
    queued = simulate_provider([Client("q", jobs, 20, None)], provider)[0]
    feasible = simulate_provider([Client("f", jobs, 20, None, feasible=True)], provider)[0]
    assert queued.expired > 0
    assert feasible.infeasible > 0
    assert feasible.on_time >= 2 * queued.on_time
    assert feasible.late <= queued.late / 2
    assert feasible.expired < queued.expired / 4  # told "no" at once, rather than at the deadline
    assert feasible.mean_refusal_seconds is not None
    assert queued.mean_refusal_seconds is not None
    assert feasible.mean_refusal_seconds < 0.25 * queued.mean_refusal_seconds


# -- outages and capacity that comes back (issue 26) ------------------------------------------------


def counted(result: ClientResult) -> int:
    """Every request's one ending: answered (on time or late), refused, or never answered."""
    return (
        result.on_time + result.late + result.provider_refused + result.rejected + result.infeasible
        + result.expired + result.unanswered
    )  # fmt: skip


def test_an_outage_with_overload_queue_serves_what_queued_once_capacity_returns() -> None:
    # K = 4, then 0 (an outage) from 10 s to 20 s, then 4 again. The four requests of the outage
    # queue at the provider and start the moment it comes back; a fifth waits in the gate (C=4).
    provider = Provider(steps(4, (10.0, 0), (20.0, 4)), overload="queue")
    jobs = [(t, 1.0, 60.0) for t in (1.0, 2.0, 12.0, 13.0, 14.0, 15.0, 16.0, 25.0, 26.0)]
    [result] = simulate_provider([Client("a", jobs, 4, 10)], provider)
    assert result.on_time_at == [2.0, 3.0, 21.0, 21.0, 21.0, 21.0, 22.0, 26.0, 27.0]
    assert (result.on_time, result.over_capacity, counted(result)) == (9, 4, 9)


def test_an_outage_with_overload_refuse_answers_529_then_serves_again() -> None:
    provider = Provider(steps(4, (10.0, 0), (20.0, 4)), overload="refuse", refuse_seconds=0.5)
    jobs = [(t, 1.0, 60.0) for t in (1.0, 12.0, 13.0, 25.0)]
    [result] = simulate_provider([Client("a", jobs, 4, 10)], provider)
    assert result.on_time_at == [2.0, 26.0]
    assert (result.provider_refused, counted(result)) == (2, 4)


def test_a_request_queued_at_the_provider_starts_when_K_rises_not_at_the_next_answer() -> None:
    provider = Provider(steps(1, (5.0, 2)), overload="queue")
    jobs = [(0.0, 10.0, None), (1.0, 1.0, None)]  # the second waits at the provider from 1 s
    [result] = simulate_provider([Client("a", jobs, 2, 0)], provider)
    assert result.on_time_at == [6.0, 10.0]


def test_a_drift_starts_what_queued_at_the_provider_as_K_exceeds_what_it_serves() -> None:
    provider = Provider(drift(0.5, 2.5, over=10), overload="queue")  # K > 1 from 2.5 s on
    jobs = [(0.0, 20.0, None), (1.0, 1.0, None)]
    [result] = simulate_provider([Client("a", jobs, 2, 0)], provider)
    assert result.on_time_at[0] == pytest.approx(3.5)


def test_a_capacity_function_of_ones_own_is_asked_again_while_requests_wait_at_the_provider() -> None:
    provider = Provider(lambda t: 0.0 if 10 <= t < 20 else 4.0, overload="queue")
    jobs = [(12.0, 1.0, 60.0), (25.0, 1.0, 60.0)]
    [result] = simulate_provider([Client("a", jobs, 4, 10)], provider)
    first, second = result.on_time_at
    assert 21.0 <= first <= 21.0 + 0.1 + 1e-9  # asked again every 0.1 s of the outage
    assert second == 26.0


def test_requests_still_at_the_provider_when_it_never_comes_back_are_counted_unanswered() -> None:
    provider = Provider(steps(2, (10.0, 0)), overload="queue")
    jobs: list[tuple[float, float, float | None]] = [(1.0, 1.0, 60.0), (12.0, 1.0, 60.0), (13.0, 1.0, 60.0)]
    jobs += [(14.0, 1.0, 60.0), (15.0, 1.0, None)]  # these two wait in the gate (C=2)
    [result] = simulate_provider([Client("a", jobs, 2, 10)], provider)
    # Two wait at the provider for ever, and one in the gate with no deadline; one expires there.
    assert (result.on_time, result.unanswered, result.expired, counted(result)) == (1, 3, 1, 5)


@given(
    arrivals=st.lists(st.tuples(st.floats(0, 30), st.floats(0.01, 5), st.floats(0.1, 20)), max_size=40),
    levels=st.lists(st.tuples(st.floats(0.5, 30), st.sampled_from([0.0, 1.0, 2.0, 3.5])), max_size=4),
    overload=st.sampled_from(["refuse", "queue"]),
    rpm=st.sampled_from([None, 60.0, 600.0]),
    max_running=st.integers(1, 4),
    max_waiting=st.sampled_from([0, 2, None]),
    adaptive=st.booleans(),
    deadlines=st.booleans(),
)
def test_every_request_is_answered_or_counted_whatever_the_capacity_does(
    arrivals: list[tuple[float, float, float]],
    levels: list[tuple[float, float]],
    overload: str,
    rpm: float | None,
    max_running: int,
    max_waiting: int | None,
    adaptive: bool,
    deadlines: bool,
) -> None:
    changes = dict(levels)  # one level per time
    provider = Provider(steps(2, *changes.items()), overload=overload, rpm=rpm)
    controller = Adaptive() if adaptive else None
    client = Client("a", sorted(arrivals), max_running, max_waiting, controller, deadlines=deadlines)
    [result] = simulate_provider([client], provider)
    assert counted(result) == result.requests == len(arrivals)
    comes_back = not changes or changes[max(changes)] > 0
    if comes_back or overload == "refuse":
        assert result.unanswered == 0
