"""The record of one request that ended: what every export (metrics, spans, logs) is made of.

The core calls its ``observer`` with the ticket as it reaches its outcome; the asyncio driver and
the simulator turn that ticket into a :class:`RequestRecord` with :meth:`RequestRecord.of`, so a
planned run and a real one give records of one type, in seconds, side by side.
"""

from __future__ import annotations

import sys
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._outcomes import BY_STATUS, Outcome
from ._ticket import Status, Ticket, arrival_of, end_of

if TYPE_CHECKING:
    from ._state import GateState

__all__ = ("DECISIONS", "RequestRecord")

_NO_NOTES: dict[str, Any] = {}

#: What the gate decided at arrival: start at once, queue, or refuse (the ``decision`` field).
DECISIONS = ("allow", "queue", "reject")


def _scaled(seconds: float | None, scale: float) -> float | None:
    return None if seconds is None else seconds * scale


def _retry_after(state: GateState, ticket: Ticket, status: Status, ended: float) -> float | None:
    # As the refusals compute it (boundedgate._errors): exact for a rate limit, else an estimate.
    if status is Status.RATE_LIMITED:
        ready: float = ticket._notes["ready_at"]  # noted as it was refused
        return max(0.0, ready - ended)
    if status is Status.INFEASIBLE:
        return max(0.0, state.predicted_start(ended, ticket.deadline) - ended)
    recent = state.recent_run_seconds
    if recent is None or state.limit == sys.maxsize:
        return None
    return (state.waiting + 1) * recent / state.limit


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request from arrival to outcome: times in seconds, on the gate's clock.

    Given to each observer of a gate (``gate.observe(callback)``) once per counted request, and by
    ``simulate(observer=...)`` for each simulated one.
    """

    #: The gate's name (a keyed gate's own name, not the per-key ``name/key``).
    gate: str
    #: The key, for a request through a :class:`~boundedgate.KeyedGate` (None otherwise).
    key: Hashable | None
    #: Its priority class.
    priority: int
    #: How it ended (one of :data:`~boundedgate.OUTCOMES`).
    outcome: Outcome
    #: ``allow`` (started at arrival), ``queue`` (waited), ``reject`` (refused at arrival).
    decision: str
    #: When it arrived.
    arrival: float
    #: When it got its slot (None if it never ran).
    started: float | None
    #: When it reached its outcome.
    ended: float
    #: Its deadline (``inf`` for none).
    deadline: float
    #: Seconds in the queue (0 for one that started or was refused at arrival).
    waited: float
    #: Seconds it held its slot (None if it never ran).
    ran: float | None
    #: Seconds from arrival to outcome.
    end_to_end: float
    #: Seconds from its start to the first item of the stream that held its slot (None: no item,
    #: or not a stream).
    first_chunk: float | None
    #: How many requests were queued when it arrived: 0 when it started at once, None when it
    #: queued while nobody observed the gate (only a refusal's log record can say so).
    queue_depth: int | None
    #: The cost it declared at admission.
    cost: float
    #: Its cost as settled by the time it ended (its declared cost if never settled).
    settled: float
    #: The rate limit that refused it, or made it wait with a slot free (None: none did).
    limited_by: str | None
    #: The ``retry_after`` its refusal carried (None: not refused, or the gate could not say).
    retry_after: float | None
    #: It started while a rate limit's bucket was below its burst: above the steady rate.
    borrowed_burst: bool

    @property
    def limited(self) -> bool:
        """It did not start at once: it waited, or was refused (the ``limited`` field)."""
        return self.decision != "allow"

    @classmethod
    def of(
        cls, ticket: Ticket, state: GateState, gate: str, key: Hashable | None = None, scale: float = 1.0
    ) -> RequestRecord:
        """The record of ``ticket``, which just reached its outcome in ``state``.

        ``scale`` turns the state's clock into seconds (the simulator's is in milliseconds: 0.001).
        """
        status = ticket.status
        outcome = BY_STATUS[status]
        arrival = arrival_of(ticket)
        ended = end_of(ticket)
        started = ticket.started
        notes = getattr(ticket, "_notes", _NO_NOTES)
        # A slot given back unused (a caller cancelled as it was handed one) was still granted.
        granted = notes.get("granted") if started is None else started
        if outcome.at_arrival:
            decision, waited = "reject", 0.0
        else:
            decision = "allow" if granted == arrival else "queue"
            waited = ((ended if granted is None else granted) - arrival) * scale
        first = notes.get("first_item")
        depth = notes.get("depth", state.waiting if outcome.at_arrival else None)
        refused = outcome.error_code is not None and not outcome.ran
        return cls(
            gate=gate,
            key=key,
            priority=ticket.priority,
            outcome=outcome,
            decision=decision,
            arrival=arrival * scale,
            started=None if started is None else started * scale,
            ended=ended * scale,
            deadline=ticket.deadline * scale,
            waited=waited,
            ran=None if started is None else (ended - started) * scale,
            end_to_end=(ended - arrival) * scale,
            first_chunk=None if first is None or started is None else (first - started) * scale,
            queue_depth=0 if decision == "allow" else depth,
            cost=notes.get("declared", ticket.cost),
            settled=ticket.cost,
            limited_by=notes.get("limited_by"),
            retry_after=None if not refused else _scaled(_retry_after(state, ticket, status, ended), scale),
            borrowed_burst=notes.get("borrowed", False),
        )
