"""``gate_call()``: one logical SDK call, whose every HTTP attempt shares one deadline.

An SDK retries inside ``create()``: each attempt is a new request through the transport, and so a
new admission. What ties the attempts of one call together is a context variable the caller sets
around the call; the transport reads it at each attempt.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import math
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar

from .._core import check_cost, check_count, check_deadline, check_timeout

__all__ = ("Call", "current_call", "gate_call")

_F = TypeVar("_F", bound=Callable[..., Awaitable[Any]])

_current: contextvars.ContextVar[Call | None] = contextvars.ContextVar("boundedgate.httpx.call", default=None)


class Call:
    """One logical call in progress, as :func:`gate_call` made it.

    Attributes:
        arrival: When the call began, on the event loop's clock.
        deadline: When every attempt must be done by (``math.inf``: no deadline of the call's own).
        priority: The priority class of its first attempt (None: the transport's).
        cost: The rate cost each attempt declares (None: the transport's estimate).
        attempts: How many HTTP requests the transport has admitted, or tried to, for this call.
    """

    __slots__ = ("arrival", "attempts", "cost", "deadline", "priority")

    def __init__(self, arrival: float, deadline: float, priority: int | None, cost: float | None) -> None:
        self.arrival = arrival
        self.deadline = deadline
        self.priority = priority
        self.cost = cost
        self.attempts = 0

    def __repr__(self) -> str:
        return f"<Call arrived {self.arrival:.3f}, deadline {self.deadline:.3f}, {self.attempts} attempts>"


def current_call() -> Call | None:
    """The :class:`Call` of the enclosing :func:`gate_call`, or None outside one."""
    return _current.get()


class gate_call:  # used like a function: ``with gate_call(timeout=30):``
    """Make the SDK calls inside one logical call: all their attempts share one deadline.

    ::

        async with gate_call(timeout=60, priority=0, cost=2_000):
            reply = await client.chat.completions.create(...)

    The deadline is taken when the block is entered; every attempt the SDK makes inside (its
    retries after a 429 or a dropped connection) is admitted with that same deadline, so a retry
    never earns a new budget and one that can no longer make it is refused ``QueueExpired``. Works
    as ``with``, ``async with``, and as a decorator of an ``async def`` (a fresh call per
    invocation). Nest one only to tighten: an inner block never extends its outer deadline.

    Args:
        timeout: The call's budget in seconds from entering the block.
        deadline: An absolute deadline on the event loop's clock instead.
        priority: The first attempt's priority class (later ones may get the transport's
            ``retry_priority``).
        cost: The rate cost each attempt declares (e.g. a token estimate), which the transport
            settles from the provider's reported usage.

    Raises:
        TypeError, ValueError: A setting that ``admit()`` would refuse (each named), or both a
            timeout and a deadline.
    """

    __slots__ = ("_cost", "_deadline", "_priority", "_timeout", "_tokens")

    def __init__(
        self,
        timeout: float | None = None,
        *,
        deadline: float | None = None,
        priority: int | None = None,
        cost: float | None = None,
    ) -> None:
        if timeout is not None and deadline is not None:
            raise ValueError("give timeout or deadline, not both")
        # Checked as admit() checks them, now, each named.
        self._timeout = None if timeout is None else check_timeout(timeout)
        self._deadline = None if deadline is None else check_deadline(deadline)
        self._priority = None if priority is None else check_count("priority", priority)
        self._cost = None if cost is None else check_cost(cost)
        self._tokens: list[contextvars.Token[Call | None]] = []

    def __enter__(self) -> Call:
        now = asyncio.get_running_loop().time()
        deadline = math.inf if self._deadline is None else self._deadline
        if self._timeout is not None:
            deadline = now + self._timeout
        outer = _current.get()
        if outer is not None:
            deadline = min(deadline, outer.deadline)
        call = Call(now, deadline, self._priority, self._cost)
        self._tokens.append(_current.set(call))
        return call

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        _current.reset(self._tokens.pop())

    async def __aenter__(self) -> Call:
        return self.__enter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    def __call__(self, function: _F) -> _F:
        """Decorate an ``async def``: each invocation runs inside a fresh call."""

        @functools.wraps(function)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            with gate_call(self._timeout, deadline=self._deadline, priority=self._priority, cost=self._cost):
                return await function(*args, **kwargs)

        return wrapper  # type: ignore[return-value]
