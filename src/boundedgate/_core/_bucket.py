"""Token buckets, told the time: the arithmetic behind requests-per-minute and tokens-per-minute limits.

A bucket holds up to ``burst`` tokens and gains ``rate`` tokens per second. A request takes its cost
when it starts; a request whose cost was an estimate settles later, which refunds the over-estimate
(never above ``burst``) or charges the rest (never below ``floor``: a debt that later requests wait
out). Nothing here reads a clock: every operation is told ``now``.

The balance is kept as a single time, the moment it was (or will be) empty: ``balance(t) =
min(burst, (t - empty) / period)`` with ``period = 1 / rate`` (the generic cell rate algorithm's
bookkeeping). Taking ``n`` tokens moves that moment ``n * period`` later; a request's tokens are due
at ``empty + n * period``, and "are they there at ``t``" compares ``t`` with that very sum. So the
moment a waiter is woken for its tokens is exactly the moment they are there, no tolerance is
needed, and times stay exact whenever the period is (a minute's 60 requests: one a second).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from ._settings import check_number, check_positive, shown

__all__ = ("RateLimit", "TokenBucket")


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A rate limit to attach to a gate: a token bucket's rate, burst and unit.

    With ``unit="requests"`` every request costs one token (requests per minute); with
    ``unit="tokens"`` a request costs what it declares with ``admit(cost=...)`` and may settle the
    real figure later with ``permit.settle(...)`` (LLM tokens per minute). The bucket starts full.

    Use the constructors: ``RateLimit.per_minute(60, burst=90)`` for 60 requests per minute with
    bursts of up to 90; ``RateLimit.per_minute(80_000, unit="tokens", name="tpm")`` for 80k tokens
    per minute. A sound burst is at most 1.5 to 2 times the per-window quota; the
    default burst is exactly one window's quota.

    Attributes:
        rate: Tokens gained per second.
        burst: The bucket's capacity: the most a burst can take at once, and the largest cost
            that can ever be served.
        unit: ``"requests"`` (each request costs 1) or ``"tokens"`` (each costs its ``cost``).
        floor: The lowest balance a settled debt can leave (<= 0; default ``-burst``).
        name: A name for errors and statistics.

    Raises:
        TypeError: A rate, burst or floor that is not a number, a name that is not a str.
        ValueError: A rate or burst that is not a finite number > 0, a floor that is not a finite
            number <= 0, a number beyond a float's range, or a rate so small that filling the
            bucket would take more seconds than a float holds.
    """

    rate: float
    burst: float
    unit: Literal["requests", "tokens"] = "requests"
    floor: float | None = None
    name: str = ""

    def __post_init__(self) -> None:
        # Every field checked before any is kept.
        rate = check_positive("rate", self.rate)
        burst = check_positive("burst", self.burst)
        if self.unit not in ("requests", "tokens"):
            raise ValueError(f"unit must be 'requests' or 'tokens', got {self.unit!r}")
        if self.unit == "requests" and burst < 1:
            raise ValueError(f"burst must be >= 1 for a limit counted in requests, got {shown(self.burst)}")
        floor = -burst if self.floor is None else check_number("floor", self.floor)
        if not -math.inf < floor <= 0:
            raise ValueError(f"floor must be a finite number <= 0, got {shown(self.floor)}")
        if not isinstance(self.name, str):
            raise TypeError(f"name must be a str, got {shown(self.name)}")
        # The bucket counts in seconds: a token's, a full bucket's, and the deepest debt's.
        if not math.isfinite(max(burst, -floor, 1.0) / rate):
            raise ValueError(
                f"rate {shown(self.rate)} is too small for a bucket of burst {shown(self.burst)}, "
                f"floor {floor!r}: the seconds it takes to fill are beyond a float's range"
            )
        object.__setattr__(self, "rate", rate)
        object.__setattr__(self, "burst", burst)
        object.__setattr__(self, "floor", floor)
        if not self.name:
            per = "rps" if self.unit == "requests" else "tps"
            object.__setattr__(self, "name", f"{rate:g} {per}")

    @classmethod
    def per_second(
        cls,
        amount: float,
        *,
        burst: float | None = None,
        unit: Literal["requests", "tokens"] = "requests",
        floor: float | None = None,
        name: str = "",
    ) -> RateLimit:
        """``amount`` per second, bursts of up to ``burst`` (default: ``amount``)."""
        return cls._per(1, "s", amount, burst, unit, floor, name)

    @classmethod
    def per_minute(
        cls,
        amount: float,
        *,
        burst: float | None = None,
        unit: Literal["requests", "tokens"] = "requests",
        floor: float | None = None,
        name: str = "",
    ) -> RateLimit:
        """``amount`` per minute, bursts of up to ``burst`` (default: ``amount``)."""
        return cls._per(60, "min", amount, burst, unit, floor, name)

    @classmethod
    def _per(
        cls,
        window: float,
        label: str,
        amount: float,
        burst: float | None,
        unit: Literal["requests", "tokens"],
        floor: float | None,
        name: str,
    ) -> RateLimit:
        quota = check_positive("amount", amount)
        if burst is None and unit == "requests" and quota < 1:
            raise ValueError(
                f"amount must be >= 1 for a limit counted in requests (it is the burst too), got "
                f"{shown(amount)}: give burst=1 or more for less than one request per {label}"
            )
        return cls(
            quota / window,
            quota if burst is None else burst,
            unit,
            floor,
            name or f"{amount:g} {unit}/{label}",
        )

    @property
    def per_request(self) -> bool:
        """True when every request costs one token, whatever its declared cost."""
        return self.unit == "requests"


class TokenBucket:
    """The live balance of one :class:`RateLimit`, as the moment it is empty (see the module doc)."""

    __slots__ = ("empty", "floor", "limit", "per_request", "period", "window")

    def __init__(self, limit: RateLimit) -> None:
        #: The rate limit this bucket enforces.
        self.limit = limit
        self.per_request = limit.per_request
        #: Seconds per token.
        self.period = 1.0 / limit.rate
        #: Seconds to fill the bucket from empty: at ``empty + window`` the balance is ``burst``.
        self.window = limit.burst * self.period
        #: The lowest balance a settled debt leaves (the limit's floor; ``-burst`` by default).
        self.floor = -limit.burst if limit.floor is None else limit.floor
        #: When the balance was (or will be) zero; long ago means full.
        self.empty = -math.inf

    def need(self, cost: float) -> float:
        """What a request declaring ``cost`` takes from this bucket."""
        return 1.0 if self.per_request else cost

    def ready_at(self, amount: float) -> float:
        """When the balance will pay ``amount``, if nothing else takes from it."""
        return self.empty + amount * self.period

    def supplied_at(self, amount: float, now: float) -> float:
        """When the bucket will have supplied ``amount`` counted from ``now``, if nothing settles.

        What it holds at ``now`` (at most its burst: what accrued while it was full is gone), then
        what accrues. ``amount`` may exceed the burst: the costs of requests that take their turns
        one after another. For one request's cost that it does not hold at ``now``, this is
        ``ready_at(cost)``.
        """
        return max(self.empty, now - self.window) + amount * self.period

    def covers(self, amount: float, now: float) -> bool:
        """True if the balance at ``now`` pays ``amount``."""
        return now >= self.empty + amount * self.period

    def take(self, amount: float, now: float) -> None:
        """Take ``amount`` at ``now`` (the caller checked :meth:`covers` at the same instant)."""
        self.empty = max(self.empty, now - self.window) + amount * self.period

    def give(self, amount: float, now: float) -> None:
        """Refund ``amount`` at ``now``; the balance never exceeds ``burst``."""
        self.empty = max(self.empty - amount * self.period, now - self.window)

    def charge(self, amount: float, now: float) -> None:
        """Charge ``amount`` more at ``now``; the balance never falls below ``floor``."""
        full = now - self.window
        self.empty = min(max(self.empty, full) + amount * self.period, now - self.floor * self.period)

    def tokens(self, now: float) -> float:
        """The balance at ``now``."""
        return min(self.limit.burst, (now - self.empty) / self.period)

    def full_at(self) -> float:
        """When the balance is ``burst`` again, if nothing takes from it (in the past: full now)."""
        return self.empty + self.window
