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
Families are held weakly: a gate that is garbage collected leaves only integers behind (its
number in the graph) and, until the cache of checked sequences is next cleared, dead references.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Sequence
from typing import Any

__all__ = ("check_order",)

_ids: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()
_new_id = itertools.count(1).__next__
# Edges: family id -> ids that have been taken after it (directly).
_after: dict[int, set[int]] = {}
# Sequences of families already checked, for the fast path (bounded; refilled when cleared). A
# weakref compares and hashes as its referent while that lives, and a dead one never equals the
# reference to a new object, so a sequence of dead gates never matches a sequence of new ones.
# weakref.ref(gate) returns the gate's one plain reference once it exists: no allocation.
_checked: set[tuple[weakref.ref[object], ...]] = set()
_CHECKED_MAX = 4096
# Admissions on several event loops in several threads share the graph.
_lock = threading.Lock()


def check_order(families: Sequence[Any]) -> None:
    """Record that ``families`` are taken in this order, or raise if that contradicts another order.

    Args:
        families: The gates (or keyed gates) in the order they will be taken; each has a ``name``.

    Raises:
        ValueError: A family appears twice, or the order contradicts one already used.
    """
    refs = tuple(map(weakref.ref, families))
    if refs in _checked:
        return
    ids = tuple(_id(family) for family in families)
    with _lock:
        _check(ids, [family.name for family in families])
        if len(_checked) >= _CHECKED_MAX:
            _checked.clear()
        _checked.add(refs)


def _id(family: object) -> int:
    number = _ids.get(family)
    if number is None:
        with _lock:
            number = _ids.setdefault(family, _new_id())
    return number


def _check(ids: tuple[int, ...], names: Sequence[str]) -> None:
    seen: set[int] = set()
    for i, number in enumerate(ids):
        if number in seen:
            raise ValueError(
                f"{names[i]!r} appears twice in one admission; each gate (each keyed gate, with one key) "
                "may be taken once"
            )
        seen.add(number)
    added: list[tuple[int, int]] = []
    try:
        for i in range(len(ids) - 1):
            first, then = ids[i], ids[i + 1]
            followers = _after.setdefault(first, set())
            if then in followers:
                continue
            if _reaches(then, first):
                raise ValueError(
                    f"admit_all() takes {names[i]!r} before {names[i + 1]!r} here, but another admission "
                    f"took {names[i + 1]!r} before {names[i]!r} (directly or through other gates): taking "
                    "gates in opposite orders can deadlock, so use one order everywhere"
                )
            followers.add(then)
            added.append((first, then))
    except ValueError:
        for first, then in added:
            _after[first].discard(then)
        raise


def _reaches(start: int, goal: int) -> bool:
    stack = [start]
    visited = {start}
    while stack:
        for number in _after.get(stack.pop(), ()):
            if number == goal:
                return True
            if number not in visited:
                visited.add(number)
                stack.append(number)
    return False
