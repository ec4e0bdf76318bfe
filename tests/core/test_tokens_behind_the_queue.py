"""What the queue owes the buckets: the counts and costs of the queued tickets, kept as they join
and leave the queue, whichever way they leave."""

from __future__ import annotations

from boundedgate._core import GateState, RateLimit, Status, Ticket
from tests.core.invariants import check_invariants


def test_every_way_out_of_the_queue_pays_back_what_it_owed() -> None:
    # Started, expired, cancelled, disconnected, evicted by an arrival or by set_limits: each leaves
    # the sums as the live queue's (checked after every step), and an emptied queue owes nothing.
    state = GateState(1, 6, priorities=2, rate_limits=[RateLimit(1, 10, unit="tokens")])
    holder = Ticket(cost=10)
    state.arrive(holder, 0)
    starts, expires = Ticket(cost=1), Ticket(2, cost=0.1)
    cancelled, gone = Ticket(priority=1, cost=0.2), Ticket(priority=1, cost=0.3)
    squeezed, dropped = Ticket(priority=1, cost=0.7), Ticket(priority=1, cost=0.4)
    for t in (starts, expires, cancelled, gone, squeezed, dropped):
        state.arrive(t, 0)
        check_invariants(state, 0)
    assert state.advance(2) == [expires]  # its tokens were there, but no slot
    check_invariants(state, 2)
    assert state.release(holder, 2) == [starts]
    check_invariants(state, 2)
    state.cancel(cancelled, 2)
    state.cancel(gone, 2, Status.DISCONNECTED)
    check_invariants(state, 2)
    state.set_limits(2, max_waiting=1, evict=True)
    assert (dropped.status, squeezed.status) == (Status.EVICTED, Status.QUEUED)
    check_invariants(state, 2)
    urgent = Ticket(priority=0, cost=5)
    assert state.arrive(urgent, 2) == [squeezed]  # a full queue: it takes the less urgent one's place
    assert squeezed.status is Status.EVICTED
    check_invariants(state, 2)
    assert state.release(starts, 3) == []
    assert state.advance(8) == [urgent]
    check_invariants(state, 8)
    assert state._class_queued == {}

    one = GateState(None, None, rate_limits=[RateLimit(1, 10, unit="tokens")])
    one.arrive(Ticket(cost=10), 0)
    costs = (0.1, 0.2, 0.7, 0.3)  # sums that do not round back to 0
    waiters = [Ticket(cost=c) for c in costs]
    for t in waiters:
        one.arrive(t, 0)
    for t in waiters:
        one.cancel(t, 0)
        check_invariants(one, 0)
    assert one._queued_cost == 0.0  # exactly: nothing left of the rounding
