"""``Client(on_deadline="cut")``: a call still running at its deadline is cancelled then (issue 29).

What ``asyncio.timeout`` around the whole call does: the slot and the provider's capacity come free
at the deadline, the answer never comes, and the call is counted ``cut``, never ``late``.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundedgate import Adaptive
from boundedgate.sim import Client, ClientResult, Provider, Request, simulate_provider, steps
from boundedgate.sim._provider import _Call, _Sim
from tests import helpers
from tests.helpers import Result, checked_gate, run_script, run_virtual


def counted(result: ClientResult) -> int:
    """Every request's one ending."""
    return (
        result.on_time + result.late + result.cut + result.provider_refused + result.rejected
        + result.infeasible + result.expired + result.unanswered
    )  # fmt: skip


def one(client: Client, provider: Provider) -> ClientResult:
    [result] = simulate_provider([client], provider)
    return result


def test_a_call_running_at_its_deadline_is_cut_then_and_its_slot_passes_on() -> None:
    # C = 1: the first call would run 5 s with a 2 s budget; the second waits behind it.
    jobs = [(0.0, 5.0, 2.0), (1.0, 1.0, 3.0)]
    late = one(Client("late", jobs, 1, 10), Provider(10))
    # The first holds its slot to 5 s: the second expires in the queue.
    assert (late.on_time, late.late, late.cut, late.expired) == (0, 1, 0, 1)
    cut = one(Client("cut", jobs, 1, 10, on_deadline="cut"), Provider(10))
    assert (cut.on_time, cut.late, cut.cut, cut.expired) == (1, 0, 1, 0)
    assert cut.on_time_at == [3.0]  # the second started at 2 s, the first one's deadline
    assert cut.wasted_seconds == 2.0  # the provider served the first for 2 s, for nothing
    assert late.wasted_seconds == 5.0  # and the late one's whole 5 s
    assert counted(cut) == counted(late) == 2


def test_an_answer_at_the_deadline_is_cut_not_late() -> None:
    jobs = [(0.0, 2.0, 2.0)]  # its answer would come exactly at its deadline
    assert one(Client("late", jobs, 1, 0), Provider(1)).late == 1
    result = one(Client("cut", jobs, 1, 0, on_deadline="cut"), Provider(1))
    assert (result.late, result.cut, result.on_time) == (0, 1, 0)


def test_a_cut_frees_the_providers_capacity_for_another_gate_at_once() -> None:
    # K = 1 shared by two gates. A's call is cut at 2 s; B's, sent at 2.5 s, is then served.
    a = [(0.0, 10.0, 2.0)]
    b = [(2.5, 1.0, 5.0)]
    provider = Provider(1, refuse_seconds=0.1)
    held = simulate_provider([Client("a", a, 1, 0), Client("b", b, 1, 0)], provider)
    assert (held[0].late, held[1].provider_refused) == (1, 1)  # A ran on to 10 s: B met a 529
    freed = simulate_provider([Client("a", a, 1, 0, on_deadline="cut"), Client("b", b, 1, 0)], provider)
    assert (freed[0].cut, freed[1].on_time, freed[1].provider_refused) == (1, 1, 0)
    assert freed[1].on_time_at == [3.5]


def test_a_call_cut_in_the_providers_own_queue_leaves_it_and_the_next_one_starts() -> None:
    # K = 1, overload="queue": the second call waits at the provider, and is cut there at 2 s;
    # the third, which queued behind it, starts as the first answers at 3 s.
    provider = Provider(1, overload="queue")
    jobs = [(0.0, 3.0, 10.0), (0.5, 1.0, 1.5), (1.0, 1.0, 10.0)]
    result = one(Client("a", jobs, 3, 0, on_deadline="cut"), provider)
    assert (result.on_time, result.cut, result.unanswered) == (2, 1, 0)
    assert result.on_time_at == [3.0, 4.0]
    assert result.wasted_seconds == 0.0  # the provider never began on it
    kept = one(Client("a", jobs, 3, 0), provider)
    assert kept.on_time_at == [3.0, 5.0]  # served late (3 s to 4 s), the third waited for it
    assert kept.late == 1


def test_a_call_cut_while_its_529_is_on_the_way_is_cut_not_refused() -> None:
    provider = Provider(0, refuse_seconds=1.0)  # an outage: every call gets a 529 after 1 s
    result = one(Client("a", [(0.0, 1.0, 0.5), (0.0, 1.0, 2.0)], 2, 0, on_deadline="cut"), provider)
    assert (result.cut, result.provider_refused) == (1, 1)


def test_a_cut_feeds_the_adaptive_controller_no_latency_sample() -> None:
    # Every call is cut: nothing ran to an answer, so the controller never closes a window.
    jobs = [(i * 0.1, 10.0, 1.0) for i in range(200)]
    result = one(Client("a", jobs, 4, None, adaptive=Adaptive(), on_deadline="cut"), Provider(100))
    assert result.cut > 0
    assert result.late == result.on_time == 0
    assert result.limits == [(0.0, 4)]


def test_cut_with_a_gate_that_knows_no_deadline_cuts_a_call_started_after_it_at_once() -> None:
    # deadlines=False: the gate lets the second call wait past its deadline; the timeout around the
    # call (not around the wait) then cuts it the moment it starts.
    jobs = [(0.0, 3.0, 5.0), (0.0, 1.0, 2.0)]
    result = one(Client("a", jobs, 1, None, deadlines=False, on_deadline="cut"), Provider(1))
    assert (result.on_time, result.cut, result.expired) == (1, 1, 0)


def test_an_unknown_on_deadline_is_refused_naming_both_choices() -> None:
    with pytest.raises(ValueError, match=r"'late'.*'cut'"):
        Client("a", [], 1, 0, on_deadline="cancel")


class _Watched(_Sim):
    """The simulation, checking as it goes that the provider never starts a call beyond K."""

    def serve(self, call: _Call, sent: float, now: float) -> None:
        assert self.active < self.provider.k(now), (self.active, now)
        super().serve(call, sent, now)

    def cut(self, call: _Call, now: float) -> None:
        super().cut(call, now)
        assert self.active >= 0


requests = st.lists(
    st.tuples(st.floats(0, 30), st.floats(0.01, 5), st.one_of(st.none(), st.floats(0.1, 8))), max_size=40
)


@given(
    traffics=st.lists(requests, min_size=1, max_size=3),
    levels=st.lists(st.tuples(st.floats(0.5, 30), st.sampled_from([0.0, 1.0, 2.0, 3.5])), max_size=4),
    overload=st.sampled_from(["refuse", "queue"]),
    rpm=st.sampled_from([None, 60.0, 600.0]),
    max_running=st.integers(1, 4),
    max_waiting=st.sampled_from([0, 2, None]),
    adaptive=st.booleans(),
    feasible=st.booleans(),
    deadlines=st.booleans(),
    on_deadline=st.sampled_from(["late", "cut"]),
)
def test_every_request_ends_once_the_provider_never_starts_beyond_K_and_a_cut_is_never_late(
    traffics: list[list[tuple[float, float, float | None]]],
    levels: list[tuple[float, float]],
    overload: str,
    rpm: float | None,
    max_running: int,
    max_waiting: int | None,
    adaptive: bool,
    feasible: bool,
    deadlines: bool,
    on_deadline: str,
) -> None:
    provider = Provider(steps(2, *dict(levels).items()), overload=overload, rpm=rpm)
    controller = Adaptive() if adaptive else None
    settings = (max_running, max_waiting, controller, feasible, deadlines, on_deadline)
    clients = [Client(f"c{index}", jobs, *settings) for index, jobs in enumerate(traffics)]
    sim = _Watched(clients, provider)
    results = sim.run()
    assert sim.active == 0  # every call the provider began, it answered or was cut from
    for result, jobs in zip(results, traffics, strict=True):
        assert counted(result) == result.requests == len(jobs)
        assert len(result.on_time_at) == result.on_time
        assert result.wasted_seconds >= 0
        if on_deadline == "cut":
            assert result.late == 0
        else:
            assert result.cut == 0


@given(
    sizes=st.lists(
        st.tuples(st.floats(0, 20), st.integers(0, 20_000), st.integers(0, 400), st.floats(0.5, 20)),
        max_size=30,
    ),
    capacity=st.sampled_from([1.0, 3.0, 8.0]),
    overload=st.sampled_from(["refuse", "queue"]),
)
def test_sized_requests_cut_or_not_end_once_and_are_never_late_when_cut(
    sizes: list[tuple[float, int, int, float]], capacity: float, overload: str
) -> None:
    jobs = [Request(t, None, budget, prompt, output) for t, prompt, output, budget in sorted(sizes)]
    provider = Provider(capacity, overload=overload)
    for on_deadline in ("late", "cut"):
        sim = _Watched([Client("a", jobs, 4, 4, on_deadline=on_deadline)], provider)
        [result] = sim.run()
        assert counted(result) == len(jobs)
        assert sim.active == 0
        if on_deadline == "cut":
            assert result.late == 0


# -- the real gate, call for call ------------------------------------------------------------------


@st.composite
def scripts(draw: st.DrawFn) -> list[helpers.Job]:
    """Whole-second scripts, each arrival off the grid by its job's own 64th of a second.

    The provider's simulator takes the arrivals of an instant before the endings of that instant,
    where the real gate's harness (and ``simulate()``) takes the endings first; the offsets, exact
    in binary, keep the instants of different requests' chains apart, so ties never arise.
    """
    count = draw(st.integers(1, 14))
    return [
        helpers.Job(
            f"J{i}",
            draw(st.integers(0, 30)) + (i + 1) / 64,  # type: ignore[arg-type]  # a float, as it can be
            draw(st.integers(1, 20)),
            draw(st.none() | st.integers(1, 40)),
        )
        for i in range(count)
    ]


def simulated_calls(jobs: list[helpers.Job], client: Client) -> tuple[dict[str, Result], ClientResult, int]:
    """Each job's outcome, start and end through the simulator, its client's result, its gate's cuts."""
    sim = _Sim([client], Provider(10**6))  # a provider that never refuses: each call takes its service
    calls: list[_Call] = [payload for _, _, kind, payload in sorted(sim.events, key=lambda e: e[1])]  # type: ignore[misc]
    [result] = sim.run()
    return (
        {
            job.id: Result(call.status.value, call.started, call.ended)
            for job, call in zip(jobs, calls, strict=True)
        },
        result,
        sim.states[0].cut,
    )


@given(jobs=scripts(), limits=st.tuples(st.integers(1, 4), st.none() | st.integers(0, 4)))
def test_the_real_gate_cuts_as_the_simulator_does_call_for_call(
    jobs: list[helpers.Job], limits: tuple[int, int | None]
) -> None:
    # The simulator's Client(on_deadline="cut") and BoundedGate.admit(on_deadline="cut") on virtual
    # time: the same outcome, start and end for every request, and the same count of cuts.
    gate = checked_gate(*limits)
    real = run_virtual(run_script, gate, jobs, lambda job: gate.admit(timeout=job.budget, on_deadline="cut"))
    client = Client("a", [(j.arrival, j.service, j.budget) for j in jobs], *limits, on_deadline="cut")
    simulated, result, cut = simulated_calls(jobs, client)
    assert simulated == real
    assert result.cut == cut == gate.stats().cut
    assert result.late == gate.stats().late == 0
    assert (result.on_time, result.expired, result.rejected) == (
        gate.stats().completed,
        gate.stats().expired,
        gate.stats().rejected,
    )


@given(jobs=scripts(), limits=st.tuples(st.integers(1, 4), st.none() | st.integers(0, 4)))
def test_the_real_gate_runs_late_as_the_simulator_does_call_for_call(
    jobs: list[helpers.Job], limits: tuple[int, int | None]
) -> None:
    # The default, on_deadline="late", through the same harness.
    gate = checked_gate(*limits)
    real = run_virtual(run_script, gate, jobs)
    client = Client("a", [(j.arrival, j.service, j.budget) for j in jobs], *limits)
    simulated, result, _ = simulated_calls(jobs, client)
    assert simulated == real
    assert (result.late, result.cut) == (gate.stats().late, 0)
