"""Keyed gates and admit_all with the rest of the gate: priorities, rate limits, and streams."""

from __future__ import annotations

import asyncio

import pytest

from boundedgate import BoundedGate, Evicted, KeyedGate, QueueExpired, RateLimit, RateLimited, admit_all


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
        max_running=None, max_waiting=5, name="k", rate_limits=[RateLimit.per_second(0.1, burst=1)]
    )
    keyed.try_admit("a").release()  # the token is spent: the next comes at 10
    first = asyncio.create_task(keyed.admit("a", timeout=15).__aenter__())
    second = asyncio.create_task(keyed.admit("a", timeout=12).__aenter__())  # its own token: 20
    await asyncio.sleep(0)
    assert (keyed.running, keyed.waiting) == (0, 2)
    (await first).release()  # at 10
    with pytest.raises(QueueExpired):
        await second  # at 12, by the timer
    assert (keyed.running, keyed.waiting) == (0, 0)
    assert "a" in keyed  # resting until its bucket is full, at 20
    await asyncio.sleep(10)
    keyed.try_admit("b").release()
    assert "a" not in keyed
    assert keyed.stats().total.expired == 1


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

    async def chunks():  # type: ignore[no-untyped-def]
        for i in range(3):
            await asyncio.sleep(1)
            yield i

    async def open_stream():  # type: ignore[no-untyped-def]
        async with admit_all((tenants, "acme"), provider, timeout=10) as permit:
            return permit.hand_to(chunks())

    stream = await open_stream()
    assert (tenants.running, provider.running) == (1, 1)  # the block's exit left them to the stream
    assert stream.permit.gate is provider
    assert [i async for i in stream] == [0, 1, 2]
    assert (tenants.running, provider.running) == (0, 0)
    assert provider.stats().completed == 1
    assert tenants.stats().total.completed == 1
