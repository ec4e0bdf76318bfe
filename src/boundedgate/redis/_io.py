"""Talking to Redis: which errors mean "unreachable", calls bounded in time, and replies decoded."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import redis.exceptions

__all__ = ("UNREACHABLE", "bounded", "text")

_CANCELLING = getattr(asyncio.Task, "cancelling", None)  # Python 3.11+

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


async def bounded(call: Coroutine[Any, Any, T], seconds: float) -> T:
    """Await ``call`` for at most ``seconds``, and make sure a cancellation of the caller is raised.

    Some redis-py versions swallow the cancellation of a command in flight and return its reply;
    this raises ``CancelledError`` then, so a cancelled caller never carries on as if it had not
    been (the reply is dropped: every script is idempotent, and the caller's cleanup undoes it).

    Raises:
        TimeoutError: ``seconds`` passed first.
        asyncio.CancelledError: The caller was cancelled, even if the client swallowed it.
    """
    task = asyncio.current_task()
    if _CANCELLING is None or task is None:
        return await _in_own_task(call, seconds)
    before = _CANCELLING(task)
    try:
        async with asyncio.timeout(seconds):
            result = await call
    except TimeoutError:
        raise TimeoutError(f"no answer from Redis within {seconds:.3f}s") from None
    if _CANCELLING(task) > before:
        raise asyncio.CancelledError
    return result


async def _in_own_task(call: Coroutine[Any, Any, T], seconds: float) -> T:
    # Python 3.10 cannot tell a swallowed cancellation: the call runs in a task of its own, so the
    # caller's cancellation is delivered at this await whatever the client does with it.
    task = asyncio.ensure_future(call)
    try:
        # Not wait_for: on Python 3.10 and 3.11 it returns a result that is ready when the
        # cancellation arrives, and the cancellation is lost.
        done, _ = await asyncio.wait((task,), timeout=seconds)
    except BaseException:
        _abandon(task)
        raise
    if not done:
        _abandon(task)
        raise TimeoutError(f"no answer from Redis within {seconds:.3f}s")
    return task.result()


def _abandon(task: asyncio.Future[Any]) -> None:
    task.cancel()
    task.add_done_callback(_drop)


def _drop(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved, so that asyncio does not log it as never retrieved


def text(value: object) -> str:
    """A reply element as text, whether the client decodes responses or not."""
    if isinstance(value, bytes):
        return value.decode()
    return str(value)
