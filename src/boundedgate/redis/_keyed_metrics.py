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

import functools
import math
from collections.abc import Mapping
from typing import Any, Protocol

from .._core import OUTCOMES, KeyedStatistics
from .._driver import Observer
from ._io import pooled, text
from ._layout import agent_id
from ._metrics import INCREMENTS, ClusterSnapshot, Feed, HistogramKey, _histograms, _items

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
  local first = 8
"""
    + INCREMENTS
    + """
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


class KeyedFeed(Feed):
    """A RedisKeyedGate's snapshot for the exports, pushed and read in the background (see the module).

    Args:
        gate: The keyed gate (held weakly: the feed stops once it is collected).
    """

    kind = "keyed gate"

    def __init__(self, gate: RedisKeyedGate) -> None:
        settings = gate._settings
        super().__init__(gate, gate.name, settings["op_timeout"])
        self._client = gate.client
        self._ttl_ms = max(1, math.ceil(settings["idle_ttl"] * 1000))
        self._template = (gate.max_running, gate.max_waiting)
        #: This process's id in the pushes (``host/pid/random``).
        self.agent = agent_id()
        self._observing = False
        self._acked: _State = ({}, {})
        self._in_flight: tuple[int, _State, list[str]] | None = None

    def _listen(self, on: bool) -> None:
        # The records feed the histograms, and the first one starts the task on the gate's loop.
        gate: RedisKeyedGate | None = self._gate()  # type: ignore[assignment]
        if gate is not None and on != self._observing:
            (gate.observe if on else gate.unobserve)(self._record)
            self._observing = on

    def _forget_histograms(self) -> None:
        # The counters pushed stay acknowledged (they are cumulative): the next export goes on from them.
        self._acked = ({}, self._acked[1])
        self._in_flight = None

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

    async def _push(self, *, leaving: bool = False) -> None:
        gate: RedisKeyedGate | None = self._gate()  # type: ignore[assignment]
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
