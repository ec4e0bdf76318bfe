"""RedisGate keeps BoundedGate's rules, with the state in a real Redis: one process, several tasks."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis
import redis.asyncio

from boundedgate import BoundedGate, GateUnavailable, Late, QueueExpired, QueueFull, Status
from boundedgate.redis import RedisGate, RedisPermit
from boundedgate.redis._layout import gate_keys
from boundedgate.redis._process import ProcessSide
from tests.helpers import status_of

from .helpers import OtherProcess, cluster, make_gate, settles_empty, until_queued, wait_until
from .servers import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False), pytest.mark.engines]


async def test_a_free_slot_is_granted_at_once_and_released_on_exit(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with make_gate(client, name, 2, 2) as gate:
        async with gate.admit(timeout=30) as permit:
            assert permit.status is Status.RUNNING
            assert permit.token is not None
            assert permit.token[1] >= 1
            view = await cluster(client, name)
            assert [h.id for h in view.holders] == [permit.id]
            assert view.holders[0].process == gate.process
        assert status_of(permit) is Status.COMPLETED
        assert (await cluster(client, name)).running == 0  # the exit waited for the release
        stats = gate.stats()
        assert (stats.admitted, stats.completed, stats.running) == (1, 1, 0)


async def test_waiters_are_served_in_arrival_order(client: redis.asyncio.Redis, name: str) -> None:
    async with make_gate(client, name, 1, 10) as gate:
        order: list[int] = []
        holder = await gate.try_admit()

        async def request(i: int) -> None:
            async with gate.admit():
                order.append(i)
                await asyncio.sleep(0.01)

        tasks = []
        for i in range(6):
            tasks.append(asyncio.create_task(request(i)))
            await wait_until(functools.partial(_waiting, client, name, i + 1), 5, f"{i + 1} waiting")
        holder.release()
        await asyncio.gather(*tasks)
        assert order == list(range(6))
        view = await settles_empty(client, name)
        assert view.counters["admitted"] == 7
        assert view.counters["peak_waiting"] == 6


async def _waiting(client: redis.asyncio.Redis, name: str, n: int) -> bool:
    return (await cluster(client, name)).waiting == n


async def test_queue_full_at_exactly_q_and_nothing_is_queued(client: redis.asyncio.Redis, name: str) -> None:
    async with make_gate(client, name, 1, 2) as gate:
        holder = await gate.try_admit()
        waiters = []
        for i in range(2):  # one after the other: FIFO is by arrival at Redis, not by task creation
            waiters.append(asyncio.create_task(gate.admit().__aenter__()))
            await wait_until(functools.partial(_waiting, client, name, i + 1), 5, f"{i + 1} waiting")
        with pytest.raises(QueueFull) as info:
            async with gate.admit():
                pytest.fail("admitted past a full queue")
        error = info.value
        assert (error.gate, error.max_running, error.max_waiting, error.running, error.waiting) == (
            name,
            1,
            2,
            1,
            2,
        )
        assert error.waited == 0.0
        assert (await cluster(client, name)).waiting == 2  # the refused one left nothing behind
        holder.release()
        for task in waiters:
            (await task).release()
        view = await settles_empty(client, name)
        assert view.counters["rejected"] == 1
        assert gate.stats().rejected == 1


async def test_max_waiting_zero_refuses_as_soon_as_every_slot_is_busy(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with make_gate(client, name, 1, 0) as gate:
        async with gate.admit():
            with pytest.raises(QueueFull):
                await gate.admit().__aenter__()
        async with gate.admit():
            pass


async def test_a_newcomer_never_barges_past_the_queue(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> None:
    # The release and a newcomer from another process race; the queued waiter must win either way.
    other = OtherProcess(redis_server.url, name, 1, 5)
    try:
        async with make_gate(client, name, 1, 5) as gate:
            holder = await gate.try_admit()
            waiter = asyncio.create_task(gate.admit().__aenter__())
            await wait_until(lambda: _waiting(client, name, 1), 5, "1 waiting")
            newcomer = other.submit(other.gate.try_admit())
            holder.release()
            first = await waiter
            with pytest.raises(QueueFull):
                await newcomer  # it may arrive before or after the release: there is a waiter, or no slot
            assert first.status is Status.RUNNING
            first.release()
            await settles_empty(client, name)
    finally:
        other.close()


async def test_deadline_in_the_queue_raises_queue_expired_and_frees_the_place(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with make_gate(client, name, 1, 3) as gate:
        holder = await gate.try_admit()
        loop = asyncio.get_running_loop()
        with pytest.raises(QueueExpired) as info:
            async with gate.admit(timeout=0.3):
                pytest.fail("ran after its deadline")
        # Raised by the waiter's own loop timer at the deadline; anything else (the waiter's lease
        # in Redis) would take waiter_ttl, 5 s. The slack is for a loaded machine, not the design.
        late_by = loop.time() - info.value.deadline
        assert 0 <= late_by < 1.0
        assert info.value.waited == pytest.approx(0.3, abs=1.0)
        took = await wait_until(lambda: _waiting(client, name, 0), 5, "the place freed")
        assert took < 2.5  # one background call to Redis, well within op_timeout and waiter_ttl
        holder.release()
        view = await settles_empty(client, name)
        assert view.counters["expired"] == 1
        assert gate.stats().expired == 1


@pytest.mark.parametrize("deadline_timer", [True, False], ids=["timer-and-grant", "grant-only"])
async def test_a_grant_seen_after_the_deadline_expires_and_passes_the_slot_on(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str, deadline_timer: bool
) -> None:
    # This process stalls past its waiter's deadline while another one releases the slot: Redis
    # grants it, but the waiter must not start late; the slot goes on to the next waiter. Without
    # its deadline timer, the waiter learns of the grant first, and must still refuse it.
    # The deadline (1 s) is the admission's time to reach Redis too: room for a loaded machine.
    other = OtherProcess(redis_server.url, name, 1, 5)
    watcher = redis.Redis.from_url(redis_server.url)  # asks Redis while this loop stalls
    try:
        async with make_gate(client, name, 1, 5) as gate:
            holder = other.run(other.gate.try_admit())
            late_permit = gate.admit(timeout=1.0)
            late = asyncio.create_task(late_permit.__aenter__())
            await wait_until(lambda: _waiting(client, name, 1), 5, "1 waiting")
            await wait_until(_queued_here(gate, 1), 5, "1 waiting, as this process heard")  # its timer set
            late_id = late_permit.id
            assert late_id is not None
            if not deadline_timer:
                (waiter,) = gate._side.waiters.values()
                assert isinstance(waiter, RedisPermit)
                assert waiter._timer is not None
                waiter._timer.cancel()
            second = other.submit(_enter(other.gate.admit(timeout=30)))
            await wait_until(lambda: _waiting(client, name, 2), 5, "2 waiting")
            other.loop.call_soon_threadsafe(holder.release)
            # This loop stalls until Redis granted the slot to its waiter, then past the deadline.
            _stall_until(lambda: watcher.zscore(gate_keys(name)[1], late_id) is not None, 10)
            time.sleep(max(0.0, late_permit.deadline - asyncio.get_running_loop().time()) + 0.05)
            with pytest.raises(QueueExpired):
                await late
            permit = await second
            assert permit.status is Status.RUNNING
            other.release(permit)
            view = await settles_empty(client, name)
            assert view.counters["expired"] == 1
            assert view.counters["admitted"] == 2  # the grant it never used does not count
    finally:
        other.close()
        watcher.close()


def _queued_here(gate: RedisGate, n: int) -> Callable[[], Awaitable[bool]]:
    async def queued() -> bool:
        return gate.waiting == n

    return queued


def _stall_until(check: Callable[[], bool], within: float) -> None:
    """Block this thread (and its event loop) until ``check()``; fail after ``within`` seconds."""
    give_up = time.monotonic() + within
    while not check():
        assert time.monotonic() < give_up, f"not within {within}s"
        time.sleep(0.01)


async def _enter(permit: RedisPermit) -> RedisPermit:
    return await permit.__aenter__()


async def test_late_on_exit_and_failed_body(client: redis.asyncio.Redis, name: str) -> None:
    async with make_gate(client, name, 1, 1) as gate:
        loop = asyncio.get_running_loop()
        with pytest.raises(Late) as info:
            # A second to reach Redis (room for a loaded machine), then the block runs past it.
            async with gate.admit(timeout=1.0) as permit:
                await asyncio.sleep(permit.deadline - loop.time() + 0.05)
        assert permit.status is Status.LATE
        assert info.value.overrun >= 0
        with pytest.raises(KeyError):
            async with gate.admit(timeout=10) as permit:
                raise KeyError("the body's own")
        assert permit.status is Status.FAILED
        view = await settles_empty(client, name)
        assert (view.counters["late"], view.counters["failed"]) == (1, 1)
        stats = gate.stats()
        assert (stats.late, stats.failed, stats.completed) == (1, 1, 0)


async def test_refused_uncounted_when_already_expired_or_cancelled(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with make_gate(client, name, 1, 1) as gate:
        loop = asyncio.get_running_loop()
        with pytest.raises(QueueExpired):
            await gate.admit(deadline=loop.time() - 1).__aenter__()
        with pytest.raises(QueueExpired):
            await gate.admit(timeout=0).__aenter__()

        async def cancelled_caller() -> None:
            asyncio.current_task().cancel()  # type: ignore[union-attr]
            async with gate.admit():
                pytest.fail("a cancelled caller must not start")

        with pytest.raises(asyncio.CancelledError):
            await asyncio.create_task(cancelled_caller())
        assert (await cluster(client, name)).epoch is None  # Redis never heard of them
        assert gate.stats().arrived == 0


async def test_release_is_idempotent_and_works_from_another_task(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with make_gate(client, name, 1, 1) as gate:
        permit = await gate.try_admit()
        waiter = asyncio.create_task(gate.admit().__aenter__())
        await wait_until(lambda: _waiting(client, name, 1), 5, "1 waiting")
        asyncio.get_running_loop().call_soon(permit.release)
        second = await waiter
        permit.release()
        permit.release()
        assert permit.status is Status.COMPLETED
        assert (await cluster(client, name)).running == 1
        await second.__aexit__(None, None, None)  # the exit of the entry the task made
        await settles_empty(client, name)
        assert gate.stats().completed == 2


async def test_try_admit_refuses_rather_than_queue(client: redis.asyncio.Redis, name: str) -> None:
    async with make_gate(client, name, 1, 5) as gate:
        async with await gate.try_admit():
            with pytest.raises(QueueFull) as info:
                await gate.try_admit()
            assert info.value.waiting == 0
        async with gate.admit() as permit:
            pass
        with pytest.raises(RuntimeError, match="already used"):
            await permit.__aenter__()


async def test_unreachable_redis_fails_closed_with_gate_unavailable(name: str) -> None:
    dead = redis.asyncio.Redis(host="127.0.0.1", port=_closed_port(), socket_connect_timeout=0.5)
    try:
        async with RedisGate(dead, max_running=1, max_waiting=1, name=name, op_timeout=1.0) as gate:
            start = time.monotonic()
            permit = gate.admit(timeout=30)
            with pytest.raises(GateUnavailable) as info:
                async with permit:
                    pytest.fail("admitted without Redis")
            assert time.monotonic() - start < 5
            error = info.value
            assert (error.code, error.reason, error.http_status) == ("gate_unavailable", "unreachable", 503)
            assert error.__cause__ is not None
            # Its ending is its own: counted apart from QueueFull's, shown as REJECTED (as documented).
            assert permit.status is Status.REJECTED
            assert (gate.stats().unavailable, gate.stats().rejected) == (1, 0)
            with pytest.raises(GateUnavailable):
                await gate.cluster_stats()
    finally:
        await dead.aclose()


async def test_an_explicit_fallback_gate_is_used_and_counted(name: str) -> None:
    dead = redis.asyncio.Redis(host="127.0.0.1", port=_closed_port(), socket_connect_timeout=0.5)
    local = BoundedGate(max_running=1, max_waiting=0, name="local")
    try:
        async with RedisGate(
            dead, max_running=5, max_waiting=5, name=name, op_timeout=0.5, fallback=local
        ) as gate:
            async with gate.admit(timeout=30) as permit:
                assert permit.fallback
                assert permit.token is None
                assert local.running == 1
                assert permit.status is Status.RUNNING
            assert status_of(permit) is Status.COMPLETED
            assert local.running == 0
            held = await gate.try_admit()  # the fallback's try_admit: a slot now, or QueueFull now
            assert held.fallback
            with pytest.raises(QueueFull) as info:
                await gate.try_admit()
            assert info.value.gate == "local"
            held.release()
            assert local.running == 0
            assert gate.stats().fallbacks == 3
    finally:
        await dead.aclose()


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"max_running": 0, "max_waiting": 1}, ValueError),
        ({"max_running": True, "max_waiting": 1}, TypeError),
        ({"max_running": 1, "max_waiting": 1.5}, TypeError),
        ({"max_running": 1, "max_waiting": 1, "lease_ttl": 0}, ValueError),
        ({"max_running": 1, "max_waiting": 1, "lease_ttl": math.inf}, ValueError),
        ({"max_running": 1, "max_waiting": 1, "op_timeout": "1"}, TypeError),
        ({"max_running": 1, "max_waiting": 1, "poll_interval": 1.0, "waiter_ttl": 0.5}, ValueError),
        ({"max_running": 1, "max_waiting": 1, "name": 3}, TypeError),
    ],
)
def test_bad_settings_are_refused_at_construction(
    settings: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error):
        RedisGate(None, **settings)  # type: ignore[arg-type]


async def test_a_task_that_swallowed_a_cancellation_is_admitted_and_a_pending_one_refused(
    client: redis.asyncio.Redis, name: str
) -> None:
    # The rule of BoundedGate: refuse only a cancellation that is really pending. (Task.cancelling()
    # stays above 0 once one was delivered and swallowed: that refused the task for ever.)
    async with make_gate(client, name, 1, 1) as gate:

        async def request() -> None:
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0)
            async with gate.admit(timeout=30):
                pass
            task.cancel()  # pending now: refused before it is counted
            async with gate.admit(timeout=30):
                pytest.fail("a pending cancellation must refuse the caller")

        with pytest.raises(asyncio.CancelledError):
            await asyncio.create_task(request())
        assert (gate.stats().completed, gate.stats().cancelled, gate.stats().arrived) == (1, 0, 1)


async def test_a_queue_budget_expires_a_waiter_its_deadline_would_have_let_wait(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with make_gate(client, name, 1, 1) as gate:
        holder = await gate.try_admit()
        start = time.monotonic()
        with pytest.raises(QueueExpired) as caught:
            async with gate.admit(timeout=30, max_wait=0.3):
                pytest.fail("it never starts")
        waited = time.monotonic() - start
        assert 0.3 <= waited < 3  # the budget, with room for a loaded machine; far from the 30 s
        assert 0.3 <= caught.value.waited <= waited  # what it waited, not what raising it took
        holder.release()
        await settles_empty(client, name)  # its place in Redis went too (taken back in the background)
        assert gate.stats().expired == 1


async def test_once_running_only_the_deadline_decides_and_raise_late_false_only_counts(
    client: redis.asyncio.Redis, name: str
) -> None:
    # The admission gets its queue budget (max_wait) as its time to reach Redis: a second, room
    # for a loaded machine; the block then runs past that budget and past its deadline.
    loop = asyncio.get_running_loop()
    async with make_gate(client, name, 1, 1) as gate:
        async with gate.admit(timeout=1.2, max_wait=1.0, raise_late=False) as permit:
            await asyncio.sleep(permit.deadline - loop.time() + 0.05)  # past max_wait and the deadline
        assert permit.status is Status.LATE
        with pytest.raises(Late):
            async with gate.admit(timeout=1.0) as permit:
                await asyncio.sleep(permit.deadline - loop.time() + 0.05)
        assert gate.stats().late == 2


async def test_a_waiter_whose_client_went_away_leaves_the_cluster_queue_as_disconnected(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with make_gate(client, name, 1, 2) as gate:
        holder = await gate.try_admit()
        left = gate.admit(timeout=30)
        task = asyncio.create_task(left.__aenter__())
        await wait_until(lambda: _waiting(client, name, 1), 3, "one waiter")
        left.disconnect()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert left.status is Status.DISCONNECTED
        holder.disconnect()  # it runs: nothing to leave
        holder.abort()
        assert holder.status is Status.ABORTED
        view = await settles_empty(client, name)
        stats = gate.stats()
        assert (stats.disconnected, stats.aborted, stats.cancelled) == (1, 1, 0)
        assert view.counters.get("disconnected") == 1


async def test_this_process_never_counts_more_waiting_than_the_queue_holds(
    client: redis.asyncio.Redis, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A waiter granted in Redis stays queued here until it hears of the grant; a newcomer that takes
    # the freed place meanwhile must not make this process's peak_waiting exceed Q. The grant is
    # kept from the first waiter (message, reply or poll, all tell the side's granted()) until the
    # newcomer is queued: no race with a poll, however slow the machine.
    async with make_gate(client, name, 1, 1) as gate, make_gate(client, name, 1, 1) as other:
        held_back: set[str] = set()
        granted = ProcessSide.granted

        def granted_unless_held_back(side: ProcessSide, permit_id: str, token: Any, epoch: Any) -> None:
            if permit_id not in held_back:
                granted(side, permit_id, token, epoch)

        monkeypatch.setattr(ProcessSide, "granted", granted_unless_held_back)
        holder = await other.try_admit()  # another process's: its release announces the grant
        first = gate.admit(timeout=30)
        entered = asyncio.create_task(first.__aenter__())

        async def queued() -> bool:
            return (await cluster(client, name)).waiting == 1

        await wait_until(queued, 5, "the first waiter")
        assert first.id is not None
        held_back.add(first.id)
        holder.release()

        async def handed() -> bool:
            view = await cluster(client, name)
            return (view.running, view.waiting) == (1, 0)

        await wait_until(handed, 5, "the slot handed to the first waiter")
        second = asyncio.create_task(gate.admit(timeout=30).__aenter__())
        await wait_until(queued, 5, "the second waiter")
        assert gate.waiting == 2  # the first has not heard of its grant
        assert gate.stats().peak_waiting == 1
        held_back.clear()  # the next poll tells it
        (await asyncio.wait_for(entered, 5)).release()
        (await asyncio.wait_for(second, 5)).release()
        await settles_empty(client, name)


async def test_tokens_past_ten_to_the_fourteen_stay_exact(client: redis.asyncio.Redis, name: str) -> None:
    # A number joined into a reply as Lua formats it (%.14g) would come out as 1e+15 there.
    await client.set(gate_keys(name)[6], 10**15)  # the sequence
    async with make_gate(client, name, 1, 1) as gate:
        async with gate.admit(timeout=5) as permit:
            assert permit.token is not None
            assert permit.token[1] == 10**15 + 1
            waiter = asyncio.create_task(gate.admit(timeout=5).__aenter__())
            await until_queued(waiter, lambda: gate.waiting > 0)
        granted = await asyncio.wait_for(waiter, 5)  # told in the release's reply
        assert granted.token is not None
        assert granted.token[1] == 10**15 + 3  # the waiter's arrival took 10**15 + 2
        granted.release()
        await settles_empty(client, name)
