"""Goodput: answers delivered within their deadline, in one run, as ratios to the best static gate.

The demo's traffic (40/s plus a burst of 400 at 30 s, service lognormal mean 300 ms p99 1.5 s,
budget 2.5 s) goes through each contender to a simulated provider (``boundedgate.sim.Provider``)
that answers 529 beyond its capacity K, on virtual time, with the library's own core:

* ``semaphore``: C = 20, an unbounded queue, no deadline (``asyncio.Semaphore``);
* ``semaphore+timeout``: the same with the budget as the acquire timeout (what a careful user writes);
* ``gate Q=60``: the demo's gate;
* ``best static``: the best C and Q in hindsight, found by a sweep over the same run (C 8 to 30,
  Q 0 to 200 and unbounded);
* ``adaptive``: C learned from the provider's 529s and latency (``Adaptive()`` defaults), Q = 60
  or 150 (a fixed Q waits longer as C shrinks: with K moving it needs feasible admission);
* ``feasible``: C = 20, deadline-feasible admission (refused at arrival what cannot be in time);
* ``adaptive+feasible``: both.

Two providers: one that serves K = 20 all along (stationary), and one whose K halves to 10 at
20 s and comes back at 45 s. Run: ``PYTHONPATH=src python benchmarks/bench_goodput.py``.

The contenders and the sweep are ``boundedgate.sim.compare_admission``'s, which
``boundedgate plan --provider`` prints for any traffic and provider.
"""

from __future__ import annotations

import sys
import time

from boundedgate.sim import (
    Bursts,
    Comparison,
    LogNormal,
    Poisson,
    Provider,
    compare_admission,
    generate,
    steps,
)

Job = tuple[float, float, float | None]


def demo_traffic(seed: int = 1) -> list[Job]:
    """The demo's traffic, in seconds."""
    jobs = generate(
        [Poisson(rate=40), Bursts(400, start_ms=30_000)],
        LogNormal(mean_ms=300, p99_ms=1500),
        budget_ms=2500,
        duration_ms=60_000,
        seed=seed,
    )
    return [(job.arrival_ms / 1000, job.service_ms / 1000, 2.5) for job in jobs]


def compare(jobs: list[Job], provider: Provider) -> Comparison:
    """Every contender through the provider; the best static swept over C 8..30 and Q 0..none."""
    return compare_admission(jobs, provider, max_running=20, max_waiting=60, adaptive_waiting=(60, 150))


def table(title: str, jobs: list[Job], provider: Provider) -> list[str]:
    """The rows of one scenario."""
    comparison = compare(jobs, provider)
    best = comparison.best
    rows = [
        f"{title}: {len(jobs)} requests; best static in hindsight C={best.max_running} Q={best.max_waiting}"
    ]
    header = f"{'contender':<20}{'on time':>8}{'ratio':>7}{'late':>6}{'529/429':>8}"
    header += f"{'refused':>8}{'expired':>8}{'no in':>8}"
    rows.append(header)
    for contender in comparison.contenders:
        r = contender.result
        told = r.mean_refusal_seconds
        rows.append(
            f"{contender.name:<20}{r.on_time:>8}{comparison.ratio(contender) or 0:>7.3f}{r.late:>6}"
            f"{r.provider_refused:>8}{r.rejected + r.infeasible:>8}{r.expired:>8}"
            f"{'-' if told is None else f'{told:.2f}s':>8}"
        )
    return rows


def main() -> None:
    """Print both scenarios."""
    began = time.perf_counter()
    jobs = demo_traffic()
    lines = table("stationary K=20", jobs, Provider(20))
    lines += [""]
    lines += table("K=20, 10 from 20 s to 45 s", jobs, Provider(steps(20, (20.0, 10), (45.0, 20))))
    print("\n".join(lines))
    print(
        "\n(ratio: on time / best static's; 'no in': mean seconds to a refusal from the gate; "
        f"{time.perf_counter() - began:.1f}s)"
    )


if __name__ == "__main__":
    sys.exit(main())
