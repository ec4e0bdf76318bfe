"""The keyed gate's per-call part: ``admit()`` and the totals a key's arrival and release update.

:class:`KeyedBase` holds the fields of a :class:`KeyedGate` that every call touches (its listed
gates, the spare gate, the running totals and the counters a dropped light key folds into) and
its ``admit()``; the public ``KeyedGate`` (``_keyed.py``, never compiled) is its one subclass and
adds everything else, the ``__weakref__`` slot among it. This module is compiled with mypyc where
the build compiles, so that ``admit()`` runs compiled and a key's state (``_light.py``, compiled
with it) reads and writes these fields natively. The split is ``BoundedGate``'s (``_bounded.py``):
mypyc's deallocator of a native class never clears the object's weak references, CPython's
deallocator of the interpreted subclass does. ``KeyedBase`` is final to mypyc, so compiled code
reads its fields and calls ``admit()`` directly; what it calls of the subclass (``_create``) it
calls through the Python attribute protocol, off the common path. It is not generic in the key
type (a native class with a base mypyc does not compile, ``Generic``, gets a ``__dict__`` and a
weak-reference slot of its own): ``KeyedGate`` is, and declares ``admit()``'s key a ``K`` to a type
checker.
"""

from __future__ import annotations

import math
import sys
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, Final, final

from .._core import BoolArg, FloatArg, IntArg, WaitQueue, mypyc_attr
from ._gate import GateBase
from ._light import FRESH, RETIRED, KeyState
from ._permit import Permit, new_permit

if TYPE_CHECKING:
    from ._bounded import BoundedGate

__all__ = ("KeyedBase",)

_INF: Final = math.inf
_MAX: Final = sys.float_info.max
_ZERO: Final = 0  # `priority is _ZERO`: the identity of the small int the default is

# A dropped light key's gate is made again for the next new key when nothing else holds it: its
# reference count says so. (Its light state is only ever reached through it.) What the count of an
# object held by one local reads is measured once, here, by code compiled (or not) as the check in
# KeyedBase is; with no reference count to trust (another implementation, a free-threaded build)
# gates are never made again.
_refs: Callable[[object], int] = getattr(sys, "getrefcount", lambda _: -1)
_weakrefs = weakref.getweakrefcount


def _count_of_one_local() -> int:
    if sys.implementation.name != "cpython" or not getattr(sys, "_is_gil_enabled", lambda: True)():
        return -2  # never equal to a count
    probe = object()  # held by this local alone
    return _refs(probe)


_FREE_GATE: Final = _count_of_one_local()


@final  # to mypyc: its fields are read and admit() called directly (KeyedGate overrides nothing)
@mypyc_attr(allow_interpreted_subclasses=True)
class KeyedBase:
    """A keyed gate without its weak references and its rarer parts: see ``KeyedGate`` (``_keyed.py``)."""

    __slots__ = (
        "_created",
        "_done",
        "_done_run_max",
        "_done_run_total",
        "_dropped",
        "_empty",
        "_gates",
        "_idle_keys",
        "_keep_idle",
        "_max_running",
        "_max_waiting",
        "_peak_keys",
        "_peak_running",
        "_peak_waiting",
        "_plain",
        "_prefix",
        "_resting",
        "_running",
        "_spare",
        "_waiting",
    )

    _max_running: int | None
    _max_waiting: int | None
    _prefix: str
    _keep_idle: int
    # Listed gates: every key with requests running or waiting, and the idle ones kept.
    _gates: dict[Any, BoundedGate]
    # The idle keys among them, least recently idle first.
    _idle_keys: OrderedDict[Any, None]
    # Idle keys whose rate limits are refilling, by when they will be full: (when, tick, key).
    _resting: list[tuple[float, int, Any]]
    # What the light keys dropped so far add to the retired totals: completions, and their run
    # time's sum and max.
    _done: int
    _done_run_total: float
    _done_run_max: float
    # Whether a new key may be the spare gate made again by admit(): light keys, no override.
    _plain: bool
    # The queue every light key shares: empty, for ever (a light key never queues; promoted, it
    # has a queue of its own).
    _empty: WaitQueue
    # The gate of the light key dropped last, to be made again if nothing holds it (see _reused).
    _spare: BoundedGate | None
    _created: int
    _dropped: int
    _peak_keys: int
    # Running and waiting summed over keys, kept up to date by the keys' states.
    _running: int
    _waiting: int
    _peak_running: int
    _peak_waiting: int

    def admit(
        self,
        key: Hashable,
        *,
        timeout: FloatArg | None = None,
        deadline: FloatArg | None = None,
        max_wait: FloatArg | None = None,
        priority: IntArg = 0,
        cost: FloatArg | None = None,
        raise_late: BoolArg = True,
    ) -> Permit:
        """A permit for one request through ``key``'s gate: :meth:`BoundedGate.admit` on that gate.

        Args:
            key: Which gate: any hashable.
            timeout: Budget in seconds from arrival (>= 0), covering the wait and the run.
            deadline: Absolute deadline on the running loop's clock (``loop.time()``).
                Give at most one of the two; neither means no deadline.
            max_wait: A queue budget in seconds from arrival, as for :meth:`BoundedGate.admit`.
            priority: The request's priority class, as for :meth:`BoundedGate.admit`.
            cost: The request's rate cost, as for :meth:`BoundedGate.admit`.
            raise_late: False to count a late block without raising, as for :meth:`BoundedGate.admit`.

        Raises (on entry, named after the key's gate, e.g. ``"tenant/acme"``):
            QueueFull: Every slot of the key's gate busy and its queue full.
            RateLimited: The key's rate limits cannot pay its cost in time.
            QueueExpired: The deadline passed while waiting, or had passed on arrival.
            Evicted: A more urgent arrival took its place in the key's full queue.
            asyncio.CancelledError: The caller was cancelled while waiting, or had a cancellation
                pending when it arrived (as for :meth:`BoundedGate.admit`).

        Raises (at once):
            TypeError, ValueError: As for :meth:`BoundedGate.admit`, or (for a key without a gate
                yet) limits from ``overrides`` that are out of range.
        """
        gate: GateBase | None = self._gates.get(key)
        if gate is None:
            gate = self._spare
            if gate is not None and self._plain:
                # _reused spelled out: the spare gate made again for a light key with the
                # template's limits, if nothing holds it (the state's local counts for the state).
                self._spare = None
                state: KeyState = gate._state  # type: ignore[assignment]  # a spare gate's is light
                if (
                    _refs(gate) == _FREE_GATE
                    and not _weakrefs(gate)
                    and state._light
                    and state._phase == RETIRED
                ):
                    if state.limit == self._max_running and state.max_waiting == self._max_waiting:
                        # KeyState.reuse spelled out for the template's limits (the call costs the
                        # pure build more than its lines)
                        state._gate = gate
                        state._key = key
                        state._phase = FRESH
                        state.completed = state.peak_running = state.admitted = 0
                        state.run_seconds_total = state.run_seconds_max = 0.0
                        state.end_to_end_seconds_total = state.end_to_end_seconds_max = 0.0
                        state.recent_run_seconds = None
                    else:  # no C, or the template's limits changed since the key was made
                        state.reuse(gate, key, self._max_running, self._max_waiting)
                    self._created += 1
                    gate._name = None  # named from its key when first read: most never are
                else:
                    interpreted: Any = self  # KeyedGate's _create, off the common path
                    gate = interpreted._create(key)
            else:
                interpreted = self
                gate = interpreted._create(key)
        if (
            deadline is None
            and max_wait is None
            and cost is None
            and priority is _ZERO
            and raise_late is True
        ):
            # BoundedGate.admit's common case, spelled out: the keyword call costs more than the permit.
            if timeout is None:
                return new_permit(gate, None, _INF, 0, 0.0)
            if (type(timeout) is float or type(timeout) is int) and 0 <= timeout <= _MAX:
                return new_permit(gate, timeout, _INF, 0, 0.0)
        return gate.admit(
            timeout=timeout,
            deadline=deadline,
            max_wait=max_wait,
            priority=priority,
            cost=cost,
            raise_late=raise_late,
        )

    def _reused(self, key: Hashable, max_running: int | None, max_waiting: int | None) -> BoundedGate | None:
        """The spare gate made new for ``key``, if nothing holds it; it is no longer the spare either way.

        Held by nothing else (no permit, no caller, no weak reference), its key's light state
        neither promoted nor in use since: nobody can tell it from a new one.
        """
        gate = self._spare
        self._spare = None
        if gate is None or _refs(gate) != _FREE_GATE or _weakrefs(gate):
            return None
        state: KeyState = gate._state  # type: ignore[assignment]  # a spare's is light
        if not state.reuse(gate, key, max_running, max_waiting):
            return None
        self._created += 1
        gate._name = None  # named from its key when first read
        return gate
