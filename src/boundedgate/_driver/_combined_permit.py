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

__all__ = ("CombinedPermit", "Step", "combine", "is_cluster_gate", "is_cluster_keyed")

NEW: Final[Status] = Status.NEW
QUEUED: Final[Status] = Status.QUEUED
RUNNING: Final[Status] = Status.RUNNING
CANCELLED: Final[Status] = Status.CANCELLED
COMPLETED: Final[Status] = Status.COMPLETED
LATE: Final[Status] = Status.LATE
FAILED: Final[Status] = Status.FAILED
ABORTED: Final[Status] = Status.ABORTED
DISCONNECTED: Final[Status] = Status.DISCONNECTED

_Stream = TypeVar("_Stream", bound=AsyncIterator[Any])
_INF: Final = math.inf
_MAX: Final = sys.float_info.max
_ZERO: Final = 0  # `priority is not _ZERO`: the identity of the small int the default is
# Module globals that are not native, read as C statics (a plain global is a dict lookup, compiled).
_CHECKED_GATES: Final = checked_gates
_get_running_loop: Final = asyncio.get_running_loop

#: A gate, or a keyed gate and the key to take in it; or a cluster gate (``RedisGate``), or a
#: ``RedisKeyedGate`` and its key (typed ``Any``: the core never imports ``boundedgate.redis``).
Step = BoundedGate | tuple[KeyedGate[Any], Hashable] | Any


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
        "_client_left",
        "_cluster",
        "_cost",
        "_current",
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
        # True when a step is a cluster gate: the steps then go through their gates' own admit().
        self._cluster = False
        # The permit of the step now being entered (for disconnect()), and whether its client left.
        self._current: Any = None
        self._client_left = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._max_wait = math.inf
        self._raise_late = True
        self.arrival: float | None = None
        self.deadline = deadline
        self.started: float | None = None
        self.ended: float | None = None
        self.status = NEW

    @property
    def permits(self) -> tuple[Permit | Any, ...]:
        """One permit per gate reached, in order (a cluster step's is its ``RedisPermit``).

        After a refusal the last is the refused one, and the others were given back (``CANCELLED``,
        or ``DISCONNECTED`` after :meth:`disconnect`).
        """
        return self._permits

    @property
    def gates(self) -> tuple[BoundedGate | Any, ...]:
        """The gates of :attr:`permits` (for a keyed gate, the key's gate; a cluster step's ``RedisGate``)."""
        permits: tuple[Any, ...] = self._permits  # a cluster step's permit is no Permit
        return tuple(permit.gate for permit in permits)

    @property
    def gate(self) -> BoundedGate | Any:
        """The last gate taken (the scarce shared one, usually): the one named in ``Late``."""
        permits: tuple[Any, ...] = self._permits
        return permits[-1].gate

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
        permits: tuple[Any, ...] = self._permits  # a cluster step's permit settles in Redis
        for permit in permits:
            permit.settle(cost)

    def disconnect(self) -> None:
        """Its client went away while it waited: leave the queue it waits in, as *disconnected*.

        As :meth:`Permit.disconnect` does at one gate: the waiting ``async with`` raises
        ``CancelledError``, and every gate already taken gives its slot back unused, each
        counting the request ``disconnected`` (not ``cancelled``). Does nothing unless the permit
        is on its way through its gates. Call it on the gates' event loop.
        """
        if self.status is not QUEUED:
            return
        self._client_left = True
        current = self._current
        if current is not None:
            current.disconnect()

    def _give_back_unused(self) -> None:
        """End the request as *disconnected* at every gate if it holds them all and never used them.

        For a server whose client left while the request was held back further on (queued at a
        gate inside): each gate takes back its slot as a grant nobody used, as
        ``Permit._give_back_unused`` does at one.
        """
        if self.status is not RUNNING:
            return
        permits: tuple[Any, ...] = self._permits
        for permit in permits[::-1]:
            permit._give_back_unused()
        self.status = DISCONNECTED
        self.ended = self._loop.time()  # type: ignore[union-attr]  # bound: it holds its gates

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
        if self._cluster:
            await self._enter_chain()
            return self
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
                self._current = permit
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
        if self._cluster:
            await self._exit_chain(None if exc_type is None else FAILED)
        else:
            # No await before the release, as for Permit.
            self._finish(None if exc_type is None else FAILED)
        if exc_type is None and self.status is LATE and self._raise_late:
            raise self._late()

    def _finish(self, ending: Status | None = None) -> None:
        """End the request now, if it holds its gates: release each, last first."""
        if self.status is not RUNNING:
            return
        if self._cluster:
            for side, release in self._end_chain(ending):
                side.release(*release)  # sent by a task of its own, retried until it lands
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

    def _give_back(self, taken: list[Any], refused: Any, exc: BaseException) -> None:
        """A step failed with ``exc``: the gates taken give their slots back unused, and the request ends.

        Every gate's permit, in-process or the cluster's, gives its slot back the same way
        (``_give_back_unused(ending)``: a grant nobody took up).
        """
        loop: asyncio.AbstractEventLoop = self._loop  # type: ignore[assignment]
        arrival = self.arrival
        if arrival is None:  # the first step failed before its arrival (the call's): the call arrives now
            arrival = refused.arrival if refused is not None else None
            arrival = self.arrival = loop.time() if arrival is None else arrival
            if self._timeout is not None:
                self.deadline = arrival + self._timeout
        ending = DISCONNECTED if self._client_left else CANCELLED
        for permit in taken[::-1]:
            permit._give_back_unused(ending)
        self._permits = (*taken, refused) if refused is not None else tuple(taken)
        status: Status = refused.status if refused is not None else NEW
        self.status = status if status.is_final else CANCELLED
        self.ended = loop.time()
        if isinstance(exc, GateError) and refused is not None and refused.ended is not None:
            # The step's gate timed its own part; the caller waited for the whole call.
            waited = refused.ended - arrival
            exc.waited = exc.elapsed = waited

    def _late(self) -> Late:
        """The :class:`Late` for a request that finished at or after its deadline, naming the last gate."""
        if self._cluster:
            permits: tuple[Any, ...] = self._permits
            return _late_at(permits[-1], self.arrival, self.started, self.ended, self.deadline)
        return self._permits[-1]._gate._late(self.arrival, self.started, self.ended, self.deadline)

    # -- a chain with a cluster step: each step through its own gate's admit() -------------------

    async def _enter_chain(self) -> None:
        """``__aenter__`` of a chain with a cluster step: as the in-process one, step by step.

        A cluster gate's permit is no :class:`Permit`: every step is admitted and given back
        through the public surface each permit has (``admit(timeout=|deadline=, cost=)``,
        ``max_wait``, ``_give_back_unused(ending)``). There is no priority: :func:`combine` refused one.
        """
        loop = self._loop = _get_running_loop()
        timeout = self._timeout
        deadline = self.deadline
        cost = self._cost
        wait_until = _INF
        self.status = QUEUED
        taken: list[Any] = []
        for step in self._steps:
            permit: Any = None
            try:
                given: Any = step
                gate: Any = given[0]._gate_for(given[1]) if type(given) is tuple else given
                budget = {"deadline": deadline} if timeout is None else {"timeout": timeout}
                permit = gate.admit(**budget) if cost is None else gate.admit(**budget, cost=cost)
                self._current = permit
                if taken:  # a later step waits only what is left of the call's queue budget
                    if wait_until != _INF:
                        permit.max_wait = max(0.0, wait_until - loop.time())
                    await permit.__aenter__()
                else:  # the first step: its arrival is the call's
                    permit.max_wait = self._max_wait
                    await permit.__aenter__()
                    now: float = permit.arrival
                    self.arrival = now
                    deadline = self.deadline = permit.deadline
                    wait_until = now + self._max_wait
                    timeout = None
            except BaseException as exc:
                self._give_back(taken, permit, exc)
                raise
            taken.append(permit)
        self._permits = tuple(taken)
        self.started = taken[-1].started
        self.status = RUNNING

    def _end_chain(self, ending: Status | None) -> list[tuple[Any, tuple[Any, ...]]]:
        """End every step now, last first, as ``_finish`` does; return the cluster releases to send.

        Each is ``(side, release)``: the cluster step's process side and what its ``release`` (in
        the background) or ``release_here`` (awaited by the block's exit) sends.
        """
        sends: list[tuple[Any, tuple[Any, ...]]] = []
        permits: tuple[Any, ...] = self._permits
        late = False
        ended = self.started
        for permit in permits[::-1]:
            holding = getattr(permit, "_end_holding", None)  # a RedisPermit's: ends it, sends nothing
            if holding is None:
                permit._finish(ending)
            else:
                release = holding(ending)
                if release is not None:
                    sends.append((permit._side, release))
            if permit.status is LATE:
                late = True
            if permit.ended is not None and (ended is None or permit.ended > ended):
                ended = permit.ended
        self.ended = ended
        self.status = ending if ending is not None else LATE if late else COMPLETED
        return sends

    async def _exit_chain(self, ending: Status | None) -> None:
        """End every step (no await before that), then wait for the cluster releases to land.

        As a ``RedisPermit``'s own exit: the cluster's slot is free when the block has exited (or,
        past ``op_timeout`` or a cancellation, goes on being released in the background).
        """
        if self.status is not RUNNING:
            return
        sends = self._end_chain(ending)
        if len(sends) == 1:
            side, release = sends[0]
            await side.release_here(*release)
        elif sends:
            await asyncio.gather(*(side.release_here(*release) for side, release in sends))

    def __repr__(self) -> str:
        names = ", ".join(repr(gate.name) for gate in self.gates) or f"{len(self._steps)} gates"
        return f"<CombinedPermit of {names}: {self.status.value}>"


def _late_at(permit: Any, arrival: Any, started: Any, ended: Any, deadline: float) -> Late:
    """The :class:`Late` naming ``permit``'s gate: a ``RedisPermit``'s (or its fallback's) or a Permit's."""
    side = getattr(permit, "_side", None)
    inner = getattr(permit, "_inner", None)
    if side is not None and inner is None:
        return cast("Late", side.late(arrival, started, ended, deadline))
    gate = (inner if inner is not None else permit)._gate
    return cast("Late", gate._late(arrival, started, ended, deadline))


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
    cluster = False
    if again:
        families = None
        if priority is not _ZERO:
            level = check_priority(priority, min(gate.priorities for gate in steps))
    else:
        families, cluster = _families(steps)
        if cluster:
            if priority is not _ZERO:
                _no_priority_in_cluster(priority)
        elif priority is not _ZERO:  # checked now against the fewest classes among the gates, not at a step
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
        # Each gate its own family? Then the sequence is remembered for the fast path above, which
        # knows in-process gates only: a chain with a cluster step is checked here every time.
        check_order(families, not cluster and all(map(operator.is_, families, steps)))
    permit = CombinedPermit(steps, relative, absolute, level, checked_cost)
    if families is not None and cluster:
        permit._cluster = True
    permit._max_wait = _INF if max_wait is None else check_max_wait(max_wait)
    permit._raise_late = raise_late is True or check_flag("raise_late", raise_late)
    return permit


def _families(gates: tuple[Any, ...]) -> tuple[list[Any], bool]:
    """The family of each step (a gate, or the keyed gate of a key's gate or pair), each step checked.

    And whether a step is a cluster gate's: a ``RedisGate`` is a family of its own, a
    ``RedisKeyedGate`` the family of its keys.
    """
    families: list[Any] = []
    cluster = False
    for gate in gates:
        if type(gate) is BoundedGate:  # both classes are final: no subclass to miss
            state = gate._state  # a key's gate belongs to its keyed gate's family
            families.append(cast("KeyedGate[Any]", state.owner) if type(state) is KeyState else gate)
        elif (
            type(gate) is tuple
            and len(gate) == 2
            and (type(gate[0]) is KeyedGate or is_cluster_keyed(gate[0]))
        ):
            if _is_a_gate(gate[1]):  # almost surely a misplaced tuple element: (keyed, key), gate
                raise _a_gate_as_key(gate[0], gate[1])
            hash(gate[1])
            families.append(gate[0])
            cluster = cluster or type(gate[0]) is not KeyedGate
        elif is_cluster_gate(gate):
            families.append(gate)
            cluster = True
        else:
            raise _not_a_step(gate)
    if not families:
        raise ValueError(
            "admit_all() needs at least one gate: pass the gates in the order to take them, "
            "e.g. admit_all((tenants, tenant_id), provider)"
        )
    return families, cluster


def _no_priority_in_cluster(priority: IntArg) -> None:
    """Refuse a priority given with a cluster step (after the checks any priority passes), saying why."""
    if check_priority(priority, sys.maxsize):  # a non-zero class: a cluster gate has one FIFO queue
        raise ValueError(
            f"priority={priority!r}: a RedisGate has no priority classes (its cluster queue is one "
            "FIFO), so admit_all() with a cluster gate among its steps takes no priority: leave "
            f"priority= out, or admit by priority at the in-process gates alone ({_DOCS})"
        )


#: Where the docs explain admit_all().
_DOCS = 'see docs/keys.md, "Several gates for one call"'


def is_cluster_gate(given: object) -> bool:
    """True for a ``boundedgate.redis.RedisGate``, told by its class's name and module.

    By name: ``boundedgate.redis`` (and redis-py) is imported only by who uses it.
    """
    kind = type(given)
    return kind.__name__ == "RedisGate" and kind.__module__.startswith("boundedgate.redis")


def is_cluster_keyed(given: object) -> bool:
    """True for a ``boundedgate.redis.RedisKeyedGate``, told by its class's name and module."""
    kind = type(given)
    return kind.__name__ == "RedisKeyedGate" and kind.__module__.startswith("boundedgate.redis")


def _is_a_gate(given: object) -> bool:
    return isinstance(given, BoundedGate | KeyedGate) or is_cluster_gate(given) or is_cluster_keyed(given)


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
    if isinstance(given, KeyedGate) or is_cluster_keyed(given):
        return TypeError(
            f"admit_all() takes a {kind.__name__} with its key: admit_all((keyed_gate, key), ...), "
            f"not the {kind.__name__} {given.name!r} alone ({_DOCS})"  # type: ignore[attr-defined]
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
