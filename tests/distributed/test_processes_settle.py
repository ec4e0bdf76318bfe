"""Three OS processes settle their usage on one rated RedisGate: the cluster's bound, and its counts.

docs/cluster.md ("Rate limits across the cluster", the bound): one set of buckets decides for every
process, so the in-process bound of docs/rate-limits.md holds for the whole cluster: over any
window of ``w`` seconds, the net charge of every process together (the costs taken at starts, plus
the charges settled, minus the refunds) comes to at most ``rate * w + burst - floor``. And
docs/cluster.md ("Metrics from every worker"): the cluster's counters, which ``GateCollector``
exports, count every request of every process by its outcome.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from bisect import bisect_right
from itertools import accumulate
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio
from prometheus_client import CollectorRegistry

from boundedgate import OUTCOMES, RateLimit
from boundedgate.prometheus import GateCollector

from .helpers import cluster, make_gate, settles_empty, wait_until
from .servers import RedisClusterServers, RedisServer, die_with_parent
from .test_metrics import samples, series

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]

#: A change to a bucket: (earliest, latest) moment on the server's clock in ms, and its tokens
#: (> 0 taken or charged, < 0 refunded).
Charge = tuple[int, int, int]


def least_excess(charges: list[Charge], rate: float, allowance: float) -> float:
    """The largest excess, over every window, of a lower bound of its net charge above the bound.

    A window ``[a, b]`` may take ``rate * (b - a) + allowance`` net. A charge whose moment is known
    only within an interval counts for a window surely if it is positive (it lies wholly inside)
    and possibly if it is negative (it meets the window): that sum is at most the window's true net
    charge, so a positive result is a window that surely exceeded the bound. Windows that start at
    a positive charge's earliest moment and end at one's latest are the only ones to try.
    """
    positive = [c for c in charges if c[2] > 0]
    negative = sorted((earliest, latest, tokens) for earliest, latest, tokens in charges if tokens < 0)
    worst = -allowance
    for a in sorted({earliest for earliest, _, _ in positive}):
        inside = sorted((latest, tokens) for earliest, latest, tokens in positive if earliest >= a)
        ends = [latest for latest, _ in inside]
        taken = list(accumulate(tokens for _, tokens in inside))
        meeting = [(earliest, tokens) for earliest, latest, tokens in negative if latest >= a]
        starts = [earliest for earliest, _ in meeting]
        refunded = [0, *accumulate(tokens for _, tokens in meeting)]
        for b in ends:
            net = taken[bisect_right(ends, b) - 1] + refunded[bisect_right(starts, b)]
            worst = max(worst, net - rate * (b - a) / 1000 - allowance)
    return worst


def test_the_window_check_finds_a_window_beyond_the_bound() -> None:
    # 10 a second and 8 allowed besides: 14 within one second is within, 19 is not; a refund
    # that may fall inside the window counts, one that surely falls outside does not.
    within = [(0, 0, 7), (1000, 1000, 7)]
    assert least_excess(within, 10, 8) <= 0
    assert least_excess([*within, (500, 500, 5)], 10, 8) == pytest.approx(1)
    assert least_excess([*within, (500, 500, 5), (900, 1100, -1)], 10, 8) <= 0
    assert least_excess([*within, (500, 500, 5), (1001, 1100, -1)], 10, 8) == pytest.approx(1)
    # A settle's debt counts only in the windows that surely hold it.
    assert least_excess([(0, 0, 7), (-1, 500, 2)], 10, 8) <= 0
    assert least_excess([(0, 0, 7), (0, 0, 2)], 10, 8) == pytest.approx(1)


@pytest.mark.engines("redis", "valkey")
async def test_three_processes_settling_stay_within_the_net_bound_and_their_counts_add_up(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> None:
    await _three_processes_settling(client, [redis_server.url], name)


@pytest.mark.engines
async def test_three_processes_settling_on_a_cluster(
    cluster_client: redis.asyncio.RedisCluster, redis_cluster: RedisClusterServers, name: str
) -> None:
    await _three_processes_settling(cluster_client, [redis_cluster.url, "--cluster"], name)


async def _three_processes_settling(client: Any, server: list[str], name: str) -> None:
    # One limit of 300 tokens a second, a burst of 60, for three processes of 4 callers each, 40
    # requests a process of 1 to 20 tokens declared (some 1,200: about 4 s of rate), each settling
    # a refund, its declared cost or a debt of up to 10. A debt is charged only by a request that
    # started, when the balance was at least 0, and 12 at most are unsettled at once: the floor of
    # -120 never forgives a charge, so the nominal charges are the ones the bucket made.
    rate, burst, floor = 300.0, 60.0, -120.0
    c, q, lanes, requests = 3, 8, 4, 40
    limit = RateLimit(rate, burst, "tokens", floor=floor, name="tpm")
    worker = str(Path(__file__).with_name("settling_worker.py"))
    common = ["--url", *server, "--name", name, "--c", str(c), "--q", str(q)]
    common += ["--rate", str(rate), "--burst", str(burst), "--floor", str(floor)]
    common += ["--lanes", str(lanes), "--requests", str(requests)]
    processes = [
        subprocess.Popen(
            [sys.executable, worker, *common, "--index", str(i)],
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=die_with_parent,  # noqa: PLW1509
        )
        for i in range(3)
    ]
    try:
        # Every request's tokens come at the rate, at worst: 3 * 40 * (20 + 10) tokens, and room.
        within = 3 * requests * 30 / rate + 30

        async def exited() -> bool:
            return all(p.poll() is not None for p in processes)

        await wait_until(exited, within, "the workers done")
        reports = [json.loads(p.stdout.read()) for p in processes]  # type: ignore[union-attr]
        assert [p.returncode for p in processes] == [0, 0, 0]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()

    saw: dict[str, int] = {}
    charges: list[Charge] = []
    for report in reports:
        for outcome, n in report["outcomes"].items():
            saw[outcome] = saw.get(outcome, 0) + n
        charges += [(int(a), int(b), int(t)) for a, b, t in report["charges"]]
    assert sum(saw.values()) == 3 * requests
    assert saw.get("completed", 0) > 0

    # A grant that reached its caller at its deadline never ran: the script that made it took its
    # cost, and the caller's cancellation gave it back, neither seen by the caller. Each such pair
    # may put up to one declared cost (20) of refund the check does not see into a window.
    allowance = burst - floor + 20 * saw.get("expired", 0)
    excess = least_excess(charges, rate, allowance)
    assert excess <= 1e-6, f"a window charged {excess} tokens beyond rate x w + burst - floor"
    taken = sum(t for _, _, t in charges if t > 0)
    assert taken > 4 * (burst - floor), saw  # the bucket refilled many times over: the rate decided

    view = await settles_empty(client, name)
    counted = view.counters
    ran = ("completed", "late", "failed")
    for outcome in ran:
        assert counted.get(outcome, 0) == saw.get(outcome, 0), (outcome, counted, saw)
    assert counted["admitted"] == sum(saw.get(outcome, 0) for outcome in ran)
    # A refusal whose reply reaches a caller of 0.2 s after its deadline (a loaded machine): the
    # caller has seen its request expire, the cluster counts the refusal its script made. Refusals
    # agree in sum, and the callers' expiries are the cluster's and those.
    refused = ("rejected", "rate_limited", "expired")
    assert sum(counted.get(o, 0) for o in refused) == sum(saw.get(o, 0) for o in refused), (counted, saw)
    for outcome in ("rejected", "rate_limited"):
        assert counted.get(outcome, 0) >= saw.get(outcome, 0), (outcome, counted, saw)

    # Any process's scrape exports the cluster's counters, whatever process answers.
    async with make_gate(client, name, c, q, rate_limits=[limit]) as gate:
        registry = CollectorRegistry()
        collector = GateCollector(gate)
        registry.register(collector)
        await asyncio.wait_for(collector.refresh(), 30)
        found = samples(registry)
        for outcome in OUTCOMES:
            exported = series(found, "boundedgate_requests_total", gate=name, outcome=outcome.name)
            assert exported == counted.get(outcome.name, 0), outcome.name
    assert (await cluster(client, name)).running == 0
