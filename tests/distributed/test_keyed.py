"""RedisKeyedGate: a cluster gate per key, its objects in a process bounded by activity."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
import threading
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boundedgate import GateLimits, QueueFull, RateLimit, RateLimited, RequestRecord, Status
from boundedgate.redis import RedisGate, RedisGateStatistics, RedisKeyedGate, RedisPermit, _scripts
from boundedgate.redis._io import fields
from boundedgate.redis._layout import gate_keys

from .helpers import CALM, cluster, settles_empty, wait_until
from .keyed_worker import witness_keys
from .servers import RedisClusterServers, RedisServer
from .test_processes import workers

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]


def keyed(client: Any, name: str, c: int | None, q: int | None, **settings: Any) -> RedisKeyedGate:
    return RedisKeyedGate(client, max_running=c, max_waiting=q, name=name, **{**CALM, **settings})


def _renewal_threads(name: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(f"boundedgate-renewals:{name}")]


async def test_each_key_has_its_own_c_and_q_shared_by_every_process(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with keyed(client, name, 1, 1) as here, keyed(client, name, 1, 1) as there:
        async with here.admit("acme"):
            # Another process's object for the same key finds the key full; another key is free.
            with pytest.raises(QueueFull) as refused:
                await there.try_admit("acme")
            assert refused.value.gate == f"{name}/acme"
            async with there.admit("globex"):
                assert (await cluster(client, f"{name}/acme")).running == 1
                assert (await cluster(client, f"{name}/globex")).running == 1
            queued = asyncio.create_task(there.admit("acme", timeout=30).__aenter__())
            await wait_until(lambda: _waiting(client, f"{name}/acme", 1), 10, "one waiting")
            with pytest.raises(QueueFull):  # Q = 1 for the key, across both processes
                async with here.admit("acme"):
                    pass
        permit = await queued
        assert permit.status is Status.RUNNING
        await permit.__aexit__(None, None, None)
        await settles_empty(client, f"{name}/acme")


async def _waiting(client: redis.asyncio.Redis, name: str, n: int) -> bool:
    return (await cluster(client, name)).waiting == n


async def test_a_keys_gate_object_lives_while_it_is_in_use_here(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with keyed(client, name, 2, 0) as gates:
        permit = gates.admit("acme")
        assert "acme" not in gates  # made, held by its permit alone until it arrives
        async with permit:
            assert "acme" in gates
            assert list(gates) == ["acme"]
            gate = gates.get("acme")
            assert isinstance(gate, RedisGate)
            assert gate.name == f"{name}/acme"
            assert gates._gate_for("acme") is gate
            assert repr(gates) == f"<RedisKeyedGate {name!r} [here: keys 1 (0 idle), running 1, waiting 0]>"
        await asyncio.sleep(0)  # the ending is looked at one loop step later
        assert len(gates) == 0
        assert gates.get("acme") is None
        stats = gates.stats()
        assert (stats.keys, stats.busy_keys, stats.peak_keys, stats.created, stats.dropped) == (0, 0, 1, 1, 1)
        assert isinstance(stats.total, RedisGateStatistics)
        assert (stats.total.admitted, stats.total.completed) == (1, 1)


async def test_keep_idle_keeps_the_most_recently_idle_keys(client: redis.asyncio.Redis, name: str) -> None:
    async with keyed(client, name, 1, 0, keep_idle=2) as gates:
        for key in ("a", "b", "c"):
            async with gates.admit(key):
                pass
            await asyncio.sleep(0)
        assert list(gates) == ["b", "c"]
        stats = gates.stats()
        assert (stats.keys, stats.busy_keys, stats.dropped) == (2, 0, 1)
        assert stats.total.completed == 3  # the dropped key's counters live on
        gate = gates.get("b")
        async with gates.admit("b"):  # a kept key's object is used again
            assert gates.get("b") is gate
            assert gates.stats().busy_keys == 1


async def test_permits_taken_before_an_arrival_share_the_keys_gate_object(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with keyed(client, name, 1, 0) as gates:
        early = gates.admit("acme")  # held by its permit alone, not listed
        async with gates.admit("acme"):  # the same object: listed at its arrival
            assert gates.get("acme") is early.gate
        await asyncio.sleep(0)
        assert "acme" not in gates  # dropped, and still early's
        async with gates.admit("acme") as listed:
            assert listed.gate is early.gate
            with pytest.raises(QueueFull):
                async with early:
                    pass
        await asyncio.sleep(0)
        total = gates.stats().total
        assert (total.admitted, total.completed, total.rejected) == (2, 2, 1)
        stats = gates.stats()
        assert (stats.created, stats.dropped) == (2, 2)  # one object, given to the key twice


async def test_a_second_object_for_a_listed_key_counts_until_it_is_idle(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with keyed(client, name, 2, 0) as gates:
        async with gates.admit("acme") as first:
            other = gates._create("acme")  # as one dropped and replaced meanwhile would be
            async with other.admit() as second:  # the same cluster gate: C = 2 across both
                assert first.gate is not second.gate
                assert gates._strays == {other}
                assert gates.running == 2
                with pytest.raises(QueueFull):
                    await gates.try_admit("acme")
            await asyncio.sleep(0)
            assert not gates._strays
        await asyncio.sleep(0)
        assert len(gates) == 0
        total = gates.stats().total
        assert (total.admitted, total.completed, total.rejected) == (2, 2, 1)


async def test_many_busy_keys_share_one_renewal_thread(client: redis.asyncio.Redis, name: str) -> None:
    lease = 0.6  # renewed every 0.2 s: the leases must live on past several lease_ttl
    async with keyed(client, name, 1, 0, lease_ttl=lease) as gates:
        permits = [await gates.try_admit(f"k{i}") for i in range(20)]
        assert _renewal_threads(name) == [f"boundedgate-renewals:{name}"]
        await asyncio.sleep(4 * lease)
        for i in range(20):
            view = await cluster(client, f"{name}/k{i}")
            assert view.running == 1, f"k{i}'s lease lapsed"
        assert not any(p.lease_lost for p in permits)
        for permit in permits:
            permit.release()
        await settles_empty(client, f"{name}/k19")
    assert _renewal_threads(name) == []  # aclose ended it


async def test_set_limits_of_a_key_hold_for_every_process(client: redis.asyncio.Redis, name: str) -> None:
    async with keyed(client, name, 1, 0) as here, keyed(client, name, 1, 0) as there:
        await here.set_limits("acme", max_running=2)
        assert len(here) == 0  # nothing in use: no object left behind
        first = await there.try_admit("acme")
        second = await there.try_admit("acme")  # C = 2 for acme in Redis, whatever `there` was made with
        with pytest.raises(QueueFull):
            await there.try_admit("acme")
        async with there.admit("globex"):  # the other keys keep the template
            with pytest.raises(QueueFull):
                await here.try_admit("globex")
        first.release()
        second.release()
        assert (await there.cluster_stats("acme")).max_running == 2


async def test_overrides_give_a_key_its_own_limits(client: redis.asyncio.Redis, name: str) -> None:
    overrides = {"big": GateLimits(3, 0)}
    async with keyed(client, name, 1, 0, overrides=overrides) as gates:
        assert gates.limits("big") == (3, 0)
        assert gates.limits("small") == (1, 0)
        held = [await gates.try_admit("big") for _ in range(3)]
        with pytest.raises(QueueFull):
            await gates.try_admit("big")
        assert gates.stats().total.max_running == 3
        for permit in held:
            permit.release()


async def test_each_key_has_buckets_of_its_own(client: redis.asyncio.Redis, name: str) -> None:
    limit = RateLimit(1, 2, name="rpm")  # 2 at once, then one a second
    async with keyed(client, name, None, 5, rate_limits=[limit]) as gates:
        for _ in range(2):
            async with gates.admit("acme"):
                pass
        with pytest.raises(RateLimited):  # its next token comes later than its deadline
            async with gates.admit("acme", timeout=0.3):
                pass
        async with gates.admit("globex"):  # another key's bucket is full
            pass
        assert gates.sync_rate_limits("globex", {"rpm": 0}) == 1
        await wait_until(lambda: _empty_bucket(gates, "globex"), 10, "globex's bucket lowered")


async def _empty_bucket(gates: RedisKeyedGate, key: str) -> bool:
    return (await gates.cluster_stats(key)).tokens["rpm"] < 1


async def test_signals_pause_one_key_and_cut_its_c(client: redis.asyncio.Redis, name: str) -> None:
    from boundedgate import Adaptive

    async with keyed(client, name, 4, 0, adaptive=Adaptive(floor=1, window=30.0)) as gates:
        await gates.signal("acme", "rate_limited", retry_after=30)
        with pytest.raises(QueueFull):  # paused, cluster-wide, for that key alone
            await gates.try_admit("acme")
        async with gates.admit("globex"):
            assert gates.controller("globex") is not None
        await gates.signal("initech", "overloaded")
        assert (await gates.cluster_stats("initech")).max_running == 3  # 4 x the default decrease
        with pytest.raises(ValueError, match="unknown signal"):
            await gates.signal("initech", "nonsense")


async def test_keys_and_arguments_it_cannot_take_are_refused_with_the_way_out(
    client: redis.asyncio.Redis, name: str
) -> None:
    gates = keyed(client, name, 1, 0)
    with pytest.raises(TypeError, match=r"keys are str .*pass str\(key\)"):
        gates.admit(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"keys are str"):
        gates.admit(("a", 1))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"RedisKeyedGate.admit\(\) takes no priority=.*FIFO"):
        gates.admit("a", priority=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"RedisKeyedGate\(\) takes no priorities="):
        RedisKeyedGate(client, max_running=1, max_waiting=0, priorities=2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"RedisKeyedGate\(\) takes no by_deadline=.*arrival order"):
        RedisKeyedGate(client, max_running=1, max_waiting=0, by_deadline=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_running"):
        RedisKeyedGate(client, max_running=0, max_waiting=0)
    with pytest.raises(TypeError, match="overrides"):
        RedisKeyedGate(client, max_running=1, max_waiting=0, overrides=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="keys are str"):
        RedisKeyedGate(client, max_running=1, max_waiting=0, overrides={1: (1, 0)})  # type: ignore[dict-item]
    await gates.aclose()


async def test_observers_hear_every_key(client: redis.asyncio.Redis, name: str) -> None:
    records: list[RequestRecord] = []
    async with keyed(client, name, 1, 0) as gates:
        gates.observe(records.append)
        async with gates.admit("a"):
            pass
        async with gates.admit("b"):
            pass
        gates.unobserve(records.append)
        async with gates.admit("c"):
            pass
    assert [r.gate for r in records] == [f"{name}/a", f"{name}/b"]


async def test_keys_spread_over_the_slots_of_a_cluster(
    cluster_client: redis.asyncio.RedisCluster, name: str
) -> None:
    async with keyed(cluster_client, name, 1, 1) as gates:
        keys = [f"tenant-{i}" for i in range(12)]
        held = [await gates.try_admit(key) for key in keys]
        with pytest.raises(QueueFull):
            await gates.try_admit(keys[0])
        nodes = set()
        for key in keys:
            meta = f"boundedgate:{{{name}/{key}}}:meta"
            slot = await cluster_client.cluster_keyslot(meta)
            nodes.add(cluster_client.nodes_manager.get_node_from_slot(slot).name)
            assert (await gates.cluster_stats(key)).running == 1
        assert len(nodes) == 3  # a dozen tenants land on all three primaries
        for permit in held:
            permit.release()


#: Keys admitted and released through the keyed gate's own calls (the rest are pipelined).
_THROUGH_THE_API = 10_000
_KEYS = 100_000
#: What a key's state may take in Redis once its key is idle (measured: under 1 kB, see docs).
_BYTES_PER_IDLE_KEY = 2048


async def test_a_hundred_thousand_keys_take_bounded_memory_and_leave_nothing_after_idle_ttl(
    own_server: RedisServer,
) -> None:
    client = redis.asyncio.Redis.from_url(own_server.url, max_connections=64)
    idle_ttl = 5.0
    gates = keyed(client, "mem", 2, 2, idle_ttl=idle_ttl, lease_ttl=1.0, waiter_ttl=1.0)
    try:
        before = (await client.info("memory"))["used_memory"]
        keys = iter(range(_THROUGH_THE_API))

        async def through_the_api() -> None:
            for i in keys:
                async with gates.admit(f"tenant-{i}"):
                    pass

        await asyncio.gather(*(through_the_api() for _ in range(50)))
        assert len(gates) == 0  # no key's object is left in this process
        stats = gates.stats()
        assert (stats.created, stats.dropped, stats.total.completed) == (_THROUGH_THE_API,) * 3
        # The rest as a key's gate object sends them (its scripts, head and arguments), pipelined.
        side = gates._gate_for("tenant-0")._side
        for start in range(_THROUGH_THE_API, _KEYS, 5000):
            async with client.pipeline(transaction=False) as pipe:
                for i in range(start, min(start + 5000, _KEYS)):
                    head = _scripts.encode_head(gate_keys(f"mem/tenant-{i}"), side.common)
                    permit_id = side.new_id()
                    pipe.execute_command("FCALL", _scripts.ADMIT.function, *head, permit_id, -1, 1, "0.0")
                    pipe.execute_command("FCALL", _scripts.RELEASE.function, *head, permit_id, "completed")
                replies = await pipe.execute()
            assert all(int(fields(reply)[0]) == 1 for reply in replies[0::2]), "an admission was refused"
        # What an idle key takes: its keys' own memory, for the last keys used (none expired yet).
        sample = [f"mem/tenant-{i}" for i in range(_KEYS - 100, _KEYS)]
        sizes = [await _key_memory(client, key) for key in sample]
        per_key = sum(sizes) / len(sizes)
        used = (await client.info("memory"))["used_memory"] - before
        print(f"an idle key: {per_key:.0f} bytes in Redis; {_KEYS} keys: {used} bytes at most")
        assert 256 < per_key < _BYTES_PER_IDLE_KEY  # meta, seq, stats, outcomes: about 500 bytes
        assert used < _KEYS * _BYTES_PER_IDLE_KEY
        assert await client.dbsize() <= 4 * _KEYS  # meta, seq, stats and recent outcomes
        # idle_ttl after its last use, nothing of any key remains (Redis expires them as it goes).
        await wait_until(_emptied(client), idle_ttl + 30, "every key expired")
    finally:
        await gates.aclose()
        await client.aclose()


async def _key_memory(client: redis.asyncio.Redis, name: str) -> int:
    """The bytes the keys of cluster gate ``name`` take in Redis (``MEMORY USAGE``, summed)."""
    sizes = [await client.memory_usage(key) for key in gate_keys(name)]
    return sum(size or 0 for size in sizes)


def _emptied(client: redis.asyncio.Redis) -> Callable[[], Awaitable[bool]]:
    async def empty() -> bool:
        return await client.dbsize() == 0

    return empty


@pytest.mark.engines("redis", "valkey")
async def test_three_processes_hold_each_keys_c_and_q(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> None:
    await _three_processes_hold_each_keys_c_and_q(client, [redis_server.url], name)


@pytest.mark.engines
async def test_three_processes_hold_each_keys_c_and_q_on_a_cluster(
    cluster_client: redis.asyncio.RedisCluster, redis_cluster: RedisClusterServers, name: str
) -> None:
    # The keys' gates and witnesses are spread over the cluster's three primaries.
    await _three_processes_hold_each_keys_c_and_q(cluster_client, [redis_cluster.url, "--cluster"], name)


async def _three_processes_hold_each_keys_c_and_q(client: Any, server: list[str], name: str) -> None:
    c, q, keys = 2, 2, 3
    script = str(Path(__file__).with_name("keyed_worker.py"))
    common = ["--url", *server, "--name", name, "--c", str(c), "--q", str(q), "--keys", str(keys)]
    commands = [[sys.executable, script, *common, "--tasks", "30", "--index", str(i)] for i in range(3)]
    limits = {"k0": 1, "k1": c, "k2": c}  # k0's override: C = 1 in every process
    seen = dict.fromkeys(limits, (0, 0))
    with workers(*commands) as processes:
        while any(p.poll() is None for p in processes):  # sample every key's gate meanwhile
            for key in limits:
                view = await cluster(client, f"{name}/{key}")
                running, waiting = seen[key]
                seen[key] = (max(running, view.running), max(waiting, view.waiting))
            await asyncio.sleep(0.005)
        outcomes = [json.loads(p.stdout.read()) for p in processes]  # type: ignore[union-attr]
        assert [p.returncode for p in processes] == [0, 0, 0]
    assert sum(sum(o.values()) for o in outcomes) == 90
    assert sum(o.get("completed", 0) for o in outcomes) > 0
    witnessed = {}
    for key, limit in limits.items():
        now_key, max_key = witness_keys(name, key)
        witnessed[key] = int(await client.get(max_key) or 0)
        assert witnessed[key] <= limit, f"{key}: {witnessed[key]} bodies ran at once, C is {limit}"
        assert seen[key][0] <= limit
        assert seen[key][1] <= q
        view = await settles_empty(client, f"{name}/{key}")
        assert view.counters["peak_running"] <= limit
        assert view.counters["peak_waiting"] <= q
        assert int(await client.get(now_key) or 0) == 0
    assert witnessed == limits  # the processes contended: every key ran at its C


async def test_follow_provider_tells_the_key_its_request_went_through(
    client: redis.asyncio.Redis, name: str
) -> None:
    from boundedgate import Adaptive
    from boundedgate.httpx import ProviderSignal, Quota, follow_provider

    limit = RateLimit.per_minute(100, name="requests")
    async with keyed(client, name, 4, 0, rate_limits=[limit], adaptive=Adaptive(window=30.0)) as gates:
        follow = follow_provider(gates)
        at = asyncio.get_running_loop().time()
        follow(ProviderSignal("rate_limited", 429, 30.0, (), "api", at, key="acme"))
        follow(ProviderSignal("overloaded", 529, None, (), "api", at, key="globex"))
        follow(
            ProviderSignal("quota", 200, None, (Quota("requests", 100, 3, None),), "api", at, key="initech")
        )
        follow(ProviderSignal("overloaded", 529, None, (), "api", at))  # no key: left alone

        async def told() -> bool:
            acme, globex, initech = [await gates.cluster_stats(k) for k in ("acme", "globex", "initech")]
            return (
                acme.counters.get("pauses") == 1
                and globex.max_running == 3
                and initech.tokens["requests"] < 4
            )

        await wait_until(told, 10, "every key told")
        with pytest.raises(QueueFull):  # acme is paused, cluster-wide
            await gates.try_admit("acme")
        async with gates.admit("umbrella"):  # the others are not
            pass


def test_the_docs_example_runs_and_prints_what_it_says(
    redis_server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "cluster.md").read_text(encoding="utf-8")
    section = page.split("## Keys across the cluster", 1)[1]
    block = re.search(r"```py\n(.*?)```", section, flags=re.DOTALL)
    assert block is not None
    source = block.group(1).replace("redis://localhost:6379/0", redis_server.url)
    exec(compile(source, "docs/cluster.md", "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out.splitlines() == ["True False", "0 2"]


_OPS = st.lists(st.tuples(st.sampled_from(["hold", "queue", "free"]), st.sampled_from("abcd")), max_size=16)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS, keep_idle=st.integers(0, 2))
def test_the_objects_alive_are_the_keys_in_use_and_keep_idle(
    redis_server: RedisServer, ops: list[tuple[str, str]], keep_idle: int
) -> None:
    # Whatever the order of holds, queued arrivals and releases over a few keys: every key in use
    # here has its listed object, the objects alive are at most the keys in use plus keep_idle,
    # and once all is given back no key is busy here or in Redis, and every start completed.
    runner = asyncio.Runner()
    try:
        runner.run(_play(redis_server.url, ops, keep_idle))
    finally:
        runner.close()


async def _play(url: str, ops: list[tuple[str, str]], keep_idle: int) -> None:
    client = redis.asyncio.Redis.from_url(url)
    name = f"prop-{uuid.uuid4().hex[:12]}"
    gates = keyed(client, name, 2, 1, keep_idle=keep_idle)
    held: list[RedisPermit] = []
    queued: list[tuple[RedisPermit, asyncio.Task[RedisPermit]]] = []
    try:
        for op, key in ops:
            if op == "hold":
                with contextlib.suppress(QueueFull):
                    held.append(await gates.try_admit(key))
            elif op == "queue":
                permit = gates.admit(key, timeout=30)
                queued.append((permit, asyncio.create_task(permit.__aenter__())))
            elif held:
                await held.pop(0).__aexit__(None, None, None)
            await asyncio.sleep(0.02)  # arrivals reach Redis, grants their waiters, endings their check
            # Arrived (or on its way to Redis) and not ended: running, queued or being decided.
            in_use = [p for p in held + [p for p, _ in queued] if p.arrival is not None and p.ended is None]
            busy = {p.gate.name.rsplit("/", 1)[1] for p in in_use}
            assert busy <= set(gates)
            assert all(gates.get(k) is p.gate for p in in_use for k in [p.gate.name.rsplit("/", 1)[1]])
            # Beside the keys in use: the idle ones kept, and those whose release is still on its way.
            idle = [k for k in gates if k not in busy and not _in_flight(gates, k)]
            assert len(idle) <= keep_idle
        for permit in held:
            await permit.__aexit__(None, None, None)
        for permit, task in queued:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, QueueFull):
                await task
            if permit.status is Status.RUNNING:
                permit.release()
        for key in "abcd":
            await settles_empty(client, f"{name}/{key}")
        await asyncio.sleep(0.02)
        assert len(gates) <= keep_idle
        assert gates.stats().busy_keys == 0
        assert not gates._strays
        stats = gates.stats()
        assert stats.total.admitted == stats.total.completed
        assert stats.created >= stats.dropped + stats.keys
    finally:
        for _, task in queued:  # an example that failed midway leaves none waiting
            task.cancel()
        await asyncio.gather(*(task for _, task in queued), return_exceptions=True)
        await gates.aclose()
        await client.aclose()


def _in_flight(gates: RedisKeyedGate, key: str) -> bool:
    """Whether ``key``'s object here has a release or a cancellation on its way to Redis."""
    gate = gates.get(key)
    return gate is not None and bool(gate._side.tasks)


async def test_a_gated_transport_admits_each_request_through_its_tenants_key(
    client: redis.asyncio.Redis, name: str
) -> None:
    import httpx

    from boundedgate.httpx import GatedTransport, follow_provider

    async def answered(request: httpx.Request) -> httpx.Response:
        tenant = request.headers["x-tenant"]
        view = await gates.cluster_stats(tenant)  # the request holds its tenant's slot meanwhile
        return httpx.Response(
            429 if tenant == "acme" else 200, headers={"retry-after": "30"}, text=str(view.running)
        )

    async with keyed(client, name, 1, 0) as gates:
        transport = GatedTransport(
            gates,
            httpx.MockTransport(answered),
            key=lambda request: request.headers["x-tenant"],
            on_provider_signal=follow_provider(gates),
        )
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
            reply = await http.get("/", headers={"x-tenant": "globex"})
            assert (reply.status_code, reply.text) == (200, "1")
            assert (await http.get("/", headers={"x-tenant": "acme"})).status_code == 429

            async def paused() -> bool:
                return (await gates.cluster_stats("acme")).counters.get("pauses") == 1

            await wait_until(paused, 10, "acme paused by its 429")
        total = gates.stats().total
        assert (total.completed, total.failed) == (1, 1)  # the 429 failed its call
