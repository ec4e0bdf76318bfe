"""The provider's signals, fed back to the gate: pauses, overload cuts, and buckets brought in line."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import Any

from ._signals import ProviderSignal

__all__ = ("follow_provider",)


def follow_provider(gate: Any) -> Callable[[ProviderSignal], None]:
    """An ``on_provider_signal`` for :class:`GatedTransport` that tells ``gate`` what the provider said.

    ::

        gate = BoundedGate(max_running=8, max_waiting=50, adaptive=Adaptive(ceiling=64))
        transport = GatedTransport(gate, on_provider_signal=follow_provider(gate))

    A 429 (``rate_limited``) pauses new starts until its ``Retry-After`` (else until the latest
    reset among the quotas that are spent) and leaves C alone; a 529, a 503 or a 429 whose body
    says overloaded (``overloaded``, ``unavailable``) is an overload signal, which an adaptive gate
    answers with a cut (at most once per window); every response's remaining quotas bring the
    gate's rate limits of the same name down to them (``gate.sync_rate_limits``), never up. A gate
    without ``signal()`` (a keyed gate) is left alone for what it cannot take. A ``RedisGate``'s
    ``signal()`` is a coroutine (it writes to Redis): it runs in a task of its own, so the response
    is not held up, and a failure (Redis out of reach) is logged to the ``boundedgate`` logger.
    """
    sending: set[asyncio.Task[None]] = set()

    def told(task: asyncio.Task[None]) -> None:
        sending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logging.getLogger("boundedgate").warning(
                "could not tell the gate what the provider said", exc_info=task.exception()
            )

    def tell(kind: str, **options: Any) -> None:
        result = gate.signal(kind, **options)
        if inspect.iscoroutine(result):
            task = asyncio.get_running_loop().create_task(result)
            sending.add(task)
            task.add_done_callback(told)

    def follow(signal: ProviderSignal) -> None:
        kind = signal.kind
        if kind == "rate_limited" and hasattr(gate, "signal"):
            wait = signal.retry_after
            if wait is None:
                spent = [q.reset for q in signal.quotas if q.remaining == 0 and q.reset is not None]
                wait = max(spent, default=None)
            tell("rate_limited", retry_after=wait)
        elif kind in ("overloaded", "unavailable") and hasattr(gate, "signal"):
            tell("overloaded")
        remaining = {q.resource: q.remaining for q in signal.quotas if q.remaining is not None}
        if remaining and hasattr(gate, "sync_rate_limits"):
            gate.sync_rate_limits(remaining)

    return follow
