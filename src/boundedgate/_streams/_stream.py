"""GatedStream: a stream that holds its gate's slot until the stream really ends.

A streamed LLM response runs long after the call that opened it returned, so the slot must follow
the stream, not the ``async with`` block around ``create()``. The wrapper ends the request exactly
once, on whichever of these comes first, and always before its first ``await`` (so a second
cancellation cannot interrupt the release):

=====================================  ==========================================================
what ends the stream                   outcome
=====================================  ==========================================================
end of stream (``StopAsyncIteration``) completed, or late at or after the deadline (``Late`` is
                                       raised in place of ``StopAsyncIteration`` unless
                                       ``raise_late=False``)
an exception from the stream           failed (the stream's exception propagates)
the consumer cancelled while it reads  failed (``CancelledError`` propagates)
``aclose()`` / ``close()``             completed or late by the time: the consumer chose to stop
``async with`` exit                    the same, or failed if the block raised
``break`` out of ``async for``         completed or late by the time, one loop turn later
garbage collection of an open stream   leaked, with a ``ResourceWarning`` naming the gate
=====================================  ==========================================================

After the request ends, the wrapper closes the underlying stream (the SDK's HTTP response), shielded
from cancellation. Why ``break`` needs care: neither SDK closes anything when a consumer leaves an
``async for`` (its ``__aiter__`` makes a new generator over a shared iterator), so a wrapper whose
``__aiter__`` returned itself would never hear of it. ``__aiter__`` here is an async generator:
when the consumer leaves the loop it is dropped, asyncio's asyncgen finaliser runs its ``finally``
one loop turn later, in another task, and that closes the stream. The helpers that consume the SDK
object internally (``text_stream``, ``until_done()``, ``get_final_*()``) bypass ``__anext__``, so
they are wrapped too.

The wrapper holds no reference cycle, so reference counting finalises a dropped wrapper at once.
Its finaliser cannot await: it schedules the release and the close on the event loop that owns the
gate (``call_soon_threadsafe``, from whichever thread the collector runs in), rather than releasing
in place, because the cyclic collector can run a finaliser between any two bytecodes, including
in the middle of the gate's own bookkeeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Any, Generic, TypeVar, final

import anyio
from typing_extensions import Self

from .._core import Status
from ._protocol import StreamPermit

__all__ = ("GatedStream", "hand_over")

_T = TypeVar("_T")

RUNNING = Status.RUNNING
LATE = Status.LATE
FAILED = Status.FAILED
LEAKED = Status.LEAKED

#: The SDK helpers that read the whole stream inside the SDK object, past the wrapper's ``__anext__``.
_DRAINING = frozenset(
    ("until_done", "get_final_message", "get_final_text", "get_final_completion", "get_final_response")
)

_Exit = Callable[[type[BaseException] | None, BaseException | None, TracebackType | None], Awaitable[Any]]

#: Close tasks started by finalisers, kept alive until they finish (the loop holds tasks weakly).
_closing: set[asyncio.Task[None]] = set()


def hand_over(
    permit: StreamPermit,
    stream: AsyncIterator[_T],
    *,
    raise_late: bool = True,
    manager_exit: _Exit | None = None,
) -> GatedStream[_T]:
    """Pass ``permit``'s slot to ``stream`` and return the wrapper that now owns it.

    Args:
        permit: A permit that holds its slot.
        stream: The async iterator to follow.
        raise_late: Raise :class:`Late` at the end of a stream that ends at or after the deadline.
        manager_exit: For a stream opened by an async context manager, that manager's ``__aexit__``,
            called to close it instead of the stream's own ``aclose()``/``close()``.

    Raises:
        TypeError: ``stream`` is not an async iterator (nothing was handed over).
        RuntimeError: The permit holds no slot, or was already handed to a stream.
    """
    if not hasattr(type(stream), "__anext__"):
        raise TypeError(f"can only hand a permit to an async iterator, not {type(stream).__name__!r}")
    permit._hand_over()
    return GatedStream(stream, permit, raise_late, manager_exit)


@final
class GatedStream(Generic[_T]):
    """An async stream that holds a gate's slot and gives it back exactly once, when the stream ends.

    Made by :meth:`Permit.hand_to` or :meth:`BoundedGate.stream`; not constructed directly. It is a
    drop-in for the object it wraps:

    - ``async for``, ``__anext__``, ``async with``, and both ``aclose()`` and ``close()`` (the SDKs
      differ in which they have), all of which release the slot and close the wrapped stream;
    - every other attribute passes through (openai's ``.response``, anthropic's ``request_id``,
      ``current_message_snapshot``, ...), except the helpers that consume the stream inside the SDK
      object, which are wrapped so that they release too: ``text_stream``, ``until_done()``
      (returning the wrapper where the SDK returns itself), ``get_final_message()``,
      ``get_final_text()``, ``get_final_completion()`` and ``get_final_response()``.

    What ends the request, and how it counts: the end of the stream is completed, or late at or
    after the deadline, and then raises :class:`Late` in place of ``StopAsyncIteration`` (or returns
    normally with ``raise_late=False``; ``stats()`` counts it as late either way); an exception from
    the stream, or the consumer being cancelled while it reads, is failed; ``aclose()``, ``close()``,
    leaving ``async for`` early (``break``) and leaving ``async with`` are completed or late by the
    time and never raise ``Late`` (the consumer chose to stop), except that an ``async with`` block
    that raised is failed. A stream that is garbage-collected while open is leaked, with a
    ``ResourceWarning`` naming the gate, like an unclosed file: nobody saw how it ended, its run time
    is whenever the collector came by, and the leak is a bug to find, not a success to count.

    Known differences from the wrapped object: ``isinstance`` checks against the SDK class fail, and
    once the consumer leaves an ``async for`` early the stream is closed, so iterating again yields
    nothing (the SDKs would carry on where the loop stopped, holding the connection meanwhile).
    Exceptions raised in the body of an ``async for`` that is not inside ``async with stream:`` look
    like a ``break`` to the wrapper; put the loop inside ``async with`` to have them count as failed.
    """

    __slots__ = ("_closed", "_manager_exit", "_permit", "_raise_late", "_stream")

    def __init__(
        self,
        stream: AsyncIterator[_T],
        permit: StreamPermit,
        raise_late: bool,
        manager_exit: _Exit | None,
    ) -> None:
        self._stream = stream
        self._permit = permit
        self._raise_late = raise_late
        self._manager_exit = manager_exit
        # Set once the wrapped stream is closed (or its close begun): nothing is left to do.
        self._closed = False

    # -- iteration ------------------------------------------------------------------------------

    async def __anext__(self) -> _T:
        item: _T = await self._step(self._stream)
        return item

    def __aiter__(self) -> AsyncIterator[_T]:
        return self._guarded(self._stream)

    async def _step(self, source: AsyncIterator[Any]) -> Any:
        if self._closed:
            raise StopAsyncIteration
        try:
            return await source.__anext__()
        except StopAsyncIteration:
            pass
        except BaseException as exc:
            await self._end(exc)
            raise
        await self._end(None)
        raise StopAsyncIteration

    async def _guarded(self, source: AsyncIterator[Any]) -> AsyncIterator[Any]:
        # An async generator, so that leaving the loop early (break, an exception or a cancellation
        # in the loop's body) reaches the finally: at once if the loop closes it, else when asyncio's
        # asyncgen finaliser runs it, one loop turn after the generator was dropped.
        try:
            while True:
                try:
                    item = await self._step(source)
                except StopAsyncIteration:
                    return
                yield item
        finally:
            await self.aclose()

    # -- closing --------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Release the slot (completed, or late past the deadline) and close the wrapped stream.

        Idempotent; never raises :class:`Late`. Raises what closing the wrapped stream raises.
        """
        self._permit._finish()
        await self._close(None)

    async def close(self) -> None:
        """The same as :meth:`aclose` (openai's streams have both names, anthropic's only this one)."""
        await self.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._permit._finish(None if exc_type is None else FAILED)
        await self._close(exc)

    async def _end(self, exc: BaseException | None) -> None:
        """The stream ended by itself (``exc`` None) or raised ``exc``: end the request, close it.

        Raises :class:`Late` if this is what ended the request, at its end, past the deadline.
        """
        permit = self._permit
        ending = permit.status is RUNNING
        permit._finish(None if exc is None else FAILED)  # before any await
        await self._close(exc)
        if ending and exc is None and self._raise_late and permit.status is LATE:
            raise permit._late()

    async def _close(self, exc: BaseException | None) -> None:
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            if self._manager_exit is not None:
                await self._manager_exit(
                    None if exc is None else type(exc), exc, None if exc is None else exc.__traceback__
                )
            else:
                await _close_stream(self._stream)

    # -- the drop-in ----------------------------------------------------------------------------

    @property
    def permit(self) -> StreamPermit:
        """The permit whose slot this stream holds (e.g. to ``settle()`` the usage at the end)."""
        return self._permit

    def __getattr__(self, name: str) -> Any:
        if name in GatedStream.__slots__:  # a slot read before __init__ set it (e.g. in __del__)
            raise AttributeError(name)
        value = getattr(self._stream, name)
        if name in _DRAINING:
            return functools.partial(self._drain, name)
        if name == "text_stream":
            return self._guarded(value)
        return value

    async def _drain(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call the SDK helper ``name`` that reads the stream to its end, and settle the request.

        ``get_final_*()`` first run ``until_done()`` (where the object has it), so that an error the
        helper raises after the stream ended (``get_final_text()`` with no text block) is the
        caller's, not the stream's, and does not count as a failed request.
        """
        stream = self._stream
        if name != "until_done" and hasattr(stream, "until_done"):
            await self._drain("until_done")
        try:
            result = await getattr(stream, name)(*args, **kwargs)
        except BaseException as exc:
            await self._end(exc)
            raise
        await self._end(None)
        return self if result is stream else result

    # -- the last resort ------------------------------------------------------------------------

    def __del__(self) -> None:
        try:
            if self._closed:
                return
            permit, stream, manager_exit = self._permit, self._stream, self._manager_exit
        except AttributeError:  # __init__ never ran
            return
        note = _abandon(permit, stream, manager_exit)
        warnings.warn(f"unclosed {self!r}{note}", ResourceWarning, stacklevel=1, source=self)

    def __repr__(self) -> str:
        permit = self._permit
        return (
            f"<GatedStream of gate {permit.gate.name!r}: {permit.status.value}, "
            f"over {type(self._stream).__module__}.{type(self._stream).__qualname__}>"
        )


async def _close_stream(stream: object) -> None:
    """Close an async stream by whichever method it has (async generators and openai's: ``aclose``)."""
    close = getattr(stream, "aclose", None) or getattr(stream, "close", None)
    if close is not None:
        result = close()
        if inspect.isawaitable(result):
            await result


def _abandon(permit: StreamPermit, stream: object, manager_exit: _Exit | None) -> str:
    """From a finaliser: end the request as leaked and close the stream, on the permit's loop.

    Returns a note for the warning when that loop is closed.
    """
    loop = permit._loop
    if loop is not None and not loop.is_closed():
        try:
            loop.call_soon_threadsafe(_finish_abandoned, permit, stream, manager_exit)
        except RuntimeError:  # the loop closed in between
            pass
        else:
            return ""
    # Nothing runs the gate on a closed loop: ending the request here races with no one.
    try:
        permit._finish(LEAKED)
    except RuntimeError:  # waiters are parked on futures of the closed loop
        return " (its event loop is closed: the slot could not be given back)"
    return " (its event loop is closed: the stream could not be closed)"


def _finish_abandoned(permit: StreamPermit, stream: object, manager_exit: _Exit | None) -> None:
    permit._finish(LEAKED)
    task = asyncio.get_running_loop().create_task(_close_abandoned(stream, manager_exit))
    _closing.add(task)
    task.add_done_callback(_closing.discard)


async def _close_abandoned(stream: object, manager_exit: _Exit | None) -> None:
    # A finaliser's close has nowhere to report a failure to: the stream is being thrown away.
    with contextlib.suppress(Exception):
        if manager_exit is not None:
            await manager_exit(None, None, None)
        else:
            await _close_stream(stream)
