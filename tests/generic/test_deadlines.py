"""Deadlines from arrival: QueueExpired at the deadline (deadline <= now), Late on exit at or after it."""

from __future__ import annotations

import asyncio
import math

import pytest

from boundedgate import Late, QueueExpired, Status
from tests.helpers import Boom

from .calls import AdmitKeywords, Call, hold, queue
from .subjects import Subject, sleep_until


async def test_a_waiter_expires_at_its_deadline_and_frees_its_place(subject: Subject) -> None:
    gate = subject.gate(1, 1)
    holder = await hold(gate)
    (waiter,) = await queue(subject, gate, 1, timeout=subject.t(2))
    error = await waiter.outcome()
    permit = waiter.permit
    assert isinstance(error, QueueExpired)
    assert isinstance(error, TimeoutError)
    assert permit.deadline == permit.arrival + subject.t(2)
    assert subject.at(permit.ended, permit.deadline)
    assert (permit.status, permit.started, waiter.entered) == (Status.EXPIRED, None, False)
    assert (error.code, error.http_status, error.gate, error.deadline) == (
        "queue_expired",
        503,
        gate.name,
        permit.deadline,
    )
    assert subject.at(error.waited, subject.t(2))
    if not subject.frees_place_at_deadline:
        await gate.quiet()
    (next_waiter,) = await queue(subject, gate, 1)  # the place it left takes the next one (Q=1)
    counts = gate.counts()
    assert (counts.running, counts.waiting, counts.expired, counts.admitted) == (1, 1, 1, 1)
    holder.release()
    await subject.until(lambda: next_waiter.entered, "the next waiter started")
    next_waiter.finish()
    assert await next_waiter.outcome() is None
    await gate.quiet()
    counts = gate.counts()
    assert (counts.admitted, counts.completed, counts.expired) == (2, 2, 1)


@pytest.mark.parametrize(
    "release_first", [True, False], ids=["release-then-deadline", "deadline-then-release"]
)
async def test_a_deadline_reached_as_a_slot_frees_expires_and_the_slot_passes_on(
    subject: Subject, release_first: bool
) -> None:
    # The holder releases at the very instant the head waiter's deadline is reached: deadline <= now
    # means expired, so the waiter never starts, and the slot goes to the next one.
    gate = subject.gate(1, 2)
    loop = asyncio.get_running_loop()
    holder = await hold(gate)
    deadline = loop.time() + subject.t(2)
    expired_before_release: list[int] = []

    def free() -> None:
        expired_before_release.append(gate.counts().expired)
        holder.release()

    if release_first:  # its timer is older than the gate's one for the deadline: it fires first
        loop.call_at(deadline, free)
    (expiring,) = await queue(subject, gate, 1, deadline=deadline)
    if not release_first:
        loop.call_at(deadline, free)
    (after,) = await queue(subject, gate, 1)
    error = await expiring.outcome()
    assert isinstance(error, QueueExpired)
    assert (expiring.permit.status, expiring.permit.started, expiring.entered) == (
        Status.EXPIRED,
        None,
        False,
    )
    await subject.until(lambda: after.entered, "the next waiter started")
    assert after.permit.started >= deadline
    if subject.virtual:  # the two events really did share the instant, in the order named
        assert expired_before_release == [0 if release_first else 1]
    after.finish()
    assert await after.outcome() is None
    await gate.quiet()
    counts = gate.counts()
    assert (counts.admitted, counts.completed, counts.expired, counts.running) == (2, 2, 1, 0)


@pytest.mark.parametrize("how", ["timeout=0", "deadline=now", "deadline-passed"])
async def test_a_deadline_already_reached_on_arrival_is_refused_uncounted(subject: Subject, how: str) -> None:
    gate = subject.gate(1, 1)
    now = asyncio.get_running_loop().time()
    admits: dict[str, AdmitKeywords] = {
        "timeout=0": {"timeout": 0},
        "deadline=now": {"deadline": now},
        "deadline-passed": {"deadline": now - subject.t(1)},
    }
    permit = gate.admit(**admits[how])
    with pytest.raises(QueueExpired) as info:
        async with permit:
            pytest.fail("a request whose deadline had passed started")
    assert permit.status is Status.EXPIRED
    assert permit.started is None
    assert info.value.gate == gate.name
    counts = gate.counts()
    assert (counts.arrived, counts.outcomes, counts.running) == (0, 0, 0)  # a free slot, yet refused
    async with gate.admit() as fresh:  # the gate still works
        assert fresh.status is Status.RUNNING


@pytest.mark.parametrize(
    ("ends", "outcome"),
    [("before", Status.COMPLETED), ("at", Status.LATE), ("after", Status.LATE)],
    ids=["before-the-deadline", "at-the-deadline", "after-the-deadline"],
)
async def test_a_body_that_ends_at_or_after_its_deadline_is_late_and_held_its_slot(
    subject: Subject, ends: str, outcome: Status
) -> None:
    gate = subject.gate(1, 1)

    async def body(call: Call) -> None:
        deadline = call.permit.deadline
        await sleep_until(
            {"before": deadline - subject.t(5), "at": deadline, "after": deadline + subject.t(1)}[ends]
        )

    runner = Call(gate, timeout=subject.t(6), body=body)
    await subject.until(lambda: runner.entered, "the body started")
    (waiter,) = await queue(subject, gate, 1)  # no deadline of its own: it waits for the real end
    error = await runner.outcome()
    permit = runner.permit
    assert permit.status is outcome
    if outcome is Status.LATE:
        assert isinstance(error, Late)
        assert isinstance(error, TimeoutError)
        assert (error.code, error.http_status, error.gate, error.deadline) == (
            "late",
            504,
            gate.name,
            permit.deadline,
        )
        assert error.overrun == permit.ended - permit.deadline >= 0
        assert error.elapsed == permit.ended - permit.arrival
        assert error.waited == permit.started - permit.arrival
        if ends == "at":
            assert subject.at(permit.ended, permit.deadline)
    else:
        assert error is None
    await subject.until(lambda: waiter.entered, "the waiter started")
    assert waiter.permit.started >= permit.ended  # the slot was held to the body's real end
    waiter.finish()
    assert await waiter.outcome() is None
    await gate.quiet()
    counts = gate.counts()
    late = int(outcome is Status.LATE)
    assert (counts.late, counts.completed, counts.running) == (late, 2 - late, 0)


async def test_a_body_that_raises_past_its_deadline_propagates_its_own_exception(subject: Subject) -> None:
    gate = subject.gate(1, 0)

    async def body(call: Call) -> None:
        await sleep_until(call.permit.deadline + subject.t(1))
        raise Boom

    call = Call(gate, timeout=subject.t(1), body=body)
    assert type(await call.outcome()) is Boom
    assert call.permit.status is Status.FAILED
    await gate.quiet()
    counts = gate.counts()
    assert (counts.failed, counts.late, counts.completed, counts.running) == (1, 0, 0, 0)


async def test_release_at_the_deadline_ends_the_request_late_and_its_exit_says_so(subject: Subject) -> None:
    gate = subject.gate(1, 0)
    loop = asyncio.get_running_loop()
    with pytest.raises(Late):
        async with gate.admit(timeout=subject.t(2)) as permit:
            released = loop.create_future()

            def release_then_wake() -> None:
                permit.release()
                released.set_result(None)

            loop.call_at(permit.deadline, release_then_wake)
            await released
            assert permit.status is Status.LATE  # release() itself never raises
    assert subject.at(permit.ended, permit.deadline)
    await gate.quiet()
    counts = gate.counts()
    assert (counts.late, counts.completed, counts.running) == (1, 0, 0)


@pytest.mark.parametrize("admit", [{}, {"deadline": math.inf}, {"timeout": math.inf}], ids=str)
async def test_without_a_deadline_a_request_waits_and_runs_as_long_as_it_takes(
    subject: Subject, admit: AdmitKeywords
) -> None:
    gate = subject.gate(1, 1)
    holder = await hold(gate)
    (waiter,) = await queue(subject, gate, 1, **admit)
    assert waiter.permit.deadline == math.inf
    await sleep_until(asyncio.get_running_loop().time() + subject.t(1))
    holder.release()
    await subject.until(lambda: waiter.entered, "the waiter started")
    await sleep_until(asyncio.get_running_loop().time() + subject.t(1))
    waiter.finish()
    assert await waiter.outcome() is None
    assert waiter.permit.status is Status.COMPLETED
    await gate.quiet()
    counts = gate.counts()
    assert (counts.completed, counts.expired, counts.late) == (2, 0, 0)


@pytest.mark.parametrize(
    ("admit", "error"),
    [
        pytest.param({"timeout": -1}, ValueError, id="timeout=-1"),
        pytest.param({"timeout": math.nan}, ValueError, id="timeout=nan"),
        pytest.param({"timeout": "1"}, TypeError, id="timeout='1'"),
        pytest.param({"timeout": True}, TypeError, id="timeout=True"),
        pytest.param({"deadline": math.nan}, ValueError, id="deadline=nan"),
        pytest.param({"deadline": "1"}, TypeError, id="deadline='1'"),
        pytest.param({"timeout": 1, "deadline": 1.0}, ValueError, id="timeout-and-deadline"),
        # Too large for a float: today an OverflowError, on entry for a timeout (issue 11, item 12).
        pytest.param({"timeout": 10**400}, (TypeError, ValueError), id="timeout=10**400"),
        pytest.param({"deadline": 10**400}, (TypeError, ValueError), id="deadline=10**400"),
    ],
)
async def test_a_malformed_timeout_or_deadline_is_refused_at_once(
    subject: Subject, admit: dict[str, object], error: type[Exception] | tuple[type[Exception], ...]
) -> None:
    gate = subject.gate(1, 1)
    with pytest.raises(error):
        # Ill-typed on purpose: the values are what a caller without a type checker may pass.
        gate.admit(**admit)  # type: ignore[arg-type]  # at the call, before any arrival
    counts = gate.counts()
    assert (counts.arrived, counts.running) == (0, 0)
