"""Several OS processes share one RedisGate: the limit, the order and the leases hold across them."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis.asyncio

from .helpers import cluster, make_gate, settles_empty, wait_until
from .servers import RedisServer, die_with_parent, worker_command
from .worker import grants_key, witness_keys

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]


@contextmanager
def workers(*commands: list[str]) -> Iterator[list[subprocess.Popen[str]]]:
    """Start worker processes; kill (by PID) any still running at the end."""
    processes = [
        subprocess.Popen(c, stdout=subprocess.PIPE, text=True, preexec_fn=die_with_parent)  # noqa: PLW1509
        for c in commands
    ]
    try:
        yield processes
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()


def worker(mode: str, server: RedisServer, name: str, c: int, q: int, *options: str) -> list[str]:
    return worker_command(mode, "--url", server.url, "--name", name, "--c", str(c), "--q", str(q), *options)


async def read_line(process: subprocess.Popen[str], within: float = 30) -> str:
    line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), within)  # type: ignore[union-attr]
    return str(line.strip())


async def test_processes_contending_never_exceed_c_running_nor_q_waiting(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> None:
    c, q = 3, 4
    commands = [
        worker("contend", redis_server, name, c, q, "--tasks", "12", "--index", str(i)) for i in range(4)
    ]
    seen_running = seen_waiting = 0
    with workers(*commands) as processes:
        while any(p.poll() is None for p in processes):  # sample the gate independently meanwhile
            view = await cluster(client, name)
            seen_running = max(seen_running, view.running)
            seen_waiting = max(seen_waiting, view.waiting)
            await asyncio.sleep(0.005)
        outcomes = [json.loads(p.stdout.read()) for p in processes]  # type: ignore[union-attr]
        assert [p.returncode for p in processes] == [0, 0, 0, 0]
    now_key, max_key, bodies_key, _ = witness_keys(name)
    witness_max = int(await client.get(max_key))  # type: ignore[arg-type]  # a counter, set
    bodies = int(await client.get(bodies_key))  # type: ignore[arg-type]
    completed = sum(o.get("completed", 0) for o in outcomes)
    assert 1 <= witness_max <= c
    assert seen_running <= c
    assert seen_waiting <= q
    assert bodies == completed
    assert int(await client.get(now_key)) == 0  # type: ignore[arg-type]
    assert sum(sum(o.values()) for o in outcomes) == 48
    view = await settles_empty(client, name)
    assert view.counters["admitted"] == view.counters["completed"] == completed
    assert view.counters["peak_running"] <= c
    assert view.counters["peak_waiting"] <= q


async def test_waiters_from_different_processes_are_served_in_order_of_arrival_at_redis(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> None:
    async with make_gate(client, name, 1, 10) as gate:
        holder = await gate.try_admit()
        commands = [worker("fifo", redis_server, name, 1, 10, "--index", str(i)) for i in range(5)]
        with workers(*commands) as processes:
            await wait_until(lambda: _waiting(client, name, 5), 30, "5 processes waiting")
            holder.release()
            await wait_until(lambda: _all_exited(processes), 30, "the workers done")
            assert [p.returncode for p in processes] == [0] * 5
        order = [int(x) for x in await client.lrange(witness_keys(name)[3], 0, -1)]
        assert order == [0, 1, 2, 3, 4]
        await settles_empty(client, name)


async def _waiting(client: redis.asyncio.Redis, name: str, n: int) -> bool:
    return (await cluster(client, name)).waiting == n


async def _all_exited(processes: list[subprocess.Popen[str]]) -> bool:
    return all(p.poll() is not None for p in processes)


async def test_a_killed_holders_slots_come_back_within_the_lease(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> None:
    # Two waiters, one per slot: the holder's two leases were renewed apart, so they lapse apart,
    # and each comes back at the first poll after its own lapse.
    lease = 1.0
    command = worker("hold", redis_server, name, 2, 2, "--n", "2", "--lease", str(lease))
    with workers(command) as (holder,):
        assert (await read_line(holder)).startswith("held")
        async with make_gate(client, name, 2, 2, lease_ttl=lease, poll_interval=0.1) as gate:
            waiters = [asyncio.create_task(gate.admit(timeout=20).__aenter__()) for _ in range(2)]
            try:
                await wait_until(lambda: _waiting(client, name, 2), 10, "2 waiting")
                holder.send_signal(signal.SIGKILL)
                killed = time.monotonic()
                await asyncio.wait(waiters)
                # The last renewal was at most lease/3 before the kill; one poll later the slot is handed on.
                assert time.monotonic() - killed <= lease + 1.0
                permits = [w.result() for w in waiters]
                view = await cluster(client, name)
                assert view.counters["reclaimed"] == 2
                assert {h.id for h in view.holders} == {p.id for p in permits}
            finally:
                for waiter in waiters:
                    if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                        waiter.result().release()
                    else:
                        waiter.cancel()
            await settles_empty(client, name)


async def test_a_killed_waiters_place_is_freed_within_the_waiter_lease(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> None:
    waiter_ttl = 1.0
    async with make_gate(client, name, 1, 5, poll_interval=0.1, waiter_ttl=waiter_ttl) as gate:
        holder = await gate.try_admit()
        command = worker("wait", redis_server, name, 1, 5, "--waiter-ttl", str(waiter_ttl))
        with workers(command) as (doomed,):
            assert await read_line(doomed) == "queued"
            behind = asyncio.create_task(gate.admit(timeout=20).__aenter__())
            await wait_until(lambda: _waiting(client, name, 2), 10, "2 waiting")
            doomed.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            await wait_until(lambda: _waiting(client, name, 1), waiter_ttl + 2.0, "the dead waiter gone")
            assert time.monotonic() - killed <= waiter_ttl + 1.0
            assert (await cluster(client, name)).counters["lapsed"] == 1
            holder.release()
            permit = await asyncio.wait_for(behind, 5)  # the head's place no longer blocks it
            permit.release()
            await settles_empty(client, name)


async def test_three_processes_never_grant_more_tokens_in_any_window_than_the_bound(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> None:
    # One rate limit of 200 tokens a second and a burst of 50, shared by three processes of 30
    # requests of 1 to 20 tokens each (about 950 tokens: some 4.5 s of rate). docs/rate-limits.md's
    # bound, for the cluster (docs/cluster.md): over any window of w seconds, the tokens granted by
    # every process together come to at most rate * w + burst. Buckets per process would grant up
    # to three times that.
    rate, burst = 200.0, 50.0
    options = ("--rate", str(rate), "--burst", str(burst), "--tasks", "30", "--timeout", "60")
    commands = [worker("rated", redis_server, name, 1, 1, *options, "--index", str(i)) for i in range(3)]
    with workers(*commands) as processes:
        await wait_until(lambda: _all_exited(processes), 90, "the workers done")
        outcomes = [json.loads(p.stdout.read()) for p in processes]  # type: ignore[union-attr]
        assert [p.returncode for p in processes] == [0, 0, 0]
    assert outcomes == [{"completed": 30}] * 3
    grants = sorted(
        (int(at), int(cost)) for at, cost in (g.split() for g in await client.lrange(grants_key(name), 0, -1))
    )
    assert len(grants) == 90
    total = sum(cost for _, cost in grants)
    worst = 0.0  # the largest excess of a window's grants over rate * w + burst (<= 0: within it)
    for i, (start, _) in enumerate(grants):
        granted = 0
        for end, cost in grants[i:]:
            granted += cost
            worst = max(worst, granted - (rate * (end - start) / 1000 + burst))
    assert worst <= 1e-6, f"a window granted {worst} tokens beyond rate x w + burst"
    # The grants did press against the bound: the whole run took about its tokens' worth of rate.
    span = (grants[-1][0] - grants[0][0]) / 1000
    assert span < (total - burst) / rate + 2.0
    await settles_empty(client, name)
