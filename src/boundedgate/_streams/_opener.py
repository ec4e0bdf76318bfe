"""StreamOpener: admit, open the stream, hand it the slot; the one-call form of the hand-over."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Generic, TypeVar, final

from .._core import check_flag
from ._protocol import StreamPermit
from ._stream import GatedStream, _close_stream, hand_over

__all__ = ("StreamOpener", "StreamSource", "StreamT")

#: The stream a source opens (an SDK's stream, an async generator), which the GatedStream wraps.
StreamT = TypeVar("StreamT", bound=AsyncIterator[Any])
_T = TypeVar("_T", bound=AsyncIterator[Any])

#: What :meth:`BoundedGate.stream` opens: a function called once the request is admitted (best:
#: nothing exists before then) that returns an awaitable stream (``create(stream=True)``), an async
#: context manager that yields one (the SDKs' ``.stream()``) or an async iterator (an async
#: generator); or such an awaitable or context manager itself.
StreamSource = (
    Callable[[], Awaitable[_T]]
    | Callable[[], AbstractAsyncContextManager[_T]]
    | Callable[[], _T]
    | Awaitable[_T]
    | AbstractAsyncContextManager[_T]
)


@final
class StreamOpener(Generic[_T]):
    """What :meth:`BoundedGate.stream` returns: await it, or enter it with ``async with``.

    ``await opener`` admits the request, opens the stream and returns the :class:`GatedStream`
    that now holds the slot. ``async with opener as stream:`` does the same and closes the stream
    on exit. Either way, if admission is refused nothing is opened (a coroutine given directly is
    closed unawaited), and if opening raises (a 429 from the SDK, a connection error) the slot is
    released as failed and the error propagates. It can be used once.
    """

    __slots__ = ("_permit", "_raise_late", "_source", "_stream")

    def __init__(self, permit: StreamPermit, source: StreamSource[_T], raise_late: bool) -> None:
        self._permit = permit
        self._source: StreamSource[_T] | None = source
        self._raise_late = check_flag("raise_late", raise_late)
        self._stream: GatedStream[_T] | None = None

    def __await__(self) -> Generator[Any, None, GatedStream[_T]]:
        return self._open().__await__()

    async def __aenter__(self) -> GatedStream[_T]:
        self._stream = await self._open()
        return self._stream

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.__aexit__(exc_type, exc, tb)

    async def _open(self) -> GatedStream[_T]:
        source, self._source = self._source, None
        if source is None:
            raise RuntimeError("a StreamOpener opens one stream; call gate.stream() for each")
        permit = self._permit
        try:
            await permit.__aenter__()
        except BaseException:
            close = getattr(source, "close", None)
            if inspect.iscoroutine(source) and close is not None:
                close()  # refused: the call it stands for never happens, and never warns
            raise
        try:
            gated = await self._hand_over(source() if callable(source) else source)
        except BaseException as exc:
            await permit.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        await permit.__aexit__(None, None, None)  # handed over: releases nothing, raises nothing
        return gated

    async def _hand_over(self, opened: object) -> GatedStream[_T]:
        stream: Any
        manager_exit: Any = None
        if hasattr(type(opened), "__anext__"):
            stream = opened
        elif isinstance(opened, AbstractAsyncContextManager):
            # A stream manager (the SDKs' .stream()): entering it sends the request.
            stream = await opened.__aenter__()
            manager_exit = opened.__aexit__
        else:
            stream = await opened  # type: ignore[misc]
        try:
            return hand_over(self._permit, stream, raise_late=self._raise_late, manager_exit=manager_exit)
        except TypeError:
            if manager_exit is not None:
                await manager_exit(None, None, None)
            else:
                await _close_stream(stream)
            raise

    def __repr__(self) -> str:
        return f"<StreamOpener of gate {self._permit.gate.name!r}>"
