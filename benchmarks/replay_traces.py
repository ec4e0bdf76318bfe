"""The real gate on the production traces, on virtual time, beside the simulator's prediction.

Each window of ``benchmarks/traces`` goes through a real ``BoundedGate`` in the recommended
configuration (an adaptive C never above the K it was sized for, feasible admission with no Q,
each call cut off at its deadline) on an asyncio loop whose clock fast-forwards when nothing is
ready (``looptime``), to an in-process provider that behaves as ``boundedgate.sim.Provider``
does: it streams up to K answers at once, each first token ``overhead + prompt / prefill`` after
it starts and the rest of the answer at the decode speed, and answers 529 after 50 ms beyond K;
every 529 is told to the gate. Each request
declares its prompt's tokens as its cost, the size the controller compares latencies by. The same
window goes through the simulator (``compare_admission``'s ``recommended`` contender, which runs
the same decision core); the table gives both and the real run's ratio to the prediction.

What may differ: events of the same instant, which asyncio and the simulator may take in different
orders (many 529s at once, where K is short from the first instant); and a decision on the edge
(a start that just fits before its deadline), since looptime's times are whole ticks over a
million and the simulator's are sums of floats, so one run time can differ in its last bit and move
the recent pace by an ulp: a call or two.

Run: ``PYTHONPATH=src python benchmarks/replay_traces.py`` (a few seconds); with ``--real-time``,
the same on a plain asyncio loop and the wall clock, every run at once (five minutes).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import looptime
from bench_goodput import load_capacity, trace_providers, trace_windows

from boundedgate import Adaptive, BoundedGate, DeadlineCut, Infeasible, QueueExpired
from boundedgate.sim import Provider, Request, compare_admission


class Overloaded(Exception):
    """The provider's 529: more streams than it serves at once."""


class FakeProvider:
    """A provider that serves as ``model`` says: up to K streams, 529 beyond, timed by their sizes."""

    def __init__(self, model: Provider, gate: BoundedGate, start: float) -> None:
        self.model = model
        self.gate = gate
        self.start = start
        self.active = 0
        self.refused = 0

    async def stream(self, prompt_tokens: int, output_tokens: int) -> AsyncIterator[str]:
        """The answer's first chunk once the prompt is read, its last once the answer is streamed."""
        model = self.model
        if self.active >= model.k(asyncio.get_running_loop().time() - self.start):
            self.refused += 1
            await asyncio.sleep(model.refuse_seconds)
            self.gate.signal("overloaded")  # while the call holds its slot: the controller counts it
            raise Overloaded
        self.active += 1
        try:
            await asyncio.sleep(model.first_token_seconds(prompt_tokens))
            yield "first"
            await asyncio.sleep(output_tokens / model.decode_tokens_per_second)
            yield "rest"
        finally:
            self.active -= 1


@dataclass(frozen=True, slots=True)
class Replayed:
    """What became of a window's requests through the real gate."""

    outcomes: Counter[str]
    refused_by_provider: int


async def replay(jobs: Sequence[Request], model: Provider, c: int) -> Replayed:
    """Send ``jobs`` through a real gate in the recommended configuration, each at its arrival."""
    gate = BoundedGate(
        max_running=c, max_waiting=None, adaptive=Adaptive(ceiling=c), feasible=True, name="llm"
    )
    outcomes: Counter[str] = Counter()
    loop = asyncio.get_running_loop()
    start = loop.time()
    provider = FakeProvider(model, gate, start)

    async def call(job: Request) -> None:
        assert job.prompt_tokens is not None
        assert job.output_tokens is not None
        opener = gate.stream(
            lambda: provider.stream(job.prompt_tokens, job.output_tokens),  # type: ignore[arg-type]
            timeout=job.budget,
            cost=job.prompt_tokens,
            on_deadline="cut",
        )
        try:
            async with opener as stream:
                async for _ in stream:
                    pass
        except Overloaded:
            outcomes["529"] += 1
        except DeadlineCut:
            outcomes["cut"] += 1
        except Infeasible:
            outcomes["infeasible"] += 1
        except QueueExpired:
            outcomes["expired"] += 1
        else:
            outcomes["on time"] += 1

    # One task starts the calls, each at its arrival and in the traffic's order (timers due at the
    # same instant would start them in no particular order).
    calls: list[asyncio.Task[None]] = []
    for job in jobs:
        if start + job.arrival > loop.time():
            await asyncio.sleep(start + job.arrival - loop.time())
        calls.append(asyncio.create_task(call(job)))
    await asyncio.gather(*calls)
    return Replayed(outcomes, provider.refused)


def run_virtual(jobs: Sequence[Request], model: Provider, c: int) -> Replayed:
    """:func:`replay` on a fresh loop whose clock starts at 0 and jumps over idle time."""
    loop = looptime.new_event_loop(start=0, noop_cycles=1)
    try:
        return loop.run_until_complete(replay(jobs, model, c))
    finally:
        loop.close()


@dataclass(frozen=True, slots=True)
class Run:
    """One window of traffic against one of its providers, and the gate's C (the K it was sized to)."""

    window: str
    provider_name: str
    requests: list[Request]
    provider: Provider
    c: int


def runs() -> list[Run]:
    """Each window of ``benchmarks/traces`` against each of its three providers."""
    found = []
    for window in trace_windows():
        k = load_capacity(window.requests, Provider(1))
        for name, model in trace_providers(k, window.requests):
            found.append(Run(window.name, name, window.requests, model, k))
    return found


def run_real(index: int) -> Replayed:
    """:func:`replay` of the ``index``-th of :func:`runs` on a plain asyncio loop, in real time."""
    run = runs()[index]
    return asyncio.run(replay(run.requests, run.provider, run.c))


def replay_all(found: Sequence[Run], real_time: bool) -> list[Replayed]:
    """Every run through the real gate: one after another on virtual time, or all at once in real time.

    In real time each run has a process of its own: a run waits on its timers nearly all the time,
    so running them side by side takes the longest window's length (five minutes), not their sum.
    """
    if not real_time:
        return [run_virtual(run.requests, run.provider, run.c) for run in found]
    with ProcessPoolExecutor(max_workers=len(found)) as pool:
        return list(pool.map(run_real, range(len(found))))


def main() -> int:
    """Each window and provider: the simulator's answers on time and the real gate's, their ratio."""
    real_time = "--real-time" in sys.argv[1:]
    began = time.perf_counter()
    found = runs()
    replayed = replay_all(found, real_time)
    header = f"{'window':<14}{'provider':<30}{'simulated':>10}{'real':>7}{'ratio':>7}"
    header += f"{'cut':>11}{'529':>11}{'infeasible':>14}"
    print(f"the real gate on {'the wall clock' if real_time else 'virtual time'}")
    print(header)
    for run, result in zip(found, replayed, strict=True):
        comparison = compare_admission(
            run.requests, run.provider, max_running=run.c, max_waiting=None, runnings=[run.c], waitings=[None]
        )
        simulated = comparison["recommended"].result
        real = result.outcomes
        cut = f"{simulated.cut}/{real['cut']}"
        refused = f"{simulated.provider_refused}/{real['529']}"
        infeasible = f"{simulated.infeasible}/{real['infeasible']}"
        print(
            f"{run.window:<14}{run.provider_name[:29]:<30}{simulated.on_time:>10}{real['on time']:>7}"
            f"{real['on time'] / max(simulated.on_time, 1):>7.3f}{cut:>11}{refused:>11}{infeasible:>14}"
        )
    print("(cut, 529, infeasible: the simulator's / the real gate's)")
    print(f"({time.perf_counter() - began:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
