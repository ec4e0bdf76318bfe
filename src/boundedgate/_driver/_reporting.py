"""The core's ``reporter`` hook as a compiled callable: a refusal's check of the logger, natively.

The compiled build calls a state's hooks from native code, where an interpreted closure costs a
Python frame on every refusal: this class, compiled with the driver, costs none. It reads the
``boundedgate`` logger's level cache as ``Logger.isEnabledFor`` does (every change of a level, and
``logging.disable``, clears it; the method fills it), and its ``disabled`` flag once the cache says
a record is wanted, so a change of any of them counts from the next refusal on. The pure
build keeps the closure of ``_observing.py``, which is cheaper there than a call through a class.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import Final, final

from .._core import GateState, RequestRecord, Status, Ticket

__all__ = ("Reporter",)

LEAKED: Final[Status] = Status.LEAKED
WARNING: Final = logging.WARNING
INFO: Final = logging.INFO


@final
class Reporter:
    """Writes the record of each refused, late or leaked request of one state, if the logger is on."""

    __slots__ = ("_cache", "_gate", "_key", "_log", "_logger", "_state")

    _logger: logging.Logger
    # The logger's level cache (its `_cache`, a dict that logging clears and never replaces): one
    # native dict read per refusal, rather than a generic attribute lookup and a method call.
    _cache: dict[int, bool]
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
        self._cache = vars(logger)["_cache"]
        self._log = log

    def __call__(self, ticket: Ticket) -> None:
        """Log ``ticket``'s ending (a leak at WARNING, the others at INFO) if the logger is on for it."""
        level = WARNING if ticket.status is LEAKED else INFO
        enabled = self._cache.get(level)
        if enabled is None:  # not asked since the levels last changed: the method asks, and caches
            enabled = self._logger.isEnabledFor(level)
        elif enabled:  # the flag is read before the cache by the method, and is cached nowhere
            enabled = not self._logger.disabled
        if enabled:
            self._log(RequestRecord.of(ticket, self._state, self._gate, self._key), level)
