"""The cluster's counts for the metrics exports, read from Redis in the background.

Theory of operation. A scrape of a service under ``uvicorn --workers N`` lands on one worker at
random, so what it reports must not depend on which worker answers: a process's own counters
would jump from one worker's values to another's (not monotonic: ``rate()`` breaks). What every
worker can read alike is Redis. So the exports (:mod:`boundedgate.prometheus`,
:mod:`boundedgate.otel`) report a cluster gate from a :class:`ClusterSnapshot`:

* its counts and gauges are the cluster's, kept by the scripts in the gate's ``stats`` hash (the
  endings by outcome, the leases reclaimed...), with the holders and waiters there are and the
  limits in force: nothing is added to any admission, release or cancellation for them;
* its histograms are the cluster's too, summed in one hash of the gate (``boundedgate:{NAME}:hist``,
  bucket counts and sums by histogram and outcome): each process keeps its own requests' records
  in buckets and adds what is new to that hash once per ``interval`` (and as it closes), in one
  idempotent script per push, never per request.

One :class:`ClusterFeed` per gate object, made by the first export, does both, in a task on the
gate's event loop: every ``interval`` it pushes this process's new bucket counts, then reads the
cluster's state in one ``MULTI`` (five reads of the gate's keys) into a new snapshot. ``collect()``
only reads the latest snapshot and never waits for Redis; its age is exported, so a stale read
shows. :meth:`ClusterFeed.refresh` does the same step at once, for an ``async`` route that serves
the scrape: then every scrape reads Redis after the one before it, so whichever worker answers,
each counter is at least what the previous scrape reported (Redis only adds to them).

When Redis does not answer, the snapshot keeps its last values and its age grows; the records
not pushed yet wait for the next push (a push whose reply was lost is sent again with the same
serial number, which the script applies once). The task starts on the gate's loop at the first
refresh or record there, and stops with the gate's ``aclose()``, with the last export's
``close()``, or once the gate is collected.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._core import RequestRecord
from .._driver import Observers, logger
from ._io import UNREACHABLE, pooled, text
from ._layout import KEY_NAMES, gate_keys

if TYPE_CHECKING:
    from ._process import ProcessSide

__all__ = (
    "INCREMENTS",
    "ClusterFeed",
    "ClusterSnapshot",
    "Feed",
    "HistogramKey",
    "Measure",
    "bucketed",
    "hist_keys",
)

#: A histogram's series: the histogram's name (OpenTelemetry's) and the outcome ("" for none).
HistogramKey = tuple[str, str]

#: What the export measures of a record: the value of each histogram series it feeds.
Measure = Callable[[RequestRecord], Iterable[tuple[HistogramKey, float]]]

#: Lua: add ARGV's (field, increment) pairs from ARGV[first] on to the hash KEYS[1]; a field ending
#: in ``|sum`` holds a float. Every push's script runs it (this module's and the keyed gate's).
INCREMENTS = """
for i = first, #ARGV, 2 do
  if string.sub(ARGV[i], -4) == '|sum' then
    redis.call('HINCRBYFLOAT', KEYS[1], ARGV[i], ARGV[i + 1])
  else
    redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
"""

# KEYS 1 hist (field "histogram|outcome|le" -> count, "histogram|outcome|sum" -> seconds), 2 pushed
# (agent -> the serial of its last push applied). ARGV 1 agent, 2 serial, 3 ttl ms, then field,
# increment pairs. A push is applied once: sent again after a lost reply, it changes nothing.
_PUSH = (
    """
local last = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if tonumber(ARGV[2]) <= last then return 0 end
local first = 4
"""
    + INCREMENTS
    + """
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
"""
)


# KEYS 1 stats, 2 holders, 3 waiters, 4 meta, 5 hist. One script rather than a MULTI, which a
# cluster client may refuse (redis-py 5.0's does): EVAL is routed by its keys, all in the gate's slot.
_READ = """
return {
  redis.call('HGETALL', KEYS[1]),
  redis.call('ZCARD', KEYS[2]),
  redis.call('ZCARD', KEYS[3]),
  redis.call('HMGET', KEYS[4], 'Cset', 'Qset', 'C', 'Q', 'epoch'),
  redis.call('HGETALL', KEYS[5]),
}
"""


def hist_keys(name: str) -> tuple[str, str]:
    """The keys of gate ``name``'s cluster histograms: the counts, and each process's last push."""
    prefix = gate_keys(name)[0].removesuffix("meta")
    return prefix + "hist", prefix + "pushed"


def _le(bound: float) -> str:
    return "+Inf" if bound == math.inf else repr(bound)


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """One read of a cluster gate's state in Redis, as the exports report it."""

    #: The cluster's counters (the gate's ``stats`` hash: endings by outcome, reclaimed...).
    counters: dict[str, int]
    #: Holders and waiters in Redis when it was read.
    running: int
    waiting: int
    #: The limits in force (set at runtime, else the latest admission's; the constructor's before any;
    #: a keyed gate's template's, None: not limited).
    max_running: int | None
    max_waiting: int | None
    #: The epoch of the gate's state in Redis (None: no state there yet).
    epoch: str | None
    #: The cluster's histograms: by series, the count in each bucket by its upper bound as text
    #: (``"0.01"`` ... ``"+Inf"``; not cumulative) and the sum of the values.
    histograms: dict[HistogramKey, tuple[dict[str, int], float]]
    #: For a keyed gate: the keys with a gate object in the live processes, summed (None otherwise).
    keys: int | None = None
    #: When it was read (``time.monotonic()``).
    read_at: float = field(default_factory=time.monotonic)


class _Local:
    """The records of this process in buckets, cumulative: what it adds to the cluster's hash."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.series: dict[HistogramKey, tuple[list[int], float]] = {}

    def add(self, key: HistogramKey, value: float) -> None:
        counts, total = self.series.get(key) or ([0] * (len(self.bounds) + 1), 0.0)
        index = next((i for i, bound in enumerate(self.bounds) if value <= bound), len(self.bounds))
        counts[index] += 1
        self.series[key] = (counts, total + value)

    def copy(self) -> dict[HistogramKey, tuple[list[int], float]]:
        return {key: (list(counts), total) for key, (counts, total) in self.series.items()}

    def increments(self, since: dict[HistogramKey, tuple[list[int], float]]) -> list[str]:
        """The hash's fields and increments from ``since`` to now, flat (field, increment, ...)."""
        flat: list[str] = []
        bounds = (*self.bounds, math.inf)
        for (histogram, outcome), (counts, total) in self.series.items():
            before, before_total = since.get((histogram, outcome)) or ([0] * len(counts), 0.0)
            prefix = f"{histogram}|{outcome}|"
            for bound, now, then in zip(bounds, counts, before, strict=True):
                if now != then:
                    flat += (prefix + _le(bound), str(now - then))
            if total != before_total:
                flat += (prefix + "sum", repr(total - before_total))
        return flat


class Feed:
    """What the exports read of a cluster gate: a snapshot, pushed and read by a task of its own.

    The exports' side (:meth:`attach`, :meth:`detach`, :meth:`age`, :meth:`refresh`) and the
    task's life are the same for a cluster gate (:class:`ClusterFeed`) and a cluster keyed gate
    (``_keyed_metrics.KeyedFeed``); each says what it pushes (:meth:`_push`), how it reads
    (:meth:`_read`), when it listens to the gate's records, and where its task may run.

    Args:
        gate: The gate (held weakly: the feed stops once it is collected).
        name: The gate's name, under which its series are exported.
        op_timeout: Seconds a push or a read may take.
    """

    #: The feed's gate as its messages name it.
    kind = "gate"

    def __init__(self, gate: object, name: str, op_timeout: float) -> None:
        self._gate = weakref.ref(gate)
        #: The gate's name.
        self.name = name
        self._op_timeout = op_timeout
        #: Seconds between two refreshes (the shortest any export attached asked for).
        self.interval = 5.0
        #: The histograms' bounds (None: no export asked for histograms), and what they measure.
        self.bounds: tuple[float, ...] | None = None
        self._measure: Measure | None = None
        self.snapshot: ClusterSnapshot | None = None
        #: When the feed was made (``time.monotonic()``): the age of a snapshot never read.
        self.made = time.monotonic()
        #: Refreshes that failed (Redis out of reach, or it refused).
        self.failures = 0
        self._failing = False  # the last refresh failed
        self._exports = 0
        self._local: _Local | None = None
        self._serial = 0
        self._task: asyncio.Task[None] | None = None
        self._refreshing: asyncio.Future[None] | None = None

    # -- the exports ----------------------------------------------------------------------------

    def attach(self, histograms: tuple[float, ...] | None, interval: float, measure: Measure) -> None:
        """An export reads the feed from now on; ``histograms``: it reports them, with these bounds.

        ``measure`` gives the value of each histogram series a record feeds.

        Raises:
            ValueError: Another export of this gate in this process keeps histograms with other
                bounds (the cluster's hash can sum only one set).
        """
        if histograms is not None:
            if self.bounds is None:
                self.bounds, self._measure = histograms, measure
                self._local = _Local(histograms)
            elif self.bounds != histograms:
                raise ValueError(
                    f"{self.kind} {self.name!r} is exported with the histogram buckets {self.bounds} "
                    f"already; give every export of a cluster {self.kind} the same buckets (every process "
                    f"too: the cluster's histograms are summed bucket by bucket)"
                )
        self._listen(True)
        self.interval = min(self.interval, interval) if self._exports else interval
        self._exports += 1
        with contextlib.suppress(RuntimeError):  # no loop runs here: the first record or refresh starts it
            self._start(asyncio.get_running_loop())

    def detach(self) -> None:
        """An export stopped reading: the last one stops the background work (from any thread)."""
        self._exports = max(0, self._exports - 1)
        if self._exports:
            return
        task, self._task = self._task, None
        if task is not None:
            _cancel(task)
        self._listen(False)
        self.bounds = self._local = self._measure = None  # the next export may ask for other buckets
        self._forget_histograms()

    def age(self) -> float:
        """Seconds since the last successful read (since the feed was made, before one)."""
        snapshot = self.snapshot
        return time.monotonic() - (self.made if snapshot is None else snapshot.read_at)

    # -- the background work ----------------------------------------------------------------------

    def _record(self, record: RequestRecord) -> None:
        local, measure = self._local, self._measure
        if local is not None and measure is not None:
            for key, value in measure(record):
                local.add(key, value)
        task = self._task
        if task is None or task.done():  # not started yet, or its loop was closed: start it here
            self._start(asyncio.get_running_loop())

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        task = self._task
        if self._exports == 0 or (task is not None and not task.done() and not task.get_loop().is_closed()):
            return
        if self._may_run_on(loop):
            self._task = loop.create_task(
                self._run(), name=f"boundedgate metrics of {self.kind} {self.name!r}"
            )

    async def _run(self) -> None:
        while self._gate() is not None:
            await self.refresh()
            await asyncio.sleep(self.interval)

    async def refresh(self) -> None:
        """Push this process's new counts, then read the cluster's: the snapshot is current.

        Never raises for Redis: when it does not answer within the gate's ``op_timeout``, the
        snapshot keeps its last values (its age grows). Concurrent calls share one refresh.
        """
        running = self._refreshing
        if running is not None:
            await asyncio.shield(running)
            return
        loop = asyncio.get_running_loop()
        self._refreshing = future = loop.create_future()
        try:
            self._start(loop)
            await self._refresh()
        finally:
            self._refreshing = None
            future.set_result(None)

    async def _refresh(self) -> None:
        try:
            await self._push()
            snapshot = await pooled(self._read, self._op_timeout)
        except Exception as error:  # a metric read must never break the service
            self.failures += 1
            # Once per outage, and for every failure that is not one (a bug, a refusal).
            level = logging.DEBUG if self._failing and isinstance(error, UNREACHABLE) else logging.WARNING
            self._failing = True
            logger.log(
                level, "%s: could not push or read the cluster's counts for the metrics: %r", self.name, error
            )
            return
        self._failing = False
        self.snapshot = snapshot

    async def aclose(self) -> None:
        """Stop the background work, after one last push of this process's counts."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._exports:
            with contextlib.suppress(Exception):  # Redis out of reach, or refusing: closing goes on
                await self._push(leaving=True)

    # -- what each feed does its own way ----------------------------------------------------------

    def _listen(self, on: bool) -> None:
        """Hear the gate's records from now on (``on``), or no longer."""
        raise NotImplementedError

    def _forget_histograms(self) -> None:
        """The last export left: forget what was pushed of the histograms (the next may differ)."""
        raise NotImplementedError

    def _may_run_on(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether the task may start on ``loop`` (a cluster gate's task runs on the gate's loop)."""
        return True

    async def _push(self, *, leaving: bool = False) -> None:
        """Add this process's new counts to the cluster's (``leaving``: the last push, at closing)."""
        raise NotImplementedError

    async def _read(self) -> ClusterSnapshot:
        """Read the cluster's counts into a snapshot."""
        raise NotImplementedError


class ClusterFeed(Feed):
    """A cluster gate's snapshot for the exports, refreshed in the background (see the module).

    Args:
        gate: The gate (held weakly: the feed stops once it is collected).
        side: Its process's side: its client, keys, loop and settings.
        observers: The gate's observers, which the feed joins while an export keeps histograms.
    """

    def __init__(self, gate: object, side: ProcessSide, observers: Observers) -> None:
        super().__init__(gate, side.name, side.op_timeout)
        self._side = side
        self._observers = observers
        self._listening = False
        self._acked: dict[HistogramKey, tuple[list[int], float]] = {}
        # A push sent but not acknowledged: its serial, what it brings the hash to, its fields.
        self._in_flight: tuple[int, dict[HistogramKey, tuple[list[int], float]], list[str]] | None = None

    def _listen(self, on: bool) -> None:
        # Only the histograms need the records: without them, the gate builds none for the feed.
        on = on and self._local is not None
        if on != self._listening:
            (self._observers.add if on else self._observers.remove)(self._record)
            self._listening = on

    def _forget_histograms(self) -> None:
        self._acked = {}
        self._in_flight = None

    def _may_run_on(self, loop: asyncio.AbstractEventLoop) -> bool:
        side = self._side
        if side.loop is not loop:
            if side.loop is not None and not side.loop.is_closed() and (side.holders or side.waiters):
                return False  # the gate is in use on another loop: its own refreshes start it there
            side.bind()
        return True

    async def _push(self, *, leaving: bool = False) -> None:
        local = self._local
        if local is None or (leaving and (self._side.loop is None or self._side.loop.is_closed())):
            return
        if self._in_flight is None:
            fields = local.increments(self._acked)
            if not fields:
                return
            self._serial += 1
            self._in_flight = (self._serial, local.copy(), fields)
        serial, state, fields = self._in_flight
        side = self._side
        hist, pushed = hist_keys(side.name)
        ttl = side.common[5]  # the gate's idle TTL, in ms: the histograms live as its counters do
        call = functools.partial(side.client.eval, _PUSH, 2, hist, pushed, side.agent, serial, ttl, *fields)
        await pooled(call, side.op_timeout)
        self._acked = state
        self._in_flight = None

    async def _read(self) -> ClusterSnapshot:
        side = self._side
        return await _read_gate(side.client, side.name, side.max_running, side.max_waiting)


def _cancel(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` from whichever thread: at once on its loop's, else by its loop."""
    loop = task.get_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        task.cancel()
    elif not loop.is_closed():
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: the task went with it
            loop.call_soon_threadsafe(task.cancel)


async def _read_gate(client: Any, name: str, max_running: int, max_waiting: int | None) -> ClusterSnapshot:
    """Read gate ``name``'s counters, counts, limits and histograms at one moment (one script)."""
    keys = dict(zip(KEY_NAMES, gate_keys(name), strict=True))
    hist, _ = hist_keys(name)
    reply = await client.eval(_READ, 5, keys["stats"], keys["holders"], keys["waiters"], keys["meta"], hist)
    counters, running, waiting, limits, histograms = reply
    c_set, q_set, c_used, q_used, epoch = (None if value is None else text(value) for value in limits)
    c = c_set or c_used
    q = q_set or q_used
    if q is not None:
        max_waiting = None if int(q) < 0 else int(q)
    return ClusterSnapshot(
        counters={text(k): int(v) for k, v in _items(counters)},
        running=int(running),
        waiting=int(waiting),
        max_running=max_running if c is None else int(c),
        max_waiting=max_waiting,
        epoch=epoch,
        histograms=_histograms(_items(histograms)),
    )


def _items(reply: Any) -> Sequence[tuple[Any, Any]]:
    if isinstance(reply, dict):
        return list(reply.items())
    return [(reply[i], reply[i + 1]) for i in range(0, len(reply), 2)]


def _histograms(items: Sequence[tuple[Any, Any]]) -> dict[HistogramKey, tuple[dict[str, int], float]]:
    """The hash's fields by series: ``{(histogram, outcome): ({le: count}, sum)}``."""
    raw: dict[HistogramKey, tuple[dict[str, int], list[float]]] = {}
    for key, value in items:
        histogram, outcome, le = text(key).rsplit("|", 2)
        counts, total = raw.setdefault((histogram, outcome), ({}, [0.0]))
        if le == "sum":
            total[0] = float(text(value))
        else:
            counts[le] = int(value)
    return {key: (counts, total[0]) for key, (counts, total) in raw.items()}


def bucketed(
    snapshot: ClusterSnapshot, bounds: tuple[float, ...]
) -> dict[HistogramKey, tuple[list[tuple[str, int]], float]]:
    """The snapshot's histograms as cumulative ``(le, count)`` pairs ending at ``+Inf``, and sums."""
    out: dict[HistogramKey, tuple[list[tuple[str, int]], float]] = {}
    for key, (counts, total) in snapshot.histograms.items():
        pairs: list[tuple[str, int]] = []
        running = 0
        for bound in (*bounds, math.inf):
            le = _le(bound)
            running += counts.get(le, 0)
            pairs.append((le, running))
        out[key] = (pairs, total)
    return out
