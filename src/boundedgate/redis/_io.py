"""Talking to Redis: which errors mean "unreachable", calls bounded in time, and replies decoded."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from typing import TypeVar

import redis.exceptions

__all__ = ("UNREACHABLE", "bounded", "text")

T = TypeVar("T")

#: Errors that mean Redis could not be reached or did not answer in time: the gate fails closed.
#: A read-only replica (after a failover, before clients find the new primary) counts as unreachable.
UNREACHABLE: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,  # includes BusyLoadingError: a restarted server loading data
    redis.exceptions.TimeoutError,
    redis.exceptions.ReadOnlyError,
    OSError,
    TimeoutError,
    asyncio.TimeoutError,
)

if sys.version_info >= (3, 11):

    async def bounded(call: Awaitable[T], seconds: float) -> T:
        """Await ``call`` for at most ``seconds``; raise :class:`TimeoutError` past that."""
        async with asyncio.timeout(seconds):
            return await call

else:

    async def bounded(call: Awaitable[T], seconds: float) -> T:
        """Await ``call`` for at most ``seconds``; raise :class:`TimeoutError` past that."""
        return await asyncio.wait_for(call, seconds)


def text(value: object) -> str:
    """A reply element as text, whether the client decodes responses or not."""
    if isinstance(value, bytes):
        return value.decode()
    return str(value)
