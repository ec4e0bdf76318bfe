"""A gate's background work in one process: the heartbeat-and-poll loop, and the wake listener.

``sync`` loop
    While this process holds slots or waits, one ``sync`` script per period covers all of them
    (the loop ends at the first period that finds neither):
    it renews holders' leases and waiters' places, and reports grants, lost leases and ended
    places. The period is ``poll_interval`` while anyone waits (it bounds what a lost wake-up
    message costs), ``lease_ttl / 3`` while only holders remain. When Redis stays out of reach for
    ``waiter_ttl`` (by then the places have lapsed there), the waiters get ``GateUnavailable``.
    It talks over a connection of its own (a pool with the settings of the user's client's), so
    the process's own traffic can never exhaust the pool the renewals need and make leases lapse.

listener
    While anyone waits, a pub/sub subscription to this gate object's wake channel turns grant
    messages into immediate wake-ups. It resubscribes after any error, and every (re)subscription
    triggers a ``sync``, which finds grants announced while nobody listened. It lingers a few
    seconds after the last waiter, so that bursts do not resubscribe each time. It too has a
    connection of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from .._core import Status
from .._driver import log_event
from ._io import UNREACHABLE, bounded, own_client, text
from ._scripts import SYNC

if TYPE_CHECKING:
    from ._gate import RedisGate

__all__ = ("Background",)

QUEUED = Status.QUEUED


class Background:
    """The sync loop and the wake listener of one gate object, started on demand.

    Args:
        gate: The gate they serve.
    """

    __slots__ = ("_closing", "_gate", "_kick", "_listener", "_syncer")

    def __init__(self, gate: RedisGate) -> None:
        self._gate = gate
        self._syncer: asyncio.Task[None] | None = None
        self._listener: asyncio.Task[None] | None = None
        self._kick: asyncio.Event | None = None
        self._closing = False

    def watch(self) -> None:
        """Make sure the loops run that the gate's current holders and waiters need."""
        gate = self._gate
        if self._closing:
            return
        if self._syncer is None:
            self._kick = asyncio.Event()
            self._syncer = gate._loop.create_task(self._sync_loop())  # type: ignore[union-attr]
        if self._listener is None and gate._waiting:
            self._listener = gate._loop.create_task(self._listen())  # type: ignore[union-attr]

    def kick(self) -> None:
        """Sync now rather than at the end of the period."""
        if self._kick is not None:
            self._kick.set()

    async def aclose(self) -> None:
        """Stop both loops and wait until they have (they start again if the gate is used again)."""
        self._closing = True  # in case a cancellation is swallowed by the client
        tasks = [t for t in (self._syncer, self._listener) if t is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        self._syncer = self._listener = None
        self._closing = False  # the gate may be used again: the loops restart on demand

    # -- the sync loop ----------------------------------------------------------------------

    async def _sync_loop(self) -> None:
        gate = self._gate
        loop = gate._loop
        kick: asyncio.Event = self._kick  # type: ignore[assignment]
        failing_since: float | None = None
        own: tuple[Any, Callable[[], Coroutine[Any, Any, None]]] | None = None
        try:
            # It ends one period after it found nothing to do, not at once: requests that come and
            # go within a period (uncontended pairs) find it running, and start no task each.
            while not self._closing:
                period = gate._poll_interval if gate._waiters else gate._lease_ttl / 3
                with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                    await bounded(kick.wait(), period)
                kick.clear()
                if not (gate._holders or gate._waiters):
                    break
                now = loop.time()  # type: ignore[union-attr]
                holders = list(gate._holders)
                args: list[object] = [gate._agent, len(holders), *holders]
                for permit_id, permit in gate._waiters.items():
                    if permit._status is QUEUED:
                        deadline = permit.deadline
                        remaining = -1 if deadline == math.inf else max(0, math.ceil((deadline - now) * 1000))
                        args += (permit_id, remaining)
                if len(args) == 2:
                    continue
                if own is None:
                    own = own_client(gate._client) or (gate._client, _nothing)
                try:
                    reply = await gate._run(SYNC, args, client=own[0])
                except UNREACHABLE as error:
                    if failing_since is None:
                        failing_since = now
                    elif loop.time() - failing_since >= gate._waiter_ttl:  # type: ignore[union-attr]
                        for permit in list(gate._waiters.values()):
                            if permit._status is QUEUED:
                                permit._told("unreachable", error)
                    continue
                failing_since = None
                self._apply(reply)
        finally:
            self._syncer = None
            if own is not None:
                await _close_quietly(own[1])

    def _apply(self, reply: list[Any]) -> None:
        gate = self._gate
        gate._seen(reply[1], reply[2], reply[0])
        for i in range(3, len(reply), 3):
            permit_id, what, value = text(reply[i]), text(reply[i + 1]), reply[i + 2]
            if what == "reattached":
                holder = gate._holders.get(permit_id)
                if holder is not None:
                    if not holder.lease_lost:
                        holder.lease_lost = True
                        gate._counters.lease_lost += 1
                        log_event(
                            gate.name,
                            "lease_lost",
                            f"{holder!r} lost its lease while it ran, and was counted again",
                            permit=permit_id,
                        )
                    holder._token = (gate._epoch or "", int(text(value)))
                continue
            waiter = gate._waiters.get(permit_id)
            if waiter is None:
                continue
            if what == "granted":
                waiter._granted(value)
            elif what not in ("requeued", "ended"):
                waiter._told(what)

    # -- the listener -----------------------------------------------------------------------

    async def _listen(self) -> None:
        gate = self._gate
        loop = gate._loop
        channel = gate._common[-1] + gate._agent  # type: ignore[operator]
        linger = max(10 * gate._poll_interval, 5.0)
        backoff = 0.05
        idle_since: float | None = None
        own = own_client(gate._client) or (gate._client, _nothing)
        try:
            while True:
                pubsub = own[0].pubsub()
                try:
                    await bounded(pubsub.subscribe(channel), gate._op_timeout)
                    backoff = 0.05
                    self.kick()  # grants announced while nobody listened are found by a sync
                    read = _reader(pubsub)
                    while True:
                        data = await read(gate._poll_interval)
                        if self._closing:
                            return
                        if data is not None:
                            permit_id, _, token = text(data).rpartition(" ")
                            waiter = gate._waiters.get(permit_id)
                            if waiter is not None:
                                waiter._granted(token)
                        if gate._waiters:
                            idle_since = None
                        elif idle_since is None:
                            idle_since = loop.time()  # type: ignore[union-attr]
                        elif loop.time() - idle_since >= linger:  # type: ignore[union-attr]
                            return
                except UNREACHABLE:
                    await asyncio.sleep(backoff)
                    backoff = min(2 * backoff, 1.0)
                finally:
                    await _close_quietly(pubsub.aclose)
        finally:
            self._listener = None
            await _close_quietly(own[1])


def _reader(pubsub: Any) -> Callable[[float], Coroutine[Any, Any, Any]]:
    """How the listener reads the next message's data from ``pubsub`` (None: no message within the time).

    Straight from its connection, once subscribed: the one channel's messages need none of
    ``get_message``'s work (its retry wrapper, observability records, a dict per message), and a
    broken connection raises at once, so the listener subscribes anew and a sync finds what it
    missed. Through ``get_message`` when the client asks for health checks (its pings go that way).
    """
    connection = pubsub.connection
    if connection is None or connection.health_check_interval:

        async def get_message(seconds: float) -> Any:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=seconds)
            if message is not None and message.get("type") == "message":
                return message["data"]
            return None

        return get_message
    read_response = connection.read_response

    async def read(seconds: float) -> Any:
        response = await read_response(timeout=seconds, disconnect_on_error=False, push_request=True)
        # A message is [message, channel, data]; anything else (the subscription's confirmation) is not one.
        if type(response) is list and len(response) == 3 and response[0] in _MESSAGE:
            return response[2]
        return None

    return read


#: The first element of a pub/sub message, whether the client decodes responses or not.
_MESSAGE = (b"message", "message")


async def _nothing() -> None:
    """The closer of the user's client when the gate uses it for its own work: it stays open."""


async def _close_quietly(close: Callable[[], Coroutine[Any, Any, None]]) -> None:
    with contextlib.suppress(Exception):  # a broken connection is closed all the same
        await asyncio.shield(close())
