"""The driver's side of the core's two hooks: records for observers, and the ``boundedgate`` logger.

A gate's :class:`GateState` calls ``observer`` with every ticket that reaches its outcome, and
``reporter`` with those whose outcome is ``logged`` (refusals, late, leaked). This module makes
both hooks for a state: the observer turns the ticket into a :class:`RequestRecord` for the
gate's callbacks, and is only installed while there are callbacks (the core then pays one
``is None`` check per ending); the reporter writes one structured log record, and costs nothing
unless the logger is enabled for the record's level.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable

from .._core import GateState, RequestRecord, Status, Ticket
from . import _reporting
from ._reporting import Reporter

__all__ = ("Observer", "Observers", "attach", "log_event", "logger")

#: The library's logger: one record per refusal and per ending nobody asked for, nothing else.
logger = logging.getLogger("boundedgate")
logger.addHandler(logging.NullHandler())

#: What a gate calls with each request's record.
Observer = Callable[[RequestRecord], None]

# The one ending logged at WARNING; the others are logged at INFO.
_LEAKED = Status.LEAKED
_WARNING = logging.WARNING
_INFO = logging.INFO


def _reads_natively(logger: logging.Logger) -> bool:
    """Whether a :class:`Reporter` may read ``logger``'s ``disabled`` flag and level cache itself.

    True for the standard library's ``Logger.isEnabledFor``, which reads a per-logger level cache
    (the instance attribute ``_cache``, cleared whenever a level changes) after that flag; a logger
    class of the application's own (``logging.setLoggerClass`` before boundedgate is imported) is
    asked through its method.
    """
    return (
        type(logger).isEnabledFor is logging.Logger.isEnabledFor
        and isinstance(vars(logger).get("_cache"), dict)
        and "disabled" in vars(logger)
    )


# The compiled build hands the core the compiled Reporter, which reads the logger natively; the
# pure one, a closure that asks the logger (a class's call costs more there than it saves).
# (vars() gives the logger a dict of its own, which slows interpreted reads of its attributes:
# only the compiled build asks for it.)
_NATIVE = not str(_reporting.__file__).endswith(".py") and _reads_natively(logger)


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


def attach(state: GateState, gate: str, key: Hashable | None, observers: Observers | None) -> None:
    """Give ``state`` the hooks of the gate named ``gate`` (and ``key``, for a keyed gate's key)."""
    state.reporter = _reporter(state, gate, key)
    state.observer = _observer(state, gate, key, observers) if observers and observers.callbacks else None


def _observer(
    state: GateState, gate: str, key: Hashable | None, observers: Observers
) -> Callable[[Ticket], None]:
    def observe(ticket: Ticket) -> None:
        observers.tell(RequestRecord.of(ticket, state, gate, key))

    return observe


def _reporter(state: GateState, gate: str, key: Hashable | None) -> Callable[[Ticket], None]:
    if _NATIVE:
        return Reporter(state, gate, key, logger, log_record)

    def report(ticket: Ticket) -> None:
        level = _WARNING if ticket.status is _LEAKED else _INFO
        if logger.isEnabledFor(level):
            log_record(RequestRecord.of(ticket, state, gate, key), level)

    return report


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
