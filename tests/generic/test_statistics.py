"""Statistics add up: every arrival is in exactly one outcome, or still waiting or running."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from boundedgate import Late, QueueExpired, QueueFull
from tests.helpers import Boom

from .calls import Call, add_up, hold, queue
from .subjects import Subject, sleep_until


async def test_every_arrival_is_counted_once_in_its_outcome_or_as_pending(subject: Subject) -> None:
    gate = subject.gate(1, 2)
    loop = asyncio.get_running_loop()
    calls: list[Call] = []

    def arrive(call: Call) -> Call:
        calls.append(call)
        return call

    await add_up(subject, gate, calls)
    first = arrive(Call(gate, timeout=subject.t(100)))
    await subject.until(lambda: first.entered, "the first started")
    (failing,) = await queue(subject, gate, 1)
    calls += [failing]
    (expiring,) = await queue(subject, gate, 1, timeout=subject.t(2))
    calls += [expiring]
    refused = arrive(Call(gate))
    assert isinstance(await refused.outcome(), QueueFull)
    counts = await add_up(subject, gate, calls)
    assert (counts.running, counts.waiting, counts.rejected) == (1, 2, 1)

    await expiring.outcome()
    if not subject.frees_place_at_deadline:
        await gate.quiet()
    (cancelled,) = await queue(subject, gate, 1)
    calls += [cancelled]
    cancelled.task.cancel()
    await cancelled.outcome()
    counts = await add_up(subject, gate, calls)
    assert (counts.running, counts.waiting, counts.expired, counts.cancelled) == (1, 1, 1, 1)

    async def over_time(call: Call) -> None:
        await sleep_until(call.permit.deadline)

    (late,) = await queue(subject, gate, 1, timeout=subject.t(6), body=over_time)
    calls += [late]
    first.finish()
    await first.outcome()
    await subject.until(lambda: failing.entered, "the second started")
    await add_up(subject, gate, calls)
    failing.task.cancel()  # cancelled in its body: it ran, and failed
    await failing.outcome()
    assert isinstance(await late.outcome(), Late)
    last = arrive(Call(gate, body=_raises))
    assert type(await last.outcome()) is Boom
    counts = await add_up(subject, gate, calls)
    assert counts.ended() == {
        "rejected": 1,
        "expired": 1,
        "cancelled": 1,
        "completed": 1,
        "late": 1,
        "failed": 2,
    }
    assert (counts.running, counts.waiting, counts.arrived) == (0, 0, 7)
    assert loop.time() >= late.permit.deadline


async def _raises(call: Call) -> None:
    raise Boom


async def test_a_refusal_before_arrival_is_counted_nowhere(subject: Subject) -> None:
    gate = subject.gate(1, 0)
    holder = await hold(gate)
    before = gate.counts()
    for admit in ({"timeout": 0}, {"deadline": asyncio.get_running_loop().time() - subject.t(1)}):
        call = Call(gate, **admit)
        assert isinstance(await call.outcome(), QueueExpired)
    assert gate.counts() == before  # not even rejected, though the gate is full
    holder.release()
    await gate.quiet()
    counts = gate.counts()
    assert (counts.arrived, counts.completed, counts.rejected, counts.expired) == (1, 1, 0, 0)


async def test_queue_time_and_run_time_are_reported_apart(subject: Subject) -> None:
    # Seed 000's C: it ran 1 unit, but its caller waited 3 in all, 2 of them in the queue.
    gate = subject.gate(1, 1)

    def runs(units: float) -> Callable[[Call], Awaitable[None]]:
        async def body(call: Call) -> None:
            await sleep_until(call.permit.started + subject.t(units))

        return body

    first = Call(gate, body=runs(2))
    await subject.until(lambda: first.entered, "the first started")
    (second,) = await queue(subject, gate, 1, body=runs(1))
    assert (await first.outcome(), await second.outcome()) == (None, None)
    await gate.quiet()
    counts = gate.counts()
    waited = second.permit.started - second.permit.arrival
    assert subject.at(second.permit.started, first.permit.started + subject.t(2))
    assert subject.same(counts.queue_seconds_max, waited)
    assert subject.same(counts.run_seconds_max, first.permit.ended - first.permit.started)
    assert subject.at(counts.run_seconds_max, subject.t(2))
    assert subject.same(counts.end_to_end_seconds_max, second.permit.ended - second.permit.arrival)
    assert subject.at(counts.end_to_end_seconds_max, waited + subject.t(1))
