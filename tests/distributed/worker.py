"""A worker process for the multi-process tests: one RedisGate in its own interpreter.

    python worker.py MODE --url URL --name NAME --c C --q Q [options]

Modes: ``contend`` (many tasks through the gate, each body bracketed by the witness), ``hold``
(take ``--n`` slots, say ``held``, then wait to be killed), ``wait`` (queue one request, say
``queued``, then wait to be killed), ``fifo`` (arrive when ``--index`` others wait, then record the
order of the body in the witness list), ``rated`` (``--tasks`` requests of random costs through a
gate with one rate limit of ``--rate`` tokens a second and ``--burst``, no limit on running; each
records its grant's time on the server's clock and its cost).

The witness is independent of the gate: a separate Redis key incremented before each body and
decremented after it, with the highest value seen kept in another key by one atomic script.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from typing import Any

import redis.asyncio

from boundedgate import GateError, RateLimit
from boundedgate.redis import RedisGate

ENTER = """
local n = redis.call('INCR', KEYS[1])
if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end
redis.call('INCR', KEYS[3])
return n
"""


def client_for(url: str, cluster: bool) -> Any:
    """A client of the server at ``url``: a ``RedisCluster`` when it is a node of a Redis Cluster."""
    return (redis.asyncio.RedisCluster if cluster else redis.asyncio.Redis).from_url(url)


def grants_key(name: str) -> str:
    """The list of grants of the ``rated`` mode: ``"<grant ms on the server's clock> <cost>"``."""
    return f"witness:{name}:grants"


def witness_keys(name: str) -> tuple[str, str, str, str]:
    """Keys of the witness: running now, max running seen, bodies run, body order.

    One hash tag, so that on a Redis Cluster one script can update them together.
    """
    base = f"witness:{{{name}}}:"
    return base + "now", base + "max", base + "bodies", base + "order"


async def spend_tokens(
    gate: RedisGate, client: redis.asyncio.Redis, args: argparse.Namespace
) -> dict[str, int]:
    """The ``rated`` mode: ``--tasks`` requests of 1 to 20 tokens; returns their outcomes, counted."""
    rng = random.Random(args.index)
    info = f"boundedgate:{{{args.name}}}:info"
    counted: dict[str, int] = {}

    async def spend(cost: int) -> None:
        try:
            async with gate.admit(cost=cost, timeout=args.timeout) as permit:
                # The grant's moment, as the script that made it wrote it (info's "since", ms).
                described = await client.hget(info, permit.id or "")
                assert isinstance(described, bytes), described
                since = int(described.split(b"|")[2])
                await client.rpush(grants_key(args.name), f"{since} {cost}")
            outcome = "completed"
        except GateError as error:
            outcome = error.code
        counted[outcome] = counted.get(outcome, 0) + 1

    await asyncio.gather(*(spend(rng.randint(1, 20)) for _ in range(args.tasks)))
    return counted


async def main(args: argparse.Namespace) -> None:
    client = redis.asyncio.Redis.from_url(args.url)
    rated = args.mode == "rated"
    gate = RedisGate(
        client,
        max_running=None if rated else args.c,
        max_waiting=None if rated else args.q,
        rate_limits=[RateLimit(args.rate, args.burst, "tokens", name="tps")] if rated else (),
        name=args.name,
        lease_ttl=args.lease,
        poll_interval=args.poll,
        waiter_ttl=args.waiter_ttl,
        op_timeout=5.0,
    )
    now_key, max_key, bodies_key, order_key = witness_keys(args.name)
    enter = client.register_script(ENTER)
    try:
        if args.mode == "contend":
            rng = random.Random(args.index)
            outcomes: dict[str, int] = {}

            async def request() -> None:
                await asyncio.sleep(rng.uniform(0, 0.05))
                try:
                    async with gate.admit(timeout=args.timeout):
                        await enter(keys=[now_key, max_key, bodies_key])
                        await asyncio.sleep(rng.uniform(0.005, 0.03))
                        await client.decr(now_key)
                    outcome = "completed"
                except GateError as error:
                    outcome = error.code
                outcomes[outcome] = outcomes.get(outcome, 0) + 1

            await asyncio.gather(*(request() for _ in range(args.tasks)))
            print(json.dumps(outcomes), flush=True)
        elif args.mode == "hold":
            permits = [await gate.try_admit() for _ in range(args.n)]
            print("held", *(p.id for p in permits), flush=True)
            await asyncio.Event().wait()
        elif args.mode == "wait":
            entering = asyncio.ensure_future(gate.admit().__aenter__())
            while not gate.waiting:
                await asyncio.sleep(0.005)
            print("queued", flush=True)
            await entering
            print("granted", flush=True)
            await asyncio.Event().wait()
        elif args.mode == "rated":
            print(json.dumps(await spend_tokens(gate, client, args)), flush=True)
        elif args.mode == "fifo":
            waiters = f"boundedgate:{{{args.name}}}:waiters"
            while await client.zcard(waiters) != args.index:
                await asyncio.sleep(0.005)
            async with gate.admit():
                await client.rpush(order_key, args.index)
                await asyncio.sleep(0.01)
    finally:
        await gate.aclose()
        await client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["contend", "hold", "wait", "fifo", "rated"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--c", type=int, required=True)
    parser.add_argument("--q", type=int, required=True)
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--poll", type=float, default=0.1)
    parser.add_argument("--waiter-ttl", type=float, default=5.0)
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=2.0)
    parser.add_argument("--n", type=int, default=1)
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--burst", type=float, default=50.0)
    asyncio.run(main(parser.parse_args()))
    sys.exit(0)
