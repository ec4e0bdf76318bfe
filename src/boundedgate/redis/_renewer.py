"""A gate's lease renewals in one process: a thread of their own, off the event loop.

Theory of operation. A holder keeps its slot by a lease in Redis that its process renews every
``lease_ttl / 3``. Renewals made by a task of the event loop wait their turn in its ready queue
(to start, to send, to read the reply), so a loop whose one turn outlasts the lease lets the
leases of a healthy, merely busy process lapse, and more than C run (issue 28). So renewals run on
a thread, as Kafka's consumer moved its heartbeat to a thread of its own (KIP-62):

* **what it renews**: each holder's lease, with one ``sync`` call per period covering all of them
  (the script is the loop's, waiters left out: those stay with the loop, whose callers they wake).
  Each holder is sent with the fencing number its process was last told, so that Redis can report
  a holder counted again under another number by an earlier renewal whose reply was lost.
* **how it learns the holders**: the loop writes ``side.leases`` (id -> number) as permits start
  and end; the thread takes a copy of it each period (one C-level ``dict.copy``: atomic under the
  GIL, and under the per-object locks of a free-threaded build). A permit that ended after the
  copy is renewed once more at most, which the script answers with "ended", never resurrecting it.
* **what it reports**: replies go back to the loop (``call_soon_threadsafe``), which marks lost
  leases, counts them and takes the new number, as before; a busy loop delays the report, never
  the renewal.
* **a stuck loop**: a thread that renewed for a loop that will never run again (a deadlock, a
  callback that never returns) would hold its slots forever. The thread posts a beat to the loop
  each period (unless the last one waits there still) and renews only while no beat has waited
  there longer than ``max_stall`` (a loop merely busy runs it within two of its turns, every
  ready callback run once each); past that it stops renewing, logs ``renewals_paused``,
  and the leases lapse ``lease_ttl`` after their last renewal. When the loop runs again, so do
  the renewals, which then report the leases lost (``renewals_resumed``).
* **its connection**: a client of its own, made in the thread with the settings of the user's
  client (its pool's connection class and settings, TLS and credentials included; for a
  ``RedisCluster``, its startup nodes and connection settings), on an event loop private to the
  thread that only ever runs one renewal at a time, through the same script calls as the gate's
  own (functions or ``EVALSHA``), each bounded by ``op_timeout``. A client it cannot copy without
  sharing the user's loop-bound objects (a Sentinel-managed pool, an unknown client) has its
  leases renewed on the loop, as before the thread existed: :func:`copier` says which.
* **Redis out of reach**: the renewal fails and is tried again next period, as on the loop; a
  lease that lapsed meanwhile is reported lost by the first renewal that gets through.
* **its life**: started by the loop when a holder appears (``watch``), ended by ``aclose`` (which
  waits for it, at most about one ``op_timeout``), or by itself when its loop has closed or it has
  had nothing to renew for a few periods. A daemon thread, named for its gate.
* **shared**: one renewer may serve many gate objects of one loop with the same settings (the
  keys of a :class:`~boundedgate.redis.RedisKeyedGate`): each period it renews every side that
  has holders, one ``sync`` call each, so many busy keys take one thread, not one each. The
  loop alone changes its set of sides: ``watch`` adds one, ``forget`` takes one out (its gate
  was closed, or dropped idle by its keyed gate).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.connection
import redis.exceptions

from .._driver import log_event
from . import _scripts
from ._io import UNREACHABLE, own_client, pooled, text
from ._process import ProcessSide

__all__ = ("Renewer", "copier")

#: What makes the renewal thread's client, and returns it with its closer.
Copier = Callable[[], tuple[Any, Callable[[], Coroutine[Any, Any, None]]]]

#: The connection classes whose settings make a self-contained connection (not Sentinel's, which
#: asks the user's pool, bound to the user's loop, where its master is).
_PLAIN = (
    redis.asyncio.connection.Connection,
    redis.asyncio.connection.SSLConnection,
    redis.asyncio.connection.UnixDomainSocketConnection,
)

#: How many periods the thread lingers with nothing to renew before it ends.
_LINGER_PERIODS = 6


def copier(client: Any) -> Copier | None:
    """What makes a client like ``client`` for the renewal thread, or None when there is no safe copy.

    A ``redis.asyncio.Redis`` on a plain pool is copied as the gate's other own connections are
    (:func:`~._io.own_client`); a ``RedisCluster`` by its startup nodes and connection settings.
    """
    if isinstance(client, redis.asyncio.cluster.RedisCluster):
        return _cluster_copier(client)
    pool = getattr(client, "connection_pool", None)
    if not isinstance(pool, redis.asyncio.ConnectionPool) or "connection_pool" in pool.connection_kwargs:
        return None
    if not issubclass(pool.connection_class, _PLAIN) or own_client(client) is None:
        return None

    def make() -> tuple[Any, Callable[[], Coroutine[Any, Any, None]]]:
        own = own_client(client)
        if own is None:  # pragma: no cover (checked above)
            raise RuntimeError("the client's pool cannot be copied")
        return own

    return make


#: What a cluster client adds to its connection settings itself: a new client makes its own.
_CLUSTERS_OWN = frozenset(
    ("connection_class", "response_callbacks", "himport_registry", "redis_connect_func")
)


def _cluster_copier(client: redis.asyncio.cluster.RedisCluster) -> Copier:
    accepted = inspect.signature(redis.asyncio.cluster.RedisCluster).parameters
    settings = {k: v for k, v in client.connection_kwargs.items() if k not in _CLUSTERS_OWN and k in accepted}
    if issubclass(client.connection_kwargs.get("connection_class", object), redis.asyncio.SSLConnection):
        settings["ssl"] = True
    # The client's own list (redis-py 5.1 and later), else its nodes manager's (5.0 has no other).
    startup = getattr(client, "startup_nodes", None) or client.nodes_manager.startup_nodes.values()
    nodes = [(node.host, node.port) for node in startup]

    def make() -> tuple[Any, Callable[[], Coroutine[Any, Any, None]]]:
        startup = [redis.asyncio.cluster.ClusterNode(host, port) for host, port in nodes]
        own = redis.asyncio.cluster.RedisCluster(startup_nodes=startup, **settings)
        return own, own.aclose

    return make


class Renewer:
    """The lease renewals of gate objects on one event loop: a thread, started on demand.

    Args:
        side: The process's side of the gate, bound to ``loop``; its durations are the thread's
            (a shared renewer's sides all have the same).
        loop: The event loop the gates' permits live on.
        make_client: What makes the thread's client (:func:`copier`).
        name: The name the thread and its log lines go by (default: ``side``'s gate's).
    """

    __slots__ = (
        "_beat_pending",
        "_beat_posted_at",
        "_closing",
        "_lock",
        "_loop",
        "_make_client",
        "_name",
        "_side",
        "_sides",
        "_thread",
        "_threads",
    )

    def __init__(
        self,
        side: ProcessSide,
        loop: asyncio.AbstractEventLoop,
        make_client: Copier,
        name: str | None = None,
    ) -> None:
        self._side = side
        self._name = side.name if name is None else name
        self._loop = loop
        self._make_client = make_client
        self._lock = threading.Lock()
        #: The sides it renews, with the lease table each had when it was added (``bind`` gives a
        #: side a new table on a new loop: the old one is left to the old loop's thread).
        self._sides: dict[ProcessSide, dict[str, int]] = {side: side.leases}
        #: The thread that renews now, None when none does (it ended, or never started).
        self._thread: threading.Thread | None = None
        #: Every thread not ended yet (one renewing, maybe one ending), with its stop flag and
        #: the future it completes on the loop as it ends.
        self._threads: dict[threading.Thread, tuple[threading.Event, asyncio.Future[None]]] = {}
        self._closing = False
        #: Whether a beat is posted to the loop and not run yet, and when it was posted (monotonic).
        self._beat_pending = False
        self._beat_posted_at = 0.0

    # -- on the loop ------------------------------------------------------------------------

    def watch(self, side: ProcessSide | None = None) -> None:
        """Make sure a thread renews the leases of ``side`` (default: its own; the loop just added one)."""
        side = self._side if side is None else side
        if self._thread is None or side not in self._sides:
            with self._lock:
                self._sides.setdefault(side, side.leases)
                if self._thread is None and not self._closing:
                    self._start()

    def forget(self, side: ProcessSide) -> None:
        """Renew ``side``'s leases no more (its gate was closed); ``watch`` brings it back."""
        with self._lock:
            self._sides.pop(side, None)

    def _start(self) -> None:
        stop = threading.Event()
        done = self._loop.create_future()
        thread = threading.Thread(
            target=self._run, args=(stop, done), name=f"boundedgate-renewals:{self._name}", daemon=True
        )
        self._thread = thread
        self._threads[thread] = (stop, done)
        thread.start()

    async def aclose(self) -> None:
        """End the threads and wait until they have (a thread starts again if a holder appears)."""
        with self._lock:
            self._closing = True
            ending = list(self._threads.items())
        try:
            for _, (stop, _done) in ending:
                stop.set()
            for thread, (_, done) in ending:
                await asyncio.shield(done)
                thread.join()
        finally:
            self._closing = False

    def _beat(self) -> None:
        """Run by the loop when it gets to it: the loop shows progress."""
        self._beat_pending = False

    def _report(self, side: ProcessSide, reply: Sequence[Any]) -> None:
        """Note a renewal's reply for ``side``, on the loop: the cluster's counts, holders counted again."""
        side.seen(reply[1], reply[2], reply[0])
        for i in range(3, len(reply), 3):
            if text(reply[i + 1]) == "reattached":
                side.reattached(text(reply[i]), reply[i + 2])

    # -- on the thread ----------------------------------------------------------------------

    def _run(self, stop: threading.Event, done: asyncio.Future[None]) -> None:
        me = threading.current_thread()
        own_loop = asyncio.new_event_loop()
        closer: Callable[[], Coroutine[Any, Any, None]] | None = None
        try:
            client, closer = self._make_client()
            self._renew_until(stop, own_loop, client)
        except Exception:  # a bug, not Redis: say so, rather than stop renewing without a word
            logging.getLogger("boundedgate").exception("%s: the lease renewal thread failed", self._name)
        finally:
            if closer is not None:
                with contextlib.suppress(Exception):
                    own_loop.run_until_complete(closer())
            own_loop.close()
            with self._lock:
                if self._thread is me:
                    self._thread = None
                del self._threads[me]
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                self._loop.call_soon_threadsafe(_finished, done)

    def _renew_until(self, stop: threading.Event, own_loop: asyncio.AbstractEventLoop, client: Any) -> None:
        settings = self._side
        period = settings.lease_ttl / 3
        calls = _scripts.Calls(client)
        #: Each side's encoded head, and the settings it encodes; the sides whose renewals fail.
        encoded: dict[ProcessSide, tuple[tuple[object, ...], tuple[bytes, ...]]] = {}
        failing: set[ProcessSide] = set()
        idle = 0
        paused = False
        while not stop.wait(period):
            stalled = self._stalled()
            if not self._post_beat():
                return  # the loop closed: its permits are gone with it
            if stalled > settings.max_stall:
                if not paused:
                    paused = True
                    self._tell(
                        "renewals_paused",
                        f"its event loop left a callback waiting for {stalled:.1f}s "
                        f"(max_stall {settings.max_stall}s): its leases are renewed no more and lapse",
                    )
                continue
            if paused:
                paused = False
                self._tell("renewals_resumed", "its event loop runs again: its leases are renewed again")
            renewed = False
            for side, table in self._holding():
                leases = table.copy()
                if not leases:
                    encoded.pop(side, None)
                    failing.discard(side)
                    continue
                renewed = True
                if not self._renew(side, leases, own_loop, client, calls, encoded, failing):
                    return
            if renewed:
                idle = 0
                continue
            idle += 1
            if idle >= _LINGER_PERIODS and self._end_if_idle():
                return

    def _holding(self) -> list[tuple[ProcessSide, dict[str, int]]]:
        """The sides to renew now, each with its lease table (only the loop adds and takes them out)."""
        with self._lock:
            return list(self._sides.items())

    def _renew(
        self,
        side: ProcessSide,
        leases: dict[str, int],
        own_loop: asyncio.AbstractEventLoop,
        client: Any,
        calls: _scripts.Calls,
        encoded: dict[ProcessSide, tuple[tuple[object, ...], tuple[bytes, ...]]],
        failing: set[ProcessSide],
    ) -> bool:
        """Renew ``side``'s ``leases`` once and report the reply to the loop; False if the loop closed."""
        common = side.common
        head = encoded.get(side)
        if head is None or head[0] is not common:
            head = encoded[side] = (common, _scripts.encode_head(side.keys, common))
        call = functools.partial(_scripts.SYNC, client, head[1], side.lease_args(leases), calls)
        try:
            reply = own_loop.run_until_complete(pooled(call, side.op_timeout))
        except UNREACHABLE:
            return True  # tried again next period; a lease lost meanwhile is reported then
        except redis.exceptions.RedisError as error:  # refused by the server: said once, tried again
            if side not in failing:
                failing.add(side)
                _tell(side, "renewals_failing", f"its lease renewals fail: {error!r}")
            return True
        failing.discard(side)
        try:
            self._loop.call_soon_threadsafe(self._report, side, reply)
        except RuntimeError:
            return False
        return True

    def _tell(self, event: str, message: str) -> None:
        log_event(self._name, event, message)

    def _stalled(self) -> float:
        """How long the beat the loop has not run yet has waited there (0: it ran, or none was posted)."""
        return time.monotonic() - self._beat_posted_at if self._beat_pending else 0.0

    def _post_beat(self) -> bool:
        """Ask the loop to run a beat, unless one waits there still; False if the loop has closed."""
        if self._loop.is_closed():
            return False
        if self._beat_pending:
            return True
        self._beat_posted_at = time.monotonic()
        self._beat_pending = True
        try:
            self._loop.call_soon_threadsafe(self._beat)
        except RuntimeError:
            return False
        return True

    def _end_if_idle(self) -> bool:
        """Stop being the renewing thread; True unless a lease arrived meanwhile (then go on)."""
        me = threading.current_thread()
        with self._lock:
            if self._thread is me:
                self._thread = None
        # The loop adds a lease, then looks for a thread: either it sees none and starts one, or
        # this sees its lease now and renews it, unless the one it started does.
        with self._lock:
            if not any(self._sides.values()):
                return True
            if self._thread is None:
                self._thread = me
                return False
        return True


def _finished(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


def _tell(side: ProcessSide, event: str, message: str) -> None:
    log_event(side.name, event, message)
