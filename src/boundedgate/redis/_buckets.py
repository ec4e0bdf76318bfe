"""A cluster gate's rate limits: the same ``RateLimit`` objects, their buckets kept in Redis.

Theory of operation. The buckets are the in-process core's (:mod:`boundedgate._core._bucket`: a
bucket is the moment it is empty, its balance at ``t`` is ``min(burst, (t - empty) / period)``),
kept in the gate's ``meta`` hash on the Redis server's clock and changed only by the scripts
(``lua/prelude.lua``, "Rate limits"): an admission takes every bucket's need at its grant, all at
once or none; the head of the queue waiting for its tokens keeps everyone behind it waiting; an
arrival whose tokens could not come before its queue deadline behind the queue is refused at once
(:class:`~boundedgate.RateLimited`, with the exact ``retry_after`` the server computed); a settle
charges or refunds the limits counted in tokens (``lua/rate.lua``); the provider's remaining
quota lowers a balance. This module holds the process's side of it: the limits as every call
sends them (:func:`encode`), the checks of a cost and of the limits, which bucket a provider's
resource names (:func:`buckets_named`), the refusal (:func:`rate_limited`, :func:`refused_by`),
and the balances a read of the gate's state shows (:func:`balances`).

Nothing here reads a clock: a waiter blocked on its tokens is woken by its process's sync at
the moment the scripts said the tokens come (``_background.Background.soon``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from .._core import RateLimit, TokenBucket, check_cost, shown
from .._errors import RateLimited

__all__ = ("balances", "buckets_named", "check_limits", "cost_of", "encode", "rate_limited", "refused_by")


def check_limits(rate_limits: object) -> tuple[RateLimit, ...]:
    """Return ``rate_limits`` as a tuple of :class:`~boundedgate.RateLimit`, or raise ``TypeError``."""
    if isinstance(rate_limits, (str, bytes)) or not isinstance(rate_limits, Sequence):
        raise TypeError(f"rate_limits must be a sequence of RateLimit objects, got {shown(rate_limits)}")
    for limit in rate_limits:
        if not isinstance(limit, RateLimit):
            raise TypeError(f"rate_limits must hold RateLimit objects, got {shown(limit)}")
    return tuple(rate_limits)


def encode(rate_limits: Sequence[RateLimit]) -> str:
    """The limits as the scripts take them (``ARGV[1]``'s buckets field): ``'r|t:period:window:depth,...'``.

    In milliseconds: ``period`` per token, ``window`` from empty to full (``burst * period``),
    ``depth`` of the deepest debt (``-floor * period``). ``''`` without rate limits.
    """
    parts = []
    for limit in rate_limits:
        period = 1000.0 / limit.rate
        floor = -limit.burst if limit.floor is None else limit.floor
        unit = "r" if limit.per_request else "t"
        parts.append(f"{unit}:{period!r}:{limit.burst * period!r}:{-floor * period!r}")
    return ",".join(parts)


def cost_of(rate_limits: Sequence[RateLimit], cost: object) -> float:
    """Return ``cost`` as a request's declared cost, or raise (as ``GateState.check_cost``).

    A cost is a finite number >= 0 that every limit counted in tokens can hold: a cost above such
    a limit's burst could never be served.

    Raises:
        TypeError, ValueError: A cost that is not a finite number >= 0, or above a burst.
    """
    value = check_cost(cost)
    for limit in rate_limits:
        if not limit.per_request and value > limit.burst:
            raise ValueError(
                f"cost {cost!r} exceeds the burst of rate limit {limit.name!r} "
                f"({limit.burst:g}): it could never be served"
            )
    return value


def buckets_named(rate_limits: Sequence[RateLimit], remaining: Mapping[str, float]) -> list[object]:
    """The ``lower`` arguments for a provider's ``remaining`` quotas: (bucket number, count) pairs.

    As in-process (``GateState.sync_rate_limits``): the limit named as the resource, else, for
    ``"requests"`` and ``"tokens"``, the first limit counted in that unit. Numbers from 1.
    """
    pairs: list[object] = []
    for resource, left in remaining.items():
        number = next((i for i, limit in enumerate(rate_limits, 1) if limit.name == resource), None)
        if number is None and resource in ("requests", "tokens"):
            number = next((i for i, limit in enumerate(rate_limits, 1) if limit.unit == resource), None)
        if number is not None:
            pairs += (number, repr(float(left)))
    return pairs


def rate_limited(
    limit: str,
    retry_after: float,
    *,
    gate: str,
    max_running: int | None,
    max_waiting: int | None,
    running: int,
    waiting: int,
    elapsed: float,
) -> RateLimited:
    """The refusal of an arrival the scripts refused by rate (see :func:`refused_by`)."""
    return RateLimited(
        gate=gate,
        max_running=max_running,
        max_waiting=max_waiting,
        running=running,
        waiting=waiting,
        waited=0.0,
        elapsed=elapsed,
        limit=limit,
        retry_after=retry_after,
    )


def refused_by(rate_limits: Sequence[RateLimit], value: str) -> tuple[str, float]:
    """The name of the limit that refused an arrival, and its ``retry_after``; ``value``: ``'ms:i'``."""
    ms, _, number = value.partition(":")
    return rate_limits[int(number) - 1].name, float(ms) / 1000


def balances(rate_limits: Sequence[RateLimit], meta: Mapping[str, str], now_ms: float) -> dict[str, float]:
    """Each limit's balance at ``now_ms`` (server clock), by name, from meta's empty times.

    As the core computes an in-process bucket's (:meth:`TokenBucket.tokens
    <boundedgate._core._bucket.TokenBucket.tokens>`): bucket ``i`` is meta's ``b<i>``, the moment
    it is empty in ms (absent: full). A name given to two limits is told apart by its number.
    """
    names = [limit.name for limit in rate_limits]
    shown_as: dict[str, float] = {}
    for number, limit in enumerate(rate_limits, 1):
        bucket = TokenBucket(limit)
        stored = meta.get(f"b{number}")
        bucket.empty = -math.inf if stored is None else float(stored) / 1000
        label = limit.name if names.count(limit.name) == 1 else f"{limit.name} #{number}"
        shown_as[label] = bucket.tokens(now_ms / 1000)
    return shown_as
