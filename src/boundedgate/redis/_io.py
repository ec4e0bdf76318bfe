"""Talking to Redis: which errors mean "unreachable", calls bounded in time, and replies decoded."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

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


async def bounded(call: Coroutine[Any, Any, T], seconds: float) -> T:
    """Run ``call`` in a task of its own and await it for at most ``seconds``.

    The caller's cancellation is delivered here, at this ``await``, whatever the client does with
    the cancellation of a command in flight (some redis-py versions swallow it and return the
    reply). On a timeout or a cancellation the call's task is cancelled and its outcome dropped.

    Raises:
        TimeoutError: ``seconds`` passed first.
    """
    task = asyncio.ensure_future(call)
    try:
        # Not wait_for: on Python 3.11 it returns a result that is ready when the cancellation
        # arrives, and the cancellation is lost.
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
