"""compare_admission: every way of admitting on the same traffic, against the same provider."""

from __future__ import annotations

import json

import pytest

from boundedgate import Adaptive
from boundedgate._cli._compare import in_seconds
from boundedgate.sim import (
    Bursts,
    Client,
    ClientResult,
    LogNormal,
    Poisson,
    Provider,
    Request,
    compare_admission,
    generate,
    simulate_provider,
    steps,
)
from boundedgate.sim._compare import running_grid, waiting_grid

NAMES = [
    "semaphore",
    "semaphore+timeout",
    "gate Q=30",
    "best static",
    "adaptive Q=30",
    "feasible",
    "adaptive+feasible",
    "recommended",
]


def traffic() -> list[tuple[float, float, float | None] | Request]:
    jobs = generate(
        [Poisson(rate=40), Bursts(150, start_ms=6_000)],
        LogNormal(mean_ms=300, p99_ms=1500),
        budget_ms=2500,
        duration_ms=16_000,
        seed=3,
    )
    return in_seconds(jobs)


PROVIDER = Provider(steps(20, (5.0, 10), (11.0, 20)), overload="queue")


def test_the_grids_for_K_20_are_the_benchmarks() -> None:
    assert running_grid(20) == [8, 10, 12, 14, 16, 18, 20, 22, 25, 30]
    assert waiting_grid(20) == [0, 10, 20, 40, 60, 100, 150, 200, None]
    assert running_grid(2, given=7) == [1, 2, 3, 7]
    assert waiting_grid(2, given=3) == [0, 1, 2, 3, 4, 6, 10, 15, 20, None]


def test_every_contender_on_the_same_traffic_in_order() -> None:
    jobs = traffic()
    seen: list[tuple[int, int]] = []
    comparison = compare_admission(
        jobs,
        PROVIDER,
        max_running=20,
        max_waiting=30,
        progress=lambda done, total: seen.append((done, total)),
    )
    assert [c.name for c in comparison.contenders] == NAMES
    total = len(comparison.tried) + 7
    assert seen == [(n, total) for n in range(total + 1)]
    assert comparison.tried == tuple((c, q) for c in running_grid(20) for q in waiting_grid(20, 30))
    for contender in comparison.contenders:
        assert contender.result.requests == len(jobs)
        r = contender.result
        ends = r.on_time + r.late + r.cut + r.provider_refused + r.rejected + r.infeasible + r.expired
        assert ends == len(jobs)
        assert len(r.on_time_at) == r.on_time
        assert r.on_time_at == sorted(r.on_time_at)
    # Each is what the simulator gives the same client alone.
    gate = comparison["gate Q=30"]
    [alone] = simulate_provider([Client("g", jobs, 20, 30)], PROVIDER)
    assert (gate.result.on_time, gate.result.late, gate.result.rejected) == (
        alone.on_time,
        alone.late,
        alone.rejected,
    )
    semaphore = comparison["semaphore"].result
    assert semaphore.expired == semaphore.rejected == 0  # no deadline, no bound
    timeout = comparison["semaphore+timeout"]
    assert timeout.result.expired > 0  # its wait in the queue ends at the deadline...
    assert timeout.result.cut > 0  # ...and so does its run: asyncio.timeout around the whole call
    assert timeout.result.late == 0
    assert timeout.on_deadline == "cut"
    assert timeout.to_dict()["on_deadline"] == "cut"
    recommended = comparison["recommended"]
    assert (recommended.adaptive, recommended.feasible, recommended.max_waiting) == (
        Adaptive(ceiling=20),
        True,
        None,
    )
    assert recommended.on_deadline == "cut"
    assert recommended.result.late == 0
    assert all(c.on_deadline == "late" for c in comparison.contenders if c not in (timeout, recommended))
    assert comparison["feasible"].result.infeasible > 0
    assert len(comparison["adaptive Q=30"].result.limits) > 1  # C moved with K
    best = comparison.best
    assert comparison["best static"] is best
    assert comparison.ratio(best) == 1.0
    for c, q in comparison.tried:  # no static setting tried answers more on time
        [static] = simulate_provider([Client("s", jobs, c, q)], PROVIDER)
        assert static.on_time <= best.result.on_time
    assert (best.max_running, best.max_waiting) in comparison.tried


def test_the_recommended_gate_never_probes_above_C_where_the_adaptive_one_does() -> None:
    # The provider serves exactly C: the adaptive gate grows past it on clean windows and each probe
    # costs a 529; the recommended one's C is at most the C it was given, and it passes none on.
    comparison = compare_admission(traffic(), Provider(20), max_running=20, max_waiting=30)
    adaptive, recommended = comparison["adaptive Q=30"].result, comparison["recommended"].result
    assert max(c for _, c in adaptive.limits) > 20
    assert adaptive.provider_refused > 0
    assert max(c for _, c in recommended.limits) == 20
    assert recommended.provider_refused == 0


def test_settings_the_sweep_and_several_adaptive_queues_are_the_callers() -> None:
    comparison = compare_admission(
        traffic(),
        PROVIDER,
        max_running=20,
        max_waiting=None,
        adaptive=Adaptive(floor=5, ceiling=12),
        adaptive_waiting=[10, None],
        runnings=[10, 20],
        waitings=[0, 40],
    )
    names = [c.name for c in comparison.contenders]
    assert names[2] == "gate Q=none"
    assert names[4:6] == ["adaptive Q=10", "adaptive Q=none"]
    assert comparison.tried == ((10, 0), (10, 40), (20, 0), (20, 40))
    assert comparison["recommended"].adaptive == Adaptive(floor=5, ceiling=12)  # below C already
    for name in ("adaptive Q=10", "adaptive Q=none", "adaptive+feasible", "recommended"):
        limits = [c for _, c in comparison[name].result.limits[1:]]
        assert limits
        assert all(5 <= c <= 12 for c in limits), name
    with pytest.raises(KeyError):
        comparison["adaptive"]


def test_to_dict_is_json_with_each_ratio() -> None:
    comparison = compare_admission(
        traffic(), PROVIDER, max_running=20, max_waiting=30, runnings=[20], waitings=[30]
    )
    data = json.loads(json.dumps(comparison.to_dict()))
    assert data["best_static"] == {"max_running": 20, "max_waiting": 30}
    assert data["tried"] == [[20, 30]]
    rows = {row["name"]: row for row in data["contenders"]}
    assert list(rows) == NAMES
    assert rows["best static"]["ratio"] == 1.0
    assert rows["gate Q=30"]["on_time"] == rows["best static"]["on_time"]
    assert rows["semaphore"]["mean_refusal_seconds"] is None
    assert rows["adaptive Q=30"]["adaptive"] is True
    assert rows["feasible"]["feasible"] is True
    assert rows["semaphore"]["deadlines"] is False
    assert rows["adaptive Q=30"]["limits"][0] == [0.0, 20]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_running": 0, "max_waiting": 1}, "max_running"),
        ({"max_running": 1, "max_waiting": -1}, "max_waiting"),
        ({"max_running": 1, "max_waiting": 1, "runnings": []}, "no static settings"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        compare_admission(traffic(), PROVIDER, **kwargs)  # type: ignore[arg-type]


def limit_at(result: ClientResult, when: float) -> int:
    return [c for t, c in result.limits if t <= when][-1]


def test_several_gates_share_the_provider_each_with_its_own_traffic() -> None:
    jobs = traffic()
    a, b = jobs[0::2], jobs[1::2]
    comparison = compare_admission({"a": a, "b": b}, PROVIDER, max_running=10, max_waiting=15)
    assert [c.name for c in comparison.contenders] == [name.replace("30", "15") for name in NAMES]
    counts = ("requests", "on_time", "late", "provider_refused", "rejected", "infeasible", "expired")
    for contender in comparison.contenders:
        assert [key.name for key in contender.keys] == ["a", "b"]
        total = contender.result
        assert total.requests == len(jobs)
        for count in counts:
            assert getattr(total, count) == sum(getattr(key, count) for key in contender.keys), count
        assert total.refusal_seconds == sum(key.refusal_seconds for key in contender.keys)
        assert total.on_time_at == sorted(t for key in contender.keys for t in key.on_time_at)
    # Each contender is both gates in front of the one provider at once, not each alone.
    together = simulate_provider([Client("a", a, 10, 15), Client("b", b, 10, 15)], PROVIDER)
    assert [r.on_time for r in together] == [key.on_time for key in comparison["gate Q=15"].keys]
    alone = simulate_provider([Client("a", a, 10, 15)], PROVIDER)[0]
    assert alone.on_time != comparison["gate Q=15"].keys[0].on_time
    # The best C is looked for per gate, around their share of the peak K.
    assert sorted({c for c, _ in comparison.tried}) == running_grid(10)
    # An adaptive contender's C over time is its gates' Cs summed: what the provider sees.
    adaptive = comparison["adaptive Q=15"]
    assert adaptive.result.limits[0] == (0.0, 20)
    assert len(adaptive.result.limits) > 2
    for when, c in adaptive.result.limits:
        assert c == sum(limit_at(key, when) for key in adaptive.keys)
    assert compare_admission(a, PROVIDER, max_running=10, max_waiting=15).best.keys == ()


def test_requests_the_provider_never_answered_are_counted_for_each_gate_and_in_the_total() -> None:
    # The provider goes down at 8 s for good: what waits at it, or in a gate behind it, stays
    # unanswered, and every request is counted once, in each gate and in the contender's total.
    # The semaphore with a timeout, and the recommended gate, cut what waits at the provider at its
    # deadline instead.
    jobs = traffic()
    down = Provider(steps(20, (8.0, 0)), overload="queue")
    comparison = compare_admission({"a": jobs[0::2], "b": jobs[1::2]}, down, max_running=10, max_waiting=15)
    for contender in comparison.contenders:
        total = contender.result
        assert total.cut == sum(key.cut for key in contender.keys)
        if contender.name in ("semaphore+timeout", "recommended"):
            assert total.unanswered == 0 < total.cut
        else:
            assert total.unanswered == sum(key.unanswered for key in contender.keys) > 0
        refused = ("provider_refused", "rejected", "infeasible", "expired")
        ends = ("on_time", "late", "cut", *refused, "unanswered")
        assert sum(getattr(total, end) for end in ends) == total.requests == len(jobs)
        assert contender.to_dict()["unanswered"] == total.unanswered
