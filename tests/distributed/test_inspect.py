"""``python -m boundedgate.redis inspect``: a gate's holders, waiters and leases, read-only."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
import redis.asyncio

from boundedgate.redis import format_cluster, read_cluster

from .helpers import cluster, make_gate, wait_until
from .servers import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]


def inspect_command(server: RedisServer, name: str, *options: str) -> str:
    command = [sys.executable, "-m", "boundedgate.redis", "inspect", name, "--url", server.url, *options]
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=60).stdout


async def test_the_command_shows_holders_waiters_and_leases(
    client: redis.asyncio.Redis, redis_server: RedisServer, name: str
) -> None:
    async with make_gate(client, name, 1, 3, lease_ttl=10.0) as gate:
        holder = await gate.try_admit()
        waiter = asyncio.create_task(gate.admit(timeout=60).__aenter__())

        async def queued() -> bool:
            return (await cluster(client, name)).waiting == 1

        await wait_until(queued, 5, "1 waiting")
        text = await asyncio.to_thread(inspect_command, redis_server, name)
        assert f"gate {name!r}" in text
        assert "running 1/1, waiting 1/3" in text
        assert holder.id is not None
        assert holder.id in text
        assert "lease left" in text
        data = json.loads(await asyncio.to_thread(inspect_command, redis_server, name, "--json"))
        assert [h["id"] for h in data["holders"]] == [holder.id]
        assert data["holders"][0]["process"] == gate.process
        assert 0 < data["holders"][0]["lease_left"] <= 10.0
        assert len(data["waiters"]) == 1
        assert data["waiters"][0]["position"] == 0
        assert data["waiters"][0]["deadline_in"] <= 60.0
        holder.release()
        (await waiter).release()


async def test_a_gate_without_state_says_so(client: redis.asyncio.Redis, name: str) -> None:
    view = await read_cluster(client, name)
    assert (view.epoch, view.running, view.waiting, view.key_ttls) == (None, 0, 0, {})
    assert "no state in Redis" in format_cluster(view)


def test_the_several_workers_recipe_runs_against_a_real_server(redis_server: RedisServer) -> None:
    import os
    import re
    from pathlib import Path

    section = (Path(__file__).resolve().parents[2] / "docs" / "recipes" / "several-workers.md").read_text()
    block = re.search(r"```py\n(.*?)```", section, flags=re.DOTALL)
    assert block is not None
    env = {**os.environ, "REDIS_URL": redis_server.url}
    result = subprocess.run(
        [sys.executable, "-c", block.group(1)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "holding slot" in result.stdout
    assert "1 completed here; 0 running" in result.stdout
