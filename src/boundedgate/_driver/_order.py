"""The order check behind ``admit_all``: gates are taken in the order given, and it must be one order.

Two callers that take gates A and B in opposite orders can deadlock: each holds one and waits for
the other. ``admit_all`` takes its gates in the order it is given them (so the caller decides what
is held while what is waited for: the tenant's slot first, the provider's last), and this module
makes that order global: the first admission that puts gate A before gate B records the edge
A -> B, and any later admission that would close a cycle (B before A, directly or through other
gates) is refused with a ``ValueError`` before it takes anything. The recorded edges form a
directed acyclic graph, so every admission follows one total order (any topological order of it),
and no set of admissions can wait on each other in a circle. It is the lock-order check of a
kernel's lockdep, applied at every call rather than in a debug build, because the fast path (a
sequence of gates already checked) costs one set lookup.

A "gate" here is a family: a :class:`BoundedGate`, or a :class:`KeyedGate` with all its keys (two
keys of one keyed gate in one admission have no order between them, so that is refused too).
Families are held weakly, and the graph forgets them: each family has a node that holds its own
edges (to the families taken after it, and from those taken before), so every connected set of
gates is a graph of its own, and a family that is garbage collected takes its node and its edges
with it (the next check unlinks it). Forgetting is sound: an admission holds its gates, so a
collected gate is in no admission, and an order only matters between gates that can meet in one.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any

__all__ = ("check_order", "checked_gates")


class _Node:
    """One family in the graph: the families taken directly after it, and directly before it."""

    __slots__ = ("after", "before", "cached")

    def __init__(self) -> None:
        self.after: set[_Node] = set()
        self.before: set[_Node] = set()
        # Whether a sequence in `_checked` holds this family (its death makes that entry dead).
        self.cached = False


_nodes: weakref.WeakKeyDictionary[object, _Node] = weakref.WeakKeyDictionary()
# Nodes whose family was collected, to unlink at the next check. The finaliser only appends (the GC
# may run it in any thread, inside a check that holds the lock): unlinking waits for the lock.
_dead: list[_Node] = []
# Sequences of families already checked, for the fast path (bounded; refilled when cleared). A
# weakref compares and hashes as its referent while that lives, and a dead one never equals the
# reference to a new object, so a sequence of dead gates never matches a sequence of new ones.
# weakref.ref(gate) returns the gate's one plain reference once it exists: no allocation.
_checked: set[tuple[weakref.ref[object], ...]] = set()
_CHECKED_MAX = 4096
#: Some of the same sequences, for ``admit_all``'s fast path, by the hash of the tuple of their
#: families (which hash by identity): weak proxies to them, and their entry in ``_checked``. A tuple
#: of families found here is the one checked only if it equals the proxies (each proxy compares as
#: its object, and a dead one raises ReferenceError: an address is reused once its object is gone,
#: and hashes collide). Never rebound; cleared and swept with ``_checked``.
checked_gates: dict[int, tuple[tuple[Any, ...], tuple[weakref.ref[object], ...]]] = {}
# Collected families that were in cached sequences (each made one or more dead) since the last sweep.
_stale: list[_Node] = []
# Admissions on several event loops in several threads share the nodes.
_lock = threading.Lock()


def check_order(families: Sequence[Any], by_id: bool = False) -> None:
    """Record that ``families`` are taken in this order, or raise if that contradicts another order.

    Args:
        families: The gates (or keyed gates) in the order they will be taken; each has a ``name``.
        by_id: Also remember the sequence in :data:`checked_gates` (``admit_all``'s gates, when
            each is a family of its own).

    Raises:
        ValueError: A family appears twice, or the order contradicts one already used.
    """
    refs = tuple(map(weakref.ref, families))
    if refs in _checked and not by_id:
        return
    with _lock:
        if _dead:
            _unlink_dead()
        nodes = [_node(family) for family in families]
        _check(nodes, [family.name for family in families])
        if len(_checked) >= _CHECKED_MAX:
            _clear_cache()
        _checked.add(refs)
        if by_id:
            checked_gates[hash(tuple(families))] = (tuple(map(weakref.proxy, families)), refs)
        for node in nodes:
            node.cached = True


def _node(family: object) -> _Node:
    node = _nodes.get(family)
    if node is None:
        node = _nodes[family] = _Node()
        weakref.finalize(family, _dead.append, node).atexit = False
    return node


def _unlink_dead() -> None:
    while _dead:
        node = _dead.pop()
        for first in node.before:
            first.after.discard(node)
        for then in node.after:
            then.before.discard(node)
        node.before.clear()
        node.after.clear()
        if node.cached:
            _stale.append(node)
    if len(_stale) > len(_checked) // 2:  # swept when dead entries could be half the cache: O(1) each
        live = {refs for refs in _checked if all(ref() is not None for ref in refs)}
        live_gates = {key: entry for key, entry in checked_gates.items() if entry[1] in live}
        _clear_cache()
        _checked.update(live)
        checked_gates.update(live_gates)
        for refs in live:
            for ref in refs:
                family = ref()
                if family is not None and (known := _nodes.get(family)) is not None:
                    known.cached = True


def _clear_cache() -> None:
    for refs in _checked:
        for ref in refs:
            family = ref()
            if family is not None and (known := _nodes.get(family)) is not None:
                known.cached = False
    _checked.clear()
    checked_gates.clear()
    _stale.clear()


#: Where the docs explain admit_all() and its order.
_DOCS = 'see docs/keys.md, "Several gates for one call"'


def _check(nodes: list[_Node], names: Sequence[str]) -> None:
    seen: set[_Node] = set()
    for i, node in enumerate(nodes):
        if node in seen:
            raise ValueError(
                f"{names[i]!r} appears twice in one admission; each gate (each keyed gate, with one key) "
                f"may be taken once: take it once, or make two gates ({_DOCS})"
            )
        seen.add(node)
    added: list[tuple[_Node, _Node]] = []
    try:
        for i in range(len(nodes) - 1):
            first, then = nodes[i], nodes[i + 1]
            if then in first.after:
                continue
            if _reaches(then, first):
                raise ValueError(
                    f"admit_all() takes {names[i]!r} before {names[i + 1]!r} here, but another admission "
                    f"took {names[i + 1]!r} before {names[i]!r} (directly or through other gates): taking "
                    f"gates in opposite orders can deadlock, so use one order everywhere, the scarce shared "
                    f"gate last ({_DOCS})"
                )
            first.after.add(then)
            then.before.add(first)
            added.append((first, then))
    except ValueError:
        for first, then in added:
            first.after.discard(then)
            then.before.discard(first)
        raise


def _reaches(start: _Node, goal: _Node) -> bool:
    stack = [start]
    visited = {start}
    while stack:
        for node in stack.pop().after:
            if node is goal:
                return True
            if node not in visited:
                visited.add(node)
                stack.append(node)
    return False
