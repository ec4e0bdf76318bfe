"""RedisGate through a real redis-server on loopback, against the in-process gate and redis-py's Lock.

    make bench-redis            (or: cd benchmarks && ../.venv/bin/python bench_redis.py [--rounds 3])
    cd benchmarks && ../.venv/bin/python bench_redis.py --scale [--seconds 20]   (the scale table alone)

Two figures, each the median of several interleaved rounds:

* admission latency: one task, an uncontended ``admit`` + release pair (for the Lock: acquire +
  release), in microseconds per pair;
* hand-off throughput: P processes x T tasks contend for C slots with an empty body, each task
  looping; slot hand-offs per second over all processes (the in-process gate runs all P x T tasks in
  one process, which is its best case, since nothing crosses a process boundary).

A third, at scale (``--scale`` prints it alone, ``--seconds`` sets its length): 8 processes x 100
tasks share C=20 slots for a while, each task looping admit (timeout 10 s), a 20-60 ms call,
release, and backing off 0.5-1.5 s on a refusal (a client retrying a 503); the RedisGate (Q=50)
beside a semaphore of C redis-py ``Lock`` s (each task tries them in random order, polls every
50 ms until its timeout: the hand-written cluster semaphore). It prints admissions per second, the
p99 of the admission latency (arrival to admission, over the admitted), the requests that timed
out (a run shorter than the 10 s timeout sees none), and Redis' CPU per admission (``INFO cpu``: its
user + system time over the run, every refusal, poll and release included). 20 s per kind by
default; ``--scale --seconds 5`` is a quick look.

``RedisGate + rates`` is the same gate with two rate limits that never run dry (requests and tokens
per minute, each admission declaring a cost): what the buckets add to an admission's pair.

redis-py's Lock is a mutex (C = 1) that polls: its ``sleep`` is set to 1 ms here (the default, 100 ms,
would make it look far worse). Compare figures within one run only: the machine is shared.

Figures a busy machine does not move, for the uncontended pair: the round trips it makes (commands
sent, counted on the client's connections), the client's instructions per pair (valgrind's
callgrind, the difference of two runs of different lengths, when valgrind is installed), the
server's instructions per pair (``redis-server`` itself under callgrind, the same way) and the
server's time per pair (``INFO commandstats``, the best of three runs). ``--server-instructions``
prints only the server's instructions (per uncontended pair and per hand-off at C=1), the
figures the scripts' cost is judged by.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

import redis.asyncio

from boundedgate import BoundedGate, RateLimit
from boundedgate.redis import RedisGate

PAIRS = 2000
#: The rate limits of the ``RedisGate + rates`` kind: never dry, so they only add their work.
RATES = (
    RateLimit.per_minute(10**12, name="rpm"),
    RateLimit.per_minute(10**15, unit="tokens", name="tpm"),
)
RATED = "RedisGate + rates"


def cluster_gate(client: Any, kind: str, name: str) -> RedisGate:
    """The uncontended pair's RedisGate: plain, or with :data:`RATES` (``kind`` says which)."""
    rates = RATES if kind == RATED else ()
    return RedisGate(client, max_running=1, max_waiting=10, name=name, rate_limits=rates)


def cost_of(kind: str) -> float | None:
    """The cost each admission of ``kind`` declares (None: none)."""
    return 1_000.0 if kind == RATED else None


PROCESSES = 4
TASKS = 8
SECONDS = 2.0


def server_binary() -> str:
    binary = os.environ.get("BOUNDEDGATE_REDIS_SERVER") or shutil.which("redis-server")
    if binary is None:
        raise SystemExit("no redis-server: `make redis-server` (as root), or set BOUNDEDGATE_REDIS_SERVER")
    return binary


def start_server(
    wrapper: tuple[str, ...] = (), *extra: str
) -> tuple[subprocess.Popen[bytes], int, tempfile.TemporaryDirectory[str]]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    folder = tempfile.TemporaryDirectory()
    args = [
        *wrapper,
        server_binary(),
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
    ]
    quiet = {"stderr": subprocess.DEVNULL} if wrapper else {}
    process = subprocess.Popen([*args, "--dir", folder.name, *extra], stdout=subprocess.DEVNULL, **quiet)
    for _ in range(3000):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return process, port, folder
        except OSError:
            time.sleep(0.01)
    raise RuntimeError("redis-server did not start")


# -- admission latency --------------------------------------------------------------------------


async def latency(kind: str, url: str) -> float:
    client = redis.asyncio.Redis.from_url(url)
    name = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        if kind == "BoundedGate":
            gate = BoundedGate(max_running=1, max_waiting=10, name=name)
            start = time.perf_counter()
            for _ in range(PAIRS):
                async with gate.admit():
                    pass
            return (time.perf_counter() - start) / PAIRS
        if kind in ("RedisGate", RATED):
            async with cluster_gate(client, kind, name) as cluster:
                cost = cost_of(kind)
                async with cluster.admit(cost=cost):  # warm up: scripts loaded, connections open
                    pass
                start = time.perf_counter()
                for _ in range(PAIRS):
                    async with cluster.admit(cost=cost):
                        pass
                return (time.perf_counter() - start) / PAIRS
        lock = client.lock(name, timeout=10, sleep=0.001)
        async with lock:
            pass
        start = time.perf_counter()
        for _ in range(PAIRS):
            async with lock:
                pass
        return (time.perf_counter() - start) / PAIRS
    finally:
        await client.aclose()


# -- what a busy machine does not move ----------------------------------------------------------


class CountingConnection(redis.asyncio.Connection):
    """A connection that counts the commands it sends (one round trip each, no pipelines here)."""

    sent = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        await super().send_packed_command(command, check_health)


async def pairs(kind: str, url: str, n: int, counting: bool = False) -> float:
    """Run ``n`` uncontended pairs after a warm-up; returns the round trips per pair."""
    pool = redis.asyncio.ConnectionPool.from_url(
        url, **({"connection_class": CountingConnection} if counting else {})
    )
    client = redis.asyncio.Redis(connection_pool=pool)
    name = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        if kind in ("RedisGate", RATED):
            async with cluster_gate(client, kind, name) as gate:
                cost = cost_of(kind)
                async with gate.admit(cost=cost):
                    pass
                CountingConnection.sent = 0
                for _ in range(n):
                    async with gate.admit(cost=cost):
                        pass
                return CountingConnection.sent / max(n, 1)
        lock = client.lock(name, timeout=10, sleep=0.001)
        async with lock:
            pass
        CountingConnection.sent = 0
        for _ in range(n):
            async with lock:
                pass
        return CountingConnection.sent / max(n, 1)
    finally:
        await client.aclose()
        await pool.disconnect()


def instructions(kind: str, url: str) -> float | None:
    """The client's instructions per uncontended pair, by callgrind (None without valgrind)."""
    if shutil.which("valgrind") is None:
        return None
    counts = []
    for n in (100, 400):
        with tempfile.TemporaryDirectory() as folder:
            out = os.path.join(folder, "callgrind.out")
            command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable]
            run = [*command, __file__, "--pairs", kind, url, str(n)]
            subprocess.run(run, check=True, capture_output=True)
            with open(out, encoding="utf-8") as report:
                summary = next(line for line in report if line.startswith("summary:"))
            counts.append(int(summary.split()[1]))
    return (counts[1] - counts[0]) / 300


def server_instructions(kind: str) -> float | None:
    """The server's instructions per uncontended pair: redis-server itself under callgrind.

    Two servers, runs of 200 and 1,000 pairs, the difference divided by 800 (start-up, the warm-up
    pair and loading the scripts cancel out); ``--hz 1`` keeps the server's timer out of the count.
    """
    if shutil.which("valgrind") is None:
        return None
    counts = []
    for n in (200, 1000):
        with tempfile.TemporaryDirectory() as out_folder:
            out = os.path.join(out_folder, "callgrind.out")
            wrapper = ("valgrind", "--tool=callgrind", f"--callgrind-out-file={out}")
            process, port, folder = start_server(wrapper, "--hz", "1")
            try:
                asyncio.run(pairs(kind, f"redis://127.0.0.1:{port}/0", n))
            finally:
                process.terminate()
                process.wait()
                folder.cleanup()
            with open(out, encoding="utf-8") as report:
                summary = next(line for line in report if line.startswith("summary:"))
            counts.append(int(summary.split()[1]))
    return (counts[1] - counts[0]) / 800


async def server_time(kind: str, url: str, n: int = 1000) -> float:
    """Microseconds the server spends per uncontended pair (best of three runs)."""
    client = redis.asyncio.Redis.from_url(url)
    best = math.inf
    try:
        for _ in range(3):
            await client.config_resetstat()
            await pairs(kind, url, n)
            stats = await client.info("commandstats")
            spent = sum(v["usec"] for k, v in stats.items() if k not in ("cmdstat_config", "cmdstat_info"))
            best = min(best, spent / (n + 1))
    finally:
        await client.aclose()
    return best


# -- hand-off throughput (several processes) -----------------------------------------------------


async def worker(kind: str, url: str, name: str, c: int, tasks: int, seconds: float) -> int:
    client = redis.asyncio.Redis.from_url(url, max_connections=tasks + 8)
    done = 0
    try:
        while not await client.exists(f"{name}:go"):
            await asyncio.sleep(0.001)
        stop = time.monotonic() + seconds

        if kind == "RedisGate":
            gate = RedisGate(client, max_running=c, max_waiting=None, name=name, poll_interval=0.5)

            async def loop() -> None:
                nonlocal done
                while time.monotonic() < stop:
                    async with gate.admit():
                        done += 1

            await asyncio.gather(*(loop() for _ in range(tasks)))
            await gate.aclose()
        elif kind == "BoundedGate":
            local = BoundedGate(max_running=c, max_waiting=None, name=name)

            async def local_loop() -> None:
                nonlocal done
                while time.monotonic() < stop:
                    async with local.admit():
                        done += 1
                    await asyncio.sleep(0)  # let the others run: nothing else would yield

            await asyncio.gather(*(local_loop() for _ in range(tasks)))
        else:

            async def lock_loop() -> None:
                nonlocal done
                while time.monotonic() < stop:
                    async with client.lock(name, timeout=10, sleep=0.001):
                        done += 1

            await asyncio.gather(*(lock_loop() for _ in range(tasks)))
    finally:
        await client.aclose()
    return done


def throughput(kind: str, url: str, c: int, shape: tuple[int, int] | None = None, at_go: Any = None) -> float:
    """Hand-offs per second of ``shape`` (processes, tasks) contending for ``c`` slots.

    ``at_go`` is called just before the workers are told to start.
    """
    name = f"bench-{uuid.uuid4().hex[:8]}"
    processes, tasks = (1, PROCESSES * TASKS) if kind == "BoundedGate" else (PROCESSES, TASKS)
    if shape is not None:
        processes, tasks = shape
    command = [sys.executable, __file__, "--worker", kind, url, name, str(c), str(tasks)]
    workers = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(processes)]

    async def go() -> None:
        client = redis.asyncio.Redis.from_url(url)
        await asyncio.sleep(1.5)  # let every worker import and connect
        if at_go is not None:
            at_go()
        await client.set(f"{name}:go", 1)
        await client.aclose()

    asyncio.run(go())
    counts = [int(w.communicate(timeout=60)[0]) for w in workers]
    return sum(counts) / SECONDS


def handoff_server_instructions() -> float | None:
    """The server's instructions per hand-off at C=1, 2 processes x 4 tasks: redis-server under callgrind.

    The count is zeroed as the workers start and dumped when they end, so it holds the hand-offs
    and what runs alongside them (the waiters' polls, wake-up messages), divided by the hand-offs.
    """
    if shutil.which("valgrind") is None:
        return None
    with tempfile.TemporaryDirectory() as out_folder:
        out = os.path.join(out_folder, "callgrind.out")
        wrapper = ("valgrind", "--tool=callgrind", f"--callgrind-out-file={out}")
        process, port, folder = start_server(wrapper, "--hz", "1")
        url = f"redis://127.0.0.1:{port}/0"
        control = ["callgrind_control"]
        try:
            asyncio.run(pairs("RedisGate", url, 1))  # the scripts loaded
            zero = [*control, "--zero", str(process.pid)]
            rate = throughput(
                "RedisGate", url, 1, (2, 4), lambda: subprocess.run(zero, capture_output=True, check=True)
            )
            subprocess.run([*control, "--dump", str(process.pid)], capture_output=True, check=True)
        finally:
            process.terminate()
            process.wait()
            folder.cleanup()
        with open(f"{out}.1", encoding="utf-8") as report:
            summary = next(line for line in report if line.startswith(("summary:", "totals:")))
    return int(summary.split()[1]) / (rate * SECONDS)


# -- at scale: many processes, many tasks, a Lock semaphore beside ---------------------------------

SCALE_PROCESSES = 8
SCALE_TASKS = 100
SCALE_C = 20
SCALE_Q = 50
SCALE_SECONDS = 20.0
SCALE_TIMEOUT = 10.0
SCALE_KINDS = ("RedisGate", "redis-py Lock semaphore")


class ScaleTasks:
    """One process's tasks of the scale run (see the module's docstring), and what they got."""

    def __init__(self, kind: str, client: Any, name: str, stop: float) -> None:
        self.client = client
        self.stop = stop
        self.latencies: list[float] = []
        self.counts = {"refused": 0, "timed_out": 0}
        self.gate = RedisGate(
            client, max_running=SCALE_C, max_waiting=SCALE_Q, name=name,
            lease_ttl=10.0, poll_interval=0.5, op_timeout=5.0,
        )  # fmt: skip
        self.locks = [client.lock(f"{name}:slot:{i}", timeout=SCALE_TIMEOUT) for i in range(SCALE_C)]
        self.one = self.through_gate if kind == "RedisGate" else self.through_locks

    @staticmethod
    async def call() -> None:
        await asyncio.sleep(random.uniform(0.02, 0.06))

    async def through_gate(self) -> None:
        from boundedgate import GateError, QueueExpired

        arrived = time.monotonic()
        try:
            async with self.gate.admit(timeout=SCALE_TIMEOUT):
                self.latencies.append((time.monotonic() - arrived) * 1000)
                await self.call()
        except QueueExpired:
            self.counts["timed_out"] += 1
        except GateError:  # QueueFull, GateUnavailable: back off, as a client given a 503 would
            self.counts["refused"] += 1
            await asyncio.sleep(random.uniform(0.5, 1.5))

    async def through_locks(self) -> None:
        arrived = time.monotonic()
        give_up = min(arrived + SCALE_TIMEOUT, self.stop)  # one still polling at the end is not counted
        while time.monotonic() < give_up:
            for lock in random.sample(self.locks, len(self.locks)):
                if await lock.acquire(blocking=False, token=uuid.uuid4().hex):
                    self.latencies.append((time.monotonic() - arrived) * 1000)
                    try:
                        await self.call()
                    finally:
                        await lock.release()
                    return
            await asyncio.sleep(0.05)
        if give_up < self.stop:
            self.counts["timed_out"] += 1

    async def loop(self) -> None:
        while time.monotonic() < self.stop:
            await self.one()


async def scale_worker(kind: str, url: str, name: str, seconds: float) -> dict[str, Any]:
    """One process of the scale run: its tasks' admission latencies (ms) and its refusals."""
    client = redis.asyncio.Redis.from_url(url)
    try:
        await client.incr(f"{name}:ready")
        while not await client.exists(f"{name}:go"):
            await asyncio.sleep(0.01)
        tasks = ScaleTasks(kind, client, name, time.monotonic() + seconds)
        running = [asyncio.create_task(tasks.loop()) for _ in range(SCALE_TASKS)]
        await asyncio.sleep(seconds)
        if kind == "RedisGate":  # the waiters left: a cancelled admission leaves the queue at once
            for task in running:  # (redis-py's Lock is not cancelled: a cancelled command can hang)
                task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        await tasks.gate.aclose()
    finally:
        await client.aclose()
    return {"latencies": tasks.latencies, **tasks.counts}


async def server_cpu(url: str) -> float:
    """The server's CPU seconds so far (user + system: its commands, its network, its timers)."""
    client = redis.asyncio.Redis.from_url(url)
    try:
        cpu = await client.info("cpu")
    finally:
        await client.aclose()
    return float(cpu["used_cpu_user"] + cpu["used_cpu_sys"])


def at_scale(kind: str, url: str, seconds: float) -> dict[str, float]:
    """One scale run of ``kind`` (see the module's docstring): its figures."""
    name = f"bench-{uuid.uuid4().hex[:8]}"
    command = [sys.executable, __file__, "--scale-worker", kind, url, name, str(seconds)]
    workers = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(SCALE_PROCESSES)]

    async def go() -> float:
        client = redis.asyncio.Redis.from_url(url)
        try:
            while int(await client.get(f"{name}:ready") or 0) < SCALE_PROCESSES:  # imported, connected
                await asyncio.sleep(0.05)
            before = await server_cpu(url)
            await client.set(f"{name}:go", 1)
            return before
        finally:
            await client.aclose()

    before = asyncio.run(go())
    results = [json.loads(w.communicate(timeout=seconds + 120)[0]) for w in workers]
    after = asyncio.run(server_cpu(url))
    latencies = sorted(x for r in results for x in r["latencies"])
    admitted = len(latencies)
    timed_out = sum(r["timed_out"] for r in results)
    return {
        "admissions/s": admitted / seconds,
        "p50 ms": statistics.median(latencies) if latencies else math.nan,
        "p99 ms": latencies[min(admitted - 1, int(admitted * 0.99))] if latencies else math.nan,
        "timed out %": 100 * timed_out / max(1, admitted + timed_out),
        "refused": sum(r["refused"] for r in results),
        "server cpu us/admission": (after - before) * 1e6 / max(1, admitted),
        "server cpu %": 100 * (after - before) / seconds,
    }


def scale(url: str, seconds: float) -> dict[str, dict[str, float]]:
    """Every kind's scale run on the server at ``url``, one after the other."""
    return {kind: at_scale(kind, url, seconds) for kind in SCALE_KINDS}


def print_scale(figures: dict[str, dict[str, float]], seconds: float) -> None:
    """The scale table."""
    print(
        f"At scale: {SCALE_PROCESSES} processes x {SCALE_TASKS} tasks, C={SCALE_C} (RedisGate Q={SCALE_Q}), "
        f"calls of 20-60 ms, {seconds:g} s each"
    )
    print()
    print(
        "| at scale | admissions/s | p50 ms | p99 ms | timed out | refused | "
        "Redis CPU us/admission | Redis CPU, % of a core |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for kind, f in figures.items():
        print(
            f"| {kind} | {f['admissions/s']:.0f} | {f['p50 ms']:.0f} | {f['p99 ms']:.0f} | "
            f"{f['timed out %']:.1f} % | {f['refused']:.0f} | {f['server cpu us/admission']:.0f} | "
            f"{f['server cpu %']:.0f} |"
        )


def print_steady(steady: dict[str, tuple[float, float | None, float | None, float]]) -> None:
    """The table of what a busy machine does not move."""
    print("| uncontended pair | round trips | client instructions | server instructions | server us |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for kind in ("RedisGate", RATED, "redis-py Lock"):
        trips, count, on_server, server = steady[kind]
        shown = [
            "n/a (no valgrind)" if value is None else f"{value:,.0f} ({value / theirs:.2f}x)"
            for value, theirs in (
                (count, steady["redis-py Lock"][1]),
                (on_server, steady["redis-py Lock"][2]),
            )
        ]
        print(f"| {kind} | {trips:.2f} | {shown[0]} | {shown[1]} | {server:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", nargs=5)
    parser.add_argument("--pairs", nargs=3)
    parser.add_argument(
        "--server-instructions", action="store_true", help="only the server's instructions per pair"
    )
    parser.add_argument("--scale", action="store_true", help="only the scale table (RedisGate beside Locks)")
    parser.add_argument("--seconds", type=float, default=SCALE_SECONDS, help="each scale run's length")
    parser.add_argument("--scale-worker", nargs=4)
    args = parser.parse_args()
    if args.scale_worker:
        kind, url, name, seconds = args.scale_worker
        print(json.dumps(asyncio.run(scale_worker(kind, url, name, float(seconds)))))
        return
    if args.scale:
        process, port, folder = start_server()
        try:
            figures = scale(f"redis://127.0.0.1:{port}/0", args.seconds)
        finally:
            process.terminate()
            process.wait()
            folder.cleanup()
        print_scale(figures, args.seconds)
        return
    if args.pairs:
        kind, url, n = args.pairs
        asyncio.run(pairs(kind, url, int(n)))
        return
    if args.worker:
        kind, url, name, c, tasks = args.worker
        print(asyncio.run(worker(kind, url, name, int(c), int(tasks), SECONDS)))
        return
    if args.server_instructions:
        for kind in ("RedisGate", RATED, "redis-py Lock"):
            print(f"{kind}: {server_instructions(kind) or 0:,.0f} server instructions per uncontended pair")
        print(f"RedisGate: {handoff_server_instructions() or 0:,.0f} server instructions per hand-off at C=1")
        return
    run(args.rounds, args.seconds)


def run(rounds: int, seconds: float) -> None:
    """Every figure, printed as tables."""
    process, port, folder = start_server()
    url = f"redis://127.0.0.1:{port}/0"
    results: dict[str, list[float]] = {}
    steady: dict[str, tuple[float, float | None, float | None, float]] = {}
    try:
        for kind in ("RedisGate", RATED, "redis-py Lock"):
            trips = asyncio.run(pairs(kind, url, 200, counting=True))
            spent = asyncio.run(server_time(kind, url))
            steady[kind] = (trips, instructions(kind, url), server_instructions(kind), spent)
        handoff = handoff_server_instructions()
        at_scale_figures = scale(url, seconds)
        for _ in range(rounds):
            for kind in ("BoundedGate", "RedisGate", RATED, "redis-py Lock"):
                results.setdefault(f"latency {kind}", []).append(asyncio.run(latency(kind, url)) * 1e6)
            for c in (1, 4):
                for kind in ("BoundedGate", "RedisGate", "redis-py Lock"):
                    if kind == "redis-py Lock" and c != 1:
                        continue
                    results.setdefault(f"handoff C={c} {kind}", []).append(throughput(kind, url, c))
    finally:
        process.terminate()
        process.wait()
        folder.cleanup()
    median = {key: statistics.median(values) for key, values in results.items()}
    print(f"redis-server on loopback; {rounds} rounds, medians; {PROCESSES} processes x {TASKS} tasks")
    print()
    print("| admission latency (uncontended pair) | us per pair | RedisGate is |")
    print("| --- | ---: | ---: |")
    for kind in ("BoundedGate", "RedisGate", RATED, "redis-py Lock"):
        value = median[f"latency {kind}"]
        ratio = median["latency RedisGate"] / value
        print(f"| {kind} | {value:.1f} | {ratio:.2f}x its time |")
    print()
    print_steady(steady)
    if handoff is not None:
        print(f"\nThe server's instructions per hand-off at C=1 (2 processes x 4 tasks): {handoff:,.0f}")
    print()
    print("| hand-off throughput | C | hand-offs/s | RedisGate is |")
    print("| --- | ---: | ---: | ---: |")
    for c in (1, 4):
        for kind in ("BoundedGate", "RedisGate", "redis-py Lock"):
            key = f"handoff C={c} {kind}"
            if key not in median:
                continue
            ratio = median[f"handoff C={c} RedisGate"] / median[key]
            print(f"| {kind} | {c} | {median[key]:.0f} | {ratio:.2f}x its rate |")
    print()
    print_scale(at_scale_figures, seconds)
    print()
    print(json.dumps({k: round(v, 1) for k, v in median.items()}))


if __name__ == "__main__":
    main()
