"""The typed refusals: one small class per outcome, all sharing :class:`GateError`.

Building the exception is on the rejection path of an overloaded service, so it does as little as
Python allows: the fields are the exception's positional ``args`` (stored by ``BaseException``
itself, with no Python-level ``__init__``), read back through properties, and the message and the
``retry_after`` estimate are only computed when someone asks. The positional order is part of the
API: ``gate, max_running, max_waiting, running, waiting, waited, elapsed`` and then each class's own.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

__all__ = (
    "Evicted",
    "GateError",
    "GateUnavailable",
    "Infeasible",
    "Late",
    "QueueExpired",
    "QueueFull",
    "RateLimited",
)


def _limit(value: int | None) -> str:
    return "unbounded" if value is None else str(value)


def _retry_after(args: tuple[Any, ...], recent_at: int) -> float | None:
    # No sooner than the end of a pause in force, then the queue ahead of a newcomer, plus the
    # newcomer, at the recent pace of max_running slots (as GateState.predicted_start). The
    # pause is the arg after recent_run: an error made with the args of before has none.
    recent_run: float | None = args[recent_at]
    max_running: int | None = args[1]
    paused_for: float = args[recent_at + 1] if len(args) > recent_at + 1 else 0.0
    if recent_run is None or max_running is None:
        return paused_for or None
    waiting: int = args[4]
    return paused_for + (waiting + 1) * recent_run / max_running


class GateError(Exception):
    """Base of every refusal a gate raises. Never raised itself; catch it to handle them all.

    Every instance says which gate refused and what it looked like at that moment.

    Attributes:
        code: A stable machine-readable name: ``"queue_full"``, ``"rate_limited"``,
            ``"queue_expired"``, ``"evicted"``, ``"late"``, ``"gate_unavailable"``.
        http_status: The HTTP status a server in front of the gate should answer with.
        gate: The gate's name.
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

    def __init__(self, *args: object) -> None:
        raise TypeError("GateError is a base class; raise one of its subclasses")

    @property
    def gate(self) -> str:
        """The gate's name."""
        return self.args[0]  # type: ignore[no-any-return]

    @property
    def max_running(self) -> int | None:
        """The gate's running slots (C; None when running is not limited)."""
        return self.args[1]  # type: ignore[no-any-return]

    @property
    def max_waiting(self) -> int | None:
        """The gate's queue places (Q; None when unbounded)."""
        return self.args[2]  # type: ignore[no-any-return]

    @property
    def running(self) -> int:
        """Requests running at the moment of the refusal."""
        return self.args[3]  # type: ignore[no-any-return]

    @property
    def waiting(self) -> int:
        """Requests waiting at the moment of the refusal."""
        return self.args[4]  # type: ignore[no-any-return]

    @property
    def waited(self) -> float:
        """Seconds this request spent in the queue."""
        return self.args[5]  # type: ignore[no-any-return]

    @property
    def elapsed(self) -> float:
        """Seconds from this request's arrival to the refusal."""
        return self.args[6]  # type: ignore[no-any-return]

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

    def _where(self) -> str:
        return (
            f"gate {self.gate!r} [running {self.running}/{self.max_running}, "
            f"waiting {self.waiting}/{_limit(self.max_waiting)}]"
        )


class QueueFull(GateError):
    """Raised at arrival, before any suspension, when every slot is busy and the queue is full.

    Nothing was queued and nothing waits on the caller's behalf. ``try_admit()`` raises it whenever
    the request cannot start at once.

    Positional args: ``gate, max_running, max_waiting, running, waiting, waited, elapsed,
    recent_run, paused_for`` (``waited`` and ``elapsed`` are 0, but for a later step of
    :func:`admit_all`, the time spent at the earlier ones; ``recent_run`` is the gate's recent mean
    run time in seconds, or None before any run ended; ``paused_for`` the seconds until a pause in
    force ends, 0 when the gate is not paused, and may be left out).
    """

    if TYPE_CHECKING:

        def __init__(
            self,
            gate: str,
            max_running: int | None,
            max_waiting: int | None,
            running: int,
            waiting: int,
            waited: float,
            elapsed: float,
            recent_run: float | None,
            paused_for: float = 0.0,
        ) -> None: ...

    else:
        __init__ = Exception.__init__  # the fields are the args: no Python frame on the refusal path

    code = "queue_full"

    @property
    def retry_after(self) -> float | None:
        """An estimate of when a retry would be served: ``paused_for + (waiting + 1) * recent_run / C``.

        ``recent_run`` is an exponentially weighted mean of the gate's recent run times, so the
        estimate is the time the queue ahead of a newcomer, plus the newcomer, takes to clear at
        the recent pace, from the end of a pause in force (nothing starts before it: a gate paused
        for a provider's reset never advertises a retry sooner). Without a pace (before any run
        has ended) it is the pause alone, or None when the gate is not paused.
        """
        return _retry_after(self.args, 7)

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

    Positional args: ``gate, max_running, max_waiting, running, waiting, waited, elapsed, limit,
    retry_after`` (``limit`` names the rate limit that refused; ``retry_after`` is exact: when the
    bucket holds the request's cost, or when a pause in force ends, whichever is later).
    """

    if TYPE_CHECKING:

        def __init__(
            self,
            gate: str,
            max_running: int | None,
            max_waiting: int | None,
            running: int,
            waiting: int,
            waited: float,
            elapsed: float,
            limit: str,
            retry_after: float,
        ) -> None: ...

    else:
        __init__ = Exception.__init__

    code = "rate_limited"
    http_status = 429

    @property
    def limit(self) -> str:
        """The name of the rate limit that refused."""
        return self.args[7]  # type: ignore[no-any-return]

    @property
    def retry_after(self) -> float:
        """Seconds until the rate limits could pay the request's cost, behind the queue ahead of it.

        Computed from the buckets and the declared costs queued ahead, not estimated, and never
        sooner than the end of a pause in force: a retry this much later finds its tokens there,
        if nothing else arrives ahead of it meanwhile.
        """
        return self.args[8]  # type: ignore[no-any-return]

    def to_dict(self) -> dict[str, Any]:
        """As :meth:`GateError.to_dict`, with the name of the rate limit that refused."""
        return {**super().to_dict(), "limit": self.limit}

    def __str__(self) -> str:
        return f"rate limit {self.limit!r} of {self._where()} needs {self.retry_after:.3f}s more"


class Infeasible(GateError):
    """Raised at arrival by deadline-feasible admission: the request could not start in time.

    By the gate's recent pace (the recent mean of its runs that ended normally, over C, and any
    pause in force) the request would start at or after its queue deadline (``min(deadline,
    arrival + max_wait)``), or one recent run after that start would end at or after its
    deadline: rather than queue it to expire or run late, the gate refuses it at once. Nothing
    was queued. A 503 with ``Retry-After`` (the predicted wait) is the honest answer: the gate is
    saturated now, and a request with a longer budget, or a retry later, may be served.

    Positional args: ``gate, max_running, max_waiting, running, waiting, waited, elapsed,
    predicted_wait, budget`` (``predicted_wait``: seconds from arrival to the predicted start;
    ``budget``: seconds from arrival to its queue deadline).
    """

    if TYPE_CHECKING:

        def __init__(
            self,
            gate: str,
            max_running: int | None,
            max_waiting: int | None,
            running: int,
            waiting: int,
            waited: float,
            elapsed: float,
            predicted_wait: float,
            budget: float,
        ) -> None: ...

    else:
        __init__ = Exception.__init__

    code = "infeasible"

    @property
    def predicted_wait(self) -> float:
        """Seconds from arrival until the request would have started, by the gate's recent pace."""
        return self.args[7]  # type: ignore[no-any-return]

    @property
    def budget(self) -> float:
        """Seconds from arrival to the request's queue deadline."""
        return self.args[8]  # type: ignore[no-any-return]

    @property
    def retry_after(self) -> float:
        """The predicted wait: when the queue ahead would have cleared at the recent pace."""
        return self.args[7]  # type: ignore[no-any-return]

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

    Positional args: ``gate, max_running, max_waiting, running, waiting, waited, elapsed,
    deadline, recent_run, paused_for`` (``paused_for``: as for :class:`QueueFull`).
    """

    if TYPE_CHECKING:

        def __init__(
            self,
            gate: str,
            max_running: int | None,
            max_waiting: int | None,
            running: int,
            waiting: int,
            waited: float,
            elapsed: float,
            deadline: float,
            recent_run: float | None,
            paused_for: float = 0.0,
        ) -> None: ...

    else:
        __init__ = Exception.__init__

    code = "queue_expired"

    @property
    def deadline(self) -> float:
        """The deadline that passed, on the gate's clock."""
        return self.args[7]  # type: ignore[no-any-return]

    @property
    def retry_after(self) -> float | None:
        """As for :attr:`QueueFull.retry_after`."""
        return _retry_after(self.args, 8)

    def __str__(self) -> str:
        return f"deadline passed after waiting {self.waited:.3f}s in the queue of {self._where()}"


class Evicted(GateError):
    """Raised by ``admit()`` for a waiter pushed out of a full queue by a more urgent arrival.

    Only gates with priority classes evict: when the queue is full, an arrival of class ``p`` takes
    the place of the newest waiter of the least urgent class below ``p``. The evicted request never
    started.

    Positional args: ``gate, max_running, max_waiting, running, waiting, waited, elapsed,
    priority, recent_run, paused_for`` (``priority`` is the evicted request's class;
    ``paused_for``: as for :class:`QueueFull`).
    """

    if TYPE_CHECKING:

        def __init__(
            self,
            gate: str,
            max_running: int | None,
            max_waiting: int | None,
            running: int,
            waiting: int,
            waited: float,
            elapsed: float,
            priority: int,
            recent_run: float | None,
            paused_for: float = 0.0,
        ) -> None: ...

    else:
        __init__ = Exception.__init__

    code = "evicted"

    @property
    def priority(self) -> int:
        """The evicted request's priority class."""
        return self.args[7]  # type: ignore[no-any-return]

    @property
    def retry_after(self) -> float | None:
        """As for :attr:`QueueFull.retry_after`."""
        return _retry_after(self.args, 8)

    def __str__(self) -> str:
        return (
            f"evicted from the queue of {self._where()} by a more urgent request, "
            f"after waiting {self.waited:.3f}s"
        )


class Late(GateError, TimeoutError):
    """Raised on exit of ``async with gate.admit(...)`` when the body finished at or after its deadline.

    The body ran to its end (the gate never interrupts it) and kept its slot until then; it only
    finished too late to count as on time. Also a :class:`TimeoutError`.

    Positional args: ``gate, max_running, max_waiting, running, waiting, waited, elapsed,
    deadline, overrun``.
    """

    if TYPE_CHECKING:

        def __init__(
            self,
            gate: str,
            max_running: int | None,
            max_waiting: int | None,
            running: int,
            waiting: int,
            waited: float,
            elapsed: float,
            deadline: float,
            overrun: float,
        ) -> None: ...

    else:
        __init__ = Exception.__init__

    code = "late"
    http_status = 504

    @property
    def deadline(self) -> float:
        """The deadline, on the gate's clock."""
        return self.args[7]  # type: ignore[no-any-return]

    @property
    def overrun(self) -> float:
        """Seconds past the deadline at which the body finished (>= 0)."""
        return self.args[8]  # type: ignore[no-any-return]

    def __str__(self) -> str:
        return (
            f"finished {self.overrun:.3f}s past its deadline, {self.elapsed:.3f}s after arrival, "
            f"at {self._where()}"
        )


class GateUnavailable(GateError):
    """Raised when a gate whose state lives elsewhere (Redis) cannot decide: it fails closed.

    The shared store could not be reached, or did not answer in time, before a decision was
    made; or a waiter lost its place because its process could not renew it there. The request
    never started and nothing ran on its behalf. Never raised after the body started.
    ``running`` and ``waiting`` are the last counts the gate saw. The underlying error, when
    there is one, is the exception's ``__cause__``.

    Positional args: ``gate, max_running, max_waiting, running, waiting, waited, elapsed,
    reason`` (``reason`` is a short machine-readable string: ``"unreachable"`` or
    ``"waiter_lease_lost"``).
    """

    if TYPE_CHECKING:

        def __init__(
            self,
            gate: str,
            max_running: int | None,
            max_waiting: int | None,
            running: int,
            waiting: int,
            waited: float,
            elapsed: float,
            reason: str,
        ) -> None: ...

    else:
        __init__ = Exception.__init__

    code = "gate_unavailable"

    @property
    def reason(self) -> str:
        """Why the gate could not decide: ``"unreachable"`` or ``"waiter_lease_lost"``."""
        return self.args[7]  # type: ignore[no-any-return]

    def to_dict(self) -> dict[str, Any]:
        """As for :meth:`GateError.to_dict`, plus the ``reason``."""
        body = super().to_dict()
        body["reason"] = self.reason
        return body

    def __str__(self) -> str:
        return f"{self._where()} is unavailable ({self.reason}) after {self.elapsed:.3f}s"
