"""An adaptive controller decides from the C in force: a set_limits() between its decisions re-bases it.

A gate lowered by hand from 20 to 4 must not go back to 18 on the next overload signal (cut or
suppressed) because its controller remembered its own C; the same for a keyed gate's keys, live or
remembered, and for the core's controller itself.
"""

from __future__ import annotations

import asyncio

import pytest

from boundedgate import Adaptive, AdaptiveLimit, BoundedGate, KeyedGate

SETTINGS = Adaptive(floor=1, ceiling=64, decrease=0.9, window=10.0)


async def test_an_overload_after_set_limits_cuts_the_C_in_force() -> None:
    gate = BoundedGate(max_running=20, max_waiting=5, adaptive=SETTINGS)
    gate.set_limits(max_running=4)
    assert gate.controller is not None
    assert gate.controller.limit == 4
    gate.signal("overloaded")
    assert gate.max_running == 3  # 4 x 0.9, not 20 x 0.9
    gate.set_limits(max_running=10)
    gate.signal("overloaded")  # within the window of the cut: suppressed, C stays as set
    assert gate.max_running == 10
    assert (gate.controller.cuts, gate.controller.suppressed) == (1, 1)


async def test_a_suppressed_overload_after_set_limits_leaves_the_C_in_force() -> None:
    gate = BoundedGate(max_running=20, max_waiting=5, adaptive=SETTINGS)
    gate.signal("overloaded")  # 20 -> 18
    gate.set_limits(max_running=4)
    gate.signal("overloaded")  # suppressed: within the window
    assert gate.max_running == 4
    stats = gate.stats()
    assert (stats.max_running, stats.limit_changes) == (4, 2)


async def test_growth_after_set_limits_grows_from_the_C_in_force() -> None:
    gate = BoundedGate(max_running=2, max_waiting=100, adaptive=Adaptive(min_samples=2, window=1.0))

    async def call() -> None:
        async with gate.admit(timeout=60):
            await asyncio.sleep(0.5)

    for _ in range(6):  # busy, flat latency: C grows
        await asyncio.gather(*(call() for _ in range(8)))
    assert gate.max_running is not None
    assert gate.max_running > 2
    gate.set_limits(max_running=1)
    for _ in range(2):  # busy at C = 1: it grows from 1 (a stale C above the peak never would)
        await asyncio.gather(*(call() for _ in range(4)))
    assert gate.max_running is not None
    assert 2 <= gate.max_running <= 4  # at most twice the peak in flight, each window


async def test_no_limit_on_running_is_refused_for_an_adaptive_gate_and_changes_nothing() -> None:
    gate = BoundedGate(max_running=20, max_waiting=5, adaptive=SETTINGS)
    with pytest.raises(ValueError, match=r"^max_running=None .*adaptive controller"):
        gate.set_limits(max_running=None, max_waiting=9)
    assert (gate.max_running, gate.max_waiting, gate.stats().limit_changes) == (20, 5, 0)
    assert gate.controller is not None
    assert gate.controller.limit == 20


async def test_a_keyed_gates_keys_are_re_based_live_and_remembered() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=20, max_waiting=5, adaptive=SETTINGS)
    live = keyed.try_admit("live")
    keyed.signal("gone", "overloaded")  # a record without a gate: 18
    keyed.signal("own", "overloaded")
    keyed.set_limits(max_waiting=7)  # C unchanged: what the records learned is kept
    keyed.set_limits("own", max_waiting=7)
    assert [keyed.controller(k).limit for k in ("gone", "own")] == [18, 18]  # type: ignore[union-attr]
    keyed.set_limits("own", max_running=6)  # a key's own limits: its record too
    keyed.set_limits(max_running=4)  # the template: the live key's gate and gone's record
    assert [keyed.controller(k).limit for k in ("live", "gone", "own")] == [4, 4, 6]  # type: ignore[union-attr]
    keyed.signal("live", "overloaded")
    keyed.signal("gone", "overloaded")  # suppressed (its window), so the record keeps 4
    keyed.signal("own", "overloaded")
    gate = keyed.get("live")
    assert gate is not None
    assert gate.max_running == 3
    assert [keyed.controller(k).limit for k in ("gone", "own")] == [4, 6]  # type: ignore[union-attr]
    again = keyed.try_admit("gone")  # the next gate starts from the record: the C set
    gone = keyed.get("gone")
    assert gone is not None
    assert gone.max_running == 4
    with pytest.raises(ValueError, match=r"^max_running=None .*adaptive"):
        keyed.set_limits(max_running=None)
    with pytest.raises(ValueError, match=r"^max_running=None .*adaptive"):
        keyed.set_limits("live", max_running=None)
    assert (keyed.max_running, keyed.limits("live").max_running, gate.max_running) == (4, 4, 3)
    live.release()
    again.release()


def test_the_core_controller_re_bases_on_the_C_set_elsewhere() -> None:
    controller = AdaptiveLimit(SETTINGS, 20)
    controller.signal("overloaded", 0.0)
    assert controller.limit == 18
    controller.rebase(4)
    assert controller.signal("overloaded", 100.0) == 3
    controller.value = 7.5  # a fraction of growth
    controller.rebase(7)
    assert controller.value == 7.5  # kept while C is unchanged
