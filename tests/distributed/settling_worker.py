"""A worker process of test_processes_settle.py: callers of a rated RedisGate that settle their usage.

    python settling_worker.py --url URL --name NAME --c C --q Q --rate R --burst B --floor F
        --lanes K --requests N --index I

``--lanes`` callers run one after another ``--requests`` requests in all, through a cluster gate of
C slots, Q places and one rate limit counted in tokens (``--rate`` a second, ``--burst``,
``--floor``). Each request declares a cost, and settles a real cost that refunds part of it, matches
it, or runs into debt; some bodies fail, some callers give the whole request a moment only, and a
caller refused backs off a little. It prints one JSON object: ``outcomes``, what the callers saw,
by outcome name; ``charges``, each change to the bucket a caller made, as ``[earliest, latest,
tokens]`` on the server's clock in ms (a grant takes its declared cost at the moment the script
wrote, exactly; a settle charges or refunds the difference at a moment between a reading of the
server's clock before it was sent and one after its call ended).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from pathlib import Path

import redis.asyncio

from boundedgate import Late, QueueExpired, QueueFull, RateLimit, RateLimited
from boundedgate.redis import RedisGate, RedisPermit

sys.path.insert(0, str(Path(__file__).parents[2]))  # run as a script: the repository's tests importable
from tests.distributed.worker import client_for


class Failed(Exception):
    """A body that fails after it settled (its request ends as ``failed``)."""


async def server_ms(client: redis.asyncio.Redis) -> int:
    """The server's clock in whole ms, as the scripts read it (TIME's microseconds floored)."""
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def settle(permit: RedisPermit, cost: int) -> None:
    """Settle ``cost`` and return once the change has landed in Redis (or was given up)."""
    before = asyncio.all_tasks()
    permit.settle(cost)
    sent = asyncio.all_tasks() - before  # the one task settle() spawned to send it
    if sent:
        await asyncio.wait(sent)  # not gather(): this caller's cancellation must not reach it


async def run(args: argparse.Namespace) -> dict[str, object]:
    client = client_for(args.url, args.cluster)
    limit = RateLimit(args.rate, args.burst, "tokens", floor=args.floor, name="tpm")
    gate = RedisGate(
        client,
        max_running=args.c,
        max_waiting=args.q,
        rate_limits=[limit],
        name=args.name,
        lease_ttl=10.0,
        poll_interval=0.1,
        waiter_ttl=5.0,
        op_timeout=5.0,
    )
    info = f"boundedgate:{{{args.name}}}:info"
    rng = random.Random(args.index)
    outcomes: dict[str, int] = {}
    charges: list[list[int]] = []
    left = args.requests

    async def request() -> str:
        declared = rng.randint(1, 20)
        settled = rng.choice([rng.randint(0, declared - 1), declared, declared + rng.randint(1, 10)])
        fails = rng.random() < 0.1
        timeout = rng.choice([30.0] * 7 + [0.2])  # some callers wait only a moment
        try:
            async with gate.admit(cost=declared, timeout=timeout) as permit:
                # The grant's moment, as the script that made it (and took the cost) wrote it.
                described = await client.hget(info, permit.id or "")
                assert isinstance(described, bytes), described
                granted = int(described.split(b"|")[2])
                charges.append([granted, granted, declared])
                if settled != declared:
                    earliest = await server_ms(client)
                    await settle(permit, settled)
                    charges.append([earliest, await server_ms(client), settled - declared])
                await asyncio.sleep(rng.uniform(0, 0.02))
                if fails:
                    raise Failed
        except Failed:
            return "failed"
        except QueueFull:
            await asyncio.sleep(0.1)  # a caller refused backs off before its next request
            return "rejected"
        except QueueExpired:
            return "expired"
        except Late:
            return "late"  # it ran past its deadline (timeout= bounds the whole request)
        except RateLimited as refused:
            await asyncio.sleep(min(refused.retry_after, 0.3))
            return "rate_limited"
        return "completed"

    async def lane() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            outcome = await request()
            outcomes[outcome] = outcomes.get(outcome, 0) + 1

    try:
        await asyncio.gather(*(lane() for _ in range(args.lanes)))
    finally:
        await gate.aclose()
        await client.aclose()
    return {"outcomes": outcomes, "charges": charges}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--c", type=int, required=True)
    parser.add_argument("--q", type=int, required=True)
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--burst", type=float, required=True)
    parser.add_argument("--floor", type=float, required=True)
    parser.add_argument("--lanes", type=int, required=True)
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--cluster", action="store_true")
    print(json.dumps(asyncio.run(run(parser.parse_args()))), flush=True)
    sys.exit(0)
