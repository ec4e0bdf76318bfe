"""Goodput: answers delivered within their deadline, in one run, as ratios to the best static gate.

The demo's traffic (40/s plus a burst of 400 at 30 s, budget 2.5 s; each request with its sizes,
prompts lognormal mean 1,000 tokens p99 8,000, answers lognormal mean 100 tokens p99 600, served by
the demo's provider, ten times faster than ``Provider``'s default speeds: 20 ms of overhead, 50,000
prompt tokens and 400 output tokens a second, so a call takes 0.3 s on average and its first token
40 ms) goes through each contender to a simulated provider (``boundedgate.sim.Provider``) that
answers 529 beyond its capacity K, on virtual time, with the library's own core:

* ``semaphore``: C = 20, an unbounded queue, no deadline (``asyncio.Semaphore``);
* ``semaphore+timeout``: the same inside ``asyncio.timeout`` of the budget around the whole call
  (what a careful user writes): it leaves the queue at the deadline, and a call still at the
  provider then is cut off, its slot and the provider's capacity free at once (``cut``);
* ``gate Q=60``: the demo's gate (a call still running at its deadline runs on: ``Late``);
* ``best static``: the best C and Q in hindsight, found by a sweep over the same run (C 8 to 30,
  Q 0 to 200 and unbounded);
* ``adaptive``: C learned from the provider's 529s and latency (``Adaptive()`` defaults; the
  latency is the time to first token, which the prompt's size explains), Q = 60 or 150;
* ``feasible``: C = 20, deadline-feasible admission (refused at arrival what cannot be in time);
* ``adaptive+feasible``: both;
* ``recommended``: both, each call cut off at its deadline (``admit(timeout=...,
  on_deadline="cut")``), no Q to tune: the configuration docs/adaptive.md recommends.

Three providers: one that serves K = 20 all along (stationary), one whose K halves to 10 at 20 s
and comes back at 45 s, and a third at ``Provider``'s default speeds (a mid-size model: a call
takes about 7 s) with steady traffic 10 % beyond its capacity and a 30 s budget: long calls in a
long overload.

Then production traffic: the six windows of five minutes of the Azure LLM inference traces of 2023
kept in ``benchmarks/traces`` (see its README: CC BY 4.0, Patel et al., "Splitwise", ISCA 2024), a
code completion service's (prompts mean 2,000 tokens, answers mean 28: short calls in bursts of up to
60 at once) and a conversation service's (prompts mean 1,150 tokens, answers mean 211: calls of 4 to
7 s, steady), each request with its own sizes, at ``Provider``'s default speeds. The trace has no
deadlines: each request gets a budget a little above the trace's p99 service time alone (7 s and
15 s), 10 s for code and 20 s for conversation. Three providers per window, each answering 529
beyond K: K sized to the window's load (the concurrency its requests would hold, unlimited, at the
90th percentile of the time: so the provider is short a tenth of the time), a tighter one (two
thirds of that), and one whose K halves from 100 s to 200 s and comes back. Every gate's C is the
first K (what the user sized it for: the tighter provider is tighter than they believe), Q = 3 C.
Each row gives answers on time as ratios to the best static C and Q in hindsight and to
``semaphore+timeout``, late and cut-off answers, the provider's 529s passed on, the gate's
refusals, the time from arrival to each "no" a caller got (p50, p99, max: from the gate, a 529
passed on, or a cut at the deadline), and the provider's time spent on answers nobody waited for.
A table sums the production part up, each window replayed from three start offsets (0, 60 and
120 s into it: the same trace met at another moment), as ranges over the offsets.

A last table gives the windows mixed budgets, as when interactive and batch callers share a gate:
each request, drawn at random (seeded), gets half its window's budget or twice it. On it, the
recommended configuration with its queue in arrival order (the default) and in deadline order
(``BoundedGate(by_deadline=True)``), beside ``semaphore+timeout``. With one budget the two orders
are the same.

Another replays each window with its K halved over its busiest 100 s, coming back after them or
staying halved to the end: the recommended configuration beside ``semaphore+timeout``, with the
answers on time in the 20 s after K came back and how long the recommended configuration's C took
to be back at K.

Run: ``PYTHONPATH=src python benchmarks/bench_goodput.py`` (``--synthetic``, ``--traces``,
``--summary``, ``--budgets`` or ``--recovery`` for one part alone).

The contenders and the sweep are ``boundedgate.sim.compare_admission``'s, which
``boundedgate plan --provider`` prints for any traffic and provider.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from boundedgate import Adaptive
from boundedgate.sim import (
    Bursts,
    Client,
    ClientResult,
    Comparison,
    Contender,
    Job,
    LogNormal,
    Poisson,
    Provider,
    Request,
    compare_admission,
    generate,
    read_script,
    simulate_provider,
    steps,
)

#: The demo's provider speeds: ten times ``Provider``'s defaults, so that the demo runs in seconds.
OVERHEAD, PREFILL, DECODE = 0.02, 50_000, 400


def demo_provider(capacity: float | Callable[[float], float]) -> Provider:
    """A provider of the demo's speeds."""
    return Provider(
        capacity,
        overhead_seconds=OVERHEAD,
        prefill_tokens_per_second=PREFILL,
        decode_tokens_per_second=DECODE,
    )


PROMPTS = LogNormal(mean_ms=1000, p99_ms=8000)  # tokens
OUTPUTS = LogNormal(mean_ms=100, p99_ms=600)  # tokens


def requests(jobs: Sequence[Job]) -> list[Request]:
    """A script's sized jobs as the simulator's requests, in seconds."""
    return [
        Request(j.arrival_ms / 1000, None, _seconds(j.budget_ms), j.prompt_tokens, j.output_tokens)
        for j in jobs
    ]


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000


def demo_traffic(seed: int = 1) -> list[Request]:
    """The demo's traffic over a minute, in seconds, with its sizes."""
    jobs = generate(
        [Poisson(rate=40), Bursts(400, start_ms=30_000)],
        None,
        prompt_tokens=PROMPTS,
        output_tokens=OUTPUTS,
        speeds=demo_provider(20),
        budget_ms=2500,
        duration_ms=60_000,
        seed=seed,
    )
    return requests(jobs)


def long_calls_traffic(seed: int = 1) -> list[Request]:
    """Ten minutes 10 % beyond K = 20 at the default speeds: prompts ~1,500 tokens, answers ~250."""
    jobs = generate(
        Poisson(rate=3.3),
        None,
        prompt_tokens=LogNormal(mean_ms=1500, p99_ms=12_000),
        output_tokens=LogNormal(mean_ms=250, p99_ms=1200),
        budget_ms=30_000,
        duration_ms=600_000,
        seed=seed,
    )
    return requests(jobs)


def compare(jobs: list[Request], provider: Provider) -> Comparison:
    """Every contender through the provider; the best static swept over C 8..30 and Q 0..none."""
    return compare_admission(jobs, provider, max_running=20, max_waiting=60, adaptive_waiting=(60, 150))


def table(title: str, jobs: list[Request], provider: Provider) -> list[str]:
    """The rows of one scenario."""
    comparison = compare(jobs, provider)
    best = comparison.best
    rows = [f"{title}: {len(jobs)} requests; best static C={best.max_running} Q={best.max_waiting}"]
    header = f"{'contender':<20}{'on time':>8}{'ratio':>7}{'late':>6}{'cut':>6}{'529/429':>8}"
    header += f"{'refused':>8}{'expired':>8}{'no in':>8}{'wasted':>8}"
    rows.append(header)
    for contender in comparison.contenders:
        r = contender.result
        told = r.mean_refusal_seconds
        rows.append(
            f"{contender.name:<20}{r.on_time:>8}{comparison.ratio(contender) or 0:>7.3f}{r.late:>6}{r.cut:>6}"
            f"{r.provider_refused:>8}{r.rejected + r.infeasible:>8}{r.expired:>8}"
            f"{'-' if told is None else f'{told:.2f}s':>8}{f'{r.wasted_seconds:.0f}s':>8}"
        )
    return rows


#: The production-trace windows, and each trace's budget in seconds (see the module).
TRACES = Path(__file__).parent / "traces"
BUDGETS = {"code": 10.0, "conv": 20.0}
#: The fixed provider's K: the concurrency the window's requests would hold, unlimited, at this
#: share of the time; the tighter one's is this share of it; the moving one halves over this span.
LOAD_QUANTILE = 0.9
TIGHTER = 2 / 3
HALVED_SECONDS = 100


@dataclass(frozen=True, slots=True)
class Window:
    """One window of a production trace, as the simulator's requests with the trace's budget."""

    name: str
    trace: str
    requests: list[Request]


def trace_windows() -> list[Window]:
    """The windows listed in ``traces/windows.json``, in its order."""
    listing = json.loads((TRACES / "windows.json").read_text(encoding="utf-8"))
    windows = []
    for entry in listing:
        budget = BUDGETS[entry["trace"]]
        jobs = read_script(TRACES / entry["file"])
        traffic = [Request(j.arrival_ms / 1000, None, budget, j.prompt_tokens, j.output_tokens) for j in jobs]
        windows.append(Window(f"{entry['trace']} {entry['rule']}", entry["trace"], traffic))
    return windows


def load_capacity(jobs: Sequence[Request], provider: Provider, quantile: float = LOAD_QUANTILE) -> int:
    """The concurrency ``jobs`` would hold at ``provider``'s speeds, unlimited, ``quantile`` of the time."""
    changes: list[tuple[float, int]] = []
    for job in jobs:
        assert job.prompt_tokens is not None
        assert job.output_tokens is not None
        service = provider.service_seconds(job.prompt_tokens, job.output_tokens)
        changes += [(job.arrival, 1), (job.arrival + service, -1)]
    changes.sort()
    held: dict[int, float] = {}
    running, since = 0, changes[0][0]
    for when, change in changes:
        held[running] = held.get(running, 0.0) + when - since
        running, since = running + change, when
    total, covered = sum(held.values()), 0.0
    for level in sorted(held):
        covered += held[level]
        if covered >= quantile * total:
            return max(1, level)
    return max(held)


def busiest_stretch(jobs: Sequence[Request], seconds: int = HALVED_SECONDS) -> float:
    """The start, on 10 s steps, of the ``seconds`` holding most arrivals (the earliest of equals)."""
    last = int(max(job.arrival for job in jobs))
    starts = range(0, max(1, last - seconds + 1), 10)
    return float(max(starts, key=lambda at: (sum(at <= j.arrival < at + seconds for j in jobs), -at)))


def trace_providers(k: int, jobs: Sequence[Request]) -> list[tuple[str, Provider]]:
    """The three providers of a window sized to K: fixed, tighter, and one whose K halves and returns.

    The moving one's K halves over the window's busiest ``HALVED_SECONDS`` (where a provider short
    of capacity hurts most: a halving while the traffic pauses would test nothing).
    """
    tighter = max(1, round(TIGHTER * k))
    start = busiest_stretch(jobs)
    end = start + HALVED_SECONDS
    return [
        (f"K={k} fixed", Provider(k)),
        (f"K={tighter} (tighter)", Provider(tighter)),
        (f"K={k}, {k / 2:g} from {start:g} s to {end:g} s", Provider(steps(k, (start, k / 2), (end, k)))),
    ]


def _seconds_cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def trace_table(title: str, jobs: list[Request], provider: Provider, c: int) -> list[str]:
    """The rows of one window against one provider: ratios to the best static and to the timeout."""
    comparison = compare_admission(jobs, provider, max_running=c, max_waiting=3 * c)
    best = comparison.best
    rows = [f"{title}: best static C={best.max_running} Q={best.max_waiting}"]
    header = f"{'contender':<20}{'C':>6}{'on time':>8}{'/best':>7}{'/timeout':>9}{'late':>6}{'cut':>6}"
    header += f"{'529':>6}{'refused':>8}{'expired':>8}{'no after p50/p99/max':>22}{'wasted':>8}"
    rows.append(header)
    for contender in comparison.contenders:
        r = contender.result
        to_best = comparison.ratio(contender)
        to_timeout = comparison.ratio(contender, to="semaphore+timeout")
        waits = r.time_to_refusal
        told = "/".join(_seconds_cell(value) for value in (waits.p50, waits.p99, waits.max))
        rows.append(
            f"{contender.name:<20}{_c_range(contender):>6}{r.on_time:>8}{_ratio_cell(to_best):>7}{_ratio_cell(to_timeout):>9}"
            f"{r.late:>6}{r.cut:>6}{r.provider_refused:>6}{r.rejected + r.infeasible:>8}{r.expired:>8}"
            f"{told:>22}{f'{r.wasted_seconds:.0f}s':>8}"
        )
    return rows


def _c_range(contender: Contender) -> str:
    """C, or the range an adaptive contender's C took."""
    seen = [c for _, c in contender.result.limits]
    low, high = min(seen), max(seen)
    return str(low) if low == high else f"{low}-{high}"


def _ratio_cell(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.3f}"


#: Where into a window the summary's replays start, in seconds.
OFFSETS = (0, 60, 120)


def from_offset(jobs: Sequence[Request], offset: float) -> list[Request]:
    """The window's requests from ``offset`` seconds into it on, arriving that much earlier."""
    return [replace(job, arrival=job.arrival - offset) for job in jobs if job.arrival >= offset]


def _span(values: Sequence[float], cell: Callable[[float], str]) -> str:
    low, high = min(values), max(values)
    return cell(low) if cell(low) == cell(high) else f"{cell(low)}-{cell(high)}"


def summary_part() -> list[str]:
    """A markdown table: per window and provider, what each way of admitting got over the offsets."""
    lines = [
        "| window | provider | timeout on time | gate / timeout | best static / timeout | adaptive / best "
        "| recommended / best | recommended / timeout | 529s: timeout / recommended "
        "| no after p99: timeout / recommended | wasted: timeout / recommended |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ratio = "{:.3f}".format
    whole = "{:.0f}".format
    for window in trace_windows():
        k = load_capacity(window.requests, Provider(1))
        kinds = [name for name, _ in trace_providers(k, window.requests)]
        for kind in range(len(kinds)):
            seen: dict[str, list[float]] = {}
            for offset in OFFSETS:
                jobs = from_offset(window.requests, offset)
                _, provider = trace_providers(k, jobs)[kind]
                comparison = compare_admission(jobs, provider, max_running=k, max_waiting=3 * k)
                timeout, recommended = comparison["semaphore+timeout"], comparison["recommended"]
                for name, value in (
                    ("timeout", timeout.result.on_time),
                    ("gate", comparison.ratio(comparison[f"gate Q={3 * k}"], to="semaphore+timeout")),
                    ("best", comparison.ratio(comparison.best, to="semaphore+timeout")),
                    ("adaptive", comparison.ratio(comparison[f"adaptive Q={3 * k}"])),
                    ("recommended", comparison.ratio(recommended)),
                    ("recommended/timeout", comparison.ratio(recommended, to="semaphore+timeout")),
                    ("529 timeout", timeout.result.provider_refused),
                    ("529 recommended", recommended.result.provider_refused),
                    ("p99 timeout", timeout.result.time_to_refusal.p99 or 0.0),
                    ("p99 recommended", recommended.result.time_to_refusal.p99 or 0.0),
                    ("wasted timeout", timeout.result.wasted_seconds),
                    ("wasted recommended", recommended.result.wasted_seconds),
                ):
                    seen.setdefault(name, []).append(0.0 if value is None else float(value))
            seconds = "{:.2f}".format
            cells = [
                _span(seen["timeout"], whole),
                *(_span(seen[name], ratio) for name in ("gate", "best", "adaptive", "recommended")),
                _span(seen["recommended/timeout"], ratio),
                f"{_span(seen['529 timeout'], whole)} / {_span(seen['529 recommended'], whole)}",
                f"{_span(seen['p99 timeout'], seconds)} / {_span(seen['p99 recommended'], seconds)} s",
                f"{_span(seen['wasted timeout'], whole)} / {_span(seen['wasted recommended'], whole)} s",
            ]
            lines.append(f"| {window.name} | {kinds[kind]} | " + " | ".join(cells) + " |")
    return lines


def traces_part() -> list[str]:
    """Every window against its three providers."""
    lines: list[str] = []
    for window in trace_windows():
        speeds = Provider(1)
        k = load_capacity(window.requests, speeds)
        budget = BUDGETS[window.trace]
        for name, provider in trace_providers(k, window.requests):
            title = f"{window.name} ({len(window.requests)} requests in 5 min, budget {budget:g} s), {name}"
            lines += [*trace_table(title, window.requests, provider, k), ""]
    return lines


#: The mixed budgets' shares of a window's budget, drawn one or the other with equal chance.
MIXED_BUDGETS = (0.5, 2.0)


def mixed_budgets(jobs: Sequence[Request], seed: int = 7) -> list[Request]:
    """``jobs``, each with its budget scaled by one of :data:`MIXED_BUDGETS`, drawn at random."""
    draw = random.Random(seed)
    return [replace(job, budget=(job.budget or 0.0) * draw.choice(MIXED_BUDGETS)) for job in jobs]


def budgets_part(seed: int = 7) -> list[str]:
    """A markdown table: the recommended configuration in arrival and in deadline order, on mixed budgets.

    ``seed`` draws the budgets.
    """
    lines = [
        "| window | provider | timeout on time | arrival order / timeout | deadline order / timeout "
        "| deadline / arrival order |",
        "|---|---|---|---|---|---|",
    ]
    totals = [0, 0]
    for window in trace_windows():
        jobs = mixed_budgets(window.requests, seed)
        k = load_capacity(window.requests, Provider(1))
        for name, provider in trace_providers(k, jobs):
            timeout = Client("timeout", jobs, k, None, on_deadline="cut")
            by_arrival, by_deadline = (
                Client(
                    "recommended", jobs, k, None, Adaptive(ceiling=k), True, on_deadline="cut", by_deadline=by
                )
                for by in (False, True)
            )
            got = [
                simulate_provider([client], provider)[0].on_time
                for client in (timeout, by_arrival, by_deadline)
            ]
            totals[0] += got[1]
            totals[1] += got[2]
            ratios = f"{got[1] / got[0]:.3f} | {got[2] / got[0]:.3f} | {got[2] / got[1]:.3f}"
            lines.append(f"| {window.name} | {name} | {got[0]} | {ratios} |")
    lines.append(f"| all | | | | | {totals[1] / totals[0]:.3f} |")
    return lines


def _climbed_back(limits: Sequence[tuple[float, int]], since: float, k: int) -> float | None:
    """Seconds from ``since`` until C was back at ``k`` (None: not before the run ended)."""
    c = next((c for t, c in reversed(limits) if t <= since), k)
    if c >= k:
        return 0.0
    return next((t - since for t, c in limits if t > since and c >= k), None)


def recovery_part() -> list[str]:
    """A markdown table: each window's K halves over its busiest 100 s, and comes back or does not.

    The recommended configuration beside ``semaphore+timeout``, from each start offset: on time
    where K comes back (the benchmark's moving provider), the answers on time in the 20 s after it
    came back and how long C took to be back at K, then on time where K stays halved to the end.
    """
    lines = [
        "| window | offset | K back: recommended / timeout "
        "| on time in the 20 s after: recommended / timeout | C back at K after "
        "| K stays halved: recommended / timeout |",
        "|---|---|---|---|---|---|",
    ]
    for window in trace_windows():
        k = load_capacity(window.requests, Provider(1))
        for offset in OFFSETS:
            jobs = from_offset(window.requests, offset)
            start = busiest_stretch(jobs)
            back = start + HALVED_SECONDS
            ours, theirs = _against_timeout(jobs, Provider(steps(k, (start, k / 2), (back, k))), k)
            stays = _against_timeout(jobs, Provider(steps(k, (start, k / 2))), k)
            after = [sum(back <= t < back + 20 for t in result.on_time_at) for result in (ours, theirs)]
            climbed = _climbed_back(ours.limits, back, k)
            cells = [
                _on_time_ratio(ours, theirs),
                f"{after[0]} / {after[1]}",
                "-" if climbed is None else f"{climbed:.1f} s",
                _on_time_ratio(*stays),
            ]
            lines.append(f"| {window.name} | {offset} s | " + " | ".join(cells) + " |")
    return lines


def _against_timeout(jobs: list[Request], provider: Provider, k: int) -> tuple[ClientResult, ClientResult]:
    """The recommended configuration's run and ``semaphore+timeout``'s, each alone, C = ``k``."""
    recommended = Client("recommended", jobs, k, None, Adaptive(ceiling=k), True, on_deadline="cut")
    timeout = Client("timeout", jobs, k, None, on_deadline="cut")
    return simulate_provider([recommended], provider)[0], simulate_provider([timeout], provider)[0]


def _on_time_ratio(ours: ClientResult, theirs: ClientResult) -> str:
    return f"{ours.on_time} / {theirs.on_time} = {ours.on_time / theirs.on_time:.3f}"


def synthetic_part() -> list[str]:
    """The three synthetic scenarios."""
    jobs = demo_traffic()
    lines = table("stationary K=20", jobs, demo_provider(20))
    lines += [""]
    halving = demo_provider(steps(20, (20.0, 10), (45.0, 20)))
    lines += table("K=20, 10 from 20 s to 45 s", jobs, halving)
    lines += [""]
    lines += table("long calls, 10 % beyond K=20, default speeds", long_calls_traffic(), Provider(20))
    lines.append(
        "\n(ratio: on time / best static's; cut: cut off at the deadline by the timeout; 'no in': mean "
        "seconds to a refusal from the gate; wasted: provider seconds spent on late or cut-off answers)\n"
    )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Print the synthetic scenarios, then the production-trace windows (or one part alone)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    part = parser.add_mutually_exclusive_group()
    part.add_argument("--synthetic", action="store_true", help="the synthetic scenarios alone")
    part.add_argument("--traces", action="store_true", help="the production-trace windows alone")
    part.add_argument("--summary", action="store_true", help="the production traces' summary alone")
    part.add_argument("--budgets", action="store_true", help="the traces with mixed budgets alone")
    part.add_argument("--recovery", action="store_true", help="K halving, then back or not, alone")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    every = not (args.synthetic or args.traces or args.summary or args.budgets or args.recovery)
    if every or args.synthetic:
        print("\n".join(synthetic_part()))
    if every or args.traces:
        print("\n".join(traces_part()))
        print(
            "(/best, /timeout: on time over the best static gate's and semaphore+timeout's; 529: the "
            "provider's refusals passed on; refused: by the gate at arrival; no after: seconds from "
            "arrival to each refusal, cut or 529 a caller got; wasted: provider seconds spent on late "
            "or cut-off answers)"
        )
    if every or args.summary:
        print("\n".join(["", *summary_part()]))
    if every or args.budgets:
        print("\n".join(["", *budgets_part()]))
    if every or args.recovery:
        print("\n".join(["", *recovery_part()]))
    print(f"({time.perf_counter() - began:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
