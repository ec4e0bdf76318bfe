"""One HTTP request through the transport, with its times: what statistics and controllers read."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._errors import GateError
    from ._signals import ProviderSignal

__all__ = ("Exchange",)

#: ``response.extensions[EXCHANGE]`` is the response's :class:`Exchange`.
EXCHANGE = "boundedgate"


@dataclasses.dataclass(eq=False)
class Exchange:
    """One request the transport handled, filled in as it goes; all times on the event loop's clock.

    Attributes:
        method: The HTTP method.
        url: The request's URL.
        attempt: The SDK's retry count for it (``x-stainless-retry-count``: 0 for a first attempt).
        priority: The priority class it was admitted with.
        arrival: When the transport got the request (its admission's arrival).
        admitted: When it got its slot (None if refused or cancelled while waiting).
        headers: When the response headers arrived.
        first_byte: When the first body chunk was read (None for an empty or unread body).
        last_byte: When the body was read to its end (None if it ended otherwise).
        ended: When the slot went back (None while it is held).
        status: The response's HTTP status (the synthesised one for a refusal).
        outcome: The admission's outcome once ended (``"completed"``, ``"failed"``, ``"leaked"``...,
            or the refusal's code).
        usage: The token usage the provider reported in the body (None if it reported none, or
            none the transport could read: see ``GatedTransport``'s ``usage_cost``).
        settled: The cost settled from that usage (None if nothing was settled).
        signal: What the provider's status and headers said (None for a plain success).
        refusal: The gate's error, for a refused request.
        key: The key it was admitted under, through a ``KeyedGate`` (None otherwise).
    """

    method: str
    url: str
    attempt: int
    arrival: float
    priority: int = 0
    admitted: float | None = None
    headers: float | None = None
    first_byte: float | None = None
    last_byte: float | None = None
    ended: float | None = None
    status: int | None = None
    outcome: str | None = None
    usage: dict[str, float] | None = None
    settled: float | None = None
    signal: ProviderSignal | None = None
    refusal: GateError | None = None
    key: Hashable | None = None

    @property
    def errored(self) -> bool:
        """The response is an error (status 400 or above): its request ends ``failed``.

        The SDK raises for it, as a call inside ``admit()`` that raised, which the gate counts
        failed; and a provider's 429 or 529, answered in 50 ms, must not look like a fast run to the
        pace of feasible admission or to an adaptive controller.
        """
        return self.status is not None and self.status >= 400

    @property
    def queued(self) -> float | None:
        """Seconds spent waiting for a slot."""
        return None if self.admitted is None else self.admitted - self.arrival

    @property
    def time_to_first_byte(self) -> float | None:
        """Seconds from getting the slot to the first body chunk (the provider's time to first token)."""
        if self.admitted is None or self.first_byte is None:
            return None
        return self.first_byte - self.admitted

    @property
    def time_to_last_byte(self) -> float | None:
        """Seconds from getting the slot to the end of the body (the provider's full latency)."""
        if self.admitted is None or self.last_byte is None:
            return None
        return self.last_byte - self.admitted
