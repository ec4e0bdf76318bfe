"""admit_all() with a cluster gate among its steps: one order, one deadline, one queue budget, rollback.

Real time, a real redis-server: a tenant's in-process gate, then the cluster's RedisGate. A step
refused, expired or cancelled gives back every step taken before it (each counts it ``cancelled``,
or ``disconnected`` when the client left), and the caller sees that step's own error.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio

from boundedgate import (
    BoundedGate,
    CombinedPermit,
    KeyedGate,
    Late,
    QueueExpired,
    QueueFull,
    RateLimit,
    Status,
    admit_all,
)
from boundedgate.redis import RedisKeyedGate

from .helpers import cluster, make_gate, settles_empty, wait_until

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]


def _status(permit: CombinedPermit) -> Status:
    """``permit.status`` read afresh: mypy would keep the narrowing of an earlier assert on it."""
    return permit.status


async def test_a_chain_holds_both_and_releases_both_on_exit(client: redis.asyncio.Redis, name: str) -> None:
    tenant = BoundedGate(max_running=2, max_waiting=0, name="tenant")
    async with make_gate(client, name, 1, 0) as shared:
        async with admit_all(tenant, shared, timeout=30) as permit:
            assert permit.status is Status.RUNNING
            assert tenant.running == 1
            assert (await cluster(client, name)).running == 1
            assert permit.gates == (tenant, shared)
            assert permit.gate is shared
        # The exit waited for the cluster's release: the slot is free in Redis now.
        assert (await cluster(client, name)).running == 0
        assert _status(permit) is Status.COMPLETED
        assert [p.status for p in permit.permits] == [Status.COMPLETED, Status.COMPLETED]
        assert tenant.stats().completed == 1
        assert shared.stats().completed == 1


async def test_refused_at_the_cluster_step_gives_the_tenant_slot_back_as_cancelled(
    client: redis.asyncio.Redis, name: str
) -> None:
    tenant = BoundedGate(max_running=2, max_waiting=0, name="tenant")
    async with make_gate(client, name, 1, 0) as shared:
        holder = await shared.try_admit()
        with pytest.raises(QueueFull) as refused:
            async with admit_all(tenant, shared, timeout=30):
                raise AssertionError("admitted past a full cluster gate")
        assert refused.value.gate == name  # the refused step's own error, naming its gate
        stats = tenant.stats()
        assert (stats.running, stats.admitted, stats.cancelled) == (0, 0, 1)
        holder.release()
        await settles_empty(client, name)


async def test_refused_at_the_tenant_step_takes_nothing_in_redis(
    client: redis.asyncio.Redis, name: str
) -> None:
    tenant = BoundedGate(max_running=1, max_waiting=0, name="tenant")
    async with make_gate(client, name, 1, 0) as shared:
        async with tenant.admit():
            with pytest.raises(QueueFull) as refused:
                async with admit_all(tenant, shared, timeout=30):
                    raise AssertionError("admitted past a full tenant gate")
        assert refused.value.gate == "tenant"
        view = await cluster(client, name)
        assert view.counters.get("admitted", 0) == 0
        assert (view.running, view.waiting) == (0, 0)
        assert shared.stats().admitted == 0


async def test_one_deadline_and_one_queue_budget_across_the_steps(
    client: redis.asyncio.Redis, name: str
) -> None:
    tenant = BoundedGate(max_running=1, max_waiting=1, name="tenant")
    async with make_gate(client, name, 1, 1) as shared:
        held_tenant = tenant.try_admit()
        held_cluster = await shared.try_admit()
        loop = asyncio.get_running_loop()
        loop.call_later(0.3, held_tenant.release)  # the tenant step waits 0.3 s of the budget
        start = loop.time()
        with pytest.raises(QueueExpired) as expired:
            async with admit_all(tenant, shared, max_wait=0.6, timeout=30):
                raise AssertionError("admitted past a held cluster slot")
        took = loop.time() - start
        # The cluster step waited what was left of the one queue budget (0.6 s), not 0.6 s of its own.
        assert 0.55 <= took < 0.6 + 0.5
        assert expired.value.gate == name
        assert expired.value.waited == pytest.approx(took, abs=0.05)  # the whole call's wait
        assert tenant.stats().cancelled == 1  # its slot given back unused
        held_cluster.release()
        await settles_empty(client, name)


async def test_a_timeout_is_one_deadline_for_every_step(client: redis.asyncio.Redis, name: str) -> None:
    tenant = BoundedGate(max_running=1, max_waiting=1, name="tenant")
    async with make_gate(client, name, 1, 1) as shared:
        held_tenant = tenant.try_admit()
        held_cluster = await shared.try_admit()
        loop = asyncio.get_running_loop()
        loop.call_later(0.3, held_tenant.release)
        permit = admit_all(tenant, shared, timeout=0.6)
        with pytest.raises(QueueExpired):
            async with permit:
                raise AssertionError("admitted past a held cluster slot")
        assert permit.arrival is not None
        assert permit.deadline == pytest.approx(permit.arrival + 0.6)
        assert permit.permits[1].deadline == permit.deadline  # the cluster step had the call's deadline
        held_cluster.release()
        await settles_empty(client, name)


async def test_late_settle_and_a_stream_work_through_the_cluster_step(
    client: redis.asyncio.Redis, name: str
) -> None:
    tokens = RateLimit.per_minute(100_000, unit="tokens", name="tpm")
    tenant = BoundedGate(max_running=1, max_waiting=0, rate_limits=[tokens], name="tenant")
    async with make_gate(client, name, 1, 0, rate_limits=[tokens]) as shared:
        with pytest.raises(Late) as late:  # a budget a loaded machine's admission fits in, then overrun
            async with admit_all(tenant, shared, timeout=2.0, cost=10) as permit:
                await asyncio.sleep(max(0.0, permit.deadline - asyncio.get_running_loop().time()) + 0.05)
                permit.settle(500)
        assert late.value.gate == name  # the last gate's
        assert permit.status is Status.LATE
        assert [p.cost for p in permit.permits] == [500, 500]

        async def tokens_out() -> AsyncIterator[str]:
            yield "a"
            yield "b"

        async with admit_all(tenant, shared, timeout=30) as permit:
            stream = permit.hand_to(tokens_out())
        assert (await cluster(client, name)).running == 1  # the stream holds it
        assert [item async for item in stream] == ["a", "b"]
        await settles_empty(client, name)
        assert permit.status is Status.COMPLETED
        assert tenant.running == 0


async def test_release_and_abort_end_every_step(client: redis.asyncio.Redis, name: str) -> None:
    tenant = BoundedGate(max_running=1, max_waiting=0, name="tenant")
    async with make_gate(client, name, 1, 0) as shared:
        async with admit_all(tenant, shared) as permit:
            permit.abort()
            assert permit.status is Status.ABORTED
            assert tenant.running == 0
        await settles_empty(client, name)
        assert shared.stats().aborted == 1
        permit = admit_all(tenant, shared)
        await permit.__aenter__()
        permit.release()
        permit.release()  # once
        await settles_empty(client, name)
        assert (tenant.stats().completed, shared.stats().completed) == (1, 1)


async def test_the_order_check_covers_cluster_gates(client: redis.asyncio.Redis, name: str) -> None:
    tenant = BoundedGate(max_running=1, max_waiting=0, name="tenant")
    async with make_gate(client, name, 1, 0) as shared:
        admit_all(tenant, shared)
        with pytest.raises(ValueError, match="opposite orders can deadlock"):
            admit_all(shared, tenant)
        with pytest.raises(ValueError, match="appears twice"):
            admit_all(shared, shared)
        view = await cluster(client, name)
        assert view.counters.get("admitted", 0) == 0  # refused before anything was taken


async def test_a_priority_with_a_cluster_step_is_refused_at_once(
    client: redis.asyncio.Redis, name: str
) -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, priorities=2, name="tenants")
    async with make_gate(client, name, 1, 0) as shared:
        with pytest.raises(ValueError, match=r"priority=1: a RedisGate has no priority classes"):
            admit_all((tenants, "acme"), shared, priority=1)
        async with admit_all((tenants, "acme"), shared, priority=0):  # class 0 is every gate's
            pass
        await settles_empty(client, name)


async def test_a_client_that_leaves_while_queued_at_the_cluster_step_is_disconnected_at_each(
    client: redis.asyncio.Redis, name: str
) -> None:
    tenant = BoundedGate(max_running=1, max_waiting=0, name="tenant")
    async with make_gate(client, name, 1, 1) as shared:
        holder = await shared.try_admit()
        permit = admit_all(tenant, shared, timeout=30)
        entering = asyncio.create_task(permit.__aenter__())
        await wait_until(lambda: _waiting(client, name), 10, "the chain queued at the cluster gate")
        permit.disconnect()
        with pytest.raises(asyncio.CancelledError):
            await entering
        assert permit.status is Status.DISCONNECTED
        assert (tenant.stats().disconnected, tenant.stats().cancelled, tenant.running) == (1, 0, 0)
        assert shared.stats().disconnected == 1
        holder.release()
        await settles_empty(client, name)


async def test_a_caller_cancelled_while_queued_at_the_cluster_step_gives_back_both(
    client: redis.asyncio.Redis, name: str
) -> None:
    tenant = BoundedGate(max_running=1, max_waiting=0, name="tenant")
    async with make_gate(client, name, 1, 1) as shared:
        holder = await shared.try_admit()

        async def request() -> None:
            async with admit_all(tenant, shared, timeout=30):
                raise AssertionError("admitted past a held cluster slot")

        task = asyncio.create_task(request())
        await wait_until(lambda: _waiting(client, name), 10, "the chain queued at the cluster gate")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (tenant.stats().cancelled, tenant.running) == (1, 0)
        assert shared.stats().cancelled == 1
        holder.release()
        view = await settles_empty(client, name)
        assert view.counters["admitted"] == 1  # the holder only


async def _waiting(client: redis.asyncio.Redis, name: str) -> bool:
    return (await cluster(client, name)).waiting == 1


async def test_a_cluster_keyed_gates_key_is_a_step_and_its_keyed_gate_one_family(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with (
        RedisKeyedGate(client, max_running=1, max_waiting=0, name=name, keep_idle=2) as tenants,
        make_gate(client, f"{name}-shared", 1, 0) as shared,
    ):
        async with admit_all((tenants, "acme"), shared, timeout=30) as permit:
            assert (await cluster(client, f"{name}/acme")).running == 1
            with pytest.raises(QueueFull) as refused:  # acme's one slot is held: globex's is its own
                async with admit_all((tenants, "acme"), shared, timeout=30):
                    pass
            assert refused.value.gate == f"{name}/acme"
            with pytest.raises(QueueFull) as refused:  # globex's slot is given back unused
                async with admit_all((tenants, "globex"), shared, timeout=30):
                    pass
            assert refused.value.gate == f"{name}-shared"
            assert tenants.stats().total.cancelled == 1
        assert permit.gates == (tenants.get("acme"), shared)
        with pytest.raises(ValueError, match="appears twice"):  # two keys of one keyed gate
            admit_all((tenants, "acme"), (tenants, "globex"))
        with pytest.raises(ValueError, match="opposite orders can deadlock"):
            admit_all(shared, (tenants, "initech"))
        with pytest.raises(TypeError, match="takes a RedisKeyedGate with its key"):
            admit_all(tenants, shared)  # type: ignore[arg-type]
        for key in ("acme", "globex"):
            await settles_empty(client, f"{name}/{key}")
