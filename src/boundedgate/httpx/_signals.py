"""What a provider's response says about its limits, parsed into typed signals.

The statuses and headers the LLM providers send:

- ``429`` (rate limited: requests or tokens per minute), ``503`` (unavailable) and ``529``
  (Anthropic: overloaded); ``Retry-After`` (seconds or an HTTP date) and ``retry-after-ms``.
- OpenAI: ``x-ratelimit-limit-requests``, ``x-ratelimit-remaining-requests``,
  ``x-ratelimit-reset-requests`` (a duration such as ``1s``, ``6m0s``, ``120ms``) and the same
  three for ``-tokens``.
- Anthropic: ``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}``
  (the reset an RFC 3339 time).
"""

from __future__ import annotations

import dataclasses
import email.utils
import math
import re
import time
from collections.abc import Hashable, Mapping
from datetime import datetime
from typing import Literal

__all__ = ("BODY_LIMIT", "ProviderSignal", "Quota", "parse_signal", "reads_body")

#: The most of an error response's body the classifier is given (decoded): enough for any
#: provider's error envelope, small enough to read ahead of the client at no cost worth counting.
BODY_LIMIT = 64 << 10

SignalKind = Literal["rate_limited", "overloaded", "unavailable", "quota"]

_OPENAI = re.compile(r"^x-ratelimit-(limit|remaining|reset)-(.+)$")
_ANTHROPIC = re.compile(r"^anthropic-ratelimit-(.+)-(limit|remaining|reset)$")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


@dataclasses.dataclass(frozen=True)
class Quota:
    """One of the provider's limits as its response headers report it.

    Attributes:
        resource: What it counts, as the provider names it: ``"requests"``, ``"tokens"``,
            ``"input-tokens"``, ``"output-tokens"``.
        limit: The quota per window (None if not sent).
        remaining: What is left of it now (None if not sent).
        reset: Seconds from the response until it is back to full (None if not sent).
    """

    resource: str
    limit: float | None
    remaining: float | None
    reset: float | None


@dataclasses.dataclass(frozen=True)
class ProviderSignal:
    """What one provider response said about capacity, for ``GatedTransport(on_provider_signal=...)``.

    Attributes:
        kind: ``"rate_limited"`` (a 429: a quota is spent; pause new starts until ``retry_after``,
            do not lower the concurrency), ``"overloaded"`` (a 529, or a 429 whose body says
            overloaded: the provider is congested), ``"unavailable"`` (a 503), or ``"quota"``
            (a successful response that carried rate-limit headers).
        status: The HTTP status.
        retry_after: Seconds the provider asked to wait (None if it did not say).
        quotas: The rate-limit headers, one :class:`Quota` per resource.
        host: The request's host.
        at: When the response headers arrived, on the event loop's clock.
        key: The key of the ``KeyedGate`` the request went through (None for another gate), so
            that :func:`follow_provider` tells that key's gate alone.
    """

    kind: SignalKind
    status: int
    retry_after: float | None
    quotas: tuple[Quota, ...]
    host: str
    at: float
    key: Hashable | None = None

    def quota(self, resource: str) -> Quota | None:
        """The quota for ``resource`` (``"requests"``, ``"tokens"``, ...), if the provider sent it."""
        for quota in self.quotas:
            if quota.resource == resource:
                return quota
        return None


def reads_body(status: int) -> bool:
    """Whether what a response with this status says depends on its body (a 429's: quota or overload)."""
    return status == 429


def parse_signal(
    status: int,
    headers: Mapping[str, str],
    host: str,
    at: float,
    body: bytes | None = None,
    key: Hashable | None = None,
) -> ProviderSignal | None:
    """The signal in a response's status and headers (``body``: a 429's, when buffered), or None.

    A 429 is ``rate_limited``, unless its body says overloaded (Anthropic's ``overloaded_error``,
    OpenAI's "That model is currently overloaded", a gateway's), which makes it ``overloaded``;
    the body need not be complete (the transport passes up to :data:`BODY_LIMIT` bytes of it,
    decoded). ``key``: the request's key, for a request admitted through a ``KeyedGate``.

    ``headers`` must be case-insensitive or lower-cased (httpx's ``Headers`` are).
    """
    quotas = parse_quotas(headers)
    if status == 429:
        kind: SignalKind = (
            "overloaded" if body is not None and b"overloaded" in body.lower() else "rate_limited"
        )
    elif status == 529:
        kind = "overloaded"
    elif status == 503:
        kind = "unavailable"
    elif quotas:
        kind = "quota"
    else:
        return None
    return ProviderSignal(kind, status, parse_retry_after(headers), quotas, host, at, key)


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """``retry-after-ms``, else ``Retry-After`` (seconds or an HTTP date), in seconds; None if absent."""
    value = headers.get("retry-after-ms")
    if value is not None:
        seconds = _number(value)
        if seconds is not None:
            return seconds / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def parse_quotas(headers: Mapping[str, str]) -> tuple[Quota, ...]:
    """The OpenAI and Anthropic rate-limit headers, one :class:`Quota` per resource named."""
    found: dict[str, dict[str, float | None]] = {}
    for raw_name, value in headers.items():
        name = raw_name.lower()
        if name.startswith("x-ratelimit-"):
            match = _OPENAI.match(name)
            if match is None:
                continue
            field, resource = match.groups()
        elif name.startswith("anthropic-ratelimit-"):
            match = _ANTHROPIC.match(name)
            if match is None:
                continue
            resource, field = match.groups()
        else:
            continue
        parsed = _reset(value) if field == "reset" else _number(value)
        found.setdefault(resource, {})[field] = parsed
    return tuple(
        Quota(resource, fields.get("limit"), fields.get("remaining"), fields.get("reset"))
        for resource, fields in found.items()
    )


def _number(value: str) -> float | None:
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _reset(value: str) -> float | None:
    """A reset as seconds from now: a number, an OpenAI duration (``6m0s``) or an RFC 3339 time."""
    value = value.strip()
    number = _number(value)
    if number is not None:
        return number
    parts = _DURATION.findall(value)
    if parts and "".join(n + u for n, u in parts) == value:
        return sum(float(n) * _UNITS[u] for n, u in parts)
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())
