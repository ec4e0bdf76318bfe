"""Keys in the simulator: each key's requests end exactly as they would alone, and as through a real
KeyedGate under virtual time; one tenant flooding its gate never delays another (seed 004's L05);
the key column in scripts; overrides; the summary, the trace and the JSON with keys."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import boundedgate.sim._engine
from boundedgate import BoundedGate, GateLimits, KeyedGate, RateLimit
from boundedgate._core import Ticket
from boundedgate.sim import (
    Job,
    KeySummary,
    ScriptError,
    Simulation,
    parse_script,
    simulate,
    sweep,
    write_script,
)
from tests.helpers import CheckedState, Result, run_script, run_virtual
from tests.sim.test_rate_limits import RATES, UNITS, as_helper_jobs

KEYS = ("", "acme", "globex", "initech")


class Recording(CheckedState):
    """A core that checks its invariants after each event and records the instants it is visited."""

    made: ClassVar[list[Recording]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.visits: list[float] = []
        Recording.made.append(self)

    def advance(self, now: float) -> list[Ticket]:
        self.visits.append(now)
        return super().advance(now)


def visits_of(run: Callable[[], Simulation]) -> tuple[Simulation, list[list[float]]]:
    """What ``run()`` gives, and the instants each of its cores was visited at (the cores that were)."""
    Recording.made.clear()
    result = run()
    return result, [core.visits for core in Recording.made if core.visits]


@pytest.fixture(autouse=True)
def _checked_core(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every simulation in this module runs on cores that assert their invariants after each event.
    monkeypatch.setattr(boundedgate.sim._engine, "GateState", Recording)


def outcomes(result: Simulation) -> dict[str, Result]:
    return {r.id: Result(r.outcome.value, r.start_ms, r.end_ms) for r in result.requests}


# -- each key's requests end as they would alone ------------------------------------------------


@st.composite
def keyed_scripts(draw: st.DrawFn, priorities: int, max_cost: int) -> list[Job]:
    keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True))
    count = draw(st.integers(1, 16))
    return [
        Job(
            f"J{i}",
            draw(st.integers(0, 25)),
            draw(st.integers(1, 12)),
            draw(st.none() | st.integers(1, 30)),
            draw(st.integers(0, priorities - 1)),
            draw(st.integers(0, max_cost)),
            draw(st.none() | st.integers(0, 12)),
            draw(st.sampled_from(keys)),
        )
        for i in range(count)
    ]


limits_of_a_gate = st.builds(GateLimits, st.none() | st.integers(1, 3), st.none() | st.integers(0, 3))
overrides_of_keys = st.dictionaries(st.sampled_from(KEYS), limits_of_a_gate, max_size=2)


@st.composite
def rate_limit_sets(draw: st.DrawFn) -> list[RateLimit]:
    """None, or one or two buckets at rates that are not exact in binary, with bursts of 8."""
    amounts = draw(st.lists(st.sampled_from([7, 60, 500, 1000, 3000]), max_size=2))
    return [
        RateLimit.per_second(amount, burst=8, unit="tokens" if i else "requests")
        for i, amount in enumerate(amounts)
    ]


@given(
    jobs=keyed_scripts(priorities=2, max_cost=8),
    template=limits_of_a_gate,
    overrides=overrides_of_keys,
    rate_limits=rate_limit_sets(),
    jump_share=st.sampled_from([0, 0.5]),
)
def test_each_keys_requests_end_as_they_would_alone(
    jobs: list[Job],
    template: GateLimits,
    overrides: dict[str, GateLimits],
    rate_limits: list[RateLimit],
    jump_share: float,
) -> None:
    settings: dict[str, Any] = {"priorities": 2, "jump_share": jump_share, "rate_limits": rate_limits}
    together, visits = visits_of(
        lambda: simulate(
            jobs, max_running=template[0], max_waiting=template[1], overrides=overrides, **settings
        )
    )
    keys = sorted({job.key for job in jobs})
    visits_alone: list[list[float]] = []
    for key in keys:
        mine = [replace(job, key="") for job in jobs if job.key == key]
        limits = overrides.get(key, template)
        alone, [visited] = visits_of(
            lambda: simulate(mine, max_running=limits[0], max_waiting=limits[1], **settings)  # noqa: B023
        )
        visits_alone.append(visited)
        assert {i: together[i].to_dict() | {"key": ""} for i in outcomes(alone)} == {
            r.id: r.to_dict() | {"key": ""} for r in alone.requests
        }
        if len(keys) > 1:
            summary = together.summary.key(key)
            assert (summary.max_running, summary.max_waiting) == limits
            assert (summary.peak_running, summary.peak_waiting) == (
                alone.summary.peak_running,
                alone.summary.peak_waiting,
            )
            assert (summary.requests, summary.completed, summary.rejected, summary.queue_ms) == (
                alone.summary.requests,
                alone.summary.completed,
                alone.summary.rejected,
                alone.summary.queue_ms,
            )
    assert [s.key for s in together.summary.keys] == (keys if len(keys) > 1 else [])
    # Each key's core is visited at exactly the instants it would be alone.
    assert sorted(visits) == sorted(visits_alone)
    untraced = simulate(
        jobs, max_running=template[0], max_waiting=template[1], overrides=overrides, trace=False, **settings
    )
    assert untraced.requests == together.requests
    assert untraced.summary == together.summary


@given(jobs=keyed_scripts(priorities=1, max_cost=0), template=limits_of_a_gate)
def test_the_trace_totals_are_the_sums_of_the_keys_counts(jobs: list[Job], template: GateLimits) -> None:
    result = simulate(jobs, max_running=template[0], max_waiting=template[1])
    keyed = len({job.key for job in jobs}) > 1
    counts: dict[str, tuple[int, int]] = {}
    for event in result.trace:
        if keyed:
            assert event.key_running is not None
            assert event.key_waiting is not None
            counts[event.key] = (event.key_running, event.key_waiting)
            assert template[0] is None or event.key_running <= template[0]
            assert template[1] is None or event.key_waiting <= template[1]
            assert (event.running, event.waiting) == tuple(map(sum, zip(*counts.values(), strict=True)))
        else:
            assert (event.key_running, event.key_waiting) == (None, None)
    assert result.summary.peak_running == max((e.running for e in result.trace), default=0)
    assert result.summary.peak_waiting == max((e.waiting for e in result.trace), default=0)


# -- the real KeyedGate -----------------------------------------------------------------------


@st.composite
def replayed_both(draw: st.DrawFn) -> tuple[Simulation, dict[str, Result], KeyedGate[str], list[Job]]:
    """A keyed script, settings, overrides and rate limits, replayed through both."""
    specs = draw(
        st.lists(
            st.tuples(st.sampled_from(RATES), st.integers(1, 8), st.sampled_from(UNITS)),
            max_size=2,
        )
    )
    max_cost = min((burst for _, burst, unit in specs if unit == "tokens"), default=8)
    jobs = draw(keyed_scripts(priorities=2, max_cost=max_cost))
    template = draw(limits_of_a_gate)
    overrides = draw(overrides_of_keys)
    jump_share = draw(st.sampled_from([0, 0.5]))
    # One virtual second per simulated millisecond (see test_rate_limits.py).
    per_second = [RateLimit(r * 1000, b, u, name=f"L{i}") for i, (r, b, u) in enumerate(specs)]
    per_virtual_second = [RateLimit(r, b, u, name=f"L{i}") for i, (r, b, u) in enumerate(specs)]
    # Every key keeps its gate, as in the simulator: a dropped gate would come back with a jump
    # banked that the old one may have spent, or (with rate limits) rest instead.
    keyed: KeyedGate[str] = KeyedGate(
        max_running=template[0],
        max_waiting=template[1],
        overrides=overrides,
        keep_idle=len(KEYS),
        priorities=2,
        jump_share=jump_share,
        rate_limits=per_virtual_second,
    )
    key_of = {job.id: job.key for job in jobs}
    real = run_virtual(
        run_script,
        None,
        as_helper_jobs(jobs),
        lambda job: keyed.admit(key_of[job.id], timeout=job.budget, priority=job.priority, cost=job.cost),
    )
    result = simulate(
        jobs,
        max_running=template[0],
        max_waiting=template[1],
        overrides=overrides,
        priorities=2,
        jump_share=jump_share,
        rate_limits=per_second,
    )
    # As in test_rate_limits.py: two bodies of one key ending together, one of them settling a
    # charge or a refund, end in an order asyncio leaves open.
    ran = [(r, j) for r, j in zip(result.requests, jobs, strict=True) if r.start_ms is not None]
    ends = Counter((j.key, r.end_ms) for r, j in ran)
    settles = any(unit == "tokens" for _, _, unit in specs)
    assume(
        not any(settles and j.actual_cost not in (None, j.cost) and ends[j.key, r.end_ms] > 1 for r, j in ran)
    )
    return result, real, keyed, jobs


@given(replayed=replayed_both())
def test_simulator_equals_the_real_keyed_gate(
    replayed: tuple[Simulation, dict[str, Result], KeyedGate[str], list[Job]],
) -> None:
    result, real, keyed, jobs = replayed
    assert outcomes(result) == real
    keys = {job.key for job in jobs}
    stats = keyed.stats()
    assert stats.keys == len(keys)
    summary = result.summary
    total = stats.total
    assert (summary.completed, summary.late, summary.expired, summary.rejected) == (
        total.completed,
        total.late,
        total.expired,
        total.rejected,
    )
    assert (summary.evicted, summary.rate_limited) == (total.evicted, total.rate_limited)
    if not result.rate_limits:
        # With rate limits, starts on tokens and ends of bodies of two keys at one instant come in
        # an order asyncio's timers leave open, which moves the totals' peaks, not the keys' own.
        assert (summary.peak_running, summary.peak_waiting) == (total.peak_running, total.peak_waiting)
    if len(keys) > 1:
        for key in keys:
            gate = keyed.get(key)
            assert gate is not None
            mine = gate.stats()
            ours = summary.key(key)
            assert (ours.max_running, ours.max_waiting) == (mine.max_running, mine.max_waiting)
            assert (ours.peak_running, ours.peak_waiting) == (mine.peak_running, mine.peak_waiting)
            assert (ours.completed, ours.expired, ours.evicted, ours.rate_limited) == (
                mine.completed,
                mine.expired,
                mine.evicted,
                mine.rate_limited,
            )


# -- seed 004, L05: a tenant that saturates its gate never delays another ----------------------


@pytest.mark.parametrize(
    "rate_limits", [[], [RateLimit.per_minute(600, burst=5)]], ids=["no rate limits", "600 rpm each"]
)
def test_a_tenant_flooding_its_gate_never_delays_another(rate_limits: list[RateLimit]) -> None:
    # acme sends 500 requests in the first second, far more than its gate admits: its queue stays
    # full, and waiters expire. globex sends one every 100 ms, interleaved in the script with
    # acme's: each starts as it arrives, exactly as if acme sent nothing.
    flood = [Job(f"a{i}", i * 2, 300, 500, key="acme") for i in range(500)]
    trickle = [Job(f"g{i}", i * 100, 50, 1000, key="globex") for i in range(20)]
    jobs = [job for pair in zip(flood, trickle, strict=False) for job in pair] + flood[20:]
    result = simulate(jobs, max_running=4, max_waiting=8, rate_limits=rate_limits)
    acme = result.summary.key("acme")
    assert acme.rejected + acme.rate_limited > 400
    assert acme.expired > 0
    assert acme.peak_waiting == 8
    alone = simulate(trickle, max_running=4, max_waiting=8, rate_limits=rate_limits)
    assert [result[job.id] for job in trickle] == list(alone.requests)
    assert all(result[job.id].queue_ms == 0 for job in trickle)
    assert all(result[job.id].start_ms == job.arrival_ms for job in trickle)
    assert result.summary.key("globex").completed == 20


# -- scripts ----------------------------------------------------------------------------------


def test_the_key_column_in_csv_and_json() -> None:
    csv = "id,arrival_ms,service_ms,key\nA,0,5,acme\nB,0,5,\nC,1,5, globex \n"
    jobs = parse_script(csv, "csv")
    assert [job.key for job in jobs] == ["acme", "", "globex"]
    text = json.dumps(
        [
            {"id": "A", "arrival_ms": 0, "service_ms": 5, "key": "acme"},
            {"id": "B", "arrival_ms": 0, "service_ms": 5},
        ]
    )
    assert [job.key for job in parse_script(text, "json")] == ["acme", ""]
    assert [
        job.key for job in parse_script('[{"id": "A", "arrival_ms": 0, "service_ms": 5, "key": "3"}]', "json")
    ] == ["3"]


@pytest.mark.parametrize("key", ["3", "null", "true", '["a"]'])
def test_a_json_key_that_is_not_a_string_is_refused_naming_the_row(key: str) -> None:
    row = '"arrival_ms": 0, "service_ms": 5'
    text = f'[{{"id": "A", {row}}}, {{"id": "B", {row}, "key": {key}}}]'
    value = json.loads(key)
    message = f"<script>, jobs[1] (id 'B'): key must be a string, got {value!r}"
    with pytest.raises(ScriptError, match=re.escape(message)):
        parse_script(text, "json")


def test_a_job_key_must_be_a_string() -> None:
    with pytest.raises(TypeError, match="key must be a string, got 3"):
        Job("A", 0, 5, key=3)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["s.csv", "s.json"])
def test_written_scripts_keep_their_keys_and_leave_the_column_out_without_any(
    tmp_path: Path, name: str
) -> None:
    keyed = [Job("A", 0, 5, key="acme"), Job("B", 1, 5)]
    write_script(keyed, tmp_path / name)
    assert parse_script((tmp_path / name).read_text(), "csv" if name.endswith("csv") else "json") == keyed
    write_script([Job("A", 0, 5)], tmp_path / name)
    assert "key" not in (tmp_path / name).read_text()


# -- overrides --------------------------------------------------------------------------------


def test_an_override_sets_its_keys_limits_and_no_others() -> None:
    jobs = [Job(f"{key}{i}", 0, 10, key=key) for key in ("a", "b") for i in range(5)]
    result = simulate(
        jobs, max_running=1, max_waiting=1, overrides={"a": GateLimits(3, None), "z": GateLimits(1, 0)}
    )
    a, b = result.summary.keys
    assert (a.key, a.max_running, a.max_waiting, a.completed, a.rejected, a.peak_running) == (
        "a",
        3,
        None,
        5,
        0,
        3,
    )
    assert (b.key, b.max_running, b.max_waiting, b.completed, b.rejected, b.peak_running) == (
        "b",
        1,
        1,
        2,
        3,
        1,
    )
    assert result.overrides == {"a": GateLimits(3, None), "z": GateLimits(1, 0)}
    assert (result.summary.peak_running, result.summary.peak_waiting) == (4, 3)


def test_an_override_applies_to_a_script_with_one_key_too() -> None:
    jobs = [Job(f"a{i}", 0, 10, key="a") for i in range(3)]
    result = simulate(jobs, max_running=1, max_waiting=0, overrides={"a": GateLimits(2, 1)})
    assert [r.outcome.value for r in result.requests] == ["completed"] * 3
    assert result.summary.keys == ()
    with pytest.raises(KeyError):
        result.summary.key("a")


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        ([("a", GateLimits(1, 1))], TypeError, "overrides must be a mapping from key to GateLimits"),
        (
            {3: GateLimits(1, 1)},
            TypeError,
            "overrides are keyed by the script's keys, which are strings; got 3",
        ),
        ({"a": 5}, TypeError, r"limits for 'a' must be GateLimits\(max_running, max_waiting\), got 5"),
        ({"a": (1,)}, TypeError, r"limits for 'a' must be GateLimits"),
        ({"a": GateLimits(0, 1)}, ValueError, "max_running must be >= 1"),
        ({"a": GateLimits(1, -1)}, ValueError, "max_waiting must be >= 0"),
        ({"a": GateLimits(True, 1)}, TypeError, "max_running"),
    ],
)
def test_bad_overrides_are_refused(overrides: object, error: type[Exception], message: str) -> None:
    jobs = [Job("A", 0, 1, key="a")]
    with pytest.raises(error, match=message):
        simulate(jobs, max_running=1, max_waiting=1, overrides=overrides)  # type: ignore[arg-type]
    with pytest.raises(error, match=message):
        sweep(jobs, max_running=[1, 2], max_waiting=1, overrides=overrides)  # type: ignore[arg-type]


def test_the_settings_are_checked_even_when_every_key_has_an_override() -> None:
    # As KeyedGate checks its template when it is made, whatever keys come.
    with pytest.raises(ValueError, match="max_running must be >= 1"):
        simulate([Job("A", 0, 1, key="a")], max_running=0, max_waiting=1, overrides={"a": GateLimits(1, 1)})


def test_a_sweep_varies_the_template_and_keeps_the_overrides() -> None:
    jobs = [Job(f"{key}{i}", 0, 10, key=key) for key in ("a", "b") for i in range(4)]
    rows = sweep(jobs, max_running=[1, 2], max_waiting=0, overrides={"a": GateLimits(4, 0)})
    assert [
        (row.max_running, row.summary.key("a").completed, row.summary.key("b").completed) for row in rows
    ] == [
        (1, 4, 1),
        (2, 4, 2),
    ]


# -- results with keys ------------------------------------------------------------------------


def test_the_json_of_a_keyed_simulation() -> None:
    jobs = [Job("a1", 0, 10, key="acme"), Job("a2", 0, 10, key="acme"), Job("d1", 5, 10)]
    data = json.loads(
        json.dumps(
            simulate(jobs, max_running=1, max_waiting=0, overrides={"acme": GateLimits(1, 1)}).to_dict()
        )
    )
    assert data["overrides"] == {"acme": {"max_running": 1, "max_waiting": 1}}
    assert [key["key"] for key in data["summary"]["keys"]] == ["", "acme"]
    assert data["summary"]["keys"][1] == {
        "key": "acme",
        "max_running": 1,
        "max_waiting": 1,
        "requests": 2,
        "completed": 2,
        "late": 0,
        "expired": 0,
        "rejected": 0,
        "evicted": 0,
        "rate_limited": 0,
        "peak_running": 1,
        "peak_waiting": 1,
        "queue_ms": {"count": 2, "p50": 0, "p95": 10, "p99": 10, "max": 10},
        "end_to_end_ms": {"count": 2, "p50": 10, "p95": 20, "p99": 20, "max": 20},
        "infeasible": 0,
    }
    assert data["requests"][0]["key"] == "acme"
    assert "key" not in data["requests"][2]  # the default key, as in scripts
    assert data["trace"][0] == {
        "time_ms": 0,
        "event": "started",
        "id": "a1",
        "running": 1,
        "waiting": 0,
        "key": "acme",
        "key_running": 1,
        "key_waiting": 0,
    }
    assert data["trace"][2] == {
        "time_ms": 5,
        "event": "started",
        "id": "d1",
        "running": 2,
        "waiting": 1,
        "key_running": 1,
        "key_waiting": 0,
    }


def test_the_json_of_a_simulation_with_one_key_has_nothing_of_keys() -> None:
    data = simulate([Job("A", 0, 10), Job("B", 0, 10)], max_running=1, max_waiting=1).to_dict()
    assert "overrides" not in data
    assert "keys" not in data["summary"]
    assert all("key" not in row for row in data["requests"])
    assert all("key" not in event and "key_running" not in event for event in data["trace"])
    one_key = simulate([Job("A", 0, 10, key="k")], max_running=1, max_waiting=1).to_dict()
    assert one_key["requests"][0]["key"] == "k"
    assert "key_running" not in one_key["trace"][0]


def test_key_summary_refused_and_lookup() -> None:
    jobs = [
        Job("a1", 0, 10, 5, key="a"),
        Job("a2", 0, 10, 5, key="a"),
        Job("a3", 0, 10, key="a"),
        Job("b", 0, 10, key="b"),
    ]
    summary = simulate(jobs, max_running=1, max_waiting=1).summary
    a = summary.key("a")
    assert isinstance(a, KeySummary)
    assert (a.late, a.expired, a.rejected, a.refused) == (1, 1, 1, 2)
    assert summary.key("b").refused == 0
    with pytest.raises(KeyError):
        summary.key("c")


def test_one_gates_peaks_are_its_cores_as_boundedgate_reports_them() -> None:
    # J3 (class 0) arrives at 2 ms as J1 and J5 (class 1) wait: inside that one step the core counts
    # three waiting before J3 starts on its tokens, so its peak is 3 where the counts after each
    # step never pass 2. BoundedGate.stats() reports the core's peak, and so does the summary of a
    # one-key simulation; a keyed one reports the totals after each step, as KeyedGate.stats() does.
    jobs = [
        Job("J0", 0, 3, None, 0, 2),
        Job("J1", 2, 1, None, 1, 0),
        Job("J2", 1, 2, None, 1, 2),
        Job("J3", 2, 3, None, 0, 0),
        Job("J4", 0, 1, None, 1, 2),
        Job("J5", 1, 2, None, 1, 3),
    ]
    tokens = RateLimit(1000, 4, "tokens", name="t")
    result = simulate(
        jobs, max_running=None, max_waiting=None, priorities=2, jump_share=0.5, rate_limits=[tokens]
    )
    gate = BoundedGate(
        max_running=None,
        max_waiting=None,
        priorities=2,
        jump_share=0.5,
        rate_limits=[RateLimit(1, 4, "tokens", name="t")],
    )
    assert outcomes(result) == run_virtual(run_script, gate, as_helper_jobs(jobs))
    stats = gate.stats()
    assert (result.summary.peak_running, result.summary.peak_waiting) == (
        stats.peak_running,
        stats.peak_waiting,
    )
    assert (stats.peak_running, stats.peak_waiting) == (3, 3)
    assert max(event.waiting for event in result.trace) == 2
