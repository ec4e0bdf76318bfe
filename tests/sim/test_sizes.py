"""Requests with their sizes: the provider derives time to first token and service from them (issue 29)."""

from __future__ import annotations

import pytest

from boundedgate import Adaptive
from boundedgate._cli._compare import in_seconds
from boundedgate.sim import Client, Job, Provider, Request, simulate_provider
from boundedgate.sim._provider import _Call, _Sim


class _Latencies(_Sim):
    """The simulation, keeping the latency each answer gives the adaptive controller."""

    def __init__(self, clients: list[Client], provider: Provider) -> None:
        super().__init__(clients, provider)
        self.latencies: list[float] = []

    def answered(self, call: _Call, ok: bool, signal: str | None, extra: float, now: float) -> None:
        if ok and not call.ended:
            self.latencies.append(extra)
        super().answered(call, ok, signal, extra, now)


def test_a_sized_request_is_served_for_what_its_sizes_take_at_the_providers_speeds() -> None:
    provider = Provider(
        10, overhead_seconds=0.25, prefill_tokens_per_second=4000, decode_tokens_per_second=50
    )
    assert provider.first_token_seconds(2000) == 0.75
    assert provider.service_seconds(2000, 100) == 2.75
    sim = _Latencies([Client("a", [Request(1.0, None, 10.0, 2000, 100)], 1, 0, Adaptive())], provider)
    [result] = sim.run()
    assert result.on_time_at == [3.75]
    assert sim.latencies == [0.75]  # the first token: the prompt explains it, the answer's length does not


def test_the_latency_signal_of_a_sized_request_does_not_grow_with_its_output() -> None:
    provider = Provider(10)
    short, long = Request(0.0, None, 100.0, 1000, 10), Request(0.0, None, 100.0, 1000, 2000)
    sim = _Latencies([Client("a", [short, long], 2, 0, Adaptive())], provider)
    sim.run()
    assert sim.latencies == [0.4, 0.4]  # 0.2 s + 1000 / 5000
    unsized = _Latencies([Client("a", [(0.0, 0.45, 100.0), (0.0, 50.2, 100.0)], 2, 0, Adaptive())], provider)
    unsized.run()
    assert unsized.latencies == pytest.approx([0.045, 5.02])  # a share of service: output length shows


def test_a_wait_in_the_providers_own_queue_adds_to_the_first_token() -> None:
    provider = Provider(1, overload="queue")
    jobs = [Request(0.0, None, None, 0, 40), Request(0.0, None, None, 0, 40)]  # 1.2 s each
    sim = _Latencies([Client("a", jobs, 2, 0, Adaptive())], provider)
    [result] = sim.run()
    assert result.on_time_at == pytest.approx([1.2, 2.4])
    assert sim.latencies == pytest.approx([0.2, 1.4])  # the second waited 1.2 s at the provider


def test_a_request_without_sizes_is_the_tuple_it_replaces() -> None:
    jobs = [(0.0, 1.0, 2.0), (0.1, 3.0, 2.0), (0.2, 0.5, None)]
    records = [Request(*job) for job in jobs]
    provider = Provider(1, overload="queue")
    assert (
        simulate_provider([Client("t", jobs, 2, 2)], provider)[0]
        == simulate_provider([Client("t", records, 2, 2)], provider)[0]
    )


def test_with_both_sizes_the_service_given_is_not_what_the_provider_takes() -> None:
    provider = Provider(1)
    [result] = simulate_provider([Client("a", [Request(0.0, 99.0, None, 0, 40)], 1, 0)], provider)
    assert result.on_time_at == [1.2]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "service time, or both its prompt_tokens and output_tokens"),
        ({"prompt_tokens": 10}, "service time, or both"),
        ({"service": 1.0, "output_tokens": -1}, "output_tokens must be >= 0"),
    ],
)
def test_a_request_needs_a_service_time_or_both_sizes(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Request(0.0, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"prefill_tokens_per_second": 0}, "prefill_tokens_per_second must be a finite number > 0"),
        ({"decode_tokens_per_second": float("inf")}, "decode_tokens_per_second must be a finite number > 0"),
        ({"overhead_seconds": -0.1}, "overhead_seconds must be a finite number >= 0"),
    ],
)
def test_a_providers_speeds_are_checked(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Provider(1, **fields)  # type: ignore[arg-type]


def test_a_scripts_sized_jobs_become_sized_requests_and_the_others_stay_tuples() -> None:
    jobs = [Job("A", 1000, 500, 2000, prompt_tokens=300, output_tokens=20), Job("B", 0, 500, 2000)]
    jobs.append(Job("C", 0, 500, prompt_tokens=300))  # one size alone: its service time is used
    assert in_seconds(jobs) == [Request(1.0, 0.5, 2.0, 300, 20), (0.0, 0.5, 2.0), (0.0, 0.5, None)]
