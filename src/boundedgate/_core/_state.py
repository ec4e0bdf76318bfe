"""The decision core: who runs, who waits, who is refused, who expires. No I/O, no clock.

Rule 1: everything that decides a request's fate lives here. The asyncio driver and the simulator
both feed events into a :class:`GateState` and act on what it answers, so the simulator predicts
exactly what production does.

Rule 2: this module never asks anything. It imports no event loop, no clock and no threads; every
method is told ``now`` (seconds on the caller's clock) and returns the other tickets whose status
it changed, for the caller to wake.

Theory of operation
===================

State is a count of running tickets, the waiting room (a :class:`WaitQueue`: one FIFO lane per
priority class, with a bounded share of queue-jumping), and a min-heap of the queued deadlines.
Four events change it:

``arrive(t, now)``
    A ticket whose deadline has passed is refused before it is counted. Otherwise it starts at once
    if a slot is free (and then, by the invariant below, nobody is queued: no barging); else it
    joins the queue if there is room; else, if a less urgent ticket waits, the newest of the least
    urgent class is evicted to make room; else it is rejected. Queued tickets that are due expire
    first, so a place whose deadline is ``now`` is free for the newcomer.

``release(t, now, failed)``
    A running ticket ends: ``FAILED`` if it raised, else ``LATE`` if ``now >= deadline``, else
    ``COMPLETED``. The freed slot goes straight to the next queued ticket (direct hand-off: the
    oldest, or a more urgent one within the jump share), after due tickets have expired: a ticket
    whose deadline is ``now`` never starts.

``advance(now)``
    The clock reached ``now`` (the caller asks :meth:`GateState.next_wakeup` when to call this):
    every queued ticket with ``deadline <= now`` leaves the queue as ``EXPIRED``. Expiry frees
    queue places, never slots, so nobody starts.

``cancel(t, now)``
    The caller gave up before it began. A queued ticket leaves the queue. A ticket that was handed a
    slot it never used gives the slot back, uncounted as admitted, and the slot passes on.

Same-instant order follows the seed simulator: expiries, then completions (each handing its slot to
the old queue), then new arrivals, in the order the caller feeds them.

Removal from the middle of the queue and the heap is lazy: a ticket that leaves is only marked, and
skipped when it reaches the front. Both are rebuilt when dead entries outnumber live ones, so every
operation is O(log n) amortised and memory stays proportional to the live queue.

Invariants (checked by :meth:`GateState.check` in the tests after every step)::

    0 <= running <= max_running
    0 <= waiting <= max_waiting
    waiting > 0 implies running == max_running
"""

from __future__ import annotations

import heapq
import math
import sys
from collections.abc import Sequence

from ._queue import WaitQueue
from ._settings import check_max_running, check_max_waiting
from ._stats import GateStatistics
from ._ticket import Status, Ticket

__all__ = ("GateState",)

QUEUED = Status.QUEUED
RUNNING = Status.RUNNING
REJECTED = Status.REJECTED
EXPIRED = Status.EXPIRED
CANCELLED = Status.CANCELLED
COMPLETED = Status.COMPLETED
LATE = Status.LATE
FAILED = Status.FAILED
EVICTED = Status.EVICTED

_NOBODY: tuple[Ticket, ...] = ()

#: Weight of the latest run in the moving average behind ``retry_after``.
RECENT_RUN_WEIGHT = 0.2

#: Dead entries tolerated in the queue and the heap beyond twice the live ones.
_SLACK = 32


class GateState:
    """The counts, queue and deadlines of one gate, and the rules that change them."""

    __slots__ = (
        "_deadlines",
        "_queue",
        "_queue_limit",
        "admitted",
        "cancelled",
        "completed",
        "end_to_end_seconds_max",
        "end_to_end_seconds_total",
        "evicted",
        "expired",
        "failed",
        "late",
        "max_running",
        "max_waiting",
        "peak_running",
        "peak_waiting",
        "queue_seconds_max",
        "queue_seconds_total",
        "recent_run_seconds",
        "rejected",
        "run_seconds_max",
        "run_seconds_total",
        "running",
        "waiting",
    )

    def __init__(
        self,
        max_running: int,
        max_waiting: int | None,
        priorities: int = 1,
        jump_share: float = 0.2,
    ) -> None:
        self.max_running = check_max_running(max_running)
        self.max_waiting = check_max_waiting(max_waiting)
        self._queue_limit = sys.maxsize if self.max_waiting is None else self.max_waiting
        self._queue = WaitQueue(priorities, jump_share)
        # min-heap of (deadline, ticket) for queued tickets with a deadline; lazy like the queue.
        self._deadlines: list[tuple[float, Ticket]] = []
        self.running = 0
        self.waiting = 0
        self.peak_running = 0
        self.peak_waiting = 0
        self.admitted = 0
        self.rejected = 0
        self.expired = 0
        self.cancelled = 0
        self.completed = 0
        self.late = 0
        self.failed = 0
        self.evicted = 0
        self.queue_seconds_total = 0.0
        self.queue_seconds_max = 0.0
        self.run_seconds_total = 0.0
        self.run_seconds_max = 0.0
        self.end_to_end_seconds_total = 0.0
        self.end_to_end_seconds_max = 0.0
        # Exponentially weighted mean of recent run times (None before the first run ends).
        self.recent_run_seconds: float | None = None

    # -- events -----------------------------------------------------------------------------

    def arrive(self, ticket: Ticket, now: float, wait: bool = True) -> Sequence[Ticket]:
        """A new ticket arrives at ``now``; its status says what became of it.

        ``RUNNING`` (it starts at once), ``QUEUED``, ``REJECTED``, or ``EXPIRED`` if its deadline
        had already passed (then nothing is counted). With ``wait=False`` a ticket that cannot
        start at once is rejected instead of queued (and evicts nobody). Returns the queued
        tickets that expired as the clock reached ``now``, and the one it evicted, if any.
        """
        ticket.arrival = now
        if ticket.deadline <= now:
            ticket.status = EXPIRED
            ticket.ended = now
            return _NOBODY
        if self.running < self.max_running:
            # A free slot means nobody waits (invariant), so starting now barges past no one.
            ticket.status = RUNNING
            ticket.started = now
            self.running = running = self.running + 1
            self.admitted += 1
            if running > self.peak_running:
                self.peak_running = running
            return _NOBODY
        deadlines = self._deadlines
        woken: Sequence[Ticket] = self.advance(now) if deadlines and deadlines[0][0] <= now else _NOBODY
        if not wait:
            pass
        elif self.waiting < self._queue_limit:
            self._enqueue(ticket)
            return woken
        elif self._queue.classes > 1 and (victim := self._queue.evict_for(ticket.priority)) is not None:
            victim.status = EVICTED
            self._leave_queue(victim, now)
            self.evicted += 1
            self._enqueue(ticket)
            return [*woken, victim]
        ticket.status = REJECTED
        ticket.ended = now
        self.rejected += 1
        return woken

    def release(self, ticket: Ticket, now: float, failed: bool = False) -> Sequence[Ticket]:
        """A running ticket ends at ``now``; returns the queued tickets that started or expired.

        Its outcome is ``FAILED`` if ``failed``, else ``LATE`` at or after its deadline, else
        ``COMPLETED``. Releasing a ticket that is not running does nothing.
        """
        if ticket.status is not RUNNING:
            return _NOBODY
        if failed:
            ticket.status = FAILED
            self.failed += 1
        elif now >= ticket.deadline:
            ticket.status = LATE
            self.late += 1
        else:
            ticket.status = COMPLETED
            self.completed += 1
        ticket.ended = now
        self.running -= 1
        ran = now - ticket.started  # type: ignore[operator]
        self.run_seconds_total += ran
        if ran > self.run_seconds_max:
            self.run_seconds_max = ran
        recent = self.recent_run_seconds
        self.recent_run_seconds = ran if recent is None else recent + RECENT_RUN_WEIGHT * (ran - recent)
        total = now - ticket.arrival  # type: ignore[operator]
        self.end_to_end_seconds_total += total
        if total > self.end_to_end_seconds_max:
            self.end_to_end_seconds_max = total
        return self._hand_off(now) if self.waiting else _NOBODY

    def advance(self, now: float) -> list[Ticket]:
        """The clock reached ``now``: queued tickets with ``deadline <= now`` expire; returns them."""
        expired: list[Ticket] = []
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            ticket = heapq.heappop(deadlines)[1]
            if ticket.status is QUEUED:
                ticket.status = EXPIRED
                self._leave_queue(ticket, now)
                self.expired += 1
                expired.append(ticket)
        if expired:
            self._compact()
        return expired

    def cancel(self, ticket: Ticket, now: float) -> Sequence[Ticket]:
        """The caller of ``ticket`` gave up before it began; returns the tickets that started.

        A queued ticket leaves the queue. A ticket that was handed a slot it has not used gives it
        back (it no longer counts as admitted) and the slot passes to the next in line. Any other
        ticket is left as it is.
        """
        status = ticket.status
        if status is QUEUED:
            ticket.status = CANCELLED
            self._leave_queue(ticket, now)
            self.cancelled += 1
            self._compact()
            return _NOBODY
        if status is RUNNING:
            ticket.status = CANCELLED
            ticket.started = None  # it never used the slot: it never started
            ticket.ended = now
            self.running -= 1
            self.admitted -= 1
            self.cancelled += 1
            return self._hand_off(now) if self.waiting else _NOBODY
        return _NOBODY

    # -- queries ----------------------------------------------------------------------------

    @property
    def priorities(self) -> int:
        """Number of priority classes."""
        return self._queue.classes

    def next_wakeup(self) -> float:
        """When :meth:`advance` must next be called: the earliest queued deadline (``inf``: never)."""
        deadlines = self._deadlines
        while deadlines and deadlines[0][1].status is not QUEUED:
            heapq.heappop(deadlines)
        return deadlines[0][0] if deadlines else math.inf

    def snapshot(self, name: str) -> GateStatistics:
        """An immutable copy of the counters."""
        return GateStatistics(
            name=name,
            max_running=self.max_running,
            max_waiting=self.max_waiting,
            running=self.running,
            waiting=self.waiting,
            peak_running=self.peak_running,
            peak_waiting=self.peak_waiting,
            admitted=self.admitted,
            rejected=self.rejected,
            expired=self.expired,
            cancelled=self.cancelled,
            completed=self.completed,
            late=self.late,
            failed=self.failed,
            evicted=self.evicted,
            queue_seconds_total=self.queue_seconds_total,
            queue_seconds_max=self.queue_seconds_max,
            run_seconds_total=self.run_seconds_total,
            run_seconds_max=self.run_seconds_max,
            end_to_end_seconds_total=self.end_to_end_seconds_total,
            end_to_end_seconds_max=self.end_to_end_seconds_max,
        )

    def check(self) -> None:
        """Assert the invariants (for tests; costs O(queue))."""
        assert 0 <= self.running <= self.max_running, (self.running, self.max_running)
        assert 0 <= self.waiting <= self._queue_limit, (self.waiting, self.max_waiting)
        assert not self.waiting or self.running == self.max_running, (self.running, self.waiting)
        live = list(self._queue)
        assert len(live) == self.waiting, (len(live), self.waiting)
        assert len(set(map(id, live))) == len(live)
        assert all(t.status is QUEUED for t in live)

    # -- internals --------------------------------------------------------------------------

    def _hand_off(self, now: float) -> list[Ticket]:
        # Due tickets expire before anyone starts: a deadline of `now` loses to a slot freed at `now`.
        deadlines = self._deadlines
        woken = self.advance(now) if deadlines and deadlines[0][0] <= now else []
        queue = self._queue
        while self.waiting and self.running < self.max_running:
            ticket = queue.take()
            self.waiting -= 1
            waited = now - ticket.arrival  # type: ignore[operator]
            self.queue_seconds_total += waited
            if waited > self.queue_seconds_max:
                self.queue_seconds_max = waited
            ticket.status = RUNNING
            ticket.started = now
            self.running = running = self.running + 1
            self.admitted += 1
            if running > self.peak_running:
                self.peak_running = running
            woken.append(ticket)
        if len(deadlines) > 2 * self.waiting + _SLACK:
            self._compact()
        return woken

    def _enqueue(self, ticket: Ticket) -> None:
        ticket.status = QUEUED
        self._queue.push(ticket)
        if ticket.deadline != math.inf:
            heapq.heappush(self._deadlines, (ticket.deadline, ticket))
        self.waiting = waiting = self.waiting + 1
        if waiting > self.peak_waiting:
            self.peak_waiting = waiting

    def _leave_queue(self, ticket: Ticket, now: float) -> None:
        ticket.ended = now
        self.waiting -= 1
        self._record_wait(ticket, now)

    def _record_wait(self, ticket: Ticket, now: float) -> None:
        waited = now - ticket.arrival  # type: ignore[operator]
        self.queue_seconds_total += waited
        if waited > self.queue_seconds_max:
            self.queue_seconds_max = waited

    def _compact(self) -> None:
        # In place, so that callers holding the queue or the heap in a local stay in step.
        live = 2 * self.waiting + _SLACK
        self._queue.compact(live)
        deadlines = self._deadlines
        if len(deadlines) > live:
            deadlines[:] = [e for e in deadlines if e[1].status is QUEUED]
            heapq.heapify(deadlines)
