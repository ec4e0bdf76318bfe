"""A key starts light (counts only) and gets its full state the moment anything needs one: whatever it
did before shows in its statistics and in the totals exactly as if it had had the full state all along."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import weakref
from collections.abc import Callable

import pytest

from boundedgate import BoundedGate, KeyedGate, Late, QueueFull, RateLimit
from boundedgate._driver._light import light_of
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


async def test_a_key_that_completed_light_requests_and_then_queues_keeps_its_history() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=1)
    plain = BoundedGate(max_running=2, max_waiting=1)

    async def through(admit: object, seconds: float) -> None:
        async with admit:  # type: ignore[attr-defined]
            await asyncio.sleep(seconds)

    held = keyed.try_admit("a")
    held_plain = plain.try_admit()
    await through(keyed.admit("a"), 1)  # completes while "a" stays busy: light all the way
    await through(plain.admit(), 1)
    gate = live_gate(keyed, "a")
    assert light_of(gate) is not None
    second = keyed.try_admit("a")
    second_plain = plain.try_admit()
    queued = asyncio.create_task(through(keyed.admit("a"), 1))  # must wait: the key's full state
    queued_plain = asyncio.create_task(through(plain.admit(), 1))
    await asyncio.sleep(0)
    assert light_of(gate) is None
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


async def test_limits_set_on_a_light_keys_gate_take_effect_and_count() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0)
    held = keyed.try_admit("a")
    gate = live_gate(keyed, "a")
    gate.set_limits(max_running=3)  # through the light key, which gets its full state on the way
    assert (gate.max_running, gate.stats().limit_changes) == (3, 1)
    more = [keyed.try_admit("a") for _ in range(2)]
    assert keyed.running == 3
    assert keyed.stats().total.max_running == 3
    for permit in (held, *more):
        permit.release()
    assert keyed.stats().total.limit_changes == 1


async def test_the_totals_sum_the_light_keys_limits_and_counts() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=3, keep_idle=2)
    for key in ("a", "b", "c"):
        async with keyed.admit(key):
            await asyncio.sleep(1)
    total = keyed.stats().total
    assert (len(keyed), keyed.stats().dropped) == (2, 1)  # two kept idle, light
    assert (total.max_running, total.max_waiting) == (4, 6)
    assert (total.admitted, total.completed) == (3, 3)
    assert (total.run_seconds_total, total.end_to_end_seconds_max) == (3.0, 1.0)
    unbounded: KeyedGate[str] = KeyedGate(max_running=None, max_waiting=None, keep_idle=1)
    async with unbounded.admit("a"):
        assert (unbounded.stats().total.max_running, unbounded.stats().total.max_waiting) == (None, None)


async def test_a_dropped_light_gate_read_later_shows_its_own_counts_and_changes_no_total() -> None:
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


async def test_a_dropped_key_is_freed_by_reference_counting_alone() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0)
    gc.disable()
    try:
        permit = keyed.admit("a")
        async with permit:
            pass
        gate = weakref.ref(permit.gate)  # its state is held by nothing else
        del permit
        assert gate() is keyed._spare  # kept to be made again for another key
        keyed._spare = None
        assert gate() is None  # no cycle between the gate and its state
    finally:
        gc.enable()


async def test_keys_that_need_a_full_state_from_the_start_never_are_light() -> None:
    rated: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, rate_limits=[RateLimit.per_second(5)])
    async with rated.admit("a"):
        assert light_of(live_gate(rated, "a")) is None
    observed: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=0)
    held = observed.try_admit("a")
    records: list[object] = []
    observed.observe(records.append)  # a light key listed now gets its full state, and records
    assert light_of(live_gate(observed, "a")) is None
    held.release()
    async with observed.admit("b"):
        assert light_of(live_gate(observed, "b")) is None
    assert len(records) == 2
    observed.unobserve(records.append)
    async with observed.admit("c"):
        assert light_of(live_gate(observed, "c")) is not None


async def test_a_failure_late_or_cancelled_slot_ends_through_the_full_state() -> None:
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


async def test_a_light_keys_gate_observed_on_its_own_records() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=0)
    held = keyed.try_admit("a")
    records: list[object] = []
    live_gate(keyed, "a").observe(records.append)  # the key's full state takes the hooks
    async with keyed.admit("a"):
        pass
    held.release()
    assert len(records) == 2


async def test_the_dropped_gate_held_by_nothing_is_the_next_new_keys_gate() -> None:
    # In either build: the reference count admit() reads of a gate nothing holds is the one it
    # measured. (Its set of parked permits is held here, not the gate, which a new gate would not share.)
    keyed: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0)
    async with keyed.admit("a") as permit:
        parked = permit.gate._parked
    del permit
    for key in ("b", "c"):
        async with keyed.admit(key) as permit:
            assert (permit.gate._parked is parked, permit.gate.name) == (True, f"keyed/{key}")
        del permit
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
async def test_a_gate_made_again_is_named_after_its_new_key_wherever_the_name_is_first_read(
    key: object, read: Callable[[BoundedGate], str]
) -> None:
    # A gate made again for another key is named from that key only when something reads the name
    # (a refusal, its statistics, its repr, its property), for a key of any hashable type.
    keyed: KeyedGate[object] = KeyedGate(max_running=1, max_waiting=0, name="t")
    async with keyed.admit("a") as permit:
        parked = permit.gate._parked
    del permit
    async with keyed.admit(key) as permit:
        gate = permit.gate
        assert gate._parked is parked  # the same gate, made again
        assert read(gate) == f"t/{key}"
        assert gate.name == f"t/{key}"


async def test_a_gate_made_again_names_its_new_key_in_the_late_it_raises() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, name="t")
    async with keyed.admit("a") as permit:
        parked = permit.gate._parked
    del permit
    with pytest.raises(Late) as late:
        async with keyed.admit("slow", timeout=1) as permit:
            assert permit.gate._parked is parked  # the same gate, made again, not named yet
            await asyncio.sleep(2)  # virtual time
    assert late.value.gate == "t/slow"


@pytest.mark.parametrize("max_running", [1, None])
async def test_the_gate_made_again_takes_the_template_of_now(max_running: int | None) -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=max_running, max_waiting=0)
    async with keyed.admit("a") as permit:
        parked = permit.gate._parked
    del permit
    keyed.set_limits(max_running=2)  # no key's gate to change: the next one is made with C=2
    async with keyed.admit("b") as permit:
        gate = permit.gate
        assert (gate._parked is parked, gate.name, gate.max_running) == (True, "keyed/b", 2)
        other = keyed.try_admit("b")  # the second slot
        with pytest.raises(QueueFull):
            keyed.try_admit("b")
        other.release()
    assert (gate.stats().max_running, gate.stats().admitted, gate.stats().completed) == (2, 2, 2)


async def test_a_dropped_gate_is_made_again_only_when_nothing_holds_it() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0)
    async with keyed.admit("a"):
        pass
    async with keyed.admit("b") as permit:  # "a"'s gate, held by nothing, made again for "b"
        assert permit.gate.name == "keyed/b"
    kept = permit.gate
    held = weakref.ref(kept)
    async with keyed.admit("c") as other:  # b's gate is still held (kept, permit): a new one
        assert other.gate is not kept
        assert (kept.name, other.gate.name) == ("keyed/b", "keyed/c")
    assert (kept.stats().completed, kept.stats().admitted) == (1, 1)
    assert held() is kept
    total = keyed.stats()
    assert (total.created, total.dropped, total.total.completed) == (3, 3, 3)


async def test_a_light_key_keeps_the_recent_pace_a_plain_gate_of_its_c_keeps() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=4, max_waiting=0)
    plain = BoundedGate(max_running=4, max_waiting=0)
    held = [keyed.try_admit("a"), plain.try_admit()]  # the key stays listed (and light) throughout
    for seconds in (1, 2, 4):
        for admit in (keyed.admit("a"), plain.admit()):
            async with admit:
                await asyncio.sleep(seconds)
    assert light_of(live_gate(keyed, "a")) is not None
    held += [keyed.try_admit("a") for _ in range(3)] + [plain.try_admit() for _ in range(3)]
    with pytest.raises(QueueFull) as keyed_refusal:
        keyed.try_admit("a")  # the refusal gives the key its full state, with the pace it kept
    with pytest.raises(QueueFull) as plain_refusal:
        plain.try_admit()
    assert keyed_refusal.value.retry_after == plain_refusal.value.retry_after
    for permit in held:
        permit.release()


async def test_a_light_keys_statistics_are_a_plain_gates_and_reading_them_promotes_nothing() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=1)
    plain = BoundedGate(max_running=2, max_waiting=1, name="keyed/a")
    held = [keyed.try_admit("a"), plain.try_admit()]  # the key stays listed, and light
    for seconds in (1, 3, 2):
        for admit in (keyed.admit("a"), plain.admit()):
            async with admit:
                await asyncio.sleep(seconds)
    gate = live_gate(keyed, "a")
    light = light_of(gate)
    assert light is not None
    assert gate.stats() == plain.stats()  # every field a full state's, read as it is
    assert light_of(gate) is light
    for permit in held:
        permit.release()
    assert keyed.stats().total.end_to_end_seconds_total == plain.stats().end_to_end_seconds_total


async def test_whatever_held_a_light_key_holds_its_full_state_after_the_promotion() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=1)
    held = keyed.try_admit("a")
    gate = live_gate(keyed, "a")
    state = gate._state
    assert light_of(gate) is state

    async def queued() -> None:
        async with keyed.admit("a"):
            pass

    task = asyncio.create_task(queued())  # must wait: the key's full state
    await asyncio.sleep(0)
    assert light_of(gate) is None
    assert gate._state is state  # promoted in place: one state, whoever holds it
    assert (state.running, state.waiting, gate.waiting, keyed.waiting) == (1, 1, 1, 1)
    gate.set_limits(max_running=2)  # the waiter starts
    assert (gate.max_running, state.limit, state.waiting, keyed.running) == (2, 2, 0, 2)
    await task
    held.release()
    assert keyed.stats().total.completed == 2
    assert len(keyed) == 0
