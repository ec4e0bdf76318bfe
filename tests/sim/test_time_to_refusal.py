"""``ClientResult.refused_after``: how long each caller that got a "no" waited for it (issue 29).

A "no" from the gate (queue full, infeasible, expired), the provider's 429 or 529 passed on, and a
call cut off at its deadline each add the time from the request's arrival to that moment; an
answer, on time or late, adds nothing.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundedgate.sim import Client, ClientResult, Provider, compare_admission, simulate_provider, steps
from boundedgate.sim._results import Percentiles


def one(client: Client, provider: Provider) -> ClientResult:
    [result] = simulate_provider([client], provider)
    return result


def refusals(result: ClientResult) -> int:
    """Every ending that is a "no" to the caller."""
    return result.rejected + result.infeasible + result.expired + result.provider_refused + result.cut


def test_a_full_queue_says_no_at_once_and_an_expiry_at_the_deadline() -> None:
    # C = 1, Q = 1: the first runs 5 s, the second waits and expires at its 1.5 s budget, the
    # third is refused at arrival (0.5 s), the queue being full.
    jobs = [(0.0, 5.0, 10.0), (0.0, 1.0, 1.5), (0.5, 1.0, 3.0)]
    result = one(Client("gate", jobs, 1, 1), Provider(10))
    assert (result.on_time, result.expired, result.rejected) == (1, 1, 1)
    assert result.refused_after == [0.0, 1.5]
    assert result.time_to_refusal == Percentiles(count=2, p50=0.0, p95=1.5, p99=1.5, max=1.5)


def test_a_529_passed_on_counts_the_wait_in_the_semaphore_before_it() -> None:
    # K = 1, C = 2, no deadline in the gate: the first is served; the second is sent at once and
    # refused 0.05 s later; the third waited in the semaphore for that slot, then got its 529 too.
    jobs = [(0.0, 3.0, 10.0), (0.0, 3.0, 10.0), (0.0, 3.0, 10.0)]
    provider = Provider(1, refuse_seconds=0.05)
    result = one(Client("semaphore", jobs, 2, None, deadlines=False), provider)
    assert (result.on_time, result.provider_refused) == (1, 2)
    assert result.refused_after == pytest.approx([0.05, 0.10])


def test_a_cut_says_no_at_the_deadline_and_a_late_answer_is_no_refusal() -> None:
    jobs = [(0.0, 3.0, 1.0), (0.0, 0.5, 1.0)]
    cut = one(Client("cut", jobs, 2, None, on_deadline="cut"), Provider(10))
    assert (cut.on_time, cut.cut, cut.refused_after) == (1, 1, [1.0])
    late = one(Client("late", jobs, 2, None), Provider(10))
    assert (late.on_time, late.late, late.refused_after) == (1, 1, [])
    assert late.time_to_refusal == Percentiles(count=0, p50=None, p95=None, p99=None, max=None)


@given(
    arrivals=st.lists(st.integers(0, 40), min_size=1, max_size=40),
    services=st.lists(st.integers(1, 30), min_size=1, max_size=40),
    c=st.integers(1, 4),
    q=st.none() | st.integers(0, 4),
    on_deadline=st.sampled_from(["late", "cut"]),
    feasible=st.booleans(),
)
def test_every_no_and_only_a_no_is_timed_from_its_arrival(
    arrivals: list[int], services: list[int], c: int, q: int | None, on_deadline: str, feasible: bool
) -> None:
    jobs = [(a / 10, services[i % len(services)] / 10, 1.5) for i, a in enumerate(sorted(arrivals))]
    provider = Provider(steps(3, (1.0, 1), (2.0, 3)), refuse_seconds=0.05)
    result = one(Client("c", jobs, c, q, feasible=feasible, on_deadline=on_deadline), provider)
    assert len(result.refused_after) == refusals(result)
    # Nothing is refused before it arrives, and nothing after its deadline but a 529 (sent in time).
    assert all(0 <= waited <= 1.5 + provider.refuse_seconds + 1e-9 for waited in result.refused_after)
    gate = result.rejected + result.infeasible + result.expired
    assert result.refusal_seconds <= sum(result.refused_after) + 1e-9
    assert (result.mean_refusal_seconds is None) == (gate == 0)


def traffic() -> list[tuple[float, float, float | None]]:
    return [(i * 0.02, 0.5 + (i % 7) * 0.3, 1.5) for i in range(400)]


def test_a_comparison_sums_each_gates_refusal_times_and_writes_them_to_json() -> None:
    jobs = traffic()
    provider = Provider(steps(10, (3.0, 4), (6.0, 10)))
    comparison = compare_admission({"a": jobs[0::2], "b": jobs[1::2]}, provider, max_running=5, max_waiting=5)
    for contender in comparison.contenders:
        total = contender.result
        assert sorted(total.refused_after) == sorted(t for key in contender.keys for t in key.refused_after)
        assert len(total.refused_after) == refusals(total)
        data = json.loads(json.dumps(contender.to_dict()))
        assert data["time_to_refusal"] == total.time_to_refusal.to_dict()
    assert comparison["semaphore"].result.time_to_refusal.count > 0


def test_a_ratio_to_any_contender_by_name() -> None:
    comparison = compare_admission(
        traffic(), Provider(steps(10, (3.0, 4), (6.0, 10))), max_running=10, max_waiting=10
    )
    gate = comparison["gate Q=10"]
    timeout = comparison["semaphore+timeout"]
    assert timeout.result.on_time > 0
    assert comparison.ratio(gate, to="semaphore+timeout") == gate.result.on_time / timeout.result.on_time
    assert comparison.ratio(gate, to="best static") == comparison.ratio(gate)
    with pytest.raises(KeyError):
        comparison.ratio(gate, to="no such contender")
