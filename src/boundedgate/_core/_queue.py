"""The waiting room: one lane per priority class, and a cap on how often anyone jumps the line.

Class 0 is the most urgent. With one class (the default) this is a plain FIFO. With several, the
next to start is either

- the head of the most urgent non-empty lane, when it is also the oldest waiter of all, or when it
  may *jump* ahead of older waiters of less urgent classes; or
- the oldest waiter of all (by arrival order), otherwise.

Jumps are paid for with credit: every start from the queue earns ``jump_share`` of a jump (at most
one jump is banked; none when ``jump_share`` is 0, which makes the classes plain FIFO), and a jump
spends one. So over any ``n`` consecutive starts from the queue at most ``jump_share * n + 1``
overtake an older waiter, and all the others go to the oldest waiter of all. A waiter with ``k``
older waiters ahead of it therefore starts within ``(k + 2) / (1 - jump_share)`` starts from the
queue, whatever the mix of classes arriving behind it: no class starves. The credit is kept in
integers (``jump_share`` as a fraction), so the bound is exact.

A lane keeps its tickets in arrival order (FIFO, the default), or with ``by_deadline`` in deadline
order: earliest first, equal deadlines (and no deadline) in arrival order. Between classes the
choice above compares the lanes' heads as it does in arrival order; inside a class a newcomer due
sooner starts before an older waiter due later, which is the point, so the bound on overtaking
holds between classes only. A waiter with no deadline can then wait behind later arrivals for as
long as those keep coming.

Tickets that leave the queue (expired, cancelled) stay in their lane until they reach its front,
where they are skipped; :meth:`WaitQueue.compact` drops them when they outnumber the live ones.

With several classes a lane exists only while it holds an entry: lanes are kept by class, with the
classes in use in urgency order beside them, so a queue of a billion classes costs what one of two
does, and choosing, evicting and compacting cost the classes in use, never the classes there are.
"""

from __future__ import annotations

import bisect
import functools
from collections import deque
from collections.abc import Iterator
from typing import Final

from ._native import FloatArg, IntArg
from ._settings import check_jump_share, check_priorities
from ._ticket import Status, Ticket

__all__ = ("WaitQueue",)

QUEUED: Final[Status] = Status.QUEUED


class WaitQueue:
    """Lanes, one per priority class in use, with a bounded share of queue-jumping."""

    __slots__ = (
        "_credit",
        "_earn",
        "_lane",
        "_lanes",
        "_next_seq",
        "_price",
        "_used",
        "by_deadline",
        "classes",
    )

    def __init__(self, classes: IntArg = 1, jump_share: FloatArg = 0.2, by_deadline: bool = False) -> None:
        #: Number of priority classes; 0 is the most urgent.
        self.classes = check_priorities(classes)
        #: Each lane in deadline order (earliest first) rather than arrival order.
        self.by_deadline = by_deadline
        try:
            earn, price = _terms(jump_share)
        except TypeError:  # unhashable, so no number: refused by name (the cache cannot say why)
            check_jump_share(jump_share)
            raise
        # One class: its lane, always there. Several: a lane per class that holds an entry, and
        # those classes, most urgent first.
        self._lane: deque[Ticket] = deque()
        self._lanes: dict[int, deque[Ticket]] = {0: self._lane} if self.classes == 1 else {}
        self._used: list[int] = [0] if self.classes == 1 else []
        # A jump costs `_price` credit; each start from the queue earns `_earn`; one jump is banked
        # (none when jumping is off).
        self._earn = earn
        self._price = price
        self._credit = self._price if self._earn else 0
        # Arrival order across lanes (tickets of one instant keep their order).
        self._next_seq = 0

    def push(self, ticket: Ticket) -> None:
        """Put ``ticket`` in its class's lane: at the back, or behind those due no later than it."""
        ticket._seq = self._next_seq
        self._next_seq += 1
        if self.classes == 1:
            lane = self._lane
        else:
            found = self._lanes.get(ticket.priority)
            if found is None:
                self._lanes[ticket.priority] = found = deque()
                bisect.insort(self._used, ticket.priority)
            lane = found
        if self.by_deadline:
            bisect.insort(lane, ticket, key=_deadline)
        else:
            lane.append(ticket)

    def peek(self) -> Ticket:
        """The ticket that :meth:`take` would start next. The queue must hold a live ticket."""
        if self.classes == 1:
            lane = self._lane
            while lane[0].status is not QUEUED:
                lane.popleft()
            return lane[0]
        return self._lanes[self._choose()[0]][0]

    def take(self) -> Ticket:
        """Remove and return the next ticket to start. The queue must hold a live ticket."""
        if self.classes == 1:
            lane = self._lane
            ticket = lane.popleft()
            while ticket.status is not QUEUED:
                ticket = lane.popleft()
            return ticket
        priority, jump = self._choose()
        if jump:
            self._credit -= self._price
        self._credit = min(self._price, self._credit + self._earn)
        lane = self._lanes[priority]
        ticket = lane.popleft()
        if not lane:
            self._drop(priority)
        return ticket

    def evict_for(self, priority: int) -> Ticket | None:
        """Remove and return the last in line of the least urgent class below ``priority``.

        The last in line is the newest waiter, or in deadline order the one due last. None when
        every live waiter is at least as urgent as ``priority``.
        """
        used = self._used
        while used and used[-1] > priority:
            least = used[-1]
            lane = self._lanes[least]
            while lane:
                ticket = lane.pop()
                if ticket.status is QUEUED:
                    if not lane:
                        self._drop(least)
                    return ticket
            self._drop(least)
        return None

    def compact(self, live: int) -> None:
        """Drop tickets that left the queue, if the lanes hold more than ``live`` entries."""
        if len(self) > live:
            for priority, lane in list(self._lanes.items()):
                kept = [t for t in lane if t.status is QUEUED]
                lane.clear()
                lane.extend(kept)
                if not lane and self.classes > 1:
                    self._drop(priority)

    def due_by(self, deadline: float) -> int:
        """The live waiters due no later than ``deadline``, of every class.

        In deadline order, those a newcomer due at ``deadline`` would wait behind.
        """
        return sum(
            1 for lane in self._lanes.values() for t in lane if t.status is QUEUED and t.deadline <= deadline
        )

    def due_after(self, deadline: float) -> list[Ticket]:
        """The live waiters due later than ``deadline``, of every class, soonest first."""
        lanes = self._lanes.values()
        later = [t for lane in lanes for t in lane if t.status is QUEUED and t.deadline > deadline]
        return sorted(later, key=_deadline)

    def __len__(self) -> int:
        """Entries in the lanes, live or not (what compaction keeps in check)."""
        return sum(map(len, self._lanes.values()))

    def __iter__(self) -> Iterator[Ticket]:
        """The live tickets, lane by lane (most urgent first), in each the order they start in."""
        for priority in self._used:
            yield from (t for t in self._lanes[priority] if t.status is QUEUED)

    def _drop(self, priority: int) -> None:
        # A lane of several classes' that has emptied.
        del self._lanes[priority]
        del self._used[bisect.bisect_left(self._used, priority)]

    def _choose(self) -> tuple[int, bool]:
        # With several classes: the class to take from, and whether taking its lane's head is a jump
        # over an older waiter.
        lanes = self._lanes
        top = oldest = -1
        oldest_seq = 0
        emptied: list[int] = []
        for priority in self._used:
            lane = lanes[priority]
            while lane and lane[0].status is not QUEUED:
                lane.popleft()
            if not lane:
                emptied.append(priority)
            elif top < 0:
                top = oldest = priority
                oldest_seq = lane[0]._seq
            elif lane[0]._seq < oldest_seq:
                oldest = priority
                oldest_seq = lane[0]._seq
        for priority in emptied:
            self._drop(priority)
        if top == oldest:
            return top, False
        if self._credit >= self._price:
            return top, True
        return oldest, False


def _deadline(ticket: Ticket) -> float:
    return ticket.deadline


@functools.lru_cache(maxsize=64, typed=True)
def _terms(jump_share: FloatArg) -> tuple[int, int]:
    # A checked jump share's exact fraction, as what a start earns and what a jump costs: checked and
    # found once per value and type (a keyed gate makes a queue for each of its keys); a value
    # refused raises, and is not cached.
    share = check_jump_share(jump_share)
    return share.numerator, share.denominator
