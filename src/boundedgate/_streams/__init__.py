"""Streams that hold their gate's slot until they really end: the hand-over and the wrapper.

Nothing here knows a particular gate: a permit only has to implement :class:`StreamPermit`.
"""

from ._handing import HandsOver
from ._opener import StreamOpener, StreamSource, StreamT
from ._protocol import StreamPermit
from ._stream import GatedStream, hand_over
from ._stream import _abandon as abandon
from ._stream import _close_stream as close_stream
from ._stream import _first_item as first_item

__all__ = (
    "GatedStream",
    "HandsOver",
    "StreamOpener",
    "StreamPermit",
    "StreamSource",
    "StreamT",
    "abandon",
    "close_stream",
    "first_item",
    "hand_over",
)
