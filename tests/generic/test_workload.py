"""A seeded mixed workload: arrivals, deadlines, bodies that raise, cancellations; the rules hold throughout.

Arrivals, body ends and deadlines fall on whole units (so, on virtual time, they tie: the
semantics decide, not the loop's order), cancellations on half units (so a caller's cancellation
never ties with the outcome it would race, and what the caller saw names one outcome).
"""

from __future__ import annotations

import asyncio
import random

import pytest

from tests.helpers import Boom

from .calls import Call, add_up
from .subjects import Subject, sleep_until


@pytest.mark.parametrize("seed", [0, 1])
async def test_a_random_workload_keeps_the_bounds_and_its_counts_add_up(subject: Subject, seed: int) -> None:
    rng = random.Random(seed)
    gate = subject.gate(2, 3)
    loop = asyncio.get_running_loop()
    origin = loop.time()
    inside = most = 0
    calls: list[Call] = []

    def body(service: int, raises: bool):  # type: ignore[no-untyped-def]
        async def run(call: Call) -> None:
            nonlocal inside, most
            inside += 1
            most = max(most, inside)
            try:
                await sleep_until(call.permit.started + subject.t(service))
                if raises:
                    raise Boom
            finally:
                inside -= 1

        return run

    for arrival in sorted(rng.randrange(12) for _ in range(24)):
        await sleep_until(origin + subject.t(arrival))
        budget = rng.choice([None, 1, 2, 3, 5, 8])
        call = Call(
            gate,
            timeout=None if budget is None else subject.t(budget),
            body=body(rng.randrange(1, 4), rng.random() < 0.15),
        )
        calls.append(call)
        if rng.random() < 0.2:
            loop.call_at(origin + subject.t(arrival + rng.randrange(4) + 0.5), call.task.cancel)
        if rng.random() < 0.3:
            await add_up(subject, gate, calls)
    for call in calls:
        await call.outcome()
    counts = await add_up(subject, gate, calls)
    assert most <= 2
    assert counts.arrived == 24
    assert counts.outcomes == 24
