"""Instructions per operation, counted by valgrind's callgrind: the same figure on a busy machine.

Wall-clock ratios on a shared 2-core machine swing from run to run; instruction counts do not. Each
scenario runs twice under ``valgrind --tool=callgrind`` with two iteration counts, and the difference
divided by the difference in iterations is the cost of one operation, startup excluded. Run with
``make bench-instructions`` (or ``python instructions.py [--compiled DIR]``); it takes a few minutes.

Each scenario is counted on the pure-Python build (``BOUNDEDGATE_NO_EXTENSIONS=1``) and, given
``--compiled DIR`` (``make compiled`` builds ``build/compiled``), on the compiled one: both in one run.

The scenarios also take the hot path apart, so that the README can say where the time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from contenders import EmptyCM, HandWritten, RaisingCM, Refused

from boundedgate import BoundedGate, KeyedGate, QueueFull, admit_all
from boundedgate._core import GateState, Ticket
from boundedgate._driver._compat import clock_of, current_task, is_cancelling

Scenario = Callable[[int], Coroutine[Any, Any, None]]
SCENARIOS: dict[str, tuple[str, Scenario]] = {}


def scenario(name: str, what: str) -> Callable[[Scenario], Scenario]:
    def register(run: Scenario) -> Scenario:
        SCENARIOS[name] = (what, run)
        return run

    return register


@scenario("floor", "an empty async context manager (the floor of any `async with`)")
async def floor(n: int) -> None:
    for _ in range(n):
        async with EmptyCM():
            pass


@scenario("semaphore", "asyncio.Semaphore, uncontended")
async def semaphore(n: int) -> None:
    sem = asyncio.Semaphore(1)
    for _ in range(n):
        async with sem:
            pass


@scenario("hand-written", "semaphore + waiter counter (+ asyncio.timeout when waiting), uncontended")
async def hand_written(n: int) -> None:
    gate = HandWritten(1, 0)
    for _ in range(n):
        async with gate.cm():
            pass


@scenario("gate", "BoundedGate admit/release, uncontended")
async def gate_pair(n: int) -> None:
    admit = BoundedGate(max_running=1, max_waiting=0).admit
    for _ in range(n):
        async with admit():
            pass


@scenario("gate-timeout", "the same with timeout=30")
async def gate_pair_timeout(n: int) -> None:
    admit = BoundedGate(max_running=1, max_waiting=0).admit
    for _ in range(n):
        async with admit(timeout=30):
            pass


@scenario("part:admit", "part of the pair: gate.admit() making the per-request Permit")
async def part_admit(n: int) -> None:
    admit = BoundedGate(max_running=1, max_waiting=0).admit
    for _ in range(n):
        admit()


@scenario("part:core", "part of the pair: the decision core's arrive() and release() on a ticket")
async def part_core(n: int) -> None:
    state = GateState(1, 0)
    for _ in range(n):
        ticket = Ticket()
        state.arrive(ticket, 1.0)
        state.release(ticket, 2.0)


@scenario("part:ticket", "part of part:core: making a Ticket")
async def part_ticket(n: int) -> None:
    for _ in range(n):
        Ticket()


@scenario("part:clock+task", "part of the pair: two clock reads, as the gate reads them, and the task check")
async def part_clock_task(n: int) -> None:
    loop = asyncio.get_running_loop()
    clock = clock_of(loop)  # time.monotonic on asyncio's loop
    for _ in range(n):
        task = current_task(loop)
        is_cancelling(task)  # type: ignore[arg-type]
        clock()
        clock()


# The refusals are caught with try/except, as bench.py catches them: a `contextlib.suppress` around
# each would add its own cost (some 4k instructions) to the floor and the gate alike, and flatter
# the ratio.
@scenario("refusal-floor", "an async context manager whose entry raises a plain exception, caught")
async def refusal_floor(n: int) -> None:
    for _ in range(n):
        try:
            async with RaisingCM():
                pass
        except Refused:
            pass


@scenario("refusal-hand-written", "the hand-written gate refusing")
async def refusal_hand_written(n: int) -> None:
    gate = HandWritten(1, 0)
    held = gate.cm()
    await held.__aenter__()
    for _ in range(n):
        try:
            async with gate.cm():
                pass
        except Refused:
            pass


@scenario("refusal-gate", "BoundedGate refusing with QueueFull")
async def refusal_gate(n: int) -> None:
    gate = BoundedGate(max_running=1, max_waiting=0)
    holder = gate.try_admit()
    admit = gate.admit
    for _ in range(n):
        try:
            async with admit():
                pass
        except QueueFull:
            pass
    holder.release()


def _budgets(n: int) -> list[float]:
    rng = random.Random(1)
    return [rng.uniform(0.05, 0.5) for _ in range(n)]


@scenario("expiry-floor", "n waiters parked on a future of their own with a timer each, all expiring")
async def expiry_floor(n: int) -> None:
    loop = asyncio.get_running_loop()

    async def waiter(budget: float) -> None:
        future = loop.create_future()
        timer = loop.call_at(loop.time() + budget, future.set_exception, Refused())
        try:
            await future
        finally:
            timer.cancel()

    await asyncio.gather(*map(waiter, _budgets(n)), return_exceptions=True)


@scenario("expiry-gate", "n waiters queued at a full BoundedGate, all leaving with QueueExpired")
async def expiry_gate(n: int) -> None:
    gate = BoundedGate(max_running=1, max_waiting=None)
    holder = gate.try_admit()

    async def waiter(budget: float) -> None:
        async with gate.admit(timeout=budget):
            pass

    await asyncio.gather(*map(waiter, _budgets(n)), return_exceptions=True)
    holder.release()


def _contended(make: Callable[[], Callable[[], Any]]) -> Scenario:
    # `make()` returns what each admission calls to get its async context manager.
    async def run(n: int) -> None:
        cm = make()

        async def worker(k: int) -> None:
            for _ in range(k):
                async with cm():
                    await asyncio.sleep(0)

        await asyncio.gather(*(worker(n // 64) for _ in range(64)))

    return run


def _semaphore() -> Callable[[], Any]:
    sem = asyncio.Semaphore(8)
    return lambda: sem


def _gate() -> Callable[[], Any]:
    return BoundedGate(max_running=8, max_waiting=None).admit


def _gate_timeout() -> Callable[[], Any]:
    gate = BoundedGate(max_running=8, max_waiting=None)
    return lambda: gate.admit(timeout=60)


def _hand_written_timeout() -> Callable[[], Any]:
    gate = HandWritten(8, None)
    return lambda: gate.timed(60)


SCENARIOS["contended-semaphore"] = (
    "asyncio.Semaphore(8), 64 tasks, each admission yielding once",
    _contended(_semaphore),
)
SCENARIOS["contended-gate"] = ("BoundedGate(8), the same", _contended(_gate))
SCENARIOS["contended-gate-timeout"] = (
    "BoundedGate(8) with timeout=60 on every admission",
    _contended(_gate_timeout),
)
SCENARIOS["contended-hand-written-timeout"] = (
    "hand-written gate with timeout=60 on every admission",
    _contended(_hand_written_timeout),
)


@scenario("keyed-per-call", "KeyedGate, keep_idle=0, 10,000 keys in turn: a gate made and dropped per pair")
async def keyed_per_call(n: int) -> None:
    names = [f"tenant-{i}" for i in range(10_000)]
    admit = KeyedGate(max_running=1, max_waiting=0).admit
    for i in range(n):
        async with admit(names[i % 10_000]):
            pass


@scenario("nested-3", "three gates, nested `async with`, timeout=30 each")
async def nested_three(n: int) -> None:
    a, b, c = (BoundedGate(max_running=1, max_waiting=0, name=name) for name in "tmp")
    for _ in range(n):
        async with a.admit(timeout=30), b.admit(timeout=30), c.admit(timeout=30):
            pass


@scenario("admit-all-3", "admit_all of the same three gates, timeout=30")
async def admit_all_three(n: int) -> None:
    a, b, c = (BoundedGate(max_running=1, max_waiting=0, name=name) for name in "tmp")
    for _ in range(n):
        async with admit_all(a, b, c, timeout=30):
            pass


#: The performance targets that instruction counts can speak to: (row, scenario, baseline, target of
#: the compiled build, guard rail of the pure one); None where a build has none.
RATIOS: tuple[tuple[str, str, str, float | None, float | None], ...] = (
    ("uncontended admit+release vs asyncio.Semaphore", "gate", "semaphore", 1.0, 2.5),
    ("contended hand-off (C=8) vs asyncio.Semaphore", "contended-gate", "contended-semaphore", 1.05, 2.0),
    (
        "contended, a deadline on every call, vs hand-written semaphore + asyncio.timeout",
        "contended-gate-timeout",
        "contended-hand-written-timeout",
        0.5,
        None,
    ),
    ("refusal vs the floor (compare + raise + catch)", "refusal-gate", "refusal-floor", None, None),
    ("expiry of queued waiters vs the floor (future + timer each)", "expiry-gate", "expiry-floor", 1.1, None),
    ("KeyedGate over 10k keys, gate made per call, vs one gate", "keyed-per-call", "gate", 2.0, None),
    ("admit_all of three gates vs three nested async with", "admit-all-3", "nested-3", None, None),
)


def _limit(target: float | None) -> str:
    return "" if target is None else f"<= {target:.2f}x"


def _met(ratio: float, limit: float | None) -> str:
    if limit is None:
        return "-"
    return "yes" if ratio <= limit else "no"


def ratio_table(per_op: dict[str, dict[str, float]]) -> str:
    """The targets' rows as ratios of instructions per build, with the compiled build's target and
    the pure build's guard rail, and whether each build meets its own."""
    builds = list(per_op)
    lines = [
        f"| row | {' | '.join(builds)} | target (compiled) | guard rail (pure) | met ({', '.join(builds)}) |",
        f"| --- |{' ---: |' * len(builds)} ---: | ---: | --- |",
    ]
    for row, name, baseline, target, rail in RATIOS:
        ratios = {build: per_op[build][name] / per_op[build][baseline] for build in builds}
        shown = " | ".join(f"{ratio:.2f}x" for ratio in ratios.values())
        limits = {build: target if build == "compiled" else rail for build in builds}
        met = ", ".join(_met(ratios[build], limits[build]) for build in builds)
        lines.append(f"| {row} | {shown} | {_limit(target)} | {_limit(rail)} | {met} |")
    return "\n".join(lines)


def environment(compiled: str | None) -> dict[str, str]:
    """The environment of a run on the pure build (``compiled`` None), or on the compiled one there."""
    env = {k: v for k, v in os.environ.items() if k != "BOUNDEDGATE_NO_EXTENSIONS"}
    env["PYTHONHASHSEED"] = "0"  # the string hash seed moves a count by a few hundred instructions
    if compiled is None:
        env["BOUNDEDGATE_NO_EXTENSIONS"] = "1"
    else:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (os.path.abspath(compiled), env.get("PYTHONPATH"))))
    return env


def check_build(env: dict[str, str], compiled: bool) -> None:
    """Fail unless ``env`` imports the build it is meant to."""
    probe = "import boundedgate; print(boundedgate.COMPILED)"
    said = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    if said.stdout.strip() != str(compiled):
        expected = "compiled" if compiled else "pure"
        sys.exit(f"expected the {expected} build, got COMPILED={said.stdout.strip()}")


def count(name: str, n: int, env: dict[str, str]) -> int:
    """Instructions of one run of scenario ``name`` with ``n`` iterations, startup included."""
    valgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    out = subprocess.run(
        [*valgrind, sys.executable, __file__, name, str(n)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stderr
    match = re.search(r"Collected : (\d+)", out)
    if match is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{out}")
    return int(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("scenario", nargs="?", help="run one scenario (as valgrind does)")
    parser.add_argument("n", nargs="?", type=int, default=0)
    parser.add_argument("--iterations", type=int, default=8000)
    parser.add_argument(
        "--compiled", metavar="DIR", help="also count the compiled build in DIR (`make compiled`)"
    )
    args = parser.parse_args()
    if args.scenario:
        asyncio.run(SCENARIOS[args.scenario][1](args.n))
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (Debian: apt-get install valgrind)")
    base, more = 1000, 1000 + args.iterations
    builds = {"pure": environment(None)}
    if args.compiled:
        builds["compiled"] = environment(args.compiled)
    for build, env in builds.items():
        check_build(env, build == "compiled")
    print(f"Instructions per operation (callgrind, CPython {sys.version.split()[0]})\n")
    print(f"| scenario | what | {' | '.join(builds)} |")
    print(f"| --- | --- |{' ---: |' * len(builds)}")
    per_op: dict[str, dict[str, float]] = {build: {} for build in builds}
    for name, (what, _) in SCENARIOS.items():
        for build, env in builds.items():
            per_op[build][name] = (count(name, more, env) - count(name, base, env)) / (more - base)
        shown = " | ".join(f"{per_op[build][name]:,.0f}" for build in builds)
        print(f"| {name} | {what} | {shown} |", flush=True)
    print("\nThe targets, as ratios of instructions (wall-clock rows: bench.py, bench_redis.py)\n")
    print(ratio_table(per_op))


if __name__ == "__main__":
    main()
