"""The sweep: one script under several settings."""

from __future__ import annotations

import pytest

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
