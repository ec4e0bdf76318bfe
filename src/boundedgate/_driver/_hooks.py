"""The core's two hooks for one gate's state: the ``boundedgate`` logger's record, and observers' records.

A gate's :class:`GateState` calls ``reporter`` with every ticket whose outcome is ``logged``
(refusals, late, leaked), and ``observer`` with every ticket that reaches its outcome.
:func:`attach` gives a state both: a :class:`Reporter`, which writes one structured log record if
the ``boundedgate`` logger is enabled for the record's level (a level, ``logging.disable`` or a
handler changed after the gate was made counts from the next record on), and, only while there are
callbacks, an :class:`Observing`, which turns the ticket into a :class:`RequestRecord` for them
(the core then pays one ``is None`` check per ending). Each is an object made once per state (a
keyed gate shares one reporter among its keys' states, and makes an observing hook for each key's
gate it makes while it has callbacks), so this module is compiled with the driver where the build
compiles.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import Final, final

from .._core import GateState, RequestRecord, Status, Ticket
from ._observing import Observers, log_record, logger

__all__ = ("Observing", "Reporter", "attach", "report")

# The one ending logged at WARNING; the others are logged at INFO.
LEAKED: Final[Status] = Status.LEAKED


def attach(
    state: GateState,
    gate: str,
    key: Hashable | None,
    observers: Observers | None,
    reporter: Callable[[Ticket], None] | None = None,
) -> None:
    """Give ``state`` the hooks of the gate named ``gate`` (and ``key``, for a keyed gate's key).

    ``reporter`` is one shared by many states (a keyed gate's, for its keys); without it, a
    :class:`Reporter` is made for this state.
    """
    state.reporter = Reporter(state, gate, key) if reporter is None else reporter
    state.observer = Observing(state, gate, key, observers) if observers and observers.callbacks else None


def report(ticket: Ticket, state: GateState, gate: str, key: Hashable | None) -> None:
    """Log ``ticket``'s ending in ``state`` (a leak at WARNING, the others at INFO) if the logger is on."""
    level = logging.WARNING if ticket.status is LEAKED else logging.INFO
    if logger.isEnabledFor(level):
        log_record(RequestRecord.of(ticket, state, gate, key), level)


@final
class Reporter:
    """Writes the record of each refused, late or leaked request of one state, if the logger is on."""

    __slots__ = ("_gate", "_key", "_state")

    def __init__(self, state: GateState, gate: str, key: Hashable | None) -> None:
        self._state = state
        self._gate = gate
        self._key = key

    def __call__(self, ticket: Ticket) -> None:
        """Log ``ticket``'s ending (a leak at WARNING, the others at INFO) if the logger is on for it."""
        report(ticket, self._state, self._gate, self._key)


@final
class Observing:
    """Gives the record of each request of one state that reaches its outcome to a gate's observers."""

    __slots__ = ("_gate", "_key", "_observers", "_state")

    def __init__(self, state: GateState, gate: str, key: Hashable | None, observers: Observers) -> None:
        self._state = state
        self._gate = gate
        self._key = key
        self._observers = observers

    def __call__(self, ticket: Ticket) -> None:
        """Tell the observers of ``ticket``'s record."""
        self._observers.tell(RequestRecord.of(ticket, self._state, self._gate, self._key))
