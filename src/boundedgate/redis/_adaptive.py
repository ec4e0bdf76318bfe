"""The adaptive controller of a cluster gate: one C for every process, moved as one controller would.

Each process runs the core's :class:`~boundedgate.AdaptiveLimit` on its own samples (run times, or
times to first item of streams), with the cluster's count in flight, and on the signals it hears.
Nothing it decides is applied where it was decided: every change goes to Redis as one ``adapt``
script (``lua/adapt.lua``), which applies it to the cluster's C atomically, by one rule:

* a cut (an overload signal, or a latency window that asks for one) is applied only if the
  cluster's last cut, by any process, is older than the window: a burst of 529s seen by several
  processes costs one cut, and the others are counted ``suppressed``;
* growth is applied only if the cluster neither cut nor grew within the window, by ``increase``
  or ``increase_ratio`` of C (whichever is more), never beyond ``max_limit_factor`` times the
  cluster's peak in flight since its last change, nor beyond the ceiling: N processes whose
  windows all ask for growth grow C once;
* a rate-limit 429 pauses new starts cluster-wide until its reset (stored in Redis, honoured by
  every admission) and leaves C alone.

Every reply carries the cluster's C, which the process's controller adopts (``AdaptiveLimit.adopt``),
so each controller decides from the C in force, not from its own history.
"""

from __future__ import annotations

from typing import Any

from .._core import Adaptive, AdaptiveLimit
from ._io import UNREACHABLE
from ._process import ProcessSide, ms

__all__ = ("ClusterController",)


class ClusterController:
    """A process's half of a cluster gate's adaptive limit: its controller, and the proposals it sends.

    Args:
        side: This process's side of the gate whose cluster C it moves.
        settings: The controller's settings, None for the defaults (every process sharing the
            gate should give the same).
    """

    __slots__ = ("_side", "limit")

    def __init__(self, side: ProcessSide, settings: Adaptive | None) -> None:
        self._side = side
        #: This process's controller (``gate.controller``).
        self.limit = AdaptiveLimit(settings, side.max_running)

    async def pause(self, seconds: float) -> None:
        """Pause new starts cluster-wide for ``seconds`` (a rate-limit reset); C is unchanged."""
        await self._side.adapt(("pause", ms(seconds), 0, 1, 1, 0, 0, 0))

    async def overloaded(self) -> None:
        """An overload signal: the cluster cuts its C, unless it cut within the window."""
        limit = self.limit
        reply = await self._side.adapt(self._args("overloaded", limit.settings.decrease))
        self.adopt(reply, overload=bool(int(reply[0])))

    def sampled(self, ran: float, latency: float, in_flight: int, cluster_c: int, size: float) -> None:
        """A request of this process ran to an answer: sample it; propose what its window asks for."""
        side = self._side
        limit = self.limit
        now = side.time()
        side.max_running = cluster_c
        limit.adopt(cluster_c, now)
        before, cuts, grown = limit.value, limit.cuts, limit.grown
        limit.sample(latency, ran, now, in_flight, size)
        if limit.cuts > cuts:
            side.spawn(self._propose(self._args("cut", limit.value / before)))
        elif limit.grown > grown:
            side.spawn(self._propose(self._args("grow", 0)))

    def adopt(self, reply: Any, overload: bool | None = None) -> None:
        """Take the cluster's C (and the age of its last cut) from an ``adapt`` reply."""
        side = self._side
        _, c, running, waiting, epoch, since, _ = reply
        side.seen(running, waiting, epoch)
        since = int(since)
        side.max_running = int(c)
        self.limit.adopt(int(c), side.time(), None if since < 0 else since / 1000, overload)

    def _args(self, what: str, factor: float) -> tuple[object, ...]:
        limit = self.limit
        settings = limit.settings
        return (
            what,
            ms(limit.span()),
            repr(float(factor)),
            settings.floor,
            settings.ceiling,
            repr(float(settings.increase)),
            repr(float(settings.max_limit_factor)),
            repr(float(settings.increase_ratio)),
        )

    async def _propose(self, args: tuple[object, ...]) -> None:
        try:
            reply = await self._side.adapt(args)
        except UNREACHABLE:
            return  # a proposal is advice: the next window proposes again
        if args[0] == "cut" and not int(reply[0]):  # the cluster had cut within the window
            self.limit.cuts -= 1
            self.limit.suppressed += 1
        self.adopt(reply)
