"""What a simulation gives back: a row per request, a trace of events, and a summary.

Times are milliseconds from the script's origin. They are ints while they are whole (always,
without rate limits), and floats when a request started on tokens that came between two
milliseconds.

With keys, each request goes through its key's gate: its row and its trace events name the key, the
trace gives both the counts of that key's gate and the totals over all keys, and the summary adds a
:class:`KeySummary` per key. An absent ``key`` in the JSON of a row or an event means the default
key, as in scripts.

Percentiles are nearest-rank: the p-th percentile of n sorted values is the value at rank
``ceil(p / 100 * n)`` (counting from 1). It is always one of the values, never an interpolation, so
a p99 of 150 ms means one request really waited that long, and whole milliseconds stay whole.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from .._core import BY_STATUS, SIMULATED, GateLimits, RateLimit, Status

_N = TypeVar("_N", int, float)

__all__ = (
    "ClassSummary",
    "KeySummary",
    "Percentiles",
    "RequestResult",
    "Simulation",
    "Summary",
    "TraceEvent",
    "overrides_dict",
    "percentile",
    "rate_limit_dict",
)


def percentile(values: Sequence[_N], p: float) -> _N | None:
    """The nearest-rank ``p``-th percentile of ``values`` (None if there are none).

    Args:
        values: The sample, sorted in increasing order.
        p: The percentile, ``0 < p <= 100``.

    Returns:
        ``values[ceil(p / 100 * len(values)) - 1]``, or None for an empty sample.

    Raises:
        ValueError: ``p`` outside ``(0, 100]``.
    """
    if not 0 < p <= 100:
        raise ValueError(f"p must be in (0, 100], got {p!r}")
    if not values:
        return None
    return values[max(math.ceil(p / 100 * len(values)), 1) - 1]


@dataclass(frozen=True, slots=True)
class Percentiles:
    """A distribution of times: its size, nearest-rank p50, p95, p99 and maximum.

    In milliseconds in a simulation's summary; in seconds in a provider simulation's
    :attr:`ClientResult.time_to_refusal <boundedgate.sim.ClientResult.time_to_refusal>`. Every
    figure is None when ``count`` is 0.
    """

    #: How many values.
    count: int
    #: The median.
    p50: float | None
    #: The 95th percentile.
    p95: float | None
    #: The 99th percentile.
    p99: float | None
    #: The largest value.
    max: float | None

    @classmethod
    def of(cls, values: Iterable[float]) -> Percentiles:
        """The percentiles of ``values``, in any order."""
        ordered = sorted(values)
        return cls(
            count=len(ordered),
            p50=percentile(ordered, 50),
            p95=percentile(ordered, 95),
            p99=percentile(ordered, 99),
            max=ordered[-1] if ordered else None,
        )

    def to_dict(self) -> dict[str, float | None]:
        """The fields as a dict, for JSON."""
        return {"count": self.count, "p50": self.p50, "p95": self.p95, "p99": self.p99, "max": self.max}


@dataclass(frozen=True, slots=True)
class RequestResult:
    """What became of one scripted request. Times are milliseconds from the script's origin.

    ``queue_ms`` is the time it spent in the queue: until it started (0 if it started at once),
    or until it expired or was evicted; None if it was rejected or rate limited, since it never
    queued. ``end_to_end_ms`` is what its caller waited for an outcome of any kind:
    ``end_ms - arrival_ms``.
    """

    #: The request's id.
    id: str
    #: Its outcome: COMPLETED, LATE, EXPIRED, REJECTED, EVICTED (with priorities) or
    #: RATE_LIMITED (with rate limits).
    outcome: Status
    #: When it arrived.
    arrival_ms: float
    #: When it got a running slot, or None if it never did.
    start_ms: float | None
    #: When it reached its outcome.
    end_ms: float
    #: Time in the queue (see above).
    queue_ms: float | None
    #: Arrival to outcome.
    end_to_end_ms: float
    #: The key whose gate it went through (``""``: the default key).
    key: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict, for JSON (the outcome as its string value).

        ``key`` appears only for a request of a key other than the default one, as in scripts.
        """
        data: dict[str, Any] = {
            "id": self.id,
            "outcome": self.outcome.value,
            "arrival_ms": self.arrival_ms,
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            "queue_ms": self.queue_ms,
            "end_to_end_ms": self.end_to_end_ms,
        }
        if self.key:
            data["key"] = self.key
        return data


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One event of a simulation, with the gate's counts (and its buckets' balances) just after it.

    ``event`` is ``"started"``, ``"queued"``, ``"rejected"``, ``"rate_limited"``, ``"expired"``,
    ``"evicted"``, ``"completed"``, ``"late"``, or ``"settled"`` (a request's actual cost was
    settled as its body ended, just before it released its slot).

    With several keys, ``running`` and ``waiting`` are the totals over every key's gate (what the
    provider behind them sees), ``key_running`` and ``key_waiting`` the counts of the event's own
    key's gate (what its limits bound), and ``tokens`` that gate's balances. With one key, the
    key's counts are ``running`` and ``waiting`` themselves, and ``key_running`` and
    ``key_waiting`` are None.
    """

    #: When it happened, in milliseconds.
    time_ms: float
    #: What happened.
    event: str
    #: To which request.
    id: str
    #: Requests running just after it.
    running: int
    #: Requests waiting just after it.
    waiting: int
    #: Each rate limit's balance just after it, in the simulation's order (empty without rate
    #: limits): the buckets of the request's key.
    tokens: tuple[float, ...] = ()
    #: The key of the request (``""``: the default key).
    key: str = ""
    #: Requests running in the key's gate just after it (None when the simulation has one key).
    key_running: int | None = None
    #: Requests waiting in the key's gate just after it (None when the simulation has one key).
    key_waiting: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict, for JSON.

        ``tokens`` appears only with rate limits, rounded to a billionth of a token so that float
        noise does not show; ``key`` only for a key other than the default one; ``key_running``
        and ``key_waiting`` only when the simulation has several keys.
        """
        data: dict[str, Any] = {
            "time_ms": self.time_ms,
            "event": self.event,
            "id": self.id,
            "running": self.running,
            "waiting": self.waiting,
        }
        if self.tokens:
            data["tokens"] = [_rounded(balance) for balance in self.tokens]
        if self.key:
            data["key"] = self.key
        if self.key_running is not None:
            data["key_running"] = self.key_running
            data["key_waiting"] = self.key_waiting
        return data


def _fields_dict(summary: Any) -> dict[str, Any]:
    """A summary's fields in order, for JSON: percentiles and nested summaries as dicts."""
    data: dict[str, Any] = {}
    for each in fields(summary):
        value = getattr(summary, each.name)
        if isinstance(value, tuple):
            value = [item.to_dict() for item in value]
        elif isinstance(value, Percentiles):
            value = value.to_dict()
        data[each.name] = value
    return data


def _rounded(balance: float) -> float:
    value = round(balance, 9)
    return int(value) if value == int(value) else value


@dataclass(frozen=True, slots=True)
class ClassSummary:
    """Counts per outcome and the distributions of times, for the requests of one priority class.

    The populations of ``queue_ms`` and ``end_to_end_ms`` are those of :class:`Summary`.
    """

    #: The class: 0 is the most urgent.
    priority: int
    #: Requests of this class in the script.
    requests: int
    #: Ran and finished before their deadline.
    completed: int
    #: Ran and finished at or after their deadline.
    late: int
    #: Left the queue at their deadline, never started.
    expired: int
    #: Refused at arrival: every slot busy and the queue full.
    rejected: int
    #: Pushed out of a full queue by a more urgent arrival, never started.
    evicted: int
    #: Refused at arrival: their tokens could not come before their deadline.
    rate_limited: int
    #: Queue time of requests that started, expired or were evicted.
    queue_ms: Percentiles
    #: Arrival to end of requests that ran.
    end_to_end_ms: Percentiles
    #: Refused at arrival by deadline-feasible admission: they could not have started in time.
    infeasible: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict, for JSON."""
        return _fields_dict(self)


@dataclass(frozen=True, slots=True)
class KeySummary:
    """Counts per outcome, peaks and the distributions of times, for the requests of one key.

    The populations of ``queue_ms`` and ``end_to_end_ms`` are those of :class:`Summary`; the
    peaks are those of the key's own gate, whose limits are ``max_running`` and ``max_waiting``.
    """

    #: The key (``""``: the default key).
    key: str
    #: Running slots of the key's gate (its override, else the simulation's); None: not limited.
    max_running: int | None
    #: Queue places of the key's gate (its override, else the simulation's); None: unbounded.
    max_waiting: int | None
    #: Requests of this key in the script.
    requests: int
    #: Ran and finished before their deadline.
    completed: int
    #: Ran and finished at or after their deadline.
    late: int
    #: Left the queue at their deadline, never started.
    expired: int
    #: Refused at arrival: every slot of the key's gate busy and its queue full.
    rejected: int
    #: Pushed out of the key's full queue by a more urgent arrival, never started.
    evicted: int
    #: Refused at arrival: the key's tokens could not come before their deadline.
    rate_limited: int
    #: The most requests running at once in the key's gate.
    peak_running: int
    #: The most requests waiting at once in the key's gate.
    peak_waiting: int
    #: Queue time of requests that started, expired or were evicted.
    queue_ms: Percentiles
    #: Arrival to end of requests that ran.
    end_to_end_ms: Percentiles
    #: Refused at arrival by deadline-feasible admission: they could not have started in time.
    infeasible: int = 0

    @property
    def refused(self) -> int:
        """Requests that never ran: ``expired + rejected + evicted + rate_limited``."""
        never_ran: int = sum(getattr(self, outcome.name) for outcome in SIMULATED if not outcome.ran)
        return never_ran

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict, for JSON."""
        return _fields_dict(self)


@dataclass(frozen=True, slots=True)
class Summary:
    """Counts per outcome, peaks, and the distributions of queue time and end-to-end time.

    ``queue_ms`` covers the requests that got past the door: those that started, and those that
    left the queue at their deadline or were evicted from it. Rejected and rate-limited requests
    never queued and are left out, so they cannot make the wait look shorter than it was.
    ``end_to_end_ms`` covers the requests that ran (completed or late): how long their callers
    waited for an answer. ``classes`` breaks the counts and times down by priority class when the
    gate has several, and ``keys`` by key when the script has several. With keys, the peaks are
    those of the totals over every key's gate: the most requests running (waiting) at once in all of
    them together, not the sum of each key's peak.
    """

    #: Requests in the script.
    requests: int
    #: Ran and finished before their deadline.
    completed: int
    #: Ran and finished at or after their deadline.
    late: int
    #: Left the queue at their deadline, never started.
    expired: int
    #: Refused at arrival: every slot busy and the queue full.
    rejected: int
    #: Pushed out of a full queue by a more urgent arrival, never started (with priorities).
    evicted: int
    #: Refused at arrival: their tokens could not come before their deadline (with rate limits).
    rate_limited: int
    #: The most requests running at once (over all keys).
    peak_running: int
    #: The most requests waiting at once (over all keys).
    peak_waiting: int
    #: Queue time of requests that started, expired or were evicted.
    queue_ms: Percentiles
    #: Arrival to end of requests that ran.
    end_to_end_ms: Percentiles
    #: One :class:`ClassSummary` per priority class with requests, most urgent first; empty when the
    #: gate has one class.
    classes: tuple[ClassSummary, ...] = ()
    #: One :class:`KeySummary` per key, in the order of the keys' names (the default key, ``""``,
    #: first); empty when the script has one key.
    keys: tuple[KeySummary, ...] = ()
    #: Refused at arrival by deadline-feasible admission (``feasible=True``): by the recent pace
    #: they could not have started before their deadline.
    infeasible: int = 0

    def key(self, key: str) -> KeySummary:
        """The summary of one key.

        Raises:
            KeyError: The script has no such key, or has only one (then ``keys`` is empty).
        """
        for summary in self.keys:
            if summary.key == key:
                return summary
        raise KeyError(key)

    @property
    def admitted(self) -> int:
        """Requests that got a running slot: ``completed + late``."""
        ran: int = sum(getattr(self, outcome.name) for outcome in SIMULATED if outcome.ran)
        return ran

    def share(self, outcome: Status) -> float:
        """The fraction of requests that ended in ``outcome`` (0.0 for an empty script).

        Raises:
            ValueError: An outcome a simulation does not produce.
        """
        described = BY_STATUS.get(outcome)
        if described is None or not described.simulated:
            raise ValueError(f"a simulation has no {outcome.value} requests")
        count: int = getattr(self, described.name)
        return count / self.requests if self.requests else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict, for JSON (``keys`` only when the script has several)."""
        data = _fields_dict(self)
        if not self.keys:
            del data["keys"]
        return data


@dataclass(frozen=True, slots=True)
class Simulation:
    """The result of :func:`simulate`: the settings, a row per request, the trace and a summary."""

    #: Running slots (C); None when running is not limited.
    max_running: int | None
    #: Queue places (Q); None when unbounded.
    max_waiting: int | None
    #: One row per request, in the script's order.
    requests: tuple[RequestResult, ...]
    #: Every event in the order it happened (empty when the trace was not asked for).
    trace: tuple[TraceEvent, ...]
    #: The summary.
    summary: Summary
    #: Priority classes.
    priorities: int = 1
    #: The share of starts that may jump ahead of an older waiter.
    jump_share: float = 0.2
    #: The rate limits, as given (rates per second); each key's gate has buckets of its own.
    rate_limits: tuple[RateLimit, ...] = ()
    #: Limits for particular keys, as given (other keys have ``max_running`` and ``max_waiting``).
    overrides: Mapping[str, GateLimits] = field(default_factory=dict)

    def __getitem__(self, job_id: str) -> RequestResult:
        """The row of the request with this id.

        Raises:
            KeyError: No request has this id.
        """
        for request in self.requests:
            if request.id == job_id:
                return request
        raise KeyError(job_id)

    def to_dict(self) -> dict[str, Any]:
        """Everything as a dict, for JSON (``overrides`` only when there are any)."""
        data: dict[str, Any] = {
            "max_running": self.max_running,
            "max_waiting": self.max_waiting,
            "priorities": self.priorities,
            "jump_share": self.jump_share,
            "rate_limits": [rate_limit_dict(limit) for limit in self.rate_limits],
        }
        if self.overrides:
            data["overrides"] = overrides_dict(self.overrides)
        data["summary"] = self.summary.to_dict()
        data["requests"] = [request.to_dict() for request in self.requests]
        data["trace"] = [event.to_dict() for event in self.trace]
        return data


def overrides_dict(overrides: Mapping[str, GateLimits]) -> dict[str, dict[str, int | None]]:
    """Per-key limits as a dict, for JSON: each key's ``max_running`` and ``max_waiting``."""
    return {key: {"max_running": limits[0], "max_waiting": limits[1]} for key, limits in overrides.items()}


def rate_limit_dict(limit: RateLimit) -> dict[str, Any]:
    """A rate limit as a dict, for JSON: its name, unit, rate per second, burst and floor."""
    return {
        "name": limit.name,
        "unit": limit.unit,
        "per_second": limit.rate,
        "burst": limit.burst,
        "floor": limit.floor,
    }
