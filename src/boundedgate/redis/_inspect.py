"""Inspecting a cluster gate: its live state read from Redis, and the command that prints it.

``python -m boundedgate.redis inspect NAME [--url URL] [--json]`` prints the gate's holders (with
their leases), its waiters (head first), its counters and the TTL of each of its keys. Reading is
one script of plain reads (``lua/read.lua``, by ``EVAL``): atomic, routed by the gate's keys, so a
cluster client sends it to the primary of the gate's slot; it changes nothing, so it also works on
a replica, and a lease that has lapsed shows a negative ``lease_left`` until the next operation
reclaims it. Given a node of a Redis Cluster, the command reads through a cluster client.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import re
import sys
from collections.abc import Sequence
from importlib import resources
from typing import Any

import redis.asyncio
import redis.exceptions

from .._core import RateLimit
from ._buckets import balances
from ._io import text
from ._layout import KEY_NAMES, gate_keys
from ._stats import ClusterHolder, ClusterStatistics, ClusterWaiter

__all__ = ("format_cluster", "main", "read_cluster")


#: A bucket's field in meta: ``b1``, ``b2``... (the moment it is empty, ms on the server's clock).
_BUCKET = re.compile(r"b[0-9]+")

#: The script that reads a gate (``lua/read.lua``): sent with ``EVAL``, routed by the gate's keys.
_READ = resources.files(__package__).joinpath("lua").joinpath("read.lua").read_text("utf-8")


def _pairs(flat: Sequence[Any]) -> dict[str, str]:
    """A hash or a scored set, as the script returns it (a flat array), by field or member."""
    return {text(flat[i]): text(flat[i + 1]) for i in range(0, len(flat), 2)}


async def read_cluster(client: Any, name: str, rate_limits: Sequence[RateLimit] = ()) -> ClusterStatistics:
    """Read a cluster gate's live state and counters from Redis, without changing anything.

    Args:
        client: A ``redis.asyncio.Redis`` client, or a ``redis.asyncio.RedisCluster``.
        name: The gate's name.
        rate_limits: The gate's rate limits, in the gate's order, for the balances
            (``ClusterStatistics.tokens``); Redis keeps each bucket's "empty at" moment, not its
            rate nor its burst. Without them, ``tokens`` is empty.

    Returns:
        A :class:`ClusterStatistics` snapshot.

    Raises:
        redis.exceptions.RedisError: Redis could not be reached or refused the reads.
    """
    keys = dict(zip(KEY_NAMES, gate_keys(name), strict=True))
    reply = await client.eval(_READ, len(keys), *keys.values())
    clock, meta, holders, waiters, due, info, stats, ttls = reply
    now_ms = int(text(clock[0])) * 1000 + int(text(clock[1])) // 1000
    meta, info, stats = _pairs(meta), _pairs(info), _pairs(stats)
    due_at = {member: float(score) for member, score in _pairs(due).items()}

    def fields(permit_id: str) -> tuple[str, int, int, str]:
        agent, deadline, since, token = (info.get(permit_id) or "|-1|0|").split("|")
        return agent, int(deadline), int(since or 0), token

    held = []
    for permit_id, lease_text in _pairs(holders).items():
        lease = float(lease_text)
        agent, _, since, token = fields(permit_id)
        held.append(
            ClusterHolder(permit_id, agent, int(token or 0), (now_ms - since) / 1000, (lease - now_ms) / 1000)
        )
    queued = []
    for position, member in enumerate(waiters):
        permit_id = text(member)
        agent, deadline, since, _ = fields(permit_id)
        queued.append(
            ClusterWaiter(
                permit_id,
                agent,
                position,
                (now_ms - since) / 1000,
                None if deadline < 0 else (deadline - now_ms) / 1000,
                (due_at.get(permit_id, now_ms) - now_ms) / 1000,
            )
        )
    queue_limit = int(meta["Q"]) if "Q" in meta else None
    return ClusterStatistics(
        name=name,
        epoch=meta.get("epoch"),
        server_time=now_ms / 1000,
        max_running=int(meta["C"]) if "C" in meta else None,
        max_waiting=None if queue_limit is None or queue_limit < 0 else queue_limit,
        holders=tuple(sorted(held, key=lambda h: h.token)),
        waiters=tuple(queued),
        counters={k: int(v) for k, v in sorted(stats.items())},
        key_ttls={key: ttl / 1000 for key, ttl in zip(keys.values(), ttls, strict=True) if ttl >= 0},
        tokens=balances(rate_limits, meta, now_ms),
        buckets_empty_in={
            f: (float(meta[f]) - now_ms) / 1000 for f in sorted(meta, key=_number) if _BUCKET.fullmatch(f)
        },
        queued_cost=float(meta.get("qcost", 0.0)),
    )


def _number(field: str) -> int:
    """Meta's fields ordered so that ``b2`` comes before ``b10``."""
    return int(field[1:]) if _BUCKET.fullmatch(field) else -1


def format_cluster(view: ClusterStatistics) -> str:
    """A human-readable report of a :func:`read_cluster` snapshot."""
    if view.epoch is None:
        return f"gate {view.name!r}: no state in Redis (never used, or idle for longer than its idle_ttl)"
    limit = "unbounded" if view.max_waiting is None else view.max_waiting
    lines = [
        f"gate {view.name!r} (epoch {view.epoch}): running {view.running}/{view.max_running}, "
        f"waiting {view.waiting}/{limit}",
        "",
        f"holders ({view.running}):",
    ]
    lines += [
        f"  token {h.token:>8}  held {h.held_for:8.3f}s  lease left {h.lease_left:7.3f}s  {h.id}"
        for h in view.holders
    ]
    lines += ["", f"waiters ({view.waiting}), head first:"]
    for w in view.waiters:
        deadline = "none" if w.deadline_in is None else f"{w.deadline_in:.3f}s"
        lines.append(
            f"  #{w.position:<4} waited {w.waited:8.3f}s  deadline in {deadline:>9}  "
            f"place lapses in {w.due_in:.3f}s  {w.id}"
        )
    lines += _rate_lines(view)
    lines += ["", "counters: " + ", ".join(f"{k} {v}" for k, v in view.counters.items())]
    lines += ["key TTLs: " + ", ".join(f"{k.rsplit(':', 1)[1]} {v:.0f}s" for k, v in view.key_ttls.items())]
    return "\n".join(lines)


def _rate_lines(view: ClusterStatistics) -> list[str]:
    """The rate limits' part of the report: balances if known, else what Redis holds; none without."""
    queued = f"; queued cost {view.queued_cost:g}"
    if view.tokens:
        shown = ", ".join(f"{name} {balance:.3f}" for name, balance in view.tokens.items())
        return ["", f"tokens: {shown}{queued}"]
    if view.buckets_empty_in or view.queued_cost:
        shown = ", ".join(f"{field} {when:+.3f}s" for field, when in view.buckets_empty_in.items())
        unknown = "balances need the gate's rate limits"
        return ["", f"buckets, empty at (from now; {unknown}): {shown or 'all full'}{queued}"]
    return []


async def _inspect(url: str, name: str, as_json: bool) -> str:
    client = redis.asyncio.Redis.from_url(url)
    try:
        view = await read_cluster(client, name)
    except redis.exceptions.ResponseError as error:  # MovedError from redis-py 5.1 on
        if not str(error).startswith("MOVED") and not isinstance(error, redis.exceptions.MovedError):
            raise
        view = None  # a Redis Cluster node that does not serve the gate's slot
    finally:
        await client.aclose()
    if view is None:  # the cluster client finds the node that does from this one
        cluster = redis.asyncio.RedisCluster.from_url(url)
        try:
            view = await read_cluster(cluster, name)
        finally:
            await cluster.aclose()
    if as_json:
        return json.dumps(dataclasses.asdict(view), indent=2)
    return format_cluster(view)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``python -m boundedgate.redis`` command; returns the exit status.

    Args:
        argv: The arguments (default: ``sys.argv[1:]``).
    """
    parser = argparse.ArgumentParser(
        prog="python -m boundedgate.redis", description="Inspect a cluster gate's live state in Redis."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    inspect = commands.add_parser("inspect", help="print a gate's holders, waiters, leases and counters")
    inspect.add_argument("name", help="the gate's name")
    inspect.add_argument(
        "--url", default="redis://localhost:6379/0", help="the Redis URL (default: %(default)s)"
    )
    inspect.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    print(asyncio.run(_inspect(args.url, args.name, args.json)))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
