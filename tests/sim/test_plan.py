"""The sweep: one script under several settings."""

from __future__ import annotations

import pytest

from boundedgate import RateLimit
from boundedgate.sim import Bursts, Fixed, Job, Poisson, ScriptError, generate, simulate, sweep


def test_a_row_per_setting_in_order_each_equal_to_its_own_simulation() -> None:
    jobs = generate([Poisson(30), Bursts(40, start_ms=2000)], Fixed(200), duration_ms=5000, budget_ms=600)
    rows = sweep(jobs, max_running=[2, 4], max_waiting=[0, 5, None])
    assert [(r.max_running, r.max_waiting) for r in rows] == [
        (2, 0),
        (2, 5),
        (2, None),
        (4, 0),
        (4, 5),
        (4, None),
    ]
    for row in rows:
        assert row.summary == simulate(jobs, max_running=row.max_running, max_waiting=row.max_waiting).summary


def test_more_waiting_room_rejects_fewer() -> None:
    jobs = generate(Poisson(30), Fixed(200), duration_ms=20_000, budget_ms=1000)
    rejected = [r.summary.rejected for r in sweep(jobs, max_running=4, max_waiting=[0, 2, 10, 50, None])]
    assert rejected == sorted(rejected, reverse=True)
    assert rejected[0] > 0
    assert rejected[-1] == 0


def test_single_values() -> None:
    rows = sweep([Job("a", 0, 1)], max_running=1, max_waiting=None)
    assert [(r.max_running, r.max_waiting) for r in rows] == [(1, None)]


def test_progress_is_reported() -> None:
    calls: list[tuple[int, int]] = []
    sweep([Job("a", 0, 1)], max_running=[1, 2], max_waiting=[0, 1], progress=lambda *a: calls.append(a))
    assert calls == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)]


def test_every_setting_is_checked_before_the_first_simulation() -> None:
    calls: list[tuple[int, int]] = []
    with pytest.raises(ValueError, match="max_waiting must be >= 0"):
        sweep([Job("a", 0, 1)], max_running=1, max_waiting=[0, 1, -1], progress=lambda *a: calls.append(a))
    assert calls == []
    with pytest.raises(TypeError):
        sweep([Job("a", 0, 1)], max_running=[1, True], max_waiting=0)
    with pytest.raises(ValueError, match="no settings"):
        sweep([Job("a", 0, 1)], max_running=[], max_waiting=0)


def test_priorities_apply_to_every_setting() -> None:
    jobs = generate(Poisson(30), Fixed(200), duration_ms=10_000, budget_ms=1000, priority_mix=[1, 3])
    rows = sweep(jobs, max_running=4, max_waiting=[2, 10], priorities=2, jump_share=0.5)
    for row in rows:
        expected = simulate(jobs, max_running=4, max_waiting=row.max_waiting, priorities=2, jump_share=0.5)
        assert row.summary == expected.summary
    assert sum(row.summary.evicted for row in rows) > 0
    with pytest.raises(ScriptError, match="priority 1 is not one of the gate's 1 classes"):
        sweep(jobs, max_running=4, max_waiting=2)


def test_rate_limit_sets_vary_fastest_each_row_equal_to_its_own_simulation() -> None:
    jobs = generate(Poisson(4), Fixed(500), duration_ms=60_000, budget_ms=5_000, cost=1000)
    rpm = [RateLimit.per_minute(n, burst=5, name=f"{n} rpm") for n in (120, 300)]
    rows = sweep(jobs, max_running=[2, None], max_waiting=10, rate_limits=[[], [rpm[0]], [rpm[1]]])
    assert [(r.max_running, r.rate_limits) for r in rows] == [
        (2, ()),
        (2, (rpm[0],)),
        (2, (rpm[1],)),
        (None, ()),
        (None, (rpm[0],)),
        (None, (rpm[1],)),
    ]
    for row in rows:
        expected = simulate(
            jobs, max_running=row.max_running, max_waiting=row.max_waiting, rate_limits=row.rate_limits
        )
        assert row.summary == expected.summary
    # 240 requests a minute arrive: 300 a minute lets them all through; at 120 a minute those whose
    # token could not come within their 5 s budget behind the queue are refused at once, so none
    # waits in vain and the queue (10 places, as many as 5 s of tokens) never fills.
    on_time = [r.summary.completed for r in rows[3:]]
    assert on_time[0] == on_time[2] == len(jobs) > on_time[1]
    summary = rows[4].summary
    assert summary.rate_limited > 0
    assert (summary.expired, summary.rejected) == (0, 0)


def test_one_set_of_rate_limits_applies_to_every_setting() -> None:
    jobs = [Job(f"r{i}", 0, 10) for i in range(3)]
    rpm = RateLimit.per_minute(60, burst=1)
    rows = sweep(jobs, max_running=1, max_waiting=[0, 5], rate_limits=[rpm])
    assert [r.rate_limits for r in rows] == [(rpm,), (rpm,)]
    assert rows[1].summary.queue_ms.max == 2000


def test_rate_limit_sets_are_checked_before_the_first_simulation() -> None:
    calls: list[tuple[int, int]] = []
    jobs = [Job("a", 0, 1, None, 0, 50)]
    tpm = RateLimit.per_minute(600, burst=40, unit="tokens", name="tpm")
    with pytest.raises(ScriptError, match=r"cost 50 exceeds the burst of rate limit 'tpm'"):
        sweep(
            jobs, max_running=1, max_waiting=0, rate_limits=[[], [tpm]], progress=lambda *a: calls.append(a)
        )
    assert calls == []
    with pytest.raises(TypeError, match="a list of RateLimit objects"):
        sweep(jobs, max_running=1, max_waiting=0, rate_limits=tpm)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must hold RateLimit objects"):
        sweep(jobs, max_running=1, max_waiting=0, rate_limits=[[tpm], [60]])  # type: ignore[arg-type]  # 60 is not a RateLimit, on purpose
