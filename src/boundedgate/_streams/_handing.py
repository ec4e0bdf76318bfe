"""What every permit class shares to pass its slot to a stream: ``hand_to()`` and its bookkeeping."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .._core import BoolArg, Status
from ._stream import GatedStream, hand_over

if TYPE_CHECKING:
    from ._protocol import StreamPermit

__all__ = ("HandsOver",)

_Stream = TypeVar("_Stream", bound=AsyncIterator[Any])

RUNNING = Status.RUNNING


class HandsOver:
    """Mixin for a permit class: the stream hand-over.

    The class provides a ``_handed_over`` slot (False until the hand-over) and a ``status``, and its
    ``async with`` exit does nothing once ``_handed_over`` is set.
    """

    __slots__ = ()  # the slot is the permit class's own: two slotted bases cannot share a layout

    _handed_over: bool

    if TYPE_CHECKING:

        @property
        def status(self) -> Status:
            """Where the request stands."""

    def hand_to(self, stream: _Stream, *, raise_late: BoolArg = True) -> GatedStream[_Stream]:
        """Give the slot to ``stream``: the returned wrapper releases it when the stream ends.

        From then on the ``async with`` block neither releases the slot nor raises :class:`Late`,
        whatever happens in it, so hand over last (``return permit.hand_to(raw)``); if the block
        raises before the hand-over, it releases as usual. The permit's deadline is the stream's.

        Args:
            stream: An async iterator: an SDK stream (``create(stream=True)``), the stream an SDK's
                ``.stream()`` manager yields, or any async generator.
            raise_late: Raise :class:`Late` at the end of a stream that ends at or after the
                deadline (True), or only count it as late in ``stats()`` (False).

        Returns:
            The :class:`GatedStream` that now owns the slot: a drop-in for ``stream``.

        Raises:
            TypeError: ``stream`` is not an async iterator (the block still owns the slot).
            RuntimeError: The permit holds no slot (not admitted, or already released), or was
                already handed to a stream.
        """
        return hand_over(cast("StreamPermit", self), stream, raise_late=raise_late)

    def _hand_over(self) -> None:
        if self.status is not RUNNING:
            raise RuntimeError(f"{self!r} holds no slot to hand over")
        if self._handed_over:
            raise RuntimeError(f"{self!r} was already handed to a stream")
        self._handed_over = True  # type: ignore[misc]  # the slot of the class this is mixed into
