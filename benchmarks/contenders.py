"""What boundedgate is compared with: the primitives a user would reach for instead, and the floors.

Every contender offers the same three moves, so one scenario can run them all side by side:

- ``cm()``: an async context manager for one request (raises ``Refused`` when it turns it away);
- ``timed(seconds)``: the same with a deadline ``seconds`` from arrival, where the contender has one;
- ``name``: the row label.
"""

from __future__ import annotations

import asyncio
import collections
import math
from typing import Any

import anyio

from boundedgate import BoundedGate, GateError


class Refused(Exception):
    """A plain exception, as the floors and the hand-written gate raise it."""


class Gate:
    name = "boundedgate"

    def __init__(self, running: int, waiting: int | None) -> None:
        self.gate = BoundedGate(max_running=running, max_waiting=waiting)
        self.cm = self.gate.admit

    def timed(self, seconds: float) -> Any:
        return self.gate.admit(timeout=seconds)

    refused = GateError


class Semaphore:
    name = "asyncio.Semaphore"
    refused = Refused

    def __init__(self, running: int, waiting: int | None) -> None:
        self.sem = asyncio.Semaphore(running)

    def cm(self) -> Any:
        return self.sem


class CapacityLimiter:
    name = "anyio.CapacityLimiter"
    refused = Refused

    def __init__(self, running: int, waiting: int | None) -> None:
        self.limiter = anyio.CapacityLimiter(running)

    def cm(self) -> Any:
        return self.limiter


class HandWritten:
    """What a careful user writes without boundedgate: semaphore + waiter counter + asyncio.timeout."""

    name = "hand-written"
    refused = Refused

    def __init__(self, running: int, waiting: int | None) -> None:
        self.sem = asyncio.Semaphore(running)
        self.waiting = 0
        self.max_waiting = math.inf if waiting is None else waiting
        self._untimed = _HandWrittenAdmission(self, None)

    def cm(self) -> Any:
        return self._untimed

    def timed(self, seconds: float) -> Any:
        return _HandWrittenAdmission(self, seconds)


class _HandWrittenAdmission:
    __slots__ = ("owner", "seconds")

    def __init__(self, owner: HandWritten, seconds: float | None) -> None:
        self.owner = owner
        self.seconds = seconds

    async def __aenter__(self) -> None:
        owner = self.owner
        sem = owner.sem
        if sem.locked():
            if owner.waiting >= owner.max_waiting:
                raise Refused
            owner.waiting += 1
            try:
                async with asyncio.timeout(self.seconds):
                    await sem.acquire()
            finally:
                owner.waiting -= 1
        else:
            await sem.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.owner.sem.release()


class EmptyCM:
    """Floor: an async context manager that does nothing."""

    __slots__ = ()

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


class RaisingCM:
    """Floor for refusals: an async context manager whose entry raises a plain exception."""

    __slots__ = ()

    async def __aenter__(self) -> None:
        raise Refused

    async def __aexit__(self, *exc: object) -> None:
        return None


class FloorHandOff:
    """Floor under contention: a FIFO of bare futures with direct hand-off and nothing else."""

    name = "floor (bare future hand-off)"
    refused = Refused

    def __init__(self, running: int, waiting: int | None) -> None:
        self.free = running
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def cm(self) -> Any:
        return self

    async def __aenter__(self) -> None:
        if self.free:
            self.free -= 1
            return
        fut = asyncio.get_running_loop().create_future()
        self.waiters.append(fut)
        await fut

    async def __aexit__(self, *exc: object) -> None:
        if self.waiters:
            self.waiters.popleft().set_result(None)
        else:
            self.free += 1
