"""admit_all: one request through several gates (tenant, then model, then provider), all or nothing.

The gates are taken one after the other, in the order given, each waiting only what is left of
one deadline for the whole; a gate already taken is held while the next is waited for (ordered
locking: with one global order, see ``_order``, this cannot deadlock). If a step is refused,
expires or is cancelled, every gate already taken is given back at once, as a slot handed over
but never used (each of those gates counts it ``cancelled``, not ``admitted``), and the caller
sees the refused step's own error, which names its gate, with the whole call's ``waited`` and
``elapsed``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Hashable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar, final

from .._core import Status, check_cost, check_deadline, check_max_wait, check_priority, check_timeout
from .._errors import GateError, Late
from .._streams import StreamPermit
from .._streams._handing import HandsOver
from ._bounded import BoundedGate
from ._keyed import KeyedGate, _KeyState
from ._light import light_of
from ._order import check_order
from ._permit import Permit

__all__ = ("CombinedPermit", "admit_all")

NEW = Status.NEW
QUEUED = Status.QUEUED
RUNNING = Status.RUNNING
CANCELLED = Status.CANCELLED
COMPLETED = Status.COMPLETED
LATE = Status.LATE
FAILED = Status.FAILED
ABORTED = Status.ABORTED
LEAKED = Status.LEAKED

_T = TypeVar("_T")
_ZERO = 0  # `priority is not _ZERO`: the identity of the small int the default is

#: A gate, or a keyed gate and the key to take in it.
Step = BoundedGate | tuple[KeyedGate[Any], Hashable]


def admit_all(
    *gates: BoundedGate | tuple[KeyedGate[Any], Hashable],
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
        gates: The gates, in the order to take them: each a :class:`BoundedGate`, or a pair
            ``(keyed_gate, key)`` for a key of a :class:`KeyedGate` (resolved when its turn comes).
        timeout: Budget in seconds from arrival (>= 0), covering every wait and the run.
        deadline: Absolute deadline on the running loop's clock. Give at most one of the two.
        max_wait: A queue budget for the whole call, in seconds from arrival (>= 0): a step still
            waiting at ``min(deadline, arrival + max_wait)`` leaves with :class:`QueueExpired`;
            once every gate is held, only the deadline decides :class:`Late`.
        priority: The request's priority class at every gate (each must have that many classes).
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
        TypeError: Something other than a gate or a ``(KeyedGate, key)`` pair; a malformed timeout
            or deadline.
        ValueError: No gates; a gate (or keyed gate) given twice; an order that contradicts one
            already used; both timeout and deadline; a priority or cost out of range (found when
            the step's gate is reached).
    """
    families: list[BoundedGate | KeyedGate[Any]] = []
    for gate in gates:
        if type(gate) is BoundedGate:  # both classes are final: no subclass to miss
            state = gate._state
            light = light_of(gate)
            if light is not None:
                families.append(light._owner)
            else:
                families.append(state._owner if type(state) is _KeyState else gate)
        elif type(gate) is tuple and len(gate) == 2 and type(gate[0]) is KeyedGate:
            hash(gate[1])
            families.append(gate[0])
        else:
            raise TypeError(f"admit_all() takes gates and (KeyedGate, key) pairs, got {gate!r}")
    if not families:
        raise ValueError("admit_all() needs at least one gate")
    if priority is not _ZERO:  # checked now against the fewest classes among the gates, not at a step
        classes = (f.priorities if type(f) is BoundedGate else f._priorities for f in families)
        check_priority(priority, min(classes))
    if cost is not None:
        cost = check_cost(cost)
    if deadline is None:
        relative = check_timeout(timeout)  # inf for None: no deadline
        absolute = math.inf
    elif timeout is not None:
        raise ValueError("give timeout or deadline, not both")
    else:
        relative = None
        absolute = check_deadline(deadline)
    check_order(families)
    permit = CombinedPermit(gates, relative, absolute, priority, cost)
    if max_wait is not None:
        permit._max_wait = check_max_wait(max_wait)
    permit._raise_late = bool(raise_late)
    return permit


@final
class CombinedPermit(HandsOver):
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

    def settle(self, cost: float) -> None:
        """Record the request's real rate cost at every gate, as :meth:`Permit.settle` does at one."""
        for permit in self._permits:
            permit.settle(cost)

    async def __aenter__(self) -> Self:
        if self.status is RUNNING:
            raise RuntimeError(f"{self!r} is already entered; a permit is entered once, by one block")
        if self.status is not NEW:
            raise RuntimeError(f"{self!r} was already used; call admit_all() for each request")
        loop = self._loop = asyncio.get_running_loop()
        now = self.arrival = loop.time()
        if self._timeout is not None:
            self.deadline = now + self._timeout
        deadline = self.deadline
        wait_until = now + self._max_wait  # every step's queue budget ends here
        self.status = QUEUED
        taken: list[Permit] = []
        for step in self._steps:
            permit = None
            try:
                gate = step if isinstance(step, BoundedGate) else step[0]._gate_for(step[1])
                permit = gate.admit(deadline=deadline, priority=self._priority, cost=self._cost)
                if wait_until != math.inf:
                    permit.max_wait = max(0.0, wait_until - loop.time())
                await permit.__aenter__()
            except BaseException as exc:
                self._give_back(taken, permit)
                if isinstance(exc, GateError) and permit is not None and permit.ended is not None:
                    # The step's gate timed its own part; the caller waited for the whole call.
                    waited = permit.ended - now
                    exc.args = (*exc.args[:5], waited, waited, *exc.args[7:])
                raise
            taken.append(permit)
        self._permits = tuple(taken)
        self.started = loop.time()
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
        ended: float = self.started  # type: ignore[assignment]
        for permit in reversed(self._permits):
            permit._finish(ending)
            if permit.status is LATE:
                late = True
            if permit.ended > ended:  # type: ignore[operator]
                ended = permit.ended  # type: ignore[assignment]
        self.ended = ended
        self.status = ending if ending is not None else LATE if late else COMPLETED

    def _give_back(self, taken: list[Permit], refused: Permit | None) -> None:
        """A step failed: the gates taken give their slots back unused, and the request ends."""
        for permit in reversed(taken):
            permit._gate._cancel(permit)
        self._permits = (*taken, refused) if refused is not None else tuple(taken)
        status = refused.status if refused is not None else NEW
        self.status = status if status.is_final else CANCELLED
        self.ended = self._loop.time()  # type: ignore[union-attr]

    def _late(self) -> Late:
        """The :class:`Late` for a request that finished at or after its deadline, naming the last gate."""
        return self._permits[-1]._gate._late(self)

    def __repr__(self) -> str:
        names = ", ".join(repr(gate.name) for gate in self.gates) or f"{len(self._steps)} gates"
        return f"<CombinedPermit of {names}: {self.status.value}>"


if TYPE_CHECKING:

    def _is_a_stream_permit(permit: CombinedPermit) -> StreamPermit:  # mypy checks the contract here
        return permit
