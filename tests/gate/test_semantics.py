"""The gate's semantics one rule at a time: FIFO, no barging, refusal before suspension, Late,
failures, the timer, loop binding, statistics and repr."""

from __future__ import annotations

import asyncio
import math
import sys

import looptime
import pytest

from boundedgate import BoundedGate, Late, QueueExpired, QueueFull, RateLimit, Status, admit_all
from tests.helpers import checked_gate


async def test_waiters_start_in_arrival_order() -> None:
    gate = checked_gate(1, None)
    order: list[int] = []

    async def request(i: int) -> None:
        async with gate.admit():
            order.append(i)
            await asyncio.sleep(1)

    await asyncio.gather(*(request(i) for i in range(20)))
    assert order == list(range(20))


async def test_a_freed_slot_goes_to_the_oldest_waiter_not_a_newcomer() -> None:
    gate = checked_gate(1, 1)
    holder = gate.try_admit()
    waiter = gate.admit()
    waiter_task = asyncio.create_task(waiter.__aenter__())
    await asyncio.sleep(0)
    holder.release()
    # In the same turn, before the waiter's task has resumed, a newcomer arrives: the slot is
    # already the waiter's, so the newcomer queues behind nobody but waits.
    assert waiter.status is Status.RUNNING
    newcomer = gate.admit()
    newcomer_task = asyncio.create_task(newcomer.__aenter__())
    await asyncio.sleep(0)
    assert newcomer.status is Status.QUEUED
    (await waiter_task).release()
    (await newcomer_task).release()


async def test_queue_full_is_raised_before_any_suspension_and_leaves_nothing_behind() -> None:
    gate = checked_gate(1, 0)
    holder = gate.try_admit()
    loop = asyncio.get_running_loop()
    tasks_before = len(asyncio.all_tasks())
    timers_before = len(loop._scheduled)  # type: ignore[attr-defined]
    coro = gate.admit(timeout=30).__aenter__()
    with pytest.raises(QueueFull):
        coro.send(None)  # the very first step raises: no await happened
    assert len(asyncio.all_tasks()) == tasks_before
    assert len(loop._scheduled) == timers_before  # type: ignore[attr-defined]
    assert (gate.running, gate.waiting) == (1, 0)
    holder.release()


async def test_max_waiting_zero_means_no_waiting_room() -> None:
    gate = checked_gate(2, 0)
    a, b = gate.try_admit(), gate.try_admit()
    with pytest.raises(QueueFull):
        async with gate.admit(timeout=100):
            pass
    a.release()
    b.release()


async def test_unbounded_waiting_is_an_explicit_opt_in() -> None:
    gate = checked_gate(1, None)
    holder = gate.try_admit()
    tasks = [asyncio.create_task(gate.admit().__aenter__()) for _ in range(1000)]
    await asyncio.sleep(0)
    assert gate.waiting == 1000
    assert repr(gate) == "<BoundedGate 'test' [running 1/1, waiting 1000/unbounded]>"
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    holder.release()


async def test_late_carries_the_deadline_and_overrun() -> None:
    gate = checked_gate(1, 1, name="openai")
    await asyncio.sleep(10)  # arrival at 10, not 0, so that times are not confused with durations
    holder = gate.try_admit()
    loop = asyncio.get_running_loop()
    loop.call_later(2, holder.release)
    with pytest.raises(Late) as info:
        async with gate.admit(timeout=5):
            await asyncio.sleep(4)
    late = info.value
    assert (late.waited, late.elapsed, late.deadline, late.overrun) == (2, 6, 15, 1)
    assert (late.gate, late.code, late.http_status) == ("openai", "late", 504)
    assert isinstance(late, TimeoutError)
    assert str(late) == (
        "finished 1.000s past its deadline, 6.000s after arrival, at gate 'openai' [running 0/1, waiting 0/1]"
    )


async def test_body_exception_propagates_unchanged_even_when_late() -> None:
    gate = checked_gate(1, 1)

    class Oops(Exception):
        pass

    with pytest.raises(Oops):
        async with gate.admit(timeout=1):
            await asyncio.sleep(5)
            raise Oops
    assert gate.stats().failed == 1
    assert gate.stats().late == 0


async def test_queue_expired_fields() -> None:
    gate = checked_gate(1, 1, name="openai")
    holder = gate.try_admit()
    await asyncio.sleep(3)
    holder.release()
    holder = gate.try_admit()
    with pytest.raises(QueueExpired) as info:
        async with gate.admit(timeout=4):
            pass
    expired = info.value
    assert (expired.waited, expired.elapsed, expired.deadline) == (4, 4, 7)
    assert (expired.running, expired.waiting, expired.code) == (1, 0, "queue_expired")
    assert expired.retry_after == 3  # (0 waiting + 1) * 3 s recent run / 1 slot
    assert isinstance(expired, TimeoutError)
    holder.release()


async def test_retry_after_follows_the_recent_pace() -> None:
    gate = checked_gate(2, 2)
    for run in (10, 10):
        async with gate.admit():
            await asyncio.sleep(run)
    holders = [gate.try_admit() for _ in range(2)]
    waiters = [asyncio.create_task(gate.admit().__aenter__()) for _ in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(QueueFull) as info:
        gate.try_admit()
    assert info.value.retry_after == pytest.approx((2 + 1) * 10 / 2)
    assert info.value.headers() == {"Retry-After": "15"}
    for w in waiters:
        w.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    for h in holders:
        h.release()


async def test_retry_after_is_unknown_before_any_run_ended() -> None:
    gate = checked_gate(1, 0)
    holder = gate.try_admit()
    with pytest.raises(QueueFull) as info:
        gate.try_admit()
    assert info.value.retry_after is None
    assert info.value.headers() == {}
    assert info.value.to_dict()["retry_after"] is None
    holder.release()


async def test_one_timer_serves_all_waiters() -> None:
    gate = checked_gate(1, None)
    holder = gate.try_admit()
    loop = asyncio.get_running_loop()
    tasks = [asyncio.create_task(gate.admit(timeout=100 + i).__aenter__()) for i in range(50)]
    await asyncio.sleep(0)
    ours = [h for h in loop._scheduled if getattr(h._callback, "__self__", None) is gate]  # type: ignore[attr-defined]
    assert len(ours) == 1
    assert ours[0].when() == 100
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, QueueExpired) for r in results)
    assert loop.time() == 149
    holder.release()


async def test_earlier_deadline_rearms_the_timer() -> None:
    gate = checked_gate(1, None)
    holder = gate.try_admit()
    late_task = asyncio.create_task(gate.admit(timeout=100).__aenter__())
    early_task = asyncio.create_task(gate.admit(timeout=10).__aenter__())
    with pytest.raises(QueueExpired):
        await early_task
    assert asyncio.get_running_loop().time() == 10
    assert not late_task.done()
    late_task.cancel()
    holder.release()


async def test_expiry_of_waiters_that_already_left_the_queue_is_harmless() -> None:
    # A waiter that started before its deadline leaves a stale deadline behind; the timer firing
    # for it finds nothing to expire and the gate carries on.
    gate = checked_gate(1, None)
    holder = gate.try_admit()
    task = asyncio.create_task(gate.admit(timeout=10).__aenter__())
    await asyncio.sleep(1)
    holder.release()
    permit = await task
    await asyncio.sleep(20)
    permit.release()
    stats = gate.stats()
    assert (stats.expired, stats.completed, stats.late) == (0, 1, 1)


async def test_stats_snapshot_is_immutable_and_complete() -> None:
    gate = checked_gate(1, 1, name="s")
    async with gate.admit():
        await asyncio.sleep(2)
    stats = gate.stats()
    with pytest.raises(AttributeError):
        stats.running = 5  # type: ignore[misc]
    assert stats.name == "s"
    assert (stats.max_running, stats.max_waiting) == (1, 1)
    assert stats.arrived == stats.finished == stats.completed == 1
    assert stats.mean_run_seconds == stats.mean_end_to_end_seconds == 2
    assert stats.mean_queue_seconds == 0
    async with gate.admit():
        await asyncio.sleep(4)
    assert gate.stats().mean_run_seconds == 3
    empty = checked_gate(1, 1).stats()
    assert empty.mean_run_seconds is None
    assert empty.mean_queue_seconds is None
    assert empty.mean_end_to_end_seconds is None


async def test_properties_mirror_the_state() -> None:
    gate = checked_gate(3, 4, name="p")
    assert (gate.name, gate.max_running, gate.max_waiting, gate.running, gate.waiting) == ("p", 3, 4, 0, 0)
    permit = gate.try_admit()
    assert gate.running == 1
    assert repr(gate) == "<BoundedGate 'p' [running 1/3, waiting 0/4]>"
    permit.release()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"timeout": -1}, ValueError, r"^timeout must be >= 0, got -1$"),
        ({"timeout": float("nan")}, ValueError, r"^timeout must not be NaN$"),
        ({"timeout": True}, TypeError, r"^timeout must be a number of seconds, got True$"),
        ({"timeout": "3"}, TypeError, r"^timeout must be a number of seconds, got '3'$"),
        ({"deadline": float("nan")}, ValueError, r"^deadline must not be NaN$"),
        ({"deadline": False}, TypeError, r"^deadline must be a number of seconds, got False$"),
        ({"timeout": 1, "deadline": 2}, ValueError, r"^give timeout or deadline, not both$"),
    ],
)
def test_malformed_timeouts_are_refused_at_once(kwargs: dict[str, object], error: type, message: str) -> None:
    gate = BoundedGate(max_running=1, max_waiting=0)
    with pytest.raises(error, match=message):
        gate.admit(**kwargs)  # type: ignore[arg-type]


def test_infinite_timeout_means_no_deadline() -> None:
    gate = BoundedGate(max_running=1, max_waiting=0)
    assert gate.admit(timeout=math.inf)._timeout == math.inf


# -- event loop binding -------------------------------------------------------------------------


def test_an_idle_gate_moves_between_loops() -> None:
    gate = BoundedGate(max_running=1, max_waiting=1)

    async def use() -> None:
        async with gate.admit(timeout=5):
            await asyncio.sleep(1)

    for _ in range(3):
        loop = looptime.new_event_loop(start=0)
        loop.run_until_complete(use())
        loop.close()
    assert gate.stats().completed == 3


def test_a_busy_gate_refuses_another_loop() -> None:
    gate = BoundedGate(max_running=1, max_waiting=1)
    first = asyncio.new_event_loop()
    second = asyncio.new_event_loop()
    try:

        async def hold() -> object:
            return gate.try_admit()

        permit = first.run_until_complete(hold())

        async def use() -> None:
            async with gate.admit():
                pass

        with pytest.raises(RuntimeError, match="in use on another event loop"):
            second.run_until_complete(use())
        first.run_until_complete(asyncio.sleep(0))
        permit.release()  # type: ignore[attr-defined]
        second.run_until_complete(use())  # idle again: it may move
    finally:
        first.close()
        second.close()


def test_a_gate_whose_loop_closed_may_move_while_permits_of_that_loop_hold_slots() -> None:
    gate = BoundedGate(max_running=2, max_waiting=0)
    first = asyncio.new_event_loop()

    async def hold() -> object:
        return gate.try_admit()

    held = [first.run_until_complete(hold())]
    first.close()
    second = asyncio.new_event_loop()
    try:
        held.append(second.run_until_complete(hold()))
        assert gate.running == 2  # the permit of the closed loop holds its slot until it is released
    finally:
        second.close()
    assert gate.stats().admitted == 2
    for permit in held:
        permit.release()  # type: ignore[attr-defined]
    assert gate.running == 0
    assert Status.RUNNING.is_final is False


# -- arguments that were let through ------------------------------------------------------------


@pytest.mark.parametrize("priority", [0.0, None, "", [], False, 1.0])
def test_every_priority_but_an_int_is_refused_at_once_even_a_falsy_one(priority: object) -> None:
    gate = BoundedGate(max_running=1, max_waiting=1, priorities=2)
    with pytest.raises(TypeError, match=r"^priority must be an int"):
        gate.admit(priority=priority)  # type: ignore[arg-type]


async def test_a_priority_refused_at_once_strands_no_waiter_the_arrival_would_have_expired() -> None:
    # Before: priority=None got as far as the queue, after the core had expired the waiter whose
    # deadline was due, and the TypeError left that waiter asleep for ever.
    gate = BoundedGate(max_running=1, max_waiting=2)
    holder = gate.try_admit()
    waiter = asyncio.create_task(gate.admit(timeout=1).__aenter__())
    await asyncio.sleep(0)
    with pytest.raises(TypeError, match="priority"):
        gate.admit(priority=None)  # type: ignore[arg-type]
    with pytest.raises(QueueExpired):
        await asyncio.wait_for(waiter, 5)
    holder.release()


async def test_a_core_that_raises_mid_event_strands_no_waiter(monkeypatch: pytest.MonkeyPatch) -> None:
    # The timer's advance() expires the due waiter, then fails before it returns that waiter: the
    # driver must still wake it (and every other parked waiter the core no longer holds as queued).
    gate = checked_gate(1, 2, rate_limits=[RateLimit.per_second(100)])
    holder = gate.try_admit()
    due = asyncio.create_task(gate.admit(timeout=1).__aenter__())
    other = asyncio.create_task(gate.admit().__aenter__())
    await asyncio.sleep(0)
    errors: list[object] = []
    asyncio.get_running_loop().set_exception_handler(
        lambda loop, context: errors.append(context["exception"])
    )

    def broken(self: object, now: float, woken: object) -> None:
        raise RuntimeError("a bug in the core")

    # Patched on the gate's own subclass of the state: the compiled core's methods cannot be patched.
    monkeypatch.setattr(type(gate._state), "_fill", broken)
    with pytest.raises(QueueExpired):
        await asyncio.wait_for(due, 5)
    assert [str(e) for e in errors] == ["a bug in the core"]
    monkeypatch.undo()
    holder.release()
    (await asyncio.wait_for(other, 5)).release()


HUGE = 10**400


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timeout": HUGE}, r"^timeout is out of range: beyond a float's \(about ±1\.8e308\)$"),
        ({"deadline": HUGE}, r"^deadline is out of range: beyond a float's"),
        ({"deadline": -HUGE}, r"^deadline is out of range: beyond a float's"),
        ({"cost": HUGE}, r"^cost is out of range: beyond a float's"),
        ({"timeout": -HUGE}, r"^timeout is out of range"),
    ],
)
def test_numbers_beyond_a_float_are_refused_at_admit_naming_the_argument(
    kwargs: dict[str, object], message: str
) -> None:
    gate = BoundedGate(max_running=1, max_waiting=0)
    with pytest.raises(ValueError, match=message):
        gate.admit(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        admit_all(gate, **kwargs)  # type: ignore[arg-type]


def test_a_max_wait_beyond_a_float_is_refused_at_admit() -> None:
    gate = BoundedGate(max_running=1, max_waiting=0)
    with pytest.raises(ValueError, match=r"^max_wait is out of range: beyond a float's"):
        gate.admit(max_wait=HUGE)


async def test_a_settle_beyond_a_float_is_a_value_error() -> None:
    gate = BoundedGate(max_running=1, max_waiting=0, rate_limits=[RateLimit.per_minute(10, unit="tokens")])
    permit = gate.try_admit()
    with pytest.raises(ValueError, match=r"^cost is out of range"):
        permit.settle(HUGE)
    permit.release()


def test_the_largest_float_timeout_is_still_a_timeout() -> None:
    gate = BoundedGate(max_running=1, max_waiting=0)
    assert gate.admit(timeout=sys.float_info.max)._timeout == sys.float_info.max
    assert gate.admit(timeout=10**300)._timeout == float(10**300)  # checked: a float


# -- a loop that closed with waiters parked on it ------------------------------------------------


def _park_on_a_loop_that_closes(gate: BoundedGate) -> tuple[object, asyncio.Task[object]]:
    loop = asyncio.new_event_loop()

    async def park() -> tuple[object, asyncio.Task[object]]:
        holder = gate.try_admit()
        waiter = asyncio.ensure_future(gate.admit().__aenter__())
        await asyncio.sleep(0)
        return holder, waiter

    holder, waiter = loop.run_until_complete(park())
    assert (gate.running, gate.waiting) == (1, 1)
    waiter._log_destroy_pending = False  # type: ignore[attr-defined]  # destroyed pending, on purpose
    loop.close()  # the waiter's task is never resumed again
    return holder, waiter


def test_release_after_the_loop_closed_never_raises_and_gives_no_slot_to_the_dead() -> None:
    gate = BoundedGate(max_running=1, max_waiting=1)
    holder, waiter = _park_on_a_loop_that_closes(gate)
    holder.release()  # type: ignore[attr-defined]
    assert (gate.running, gate.waiting) == (0, 0)  # the slot went to nobody: the waiter is cancelled
    stats = gate.stats()
    assert (stats.completed, stats.cancelled, stats.admitted) == (1, 1, 1)
    assert not waiter.done()  # its loop is gone: nothing will ever run it
    second = asyncio.new_event_loop()
    try:

        async def use() -> None:
            async with gate.admit():
                pass

        second.run_until_complete(use())
    finally:
        second.close()
    assert gate.stats().completed == 2


def test_a_gate_moving_off_a_closed_loop_drops_the_waiters_parked_there() -> None:
    gate = BoundedGate(max_running=1, max_waiting=1)
    holder, _ = _park_on_a_loop_that_closes(gate)
    second = asyncio.new_event_loop()
    try:

        async def use() -> Status:
            waiter = asyncio.ensure_future(gate.admit(timeout=5).__aenter__())  # the dead one's place
            await asyncio.sleep(0)
            assert (gate.running, gate.waiting) == (1, 1)
            holder.release()  # type: ignore[attr-defined]
            permit = await waiter
            permit.release()
            return permit.status

        assert second.run_until_complete(use()) is Status.COMPLETED
    finally:
        second.close()
    assert gate.stats().cancelled == 1
