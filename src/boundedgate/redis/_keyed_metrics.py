"""A RedisKeyedGate's cluster-wide metrics: what every process pushes to one hash of the keyed gate.

Theory of operation. A :class:`~._keyed.RedisKeyedGate` is a cluster gate per key, each under its
own hash tag (``{name/key}``), and its keys are not listed in Redis: no script can sum the keys'
``stats`` hashes, and a scrape cannot read them all. What can be summed is what each process
knows of its own requests. So each process adds, once per ``interval``, what is new since its
last push to one hash of the keyed gate (``boundedgate:{NAME}:keyed:sums``):

* its counters by outcome (and ``unavailable``), from ``stats().total`` of its keyed gate object
  (every key's counters, dropped keys' included: they only grow), as ``n|<counter>`` fields;
* its histograms' bucket counts and sums from its records (``RedisKeyedGate.observe``), as the
  cluster gate's hash holds them (``histogram|outcome|le``, ``histogram|outcome|sum``).

Each push is one script that applies the increments once: it carries the process's serial
number, and a push sent again after a lost reply changes nothing (as ``_metrics.py``'s histogram
push). So the sums only grow, and every process reads the same sums: any worker's scrape reports
the counters of every process's pushed requests, and a scrape after another reports at least as
much. The gauges (running, queued, keys with a gate object) are what each live process last
pushed, kept per process with a deadline on Redis's clock (three intervals): a process that died
stops counting once its deadline passed; one that closes its keyed gate removes its own at once.
The limits are the template's (``max_running``, ``max_waiting``), as a per-key override is a
key's. The counts of a process's requests reach the sums at its next push (at most ``interval``
later, and as it closes): a scrape that needs its own process's requests in has
:meth:`KeyedFeed.refresh` push them first.

As for :class:`~._metrics.ClusterFeed`, a task on the loop pushes and reads every ``interval``,
``collect()`` takes the latest snapshot and never waits for Redis, and a failure keeps the last
snapshot (its age grows) and the increments not acknowledged for the next push.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
import weakref
from collections.abc import Mapping
from typing import Any, Protocol

from .._core import OUTCOMES, KeyedStatistics, RequestRecord
from .._driver import Observer, logger
from ._io import UNREACHABLE, pooled, text
from ._layout import agent_id
from ._metrics import ClusterSnapshot, HistogramKey, Measure, _cancel, _histograms, _items, _Local

__all__ = ("KeyedFeed", "keyed_keys")

#: The counters each process pushes: the outcomes, and the requests refused as unavailable.
COUNTERS: tuple[str, ...] = (*(outcome.name for outcome in OUTCOMES), "unavailable")

_NOW_MS = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
"""

# KEYS 1 sums, 2 pushed (agent -> serial of its last push applied), 3 live (agent -> "deadline
# running waiting keys"). ARGV 1 agent, 2 serial (0: no increments), 3 ttl ms, 4 live ms (0: this
# process leaves), 5 running, 6 waiting, 7 keys, then field, increment pairs.
_PUSH = (
    _NOW_MS
    + """
local live = redis.call('HGETALL', KEYS[3])
for i = 1, #live, 2 do
  if tonumber(string.match(live[i + 1], '^(%S+)')) <= ms then redis.call('HDEL', KEYS[3], live[i]) end
end
if tonumber(ARGV[4]) > 0 then
  local deadline = ms + tonumber(ARGV[4])
  redis.call('HSET', KEYS[3], ARGV[1], deadline .. ' ' .. ARGV[5] .. ' ' .. ARGV[6] .. ' ' .. ARGV[7])
else
  redis.call('HDEL', KEYS[3], ARGV[1])
end
local applied = 0
local last = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if tonumber(ARGV[2]) > last then
  for i = 8, #ARGV, 2 do
    if string.sub(ARGV[i], -4) == '|sum' then
      redis.call('HINCRBYFLOAT', KEYS[1], ARGV[i], ARGV[i + 1])
    else
      redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
    end
  end
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  applied = 1
end
for i = 1, 3 do
  if redis.call('EXISTS', KEYS[i]) == 1 then redis.call('PEXPIRE', KEYS[i], ARGV[3]) end
end
return applied
"""
)

# KEYS 1 sums, 2 live. The sums, and the live processes' gauges summed: running, waiting, keys.
_READ = (
    _NOW_MS
    + """
local running, waiting, keys = 0, 0, 0
local live = redis.call('HGETALL', KEYS[2])
for i = 1, #live, 2 do
  local d, r, w, k = string.match(live[i + 1], '^(%S+) (%S+) (%S+) (%S+)$')
  if d and tonumber(d) > ms then
    running = running + tonumber(r)
    waiting = waiting + tonumber(w)
    keys = keys + tonumber(k)
  end
end
return {redis.call('HGETALL', KEYS[1]), running, waiting, keys}
"""
)

_COUNTER = "n|"


class RedisKeyedGate(Protocol):
    """What the feed reads of a ``RedisKeyedGate`` (not imported: it imports this module)."""

    @property
    def name(self) -> str: ...
    @property
    def client(self) -> Any: ...
    @property
    def max_running(self) -> int | None: ...
    @property
    def max_waiting(self) -> int | None: ...
    @property
    def running(self) -> int: ...
    @property
    def waiting(self) -> int: ...
    @property
    def _settings(self) -> Mapping[str, Any]: ...
    def stats(self) -> KeyedStatistics: ...
    def observe(self, callback: Observer) -> None: ...
    def unobserve(self, callback: Observer) -> None: ...
    def __len__(self) -> int: ...


#: What a push brings the sums to: the histograms' buckets and the counters, cumulative.
_State = tuple[dict[HistogramKey, tuple[list[int], float]], dict[str, int]]


def keyed_keys(name: str) -> tuple[str, str, str]:
    """The keys of keyed gate ``name``'s metrics: the sums, each process's last push, the live gauges."""
    prefix = f"boundedgate:{{{name}}}:keyed:"
    return prefix + "sums", prefix + "pushed", prefix + "live"


class KeyedFeed:
    """A RedisKeyedGate's snapshot for the exports, pushed and read in the background (see the module).

    Args:
        gate: The keyed gate (held weakly: the feed stops once it is collected).
    """

    def __init__(self, gate: RedisKeyedGate) -> None:
        self._gate = weakref.ref(gate)
        #: The keyed gate's name, under which its series are exported.
        self.name = gate.name
        self._client = gate.client
        settings = gate._settings
        self._op_timeout: float = settings["op_timeout"]
        self._ttl_ms = max(1, math.ceil(settings["idle_ttl"] * 1000))
        self._template = (gate.max_running, gate.max_waiting)
        #: This process's id in the pushes (``host/pid/random``).
        self.agent = agent_id()
        #: Seconds between two pushes and reads (the shortest any export attached asked for).
        self.interval = 5.0
        #: The histograms' bounds (None: no export asked for histograms).
        self.bounds: tuple[float, ...] | None = None
        self._measure: Measure | None = None
        self.snapshot: ClusterSnapshot | None = None
        #: When the feed was made (``time.monotonic()``): the age of a snapshot never read.
        self.made = time.monotonic()
        #: Pushes or reads that failed (Redis out of reach, or it refused).
        self.failures = 0
        self._failing = False
        self._exports = 0
        self._observing = False
        self._local: _Local | None = None
        self._acked: _State = ({}, {})
        self._in_flight: tuple[int, _State, list[str]] | None = None
        self._serial = 0
        self._task: asyncio.Task[None] | None = None
        self._refreshing: asyncio.Future[None] | None = None

    # -- the exports ----------------------------------------------------------------------------

    def attach(self, histograms: tuple[float, ...] | None, interval: float, measure: Measure) -> None:
        """An export reads the feed from now on; ``histograms``: it reports them, with these bounds.

        Raises:
            ValueError: Another export of this keyed gate in this process keeps histograms with
                other bounds (the cluster's hash can sum only one set).
        """
        gate = self._gate()
        if histograms is not None:
            if self.bounds is None:
                self.bounds, self._measure = histograms, measure
                self._local = _Local(histograms)
            elif self.bounds != histograms:
                raise ValueError(
                    f"keyed gate {self.name!r} is exported with the histogram buckets {self.bounds} "
                    f"already; give every export of a cluster keyed gate the same buckets (every process "
                    f"too: the cluster's histograms are summed bucket by bucket)"
                )
        if gate is not None and not self._observing:
            gate.observe(self._record)  # the records feed the histograms and start the task
            self._observing = True
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
        gate = self._gate()
        if self._observing and gate is not None:
            gate.unobserve(self._record)
        self._observing = False
        self.bounds = self._local = self._measure = None
        # The counters pushed stay acknowledged (they are cumulative): the next export goes on from them.
        self._acked = ({}, self._acked[1])
        self._in_flight = None

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
        if task is None or task.done():
            self._start(asyncio.get_running_loop())

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        task = self._task
        if self._exports == 0 or (task is not None and not task.done() and not task.get_loop().is_closed()):
            return
        self._task = loop.create_task(self._run(), name=f"boundedgate metrics of keyed {self.name!r}")

    async def _run(self) -> None:
        while self._gate() is not None:
            await self.refresh()
            await asyncio.sleep(self.interval)

    async def refresh(self) -> None:
        """Push this process's new counts, then read the sums: the snapshot is current.

        Never raises for Redis: when it does not answer within ``op_timeout``, the snapshot keeps
        its last values (its age grows). Concurrent calls share one refresh.
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
            await self._push(leaving=False)
            snapshot = await pooled(functools.partial(self._read), self._op_timeout)
        except Exception as error:  # a metric read must never break the service
            self.failures += 1
            level = logging.DEBUG if self._failing and isinstance(error, UNREACHABLE) else logging.WARNING
            self._failing = True
            logger.log(level, "%s: could not push or read the keyed gate's metrics: %r", self.name, error)
            return
        self._failing = False
        self.snapshot = snapshot

    def _state(self, gate: RedisKeyedGate) -> _State:
        total = gate.stats().total
        counters = {name: int(getattr(total, name)) for name in COUNTERS}
        return ({} if self._local is None else self._local.copy()), counters

    def _increments(self, state: _State) -> list[str]:
        fields = [] if self._local is None else self._local.increments(self._acked[0])
        before = self._acked[1]
        for name, count in state[1].items():
            if count != before.get(name, 0):
                fields += (_COUNTER + name, str(count - before.get(name, 0)))
        return fields

    async def _push(self, *, leaving: bool) -> None:
        gate = self._gate()
        if gate is None:
            return
        if self._in_flight is None:
            state = self._state(gate)
            fields = self._increments(state)
            if fields:
                self._serial += 1
                self._in_flight = (self._serial, state, fields)
        serial, state, fields = self._in_flight or (0, self._acked, [])
        live_ms = 0 if leaving else max(1000, math.ceil(3000 * self.interval))
        gauges = (0, 0, 0) if leaving else (gate.running, gate.waiting, len(gate))
        sums, pushed, live = keyed_keys(self.name)
        call = functools.partial(
            self._client.eval, _PUSH, 3, sums, pushed, live,
            self.agent, serial, self._ttl_ms, live_ms, *gauges, *fields,
        )  # fmt: skip
        await pooled(call, self._op_timeout)
        if self._in_flight is not None and self._in_flight[0] == serial:
            self._acked = state
            self._in_flight = None

    async def _read(self) -> ClusterSnapshot:
        sums, _, live = keyed_keys(self.name)
        reply = await self._client.eval(_READ, 2, sums, live)
        items, running, waiting, keys = reply
        counters: dict[str, int] = {}
        histogram_items: list[tuple[Any, Any]] = []
        for field, value in _items(items):
            name = text(field)
            if name.startswith(_COUNTER):
                counters[name.removeprefix(_COUNTER)] = int(value)
            else:
                histogram_items.append((field, value))
        max_running, max_waiting = self._template
        return ClusterSnapshot(
            counters=counters,
            running=int(running),
            waiting=int(waiting),
            max_running=max_running,
            max_waiting=max_waiting,
            epoch=None,
            histograms=_histograms(histogram_items),
            keys=int(keys),
        )

    async def aclose(self) -> None:
        """Stop the background work, after one last push (this process's gauges leave the sums)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._exports:
            with contextlib.suppress(Exception):  # Redis out of reach, or refusing: closing goes on
                await self._push(leaving=True)
