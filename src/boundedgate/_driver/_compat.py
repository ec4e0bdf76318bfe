"""The two task facts the driver needs on every admission, at the lowest cost each Python offers.

``current_task(loop)`` answers the task running on ``loop`` (None when ``loop`` is not running a
task in this thread), without the cost of ``asyncio.get_running_loop()`` that the public
``asyncio.current_task()`` pays on Python 3.11 and older. ``is_cancelling(task)`` is true when the
task has a cancellation pending, so an admission can refuse it before counting it.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

__all__ = ("current_task", "is_cancelling")

current_task: Callable[[asyncio.AbstractEventLoop], asyncio.Task[Any] | None]
is_cancelling: Callable[[asyncio.Task[Any]], object]

_current_tasks = getattr(asyncio.tasks, "_current_tasks", None)
if sys.version_info < (3, 12) and isinstance(_current_tasks, dict):
    current_task = _current_tasks.get  # what asyncio.current_task(loop) looks up, minus its checks
else:
    current_task = asyncio.current_task  # implemented in C from 3.12

if sys.version_info >= (3, 11):
    is_cancelling = asyncio.Task.cancelling
else:

    def is_cancelling(task: asyncio.Task[Any]) -> object:
        return getattr(task, "_must_cancel", False)
