"""The typed refusals: one small class per outcome, all sharing :class:`GateError`.

Every field is a named attribute, given by keyword: ``QueueFull(gate="openai", max_running=50,
max_waiting=100, running=50, waiting=100, waited=0.0, elapsed=0.0, recent_run=1.2)``. The exception's
``args`` are empty: nothing is positional.

Building the exception is on the rejection path of an overloaded service (and ends each expiry), so
it does little: one ``__init__`` frame of the class and one of :class:`GateError` store the fields
in slots, and the message and the ``retry_after`` estimate are only computed when someone asks.
Each class lists all its fields in its own ``__slots__``: :class:`GateError` has none of its own,
as a base with slots could not be combined with :class:`TimeoutError`'s layout
(:class:`QueueExpired`, :class:`Late`). Pickling and copying go by the fields (:meth:`__reduce__`),
since ``BaseException``'s own way rebuilds an exception from its ``args``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

__all__ = (
    "DeadlineCut",
    "Evicted",
    "GateError",
    "GateUnavailable",
    "Infeasible",
    "Late",
    "QueueExpired",
    "QueueFull",
    "RateLimited",
)

#: The fields every refusal has, in the order its message and ``to_dict()`` give them.
_COMMON = ("gate", "max_running", "max_waiting", "running", "waiting", "waited", "elapsed")


def _limit(value: int | None) -> str:
    return "unbounded" if value is None else str(value)


def _retry_after(
    recent_run: float | None, max_running: int | None, waiting: int, paused_for: float
) -> float | None:
    # No sooner than the end of a pause in force, then the queue ahead of a newcomer, plus the
    # newcomer, at the recent pace of max_running slots (as GateState.predicted_start).
    if recent_run is None or max_running is None:
        return paused_for or None
    return paused_for + (waiting + 1) * recent_run / max_running


def _rebuilt(cls: type[GateError], fields: dict[str, Any]) -> GateError:
    """An error of class ``cls`` made again from its fields (what :meth:`GateError.__reduce__` pickles)."""
    return cls(**fields)


class GateError(Exception):
    """Base of every refusal a gate raises. Never raised itself; catch it to handle them all.

    Every instance says which gate refused and what it looked like at that moment. Each subclass is
    made with its fields as keywords, these and its own.

    Attributes:
        code: A stable machine-readable name: ``"queue_full"``, ``"rate_limited"``,
            ``"infeasible"``, ``"queue_expired"``, ``"evicted"``, ``"late"``,
            ``"gate_unavailable"``.
        http_status: The HTTP status a server in front of the gate should answer with.
        gate: The gate's name (a ``str``, as in the logs, the metrics and ``to_dict()``: an error
            outlives its gate, and is pickled without it).
        max_running: The gate's running slots (C; None when running is not limited).
        max_waiting: The gate's queue places (Q; None when unbounded).
        running: Requests running at the moment of the refusal.
        waiting: Requests waiting at the moment of the refusal.
        waited: Seconds this request spent in the queue (for :func:`admit_all`, in the whole call
            before the refusal: every earlier gate's wait included).
        elapsed: Seconds from this request's arrival to the refusal (the first gate's arrival).
        retry_after: Seconds after which a retry may succeed, or None when the gate cannot say.
    """

    code: ClassVar[str]
    http_status: ClassVar[int] = 503

    __slots__ = ()  # each class's own lists every field (see the module's docstring)

    gate: str
    max_running: int | None
    max_waiting: int | None
    running: int
    waiting: int
    waited: float
    elapsed: float

    def __init__(
        self,
        *,
        gate: str,
        max_running: int | None,
        max_waiting: int | None,
        running: int,
        waiting: int,
        waited: float,
        elapsed: float,
    ) -> None:
        # The fields every refusal has; a subclass's __init__ sets its own, then calls this.
        if type(self) is GateError:
            raise TypeError("GateError is a base class; raise one of its subclasses")
        self.gate = gate
        self.max_running = max_running
        self.max_waiting = max_waiting
        self.running = running
        self.waiting = waiting
        self.waited = waited
        self.elapsed = elapsed

    @property
    def retry_after(self) -> float | None:
        """Seconds after which a retry may succeed, or None when the gate cannot say."""
        return None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready body for an HTTP error response (the gate's name, limits and counts)."""
        return {
            "code": self.code,
            "error": str(self),
            "gate": self.gate,
            "max_running": self.max_running,
            "max_waiting": self.max_waiting,
            "running": self.running,
            "waiting": self.waiting,
            "waited": self.waited,
            "elapsed": self.elapsed,
            "retry_after": self.retry_after,
        }

    def headers(self) -> dict[str, str]:
        """HTTP headers to send with the error: ``Retry-After`` in whole seconds (>= 1), when known."""
        retry_after = self.retry_after
        if retry_after is None:
            return {}
        return {"Retry-After": str(max(1, math.ceil(retry_after)))}

    def __reduce__(self) -> tuple[Any, ...]:
        # By the fields, made again by keyword; the state is what was added later (notes).
        names: tuple[str, ...] = type(self).__slots__
        fields = {name: getattr(self, name) for name in names}
        return (_rebuilt, (type(self), fields), self.__dict__)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"

    def _where(self) -> str:
        return (
            f"gate {self.gate!r} [running {self.running}/{_limit(self.max_running)}, "
            f"waiting {self.waiting}/{_limit(self.max_waiting)}]"
        )


class QueueFull(GateError):
    """Raised at arrival, before any suspension, when every slot is busy and the queue is full.

    Nothing was queued and nothing waits on the caller's behalf. ``try_admit()`` raises it whenever
    the request cannot start at once. ``waited`` and ``elapsed`` are 0, but for a later step of
    :func:`admit_all`: the time spent at the earlier ones.

    Attributes:
        recent_run: The gate's recent mean run time in seconds, its pace (None before any run ended).
        paused_for: Seconds until a pause in force ends (0 when the gate is not paused).
    """

    __slots__ = (*_COMMON, "recent_run", "paused_for")

    code = "queue_full"

    def __init__(
        self,
        *,
        gate: str,
        max_running: int | None,
        max_waiting: int | None,
        running: int,
        waiting: int,
        waited: float,
        elapsed: float,
        recent_run: float | None = None,
        paused_for: float = 0.0,
    ) -> None:
        self.recent_run = recent_run
        self.paused_for = paused_for
        super().__init__(
            gate=gate,
            max_running=max_running,
            max_waiting=max_waiting,
            running=running,
            waiting=waiting,
            waited=waited,
            elapsed=elapsed,
        )

    @property
    def retry_after(self) -> float | None:
        """An estimate of when a retry would be served: ``paused_for + (waiting + 1) * recent_run / C``.

        ``recent_run`` is an exponentially weighted mean of the gate's recent run times, so the
        estimate is the time the queue ahead of a newcomer, plus the newcomer, takes to clear at
        the recent pace, from the end of a pause in force (nothing starts before it: a gate paused
        for a provider's reset never advertises a retry sooner). Without a pace (before any run
        has ended) it is the pause alone, or None when the gate is not paused.
        """
        return _retry_after(self.recent_run, self.max_running, self.waiting, self.paused_for)

    def __str__(self) -> str:
        return f"{self._where()} is full"


class RateLimited(GateError):
    """Raised at arrival when the request's rate cost cannot be paid in time.

    Either the caller asked not to wait (``try_admit()``) and the tokens are not there now, or
    the tokens could not arrive before the request's deadline (or its ``max_wait``) behind the
    requests queued ahead of it, which take theirs first: waiting would only have ended in
    :class:`QueueExpired`. That counts the declared costs, as if nothing were refunded (a
    ``settle`` below the estimate) and everyone ahead started. Nothing was queued and nothing
    was taken from any bucket.

    Attributes:
        limit: The name of the rate limit that refused.
        retry_after: Seconds until the rate limits could pay the request's cost, behind the queue
            ahead of it, and never sooner than the end of a pause in force. Computed from the
            buckets and the declared costs queued ahead, not estimated: a retry this much later
            finds its tokens there, if nothing else arrives ahead of it meanwhile.
    """

    __slots__ = (*_COMMON, "limit", "retry_after")

    code = "rate_limited"
    http_status = 429

    retry_after: float  # a field here, computed when refused (a slot, in place of the base's property)

    def __init__(
        self,
        *,
        gate: str,
        max_running: int | None,
        max_waiting: int | None,
        running: int,
        waiting: int,
        waited: float,
        elapsed: float,
        limit: str,
        retry_after: float,
    ) -> None:
        self.limit = limit
        self.retry_after = retry_after
        super().__init__(
            gate=gate,
            max_running=max_running,
            max_waiting=max_waiting,
            running=running,
            waiting=waiting,
            waited=waited,
            elapsed=elapsed,
        )

    def to_dict(self) -> dict[str, Any]:
        """As :meth:`GateError.to_dict`, with the name of the rate limit that refused."""
        return {**super().to_dict(), "limit": self.limit}

    def __str__(self) -> str:
        return f"rate limit {self.limit!r} of {self._where()} needs {self.retry_after:.3f}s more"


class Infeasible(GateError):
    """Raised at arrival by deadline-feasible admission: the request could not start in time.

    By the gate's recent pace (the recent mean of its runs that ended normally, over C, and any
    pause in force) the request would start at or after its queue deadline (``min(deadline,
    arrival + max_wait)``), or a long run after that start (two recent runs: an LLM call's length
    varies with its answer) would end at or after its deadline: rather than queue it to expire,
    run late or be cut off, the gate refuses it at once. Nothing
    was queued. A 503 with ``Retry-After`` (the predicted wait) is the honest answer: the gate is
    saturated now, and a request with a longer budget, or a retry later, may be served.

    Attributes:
        predicted_wait: Seconds from arrival until the request would have started, by the gate's
            recent pace.
        budget: Seconds from arrival to the request's queue deadline.
    """

    __slots__ = (*_COMMON, "predicted_wait", "budget")

    code = "infeasible"

    def __init__(
        self,
        *,
        gate: str,
        max_running: int | None,
        max_waiting: int | None,
        running: int,
        waiting: int,
        waited: float,
        elapsed: float,
        predicted_wait: float,
        budget: float,
    ) -> None:
        self.predicted_wait = predicted_wait
        self.budget = budget
        super().__init__(
            gate=gate,
            max_running=max_running,
            max_waiting=max_waiting,
            running=running,
            waiting=waiting,
            waited=waited,
            elapsed=elapsed,
        )

    @property
    def retry_after(self) -> float:
        """The predicted wait: when the queue ahead would have cleared at the recent pace."""
        return self.predicted_wait

    def to_dict(self) -> dict[str, Any]:
        """As :meth:`GateError.to_dict`, with the predicted wait and the budget."""
        return {**super().to_dict(), "predicted_wait": self.predicted_wait, "budget": self.budget}

    def __str__(self) -> str:
        return (
            f"{self._where()} cannot start this request in time: predicted wait "
            f"{self.predicted_wait:.3f}s, budget {self.budget:.3f}s"
        )


class QueueExpired(GateError, TimeoutError):
    """Raised by ``admit()`` when the request's deadline passed while it waited in the queue.

    It never started and never counted as a call; its queue place was freed at the deadline.
    Also raised at once, before anything is counted, for a request whose deadline had already
    passed when it arrived. Also a :class:`TimeoutError`.

    Attributes:
        deadline: The deadline that passed, on the gate's clock (the request's queue deadline:
            its deadline, or its arrival plus its ``max_wait`` when that came first).
        recent_run: As for :class:`QueueFull`.
        paused_for: As for :class:`QueueFull`.
    """

    __slots__ = (*_COMMON, "deadline", "recent_run", "paused_for")

    code = "queue_expired"

    def __init__(
        self,
        *,
        gate: str,
        max_running: int | None,
        max_waiting: int | None,
        running: int,
        waiting: int,
        waited: float,
        elapsed: float,
        deadline: float,
        recent_run: float | None = None,
        paused_for: float = 0.0,
    ) -> None:
        self.deadline = deadline
        self.recent_run = recent_run
        self.paused_for = paused_for
        super().__init__(
            gate=gate,
            max_running=max_running,
            max_waiting=max_waiting,
            running=running,
            waiting=waiting,
            waited=waited,
            elapsed=elapsed,
        )

    @property
    def retry_after(self) -> float | None:
        """As for :attr:`QueueFull.retry_after`."""
        return _retry_after(self.recent_run, self.max_running, self.waiting, self.paused_for)

    def __str__(self) -> str:
        return f"deadline passed after waiting {self.waited:.3f}s in the queue of {self._where()}"


class Evicted(GateError):
    """Raised by ``admit()`` for a waiter pushed out of a full queue by a more urgent arrival.

    Only gates with priority classes evict: when the queue is full, an arrival of class ``p`` takes
    the place of the newest waiter of the least urgent class below ``p``. The evicted request never
    started.

    Attributes:
        priority: The evicted request's priority class.
        recent_run: As for :class:`QueueFull`.
        paused_for: As for :class:`QueueFull`.
    """

    __slots__ = (*_COMMON, "priority", "recent_run", "paused_for")

    code = "evicted"

    def __init__(
        self,
        *,
        gate: str,
        max_running: int | None,
        max_waiting: int | None,
        running: int,
        waiting: int,
        waited: float,
        elapsed: float,
        priority: int,
        recent_run: float | None = None,
        paused_for: float = 0.0,
    ) -> None:
        self.priority = priority
        self.recent_run = recent_run
        self.paused_for = paused_for
        super().__init__(
            gate=gate,
            max_running=max_running,
            max_waiting=max_waiting,
            running=running,
            waiting=waiting,
            waited=waited,
            elapsed=elapsed,
        )

    @property
    def retry_after(self) -> float | None:
        """As for :attr:`QueueFull.retry_after`."""
        return _retry_after(self.recent_run, self.max_running, self.waiting, self.paused_for)

    def __str__(self) -> str:
        return (
            f"evicted from the queue of {self._where()} by a more urgent request, "
            f"after waiting {self.waited:.3f}s"
        )


class Late(GateError, TimeoutError):
    """Raised on exit of ``async with gate.admit(...)`` when the body finished at or after its deadline.

    The body ran to its end (the gate never interrupts it) and kept its slot until then; it only
    finished too late to count as on time. Also a :class:`TimeoutError`.

    Attributes:
        deadline: The deadline, on the gate's clock.
        overrun: Seconds past the deadline at which the body finished (>= 0).
    """

    __slots__ = (*_COMMON, "deadline", "overrun")

    code = "late"
    http_status = 504

    def __init__(
        self,
        *,
        gate: str,
        max_running: int | None,
        max_waiting: int | None,
        running: int,
        waiting: int,
        waited: float,
        elapsed: float,
        deadline: float,
        overrun: float,
    ) -> None:
        self.deadline = deadline
        self.overrun = overrun
        super().__init__(
            gate=gate,
            max_running=max_running,
            max_waiting=max_waiting,
            running=running,
            waiting=waiting,
            waited=waited,
            elapsed=elapsed,
        )

    def __str__(self) -> str:
        return (
            f"finished {self.overrun:.3f}s past its deadline, {self.elapsed:.3f}s after arrival, "
            f"at {self._where()}"
        )


class DeadlineCut(GateError, TimeoutError):
    """Raised on exit of a block admitted with ``on_deadline="cut"`` that was cut off at its deadline.

    The gate cancelled the body at its deadline (as ``asyncio.timeout`` would) and kept its slot
    until the body had really stopped; the request counts as ``cut``, not ``failed`` nor ``late``.
    A stream with the same option is closed at its deadline, and its consumer's next read raises
    it. A body that reaches its end at or after the deadline before the cut lands is cut too.
    Also a :class:`TimeoutError`. The ``CancelledError`` the body saw is its ``__cause__``.

    Attributes:
        deadline: The deadline, on the gate's clock.
        overrun: Seconds past the deadline at which the body had stopped (>= 0): how long its
            clean-up held the slot after the cut.
    """

    __slots__ = (*_COMMON, "deadline", "overrun")

    code = "cut"
    http_status = 504

    def __init__(
        self,
        *,
        gate: str,
        max_running: int | None,
        max_waiting: int | None,
        running: int,
        waiting: int,
        waited: float,
        elapsed: float,
        deadline: float,
        overrun: float,
    ) -> None:
        self.deadline = deadline
        self.overrun = overrun
        super().__init__(
            gate=gate,
            max_running=max_running,
            max_waiting=max_waiting,
            running=running,
            waiting=waiting,
            waited=waited,
            elapsed=elapsed,
        )

    def __str__(self) -> str:
        return (
            f"cut off at its deadline, stopped {self.overrun:.3f}s past it, {self.elapsed:.3f}s after "
            f"arrival, at {self._where()}"
        )


class GateUnavailable(GateError):
    """Raised when a gate whose state lives elsewhere (Redis) cannot decide: it fails closed.

    The shared store could not be reached, or did not answer in time, before a decision was
    made; or a waiter lost its place because its process could not renew it there. The request
    never started and nothing ran on its behalf. Never raised after the body started.
    ``running`` and ``waiting`` are the last counts the gate saw. The underlying error, when
    there is one, is the exception's ``__cause__``.

    Attributes:
        reason: Why the gate could not decide, a short machine-readable string:
            ``"unreachable"``, ``"waiter_lease_lost"``, or ``"unreplicated"`` (a grant fewer
            replicas acknowledged than a ``RedisGate``'s ``wait_replicas``: given back).
    """

    __slots__ = (*_COMMON, "reason")

    code = "gate_unavailable"

    def __init__(
        self,
        *,
        gate: str,
        max_running: int | None,
        max_waiting: int | None,
        running: int,
        waiting: int,
        waited: float,
        elapsed: float,
        reason: str,
    ) -> None:
        self.reason = reason
        super().__init__(
            gate=gate,
            max_running=max_running,
            max_waiting=max_waiting,
            running=running,
            waiting=waiting,
            waited=waited,
            elapsed=elapsed,
        )

    def to_dict(self) -> dict[str, Any]:
        """As for :meth:`GateError.to_dict`, plus the ``reason``."""
        return {**super().to_dict(), "reason": self.reason}

    def __str__(self) -> str:
        return f"{self._where()} is unavailable ({self.reason}) after {self.elapsed:.3f}s"
