"""admit_all: one request through several gates (tenant, then model, then provider), all or nothing.

The gates are taken one after the other, in the order given, each waiting only what is left of
one deadline for the whole; a gate already taken is held while the next is waited for (ordered
locking: with one global order, see ``_order``, this cannot deadlock). If a step is refused,
expires or is cancelled, every gate already taken is given back at once, as a slot handed over
but never used (each of those gates counts it ``cancelled``, not ``admitted``), and the caller
sees the refused step's own error, which names its gate, with the whole call's ``waited`` and
``elapsed``.

A cluster gate (``boundedgate.redis.RedisGate``, or a key of a ``RedisKeyedGate``) is a step too,
told by its class's name (the driver never imports ``boundedgate.redis``): such a chain goes
through each gate's own ``admit()`` (``CombinedPermit._enter_chain``), behind one flag, so that
the all-in-process chain keeps its compiled path.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Protocol

from ._bounded import BoundedGate
from ._combined_permit import CombinedPermit, combine
from ._keyed import KeyedGate

__all__ = ("CombinedPermit", "admit_all")


class _ClusterGate(Protocol):
    """A ``boundedgate.redis.RedisGate``, as a type checker tells it (the driver never imports it)."""

    @property
    def process(self) -> str: ...


class _ClusterKeyedGate(Protocol):
    """A ``boundedgate.redis.RedisKeyedGate``: a cluster gate for each key."""

    def _gate_for(self, key: Any) -> _ClusterGate: ...


def admit_all(
    *gates: BoundedGate | tuple[KeyedGate[Any], Hashable] | _ClusterGate | tuple[_ClusterKeyedGate, Hashable],
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
        gates: The gates, in the order to take them: each a :class:`BoundedGate` or a cluster
            gate (``boundedgate.redis.RedisGate``), or a pair ``(keyed_gate, key)`` for a key of a
            :class:`KeyedGate` or a ``RedisKeyedGate`` (resolved when its turn comes).
        timeout: Budget in seconds from arrival (>= 0), covering every wait and the run.
        deadline: Absolute deadline on the running loop's clock. Give at most one of the two.
        max_wait: A queue budget for the whole call, in seconds from arrival (>= 0): a step still
            waiting at ``min(deadline, arrival + max_wait)`` leaves with :class:`QueueExpired`;
            once every gate is held, only the deadline decides :class:`Late`.
        priority: The request's priority class at every gate (each must have that many classes;
            a cluster gate has one: with a cluster step, only 0).
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
        TypeError: Something other than a gate or a ``(KeyedGate, key)`` pair; a pair whose key is
            itself a gate (a misplaced element: ``(keyed_gate, key), gate``); a malformed timeout
            or deadline.
        ValueError: No gates; a gate (or keyed gate) given twice; an order that contradicts one
            already used; both timeout and deadline; a priority other than 0 with a cluster step;
            a priority or cost out of range (found when the step's gate is reached).
    """
    return combine(gates, timeout, deadline, max_wait, priority, cost, raise_late)
