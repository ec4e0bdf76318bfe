"""A worker process for the keyed multi-process test: one RedisKeyedGate in its own interpreter.

    python keyed_worker.py --url URL --name NAME --c C --q Q --keys K --tasks N --index I
        [--cluster] [--metrics]

Runs ``--tasks`` requests spread over ``--keys`` keys (``k0`` has C = 1 by ``overrides``, the
others the template's ``--c``), each body bracketed by its key's witness: a Redis counter of the
key's bodies running now, with the highest value seen kept beside it by one atomic script. Prints
the outcomes, counted, as JSON. With ``--metrics`` the keyed gate is exported (``GateCollector``,
pushing every 50 ms), as a served worker's would be.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from pathlib import Path

from boundedgate import GateError, GateLimits
from boundedgate.prometheus import GateCollector
from boundedgate.redis import RedisKeyedGate

sys.path.insert(0, str(Path(__file__).parents[2]))  # run as a script: the repository's tests importable
from tests.distributed.worker import client_for

ENTER = """
local n = redis.call('INCR', KEYS[1])
if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end
return n
"""


def witness_keys(name: str, key: str) -> tuple[str, str]:
    """Keys of ``key``'s witness: its bodies running now, the most seen at once (one hash tag)."""
    return f"witness:{{{name}/{key}}}:now", f"witness:{{{name}/{key}}}:max"


async def main(args: argparse.Namespace) -> None:
    client = client_for(args.url, args.cluster)
    gates = RedisKeyedGate(
        client,
        max_running=args.c,
        max_waiting=args.q,
        name=args.name,
        overrides={"k0": GateLimits(1, args.q)},
        poll_interval=0.1,
        waiter_ttl=5.0,
        op_timeout=5.0,
    )
    collector = GateCollector(gates, refresh_interval=0.05) if args.metrics else None
    enter = client.register_script(ENTER)
    rng = random.Random(args.index)
    outcomes: dict[str, int] = {}

    async def request() -> None:
        key = f"k{rng.randrange(args.keys)}"
        now_key, max_key = witness_keys(args.name, key)
        await asyncio.sleep(rng.uniform(0, 0.05))
        try:
            async with gates.admit(key, timeout=2.0):
                await enter(keys=[now_key, max_key])
                await asyncio.sleep(rng.uniform(0.005, 0.03))
                await client.decr(now_key)
            outcome = "completed"
        except GateError as error:
            outcome = error.code
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    try:
        await asyncio.gather(*(request() for _ in range(args.tasks)))
        print(json.dumps(outcomes), flush=True)
    finally:
        await gates.aclose()  # pushes this process's last counts
        if collector is not None:
            collector.close()
        await client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--c", type=int, required=True)
    parser.add_argument("--q", type=int, required=True)
    parser.add_argument("--keys", type=int, required=True)
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--cluster", action="store_true")
    parser.add_argument("--metrics", action="store_true")
    asyncio.run(main(parser.parse_args()))
