"""A key's gate is a gate like any other, made for the key and dropped when it is idle: its statistics
are a plain gate's, and the totals count it whether it is listed or dropped."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import weakref
from collections.abc import Callable

import pytest

from boundedgate import BoundedGate, KeyedGate, Late, QueueExpired, QueueFull
from tests.helpers import live_gate


def _counts(gate: BoundedGate) -> tuple[object, ...]:
    stats = gate.stats()
    return (
        stats.admitted,
        stats.completed,
        stats.rejected,
        stats.failed,
        stats.peak_running,
        stats.run_seconds_total,
        stats.run_seconds_max,
        stats.end_to_end_seconds_total,
        stats.end_to_end_seconds_max,
        stats.running,
    )


async def test_a_key_that_completed_requests_and_then_queues_keeps_its_history() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=1)
    plain = BoundedGate(max_running=2, max_waiting=1)

    async def through(admit: object, seconds: float) -> None:
        async with admit:  # type: ignore[attr-defined]
            await asyncio.sleep(seconds)

    held = keyed.try_admit("a")
    held_plain = plain.try_admit()
    await through(keyed.admit("a"), 1)  # completes while "a" stays busy
    await through(plain.admit(), 1)
    gate = live_gate(keyed, "a")
    second = keyed.try_admit("a")
    second_plain = plain.try_admit()
    queued = asyncio.create_task(through(keyed.admit("a"), 1))  # must wait
    queued_plain = asyncio.create_task(through(plain.admit(), 1))
    await asyncio.sleep(0)
    with pytest.raises(QueueFull):
        keyed.try_admit("a")
    with pytest.raises(QueueFull):
        plain.try_admit()
    assert _counts(gate) == _counts(plain)
    await asyncio.sleep(1)
    for permit in (held, held_plain, second, second_plain):
        permit.release()
    await asyncio.gather(queued, queued_plain)
    assert keyed.stats().total.completed == plain.stats().completed == 4
    assert keyed.stats().total.rejected == 1


async def test_limits_set_on_a_keys_gate_take_effect_and_count() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0)
    held = keyed.try_admit("a")
    gate = live_gate(keyed, "a")
    gate.set_limits(max_running=3)
    assert (gate.max_running, gate.stats().limit_changes) == (3, 1)
    more = [keyed.try_admit("a") for _ in range(2)]
    assert keyed.running == 3
    assert keyed.stats().total.max_running == 3
    for permit in (held, *more):
        permit.release()
    assert keyed.stats().total.limit_changes == 1


async def test_the_totals_sum_the_listed_keys_limits_and_counts() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=3, keep_idle=2)
    for key in ("a", "b", "c"):
        async with keyed.admit(key):
            await asyncio.sleep(1)
    total = keyed.stats().total
    assert (len(keyed), keyed.stats().dropped) == (2, 1)  # two kept idle
    assert (total.max_running, total.max_waiting) == (4, 6)
    assert (total.admitted, total.completed) == (3, 3)
    assert (total.run_seconds_total, total.end_to_end_seconds_max) == (3.0, 1.0)
    unbounded: KeyedGate[str] = KeyedGate(max_running=None, max_waiting=None, keep_idle=1)
    async with unbounded.admit("a"):
        assert (unbounded.stats().total.max_running, unbounded.stats().total.max_waiting) == (None, None)


async def test_a_dropped_gate_read_later_shows_its_own_counts_and_changes_no_total() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0)
    permit = keyed.admit("a")
    async with permit:
        await asyncio.sleep(2)
    gate = permit.gate
    assert "a" not in keyed
    assert (gate.stats().completed, gate.stats().run_seconds_total) == (1, 2.0)
    assert gate.running == 0
    total = keyed.stats().total
    assert (total.completed, total.run_seconds_total, keyed.stats().dropped) == (1, 2.0, 1)
    async with keyed.admit("a"):  # the key's next gate is a new one
        assert keyed.get("a") is not gate


async def test_a_dropped_keys_gate_is_freed_by_reference_counting_alone() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0)
    gc.disable()
    try:
        permit = keyed.admit("a")
        async with permit:
            pass
        gate = weakref.ref(permit.gate)  # dropped: its permit is all that holds it
        del permit
        assert gate() is None  # no cycle between the gate and its state
    finally:
        gc.enable()


async def test_the_keys_gates_record_from_the_moment_the_keyed_gate_is_observed() -> None:
    observed: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=0)
    held = observed.try_admit("a")
    records: list[object] = []
    observed.observe(records.append)  # a key listed now records too
    held.release()
    async with observed.admit("b"):
        pass
    assert len(records) == 2
    observed.unobserve(records.append)
    async with observed.admit("c"):
        pass
    assert len(records) == 2


async def test_a_failure_late_or_cancelled_slot_ends_in_the_totals() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0)
    with contextlib.suppress(RuntimeError):
        async with keyed.admit("a"):
            raise RuntimeError
    with contextlib.suppress(Exception):
        async with keyed.admit("b", timeout=1):
            await asyncio.sleep(2)
    permit = keyed.try_admit("c")
    permit.gate._cancel(permit)
    total = keyed.stats().total
    assert (total.failed, total.late, total.cancelled, total.admitted, total.running) == (1, 1, 1, 2, 0)
    assert len(keyed) == 0


async def test_a_keys_gate_observed_on_its_own_records() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=0)
    held = keyed.try_admit("a")
    records: list[object] = []
    live_gate(keyed, "a").observe(records.append)
    async with keyed.admit("a"):
        pass
    held.release()
    assert len(records) == 2


async def test_each_new_key_gets_a_gate_of_its_own_named_after_it() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0)
    gates = []
    for key in ("a", "b", "c"):
        async with keyed.admit(key) as permit:
            gates.append(permit.gate)
            assert permit.gate.name == f"keyed/{key}"
    assert len({id(gate) for gate in gates}) == 3
    total = keyed.stats()
    assert (total.created, total.dropped, total.total.completed) == (3, 3, 3)


def _refused_by(gate: BoundedGate) -> str:
    with pytest.raises(QueueFull) as refused:
        gate.try_admit()
    return refused.value.gate


@pytest.mark.parametrize(
    ("key", "read"),
    [
        (7, _refused_by),
        (("x", 1), lambda gate: gate.stats().name),
        ("b", lambda gate: repr(gate).split("'")[1]),
        (2.5, lambda gate: gate.name),
    ],
)
async def test_a_keys_gate_is_named_after_its_key_wherever_the_name_is_read(
    key: object, read: Callable[[BoundedGate], str]
) -> None:
    # In a refusal, its statistics, its repr, its property, for a key of any hashable type.
    keyed: KeyedGate[object] = KeyedGate(max_running=1, max_waiting=0, name="t")
    async with keyed.admit("a"):
        pass
    async with keyed.admit(key) as permit:
        gate = permit.gate
        assert read(gate) == f"t/{key}"
        assert gate.name == f"t/{key}"


async def test_a_keys_gate_names_its_key_in_the_late_it_raises() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, name="t")
    async with keyed.admit("a"):
        pass
    with pytest.raises(Late) as late:
        async with keyed.admit("slow", timeout=1):
            await asyncio.sleep(2)  # virtual time
    assert late.value.gate == "t/slow"


@pytest.mark.parametrize("max_running", [1, None])
async def test_a_new_keys_gate_takes_the_template_of_now(max_running: int | None) -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=max_running, max_waiting=0)
    async with keyed.admit("a"):
        pass
    keyed.set_limits(max_running=2)  # no key's gate to change: the next one is made with C=2
    async with keyed.admit("b") as permit:
        gate = permit.gate
        assert (gate.name, gate.max_running) == ("keyed/b", 2)
        other = keyed.try_admit("b")  # the second slot
        with pytest.raises(QueueFull):
            keyed.try_admit("b")
        other.release()
    assert (gate.stats().max_running, gate.stats().admitted, gate.stats().completed) == (2, 2, 2)


async def test_a_dropped_gate_still_held_keeps_its_own_counts_beside_the_keys_next_gate() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0)
    async with keyed.admit("b") as permit:
        pass
    kept = permit.gate
    async with keyed.admit("b") as other:  # b's gate was dropped: a new one
        assert other.gate is not kept
        assert (kept.name, other.gate.name) == ("keyed/b", "keyed/b")
    assert (kept.stats().completed, kept.stats().admitted) == (1, 1)
    total = keyed.stats()
    assert (total.created, total.dropped, total.total.completed) == (2, 2, 2)


async def test_a_key_keeps_the_recent_pace_a_plain_gate_of_its_c_keeps() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=4, max_waiting=0)
    plain = BoundedGate(max_running=4, max_waiting=0)
    held = [keyed.try_admit("a"), plain.try_admit()]  # the key stays listed throughout
    for seconds in (1, 2, 4):
        for admit in (keyed.admit("a"), plain.admit()):
            async with admit:
                await asyncio.sleep(seconds)
    held += [keyed.try_admit("a") for _ in range(3)] + [plain.try_admit() for _ in range(3)]
    with pytest.raises(QueueFull) as keyed_refusal:
        keyed.try_admit("a")
    with pytest.raises(QueueFull) as plain_refusal:
        plain.try_admit()
    assert keyed_refusal.value.retry_after == plain_refusal.value.retry_after
    for permit in held:
        permit.release()


async def test_a_keys_statistics_are_a_plain_gates() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=1)
    plain = BoundedGate(max_running=2, max_waiting=1, name="keyed/a")
    held = [keyed.try_admit("a"), plain.try_admit()]  # the key stays listed
    for seconds in (1, 3, 2):
        for admit in (keyed.admit("a"), plain.admit()):
            async with admit:
                await asyncio.sleep(seconds)
    gate = live_gate(keyed, "a")
    assert gate.stats() == plain.stats()
    for permit in held:
        permit.release()
    assert keyed.stats().total.end_to_end_seconds_total == plain.stats().end_to_end_seconds_total


async def test_a_keys_waiter_starts_when_its_gates_limits_are_raised() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=1)
    held = keyed.try_admit("a")
    gate = live_gate(keyed, "a")

    async def queued() -> None:
        async with keyed.admit("a"):
            pass

    task = asyncio.create_task(queued())
    await asyncio.sleep(0)
    assert (gate.running, gate.waiting, keyed.waiting) == (1, 1, 1)
    gate.set_limits(max_running=2)  # the waiter starts
    assert (gate.max_running, gate.waiting, keyed.running) == (2, 0, 2)
    await task
    held.release()
    assert keyed.stats().total.completed == 2
    assert len(keyed) == 0


@pytest.mark.parametrize("longer", ["dropped", "totals"])
def test_a_dropped_keys_counters_fold_as_the_totals_add_every_field_of_the_statistics(longer: str) -> None:
    # fold() names each field, natively, as every drop folds; Totals reads the fields of
    # GateStatistics by name: a field added to one and not the other fails here.
    from boundedgate._core import GateState, Totals
    from boundedgate._core._totals import MAXIMA, SUMS
    from boundedgate._driver._keys import fold

    dropped, into = GateState(1, 0), GateState(1, 0)
    for i, name in enumerate((*SUMS, *MAXIMA), start=1):
        kind = type(getattr(dropped, name))
        setattr(dropped, name, kind(i + (i if longer == "dropped" else 0)))
        setattr(into, name, kind(100 - i))
    expected = Totals()
    expected.add(into)
    expected.add(dropped)
    fold(into, dropped)
    folded = Totals()
    folded.add(into)
    assert folded.values == expected.values


def test_a_keys_new_gate_follows_the_loop_that_runs_it() -> None:
    # A key's new gate starts on the loop its keyed gate last ran on; run by another loop (a second
    # asyncio.run), it binds to that one, and its queue's timer fires there.
    keyed: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=1)

    async def expire_one(key: str) -> None:
        held = keyed.try_admit(key)
        with pytest.raises(QueueExpired):
            async with keyed.admit(key, timeout=0.01):
                pass
        held.release()

    asyncio.run(expire_one("a"))
    asyncio.run(expire_one("b"))
    assert (keyed.stats().total.expired, keyed.stats().total.completed) == (2, 2)
