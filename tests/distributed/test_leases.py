"""Leases: renewed off the event loop, bounded for a stuck loop, and a lost one always reported.

Issue 28, items 1 and 2. The renewals run on a thread of the gate's own, over a connection of their
own, so a saturated event loop cannot make a healthy process's leases lapse; a loop that shows no
progress for ``max_stall`` is taken for stuck, and its leases are let go. A renewal that finds its
holder counted again in Redis under another token (a renewal whose reply was lost did it) reports
the loss: ``permit.lease_lost``, ``stats().lease_lost``, the new token.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis.asyncio
import redis.asyncio.cluster

from boundedgate import QueueFull
from boundedgate.redis import RedisPermit
from boundedgate.redis._io import text
from boundedgate.redis._layout import gate_keys
from boundedgate.redis._renewer import Renewer, copier

from .helpers import OtherProcess, cluster, make_gate, settles_empty, wait_until
from .servers import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]


@contextmanager
def _stopped(server: RedisServer) -> Iterator[None]:
    """SIGSTOP ``server`` for the block (the kernel keeps what clients send meanwhile), then SIGCONT."""
    assert server.process is not None
    pid = server.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


async def _expiry(client: redis.asyncio.Redis, name: str, permit_id: str) -> float | None:
    """The holder's lease expiry in Redis (ms, the server's clock), None if it holds no slot."""
    return await client.zscore(gate_keys(name)[1], permit_id)


async def _renewed(client: redis.asyncio.Redis, name: str, permit_id: str, within: float) -> None:
    """Return once the lease of ``permit_id`` has been renewed (its expiry moved on)."""
    first = await _expiry(client, name, permit_id)

    async def moved() -> bool:
        return await _expiry(client, name, permit_id) != first

    await wait_until(moved, within, "a renewal of the lease")


async def _token_in_redis(client: redis.asyncio.Redis, name: str, permit_id: str) -> int:
    info = await client.hget(gate_keys(name)[4], permit_id)
    assert info is not None
    return int(text(info).rsplit("|", 1)[1])


async def _counted_again(client: redis.asyncio.Redis, name: str) -> bool:
    return (await cluster(client, name)).counters.get("reattached", 0) >= 1


async def _lost(permit: RedisPermit) -> bool:
    return bool(permit.lease_lost)


async def test_a_lease_counted_again_by_a_renewal_whose_reply_was_lost_is_reported(
    own_server: RedisServer, name: str
) -> None:
    # D4 of the distributed-engines research: Redis is stopped for twice the lease, so the lease
    # lapses there while the renewals sent meanwhile wait in the kernel and time out here. When it
    # resumes, the first of them reclaims the lapsed lease and counts the holder again under a new
    # token, and its reply is lost; the next renewal finds the holder present. It must still say so.
    lease, op_timeout = 2.0, 1.0
    client = redis.asyncio.Redis.from_url(own_server.url)
    reader = redis.asyncio.Redis.from_url(own_server.url)
    try:
        async with make_gate(client, name, 1, 0, lease_ttl=lease, op_timeout=op_timeout) as gate:
            permit = await gate.try_admit()
            assert permit.id is not None
            assert permit.token is not None
            epoch, first = permit.token
            await _renewed(reader, name, permit.id, 5 * lease)  # the renewals have their connection
            with _stopped(own_server):
                await asyncio.sleep(2 * lease)
            await wait_until(lambda: _counted_again(reader, name), 5 * lease, "the holder counted again")
            await wait_until(lambda: _lost(permit), 5 * lease, "the lost lease reported")
            view = await cluster(reader, name)
            assert (view.counters.get("reclaimed"), view.counters.get("reattached")) == (1, 1)
            now_in_redis = await _token_in_redis(reader, name, permit.id)
            assert now_in_redis != first
            assert permit.token == (epoch, now_in_redis)
            assert gate.stats().lease_lost == 1
            permit.release()
            await settles_empty(reader, name)
    finally:
        await client.aclose()
        await reader.aclose()


def _renewal_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("boundedgate-renewals:")]


async def _no_renewal_thread() -> bool:
    return not _renewal_threads()


async def test_a_loop_blocked_longer_than_the_lease_but_within_max_stall_keeps_its_lease(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> None:
    # The loop is blocked for three leases (a long synchronous call, say): its process is alive,
    # so its renewal thread keeps the lease, and another process asking every 50 ms never gets in.
    lease = 1.0
    other = OtherProcess(redis_server.url, name, 1, 0, lease_ttl=lease)
    try:
        async with make_gate(client, name, 1, 0, lease_ttl=lease, max_stall=20 * lease) as gate:
            held = await gate.try_admit()
            attempts = other.submit(_attempts(other, 3 * lease))
            time.sleep(3 * lease)
            admitted, refused = await attempts
            assert admitted == 0
            assert refused >= 1
            assert held.lease_lost is False
            assert (await cluster(client, name)).counters.get("reclaimed", 0) == 0
            held.release()
            await settles_empty(client, name)
    finally:
        other.close()


async def test_a_max_stall_shorter_than_the_renewal_period_pauses_no_healthy_loop(
    client: redis.asyncio.Redis, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    # What counts is how long a beat waits in the loop, not the time between two beats.
    lease = 1.5
    async with make_gate(client, name, 1, 0, lease_ttl=lease, max_stall=lease / 10) as gate:
        held = await gate.try_admit()
        for _ in range(3):
            await _renewed(client, name, str(held.id), 5 * lease)
        assert [r for r in caplog.records if getattr(r, "event", None) == "renewals_paused"] == []
        assert held.lease_lost is False
        held.release()
        await settles_empty(client, name)


async def _attempts(other: OtherProcess, seconds: float) -> tuple[int, int]:
    """Ask for the slot every 50 ms for ``seconds``: (admitted, refused)."""
    loop = asyncio.get_running_loop()
    stop = loop.time() + seconds
    admitted = refused = 0
    while loop.time() < stop:
        try:
            (await other.gate.try_admit()).release()
            admitted += 1
        except QueueFull:
            refused += 1
        await asyncio.sleep(0.05)
    return admitted, refused


async def test_a_loop_stuck_past_max_stall_lets_its_leases_lapse_says_so_and_finds_out_after(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The thread stops renewing at most a period + max_stall into the stall (a beat is posted
    # within a period of its start, and waits); the lease lapses lease_ttl after the last
    # renewal. The stall lasts twice that: another process gets the slot meanwhile.
    lease, max_stall = 0.6, 0.6
    stall = 2 * (max_stall + lease / 3 + lease)
    other = OtherProcess(redis_server.url, name, 1, 0, lease_ttl=lease, poll_interval=0.05)
    try:
        async with make_gate(client, name, 1, 0, lease_ttl=lease, max_stall=max_stall) as gate:
            permit = await gate.try_admit()
            taker = other.submit(other.take_when_free())
            time.sleep(stall)
            theirs = await taker
            await wait_until(lambda: _lost(permit), 10 * lease, "the lost lease reported")
            events = [getattr(r, "event", None) for r in caplog.records if r.name == "boundedgate"]
            assert events[:2] == ["renewals_paused", "renewals_resumed"]
            assert "lease_lost" in events
            assert gate.stats().lease_lost == 1
            permit.release()
            other.release(theirs)
            await settles_empty(client, name)
    finally:
        other.close()


async def test_the_renewal_thread_runs_while_the_gate_holds_and_ends_with_the_gate(
    client: redis.asyncio.Redis, name: str
) -> None:
    lease = 0.3
    assert _renewal_threads() == []
    async with make_gate(client, name, 2, 0, lease_ttl=lease) as gate:
        permit = await gate.try_admit()
        assert [t.name for t in _renewal_threads()] == [f"boundedgate-renewals:{name}"]
        permit.release()
        # Idle for a few periods, it ends by itself; a new holder starts it again.
        await wait_until(_no_renewal_thread, 30 * lease, "the idle renewal thread ended")
        again = await gate.try_admit()
        assert len(_renewal_threads()) == 1
        await _renewed(client, name, str(again.id), 10 * lease)
    assert _renewal_threads() == []  # aclose() ended it, holder or not
    assert again.lease_lost is False
    again.release()
    await settles_empty(client, name)


def test_the_renewal_thread_s_client_keeps_the_user_s_tls_and_credentials() -> None:
    user = redis.asyncio.Redis(
        host="redis.example", port=6380, ssl=True, username="gate", password="secret", decode_responses=True
    )
    make = copier(user)
    assert make is not None
    own, _ = make()
    pool = own.connection_pool
    assert pool is not user.connection_pool
    assert pool.connection_class is redis.asyncio.SSLConnection
    kwargs = pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["username"], kwargs["password"]) == (
        "redis.example",
        6380,
        "gate",
        "secret",
    )
    assert kwargs["decode_responses"] is True


def test_the_renewal_thread_s_cluster_client_keeps_the_startup_nodes_tls_and_credentials() -> None:
    user = redis.asyncio.cluster.RedisCluster(
        host="node.example", port=7000, ssl=True, username="gate", password="secret"
    )
    make = copier(user)
    assert make is not None
    own, _ = make()
    assert isinstance(own, redis.asyncio.cluster.RedisCluster)
    assert own is not user
    startup = getattr(own, "startup_nodes", None) or own.nodes_manager.startup_nodes.values()  # redis-py 5.0
    assert [(n.host, n.port) for n in startup] == [("node.example", 7000)]
    kwargs = own.connection_kwargs
    assert kwargs["connection_class"] is redis.asyncio.SSLConnection
    assert (kwargs["username"], kwargs["password"]) == ("gate", "secret")


def test_a_client_whose_pool_asks_the_user_s_objects_is_renewed_on_the_loop() -> None:
    # A Sentinel-managed pool asks the user's pool (bound to the user's loop) where the master
    # is: the thread cannot share it, so that client's leases are renewed on the loop.
    sentinel = redis.asyncio.Sentinel([("sentinel.example", 26379)])
    assert copier(sentinel.master_for("mymaster")) is None


def test_the_renewal_thread_of_a_gate_never_closed_ends_with_its_event_loop(
    redis_server: RedisServer, name: str
) -> None:
    lease = 0.3
    loop = asyncio.new_event_loop()
    client = redis.asyncio.Redis.from_url(redis_server.url)
    gate = make_gate(client, name, 1, 0, lease_ttl=lease, max_stall=lease)
    permit = loop.run_until_complete(gate.try_admit())
    assert len(_renewal_threads()) == 1
    loop.run_until_complete(client.aclose())
    time.sleep(2 * lease)  # the loop runs no more: the thread takes it for stuck, and waits
    loop.close()  # the gate was never closed, its permit never released
    give_up = time.monotonic() + 10 * lease
    while _renewal_threads():
        assert time.monotonic() < give_up, "the renewal thread outlived its event loop"
        time.sleep(0.01)
    with pytest.warns(ResourceWarning, match="its event loop is closed: its lease lapses"):
        del permit
        gc.collect()


async def test_an_idle_renewal_thread_ends_unless_a_lease_arrived_meanwhile() -> None:
    # The loop adds a lease, then starts a thread only if it sees none: the thread that is
    # ending must see that lease, and stay (the loop saw it still running), or end (the loop saw
    # none, and started another).
    gate = make_gate(redis.asyncio.Redis(), "handshake", 1, 0)
    side = gate._side
    side.bind()
    renewer = Renewer(side, asyncio.get_running_loop(), _no_client)
    me = threading.current_thread()
    renewer._thread = me
    assert renewer._end_if_idle() is True  # nothing to renew: it ends
    assert _renewing(renewer) is None
    renewer._thread = me
    side.leases["handshake#1"] = 1  # added while it was ending, and the loop saw it running
    assert renewer._end_if_idle() is False
    assert _renewing(renewer) is me
    await gate.aclose()


def _renewing(renewer: Renewer) -> threading.Thread | None:
    return renewer._thread


def _no_client() -> tuple[Any, Callable[[], Coroutine[Any, Any, None]]]:
    raise AssertionError("no thread starts here")
