"""The combined permit: one request's claim on several gates, and :func:`combine`, which makes it.

Compiled with the permit in the compiled build (its making, entry, steps and exit are the combined
admission's hot path). The public ``admit_all`` (``_combined``) stays interpreted, as a public
function keeps its docstring only there, and is one call into :func:`combine`.
"""

from __future__ import annotations

import asyncio
import math
import operator
import sys
from collections.abc import AsyncIterator, Hashable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Self, TypeVar, cast, final

from .._core import (
    BoolArg,
    FloatArg,
    IntArg,
    Status,
    check_cost,
    check_deadline,
    check_flag,
    check_max_wait,
    check_priority,
    check_timeout,
)
from .._errors import GateError, Late
from .._streams import GatedStream, StreamPermit, hand_over
from ._bounded import BoundedGate
from ._gate import GateBase, Permit
from ._keyed import KeyedGate
from ._keys import KeyState
from ._order import check_order, checked_gates

__all__ = ("CombinedPermit", "Step", "combine", "is_cluster_gate")

NEW: Final[Status] = Status.NEW
QUEUED: Final[Status] = Status.QUEUED
RUNNING: Final[Status] = Status.RUNNING
CANCELLED: Final[Status] = Status.CANCELLED
COMPLETED: Final[Status] = Status.COMPLETED
LATE: Final[Status] = Status.LATE
FAILED: Final[Status] = Status.FAILED
ABORTED: Final[Status] = Status.ABORTED

_Stream = TypeVar("_Stream", bound=AsyncIterator[Any])
_INF: Final = math.inf
_MAX: Final = sys.float_info.max
_ZERO: Final = 0  # `priority is not _ZERO`: the identity of the small int the default is
# Module globals that are not native, read as C statics (a plain global is a dict lookup, compiled).
_CHECKED_GATES: Final = checked_gates
_get_running_loop: Final = asyncio.get_running_loop

#: A gate, or a keyed gate and the key to take in it.
Step = BoundedGate | tuple[KeyedGate[Any], Hashable]


@final
class CombinedPermit:
    """One request's claim on several gates at once, from :func:`admit_all`.

    It has the shape of a :class:`Permit`: entered with ``async with`` (the arrival), released
    exactly once by :meth:`release` or the end of the block (from any task), ``Late`` on exit when
    the block finished at or after the deadline, and the same timing attributes. Releasing it
    releases every gate's permit, last gate first.

    Attributes:
        status: ``NEW``, then ``QUEUED`` while it goes through the gates, ``RUNNING`` once it
            holds them all; then ``COMPLETED``, ``LATE`` (any gate judged it late) or ``FAILED``.
            If a step was refused it ends with that step's status: ``REJECTED``, ``EXPIRED`` or
            ``CANCELLED``.
        arrival: When it arrived at the first gate, on the loop's clock (None before).
        deadline: The one deadline of every step (``math.inf`` for none).
        started: When it held every gate, and the body could start (None if it never did).
        ended: When it reached its outcome (None while pending).
    """

    __slots__ = (
        "_cost",
        "_handed_over",
        "_loop",
        "_max_wait",
        "_permits",
        "_priority",
        "_raise_late",
        "_steps",
        "_timeout",
        "arrival",
        "deadline",
        "ended",
        "started",
        "status",
    )

    status: Status

    def __init__(
        self,
        steps: tuple[Step, ...],
        timeout: float | None,
        deadline: float,
        priority: int,
        cost: float | None,
    ) -> None:
        self._steps = steps
        self._priority = priority
        self._cost = cost
        # True once a stream owns the gates: the block's exit then leaves them alone.
        self._handed_over = False
        # The relative budget, turned into `deadline` at arrival (None when it was absolute).
        self._timeout = timeout
        self._permits: tuple[Permit, ...] = ()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._max_wait = math.inf
        self._raise_late = True
        self.arrival: float | None = None
        self.deadline = deadline
        self.started: float | None = None
        self.ended: float | None = None
        self.status = NEW

    @property
    def permits(self) -> tuple[Permit, ...]:
        """One permit per gate reached, in order.

        After a refusal the last is the refused one, and the others were given back (``CANCELLED``).
        """
        return self._permits

    @property
    def gates(self) -> tuple[BoundedGate, ...]:
        """The gates of :attr:`permits` (for a keyed gate, the key's gate)."""
        return tuple(permit.gate for permit in self._permits)

    @property
    def gate(self) -> BoundedGate:
        """The last gate taken (the scarce shared one, usually): the one named in ``Late``."""
        return self._permits[-1].gate

    def release(self) -> None:
        """Release every gate now, as a normal end (completed, or late past the deadline).

        Does nothing unless it holds its gates (not yet entered, refused, or already released).
        Never raises :class:`Late`; the ``async with`` exit does that.
        """
        self._finish()

    def abort(self) -> None:
        """End the request now as *aborted* at every gate, as :meth:`Permit.abort` does at one."""
        self._finish(ABORTED)

    def settle(self, cost: FloatArg) -> None:
        """Record the request's real rate cost at every gate, as :meth:`Permit.settle` does at one."""
        for permit in self._permits:
            permit.settle(cost)

    def hand_to(self, stream: _Stream, *, raise_late: BoolArg = True) -> GatedStream[_Stream]:
        """Give every gate's slot to ``stream``: the returned wrapper releases them when the stream ends.

        From then on the ``async with`` block neither releases the gates nor raises :class:`Late`,
        whatever happens in it, so hand over last; if the block raises before the hand-over, it
        releases as usual. The combined permit's deadline is the stream's (see :meth:`Permit.hand_to`).

        Raises:
            TypeError: ``stream`` is not an async iterator (the block still owns the gates).
            RuntimeError: The permit holds no gates (not entered, or already released), or was
                already handed to a stream.
        """
        # HandsOver.hand_to(), on the class itself: a compiled class has one base that is not a trait.
        return hand_over(cast("StreamPermit", self), stream, raise_late=raise_late)

    def _hand_over(self) -> None:
        if self.status is not RUNNING:
            raise RuntimeError(f"{self!r} holds no slot to hand over")
        if self._handed_over:
            raise RuntimeError(f"{self!r} was already handed to a stream")
        self._handed_over = True

    async def __aenter__(self) -> Self:
        if self.status is RUNNING:
            raise RuntimeError(f"{self!r} is already entered; a permit is entered once, by one block")
        if self.status is not NEW:
            raise RuntimeError(f"{self!r} was already used; call admit_all() for each request")
        loop = self._loop = _get_running_loop()
        timeout = self._timeout  # for the first step: the call arrives as it does
        deadline = self.deadline
        priority = self._priority
        cost = self._cost
        max_wait = self._max_wait
        wait_until = _INF
        self.status = QUEUED
        taken: list[Permit] = []
        for step in self._steps:
            permit = None
            try:
                # A step is a gate or a pair (checked when the permit was made): no global lookup.
                gate: GateBase = step[0]._gate_for(step[1]) if type(step) is tuple else step  # type: ignore[assignment]
                if timeout is None:  # its gate checks the cost against its buckets
                    permit = gate.admit(deadline=deadline, priority=priority, cost=cost)
                else:
                    permit = gate.admit(timeout=timeout, priority=priority, cost=cost)
                if taken:  # a later step waits only what is left of the call's queue budget
                    if wait_until != _INF:
                        permit.max_wait = max(0.0, wait_until - loop.time())
                    await permit.__aenter__()
                else:  # the first step: its arrival is the call's
                    permit.max_wait = max_wait
                    await permit.__aenter__()
                    now: float = permit.arrival  # type: ignore[assignment]  # set by the arrival
                    self.arrival = now
                    deadline = self.deadline = permit.deadline
                    wait_until = now + max_wait  # every step's queue budget ends here
                    timeout = None
            except BaseException as exc:
                self._give_back(taken, permit, exc)
                raise
            taken.append(permit)
        self._permits = tuple(taken)
        self.started = taken[-1].started  # the last step's start: when every gate was held
        self.status = RUNNING
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._handed_over:
            return  # a stream owns the gates now
        # No await before the release, as for Permit.
        self._finish(None if exc_type is None else FAILED)
        if exc_type is None and self.status is LATE and self._raise_late:
            raise self._late()

    def _finish(self, ending: Status | None = None) -> None:
        """End the request now, if it holds its gates: release each, last first."""
        if self.status is not RUNNING:
            return
        # Each gate judges lateness on its own reading of the clock; the last reading is the end.
        late = False
        ended = self.started
        for permit in reversed(self._permits):
            permit._finish(ending)
            if permit.status is LATE:
                late = True
            if permit.ended is not None and (ended is None or permit.ended > ended):
                ended = permit.ended
        self.ended = ended
        self.status = ending if ending is not None else LATE if late else COMPLETED

    def _give_back(self, taken: list[Permit], refused: Permit | None, exc: BaseException) -> None:
        """A step failed with ``exc``: the gates taken give their slots back unused, and the request ends."""
        loop: asyncio.AbstractEventLoop = self._loop  # type: ignore[assignment]
        arrival = self.arrival
        if arrival is None:  # the first step failed before its arrival (the call's): the call arrives now
            arrival = refused.arrival if refused is not None else None
            arrival = self.arrival = loop.time() if arrival is None else arrival
            if self._timeout is not None:
                self.deadline = arrival + self._timeout
        for permit in reversed(taken):
            permit._gate._cancel(permit)
        self._permits = (*taken, refused) if refused is not None else tuple(taken)
        status = refused.status if refused is not None else NEW
        self.status = status if status.is_final else CANCELLED
        self.ended = loop.time()
        if isinstance(exc, GateError) and refused is not None and refused.ended is not None:
            # The step's gate timed its own part; the caller waited for the whole call.
            waited = refused.ended - arrival
            exc.waited = exc.elapsed = waited

    def _late(self) -> Late:
        """The :class:`Late` for a request that finished at or after its deadline, naming the last gate."""
        return self._permits[-1]._gate._late(self.arrival, self.started, self.ended, self.deadline)

    def __repr__(self) -> str:
        names = ", ".join(repr(gate.name) for gate in self.gates) or f"{len(self._steps)} gates"
        return f"<CombinedPermit of {names}: {self.status.value}>"


def combine(
    steps: tuple[Any, ...],
    timeout: FloatArg | None,
    deadline: FloatArg | None,
    max_wait: FloatArg | None,
    priority: IntArg,
    cost: FloatArg | None,
    raise_late: BoolArg,
) -> CombinedPermit:
    """What ``admit_all(*steps, ...)`` returns: its arguments checked, and the permit, not arrived."""
    # These gates in this order admitted before (a pair is a new tuple each call: never found)?
    # One lookup, and the proxies compare as the gates they stand for, or fail once any is gone.
    level = 0
    try:
        known = _CHECKED_GATES.get(hash(steps))
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
    checked_cost = None if cost is None else check_cost(cost)
    relative: float | None
    if deadline is None:
        # The common case inline; an int beyond a float's range (and inf, NaN) takes the full check.
        given: Any = timeout  # compiled, the number as passed (an object)
        if (type(given) is float or type(given) is int) and 0 <= given <= _MAX:
            relative = given
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
    permit = CombinedPermit(steps, relative, absolute, level, checked_cost)
    permit._max_wait = _INF if max_wait is None else check_max_wait(max_wait)
    permit._raise_late = raise_late is True or check_flag("raise_late", raise_late)
    return permit


def _families(gates: tuple[Any, ...]) -> list[BoundedGate | KeyedGate[Any]]:
    """The family of each step (a gate, or the keyed gate of a key's gate or pair), each step checked."""
    families: list[BoundedGate | KeyedGate[Any]] = []
    for gate in gates:
        if type(gate) is BoundedGate:  # both classes are final: no subclass to miss
            state = gate._state  # a key's gate belongs to its keyed gate's family
            families.append(cast("KeyedGate[Any]", state.owner) if type(state) is KeyState else gate)
        elif type(gate) is tuple and len(gate) == 2 and type(gate[0]) is KeyedGate:
            if _is_a_gate(gate[1]):  # almost surely a misplaced tuple element: (keyed, key), gate
                raise _a_gate_as_key(gate[0], gate[1])
            hash(gate[1])
            families.append(gate[0])
        else:
            raise _not_a_step(gate)
    if not families:
        raise ValueError(
            "admit_all() needs at least one gate: pass the gates in the order to take them, "
            "e.g. admit_all((tenants, tenant_id), provider)"
        )
    return families


#: Where the docs explain admit_all().
_DOCS = 'see docs/keys.md, "Several gates for one call"'


def is_cluster_gate(given: object) -> bool:
    """True for a ``boundedgate.redis.RedisGate``, told by its class's name and module.

    By name: ``boundedgate.redis`` (and redis-py) is imported only by who uses it.
    """
    kind = type(given)
    return kind.__name__ == "RedisGate" and kind.__module__.startswith("boundedgate.redis")


def _is_a_gate(given: object) -> bool:
    return isinstance(given, BoundedGate | KeyedGate) or is_cluster_gate(given)


def _a_gate_as_key(keyed: KeyedGate[Any], key: Any) -> TypeError:
    """The refusal of a pair whose key is a gate, and how to pass the two."""
    return TypeError(
        f"admit_all() takes no gate as a key: the {type(key).__name__} {key.name!r} is the key of the "
        f"KeyedGate {keyed.name!r}; give the key and the gate apart, "
        f"admit_all((keyed_gate, key), gate) ({_DOCS})"
    )


def _not_a_step(given: object) -> TypeError:
    """Why admit_all() takes no ``given`` as a step, and what to pass instead."""
    kind = type(given)
    if is_cluster_gate(given):
        return TypeError(
            "admit_all() takes in-process gates (BoundedGate, (KeyedGate, key)), not a RedisGate: admit "
            "through it inside the block, the scarce shared gate last, "
            "async with admit_all(...): async with cluster_gate.admit(...) "
            '(see docs/cluster.md, "What RedisGate does not have")'
        )
    if isinstance(given, KeyedGate):
        return TypeError(
            "admit_all() takes a KeyedGate with its key: admit_all((keyed_gate, key), ...), "
            f"not the KeyedGate {given.name!r} alone ({_DOCS})"
        )
    if isinstance(given, list | tuple) and all(isinstance(g, BoundedGate | KeyedGate | tuple) for g in given):
        return TypeError(
            f"admit_all() takes each gate as an argument, admit_all(*gates), not a {kind.__name__} of them"
        )
    if isinstance(given, tuple) and len(given) == 2 and isinstance(given[0], BoundedGate):
        return TypeError(
            f"admit_all() takes a key with a KeyedGate only: pass the BoundedGate {given[0].name!r} "
            f"alone ({_DOCS})"
        )
    return TypeError(f"admit_all() takes gates and (KeyedGate, key) pairs, got {given!r} ({_DOCS})")


if TYPE_CHECKING:

    def _is_a_stream_permit(permit: CombinedPermit) -> StreamPermit:  # mypy checks the contract here
        return permit
