"""The outcomes a request can end in, written out once.

Every request that is counted ends in exactly one final :class:`Status`. The statistics, the
simulator's summaries, the text tables, the charts and the error codes all read the list of those
outcomes from :data:`OUTCOMES`, so an outcome added here reaches every one of them (the tests check
that each agrees with this table).
"""

from __future__ import annotations

from dataclasses import dataclass

from ._ticket import Status

__all__ = ("BY_NAME", "BY_STATUS", "NEVER_RAN", "OUTCOMES", "RAN", "SIMULATED", "Outcome")


@dataclass(frozen=True, slots=True)
class Outcome:
    """One way a request can end, and how every report names it."""

    #: The ticket's final status.
    status: Status
    #: Its counter's name in statistics and summaries (``stats().late``), and its name in JSON.
    name: str
    #: How a sentence or a summary table names it ("expired in the queue").
    label: str
    #: How a narrow table's column heading names it ("expired").
    column: str
    #: It held a running slot: it started, and its run counts in run and end-to-end times.
    ran: bool
    #: It was refused at arrival: it never queued, so it has no queue time.
    at_arrival: bool
    #: The simulator can end a request this way (it has no callers to cancel or fail or forget).
    simulated: bool
    #: Tables show it even when nobody ended this way; the others appear only when someone did.
    always_shown: bool
    #: The ``code`` of the error the caller gets, or None when the caller gets none of ours.
    error_code: str | None
    #: One sentence for the docs.
    description: str
    #: The ``boundedgate`` logger writes a record for it: a refusal, or an ending nobody asked for.
    logged: bool = False


#: Every outcome, in the order reports list them: those that ran, then those that never did.
OUTCOMES: tuple[Outcome, ...] = (
    Outcome(
        Status.COMPLETED, "completed", "completed on time", "on time",
        ran=True, at_arrival=False, simulated=True, always_shown=True, error_code=None,
        description="Ran and finished before its deadline.",
    ),
    Outcome(
        Status.LATE, "late", "late", "late",
        ran=True, at_arrival=False, simulated=True, always_shown=True, error_code="late",
        description="Ran and finished at or after its deadline (Late).",
        logged=True,
    ),
    Outcome(
        Status.CUT, "cut", "cut off at its deadline", "cut",
        ran=True, at_arrival=False, simulated=False, always_shown=False, error_code="cut",
        description="Ran, and its body was cancelled at its deadline: on_deadline='cut' (DeadlineCut).",
        logged=True,
    ),
    Outcome(
        Status.FAILED, "failed", "failed", "failed",
        ran=True, at_arrival=False, simulated=False, always_shown=False, error_code=None,
        description="Ran and ended with an exception of its own.",
    ),
    Outcome(
        Status.ABORTED, "aborted", "aborted by its client", "aborted",
        ran=True, at_arrival=False, simulated=False, always_shown=False, error_code=None,
        description="Ran, and its client went away before the answer was complete: the body was cancelled.",
    ),
    Outcome(
        Status.LEAKED, "leaked", "leaked", "leaked",
        ran=True, at_arrival=False, simulated=False, always_shown=False, error_code=None,
        description="Ran, and was never released: the garbage collector gave its slot back.",
        logged=True,
    ),
    Outcome(
        Status.EXPIRED, "expired", "expired in the queue", "expired",
        ran=False, at_arrival=False, simulated=True, always_shown=True, error_code="queue_expired",
        description="Left the queue at its deadline and never started (QueueExpired).",
        logged=True,
    ),
    Outcome(
        Status.REJECTED, "rejected", "rejected at once", "rejected",
        ran=False, at_arrival=True, simulated=True, always_shown=True, error_code="queue_full",
        description="Refused at arrival: every slot busy and the queue full (QueueFull).",
        logged=True,
    ),
    Outcome(
        Status.EVICTED, "evicted", "evicted from the queue", "evicted",
        ran=False, at_arrival=False, simulated=True, always_shown=False, error_code="evicted",
        description="Pushed out of a full queue by a more urgent arrival and never started (Evicted).",
        logged=True,
    ),
    Outcome(
        Status.RATE_LIMITED, "rate_limited", "rate limited at once", "rate limited",
        ran=False, at_arrival=True, simulated=True, always_shown=False, error_code="rate_limited",
        description="Refused at arrival: its rate cost could not be paid in time (RateLimited).",
        logged=True,
    ),
    Outcome(
        Status.INFEASIBLE, "infeasible", "refused as infeasible", "infeasible",
        ran=False, at_arrival=True, simulated=True, always_shown=False, error_code="infeasible",
        description="Refused at arrival: by the recent pace it could not start in time (Infeasible).",
        logged=True,
    ),
    Outcome(
        Status.CANCELLED, "cancelled", "cancelled while waiting", "cancelled",
        ran=False, at_arrival=False, simulated=False, always_shown=False, error_code=None,
        description="Its caller gave up while it waited, or before it used the slot it was handed.",
    ),
    Outcome(
        Status.DISCONNECTED, "disconnected", "disconnected while waiting", "disconnected",
        ran=False, at_arrival=False, simulated=False, always_shown=False, error_code=None,
        description="Its client went away while it waited (an HTTP client that hung up): it never started.",
    ),
)  # fmt: skip

#: Each outcome by its status.
BY_STATUS: dict[Status, Outcome] = {outcome.status: outcome for outcome in OUTCOMES}
#: Each outcome by its name.
BY_NAME: dict[str, Outcome] = {outcome.name: outcome for outcome in OUTCOMES}
#: The outcomes of requests that held a slot.
RAN: tuple[Outcome, ...] = tuple(outcome for outcome in OUTCOMES if outcome.ran)
#: The outcomes of requests that never held one.
NEVER_RAN: tuple[Outcome, ...] = tuple(outcome for outcome in OUTCOMES if not outcome.ran)
#: The outcomes a simulation produces, in the order its summaries list them.
SIMULATED: tuple[Outcome, ...] = tuple(outcome for outcome in OUTCOMES if outcome.simulated)
