"""The limits of one gate, as a key's override gives them: running slots and queue places."""

from __future__ import annotations

from typing import NamedTuple

from ._settings import check_max_running, check_max_waiting, shown

__all__ = ("GateLimits", "check_limits")


class GateLimits(NamedTuple):
    """The limits of one key's gate, for :class:`KeyedGate`'s ``overrides``."""

    #: Running slots (C), an int >= 1, or None for no limit on running.
    max_running: int | None
    #: Queue places (Q), an int >= 0, or None for an unbounded queue.
    max_waiting: int | None


def check_limits(key: object, limits: object) -> GateLimits:
    """Return ``key``'s ``limits`` as :class:`GateLimits`: a pair ``(max_running, max_waiting)``.

    Raises:
        TypeError: Not a pair, or limits of the wrong type (naming ``key``, or the setting).
        ValueError: ``max_running < 1`` or ``max_waiting < 0``.
    """
    if not isinstance(limits, tuple) or len(limits) != 2:
        raise TypeError(
            f"limits for {key!r} must be GateLimits(max_running, max_waiting), got {shown(limits)}"
        )
    max_running = None if limits[0] is None else check_max_running(limits[0])
    return GateLimits(max_running, check_max_waiting(limits[1]))
