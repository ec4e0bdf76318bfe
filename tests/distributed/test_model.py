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
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

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

from boundedgate import Status
from boundedgate._core import GateState, Ticket
from boundedgate.redis import _scripts
from boundedgate.redis._layout import gate_keys, wake_prefix

from .servers import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]

HOUR = 3_600_000  # ms: leases, places and outcomes outlive any example
AGENT = "model/1/0"
WAIT = st.sampled_from([True, True, True, False])  # mostly admit(), which queues; try_admit() less
SCRIPTS = (_scripts.ADMIT, _scripts.RELEASE, _scripts.CANCEL, _scripts.SYNC)
#: How a request ended, by its code in the low 4 bits of its score in ``outcomes`` (prelude.lua's ENDINGS).
ENDINGS = dict(
    enumerate(("released", "reclaimed", "expired", "lapsed", "cancelled", "disconnected", "unavailable"), 1)
)


class Model:
    """What the scripts must do, written plainly: the gate's state in Redis, as Python values."""

    def __init__(self, c: int, q: int) -> None:
        self.c, self.q = c, q
        self.forget()

    def forget(self) -> None:
        """Start empty, as when Redis loses the gate (a restart without persistence, a failover)."""
        self.seq = 0
        self.holders: dict[str, int] = {}  # id -> token
        self.waiters: list[str] = []  # FIFO
        self.order: dict[str, int] = {}  # waiter id -> its arrival sequence
        self.outcome: dict[str, str] = {}
        self.counters: dict[str, int] = {}
        self.lapsed: set[str] = set()  # holders whose lease expiry was put in the past
        self.due: dict[str, str] = {}  # waiters whose place or deadline was put in the past -> how
        self.started: list[str] = []  # waiters granted a slot by the last sweep, in order

    def count(self, field: str, n: int = 1) -> None:
        self.counters[field] = self.counters.get(field, 0) + n

    def peak(self, field: str, value: int) -> None:
        if value > self.counters.get(field, 0):
            self.counters[field] = value

    def grant(self, permit_id: str) -> int:
        self.seq += 1
        self.holders[permit_id] = self.seq
        self.count("admitted")
        self.peak("peak_running", len(self.holders))
        return self.seq

    def enqueue(self, permit_id: str) -> int:
        self.seq += 1
        self.waiters.append(permit_id)
        self.order[permit_id] = self.seq
        self.peak("peak_waiting", len(self.waiters))
        return self.seq

    def drop_waiter(self, permit_id: str, how: str) -> None:
        self.waiters.remove(permit_id)
        self.due.pop(permit_id, None)
        self.outcome[permit_id] = how
        self.count(how)

    def tick(self) -> tuple[list[str], list[str]]:
        """The sweep every script runs; returns the reclaimed holders and the dropped waiters."""
        reclaimed = sorted(self.lapsed)
        for permit_id in reclaimed:
            del self.holders[permit_id]
            self.outcome[permit_id] = "reclaimed"
            self.count("reclaimed")
        self.lapsed.clear()
        dropped = sorted(self.due)
        for permit_id in dropped:
            self.drop_waiter(permit_id, self.due[permit_id])
        self.started = []
        while len(self.holders) < self.c and self.waiters:
            head = self.waiters.pop(0)
            self.grant(head)
            self.started.append(head)
        return reclaimed, dropped

    def admit(self, permit_id: str, wait: bool) -> tuple[int, str]:
        self.tick()
        if permit_id in self.holders:
            return 1, str(self.holders[permit_id])
        if permit_id in self.waiters:
            return 2, str(self.order[permit_id])
        if permit_id in self.outcome:
            return 4, self.outcome[permit_id]
        if len(self.holders) < self.c and not self.waiters:
            return 1, str(self.grant(permit_id))
        if wait and (self.q < 0 or len(self.waiters) < self.q):
            return 2, str(self.enqueue(permit_id))
        self.count("rejected")
        return 3, "0"

    def release(self, permit_id: str, how: str) -> int:
        removed = 0
        if self.outcome.get(permit_id) != "released":
            removed = int(self.holders.pop(permit_id, None) is not None)
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
                self.lapsed.discard(permit_id)
                self.outcome[permit_id] = how
                self.count("admitted", -1)
                self.count(how)
                removed = 2
            else:
                self.outcome[permit_id] = how
                self.count(how)  # it arrived at its process, which counts it: so does the cluster
        return removed

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
            elif len(self.holders) < self.c and not self.waiters:  # forgotten: it arrives again
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

    def teardown(self) -> None:
        self.redis.delete(*self.keys)

    @initialize(c=st.integers(1, 3), q=st.integers(-1, 3))
    def limits(self, c: int, q: int) -> None:
        self.model = Model(c, q)
        self.core: GateState | None = GateState(c, None if q < 0 else q, 1, 0.2, ())
        self.tickets: dict[str, Ticket] = {}
        self.common = _scripts.pack_common((c, q, HOUR, HOUR, HOUR, HOUR, wake_prefix("model")))

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

    def core_sweep(self, reclaimed: list[str], dropped: list[str]) -> None:
        """Feed the core what the sweep did: waiters' places ended first, then reclaimed slots."""
        core = self.core
        if core is None:
            return
        for permit_id in dropped:
            core.cancel(self.tickets[permit_id], 0.0)
        for permit_id in reclaimed:
            core.release(self.tickets[permit_id], 0.0)

    # -- rules ------------------------------------------------------------------------------------

    @rule(wait=WAIT)
    def admit_new(self, wait: bool) -> None:
        self.serial += 1
        permit_id = f"{AGENT}#{self.serial}"
        self.known.append(permit_id)
        self.arrive(permit_id, wait)

    @precondition(lambda self: self.known)
    @rule(data=st.data(), wait=st.booleans())
    def admit_again(self, data: st.DataObject, wait: bool) -> None:
        """A retry after a lost reply: the first answer again, or how the request ended."""
        self.arrive(data.draw(st.sampled_from(self.known)), wait)

    def arrive(self, permit_id: str, wait: bool) -> None:
        model = self.model
        fresh = (
            permit_id not in model.holders
            and permit_id not in model.waiters
            and permit_id not in model.outcome
        )
        self.core_sweep(*self._pending_sweep())
        state, value, running, waiting, _, *handed = self.answer(_scripts.ADMIT, permit_id, -1, int(wait))
        assert (state, str(value)) == model.admit(permit_id, wait)
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
        if self.core is not None and fresh:
            ticket = self.tickets[permit_id] = Ticket()
            self.core.arrive(ticket, 0.0, wait)
            assert ticket.status is {1: Status.RUNNING, 2: Status.QUEUED, 3: Status.REJECTED}[state]

    @precondition(lambda self: self.known)
    @rule(data=st.data(), how=st.sampled_from(["completed", "late", "failed"]))
    def release(self, data: st.DataObject, how: str) -> None:
        # What it holds, or a request that ended (a retried release); never one that waits.
        choices = sorted(i for i in self.known if i not in self.model.waiters)
        if not choices:
            return
        permit_id = data.draw(st.sampled_from(choices))
        removed, running, waiting, _, c, *handed = self.answer(_scripts.RELEASE, permit_id, how)
        assert c == self.model.c  # the cluster's C, which an adaptive controller adopts
        was_running = permit_id in self.model.holders
        assert removed == self.model.release(permit_id, how)
        reclaimed, dropped = self.model.tick()
        assert (running, waiting) == (len(self.model.holders), len(self.model.waiters))
        self.handed_are_grants(handed)
        self.holding.pop(permit_id, None)
        if self.core is not None:
            if was_running:
                self.core.release(self.tickets[permit_id], 0.0)
            self.core_sweep(reclaimed, dropped)

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
        was_waiting = permit_id in self.model.waiters and permit_id not in self.model.outcome
        was_running = permit_id in self.model.holders and permit_id not in self.model.outcome
        removed, running, waiting, _, *handed = self.answer(_scripts.CANCEL, permit_id, how)
        assert removed == self.model.cancel(permit_id, how)
        reclaimed, dropped = self.model.tick()
        assert (running, waiting) == (len(self.model.holders), len(self.model.waiters))
        self.handed_are_grants(handed)
        self.holding.pop(permit_id, None)
        self.queued.discard(permit_id)
        if self.core is not None:
            if was_waiting or was_running:
                self.core.cancel(self.tickets[permit_id], 0.0)
            self.core_sweep(reclaimed, dropped)

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
        self.core_sweep(*self._pending_sweep())
        reply = self.run(_scripts.SYNC, *args)
        expected = self.model.sync(holding, queued)
        reported = [(str(reply[i]), str(reply[i + 1]), str(reply[i + 2])) for i in range(3, len(reply), 3)]
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

    @rule()
    def redis_forgets_the_gate(self) -> None:
        self.redis.delete(*self.keys)
        self.model.forget()
        self.core = None  # the processes count their requests again, above C if need be

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
        keys = self.keys
        holders = _texts(self.redis.zrange(keys[1], 0, -1))
        tokens = {i: int(_text(self.redis.hget(keys[4], i)).rsplit("|", 1)[1]) for i in holders}
        assert tokens == self.model.holders
        assert self.redis.zrange(keys[2], 0, -1) == self.model.waiters
        # outcomes: id -> when * 16 + how, the codes of prelude.lua's ENDINGS
        ended: list[tuple[str, float]] = self.redis.zrange(keys[5], 0, -1, withscores=True)  # type: ignore[assignment]
        assert {i: ENDINGS[int(score) % 16] for i, score in ended} == self.model.outcome
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
