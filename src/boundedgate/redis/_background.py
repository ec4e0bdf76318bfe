"""A gate's background work in one process: the lease renewals, the poll loop, and the wake listener.

renewals
    While this process holds slots, a thread of the gate's own renews their leases
    (:mod:`._renewer`), so that a busy event loop cannot make them lapse. For a client the thread
    cannot copy, the ``sync`` loop below renews them instead, on the event loop.

``sync`` loop
    While this process waits (or, without the thread, holds slots), one ``sync`` script per period
    covers all of its requests (the loop ends at the first period that finds none):
    it renews waiters' places and holders' leases (with the thread too, so that a server that
    forgot the gate counts this process's holders before it takes its waiters back), and reports
    grants, lost leases and ended places. The period is ``poll_interval`` while anyone waits (it
    bounds what a lost wake-up message costs), ``lease_ttl / 3`` while only holders remain. When
    Redis stays out of reach for ``waiter_ttl`` (by then the places have lapsed there), the
    waiters get ``GateUnavailable``.
    It talks over a connection of its own (a pool with the settings of the user's client's), so
    the process's own traffic can never exhaust the pool the renewals need and make leases lapse.

listener
    While anyone waits, a pub/sub subscription to this gate object's wake channel turns grant
    messages into immediate wake-ups. It resubscribes after any error, and every (re)subscription
    triggers a ``sync``, which finds grants announced while nobody listened. It lingers a few
    seconds after the last waiter, so that bursts do not resubscribe each time. It too has a
    connection of its own. A client that cannot subscribe (redis-py 5.0's ``RedisCluster`` has no
    ``pubsub()``) gets no listener: the gate logs so once, at ``INFO``, and its waiters learn of
    other processes' grants from the polls alone, within ``poll_interval``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from .._driver import log_event
from ._io import UNREACHABLE, bounded, own_client, text
from ._process import ProcessSide, Renewals
from ._renewer import Renewer, copier
from ._scripts import SYNC

__all__ = ("Background",)


class Background:
    """The sync loop and the wake listener of one gate object on one event loop, started on demand.

    Args:
        side: The process's side of the gate they serve, bound to that loop.
    """

    __slots__ = (
        "_closing",
        "_kick",
        "_listener",
        "_renewer",
        "_shared",
        "_side",
        "_soon",
        "_subscribes",
        "_syncer",
    )

    def __init__(self, side: ProcessSide) -> None:
        self._side = side
        #: The renewal thread's keeper, None when the side is not bound yet or its client cannot
        #: be copied (its leases are renewed by the sync loop then).
        self._renewer: Renewals | None = None
        #: Whether the renewer is shared with the other keys of its keyed gate (which closes it).
        self._shared = side.keeper is not None
        if side.loop is not None:
            if side.keeper is not None:
                self._renewer = side.keeper.renewer(side)
            else:
                make_client = copier(side.client)
                if make_client is not None:
                    self._renewer = Renewer(side, side.loop, make_client)
        self._syncer: asyncio.Task[None] | None = None
        self._listener: asyncio.Task[None] | None = None
        #: Whether the client can subscribe to the wake channel: True, False, or None once the
        #: gate said that it cannot (it says so once).
        self._subscribes: bool | None = callable(getattr(side.client, "pubsub", None))
        self._kick: asyncio.Event | None = None
        self._soon: asyncio.TimerHandle | None = None
        self._closing = False

    def watch(self) -> None:
        """Make sure the loops run that the gate's current holders and waiters need."""
        side = self._side
        if self._closing:
            return
        renewer = self._renewer
        if renewer is not None:
            if side.leases:
                renewer.watch(side)
            if not side.waiters:
                return
        if self._syncer is None:
            kick = self._kick = asyncio.Event()
            self._syncer = side.bound().create_task(self._sync_loop(kick))
        if self._listener is None and side.waiting:
            self._start_listener()

    def running(self) -> bool:
        """Whether its sync loop or its listener runs now (the renewal thread aside)."""
        return self._syncer is not None or self._listener is not None

    def kick(self) -> None:
        """Sync now rather than at the end of the period."""
        if self._kick is not None:
            self._kick.set()

    def soon(self, seconds: float) -> None:
        """Sync in ``seconds`` at the latest, unless one is due sooner.

        The head of the queue is this process's and its tokens come then: the sync starts it.
        """
        loop = self._side.bound()
        when = loop.time() + seconds + 0.001  # the scripts count in ms: not a moment before
        timer = self._soon
        if timer is not None and not timer.cancelled() and loop.time() < timer.when() <= when:
            return  # one still to come is sooner
        if timer is not None:
            timer.cancel()
        self._soon = loop.call_at(when, self.kick)

    async def aclose(self) -> None:
        """Stop both loops and wait until they have (they start again if the gate is used again)."""
        self._closing = True  # in case a cancellation is swallowed by the client
        if self._soon is not None:
            self._soon.cancel()
            self._soon = None
        tasks = [t for t in (self._syncer, self._listener) if t is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        self._syncer = self._listener = None
        if self._renewer is not None:
            if self._shared:
                self._renewer.forget(self._side)
            else:
                await self._renewer.aclose()
        self._closing = False  # the gate may be used again: the loops restart on demand

    # -- the sync loop ----------------------------------------------------------------------

    async def _sync_loop(self, kick: asyncio.Event) -> None:
        side = self._side
        loop = side.bound()
        failing_since: float | None = None
        own: tuple[Any, Callable[[], Coroutine[Any, Any, None]]] | None = None
        try:
            # It ends one period after it found nothing to do, not at once: requests that come and
            # go within a period (uncontended pairs) find it running, and start no task each.
            while not self._closing:
                period = side.poll_interval if side.waiters else side.lease_ttl / 3
                with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                    await bounded(kick.wait(), period)
                kick.clear()
                # Without the thread, the holders' leases are renewed here. With it, they are sent
                # with the waiters still: a server that forgot the gate counts them before it takes
                # the waiters back, as one step (else a waiter could take a holder's slot).
                if not (side.waiters or (self._renewer is None and side.leases)):
                    break
                now = loop.time()
                args = side.sync_args(now, side.leases)
                if len(args) == 2:
                    continue
                if own is None:
                    own = own_client(side.client) or (side.client, _nothing)
                try:
                    reply = await side.run(SYNC, args, client=own[0])
                except UNREACHABLE as error:
                    if failing_since is None:
                        failing_since = now
                    elif loop.time() - failing_since >= side.waiter_ttl:
                        side.unreachable(error)
                    continue
                failing_since = None
                self._apply(reply)
        finally:
            self._syncer = None
            if own is not None:
                await _close_quietly(own[1])

    def _apply(self, reply: list[Any]) -> None:
        side = self._side
        side.seen(reply[1], reply[2], reply[0])
        for i in range(3, len(reply), 3):
            permit_id, what, value = text(reply[i]), text(reply[i + 1]), reply[i + 2]
            if what == "reattached":
                side.reattached(permit_id, value)
            elif what == "granted":
                side.granted(permit_id, value, reply[0])
            elif what == "ready":  # the head, this process's, has its tokens then
                self.soon(float(text(value)) / 1000)
            elif what not in ("requeued", "ended"):
                side.told(permit_id, what)

    # -- the listener -----------------------------------------------------------------------

    def _start_listener(self) -> None:
        """Start the listener, or, for a client that cannot subscribe, say once that the polls alone serve."""
        if self._subscribes:
            self._listener = self._side.bound().create_task(self._listen())
        elif self._subscribes is False:
            self._subscribes = None
            log_event(
                self._side.name,
                "no_subscription",
                f"{type(self._side.client).__name__} has no pubsub(): waiters hear of grants by their "
                "polls alone, within poll_interval (a redis-py whose cluster client subscribes "
                "wakes them at once)",
                level=logging.INFO,
            )

    async def _listen(self) -> None:
        side = self._side
        loop = side.bound()
        channel = side.wake_channel
        linger = max(10 * side.poll_interval, 5.0)
        backoff = 0.05
        idle_since: float | None = None
        own = own_client(side.client) or (side.client, _nothing)
        try:
            while True:
                pubsub = own[0].pubsub()
                try:
                    await bounded(pubsub.subscribe(channel), side.op_timeout)
                    backoff = 0.05
                    self.kick()  # grants announced while nobody listened are found by a sync
                    read = _reader(pubsub)
                    while True:
                        data = await read(side.poll_interval)
                        if self._closing:
                            return
                        if data is not None:
                            _announced(side, text(data))
                        if side.waiters:
                            idle_since = None
                        elif idle_since is None:
                            idle_since = loop.time()
                        elif loop.time() - idle_since >= linger:
                            return
                except UNREACHABLE:
                    await asyncio.sleep(backoff)
                    backoff = min(2 * backoff, 1.0)
                finally:
                    await _close_quietly(pubsub.aclose)
        finally:
            self._listener = None
            await _close_quietly(own[1])


def _announced(side: ProcessSide, message: str) -> None:
    """Wake the waiter a grant message names: ``"id epoch n"`` (``"id n"`` from a version before epochs)."""
    permit_id, *epoch, token = message.split(" ")
    side.granted(permit_id, token, epoch[0] if epoch else side.epoch or "")


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
