"""A chain of gates for an HTTP edge: ``gate=[(tenants, tenant_of), cluster]``, one admit_all per request.

The ASGI middleware and the httpx transport take, beside one gate, a list (or tuple) of gates to
take in order for every request: each a gate (``BoundedGate``, ``RedisGate``), or a keyed gate
with the function that names the request's key in it, ``(keyed_gate, key_of)``; a keyed gate given
alone takes its key from the edge's ``key=``. Each request then goes through
:func:`admit_all` with the steps its keys name, under one deadline and one queue budget, all or
nothing, and holds one :class:`CombinedPermit`. The chain is checked when the edge is made:
every element, the order (recorded as ``admit_all`` would), and which keywords every step takes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from .._core import check_priority
from ._bounded import BoundedGate
from ._combined import admit_all
from ._combined_permit import CombinedPermit, is_cluster_gate, is_cluster_keyed
from ._keyed import KeyedGate
from ._order import check_order

__all__ = ("Chain", "is_chain", "is_keyed")

KeyFunction = Callable[[Any], Hashable | None]

#: Where the docs explain chains.
_DOCS = 'see docs/http.md, "Several gates for one request"'


def is_chain(gate: object) -> bool:
    """True if an edge's ``gate=`` is a chain of gates (a list or a tuple of them)."""
    return isinstance(gate, list | tuple)


def is_keyed(given: object) -> bool:
    """True for a keyed gate, in-process (``KeyedGate``) or the cluster's (``RedisKeyedGate``)."""
    return isinstance(given, KeyedGate) or is_cluster_keyed(given)


def _a_gate(given: object) -> bool:
    return isinstance(given, BoundedGate) or is_cluster_gate(given)


class Chain:
    """The gates of an edge's ``gate=[...]``, each with how to find its key in a request.

    Args:
        gates: The chain as given: gates, keyed gates and ``(keyed_gate, key_of)`` pairs.
        key: The edge's ``key=``, for the keyed gates given alone.
        edge: The edge's name, for errors (``"GateMiddleware"``, ``"GatedTransport"``).

    Raises:
        TypeError: An element that is neither a gate nor a keyed gate (with its key function), a
            keyed gate alone without ``key=``, a ``key=`` that no keyed gate given alone uses.
        ValueError: No gates; a gate twice; an order that contradicts one already used.
    """

    __slots__ = ("cluster", "gates", "priorities", "steps")

    def __init__(self, gates: Sequence[Any], key: KeyFunction | None, edge: str) -> None:
        steps: list[tuple[Any, KeyFunction | None]] = []
        alone = False
        for given in gates:
            if _a_gate(given):
                steps.append((given, None))
            elif is_keyed(given):
                if key is None:
                    raise TypeError(
                        f"{edge}: the keyed gate {given.name!r} in gate=[...] needs its key: give "
                        f"key=, a function of the request, or the pair ({given.name}, key_of) in the "
                        f"chain ({_DOCS})"
                    )
                steps.append((given, key))
                alone = True
            elif isinstance(given, tuple) and len(given) == 2 and is_keyed(given[0]) and callable(given[1]):
                steps.append((given[0], given[1]))
            else:
                raise TypeError(
                    f"{edge}: gate=[...] takes gates (BoundedGate, RedisGate), keyed gates (with key=) and "
                    f"(keyed_gate, key_of) pairs, key_of a function of the request; got {given!r} ({_DOCS})"
                )
        if not steps:
            raise ValueError(f"{edge}: gate=[] has no gates: give the gates to take, in order ({_DOCS})")
        if key is not None and not alone:
            raise TypeError(
                f"{edge}: key= is for a keyed gate given alone in gate=[...], and there is none: "
                f"remove key=, or pair each keyed gate with its key function ({_DOCS})"
            )
        check_order([gate for gate, _ in steps])  # a gate twice, or an order already contradicted
        self.steps = tuple(steps)
        self.gates = tuple(gates)
        self.cluster = any(is_cluster_gate(gate) or is_cluster_keyed(gate) for gate, _ in steps)
        #: The fewest priority classes among the gates (1 with a cluster gate: its queue is one FIFO).
        self.priorities = 1 if self.cluster else min(_classes(gate) for gate, _ in steps)

    def check_priority(self, priority: int) -> None:
        """Refuse now a priority class some gate of the chain lacks (else every request is refused)."""
        if priority and self.cluster:
            raise TypeError(
                f"priority={priority}: a RedisGate has no priority classes (its cluster queue is one FIFO), "
                f"so a chain with one takes no priority: leave priority= out ({_DOCS})"
            )
        check_priority(priority, self.priorities)

    def admit(
        self, request: Any, options: dict[str, Any], skip: object = None
    ) -> tuple[CombinedPermit | None, Hashable | None]:
        """The permit for ``request`` through every gate (not entered), and its first key.

        A keyed step whose key function returns ``skip`` (the middleware's ``UNGATED``) is left
        out; the permit is None when that leaves no gate.
        """
        steps: list[Any] = []
        first: Hashable | None = None
        keyed = False
        for gate, key_of in self.steps:
            if key_of is None:
                steps.append(gate)
                continue
            key = key_of(request)
            if skip is not None and key is skip:
                continue
            if not keyed:
                first, keyed = key, True
            steps.append((gate, key))
        if not steps:
            return None, first
        return admit_all(*steps, **options), first


def _classes(gate: Any) -> int:
    classes = gate._priorities if isinstance(gate, KeyedGate) else gate.priorities
    return int(classes)
