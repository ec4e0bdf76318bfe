"""Steady traffic through one gate while a test fails a server over: what every caller got.

Each task loops: ``admit``, a short call, release; a refusal backs off a little and tries again.
Every fencing token a caller was handed is kept (to check none repeats), and every exception a
caller saw is sorted: ``GateUnavailable``, another of the gate's typed errors, or anything else
(a raw redis-py error, which a caller must never get).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from boundedgate import GateError, GateUnavailable
from boundedgate.redis import RedisGate

from .helpers import wait_until

#: How long each admitted call holds its slot, and how long a refused task backs off.
CALL = 0.02
BACK_OFF = 0.05


class Traffic:
    """What ``tasks`` looping tasks got from ``gate`` (see the module's docstring).

    Args:
        gate: The gate the tasks go through.
        timeout: Each admission's ``timeout``.
    """

    def __init__(self, gate: RedisGate, timeout: float = 5.0) -> None:
        self.gate = gate
        self.timeout = timeout
        self.tokens: list[tuple[str, int]] = []
        self.admitted = 0
        self.unavailable = 0
        self.typed: Counter[str] = Counter()
        self.raw: list[BaseException] = []
        self._stop = asyncio.Event()

    async def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                async with self.gate.admit(timeout=self.timeout) as permit:
                    self.admitted += 1
                    if permit.token is not None:
                        self.tokens.append(permit.token)
                    await asyncio.sleep(CALL)
                continue
            except GateUnavailable:
                self.unavailable += 1
            except GateError as error:
                self.typed[type(error).__name__] += 1
            except Exception as error:  # kept: the test fails on it
                self.raw.append(error)
            await asyncio.sleep(BACK_OFF)

    @asynccontextmanager
    async def running(self, tasks: int) -> AsyncIterator[Traffic]:
        """Run ``tasks`` looping tasks until the block ends; then let each finish its round."""
        loops = [asyncio.create_task(self._loop()) for _ in range(tasks)]
        try:
            yield self
        finally:
            self._stop.set()
            await asyncio.gather(*loops)

    async def admits(self, more: int, within: float, what: str) -> float:
        """Wait until ``more`` admissions beyond those made so far; return the seconds it took."""
        target = self.admitted + more

        async def enough() -> bool:
            return self.admitted >= target

        return await wait_until(enough, within, what)

    async def unavailable_seen(self, within: float) -> None:
        """Wait until a caller has been refused with ``GateUnavailable``."""

        async def seen() -> bool:
            return self.unavailable > 0

        await wait_until(seen, within, "a GateUnavailable")

    def repeated_tokens(self) -> list[tuple[str, int]]:
        """The fencing tokens handed out more than once."""
        return [token for token, n in Counter(self.tokens).items() if n > 1]


def seconds_since(start: float) -> float:
    """Wall-clock seconds since ``start`` (``time.monotonic()``), for a failure message."""
    return time.monotonic() - start
