"""The core's ``reporter`` hook as a compiled callable: a refusal's check of the logger, natively.

The compiled build calls a state's hooks from native code, where an interpreted closure costs a
Python frame on every refusal: this class, compiled with the driver, costs none. It reads the
``boundedgate`` logger as ``Logger.isEnabledFor`` does (its ``disabled`` flag, then its level
cache, which every change of a level clears, else the method, which fills it), so a level set, a
``logging.disable`` or a handler added at any time counts from the next refusal on. The pure
build keeps the closure of ``_observing.py``, which is cheaper there than a call through a class.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import Any, Final, final

from .._core import GateState, RequestRecord, Status, Ticket

__all__ = ("Reporter",)

LEAKED: Final[Status] = Status.LEAKED
WARNING: Final = logging.WARNING
INFO: Final = logging.INFO


@final
class Reporter:
    """Writes the record of each refused, late or leaked request of one state, if the logger is on."""

    __slots__ = ("_attributes", "_gate", "_key", "_log", "_logger", "_state")

    _logger: logging.Logger
    # The logger's instance attributes, where `disabled` and the level cache `_cache` live: read as
    # a dict, natively, rather than through two generic attribute lookups per refusal.
    _attributes: dict[str, Any]
    _log: Callable[[RequestRecord, int], None]

    def __init__(
        self,
        state: GateState,
        gate: str,
        key: Hashable | None,
        logger: logging.Logger,
        log: Callable[[RequestRecord, int], None],
    ) -> None:
        self._state = state
        self._gate = gate
        self._key = key
        self._logger = logger
        self._attributes = vars(logger)
        self._log = log

    def __call__(self, ticket: Ticket) -> None:
        """Log ``ticket``'s ending (a leak at WARNING, the others at INFO) if the logger is on for it."""
        level = WARNING if ticket.status is LEAKED else INFO
        attributes = self._attributes
        if attributes["disabled"]:
            return
        cache: dict[int, bool] = attributes["_cache"]
        enabled = cache.get(level)
        if enabled or (enabled is None and self._logger.isEnabledFor(level)):
            self._log(RequestRecord.of(ticket, self._state, self._gate, self._key), level)
