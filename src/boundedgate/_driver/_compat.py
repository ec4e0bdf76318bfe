"""The loop's clock and two task facts, which the driver reads on every admission, at the lowest cost.

``clock_of(loop)`` is what reads ``loop.time()``: asyncio's own loops answer it with
``time.monotonic()`` through a method of their own, a Python frame on every read, so for them it is
``time.monotonic`` itself, the same reading; any other clock (uvloop's, a test loop's that
fast-forwards, a ``time`` set on the loop) is read through ``loop.time``.

``current_task(loop)`` answers the task running on ``loop`` (None when ``loop`` is not running a
task in this thread), without the cost of ``asyncio.get_running_loop()`` that the public
``asyncio.current_task()`` pays on Python 3.11 and older. ``is_cancelling(task)`` is the cheap
filter: false for a task that has no cancellation pending. When it is true, ``cancellation_pending``
(off the hot path) decides: a caller is refused only when a cancellation is really pending, one
that its next ``await`` would raise.

What "really pending" means under asyncio: ``task.cancel()`` was requested and not yet delivered
(the task's ``_must_cancel``: a cancel of the running task, or of one woken but not yet resumed),
or the task is inside an anyio cancel scope that is cancelled and not shielded (anyio delivers its
cancellation again at every checkpoint). A cancellation that was delivered and swallowed
(``except CancelledError: continue``) is not pending, even though ``Task.cancelling()`` stays above
0 until someone calls ``uncancel()``: asyncio will not raise it again, ``asyncio.Semaphore`` admits
that task, and so does the gate (a loop that swallows cancellations would otherwise spin on the
refusal for ever). The same holds inside an ``asyncio.timeout()`` block whose deadline passed and
whose cancellation was swallowed: asyncio cancels once, and the block's exit decides.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections.abc import Callable
from typing import Any

from .._scopes import anyio_in_use

__all__ = ("cancellation_pending", "clock_of", "current_task", "is_cancelling")

current_task: Callable[[asyncio.AbstractEventLoop], asyncio.Task[Any] | None]
is_cancelling: Callable[[asyncio.Task[Any]], object]

_current_tasks = getattr(asyncio.tasks, "_current_tasks", None)
if sys.version_info < (3, 12) and isinstance(_current_tasks, dict):
    current_task = _current_tasks.get  # what asyncio.current_task(loop) looks up, minus its checks
else:
    current_task = asyncio.current_task  # implemented in C from 3.12

is_cancelling = asyncio.Task.cancelling

_ASYNCIO_TIME = asyncio.BaseEventLoop.time  # `return time.monotonic()`, on every Python we support


def clock_of(loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
    """What reads ``loop``'s clock: ``time.monotonic`` where that is all ``loop.time()`` does."""
    # Asked of the bound method, which a `time` set on the loop or its class replaces: reading the
    # loop's __dict__ instead would give it a dict of its own, and slow every attribute read of
    # asyncio's own loop code from then on.
    read = loop.time
    if getattr(read, "__func__", None) is _ASYNCIO_TIME and getattr(read, "__self__", None) is loop:
        return time.monotonic
    return read


def cancellation_pending(task: asyncio.Task[Any]) -> bool:
    """True when ``task`` will be cancelled at its next ``await``.

    That is a cancel requested and not yet delivered, or a cancelled anyio scope around it. Asked
    of the running task, once ``is_cancelling`` was true.
    """
    if getattr(task, "_must_cancel", False):
        return True
    anyio = anyio_in_use()
    if anyio is None:  # no anyio scope can exist: asking anyio would load its backend
        return False
    try:
        return bool(anyio.current_effective_deadline() == -math.inf)  # -inf: a cancelled, unshielded scope
    except Exception:  # no anyio context to ask (another library runs the loop): not anyio's to cancel
        return False
