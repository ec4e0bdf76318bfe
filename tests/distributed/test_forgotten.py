"""A permit nobody references any more: its lease is not renewed for ever; it is given back, and said so."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator

import pytest
import redis.asyncio

from boundedgate import QueueFull, Status
from boundedgate.redis._process import ProcessSide

from .helpers import cluster, make_gate, settles_empty, wait_until

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]


async def test_a_dropped_permit_is_released_with_a_resource_warning_naming_the_gate(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with make_gate(client, name, 1, 0) as gate:
        permit = await gate.try_admit()
        assert (await cluster(client, name)).running == 1
        with pytest.warns(ResourceWarning, match=f"unreleased <RedisPermit of {name!r}"):
            del permit
            gc.collect()
        start = time.monotonic()
        view = await settles_empty(client, name)
        assert time.monotonic() - start < 5  # given back, not left to a lease of 10 s (nor renewed)
        assert view.counters["leaked"] == 1
        assert view.counters.get("failed", 0) == 0
        stats = gate.stats()
        assert (stats.admitted, stats.leaked, stats.failed, stats.completed) == (1, 1, 0, 0)
        assert stats.running == 0
        again = await gate.try_admit()  # the slot is free again
        assert again.status is Status.RUNNING
        again.release()


async def test_a_dropped_permit_is_not_renewed_so_its_lease_lapses_even_if_its_release_never_lands(
    client: redis.asyncio.Redis, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    lease = 0.6
    async with make_gate(client, name, 1, 0, lease_ttl=lease) as gate:
        monkeypatch.setattr(ProcessSide, "release", lambda side, permit_id, how, sample=None: None)
        permit = await gate.try_admit()
        with pytest.warns(ResourceWarning):
            del permit
            gc.collect()
        await asyncio.sleep(0)  # the release is scheduled on the loop: one turn later
        assert gate.running == 0
        # Nothing gave the slot back: only the lapse of a lease nobody renews does.
        await wait_until(lambda: _lapsed(client, name), 10 * lease, "the lease lapsed")
        monkeypatch.undo()
        # Another process's gate object, whose lease a busy machine cannot let lapse before the read.
        # Its script reclaims the lapsed lease, and grants the slot. But a renewal sent just before
        # the permit was dropped may land late (on a busy machine, more than a lease of 0.6 s
        # later): it renews the lapsed lease, or counts the reclaimed holder again, and the lease
        # lapses once more. So the slot comes back, if a lease later.
        async with make_gate(client, name, 1, 0) as other:
            granted = []

            async def admitted() -> bool:
                try:
                    granted.append(await other.try_admit())
                except QueueFull:
                    return False
                return True

            await wait_until(admitted, 10 * lease, "the slot came back")
            granted[0].release()
        counters = (await cluster(client, name)).counters
        # Either way it lapsed for good: one reclaim more than reattaches.
        assert counters["reclaimed"] - counters.get("reattached", 0) == 1, counters


async def _lapsed(client: redis.asyncio.Redis, name: str) -> bool:
    return all(holder.lease_left <= 0 for holder in (await cluster(client, name)).holders)


async def test_a_permit_handed_to_a_stream_is_left_to_the_stream(
    client: redis.asyncio.Redis, name: str
) -> None:
    async def chunks() -> AsyncIterator[str]:
        yield "a"

    async with make_gate(client, name, 1, 0) as gate:
        async with gate.admit() as permit:
            stream = permit.hand_to(chunks())
            del permit
        gc.collect()  # the stream holds the permit: no warning, nothing released
        assert (await cluster(client, name)).running == 1
        assert [chunk async for chunk in stream] == ["a"]
        view = await settles_empty(client, name)
        assert view.counters.get("leaked", 0) == 0
