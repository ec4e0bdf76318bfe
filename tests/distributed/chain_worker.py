"""A worker process for the chain test: a tenant's KeyedGate in this process, then one RedisGate.

    python chain_worker.py --url URL --name NAME --c C --q Q --tenant-c N [--tasks T] [--index I]

Each of ``--tasks`` requests picks one of two tenants and goes through
``admit_all((tenants, tenant), cluster_gate)``; its body is bracketed by two witnesses independent
of the gates: the cluster's in Redis (``worker.ENTER``: running now, the highest seen, bodies run),
and each tenant's in this process (the tenant gate's limit is this process's). It prints one JSON
line: the outcomes counted, and the most bodies of one tenant seen running at once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from pathlib import Path

import redis.asyncio

from boundedgate import GateError, KeyedGate, admit_all
from boundedgate.redis import RedisGate

sys.path.insert(0, str(Path(__file__).parents[2]))  # run as a script: the repository's tests importable
from tests.distributed.worker import ENTER, witness_keys


async def main(args: argparse.Namespace) -> None:
    client = redis.asyncio.Redis.from_url(args.url)
    gate = RedisGate(
        client,
        max_running=args.c,
        max_waiting=args.q,
        name=args.name,
        lease_ttl=10.0,
        poll_interval=0.1,
        waiter_ttl=5.0,
        op_timeout=5.0,
    )
    tenants: KeyedGate[str] = KeyedGate(max_running=args.tenant_c, max_waiting=args.tasks, name="tenant")
    now_key, max_key, bodies_key, _ = witness_keys(args.name)
    enter = client.register_script(ENTER)
    rng = random.Random(args.index)
    outcomes: dict[str, int] = {}
    running: dict[str, int] = {}
    most = 0

    async def request() -> None:
        nonlocal most
        tenant = f"t{rng.randrange(2)}"
        await asyncio.sleep(rng.uniform(0, 0.05))
        try:
            async with admit_all((tenants, tenant), gate, timeout=args.timeout):
                running[tenant] = running.get(tenant, 0) + 1
                most = max(most, running[tenant])
                await enter(keys=[now_key, max_key, bodies_key])
                await asyncio.sleep(rng.uniform(0.005, 0.03))
                await client.decr(now_key)
                running[tenant] -= 1
            outcome = "completed"
        except GateError as error:
            outcome = error.code
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    try:
        await asyncio.gather(*(request() for _ in range(args.tasks)))
        admitted = tenants.stats().total.admitted
        print(json.dumps({"outcomes": outcomes, "tenant_most": most, "tenant": admitted}))
    finally:
        await gate.aclose()
        await client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--c", type=int, required=True)
    parser.add_argument("--q", type=int, required=True)
    parser.add_argument("--tenant-c", type=int, required=True)
    parser.add_argument("--tasks", type=int, default=12)
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=5.0)
    asyncio.run(main(parser.parse_args()))
    sys.exit(0)
