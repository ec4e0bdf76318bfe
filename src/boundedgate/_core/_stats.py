"""The gate's statistics: an immutable snapshot, every field documented."""

from __future__ import annotations

from dataclasses import dataclass

from ._outcomes import NEVER_RAN, RAN

__all__ = ("GateStatistics",)


def _mean(total: float, count: int) -> float | None:
    return total / count if count else None


@dataclass(frozen=True, slots=True)
class GateStatistics:
    """A snapshot of a gate's counters, taken by :meth:`BoundedGate.stats`.

    Every request that arrives is counted in exactly one outcome once it ends: ``rejected``,
    ``rate_limited``, ``infeasible``, ``expired``, ``cancelled``, ``disconnected`` or
    ``evicted`` if it never ran; ``completed``, ``late``, ``cut``, ``failed``, ``aborted`` or
    ``leaked`` if it did (the outcomes are listed, with what each means, in ``boundedgate.OUTCOMES``).
    While it is not yet ended it is counted in ``waiting`` or ``running``. Requests refused before
    they were counted (already cancelled, or already past their deadline, on arrival) appear
    nowhere. Times are in seconds on the gate's clock (the event loop's).
    """

    #: The gate's name.
    name: str
    #: Running slots (C); None when running is not limited (a pure rate limiter).
    max_running: int | None
    #: Queue places (Q); None when the queue is unbounded.
    max_waiting: int | None
    #: Requests holding a slot now.
    running: int
    #: Requests in the queue now.
    waiting: int
    #: The most requests ever running at once.
    peak_running: int
    #: The most requests ever waiting at once.
    peak_waiting: int
    #: Requests that got a slot (at once or from the queue), ended or not.
    admitted: int
    #: Refused at arrival with ``QueueFull``.
    rejected: int
    #: Left the queue at their deadline with ``QueueExpired``, never started.
    expired: int
    #: Gave up while waiting (cancelled by their caller).
    cancelled: int
    #: Ran and finished before their deadline.
    completed: int
    #: Ran and finished at or after their deadline (``Late``).
    late: int
    #: Ran and ended with an exception.
    failed: int
    #: Ran, and was never released by its caller: the garbage collector gave the slot back (a
    #: permit or stream that was dropped without ``release()``, ``close()`` or ``async with``).
    leaked: int
    #: Ran, and their client went away before the answer was complete (the body was cancelled).
    aborted: int
    #: Their client went away while they waited (an HTTP client that hung up); never started.
    disconnected: int
    #: Pushed out of a full queue by a more urgent arrival (``Evicted``), never started.
    evicted: int
    #: Refused at arrival because their rate cost could not be paid in time (``RateLimited``).
    rate_limited: int
    #: Time spent waiting, summed over requests that started or left the queue.
    queue_seconds_total: float
    #: The longest such wait.
    queue_seconds_max: float
    #: Time holding a slot, summed over requests that finished (completed, late, failed).
    run_seconds_total: float
    #: The longest such run.
    run_seconds_max: float
    #: Arrival to end, summed over requests that finished: what their callers waited in all.
    end_to_end_seconds_total: float
    #: The longest such end-to-end time.
    end_to_end_seconds_max: float
    #: The balance of each rate limit's bucket, in the order the gate was given them.
    tokens: tuple[float, ...] = ()
    #: Refused at arrival by deadline-feasible admission (``Infeasible``): by the recent pace they
    #: could not have started before their deadline or queue budget.
    infeasible: int = 0
    #: How many times ``set_limits()`` changed C or Q (by hand or by an adaptive controller).
    limit_changes: int = 0
    #: How many pauses of new starts began or were extended (a provider's rate-limit reset).
    pauses: int = 0
    #: Until when new starts are paused (None: not paused), on the gate's clock.
    paused_until: float | None = None
    #: Ran, and were cut off at their deadline (``on_deadline="cut"``: ``DeadlineCut``).
    cut: int = 0

    @property
    def arrived(self) -> int:
        """Requests counted at arrival: every outcome, plus those still waiting or running."""
        never_ran: int = sum(getattr(self, outcome.name) for outcome in NEVER_RAN)
        return never_ran + self.admitted + self.waiting

    @property
    def finished(self) -> int:
        """Requests that ran and ended: ``completed + late + cut + failed + aborted + leaked``."""
        ran: int = sum(getattr(self, outcome.name) for outcome in RAN)
        return ran

    @property
    def mean_queue_seconds(self) -> float | None:
        """Mean wait of requests that left the queue or never joined it (None before any)."""
        left: int = sum(getattr(self, o.name) for o in NEVER_RAN if not o.at_arrival)
        return _mean(self.queue_seconds_total, self.admitted + left)

    @property
    def mean_run_seconds(self) -> float | None:
        """Mean run time of finished requests (None before any finished)."""
        return _mean(self.run_seconds_total, self.finished)

    @property
    def mean_end_to_end_seconds(self) -> float | None:
        """Mean arrival-to-end time of finished requests (None before any finished)."""
        return _mean(self.end_to_end_seconds_total, self.finished)
