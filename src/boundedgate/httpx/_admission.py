"""How a client-side edge admits one HTTP request: which gate, with which deadline, class and cost.

Shared by the httpx transport and the aiohttp middleware; it never touches an HTTP library. A gate
the edge cannot use is refused when the edge is made, or, for what only a request shows (a gate
function's own errors, what it returns), at that request, with an error that says what to give
instead.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Hashable
from typing import Any, Literal, cast

from .._core import check_cost, check_count, check_max_wait
from .._driver import Chain, KeyedGate, is_chain
from .._streams import StreamPermit
from ._call import current_call
from ._exchange import Exchange

__all__ = ("Admission",)

Cost = float | Callable[[Any], float | None] | None

#: Where the documentation explains which gates the HTTP edges take.
GATES_DOCS = 'docs/http.md, "Gates of every kind"'

#: The keywords a gate function is called with (those that apply to the request).
_FUNCTION_KEYWORDS = ("deadline", "priority", "cost")

#: The ``admit()`` keywords a chain takes (``admit_all``'s; a priority only if every gate has classes).
_CHAIN_KEYWORDS = frozenset(("deadline", "priority", "cost", "max_wait"))


class Admission:
    """Makes the permit for each request, from the edge's settings and the enclosing ``gate_call()``.

    Every setting is checked when it is made, naming it (``TypeError``/``ValueError``), not at the
    first request.
    """

    __slots__ = (
        "_accepted",
        "_admit",
        "_chain",
        "_cost",
        "_cut",
        "_key",
        "_max_wait",
        "_priority",
        "_retry_priority",
        "gate",
    )

    def __init__(
        self,
        gate: Any,
        key: Callable[[Any], Hashable] | None,
        cost: Cost,
        priority: int,
        retry_priority: int | None,
        max_wait: float | Literal["pool"] | None,
        cut: bool = False,
    ) -> None:
        if max_wait != "pool" and max_wait is not None:
            check_max_wait(max_wait)  # a number of seconds >= 0
        if cost is not None and not callable(cost):
            check_cost(cost)
        check_count("priority", priority)  # an int >= 0; a class the gate lacks is refused below
        if retry_priority is not None:
            check_count("retry_priority", retry_priority)
        admit: Callable[..., Any]
        self._chain = chain = Chain(gate, key, "GatedTransport") if is_chain(gate) else None
        if chain is not None:
            key = None  # the chain found each keyed gate its key function
            admit = chain.admit
            accepted = _CHAIN_KEYWORDS - {"priority"} if chain.cluster else _CHAIN_KEYWORDS
            chain.check_priority(max(priority, retry_priority or 0))
        else:
            admit, accepted = _admitter(gate, key)
            if "priority" not in accepted and (priority != 0 or retry_priority is not None):
                raise TypeError(_no_priorities(gate))
            _check_priorities(gate, priority, retry_priority)
        self._admit: Callable[..., Any] = admit
        if max_wait is not None and max_wait != "pool" and "max_wait" not in accepted:
            raise TypeError(
                f"{_kind(gate)} takes no max_wait=: give max_wait=None (a gate function sets its own waits)"
            )
        if cut and chain is not None:
            raise TypeError(
                "on_deadline='cut' takes one gate, not a chain (admit_all() does not cut): leave "
                "on_deadline='late', the default, or put the call inside asyncio.timeout() (see docs/http.md)"
            )
        if cut and "on_deadline" not in accepted:
            raise TypeError(
                f"{_kind(gate)} takes no on_deadline=: it cannot cut a request off at its deadline; "
                "leave on_deadline='late', the default"
            )
        self.gate = gate
        self._key = key
        self._cut = cut
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
        if self._chain is not None:  # the exchange records its first key (the tenant's, say)
            permit, exchange.key = self._chain.admit(request, kwargs)
            return cast("StreamPermit", permit)  # never None: no step is skipped
        if self._cut:
            kwargs["on_deadline"] = "cut"
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
            raise TypeError(_not_a_gate(gate))
        if key is not None:
            raise TypeError("key= is for a KeyedGate; a gate function reads the request itself")
        return _function_admitter(gate)
    parameters = inspect.signature(admit).parameters
    accepted = frozenset(
        name for name in ("deadline", "priority", "cost", "max_wait", "on_deadline") if name in parameters
    )
    if "key" in parameters:
        if key is None:
            raise TypeError(
                f"{gate!r} is keyed: give key=, a function of the request that names its key, e.g."
                ' key=lambda request: request.headers["x-tenant"]'
            )
        return (lambda which, kwargs: admit(which, **kwargs)), accepted  # called with the request's key
    if key is not None:
        raise TypeError(f"{gate!r} is not keyed: key= is for a KeyedGate; leave key= out for this gate")
    return (lambda request, kwargs: admit(**kwargs)), accepted


def _function_admitter(gate: Callable[..., Any]) -> tuple[Callable[..., Any], frozenset[str]]:
    """How to admit through a gate function ``gate(request, deadline=, priority=, cost=)``.

    It must take ``deadline=`` (a ``gate_call()`` deadline is never dropped); it is given
    ``priority=`` and ``cost=`` when it takes them. What it raises about the keywords it was
    given, and what it returns, are checked at each request.
    """
    try:
        parameters = inspect.signature(gate).parameters.values()
    except (TypeError, ValueError):  # a builtin or an extension's: nothing to read, so pass it all
        accepted = frozenset(_FUNCTION_KEYWORDS)
    else:
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            accepted = frozenset(_FUNCTION_KEYWORDS)
        else:
            names = {p.name for p in parameters if p.kind is not inspect.Parameter.POSITIONAL_ONLY}
            accepted = frozenset(name for name in _FUNCTION_KEYWORDS if name in names)
    if "deadline" not in accepted:
        raise TypeError(
            f"the gate function {_name(gate)} takes no deadline=: it is called as gate(request,"
            " deadline=, priority=, cost=) with those that apply (a gate_call() deadline among them);"
            " take them and pass them on, e.g. lambda request, **options: gate.admit(**options)"
            f" (see {GATES_DOCS})"
        )

    def admit(request: Any, kwargs: dict[str, Any]) -> Any:
        try:
            permit = gate(request, **kwargs)
        except TypeError as error:
            said = str(error)  # Python's own message, or a gate's that names what it lacks
            if kwargs and ("unexpected keyword argument" in said or "() takes no " in said):
                raise TypeError(_refused_keywords(gate, kwargs, error)) from error
            raise
        if not (hasattr(type(permit), "__aenter__") and hasattr(type(permit), "_finish")):
            if inspect.iscoroutine(permit):
                permit.close()  # never awaited, and never warned about
            raise TypeError(_not_a_permit(gate, permit))
        return permit

    return admit, accepted


def _check_priorities(gate: Any, priority: int, retry_priority: int | None) -> None:
    """Refuse now a class the gate does not have (else every request would be refused with it)."""
    classes = gate._priorities if isinstance(gate, KeyedGate) else getattr(gate, "priorities", None)
    if not isinstance(classes, int):
        return
    highest = max(priority, retry_priority or 0)
    if highest >= classes:
        given = f"priority={priority}" + (
            "" if retry_priority is None else f", retry_priority={retry_priority}"
        )
        instead = "leave them out" if classes == 1 else f"use classes 0 to {classes - 1}"
        raise ValueError(
            f"{given}: class {highest} needs {highest + 1} priority classes, and {gate!r} has {classes}:"
            f" make it with {type(gate).__name__}(..., priorities={highest + 1}), or {instead}"
        )


def _kind(gate: Any) -> str:
    """The gate as an error names it: its class for a gate, its name for a function."""
    return type(gate).__name__ if hasattr(gate, "admit") else f"the gate function {_name(gate)}"


def _name(function: Any) -> str:
    return str(getattr(function, "__qualname__", None) or repr(function))


def _no_priorities(gate: Any) -> str:
    if not hasattr(gate, "admit"):
        return (
            f"the gate function {_name(gate)} takes no priority=: take it and pass it on to a gate"
            " with priority classes, or leave priority= and retry_priority= out"
        )
    return (
        f"a {type(gate).__name__} has no priority classes: priority= and retry_priority= need a"
        " BoundedGate or KeyedGate made with them (BoundedGate(..., priorities=2)); leave them out"
        f" for this gate (see {GATES_DOCS})"
    )


def _not_a_gate(gate: Any) -> str:
    if hasattr(type(gate), "__aenter__") and hasattr(type(gate), "_finish"):
        return (
            f"got {gate!r}, a permit, not a gate: give GatedTransport the gate itself"
            " (it admits each request)"
        )
    return (
        f"gate must be a BoundedGate, a KeyedGate (with key=), a RedisGate, or a function"
        f" gate(request, deadline=, priority=, cost=) returning a permit (such as admit_all(...)),"
        f" got {gate!r} (see {GATES_DOCS})"
    )


def _refused_keywords(gate: Any, kwargs: dict[str, Any], error: TypeError) -> str:
    given = ", ".join(f"{name}={value!r}" for name, value in kwargs.items())
    return (
        f"the gate function {_name(gate)} was called with {given} and raised: {error}. A gate"
        " function is given the deadline=, priority= and cost= that apply to the request; pass on"
        " only those its gate takes (a RedisGate takes deadline= and cost=, not priority=:"
        " lambda request, deadline=None, cost=None, **kw: gate.admit(deadline=deadline, cost=cost)),"
        " give GatedTransport the"
        f" gate itself, or leave out the setting (cost=, priority=, gate_call()'s) (see {GATES_DOCS})"
    )


def _not_a_permit(gate: Any, returned: object) -> str:
    what = "a coroutine (an async def)" if inspect.iscoroutine(returned) else repr(returned)
    return (
        f"the gate function {_name(gate)} returned {what}: it must return a permit, not enter or"
        " await it: a plain function such as lambda request, **kw: gate.admit(**kw) or"
        f" lambda request, **kw: admit_all(..., **kw) (see {GATES_DOCS})"
    )
