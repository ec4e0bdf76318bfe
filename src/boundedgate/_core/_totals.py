"""Statistics over many gates: the counters of gates that no longer exist, and the keyed snapshot.

A keyed gate drops a key's gate once it is idle, so its counters must outlive it: :class:`Totals`
folds an idle gate's counters in, and :func:`total` adds the gates still alive to give one
:class:`GateStatistics` for the whole family. Which fields are summed and which are maxima is read
from :class:`GateStatistics` itself, so a counter added there is summed here without a change.
"""

from __future__ import annotations

import dataclasses
import operator
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from ._state import GateState
from ._stats import GateStatistics

__all__ = ("NOT_HISTORY", "KeyedStatistics", "Totals", "total")

#: Fields that describe a gate or the moment, not its history: set by :func:`total` itself. (The
#: balances of the keys' own buckets, ``tokens``, do not add up to anything: the total has none.)
NOT_HISTORY = frozenset(
    (
        "name",
        "max_running",
        "max_waiting",
        "running",
        "waiting",
        "peak_running",
        "peak_waiting",
        "tokens",
        "paused_until",
    )
)
_HISTORY = tuple(f.name for f in dataclasses.fields(GateStatistics) if f.name not in NOT_HISTORY)
#: Zero of the right type for each: counts are ints, times are floats.
_ZEROS = {
    f.name: 0.0 if f.type == "float" else 0 for f in dataclasses.fields(GateStatistics) if f.name in _HISTORY
}
#: The longest single wait or run: the maximum over gates. Everything else is summed.
MAXIMA = tuple(name for name in _HISTORY if name.endswith("_max"))
SUMS = tuple(name for name in _HISTORY if not name.endswith("_max"))
# One C call each to read them all off a state (a keyed gate folds one in at every drop).
_sums_of = operator.attrgetter(*SUMS)
_maxima_of = operator.attrgetter(*MAXIMA)


class Totals:
    """The summed counters (and maxima) of gates that were dropped, read from their final state."""

    __slots__ = ("values",)

    def __init__(self) -> None:
        self.values: dict[str, float] = dict(_ZEROS)

    def add(self, state: GateState) -> None:
        """Fold in the counters of an idle gate's state (it must not change afterwards)."""
        values = self.values
        for name, value in zip(SUMS, _sums_of(state), strict=True):
            if value:  # most counters of one key's gate are 0
                values[name] += value
        for name, seen in zip(MAXIMA, _maxima_of(state), strict=True):
            if seen > values[name]:
                values[name] = seen


def total(
    name: str,
    dropped: Totals,
    live: Iterable[GateState],
    running: int,
    waiting: int,
    peak_running: int,
    peak_waiting: int,
) -> GateStatistics:
    """One snapshot for a family of gates: ``dropped`` plus every state in ``live``.

    Counters and time totals are summed and maxima are maxima; ``max_running`` and ``max_waiting``
    are the sums of the live gates' limits (None if any live gate's is unbounded), so
    ``running <= max_running`` holds. The current and peak counts are the caller's, which tracks
    them across gates as they change (a sum of per-gate peaks would overstate the peak).
    """
    values = dict(dropped.values)
    max_running: int | None = 0
    max_waiting: int | None = 0
    for state in live:
        for field in SUMS:
            values[field] += getattr(state, field)
        for field in MAXIMA:
            seen = getattr(state, field)
            if seen > values[field]:
                values[field] = seen
        slots = state.limit  # the configured C, paused or not
        max_running = None if max_running is None or slots == sys.maxsize else max_running + slots
        places = state.max_waiting
        max_waiting = None if max_waiting is None or places is None else max_waiting + places
    return GateStatistics(
        name=name,
        max_running=max_running,
        max_waiting=max_waiting,
        running=running,
        waiting=waiting,
        peak_running=peak_running,
        peak_waiting=peak_waiting,
        **values,  # type: ignore[arg-type]
    )


@dataclass(frozen=True, slots=True)
class KeyedStatistics:
    """A snapshot of a :class:`KeyedGate`, taken by :meth:`KeyedGate.stats`.

    ``total`` counts every request through every key, including keys whose gates have since been
    dropped; the gate counts say how many keys are live now and how many came and went.
    """

    #: The keyed gate's name.
    name: str
    #: Keys with a gate now: those with requests running or waiting, plus idle ones kept for reuse.
    keys: int
    #: Of those, the keys with requests running or waiting.
    busy_keys: int
    #: The most keys that ever had a gate at once.
    peak_keys: int
    #: Gates created so far (one each time a key without a gate is used).
    created: int
    #: Gates dropped so far because their key was idle.
    dropped: int
    #: Every key's counters summed (see :func:`total`): outcomes, times, current and peak counts.
    total: GateStatistics
