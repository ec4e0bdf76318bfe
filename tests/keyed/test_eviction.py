"""Idle keys lose their gates: memory follows activity, not the number of keys ever seen.

And the races that come with dropping: a permit taken from a gate that is dropped before it is
entered, a gate created for a permit that is never entered, releases that must count after the
gate is gone.
"""

from __future__ import annotations

import asyncio
import gc
import random
import tracemalloc
import weakref

import pytest

from boundedgate import KeyedGate, Permit, QueueExpired, QueueFull, Status
from tests.helpers import live_gate


async def test_a_keys_gate_is_dropped_when_its_last_request_ends() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=2, name="tenant")
    first = tenants.try_admit("a")
    second = tenants.try_admit("a")
    first.release()
    assert "a" in tenants
    second.release()
    assert "a" not in tenants
    assert len(tenants) == 0
    stats = tenants.stats()
    assert (stats.created, stats.dropped, stats.keys, stats.peak_keys) == (1, 1, 0, 1)
    assert (stats.total.admitted, stats.total.completed) == (2, 2)


async def test_a_key_used_again_after_being_dropped_gets_a_fresh_gate() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0)
    async with tenants.admit("a") as first:
        pass
    async with tenants.admit("a") as second:
        assert second.gate is not first.gate
        assert second.gate.stats().admitted == 1  # per-key counters start again
    assert tenants.stats().total.completed == 2


async def test_a_gate_is_not_dropped_while_its_queue_hands_over() -> None:
    # The last running request releases while others wait: the slot passes on, the gate stays.
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=3)
    holder = tenants.try_admit("a")
    gate = holder.gate
    waiters = [asyncio.create_task(tenants.admit("a", timeout=t).__aenter__()) for t in (1, 5, 5)]
    await asyncio.sleep(1)  # the first waiter expires: still busy
    assert tenants.get("a") is gate
    holder.release()
    assert tenants.get("a") is gate
    with pytest.raises(QueueExpired):
        await waiters[0]
    second = await waiters[1]
    second.release()
    assert tenants.get("a") is gate
    (await waiters[2]).release()
    assert "a" not in tenants


async def test_a_slot_freed_at_the_instant_every_waiter_expires_leaves_the_gate_idle() -> None:
    # release() hands off after expiring the due waiters: nobody is left, so the gate is dropped.
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=2)
    holder = tenants.try_admit("a", timeout=10)
    waiter = asyncio.create_task(_enter(tenants, "a", timeout=2))
    await asyncio.sleep(0)
    asyncio.get_running_loop().call_later(2, holder.release)
    with pytest.raises(QueueExpired) as expired:
        await waiter
    assert expired.value.gate == "keyed/a"
    assert "a" not in tenants
    total = tenants.stats().total
    assert (total.expired, total.completed, total.running, total.waiting) == (1, 1, 0, 0)


async def test_a_gate_empty_for_an_instant_inside_a_release_is_not_dropped() -> None:
    # The slot comes back, the due waiter expires, then the slot passes to the next waiter: for a
    # moment nothing runs and one waits. The gate must stay the key's gate throughout.
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=3)
    holder = tenants.try_admit("a", timeout=10)
    gate = holder.gate
    loop = asyncio.get_running_loop()
    # Scheduled before the gate arms its timer for the same instant, so it runs first: the due
    # waiter is expired by the release itself, not by the timer.
    loop.call_at(loop.time() + 2, holder.release)
    due = asyncio.create_task(_enter(tenants, "a", timeout=2))
    await asyncio.sleep(0)
    later = tenants.admit("a", timeout=10)
    later_task = asyncio.create_task(later.__aenter__())
    await asyncio.sleep(0)
    with pytest.raises(QueueExpired):
        await due
    assert holder.ended == loop.time()
    assert await later_task is later
    assert tenants.get("a") is gate
    with pytest.raises(QueueFull):  # the key's one gate has its slot taken: no second gate
        tenants.try_admit("a")
    later.release()
    assert "a" not in tenants
    total = tenants.stats().total
    assert (total.completed, total.expired, total.rejected, total.running) == (2, 1, 1, 0)


async def _enter(tenants: KeyedGate[str], key: str, timeout: float) -> None:
    async with tenants.admit(key, timeout=timeout):
        pass


async def test_idle_keys_kept_up_to_keep_idle_least_recently_idle_dropped_first() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, keep_idle=2)
    for key in "abc":
        async with tenants.admit(key):
            pass
    assert sorted(tenants) == ["b", "c"]
    gate_b = live_gate(tenants, "b")
    async with tenants.admit("b") as again:  # reused: same gate, counters continue
        assert again.gate is gate_b
    async with tenants.admit("d"):
        pass
    assert sorted(tenants) == ["b", "d"]  # c was the least recently idle
    assert gate_b.stats().completed == 2
    stats = tenants.stats()
    assert (stats.keys, stats.busy_keys, stats.created, stats.dropped) == (2, 0, 4, 2)
    assert stats.total.completed == 5


async def test_a_refused_arrival_at_a_kept_idle_gate_leaves_it_kept() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, keep_idle=1)
    async with tenants.admit("a"):
        pass
    now = asyncio.get_running_loop().time()
    with pytest.raises(QueueExpired):
        async with tenants.admit("a", deadline=now):
            pass
    assert "a" in tenants
    assert tenants.stats().busy_keys == 0
    async with tenants.admit("b"):
        pass
    assert sorted(tenants) == ["b"]


async def test_random_tenant_ids_do_not_grow_the_table() -> None:
    # An attacker sends every request with a new tenant id: the table holds only the busy keys.
    tenants: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=2, name="tenant")
    rng = random.Random(5)
    busiest = 0

    async def request() -> None:
        nonlocal busiest
        async with tenants.admit(f"t-{rng.getrandbits(64):x}", timeout=5):
            busiest = max(busiest, len(tenants))
            await asyncio.sleep(rng.choice((0, 1, 2)))

    for _ in range(100):
        await asyncio.gather(*(request() for _ in range(50)))
    stats = tenants.stats()
    assert stats.created == stats.dropped == 5000
    assert stats.keys == len(tenants) == 0
    assert busiest <= 50
    assert stats.peak_keys == 50
    assert stats.total.completed == 5000


async def test_memory_stays_flat_however_many_distinct_keys_pass() -> None:
    tenants: KeyedGate[int] = KeyedGate(max_running=1, max_waiting=1)

    async def burst(first: int) -> None:
        for key in range(first, first + 5000):
            async with tenants.admit(key, timeout=1):
                pass

    await burst(0)  # warm up: caches, the totals' dict, interned names
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        await burst(10_000)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert tenants.stats().dropped == 10_000
    assert grown < 20_000, grown  # 5000 more keys: under 4 bytes each, i.e. nothing kept per key


async def test_a_gate_made_for_a_permit_never_entered_goes_with_the_permit() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0)
    permit = tenants.admit("a")
    gate = weakref.ref(permit.gate)
    assert len(tenants) == 0  # not the key's gate until something arrives
    del permit
    gc.collect()
    assert gate() is None
    assert tenants.stats().created == 1


async def test_permits_taken_together_for_a_new_key_arrive_at_one_gate() -> None:
    # Each carries a gate of its own until it arrives; the first to arrive makes its gate the
    # key's, and the others join it, so the key's limit holds across all of them.
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=1, name="tenant")
    permits = [tenants.admit("a") for _ in range(3)]
    outcomes = await asyncio.gather(*(_enter_permit(p) for p in permits), return_exceptions=True)
    assert outcomes[0] is None
    assert isinstance(outcomes[2], QueueFull)
    assert outcomes[2].gate == "tenant/a"
    assert permits[0].gate is permits[1].gate is permits[2].gate
    total = tenants.stats().total
    assert (total.completed, total.rejected, total.peak_running, total.peak_waiting) == (2, 1, 1, 1)
    assert len(tenants) == 0


async def _enter_permit(permit: Permit) -> None:
    async with permit:
        await asyncio.sleep(1)


async def test_callers_cancelled_before_they_arrive_leave_no_gate_behind() -> None:
    tenants: KeyedGate[int] = KeyedGate(max_running=1, max_waiting=0)

    async def cancelled_request(key: int) -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        async with tenants.admit(key):
            pytest.fail("a cancelled caller must not start")

    for key in range(1000):
        with pytest.raises(asyncio.CancelledError):
            await asyncio.create_task(cancelled_request(key))
    assert len(tenants) == 0
    assert tenants.stats().total.arrived == 0


async def test_a_permit_taken_before_the_key_got_another_gate_joins_that_gate() -> None:
    # `late` carries a fresh gate G1; meanwhile the key's requests go through G2 (dropped when
    # idle) and G3, which is full. Entering `late` must queue on G3, not start on G1.
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=1, name="tenant")
    late = tenants.admit("a")
    dropped = late.gate
    async with tenants.admit("a"):
        pass
    assert "a" not in tenants
    holder = tenants.try_admit("a")
    assert holder.gate is not dropped
    task = asyncio.create_task(late.__aenter__())
    await asyncio.sleep(0)
    assert late.status is Status.QUEUED
    assert late.gate is holder.gate
    assert (holder.gate.running, holder.gate.waiting) == (1, 1)
    assert (dropped.running, dropped.waiting) == (0, 0)
    holder.release()
    assert await task is late
    late.release()
    assert "a" not in tenants
    total = tenants.stats().total
    assert (total.admitted, total.completed, total.running) == (3, 3, 0)


async def test_a_permit_from_a_dropped_gate_arrives_at_a_new_gate_if_the_key_has_none() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0)
    async with tenants.admit("a") as old:
        pass
    dropped = old.gate
    late = dropped.admit()  # a stale reference to the key's old gate
    async with late:
        assert late.gate is not dropped
        assert late.gate is tenants.get("a")
        assert dropped.stats().admitted == 1  # the dropped gate counted nothing more
    assert tenants.stats().total.completed == 2
    assert len(tenants) == 0


async def test_a_fresh_gate_whose_key_had_another_gate_meanwhile_becomes_the_keys_gate() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0)
    early = tenants.admit("a")
    gate = early.gate
    async with tenants.admit("a"):
        pass  # another gate was the key's, and was dropped: early's is fresh, never dropped
    async with early:
        assert early.gate is gate is tenants.get("a")
    assert tenants.stats().total.completed == 2


async def test_try_admit_on_a_dropped_gate_reports_the_keys_gate() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, name="tenant")
    async with tenants.admit("a") as old:
        pass
    holder = tenants.try_admit("a")
    with pytest.raises(QueueFull) as refused:
        old.gate.try_admit()  # a stale reference: it arrives at the key's current gate
    assert (refused.value.gate, refused.value.running) == ("tenant/a", 1)
    assert holder.gate.stats().rejected == 1
    holder.release()


async def test_every_release_counts_whatever_the_gate_became() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=3, max_waiting=3, keep_idle=1)
    permits = [tenants.try_admit(k) for k in ("a", "a", "b", "c")]
    for permit in permits:
        permit.release()
        permit.release()
    stats = tenants.stats()
    assert (stats.total.completed, stats.total.running, stats.dropped, stats.keys) == (4, 0, 2, 1)


async def test_a_dropped_gates_timer_firing_later_changes_nothing() -> None:
    # The gate's loop timer stays armed at an old waiter's deadline after its queue emptied.
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=1)
    holder = tenants.try_admit("a")
    waiter = asyncio.create_task(tenants.admit("a", timeout=10).__aenter__())
    await asyncio.sleep(1)
    holder.release()
    (await waiter).release()
    assert len(tenants) == 0
    await asyncio.sleep(20)
    total = tenants.stats().total
    assert (total.expired, total.completed, total.waiting) == (0, 2, 0)
