"""Streams to hand permits to in the unit tests: async generators, and an SDK-shaped iterator.

The real SDK objects are tested in ``test_sdk.py`` against the fake provider; these stand in for
"any async iterator", and record what happened to them.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator

from boundedgate import OUTCOMES, BoundedGate


class Broken(Exception):
    """What a source raises mid-stream."""


@dataclasses.dataclass
class Log:
    """What happened to a source: items sent, and whether (and how) it was closed."""

    sent: int = 0
    closed: bool = False


async def ticks(
    n: int, log: Log | None = None, *, every: float = 0.0, fail_at: int | None = None
) -> AsyncGenerator[int, None]:
    """Yield ``0..n-1``, ``every`` seconds apart; raise :class:`Broken` instead of item ``fail_at``."""
    log = log if log is not None else Log()
    try:
        for i in range(n):
            if every:
                await asyncio.sleep(every)
            if i == fail_at:
                raise Broken(i)
            log.sent += 1
            yield i
    finally:
        await asyncio.sleep(0)  # closing takes a loop turn, like closing an HTTP response
        log.closed = True


class SdkLike:
    """An SDK-shaped stream: ``close()`` only (like anthropic's), consuming helpers, plain attributes.

    ``until_done()`` returns the object itself, like openai's helper streams; ``get_final_text()``
    raises after the stream ended when there was nothing, like anthropic's.
    """

    def __init__(self, n: int, log: Log | None = None, *, every: float = 0.0) -> None:
        self.log = log if log is not None else Log()
        self.response = {"status": 200}
        self.request_id = "req_1"
        self.received: list[int] = []
        self._iterator = ticks(n, self.log, every=every)
        self.text_stream = self._text()

    async def __anext__(self) -> int:
        item = await self._iterator.__anext__()
        self.received.append(item)
        return item

    def __aiter__(self) -> AsyncIterator[int]:
        return self._each()

    async def _each(self) -> AsyncIterator[int]:
        async for item in self._iterator:
            self.received.append(item)
            yield item

    async def _text(self) -> AsyncIterator[str]:
        async for item in self:
            yield f"t{item}"

    async def close(self) -> None:
        await self._iterator.aclose()

    async def until_done(self) -> SdkLike:
        async for _ in self:
            pass
        return self

    async def get_final_message(self) -> list[int]:
        await self.until_done()
        return self.received

    async def get_final_text(self) -> str:
        await self.until_done()
        if not self.received:
            raise RuntimeError("no text block")
        return "".join(f"t{i}" for i in self.received)


def outcomes(gate: BoundedGate) -> dict[str, int]:
    """The gate's outcome counters that are not zero, and ``running`` always."""
    stats = gate.stats()
    counts = {o.name: getattr(stats, o.name) for o in OUTCOMES}
    return {"running": stats.running} | {name: n for name, n in counts.items() if n}


async def settle(turns: int = 5) -> None:
    """Let a few loop turns pass: asyncgen finalisers and finaliser callbacks run in them."""
    for _ in range(turns):
        await asyncio.sleep(0)
