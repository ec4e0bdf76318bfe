"""The Lua scripts against the model: every decision a real Redis takes, compared with the pure core's.

A Hypothesis state machine sends ``admit``, ``release``, ``cancel`` and ``sync`` with ids of its
choosing, straight to the scripts (no RedisGate in between), and makes leases and waiters' places
lapse and waiters' deadlines pass. After every step the replies and the whole state in Redis
(holders with their tokens, the queue in order, outcomes, counters) must equal a reference model,
and the running holders and the queue must equal what :class:`boundedgate._core.GateState` decides
for the same events, as long as no holder has been counted again after a lapse or after Redis
forgot the gate (the core never runs more than C; Redis must, then).

A sync's reply can be lost (it ran in Redis, and its process never heard): the next sync must
still report a holder counted again (its process sends the token it was last told).

Time is made deterministic without a hook in the scripts: requests carry no deadline and leases and
places last an hour, so the server's clock decides nothing; "a lease lapses" is its expiry score set
to the past (exactly what the clock passing it looks like to the scripts), and "a deadline passes"
is the waiter's stored deadline and due time set to the past. The next script's sweep acts on them.

Rate limits are driven the same way: a bucket gains one token an hour, so the few seconds an example
takes on the server's clock never make a token (every decision compares whole hours: what the core
decides at a whole hour, Redis decides a few seconds later, alike), and "an hour passes" is every
bucket's stored empty moment moved an hour back, which is exactly what the clock passing an hour
looks like to the scripts. The model keeps the core's own buckets (:class:`TokenBucket`) on the
examples' virtual clock; replies, starts, the queue and every balance must agree.

Deadline-feasible admission is drawn on or off per example: the arrivals of a feasible gate send
their deadline, its releases keep the pace in Redis, and every refusal must be the core's. A run's
length on the server's clock is its holder's start as Redis noted it, which "hours pass" moves back
as it moves the deadlines: the pace is the model's within the few seconds an example takes (and
those only ever push Redis towards refusing, where the hours and the half hours never tie).

Limits move as in process: ``limits.lua`` (RedisGate.set_limits) against ``GateState.set_limits``,
and ``adapt.lua`` (the cluster's adaptive controller) against the core's :class:`AdaptiveLimit`,
whose window is an hour here: an hour passing moves the cluster's last cut and growth back too.
The process's controller hears overloads and samples requests; the cuts it makes the cluster must
make, to the bit of its real-valued C. Growth follows the cluster's own documented rule (its peak
since its last change of C, one growth a window), which the model states; the core then starts
and queues by the cluster's C.
"""

from __future__ import annotations

import contextlib
import math
import uuid
from types import EllipsisType
from typing import Any, Literal

import pytest
import redis
import redis.exceptions
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from boundedgate import Adaptive, RateLimit, Status
from boundedgate._core import AdaptiveLimit, GateState, Ticket, TokenBucket
from boundedgate._core._state import FEASIBLE_RUNS
from boundedgate.redis import _buckets, _scripts
from boundedgate.redis._layout import gate_keys, wake_prefix

from .servers import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]

HOUR = 3_600_000  # ms: leases, places and outcomes outlive any example
AGENT = "model/1/0"
WAIT = st.sampled_from([True, True, True, False])  # mostly admit(), which queues; try_admit() less
SCRIPTS = (
    _scripts.ADMIT,
    _scripts.RELEASE,
    _scripts.CANCEL,
    _scripts.SYNC,
    _scripts.RATE,
    _scripts.LIMITS,
    _scripts.ADAPT,
)
HOUR_S = HOUR / 1000  # a bucket's period, in the core's seconds: one token an hour
#: How the core ends a ticket released as the script is told (None: completed or late, by its
#: deadline), and one whose lease Redis reclaimed: neither ended normally, nor moves the pace.
ENDED_AS: dict[str, Status | None] = {"completed": None, "late": None, "failed": Status.FAILED}
RECLAIMED = Status.FAILED


@st.composite
def rate_limits(draw: st.DrawFn) -> list[RateLimit]:
    """None, one or two rate limits of one token an hour, counted in requests or in tokens."""
    limits = []
    for i in range(draw(st.integers(0, 2))):
        burst = draw(st.integers(1, 4))
        floor = draw(st.one_of(st.none(), st.integers(-4, 0)))
        unit: Literal["requests", "tokens"] = draw(st.sampled_from(["requests", "tokens"]))
        limits.append(RateLimit(1 / HOUR_S, burst, unit, floor, f"b{i + 1}"))
    return limits


@st.composite
def adaptive_settings(draw: st.DrawFn) -> Adaptive:
    """An adaptive controller whose window is an hour, and whose every value is a short binary fraction.

    A cut multiplies by 1/2 or 3/4 and growth adds 1/2, 1 or a quarter of C, so the controller's
    real C, in Python and in Lua, is exact: the two decide alike to the last bit. The floor is 1
    and the ceiling at least 4, so no limit the test sets (1 to 4) is beyond the bounds: there the
    core's window clamps C without a proposal, a case the cluster never hears of.
    """
    return Adaptive(
        floor=1,
        ceiling=draw(st.integers(4, 6)),
        decrease=draw(st.sampled_from([0.5, 0.75])),
        increase=draw(st.sampled_from([0.5, 1.0])),
        increase_ratio=draw(st.sampled_from([0.0, 0.25])),
        window=HOUR_S,
        min_samples=1,
        max_limit_factor=draw(st.sampled_from([1.0, 2.0])),
    )


#: How a request ended, by its code in the low 4 bits of its score in ``outcomes`` (prelude.lua's ENDINGS).
ENDINGS = dict(
    enumerate(("released", "reclaimed", "expired", "lapsed", "cancelled", "disconnected", "unavailable"), 1)
)


class Model:
    """What the scripts must do, written plainly: the gate's state in Redis, as Python values."""

    def __init__(self, c: int, q: int, limits: list[RateLimit], adaptive: Adaptive, feasible: bool) -> None:
        self.c0, self.q0 = c, q  # the processes' own: in force until a runtime limit is set
        self.limits = limits
        self.feasible = feasible
        self.adaptive = adaptive
        self.now = 0.0  # the buckets' clock, in seconds: whole hours
        self.forget()

    def affordable(self, cost: float) -> bool:
        return all(b.covers(b.need(cost), self.now) for b in self.buckets)

    def take(self, permit_id: str) -> None:
        for bucket in self.buckets:
            bucket.take(bucket.need(self.costs.get(permit_id, 0.0)), self.now)

    def ready_behind(self, cost: float) -> tuple[float, list[int]]:
        """When an arrival's tokens could come behind the queue, and the buckets that decide it.

        The first of them decides in the core. On the server's clock a tie may go to another: a
        bucket lowered to exactly its balance was lowered by the sliver the clock had added.
        """
        tokens = sum(self.costs.get(i, 0.0) for i in self.waiters)
        due = {
            number: bucket.supplied_at(
                (len(self.waiters) if bucket.per_request else tokens) + bucket.need(cost), self.now
            )
            for number, bucket in enumerate(self.buckets, 1)
        }
        latest = max(due.values())
        return latest, [number for number, at in due.items() if at == latest]

    def forget(self) -> None:
        """Start empty, as when Redis loses the gate (a restart without persistence, a failover)."""
        self.seq = 0
        self.c, self.q = self.c0, self.q0  # the limits set at runtime are forgotten too
        self.holders: dict[str, int] = {}  # id -> token
        self.waiters: list[str] = []  # FIFO
        self.order: dict[str, int] = {}  # waiter id -> its arrival sequence
        self.outcome: dict[str, str] = {}
        self.counters: dict[str, int] = {}
        self.lapsed: set[str] = set()  # holders whose lease expiry was put in the past
        self.due: dict[str, str] = {}  # waiters whose place or deadline was put in the past -> how
        self.started: list[str] = []  # waiters granted a slot by the last sweep, in order
        self.buckets = [TokenBucket(limit) for limit in self.limits]  # full: Redis forgot them too
        self.costs: dict[str, float] = {}  # the declared costs of waiters and holders
        self.deadlines: dict[str, float] = {}  # the waiters' deadlines on the buckets' clock
        # The cluster's adaptive controller (adapt.lua): its last cut and growth (the buckets'
        # clock), its C as a real number, and the peak running since it last changed C.
        self.cut_at: float | None = None
        self.grew_at: float | None = None
        self.cvalue: float | None = None
        self.wpeak = 0
        self.pause_until = -math.inf  # no start before this (a provider's rate-limit reset)
        self.pace: float | None = None  # the mean run (s) of a feasible gate, newest weighing 0.2 / C
        self.since: dict[str, float] = {}  # when each holder started (the buckets' clock)

    def count(self, field: str, n: int = 1) -> None:
        self.counters[field] = self.counters.get(field, 0) + n

    def peak(self, field: str, value: int) -> None:
        if value > self.counters.get(field, 0):
            self.counters[field] = value

    def grant(self, permit_id: str) -> int:
        self.seq += 1
        self.holders[permit_id] = self.seq
        self.since[permit_id] = self.now
        self.take(permit_id)
        self.count("admitted")
        self.peak("peak_running", len(self.holders))
        self.wpeak = max(self.wpeak, len(self.holders))
        return self.seq

    def enqueue(self, permit_id: str) -> int:
        self.seq += 1
        self.waiters.append(permit_id)
        self.order[permit_id] = self.seq
        self.peak("peak_waiting", len(self.waiters))
        return self.seq

    def drop_waiter(self, permit_id: str, how: str) -> None:
        self.waiters.remove(permit_id)
        self.costs.pop(permit_id, None)
        self.due.pop(permit_id, None)
        self.outcome[permit_id] = how
        self.count(how)

    def tick(self) -> tuple[list[str], list[str]]:
        """The sweep every script runs; returns the reclaimed holders and the dropped waiters."""
        reclaimed = sorted(self.lapsed)
        for permit_id in reclaimed:
            del self.holders[permit_id]
            self.costs.pop(permit_id, None)
            self.outcome[permit_id] = "reclaimed"
            self.count("reclaimed")
        self.lapsed.clear()
        dropped = sorted(self.due)
        for permit_id in dropped:
            self.drop_waiter(permit_id, self.due[permit_id])
        self.started = []
        while len(self.holders) < self.c and self.waiters and not self.paused():
            if not self.affordable(self.costs.get(self.waiters[0], 0.0)):
                break  # the head waits for its tokens, and everyone behind it
            head = self.waiters.pop(0)
            self.grant(head)
            self.started.append(head)
        return reclaimed, dropped

    def admit(
        self, permit_id: str, wait: bool, cost: float = 0.0, deadline: float = math.inf
    ) -> tuple[int, str]:
        self.tick()
        if permit_id in self.holders:
            return 1, str(self.holders[permit_id])
        if permit_id in self.waiters:
            return 2, str(self.order[permit_id])
        if permit_id in self.outcome:
            return 4, self.outcome[permit_id]
        free = len(self.holders) < self.c and not self.waiters and not self.paused()
        if free and self.affordable(cost):
            if cost and self.buckets:
                self.costs[permit_id] = cost
            return 1, str(self.grant(permit_id))
        if self.buckets and (free or wait):
            due, limiting = self.ready_behind(cost)
            if (not wait) or due >= deadline:
                self.count("rate_limited")
                due = max(due, self.pause_until)  # its retry_after counts to the pause's end if later
                return 5, f"{due - self.now}:{','.join(map(str, limiting))}"
        if wait and self.feasible:
            refused = self.infeasible(deadline)
            if refused is not None:
                self.count("infeasible")
                return 6, refused
        if wait and (self.q < 0 or len(self.waiters) < self.q):
            if cost and self.buckets:
                self.costs[permit_id] = cost
            self.deadlines[permit_id] = deadline
            return 2, str(self.enqueue(permit_id))
        self.count("rejected")
        return 3, str(self.pause_left())  # the seconds of a pause in force still to run

    def infeasible(self, deadline: float) -> str | None:
        """Feasible admission's refusal of an arrival that would queue: 'wait:budget' (s), or None."""
        pace = self.pace
        start = max(self.now, self.pause_until)
        if pace is not None:
            start += (max(0, len(self.holders) - self.c) + len(self.waiters) + 1) * pace / self.c
        if start >= deadline or (pace is not None and start + FEASIBLE_RUNS * pace >= deadline):
            return f"{start - self.now}:{deadline - self.now}"
        return None

    def release(self, permit_id: str, how: str) -> int:
        removed = 0
        if self.outcome.get(permit_id) != "released":
            removed = int(self.holders.pop(permit_id, None) is not None)
            if removed and self.feasible and how in ("completed", "late"):
                ran = self.now - self.since[permit_id]
                self.pace = ran if self.pace is None else self.pace + 0.2 / self.c * (ran - self.pace)
            self.costs.pop(permit_id, None)
            self.lapsed.discard(permit_id)
            self.outcome[permit_id] = "released"
            self.count(how)
        return removed

    def cancel(self, permit_id: str, how: str) -> int:
        removed = 0
        if permit_id not in self.outcome:
            if permit_id in self.waiters:
                self.drop_waiter(permit_id, how)
                removed = 1
            elif permit_id in self.holders:
                del self.holders[permit_id]
                cost = self.costs.pop(permit_id, 0.0)
                for bucket in self.buckets:  # a grant never used gives its tokens back
                    bucket.give(bucket.need(cost), self.now)
                self.lapsed.discard(permit_id)
                self.outcome[permit_id] = how
                self.count("admitted", -1)
                self.count(how)
                removed = 2
            else:
                self.outcome[permit_id] = how
                self.count(how)  # it arrived at its process, which counts it: so does the cluster
        return removed

    def set_limits(self, c: int | None, q: int | None) -> None:
        """The cluster's C and/or Q from now on (None: as it is); the sweep then hands on free slots."""
        changed = (c is not None and c != self.c) or (q is not None and q != self.q)
        self.c = self.c if c is None else c
        self.q = self.q if q is None else q
        if changed:
            self.count("limit_changes")  # as the core counts: a call that changes a limit

    def paused(self) -> bool:
        return self.now < self.pause_until

    def pause_left(self) -> float:
        return max(0.0, self.pause_until - self.now)

    def slot_free(self) -> bool:
        return len(self.holders) < self.c and not self.waiters and not self.paused()

    def pause(self, seconds: float) -> None:
        """A rate-limit reset: no start before now + seconds; a pause in force is never shortened.

        Counted in ``pauses`` whether or not it extends the pause in force: the cluster counts
        every pause it is sent, where the core counts only one that begins or extends a pause.
        """
        # A tie extends it on the server's clock, which has moved on by the time the second comes.
        self.pause_until = max(self.pause_until, self.now + seconds)
        self.count("pauses")

    def value(self) -> float:
        """The controller's C as a real number: its own, unless C was set otherwise since."""
        if self.cvalue is not None and math.floor(self.cvalue) == self.c:
            return self.cvalue
        return float(self.c)

    def change(self, value: float) -> None:
        self.cvalue = value
        self.wpeak = len(self.holders)  # before the sweep: lapsed leases not reclaimed yet count
        if math.floor(value) != self.c:
            self.c = math.floor(value)
            self.count("limit_changes")

    def adapt(self, what: str, factor: float) -> int:
        """adapt.lua's rule (docs/adaptive.md, "A cluster gate"): a cut, or growth; 1 if applied."""
        settings = self.adaptive
        window = settings.window
        value = self.value()
        if what in ("overloaded", "cut"):
            if self.cut_at is None or self.now - self.cut_at >= window:
                # An overload cuts the C in force, as the core's signal(); a window, its real C.
                base = math.floor(value) if what == "overloaded" else value
                self.change(max(float(settings.floor), base * factor))
                self.cut_at = self.now
                self.count("cuts")
                return 1
            self.count("suppressed")
            return 0
        quiet = all(at is None or self.now - at >= window for at in (self.cut_at, self.grew_at))
        step = max(settings.increase, settings.increase_ratio * value)
        grown = min(value + step, settings.max_limit_factor * self.wpeak, settings.ceiling)
        if quiet and self.wpeak >= math.floor(value) and grown > value:
            self.change(grown)
            self.grew_at = self.now
            self.count("grown")
            return 1
        return 0

    def sync(self, holding: dict[str, str], queued: list[str]) -> list[tuple[str, str, str]]:
        self.tick()
        out: list[tuple[str, str, str]] = []
        for permit_id, token in holding.items():
            if permit_id in self.holders:
                if str(self.holders[permit_id]) != token:  # counted again, and its process missed it
                    out.append((permit_id, "reattached", str(self.holders[permit_id])))
                continue
            how = self.outcome.get(permit_id)
            if how is not None and how != "reclaimed":
                out.append((permit_id, "ended", how))
                continue
            self.outcome.pop(permit_id, None)
            self.seq += 1
            self.holders[permit_id] = self.seq
            self.since[permit_id] = self.now  # its start, as Redis notes it: now
            self.count("reattached")
            self.peak("peak_running", len(self.holders))
            out.append((permit_id, "reattached", str(self.seq)))
        for permit_id in queued:
            if permit_id in self.waiters:
                continue
            if permit_id in self.holders:
                out.append((permit_id, "granted", str(self.holders[permit_id])))
            elif permit_id in self.outcome:
                out.append((permit_id, self.outcome[permit_id], "0"))
            elif self.slot_free() and self.affordable(0.0):  # forgotten: again
                out.append((permit_id, "granted", str(self.grant(permit_id))))
            else:
                self.enqueue(permit_id)
                out.append((permit_id, "requeued", "0"))
        return out


def _text(reply: object) -> str:
    """A reply of the test's client, which decodes responses: a str."""
    assert isinstance(reply, str), reply
    return reply


def _texts(reply: object) -> list[str]:
    """A list reply of the test's client, which decodes responses: a list of str."""
    assert isinstance(reply, list), reply
    assert all(isinstance(item, str) for item in reply), reply
    return reply


class Scripts(RuleBasedStateMachine):
    """Redis, the model and the core, driven by the same events."""

    client: redis.Redis | None = None  # one connection for every example: shrinking a failure stays quick
    functions = False  # FCALL the library's functions, or EVALSHA the scripts

    def __init__(self) -> None:
        super().__init__()
        assert self.client is not None
        self.redis = self.client
        self.keys = gate_keys(f"model-{uuid.uuid4().hex[:12]}")
        self.serial = 0
        self.holding: dict[str, str] = {}  # what the process believes it holds, with its token
        self.queued: set[str] = set()  # what it believes is queued
        self.known: list[str] = []
        self.settled: dict[str, float] = {}  # the cost each request last settled
        self.held: set[str] = set()  # every request that ever held a slot
        self.used: set[str] = set()  # every request that settled
        self.unused: set[str] = set()  # every grant given back unused (its permit never starts)

    def teardown(self) -> None:
        self.redis.delete(*self.keys)

    @initialize(
        c=st.integers(1, 3),
        q=st.integers(-1, 3),
        limits=rate_limits(),
        adaptive=adaptive_settings(),
        feasible=st.booleans(),
    )
    def limits(self, c: int, q: int, limits: list[RateLimit], adaptive: Adaptive, feasible: bool) -> None:
        self.model = Model(c, q, limits, adaptive, feasible)
        self.core: GateState | None = GateState(c, None if q < 0 else q, 1, 0.2, limits)
        self.core.feasible = feasible
        # One controller, as the core runs it in process: it decides the cuts the cluster must make.
        self.controller = AdaptiveLimit(adaptive, c)
        self.tickets: dict[str, Ticket] = {}
        # The largest cost every limit counted in tokens can serve (admit() refuses more).
        self.most = min((int(limit.burst) for limit in limits if not limit.per_request), default=4)
        buckets = _buckets.encode(limits)
        self.base_ms = self.server_ms()  # the buckets' clock reads 0 here
        # Waiters' places last 1000 hours: the hours that pass for the buckets and deadlines (their
        # process renews them meanwhile) never lapse them; the rule below does.
        common = (c, q, HOUR, 1000 * HOUR, HOUR, HOUR, buckets, wake_prefix("model"))
        self.common = _scripts.pack_common(common)

    def server_ms(self) -> float:
        seconds, micros = self.redis.time()
        return float(seconds * 1000 + micros / 1000)

    def run(self, script: _scripts.Script, *args: str | int | float) -> list[Any]:
        if self.functions:
            call = ("FCALL", script.function, len(self.keys), *self.keys, self.common, *args)
            return self.redis.execute_command(*call)  # type: ignore[no-any-return,no-untyped-call]
        return self.redis.evalsha(script.sha, len(self.keys), *self.keys, self.common, *args)  # type: ignore[no-any-return]

    def answer(self, script: _scripts.Script, *args: str | int | float) -> list[Any]:
        """The reply of admit, release or cancel: one string of fields (numbers as ints here)."""
        reply: object = self.run(script, *args)
        assert isinstance(reply, str), reply  # one bulk string is cheaper to read than an array
        return [int(f) if f.lstrip("-").isdigit() else f for f in reply.split("|")]

    # -- the core, fed the same events ------------------------------------------------------------

    def catch_up(self) -> None:
        """Before a script that sweeps first: the core hears what the sweep will do, then starts the heads.

        In process, a head waiting for its tokens starts at the moment they come (a timer); in
        Redis, at the next script's sweep (its process syncs then). Either way, at the same ``now``
        of the buckets' clock, so the core catches up before each script. Feeding the core a sweep
        twice changes nothing the second time (a ticket already ended is left as it is).
        """
        self.core_sweep(*self._pending_sweep())
        if self.core is not None:
            self.core.advance(self.model.now)

    def core_sweep(self, reclaimed: list[str], dropped: list[str]) -> None:
        """Feed the core what the sweep did: waiters' places ended first, then reclaimed slots."""
        core = self.core
        if core is None:
            return
        for permit_id in dropped:
            core.cancel(self.tickets[permit_id], self.model.now)
        for permit_id in reclaimed:
            core.release(self.tickets[permit_id], self.model.now, RECLAIMED)

    # -- rules ------------------------------------------------------------------------------------

    @rule(data=st.data(), wait=WAIT)
    def admit_new(self, data: st.DataObject, wait: bool) -> None:
        self.serial += 1
        permit_id = f"{AGENT}#{self.serial}"
        self.known.append(permit_id)
        cost = data.draw(st.integers(0, self.most), label="cost")
        hours = data.draw(st.one_of(st.none(), st.integers(0, 4)), label="deadline in hours, and a half")
        self.arrive(permit_id, wait, cost, hours)

    @precondition(lambda self: self.known)
    @rule(data=st.data(), wait=st.booleans())
    def admit_again(self, data: st.DataObject, wait: bool) -> None:
        """A retry after a lost reply: the first answer again, or how the request ended."""
        self.arrive(data.draw(st.sampled_from(self.known)), wait, 0)

    @rule(hours=st.integers(1, 3))
    def hours_pass(self, hours: int) -> None:
        """The clock moves on: each bucket's empty moment, waiter's deadline, and the controller's
        last cut and growth move back."""
        # A millisecond past the hours: a token is never due exactly then, where the scripts'
        # milliseconds and the core's seconds may round a period's multiple apart by one ulp.
        passed = hours * HOUR + 1
        for number in range(1, len(self.model.limits) + 1):
            empty = self.redis.hget(self.keys[0], f"b{number}")
            if empty is not None:
                self.redis.hset(self.keys[0], f"b{number}", repr(float(_text(empty)) - passed))
        for field in ("cut", "grew", "pause"):
            at = self.redis.hget(self.keys[0], field)
            if at is not None:
                self.redis.hset(self.keys[0], field, int(_text(at)) - passed)
        model = self.model
        model.now += passed / 1000
        for permit_id in model.holders:  # a run's length is measured from its start: it moves back too
            agent, deadline, since, token = _text(self.redis.hget(self.keys[4], permit_id)).split("|")
            self.redis.hset(self.keys[4], permit_id, f"{agent}|{deadline}|{int(since) - passed}|{token}")
        for permit_id in model.waiters:
            agent, deadline, since, token = _text(self.redis.hget(self.keys[4], permit_id)).split("|")
            if int(deadline) >= 0:
                earlier = max(1, int(deadline) - passed)
                self.redis.hset(self.keys[4], permit_id, f"{agent}|{earlier}|{since}|{token}")
                # Its sweep index is the earlier of its deadline and its place's expiry (one that
                # lapsed already stays lapsed).
                self.redis.zadd(self.keys[3], {permit_id: earlier}, lt=True)
            if model.deadlines.get(permit_id, math.inf) <= model.now:
                model.due[permit_id] = "expired"  # at the sweep a passed deadline wins, lapsed place or not

    @precondition(lambda self: self.model.limits and self.known)
    @rule(data=st.data())
    def settle(self, data: st.DataObject) -> None:
        """A request that started settles its real cost: the difference is charged or refunded."""
        model = self.model
        # Those that held a slot and used it (a grant given back unused never started).
        # (a retried release records a cancelled request as released: it still never started)
        started = sorted(
            i for i in self.held - self.unused if model.outcome.get(i) in (None, "released", "reclaimed")
        )
        if not started:
            return
        permit_id = data.draw(st.sampled_from(started))
        cost = data.draw(st.integers(0, 6), label="cost")
        ticket = self.tickets.get(permit_id)
        extra = cost - self.settled.get(permit_id, 0.0)
        self.settled[permit_id] = cost
        self.used.add(permit_id)
        self.catch_up()
        changed, running, waiting, _, *handed = self.answer(
            _scripts.RATE, "settle", AGENT, repr(float(extra))
        )
        model.tick()
        for bucket in model.buckets:
            if not bucket.per_request:
                if extra > 0:
                    bucket.charge(extra, model.now)
                elif extra < 0:
                    bucket.give(-extra, model.now)
        if extra < 0:
            model.tick()  # the refund may start the head
        assert changed == int(bool(extra))
        assert (running, waiting) == (len(model.holders), len(model.waiters))
        self.handed_are_grants(handed)
        if self.core is not None and ticket is not None:
            self.core.settle(ticket, cost, model.now)

    @precondition(lambda self: self.model.limits)
    @rule(data=st.data())
    def provider_says_what_is_left(self, data: st.DataObject) -> None:
        """sync_rate_limits: a bucket is lowered to the provider's remaining count, never raised."""
        model = self.model
        number = data.draw(st.integers(1, len(model.limits)), label="bucket")
        left = data.draw(st.integers(0, 4), label="left")
        self.catch_up()
        changed, running, waiting, _, *handed = self.answer(_scripts.RATE, "lower", AGENT, number, left)
        model.tick()
        bucket = model.buckets[number - 1]
        before = bucket.tokens(model.now)
        lowered = left < before
        if lowered:
            bucket.empty = model.now - left * bucket.period
        # At a balance of exactly `left`, the server's clock has added a sliver of a token since
        # (a few seconds of an hour): Redis lowers it by that sliver, to where the model is.
        assert changed == int(lowered) or (left == before and changed == 1)
        assert (running, waiting) == (len(model.holders), len(model.waiters))
        self.handed_are_grants(handed)
        if self.core is not None:
            assert self.core.sync_rate_limits({f"b{number}": left}, model.now) == int(lowered)

    def arrive(self, permit_id: str, wait: bool, cost: int, hours: int | None = None) -> None:
        # A deadline half an hour past a whole hour: no bucket's whole hour ever ties with it, so
        # the few seconds the server's clock runs ahead of the model's decide nothing.
        remaining = -1 if hours is None else (2 * hours + 1) * HOUR // 2
        deadline = math.inf if hours is None else self.model.now + remaining / 1000
        model = self.model
        fresh = (
            permit_id not in model.holders
            and permit_id not in model.waiters
            and permit_id not in model.outcome
        )
        self.catch_up()
        feasible = (remaining,) if model.feasible else ()  # its deadline is its queue deadline here
        state, value, running, waiting, _, *handed = self.answer(
            _scripts.ADMIT, permit_id, remaining, int(wait), cost, *feasible
        )
        expected = model.admit(permit_id, wait, cost, deadline)
        if state == 5:  # rate limited: the ms until its tokens could come, from the server's now (a few s on)
            ms, number = str(value).split(":")
            seconds, limiting = expected[1].split(":")
            assert state == expected[0]
            assert number in limiting.split(",")
            assert float(seconds) - 60 < float(ms) / 1000 <= float(seconds)
        elif state == 6:  # infeasible: its predicted wait (the server's clock a few s on) and its budget
            assert state == expected[0]
            wait_ms, budget_ms = map(float, str(value).split(":"))
            predicted, budget = map(float, expected[1].split(":"))
            assert abs(wait_ms / 1000 - predicted) < 60
            assert budget_ms == remaining
            assert math.isclose(budget, remaining / 1000)
        elif state == 3:  # full: the ms of a pause in force still to run, from the server's now
            assert state == expected[0]
            self.same_pause_left(int(value), float(expected[1]))
        else:
            assert (state, str(value).split("@")[0]) == expected
        assert (running, waiting) == (len(model.holders), len(model.waiters))
        self.handed_are_grants(handed)
        # The process knows this answer only (a retry is sent when the first reply was lost): it
        # holds, or waits, or neither, never both, as the driver's own holders and waiters are.
        self.holding.pop(permit_id, None)
        self.queued.discard(permit_id)
        if state == 1:
            self.holding[permit_id] = str(value)
        elif state == 2:
            self.queued.add(permit_id)
        if fresh:
            self.settled[permit_id] = cost  # its declared cost, until it settles
        if self.core is not None and fresh:
            ticket = self.tickets[permit_id] = Ticket(deadline=deadline, cost=cost)
            self.core.arrive(ticket, model.now, wait)
            statuses = {
                1: Status.RUNNING,
                2: Status.QUEUED,
                3: Status.REJECTED,
                5: Status.RATE_LIMITED,
                6: Status.INFEASIBLE,
            }
            assert ticket.status is statuses[state]

    @precondition(lambda self: self.known)
    @rule(data=st.data(), how=st.sampled_from(["completed", "late", "failed"]))
    def release(self, data: st.DataObject, how: str) -> None:
        # What it holds, or a request that ended (a retried release); never one that waits.
        choices = sorted(i for i in self.known if i not in self.model.waiters)
        if not choices:
            return
        permit_id = data.draw(st.sampled_from(choices))
        paced = ("1",) if self.model.feasible else ()
        removed, running, waiting, _, c, *handed = self.answer(_scripts.RELEASE, permit_id, how, *paced)
        assert c == self.model.c  # the cluster's C, which an adaptive controller adopts
        was_running = permit_id in self.model.holders
        assert removed == self.model.release(permit_id, how)
        reclaimed, dropped = self.model.tick()
        assert (running, waiting) == (len(self.model.holders), len(self.model.waiters))
        self.handed_are_grants(handed)
        self.holding.pop(permit_id, None)
        if self.core is not None:
            if was_running:
                self.core.release(self.tickets[permit_id], self.model.now, ENDED_AS[how])
            self.core_sweep(reclaimed, dropped)
            self.core.advance(self.model.now)  # the script's sweep started the heads whose tokens came

    @precondition(lambda self: self.known)
    @rule(data=st.data(), how=st.sampled_from(["cancelled", "expired"]), unknown=st.booleans())
    def cancel(self, data: st.DataObject, how: str, unknown: bool) -> None:
        """A caller gives up: queued, granted but not started, ended already, or never arrived."""
        if unknown:
            self.serial += 1
            permit_id = f"{AGENT}#{self.serial}"  # its admission is still in flight, say
            self.known.append(permit_id)
        else:
            permit_id = data.draw(st.sampled_from(self.known))
            if permit_id in self.used and permit_id in self.model.holders:
                return  # a holder that settled its usage has used its slot: it cannot give it back unused
        was_waiting = permit_id in self.model.waiters and permit_id not in self.model.outcome
        was_running = permit_id in self.model.holders and permit_id not in self.model.outcome
        removed, running, waiting, _, *handed = self.answer(_scripts.CANCEL, permit_id, how)
        assert removed == self.model.cancel(permit_id, how)
        if removed == 2:
            self.unused.add(permit_id)
        reclaimed, dropped = self.model.tick()
        assert (running, waiting) == (len(self.model.holders), len(self.model.waiters))
        self.handed_are_grants(handed)
        self.holding.pop(permit_id, None)
        self.queued.discard(permit_id)
        if self.core is not None:
            if was_waiting or was_running:
                self.core.cancel(self.tickets[permit_id], self.model.now)
            self.core_sweep(reclaimed, dropped)
            self.core.advance(self.model.now)  # the script's sweep started the heads whose tokens came

    @rule(reply_lost=st.booleans())
    def sync(self, reply_lost: bool) -> None:
        """A renewal and poll; its reply may be lost (it timed out here, and ran there all the same)."""
        holding = dict(sorted(self.holding.items()))
        queued = sorted(self.queued)
        args: list[str | int] = [AGENT, len(holding)]
        for pair in holding.items():
            args += pair
        for permit_id in queued:
            args += (permit_id, -1)
        self.catch_up()
        reply = self.run(_scripts.SYNC, *args)
        expected = self.model.sync(holding, queued)
        reported = [(str(reply[i]), str(reply[i + 1]), str(reply[i + 2])) for i in range(3, len(reply), 3)]
        ready = [r for r in reported if r[0] == ""]  # the head is this process's and waits for tokens
        reported = [r for r in reported if r[0] != ""]
        model = self.model
        head = model.waiters[0] if model.waiters else None
        waits = head is not None and not model.affordable(model.costs.get(head, 0.0))
        assert [what for _, what, _ in ready] == (["ready"] if waits else [])
        assert reported == expected
        assert (reply[1], reply[2]) == (len(self.model.holders), len(self.model.waiters))
        if any(what == "reattached" for _, what, _ in reported):
            self.core = None  # now more than C run, which the core never allows
        if reply_lost:
            return
        for permit_id, what, value in reported:
            if what == "reattached":
                self.holding[permit_id] = value
            elif what == "granted":
                self.queued.discard(permit_id)
                self.holding[permit_id] = value
            elif permit_id in self.queued:
                self.queued.discard(permit_id)
            else:
                self.holding.pop(permit_id, None)

    @rule(
        c=st.one_of(st.none(), st.integers(1, 4)),
        q=st.one_of(st.none(), st.integers(-1, 3)),
    )
    def set_limits(self, c: int | None, q: int | None) -> None:
        """RedisGate.set_limits: raising C starts the oldest waiters; lowering C or Q ends nobody."""
        model = self.model
        reclaimed, dropped = self._pending_sweep()
        running, waiting, _, new_c, new_q, *handed = self.run(
            _scripts.LIMITS, "" if c is None else c, "" if q is None else q
        )
        model.set_limits(c, q)
        model.tick()
        assert (new_c, new_q) == (model.c, model.q)
        assert (running, waiting) == (len(model.holders), len(model.waiters))
        assert handed == []  # limits.lua names no caller: every grant it makes is published
        max_waiting = ... if q is None else (None if q < 0 else q)
        self.core_limits(reclaimed, dropped, ... if c is None else c, max_waiting)
        if c is not None:
            self.controller.rebase(c)  # RedisGate.set_limits tells this process's controller
        self.align_controller()

    @rule()
    def overloaded(self) -> None:
        """A 503 or 529 heard by the process: the cluster cuts its C as the core's controller does."""
        model, controller = self.model, self.controller
        cuts = controller.cuts
        wanted = controller.signal("overloaded", model.now)
        applied = self.adapt("overloaded", model.adaptive.decrease)
        assert applied == controller.cuts - cuts  # the same window since the last cut
        assert (model.c, model.value()) == (wanted, controller.value)
        self.align_controller()

    @rule(slow=st.booleans())
    def request_sampled(self, slow: bool) -> None:
        """A request ran to an answer: the process's controller samples it and proposes what its window asks.

        As ClusterController.sampled: a window that cuts proposes the cut (by the factor it cut
        its own C by), one that grows proposes growth. A cut is the core's, exactly; growth is the
        cluster's rule (docs/adaptive.md): only in a window with no cut nor growth, only if the
        cluster's peak in flight since its last change of C reached C, never beyond that peak
        times max_limit_factor, nor the ceiling (the core's window caps by its own peak).
        """
        model, controller = self.model, self.controller
        before, cuts, grown = controller.value, controller.cuts, controller.grown
        controller.sample(4.0 if slow else 1.0, 1.0, model.now, len(model.holders))
        if controller.cuts > cuts:
            assert self.adapt("cut", controller.value / before) == 1  # the same window since the last cut
            assert (model.c, model.value()) == (controller.limit, controller.value)
        elif controller.grown > grown:
            self.adapt("grow", 0.0)
        self.align_controller()

    def adapt(self, what: str, factor: float) -> int:
        """Send adapt.lua what the controller decided (as ClusterController does); 1 if applied."""
        model = self.model
        settings = model.adaptive
        reclaimed, dropped = self._pending_sweep()
        applied, c, running, waiting, _, since, paused = self.run(
            _scripts.ADAPT,
            what,
            HOUR,
            repr(float(factor)),
            settings.floor,
            settings.ceiling,
            repr(float(settings.increase)),
            repr(float(settings.max_limit_factor)),
            repr(float(settings.increase_ratio)),
        )
        expected = model.adapt(what, factor)
        model.tick()
        assert (applied, c) == (expected, model.c)
        self.same_pause_left(paused, model.pause_left())
        assert (since < 0) == (model.cut_at is None)
        assert (running, waiting) == (len(model.holders), len(model.waiters))
        self.core_limits(reclaimed, dropped, model.c)  # the in-process gate applies its controller's C
        return int(applied)

    @staticmethod
    def same_pause_left(ms: int, seconds: float) -> None:
        """The pause left as the server's clock reads it (a few seconds on), against the model's."""
        assert seconds - 60 < ms / 1000 <= seconds + 1e-6  # the model adds seconds to its clock in floats

    @rule(hours=st.integers(1, 2))
    def provider_pause(self, hours: int) -> None:
        """A provider's 429 with a reset: no start anywhere until then; C is left alone."""
        model = self.model
        reclaimed, dropped = self._pending_sweep()
        applied, c, running, waiting, _, _, paused = self.run(
            _scripts.ADAPT, "pause", hours * HOUR, 0, 1, 1, 0, 0, 0
        )
        model.pause(hours * HOUR_S)
        model.tick()
        assert (applied, c) == (1, model.c)
        self.same_pause_left(paused, model.pause_left())
        assert (running, waiting) == (len(model.holders), len(model.waiters))
        core = self.core
        if core is not None:
            for permit_id in dropped:
                core.cancel(self.tickets[permit_id], model.now)
            core.pause(model.pause_until, model.now)
            for permit_id in reclaimed:
                core.release(self.tickets[permit_id], model.now, RECLAIMED)
            core.advance(model.now)

    def align_controller(self) -> None:
        """The process's controller decides from the cluster's C (adopt), and its last cut."""
        model, controller = self.model, self.controller
        controller.value = model.value()
        controller.last_cut = -math.inf if model.cut_at is None else model.cut_at

    def core_limits(
        self,
        reclaimed: list[str],
        dropped: list[str],
        c: int | EllipsisType = ...,
        q: int | EllipsisType | None = ...,
    ) -> None:
        """Feed the core a change of limits made by a script that sets them, then sweeps.

        The waiters' places end first, then the limits change, then lapsed leases free their
        slots under the new C, and the heads whose tokens came start.
        """
        core = self.core
        if core is None:
            return
        now = self.model.now
        for permit_id in dropped:
            core.cancel(self.tickets[permit_id], now)
        core.set_limits(now, c, q)
        for permit_id in reclaimed:
            core.release(self.tickets[permit_id], now, RECLAIMED)
        core.advance(now)
        assert core.limit_changes == self.model.counters.get("limit_changes", 0)

    @rule()
    def redis_forgets_the_gate(self) -> None:
        self.redis.delete(*self.keys)
        self.model.forget()
        self.core = None  # the processes count their requests again, above C if need be
        self.align_controller()  # the cluster's C is the constructors' again, never cut

    @precondition(lambda self: self.model.holders)
    @rule(data=st.data())
    def lease_lapses(self, data: st.DataObject) -> None:
        permit_id = data.draw(st.sampled_from(sorted(self.model.holders)))
        self.redis.zadd(self.keys[1], {permit_id: 0})
        self.model.lapsed.add(permit_id)

    @precondition(lambda self: self.model.waiters)
    @rule(data=st.data(), deadline=st.booleans())
    def place_lapses_or_deadline_passes(self, data: st.DataObject, deadline: bool) -> None:
        permit_id = data.draw(st.sampled_from(self.model.waiters))
        if deadline:
            agent, _, since, token = _text(self.redis.hget(self.keys[4], permit_id)).split("|")
            self.redis.hset(self.keys[4], permit_id, f"{agent}|1|{since}|{token}")
        self.redis.zadd(self.keys[3], {permit_id: 0})
        passed = deadline or self.model.due.get(permit_id) == "expired"  # a deadline once passed stays so
        self.model.due[permit_id] = "expired" if passed else "lapsed"

    def handed_are_grants(self, handed: list[Any]) -> None:
        # A script tells the caller's process (one agent here) of the grants its sweep made to that
        # process's waiters: each is a holder now, with its token, and was not published.
        told = {str(handed[i]): int(handed[i + 1]) for i in range(0, len(handed), 2)}
        assert len(told) * 2 == len(handed)
        assert told.items() <= self.model.holders.items()

    def _pending_sweep(self) -> tuple[list[str], list[str]]:
        # Scripts that sweep before they act (admit, sync): what their sweep will do, for the core.
        # Read without changing the model (the model's own admit/sync runs its sweep).
        return sorted(self.model.lapsed), sorted(self.model.due)

    # -- the whole state, compared after every step -----------------------------------------------

    @invariant()
    def redis_holds_what_the_model_holds(self) -> None:
        if not hasattr(self, "model"):
            return
        self.held |= set(self.model.holders)
        keys = self.keys
        holders = _texts(self.redis.zrange(keys[1], 0, -1))
        tokens = {i: int(_text(self.redis.hget(keys[4], i)).rsplit("|", 1)[1]) for i in holders}
        assert tokens == self.model.holders
        assert self.redis.zrange(keys[2], 0, -1) == self.model.waiters
        # outcomes: id -> when * 16 + how, the codes of prelude.lua's ENDINGS
        ended: list[tuple[str, float]] = self.redis.zrange(keys[5], 0, -1, withscores=True)  # type: ignore[assignment]
        assert {i: ENDINGS[int(score) % 16] for i, score in ended} == self.model.outcome
        # Each bucket's balance, as the server's clock reads it now (a few seconds past the model's).
        now_ms = self.server_ms()
        for number, bucket in enumerate(self.model.buckets, 1):
            empty = self.redis.hget(keys[0], f"b{number}")
            balance = bucket.limit.burst
            if empty is not None:
                balance = min(bucket.limit.burst, (now_ms - float(_text(empty))) / HOUR)
            # Of an hour: what the server's clock added since the start (the scripts' clock is
            # TIME in whole ms, up to 1 ms behind the test's reading).
            elapsed = (now_ms - self.base_ms + 1) / HOUR
            expected = bucket.tokens(self.model.now)
            assert expected <= balance <= expected + elapsed + 1e-9
        pace = self.redis.hget(keys[0], "pace")
        if self.model.pace is None:
            assert pace is None
        else:  # runs measured on the server's clock: a few seconds longer at most
            assert pace is not None
            assert self.model.pace - 1e-3 <= float(pace) / 1000 < self.model.pace + 60
            core = getattr(self, "core", None)
            if core is not None:
                assert core.recent_run_seconds is not None
                assert math.isclose(core.recent_run_seconds, self.model.pace, rel_tol=1e-9)
        cvalue, wpeak = self.redis.hmget(keys[0], "Cvalue", "wpeak")
        assert (None if cvalue is None else float(cvalue)) == self.model.cvalue
        assert int(wpeak or 0) == self.model.wpeak
        stats = {k: int(v) for k, v in self.redis.hgetall(keys[7]).items()}
        assert stats == {k: v for k, v in self.model.counters.items() if v or k in stats}
        assert int(self.redis.get(keys[6]) or 0) == self.model.seq

    @invariant()
    def the_core_runs_and_queues_the_same_requests(self) -> None:
        core = getattr(self, "core", None)
        if core is None:
            return
        running = {i for i, t in self.tickets.items() if t.status is Status.RUNNING}
        queued = sorted((t._seq, i) for i, t in self.tickets.items() if t.status is Status.QUEUED)
        # The model's holders include lapsed leases not swept yet: the core hears of them at the sweep.
        assert running == set(self.model.holders)
        assert [i for _, i in queued] == self.model.waiters
        assert (core.running, core.waiting) == (len(running), len(queued))


@pytest.mark.parametrize("functions", [True, False], ids=["functions", "scripts"])
def test_the_scripts_decide_as_the_model_and_the_core(redis_server: RedisServer, functions: bool) -> None:
    # As functions, the prelude's state outlives a call: every call must start from its own.
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    try:
        for script in SCRIPTS:
            client.script_load(script.source)
        with contextlib.suppress(redis.exceptions.ResponseError):  # already loaded
            client.function_load(_scripts.LIBRARY.source)
        Scripts.client = client
        Scripts.functions = functions
        run_state_machine_as_test(
            Scripts,
            settings=settings(
                max_examples=200,
                stateful_step_count=30,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
                # A failure is shrunk to one minimal example in seconds; the explain phase would
                # take minutes over a state machine, past the test's timeout.
                phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
                report_multiple_bugs=False,
            ),
        )
    finally:
        Scripts.client = None
        Scripts.functions = False
        client.close()
