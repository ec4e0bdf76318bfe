"""`make demo`'s showcase, run in virtual time: its conclusions hold, whatever the machine's speed."""

from __future__ import annotations

import runpy
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import looptime
import pytest

from boundedgate.sim import simulate

ROOT = Path(__file__).resolve().parent.parent

# The module's fixtures run the showcase once for all its tests: on one worker of pytest-xdist.
pytestmark = pytest.mark.xdist_group("showcase")


def run_virtual(coro_fn: Callable[..., Coroutine[Any, Any, Any]], *args: object) -> Any:
    # No I/O here, so time may jump at the first idle turn, rather than after looptime's default of
    # 42 idle turns (which costs the demo's thousands of distinct instants a minute of CPU).
    loop = looptime.new_event_loop(start=0, noop_cycles=1)
    try:
        return loop.run_until_complete(coro_fn(*args))
    finally:
        loop.close()


@pytest.fixture(scope="module")
def showcase() -> dict[str, Any]:
    return runpy.run_path(str(ROOT / "examples" / "llm_burst.py"), run_name="llm_burst")


@pytest.fixture(scope="module")
def runs(showcase: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    semaphore, careful, gate, jobs = run_virtual(showcase["compare"], 0, False)
    return semaphore, careful, gate, jobs


def test_every_call_ends_in_one_outcome(runs: tuple[Any, Any, Any, Any]) -> None:
    semaphore, careful, gate, jobs = runs
    assert len(jobs) > 500
    for run in (semaphore, careful, gate):
        assert sum(run.outcomes.values()) == len(jobs)
    assert set(semaphore.outcomes) <= {"on time", "late"}
    assert set(careful.outcomes) <= {"on time", "expired", "cut off"}


def test_both_respect_the_providers_limit(runs: tuple[Any, Any, Any, Any], showcase: dict[str, Any]) -> None:
    *every, _ = runs
    for run in every:
        assert run.provider_peak == showcase["PROVIDER_LIMIT"]
        assert run.provider_refused == 0


def test_the_gate_answers_within_the_budget_and_bounds_its_queue(
    runs: tuple[Any, Any, Any, Any], showcase: dict[str, Any]
) -> None:
    _, _, gate, _ = runs
    assert gate.p(99) <= showcase["BUDGET"]
    assert gate.outcomes["late"] <= 0.01 * (gate.outcomes["on time"] + gate.outcomes["late"])
    assert gate.peak_waiting == showcase["MAX_WAITING"]
    assert gate.outcomes["rejected"] > 0
    assert max(gate.refusal_seconds) <= showcase["BUDGET"]  # refused at once or at the deadline


def test_the_semaphore_piles_up_waiters_and_answers_late(
    runs: tuple[Any, Any, Any, Any], showcase: dict[str, Any]
) -> None:
    semaphore, _, gate, jobs = runs
    assert semaphore.peak_waiting > 5 * showcase["MAX_WAITING"]
    assert semaphore.outcomes["late"] > len(jobs) / 2
    assert semaphore.p(99) > 2 * showcase["BUDGET"]
    assert semaphore.peak_memory > 2 * gate.peak_memory


def test_more_callers_get_a_timely_answer_through_the_gate(runs: tuple[Any, Any, Any, Any]) -> None:
    semaphore, _, gate, _ = runs
    assert gate.outcomes["on time"] > 1.2 * semaphore.outcomes["on time"]


def test_the_careful_semaphore_bounds_every_wait_but_not_the_queue_and_fails_slowly(
    runs: tuple[Any, Any, Any, Any], showcase: dict[str, Any]
) -> None:
    _, careful, gate, _ = runs
    budget = showcase["BUDGET"]
    assert careful.p(99) <= budget  # nobody waits past the budget: the timeout cuts them
    assert careful.outcomes["expired"] > 0
    assert careful.outcomes["cut off"] > 0  # ...some of them after the provider had started
    assert careful.wasted > 0
    assert gate.wasted < careful.wasted  # only its few late answers: a long answer cannot be in time
    assert min(careful.refusal_seconds) >= budget - 1e-6  # each failure took the whole budget
    assert max(gate.refusal_seconds, default=0.0) < 0.1 * budget
    assert careful.peak_waiting > 5 * showcase["MAX_WAITING"]
    assert careful.peak_memory > 2 * gate.peak_memory


def test_the_simulator_predicts_the_gates_run(
    runs: tuple[Any, Any, Any, Any], showcase: dict[str, Any]
) -> None:
    # The real run streams in chunks whose float sleeps add up to the service time only to within
    # rounding, so an answer can end a hair either side of an instant the script says is exact.
    _, _, gate, jobs = runs
    predicted = simulate(jobs, max_running=showcase["PROVIDER_LIMIT"], max_waiting=showcase["MAX_WAITING"])
    summary = predicted.summary
    for outcome, count in (
        ("on time", summary.completed),
        ("late", summary.late),
        ("rejected", summary.rejected),
    ):
        assert abs(gate.outcomes[outcome] - count) <= 0.01 * len(jobs), outcome


def test_the_report_tells_the_story(runs: tuple[Any, Any, Any, Any], showcase: dict[str, Any]) -> None:
    out = showcase["report"](*runs)
    _, careful, gate, _ = runs
    assert "asyncio.Semaphore" in out
    assert "Semaphore + timeout" in out
    assert "BoundedGate" in out
    assert "rejected at once (QueueFull)" in out
    assert "cut off mid-stream (timeout)" in out
    # The comparison with the careful semaphore says what the numbers say, whichever way they go.
    if gate.outcomes["on time"] >= careful.outcomes["on time"]:
        assert "So more callers got a timely answer through the gate" in out
    else:
        assert f"The careful semaphore answered more calls on time ({careful.outcomes['on time']} " in out
    assert "boundedgate.sim replayed the same" in out


def test_the_demo_shows_the_gates_histograms_beside_the_simulators(
    runs: tuple[Any, Any, Any, Any], showcase: dict[str, Any]
) -> None:
    *_, gate, jobs = runs
    assert len(gate.records) == len(jobs)  # the observer was told of every call, once
    text = showcase["report"](*runs)
    charts = text.split("The gate's histograms")[1].split("time to outcome")
    assert "time in queue" in charts[0]
    rows = [line.split() for line in charts[1].splitlines() if line.strip().startswith(("<=", ">"))]
    assert sum(int(row[3]) for row in rows) == len(jobs)  # the real column counts every call


@pytest.fixture(scope="module")
def halving(showcase: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    runs, jobs = run_virtual(showcase["compare_halving"], 0, False)
    return runs, jobs


def test_against_the_halving_provider_every_call_ends_in_one_outcome(
    halving: tuple[list[Any], list[Any]], runs: tuple[Any, Any, Any, Any]
) -> None:
    (semaphore, careful, gate, adaptive, recommended), jobs = halving
    assert jobs == runs[3]  # the same traffic as the first table's
    for run in (semaphore, careful, gate, adaptive, recommended):
        assert sum(run.outcomes.values()) == len(jobs)
        # Each 529 reached its caller, unless the timeout cut the careful semaphore's call first.
        assert 0 < run.outcomes["529"] <= run.provider_refused
        if run is not careful and run is not recommended:
            assert run.outcomes["529"] == run.provider_refused
        assert run.provider_peak == 20  # before the capacity halved, the limit was reached
    assert set(semaphore.outcomes) <= {"on time", "late", "529"}
    assert set(careful.outcomes) <= {"on time", "expired", "cut off", "529"}
    for run in (gate, adaptive):
        assert set(run.outcomes) <= {"on time", "late", "rejected", "expired", "529"}
    assert set(recommended.outcomes) <= {"on time", "infeasible", "expired", "cut off", "529"}


def test_the_semaphores_pass_on_far_more_529s_than_the_gates(halving: tuple[list[Any], list[Any]]) -> None:
    (semaphore, careful, gate, adaptive, recommended), _ = halving
    fewest = min(semaphore.outcomes["529"], careful.outcomes["529"])
    assert fewest > 2 * max(gate.outcomes["529"], adaptive.outcomes["529"])
    # With no Q, the recommended gate lets the burst through to the provider while its C comes
    # down: fewer 529s than the semaphores, more than the gates whose Q refused the burst's excess.
    assert fewest > recommended.outcomes["529"] > gate.outcomes["529"]


def test_only_the_adaptive_gate_cuts_c_at_most_once_a_window(
    halving: tuple[list[Any], list[Any]], runs: tuple[Any, Any, Any, Any], showcase: dict[str, Any]
) -> None:
    (_, _, gate, adaptive, recommended), _ = halving
    limit = showcase["PROVIDER_LIMIT"]
    assert runs[2].final_limit == gate.final_limit == limit
    assert gate.cuts == 0
    window = showcase["Adaptive"]().window
    for run in (adaptive, recommended):
        assert 1 <= run.cuts <= (run.wall - showcase["HALVES_AT"]) / window + 1
        assert run.final_limit < limit


def test_against_the_halving_provider_the_gates_refuse_before_the_budget(
    halving: tuple[list[Any], list[Any]], showcase: dict[str, Any]
) -> None:
    (_, careful, gate, adaptive, recommended), _ = halving
    budget = showcase["BUDGET"]
    assert max(careful.refusal_seconds) >= budget - 1e-6  # some waited the whole budget for nothing
    for run in (gate, adaptive):
        assert max(run.refusal_seconds) < budget
        assert run.wasted < careful.wasted
    # The recommended gate cuts at the budget, as the timeout does; what it refuses, it refuses at once.
    assert recommended.outcomes["infeasible"] > 0
    assert recommended.outcomes["expired"] == 0


def test_the_halving_report_says_what_the_numbers_say(
    halving: tuple[list[Any], list[Any]], showcase: dict[str, Any]
) -> None:
    runs, jobs = halving
    out = showcase["report_halving"](runs, jobs)
    flat = " ".join(out.split())  # the prose is wrapped
    _, careful, gate, adaptive, recommended = runs
    g, a = gate.outcomes["on time"], adaptive.outcomes["on time"]
    assert "provider 529s passed to callers" in out
    assert "C at the end" in out
    names = (
        "the plain semaphore",
        "the semaphore with a timeout",
        "the static gate",
        "the adaptive gate",
        "the recommended gate",
    )
    best = max(range(5), key=lambda i: runs[i].outcomes["on time"])  # the first of a tie, as sorted()
    assert f"Most answers on time: {names[best]} ({runs[best].outcomes['on time']}), then" in flat
    if g > a:
        assert f"The static gate answered more on time than the adaptive one ({g} against {a})" in flat
        if adaptive.outcomes["529"] >= gate.outcomes["529"]:
            assert "on this run the static gate wins on both." in flat
    elif a > g:
        assert f"The adaptive gate answered more on time than the static one ({a} against {g})" in flat
    else:
        assert f"The static and the adaptive gate answered as many on time ({g})" in flat
    assert f"({adaptive.outcomes['529']} against {gate.outcomes['529']})" in flat
    r, t = recommended.outcomes, careful.outcomes
    assert f"{r['on time']} answers on time against {t['on time']}" in flat
    assert f"{r['cut off']} cut off against {t['cut off']}" in flat
