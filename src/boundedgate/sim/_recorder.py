"""Recorder: a gate's live traffic, recorded as a script that the simulator and the planner replay.

Plug it in as an observer (``gate.observe(recorder)``): the gate hands it the record of every
request it counts as the request ends, and :meth:`Recorder.jobs` turns those records into
:class:`Job` rows, in milliseconds from the first arrival, so that yesterday's production traffic
can choose tomorrow's ``max_running`` and ``max_waiting``.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import final

from .._core import RequestRecord
from ._script import Job, write_script

__all__ = ("Recorder",)

#: Among requests that arrived at one instant, the order a FIFO gate served them in: those that
#: started at once arrived first, then those it queued, then those it refused.
_RANK = {"allow": 0, "queue": 1, "reject": 2}


@final
class Recorder:
    """An observer that keeps every request's record, and writes them as a replayable script.

    Each job keeps the request's arrival, key, priority, declared cost, settled cost (as its
    ``actual_cost``, when a settle changed it), budget (its deadline, from arrival) and how long it
    held its slot (its ``service_ms``, at least 1 ms). A request that never ran (refused, expired,
    cancelled while queued) has no run time of its own: it is given one drawn, seeded, from those
    that ran, so that the replay carries the demand that was turned away too, which is what a
    larger gate would have had to serve. Requests that arrived at the same instant are written in
    the order the gate served them. What a record does not carry is lost: a ``max_wait`` queue
    budget, and requests refused uncounted (already cancelled or past their deadline on arrival).

    Records are kept in memory until :meth:`clear`: record a window of traffic, not a process's
    whole life.

    ::

        recorder = Recorder()
        gate.observe(recorder)
        ...  # serve traffic
        recorder.write("yesterday.csv")  # then: boundedgate plan --script yesterday.csv ...

    Args:
        seed: The seed of the run times drawn for requests that never ran.
    """

    __slots__ = ("_records", "_seed")

    def __init__(self, *, seed: int = 0) -> None:
        self._records: list[RequestRecord] = []
        self._seed = seed

    def __call__(self, record: RequestRecord) -> None:
        """Keep ``record`` (what a gate calls its observers with)."""
        self._records.append(record)

    def __len__(self) -> int:
        return len(self._records)

    @property
    def records(self) -> tuple[RequestRecord, ...]:
        """The records kept, in the order the requests ended."""
        return tuple(self._records)

    def clear(self) -> None:
        """Forget the records kept so far (to start a new window)."""
        self._records.clear()

    def jobs(self) -> list[Job]:
        """The recorded requests as a script, in order of arrival, in ms from the first arrival.

        Returns:
            One :class:`Job` per record, with ids ``r1``, ``r2``, ... in order of arrival.

        Raises:
            ValueError: Records were kept, but none of their requests ran: there is no run time
                to give them.
        """
        if not self._records:
            return []
        ran = sorted(_ms(r.ran) for r in self._records if r.ran is not None)
        if not ran:
            raise ValueError("no recorded request ran: there is no run time to replay them with")
        draw = random.Random(self._seed)
        ordered = sorted(self._records, key=_served_order)
        origin = ordered[0].arrival
        jobs = []
        for number, record in enumerate(ordered, start=1):
            arrival = record.arrival
            budget = None if math.isinf(record.deadline) else max(1, _ms(record.deadline - arrival))
            jobs.append(
                Job(
                    f"r{number}",
                    arrival_ms=_ms(arrival - origin, floor=0),
                    service_ms=_ms(record.ran) if record.ran is not None else draw.choice(ran),
                    budget_ms=budget,
                    priority=record.priority,
                    cost=record.cost,
                    actual_cost=record.settled if record.settled != record.cost else None,
                    key="" if record.key is None else str(record.key),
                )
            )
        return jobs

    def write(self, path: str | Path) -> None:
        """Write :meth:`jobs` as a script: CSV, or JSON when ``path`` ends in ``.json``.

        Raises:
            ValueError: As :meth:`jobs`.
            OSError: The file cannot be written.
        """
        write_script(self.jobs(), path)

    def __repr__(self) -> str:
        return f"<Recorder of {len(self._records)} requests>"


def _ms(seconds: float, floor: int = 1) -> int:
    return max(floor, round(seconds * 1000))


def _served_order(record: RequestRecord) -> tuple[float, int, float]:
    # Among queued requests, the earlier one got its slot (or left the queue) first.
    served = record.ended if record.started is None else record.started
    return (record.arrival, _RANK[record.decision], served)
