"""Keyed gates and admit_all with the rest of the gate: priorities, rate limits, and streams."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from boundedgate import (
    BoundedGate,
    Evicted,
    GatedStream,
    KeyedGate,
    Late,
    QueueExpired,
    RateLimit,
    RateLimited,
    admit_all,
)
from tests.streams.sources import ticks


async def test_each_key_gets_its_own_rate_limit_and_keeps_it_while_idle() -> None:
    tools: KeyedGate[str] = KeyedGate(
        max_running=None, max_waiting=0, name="tool", rate_limits=[RateLimit.per_minute(30, burst=2)]
    )
    for _ in range(2):
        tools.try_admit("update_ticket").release()
    assert "update_ticket" in tools  # idle, but its bucket is refilling: it rests rather than drop
    with pytest.raises(RateLimited) as info:
        tools.try_admit("update_ticket")
    assert info.value.gate == "tool/update_ticket"
    assert info.value.retry_after == pytest.approx(2.0)
    tools.try_admit("notify").release()  # another tool has a bucket of its own
    await asyncio.sleep(4)  # both buckets full again
    tools.try_admit("other").release()  # any later event lets the rested keys go
    assert list(tools) == ["other"]
    assert tools.stats().total.rate_limited == 1


async def test_a_key_whose_last_waiter_expires_waiting_for_tokens_goes_idle() -> None:
    # With rate limits a key's gate can have a waiter and nothing running; when that waiter expires
    # (the timer, not a release), the key is idle, and rests until its bucket is full.
    keyed: KeyedGate[str] = KeyedGate(
        max_running=None,
        max_waiting=5,
        name="k",
        rate_limits=[RateLimit.per_second(1, burst=10, unit="tokens")],
    )
    keyed.try_admit("a", cost=10).release()  # the bucket is empty: 10 tokens come at 10
    first = asyncio.create_task(keyed.admit("a", cost=10, timeout=15).__aenter__())
    second = asyncio.create_task(keyed.admit("a", cost=1, timeout=12).__aenter__())  # due at 11
    await asyncio.sleep(0)
    assert (keyed.running, keyed.waiting) == (0, 2)
    permit = await first  # at 10
    permit.settle(12)  # 2 more: the second's token now comes at 13, after its deadline
    permit.release()
    with pytest.raises(QueueExpired):
        await second  # at 12, by the timer
    assert (keyed.running, keyed.waiting) == (0, 0)
    assert "a" in keyed  # resting until its bucket is full, at 22
    await asyncio.sleep(10)
    keyed.try_admit("b").release()
    assert "a" not in keyed
    assert keyed.stats().total.expired == 1


async def test_a_key_refuses_at_arrival_what_its_queue_ahead_leaves_no_time_for() -> None:
    # A key's state is a GateState too: its newcomers count the tokens its queued requests take
    # first (another key's queue is not theirs). 10 tokens a second, burst 5, 20 requests of 5
    # tokens to one key with 2 s to queue: 4 are admitted, 16 refused at once, told 2 s.
    keyed: KeyedGate[str] = KeyedGate(
        max_running=None,
        max_waiting=None,
        name="k",
        rate_limits=[RateLimit.per_second(10, burst=5, unit="tokens", name="tpm")],
    )
    loop = asyncio.get_running_loop()

    async def call(key: str) -> RateLimited | float:
        try:
            async with keyed.admit(key, cost=5, max_wait=2):
                return loop.time()
        except RateLimited as error:
            return error

    results = await asyncio.gather(*(call("a") for _ in range(20)), *(call("b") for _ in range(2)))
    refused = [r for r in results[:20] if isinstance(r, RateLimited)]
    assert results[:4] == [0.0, 0.5, 1.0, 1.5]
    assert [(r.gate, r.retry_after, r.limit) for r in refused] == [("k/a", 2.0, "tpm")] * 16
    assert results[20:] == [0.0, 0.5]  # key b: a queue and a bucket of its own
    total = keyed.stats().total
    assert (total.rate_limited, total.expired) == (16, 0)


async def test_token_starts_raise_the_running_peak() -> None:
    keyed: KeyedGate[str] = KeyedGate(
        max_running=None, max_waiting=5, name="k", rate_limits=[RateLimit.per_second(1, burst=1)]
    )
    keyed.try_admit("a").release()
    first = asyncio.create_task(keyed.admit("a").__aenter__())
    permit = await first  # started by the timer, when its token came
    assert keyed.stats().total.peak_running == 1
    permit.release()


async def test_priorities_pass_through_to_the_key_gates() -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=1, name="k", priorities=2)
    holder = keyed.try_admit("a")
    calm = asyncio.create_task(keyed.admit("a", priority=1).__aenter__())
    await asyncio.sleep(0)
    urgent = asyncio.create_task(keyed.admit("a", priority=0).__aenter__())
    with pytest.raises(Evicted):
        await calm
    holder.release()
    (await urgent).release()
    assert keyed.stats().total.evicted == 1


@pytest.mark.parametrize(("jump_share", "first"), [(0, "calm"), (0.5, "urgent")])
async def test_a_key_s_first_waiters_queue_by_the_template_s_classes(jump_share: float, first: str) -> None:
    # A key's waiting room is made for its first waiter, with the template's priorities and jump
    # share: with none to spend an urgent waiter keeps its turn, with one banked it jumps the line.
    keyed: KeyedGate[str] = KeyedGate(
        max_running=1, max_waiting=2, name="k", priorities=2, jump_share=jump_share
    )
    for _ in range(3):  # uncontended: the key's gate is made and dropped, its waiting room never made
        keyed.try_admit("a").release()
    started: list[str] = []

    async def wait(name: str, priority: int) -> None:
        async with keyed.admit("a", priority=priority):
            started.append(name)

    holder = keyed.try_admit("a")
    calm = asyncio.create_task(wait("calm", 1))
    await asyncio.sleep(0)
    urgent = asyncio.create_task(wait("urgent", 0))
    await asyncio.sleep(0)
    holder.release()
    await asyncio.gather(calm, urgent)
    assert started == [first, "urgent" if first == "calm" else "calm"]
    assert keyed.stats().total.completed == 6


async def test_admit_all_rolls_back_the_tokens_of_the_gates_it_took() -> None:
    model = BoundedGate(
        max_running=5,
        max_waiting=0,
        name="model",
        rate_limits=[RateLimit.per_second(1, burst=100, unit="tokens")],
    )
    provider = BoundedGate(max_running=1, max_waiting=0, name="provider")
    holder = provider.try_admit()
    with pytest.raises(Exception, match="provider") as info:
        async with admit_all(model, provider, cost=60):
            pass
    assert info.value.__class__.__name__ == "QueueFull"
    assert model.stats().tokens == (100,)  # given back: the request never ran
    assert model.stats().cancelled == 1
    holder.release()
    async with admit_all(model, provider, cost=60) as permit:
        assert model.stats().tokens == (40,)
        permit.settle(10)
    assert model.stats().tokens == (90,)


async def test_a_combined_permit_hands_every_slot_to_a_stream() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, name="tenant")
    provider = BoundedGate(max_running=2, max_waiting=0, name="provider")

    async def chunks() -> AsyncIterator[int]:
        for i in range(3):
            await asyncio.sleep(1)
            yield i

    async def open_stream() -> GatedStream[AsyncIterator[int]]:
        async with admit_all((tenants, "acme"), provider, timeout=10) as permit:
            return permit.hand_to(chunks())

    stream = await open_stream()
    assert (tenants.running, provider.running) == (1, 1)  # the block's exit left them to the stream
    assert stream.permit.gate is provider
    assert [i async for i in stream] == [0, 1, 2]
    assert (tenants.running, provider.running) == (0, 0)
    assert provider.stats().completed == 1
    assert tenants.stats().total.completed == 1


async def test_try_admit_pays_the_cost_it_is_given() -> None:
    keyed: KeyedGate[str] = KeyedGate(
        max_running=None, max_waiting=0, rate_limits=[RateLimit.per_second(1, burst=10, unit="tokens")]
    )
    permit = keyed.try_admit("a", cost=7)
    gate = keyed.get("a")
    assert gate is not None
    assert gate.stats().tokens == (3,)
    with pytest.raises(RateLimited) as refused:
        keyed.try_admit("a", cost=4)
    assert refused.value.retry_after == pytest.approx(1)
    permit.release()


async def test_a_refund_that_starts_waiters_raises_the_running_total() -> None:
    keyed: KeyedGate[str] = KeyedGate(
        max_running=None, max_waiting=5, rate_limits=[RateLimit.per_minute(10, burst=10, unit="tokens")]
    )
    first = keyed.try_admit("a", cost=10)
    second = asyncio.create_task(keyed.admit("a", cost=5).__aenter__())
    await asyncio.sleep(0)
    assert (keyed.running, keyed.waiting) == (1, 1)
    first.settle(2)  # 8 tokens back: the waiter's 5 are there now
    await asyncio.sleep(0)
    assert (keyed.running, keyed.waiting) == (2, 0)
    assert keyed.stats().total.peak_running == 2
    (await second).release()
    first.release()


async def test_a_resting_key_goes_idle_at_the_very_instant_its_buckets_are_full() -> None:
    keyed: KeyedGate[str] = KeyedGate(
        max_running=None, max_waiting=0, rate_limits=[RateLimit.per_second(1, burst=1)]
    )
    keyed.try_admit("a").release()  # its bucket is full again at 1
    other = keyed.try_admit("b")  # b rests too, until 1
    await asyncio.sleep(1)
    other.release()  # at 1: a's (and b's) buckets are full, so both go now
    assert list(keyed) == []


async def test_a_resting_key_used_again_is_not_dropped_while_busy() -> None:
    # A key's buckets may be full before the request that reuses it ends (it cost no tokens):
    # when its resting time comes it must stay, since something runs in it.
    keyed: KeyedGate[str] = KeyedGate(
        max_running=None, max_waiting=0, rate_limits=[RateLimit.per_second(1, burst=5, unit="tokens")]
    )
    keyed.try_admit("a", cost=1).release()  # a rests until 1
    busy = keyed.try_admit("a", cost=0)  # used again, at no cost: its buckets are still full at 1
    await asyncio.sleep(1)
    keyed.try_admit("b", cost=0).release()  # an event at 1 lets the rested keys go
    assert keyed.get("a") is busy.gate
    busy.release()
    assert "a" not in keyed
    assert keyed.stats().dropped == 2


async def test_a_keyed_stream_holds_its_key_s_slot_and_forwards_every_argument() -> None:
    keyed: KeyedGate[str] = KeyedGate(
        max_running=1,
        max_waiting=2,
        priorities=2,
        rate_limits=[RateLimit.per_second(1, burst=10, unit="tokens")],
    )
    holder = keyed.try_admit("a", cost=1)
    opener = keyed.stream("a", lambda: ticks(3, every=1), timeout=4, priority=1, cost=5, raise_late=False)
    opening = asyncio.create_task(opener.__aenter__())
    await asyncio.sleep(0)
    urgent = asyncio.create_task(keyed.admit("a", priority=0).__aenter__())
    await asyncio.sleep(0)
    holder.release()  # the urgent request starts before the older, calmer stream
    (await urgent).release()
    stream = await opening
    gate = keyed.get("a")
    assert gate is not None
    assert gate.stats().tokens == pytest.approx((4,))
    assert keyed.running == 1
    assert [item async for item in stream] == [0, 1, 2]  # ends at 3, before its deadline at 4
    assert keyed.stats().total.completed == 3

    late = await keyed.stream("b", lambda: ticks(2, every=1), deadline=asyncio.get_running_loop().time() + 1)
    with pytest.raises(Late):
        _ = [item async for item in late]
    quiet = await keyed.stream("b", lambda: ticks(2, every=1), timeout=1, raise_late=False)
    assert [item async for item in quiet] == [0, 1]
    assert keyed.stats().total.late == 2


# -- a settle after the release (the stream pattern) charges the key, not a dropped gate -------------


def _tpm_keyed(keep_idle: int = 0) -> KeyedGate[str]:
    return KeyedGate(
        max_running=None,
        max_waiting=0,
        name="tenant",
        keep_idle=keep_idle,
        rate_limits=[RateLimit.per_minute(1_000, unit="tokens", name="tpm")],
    )


async def test_a_settle_after_the_release_charges_the_key_even_once_its_gate_was_dropped() -> None:
    keyed = _tpm_keyed()
    admitted = 0
    for _ in range(10):
        try:
            permit = keyed.try_admit("acme")  # cost 0 declared: all of it is settled at the end
        except RateLimited:
            continue
        admitted += 1
        permit.release()  # the key is idle and its bucket full: its gate is dropped here
        permit.settle(1_000)  # the usage, known once the stream ended
    # The first call spent the bucket, the second (whose cost of 0 a balance of 0 covers) left the
    # key a window in debt, down to the floor: nothing more until that is paid off.
    assert admitted == 2
    gate = keyed.get("acme")
    assert gate is not None
    assert gate.stats().tokens == (-1_000.0,)
    await asyncio.sleep(59)
    with pytest.raises(RateLimited):
        keyed.try_admit("acme")
    await asyncio.sleep(1)
    keyed.try_admit("acme").release()  # at 60, the balance is back at 0
    await asyncio.sleep(60)  # refilled: the key may go
    keyed.try_admit("other").release()
    assert "acme" not in keyed
    keyed.try_admit("acme").release()


async def test_a_settle_on_a_key_kept_idle_makes_it_rest_until_its_bucket_refills() -> None:
    keyed = _tpm_keyed(keep_idle=1)
    permit = keyed.try_admit("a")
    permit.release()  # kept idle, bucket full
    permit.settle(1_000)  # now it owes a window: it must not be dropped with a fresh bucket
    keyed.try_admit("b").release()  # b is the most recently idle: a would be the one to go
    with pytest.raises(RateLimited):
        keyed.try_admit("a", cost=1)
    assert keyed.stats().total.rate_limited == 1


async def test_a_refund_after_the_release_to_a_dropped_key_changes_nothing() -> None:
    keyed = _tpm_keyed()
    permit = keyed.try_admit("a", cost=500)
    permit.release()  # resting: half its bucket is spent
    await asyncio.sleep(30)  # refilled, and dropped at the next event
    keyed.try_admit("b").release()
    assert "a" not in keyed
    permit.settle(100)  # a refund to a key whose gate is gone: its bucket is full anyway
    assert "a" not in keyed
    assert permit.cost == 100
    assert keyed.stats().created == 2
