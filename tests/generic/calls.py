"""Requests for the generic tests: each in a task of its own, recording what its caller saw."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from .subjects import Gate, Subject

__all__ = ("Call", "hold", "queue")


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


async def hold(gate: Gate, **admit: float) -> Any:
    """A permit that holds a slot of ``gate`` (there must be a free one)."""
    permit = gate.admit(**admit)
    await permit.__aenter__()
    return permit


async def queue(
    subject: Subject, gate: Gate, n: int, log: list[Call] | None = None, **admit: Any
) -> list[Call]:
    """``n`` requests queued one after the other (each arrives once the one before is queued)."""
    calls = []
    start = gate.counts().waiting
    for i in range(n):
        calls.append(Call(gate, log=log, **admit))
        await subject.until(lambda i=i: gate.counts().waiting == start + i + 1, f"{start + i + 1} waiting")
    return calls
