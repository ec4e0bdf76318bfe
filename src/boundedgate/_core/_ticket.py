"""A request's ticket and the statuses it passes through.

A ticket is ``NEW`` until it arrives, then ``QUEUED`` or ``RUNNING``, and ends in exactly one final
status, its outcome::

    NEW ──arrive──> RUNNING ──release──> COMPLETED | LATE | CUT | FAILED | ABORTED | LEAKED
     │                 ^  └───cancel───> CANCELLED | DISCONNECTED  (granted, but not yet used)
     │                 │ hand-off
     ├──arrive──> QUEUED ──deadline──> EXPIRED
     │                   ├──cancel───> CANCELLED | DISCONNECTED
     │                   └──a more urgent arrival finds the queue full──> EVICTED
     ├──arrive──> REJECTED                              (all slots busy, queue full)
     ├──arrive──> RATE_LIMITED                          (its tokens could not come in time)
     └──arrive──> INFEASIBLE                            (the pace says it cannot start in time)

A ticket whose deadline has passed when it arrives is refused as ``EXPIRED`` before it is
counted (it never touches the gate's counters).
"""

from __future__ import annotations

import enum
import math
from typing import Any, Final

from ._native import mypyc_attr

__all__ = ("Status", "Ticket", "arrival_of", "durations_of", "end_of", "note", "start_of")


class Status(enum.Enum):
    """Where a request stands; all but the first three are final: each request ends in exactly one."""

    #: Created, not yet arrived at the gate.
    NEW = "new"
    #: Waiting in the gate's FIFO queue.
    QUEUED = "queued"
    #: Holding a running slot.
    RUNNING = "running"
    #: Refused at arrival: every slot busy and the queue full.
    REJECTED = "rejected"
    #: Its deadline passed while it waited; it never started.
    EXPIRED = "expired"
    #: Its caller gave up while it waited (or before it could use a slot handed to it).
    CANCELLED = "cancelled"
    #: Ran and finished before its deadline.
    COMPLETED = "completed"
    #: Ran and finished at or after its deadline.
    LATE = "late"
    #: Ran, and was cut off at its deadline (``on_deadline="cut"``): its body was cancelled then.
    CUT = "cut"
    #: Ran and ended with an exception.
    FAILED = "failed"
    #: Ran, and was never released by its caller: the garbage collector gave its slot back.
    LEAKED = "leaked"
    #: Ran, and its client went away before the answer was complete (the body was cancelled).
    ABORTED = "aborted"
    #: Its client went away while it waited (an HTTP client that hung up); it never started.
    DISCONNECTED = "disconnected"
    #: Pushed out of a full queue by a more urgent arrival; it never started.
    EVICTED = "evicted"
    #: Refused at arrival: its rate cost could not be paid in time (or at once, when not waiting).
    RATE_LIMITED = "rate_limited"
    #: Refused at arrival by deadline-feasible admission: by the recent pace it could not start in time.
    INFEASIBLE = "infeasible"

    # Hashed by identity, in C, rather than by Enum's Python-level hash of the name: members are
    # equal only to themselves either way, and the core and its hooks look a request's status up in
    # sets and dicts (a refusal, twice). The hash is no longer the name's, nothing else changes.
    __hash__ = object.__hash__

    @property
    def is_final(self) -> bool:
        """True for an outcome, False while the request is new, queued or running."""
        return self not in _PENDING


_PENDING: Final = frozenset((Status.NEW, Status.QUEUED, Status.RUNNING))
_NEW: Final[Status] = Status.NEW  # an enum member read from the class costs ~100 ns; the hot paths read these


@mypyc_attr(allow_interpreted_subclasses=True)  # the driver's permits, the simulator's requests
class Ticket:
    """One request as the decision core sees it: times on the gate's clock, and a status.

    Whoever makes a ticket gives it its terms (``deadline``, ``max_wait``, ``priority``,
    ``cost``) before it arrives. Fed to a :class:`GateState`, the core writes what the events
    change (``arrival``, ``started``, ``ended``, ``status``, ``_seq``; ``cost`` as it settles); the
    driver around it also sets a ``timeout``'s deadline as the ticket arrives, and ends as
    ``CANCELLED`` (uncounted) a permit whose task was cancelled before it arrived; the keyed
    gate's light keys write what the core would. A ticket no core decides (``admit_all``'s
    combined permit, a Redis gate's permit) is written by its own driver. The times are None
    until they happen: :func:`arrival_of`, :func:`start_of` and :func:`end_of` read one that must
    have (:func:`durations_of`, a release's two spans at once).
    """

    __slots__ = (
        "_notes",
        "_seq",
        "arrival",
        "cost",
        "deadline",
        "ended",
        "max_wait",
        "priority",
        "started",
        "status",
    )

    #: What only a request's record and its refusal read, noted off the uncontended path by
    #: :func:`note` (unset until the first note, so that making and ending a ticket costs nothing
    #: for it):
    #: ``depth`` (the queue depth it met on arrival, noted while observed), ``declared`` (its
    #: declared cost, once a settle changed it), ``first_item`` (when the stream holding its slot
    #: gave its first item), ``limited_by`` (the rate limit that refused it, or made it wait while
    #: observed), ``borrowed`` (it started while a bucket was below its burst, noted while observed),
    #: ``granted`` (when it was handed the slot it gave back unused, noted while observed),
    #: ``ready_at`` (when the rate limits that refused it could have paid its cost, behind the
    #: queue: what its ``retry_after`` counts to).
    _notes: dict[str, Any]

    def __init__(
        self, deadline: float = math.inf, priority: int = 0, cost: float = 0.0, max_wait: float = math.inf
    ) -> None:
        #: When it arrived (None until then).
        self.arrival: float | None = None
        #: When it must be done by; ``inf`` for no deadline.
        self.deadline: float = deadline
        #: The longest it may wait in the queue, in seconds from arrival; ``inf`` for as long as
        #: its deadline allows. Once it runs, only the deadline counts.
        self.max_wait: float = max_wait
        #: When it got a running slot (None if it never did).
        self.started: float | None = None
        #: When it reached its outcome (None until then).
        self.ended: float | None = None
        #: Where it stands.
        self.status: Status = _NEW
        #: Its priority class: 0 is the most urgent.
        self.priority = priority
        # Its place in the order of arrival at the queue (set when it is queued): the core's own,
        # private so that a permit, a ticket itself, shows users no sequence number.
        self._seq = -1
        #: Its declared rate cost (tokens, for rate limits counted in tokens), settled later.
        self.cost = cost

    def __hash__(self) -> int:
        # Identity, spelled out: a compiled class with __lt__ and no __hash__ would be unhashable.
        return id(self) >> 4  # pragma: no mutate (any identity hash does)

    def __lt__(self, other: Ticket) -> bool:
        # Ties between equal deadlines in the core's deadline heap go to the earlier arrival.
        return self._seq < other._seq


def arrival_of(ticket: Ticket) -> float:
    """When ``ticket`` arrived; raises :class:`ValueError` if it has not yet."""
    arrival = ticket.arrival
    if arrival is None:
        raise _not_yet(ticket, "arrived")
    return arrival


def start_of(ticket: Ticket) -> float:
    """When ``ticket`` got its running slot; raises :class:`ValueError` if it has none."""
    started = ticket.started
    if started is None:
        raise _not_yet(ticket, "started")
    return started


def durations_of(ticket: Ticket, now: float) -> tuple[float, float]:
    """How long a started ``ticket`` ending at ``now`` ran, and how long since it arrived.

    What a release records, read at once; raises :class:`ValueError` if it never started.
    """
    started, arrival = ticket.started, ticket.arrival
    if started is None or arrival is None:
        raise _not_yet(ticket, "started")
    return now - started, now - arrival


def end_of(ticket: Ticket) -> float:
    """When ``ticket`` reached its outcome; raises :class:`ValueError` if it has not yet."""
    ended = ticket.ended
    if ended is None:
        raise _not_yet(ticket, "ended")
    return ended


def _not_yet(ticket: Ticket, what: str) -> ValueError:
    # Only a caller that skipped an event can ask: the core asks of the tickets it counted.
    return ValueError(f"{ticket!r} ({ticket.status.value}) has not {what}: its time is not known yet")


def note(ticket: Ticket, name: str, value: object) -> None:
    """Note ``name`` on ``ticket`` for its record (see ``Ticket._notes``)."""
    try:
        ticket._notes[name] = value
    except AttributeError:
        ticket._notes = {name: value}
