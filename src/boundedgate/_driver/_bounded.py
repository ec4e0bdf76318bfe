"""BoundedGate, the public class: the gate of ``_gate.py`` with a slot for weak references.

Never compiled. Its base, :class:`GateBase`, holds every slot and method, and is compiled with
mypyc where the build compiles; mypyc's deallocator of a native class does not clear the object's
weak references, and gates are weakly referenced (``admit_all``'s order graph, the metrics
exports, a keyed gate's check that nothing else holds a spare gate, and any caller). Here the
``__weakref__`` slot belongs to an interpreted class, so CPython's deallocator of this class clears
them before it hands the object to the native one. The constructor is here too (interpreted, as it
was), so that ``inspect`` reads its signature and it takes its arguments as given. In the pure
build the split costs nothing: a subclass's attribute and method lookups are cached as any class's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

from .._core import Adaptive, GateState, RateLimit, check_flag, shown
from ._gate import GateBase
from ._hooks import attach

__all__ = ("BoundedGate",)


@final
class BoundedGate(GateBase):  # type: ignore[misc]  # GateBase is final to mypyc alone: see _gate.py
    """At most ``max_running`` requests running, at most ``max_waiting`` waiting, the rest refused.

    ::

        gate = BoundedGate(max_running=50, max_waiting=100, name="openai")

        async with gate.admit(timeout=30):
            reply = await client.chat.completions.create(...)

    Think of a restaurant with ``max_running`` tables and a waiting room with ``max_waiting``
    chairs. A guest sits at a free table at once, or takes a chair and is seated in order of
    arrival when a table frees, or, when every chair is taken, is turned away at the door
    (:class:`QueueFull`), before anyone has spent time on them. A guest with a deadline who is
    still on a chair when it passes leaves (:class:`QueueExpired`) and frees the chair that
    instant. A guest who is eating is never thrown out: they keep their table until they leave,
    and leaving after their deadline counts as :class:`Late`.

    A freed slot goes straight to the oldest waiter, so a newcomer never jumps the queue; a
    waiter that is cancelled leaves without losing anyone's wake-up. Deadlines are measured on
    the running event loop's clock (``loop.time()``) from the moment the request enters
    ``admit()``; waiting never earns a new budget.

    With ``priorities=N`` the waiting room has N classes, 0 the most urgent: a freed slot goes to
    the most urgent waiter, FIFO within a class, but only ``jump_share`` of the starts from the
    queue may overtake an older waiter (one such jump is banked), and every other start goes to the
    oldest waiter of all. So a waiter with ``k`` older waiters ahead starts within
    ``(k + 2) / (1 - jump_share)`` starts from the queue, however many urgent requests arrive
    behind it: no class starves. When the queue is full, an arrival evicts the newest waiter of
    the least urgent class below its own (which gets :class:`Evicted`); if there is none, it is
    refused with :class:`QueueFull`.

    With ``rate_limits`` (token buckets, :class:`RateLimit`), a request starts only when it holds a
    slot *and* every bucket holds its cost; it takes from all of them at once, or from none.
    Waiting for tokens is waiting: it takes a place in the queue, honours the deadline and keeps
    FIFO order (a large request at the head makes the smaller ones behind it wait rather than
    being starved by them). A request whose tokens could not arrive before its deadline (or
    ``max_wait``), behind those the requests queued ahead of it take first, is refused at once
    with :class:`RateLimited`, whose ``retry_after`` is computed from the buckets. A gate with
    ``max_running=None`` and rate limits is a rate limiter.

    The gate binds to the event loop that first uses it. It may move to another loop while it is
    idle (nothing running or waiting), or once its loop is closed; using it from another loop while
    it is busy on an open one is a RuntimeError. Waiters parked on a closed loop never wake: a slot
    freed after the loop closed (``release()`` never raises) is not handed to them, and a move to a
    new loop drops them (they count as cancelled). Permits still running on the closed loop keep
    their slots until released.

    Args:
        max_running: Running slots, an int >= 1, or None for no limit on running (then the gate
            only limits by its rate limits and its queue).
        max_waiting: Queue places, an int >= 0 (0: no waiting room, refuse as soon as every slot
            is busy), or None for an unbounded queue, which must be asked for explicitly.
        name: A name for errors, statistics and ``repr``.
        priorities: Number of priority classes, an int >= 1.
        jump_share: The share of starts from the queue that may overtake an older waiter, in
            [0, 1). Only matters with several classes; 0 makes them plain FIFO.
        rate_limits: Token buckets every request must pay, e.g. requests and tokens per minute.
        feasible: Deadline-feasible admission: refuse at arrival, with :class:`Infeasible`, a
            request that by the gate's recent pace would start at or after its deadline (or
            queue budget), or could not finish a long run (two recent runs) by its deadline,
            instead of queueing it to expire or run late. Off by default.
        by_deadline: Start the waiters of a priority class earliest deadline first, rather than
            in arrival order (the default); equal deadlines, and none, keep arrival order.
            Feasible admission then counts ahead of an arrival only the waiters due no later, and
            refuses one that would leave a waiter due later without room for its long run. It
            helps where callers give different budgets; with one budget the two orders are the same.
        adaptive: Learn C from provider signals and time to first token (see :meth:`adapt`);
            ``max_running`` is then the C to begin with.

    Raises:
        TypeError: A limit that is not an int (floats, NaN, infinities, booleans), a name that
            is not a str, ``feasible`` or ``by_deadline`` that is not True or False, or
            ``adaptive`` that is not :class:`Adaptive`.
        ValueError: ``max_running < 1``, ``max_waiting < 0``, ``priorities < 1``, a count
            beyond ``sys.maxsize`` (None is no limit), a ``jump_share`` outside [0, 1), or
            ``adaptive`` without ``max_running``.
    """

    __slots__ = ("__weakref__",)

    def __init__(
        self,
        *,
        max_running: int | None,
        max_waiting: int | None,
        name: str = "gate",
        priorities: int = 1,
        jump_share: float = 0.2,
        rate_limits: Sequence[RateLimit] = (),
        feasible: bool = False,
        by_deadline: bool = False,
        adaptive: Adaptive | None = None,
    ) -> None:
        feasible = check_flag("feasible", feasible)
        by_deadline = check_flag("by_deadline", by_deadline)
        if adaptive is not None and not isinstance(adaptive, Adaptive):
            raise TypeError(f"adaptive must be Adaptive settings, got {shown(adaptive)}")
        state = GateState(max_running, max_waiting, priorities, jump_share, rate_limits)
        state.feasible = feasible
        state.by_deadline = by_deadline
        self._setup(state, name, bool(state.rate_limits))
        attach(state, self._name, None, None)
        if adaptive is not None:
            self.adapt(adaptive)
