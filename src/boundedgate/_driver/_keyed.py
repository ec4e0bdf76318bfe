"""KeyedGate: one BoundedGate per key (provider, tenant, session), dropped when its key is idle.

Theory of operation
===================

A key's gate drives a :class:`KeyState` (``_light.py``), which starts *light* when the keyed gate
has no rate limits, no controller and no observers: counts only, without a queue of its own, until
anything else is needed, when it becomes a full state in place (plain gates pay nothing for any of
this). A light key dropped folds its few counters into ``_done*``; the gate of the last one dropped
is kept in ``_spare`` and made again for the next new key if nothing holds it by then. ``admit()``
and the fields that every arrival and release update (the listed gates, the spare, the totals) are
those of ``KeyedGate``'s base, :class:`KeyedBase` (``_keyed_base.py``, compiled with the key state
where the build compiles). Either kind of state goes through three phases:

``FRESH``
    Made by ``admit(key)`` for a key with no gate, and held by nothing but its permit: a permit
    that is never entered, or whose caller was cancelled before it arrived, takes its gate with
    it when it is garbage.

``LISTED``
    At its first counted arrival it becomes the key's gate, in ``_gates``, which holds it while
    anything runs or waits in it. When it becomes idle it is kept for reuse if ``keep_idle``
    allows (the least recently idle key goes first), else dropped.

``RETIRED``
    Dropped: its counters were folded into the keyed gate's totals, and it is out of every table.
    Nothing runs or waits in it, and nothing will.

An arrival at a gate that is not its key's listed gate (a retired one, or a fresh one when the
key was listed meanwhile, through another permit taken at the same time) moves the permit to the
key's gate of that moment. So a key never has two gates admitting at once, whatever the permits
were taken from, and every release counts.

A gate becomes idle through a release or a cancellation, or, with rate limits (whose waiters may wait
for tokens while no slot is busy), through the expiry of its last waiter; those events check for it.
The overrides also keep running totals of running and waiting across keys, for exact aggregate peaks.

With ``adaptive``, each key's gate has a controller of its own (an :class:`AdaptiveLimit`, which
samples that key's requests and hears that key's signals). When the gate is dropped, a controller
that learned something (it cut C or closed a window) is kept in ``_learned``, an LRU of at most
``learned_keys`` records, and the key's next gate takes it back with its C: so the learned C outlives
the bursts, and the memory it takes is bounded however many keys come and go.
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import itertools
import math
import sys
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from types import EllipsisType
from typing import TYPE_CHECKING, Generic, cast, final

from typing_extensions import TypeVar

from .._core import (
    MAX_PAUSE,
    SIGNALS,
    Adaptive,
    AdaptiveLimit,
    GateLimits,
    GateState,
    KeyedStatistics,
    RateLimit,
    Status,
    Ticket,
    Totals,
    WaitQueue,
    check_count,
    check_flag,
    check_limits,
    check_max_running,
    check_max_waiting,
    check_name,
    check_remaining,
    provider_pause,
    shown,
    total,
)
from .._streams import StreamOpener, StreamSource, StreamT
from ._bounded import BoundedGate
from ._gate import GateBase
from ._keyed_base import KeyedBase
from ._light import FRESH, LISTED, RETIRED, KeyState, key_gate_name, light_of
from ._observing import Observer, Observers, attach
from ._permit import Permit

CANCELLED = Status.CANCELLED

__all__ = ("KeyedGate",)

#: A key's limits as ``overrides`` may give them: a :class:`GateLimits`, or any pair the runtime
#: accepts, ``(max_running, max_waiting)``.
Limits = GateLimits | tuple[int | None, int | None]

_FRESH, _LISTED, _RETIRED = FRESH, LISTED, RETIRED

#: The keys' state (the name ``admit_all`` and the tests know it by).
_KeyState = KeyState

#: A keyed gate's key type: inferred from ``overrides``, else any hashable (a default, PEP 696), so
#: that ``KeyedGate(max_running=..., max_waiting=...)`` needs no annotation.
K = TypeVar("K", bound=Hashable, default=Hashable)


@final
class KeyedGate(KeyedBase, Generic[K]):  # type: ignore[misc]  # KeyedBase is final to mypyc alone: see there
    """One :class:`BoundedGate` per key: per provider, per tenant, per session.

    ::

        tenants = KeyedGate(max_running=5, max_waiting=50, name="tenant")

        async with tenants.admit(tenant_id, timeout=30):
            reply = await client.chat.completions.create(...)

    Each key gets its own gate, created on first use with the template limits (or the key's
    override), and named ``"<name>/<key>"``; admissions, refusals, errors and permits are exactly
    those of that gate, so one key that saturates its gate never delays another. A key's gate is
    dropped as soon as nothing runs or waits in it (or, with ``keep_idle=N``, once it is not among
    the N most recently idle keys), so the number of gates alive is bounded by current activity
    plus ``keep_idle``, never by how many distinct keys were ever seen: keys that a client
    controls (a tenant id from a header) cannot grow memory without bound. Dropped gates' counters
    live on in :meth:`stats`.

    Args:
        max_running: Running slots (C) for each key, an int >= 1, or None for no limit on running
            (with ``rate_limits``: a rate limiter per key).
        max_waiting: Queue places (Q) for each key, an int >= 0, or None for an unbounded queue.
        name: The keyed gate's name; each key's gate is named ``f"{name}/{key}"``.
        overrides: Limits for particular keys: a mapping from key to :class:`GateLimits` (or any
            pair ``(max_running, max_waiting)``), or a function from key to one (or None for the
            template). Read when a
            key's gate is created, so a change applies once the key has been idle.
        keep_idle: How many idle keys keep their gates (and per-key statistics) for reuse, an
            int >= 0; 0 drops every gate the moment its key is idle.
        priorities: Every key's gate's priority classes, as for :class:`BoundedGate`.
        jump_share: Every key's gate's share of queue jumps, as for :class:`BoundedGate`.
        rate_limits: Every key's gate's own rate limits (a tenant's or a tool's requests per
            minute, say): each key gets buckets of its own, starting full.
        adaptive: A controller per key (:class:`Adaptive`'s settings, see :meth:`signal`): each
            key's C is learned from its own signals and requests, starting from its limits' C.
        learned_keys: How many keys without a gate keep what their controller learned (their C,
            baseline and counts: well under 1 kB each), least recently dropped forgotten first.

    Raises:
        TypeError: A limit, ``keep_idle`` or ``learned_keys`` that is not an int, a name that is not
            a str, overrides that are neither a mapping nor callable, or ``adaptive`` that is not
            an :class:`Adaptive`.
        ValueError: A limit out of range (as for :class:`BoundedGate`), ``keep_idle < 0``,
            ``learned_keys < 0``, a count beyond ``sys.maxsize``, or ``adaptive`` without a
            template ``max_running``.
    """

    __slots__ = (
        "__weakref__",
        "_adaptive",
        "_jump_share",
        "_learned",
        "_learned_keys",
        "_light",
        "_name",
        "_observers",
        "_override",
        "_overrides",
        "_priorities",
        "_rate_limits",
        "_retired",
        "_set",
        "_ticks",
    )

    def __init__(
        self,
        *,
        max_running: int | None,
        max_waiting: int | None,
        name: str = "keyed",
        overrides: Mapping[K, Limits] | Callable[[K], Limits | None] | None = None,
        keep_idle: int = 0,
        priorities: int = 1,
        jump_share: float = 0.2,
        rate_limits: Sequence[RateLimit] = (),
        adaptive: Adaptive | None = None,
        learned_keys: int = 10_000,
    ) -> None:
        # The template, checked now rather than at the first key (GateState checks every setting).
        GateState(max_running, max_waiting, priorities, jump_share, rate_limits)
        keep_idle = check_count("keep_idle", keep_idle)
        learned_keys = check_count("learned_keys", learned_keys)
        _check_adaptive(adaptive, max_running)
        self._priorities = priorities
        self._jump_share = jump_share
        self._rate_limits = tuple(rate_limits)
        self._max_running = None if max_running is None else check_max_running(max_running)
        self._max_waiting = check_max_waiting(max_waiting)
        self._name = check_name(name)
        self._prefix = name + "/"
        self._observers = Observers()
        self._overrides: Mapping[K, Limits] | None = None
        self._override: Callable[[K], Limits | None] | None = None
        # Limits set at runtime for particular keys (set_limits(key, ...)): they outrank overrides.
        self._set: dict[K, GateLimits] = {}
        if isinstance(overrides, Mapping):
            for key, limits in overrides.items():
                check_limits(key, limits)
            self._overrides = overrides
        elif callable(overrides):
            self._override = overrides
        elif overrides is not None:
            raise TypeError(f"overrides must be a mapping or a function of the key, got {shown(overrides)}")
        self._keep_idle = keep_idle
        self._adaptive = adaptive
        self._learned_keys = learned_keys
        # What the controllers of keys without a gate learned, least recently dropped first.
        self._learned: OrderedDict[K, AdaptiveLimit] = OrderedDict()
        # Listed gates: every key with requests running or waiting, and the idle ones kept.
        self._gates = {}
        # The idle keys among them, least recently idle first.
        self._idle_keys = OrderedDict()
        # Idle keys whose rate limits are refilling, by when they will be full: (when, tick, key).
        self._resting = []
        self._ticks = itertools.count()
        self._retired = Totals()
        # What the light keys dropped so far add to it: completions, and their run time's sum and max.
        self._done = 0
        self._done_run_total = 0.0
        self._done_run_max = 0.0
        # Keys start light (see _light.py) unless something needs a full state from the start.
        self._light = not self._rate_limits and adaptive is None
        self._plain = False  # set at the end of __init__
        # The queue every light key shares: empty, for ever (a light key never queues; promoted, it
        # has a queue of its own).
        self._empty = WaitQueue(priorities, jump_share)
        # The gate of the light key dropped last, to be made again if nothing holds it (see _create).
        self._spare = None
        self._created = 0
        self._dropped = 0
        self._peak_keys = 0
        # Running and waiting summed over keys, kept up to date by the keys' states.
        self._running = 0
        self._waiting = 0
        self._peak_running = 0
        self._peak_waiting = 0
        self._replain()

    # -- public API -------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The keyed gate's name."""
        return self._name

    @property
    def max_running(self) -> int | None:
        """The template's running slots (C), for keys without an override."""
        return self._max_running

    @property
    def max_waiting(self) -> int | None:
        """The template's queue places (Q), for keys without an override."""
        return self._max_waiting

    @property
    def running(self) -> int:
        """Requests holding a slot now, over all keys."""
        return self._running

    @property
    def waiting(self) -> int:
        """Requests queued now, over all keys."""
        return self._waiting

    if TYPE_CHECKING:  # admit() is KeyedBase's, documented there: to a type checker, it takes a K

        def admit(  # type: ignore[override]  # a K is what this keyed gate's keys are
            self,
            key: K,
            *,
            timeout: float | None = None,
            deadline: float | None = None,
            max_wait: float | None = None,
            priority: int = 0,
            cost: float | None = None,
            raise_late: bool = True,
        ) -> Permit: ...

    def try_admit(
        self,
        key: K,
        *,
        timeout: float | None = None,
        deadline: float | None = None,
        cost: float | None = None,
    ) -> Permit:
        """A permit holding a slot of ``key``'s gate now, or a refusal now.

        As :meth:`BoundedGate.try_admit` on the key's gate; arguments are as for :meth:`admit`.

        Raises:
            QueueFull: The request cannot start at once.
            RateLimited: A slot is free but the key's rate limits do not hold its cost now.
            QueueExpired: The deadline had already passed (nothing was counted).
            asyncio.CancelledError: The calling task has a cancellation pending (nothing was counted).
        """
        return self._gate_for(key).try_admit(timeout=timeout, deadline=deadline, cost=cost)

    def stream(
        self,
        key: K,
        source: StreamSource[StreamT],
        *,
        timeout: float | None = None,
        deadline: float | None = None,
        max_wait: float | None = None,
        priority: int = 0,
        cost: float | None = None,
        raise_late: bool = True,
    ) -> StreamOpener[StreamT]:
        """Admit a request through ``key``'s gate and hand the opened stream its slot.

        As :meth:`BoundedGate.stream` on the key's gate.
        """
        return self._gate_for(key).stream(
            source,
            timeout=timeout,
            deadline=deadline,
            max_wait=max_wait,
            priority=priority,
            cost=cost,
            raise_late=raise_late,
        )

    def get(self, key: K) -> BoundedGate | None:
        """The gate ``key`` has now, if it has one (running, waiting, or kept idle); never creates one.

        Use it for a key's own statistics: ``keyed.get(key).stats()``.
        """
        return self._gates.get(key)

    def limits(self, key: K) -> GateLimits:
        """The limits a gate for ``key`` is created with: the key's override, else the template.

        Raises:
            TypeError, ValueError: The key's override is malformed or out of range.
        """
        limits: Limits | None = self._set.get(key)
        if limits is not None:
            return limits  # type: ignore[return-value]  # set_limits stores GateLimits
        if self._overrides is not None:
            limits = self._overrides.get(key)
        elif self._override is not None:
            limits = self._override(key)
        if limits is None:
            return GateLimits(self._max_running, self._max_waiting)
        return check_limits(key, limits)

    def set_limits(
        self,
        key: K | EllipsisType = ...,
        *,
        max_running: int | EllipsisType | None = ...,
        max_waiting: int | EllipsisType | None = ...,
        evict: bool = False,
    ) -> None:
        """Change the limits of every key that follows the template, or of one ``key``, now.

        Without a key the template changes: every listed gate without an override (or a limit set
        for its key) takes it at once, and keys created later are created with it. With a key, that
        key's limits are set: its listed gate takes them at once, and a gate created for it later
        is created with them (they outrank its override, and are kept while the keyed gate
        lives). Each gate changes as :meth:`BoundedGate.set_limits` says: raising C starts its oldest
        waiters at once, lowering it interrupts nobody, lowering Q evicts nobody unless ``evict``.

        With ``adaptive``, the keys' controllers take the new C as their own (their next decision
        starts from it), those of the keys without a gate too.

        Raises:
            TypeError, ValueError: A limit the constructor would refuse, an ``evict`` that is not
                True or False, or ``max_running=None`` with ``adaptive`` (nothing changed).
        """
        evict = check_flag("evict", evict)
        if max_running is None and self._adaptive is not None:
            raise ValueError(
                "max_running=None (no limit) leaves nothing for the keys' adaptive controllers to set: "
                "give a C"
            )
        if key is ...:
            probe = GateState(self._max_running, self._max_waiting)
            probe.set_limits(0.0, max_running, max_waiting)  # checks the limits before any change
            following = [k for k in self._gates if self._follows_template(k)]
            remembered = [k for k in self._learned if self._follows_template(k)]
            self._max_running = None if probe.limit == sys.maxsize else probe.limit
            self._max_waiting = probe.max_waiting
            for k in following:
                self._gates[k].set_limits(max_running=max_running, max_waiting=max_waiting, evict=evict)
            if max_running is not ...:
                self._rebase(remembered, probe.limit)
            return
        base = self.limits(key)
        probe = GateState(base.max_running, base.max_waiting)
        probe.set_limits(0.0, max_running, max_waiting)
        self._set[key] = GateLimits(None if probe.limit == sys.maxsize else probe.limit, probe.max_waiting)
        self._plain = False
        gate = self._gates.get(key)
        if gate is not None:
            gate.set_limits(max_running=max_running, max_waiting=max_waiting, evict=evict)
        elif key in self._learned and max_running is not ...:
            self._rebase([key], probe.limit)

    def _follows_template(self, key: K) -> bool:
        """Whether ``key``'s limits are the template's: none set for it, no override."""
        return key not in self._set and self._own_limits(key) is None

    def _rebase(self, keys: list[K], limit: int) -> None:
        """The learned records of ``keys`` (keys without a gate) take ``limit``, a C set by hand."""
        if limit != sys.maxsize:
            for key in keys:
                self._learned[key].rebase(limit)

    def signal(
        self, key: K, kind: str, *, retry_after: float | None = None, max_pause: float = MAX_PAUSE
    ) -> None:
        """Tell ``key``'s gate what the provider answered for it, as :meth:`BoundedGate.signal`.

        ``rate_limited`` with ``retry_after`` pauses new starts of this key only, for at most
        ``max_pause`` seconds (a key without a
        gate gets one, which stays until the pause is over, whatever ``keep_idle`` says);
        ``overloaded`` has the key's controller cut its C, at most once per window (a key without a
        gate has its learned record cut, which its next gate starts from; without ``adaptive`` it
        changes nothing); ``ignored`` is not congestion. Must be called on the event loop.

        Raises:
            ValueError: An unknown kind.
            TypeError, ValueError: ``retry_after`` or ``max_pause`` is not a finite number >= 0
                (nothing changed).
        """
        if kind not in SIGNALS:
            raise ValueError(f"unknown signal {kind!r}; expected rate_limited, overloaded or ignored")
        pause = provider_pause(retry_after, max_pause)
        gate = self._gates.get(key)
        if kind == "rate_limited":
            if pause <= 0:
                return
            if gate is None:
                gate = self._create(key)
                self._list(key, gate)
            gate.pause(pause)
            state = cast(_KeyState, gate._state)
            if not state.running and not state.waiting:
                self._idle_keys.pop(key, None)
                self._idle(key, state, gate._clock())  # it rests
            return
        if gate is not None:
            gate.signal(kind)
            return
        if kind != "overloaded" or self._adaptive is None:
            return
        controller = self._learned.pop(key, None)
        if controller is None:
            start = self.limits(key).max_running
            if start is None:
                return
            controller = AdaptiveLimit(self._adaptive, start)
        controller.signal(kind, asyncio.get_running_loop().time())
        self._remember(key, controller)

    def controller(self, key: K) -> AdaptiveLimit | None:
        """``key``'s adaptive controller: its gate's, else what it learned before its gate was dropped.

        None without ``adaptive``, for a key whose limits have no C, and for a key with no gate that
        learned nothing (or was forgotten: see ``learned_keys``).
        """
        gate = self._gates.get(key)
        if gate is not None:
            return gate._controller
        return self._learned.get(key)

    def sync_rate_limits(self, key: K, remaining: Mapping[str, float]) -> int:
        """Lower ``key``'s rate limits' balances to what the provider says is left for it.

        As :meth:`BoundedGate.sync_rate_limits` on the key's gate; a key without a gate is left
        alone (0). Returns how many buckets were lowered.

        Raises:
            TypeError, ValueError: ``remaining`` is not a mapping of names (str) to counts >= 0.
        """
        counts = check_remaining(remaining)
        gate = self._gates.get(key)
        return 0 if gate is None else gate.sync_rate_limits(counts)

    def _remember(self, key: K, controller: AdaptiveLimit, sampled: bool = False) -> None:
        """Keep what a key without a gate learned, within ``learned_keys``.

        A controller that heard nothing (no overload, no window closed, no sample: ``sampled`` says
        whether its gate's requests ran to an answer) is not kept: the key's next one is the same.
        """
        if not (sampled or controller.cuts or controller.suppressed or controller.windows):
            return
        learned = self._learned
        learned[key] = controller
        learned.move_to_end(key)
        while len(learned) > self._learned_keys:
            learned.popitem(last=False)

    def _own_limits(self, key: K) -> Limits | None:
        # The key's override, if it has one.
        if self._overrides is not None:
            return self._overrides.get(key)
        if self._override is not None:
            return self._override(key)
        return None

    def stats(self) -> KeyedStatistics:
        """An immutable snapshot: the gate counts, and every key's counters summed, dropped keys included."""
        gates = self._gates
        folded = Totals()
        values = folded.values = dict(self._retired.values)
        completed, ran, longest = self._done, self._done_run_total, self._done_run_max
        full: list[GateState] = []
        slots: int | None = 0
        places: int | None = 0
        for gate in gates.values():
            light = light_of(gate)
            if light is None:
                full.append(gate._state)
                continue
            completed += light.completed
            values["admitted"] += light.running  # a light key's started requests run or completed
            ran += light.run_seconds_total
            longest = max(longest, light.run_seconds_max)
            slots = None if slots is None or light.limit == sys.maxsize else slots + light.limit
            places = None if places is None or light.max_waiting is None else places + light.max_waiting
        values["admitted"] += completed
        values["completed"] += completed
        values["run_seconds_total"] += ran
        values["end_to_end_seconds_total"] += ran
        for name in ("run_seconds_max", "end_to_end_seconds_max"):
            values[name] = max(values[name], longest)
        summed = total(
            self._name, folded, full, self._running, self._waiting, self._peak_running, self._peak_waiting
        )
        if slots != 0 or places != 0:  # the light keys' limits, added to the full states' sums
            summed = dataclasses.replace(
                summed,
                max_running=None
                if slots is None or summed.max_running is None
                else summed.max_running + slots,
                max_waiting=None
                if places is None or summed.max_waiting is None
                else summed.max_waiting + places,
            )
        return KeyedStatistics(
            name=self._name,
            keys=len(gates),
            busy_keys=len(gates) - len(self._idle_keys),
            peak_keys=self._peak_keys,
            created=self._created,
            dropped=self._dropped,
            total=summed,
        )

    def __len__(self) -> int:
        """The number of keys with a gate now."""
        return len(self._gates)

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` has a gate now."""
        return key in self._gates

    def __iter__(self) -> Iterator[K]:
        """The keys with a gate now (a snapshot: admitting while iterating is safe)."""
        return iter(tuple(self._gates))

    def observe(self, callback: Observer) -> None:
        """Call ``callback`` with the record of every request that ends, through any key, from now on.

        The records name this gate, and the key in ``RequestRecord.key``. As for
        :meth:`BoundedGate.observe`; a permit taken before this call for a key that had no gate
        then is not recorded.
        """
        self._observers.add(callback)
        self._light = False  # records need full states: the keys made from now on have them
        self._plain = False
        for key, gate in tuple(self._gates.items()):
            light = light_of(gate)
            if light is not None:
                light.full()  # attaches it
            else:
                self._attach(key, gate)

    def unobserve(self, callback: Observer) -> None:
        """Stop calling ``callback``; with no callback left the keys' gates record nothing."""
        self._observers.remove(callback)
        self._light = not self._observers.callbacks and not self._rate_limits and self._adaptive is None
        self._replain()
        for key, gate in self._gates.items():
            if light_of(gate) is None:
                self._attach(key, gate)

    def __repr__(self) -> str:
        return (
            f"<KeyedGate {self._name!r} [keys {len(self._gates)} ({len(self._idle_keys)} idle), "
            f"running {self._running}, waiting {self._waiting}]>"
        )

    # -- internals (used by _KeyState and admit_all) ------------------------------------------

    def _replain(self) -> None:
        # Whether a new key may be the spare gate made again by admit(): light keys, no override.
        self._plain = self._light and self._overrides is None and self._override is None and not self._set

    def _gate_for(self, key: K) -> BoundedGate:
        """The key's listed gate, else a fresh one (listed at its first arrival)."""
        gate = self._gates.get(key)
        if gate is None:
            gate = self._create(key)
        return gate

    def _create(self, key: K) -> BoundedGate:
        if self._overrides is None and self._override is None and not self._set:
            max_running, max_waiting = self._max_running, self._max_waiting
        else:
            max_running, max_waiting = self.limits(key)
        if self._light:
            if self._spare is not None and (gate := self._reused(key, max_running, max_waiting)) is not None:
                return gate
            self._created += 1
            fresh = KeyState(self, key, max_running, max_waiting, self._empty)
            gate = BoundedGate._around(fresh, key_gate_name(self._prefix, key))
            fresh._gate = gate
            return gate
        controller = None
        if self._adaptive is not None and max_running is not None:
            controller = self._learned.pop(key, None)
            if controller is None:
                controller = AdaptiveLimit(self._adaptive, max_running)
            max_running = controller.limit
        state = _KeyState(self, key, max_running, max_waiting)
        gate = BoundedGate._around(state, key_gate_name(self._prefix, key))
        if controller is not None:
            gate._controller = controller
        self._attach(key, gate)
        self._created += 1
        return gate

    def _light_idle(self, light: KeyState) -> None:
        """A listed light key is idle: keep it among the idle keys, or drop it (no rest: no buckets)."""
        keep = self._keep_idle
        if not keep:
            self._drop_light(cast(K, light._key), light)
            return
        idle = self._idle_keys
        idle[cast(K, light._key)] = None
        if len(idle) > keep:
            self._drop(idle.popitem(last=False)[0])

    def _drop_light(self, key: K, light: KeyState) -> None:
        gate = self._gates.pop(key)
        light._phase = _RETIRED
        light._gate = None  # the gate and its state no longer hold each other
        self._spare = gate  # made again for another key, if nothing else holds it by then
        self._done += light.completed
        ran = light.run_seconds_total
        if ran:
            self._done_run_total += ran
            if light.run_seconds_max > self._done_run_max:
                self._done_run_max = light.run_seconds_max
        self._dropped += 1

    def _attach(self, key: K, gate: GateBase) -> None:
        """Give a key's gate its hooks: the keyed gate's observers, and its controller's sampler."""
        if gate._controller is None:
            attach(gate._state, self._name, key, self._observers)
            return
        observers = Observers()
        observers.callbacks = (*self._observers.callbacks, gate._sample)
        attach(gate._state, self._name, key, observers)

    def _arrive_idle(self, state: _KeyState, ticket: Ticket, now: float, wait: bool) -> Sequence[Ticket]:
        """An arrival at an idle gate: a kept one leaves the idle keys, a fresh one is listed."""
        key = cast(K, state._key)
        phase = state._phase
        if phase == _RETIRED or (phase == _FRESH and key in self._gates):
            # Not the key's gate (any more): the permit arrives at the key's gate of this moment.
            state._phase = _RETIRED
            permit = cast(Permit, ticket)
            gate = self._gate_for(key)
            permit._gate = gate
            gate._bind()
            woken = gate._state.arrive(permit, now, wait)
            if woken:
                gate._wake(woken)
            return ()
        woken = GateState.arrive(state, ticket, now, wait)
        if not state.running and not state.waiting:
            return woken  # refused (at once, or before it was counted): still idle
        if phase == _FRESH:
            self._list(key, cast(BoundedGate, cast(Permit, ticket)._gate))  # the gate whose state this is
        else:
            self._idle_keys.pop(key, None)  # it was kept idle, or resting while its buckets refill
        self._tell(state)
        return woken

    def _list(self, key: K, gate: BoundedGate) -> None:
        cast(_KeyState, gate._state)._phase = _LISTED
        gates = self._gates
        gates[key] = gate
        if len(gates) > self._peak_keys:
            self._peak_keys = len(gates)

    def _settle_retired(self, state: _KeyState, ticket: Ticket, cost: float, now: float) -> Sequence[Ticket]:
        """A settle for a request whose key's gate was dropped since: the key's gate of now pays it.

        A dropped gate's buckets were full, so a refund has nothing to give back to a key with no
        gate; a charge lists a gate for the key, which rests until its buckets are full again.
        """
        if ticket.started is None:
            return ()  # never started (refused, or its slot given back unused): nothing to settle
        key = cast(K, state._key)
        gate = self._gates.get(key)
        if gate is None:
            if cost <= ticket.cost or not any(limit.unit == "tokens" for limit in self._rate_limits):
                ticket.cost = cost
                return ()
            gate = self._create(key)
            self._list(key, gate)
            origin = cast(Permit, ticket)._gate
            gate._loop = origin._loop
            gate._clock = origin._clock
            live = cast(_KeyState, gate._state)
            GateState.settle(live, ticket, cost, now)
            self._idle(key, live, now)  # rests until its buckets refill
            cast(Permit, ticket)._gate = gate
            return ()
        cast(Permit, ticket)._gate = gate
        return gate._state.settle(ticket, cost, now)

    def _charged_idle(self, state: _KeyState, now: float) -> None:
        """A settle on an idle key: a key kept idle whose buckets a charge emptied rests instead."""
        key = cast(K, state._key)
        if key in self._idle_keys and state.full_at() > now:
            del self._idle_keys[key]
            heapq.heappush(self._resting, (state.full_at(), next(self._ticks), key))

    def _tell(self, state: _KeyState) -> None:
        """Bring the running totals up to date with ``state``'s counts."""
        running = state.running
        waiting = state.waiting
        self._running = total_running = self._running + running - state._told_running
        self._waiting = total_waiting = self._waiting + waiting - state._told_waiting
        state._told_running = running
        state._told_waiting = waiting
        if total_running > self._peak_running:
            self._peak_running = total_running
        if total_waiting > self._peak_waiting:
            self._peak_waiting = total_waiting

    def _freed(self, state: _KeyState, now: float) -> None:
        """After a release, a cancellation or the timer: tell the counts, see if the gate is idle."""
        # A freed slot goes to at most one waiter, who leaves the queue: the totals cannot rise here,
        # so there is no peak to check.
        running = state.running
        waiting = state.waiting
        self._running += running - state._told_running
        self._waiting += waiting - state._told_waiting
        state._told_running = running
        state._told_waiting = waiting
        if not running and not waiting and state._phase == _LISTED:
            self._idle(cast(K, state._key), state, now)
        if self._resting and self._resting[0][0] <= now:
            self._rested(now)

    def _idle(self, key: K, state: _KeyState, now: float) -> None:
        """``key``'s listed gate is idle: keep it among the idle keys, or drop it.

        A gate whose rate limits are still refilling rests (stays listed) until they are full: its
        key must not get a fresh burst by going idle for a moment.
        """
        full_at = state.full_at()
        paused = state.paused_until
        if paused != math.inf and paused > full_at:
            full_at = paused  # a pause is kept to its end, like a debt of rate
        if full_at > now:
            heapq.heappush(self._resting, (full_at, next(self._ticks), key))
            return
        keep = self._keep_idle
        if not keep:
            self._drop(key)
            return
        idle = self._idle_keys
        idle[key] = None
        if len(idle) > keep:
            self._drop(idle.popitem(last=False)[0])

    def _rested(self, now: float) -> None:
        """Resting keys whose buckets are full by ``now`` go idle (kept or dropped), if still unused."""
        resting = self._resting
        while resting and resting[0][0] <= now:
            key = heapq.heappop(resting)[2]
            gate = self._gates.get(key)
            if gate is None:
                continue
            state = cast(_KeyState, gate._state)
            if not state.running and not state.waiting and key not in self._idle_keys:
                self._idle(key, state, now)

    def _drop(self, key: K) -> None:
        gate = self._gates[key]
        light = light_of(gate)
        if light is not None:
            self._drop_light(key, light)
            return
        del self._gates[key]
        state = cast(_KeyState, gate._state)
        state._phase = _RETIRED
        self._retired.add(state)
        self._dropped += 1
        if gate._controller is not None:
            self._remember(key, gate._controller, bool(state.completed or state.late))


def _check_adaptive(adaptive: object, max_running: object) -> None:
    """Refuse ``KeyedGate(adaptive=...)`` that cannot work."""
    if adaptive is not None and not isinstance(adaptive, Adaptive):
        raise TypeError(f"adaptive must be Adaptive settings, got {shown(adaptive)}")
    if adaptive is not None and max_running is None:
        raise ValueError("an adaptive limit needs a template max_running")
