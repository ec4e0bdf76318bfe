"""Five requests, the worked example of the docs, replayed for real through a BoundedGate.

Five requests arrive at once at a gate with two running slots (C=2) and two queue places (Q=2).
Service times and budgets are the example's milliseconds, slept for real on the event loop:

    request  service  budget   what the docs' table says
    A        100 ms   300 ms   runs 0-100
    B        100 ms   300 ms   runs 0-100
    C         50 ms   200 ms   queues, runs 100-150: its caller waits 150 ms for a 50 ms call
    D         50 ms    90 ms   queues, leaves the queue at 90 ms, never runs
    E         20 ms   200 ms   refused at once: both slots and both places are taken

Run it with ``make demo`` (or ``python examples/five_requests.py``).
"""

from __future__ import annotations

import asyncio

from boundedgate import BoundedGate, GateError

JOBS = [("A", 100, 300), ("B", 100, 300), ("C", 50, 200), ("D", 50, 90), ("E", 20, 200)]
EXPECTED = {"A": "completed", "B": "completed", "C": "completed", "D": "expired", "E": "rejected"}


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f}"


async def main() -> None:
    gate = BoundedGate(max_running=2, max_waiting=2, name="five-requests")
    loop = asyncio.get_running_loop()
    origin = loop.time()
    rows: dict[str, tuple[str, str, float | None, float]] = {}  # outcome, raised, start, end

    async def request(name: str, service_ms: int, budget_ms: int) -> None:
        permit = gate.admit(timeout=budget_ms / 1000)
        raised = "-"
        try:
            async with permit:
                await asyncio.sleep(service_ms / 1000)
        except GateError as error:
            raised = type(error).__name__
        started = None if permit.started is None else permit.started - origin
        rows[name] = (permit.status.value, raised, started, loop.time() - origin)

    await asyncio.gather(*(request(*job) for job in JOBS))

    print("Five requests through BoundedGate(max_running=2, max_waiting=2), in real time:\n")
    header = f"{'request':8}{'outcome':11}{'raised':14}{'start ms':>9}{'end ms':>8}{'waited ms':>11}  docs"
    print(header)
    print("-" * len(header))
    for name, _, _ in JOBS:
        outcome, raised, started, ended = rows[name]
        waited = ended if started is None else started
        agrees = "agrees" if EXPECTED[name] == outcome else f"MISMATCH: {EXPECTED[name]}"
        print(f"{name:8}{outcome:11}{raised:14}{ms(started):>9}{ms(ended):>8}{ms(waited):>11}  {agrees}")

    stats = gate.stats()
    print(
        f"\nstats(): admitted {stats.admitted}, completed {stats.completed}, late {stats.late}, "
        f"expired {stats.expired}, rejected {stats.rejected}; peaks: {stats.peak_running} running, "
        f"{stats.peak_waiting} waiting"
    )
    _, _, c_start, c_end = rows["C"]
    print(
        f"C ran {ms(c_end - c_start)} ms, but its caller waited {ms(c_end)} ms for the answer: "  # type: ignore[operator]
        "queue time and run time are reported apart."
    )


if __name__ == "__main__":
    asyncio.run(main())
