"""What a stream needs from the permit it is handed: the contract every gate's permit implements.

The wrapper never reaches into a permit's internals, so any permit that implements
:class:`StreamPermit` can be handed to a stream: the asyncio gate's ``Permit`` does, and so can a
permit whose slot lives elsewhere (a Redis gate's).
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .._core import Status
    from .._errors import Late

__all__ = ("StreamPermit",)


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class StreamPermit(Protocol):
    """A permit that can pass its slot to a stream.

    Every method is called on the thread of the event loop that owns the permit, except where said.
    """

    @property
    def status(self) -> Status:
        """Where the request stands; ``Status.RUNNING`` while it holds its slot."""
        ...

    @property
    def gate(self) -> _Named:
        """The gate the slot belongs to; its ``name`` goes into warnings and reprs."""
        ...

    @property
    def _loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop that owns the permit's gate now, read at the moment it is needed.

        A stream collected without being closed schedules its release here, from any thread
        (``call_soon_threadsafe``). When that loop is closed nothing can be running the gate, and
        the release is made at once in the collecting thread.
        """
        ...

    def settle(self, cost: float) -> None:
        """Record the request's real rate cost once known (e.g. at the end of the stream)."""
        ...

    def _hand_over(self) -> None:
        """Pass the slot to a stream: from now on the admission's exit neither releases nor raises.

        Raises:
            RuntimeError: The permit holds no slot, or was already handed to a stream.
        """
        ...

    def _finish(self, ending: Status | None = None) -> None:
        """End the request now if it still holds its slot, and give the slot back; else do nothing.

        Synchronous and idempotent, with no ``await``: the outcome is ``ending`` when the request
        did not end normally (``FAILED``, ``ABORTED`` or ``LEAKED``, as for
        ``GateState.release``), else ``COMPLETED`` or ``LATE`` by the time (``now >= deadline``).
        """
        ...

    def _late(self) -> Late:
        """The :class:`Late` error describing a request that ended ``LATE``."""
        ...

    async def __aenter__(self) -> object:
        """Arrive at the gate: start, wait, or raise the gate's refusal."""
        ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Leave the admission: release (unless handed over), and raise ``Late`` if it ended late."""
        ...
