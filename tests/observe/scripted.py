"""A scripted run that ends in many outcomes, and the arrivals it counted, for the export tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from boundedgate import BoundedGate, GateError

#: (arrival s, service s, timeout s or None, priority) of each request.
SCRIPT = [
    (0.0, 1.0, None, 0),
    (0.0, 3.0, 2.0, 0),  # runs late
    (0.0, 0.5, None, 1),  # evicted by the sixth
    (0.1, 0.5, None, 1),  # the queue is full now: evicted by the next
    (0.1, 0.5, 0.5, 0),  # expires in the queue
    (0.2, 0.5, None, 0),
    (0.3, 0.5, None, 0),  # the queue is full of urgent waiters: rejected
    (1.5, 0.2, None, 0),
    (1.6, 0.3, 5.0, 0),
    (4.0, 0.1, None, 0),
]


def script_gate() -> BoundedGate:
    return BoundedGate(max_running=2, max_waiting=2, priorities=2, name="scripted")


async def run_script(
    gate: BoundedGate, every: float = 0.05, check: Callable[[int], None] | None = None
) -> int:
    """Play :data:`SCRIPT` through ``gate``; call ``check(arrivals so far)`` every ``every`` s."""
    arrived = 0

    async def one(at: float, service: float, timeout: float | None, priority: int) -> None:
        nonlocal arrived
        await asyncio.sleep(at)
        permit = gate.admit(timeout=timeout, priority=priority, raise_late=False)
        arrived += 1
        with contextlib.suppress(GateError):
            async with permit:
                await asyncio.sleep(service)

    tasks = [asyncio.create_task(one(*row)) for row in SCRIPT]
    while not all(task.done() for task in tasks):
        await asyncio.sleep(every)
        if check is not None:
            check(arrived)
    await asyncio.gather(*tasks)
    return arrived
