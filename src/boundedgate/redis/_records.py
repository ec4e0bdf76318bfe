"""The :class:`~boundedgate.RequestRecord` of a request of this process through a cluster gate.

A :class:`~boundedgate.redis.RedisGate`'s observers get the same records as an in-process gate's,
made from the permit's own times on the caller's loop clock: one per request that this process
counts in ``stats()`` under one of :data:`~boundedgate.OUTCOMES`, as it reaches that outcome. A
refusal with ``GateUnavailable`` is no outcome of theirs (``stats().unavailable`` counts it, the
``boundedgate`` logger writes it), so it gives no record; nor does a request admitted through the
``fallback`` gate, whose own observers see it. A record carries the cost the request declared,
its cost as settled by the time it ended, and, for a ``RateLimited`` refusal, the name of the
limit that refused it and the exact ``retry_after`` the script computed. ``limited_by`` stays None
for a request that waited for its tokens: the cluster's reply says when the head's tokens come,
not which limit held them back.
"""

from __future__ import annotations

from typing import Protocol

from .._core import BY_STATUS, RequestRecord, Status
from .._errors import _retry_after

__all__ = ("Ended", "record_of")


class Ended(Protocol):
    """What a record is made of: a :class:`~boundedgate.redis.RedisPermit` that just ended."""

    arrival: float | None
    started: float | None
    ended: float | None
    deadline: float
    cost: float  # as settled (its declared cost if never settled)
    _declared: float
    _limited_by: str | None  # the rate limit that refused it (None: none did)
    _refused_after: float | None  # that refusal's (or an infeasible one's) retry_after

    @property
    def _first_item(self) -> float | None: ...


def record_of(
    permit: Ended,
    gate: str,
    status: Status,
    queued: bool,
    depth: int | None,
    recent_run: float | None,
    max_running: int,
) -> RequestRecord:
    """The record of ``permit``, which just ended as ``status`` in gate ``gate``.

    Args:
        permit: The permit.
        gate: The gate's name.
        status: How it ended.
        queued: It waited in the cluster's queue (its decision was ``queue``).
        depth: The cluster's queue ahead of it at arrival, when Redis said (None otherwise).
        recent_run: The gate's recent run time, and
        max_running: its C: what a refusal's ``retry_after`` is estimated from, as its error's is.
    """
    outcome = BY_STATUS[status]
    arrival, started, ended = permit.arrival, permit.started, permit.ended
    assert arrival is not None  # it arrived,
    assert ended is not None  # and it ended
    if outcome.at_arrival:
        decision, waited = "reject", 0.0
    elif queued:
        decision, waited = "queue", (ended if started is None else started) - arrival
    else:
        decision, waited = "allow", 0.0
    first = permit._first_item
    refused = outcome.error_code is not None and not outcome.ran
    waiting = depth if depth is not None else 0
    retry_after = permit._refused_after  # by a rate limit or as infeasible: the script's retry_after
    if retry_after is None and refused:
        retry_after = _retry_after(recent_run, max_running, waiting, 0.0)
    return RequestRecord(
        gate=gate,
        key=None,
        priority=0,
        outcome=outcome,
        decision=decision,
        arrival=arrival,
        started=started,
        ended=ended,
        deadline=permit.deadline,
        waited=waited,
        ran=None if started is None else ended - started,
        end_to_end=ended - arrival,
        first_chunk=None if first is None or started is None else first - started,
        queue_depth=0 if decision == "allow" else depth,
        cost=permit._declared,
        settled=permit.cost,
        limited_by=permit._limited_by,
        retry_after=retry_after,
        borrowed_burst=False,
    )
