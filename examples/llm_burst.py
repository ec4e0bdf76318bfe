"""boundedgate's showcase: a burst of streamed LLM calls, through two semaphores and through gates.

An in-process fake provider streams answers and serves at most 20 streams at once (a 21st gets a
529, overloaded). Each call has its sizes, a prompt and an answer in tokens, both long-tailed: the
provider reads the prompt before its first token and streams the answer at a steady pace, ten times
faster than a mid-size model (boundedgate.sim.Provider's default speeds), so that the demo runs in
seconds. The same traffic, a steady 40 calls a second with a burst of 400 at once, is sent three
times: through ``asyncio.Semaphore(20)``, the usual fix; through the same semaphore with
``asyncio.timeout(2.5)`` around each call, what a careful user writes; and through
``BoundedGate(max_running=20, max_waiting=60)``. Every caller gives up after 2.5 s. Each call holds
its slot for its whole stream, and carries its prompt's text (four characters a token), as a RAG
call would. Then the same traffic goes five times to a provider whose capacity halves to 10 at 3 s:
through the three, through the gate with ``adaptive=Adaptive()``, told of every 529, and through
the recommended configuration (docs/adaptive.md): an adaptive C never above 20, feasible admission
with no Q, and each call cut off at its deadline (``admit(timeout=2.5, on_deadline="cut")``).

Run it with ``make demo`` (the eight runs go side by side, one process each: about 15 seconds), or
``python examples/llm_burst.py`` (``--one-process`` runs them one after the other, shown live).
Real asyncio, real time; the numbers vary a little from run to run, the comparison does not.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import math
import multiprocessing
import shutil
import sys
import textwrap
import time
import tracemalloc
from collections import Counter
from collections.abc import AsyncGenerator, Callable, Coroutine, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from boundedgate import (
    Adaptive,
    BoundedGate,
    DeadlineCut,
    Infeasible,
    Late,
    QueueExpired,
    QueueFull,
    RequestRecord,
)
from boundedgate.sim import Bursts, Job, LogNormal, Poisson, generate, simulate
from boundedgate.sim import Provider as Speeds

Caller = Callable[[Job], Coroutine[None, None, None]]  # makes one call, and records what became of it

PROVIDER_LIMIT = 20  # streams the provider serves at once; beyond that it answers 429
LONGER_QUEUE = 150  # the trade-off's other side, simulated in the report
MAX_WAITING = 60  # queue places: `boundedgate plan` shows the trade-off (see docs/simulator.md)
BUDGET = 2.5  # seconds a caller waits for an answer, from the moment it asks
STEADY_RATE = 40  # calls per second, for the whole run
BURST = 400  # calls arriving at one instant...
BURST_AT_MS = 1500  # ...at this time
DURATION_MS = 6000  # arrivals fall in the first 6 s
PROMPT_TOKENS = LogNormal(mean_ms=1000, p99_ms=8000)  # each call's prompt, in tokens...
OUTPUT_TOKENS = LogNormal(mean_ms=100, p99_ms=600)  # ...and its answer
# How fast the provider reads and streams: ten times a mid-size model (Speeds' defaults), so that a
# call takes 0.3 s on average: its first token after 20 ms + prompt / 50,000 tokens a second.
SPEEDS = Speeds(
    PROVIDER_LIMIT, overhead_seconds=0.02, prefill_tokens_per_second=50_000, decode_tokens_per_second=400
)
CHUNKS = 12  # chunks per streamed answer
PASSAGE = "Retrieved passage. "  # prompts repeat it, four characters a token
HALVES_AT = 3.0  # the second scenario: the provider's capacity halves at this time, for good...
REFUSE_SECONDS = 0.05  # ...and beyond its capacity it answers 529 (overloaded), after this long


def traffic(seed: int = 0) -> list[Job]:
    """The calls, the same for both runs: boundedgate.sim's seeded workload generator."""
    return generate(
        [Poisson(STEADY_RATE), Bursts(BURST, start_ms=BURST_AT_MS)],
        None,
        prompt_tokens=PROMPT_TOKENS,
        output_tokens=OUTPUT_TOKENS,
        speeds=SPEEDS,
        duration_ms=DURATION_MS,
        budget_ms=round(BUDGET * 1000),
        seed=seed,
    )


class Overloaded(Exception):
    """The provider's 529: more concurrent streams than it has capacity for."""


class Provider:
    """A fake LLM provider: streamed answers, a hard capacity, a long-tailed latency.

    ``halves_at`` (seconds from the start of the run, None: never) is when its capacity drops to
    half of ``limit``, and stays there; beyond its capacity it answers 529 after ``REFUSE_SECONDS``.
    """

    def __init__(self, limit: int, halves_at: float | None = None) -> None:
        self.limit = limit
        self.halves_at = halves_at
        self.start = 0.0  # the run's start, on the loop's clock (set by replay)
        self.active = 0
        self.peak = 0
        self.refused = 0

    def capacity(self) -> int:
        """The streams it serves at once, now."""
        halved = (
            self.halves_at is not None and asyncio.get_running_loop().time() - self.start >= self.halves_at
        )
        return self.limit // 2 if halved else self.limit

    async def stream(self, prompt: str, output_tokens: int) -> AsyncGenerator[str, None]:
        """Stream an answer: the first chunk once the prompt is read, the rest evenly after it.

        The times are ``SPEEDS``': the first chunk after its overhead and ``prompt`` (four
        characters a token) at its prefill speed, the answer's ``output_tokens`` at its decode speed.
        """
        if self.active >= self.capacity():
            self.refused += 1
            await asyncio.sleep(REFUSE_SECONDS)
            raise Overloaded(f"529: overloaded, more than {self.capacity()} concurrent streams")
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            await asyncio.sleep(SPEEDS.first_token_seconds(len(prompt) // 4))
            rest = output_tokens / SPEEDS.decode_tokens_per_second
            for index in range(CHUNKS):
                if index:
                    await asyncio.sleep(rest / (CHUNKS - 1))
                yield f"token{index} "
        finally:
            self.active -= 1


@dataclass
class Run:
    """What one run measured."""

    name: str
    outcomes: Counter[str] = field(default_factory=Counter)
    answer_seconds: list[float] = field(default_factory=list)  # arrival to the end of the answer
    refusal_seconds: list[float] = field(default_factory=list)  # arrival to a refusal
    waiting: int = 0
    peak_waiting: int = 0
    peak_memory: int = 0
    wall: float = 0.0
    provider_peak: int = 0
    provider_refused: int = 0
    final_limit: int | None = None  # the gate's C at the end (an adaptive gate's moves)
    cuts: int = 0  # how often the adaptive controller cut C

    late_after_burst: int = 0  # answered late, among the calls that arrived after the burst
    wasted: float = 0.0  # seconds of provider streaming spent on answers their caller did not get in time
    records: list[RequestRecord] = field(default_factory=list)  # what the gate's observer was told

    def answered(self, job: Job, outcome: str, seconds: float) -> None:
        self.outcomes[outcome] += 1
        self.answer_seconds.append(seconds)
        if outcome == "late":
            self.wasted += job.service_ms / 1000
            if job.arrival_ms > BURST_AT_MS:
                self.late_after_burst += 1

    def refused(self, outcome: str, seconds: float) -> None:
        self.outcomes[outcome] += 1
        self.refusal_seconds.append(seconds)

    def p(self, q: float) -> float | None:
        return _percentile(self.answer_seconds, q)

    def status(self, elapsed: float, provider: Provider) -> str:
        o = self.outcomes
        answered = o["on time"] + o["late"]
        refused = o["rejected"] + o["expired"] + o["cut off"] + o["529"]
        line = (
            f"  {self.name:<30} {elapsed:4.1f}s  streaming {provider.active:2}  waiting {self.waiting:3}  "
            f"answered {answered:3}, {o['late']:3} late  refused {refused:3}"
        )
        return line[: shutil.get_terminal_size().columns - 1]


def _prompt(job: Job) -> str:
    # Each call holds its own prompt from the moment it asks: its size in tokens, four characters each.
    tokens = job.prompt_tokens or 0
    return (f"[{job.id}] " + PASSAGE * (tokens // 4 + 1))[: 4 * tokens]


async def _stream_answer(provider: Provider, job: Job, prompt: str) -> str:
    async with contextlib.aclosing(provider.stream(prompt, job.output_tokens or 0)) as stream:
        return "".join([chunk async for chunk in stream])


def through_semaphore(run: Run, provider: Provider) -> Caller:
    """The usual fix: a semaphore sized to the provider's limit. Everyone waits, for as long as it takes."""
    semaphore = asyncio.Semaphore(PROVIDER_LIMIT)

    async def call(job: Job) -> None:
        loop = asyncio.get_running_loop()
        arrival = loop.time()
        prompt = _prompt(job)
        run.waiting += 1
        run.peak_waiting = max(run.peak_waiting, run.waiting)
        await semaphore.acquire()
        run.waiting -= 1
        try:
            await _stream_answer(provider, job, prompt)
        except Overloaded:  # passed on to the caller, as a 500 or an exception
            run.refused("529", loop.time() - arrival)
            return
        finally:
            semaphore.release()
        elapsed = loop.time() - arrival
        run.answered(job, "on time" if elapsed < BUDGET else "late", elapsed)

    return call


def through_semaphore_with_timeout(run: Run, provider: Provider) -> Caller:
    """What a careful user writes: the same semaphore, and ``asyncio.timeout`` around each whole call."""
    semaphore = asyncio.Semaphore(PROVIDER_LIMIT)

    async def call(job: Job) -> None:
        loop = asyncio.get_running_loop()
        arrival = loop.time()
        prompt = _prompt(job)
        started: float | None = None
        run.waiting += 1
        run.peak_waiting = max(run.peak_waiting, run.waiting)
        try:
            async with asyncio.timeout(BUDGET):  # the caller's budget, queue time included
                try:
                    await semaphore.acquire()
                finally:
                    run.waiting -= 1
                try:
                    started = loop.time()
                    await _stream_answer(provider, job, prompt)
                finally:
                    semaphore.release()
        except Overloaded:
            run.refused("529", loop.time() - arrival)
        except TimeoutError:
            if started is None:  # it waited its whole budget and never reached the provider
                run.refused("expired", loop.time() - arrival)
            else:  # the provider had started streaming: the work done so far is thrown away
                run.wasted += loop.time() - started
                run.refused("cut off", loop.time() - arrival)
        else:
            run.answered(job, "on time", loop.time() - arrival)

    return call


def through_gate(run: Run, provider: Provider, gate: BoundedGate, cut: bool = False) -> Caller:
    """The same calls through a gate: a bounded queue, a deadline from arrival, typed refusals.

    ``cut``: each call is cut off at its deadline (``on_deadline="cut"``) rather than answered late.
    """
    on_deadline = "cut" if cut else "late"

    async def call(job: Job) -> None:
        loop = asyncio.get_running_loop()
        arrival = loop.time()
        prompt = _prompt(job)
        started: float | None = None
        try:
            async with gate.admit(timeout=BUDGET, on_deadline=on_deadline):  # held for the whole stream
                started = loop.time()
                await _stream_answer(provider, job, prompt)
        except QueueFull:  # every slot busy, every place taken: a 503 now, not a timeout later
            run.refused("rejected", loop.time() - arrival)
        except Infeasible:  # by the recent pace it could not be answered in time: a 503 now
            run.refused("infeasible", loop.time() - arrival)
        except QueueExpired:  # the budget ran out in the queue: it never reached the provider
            run.refused("expired", loop.time() - arrival)
        except Late:  # answered, but after the budget
            run.answered(job, "late", loop.time() - arrival)
        except DeadlineCut:  # cut off at the budget, as the timeout does: the work so far is lost
            run.wasted += loop.time() - (arrival if started is None else started)
            run.refused("cut off", loop.time() - arrival)
        except Overloaded:  # the provider's 529: an adaptive gate cuts C (a static one ignores it)
            gate.signal("overloaded")
            run.refused("529", loop.time() - arrival)
        else:
            run.answered(job, "on time", loop.time() - arrival)
        run.waiting = gate.waiting
        run.peak_waiting = gate.stats().peak_waiting

    return call


async def replay(jobs: Sequence[Job], call: Caller, run: Run, provider: Provider, live: bool) -> None:
    """Start each call at its arrival time, wait for all of them, and measure."""
    loop = asyncio.get_running_loop()
    tracemalloc.reset_peak()
    baseline = tracemalloc.get_traced_memory()[0]
    start = provider.start = loop.time()
    finished = asyncio.Event()

    async def display() -> None:
        while not finished.is_set():
            print("\r" + run.status(loop.time() - start, provider), end="", file=sys.stderr, flush=True)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(finished.wait(), 0.1)

    drawing = asyncio.create_task(display()) if live else None
    tasks: list[asyncio.Task[None]] = []
    for job in jobs:
        delay = start + job.arrival_ms / 1000 - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(call(job)))
    await asyncio.gather(*tasks)
    run.wall = loop.time() - start
    run.peak_memory = tracemalloc.get_traced_memory()[1] - baseline
    run.provider_peak, run.provider_refused = provider.peak, provider.refused
    finished.set()
    if drawing is not None:
        await drawing
        print("\r" + run.status(run.wall, provider), file=sys.stderr)


#: The three ways through, in the table's order.
KINDS = ("semaphore", "timeout", "gate")
#: The five against the provider whose capacity halves: the three, an adaptive gate, and the
#: recommended configuration.
HALVING_KINDS = ("semaphore", "timeout", "gate", "adaptive", "recommended")


async def run_one(kind: str, jobs: Sequence[Job], live: bool = False, halving: bool = False) -> Run:
    """Send the traffic through one of the five, to a provider of its own, and measure.

    ``halving``: the provider's capacity halves at ``HALVES_AT`` (memory is not traced then).
    """
    provider = Provider(PROVIDER_LIMIT, HALVES_AT if halving else None)
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    gate: BoundedGate | None = None
    try:
        if kind == "semaphore":
            run = Run(f"Semaphore({PROVIDER_LIMIT})")
            call = through_semaphore(run, provider)
        elif kind == "timeout":
            run = Run(f"Semaphore + {BUDGET:g} s")
            call = through_semaphore_with_timeout(run, provider)
        elif kind == "recommended":
            gate = BoundedGate(
                max_running=PROVIDER_LIMIT,
                max_waiting=None,
                name="llm",
                adaptive=Adaptive(ceiling=PROVIDER_LIMIT),
                feasible=True,
            )
            run = Run(f"recommended({PROVIDER_LIMIT})")
            gate.observe(run.records.append)
            call = through_gate(run, provider, gate, cut=True)
        else:
            adaptive = Adaptive() if kind == "adaptive" else None
            gate = BoundedGate(
                max_running=PROVIDER_LIMIT, max_waiting=MAX_WAITING, name="llm", adaptive=adaptive
            )
            run = Run(f"{'adaptive' if adaptive else 'BoundedGate'}({PROVIDER_LIMIT}, {MAX_WAITING})")
            gate.observe(run.records.append)
            call = through_gate(run, provider, gate)
        if halving:
            run.name += ", K halves"
        await replay(jobs, call, run, provider, live)
    finally:
        if not tracing:
            tracemalloc.stop()
    if gate is not None:
        run.final_limit = gate.max_running
        run.cuts = gate.controller.cuts if gate.controller is not None else 0
    return run


async def compare(seed: int = 0, live: bool = False) -> tuple[Run, Run, Run, list[Job]]:
    """Run the same traffic through the semaphore, the semaphore with a timeout and the gate, in turn."""
    jobs = traffic(seed)
    runs = [await run_one(kind, jobs, live) for kind in KINDS]
    return runs[0], runs[1], runs[2], jobs


async def compare_halving(seed: int = 0, live: bool = False) -> tuple[list[Run], list[Job]]:
    """The same traffic through the five, in turn, each to a provider whose capacity halves."""
    jobs = traffic(seed)
    return [await run_one(kind, jobs, live, halving=True) for kind in HALVING_KINDS], jobs


def _run_in_a_process(kind: str, seed: int, halving: bool) -> dict[str, Any]:
    # A Run's fields (stdlib and boundedgate types) rather than the Run: this module is __main__.
    run = asyncio.run(run_one(kind, traffic(seed), halving=halving))
    return {f.name: getattr(run, f.name) for f in dataclasses.fields(run)}


async def compare_side_by_side(seed: int = 0) -> tuple[tuple[Run, Run, Run], list[Run], list[Job]]:
    """All eight runs at once, a process each (its own loop, provider and memory tracing)."""
    loop = asyncio.get_running_loop()
    plan = [(kind, False) for kind in KINDS] + [(kind, True) for kind in HALVING_KINDS]
    with ProcessPoolExecutor(len(plan), mp_context=multiprocessing.get_context("spawn")) as pool:
        pending = [
            loop.run_in_executor(pool, _run_in_a_process, kind, seed, halving) for kind, halving in plan
        ]
        for done in asyncio.as_completed(pending):
            run = Run(**await done)
            print(f"  {run.name:<30} done: last answer at {run.wall:.1f} s", file=sys.stderr, flush=True)
        runs = [Run(**future.result()) for future in pending]
    return (runs[0], runs[1], runs[2]), runs[3:], traffic(seed)


def _mean_service(jobs: Sequence[Job]) -> float:
    """The calls' mean time at the provider, in seconds."""
    return sum(job.service_ms for job in jobs) / max(len(jobs), 1) / 1000


def _percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q``-th percentile of ``values`` (as the simulator's summaries count them)."""
    ordered = sorted(values)
    return ordered[max(math.ceil(q / 100 * len(ordered)), 1) - 1] if ordered else None


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def report(semaphore_run: Run, timeout_run: Run, gate_run: Run, jobs: Sequence[Job]) -> str:
    """The side-by-side table, what it means, and what the simulator predicted."""
    runs = (semaphore_run, timeout_run, gate_run)
    calls = len(jobs)

    def row(label: str, *cells: object) -> str:
        return f"{label:<36}" + "".join(f"{cell!s:>21}" for cell in cells)

    def count(run: Run, outcome: str) -> str:
        return str(run.outcomes[outcome])

    def reached(run: Run) -> int:
        return run.outcomes["on time"] + run.outcomes["late"] + run.outcomes["cut off"]

    lines = [
        row("", "asyncio.Semaphore", "Semaphore + timeout", "BoundedGate"),
        row(
            "",
            f"({PROVIDER_LIMIT})",
            f"({PROVIDER_LIMIT}), {BUDGET:g} s a call",
            f"({PROVIDER_LIMIT}, {MAX_WAITING})",
        ),
        row("calls", calls, calls, calls),
        row("admitted (reached the provider)", *(reached(r) for r in runs)),
        row("rejected at once (QueueFull)", "never", "never", count(gate_run, "rejected")),
        row("gave up in the queue", "never", count(timeout_run, "expired"), count(gate_run, "expired")),
        row("cut off mid-stream (timeout)", "never", count(timeout_run, "cut off"), "never"),
        row(
            f"answered late (after {BUDGET:g} s)",
            count(semaphore_run, "late"),
            "never",
            count(gate_run, "late"),
        ),
        row("answered on time", *(count(r, "on time") for r in runs)),
        row("time to answer, p50", *(_seconds(r.p(50)) for r in runs)),
        row("time to answer, p99", *(_seconds(r.p(99)) for r in runs)),
        row(
            "time to a refusal, p50",
            "-",
            *(_seconds(_percentile(r.refusal_seconds, 50)) for r in runs[1:]),
        ),
        row("slowest refusal", "-", *(_seconds(max(r.refusal_seconds, default=None)) for r in runs[1:])),
        row("provider time spent for nothing", *(f"{r.wasted:.0f} s" for r in runs)),
        row("peak waiting coroutines", *(r.peak_waiting for r in runs)),
        row("peak memory (tracemalloc)", *(f"{r.peak_memory / 2**20:.1f} MB" for r in runs)),
        row("provider: peak streams / 529s", *(f"{r.provider_peak} / {r.provider_refused}" for r in runs)),
        row("last answer at", *(f"{r.wall:.1f} s" for r in runs)),
    ]

    s, c, g = semaphore_run.outcomes, timeout_run.outcomes, gate_run.outcomes
    lines += [
        "",
        "(provider time spent for nothing: the streaming of answers that came after their caller had given "
        "up, or that a timeout cut off)",
        "",
        "What happened:",
    ]
    after = sum(1 for job in jobs if job.arrival_ms > BURST_AT_MS)
    lines.append(
        f"- The semaphore let every call wait: {semaphore_run.peak_waiting} coroutines piled up, each "
        f"holding its prompt, and {s['late']} of {calls} answers ({100 * s['late'] / calls:.0f}%) came "
        "after their caller had given up. The provider spent its capacity on answers nobody was waiting "
        f"for, and the backlog made the burst everyone's problem: {semaphore_run.late_after_burst} of the "
        f"{after} calls that arrived after it were late too."
    )
    failed = c["expired"] + c["cut off"]
    lines.append(
        f"- The timeout bounds each caller's wait, not the queue: {timeout_run.peak_waiting} coroutines "
        f"still piled up. {failed} callers waited their whole {BUDGET:g} s to learn they would get "
        f"nothing, {c['cut off']} of them cut off mid-stream after the provider had started (and "
        f"{timeout_run.wasted:.0f} s of its streaming thrown away). It answered {c['on time']} on time."
    )
    refused = g["rejected"] + g["expired"]
    admitted = g["on time"] + g["late"]
    served = f"all {admitted}" if not g["late"] else f"{g['on time']} of the {admitted}"
    lines.append(
        f"- The gate kept at most {gate_run.peak_waiting} waiting and refused {refused} calls "
        f"(slowest refusal: {_seconds(max(gate_run.refusal_seconds, default=0.0))}): a 503 with "
        "Retry-After, at once, that a client can retry or route elsewhere. It answered "
        f"{served} calls it let through on time: p99 {_seconds(gate_run.p(99))}."
    )
    memory = timeout_run.peak_memory / max(gate_run.peak_memory, 1)
    if g["on time"] >= c["on time"]:
        lines.append(
            "- So more callers got a timely answer through the gate "
            f"({g['on time']} against {c['on time']} and {s['on time']}), and the others a refusal at once "
            f"rather than after {BUDGET:g} s, with {memory:.0f}x less memory at the peak."
        )
    else:
        longer = simulate(jobs, max_running=PROVIDER_LIMIT, max_waiting=LONGER_QUEUE, trace=False).summary
        lines.append(
            f"- The careful semaphore answered more calls on time ({c['on time']} against the gate's "
            f"{g['on time']}): its unbounded queue serves part of the burst's tail that the gate refused. "
            f"The price is how the others fail: {failed} callers each waited the whole {BUDGET:g} s for "
            f"nothing, where the gate's {refused} refusals came at once, with the budget still in hand to "
            f"retry elsewhere or fall back; its answers' p99 was {_seconds(timeout_run.p(99))} against "
            f"{_seconds(gate_run.p(99))}, and it held {memory:.0f}x the memory at the peak. The gate's "
            f"queue is a setting: with {LONGER_QUEUE} places the simulator answers {longer.completed} on "
            f"time against this traffic ({longer.late} late), at a p99 of "
            f"{_seconds((longer.end_to_end_ms.p99 or 0) / 1000)}."
        )

    started = time.perf_counter()
    planned: list[RequestRecord] = []
    predicted = simulate(
        jobs,
        max_running=PROVIDER_LIMIT,
        max_waiting=MAX_WAITING,
        trace=False,
        observer=planned.append,
        name="llm",
    ).summary
    took = time.perf_counter() - started
    lines += [
        "",
        f"boundedgate.sim replayed the same {calls} calls through the gate's own decision core in "
        f"{took * 1000:.0f} ms, without sleeping, and predicted: {predicted.completed} on time, "
        f"{predicted.late} late, {predicted.expired} expired, {predicted.rejected} rejected "
        f"(the real run: {g['on time']}, {g['late']}, {g['expired']}, {g['rejected']}).",
    ]
    indent = {True: "  ", False: ""}
    text = "\n".join(
        textwrap.fill(line, 100, subsequent_indent=indent[line.startswith("- ")], break_on_hyphens=False)
        for line in lines
    )
    return text + "\n\n" + histograms(gate_run.records, planned)


def report_halving(runs: Sequence[Run], jobs: Sequence[Job]) -> str:
    """The second table: the same traffic, the five ways through, a provider whose capacity halves."""
    semaphore_run, timeout_run, gate_run, adaptive_run, recommended_run = runs
    calls, half = len(jobs), PROVIDER_LIMIT // 2

    def row(label: str, *cells: object) -> str:
        return f"{label:<36}" + "".join(f"{cell!s:>12}" for cell in cells)

    def count(run: Run, outcome: str) -> str:
        return str(run.outcomes[outcome])

    def reached(run: Run) -> int:
        return sum(run.outcomes[o] for o in ("on time", "late", "cut off", "529"))

    def failed(run: Run) -> int:
        return calls - run.outcomes["on time"]

    def limit(run: Run) -> str:
        return "-" if run.final_limit is None else f"{run.final_limit} ({run.cuts} cuts)"

    lines = [
        f"The same {calls} calls again, to a provider whose capacity halves, from {PROVIDER_LIMIT} to {half} "
        f"streams, at t={HALVES_AT:g} s (and stays there); beyond it the provider answers 529 (overloaded) "
        f"after {REFUSE_SECONDS * 1000:.0f} ms. The gates are told of every 529 (gate.signal('overloaded')): "
        "the static one ignores it, the adaptive ones cut C. The recommended configuration "
        f"(docs/adaptive.md) has an adaptive C never above {PROVIDER_LIMIT}, feasible admission with no Q, "
        "and cuts each call off at its deadline.",
        "",
        row("", "Semaphore", "Semaphore", "BoundedGate", "BoundedGate", "BoundedGate"),
        row(
            "",
            f"({PROVIDER_LIMIT})",
            f"+ {BUDGET:g} s",
            f"({PROVIDER_LIMIT}, {MAX_WAITING})",
            "adaptive",
            "recommended",
        ),
        row("admitted (reached the provider)", *(reached(r) for r in runs)),
        row("provider 529s passed to callers", *(count(r, "529") for r in runs)),
        row(
            "rejected at once (QueueFull)",
            "never",
            "never",
            *(count(r, "rejected") for r in runs[2:4]),
            "never",
        ),
        row(
            "refused at once (Infeasible)",
            "never",
            "never",
            "never",
            "never",
            count(recommended_run, "infeasible"),
        ),
        row("gave up in the queue", "never", *(count(r, "expired") for r in runs[1:])),
        row(
            "cut off mid-stream (at the budget)",
            "never",
            count(timeout_run, "cut off"),
            "never",
            "never",
            count(recommended_run, "cut off"),
        ),
        row(
            f"answered late (after {BUDGET:g} s)",
            count(semaphore_run, "late"),
            "never",
            *(count(r, "late") for r in runs[2:4]),
            "never",
        ),
        row("answered on time", *(count(r, "on time") for r in runs)),
        row("time to answer, p99", *(_seconds(r.p(99)) for r in runs)),
        row("slowest refusal", "-", *(_seconds(max(r.refusal_seconds, default=None)) for r in runs[1:])),
        row("provider time spent for nothing", *(f"{r.wasted:.0f} s" for r in runs)),
        row("C at the end", "-", "-", *(limit(r) for r in runs[2:])),
        row("last answer at", *(f"{r.wall:.1f} s" for r in runs)),
        "",
        "What happened:",
    ]
    ranked = sorted(runs, key=lambda r: r.outcomes["on time"], reverse=True)
    names = {
        id(semaphore_run): "the plain semaphore",
        id(timeout_run): "the semaphore with a timeout",
        id(gate_run): "the static gate",
        id(adaptive_run): "the adaptive gate",
        id(recommended_run): "the recommended gate",
    }
    best = ranked[0]
    lines.append(
        f"- Most answers on time: {names[id(best)]} ({best.outcomes['on time']}), then "
        + ", ".join(f"{names[id(r)]} ({r.outcomes['on time']})" for r in ranked[1:])
        + f". Everyone else got a 529, a refusal or an answer too late: {failed(best)} callers of "
        f"{names[id(best)]}, {failed(adaptive_run)} of the adaptive gate's."
    )
    r, t = recommended_run.outcomes, timeout_run.outcomes
    lines.append(
        f"- The recommended gate against the semaphore with a timeout, which both cut a call off at its "
        f"deadline: {r['on time']} answers on time against {t['on time']}, {r['529']} 529s passed on against "
        f"{t['529']}, {r['infeasible'] + r['expired']} refused (at arrival, or in the queue at the "
        f"budget) against {t['expired']} that waited their whole budget in the queue, {r['cut off']} cut "
        f"off against {t['cut off']}."
    )
    s529, a529, g529 = (r.outcomes["529"] for r in (semaphore_run, adaptive_run, gate_run))
    lines.append(
        f"- Once the capacity halved, everything beyond {half} streams met a 529: the semaphores, "
        f"sized for {PROVIDER_LIMIT}, passed {s529} and {timeout_run.outcomes['529']} of them on to their "
        f"callers, the static gate {g529}, the adaptive gate {a529} (its C went from {PROVIDER_LIMIT} to "
        f"{adaptive_run.final_limit} in {adaptive_run.cuts} cuts, at most one per window of "
        f"{Adaptive().window:g} s: a slow descent, by design, so that one burst of 529s is not a collapse)."
    )
    g, a = gate_run.outcomes, adaptive_run.outcomes
    fewer = "fewer" if a529 < g529 else "as many" if a529 == g529 else "more"
    if g["on time"] > a["on time"]:
        verdict = (
            f"- The static gate answered more on time than the adaptive one ({g['on time']} against "
            f"{a['on time']}), and the adaptive one passed on {fewer} 529s ({a529} against {g529})"
            + (": on this run the static gate wins on both." if fewer != "fewer" else ".")
        )
    elif a["on time"] > g["on time"]:
        verdict = (
            f"- The adaptive gate answered more on time than the static one ({a['on time']} against "
            f"{g['on time']}), and passed on {fewer} 529s ({a529} against {g529})."
        )
    else:
        verdict = (
            f"- The static and the adaptive gate answered as many on time ({g['on time']}); the adaptive "
            f"one passed on {fewer} 529s ({a529} against {g529})."
        )
    lines.append(
        verdict + f" Here a 529 costs the provider only {REFUSE_SECONDS * 1000:.0f} ms, and the queue, "
        f"not C, decides who gets in (the static and the adaptive gate refused {g['rejected']} and "
        f"{a['rejected']} at once); the adaptive C falls by at most {1 - Adaptive().decrease:.0%} a window, "
        f"and the calls kept arriving for only {DURATION_MS / 1000 - HALVES_AT:g} s after the capacity "
        "halved. Over minutes rather than seconds, "
        "docs/adaptive.md's simulator shows where an adaptive C pays off and where it does not."
    )
    lines.append(
        f"- The semaphore with a timeout still makes its callers wait: its slowest refusal took "
        f"{_seconds(max(timeout_run.refusal_seconds, default=0.0))}, the gates' "
        f"{_seconds(max(gate_run.refusal_seconds, default=0.0))} and "
        f"{_seconds(max(adaptive_run.refusal_seconds, default=0.0))}."
    )
    indent = {True: "  ", False: ""}
    return "\n".join(
        textwrap.fill(line, 100, subsequent_indent=indent[line.startswith("- ")], break_on_hyphens=False)
        for line in lines
    )


#: The GenAI semantic conventions' buckets (seconds), as boundedgate's exporters use them.
BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24)


def _counts(values: Sequence[float]) -> list[int]:
    counts = [0] * (len(BUCKETS) + 1)
    for value in values:
        counts[next((i for i, bound in enumerate(BUCKETS) if value <= bound), len(BUCKETS))] += 1
    return counts


def histograms(real: Sequence[RequestRecord], planned: Sequence[RequestRecord]) -> str:
    """The gate's histograms from its observer, beside the simulator's from the same records."""
    lines = ["The gate's histograms (its observer's records; the simulator's beside them):"]
    charts: tuple[tuple[str, Callable[[RequestRecord], float | None]], ...] = (
        (
            "time in queue (boundedgate_request_time_in_queue_seconds)",
            lambda r: None if r.decision == "reject" else r.waited,
        ),
        ("time to outcome (boundedgate_request_duration_seconds)", lambda r: r.end_to_end),
    )
    for title, value in charts:
        got = _counts([v for r in real if (v := value(r)) is not None])
        plan = _counts([v for r in planned if (v := value(r)) is not None])
        widest = max(*got, *plan, 1)
        lines += ["", f"  {title}", f"  {'':>10}  {'real':<30}  {'planned':<30}"]
        labels = [f"<= {bound:g} s" for bound in BUCKETS] + [f"> {BUCKETS[-1]:g} s"]
        for label, g, p in zip(labels, got, plan, strict=True):
            if g or p:
                bar_g, bar_p = "#" * round(24 * g / widest), "#" * round(24 * p / widest)
                lines.append(f"  {label:>10}  {g:>5} {bar_g:<24}  {p:>5} {bar_p}".rstrip())
    return "\n".join(line.rstrip() for line in lines)


async def main(seed: int = 0, one_process: bool = False, live: bool | None = None) -> None:
    """Print the scenario, run the three and the five, print the reports."""
    live = sys.stderr.isatty() if live is None else live
    jobs = traffic(seed)
    print(
        f"A fake LLM provider reads prompts (mean {PROMPT_TOKENS.mean_ms:g} tokens, p99 "
        f"{PROMPT_TOKENS.p99_ms:g}) and streams answers (mean {OUTPUT_TOKENS.mean_ms:g} tokens, p99 "
        f"{OUTPUT_TOKENS.p99_ms:g}) at {SPEEDS.prefill_tokens_per_second:g} and "
        f"{SPEEDS.decode_tokens_per_second:g} tokens a second,\n"
        f"a call taking {_seconds(_mean_service(jobs))} on average; it serves at most {PROVIDER_LIMIT} "
        "streams at once.\n"
        f"{len(jobs)} calls arrive over {DURATION_MS / 1000:g} s: {STEADY_RATE} a second, plus {BURST} "
        f"at once at t={BURST_AT_MS / 1000:g} s. Every caller gives up after {BUDGET:g} s.\n"
        "The same calls go through a plain semaphore, through the semaphore with a timeout around each "
        "call, and through a BoundedGate;\n"
        f"then, to a provider whose capacity halves at t={HALVES_AT:g} s, through those, an adaptive "
        "BoundedGate and the recommended one.\n",
        flush=True,
    )
    if one_process:
        semaphore_run, timeout_run, gate_run, jobs = await compare(seed, live)
        halving, _ = await compare_halving(seed, live)
    else:
        (semaphore_run, timeout_run, gate_run), halving, jobs = await compare_side_by_side(seed)
        print(file=sys.stderr)
    print(report(semaphore_run, timeout_run, gate_run, jobs))
    print()
    print(report_halving(halving, jobs))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="the traffic's seed (default 0)")
    parser.add_argument("--one-process", action="store_true", help="one run after the other, shown live")
    parser.add_argument("--no-live", action="store_true", help="no live progress line (with --one-process)")
    args = parser.parse_args()
    asyncio.run(main(args.seed, args.one_process, False if args.no_live else None))
