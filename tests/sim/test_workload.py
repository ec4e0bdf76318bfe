"""Generated workloads: reproducible, with the distributions they claim, and checked arguments."""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections.abc import Callable
from dataclasses import replace

import pytest

from boundedgate.sim import Bursts, Exponential, Fixed, Job, LogNormal, Poisson, Provider, generate
from boundedgate.sim._results import percentile
from boundedgate.sim._script import MAX_MS
from boundedgate.sim._workload import MAX_LOGNORMAL_P99_RATIO, MAX_REQUESTS


def test_same_seed_same_script_other_seed_other_script() -> None:
    args = (Poisson(50), LogNormal(200, 2000))
    a = generate(*args, duration_ms=10_000, budget_ms=1000, seed=1)
    assert a == generate(*args, duration_ms=10_000, budget_ms=1000, seed=1)
    assert a != generate(*args, duration_ms=10_000, budget_ms=1000, seed=2)


def test_arrivals_do_not_depend_on_the_service_distribution() -> None:
    # Each part has its own random stream: changing the service times keeps the arrival instants.
    a = generate(Poisson(50), Fixed(10), duration_ms=10_000, seed=3)
    b = generate(Poisson(50), LogNormal(100, 900), duration_ms=10_000, seed=3)
    assert [j.arrival_ms for j in a] == [j.arrival_ms for j in b]


def test_poisson_rate_and_window() -> None:
    jobs = generate(Poisson(100), Fixed(1), duration_ms=100_000, seed=0)
    assert 9_500 < len(jobs) < 10_500  # 10,000 expected; sd 100
    assert all(0 <= j.arrival_ms < 100_000 for j in jobs)
    assert [j.arrival_ms for j in jobs] == sorted(j.arrival_ms for j in jobs)
    gaps = [b.arrival_ms - a.arrival_ms for a, b in itertools.pairwise(jobs)]
    assert 9.5 < statistics.mean(gaps) < 10.5


def test_bursts() -> None:
    jobs = generate(Bursts(3, start_ms=5, every_ms=10), Fixed(1), duration_ms=30)
    assert [j.arrival_ms for j in jobs] == [5, 5, 5, 15, 15, 15, 25, 25, 25]
    assert [j.arrival_ms for j in generate(Bursts(2), Fixed(1), duration_ms=1)] == [0, 0]
    assert generate(Bursts(2, start_ms=50), Fixed(1), duration_ms=50) == []


def test_merged_arrivals_keep_the_order_given_at_one_instant() -> None:
    jobs = generate(
        [Bursts(2, start_ms=0), Bursts(1, start_ms=0), Bursts(1, start_ms=0, every_ms=7)],
        Fixed(5),
        duration_ms=10,
        seed=0,
    )
    assert [(j.id, j.arrival_ms) for j in jobs] == [("r1", 0), ("r2", 0), ("r3", 0), ("r4", 0), ("r5", 7)]


def test_ids_are_unique_and_sort_in_arrival_order() -> None:
    jobs = generate(Poisson(20), Fixed(1), duration_ms=60_000)
    ids = [j.id for j in jobs]
    assert len(set(ids)) == len(ids) == len(jobs) > 1000
    assert ids == sorted(ids)


def test_fixed_and_exponential_service() -> None:
    assert {j.service_ms for j in generate(Poisson(10), Fixed(250.4), duration_ms=10_000)} == {250}
    times = [j.service_ms for j in generate(Poisson(200), Exponential(100), duration_ms=100_000)]
    assert 97 < statistics.mean(times) < 103
    assert min(times) >= 1


def test_lognormal_has_the_mean_and_p99_asked_for() -> None:
    service = LogNormal(mean_ms=2000, p99_ms=20_000)
    rng = random.Random(0)
    samples = sorted(service.sample(rng) for _ in range(200_000))
    assert 1950 < statistics.mean(samples) < 2050
    p99 = percentile(samples, 99)
    assert p99 is not None
    assert 19_000 < p99 < 21_000


def test_lognormal_parameters_by_formula() -> None:
    service = LogNormal(100, 400)
    z = statistics.NormalDist().inv_cdf(0.99)
    assert math.exp(service.mu + service.sigma**2 / 2) == pytest.approx(100)
    assert math.exp(service.mu + z * service.sigma) == pytest.approx(400)


def test_budgets_fixed_none_or_drawn() -> None:
    assert {j.budget_ms for j in generate(Poisson(10), Fixed(1), duration_ms=5000, budget_ms=300)} == {300}
    assert {j.budget_ms for j in generate(Poisson(10), Fixed(1), duration_ms=5000)} == {None}
    drawn = {
        j.budget_ms for j in generate(Poisson(10), Fixed(1), duration_ms=5000, budget_ms=Exponential(500))
    }
    assert len(drawn) > 10


def test_generated_jobs_are_valid_jobs() -> None:
    for job in generate(Poisson(1000), Exponential(0.1), duration_ms=1000, budget_ms=Exponential(0.1)):
        assert isinstance(job, Job)
        assert job.service_ms >= 1
        assert job.budget_ms is not None
        assert job.budget_ms >= 1


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: Poisson(0), ValueError, "rate must be a finite number > 0"),
        (lambda: Poisson(math.inf), ValueError, "rate"),
        (lambda: Poisson(True), TypeError, "rate must be a number"),
        (lambda: Bursts(0), ValueError, "size must be >= 1"),
        (lambda: Bursts(2.0), TypeError, "size must be an int"),  # type: ignore[arg-type]  # a float on purpose
        (lambda: Bursts(2, start_ms=-1), ValueError, "start_ms"),
        (lambda: Bursts(2, every_ms=0), ValueError, "every_ms must be >= 1"),
        (lambda: Bursts(2, every_ms=1.5), TypeError, "every_ms"),  # type: ignore[arg-type]  # a float on purpose
        (lambda: Fixed(0), ValueError, "ms must be"),
        (lambda: Exponential(-1), ValueError, "mean_ms"),
        (lambda: LogNormal(100, 100), ValueError, "p99 must be above its mean"),
        (lambda: LogNormal(100, 100 * MAX_LOGNORMAL_P99_RATIO + 1), ValueError, "at most 14.97 times"),
        (lambda: generate(Poisson(1), Fixed(1), duration_ms=0), ValueError, "duration_ms"),
        (
            lambda: generate(Poisson(1), Fixed(1), duration_ms=10, budget_ms=0),
            ValueError,
            "budget_ms must be >= 1",
        ),
        (lambda: generate(Poisson(1), Fixed(1), duration_ms=10, budget_ms=True), TypeError, "budget_ms"),
        (lambda: generate(Poisson(1), 5, duration_ms=10), TypeError, "service must be"),  # type: ignore[arg-type]  # not a distribution
        (lambda: generate([Poisson(1), 3], Fixed(1), duration_ms=10), TypeError, "arrivals must be"),  # type: ignore[list-item]  # not an arrival process
    ],
)
def test_bad_arguments_are_refused(make: Callable[[], object], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        make()


def test_priority_mix() -> None:
    jobs = generate(Poisson(100), Fixed(1), duration_ms=100_000, priority_mix=[1, 4])
    share = sum(j.priority == 0 for j in jobs) / len(jobs)
    assert 0.18 < share < 0.22
    assert {j.priority for j in jobs} == {0, 1}
    assert {
        j.priority for j in generate(Poisson(100), Fixed(1), duration_ms=10_000, priority_mix=[0, 0, 1])
    } == {2}
    assert {j.priority for j in generate(Poisson(100), Fixed(1), duration_ms=10_000)} == {0}
    # the mix draws from its own stream: arrivals and service times are those of the same seed without it
    plain = generate(Poisson(100), Exponential(5), duration_ms=10_000)
    mixed = generate(Poisson(100), Exponential(5), duration_ms=10_000, priority_mix=[1, 1])
    assert [(j.arrival_ms, j.service_ms) for j in plain] == [(j.arrival_ms, j.service_ms) for j in mixed]


@pytest.mark.parametrize(
    ("mix", "error"),
    [
        ([], ValueError),
        ([0, 0], ValueError),
        ([1, -1], ValueError),
        ([1, math.nan], ValueError),
        ([True], TypeError),
    ],
)
def test_bad_priority_mixes_are_refused(mix: list[float], error: type[Exception]) -> None:
    with pytest.raises(error, match="priority_mix"):
        generate(Poisson(1), Fixed(1), duration_ms=10, priority_mix=mix)


def test_key_mix_spreads_requests_over_keys_by_weight_on_its_own_stream() -> None:
    jobs = generate(
        Poisson(100), Exponential(5), duration_ms=100_000, key_mix={"acme": 3, "globex": 1}, seed=2
    )
    share = sum(j.key == "acme" for j in jobs) / len(jobs)
    assert 0.73 < share < 0.77
    assert {j.key for j in jobs} == {"acme", "globex"}
    assert jobs == generate(
        Poisson(100), Exponential(5), duration_ms=100_000, key_mix={"acme": 3, "globex": 1}, seed=2
    )
    assert jobs != generate(
        Poisson(100), Exponential(5), duration_ms=100_000, key_mix={"acme": 3, "globex": 1}, seed=3
    )
    # Only the keys change: arrivals, service times and priorities are those of the same seed without it.
    plain = generate(Poisson(100), Exponential(5), duration_ms=100_000, priority_mix=[1, 1], seed=2)
    keyed = generate(
        Poisson(100),
        Exponential(5),
        duration_ms=100_000,
        priority_mix=[1, 1],
        key_mix={"a": 1, "": 1},
        seed=2,
    )
    assert [replace(j, key="") for j in keyed] == plain
    assert {j.key for j in plain} == {""}
    assert {j.key for j in keyed} == {"a", ""}
    assert {j.key for j in generate(Poisson(100), Fixed(1), duration_ms=1000, key_mix={"x": 0, "y": 2})} == {
        "y"
    }


@pytest.mark.parametrize(
    ("mix", "error", "message"),
    [
        ({}, ValueError, "key_mix needs a weight per key"),
        ({"a": 0}, ValueError, "key_mix must give some key a weight > 0"),
        ({"a": -1}, ValueError, "key_mix weights must be finite and >= 0"),
        ({"a": True}, TypeError, "key_mix weights must be numbers"),
        ({3: 1}, TypeError, "key_mix's keys must be strings, got 3"),
        (["a", "b"], TypeError, "key_mix must be a mapping from key to weight"),
    ],
)
def test_bad_key_mixes_are_refused(mix: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        generate(Poisson(1), Fixed(1), duration_ms=10, key_mix=mix)  # type: ignore[arg-type]


def test_costs_fixed_or_drawn_in_whole_tokens_on_their_own_streams() -> None:
    plain = generate(Poisson(20), Fixed(100), duration_ms=60_000, seed=4)
    fixed = generate(Poisson(20), Fixed(100), duration_ms=60_000, cost=2000, seed=4)
    assert [j.cost for j in plain] == [0] * len(plain)
    assert [j.actual_cost for j in plain] == [None] * len(plain)
    assert [j.cost for j in fixed] == [2000] * len(fixed)
    drawn = generate(
        Poisson(20),
        Fixed(100),
        duration_ms=60_000,
        cost=4000,
        actual_cost=LogNormal(1200, 6000),
        seed=4,
    )
    # The arrivals and service times do not move when costs are added.
    assert [(j.arrival_ms, j.service_ms) for j in drawn] == [(j.arrival_ms, j.service_ms) for j in plain]
    actual: list[object] = [j.actual_cost for j in drawn]
    settled = [a for a in actual if type(a) is int and a >= 0]
    assert settled == actual
    assert 1100 < statistics.mean(settled) < 1300
    assert drawn == generate(
        Poisson(20), Fixed(100), duration_ms=60_000, cost=4000, actual_cost=LogNormal(1200, 6000), seed=4
    )
    exponential = generate(Poisson(20), Fixed(100), duration_ms=60_000, cost=Exponential(500), seed=4)
    assert 450 < statistics.mean(j.cost for j in exponential) < 550


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"cost": -1}, ValueError),
        ({"cost": math.inf}, ValueError),
        ({"cost": True}, TypeError),
        ({"actual_cost": "1k"}, TypeError),
    ],
)
def test_bad_costs_are_refused(kwargs: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error, match="cost"):
        generate(Poisson(1), Fixed(1), duration_ms=10, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("arrivals", "message"),
    [
        (Poisson(1e9), r"^Poisson\(rate=1e\+09\) for 600000 ms would make about 600,000,000,000 requests"),
        (Bursts(10**9), r"^Bursts\(size=1000000000\) for 600000 ms would make 1,000,000,000 requests"),
        (Bursts(2, every_ms=1), r"^Bursts\(size=2, every_ms=1\) for 600000 ms would make 1,200,000 requests"),
        (
            [Poisson(1000), Bursts(1000, every_ms=1000)],
            r"^these arrivals for 600000 ms would make about 1,200,000 requests",
        ),
    ],
)
def test_a_workload_too_large_to_simulate_is_refused_before_anything_is_drawn(
    arrivals: Poisson | Bursts | list[Poisson | Bursts], message: str
) -> None:
    with pytest.raises(ValueError, match=message + r"; a workload makes at most 1,000,000"):
        generate(arrivals, Fixed(1), duration_ms=600_000)
    if not isinstance(arrivals, list):  # each of the two alone makes fewer
        with pytest.raises(ValueError, match=message):
            arrivals.times(600_000, random.Random(0))
    assert MAX_REQUESTS == 1_000_000


def test_a_workload_at_the_bound_is_generated() -> None:
    jobs = generate(Bursts(1000, every_ms=1), Fixed(1), duration_ms=1000)
    assert len(jobs) == MAX_REQUESTS


def test_a_workload_counts_its_arrivals_without_listing_them() -> None:
    assert Bursts(3, start_ms=10, every_ms=7).expected(10**15) == 3 * -(-(10**15 - 10) // 7)
    assert Bursts(3, start_ms=10).expected(11) == 3
    assert Bursts(3, start_ms=10).expected(10) == 0
    assert Poisson(20).expected(60_000) == 1200


def test_a_far_tail_is_cut_at_the_latest_time_a_script_may_hold() -> None:
    jobs = generate(Poisson(1), Exponential(10**15), duration_ms=100_000, budget_ms=Exponential(10**15))
    assert max(job.service_ms for job in jobs) == MAX_MS
    with pytest.raises(ValueError, match=r"^ms must be at most 1e\+15, got 1e\+16$"):
        Fixed(1e16)
    with pytest.raises(ValueError, match=r"^duration_ms must be an int >= 1 and <= 1000000000000000"):
        generate(Poisson(1), Fixed(1), duration_ms=10**15 + 1)


def test_sized_traffic_draws_prompt_and_output_tokens_on_streams_of_their_own() -> None:
    arrivals = Poisson(20)
    plain = generate(arrivals, LogNormal(300, 1500), duration_ms=60_000, budget_ms=5000, seed=4)
    prompts, outputs = LogNormal(1500, 12_000), LogNormal(250, 1200)
    sized = generate(
        arrivals,
        None,
        prompt_tokens=prompts,
        output_tokens=outputs,
        duration_ms=60_000,
        budget_ms=5000,
        seed=4,
    )
    assert [j.arrival_ms for j in sized] == [j.arrival_ms for j in plain]  # the same instants
    assert all(j.prompt_tokens is not None and j.output_tokens is not None for j in sized)
    assert all(j.prompt_tokens is None and j.output_tokens is None for j in plain)
    speeds = Provider(1)
    for job in sized:
        assert job.prompt_tokens is not None
        assert job.output_tokens is not None
        expected = 1000 * speeds.service_seconds(job.prompt_tokens, job.output_tokens)
        assert job.service_ms == max(1, round(expected))  # what a provider of the default speeds takes
    assert statistics.mean(j.prompt_tokens or 0 for j in sized) == pytest.approx(1500, rel=0.1)
    assert statistics.mean(j.output_tokens or 0 for j in sized) == pytest.approx(250, rel=0.1)
    shorter = generate(
        arrivals, None, prompt_tokens=Fixed(10), output_tokens=outputs, duration_ms=60_000, seed=4
    )
    assert [j.output_tokens for j in shorter] == [j.output_tokens for j in sized]  # its own stream
    fast = Provider(1, overhead_seconds=0.02, prefill_tokens_per_second=50_000, decode_tokens_per_second=400)
    faster = generate(
        arrivals, None, prompt_tokens=prompts, output_tokens=outputs, speeds=fast, duration_ms=60_000, seed=4
    )
    assert [(j.prompt_tokens, j.output_tokens) for j in faster] == [
        (j.prompt_tokens, j.output_tokens) for j in sized
    ]
    for job in faster:
        assert job.prompt_tokens is not None
        assert job.output_tokens is not None
        assert job.service_ms == max(
            1, round(1000 * fast.service_seconds(job.prompt_tokens, job.output_tokens))
        )


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({}, ValueError, "give service .*or both prompt_tokens and output_tokens"),
        ({"prompt_tokens": Fixed(10)}, ValueError, "or both prompt_tokens and output_tokens"),
        (
            {"service": Fixed(10), "prompt_tokens": Fixed(1), "output_tokens": Fixed(1)},
            ValueError,
            "not both",
        ),
        ({"prompt_tokens": 10, "output_tokens": Fixed(1)}, TypeError, "prompt_tokens must be None or"),
    ],
)
def test_sized_traffic_takes_the_sizes_or_a_service_time(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    service = kwargs.pop("service", None)
    with pytest.raises(error, match=message):
        generate(Poisson(5), service, duration_ms=1000, **kwargs)  # type: ignore[arg-type]
