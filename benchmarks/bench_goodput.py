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
* ``adaptive+feasible``: both.

Three providers: one that serves K = 20 all along (stationary), one whose K halves to 10 at 20 s
and comes back at 45 s, and a third at ``Provider``'s default speeds (a mid-size model: a call
takes about 7 s) with steady traffic 10 % beyond its capacity and a 30 s budget: long calls in a
long overload. Run: ``PYTHONPATH=src python benchmarks/bench_goodput.py``.

The contenders and the sweep are ``boundedgate.sim.compare_admission``'s, which
``boundedgate plan --provider`` prints for any traffic and provider.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence

from boundedgate.sim import (
    Bursts,
    Comparison,
    Job,
    LogNormal,
    Poisson,
    Provider,
    Request,
    compare_admission,
    generate,
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
    rows = [
        f"{title}: {len(jobs)} requests; best static in hindsight C={best.max_running} Q={best.max_waiting}"
    ]
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


def main() -> None:
    """Print the three scenarios."""
    began = time.perf_counter()
    jobs = demo_traffic()
    lines = table("stationary K=20", jobs, demo_provider(20))
    lines += [""]
    halving = demo_provider(steps(20, (20.0, 10), (45.0, 20)))
    lines += table("K=20, 10 from 20 s to 45 s", jobs, halving)
    lines += [""]
    lines += table("long calls, 10 % beyond K=20, default speeds", long_calls_traffic(), Provider(20))
    print("\n".join(lines))
    print(
        "\n(ratio: on time / best static's; cut: cut off at the deadline by the timeout; 'no in': mean "
        "seconds to a refusal from the gate; wasted: provider seconds spent on late or cut-off answers; "
        f"{time.perf_counter() - began:.1f}s)"
    )


if __name__ == "__main__":
    sys.exit(main())
