"""KeyedGate: one BoundedGate per key (provider, tenant, session), dropped when its key is idle.

Each key's gate, its phases and the table of keys that every call updates are those of
``KeyedGate``'s compiled base, :class:`KeyedBase` (``_keys.py``, where the theory of operation is).
This module holds the rest: the public class, the limits a key's gate is made with (the template,
an override, limits set for the key), the signals, and the statistics.

With ``adaptive``, each key's gate has a controller of its own (an :class:`AdaptiveLimit`, which
samples that key's requests and hears that key's signals). When the gate is dropped, a controller
that learned something (it cut C or closed a window) is kept in ``_learned``, an LRU of at most
``learned_keys`` records, and the key's next gate takes it back with its C: so the learned C outlives
the bursts, and the memory it takes is bounded however many keys come and go.
"""

from __future__ import annotations

import asyncio
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
    Totals,
    check_count,
    check_flag,
    check_limits,
    check_max_running,
    check_max_waiting,
    check_name,
    check_priorities,
    check_remaining,
    provider_pause,
    shown,
    total,
)
from .._streams import StreamOpener, StreamSource, StreamT
from ._bounded import BoundedGate
from ._gate import Permit
from ._keys import KeyedBase, KeyState
from ._observing import Observer

__all__ = ("KeyedGate",)

#: A key's limits as ``overrides`` may give them: a :class:`GateLimits`, or any pair the runtime
#: accepts, ``(max_running, max_waiting)``.
Limits = GateLimits | tuple[int | None, int | None]

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
        feasible: Every key's gate's deadline-feasible admission, as for :class:`BoundedGate`:
            each key by its own recent pace, which lives as long as its gate (an idle key kept by
            ``keep_idle`` keeps it; a key whose gate was dropped starts again with none).
        by_deadline: Every key's gate's queue in deadline order, as for :class:`BoundedGate`.
        adaptive: A controller per key (:class:`Adaptive`'s settings, see :meth:`signal`): each
            key's C is learned from its own signals and requests, starting from its limits' C.
        learned_keys: How many keys without a gate keep what their controller learned (their C,
            baseline and counts: well under 1 kB each), least recently dropped forgotten first.

    Raises:
        TypeError: A limit, ``keep_idle`` or ``learned_keys`` that is not an int, a name that is not
            a str, overrides that are neither a mapping nor callable, ``feasible`` or
            ``by_deadline`` that is not True or False, or ``adaptive`` that is not an
            :class:`Adaptive`.
        ValueError: A limit out of range (as for :class:`BoundedGate`), ``keep_idle < 0``,
            ``learned_keys < 0``, a count beyond ``sys.maxsize``, or ``adaptive`` without a
            template ``max_running``.
    """

    __slots__ = (
        "__weakref__",
        "_adaptive",
        "_learned",
        "_learned_keys",
        "_override",
        "_overrides",
        "_set",
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
        feasible: bool = False,
        by_deadline: bool = False,
        adaptive: Adaptive | None = None,
        learned_keys: int = 10_000,
    ) -> None:
        # The template, checked now rather than at the first key (GateState checks every setting).
        GateState(max_running, max_waiting, priorities, jump_share, rate_limits)
        keep_idle = check_count("keep_idle", keep_idle)
        learned_keys = check_count("learned_keys", learned_keys)
        _check_adaptive(adaptive, max_running)
        feasible = check_flag("feasible", feasible)
        by_deadline = check_flag("by_deadline", by_deadline)
        self._init_keys(
            check_name(name),
            None if max_running is None else check_max_running(max_running),
            check_max_waiting(max_waiting),
            check_priorities(priorities),
            jump_share,
            tuple(rate_limits),
            keep_idle,
        )
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
        self._feasible = feasible
        self._by_deadline = by_deadline
        self._adaptive = adaptive
        self._learned_keys = learned_keys
        # What the controllers of keys without a gate learned, least recently dropped first.
        self._learned: OrderedDict[K, AdaptiveLimit] = OrderedDict()
        self._template = overrides is None and adaptive is None

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
            on_deadline: str = "late",
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
        on_deadline: str = "late",
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
            on_deadline=on_deadline,
        )

    def get(self, key: K) -> BoundedGate | None:
        """The gate ``key`` has now, if it has one (running, waiting, or kept idle); never creates one.

        Use it for a key's own statistics: ``keyed.get(key).stats()``.
        """
        return cast("BoundedGate | None", self._gates.get(key))

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
        self._template = False
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
            state = cast(KeyState, gate._state)
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
        retired = Totals()
        retired.add(self._retired)
        summed = total(
            self._name,
            retired,
            [gate._state for gate in gates.values()],
            self._running,
            self._waiting,
            self._peak_running,
            self._peak_waiting,
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
        self._observed = True
        for key, gate in tuple(self._gates.items()):
            self._attach(key, gate)

    def unobserve(self, callback: Observer) -> None:
        """Stop calling ``callback``; with no callback left the keys' gates record nothing."""
        self._observers.remove(callback)
        self._observed = bool(self._observers.callbacks)
        for key, gate in tuple(self._gates.items()):
            self._attach(key, gate)

    def __repr__(self) -> str:
        return (
            f"<KeyedGate {self._name!r} [keys {len(self._gates)} ({len(self._idle_keys)} idle), "
            f"running {self._running}, waiting {self._waiting}]>"
        )

    # -- what the keys' table asks of the keyed gate (KeyedBase, off the common path) -----------

    def _own_setup(self, key: K) -> tuple[int | None, int | None, AdaptiveLimit | None]:
        """The limits a gate for ``key`` is made with, and its controller (None without ``adaptive``).

        A key's controller is the one it learned with before its gate was dropped, if kept; its C
        is the key's.
        """
        max_running, max_waiting = self.limits(key)
        if self._adaptive is None or max_running is None:
            return max_running, max_waiting, None
        controller = self._learned.pop(key, None)
        if controller is None:
            controller = AdaptiveLimit(self._adaptive, max_running)
        return controller.limit, max_waiting, controller


def _check_adaptive(adaptive: object, max_running: object) -> None:
    """Refuse ``KeyedGate(adaptive=...)`` that cannot work."""
    if adaptive is not None and not isinstance(adaptive, Adaptive):
        raise TypeError(f"adaptive must be Adaptive settings, got {shown(adaptive)}")
    if adaptive is not None and max_running is None:
        raise ValueError("an adaptive limit needs a template max_running")
