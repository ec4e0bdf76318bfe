"""docs/cluster.md's metrics recipe served for real: uvicorn --workers 2, a real Redis, many scrapes.

tests/test_docs.py only runs the block (it defines the app); here it is written to a module and
served by ``uvicorn --workers 2`` in a subprocess, with a route added that takes a while behind the
gate, C and Q made small (so some requests are refused) and the background read made fast. Each
request and each scrape is a connection of its own, so it lands on either worker; the added route
blocks its worker a moment, and requests arrive a little apart, so that both workers serve some.
Every scrape must give the cluster's totals (what the clients saw, summed over both workers),
whichever worker answers it, and no counter may go down from one scrape to the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.asgi.servers import require
from tests.distributed.conftest import redis_server, server_binary
from tests.distributed.servers import RedisServer, die_with_parent

pytestmark = [pytest.mark.redis, pytest.mark.http_server, pytest.mark.looptime(False)]

__all__ = ("redis_server", "server_binary")  # the fixtures, shared with tests/distributed

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "cluster.md"
#: The background read of the served recipe (seconds), and how long a scrape may wait for the
#: other worker's records to reach Redis: many reads, with room for a loaded machine.
INTERVAL = 0.2
SETTLE = 30.0

ADDED = """

import asyncio as _asyncio
import time as _time


@app.get("/call")
async def call() -> dict[str, int]:
    _time.sleep(0.05)  # this worker accepts nothing meanwhile: the next connection goes to the other
    await _asyncio.sleep(0.2)
    return {"pid": os.getpid()}
"""

#: The series that only grow: counters and the parts of a histogram.
COUNTERS = ("_total", "_count", "_sum", "_bucket")

Scrape = dict[tuple[str, frozenset[tuple[str, str]]], float]


def recipe() -> str:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    metrics = [block for block in blocks if "GateCollector" in block and "FastAPI(" in block]
    (found,) = [block for block in metrics if "RedisKeyedGate" not in block]  # not the service recipe
    return str(found)


def served_recipe(name: str) -> str:
    """The recipe with C=2, Q=2, a gate of the test's name, a fast background read, and a route."""
    text = recipe()
    for old, new in (
        ('max_running=50, max_waiting=100, name="openai"', f'max_running=2, max_waiting=2, name="{name}"'),
        ("GateCollector(gate, ", f"GateCollector(gate, refresh_interval={INTERVAL}, "),
    ):
        assert old in text
        text = text.replace(old, new)
    return text + ADDED


def parse(text: str) -> Scrape:
    found: Scrape = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            match = re.fullmatch(r"(\w+)(?:\{(.*)\})? (\S+)", line)
            assert match, line
            found[match[1], frozenset(re.findall(r'(\w+)="([^"]*)"', match[2] or ""))] = float(match[3])
    return found


def value(scrape: Scrape, metric: str, **labels: str) -> float:
    return scrape.get((metric, frozenset(labels.items())), 0.0)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def workers(app_dir: Path, url: str) -> AsyncIterator[str]:
    """``uvicorn recipe_app:app --workers 2`` serving on a free loopback port; yields its base URL.

    On exit it is stopped, and fails the test if it wrote a traceback or a warning (ResourceWarnings
    shown) other than uvicorn's own about its listening socket.
    """
    httpx = require("httpx", "pip install 'boundedgate[test]'")
    port = free_port()
    command = [
        sys.executable, "-m", "uvicorn", "recipe_app:app", "--app-dir", str(app_dir),
        "--host", "127.0.0.1", "--port", str(port), "--workers", "2", "--log-level", "warning",
    ]  # fmt: skip
    server = subprocess.Popen(
        command,
        env={**os.environ, "REDIS_URL": url, "PYTHONWARNINGS": "error::ResourceWarning"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=die_with_parent,  # noqa: PLW1509 (see die_with_parent)
    )
    base = f"http://127.0.0.1:{port}"
    try:
        give_up = time.monotonic() + 60
        async with httpx.AsyncClient(base_url=base) as http:
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if (await http.get("/metrics")).status_code == 200:
                        break
                assert time.monotonic() < give_up, "uvicorn did not serve within 60 s"
                await asyncio.sleep(0.1)
        yield base
    finally:
        server.terminate()
        try:
            _, errors = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            _, errors = server.communicate()
    report = errors.decode()
    assert "Traceback" not in report, report
    listening = f"('127.0.0.1', {port})>"  # uvicorn's supervisor leaves its socket to the collector
    warned = [line for line in report.splitlines() if "Warning" in line and not line.endswith(listening)]
    assert not warned, report


class Clients:
    """The service's clients: what they saw, and every scrape in order.

    No keep-alive: every request is a connection of its own, accepted by either worker.
    """

    def __init__(self, base: str, gate: str) -> None:
        httpx = require("httpx", "pip install 'boundedgate[test]'")
        limits = httpx.Limits(max_keepalive_connections=0)
        self.http = httpx.AsyncClient(base_url=base, limits=limits, timeout=30)
        self.gate = gate
        self.saw: Counter[str] = Counter()
        self.callers: set[int] = set()
        self.scrapes: list[Scrape] = []

    async def call(self) -> None:
        reply = await self.http.get("/call")
        if reply.status_code == 200:
            self.saw["completed"] += 1
            self.callers.add(reply.json()["pid"])
        else:
            assert reply.status_code == 503, reply.text
            self.saw["rejected"] += 1

    async def calls(self, n: int) -> None:
        """``n`` requests, arriving 20 ms apart (while a worker is blocked, the other accepts)."""
        tasks = []
        for _ in range(n):
            tasks.append(asyncio.create_task(self.call()))
            await asyncio.sleep(0.02)
        await asyncio.gather(*tasks)

    async def scrape(self) -> Scrape:
        reply = await self.http.get("/metrics")
        assert reply.status_code == 200
        self.scrapes.append(parse(reply.text))
        return self.scrapes[-1]

    def totals_are_the_callers(self, found: Scrape) -> None:
        for outcome in ("completed", "rejected", "expired", "failed"):
            total = value(found, "boundedgate_requests_total", gate=self.gate, outcome=outcome)
            assert total == self.saw[outcome], (outcome, total, self.saw)
        assert value(found, "boundedgate_request_active", gate=self.gate) == 0
        assert value(found, "boundedgate_limit_running", gate=self.gate) == 2

    def idle(self, found: Scrape) -> bool:
        active = value(found, "boundedgate_request_active", gate=self.gate)
        return active == 0 and value(found, "boundedgate_request_queued", gate=self.gate) == 0

    def histograms_complete(self, found: Scrape) -> bool:
        count = "boundedgate_request_duration_seconds_count"
        return all(value(found, count, gate=self.gate, outcome=o) == n for o, n in self.saw.items())

    def never_down(self) -> None:
        """No counter (nor a histogram's count, sum or bucket) goes down; gauges may."""
        for before, after in itertools.pairwise(self.scrapes):
            for key, was in before.items():
                if key[0].endswith(COUNTERS):
                    assert after.get(key, 0.0) >= was, (key, was, after.get(key))


async def test_every_scrape_of_any_worker_gives_the_cluster_totals_monotonic(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    require("uvicorn", "pip install 'boundedgate[test]'")
    require("fastapi", "pip install 'boundedgate[test]'")
    name = f"workers-{os.getpid()}-{time.monotonic_ns()}"
    (tmp_path / "recipe_app.py").write_text(served_recipe(name))
    async with workers(tmp_path, redis_server.url) as base:
        clients = Clients(base, name)
        try:
            rounds = 0
            while rounds < 3 or (len(clients.callers) < 2 and rounds < 10):
                rounds += 1
                await clients.calls(8)  # 2 run, 2 wait, the others refused
                # A client has its answer before the middleware's release lands in Redis: once the
                # cluster holds no slot, every release has (each counts its ending as it frees it).
                settle = time.monotonic() + SETTLE
                while not clients.idle(await clients.scrape()):
                    assert time.monotonic() < settle, "the releases never landed"
                    await asyncio.sleep(INTERVAL / 2)
                for _ in range(4):
                    clients.totals_are_the_callers(await clients.scrape())
                # The other worker's records reach Redis within its background read's interval.
                settle = time.monotonic() + SETTLE
                while not clients.histograms_complete(await clients.scrape()):
                    assert time.monotonic() < settle, f"the histograms never reached {clients.saw}"
                    await asyncio.sleep(INTERVAL / 2)
        finally:
            await clients.http.aclose()
    assert clients.saw["completed"] >= 12
    assert clients.saw["rejected"] >= 3
    assert len(clients.callers) == 2, f"one worker served every call ({clients.callers}): this proves nothing"
    clients.never_down()
