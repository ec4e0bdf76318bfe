"""What a RedisGate lacks beside a BoundedGate: each refused at once, with the way out.

:data:`LACKING` says, for each argument, method and attribute of a ``BoundedGate`` that a
``RedisGate`` does not have, why and what to do instead; docs/cluster.md lists the same under
"What RedisGate does not have": priorities and deadline order. An argument it lacks
is a ``TypeError`` (:func:`refuse_arguments`), an attribute an ``AttributeError``
(:func:`no_attribute`: ``hasattr()`` stays false, so code that asks first, as for
``gate.priorities``, leaves the gate alone). When the cluster gate gains one of them, its line goes.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ("DOCS", "LACKING", "no_attribute", "refuse_arguments")

#: Where the docs list what a RedisGate lacks.
DOCS = 'see docs/cluster.md, "What RedisGate does not have"'

_PRIORITIES = "its queue is one FIFO, cluster-wide, with no priority classes: leave it out"
_DEADLINE_ORDER = "its queue is one FIFO, cluster-wide, in arrival order: leave it out"

#: Why a RedisGate lacks each, and the way out, by the name a BoundedGate gives it.
LACKING: Mapping[str, str] = {
    "priority": _PRIORITIES,
    "priorities": _PRIORITIES,
    "jump_share": _PRIORITIES,
    "by_deadline": _DEADLINE_ORDER,
}


def refuse_arguments(where: str, arguments: Mapping[str, object]) -> TypeError:
    """The error for keyword ``arguments`` that ``where`` (``"RedisGate.admit"``) does not take."""
    name = next(iter(arguments))
    for lacking in arguments:
        if lacking in LACKING:
            shown = where.removesuffix(".__init__")
            return TypeError(f"{shown}() takes no {lacking}=: {LACKING[lacking]} ({DOCS})")
    return TypeError(f"{where}() got an unexpected keyword argument {name!r}")


def no_attribute(gate: object, name: str) -> AttributeError:
    """The error for an attribute ``gate`` (or its permit) lacks: Python's own, or the way out."""
    if name in LACKING:
        message = f"{type(gate).__name__} has no {name}: {LACKING[name]} ({DOCS})"
    else:
        message = f"{type(gate).__name__!r} object has no attribute {name!r}"
    return AttributeError(message, name=name, obj=gate)
