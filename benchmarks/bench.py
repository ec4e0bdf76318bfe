"""Side-by-side benchmarks: boundedgate against the primitives it replaces, in one process.

Run ``python benchmarks/bench.py`` (or ``make bench``). Each scenario runs every contender once per
round, in a rotated order, for several rounds; the table shows medians and ratios. These machines
are shared and noisy: compare within one run, never across runs, and never assert a time in a test.

With ``--compiled DIR`` (``make bench`` passes ``build/compiled`` when ``make compiled`` built it),
the whole run is made twice, on the pure-Python build and on the compiled one, and the targets'
table shows both builds' ratios side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from contenders import (
    CapacityLimiter,
    EmptyCM,
    FloorHandOff,
    Gate,
    HandWritten,
    RaisingCM,
    Refused,
    Semaphore,
)

from boundedgate import BoundedGate, KeyedGate, QueueExpired, RateLimit, admit_all

Runner = Callable[[], Awaitable[float]]


@dataclass
class Scenario:
    title: str
    unit: str
    baseline: str
    rows: dict[str, Runner] = field(default_factory=dict)
    times: dict[str, list[float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def run(self, rounds: int) -> None:
        names = list(self.rows)
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                gc.collect()
                self.times.setdefault(name, []).append(asyncio.run(self.rows[name]()))

    def table(self) -> str:
        base = statistics.median(self.times[self.baseline])
        number = self.title.partition(".")[0]
        targets = [f"{row} <= {target:.1f}x" for row, key, *_, target in TARGETS if key == number]
        lines = [
            f"### {self.title}",
            "",
            f"Target: {'; '.join(targets) or 'none set'}",
            "",
            f"| contender | median {self.unit} | ratio to {self.baseline} |",
            "| --- | ---: | ---: |",
        ]
        for name, samples in self.times.items():
            med = statistics.median(samples)
            lines.append(f"| {name} | {med:,.2f} | {med / base:.2f}x |")
        lines += ["", *self.notes]
        return "\n".join(lines)


def per_op(seconds: float, n: int) -> float:
    return seconds / n * 1e6


# -- 1. uncontended admit/release ---------------------------------------------------------------


def uncontended(n: int) -> Scenario:
    sc = Scenario(
        "1. Uncontended admit/release pair",
        "µs per pair",
        "asyncio.Semaphore",
    )

    def run(make: Callable[[], Any], timed: bool = False) -> Runner:
        async def go() -> float:
            contender = make()
            cm = (lambda: contender.timed(30.0)) if timed else contender.cm
            start = time.perf_counter()
            for _ in range(n):
                async with cm():
                    pass
            return per_op(time.perf_counter() - start, n)

        return go

    async def floor() -> float:
        start = time.perf_counter()
        for _ in range(n):
            async with EmptyCM():
                pass
        return per_op(time.perf_counter() - start, n)

    sc.rows["floor (empty async CM)"] = floor
    sc.rows["asyncio.Semaphore"] = run(lambda: Semaphore(1, 0))
    sc.rows["anyio.CapacityLimiter"] = run(lambda: CapacityLimiter(1, 0))
    sc.rows["hand-written"] = run(lambda: HandWritten(1, 0))
    sc.rows["boundedgate"] = run(lambda: Gate(1, 0))
    sc.rows["hand-written, timeout=30"] = run(lambda: HandWritten(1, 0), timed=True)
    sc.rows["boundedgate, timeout=30"] = run(lambda: Gate(1, 0), timed=True)
    return sc


# -- 2. hand-off under contention ---------------------------------------------------------------


def contended(tasks: int, iterations: int) -> Scenario:
    sc = Scenario(
        f"2. Hand-off under contention (C=8, {tasks} tasks x {iterations} admissions)",
        "µs per admission",
        "asyncio.Semaphore",
    )
    total = tasks * iterations

    def run(make: Callable[[], Any], timed: bool = False) -> Runner:
        async def go() -> float:
            contender = make()
            cm = (lambda: contender.timed(60.0)) if timed else contender.cm

            async def worker() -> None:
                for _ in range(iterations):
                    async with cm():
                        await asyncio.sleep(0)

            start = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(tasks)))
            return per_op(time.perf_counter() - start, total)

        return go

    sc.rows["floor (bare future hand-off)"] = run(lambda: FloorHandOff(8, None))
    sc.rows["asyncio.Semaphore"] = run(lambda: Semaphore(8, None))
    sc.rows["anyio.CapacityLimiter"] = run(lambda: CapacityLimiter(8, None))
    sc.rows["boundedgate"] = run(lambda: Gate(8, None))
    sc.rows["hand-written, timeout=60"] = run(lambda: HandWritten(8, None), timed=True)
    sc.rows["boundedgate, timeout=60"] = run(lambda: Gate(8, None), timed=True)
    sc.notes.append(
        "Each admission's body yields once (`await asyncio.sleep(0)`), so slots turn over and "
        "every admission after the first eight goes through the queue."
    )
    return sc


# -- 3. rejection -------------------------------------------------------------------------------


def rejection(n: int) -> Scenario:
    sc = Scenario(
        "3. Rejection path (gate full, every attempt refused)",
        "µs per refusal",
        "floor (raise and catch)",
    )

    async def floor() -> float:
        start = time.perf_counter()
        for _ in range(n):
            try:
                async with RaisingCM():
                    pass
            except Refused:
                pass
        return per_op(time.perf_counter() - start, n)

    def run(make: Callable[[], Any]) -> Runner:
        async def go() -> float:
            contender = make()
            held = contender.cm()
            await held.__aenter__()
            cm, refused = contender.cm, contender.refused
            start = time.perf_counter()
            for _ in range(n):
                try:
                    async with cm():
                        pass
                except refused:
                    pass
            elapsed = time.perf_counter() - start
            await held.__aexit__(None, None, None)
            return per_op(elapsed, n)

        return go

    sc.rows["floor (raise and catch)"] = floor
    sc.rows["hand-written"] = run(lambda: HandWritten(1, 0))
    sc.rows["boundedgate"] = run(lambda: Gate(1, 0))
    sc.notes.append(
        "The floor is an async context manager whose `__aenter__` raises a plain exception, caught "
        "by the caller: the least any refusal through `async with` can cost."
    )
    return sc


# -- 4. expiry of many queued waiters -----------------------------------------------------------


def deadlines(n: int, seed: int = 1) -> list[float]:
    rng = random.Random(seed)
    return [rng.uniform(0.05, 0.5) for _ in range(n)]


def expiry(n: int) -> Scenario:
    sc = Scenario(
        f"4. Expiry of {n:,} queued waiters, deadlines spread over 0.05-0.5 s",
        "s until the last expired",
        "floor (future + timer per waiter)",
    )
    budgets = deadlines(n)

    async def floor() -> float:
        loop = asyncio.get_running_loop()

        async def waiter(budget: float) -> None:
            fut = loop.create_future()
            handle = loop.call_at(loop.time() + budget, fut.set_exception, Refused())
            try:
                await fut
            finally:
                handle.cancel()

        start = time.perf_counter()
        await asyncio.gather(*(waiter(b) for b in budgets), return_exceptions=True)
        return time.perf_counter() - start

    async def hand_written() -> float:
        contender = HandWritten(1, None)
        held = contender.cm()
        await held.__aenter__()

        async def waiter(budget: float) -> None:
            async with contender.timed(budget):
                pass

        start = time.perf_counter()
        await asyncio.gather(*(waiter(b) for b in budgets), return_exceptions=True)
        elapsed = time.perf_counter() - start
        await held.__aexit__(None, None, None)
        return elapsed

    async def gate() -> float:
        g = BoundedGate(max_running=1, max_waiting=None)
        held = g.try_admit()

        async def waiter(budget: float) -> None:
            async with g.admit(timeout=budget):
                pass

        start = time.perf_counter()
        results = await asyncio.gather(*(waiter(b) for b in budgets), return_exceptions=True)
        elapsed = time.perf_counter() - start
        assert all(isinstance(r, QueueExpired) for r in results)
        held.release()
        return elapsed

    sc.rows["floor (future + timer per waiter)"] = floor
    sc.rows["hand-written (asyncio.timeout per waiter)"] = hand_written
    sc.rows["boundedgate"] = gate
    return sc


# -- 5. rate limits --------------------------------------------------------------------------


def rate_limited(n: int) -> Scenario:
    sc = Scenario(
        "7. Admission through a gate with rate limits (buckets never run dry)",
        "µs per pair",
        "gate alone",
    )
    plenty = 10.0**9

    def run(limits: list[RateLimit], max_running: int | None = 1, cost: float | None = None) -> Runner:
        async def go() -> float:
            gate = BoundedGate(max_running=max_running, max_waiting=0, rate_limits=limits)
            admit = gate.admit
            start = time.perf_counter()
            for _ in range(n):
                async with admit(cost=cost):
                    pass
            return per_op(time.perf_counter() - start, n)

        return go

    rpm = RateLimit.per_second(plenty, name="rpm")
    tpm = RateLimit.per_second(plenty, unit="tokens", name="tpm")
    sc.rows["gate alone"] = run([])
    sc.rows["gate + requests/min"] = run([rpm])
    sc.rows["gate + requests/min + tokens/min"] = run([rpm, tpm], cost=500)
    sc.rows["rate limiter alone (max_running=None)"] = run([rpm], max_running=None)
    return sc


async def memory_per_waiter(n: int) -> tuple[float, float, int]:
    """Bytes per parked waiter beyond the caller's own task, the gate's and the floor's; tasks per waiter."""
    loop = asyncio.get_running_loop()
    parked = loop.create_future()

    class Baseline:
        __slots__ = ()

        async def __aenter__(self) -> None:
            await parked

        async def __aexit__(self, *exc: object) -> None:
            return None

    async def measure(cm: Callable[[], Any]) -> tuple[int, int]:
        async def waiter() -> None:
            async with cm():
                pass

        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        tasks = [asyncio.ensure_future(waiter()) for _ in range(n)]
        for _ in range(3):
            await asyncio.sleep(0)
        used = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        alive = len(asyncio.all_tasks()) - 1
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return used, alive

    class Floor:
        # What the expiry floor parks per waiter: a future of its own and a timer.
        __slots__ = ("handle",)

        async def __aenter__(self) -> None:
            fut = loop.create_future()
            self.handle = loop.call_at(loop.time() + 3600, fut.set_result, None)
            await fut

        async def __aexit__(self, *exc: object) -> None:
            self.handle.cancel()

    base, _ = await measure(Baseline)
    floor, _ = await measure(Floor)
    gate = BoundedGate(max_running=1, max_waiting=None)
    held = gate.try_admit()
    used, alive = await measure(lambda: gate.admit(timeout=3600))
    held.release()
    return (used - base) / n, (floor - base) / n, alive - n


# -- 5. keyed admission ------------------------------------------------------------------------


def keyed(n: int, keys: int) -> Scenario:
    sc = Scenario(
        f"5. Keyed admission over {keys:,} keys (uncontended admit/release pairs, keys in turn)",
        "µs per pair",
        "BoundedGate (one gate)",
    )
    names = [f"tenant-{i}" for i in range(keys)]

    async def one_gate() -> float:
        gate = BoundedGate(max_running=1, max_waiting=0)
        start = time.perf_counter()
        for _ in range(n):
            async with gate.admit():
                pass
        return per_op(time.perf_counter() - start, n)

    async def dict_of_gates() -> float:
        gates: dict[str, BoundedGate] = {}
        start = time.perf_counter()
        for i in range(n):
            key = names[i % keys]
            gate = gates.get(key)
            if gate is None:
                gate = gates[key] = BoundedGate(max_running=1, max_waiting=0, name=key)
            async with gate.admit():
                pass
        elapsed = time.perf_counter() - start
        assert len(gates) == keys  # every key ever seen stays: the leak KeyedGate avoids
        return per_op(elapsed, n)

    def keyed_gate(keep_idle: int, distinct: int) -> Runner:
        async def go() -> float:
            gates: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, keep_idle=keep_idle)
            admit = gates.admit
            start = time.perf_counter()
            for i in range(n):
                async with admit(names[i % distinct]):
                    pass
            elapsed = time.perf_counter() - start
            assert len(gates) == min(keep_idle, distinct)
            return per_op(elapsed, n)

        return go

    sc.rows["BoundedGate (one gate)"] = one_gate
    sc.rows["dict of BoundedGates, never dropped (hand-written)"] = dict_of_gates
    sc.rows["KeyedGate, one key"] = keyed_gate(0, 1)
    sc.rows[f"KeyedGate, keep_idle={keys:,} (gates reused)"] = keyed_gate(keys, keys)
    sc.rows["KeyedGate, keep_idle=0 (a gate made and dropped per admission)"] = keyed_gate(0, keys)
    sc.notes.append(
        "Every admission finds its key idle. With `keep_idle=0` (the default) each one creates the "
        "key's gate and drops it on release, the cost of never holding an idle key; with "
        "`keep_idle` at least the number of keys, gates are kept and reused, as in the hand-written "
        "dict, which keeps every key it ever saw."
    )
    return sc


# -- 6. three-gate admission ----------------------------------------------------------------------


def three_gates(n: int) -> Scenario:
    sc = Scenario(
        "6. Three-gate admission (tenant, model, provider; uncontended)",
        "µs per admission",
        "BoundedGate (one gate)",
    )

    def plain() -> list[BoundedGate]:
        return [BoundedGate(max_running=1, max_waiting=0, name=name) for name in ("t", "m", "p")]

    async def one_gate() -> float:
        gate = BoundedGate(max_running=1, max_waiting=0)
        start = time.perf_counter()
        for _ in range(n):
            async with gate.admit(timeout=30):
                pass
        return per_op(time.perf_counter() - start, n)

    async def nested() -> float:
        a, b, c = plain()
        start = time.perf_counter()
        for _ in range(n):
            async with a.admit(timeout=30), b.admit(timeout=30), c.admit(timeout=30):
                pass
        return per_op(time.perf_counter() - start, n)

    async def combined() -> float:
        a, b, c = plain()
        start = time.perf_counter()
        for _ in range(n):
            async with admit_all(a, b, c, timeout=30):
                pass
        return per_op(time.perf_counter() - start, n)

    async def combined_keyed() -> float:
        tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, name="tenant", keep_idle=8)
        models: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, name="model", keep_idle=8)
        provider = BoundedGate(max_running=1, max_waiting=0, name="openai")
        start = time.perf_counter()
        for _ in range(n):
            async with admit_all((tenants, "acme"), (models, "gpt-4o"), provider, timeout=30):
                pass
        return per_op(time.perf_counter() - start, n)

    sc.rows["BoundedGate (one gate)"] = one_gate
    sc.rows["three nested async with (no rollback, no shared deadline)"] = nested
    sc.rows["admit_all of three gates"] = combined
    sc.rows["admit_all: tenant key, model key, provider"] = combined_keyed
    sc.notes.append(
        "Every row gives each admission a 30 s deadline. The nested row is what a user writes "
        "without `admit_all`: each gate gets its own 30 s rather than what is left of one budget, "
        "and nothing checks that every caller takes the gates in the same order."
    )
    return sc


# -- 8. the first call in a fresh process ----------------------------------------------------------


class FirstCalls(Scenario):
    """Each path timed in fresh processes (``first_call.py``): its first call, and its steady state."""

    PATHS: ClassVar[dict[str, str]] = {
        "admit": "admit()",
        "stream": "gate.stream()",
        "transport": "GatedTransport request",
    }

    def __init__(self) -> None:
        super().__init__("8. The first call in a fresh process, against the steady state", "µs", "")
        self.notes.append(
            "Each round runs each path in a new process: after `import boundedgate` and the path's "
            "setup, its first call is timed, then 200 more, whose last 100 give the steady state "
            "(their median). The transport's inner httpx transport has sent a request of its own "
            "first, on the connection the gated client reuses. A first call costs more than a warm "
            "one (cold caches, code run for the first time); what it must not do is import."
        )

    def run(self, rounds: int) -> None:
        here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "first_call.py")
        for _ in range(rounds):
            for path, shown in self.PATHS.items():
                done = subprocess.run(
                    [sys.executable, here, path], capture_output=True, text=True, check=False
                )
                if done.returncode != 0:  # httpx missing, say: the row is left out, with the reason
                    self.notes.append(f"{shown}: not run ({done.stderr.strip().splitlines()[-1]})")
                    continue
                times = json.loads(done.stdout)
                self.times.setdefault(f"{shown}: first call", []).append(times["first"])
                self.times.setdefault(f"{shown}: steady state", []).append(times["steady"])
        self.notes = list(dict.fromkeys(self.notes))

    def table(self) -> str:
        number = self.title.partition(".")[0]
        targets = [f"{row} <= {target:.0f}x" for row, key, *_, target in TARGETS if key == number]
        lines = [
            f"### {self.title}",
            "",
            f"Target: {'; '.join(targets)}",
            "",
            "| path | first call, median µs | steady state, median µs | first / steady |",
            "| --- | ---: | ---: | ---: |",
        ]
        for shown in self.PATHS.values():
            if f"{shown}: first call" not in self.times:
                continue
            first = statistics.median(self.times[f"{shown}: first call"])
            steady = statistics.median(self.times[f"{shown}: steady state"])
            lines.append(f"| {shown} | {first:,.1f} | {steady:,.2f} | {first / steady:.1f}x |")
        lines += ["", *self.notes]
        return "\n".join(lines)


#: The performance targets this script measures: (row, scenario number, contender, baseline, target).
TARGETS = (
    ("uncontended admit+release vs asyncio.Semaphore", "1", "boundedgate", "asyncio.Semaphore", 1.0),
    ("contended hand-off (C=8) vs asyncio.Semaphore", "2", "boundedgate", "asyncio.Semaphore", 1.0),
    (
        "contended, a deadline on every call, vs hand-written semaphore + asyncio.timeout",
        "2",
        "boundedgate, timeout=60",
        "hand-written, timeout=60",
        0.5,
    ),
    ("refusal vs the floor (compare + raise + catch)", "3", "boundedgate", "floor (raise and catch)", 1.2),
    ("expiry of queued waiters vs the floor", "4", "boundedgate", "floor (future + timer per waiter)", 1.1),
    (
        "KeyedGate over 10k keys, gate made per call (keep_idle=0), vs one gate",
        "5",
        "KeyedGate, keep_idle=0 (a gate made and dropped per admission)",
        "BoundedGate (one gate)",
        1.5,
    ),
    (
        "admit_all of three gates vs three nested async with",
        "6",
        "admit_all of three gates",
        "three nested async with (no rollback, no shared deadline)",
        1.1,
    ),
    (
        "the first gate.stream() in a fresh process vs its steady state",
        "8",
        "gate.stream(): first call",
        "gate.stream(): steady state",
        20.0,
    ),
    (
        "the first GatedTransport request in a fresh process vs its steady state",
        "8",
        "GatedTransport request: first call",
        "GatedTransport request: steady state",
        20.0,
    ),
)


Row = tuple[str, str, str, bool]  # the row, the ratio as shown, the target as shown, met


def summary_rows(done: dict[str, Scenario], memory: tuple[float, float] | None) -> list[Row]:
    """The targets' rows as ratios of medians from this run, each beside its target."""
    rows: list[Row] = []
    for row, key, contender, baseline, target in TARGETS:
        if key not in done or contender not in done[key].times:
            continue
        times = done[key].times
        ratio = statistics.median(times[contender]) / statistics.median(times[baseline])
        rows.append((row, f"{ratio:.2f}x", f"<= {target:.1f}x", ratio <= target))
    if memory is not None:
        gate, floor = memory
        rows.append(
            (
                "memory per queued waiter vs the floor",
                f"{gate:,.0f} B vs {floor:,.0f} B",
                "<= floor + 200 B",
                gate <= floor + 200,
            )
        )
    return rows


def summary(builds: dict[str, list[Row]]) -> str:
    """The targets' table: each row's ratio in each build, its target, and whether each meets it."""
    names = list(builds)
    first = builds[names[0]]
    lines = [
        "### The targets (ratios of medians in this run)",
        "",
        f"| row | {' | '.join(names)} | target | met ({', '.join(names)}) |",
        f"| --- |{' ---: |' * len(names)} ---: | --- |",
    ]
    for i, (row, _, target, _) in enumerate(first):
        shown = " | ".join(builds[name][i][1] for name in names)
        met = ", ".join("yes" if builds[name][i][3] else "no" for name in names)
        lines.append(f"| {row} | {shown} | {target} | {met} |")
    lines += ["", "The RedisGate rows: `make bench-redis` (bench_redis.py), against a real redis-server."]
    return "\n".join(lines)


def both_builds(compiled: str, argv: list[str]) -> None:
    """Run this script on the pure build, then on the compiled one in ``compiled``, and compare them."""
    rows: dict[str, list[Row]] = {}
    for build in ("pure", "compiled"):
        env = {k: v for k, v in os.environ.items() if k != "BOUNDEDGATE_NO_EXTENSIONS"}
        if build == "pure":
            env["BOUNDEDGATE_NO_EXTENSIONS"] = "1"
        else:
            env["PYTHONPATH"] = os.pathsep.join(
                filter(None, (os.path.abspath(compiled), env.get("PYTHONPATH")))
            )
        print(f"## The {build} build\n", flush=True)
        with tempfile.NamedTemporaryFile("r", suffix=".json") as out:
            subprocess.run(
                [sys.executable, __file__, *argv, "--rows", out.name, "--build", build], env=env, check=True
            )
            rows[build] = [tuple(row) for row in json.load(out)]  # type: ignore[misc]
    print(summary(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--only", help="comma-separated scenario numbers, e.g. 1,3")
    parser.add_argument(
        "--compiled", metavar="DIR", help="run on the pure build, then on the compiled one in DIR"
    )
    parser.add_argument(
        "--rows", help=argparse.SUPPRESS
    )  # a run of both_builds(): the targets' rows, as JSON
    parser.add_argument("--build", help=argparse.SUPPRESS)  # the build that run must import
    args = parser.parse_args()
    if args.compiled:
        argv = [a for a in sys.argv[1:] if a not in ("--compiled", args.compiled)]
        both_builds(args.compiled, argv)
        return
    import boundedgate

    if args.build is not None and boundedgate.COMPILED is not (args.build == "compiled"):
        sys.exit(f"expected the {args.build} build, got COMPILED={boundedgate.COMPILED}")
    scale = 10 if args.quick else 1
    scenarios = {
        "1": lambda: uncontended(100_000 // scale),
        "2": lambda: contended(256, 200 // scale),
        "3": lambda: rejection(100_000 // scale),
        "4": lambda: expiry(100_000 // scale),
        "5": lambda: keyed(100_000 // scale, 10_000),
        "6": lambda: three_gates(100_000 // scale),
        "7": lambda: rate_limited(100_000 // scale),
        "8": FirstCalls,
    }
    chosen = args.only.split(",") if args.only else list(scenarios)
    build = "compiled" if boundedgate.COMPILED else "pure Python"
    print(f"Python {sys.version.split()[0]}, the {build} build, {args.rounds} rounds, medians\n")
    done: dict[str, Scenario] = {}
    for key in chosen:
        sc = done[key] = scenarios[key]()
        sc.run(args.rounds)
        print(sc.table(), "\n", flush=True)
    memory = None
    if "4" in chosen:
        per_waiter, floor, extra_tasks = asyncio.run(memory_per_waiter(20_000 // scale))
        memory = per_waiter, floor
        print(f"Memory per queued waiter, beyond the caller's task: {per_waiter:.0f} bytes ")
        print(f"(the floor's future and timer: {floor:.0f} bytes); ")
        print(f"tasks created per waiter beyond the caller's own: {extra_tasks}\n")
    rows = summary_rows(done, memory)
    if args.rows:
        with open(args.rows, "w") as out:
            json.dump(rows, out)
    else:
        print(summary({build: rows}))


if __name__ == "__main__":
    main()
