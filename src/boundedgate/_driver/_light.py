"""A keyed gate's key while it needs nothing but counts: the state its gate starts with.

A :class:`KeyedGate` without rate limits, a controller or observers makes each key's gate around a
:class:`LightKey` rather than a full :class:`GateState`: a dozen slots, the running count against the
key's C and the counters of requests that started at once and completed. Arriving at a free slot and
completing are all it does, in full: anything else (a request that must queue or is refused, a
failure, a late or cancelled one, a change of limits, a pause, a snapshot, or any attribute of
``GateState`` it does not have) first *promotes* it: its keyed gate makes the key's full state from
its counts, puts it in the gate's place, and the event or attribute goes to that state, exactly as
if the key had had it all along. A light key that is dropped folds its few counters into its keyed
gate's totals in a few additions, with nothing else to undo.

Every name of ``GateState`` that a light key lacks is a descriptor on its class that promotes it and
reads (or writes) the full state's, so the light key needs no ``__getattr__`` (which would cost every
attribute read on the hot path its specialisation). After a promotion the light key becomes a
:class:`PromotedKey`, a proxy whose every attribute is the full state's (a caller may still hold it in
a local): so it is never out of step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from .._core import GateState, Status, Ticket, check_cost, note, pace_weight

if TYPE_CHECKING:
    from ._bounded import BoundedGate
    from ._keyed import KeyedGate

__all__ = ("FRESH", "LISTED", "RETIRED", "LightKey", "PromotedKey", "light_of")

RUNNING = Status.RUNNING
COMPLETED = Status.COMPLETED

FRESH, LISTED, RETIRED = "fresh", "listed", "retired"

_NOBODY: tuple[Ticket, ...] = ()

#: The slots a promotion empties, so that reading them goes to the full state.
COUNTS = (
    "completed",
    "limit",
    "max_running",
    "max_waiting",
    "peak_running",
    "recent_run_seconds",
    "run_seconds_max",
    "run_seconds_total",
    "running",
)


class LightKey(GateState):
    """A key's state of counts only; see the module docstring. The phases are ``_KeyState``'s.

    A ``GateState`` by type, so that the compiled permit takes it as its gate's state, but never
    initialised as one: its counts are slots of its own (plain Python slots, cheaper to read from
    interpreted code than a compiled state's fields), and every other name of a state promotes it.
    """

    __slots__ = ("_gate", "_key", "_owner", "_pace_weight", "_phase", "_real", *COUNTS)

    # What it stands for, fixed for its life: no buckets, no queue (it never holds a waiter).
    waiting = 0
    rate_limits: tuple[()] = ()
    feasible = False

    _gate: BoundedGate | None
    _real: GateState

    def __init__(self, owner: KeyedGate[Any], key: object, limit: int, max_waiting: int | None) -> None:
        self._owner = owner
        self._key = key
        self._phase = FRESH
        self._gate = None  # set by the keyed gate once the gate around it is made; cleared at the drop
        self.limit = self.max_running = limit
        self._pace_weight = pace_weight(limit)  # the core's, for a gate of this C
        self.max_waiting = max_waiting
        self.running = 0
        self.completed = 0
        self.peak_running = 0
        self.run_seconds_total = 0.0
        self.run_seconds_max = 0.0
        self.recent_run_seconds: float | None = None

    @property
    def priorities(self) -> int:
        """The keyed gate's priority classes (they only matter to a queue: a full state's)."""
        return self._owner._priorities

    def check_cost(self, cost: object) -> float:
        """A declared cost, checked as ``GateState.check_cost`` does for a state without buckets."""
        return check_cost(cost)

    def arrive(self, ticket: Ticket, now: float, wait: bool = True) -> Sequence[Ticket]:
        """Start ``ticket`` if a slot is free (listing a fresh key), else promote and arrive there."""
        running = self.running
        if running < self.limit and ticket.deadline > now:
            owner = self._owner
            phase = self._phase
            if phase is LISTED:
                if not running and owner._idle_keys:
                    owner._idle_keys.pop(self._key, None)  # it was kept idle
            elif phase is FRESH and (key := self._key) not in (gates := owner._gates):
                gates[key] = self._gate  # type: ignore[assignment]  # set at creation
                self._phase = LISTED
                if (keys := len(gates)) > owner._peak_keys:
                    owner._peak_keys = keys
            else:  # retired, or the key listed another gate meanwhile: the full state moves it on
                return owner._promote(self).arrive(ticket, now, wait)
            ticket.arrival = ticket.started = now
            ticket.status = RUNNING
            self.running = running = running + 1
            if running > self.peak_running:
                self.peak_running = running
            owner._running = total = owner._running + 1
            if total > owner._peak_running:
                owner._peak_running = total
            return _NOBODY
        return self._owner._promote(self).arrive(ticket, now, wait)

    def release(self, ticket: Ticket, now: float, ending: Status | None = None) -> Sequence[Ticket]:
        """Complete ``ticket`` (an ending of any other kind promotes first, then ends there)."""
        if ticket.status is not RUNNING:
            return _NOBODY
        if ending is not None or now >= ticket.deadline:
            return self._owner._promote(self).release(ticket, now, ending)
        ticket.status = COMPLETED
        ticket.ended = now
        self.completed += 1
        self.running = running = self.running - 1
        ran = now - ticket.started  # type: ignore[operator]
        self.run_seconds_total += ran
        if ran > self.run_seconds_max:
            self.run_seconds_max = ran
        recent = self.recent_run_seconds
        self.recent_run_seconds = ran if recent is None else recent + self._pace_weight * (ran - recent)
        owner = self._owner
        owner._running -= 1
        if not running and self._phase is LISTED:
            if owner._keep_idle:
                owner._light_idle(self)
            else:  # dropped now (KeyedGate._drop_light, spelled out for the gate made per call)
                gate = owner._gates.pop(self._key)
                self._phase = RETIRED
                self._gate = None  # the gate and its state no longer hold each other
                owner._spare = gate
                owner._done += self.completed
                ran = self.run_seconds_total
                if ran:
                    owner._done_run_total += ran
                    if self.run_seconds_max > owner._done_run_max:
                        owner._done_run_max = self.run_seconds_max
                owner._dropped += 1
        if owner._resting and owner._resting[0][0] <= now:
            owner._rested(now)
        return _NOBODY

    def settle(self, ticket: Ticket, cost: float, now: float) -> Sequence[Ticket]:
        """Record a started ticket's real cost, as a state without buckets does (nothing to charge)."""
        if ticket.started is None or cost == ticket.cost:
            return _NOBODY
        if self._phase is not LISTED:  # dropped since the release: as KeyedGate._settle_retired
            gate = self._owner._gates.get(self._key)
            if gate is not None:  # the key's gate of now settles it
                ticket._gate = gate  # type: ignore[attr-defined]  # a Permit
                return gate._state.settle(ticket, cost, now)
            ticket.cost = cost
            return _NOBODY
        if "declared" not in getattr(ticket, "_notes", ()):
            note(ticket, "declared", ticket.cost)
        ticket.cost = cost
        return _NOBODY

    def full(self) -> GateState:
        """The key's full state, made now: a promotion (a promoted key answers with its own)."""
        return self._owner._promote(self)

    def __repr__(self) -> str:
        return f"<LightKey {self._key!r} {self._phase}>"


class _Promoting:
    """A name of ``GateState`` that a light key lacks: reading or writing it promotes the key first."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, light: LightKey | None, owner: type | None = None) -> Any:
        if light is None:
            return self
        return getattr(light.full(), self.name)

    def __set__(self, light: LightKey, value: object) -> None:
        setattr(light.full(), self.name, value)


def _names(cls: type) -> set[str]:
    names = set(vars(cls))
    for klass in cls.__mro__:
        names.update(getattr(klass, "__slots__", ()))
    return names


_OWN = {*vars(LightKey), *LightKey.__slots__}
for _name in sorted(_names(GateState) - _OWN - set(vars(object))):
    if not _name.startswith("__"):
        setattr(LightKey, _name, _Promoting(_name))


class PromotedKey(LightKey):
    """A light key after its promotion: every attribute but its own few is its full state's."""

    __slots__ = ()

    _OWN = frozenset(("_real", "_owner", "_key", "_phase", "_gate", "__class__", "full"))

    def __getattribute__(self, name: str) -> Any:
        if name in PromotedKey._OWN:
            return object.__getattribute__(self, name)
        return getattr(object.__getattribute__(self, "_real"), name)

    def __setattr__(self, name: str, value: object) -> None:
        if name in PromotedKey._OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(object.__getattribute__(self, "_real"), name, value)

    def full(self) -> GateState:
        """The full state it was promoted to."""
        return cast(GateState, object.__getattribute__(self, "_real"))


def light_of(gate: BoundedGate) -> LightKey | None:
    """The light key ``gate`` drives, if it drives one (else its state is a full one)."""
    state: object = gate._state
    return state if type(state) is LightKey else None
