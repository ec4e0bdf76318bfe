"""``on_deadline="cut"`` on a cluster gate: the body still running at its deadline is cancelled
then, its slot held in Redis until it has really stopped, the request counted ``cut`` here and in
the cluster's counters, and the exit raises DeadlineCut. Real Redis, real time: the deadlines are
short, every wait for an event is bounded by the gates' settings with plenty of room."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
import redis.asyncio

from boundedgate import BoundedGate, DeadlineCut, QueueFull, Status
from boundedgate.redis import RedisGate, RedisKeyedGate
from tests.streams.sources import Log, ticks

from .helpers import CALM, cluster, make_gate, settles_empty

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]

# The deadline of the requests cut here, and the bound on any wait for what follows it: the
# gates' op_timeout (every round trip to Redis is bounded by it) with plenty of room.
DEADLINE = 0.2
WITHIN = 2 * float(CALM["op_timeout"])


async def _cut_counted(client: redis.asyncio.Redis, name: str, cut: int = 1) -> None:
    """The gate is empty in Redis, and the cluster counted ``cut`` requests cut."""
    view = await settles_empty(client, name)
    assert view.counters.get("cut", 0) == cut
    assert view.counters.get("failed", 0) == 0


async def test_a_body_past_its_deadline_is_cut(client: redis.asyncio.Redis, name: str) -> None:
    async with make_gate(client, name, 1, 0) as gate:
        permit = gate.admit(timeout=DEADLINE, on_deadline="cut")
        with pytest.raises(DeadlineCut) as cut:
            async with asyncio.timeout(WITHIN), permit:  # the outer timeout: a cut that never comes
                await asyncio.sleep(WITHIN * 10)
        assert isinstance(cut.value.__cause__, asyncio.CancelledError)
        assert cut.value.gate == name
        assert cut.value.deadline == permit.deadline
        assert permit.status is Status.CUT
        stats = gate.stats()
        assert (stats.cut, stats.completed, stats.late, stats.failed) == (1, 0, 0, 0)
        await _cut_counted(client, name)


async def test_the_slot_is_held_in_redis_until_the_body_has_stopped(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with make_gate(client, name, 1, 0) as gate, make_gate(client, name, 1, 0) as elsewhere:
        cleaning, may_finish = asyncio.Event(), asyncio.Event()

        async def clean_up() -> None:
            cleaning.set()
            await may_finish.wait()

        async def call() -> None:
            async with gate.admit(timeout=DEADLINE, on_deadline="cut"):
                try:
                    await asyncio.sleep(WITHIN * 10)
                finally:
                    await asyncio.shield(clean_up())  # the body goes on after the cut landed

        task = asyncio.create_task(call())
        async with asyncio.timeout(WITHIN):
            await cleaning.wait()
        assert (await cluster(client, name)).running == 1
        with pytest.raises(QueueFull):  # another process finds the slot still taken
            await elsewhere.try_admit()
        may_finish.set()
        with pytest.raises(DeadlineCut):
            await task
        await _cut_counted(client, name)
        async with await elsewhere.try_admit():
            pass


async def test_the_callers_own_cancellation_stays_a_cancellation(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with make_gate(client, name, 1, 0) as gate:
        running = asyncio.Event()
        permit = gate.admit(timeout=WITHIN * 10, on_deadline="cut")

        async def call() -> None:
            async with permit:
                running.set()
                await asyncio.sleep(WITHIN * 10)

        task = asyncio.create_task(call())
        async with asyncio.timeout(WITHIN):
            await running.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert permit.status is Status.FAILED
        stats = gate.stats()
        assert (stats.cut, stats.failed) == (0, 1)
        view = await settles_empty(client, name)
        assert (view.counters.get("cut", 0), view.counters.get("failed", 0)) == (0, 1)


async def test_a_cancellation_during_the_cut_stays_the_callers(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with make_gate(client, name, 1, 0) as gate:
        cleaning = asyncio.Event()
        permit = gate.admit(timeout=DEADLINE, on_deadline="cut")

        async def call() -> None:
            async with permit:
                try:
                    await asyncio.sleep(WITHIN * 10)
                finally:
                    cleaning.set()
                    await asyncio.sleep(WITHIN * 10)  # the caller's cancellation lands here

        task = asyncio.create_task(call())
        async with asyncio.timeout(WITHIN):
            await cleaning.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert permit.status is Status.FAILED
        assert gate.stats().cut == 0
        await settles_empty(client, name)


async def test_a_body_done_before_its_deadline_completes(client: redis.asyncio.Redis, name: str) -> None:
    async with make_gate(client, name, 1, 0) as gate:
        async with gate.admit(timeout=WITHIN, on_deadline="cut") as permit:
            await asyncio.sleep(0)
        assert permit.status is Status.COMPLETED
        assert (gate.stats().completed, gate.stats().cut) == (1, 0)
        view = await settles_empty(client, name)
        assert view.counters.get("completed", 0) == 1
        # The timer was disarmed at the exit: nothing cancels this task at the old deadline.
        await asyncio.sleep(WITHIN / 2)


async def test_a_stream_is_closed_at_its_deadline(client: redis.asyncio.Redis, name: str) -> None:
    async with make_gate(client, name, 1, 0) as gate:
        log = Log()
        stream = await gate.stream(
            lambda: ticks(10**6, log, every=DEADLINE / 10), timeout=DEADLINE, on_deadline="cut"
        )
        items = []
        with pytest.raises(DeadlineCut):
            async with asyncio.timeout(WITHIN):
                async for item in stream:
                    items.append(item)
        assert items  # it ran until its deadline
        assert log.closed
        assert stream.permit.status is Status.CUT
        assert gate.stats().cut == 1
        await _cut_counted(client, name)


async def test_the_keyed_gate_passes_the_option(client: redis.asyncio.Redis, name: str) -> None:
    settings: Any = CALM
    async with RedisKeyedGate(client, max_running=1, max_waiting=0, name=name, **settings) as gates:
        permit = gates.admit("acme", timeout=DEADLINE, on_deadline="cut")
        with pytest.raises(DeadlineCut):
            async with asyncio.timeout(WITHIN), permit:
                await asyncio.sleep(WITHIN * 10)
        assert permit.status is Status.CUT
        stream = await gates.stream(
            "acme", lambda: ticks(10**6, every=DEADLINE / 10), timeout=DEADLINE, on_deadline="cut"
        )
        with pytest.raises(DeadlineCut):
            async with asyncio.timeout(WITHIN):
                async for _ in stream:
                    pass
        assert stream.permit.status is Status.CUT
        await _cut_counted(client, permit.gate.name, cut=2)


async def test_a_request_admitted_by_the_fallback_gate_is_cut_there(name: str) -> None:
    with socket.socket() as probe:  # a port nothing listens on: Redis is unreachable
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dead = redis.asyncio.Redis(host="127.0.0.1", port=port, socket_connect_timeout=DEADLINE)
    local = BoundedGate(max_running=1, max_waiting=0, name="local")
    try:
        async with RedisGate(
            dead, max_running=1, max_waiting=0, name=name, op_timeout=DEADLINE, fallback=local
        ) as gate:
            # Deadline past the failed round trip to Redis (op_timeout), and the fallback's admission.
            permit = gate.admit(timeout=WITHIN / 4, on_deadline="cut")
            with pytest.raises(DeadlineCut) as cut:
                async with asyncio.timeout(WITHIN), permit:
                    assert permit.fallback
                    await asyncio.sleep(WITHIN * 10)
            assert cut.value.gate == "local"
            assert permit.status is Status.CUT
            assert (local.stats().cut, local.running) == (1, 0)
    finally:
        await dead.aclose()
