"""Faults: a stalled holder, Redis restarted or paused, wake-up messages lost. No hang, typed errors."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any

import pytest
import redis.asyncio
import redis.exceptions

from boundedgate import GateUnavailable, QueueFull, Status
from boundedgate.redis import RedisPermit
from boundedgate.redis._process import ProcessSide
from boundedgate.redis._scripts import SYNC

from .helpers import OtherProcess, cluster, listening, make_gate, settles_empty, wait_until
from .servers import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]


def _extra(record: logging.LogRecord, field: str) -> object:
    """A field the gate's log record carries in ``extra``: an attribute LogRecord does not declare."""
    return getattr(record, field)


async def _waiting(client: redis.asyncio.Redis, name: str, n: int) -> bool:
    try:
        return (await cluster(client, name)).waiting == n
    except redis.exceptions.ConnectionError:  # the test's own client, on a connection the restart broke
        return False


async def test_a_holder_stalled_past_its_lease_loses_it_finds_out_and_is_counted_again(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The renewal thread renews while the loop shows progress within max_stall: it stops at most
    # max_stall into the stall, and the lease lapses lease_ttl after that, well before it ends.
    lease, max_stall = 0.6, 0.3
    other = OtherProcess(redis_server.url, name, 1, 0, lease_ttl=lease, poll_interval=0.05)
    try:
        async with make_gate(client, name, 1, 0, lease_ttl=lease, max_stall=max_stall) as gate:
            permit = await gate.try_admit()
            taker = other.submit(other.take_when_free())
            time.sleep(3 * lease)  # this process's loop stalls, while the other keeps asking
            theirs = await taker
            assert theirs.status is Status.RUNNING  # the lapsed lease was reclaimed and given away
            await wait_until(lambda: _flag(permit), 5, "the lost lease noticed")
            assert gate.stats().lease_lost == 1
            logged = [
                r for r in caplog.records if r.name == "boundedgate" and _extra(r, "event") == "lease_lost"
            ]
            assert [(_extra(r, "gate"), _extra(r, "permit"), r.levelname) for r in logged] == [
                (name, permit.id, "WARNING")
            ]
            view = await cluster(client, name)
            assert view.running == 2  # counted again: both really run, so nobody new may start
            assert (view.counters["reclaimed"], view.counters["reattached"]) == (1, 1)
            with pytest.raises(QueueFull):
                other.run(other.gate.try_admit())
            permit.release()
            other.release(theirs)
            await settles_empty(client, name)
    finally:
        other.close()


async def _flag(permit: RedisPermit) -> bool:
    return bool(permit.lease_lost)


async def test_redis_restarted_mid_run_fails_closed_then_recovers(
    own_server: RedisServer, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = redis.asyncio.Redis.from_url(own_server.url, socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        async with make_gate(
            client, name, 2, 2, lease_ttl=1.5, poll_interval=0.1, waiter_ttl=3.0, op_timeout=0.5
        ) as gate:
            held = await gate.try_admit()
            own_server.kill()  # no persistence: it comes back empty
            start = time.monotonic()
            with pytest.raises(GateUnavailable) as info:
                await gate.admit(timeout=30).__aenter__()
            assert time.monotonic() - start < 3  # bounded by op_timeout and the client's retries
            assert info.value.reason == "unreachable"
            logged = [
                r for r in caplog.records if r.name == "boundedgate" and _extra(r, "event") == "unavailable"
            ]
            assert [(_extra(r, "gate"), _extra(r, "reason")) for r in logged] == [(name, "unreachable")]
            own_server.start()
            second = await gate.try_admit()  # recovered
            # The holder from before the restart is counted again by the next heartbeat.
            await wait_until(lambda: _flag(held), 5, "the holder re-registered")
            assert gate.stats().epoch_changes >= 1
            view = await cluster(client, name)
            assert sorted(h.id for h in view.holders) == sorted([held.id, second.id])  # type: ignore[type-var]
            with pytest.raises(QueueFull):
                await gate.try_admit()
            held.release()
            second.release()
            await settles_empty(client, name)
    finally:
        await client.aclose()


async def test_a_waiter_survives_a_short_outage_and_is_served_after_it(
    own_server: RedisServer, name: str
) -> None:
    client = redis.asyncio.Redis.from_url(own_server.url, socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        async with make_gate(
            client, name, 1, 2, lease_ttl=1.5, poll_interval=0.1, waiter_ttl=3.0, op_timeout=0.5
        ) as gate:
            holder = await gate.try_admit()
            waiter = asyncio.create_task(gate.admit(timeout=30).__aenter__())
            await wait_until(lambda: _waiting(client, name, 1), 5, "1 waiting")
            own_server.kill()
            await asyncio.sleep(0.5)
            own_server.start()
            # Redis forgot both; the heartbeat counts the holder again and the waiter arrives again.
            await wait_until(lambda: _waiting(client, name, 1), 5, "the waiter queued again")
            holder.release()
            permit = await asyncio.wait_for(waiter, 5)
            assert permit.status is Status.RUNNING
            permit.release()
            await settles_empty(client, name)
    finally:
        await client.aclose()


async def test_waiters_get_gate_unavailable_when_redis_stays_away(own_server: RedisServer, name: str) -> None:
    client = redis.asyncio.Redis.from_url(own_server.url, socket_connect_timeout=0.3, socket_timeout=0.3)
    try:
        waiter_ttl = 1.0
        async with make_gate(
            client, name, 1, 2, lease_ttl=1.5, poll_interval=0.1, waiter_ttl=waiter_ttl, op_timeout=0.3
        ) as gate:
            holder = await gate.try_admit()
            waiter = asyncio.create_task(gate.admit(timeout=60).__aenter__())
            await wait_until(lambda: _waiting(client, name, 1), 5, "1 waiting")
            own_server.kill()
            start = time.monotonic()
            with pytest.raises(GateUnavailable) as info:
                await waiter
            assert time.monotonic() - start < waiter_ttl + 3
            assert info.value.reason == "unreachable"
            assert gate.stats().unavailable == 1
            holder.release()  # retried in the background, then given up: the lease would lapse
    finally:
        await client.aclose()


async def test_a_paused_redis_costs_op_timeout_not_a_hang(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> None:
    other = redis.asyncio.Redis.from_url(redis_server.url)
    try:
        async with make_gate(client, name, 1, 1, op_timeout=0.3) as gate:
            await other.client_pause(6000, all=False)  # CLIENT PAUSE 6000 WRITE
            start = time.monotonic()
            with pytest.raises(GateUnavailable):
                await gate.admit(timeout=30).__aenter__()
            assert time.monotonic() - start < 3  # op_timeout (0.3 s), far from the 6 s pause
            await other.client_unpause()
            async with gate.admit(timeout=30):
                pass
            await settles_empty(client, name)
    finally:
        await other.aclose()


async def test_lost_wake_up_messages_cost_a_poll_never_a_grant(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> None:
    # Every grant is announced on a channel nobody listens to: the waiters still get their slots,
    # in order, each within a poll or so.
    poll = 0.2
    other = OtherProcess(redis_server.url, name, 1, 10)
    other.gate._side.common = (*other.gate._side.common[:-1], NOWHERE)
    try:
        async with make_gate(client, name, 1, 10, poll_interval=poll) as gate:
            holder = other.run(other.gate.try_admit())
            order: list[int] = []

            async def request(i: int) -> None:
                async with gate.admit(timeout=30):
                    order.append(i)

            tasks = []
            for i in range(3):
                tasks.append(asyncio.create_task(request(i)))
                await wait_until(functools.partial(_waiting, client, name, i + 1), 5, f"{i + 1} waiting")
            channel = gate._side.wake_channel
            await wait_until(lambda: _subscribed(client, channel), 5, "the listener subscribed")
            gate._side.common = (*gate._side.common[:-1], NOWHERE)  # its own releases' grants are lost too
            start = time.monotonic()
            other.release(holder)
            await asyncio.wait_for(asyncio.gather(*tasks), 10)
            assert order == [0, 1, 2]
            assert time.monotonic() - start < 3 * (poll + 0.5)
            await settles_empty(client, name)
    finally:
        other.close()


NOWHERE = "boundedgate:nobody-listens:"


async def _subscribed(client: redis.asyncio.Redis, channel: str) -> bool:
    counts = await client.pubsub_numsub(channel)
    return bool(counts and counts[0][1] == 1)


async def test_a_killed_subscription_is_renewed_and_grants_still_arrive(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> None:
    async with make_gate(client, name, 1, 5, poll_interval=0.2) as gate:
        holder = await gate.try_admit()
        waiter = asyncio.create_task(gate.admit(timeout=30).__aenter__())
        await wait_until(lambda: _waiting(client, name, 1), 5, "1 waiting")
        channel = gate._side.wake_channel
        await wait_until(lambda: _subscribed(client, channel), 5, "the listener subscribed")
        await client.client_kill_filter(_type="pubsub")
        await wait_until(lambda: _subscribed(client, channel), 5, "the listener subscribed again")
        holder.release()
        permit = await asyncio.wait_for(waiter, 5)
        permit.release()
        await settles_empty(client, name)


async def test_a_grant_by_message_after_a_restart_carries_the_new_epoch_in_its_token(
    own_server: RedisServer, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Redis restarts empty (seq starts again at 1) while this process's waiter waits. Its sync
    # queues the waiter again, but the reply is lost, so the process has not heard of the new
    # epoch when another process's release grants the waiter by message: the token must pair n
    # with the epoch the grant was made under, not the one the process saw last. No sync may be in
    # flight at the kill: redis-py would retry it on the restarted server, which would queue the
    # waiter again and grant it before the other holder is counted again.
    client = redis.asyncio.Redis.from_url(own_server.url, socket_connect_timeout=0.5, socket_timeout=0.5)
    settings: dict[str, Any] = {"poll_interval": 0.1, "waiter_ttl": 30.0, "op_timeout": 0.5}
    phase = {"syncs": "answered"}
    in_flight = [0]
    run = ProcessSide.run

    try:
        async with (
            make_gate(client, name, 1, 2, **settings) as gate,
            make_gate(client, name, 1, 2, lease_ttl=1.5, **settings) as other,
        ):

            async def syncs_as_told(side: ProcessSide, script: Any, *args: Any, **kwargs: Any) -> Any:
                if side is not gate._side or script is not SYNC:
                    return await run(side, script, *args, **kwargs)
                in_flight[0] += 1
                try:
                    if phase["syncs"] == "answered":
                        return await run(side, script, *args, **kwargs)
                    if phase["syncs"] == "lost":  # it ran in Redis, its reply did not come back
                        await run(side, script, *args, **kwargs)
                    raise redis.exceptions.ConnectionError("the reply was lost")
                finally:
                    in_flight[0] -= 1

            async def no_sync_in_flight() -> bool:
                return in_flight[0] == 0

            monkeypatch.setattr(ProcessSide, "run", syncs_as_told)
            issued = set()
            for _ in range(3):
                async with gate.admit() as permit:
                    issued.add(permit.token)
            holder = await other.try_admit()
            issued.add(holder.token)
            waiter = asyncio.create_task(gate.admit(timeout=30).__aenter__())
            await wait_until(lambda: _waiting(client, name, 1), 5, "1 waiting")
            before = (await cluster(client, name)).epoch
            phase["syncs"] = "not sent"
            await wait_until(no_sync_in_flight, 5, "the sync in flight answered")
            own_server.kill()  # no persistence: it comes back empty
            own_server.start()
            await wait_until(lambda: _running(client, name, 1), 10, "the other holder counted again")
            phase["syncs"] = "lost"
            await wait_until(lambda: _waiting(client, name, 1), 10, "the waiter queued again")
            await listening(client, gate)
            epoch = (await cluster(client, name)).epoch
            assert epoch is not None
            assert epoch != before
            holder.release()  # another process's release: the grant comes by message
            permit = await asyncio.wait_for(waiter, 10)
            assert permit.token is not None
            assert permit.token not in issued
            assert permit.token[0] == epoch
            phase["syncs"] = "answered"
            permit.release()
            await settles_empty(client, name)
    finally:
        await client.aclose()


async def _running(client: redis.asyncio.Redis, name: str, n: int) -> bool:
    try:
        return (await cluster(client, name)).running == n
    except redis.exceptions.ConnectionError:  # the test's own client, on a connection the restart broke
        return False
