"""A stream holds its cluster slot to EOF; an idle gate leaves no key behind past its TTL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio

from boundedgate import Late, QueueFull, Status

from .helpers import cluster, make_gate, settles_empty, wait_until

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]


async def fake_stream(chunks: int) -> AsyncIterator[str]:
    """Stands in for an LLM SDK's streamed response."""
    for i in range(chunks):
        await asyncio.sleep(0.02)
        yield f"chunk {i}"


async def test_a_stream_holds_its_cluster_slot_until_eof(client: redis.asyncio.Redis, name: str) -> None:
    async with make_gate(client, name, 1, 0) as gate, make_gate(client, name, 1, 0) as elsewhere:
        received = []
        async with gate.admit(timeout=30) as permit:
            async for chunk in fake_stream(5):
                received.append(chunk)
                with pytest.raises(QueueFull):  # another process finds the slot taken mid-stream
                    await elsewhere.try_admit()
        assert received == [f"chunk {i}" for i in range(5)]
        assert permit.status is Status.COMPLETED
        async with await elsewhere.try_admit():
            pass
        await settles_empty(client, name)


async def test_a_permit_handed_to_a_stream_is_ended_by_it(client: redis.asyncio.Redis, name: str) -> None:
    # What the stream wrapper relies on (boundedgate's StreamPermit): hand-over, a synchronous and
    # idempotent end, late detection, the owning loop.
    loop = asyncio.get_running_loop()
    async with make_gate(client, name, 1, 0) as gate:
        async with gate.admit(timeout=1.0) as permit:  # a second to reach Redis, on a loaded machine
            permit._hand_over()
            with pytest.raises(RuntimeError, match="already handed"):
                permit._hand_over()
        assert permit.status is Status.RUNNING  # the block's exit neither released nor raised
        assert (await cluster(client, name)).running == 1
        assert permit._loop is loop
        await asyncio.sleep(permit.deadline - loop.time() + 0.05)  # past its deadline
        asyncio.get_running_loop().call_soon_threadsafe(permit._finish)  # as a finaliser does
        await asyncio.sleep(0)
        permit._finish(Status.FAILED)  # a second end does nothing
        status: Status = permit.status  # changed by _finish, which mypy's narrowing cannot see
        assert status is Status.LATE
        error = permit._late()
        assert isinstance(error, Late)
        assert error.gate == gate.name
        permit.settle(120)
        with pytest.raises(ValueError, match="cost"):
            permit.settle(-1)
        with pytest.raises(RuntimeError, match="no slot"):
            permit._hand_over()
        await settles_empty(client, name)
        assert gate.stats().late == 1


async def test_an_idle_gate_leaves_only_keys_that_expire(client: redis.asyncio.Redis, name: str) -> None:
    async with make_gate(client, name, 1, 1, idle_ttl=1.0) as gate:
        async with gate.admit(timeout=30):
            pass
        with pytest.raises(QueueFull):
            async with gate.admit(), await gate.try_admit():
                pass
    keys = {k.decode() async for k in client.scan_iter(f"boundedgate:{{{name}}}:*")}
    assert keys  # meta, seq, stats and recent outcomes stay, briefly
    for key in keys:
        ttl = await client.pttl(key)
        assert 0 < ttl <= 1000, (key, ttl)

    async def gone() -> bool:
        return not [k async for k in client.scan_iter(f"boundedgate:{{{name}}}:*")]

    await wait_until(gone, 3, "every key expired")


async def test_a_closed_gate_can_be_used_again(client: redis.asyncio.Redis, name: str) -> None:
    gate = make_gate(client, name, 1, 1, lease_ttl=0.6)
    for _ in range(2):
        async with gate:
            async with gate.admit(timeout=30) as permit:
                await asyncio.sleep(1.0)  # longer than the lease: only the heartbeat keeps it
            assert not permit.lease_lost
    await settles_empty(client, name)
    assert (await cluster(client, name)).counters.get("reclaimed", 0) == 0


async def test_every_key_of_the_gate_has_its_idle_ttl_whichever_script_made_it(
    client: redis.asyncio.Redis, name: str
) -> None:
    # The first script sets no counter and no sequence (a limit change); the keys the later ones
    # make must get their TTL all the same, though the periodic refresh of every key is not due.
    async with make_gate(client, name, 1, 1) as gate:
        await gate.set_limits(max_running=2)
        async with gate.admit(timeout=30):
            pass
        keys = [k.decode() async for k in client.scan_iter(f"boundedgate:{{{name}}}:*")]
        assert {k.rsplit(":", 1)[1] for k in keys} >= {"meta", "seq", "stats", "outcomes"}
        for key in keys:
            assert await client.pttl(key) > 0, key


@pytest.mark.parametrize("ending", [Status.COMPLETED, Status.LATE, Status.EXPIRED])
async def test_a_running_permit_ends_only_as_the_core_s_rule_allows(
    client: redis.asyncio.Redis, name: str, ending: Status
) -> None:
    # One rule for every gate (the core's ended_as): FAILED, ABORTED or LEAKED, or none and the
    # time decides. Any other is refused before anything changes, as a local permit refuses it.
    async with make_gate(client, name, 1, 0) as gate:
        permit = await gate.try_admit()
        with pytest.raises(ValueError, match=f"cannot end as {ending.value}"):
            permit._finish(ending)
        assert (permit.status, gate.running, gate.stats().completed) == (Status.RUNNING, 1, 0)
        permit.release()
        await settles_empty(client, name)
