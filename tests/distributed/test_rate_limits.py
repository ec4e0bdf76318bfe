"""Rate limits on the cluster gate: the in-process rules, on buckets kept in a real Redis.

Times here are real (the buckets run on the Redis server's clock), so every bound below leaves
room for a loaded machine, and none is one a wrong design could meet: a rate that was not shared
would admit twice, a head that did not block would let the small requests pass it.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio

from boundedgate import BoundedGate, QueueExpired, RateLimit, RateLimited, RequestRecord, Status
from boundedgate.redis import RedisGate, format_cluster, read_cluster

from .helpers import CALM, cluster, wait_until
from .servers import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False), pytest.mark.engines]

#: How late a start may be observed on this shared machine (a grant is told by a reply, a
#: message or a sync at the moment the tokens come).
SLACK = 0.4


def inspect_json(server: RedisServer, name: str) -> str:
    command = [sys.executable, "-m", "boundedgate.redis", "inspect", name, "--url", server.url, "--json"]
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=60).stdout


def rated(client: redis.asyncio.Redis, name: str, *limits: RateLimit, c: int | None = None) -> RedisGate:
    return RedisGate(
        client,
        max_running=c,
        max_waiting=None,
        name=name,
        rate_limits=limits,
        **CALM,  # type: ignore[arg-type]
    )


async def test_tokens_that_cannot_come_in_time_are_refused_at_arrival_with_an_exact_retry_after(
    client: redis.asyncio.Redis, name: str
) -> None:
    # docs/rate-limits.md's example on the cluster, at half its pace so that the last start has
    # a loaded machine's slack before its queue budget ends: 10 tokens a second, a burst of 10,
    # 20 requests of 10 tokens each willing to queue 2.9 s: the first 3 start at 0, 1 and 2 s,
    # and the others, whose tokens would come at 3 s or later, are refused at once.
    tps = RateLimit.per_second(10, burst=10, unit="tokens", name="tps")
    async with rated(client, name, tps) as gate:
        loop = asyncio.get_running_loop()
        begun = loop.time()
        starts: list[float] = []
        refusals: list[RateLimited] = []

        async def call() -> None:
            try:
                async with gate.admit(cost=10, max_wait=2.9):
                    starts.append(loop.time() - begun)
            except RateLimited as refused:
                refusals.append(refused)
                assert loop.time() - begun < SLACK  # at once: one round trip, never a wait

        await asyncio.gather(*(call() for _ in range(20)))
        assert len(starts) == 3
        for start, due in zip(sorted(starts), (0.0, 1.0, 2.0), strict=True):
            assert due <= start + 0.01
            assert start < due + 2 * SLACK
        assert len(refusals) == 17
        for refused in refusals:
            assert refused.limit == "tps"
            assert refused.code == "rate_limited"
            assert 3.0 - SLACK < refused.retry_after <= 3.0 + 1e-6
        stats = gate.stats()
        assert (stats.admitted, stats.rate_limited, stats.expired) == (3, 17, 0)
        assert (await cluster(client, name)).counters["rate_limited"] == 17


async def test_the_buckets_are_shared_by_every_process(client: redis.asyncio.Redis, name: str) -> None:
    # Two gate objects stand for two processes (each has its own agent): what one takes, the other
    # does not get. 3 requests per minute, none refilling within the test.
    rpm = RateLimit.per_minute(3, name="rpm")
    async with rated(client, name, rpm, c=10) as one, rated(client, name, rpm, c=10) as other:
        for gate in (one, other, one):
            async with gate.admit():
                pass
        with pytest.raises(RateLimited) as refused:
            await other.try_admit()
        assert refused.value.limit == "rpm"
        assert 19 < refused.value.retry_after <= 20  # one request every 20 s
        assert other.stats().rate_limited == 1


async def test_a_head_waiting_for_its_tokens_keeps_the_small_requests_behind_it_waiting(
    client: redis.asyncio.Redis, name: str
) -> None:
    tps = RateLimit.per_second(10, burst=10, unit="tokens", name="tps")
    async with rated(client, name, tps) as gate:
        loop = asyncio.get_running_loop()
        order: list[str] = []
        async with gate.admit(cost=8):  # 2 left
            pass

        async def call(label: str, cost: float) -> None:
            async with gate.admit(cost=cost, timeout=10):
                order.append(label)

        big = asyncio.create_task(call("big", 10))  # due in 0.8 s
        await asyncio.sleep(0.05)
        begun = loop.time()
        await asyncio.gather(big, call("small", 1))  # 1 token is there now, but the big one is ahead
        assert order == ["big", "small"]
        assert loop.time() - begun >= 0.05  # the small one waited behind it


async def test_a_refund_starts_the_head_and_a_charge_is_a_debt_others_wait_out(
    client: redis.asyncio.Redis, name: str
) -> None:
    # 1 token a second: whatever is refunded or charged moves the next start by that many seconds.
    tps = RateLimit.per_second(1, burst=10, unit="tokens", name="tps")
    async with rated(client, name, tps) as gate, rated(client, name, tps) as other:
        loop = asyncio.get_running_loop()
        async with gate.admit(cost=10) as first:  # the bucket is empty
            waiting = asyncio.create_task(other.admit(cost=5, timeout=30).__aenter__())
            await asyncio.sleep(0.2)
            assert not waiting.done()
            begun = loop.time()
            first.settle(4)  # 6 come back: the head's 5 are there now
            permit = await waiting
            assert loop.time() - begun < SLACK
            assert first.cost == 4
        await permit.__aexit__(None, None, None)
        assert permit.status is Status.COMPLETED
        async with gate.admit(cost=0) as free:
            free.settle(20)  # a debt: the balance goes to its floor, -10
        await gate.aclose()  # the settle has landed
        with pytest.raises(RateLimited) as refused:
            await other.try_admit(cost=1)
        assert refused.value.retry_after > 10  # from below zero: more than ten seconds to the first token


async def test_the_providers_remaining_quota_lowers_the_clusters_balance(
    client: redis.asyncio.Redis, name: str
) -> None:
    tpm = RateLimit.per_minute(6000, unit="tokens", name="tpm")
    rpm = RateLimit.per_minute(60, name="rpm")
    async with rated(client, name, rpm, tpm, c=5) as gate, rated(client, name, rpm, tpm, c=5) as other:
        assert gate.sync_rate_limits({"tokens": 100, "unknown": 3}) == 1  # names the tpm bucket only
        assert gate.sync_rate_limits({"requests": 100}) == 1  # holds 60: not raised
        await gate.aclose()  # the change has landed
        with pytest.raises(RateLimited) as refused:
            await other.try_admit(cost=200)
        assert refused.value.limit == "tpm"
        assert 0.9 < refused.value.retry_after <= 1.0  # 100 more tokens: one second at 100 a second
        async with other.admit(cost=100):
            pass


async def test_a_pure_rate_limiter_has_no_limit_on_running(client: redis.asyncio.Redis, name: str) -> None:
    rps = RateLimit.per_second(1, burst=3, name="rps")
    async with rated(client, name, rps) as gate:
        assert gate.max_running is None
        permits = [await gate.try_admit() for _ in range(3)]
        assert [p.status for p in permits] == [Status.RUNNING] * 3
        with pytest.raises(RateLimited):
            await gate.try_admit()
        for permit in permits:
            permit.release()


async def test_a_grant_never_used_gives_its_tokens_back(client: redis.asyncio.Redis, name: str) -> None:
    tpm = RateLimit.per_minute(10, unit="tokens", name="tpm")
    async with rated(client, name, tpm, c=1) as gate:
        async with gate.admit(cost=0):
            waiter = asyncio.create_task(gate.admit(cost=10, timeout=0.3).__aenter__())
            with pytest.raises(QueueExpired):
                await waiter  # it never started: its tokens were never taken
        started = time.monotonic()
        async with gate.admit(cost=10, max_wait=0.5):
            assert time.monotonic() - started < SLACK


async def test_a_stream_takes_its_cost_and_settles_its_usage(client: redis.asyncio.Redis, name: str) -> None:
    tpm = RateLimit.per_minute(100, unit="tokens", name="tpm")

    async def chunks() -> AsyncIterator[str]:
        yield "a"

    async def opened() -> AsyncIterator[str]:
        return chunks()

    async with rated(client, name, tpm, c=2) as gate:
        stream = await gate.stream(opened, cost=60)
        async for _ in stream:
            pass
        stream.permit.settle(10)
        await gate.aclose()
        async with gate.admit(cost=90, max_wait=0.5):  # 100 - 60 + 50 refunded
            pass


def test_the_docs_example_runs_and_prints_what_it_says(
    redis_server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "cluster.md").read_text(encoding="utf-8")
    section = page.split("## Rate limits across the cluster", 1)[1]
    block = re.search(r"```py\n(.*?)```", section, flags=re.DOTALL)
    assert block is not None
    source = block.group(1).replace("redis://localhost:6379/0", redis_server.url)
    exec(compile(source, "docs/cluster.md", "exec"), {"__name__": "__main__"})
    served, refused = capsys.readouterr().out.splitlines()
    assert served == "served"
    assert refused == "429 (tpm), retry after 20 s"


async def test_the_clusters_balances_are_the_in_process_gates_at_the_same_moments(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> None:
    # The same grants and settles through a cluster gate and an in-process one, side by side: the
    # balances read from Redis (on the server's clock of the read) are the in-process gate's, within
    # what the clocks drift apart over a few round trips (1 token a second, so SLACK tokens at most).
    limits = (
        RateLimit.per_minute(60, burst=10, name="rpm"),
        RateLimit.per_second(1, burst=100, unit="tokens", name="tps"),
    )
    local = BoundedGate(max_running=5, max_waiting=None, rate_limits=limits)
    async with rated(client, name, *limits, c=5) as gate, rated(client, name, *limits, c=5) as other:

        async def refunded() -> bool:  # each settle is sent by a task of its own, in no set order
            return (await read_cluster(client, name, limits)).tokens.get("tps", 0.0) > 80

        for g in (gate, local):
            async with g.admit(cost=30) as first:  # 30 taken, 20 given back
                first.settle(10)
            if g is gate:
                await wait_until(refunded, 5, "the refund given back")
            async with g.admit(cost=0) as free:  # a debt: 200 more, but never below the floor, -100
                free.settle(200)

        async def landed() -> bool:  # a settle is sent from a task of its own
            return (await read_cluster(client, name, limits)).tokens.get("tps", 0.0) < -50

        await wait_until(landed, 5, "the debt charged")
        for view in (await other.cluster_stats(), await read_cluster(client, name, limits)):
            expected = dict(zip(("rpm", "tps"), local.stats().tokens, strict=True))
            assert view.tokens.keys() == expected.keys()
            for limit, balance in view.tokens.items():
                assert abs(balance - expected[limit]) < SLACK, (limit, view.tokens, expected)
            assert view.tokens["tps"] < -90  # in debt near the floor, -100
            assert 8 <= view.tokens["rpm"] < 8 + SLACK  # 10 - 2 grants, and 1 a second since
            assert view.queued_cost == 0.0
        text = format_cluster(await other.cluster_stats())
        assert "rpm" in text
        assert "tps" in text
        unknown = await read_cluster(client, name)  # `inspect` without the limits: no balance guessed
        assert unknown.tokens == {}
        assert set(unknown.buckets_empty_in) == {"b1", "b2"}
        assert 95 < unknown.buckets_empty_in["b2"] <= 100  # the debt: empty for ~100 s more
        data = json.loads(await asyncio.to_thread(inspect_json, redis_server, name))
        assert data["tokens"] == {}
        assert set(data["buckets_empty_in"]) == {"b1", "b2"}


async def test_a_queued_cost_shows_in_the_clusters_view(client: redis.asyncio.Redis, name: str) -> None:
    tps = RateLimit.per_second(1, burst=10, unit="tokens", name="tps")
    async with rated(client, name, tps, c=1) as gate, gate.admit(cost=10):  # empty, and the only slot held
        waiter = asyncio.create_task(gate.admit(cost=7, timeout=60).__aenter__())

        async def queued() -> bool:
            return (await gate.cluster_stats()).waiting == 1

        await wait_until(queued, 5, "1 waiting")
        view = await gate.cluster_stats()
        assert view.queued_cost == 7.0
        assert 0 <= view.tokens["tps"] < SLACK
        assert "queued cost 7" in format_cluster(view)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter


async def test_records_carry_the_declared_and_settled_costs_and_the_limit_that_refused(
    client: redis.asyncio.Redis, name: str
) -> None:
    tpm = RateLimit.per_minute(100, unit="tokens", name="tpm")
    rpm = RateLimit.per_minute(60, name="rpm")
    records: list[RequestRecord] = []
    async with rated(client, name, rpm, tpm, c=2) as gate:
        gate.observe(records.append)
        async with gate.admit(cost=60) as permit:
            permit.settle(30)
        with pytest.raises(RateLimited) as refused:
            await gate.try_admit(cost=80)  # at most 70 are there
        async with gate.admit(cost=5):
            pass
    served, limited, unsettled = records
    assert (served.cost, served.settled, served.limited_by) == (60.0, 30.0, None)
    assert (limited.cost, limited.settled, limited.limited_by) == (80.0, 80.0, "tpm")
    assert limited.outcome.name == "rate_limited"
    assert limited.retry_after == refused.value.retry_after
    assert (unsettled.cost, unsettled.settled, unsettled.limited_by) == (5.0, 5.0, None)
