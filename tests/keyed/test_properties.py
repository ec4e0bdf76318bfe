"""Invariants of keyed gates and multi-gate admission, on random scripts under virtual time.

1. A keyed gate is exactly a set of independent gates, one per key: each key's requests end as
   the reference model says for that key alone, whatever the other keys do and however many
   idle gates are kept; the totals are the sums, and the aggregate peaks are the exact peaks of
   the sums.
2. Multi-gate admissions in random orders, with random deadlines and cancellations: an order that
   contradicts the global one is refused at once, nothing deadlocks (every task ends by a horizon
   that only the sum of all service times bounds), no gate ever has more bodies inside than its
   limit, every gate's counters equal the tally of its permits' outcomes, and at the end every
   slot is back and every idle key's gate is gone.
3. The order check accepts an admission exactly when some total order of all gates agrees with it
   and with every admission accepted before (checked by brute force over permutations).
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections import Counter
from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from boundedgate import (
    BoundedGate,
    CombinedPermit,
    GateLimits,
    GateStatistics,
    KeyedGate,
    Status,
    admit_all,
)
from boundedgate._driver._keys import KeyState
from tests.core.invariants import check_invariants
from tests.helpers import Job, Result, live_gate, reference, run_script, run_virtual

KEYS = ("a", "b", "c")

# -- 1. a keyed gate is independent gates --------------------------------------------------------


@st.composite
def keyed_scripts(draw: st.DrawFn) -> tuple[list[Job], dict[str, str]]:
    count = draw(st.integers(1, 14))
    jobs, keys = [], {}
    for i in range(count):
        arrival = draw(st.integers(0, 25))
        cancel_at = arrival + draw(st.integers(1, 30)) if draw(st.booleans()) else None
        job = Job(
            id=f"J{i}",
            arrival=arrival,
            service=draw(st.integers(1, 15)),
            budget=draw(st.none() | st.integers(1, 30)),
            cancel_at=cancel_at,
            raises=draw(st.booleans()),
        )
        jobs.append(job)
        keys[job.id] = draw(st.sampled_from(KEYS))
    return jobs, keys


limits = st.tuples(st.integers(1, 3), st.none() | st.integers(0, 3)).map(lambda t: GateLimits(*t))


def _exact_peaks(results: dict[str, Result], jobs: list[Job]) -> tuple[int, int]:
    """The most requests running, and waiting, at once, over all keys, from the reference's answer."""
    instants = range(max(j.arrival for j in jobs) + sum(j.service for j in jobs) + 2)
    peak_running = peak_waiting = 0
    for t in instants:
        running = waiting = 0
        for job in jobs:
            r = results[job.id]
            start, end = r.start, r.end
            assert start is None or end is not None, r  # the reference ends whatever it starts
            if start is not None and end is not None and start <= t < end:
                running += 1
            elif job.arrival <= t and (start is None or start > t) and (end is None or end > t):
                waiting += 1
        peak_running = max(peak_running, running)
        peak_waiting = max(peak_waiting, waiting)
    return peak_running, peak_waiting


def _times(stats: GateStatistics) -> dict[str, float]:
    return {name: getattr(stats, name) for name in TIME_FIELDS}


def _expected_times(results: dict[str, Result], jobs: list[Job]) -> dict[str, float]:
    """Queue, run and end-to-end times, totals and maxima, from the reference's starts and ends."""
    queued, ran, whole = [], [], []
    for job in jobs:
        r = results[job.id]
        if r.outcome == "rejected":
            continue
        assert r.end is not None
        if r.start is None:
            queued.append(r.end - job.arrival)
        else:
            queued.append(r.start - job.arrival)
            ran.append(r.end - r.start)
            whole.append(r.end - job.arrival)
    return {
        "queue_seconds_total": sum(queued),
        "queue_seconds_max": max(queued, default=0),
        "run_seconds_total": sum(ran),
        "run_seconds_max": max(ran, default=0),
        "end_to_end_seconds_total": sum(whole),
        "end_to_end_seconds_max": max(whole, default=0),
    }


TIME_FIELDS = (
    "queue_seconds_total",
    "queue_seconds_max",
    "run_seconds_total",
    "run_seconds_max",
    "end_to_end_seconds_total",
    "end_to_end_seconds_max",
)


async def _run_keyed(
    jobs: list[Job], keys: dict[str, str], template: GateLimits, overrides: dict[str, GateLimits], keep: int
) -> None:
    keyed = KeyedGate(
        max_running=template.max_running,
        max_waiting=template.max_waiting,
        name="k",
        overrides=overrides,
        keep_idle=keep,
    )
    results = await run_script(None, jobs, admit=lambda job: keyed.admit(keys[job.id], timeout=job.budget))
    expected: dict[str, Result] = {}
    for key in KEYS:
        mine = [j for j in jobs if keys[j.id] == key]
        if mine:
            key_limits = overrides.get(key, template)
            assert key_limits.max_running is not None  # `limits` draws running from 1..3
            expected.update(reference(mine, key_limits.max_running, key_limits.max_waiting))
    assert results == expected
    stats = keyed.stats()
    outcomes = Counter(r.outcome for r in results.values())
    total = stats.total
    for outcome in ("rejected", "expired", "cancelled", "completed", "late", "failed"):
        assert getattr(total, outcome) == outcomes[outcome], outcome
    assert total.arrived == len(jobs)
    assert total.admitted == total.finished
    assert (total.running, total.waiting, stats.busy_keys) == (0, 0, 0)
    assert (total.peak_running, total.peak_waiting) == _exact_peaks(expected, jobs)
    assert _times(total) == _expected_times(expected, jobs)
    assert len(keyed) == stats.keys <= keep
    assert stats.created >= stats.dropped + stats.keys
    for key in keyed:
        check_invariants(live_gate(keyed, key)._state)


@given(
    script=keyed_scripts(),
    template=limits,
    overrides=st.dictionaries(st.sampled_from(KEYS), limits, max_size=2),
    keep=st.integers(0, 3),
)
def test_a_keyed_gate_is_one_independent_gate_per_key(
    script: tuple[list[Job], dict[str, str]],
    template: GateLimits,
    overrides: dict[str, GateLimits],
    keep: int,
) -> None:
    run_virtual(_run_keyed, *script, template, overrides, keep)


# -- 2. multi-gate admissions: no deadlock, caps, accounting, nothing left -----------------------


@dataclass(frozen=True)
class Call:
    """One request through several gates: family indices in the order it takes them, and keys."""

    families: tuple[int, ...]
    keys: tuple[str, ...]
    arrival: int
    service: int
    budget: int | None
    cancel_at: int | None
    raises: bool


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[int], list[Call]]:
    order = draw(st.permutations(range(4)))  # the global order of the four families
    calls = []
    for _ in range(draw(st.integers(1, 16))):
        chosen = draw(st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True))
        if draw(st.integers(0, 5)):  # mostly in the global order; sometimes as drawn
            chosen.sort(key=order.index)
        arrival = draw(st.integers(0, 20))
        calls.append(
            Call(
                families=tuple(chosen),
                keys=tuple(draw(st.sampled_from(("x", "y"))) for _ in chosen),
                arrival=arrival,
                service=draw(st.integers(1, 8)),
                budget=draw(st.none() | st.integers(1, 30)),
                cancel_at=arrival + draw(st.integers(0, 20)) if draw(st.booleans()) else None,
                raises=draw(st.integers(0, 4)) == 0,
            )
        )
    return list(order), calls


def _consistent(families: tuple[int, ...], order: list[int]) -> bool:
    ranks = [order.index(f) for f in families]
    return ranks == sorted(ranks)


class Family:
    """The four gates of one example: two keyed, two plain, with the drawn limits."""

    def __init__(self, caps: list[GateLimits]) -> None:
        self.tenants: KeyedGate[str] = KeyedGate(
            max_running=caps[0][0], max_waiting=caps[0][1], name="tenant"
        )
        self.sessions: KeyedGate[str] = KeyedGate(
            max_running=caps[1][0], max_waiting=caps[1][1], name="session"
        )
        self.p1 = BoundedGate(max_running=caps[2][0], max_waiting=caps[2][1], name="p1")
        self.p2 = BoundedGate(max_running=caps[3][0], max_waiting=caps[3][1], name="p2")
        self.members: list[BoundedGate | KeyedGate[str]] = [self.tenants, self.sessions, self.p1, self.p2]

    def step(self, index: int, key: str) -> BoundedGate | tuple[KeyedGate[str], str]:
        gate = self.members[index]
        return (gate, key) if isinstance(gate, KeyedGate) else gate

    def live_gates(self) -> list[BoundedGate]:
        keyed = [g for k in (self.tenants, self.sessions) for g in map(k.get, k) if g is not None]
        return [self.p1, self.p2, *keyed]


async def _run_multi(order: list[int], calls: list[Call], caps: list[GateLimits]) -> None:
    family = Family(caps)
    # Fix the global order before anything runs: every admission is checked against it.
    admit_all(*(family.step(i, "x") for i in order))
    inside: Counter[str] = Counter()
    combined: list[CombinedPermit] = []
    refused_orders = 0

    async def request(call: Call) -> None:
        nonlocal refused_orders
        steps = [family.step(i, k) for i, k in zip(call.families, call.keys, strict=True)]
        try:
            permit = admit_all(*steps, timeout=call.budget)
        except ValueError:
            assert not _consistent(call.families, order)
            refused_orders += 1
            return
        assert _consistent(call.families, order)
        combined.append(permit)
        try:
            async with permit:
                for gate in permit.gates:
                    inside[gate.name] += 1
                    assert gate.max_running is not None, gate
                    assert inside[gate.name] <= gate.max_running, gate
                try:
                    await asyncio.sleep(call.service)
                    if call.raises:
                        raise RuntimeError("boom")
                finally:
                    for gate in permit.gates:
                        inside[gate.name] -= 1
        except (Exception, asyncio.CancelledError):
            pass

    loop = asyncio.get_running_loop()
    started: list[tuple[asyncio.Task[None], Call]] = []
    origin = loop.time()
    for t in sorted({c.arrival for c in calls} | {c.cancel_at for c in calls if c.cancel_at is not None}):
        await asyncio.sleep(origin + t - loop.time())
        for _ in range(3):
            await asyncio.sleep(0)
        for gate in family.live_gates():
            check_invariants(gate._state)
        for task, call in started:
            if call.cancel_at == t:
                task.cancel()
        started += [(asyncio.create_task(request(c)), c) for c in calls if c.arrival == t]
    horizon = max(c.arrival for c in calls) + sum(c.service for c in calls) + 1
    _, pending = await asyncio.wait([task for task, _ in started], timeout=horizon)
    assert not pending, "deadlock: admissions still waiting after every body could have run"
    assert refused_orders == sum(not _consistent(c.families, order) for c in calls)
    _check_the_end(family, combined)


def _check_the_end(family: Family, combined: list[CombinedPermit]) -> None:
    # Every slot is back, every idle key's gate is gone.
    for gate in family.members:
        assert (gate.running, gate.waiting) == (0, 0)
    assert len(family.tenants) == len(family.sessions) == 0
    # Every combined permit ended, and all or nothing: a refused one gave every gate back.
    for permit in combined:
        assert permit.status.is_final
        if permit.status in (Status.COMPLETED, Status.LATE, Status.FAILED):
            assert all(p.status in (Status.COMPLETED, Status.LATE, Status.FAILED) for p in permit.permits)
        elif permit.permits:
            assert all(p.status is Status.CANCELLED for p in permit.permits[:-1])
            assert permit.permits[-1].status is permit.status or permit.status is Status.CANCELLED
    # Each gate's counters are the tally of its permits' outcomes (refusals before counting aside).
    tally: dict[str, Counter[str]] = {name: Counter() for name in ("tenant", "session", "p1", "p2")}
    for permit in combined:
        for p in permit.permits:
            precounted = (p.status is Status.CANCELLED and p.arrival is None) or (
                p.status is Status.EXPIRED and p.ended == p.arrival
            )
            if not precounted:
                tally[p.gate.name.split("/")[0]][p.status.value] += 1
    for name, stats in (
        ("tenant", family.tenants.stats().total),
        ("session", family.sessions.stats().total),
        ("p1", family.p1.stats()),
        ("p2", family.p2.stats()),
    ):
        for outcome in ("rejected", "expired", "cancelled", "completed", "late", "failed"):
            assert getattr(stats, outcome) == tally[name][outcome], (name, outcome)
        assert stats.admitted == stats.finished


caps = st.lists(
    st.tuples(st.integers(1, 3), st.none() | st.integers(0, 3)).map(lambda t: GateLimits(*t)),
    min_size=4,
    max_size=4,
)


@given(workload=workloads(), caps=caps)
def test_multi_gate_admissions_never_deadlock_never_exceed_and_give_everything_back(
    workload: tuple[list[int], list[Call]], caps: list[GateLimits]
) -> None:
    run_virtual(_run_multi, *workload, caps)


# -- 3. the order check against brute force ------------------------------------------------------


@given(
    sequences=st.lists(
        st.lists(st.integers(0, 4), min_size=1, max_size=5, unique=True),
        min_size=1,
        max_size=12,
    )
)
def test_the_order_check_accepts_exactly_the_orders_some_total_order_allows(
    sequences: list[list[int]],
) -> None:
    gates = [BoundedGate(max_running=1, max_waiting=0, name=f"g{i}") for i in range(5)]
    accepted: list[list[int]] = []
    for sequence in sequences:
        allowed = any(
            all(_consistent(tuple(s), list(total)) for s in [*accepted, sequence])
            for total in itertools.permutations(range(5))
        )
        try:
            admit_all(*(gates[i] for i in sequence))
        except ValueError:
            assert not allowed, sequence
        else:
            assert allowed, sequence
            accepted.append(sequence)


def test_keyed_states_are_the_only_ones_that_know_their_keyed_gate() -> None:
    # The bookkeeping for keys lives in a state subclass: a plain gate has a plain GateState.
    assert type(BoundedGate(max_running=1, max_waiting=0)._state) is not KeyState
    assert math.isinf(admit_all(BoundedGate(max_running=1, max_waiting=0)).deadline)
