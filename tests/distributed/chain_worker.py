"""A worker process for the chain test: the cluster's tenants (a RedisKeyedGate), then one RedisGate.

    python chain_worker.py --url URL --name NAME --c C --q Q --tenant-c N [--tasks T] [--index I] [--cluster]

Each of ``--tasks`` requests picks one of three tenants and goes through
``admit_all((tenants, tenant), cluster_gate)``; its body is bracketed by witnesses in Redis,
independent of the gates (``worker.ENTER``: running now, the highest seen, bodies run): the
cluster's, and each tenant's (``witness_keys(f"{name}/{tenant}")``), both counted over every
process. It prints one JSON line: the outcomes counted, and its tenant admissions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from pathlib import Path

from boundedgate import GateError, admit_all
from boundedgate.redis import RedisGate, RedisKeyedGate

sys.path.insert(0, str(Path(__file__).parents[2]))  # run as a script: the repository's tests importable
from tests.distributed.worker import ENTER, client_for, witness_keys


async def main(args: argparse.Namespace) -> None:
    client = client_for(args.url, args.cluster)
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
    tenants = RedisKeyedGate(
        client,
        max_running=args.tenant_c,
        max_waiting=args.tasks,
        name=f"{args.name}-tenant",
        lease_ttl=10.0,
        poll_interval=0.1,
        waiter_ttl=5.0,
        op_timeout=5.0,
    )
    now_key, max_key, bodies_key, _ = witness_keys(args.name)
    enter = client.register_script(ENTER)
    rng = random.Random(args.index)
    outcomes: dict[str, int] = {}

    async def request() -> None:
        tenant = f"t{rng.randrange(3)}"
        tenant_now, tenant_max, tenant_bodies, _ = witness_keys(f"{args.name}/{tenant}")
        await asyncio.sleep(rng.uniform(0, 0.05))
        try:
            async with admit_all((tenants, tenant), gate, timeout=args.timeout):
                await enter(keys=[tenant_now, tenant_max, tenant_bodies])
                await enter(keys=[now_key, max_key, bodies_key])
                await asyncio.sleep(rng.uniform(0.005, 0.03))
                await client.decr(now_key)
                await client.decr(tenant_now)
            outcome = "completed"
        except GateError as error:
            outcome = error.code
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    try:
        await asyncio.gather(*(request() for _ in range(args.tasks)))
        admitted = tenants.stats().total.admitted
        print(json.dumps({"outcomes": outcomes, "tenant": admitted}))
    finally:
        await tenants.aclose()
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
    parser.add_argument("--cluster", action="store_true")
    parser.add_argument("--timeout", type=float, default=5.0)
    asyncio.run(main(parser.parse_args()))
    sys.exit(0)
