"""Requests for the generic tests: each in a task of its own, recording what its caller saw."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypedDict, Unpack

from boundedgate import Late, QueueExpired, QueueFull, Status

from .subjects import OUTCOMES, Counts, Gate, Subject

__all__ = (
    "AdmitKeywords",
    "Call",
    "CallKeywords",
    "add_up",
    "entered",
    "hold",
    "queue",
    "queued",
    "seen",
    "started",
    "waiting",
)


class Call:
    """One request through ``gate``, run in a task: its body waits until :meth:`finish` (or runs ``body``).

    The task never raises: what the caller saw (an error, ``CancelledError`` included) is ``error``.
    """

    def __init__(
        self,
        gate: Gate,
        *,
        timeout: float | None = None,
        deadline: float | None = None,
        log: list[Call] | None = None,
        body: Callable[[Call], Awaitable[None]] | None = None,
    ) -> None:
        self.permit: Any = gate.admit(timeout=timeout, deadline=deadline)
        #: The body started.
        self.entered = False
        #: The body ended without raising.
        self.finished = False
        #: What the caller saw: None, or the exception the request raised.
        self.error: BaseException | None = None
        self._go = asyncio.Event()
        self._log = log
        self._body = body
        self._patience = gate.patience
        self.task = asyncio.create_task(self._run())

    def finish(self) -> None:
        """Let the body end."""
        self._go.set()

    async def finished_by_test(self) -> None:
        """In a ``body``: wait until the test calls :meth:`finish`."""
        await self._go.wait()

    async def outcome(self) -> BaseException | None:
        """Wait for the request to end (failing past the gate's patience); what its caller saw."""
        await asyncio.wait((self.task,), timeout=self._patience)
        if not self.task.done():
            raise AssertionError(f"{self.permit!r} did not end within {self._patience}s")
        return self.error

    async def _run(self) -> None:
        try:
            async with self.permit:
                self.entered = True
                if self._log is not None:
                    self._log.append(self)
                if self._body is None:
                    await self._go.wait()
                else:
                    await self._body(self)
                self.finished = True
        except BaseException as error:  # recorded, for the test to judge
            self.error = error


class AdmitKeywords(TypedDict, total=False):
    """The keywords of :meth:`Gate.admit`, for a helper that passes them on."""

    timeout: float | None
    deadline: float | None


class CallKeywords(AdmitKeywords, total=False):
    """The keywords of :class:`Call` that :func:`queue` passes on to each request."""

    body: Callable[[Call], Awaitable[None]] | None


# Checks for ``Subject.until``, each bound to its arguments when made (a lambda in a loop is not).


def entered(call: Call) -> Callable[[], bool]:
    """Whether ``call``'s body has started."""
    return lambda: call.entered


def queued(call: Call) -> Callable[[], bool]:
    """Whether ``call``'s request waits in the queue."""
    return lambda: call.permit.status is Status.QUEUED


def started(log: list[Call], n: int) -> Callable[[], bool]:
    """Whether ``n`` requests have started, as ``log`` (a :class:`Call`'s ``log``) records them."""
    return lambda: len(log) == n


def waiting(gate: Gate, n: int) -> Callable[[], bool]:
    """Whether ``n`` requests wait at ``gate``."""
    return lambda: gate.counts().waiting == n


async def hold(gate: Gate, **admit: Unpack[AdmitKeywords]) -> Any:
    """A permit that holds a slot of ``gate`` (there must be a free one)."""
    permit = gate.admit(**admit)
    await permit.__aenter__()
    return permit


async def queue(
    subject: Subject, gate: Gate, n: int, log: list[Call] | None = None, **call: Unpack[CallKeywords]
) -> list[Call]:
    """``n`` requests queued one after the other (each arrives once the one before is queued)."""
    calls = []
    start = gate.counts().waiting
    for i in range(n):
        calls.append(Call(gate, log=log, **call))
        await subject.until(waiting(gate, start + i + 1), f"{start + i + 1} waiting")
    return calls


def seen(calls: list[Call]) -> dict[str, int]:
    """Each request's outcome as its caller saw it (or running, or waiting), counted."""
    counted = dict.fromkeys(("running", "waiting", *OUTCOMES), 0)
    for call in calls:
        if not call.task.done():
            counted["running" if call.entered else "waiting"] += 1
            continue
        error = call.error
        if call.finished and isinstance(error, asyncio.CancelledError):
            # Cancelled as its exit waited for the release to land (a RedisGate's exit awaits it):
            # the outcome was decided before, and the caller cannot see which.
            counted[call.permit.status.value] += 1
        elif isinstance(error, QueueFull):
            counted["rejected"] += 1
        elif isinstance(error, QueueExpired):
            counted["expired"] += 1
        elif isinstance(error, Late):
            counted["late"] += 1
        elif error is None:
            counted["completed"] += 1
        elif call.entered:  # the body raised, or was cancelled
            counted["failed"] += 1
        else:
            assert isinstance(error, asyncio.CancelledError), error
            counted["cancelled"] += 1
    return counted


async def add_up(subject: Subject, gate: Gate, calls: list[Call]) -> Counts:
    """Check the gate's counts against what the callers saw, and that they add up; return them."""

    def agree() -> bool:
        # A request just created, or just handed a slot, takes a step to show it; a RedisGate counts
        # a release as it sends it, while its caller still awaits the reply (a body ending as this
        # runs, on the real clock).
        counts = gate.counts()
        return {"running": counts.running, "waiting": counts.waiting, **counts.ended()} == seen(calls)

    await gate.quiet()
    await subject.until(agree, "the gate's counts are its callers' outcomes")
    counts = gate.counts()
    assert counts.arrived == len(calls) == counts.outcomes + counts.running + counts.waiting
    assert counts.admitted == counts.completed + counts.late + counts.failed + counts.running
    assert counts.other == 0
    peak_running, peak_waiting = await gate.peaks()
    assert peak_running <= gate.max_running
    assert peak_waiting <= gate.max_waiting  # type: ignore[operator]
    return counts
