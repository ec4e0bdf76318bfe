"""KeyedGate(adaptive=...): a controller per key, fed by signals per key, whose learned C outlives the
key's gate; the overrides take any pair of limits."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from boundedgate import Adaptive, KeyedGate, Permit, QueueFull


async def _hold(keyed: KeyedGate[str], key: str, seconds: float) -> None:
    async with keyed.admit(key, timeout=100):
        await asyncio.sleep(seconds)


async def test_an_overload_of_one_key_cuts_only_that_keys_C_once_per_window() -> None:
    keyed: KeyedGate[str] = KeyedGate(
        max_running=20, max_waiting=5, name="model", adaptive=Adaptive(decrease=0.5, window=2.0)
    )
    a, b = keyed.try_admit("a"), keyed.try_admit("b")
    for _ in range(30):
        keyed.signal("a", "overloaded")
    gate_a, gate_b = keyed.get("a"), keyed.get("b")
    assert gate_a is not None
    assert gate_b is not None
    assert (gate_a.max_running, gate_b.max_running) == (10, 20)
    control_a, control_b = keyed.controller("a"), keyed.controller("b")
    assert control_a is not None
    assert control_b is not None
    assert control_a is not control_b
    assert gate_a.controller is control_a  # the key's gate answers for it too
    assert (control_a.cuts, control_a.suppressed, control_b.cuts) == (1, 29, 0)
    assert (gate_a.stats().limit_changes, gate_b.stats().limit_changes) == (1, 0)
    assert keyed.stats().total.limit_changes == 1
    keyed.signal("b", "ignored")
    keyed.signal("b", "rate_limited", retry_after=1)
    assert gate_b.max_running == 20  # neither is congestion
    a.release()
    b.release()
    assert keyed.stats().total.limit_changes == 1  # the dropped gate's change stays counted


async def test_the_learned_C_survives_the_keys_gate_being_dropped_and_made_again() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=8, max_waiting=5, adaptive=Adaptive(window=1.0))
    held = keyed.try_admit("a")
    keyed.signal("a", "overloaded")
    first = keyed.get("a")
    held.release()
    assert len(keyed) == 0
    assert keyed.stats().dropped == 1
    controller = keyed.controller("a")
    assert controller is not None
    assert controller.limit == 7
    again = keyed.try_admit("a")
    gate = keyed.get("a")
    assert gate is not None
    assert gate is not first
    assert gate.max_running == 7
    assert gate.controller is controller
    assert gate.stats().limit_changes == 0  # made with the learned C, not changed to it
    again.release()
    assert keyed.limits("a").max_running == 8  # the template and overrides are left as they were


async def test_a_signal_for_a_key_without_a_gate_is_learned_for_its_next_gate() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=10, max_waiting=0, adaptive=Adaptive(decrease=0.5))
    keyed.signal("a", "overloaded")
    assert len(keyed) == 0  # a cut makes no gate
    controller = keyed.controller("a")
    assert controller is not None
    assert (controller.limit, controller.cuts) == (5, 1)
    permits = [keyed.try_admit("a") for _ in range(5)]
    with pytest.raises(QueueFull):
        keyed.try_admit("a")
    for permit in permits:
        permit.release()
    assert keyed.controller("b") is None  # a key that learned nothing has no record


async def test_a_key_whose_controller_heard_nothing_leaves_no_record() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=4, max_waiting=0, adaptive=Adaptive())
    for i in range(100):
        with contextlib.suppress(RuntimeError):
            async with keyed.admit(f"failing-{i}"):
                raise RuntimeError("a failure is no sample")
    assert keyed.controller("failing-3") is None
    assert len(keyed._learned) == 0
    async with keyed.admit("answered"):
        pass
    controller = keyed.controller("answered")
    assert controller is not None
    assert controller.windows == 0


async def test_the_learned_records_are_bounded_oldest_forgotten_first() -> None:
    keyed: KeyedGate[str] = KeyedGate(
        max_running=10, max_waiting=0, adaptive=Adaptive(decrease=0.5), learned_keys=2
    )
    for key in ("a", "b", "c"):
        keyed.signal(key, "overloaded")
    assert keyed.controller("a") is None
    assert [keyed.controller(k).limit for k in ("b", "c")] == [5, 5]  # type: ignore[union-attr]
    held = keyed.try_admit("b")  # its record goes back to its gate: b is live, not remembered
    keyed.signal("d", "overloaded")
    keyed.signal("e", "overloaded")
    assert keyed.controller("c") is None  # pushed out by d and e
    held.release()  # b's gate dropped: b is remembered again, the newest, so d goes
    assert keyed.controller("d") is None
    assert [keyed.controller(k) is not None for k in ("b", "e")] == [True, True]
    with pytest.raises(ValueError, match="learned_keys"):
        KeyedGate(max_running=1, max_waiting=0, adaptive=Adaptive(), learned_keys=-1)


async def test_each_keys_controller_samples_its_own_requests() -> None:
    keyed: KeyedGate[str] = KeyedGate(
        max_running=2, max_waiting=100, adaptive=Adaptive(min_samples=2, window=1.0)
    )
    # Key a: a steady 4 callers for 2 slots (busy, latency flat): its C grows. Key b: one at a time.
    for _ in range(20):
        await asyncio.gather(*(_hold(keyed, "a", 0.5) for _ in range(4)), _hold(keyed, "b", 0.5))
    a, b = keyed.controller("a"), keyed.controller("b")
    assert a is not None
    assert b is not None
    assert 2 < a.limit <= 8
    assert a.grown > 0
    assert b.limit == 2
    assert b.grown == 0
    # A growth decided by a key's last answer applies to its next gate, which is made with it (no
    # change counted); one decided while the key's gate still lives is a change of that gate.
    assert 0 < keyed.stats().total.limit_changes <= a.grown


async def test_a_rate_limit_pauses_only_its_key_even_across_the_idle_drop() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=5)
    loop = asyncio.get_running_loop()
    keyed.signal("a", "rate_limited", retry_after=5)  # no controller needed for a pause
    started: dict[str, float] = {}

    async def call(key: str) -> None:
        async with keyed.admit(key, timeout=100):
            started[key] = loop.time()

    await asyncio.gather(call("a"), call("b"))
    assert started == {"a": 5.0, "b": 0.0}
    assert keyed.stats().total.pauses == 1


async def test_signals_are_checked_and_adaptive_needs_a_C() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=5)
    keyed.signal("a", "overloaded")  # without a controller: nothing to cut
    assert keyed.controller("a") is None
    assert len(keyed) == 0
    with pytest.raises(ValueError, match="teapot"):
        keyed.signal("a", "teapot")
    with pytest.raises(ValueError, match="max_running"):
        KeyedGate(max_running=None, max_waiting=5, adaptive=Adaptive())
    with pytest.raises(TypeError, match="Adaptive"):
        KeyedGate(max_running=1, max_waiting=5, adaptive=0.5)  # type: ignore[arg-type]


async def test_a_key_whose_override_has_no_C_has_no_controller() -> None:
    keyed: KeyedGate[str] = KeyedGate(
        max_running=3, max_waiting=0, overrides={"free": (None, 0)}, adaptive=Adaptive()
    )
    permit = keyed.try_admit("free")
    assert isinstance(permit, Permit)
    keyed.signal("free", "overloaded")
    assert keyed.controller("free") is None
    permit.release()


async def test_overrides_take_plain_pairs_as_the_runtime_does() -> None:
    pairs: dict[str, tuple[int | None, int | None]] = {"a": (2, 1)}
    keyed: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, overrides=pairs)
    assert keyed.limits("a") == (2, 1)
    by_function: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, overrides=lambda key: (3, 0))
    assert by_function.limits("z").max_running == 3
