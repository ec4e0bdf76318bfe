"""Limits that move, through the asyncio driver: set_limits, pause, signal, feasible, adaptive."""

from __future__ import annotations

import asyncio
import logging

import pytest

from boundedgate import Adaptive, BoundedGate, Evicted, Infeasible, KeyedGate, QueueExpired, QueueFull


async def hold(gate: BoundedGate, seconds: float, log: list[tuple[str, float]], name: str) -> None:
    async with gate.admit(timeout=100):
        log.append((name, asyncio.get_running_loop().time()))
        await asyncio.sleep(seconds)


async def test_raising_C_starts_the_oldest_waiters_at_once() -> None:
    gate = BoundedGate(max_running=1, max_waiting=10)
    log: list[tuple[str, float]] = []
    tasks = [asyncio.create_task(hold(gate, 10, log, str(i))) for i in range(4)]
    await asyncio.sleep(1)
    assert [n for n, _ in log] == ["0"]
    gate.set_limits(max_running=3)
    await asyncio.sleep(0)
    assert log == [("0", 0.0), ("1", 1.0), ("2", 1.0)]
    assert (gate.max_running, gate.running, gate.waiting) == (3, 3, 1)
    assert gate.stats().limit_changes == 1
    assert gate.stats().max_running == 3
    await asyncio.gather(*tasks)


async def test_lowering_C_never_interrupts_and_the_excess_drains() -> None:
    gate = BoundedGate(max_running=3, max_waiting=10)
    log: list[tuple[str, float]] = []
    tasks = [asyncio.create_task(hold(gate, 10, log, str(i))) for i in range(3)]
    await asyncio.sleep(1)
    gate.set_limits(max_running=1)
    assert (gate.running, gate.max_running) == (3, 1)
    late = asyncio.create_task(hold(gate, 1, log, "late"))
    await asyncio.gather(*tasks)  # every running call finished: nothing was interrupted
    await late
    assert log[-1] == ("late", 10.0)  # started when the three drained below C = 1
    assert "running 0/1" in repr(gate)


async def test_lowering_Q_keeps_the_queue_or_evicts_the_newest_when_asked() -> None:
    gate = BoundedGate(max_running=1, max_waiting=5)
    log: list[tuple[str, float]] = []
    tasks = [asyncio.create_task(hold(gate, 10, log, str(i))) for i in range(5)]
    await asyncio.sleep(1)
    gate.set_limits(max_waiting=2)
    assert gate.waiting == 4
    with pytest.raises(QueueFull):
        async with gate.admit():
            pass
    gate.set_limits(max_waiting=1, evict=True)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert [type(r) for r in results] == [type(None)] * 2 + [Evicted] * 3
    assert gate.stats().evicted == 3
    assert gate.stats().limit_changes == 2


async def test_set_limits_logs_each_change(caplog: pytest.LogCaptureFixture) -> None:
    gate = BoundedGate(max_running=2, max_waiting=2, name="llm")
    with caplog.at_level(logging.INFO, logger="boundedgate"):
        gate.set_limits(max_running=4)
        gate.set_limits(max_running=4)  # no change: no record
    events = [r for r in caplog.records if getattr(r, "event", None) == "limit_changed"]
    assert [(r.gate, r.max_running, r.max_waiting) for r in events] == [("llm", 4, 2)]  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="max_running"):
        gate.set_limits(max_running=0)
    assert gate.max_running == 4


async def test_a_rate_limit_signal_pauses_starts_until_the_reset_and_keeps_C() -> None:
    gate = BoundedGate(max_running=2, max_waiting=5)
    log: list[tuple[str, float]] = []
    gate.signal("rate_limited", retry_after=5)
    tasks = [asyncio.create_task(hold(gate, 1, log, str(i))) for i in range(3)]
    await asyncio.sleep(1)
    assert log == []
    assert gate.waiting == 3
    assert gate.stats().paused_until == 5.0
    await asyncio.gather(*tasks)
    assert log == [("0", 5.0), ("1", 5.0), ("2", 6.0)]
    assert gate.max_running == 2
    assert gate.stats().pauses == 1


async def test_pauses_counts_each_pause_that_began_or_was_extended() -> None:
    gate = BoundedGate(max_running=2, max_waiting=5)
    gate.pause(5)
    gate.pause(3)  # ends before the pause in force: changes nothing
    gate.pause(8)  # extends it
    assert gate.stats().pauses == 2
    await asyncio.sleep(9)
    gate.pause(1)  # a new one, after the first ended
    assert gate.stats().pauses == 3


async def test_queued_requests_still_expire_during_a_pause() -> None:
    gate = BoundedGate(max_running=1, max_waiting=5)
    gate.pause(10)
    with pytest.raises(QueueExpired):
        async with gate.admit(timeout=2):
            pass
    assert asyncio.get_running_loop().time() == 2.0


async def test_overload_and_ignored_signals_need_a_controller_and_bad_kinds_are_refused() -> None:
    gate = BoundedGate(max_running=4, max_waiting=5)
    gate.signal("overloaded")
    gate.signal("ignored")
    assert gate.max_running == 4
    assert gate.controller is None
    with pytest.raises(ValueError, match="teapot"):
        gate.signal("teapot")


async def test_an_overload_burst_cuts_C_once_per_window() -> None:
    gate = BoundedGate(max_running=20, max_waiting=5, adaptive=Adaptive(decrease=0.5, window=2.0))
    for _ in range(50):
        gate.signal("overloaded")
    assert gate.max_running == 10
    await asyncio.sleep(2)
    gate.signal("overloaded")
    assert gate.max_running == 5
    assert gate.controller is not None
    assert (gate.controller.cuts, gate.controller.suppressed) == (2, 49)
    gate.signal("rate_limited", retry_after=1)
    assert gate.max_running == 5  # a rate limit is not overload


async def test_the_controller_grows_C_from_clean_busy_windows_but_not_past_twice_in_flight() -> None:
    gate = BoundedGate(max_running=2, max_waiting=100, adaptive=Adaptive(min_samples=2, window=1.0))

    async def call() -> None:
        async with gate.admit(timeout=60):
            await asyncio.sleep(0.5)

    # A steady stream of 2 at a time: busy (in flight == C), latency flat: C grows.
    for _ in range(20):
        await asyncio.gather(call(), call(), call(), call())
    assert gate.max_running is not None
    assert 2 < gate.max_running <= 8


async def test_feasible_admission_refuses_at_arrival_with_a_typed_error() -> None:
    gate = BoundedGate(max_running=1, max_waiting=None, feasible=True)
    log: list[tuple[str, float]] = []
    await hold(gate, 2, log, "pace")  # the recent pace: runs of 2 s
    busy = asyncio.create_task(hold(gate, 2, log, "busy"))
    await asyncio.sleep(0)
    with pytest.raises(Infeasible) as raised:
        async with gate.admit(timeout=1.5):
            pass
    error = raised.value
    assert (error.code, error.predicted_wait, error.budget, error.retry_after) == (
        "infeasible",
        2.0,
        1.5,
        2.0,
    )
    assert error.headers() == {"Retry-After": "2"}
    assert gate.stats().infeasible == 1
    assert gate.waiting == 0
    with pytest.raises(Infeasible):  # it could start by 2 s, but not finish a run by 3 s
        async with gate.admit(timeout=3):
            pass
    with pytest.raises(Infeasible):  # nor a long run, two mean runs (4 s), by 5.5 s
        async with gate.admit(timeout=5.5):
            pass
    assert gate.stats().infeasible == 3
    async with gate.admit(timeout=6.5):  # a budget that fits a long run (start at 2, 4 s) waits
        pass
    async with gate.admit(timeout=0.5):  # nobody running: it starts at once, as ever
        pass
    await busy


async def test_feasible_admission_is_not_fooled_by_calls_that_fail_fast() -> None:
    # Bodies that raise after 50 ms (a provider's 529s) leave the pace at the 2 s of the run
    # that completed: a request that cannot start in time is still refused at arrival.
    gate = BoundedGate(max_running=1, max_waiting=None, feasible=True)
    log: list[tuple[str, float]] = []
    await hold(gate, 2, log, "pace")
    for _ in range(10):
        with pytest.raises(ConnectionError):
            async with gate.admit():
                await asyncio.sleep(0.05)
                raise ConnectionError("529 overloaded")
    assert gate.stats().failed == 10
    busy = asyncio.create_task(hold(gate, 2, log, "busy"))
    await asyncio.sleep(0)
    with pytest.raises(Infeasible) as raised:
        async with gate.admit(timeout=1.5):
            pass
    assert raised.value.predicted_wait == 2.0
    await busy


async def test_by_deadline_starts_the_waiter_due_first_and_counts_only_those_ahead() -> None:
    gate = BoundedGate(max_running=1, max_waiting=None, feasible=True, by_deadline=True)
    log: list[tuple[str, float]] = []
    await hold(gate, 2, log, "pace")  # the recent pace: runs of 2 s
    started: list[str] = []

    async def call(name: str, budget: float) -> None:
        async with gate.admit(timeout=budget):
            started.append(name)
            await asyncio.sleep(1)

    busy = asyncio.create_task(hold(gate, 2, log, "busy"))
    await asyncio.sleep(0)
    calls = [asyncio.create_task(call(name, budget)) for name, budget in (("30", 30), ("20", 20), ("10", 10))]
    await asyncio.sleep(0)
    assert gate.waiting == 3
    # Three queued, all due later: a newcomer due in 6.5 s waits for the running one alone (start
    # by 2 s, a long run of 4 s after). In arrival order it would wait for all four.
    async with gate.admit(timeout=6.5):
        started.append("6.5")
    await asyncio.gather(busy, *calls)
    assert started == ["6.5", "10", "20", "30"]
    assert gate.stats().infeasible == 0


async def test_a_keyed_gate_gives_every_key_feasible_admission_by_its_own_pace_and_deadline_order() -> None:
    # An idle key's gate, and its pace with it, is kept only with keep_idle.
    keyed: KeyedGate[str] = KeyedGate(
        max_running=1, max_waiting=None, feasible=True, by_deadline=True, keep_idle=2
    )

    async def run(key: str, seconds: float, budget: float, started: list[str], name: str) -> None:
        async with keyed.admit(key, timeout=budget):
            started.append(name)
            await asyncio.sleep(seconds)

    started: list[str] = []
    await run("slow", 4, 100, started, "pace")  # the slow key's pace: runs of 4 s
    await run("fast", 0.5, 100, started, "pace")  # the fast key's: 0.5 s
    busy = [asyncio.create_task(run(key, 1, 100, started, key)) for key in ("slow", "fast")]
    await asyncio.sleep(0)
    # Behind one running call, a budget of 6 s fits the fast key (start by 0.5 s, a long run of
    # 1 s) but not the slow one (start by 4 s, a long run of 8 s).
    with pytest.raises(Infeasible):
        await run("slow", 1, 6, started, "refused")
    patient = asyncio.create_task(run("fast", 0.5, 100, started, "patient"))
    await asyncio.sleep(0)
    await run("fast", 0.5, 6, started, "urgent")  # due sooner: it starts before the patient one
    await asyncio.gather(*busy, patient)
    assert started.index("urgent") < started.index("patient")
    assert keyed.stats().total.infeasible == 1


def test_by_deadline_and_feasible_are_flags() -> None:
    for flag in ("by_deadline", "feasible"):
        with pytest.raises(TypeError, match=flag):
            BoundedGate(max_running=1, max_waiting=1, **{flag: "yes"})  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=flag):
            KeyedGate(max_running=1, max_waiting=1, **{flag: "yes"})  # type: ignore[arg-type]


async def test_keyed_gate_limits_change_for_the_template_and_for_one_key() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=10)
    started: list[str] = []

    async def call(key: str) -> None:
        async with keyed.admit(key, timeout=100):
            started.append(key)
            await asyncio.sleep(10)

    tasks = [asyncio.create_task(call(k)) for k in ("a", "a", "a", "b", "b")]
    await asyncio.sleep(1)
    assert started == ["a", "b"]
    keyed.set_limits("a", max_running=3)
    await asyncio.sleep(0)
    assert started == ["a", "b", "a", "a"]
    keyed.set_limits(max_running=2)  # the template: b follows it, a keeps its own
    await asyncio.sleep(0)
    assert started == ["a", "b", "a", "a", "b"]
    assert keyed.limits("a").max_running == 3
    assert keyed.max_running == 2
    assert keyed.stats().total.running == 5
    await asyncio.gather(*tasks)
    assert keyed.limits("c").max_running == 2


async def test_keyed_totals_count_the_changes_and_ignore_a_key_s_pause() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=10, keep_idle=4)

    async def call(key: str) -> None:
        async with keyed.admit(key, timeout=100):
            await asyncio.sleep(1)

    await asyncio.gather(call("a"), call("b"))
    keyed.set_limits("a", max_running=3)
    gate = keyed.get("b")
    assert gate is not None
    gate.pause(5)
    total = keyed.stats().total
    assert (total.max_running, total.limit_changes, total.pauses, total.paused_until) == (5, 1, 1, None)
