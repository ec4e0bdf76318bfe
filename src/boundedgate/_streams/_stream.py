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
its deadline, with ``on_deadline="cut"`` cut: the stream is closed then, its slot goes back once
                                       the close is over, and the next read (or the read in
                                       flight) raises ``DeadlineCut``; an end of stream or a
                                       close at or after the deadline is cut too
=====================================  ==========================================================

After the request ends, the wrapper closes the underlying stream (the SDK's HTTP response) in a task
of its own, and whoever asked for the close waits for that task to finish: a cancellation of the
waiting task (``task.cancel()``, ``asyncio.timeout``, an anyio scope) is held back until the close
is over, then raised, so that it cannot leave the response half closed. Why ``break`` needs care:
neither SDK closes anything when a consumer leaves an ``async for`` (its ``__aiter__`` makes a new
generator over a shared iterator), so a wrapper whose ``__aiter__`` returned itself would never
hear of it. ``__aiter__`` here returns an iterator of its own for each loop: dropped after it
started (the loop was left), it ends the stream at once for every later read, and schedules the
release and the close for the next loop turn. The helpers that consume the SDK object internally
(``text_stream``, ``until_done()``, ``get_final_*()``) bypass ``__anext__``, so they are wrapped too.

Races between tasks: a stream has one reader at a time (a second task reading at once is refused).
A close while another task reads interrupts that read (it is cancelled with a message of the
wrapper's own, and the cancellation is taken back), and closes the wrapped stream once the read has
ended: what the read gave is dropped, and the reader sees the end of the stream, so no item is ever
yielded after the slot was given back. A reader that is being cancelled already is left to end its
read by itself, and keeps its cancellation; so does one cancelled again before it ran.

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
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Protocol, Self, TypeVar, cast, final, overload

from .._core import BoolArg, Status, Ticket, check_flag, note
from .._scopes import shield_from_anyio
from ._protocol import StreamPermit

if TYPE_CHECKING:
    from . import _sdk

    _Done = TypeVar("_Done", bound=_sdk.UntilDone)

__all__ = ("GatedStream", "hand_over")

_T = TypeVar("_T")
_R = TypeVar("_R")
#: The stream a GatedStream wraps (an SDK's stream, an async generator): its type is the wrapper's.
_S_co = TypeVar("_S_co", bound=AsyncIterator[Any], covariant=True)
#: The same, in a function's signature.
_Stream = TypeVar("_Stream", bound=AsyncIterator[Any])

RUNNING = Status.RUNNING
LATE = Status.LATE
CUT = Status.CUT
FAILED = Status.FAILED
LEAKED = Status.LEAKED

#: The SDK helpers that read the whole stream inside the SDK object, past the wrapper's ``__anext__``.
_DRAINING = frozenset(
    ("until_done", "get_final_message", "get_final_text", "get_final_completion", "get_final_response")
)

#: The message of the cancellation with which a close interrupts another task's read in flight.
_CLOSING = "boundedgate: the stream was closed while this task read it"

_Exit = Callable[[type[BaseException] | None, BaseException | None, TracebackType | None], Awaitable[Any]]

#: Close tasks, kept alive until they finish (the loop holds tasks weakly).
_closing: set[asyncio.Task[Any]] = set()


def _being_cancelled(task: asyncio.Task[Any]) -> bool:
    return task.cancelling() > 0


def _taken_back(task: asyncio.Task[Any], exc: BaseException | None) -> bool:
    """Take back the interruption's cancellation of ``task``: True if no other one is left."""
    return task.uncancel() == 0


def hand_over(
    permit: StreamPermit,
    stream: _Stream,
    *,
    raise_late: BoolArg = True,
    manager_exit: _Exit | None = None,
) -> GatedStream[_Stream]:
    """Pass ``permit``'s slot to ``stream`` and return the wrapper that now owns it.

    Args:
        permit: A permit that holds its slot.
        stream: The async iterator to follow.
        raise_late: Raise :class:`Late` at the end of a stream that ends at or after the deadline.
        manager_exit: For a stream opened by an async context manager, that manager's ``__aexit__``,
            called to close it instead of the stream's own ``aclose()``/``close()``.

    Raises:
        TypeError: ``stream`` is not an async iterator, or ``raise_late`` is not True or False
            (nothing was handed over).
        RuntimeError: The permit holds no slot, or was already handed to a stream.
    """
    if not hasattr(type(stream), "__anext__"):
        raise TypeError(f"can only hand a permit to an async iterator, not {type(stream).__name__!r}")
    late = check_flag("raise_late", raise_late)
    permit._hand_over()
    return GatedStream(stream, permit, late, manager_exit)


def _first_item(permit: StreamPermit) -> None:
    """Note on a gate's ticket when its stream gave its first item (the record's ``first_chunk``).

    A permit of another kind that keeps the time itself (a ``RedisPermit``: its adaptive
    controller's sample) is told through its ``_note_first_item()``.
    """
    if isinstance(permit, Ticket):
        if "first_item" not in getattr(permit, "_notes", ()):
            loop = permit._loop
            if loop is not None:
                note(permit, "first_item", loop.time())
        return
    noting = getattr(permit, "_note_first_item", None)
    if noting is not None:
        noting()


class _CutPermit(Protocol):
    """A permit admitted with ``on_deadline="cut"``: it arms the stream's cut, and names it."""

    def _arm_cut(self, callback: Callable[[], object]) -> object: ...

    def _cut_error(self) -> Exception: ...


def _arm_cut(gated: GatedStream[Any], permit: StreamPermit) -> None:
    """Close ``gated`` at its permit's deadline, if the permit was admitted with ``on_deadline="cut"``.

    The loop's timer holds the stream weakly: a stream dropped before its deadline is still
    finalised at once (and counted leaked), not kept alive until then.
    """
    arm = getattr(permit, "_arm_cut", None)
    if arm is not None and permit.status is RUNNING:
        arm(functools.partial(_cut_at_deadline, weakref.ref(gated)))


def _cut_at_deadline(ref: weakref.ref[GatedStream[Any]]) -> None:
    """The deadline of a stream admitted with ``on_deadline="cut"``: close it, then end it as cut."""
    gated = ref()
    if gated is None or gated._closing is not None or gated._permit.status is not RUNNING:
        return
    gated._cut = True
    permit = gated._permit
    gated._begin_close(None).add_done_callback(lambda _: permit._finish(CUT))


class _Interrupted(Exception):
    """A read in flight when another task closed the stream: what it gave is not the consumer's."""


@final
class GatedStream(Generic[_S_co]):
    """An async stream that holds a gate's slot and gives it back exactly once, when the stream ends.

    Made by :meth:`Permit.hand_to` or :meth:`BoundedGate.stream`; not constructed directly. It is a
    drop-in for the object it wraps, and generic over it: ``GatedStream[AsyncStream[ChatCompletionChunk]]``
    yields what the openai stream yields, and has its helpers with their types, so a type checker
    catches a misspelt helper, or one the wrapped stream does not have:

    - ``async for``, ``__anext__``, ``async with``, and both ``aclose()`` and ``close()`` (the SDKs
      differ in which they have), all of which release the slot and close the wrapped stream;
    - every other attribute passes through (openai's ``.response``, anthropic's ``request_id``,
      ``current_message_snapshot``, ...), except the helpers that consume the stream inside the SDK
      object, which are wrapped so that they release too: ``text_stream``, ``until_done()``
      (returning the wrapper where the SDK returns itself), ``get_final_message()``,
      ``get_final_text()``, ``get_final_completion()`` and ``get_final_response()``.

    A type checker sees those helpers, ``response``, ``request_id``, ``current_message_snapshot`` and
    ``current_completion_snapshot``, each where the wrapped stream has it; other attributes pass
    through at run time only.

    What ends the request, and how it counts: the end of the stream is completed, or late at or
    after the deadline, and then raises :class:`Late` in place of ``StopAsyncIteration`` (or returns
    normally with ``raise_late=False``; ``stats()`` counts it as late either way); an exception from
    the stream, or the consumer being cancelled while it reads, is failed; ``aclose()``, ``close()``,
    leaving ``async for`` early (``break``) and leaving ``async with`` are completed or late by the
    time and never raise ``Late`` (the consumer chose to stop), except that an ``async with`` block
    that raised is failed. A stream that is garbage-collected while open is leaked, with a
    ``ResourceWarning`` naming the gate, like an unclosed file: nobody saw how it ended, its run time
    is whenever the collector came by, and the leak is a bug to find, not a success to count.

    Closing returns once the wrapped stream is closed. A cancellation of the task that closes
    (``task.cancel()``, ``asyncio.timeout``, an anyio scope) waits for the close to finish, and is
    raised after it. Once the stream is over (it ended, was closed, or a consumer left an
    ``async for`` over it early), every read is its end: ``__anext__`` raises
    ``StopAsyncIteration`` and ``async for`` yields nothing. One task reads at a time: a read while
    another task's read is in flight raises ``RuntimeError`` and ends nothing. A close while another
    task reads interrupts that read, which then ends as the end of the stream (a helper such as
    ``get_final_message()`` raises ``RuntimeError``); whatever it was about to return is dropped, so
    nothing is yielded once the slot is given back.

    Known differences from the wrapped object: ``isinstance`` checks against the SDK class fail, and
    once the consumer leaves an ``async for`` early the stream is closed, so iterating again yields
    nothing (the SDKs would carry on where the loop stopped, holding the connection meanwhile).
    Exceptions raised in the body of an ``async for`` that is not inside ``async with stream:`` look
    like a ``break`` to the wrapper; put the loop inside ``async with stream:`` to have them count
    as failed.
    """

    __slots__ = (
        "__weakref__",
        "_closing",
        "_cut",
        "_interruption",
        "_manager_exit",
        "_over",
        "_permit",
        "_raise_late",
        "_reader",
        "_stream",
    )

    def __init__(
        self,
        stream: _S_co,
        permit: StreamPermit,
        raise_late: bool,
        manager_exit: _Exit | None,
    ) -> None:
        self._stream = stream
        self._permit = permit
        self._raise_late = raise_late
        self._manager_exit = manager_exit
        # True once every read is the end: the close has begun, or a loop over the stream was left.
        self._over = False
        # The close of the wrapped stream once begun; it returns the error closing raised, if any.
        self._closing: asyncio.Task[Exception | None] | None = None
        # The task inside a read of the wrapped stream, and the close that interrupted that read.
        self._reader: asyncio.Task[Any] | None = None
        self._interruption: _Interruption | None = None
        # True once the stream was closed at its deadline (``on_deadline="cut"``).
        self._cut = False
        _arm_cut(self, permit)

    # -- iteration ------------------------------------------------------------------------------

    async def __anext__(self: GatedStream[AsyncIterator[_T]]) -> _T:
        item: _T = await self._step(self._stream)
        return item

    def __aiter__(self: GatedStream[AsyncIterator[_T]]) -> AsyncIterator[_T]:
        return _Loop(self, self._stream)

    async def _step(self, source: AsyncIterator[Any]) -> Any:
        if self._over:
            self._raise_if_cut()
            raise StopAsyncIteration
        over = self._claim()
        try:
            item = await self._read(source.__anext__, over)
            _first_item(self._permit)
            return item
        except StopAsyncIteration:
            pass
        except _Interrupted:
            await self._closed_meanwhile()
            self._raise_if_cut()
            raise StopAsyncIteration from None
        except BaseException as exc:
            await self._end(exc)
            raise
        await self._end(None)
        raise StopAsyncIteration

    def _raise_if_cut(self) -> None:
        """Raise ``DeadlineCut`` if the stream was closed at its deadline (``on_deadline="cut"``)."""
        if self._cut:
            permit = self._permit
            permit._finish(CUT)  # its close is over: already ended, unless its callback is yet to run
            raise cast("_CutPermit", permit)._cut_error()

    def _claim(self) -> bool:
        """Make the current task the stream's one reader; return ``_over`` as the read begins.

        Raises:
            RuntimeError: Another task is reading the stream.
        """
        if self._reader is not None:
            raise RuntimeError(f"another task is reading {self!r}: a stream has one reader at a time")
        self._reader = asyncio.current_task()
        return self._over

    async def _read(self, read: Callable[[], Awaitable[_R]], over: bool) -> _R:
        """Await ``read()`` as the reader :meth:`_claim` made (``over``: what it returned).

        Raises:
            _Interrupted: The stream was closed while it read: what the read gave is dropped.
        """
        try:
            result = await read()
        except BaseException as exc:
            if self._read_ended(over, exc):
                raise _Interrupted from None
            raise
        if self._read_ended(over, None):
            raise _Interrupted
        return result

    def _read_ended(self, over: bool, exc: BaseException | None) -> bool:
        """A read begun with ``_over`` at ``over`` ended by ``exc`` (None: a result).

        Returns True if the stream was closed meanwhile: what the read gave is then dropped,
        except a cancellation that is the reader's own.
        """
        self._reader = None
        interruption, self._interruption = self._interruption, None
        if interruption is not None:
            return interruption.ended(exc)
        return self._over is not over and not isinstance(exc, asyncio.CancelledError)

    async def _closed_meanwhile(self) -> None:
        """After a read the stream's close interrupted: return once that close is over."""
        closing = self._closing
        if closing is not None:  # else a loop was left, and its close is yet to begin
            await _outlast(closing)

    # -- closing --------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Release the slot (completed, or late past the deadline) and close the wrapped stream.

        Idempotent; never raises :class:`Late`. Returns once the wrapped stream is closed, even if
        another call began the close; a cancellation meanwhile is raised once it is. Raises what
        closing the wrapped stream raised, from the call that began the close.
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
        if ending and exc is None and permit.status is CUT:
            raise cast("_CutPermit", permit)._cut_error()

    async def _close(self, exc: BaseException | None) -> None:
        closing = self._closing
        began = closing is None
        if closing is None:
            closing = self._begin_close(exc)
        error = await _outlast(closing)
        if began and error is not None:
            raise error

    def _begin_close(self, exc: BaseException | None) -> asyncio.Task[Exception | None]:
        """Start closing the wrapped stream, in a task no cancellation of the caller's reaches.

        A read in flight in another task is interrupted first, and the close waits for its end.
        """
        self._over = True
        reader = self._reader
        read_over = None
        if reader is not None and reader is not asyncio.current_task():
            self._interruption = _Interruption(reader)
            read_over = self._interruption.read_over
        task = asyncio.get_running_loop().create_task(_shut(self._stream, self._manager_exit, exc, read_over))
        _closing.add(task)
        task.add_done_callback(_closing.discard)
        self._closing = task
        return task

    def _left(self) -> None:
        """A loop over the stream was dropped before the end: every read is the end from now on.

        Called from a finaliser (any thread, any bytecode): the release and the close are
        scheduled on the permit's loop. If that loop is closed, the stream's own finaliser will
        find it unclosed.
        """
        if self._over:
            return
        self._over = True
        loop = self._permit._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed
                loop.call_soon_threadsafe(self._end_left)

    def _end_left(self) -> None:
        self._permit._finish()
        if self._closing is None:
            self._begin_close(None).add_done_callback(_report_left)

    # -- the drop-in ----------------------------------------------------------------------------

    @property
    def permit(self) -> StreamPermit:
        """The permit whose slot this stream holds (e.g. to ``settle()`` the usage at the end)."""
        return self._permit

    if TYPE_CHECKING:
        # What the wrapped stream offers, typed as the SDK types it (see ``_sdk``); at run time,
        # ``__getattr__`` passes these and every other attribute through.

        @property
        def text_stream(self: GatedStream[_sdk.TextStream[_T]]) -> AsyncIterator[_T]:
            """The wrapped stream's ``text_stream``, read through the wrapper (it releases at its end)."""

        @overload
        async def until_done(self: GatedStream[_sdk.UntilDoneNone]) -> None: ...
        @overload
        async def until_done(self: GatedStream[_Done]) -> GatedStream[_Done]: ...
        async def until_done(self: Any) -> Any:
            """Read the stream to its end (the wrapper where the SDK returns itself)."""

        async def get_final_message(self: GatedStream[_sdk.FinalMessage[_T]]) -> _T:
            """The SDK's ``get_final_message()``: reads the stream to its end, and releases."""

        async def get_final_text(self: GatedStream[_sdk.FinalText[_T]]) -> _T:
            """The SDK's ``get_final_text()``: reads the stream to its end, and releases."""

        async def get_final_completion(self: GatedStream[_sdk.FinalCompletion[_T]]) -> _T:
            """The SDK's ``get_final_completion()``: reads the stream to its end, and releases."""

        async def get_final_response(self: GatedStream[_sdk.FinalResponse[_T]]) -> _T:
            """The SDK's ``get_final_response()``: reads the stream to its end, and releases."""

        @property
        def response(self: GatedStream[_sdk.HasResponse[_T]]) -> _T:
            """The wrapped stream's HTTP response."""

        @property
        def request_id(self: GatedStream[_sdk.HasRequestId[_T]]) -> _T:
            """The wrapped stream's request id."""

        @property
        def current_message_snapshot(self: GatedStream[_sdk.MessageSnapshot[_T]]) -> _T:
            """The message the wrapped stream has assembled so far."""

        @property
        def current_completion_snapshot(self: GatedStream[_sdk.CompletionSnapshot[_T]]) -> _T:
            """The completion the wrapped stream has assembled so far."""

    else:

        def __getattr__(self, name: str) -> Any:
            if name in GatedStream.__slots__:  # a slot read before __init__ set it (e.g. in __del__)
                raise AttributeError(name)
            value = getattr(self._stream, name)
            if name in _DRAINING:
                return functools.partial(self._drain, name)
            if name == "text_stream":
                return _Loop(self, value)
            return value

    async def _drain(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call the SDK helper ``name`` that reads the stream to its end, and settle the request.

        ``get_final_*()`` first run ``until_done()`` (where the object has it), so that an error the
        helper raises after the stream ended (``get_final_text()`` with no text block) is the
        caller's, not the stream's, and does not count as a failed request. On a stream that is
        over, the helper reads nothing more: the stream is closed first.
        """
        stream = self._stream
        if self._over:
            await self.aclose()
        if name != "until_done" and hasattr(stream, "until_done"):
            await self._drain("until_done")
        read = functools.partial(getattr(stream, name), *args, **kwargs)
        over = self._claim()
        try:
            result = await self._read(read, over)
        except _Interrupted:
            await self._closed_meanwhile()
            raise RuntimeError(f"{self!r} was closed while {name}() read it") from None
        except BaseException as exc:
            await self._end(exc)
            raise
        await self._end(None)
        return self if result is stream else result

    # -- the last resort ------------------------------------------------------------------------

    def __del__(self) -> None:
        try:
            if self._closing is not None:
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


@final
class _Loop(Generic[_T]):
    """The iterator of one ``async for`` over a :class:`GatedStream` (or over its ``text_stream``).

    Dropped after it started, it tells the stream that the loop was left (a ``break``, or the
    loop's body raised); one never started ends nothing (``aiter(stream)``, ``hasattr()``).
    """

    __slots__ = ("_gated", "_source", "_started")

    def __init__(self, gated: GatedStream[Any], source: AsyncIterator[_T]) -> None:
        self._gated = gated
        self._source = source
        self._started = False

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> _T:
        self._started = True
        item: _T = await self._gated._step(self._source)
        return item

    async def aclose(self) -> None:
        """Close the stream now (what ``contextlib.aclosing()`` calls): its ``aclose()``."""
        await self._gated.aclose()

    def __del__(self) -> None:
        if self._started:
            self._gated._left()


@final
class _Interruption:
    """A close that waits for another task's read in flight to end, and cuts that read short.

    It cancels the reader (and takes the cancellation back as the read ends) unless the reader is
    being cancelled already: then its own cancellation is ending the read.
    """

    __slots__ = ("_cancelled", "read_over")

    def __init__(self, reader: asyncio.Task[Any]) -> None:
        #: Set when the read has ended: only then can the wrapped stream be closed.
        self.read_over: asyncio.Future[None] = reader.get_loop().create_future()
        self._cancelled: asyncio.Task[Any] | None = None
        if not _being_cancelled(reader):
            self._cancelled = reader
            reader.cancel(_CLOSING)

    def ended(self, exc: BaseException | None) -> bool:
        """The read ended by ``exc`` (None: a result): True if what it gave is to be dropped.

        All of it is, except a cancellation of the reader that is not only this one's (the
        reader's own, requested before or after it).
        """
        if not self.read_over.done():
            self.read_over.set_result(None)
        reader = self._cancelled
        alone = reader is not None and _taken_back(reader, exc)
        return alone or not isinstance(exc, asyncio.CancelledError)


async def _outlast(task: asyncio.Task[_R]) -> _R:
    """Wait for ``task`` to finish even if the waiting task is cancelled, then raise that cancellation."""
    cancelled: asyncio.CancelledError | None = None
    with shield_from_anyio():  # else an anyio scope cancels again at every loop turn
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError as exc:
                cancelled = cancelled or exc
    if cancelled is not None:
        raise cancelled
    return task.result()


async def _shut(
    stream: object, manager_exit: _Exit | None, exc: BaseException | None, read_over: Awaitable[None] | None
) -> Exception | None:
    """Close ``stream`` (through ``manager_exit`` if given) once ``read_over``; return the error raised."""
    try:
        if read_over is not None:
            await read_over
        if manager_exit is not None:
            await manager_exit(
                None if exc is None else type(exc), exc, None if exc is None else exc.__traceback__
            )
        else:
            await _close_stream(stream)
    except Exception as error:  # returned, to be raised by the call that began the close
        return error
    return None


def _report_left(task: asyncio.Task[Exception | None]) -> None:
    """Closing a stream whose loop was left early raised: nobody awaits it, so the loop reports it."""
    if not task.cancelled() and task.exception() is None and (error := task.result()) is not None:
        task.get_loop().call_exception_handler(
            {
                "message": "closing a stream left early by its async for failed",
                "exception": error,
                "task": task,
            }
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
    # A finaliser's close has nowhere to report a failure to (the stream is being thrown away):
    # _shut returns the error, and nobody reads it.
    task = asyncio.get_running_loop().create_task(_shut(stream, manager_exit, None, None))
    _closing.add(task)
    task.add_done_callback(_closing.discard)
