"""The provider's signals, fed back to the gate: pauses, overload cuts, and buckets brought in line."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import Any

from .._core import MAX_PAUSE, check_max_pause
from .._driver import KeyedGate
from ._signals import ProviderSignal

__all__ = ("follow_provider",)


def follow_provider(gate: Any, *, max_pause: float = MAX_PAUSE) -> Callable[[ProviderSignal], None]:
    """An ``on_provider_signal`` for :class:`GatedTransport` that tells ``gate`` what the provider said.

    ::

        gate = BoundedGate(max_running=8, max_waiting=50, adaptive=Adaptive(ceiling=64))
        transport = GatedTransport(gate, on_provider_signal=follow_provider(gate))

    A 429 (``rate_limited``) pauses new starts until its ``Retry-After`` (else until the latest
    reset among the quotas that are spent), but for at most ``max_pause`` seconds (default 300:
    a reset further away, a daily quota, a ``Retry-After: 1e15`` or a reset too long to be a
    number, is obeyed that long; then the gate tries again, and the next 429 pauses it again),
    and leaves C alone; a 529, a 503 or a 429 whose body
    says overloaded (``overloaded``, ``unavailable``) is an overload signal, which an adaptive gate
    answers with a cut (at most once per window); every response's remaining quotas bring the
    gate's rate limits of the same name down to them (``gate.sync_rate_limits``), never up. A gate
    without ``signal()`` is left alone for what it cannot take. A ``RedisGate``'s ``signal()`` is a
    coroutine (it writes to Redis): it runs in a task of its own, so the response is not held up,
    and a failure (Redis out of reach) is logged to the ``boundedgate`` logger.

    With a :class:`KeyedGate` (``GatedTransport(models, key=..., on_provider_signal=
    follow_provider(models))``) each signal goes to the gate of the key its request was admitted
    under (``ProviderSignal.key``): a 529 for one model cuts that model's C alone. A signal with no
    key (a request that did not go through this keyed gate) is left alone. So with a
    ``boundedgate.redis.RedisKeyedGate``, whose signals are coroutines, sent as a ``RedisGate``'s.

    Raises:
        TypeError, ValueError: ``max_pause`` is not a finite number >= 0.
    """
    longest = check_max_pause(max_pause)

    def wait(signal: ProviderSignal) -> float | None:
        seconds = _wait(signal)
        return None if seconds is None else min(seconds, longest)

    sending: set[asyncio.Task[None]] = set()

    def told(task: asyncio.Task[None]) -> None:
        sending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logging.getLogger("boundedgate").warning(
                "could not tell the gate what the provider said", exc_info=task.exception()
            )

    def sent(result: object) -> None:
        """A cluster gate's signal is a coroutine: run it in a task of its own."""
        if inspect.iscoroutine(result):
            task = asyncio.get_running_loop().create_task(result)
            sending.add(task)
            task.add_done_callback(told)

    if isinstance(gate, KeyedGate) or _is_cluster_keyed(gate):
        keyed: Any = gate

        def follow_keyed(signal: ProviderSignal) -> None:
            key = signal.key
            if key is None:
                return
            kind = signal.kind
            if kind == "rate_limited":
                sent(keyed.signal(key, "rate_limited", retry_after=wait(signal), max_pause=longest))
            elif kind in ("overloaded", "unavailable"):
                sent(keyed.signal(key, "overloaded"))
            remaining = _remaining(signal)
            if remaining:
                keyed.sync_rate_limits(key, remaining)

        return follow_keyed

    def tell(kind: str, **options: Any) -> None:
        sent(gate.signal(kind, **options))

    def follow(signal: ProviderSignal) -> None:
        kind = signal.kind
        if kind == "rate_limited" and hasattr(gate, "signal"):
            tell("rate_limited", retry_after=wait(signal), max_pause=longest)
        elif kind in ("overloaded", "unavailable") and hasattr(gate, "signal"):
            tell("overloaded")
        remaining = _remaining(signal)
        if remaining and hasattr(gate, "sync_rate_limits"):
            gate.sync_rate_limits(remaining)

    return follow


def _is_cluster_keyed(gate: object) -> bool:
    """True for a ``boundedgate.redis.RedisKeyedGate``, told by its class's name and module.

    By name: ``boundedgate.redis`` (and redis-py) is imported only by who uses it.
    """
    kind = type(gate)
    return kind.__name__ == "RedisKeyedGate" and kind.__module__.startswith("boundedgate.redis")


def _wait(signal: ProviderSignal) -> float | None:
    """How long a 429 asks to wait: its ``Retry-After``, else the latest reset of a spent quota.

    Possibly ``inf``: a reset of 400 digits is a number too large for a float.
    """
    wait = signal.retry_after
    if wait is None:
        spent = [q.reset for q in signal.quotas if q.remaining == 0 and q.reset is not None]
        wait = max(spent, default=None)
    return wait


def _remaining(signal: ProviderSignal) -> dict[str, float]:
    return {q.resource: q.remaining for q in signal.quotas if q.remaining is not None}
