"""How a client-side edge admits one HTTP request: which gate, with which deadline, class and cost.

Shared by the httpx transport and the aiohttp middleware; it never touches an HTTP library.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Hashable
from typing import Any, Literal

from .._core import check_cost, check_count, check_max_wait, check_priority
from .._streams import StreamPermit
from ._call import current_call
from ._exchange import Exchange

__all__ = ("Admission",)

Cost = float | Callable[[Any], float | None] | None


class Admission:
    """Makes the permit for each request, from the edge's settings and the enclosing ``gate_call()``.

    Every setting is checked when it is made, naming it (``TypeError``/``ValueError``), not at the
    first request.
    """

    __slots__ = ("_accepted", "_admit", "_cost", "_key", "_max_wait", "_priority", "_retry_priority", "gate")

    def __init__(
        self,
        gate: Any,
        key: Callable[[Any], Hashable] | None,
        cost: Cost,
        priority: int,
        retry_priority: int | None,
        max_wait: float | Literal["pool"] | None,
    ) -> None:
        if max_wait != "pool" and max_wait is not None:
            check_max_wait(max_wait)  # a number of seconds >= 0
        if cost is not None and not callable(cost):
            check_cost(cost)
        classes = getattr(gate, "priorities", None)
        for name, value in (("priority", priority), ("retry_priority", retry_priority)):
            if value is not None:
                check_count(name, value)
                if isinstance(classes, int):
                    check_priority(value, classes, name)
        self._admit, accepted = _admitter(gate, key)
        if "priority" not in accepted and (priority != 0 or retry_priority is not None):
            raise TypeError(f"{gate!r} has no priority classes: priority= and retry_priority= need one")
        if max_wait is not None and max_wait != "pool" and "max_wait" not in accepted:
            raise TypeError(f"{gate!r} takes no max_wait=: give max_wait=None")
        self.gate = gate
        self._key = key
        self._accepted = accepted
        self._cost = cost
        self._priority = priority
        self._retry_priority = retry_priority
        self._max_wait = max_wait

    def permit(self, request: Any, exchange: Exchange, pool_timeout: float | None) -> StreamPermit:
        """The permit for ``request`` (not entered yet); ``pool_timeout``: its client's, if known."""
        call = current_call()
        kwargs: dict[str, Any] = {}
        accepted = self._accepted
        priority = self._priority
        cost = self._cost
        if call is not None:
            call.attempts += 1
            if call.deadline != math.inf:
                kwargs["deadline"] = call.deadline
            if call.priority is not None:
                priority = call.priority
            if call.cost is not None:
                cost = call.cost
        if exchange.attempt > 0 and self._retry_priority is not None:
            priority = self._retry_priority
        if priority and "priority" in accepted:
            kwargs["priority"] = exchange.priority = priority
        if callable(cost):
            cost = cost(request)
        if cost is not None and "cost" in accepted:
            kwargs["cost"] = cost
        max_wait = pool_timeout if self._max_wait == "pool" else self._max_wait
        if max_wait is not None and "max_wait" in accepted:
            kwargs["max_wait"] = max_wait
        key = self._key
        if key is not None:  # keyed: the exchange records its key (its provider signals carry it)
            exchange.key = which = key(request)
            return self._admit(which, kwargs)  # type: ignore[no-any-return]
        return self._admit(request, kwargs)  # type: ignore[no-any-return]


def _admitter(gate: Any, key: Callable[[Any], Hashable] | None) -> tuple[Callable[..., Any], frozenset[str]]:
    """How to admit a request through ``gate``, and which ``admit()`` keywords it accepts."""
    admit = getattr(gate, "admit", None)
    if admit is None:
        if not callable(gate):
            raise TypeError(f"gate must have admit() or be callable, got {gate!r}")
        if key is not None:
            raise TypeError("key= is for a KeyedGate; a callable gate reads the request itself")
        return (lambda request, kwargs: gate(request, **kwargs)), frozenset(("deadline", "priority", "cost"))
    parameters = inspect.signature(admit).parameters
    accepted = frozenset(name for name in ("deadline", "priority", "cost", "max_wait") if name in parameters)
    if "key" in parameters:
        if key is None:
            raise TypeError(f"{gate!r} is keyed: give key=, a function of the request")
        return (lambda which, kwargs: admit(which, **kwargs)), accepted  # called with the request's key
    if key is not None:
        raise TypeError(f"{gate!r} is not keyed: key= is for a KeyedGate")
    return (lambda request, kwargs: admit(**kwargs)), accepted
