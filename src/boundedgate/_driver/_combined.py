"""admit_all: one request through several gates (tenant, then model, then provider), all or nothing.

The gates are taken one after the other, in the order given, each waiting only what is left of
one deadline for the whole; a gate already taken is held while the next is waited for (ordered
locking: with one global order, see ``_order``, this cannot deadlock). If a step is refused,
expires or is cancelled, every gate already taken is given back at once, as a slot handed over
but never used (each of those gates counts it ``cancelled``, not ``admitted``), and the caller
sees the refused step's own error, which names its gate, with the whole call's ``waited`` and
``elapsed``.
"""

from __future__ import annotations

import math
import operator
import sys
from collections.abc import Hashable
from typing import Any

from .._core import Status, check_cost, check_deadline, check_max_wait, check_priority, check_timeout
from ._bounded import BoundedGate
from ._combined_permit import CombinedPermit
from ._keyed import KeyedGate, _KeyState
from ._light import light_of
from ._order import check_order, checked_gates

__all__ = ("CombinedPermit", "admit_all")

NEW = Status.NEW
_ZERO = 0  # `priority is not _ZERO`: the identity of the small int the default is


def admit_all(
    *gates: BoundedGate | tuple[KeyedGate[Any], Hashable],
    timeout: float | None = None,
    deadline: float | None = None,
    max_wait: float | None = None,
    priority: int = 0,
    cost: float | None = None,
    raise_late: bool = True,
) -> CombinedPermit:
    """One request through several gates, taken in the order given, under one deadline; all or nothing.

    ::

        async with admit_all((tenants, tenant_id), (models, model), openai, timeout=30):
            reply = await client.chat.completions.create(...)

    Entering the returned :class:`CombinedPermit` with ``async with`` is the arrival: it enters
    each gate in turn, holding the ones taken while it waits for the next, and each step waits only
    what is left of the one budget. If a step is refused (:class:`QueueFull`), expires
    (:class:`QueueExpired`) or is cancelled, the gates already taken are given back at once (they
    count it as ``cancelled``: the slot was never used) and the step's own error propagates,
    naming its gate, with ``waited`` and ``elapsed`` those of the whole call (from the arrival at
    the first gate), as for :class:`Late`. On exit every gate is released, exactly once. A combined
    permit is entered once: entering it again while it runs is a ``RuntimeError``.

    The order is the caller's, and must be the same wherever the same gates meet: put first the
    gates whose slot may sit idle while later ones are waited for (tenant, session), and last the
    scarce shared one (the provider), so that a provider slot is only ever held by a request
    that is about to run. An admission that takes two gates in the opposite order of an earlier
    one (directly or through other gates), or takes a gate twice, is refused with ``ValueError``:
    two such callers could deadlock.

    Args:
        gates: The gates, in the order to take them: each a :class:`BoundedGate`, or a pair
            ``(keyed_gate, key)`` for a key of a :class:`KeyedGate` (resolved when its turn comes).
        timeout: Budget in seconds from arrival (>= 0), covering every wait and the run.
        deadline: Absolute deadline on the running loop's clock. Give at most one of the two.
        max_wait: A queue budget for the whole call, in seconds from arrival (>= 0): a step still
            waiting at ``min(deadline, arrival + max_wait)`` leaves with :class:`QueueExpired`;
            once every gate is held, only the deadline decides :class:`Late`.
        priority: The request's priority class at every gate (each must have that many classes).
        cost: The request's rate cost, paid at every gate that has rate limits.
        raise_late: False to count a block that finished late without its exit raising.

    Returns:
        A :class:`CombinedPermit`, to enter with ``async with``.

    Raises (on entry):
        QueueFull: A step's gate was full; names that gate.
        RateLimited: A step's rate limits could not pay the cost in time; names that gate.
        QueueExpired: The deadline passed while waiting at a step (or had passed on arrival).
        Evicted: A more urgent arrival took the request's place at a step; names that gate.
        asyncio.CancelledError: The caller was cancelled while waiting, or had a cancellation
            pending when it arrived (as for :meth:`BoundedGate.admit`).

    Raises (at once):
        TypeError: Something other than a gate or a ``(KeyedGate, key)`` pair; a malformed timeout
            or deadline.
        ValueError: No gates; a gate (or keyed gate) given twice; an order that contradicts one
            already used; both timeout and deadline; a priority or cost out of range (found when
            the step's gate is reached).
    """
    # These gates in this order admitted before (a pair is a new tuple each call: never found)?
    # One lookup, and the proxies compare as the gates they stand for, or fail once any is gone.
    steps: tuple[Any, ...] = gates  # each checked here (compiled, a step is read as an object)
    level = 0
    try:
        known = checked_gates.get(hash(steps))
        again = known is not None and known[0] == steps
    except (ReferenceError, TypeError):  # a gate gone, or a step that is no gate (unhashable)
        again = False
    if again:
        families = None
        if priority is not _ZERO:
            level = check_priority(priority, min(gate.priorities for gate in steps))
    else:
        families = _families(steps)
        if priority is not _ZERO:  # checked now against the fewest classes among the gates, not at a step
            classes = (f.priorities if type(f) is BoundedGate else f._priorities for f in families)
            level = check_priority(priority, min(classes))
    if cost is not None:
        cost = check_cost(cost)
    if deadline is None:
        # The common case inline; an int beyond a float's range (and inf, NaN) takes the full check.
        if (type(timeout) is float or type(timeout) is int) and 0 <= timeout <= _MAX:
            relative = timeout
        else:
            relative = check_timeout(timeout)  # inf for None: no deadline
        absolute = _INF
    elif timeout is not None:
        raise ValueError("give timeout or deadline, not both")
    else:
        relative = None
        absolute = check_deadline(deadline)
    if families is not None:
        check_order(families, all(map(operator.is_, families, steps)))  # each gate its own family?
    if _PLAIN_ALLOCATION:  # CombinedPermit.__init__ spelled out: the type call and its frame cost more
        permit: CombinedPermit = _new(CombinedPermit)
        permit._steps = steps
        permit._priority = level
        permit._cost = cost
        permit._handed_over = False
        permit._timeout = relative
        permit._permits = ()
        permit._loop = None
        permit.arrival = permit.started = permit.ended = None
        permit.deadline = absolute
        permit.status = NEW
    else:  # compiled, the type call is the cheap way (and object.__new__ is refused for a native class)
        permit = CombinedPermit(steps, relative, absolute, level, cost)
    permit._max_wait = _INF if max_wait is None else check_max_wait(max_wait)
    permit._raise_late = raise_late is True or bool(raise_late)
    return permit


def _families(gates: tuple[object, ...]) -> list[BoundedGate | KeyedGate[Any]]:
    """The family of each step (a gate, or the keyed gate of a key's gate or pair), each step checked."""
    families: list[BoundedGate | KeyedGate[Any]] = []
    for gate in gates:
        if type(gate) is BoundedGate:  # both classes are final: no subclass to miss
            state = gate._state
            light = light_of(gate)
            if light is not None:
                families.append(light._owner)
            else:
                families.append(state._owner if type(state) is _KeyState else gate)
        elif type(gate) is tuple and len(gate) == 2 and type(gate[0]) is KeyedGate:
            hash(gate[1])
            families.append(gate[0])
        else:
            raise TypeError(f"admit_all() takes gates and (KeyedGate, key) pairs, got {gate!r}")
    if not families:
        raise ValueError("admit_all() needs at least one gate")
    return families


_INF = math.inf
_MAX = sys.float_info.max


def _allocates_plainly() -> bool:
    """True when ``object.__new__`` makes a combined permit (interpreted); compiled, the class allocates."""
    try:
        _new(CombinedPermit)
    except TypeError:  # pragma: no mutate (either answer makes the same permits, interpreted)
        return False  # pragma: no mutate
    return True  # pragma: no mutate


_new = object.__new__
_PLAIN_ALLOCATION = _allocates_plainly()
