"""The response body that holds the request's slot until the body is read to its end or closed.

The transport swaps ``response.stream`` for a :class:`GatedBody`. httpx reads a response through
it: ``aiter_raw()`` iterates it and calls ``aclose()`` after the last chunk; ``response.aclose()``
(the SDKs call it when their stream ends or is closed) closes it. The request ends exactly once,
on the first of these, always before the first ``await``:

=================================  ==============================================================
what ends the body                 outcome
=================================  ==============================================================
read to its end                    completed, or late at or after the deadline (never raised:
                                   the transport cannot take back a response it delivered)
``aclose()`` before its end        the same: the consumer chose to stop
a read error from the connection   failed (the error propagates)
the reader cancelled mid-read      failed, released in that same step (``CancelledError``)
its deadline, ``on_deadline="cut"`` cut: a read in flight is cancelled, and raises ``DeadlineCut``
                                   (released in that step); with none in flight, the body is
                                   closed, released once it is, and the next read raises it
collected unclosed                 leaked, with a ``ResourceWarning``, released on the loop
=================================  ==============================================================

The usage the body reported (see :mod:`._usage`) is settled at the end, whichever it was; the
slot is given back even if settling fails. The transport may :meth:`~GatedBody.peek` at the start
of a body before it returns the response (a 429's, whose words say rate limit or overload): what
it read is kept and handed to the client first, unchanged, so the client sees every byte once.
httpx2's client asserts that a transport's stream is an ``httpx2.AsyncByteStream``: the class
is built once per httpx flavour, mixed with that flavour's ``AsyncByteStream``.
"""

from __future__ import annotations

import asyncio
import functools
import warnings
import weakref
from collections.abc import AsyncIterator, Callable
from types import ModuleType
from typing import Any

import anyio

from .._core import Status
from .._streams import StreamPermit
from .._streams import abandon as _abandon
from .._streams import first_item as _first_item
from ._exchange import Exchange
from ._usage import UsageReader

__all__ = ("GatedBody", "body_class")

FAILED = Status.FAILED
RUNNING = Status.RUNNING
CUT = Status.CUT

#: Settles the usage the body reported (``exchange.usage``), or reports why it cannot (the reader's
#: ``problem``); never raises.
Settle = Callable[[StreamPermit, Exchange, "str | None"], None]

_classes: dict[str, type[GatedBody]] = {}


def body_class(flavour: ModuleType) -> type[GatedBody]:
    """The :class:`GatedBody` subclass that is also ``flavour.AsyncByteStream`` (httpx, httpx2)."""
    cls = _classes.get(flavour.__name__)
    if cls is None:
        cls = _classes[flavour.__name__] = type(
            "GatedBody", (GatedBody, flavour.AsyncByteStream), {"__module__": __name__}
        )
    return cls


def _taken_back(task: asyncio.Task[Any] | None) -> bool:
    """Take back the cut's cancellation of ``task``: True if it was the only one."""
    return task is not None and task.uncancel() == 0


def _cut_at_deadline(ref: weakref.ref[GatedBody]) -> None:
    """A body's deadline, with ``on_deadline="cut"``: cancel the read in flight, or close the body."""
    body = ref()
    if body is None or body._permit.status is not RUNNING or body._closed:
        return
    body._cut = True
    reading = body._reading
    if reading is not None and not reading.done():
        reading.cancel()
        return
    task = asyncio.get_running_loop().create_task(body._close_cut())
    _closing.add(task)
    task.add_done_callback(_closing.discard)


#: Closes of cut bodies, kept alive until they finish (the loop holds tasks weakly).
_closing: set[asyncio.Task[None]] = set()


class GatedBody:
    """A response body that owns its request's slot (see the module docstring)."""

    def __init__(
        self,
        inner: Any,
        permit: StreamPermit,
        exchange: Exchange,
        reader: UsageReader | None,
        settle: Settle,
        on_end: Callable[[Exchange], None] | None,
    ) -> None:
        self._inner = inner
        self._permit = permit
        self._exchange = exchange
        self._reader = reader
        self._settle = settle
        self._on_end = on_end
        self._closed = False
        self._peeked: list[bytes] = []  # read ahead by peek(), not yet handed to the client
        self._rest: AsyncIterator[bytes] | None = None  # the inner iterator peek() started
        self._exhausted = False  # peek() read the inner stream to its end
        # With on_deadline="cut": the task whose read is in flight, and True once cut.
        self._reading: asyncio.Task[Any] | None = None
        self._cut = False
        arm = self._cuttable = getattr(permit, "_arm_cut", None)
        if arm is not None and permit.status is RUNNING:
            permit._hand_over()  # no longer the sending task's to cut
            arm(functools.partial(_cut_at_deadline, weakref.ref(self)))

    @property
    def permit(self) -> StreamPermit:
        """The permit whose slot this body holds."""
        return self._permit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        exchange = self._exchange
        loop = asyncio.get_running_loop()
        try:
            peeked, self._peeked = self._peeked, []
            for chunk in peeked:  # already seen: timed and read for usage
                self._raise_if_cut()
                yield chunk
            if not self._exhausted:
                source = self._inner if self._rest is None else self._rest
                async for chunk in source if self._cuttable is None else self._reads(source):
                    self._arrived(chunk, loop)
                    yield chunk
        except GeneratorExit:  # the iterator was dropped: aclose() or the collector ends it
            raise
        except BaseException as exc:  # a read error, or the reader cancelled mid-body
            if self._cut and isinstance(exc, asyncio.CancelledError) and _taken_back(self._reading):
                self._end(CUT)
                raise self._cut_error() from exc
            self._end(FAILED)
            raise
        exchange.last_byte = loop.time()
        self._end(None)

    async def _reads(self, source: Any) -> AsyncIterator[bytes]:
        """``source``'s chunks, each read marked in flight, and none once the body is cut."""
        iterator = aiter(source)
        while True:
            self._raise_if_cut()
            self._reading = asyncio.current_task()
            try:
                chunk = await anext(iterator)
            except StopAsyncIteration:
                return
            finally:
                if not self._cut:
                    self._reading = None
            yield chunk

    def _raise_if_cut(self) -> None:
        """Raise ``DeadlineCut`` if the body was cut off at its deadline."""
        if self._cut:
            self._end(CUT)
            raise self._cut_error()

    def _cut_error(self) -> Exception:
        error: Exception = self._permit._cut_error()  # type: ignore[attr-defined]  # a cut permit's
        return error

    async def _close_cut(self) -> None:
        """The deadline, with no read in flight: close the body, then give the slot back as cut."""
        try:
            await self.aclose_inner()
        finally:
            self._end(CUT)

    async def aclose_inner(self) -> None:
        """Close the connection behind the body, once, whoever asks (never cancelled half way)."""
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            rest = self._rest
            try:
                if rest is not None and hasattr(rest, "aclose"):
                    await rest.aclose()  # the inner iterator peek() left suspended
            finally:
                await self._inner.aclose()

    async def peek(self, limit: int) -> bytes:
        """Read the body ahead of the client until ``limit`` bytes or its end; return what was read.

        The bytes are kept and handed to the client first. A read error or a cancellation ends
        the request as failed and propagates.
        """
        loop = asyncio.get_running_loop()
        rest = self._rest = aiter(self._inner)
        size = 0
        try:
            while size < limit:
                try:
                    chunk = await anext(rest)
                except StopAsyncIteration:
                    self._exhausted = True
                    break
                self._arrived(chunk, loop)
                self._peeked.append(chunk)
                size += len(chunk)
        except BaseException:
            self._end(FAILED)
            raise
        return b"".join(self._peeked)

    def _arrived(self, chunk: bytes, loop: asyncio.AbstractEventLoop) -> None:
        """A chunk came from the provider: time the first one, read it for usage."""
        if self._exchange.first_byte is None and chunk:
            self._exchange.first_byte = loop.time()
            _first_item(self._permit)  # the record's first_chunk: an adaptive gate's TTFT
        if self._reader is not None:
            self._reader.feed(chunk)

    async def aclose(self) -> None:
        """Close the body: end the request (completed or late by the time), then close the connection."""
        self._end(None)
        await self.aclose_inner()

    def _in_memory(self, content: bytes) -> None:
        """The response arrived complete, its body already read: end the request now."""
        exchange = self._exchange
        if content:
            exchange.first_byte = exchange.headers
            if self._reader is not None:
                self._reader.feed(content)
        exchange.last_byte = exchange.headers
        self._closed = True
        self._end(None)

    def _end(self, ending: Status | None) -> None:
        """End the request now, once: settle the body's usage, give the slot back, tell the hook."""
        permit = self._permit
        if permit.status is not RUNNING:
            return
        exchange = self._exchange
        try:
            reader = self._reader
            problem = None
            if reader is not None:
                exchange.usage = reader.end()
                problem = reader.problem
            self._settle(permit, exchange, problem)
        finally:  # the slot goes back whatever the usage was
            permit._finish(FAILED if ending is None and exchange.errored else ending)
        self._ended(permit, exchange)

    def _ended(self, permit: StreamPermit, exchange: Exchange) -> None:
        loop = permit._loop
        exchange.ended = loop.time() if loop is not None else None
        exchange.outcome = permit.status.value
        if self._on_end is not None:
            self._on_end(exchange)

    def __del__(self) -> None:
        try:
            if self._closed or self._permit.status is not RUNNING:
                return
            permit, inner = self._permit, self._inner
        except AttributeError:  # __init__ never ran
            return
        note = _abandon(permit, inner, None)
        warnings.warn(
            f"unclosed response body holding a slot of gate {permit.gate.name!r}{note}",
            ResourceWarning,
            stacklevel=1,
            source=self,
        )

    def __repr__(self) -> str:
        return f"<GatedBody of gate {self._permit.gate.name!r}: {self._permit.status.value}>"
