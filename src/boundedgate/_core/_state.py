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
priority class, with a bounded share of queue-jumping; made for the first waiter, so a gate that
never queues, as most of a keyed gate's keys, never makes one), a min-heap of the queued deadlines, and
optionally token buckets (:class:`TokenBucket`): a request starts only when it holds a slot *and*
its rate cost is paid, all buckets at once or none. These events change it:

``arrive(t, now)``
    A ticket whose deadline has passed is refused before it is counted. Otherwise it starts at once
    if a slot is free, nobody is queued (no barging) and its tokens are there; else, if its tokens
    could not come before its queue deadline behind those the tickets queued ahead of it take
    first (see *Tokens behind the queue*), it is refused as ``RATE_LIMITED``; else it joins the
    queue if there is room; else, if a less urgent ticket waits, the newest of the least urgent
    class is evicted to make room; else it is rejected. Queued tickets that are due expire first,
    so a place whose deadline is ``now`` is free.

``release(t, now, ending)``
    A running ticket ends: as ``ending`` says when it did not end normally (``FAILED``: it
    raised; ``ABORTED``: its client went away; ``LEAKED``: its caller never released it), else
    ``LATE`` if ``now >= deadline``, else ``COMPLETED``. Only these two normal endings count in
    the recent pace (``recent_run_seconds``): a call that failed fast says nothing of it. The
    freed slot goes straight to the next queued ticket (direct hand-off: the oldest, or a more
    urgent one within the jump share), after due tickets have expired: a ticket whose deadline
    is ``now`` never starts. A next ticket whose tokens are not there yet keeps
    everyone behind it waiting (FIFO holds for rate limits too: a large request at the head is
    not starved by small ones behind it).

``advance(now)``
    The clock reached ``now`` (the caller asks :meth:`GateState.next_wakeup` when to call this):
    every queued ticket whose queue deadline is reached leaves the queue as ``EXPIRED``, then queued
    tickets whose tokens have accrued start, while slots are free.

``cancel(t, now)``
    The caller gave up before it began. A queued ticket leaves the queue. A ticket that was handed a
    slot it never used gives the slot and its tokens back, uncounted as admitted, and the slot
    passes on.

``settle(t, cost, now)``
    An admitted ticket's real cost is known: the difference to its declared cost is charged (never
    below a bucket's floor) or refunded (never above its burst) on the buckets counted in tokens.

A ticket's *queue deadline* is its deadline, or ``arrival + max_wait`` if that comes first: a
ticket with a queue budget (``max_wait``) leaves the queue when either passes, but once it runs
only its deadline decides whether it is late. Without ``max_wait`` the two are the same.

Same-instant order follows the seed simulator: expiries, then completions (each handing its slot to
the old queue), then new arrivals, in the order the caller feeds them.

Removal from the middle of the queue and the heap is lazy: a ticket that leaves is only marked, and
skipped when it reaches the front. Both are rebuilt when dead entries outnumber live ones, so every
operation is O(log n) amortised and memory stays proportional to the live queue.

Tokens behind the queue
=======================

Waiting for tokens is FIFO, so an arrival's tokens come only after every bucket has supplied
what the tickets queued ahead of it take: their costs (one each for a limit counted in
requests), then its own. A bucket supplies its balance at ``now`` (at most its burst) and then
its rate, so the earliest it can start is, over the buckets,
``max(empty, now - window) + (ahead + need) * period`` (:meth:`GateState.tokens_ready_at`). At
or after its queue deadline it is refused as ``RATE_LIMITED`` at once, with that moment as its
``retry_after``, rather than queued to expire. Ahead of it are the queued tickets of its class
and of the more urgent ones; an older one of a less urgent class may yield it its turn (a jump,
an eviction) and is not counted.

It is a bound, never an overestimate, if nothing is refunded and none of those ahead leaves the
queue unstarted (cancelled, or expired waiting for a slot or a pause): they all take their costs
before it can start, and no bucket supplies more than its balance and its rate. With one class
and one bucket, while slots are free, it is exact: a queued ticket starts then, so none is
queued that cannot start in time. Slots are not counted (a ticket may also wait for one: that
is what deadline-feasible admission predicts), and neither is a settle yet to come.

The sums are kept as tickets join and leave the queue, whichever way they leave (started,
expired, cancelled, evicted): with one class the sum of the queued costs (the count is
``waiting``), with several the count and the sum per class in the queue, so an arrival costs
O(1), or O(classes in use).

Limits that move
================

``set_limits(now, max_running=..., max_waiting=...)`` changes C and Q while requests run and
wait. Raising C starts the oldest waiters at once (the same hand-off as a release); lowering it
interrupts nobody: the running excess drains, and nothing starts until ``running`` is below the
new C. Lowering Q evicts nobody already queued unless asked (``evict=True``: the newest leave as
``EVICTED``); the excess leaves the queue as it normally does, and no arrival queues until it has.
``pause(until, now)`` stops new starts until ``until`` (a provider's rate-limit reset) and keeps C:
arrivals still queue up to Q, queued tickets still expire, and at ``until`` the oldest start.
While paused, ``max_running`` (the slots usable now) is 0 and ``limit`` keeps the configured C.

With ``feasible`` set, an arrival that would queue is refused as ``INFEASIBLE`` when the recent
pace says it cannot start before its queue deadline, or cannot finish a long run
(``FEASIBLE_RUNS`` recent runs after its start) before its deadline. Its start is predicted as
``max(now, resume) + n * recent_run / C``, where ``n`` counts the completions it needs (the
running excess over C, the queue ahead, itself).

With ``by_deadline`` set (before any ticket waits), the waiters of a class start in deadline order,
earliest first, rather than in arrival order, and the queue ahead of an arrival (for feasible
admission and the refusals' estimates) is the waiters due no later than it. Feasible admission
then also refuses an arrival that, starting ahead of the waiters due later, would leave one of
them that now fits without room for its long run: they were admitted on that promise.

Invariants (checked by :meth:`GateState.check`, which the tests call after every step)::

    0 <= running <= max_running, unless C was lowered or paused (the excess drains)
    0 <= waiting <= max_waiting, unless Q was lowered below the queue (it drains)
    max_running is the configured C, or 0 while paused
    waiting > 0 implies running >= max_running, or the next ticket's tokens are not there yet
    the queue holds `waiting` distinct live (QUEUED) tickets
    the queued sums (per class with several) are the counts and costs of the queued tickets
    each bucket's balance lies between its floor and its burst
"""

from __future__ import annotations

import heapq
import math
import sys
from collections.abc import Callable, Sequence
from types import EllipsisType
from typing import Final, TypeAlias

from ._bucket import RateLimit, TokenBucket
from ._native import FloatArg, IntArg, mypyc_attr
from ._outcomes import OUTCOMES
from ._queue import WaitQueue
from ._settings import (
    check_cost,
    check_jump_share,
    check_max_running,
    check_max_waiting,
    check_priorities,
    shown,
)
from ._stats import GateStatistics
from ._ticket import Status, Ticket, arrival_of, durations_of, note

__all__ = ("GateState",)

QUEUED: Final[Status] = Status.QUEUED
RUNNING: Final[Status] = Status.RUNNING
REJECTED: Final[Status] = Status.REJECTED
EXPIRED: Final[Status] = Status.EXPIRED
CANCELLED: Final[Status] = Status.CANCELLED
COMPLETED: Final[Status] = Status.COMPLETED
LATE: Final[Status] = Status.LATE
FAILED: Final[Status] = Status.FAILED
CUT: Final[Status] = Status.CUT
LEAKED: Final[Status] = Status.LEAKED
ABORTED: Final[Status] = Status.ABORTED
DISCONNECTED: Final[Status] = Status.DISCONNECTED
EVICTED: Final[Status] = Status.EVICTED
RATE_LIMITED: Final[Status] = Status.RATE_LIMITED
INFEASIBLE: Final[Status] = Status.INFEASIBLE

_NOBODY: Final[tuple[Ticket, ...]] = ()

#: What an event hands back so far: the queued tickets that left the queue (``_NOBODY`` if none).
_Woken: TypeAlias = list[Ticket] | tuple[Ticket, ...]

#: The counters of the outcomes, one attribute each, named as in :data:`OUTCOMES`.
OUTCOME_NAMES = tuple(outcome.name for outcome in OUTCOMES)

#: The final statuses the ``reporter`` hears of: refusals, and endings nobody asked for.
LOGGED: Final = frozenset(outcome.status for outcome in OUTCOMES if outcome.logged)

#: What the core calls with a ticket that reached its outcome (see ``GateState.observer``).
Hook = Callable[[Ticket], None]

#: Weight of the latest run in the moving average behind ``retry_after`` (and the pace of
#: feasible admission), per slot: a gate with C slots weighs it ``RECENT_RUN_WEIGHT / C``.
RECENT_RUN_WEIGHT: Final = 0.2

#: Feasible admission refuses an arrival that could not finish a run this many times the recent
#: mean after its predicted start. Calls to an LLM vary with their answers' lengths, which nobody
#: knows at arrival: judged by one mean run, 27 % of the calls admitted on the bursty conversation
#: trace, with a provider tighter than C, started in time and were cut off at their deadlines
#: (docs/adaptive.md).
FEASIBLE_RUNS: Final = 2.0

#: Dead entries tolerated in the queue and the heap beyond twice the live ones.
_SLACK: Final = 32

#: The C (or Q) that stands for no limit.
_UNLIMITED: Final = sys.maxsize

#: The waiting room of every state nobody has waited in yet, its queue and its heap of deadlines:
#: empty, and never pushed to (``GateState._enqueue`` makes a state its own for its first waiter).
_NO_WAITERS: Final = WaitQueue()
_NO_DEADLINES: Final[list[tuple[float, Ticket]]] = []

# The heap's operations as C statics: compiled, ``heapq.heappush`` is a module attribute lookup at
# every queued arrival.
_heappush: Final = heapq.heappush
_heappop: Final = heapq.heappop


def pace_weight(limit: int) -> float:
    """The weight of the newest run in the recent pace of a gate with ``limit`` slots.

    ``RECENT_RUN_WEIGHT / C``: a mean over about five rounds of C runs, the same span of time
    (five mean run times at full load) whatever C, so one long run does not move the pace of a
    wide gate as it would a mean over its last five runs.
    """
    return RECENT_RUN_WEIGHT if limit == _UNLIMITED else RECENT_RUN_WEIGHT / limit


def _ready_behind(bucket: TokenBucket, cost: float, tickets: float, tokens: float, now: float) -> float:
    # When `bucket` has supplied what `tickets` queued ahead, costing `tokens`, take, then `cost`.
    ahead = tickets if bucket.per_request else tokens
    return bucket.supplied_at(ahead + bucket.need(cost), now)


def _expect(holds: bool, broken: str, *values: object) -> None:
    # GateState.check's assertion: one that `python -O` keeps.
    if not holds:
        raise AssertionError(f"{broken}: {values!r}" if values else broken)


def _fits(ticket: Ticket, start: float, recent_run: float | None) -> bool:
    # Feasible if it starts then: before its queue deadline, and (once a run has ended, so that
    # there is a pace) with room for a long run, FEASIBLE_RUNS recent runs, before its deadline.
    if start >= queue_deadline(ticket):
        return False
    return recent_run is None or start + FEASIBLE_RUNS * recent_run < ticket.deadline


def queue_deadline(ticket: Ticket) -> float:
    """When an arrived ticket leaves the queue unstarted: ``min(deadline, arrival + max_wait)``."""
    return min(ticket.deadline, arrival_of(ticket) + ticket.max_wait)


def ended_as(ending: Status | None, now: float, deadline: float) -> Status:
    """The outcome of a running request that ends at ``now``: the one rule every gate's release follows.

    ``ending`` says how a request that did not end normally ended (``CUT``, ``FAILED``,
    ``ABORTED`` or ``LEAKED``), and is its outcome; without one it is ``LATE`` at or after ``deadline``, else
    ``COMPLETED``.

    Raises:
        ValueError: ``ending`` is another status.
    """
    if ending is None:
        return LATE if now >= deadline else COMPLETED
    if ending is FAILED or ending is ABORTED or ending is LEAKED or ending is CUT:
        return ending
    raise ValueError(f"a running request cannot end as {ending.value}")


@mypyc_attr(allow_interpreted_subclasses=True)  # the keyed gate's per-key state, the tests' checks
class GateState:
    """The counts, queue, deadlines and buckets of one gate, and the rules that change them."""

    __slots__ = (
        "_buckets",
        "_class_queued",
        "_deadlines",
        "_jump_share",
        "_pace_weight",
        "_queue",
        "_queue_limit",
        "_queued_cost",
        "aborted",
        "admitted",
        "by_deadline",
        "cancelled",
        "completed",
        "cut",
        "disconnected",
        "end_to_end_seconds_max",
        "end_to_end_seconds_total",
        "evicted",
        "expired",
        "failed",
        "feasible",
        "infeasible",
        "late",
        "leaked",
        "limit",
        "limit_changes",
        "max_running",
        "max_waiting",
        "observer",
        "paused_until",
        "pauses",
        "peak_running",
        "peak_waiting",
        "priorities",
        "queue_seconds_max",
        "queue_seconds_total",
        "rate_limited",
        "recent_run_seconds",
        "rejected",
        "reporter",
        "run_seconds_max",
        "run_seconds_total",
        "running",
        "waiting",
    )

    def __init__(
        self,
        max_running: IntArg | None,
        max_waiting: IntArg | None,
        priorities: IntArg = 1,
        jump_share: FloatArg = 0.2,
        rate_limits: Sequence[RateLimit] = (),
    ) -> None:
        running = None if max_running is None else check_max_running(max_running)
        waiting = check_max_waiting(max_waiting)
        classes = check_priorities(priorities)
        check_jump_share(jump_share)
        for limit in rate_limits:
            if not isinstance(limit, RateLimit):
                raise TypeError(f"rate_limits must hold RateLimit objects, got {shown(limit)}")
        self._init_checked(running, waiting, classes, jump_share, tuple(rate_limits))

    def _init_checked(
        self,
        max_running: int | None,
        max_waiting: int | None,
        priorities: int,
        jump_share: FloatArg,
        rate_limits: tuple[RateLimit, ...],
    ) -> None:
        # A fresh state with settings already checked as __init__ checks them: a keyed gate checks
        # its template once and makes each key's state from it (KeyState).
        #: Running slots (C); ``sys.maxsize`` stands for no limit (a pure rate limiter).
        self.max_running = _UNLIMITED if max_running is None else max_running
        #: The configured C (``max_running`` is 0 while paused; this keeps the C to resume with).
        self.limit = self.max_running
        self._pace_weight = pace_weight(self.limit)
        self.max_waiting = max_waiting
        self._queue_limit = _UNLIMITED if max_waiting is None else max_waiting
        # The waiting room is made for the first waiter (see _enqueue): an uncontended gate,
        # a keyed gate's key above all, never makes one.
        self._queue = _NO_WAITERS
        #: Number of priority classes (0 is the most urgent): fixed, as the queue's lanes are.
        self.priorities = priorities
        self._jump_share = jump_share
        # min-heap of (deadline, ticket) for queued tickets with a deadline; its removals are lazy
        # like the queue's.
        self._deadlines = _NO_DEADLINES
        self._buckets = tuple(TokenBucket(limit) for limit in rate_limits)
        # What the queued tickets will take from the buckets, kept with rate limits only (see
        # tokens_ready_at): with one class, the sum of their costs (their number is `waiting`);
        # with several, per class in the queue, [tickets, sum of their costs].
        self._queued_cost = 0.0
        several = bool(self._buckets) and priorities > 1
        self._class_queued: dict[int, list[float]] | None = {} if several else None
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
        self.cut = 0
        self.failed = 0
        self.leaked = 0
        self.aborted = 0
        self.disconnected = 0
        self.evicted = 0
        self.rate_limited = 0
        self.infeasible = 0
        #: Refuse at arrival what the recent pace says cannot start before its queue deadline.
        self.feasible = False
        #: Start the waiters of a class in deadline order, not arrival order (set before any waits).
        self.by_deadline = False
        #: How many times :meth:`set_limits` changed C or Q, and :meth:`pause` began or extended a pause.
        self.limit_changes = 0
        self.pauses = 0
        #: No ticket starts before this (``inf``: not paused).
        self.paused_until = math.inf
        self.queue_seconds_total = 0.0
        self.queue_seconds_max = 0.0
        self.run_seconds_total = 0.0
        self.run_seconds_max = 0.0
        self.end_to_end_seconds_total = 0.0
        self.end_to_end_seconds_max = 0.0
        # Exponentially weighted mean of recent completed and late runs, the newest weighing
        # pace_weight(C) (None before the first).
        self.recent_run_seconds: float | None = None
        #: Called with every ticket that reaches its outcome, within the event that ended it (a
        #: released ticket once its slot was handed on); None: nothing is called, nothing is kept.
        #: It must not call back into this state.
        #: Tickets refused before they were counted (a deadline already past) are not told.
        self.observer: Hook | None = None
        #: Called, before the observer, with every ticket whose outcome is ``logged`` in
        #: :data:`OUTCOMES` (the refusals, late, leaked); the asyncio driver logs them.
        self.reporter: Hook | None = None

    # -- events -----------------------------------------------------------------------------

    def arrive(self, ticket: Ticket, now: float, wait: bool = True) -> Sequence[Ticket]:
        """A new ticket arrives at ``now``; its status says what became of it.

        ``RUNNING`` (it starts at once), ``QUEUED``, ``REJECTED``, ``RATE_LIMITED``,
        ``INFEASIBLE``, or ``EXPIRED`` if its deadline had already passed (then nothing is counted). With
        ``wait=False`` a ticket that cannot start at once is refused instead of queued (and
        evicts nobody). Returns the queued tickets that left the queue as the clock reached
        ``now`` (expired, or started on accrued tokens), and the one it evicted, if any.
        """
        ticket.arrival = now
        if ticket.deadline <= now:
            return self._refuse_past(ticket, now)
        if not self._buckets:
            if self.running < self.max_running:
                # A free slot means nobody waits (invariant): starting now barges past no one.
                self._start(ticket, now)
                return _NOBODY
            woken: _Woken = _NOBODY
            if self._deadlines and self._deadlines[0][0] <= now:
                woken = self._expire(now)
        else:
            woken = self._advance(now) if self.waiting else _NOBODY  # bring the queue up to `now`
            if self.running < self.max_running and not self.waiting and self._affordable(ticket, now):
                self._start(ticket, now)
                return woken
        return self._wait_or_refuse(ticket, now, wait, woken)

    def _wait_or_refuse(self, ticket: Ticket, now: float, wait: bool, woken: _Woken) -> Sequence[Ticket]:
        # It cannot start at arrival: refused by rate, refused as infeasible, queued, or queued in
        # the place of a less urgent ticket, else rejected (without waiting: refused at once).
        if self.observer is not None:
            note(ticket, "depth", self.waiting)
        if not wait:
            return self._refuse_at_once(ticket, now, woken)
        if self._buckets and (due := self.tokens_ready_at(ticket, now)) >= queue_deadline(ticket):
            return self._refuse_by_rate(ticket, now, woken, due)
        if self.feasible and self._infeasible(ticket, now):
            return self._refuse_infeasible(ticket, now, woken)
        if self.waiting < self._queue_limit:
            return self._join_queue(ticket, now, woken)
        return self._evict_or_reject(ticket, now, woken)

    def release(self, ticket: Ticket, now: float, ending: Status | None = None) -> Sequence[Ticket]:
        """A running ticket ends at ``now``; returns the queued tickets that started or expired.

        ``ending`` says how a request that did not end normally ended, and is its outcome:
        ``FAILED`` (it raised), ``CUT`` (cut off at its deadline), ``ABORTED`` (its client went
        away while it ran) or ``LEAKED`` (its caller never released it: the garbage collector did).
        Without one the outcome is ``LATE`` at or after its deadline, else ``COMPLETED``.
        Releasing a ticket that is not running does nothing.

        Raises:
            ValueError: ``ending`` is another status (checked before anything changes).
        """
        if ticket.status is not RUNNING:
            return _NOBODY
        ran, total = durations_of(ticket, now)
        ticket.status = status = ended_as(ending, now, ticket.deadline)
        if status is COMPLETED:
            self.completed += 1
        elif status is LATE:
            self.late += 1
            self._report(ticket, now)
        elif status is FAILED:
            self.failed += 1
        elif status is CUT:
            self.cut += 1
            self._report(ticket, now)
        elif status is ABORTED:
            self.aborted += 1
        else:
            self.leaked += 1
            self._report(ticket, now)
        if ending is None:  # the pace counts normal endings only: a provider failing fast must not look fast
            recent = self.recent_run_seconds
            self.recent_run_seconds = ran if recent is None else recent + self._pace_weight * (ran - recent)
        ticket.ended = now
        self.running -= 1
        self.run_seconds_total += ran
        if ran > self.run_seconds_max:
            self.run_seconds_max = ran
        self.end_to_end_seconds_total += total
        if total > self.end_to_end_seconds_max:
            self.end_to_end_seconds_max = total
        if self.observer is not None:
            woken = self._hand_off(now) if self.waiting else _NOBODY
            self.observer(ticket)
            return woken
        return self._hand_off(now) if self.waiting else _NOBODY

    def advance(self, now: float) -> list[Ticket]:
        """The clock reached ``now``; returns the queued tickets that left the queue.

        Due queued tickets expire, then those whose tokens have accrued start while slots are free.
        """
        return self._advance(now)

    def _advance(self, now: float) -> list[Ticket]:
        # advance() itself is the caller's event; inside other events the core calls this instead.
        woken = self._expire(now)
        if self.paused_until <= now:
            self._resume(now, woken)
        if self._buckets and self.waiting:
            self._fill(now, woken)
        return woken

    def cancel(self, ticket: Ticket, now: float, ending: Status = CANCELLED) -> Sequence[Ticket]:
        """The caller of ``ticket`` gave up before it began; returns the tickets that started.

        A queued ticket leaves the queue. A ticket that was handed a slot it has not used gives it
        back, with its tokens (it no longer counts as admitted), and the slot passes to the next in
        line. Any other ticket is left as it is. The outcome is ``ending``: ``CANCELLED``, or
        ``DISCONNECTED`` when it was its client that went away (an HTTP client that hung up).

        Raises:
            ValueError: ``ending`` is another status (checked before anything changes).
        """
        if ending is not CANCELLED and ending is not DISCONNECTED:
            raise ValueError(f"a request that never ran cannot end as {ending.value}")
        status = ticket.status
        if status is QUEUED:
            ticket.status = ending
            self._leave_queue(ticket, now)
            self._count_cancel(ending)
            self._compact()
            self._ended(ticket)
            return _NOBODY
        if status is RUNNING:
            ticket.status = ending
            if self.observer is not None:
                note(ticket, "granted", ticket.started)  # its record says how it was admitted
            ticket.started = None  # it never used the slot: it never started
            ticket.ended = now
            self.running -= 1
            self.admitted -= 1
            self._count_cancel(ending)
            for bucket in self._buckets:
                bucket.give(bucket.need(ticket.cost), now)
            woken = self._hand_off(now) if self.waiting else _NOBODY
            self._ended(ticket)
            return woken
        return _NOBODY

    def settle(self, ticket: Ticket, cost: float, now: float) -> Sequence[Ticket]:
        """An admitted ticket's real cost is ``cost``: charge or refund the difference.

        Only buckets counted in tokens are touched; a charge never takes a balance below the
        bucket's floor, a refund never above its burst. Settling again adjusts from the last
        settled cost. Returns the queued tickets that a refund let start. A ticket that never
        started (or whose slot was given back unused) is left as it is.
        """
        if ticket.started is None:
            return _NOBODY
        extra = cost - ticket.cost
        if not extra:
            return _NOBODY
        if "declared" not in getattr(ticket, "_notes", ()):
            note(ticket, "declared", ticket.cost)
        ticket.cost = cost
        for bucket in self._buckets:
            if not bucket.per_request:
                if extra > 0:
                    bucket.charge(extra, now)
                else:
                    bucket.give(-extra, now)
        if extra < 0 and self.waiting:
            woken: list[Ticket] = []
            self._fill(now, woken)
            return woken
        return _NOBODY

    def set_limits(
        self,
        now: float,
        max_running: IntArg | EllipsisType | None = ...,
        max_waiting: IntArg | EllipsisType | None = ...,
        evict: bool = False,
    ) -> Sequence[Ticket]:
        """Change C and/or Q at ``now`` (``...``: unchanged); returns the tickets that left the queue.

        Raising C starts the oldest waiters at once, FIFO (after due tickets expire). Lowering it
        interrupts no running ticket: the excess drains, and no ticket starts until ``running``
        is below the new C. Lowering Q evicts nobody already queued, unless ``evict`` (then the
        newest waiters beyond Q leave as ``EVICTED``, oldest kept). While paused, the new C takes
        effect at the resume. Each call that changes a limit counts once in ``limit_changes``.

        Raises:
            TypeError, ValueError: A limit as :class:`GateState` refuses it (checked before
                anything changes).
        """
        running = self.limit
        if max_running is not ...:
            running = _UNLIMITED if max_running is None else check_max_running(max_running)
        waiting = self.max_waiting if max_waiting is ... else check_max_waiting(max_waiting)
        if running == self.limit and waiting == self.max_waiting:
            return _NOBODY
        self.limit_changes += 1
        self.limit = running
        self._pace_weight = pace_weight(running)
        self.max_waiting = waiting
        self._queue_limit = _UNLIMITED if waiting is None else waiting
        woken: list[Ticket] = []
        if evict:
            # The newest of the least urgent class first: the live queue read backwards.
            for victim in list(self._queue)[::-1][: max(0, self.waiting - self._queue_limit)]:
                victim.status = EVICTED
                self._leave_queue(victim, now)
                self.evicted += 1
                woken.append(victim)
            self._compact()
        if self.paused_until == math.inf:
            self.max_running = running
            woken += self._hand_off(now) if self.waiting else ()
        if self.reporter is not None or self.observer is not None:
            for ticket in woken:
                if ticket.status is EVICTED:
                    self._ended(ticket)
        return woken

    def pause(self, until: float, now: float) -> Sequence[Ticket]:
        """Start nothing before ``until`` (a provider's rate-limit reset); C is unchanged.

        Arrivals still queue up to Q (or are refused as usual), queued tickets still expire, and
        running ones run on; at ``until`` (the caller learns it from :meth:`next_wakeup`) the
        oldest start. A pause that ends earlier than one already in force changes nothing; a
        later one extends it. Returns the tickets that left the queue as the clock reached ``now``.

        Raises:
            ValueError: ``until`` is not finite (``inf`` is this state's own "not paused", and a
                pause that never ends would start nothing ever again); nothing changed.
        """
        if not until < math.inf:
            raise ValueError(f"a pause must end: until must be finite, got {until!r}")
        if until <= now or (self.paused_until != math.inf and until <= self.paused_until):
            return self._advance(now)
        self.pauses += 1
        self.paused_until = until
        self.max_running = 0
        return self._expire(now)

    def sync_rate_limits(self, remaining: dict[str, float], now: float) -> int:
        """Bring buckets in line with what the provider says is left; never raise a balance.

        ``remaining`` maps a resource to the provider's remaining count: a bucket whose rate
        limit is named so (``RateLimit(..., name="tokens")``), else, for ``"requests"`` and
        ``"tokens"``, the first bucket counted in that unit, is lowered to it if it holds more.
        Lowering a balance starts nobody. Returns how many buckets were lowered.
        """
        lowered = 0
        for resource, left in remaining.items():
            bucket = next((b for b in self._buckets if b.limit.name == resource), None)
            if bucket is None and resource in ("requests", "tokens"):
                bucket = next((b for b in self._buckets if b.limit.unit == resource), None)
            if bucket is not None and 0 <= left < bucket.tokens(now):
                bucket.empty = now - left * bucket.period
                lowered += 1
        return lowered

    def _resume(self, now: float, woken: list[Ticket]) -> None:
        self.paused_until = math.inf
        self.max_running = self.limit
        if self.waiting:
            self._fill(now, woken)

    def _infeasible(self, ticket: Ticket, now: float) -> bool:
        start = self.predicted_start(now, ticket.deadline)
        recent = self.recent_run_seconds
        if not _fits(ticket, start, recent):
            return True
        if recent is None or not (self.by_deadline and self.waiting) or self.limit == _UNLIMITED:
            return False
        # In deadline order it would start ahead of the waiters due later, each one completion's
        # share later than now predicted: none that was admitted with room for a long run may lose it.
        step = recent / self.limit
        for behind, waiter in enumerate(self._queue.due_after(ticket.deadline)):
            now_predicted = start + behind * step
            if _fits(waiter, now_predicted, recent) and not _fits(waiter, now_predicted + step, recent):
                return True
        return False

    def predicted_start(self, now: float, deadline: float = math.inf) -> float:
        """When a ticket arriving now, due at ``deadline``, would start by the recent pace.

        ``max(now, resume) + n * recent_run / C``, where ``n`` is the completions it needs: the
        running excess over C, the queue ahead of it, and one for itself. The queue ahead is the
        whole queue, or in deadline order the waiters due no later than ``deadline``. Before any
        run has ended there is no pace: it is ``max(now, resume)``.
        """
        recent = self.recent_run_seconds
        start = now if self.paused_until == math.inf else max(now, self.paused_until)
        if recent is None or self.limit == _UNLIMITED:
            return start
        ahead = self._queue.due_by(deadline) if self.by_deadline and self.waiting else self.waiting
        needed = max(0, self.running - self.limit) + ahead + 1
        return start + needed * recent / self.limit

    # -- queries ----------------------------------------------------------------------------

    @property
    def rate_limits(self) -> tuple[RateLimit, ...]:
        """The rate limits this state enforces, in order."""
        return tuple(bucket.limit for bucket in self._buckets)

    def next_wakeup(self) -> float:
        """When :meth:`advance` must next be called (``inf``: never).

        That is the earliest queued deadline, or the moment the next ticket's tokens are due while
        a slot is free, whichever comes first.
        """
        deadlines = self._deadlines
        while deadlines and deadlines[0][1].status is not QUEUED:
            _heappop(deadlines)
        when = deadlines[0][0] if deadlines else math.inf
        if self.paused_until < when:
            when = self.paused_until
        if self._buckets and self.waiting and self.running < self.max_running:
            when = min(when, self.ready_at(self._queue.peek()))
        return when

    def ready_at(self, ticket: Ticket) -> float:
        """When the buckets will hold ``ticket``'s cost, if nothing else takes from them."""
        return max((b.ready_at(b.need(ticket.cost)) for b in self._buckets), default=-math.inf)

    def tokens_ready_at(self, ticket: Ticket, now: float) -> float:
        """When the rate limits could pay ``ticket``'s cost, arriving at ``now``, behind the queue.

        Each bucket must first supply what the tickets queued ahead of it take (their costs, or
        one each for a limit counted in requests), then its own cost, from its balance at ``now``
        and what accrues (:meth:`TokenBucket.supplied_at`); the latest of the buckets. ``-inf``
        without rate limits. Ahead of it are the queued tickets of its own class and of the more
        urgent ones: they start before it, unless they leave the queue first. An older ticket of
        a less urgent class may start after it (a jump), or be evicted for it, so it is not
        counted, and a more urgent one arriving later may still jump ahead of it.

        So if nothing is refunded (``settle`` below a declared cost) and none of those ahead
        leaves the queue unstarted (cancelled, or expired waiting for a slot or a pause), ticket
        cannot start before this: a refusal on it refuses no request that could have started in
        time. With one class and one bucket, while slots are free, it is exactly when the ticket
        starts, queued, unless something settles or leaves.
        """
        requests, tokens = self._ahead(ticket.priority)
        due = -math.inf
        for bucket in self._buckets:
            ready = _ready_behind(bucket, ticket.cost, requests, tokens, now)
            if ready > due:
                due = ready
        return due

    def limiting(self, ticket: Ticket, now: float) -> RateLimit | None:
        """The rate limit whose tokens ``ticket`` waits for longest behind the queue (None without).

        Its bucket is the one that decides :meth:`tokens_ready_at`.
        """
        return self._limiting(ticket, now).limit if self._buckets else None

    def check_cost(self, cost: object) -> float:
        """Return ``cost`` as a request's declared cost, or raise.

        A cost is a finite number >= 0 that every bucket counted in tokens can hold: a cost above
        a bucket's burst could never be served.
        """
        value = check_cost(cost)
        for bucket in self._buckets:
            if not bucket.per_request and value > bucket.limit.burst:
                raise ValueError(
                    f"cost {cost!r} exceeds the burst of rate limit {bucket.limit.name!r} "
                    f"({bucket.limit.burst:g}): it could never be served"
                )
        return value

    def full_at(self) -> float:
        """When every bucket will be full again, if nothing takes from them (``-inf`` without any).

        A gate whose buckets are not full still remembers a debt of rate: forgetting it (dropping
        an idle keyed gate) would hand its key a fresh burst.
        """
        return max((bucket.full_at() for bucket in self._buckets), default=-math.inf)

    def tokens(self, now: float) -> tuple[float, ...]:
        """Each bucket's balance at ``now``."""
        return tuple(bucket.tokens(now) for bucket in self._buckets)

    def snapshot(self, name: str, now: float | None = None) -> GateStatistics:
        """An immutable copy of the counters, and of the buckets' balances at ``now``.

        Without a ``now`` (before any request) the buckets are reported full.
        """
        return GateStatistics(
            name=name,
            max_running=None if self.limit == _UNLIMITED else self.limit,
            max_waiting=self.max_waiting,
            running=self.running,
            waiting=self.waiting,
            peak_running=self.peak_running,
            peak_waiting=self.peak_waiting,
            admitted=self.admitted,
            **{name: getattr(self, name) for name in OUTCOME_NAMES},
            queue_seconds_total=self.queue_seconds_total,
            queue_seconds_max=self.queue_seconds_max,
            run_seconds_total=self.run_seconds_total,
            run_seconds_max=self.run_seconds_max,
            end_to_end_seconds_total=self.end_to_end_seconds_total,
            end_to_end_seconds_max=self.end_to_end_seconds_max,
            tokens=tuple(b.limit.burst for b in self._buckets) if now is None else self.tokens(now),
            limit_changes=self.limit_changes,
            pauses=self.pauses,
            paused_until=None if self.paused_until == math.inf else self.paused_until,
        )

    # -- invariants -------------------------------------------------------------------------

    def check(self, now: float | None = None) -> None:
        """Raise :class:`AssertionError` where this state breaks an invariant of the module's header.

        ``now`` is the time of the last event: with it, the buckets' balances are checked too, and
        that the next queued ticket could not start. It walks the queue (O(waiting)): for the
        tests, after every step, and for debugging; no event calls it.
        """
        self._check_counts()
        live = list(self._queue)
        _expect(len(live) == self.waiting, "queued tickets != waiting", len(live), self.waiting)
        _expect(len({id(t) for t in live}) == len(live), "a ticket is queued twice", live)
        if self._buckets:
            self._check_queued_costs(live)
        if now is not None:
            self._check_buckets(now)

    def _check_counts(self) -> None:
        # Running exceeds C only while a lowered C (or a pause) drains, waiting exceeds Q only
        # while a lowered Q drains: nothing joins either excess.
        running, waiting, paused = self.running, self.waiting, self.paused_until != math.inf
        _expect(running >= 0, "running < 0", running)
        drains = self.limit_changes > 0 or self.pauses > 0
        _expect(running <= self.max_running or drains, "running > max_running", running, self.max_running)
        _expect(waiting >= 0, "waiting < 0", waiting)
        _expect(waiting <= self._queue_limit or self.limit_changes > 0, "waiting > max_waiting", waiting)
        usable = 0 if paused else self.limit
        _expect(self.max_running == usable, "max_running is neither C nor 0 paused", self.max_running)
        if waiting and running < self.max_running:
            _expect(bool(self._buckets), "a slot is free while tickets wait", running, waiting)

    def _check_queued_costs(self, live: list[Ticket]) -> None:
        # What the queue owes the buckets, kept as tickets join and leave: the live queue's sums.
        by_class = self._class_queued
        if by_class is None:
            _expect(self.priorities == 1, "no sums per class for several classes")
            owed = sum(t.cost for t in live)
            _expect(
                math.isclose(self._queued_cost, owed, abs_tol=1e-9), "queued cost", owed, self._queued_cost
            )
            return
        classes = {t.priority for t in live}
        _expect(set(by_class) == classes, "sums kept for other classes than queued", by_class, classes)
        for priority in classes:
            costs = [t.cost for t in live if t.priority == priority]
            count, cost = by_class[priority]
            _expect(count == len(costs), "queued count of a class", priority, count, len(costs))
            owed = sum(costs)
            _expect(math.isclose(cost, owed, abs_tol=1e-9), "queued cost of a class", priority, cost, owed)

    def _check_buckets(self, now: float) -> None:
        if self.waiting and self.running < self.max_running:
            _expect(not self._affordable(self._queue.peek(), now), "the next ticket could start", now)
        for bucket in self._buckets:
            tokens = bucket.tokens(now)
            _expect(bucket.floor - 1e-6 <= tokens <= bucket.limit.burst, "a balance out of range", tokens)

    # -- internals --------------------------------------------------------------------------

    def _ended(self, ticket: Ticket) -> None:
        # Tell the hooks of a ticket that reached its outcome (off the uncontended path).
        if self.reporter is not None and ticket.status in LOGGED:
            self.reporter(ticket)
        if self.observer is not None:
            self.observer(ticket)

    def _report(self, ticket: Ticket, now: float) -> None:
        # A release the reporter hears of, told as it is decided (its record reads the ticket only).
        if self.reporter is not None:
            ticket.ended = now
            self.reporter(ticket)

    def _count_cancel(self, ending: Status) -> None:
        if ending is CANCELLED:
            self.cancelled += 1
        else:
            self.disconnected += 1

    def _start(self, ticket: Ticket, now: float) -> None:
        ticket.status = RUNNING
        ticket.started = now
        self.running = running = self.running + 1
        self.admitted += 1
        if running > self.peak_running:
            self.peak_running = running
        buckets = self._buckets
        if buckets and self.observer is not None:
            note(ticket, "borrowed", any(bucket.tokens(now) < bucket.limit.burst for bucket in buckets))
        for bucket in buckets:
            bucket.take(bucket.need(ticket.cost), now)

    def _jumped(self, ticket: Ticket, now: float, woken: _Woken) -> Sequence[Ticket]:
        # With rate limits a slot may be free while the head waits for its tokens: a newcomer that
        # goes to the front of the line (a more urgent class) and can pay starts now. Another
        # ticket can only start here if this one does not (the head is unchanged otherwise).
        if self.running >= self.max_running:
            return woken
        started: list[Ticket] = []
        self._fill(now, started)
        return [*woken, *(t for t in started if t is not ticket)] if started else woken

    def _refuse_past(self, ticket: Ticket, now: float) -> Sequence[Ticket]:
        # Its deadline passed before it arrived: refused before it is counted, and nobody is told.
        ticket.status = EXPIRED
        ticket.ended = now
        return _NOBODY

    def _refuse_at_once(self, ticket: Ticket, now: float, woken: _Woken) -> Sequence[Ticket]:
        # Not waiting: RATE_LIMITED if its tokens were all it lacked (a slot free, nobody queued).
        if self._buckets and self.running < self.max_running and not self.waiting:
            return self._refuse_by_rate(ticket, now, woken, self.tokens_ready_at(ticket, now))
        return self._reject(ticket, now, woken)

    def _refuse_by_rate(self, ticket: Ticket, now: float, woken: _Woken, due: float) -> Sequence[Ticket]:
        # `due`: its tokens_ready_at(now), the moment its retry_after counts to.
        ticket.status = RATE_LIMITED
        ticket.ended = now
        self.rate_limited += 1
        note(ticket, "limited_by", self._limiting(ticket, now).limit.name)
        note(ticket, "ready_at", due)
        self._ended(ticket)
        return woken

    def _refuse_infeasible(self, ticket: Ticket, now: float, woken: _Woken) -> Sequence[Ticket]:
        ticket.status = INFEASIBLE
        ticket.ended = now
        self.infeasible += 1
        note(ticket, "predicted_start", self.predicted_start(now, ticket.deadline))
        self._ended(ticket)
        return woken

    def _join_queue(self, ticket: Ticket, now: float, woken: _Woken) -> Sequence[Ticket]:
        buckets = self._buckets
        if buckets and self.observer is not None and self.running < self.max_running:
            note(ticket, "limited_by", self._limiting(ticket, now).limit.name)
        self._enqueue(ticket)
        return self._jumped(ticket, now, woken) if buckets else woken

    def _evict_or_reject(self, ticket: Ticket, now: float, woken: _Woken) -> Sequence[Ticket]:
        # The queue is full: the newest of a less urgent class, if one waits, leaves it for this one.
        queue = self._queue
        victim = queue.evict_for(ticket.priority) if queue.classes > 1 else None
        if victim is None:
            return self._reject(ticket, now, woken)
        victim.status = EVICTED
        self._leave_queue(victim, now)
        self.evicted += 1
        self._enqueue(ticket)
        woken = [*woken, victim]
        told = self._jumped(ticket, now, woken) if self._buckets else woken
        self._ended(victim)
        return told

    def _reject(self, ticket: Ticket, now: float, woken: _Woken) -> Sequence[Ticket]:
        ticket.status = REJECTED
        ticket.ended = now
        self.rejected += 1
        self._ended(ticket)
        return woken

    def _limiting(self, ticket: Ticket, now: float) -> TokenBucket:
        # limiting(), given that there are buckets.
        requests, tokens = self._ahead(ticket.priority)
        return max(self._buckets, key=lambda b: _ready_behind(b, ticket.cost, requests, tokens, now))

    def _affordable(self, ticket: Ticket, now: float) -> bool:
        # All buckets or none: nothing is taken unless every one of them covers its share.
        for bucket in self._buckets:  # noqa: SIM110 - a loop, not all(<generator>), on this path
            if not bucket.covers(bucket.need(ticket.cost), now):
                return False
        return True

    def _hand_off(self, now: float) -> list[Ticket]:
        # Due tickets expire before anyone starts: a deadline of `now` loses to a slot freed at `now`.
        woken = self._expire(now) if self._deadlines and self._deadlines[0][0] <= now else []
        self._fill(now, woken)
        return woken

    def _fill(self, now: float, woken: list[Ticket]) -> None:
        queue = self._queue
        buckets = self._buckets
        while self.waiting and self.running < self.max_running:
            if buckets and not self._affordable(queue.peek(), now):
                break  # the next in line waits for its tokens, and everyone behind it too
            ticket = queue.take()
            self.waiting -= 1
            if buckets:
                self._unqueue_cost(ticket)
            waited = now - arrival_of(ticket)
            self.queue_seconds_total += waited
            if waited > self.queue_seconds_max:
                self.queue_seconds_max = waited
            self._start(ticket, now)
            woken.append(ticket)
        if len(self._deadlines) > 2 * self.waiting + _SLACK:
            self._compact()

    def _expire(self, now: float) -> list[Ticket]:
        expired: list[Ticket] = []
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            ticket = _heappop(deadlines)[1]
            if ticket.status is QUEUED:
                ticket.status = EXPIRED
                self._leave_queue(ticket, now)
                self.expired += 1
                expired.append(ticket)
        if expired:
            self._compact()
            if self.reporter is not None or self.observer is not None:
                for ticket in expired:
                    self._ended(ticket)
        return expired

    def _enqueue(self, ticket: Ticket) -> None:
        ticket.status = QUEUED
        if self._queue is _NO_WAITERS:  # the first waiter: the waiting room is made now
            self._queue = WaitQueue(self.priorities, self._jump_share, self.by_deadline)
            self._deadlines = []
        self._queue.push(ticket)
        if self._buckets:
            self._queue_cost(ticket)
        expires = ticket.deadline if ticket.max_wait == math.inf else queue_deadline(ticket)
        if expires != math.inf:
            _heappush(self._deadlines, (expires, ticket))
        self.waiting = waiting = self.waiting + 1
        if waiting > self.peak_waiting:
            self.peak_waiting = waiting

    def _leave_queue(self, ticket: Ticket, now: float) -> None:
        # Every way out of the queue but a start (that is _fill's): expired, cancelled, evicted.
        ticket.ended = now
        self.waiting -= 1
        if self._buckets:
            self._unqueue_cost(ticket)
        waited = now - arrival_of(ticket)
        self.queue_seconds_total += waited
        if waited > self.queue_seconds_max:
            self.queue_seconds_max = waited

    def _queue_cost(self, ticket: Ticket) -> None:
        # A ticket joined the queue: what it will take from the buckets is owed ahead of newcomers.
        by_class = self._class_queued
        if by_class is None:
            self._queued_cost += ticket.cost
            return
        queued = by_class.get(ticket.priority)
        if queued is None:
            by_class[ticket.priority] = [1.0, ticket.cost]
        else:
            queued[0] += 1.0
            queued[1] += ticket.cost

    def _unqueue_cost(self, ticket: Ticket) -> None:
        # A ticket left the queue (`waiting` no longer counts it). An empty queue owes exactly
        # nothing, whatever the rounding of the sums was.
        by_class = self._class_queued
        if by_class is None:
            self._queued_cost = self._queued_cost - ticket.cost if self.waiting else 0.0
            return
        queued = by_class[ticket.priority]
        if queued[0] == 1.0:
            del by_class[ticket.priority]
        else:
            queued[0] -= 1.0
            queued[1] -= ticket.cost

    def _ahead(self, priority: int) -> tuple[float, float]:
        # The tickets and the tokens queued ahead of a newcomer of class `priority` (see
        # tokens_ready_at): the whole queue with one class, else its class and the more urgent ones.
        by_class = self._class_queued
        if by_class is None:
            return float(self.waiting), self._queued_cost
        tickets = tokens = 0.0
        for cls, queued in by_class.items():
            if cls <= priority:
                tickets += queued[0]
                tokens += queued[1]
        return tickets, tokens

    def _compact(self) -> None:
        # In place, so that callers holding the queue or the heap in a local stay in step.
        live = 2 * self.waiting + _SLACK
        self._queue.compact(live)
        deadlines = self._deadlines
        if len(deadlines) > live:
            deadlines[:] = [e for e in deadlines if e[1].status is QUEUED]
            heapq.heapify(deadlines)
