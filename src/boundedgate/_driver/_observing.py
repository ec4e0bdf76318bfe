"""The ``boundedgate`` logger, and the callbacks that observe a gate.

A gate's observers (:class:`Observers`) are told the :class:`RequestRecord` of every request that
ends, and the logger gets one structured record per refusal and per ending nobody asked for (late,
leaked): the core's hooks that do both for a gate's state are ``_hooks.py``'s. :func:`log_event`
writes a record for what the core cannot see (a Redis gate's ``lease_lost``, say).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .._core import RequestRecord

__all__ = ("Observer", "Observers", "log_event", "log_record", "logger")

#: The library's logger: one record per refusal and per ending nobody asked for, nothing else.
logger = logging.getLogger("boundedgate")
logger.addHandler(logging.NullHandler())

#: What a gate calls with each request's record.
Observer = Callable[[RequestRecord], None]


class Observers:
    """The callbacks of one gate, or of one keyed gate (shared by all its keys' gates)."""

    __slots__ = ("callbacks",)

    def __init__(self) -> None:
        self.callbacks: tuple[Observer, ...] = ()

    def add(self, callback: Observer) -> None:
        """Call ``callback`` with every record from now on (once, however often it is added)."""
        if not callable(callback):
            raise TypeError(f"an observer must be callable, got {callback!r}")
        if callback not in self.callbacks:
            self.callbacks = (*self.callbacks, callback)

    def remove(self, callback: Observer) -> None:
        """Stop calling ``callback``; a callback that is not observing is ignored."""
        self.callbacks = tuple(c for c in self.callbacks if c != callback)

    def tell(self, record: RequestRecord) -> None:
        """Give ``record`` to every callback; one that raises is logged, and the others still run."""
        for callback in self.callbacks:
            try:
                callback(record)
            except Exception:
                logger.exception("observer %r of gate %r raised", callback, record.gate)


def log_record(record: RequestRecord, level: int = logging.INFO) -> None:
    """Write ``record`` to the ``boundedgate`` logger, its fields in the log record (``extra``)."""
    outcome = record.outcome
    where = record.gate if record.key is None else f"{record.gate}/{record.key}"
    logger.log(
        level,
        "%s: request %s after %.3fs (waited %.3fs)",
        where,
        outcome.label,
        record.end_to_end,
        record.waited,
        extra={
            "gate": record.gate,
            "rate_limit_key": where,
            "outcome": outcome.name,
            "error_code": outcome.error_code,
            "decision": record.decision,
            "limited": record.limited,
            "priority": record.priority,
            "waited_ms": record.waited * 1000.0,
            "end_to_end_ms": record.end_to_end * 1000.0,
            "queue_depth": record.queue_depth,
            "retry_after": record.retry_after,
            "limit": record.limited_by,
            "borrowed_burst": record.borrowed_burst,
        },
    )


def log_event(gate: str, event: str, message: str, level: int = logging.WARNING, **fields: object) -> None:
    """Write one structured record for an event that is not a request's ending.

    For the edges that see what the core cannot: a Redis gate's ``lease_lost`` or
    ``unavailable``, say. ``fields`` go into the record as they are (``extra``), with ``gate`` and
    ``event``.
    """
    if logger.isEnabledFor(level):
        logger.log(level, "%s: %s", gate, message, extra={"gate": gate, "event": event, **fields})
