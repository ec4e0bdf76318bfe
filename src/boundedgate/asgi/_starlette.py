"""The per-route forms for Starlette and FastAPI: a dependency, a streaming response, a refusal handler.

Imported on first use of one of its names from :mod:`boundedgate.asgi` (this module imports
Starlette; the rest of the package does not).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, AsyncIterator, Callable, Hashable, Mapping
from typing import Any

import anyio
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import ContentStream, Response, StreamingResponse

from .._driver import KeyedGate
from .._errors import GateError, Late
from .._streams import GatedStream
from .._streams import close_stream as _close_stream
from ._middleware import UNGATED, admission_options
from ._refusal import BodyFunction, Refusal, check_style, provider_refusal, refusal_for
from ._types import Receive, Scope, Send

__all__ = ("GatedStreamingResponse", "gate_dependency", "provider_error_handler", "refusal_handler")

logger = logging.getLogger("boundedgate.asgi")


def gate_dependency(
    gate: Any,
    *,
    key: Callable[[Scope], Hashable] | None = None,
    timeout: float | None = None,
    max_wait: float | None = None,
    priority: int = 0,
    cost: float | None = None,
) -> Callable[[Request], AsyncIterator[Any]]:
    """A FastAPI dependency that admits the request through ``gate`` and yields its permit.

    ::

        @app.post("/chat", dependencies=[Depends(gate_dependency(gate, timeout=60))])
        async def chat(...): ...

    The permit is held until FastAPI runs the dependency's exit: after the response has been sent,
    streamed bodies included (FastAPI >= 0.118). A route may hand the permit to a stream instead
    (``permit.hand_to(raw)``); the dependency then leaves the slot to the stream. A response that
    ends past the deadline is counted late, never raised. A refusal raises the :class:`GateError`:
    register :func:`refusal_handler` to answer it. Unlike :class:`GateMiddleware`, the dependency
    runs after routing (``key`` may read ``scope["path_params"]``), and it does not watch for a
    client leaving while the request is queued.

    Args:
        gate: A :class:`BoundedGate`, a :class:`KeyedGate` (with ``key``) or a ``RedisGate``.
        key: For a :class:`KeyedGate`: a function from the ASGI scope to the key (any hashable;
            None is a key like any other). It may return :data:`UNGATED` to let the request
            through ungated: the dependency then yields None.
        timeout: As for :meth:`BoundedGate.admit`.
        max_wait: As for :meth:`BoundedGate.admit`.
        priority: As for :meth:`BoundedGate.admit`.
        cost: As for :meth:`BoundedGate.admit`.
    """
    keyed = isinstance(gate, KeyedGate)
    if keyed and key is None:
        raise TypeError("a KeyedGate needs key=, a function from the ASGI scope to the request's key")
    if key is not None and not keyed:
        raise TypeError("key= is for a KeyedGate: remove it, or use a KeyedGate for one queue per key")
    options = admission_options(timeout, max_wait)
    if priority:
        options["priority"] = priority
    if cost is not None:
        options["cost"] = cost

    async def admitted(request: Request) -> AsyncIterator[Any]:
        if key is None:
            permit = gate.admit(**options)
        else:
            chosen = key(request.scope)
            if chosen is UNGATED:
                yield None
                return
            permit = gate.admit(chosen, **options)
        await permit.__aenter__()
        try:
            yield permit
        except BaseException as exc:
            await permit.__aexit__(type(exc), exc, exc.__traceback__)  # failed; raises nothing of its own
            raise
        try:
            await permit.__aexit__(None, None, None)
        except Late as late:  # the response is out: count it (the permit did), never raise it
            logger.warning("%s %s: %s (counted late)", request.method, request.url.path, late)

    return admitted


def refusal_handler(
    refusal: str | BodyFunction = "public",
    *,
    key: Callable[[Scope], Hashable | None] | None = None,
    retry_after_fallback: int = 1,
    sse_refusal: bool = False,
) -> Callable[[Request, Exception], Any]:
    """An exception handler answering a :class:`GateError` as :class:`GateMiddleware` refuses.

    ``app.add_exception_handler(GateError, refusal_handler("openai"))``. Arguments are as for the
    middleware; ``key`` gives the ``"session"`` style its session id.
    """
    check_style(refusal)

    async def handle(request: Request, error: Exception) -> Response:
        if not isinstance(error, GateError):
            raise error
        scope = request.scope
        answer = refusal_for(
            error,
            refusal,
            key=_key_of(key, scope),
            retry_after_fallback=retry_after_fallback,
            event_stream=sse_refusal and _accepts_event_stream(scope),
        )
        return _response(answer)

    return handle


def provider_error_handler(
    refusal: str | BodyFunction = "public",
    *,
    key: Callable[[Scope], Hashable | None] | None = None,
    retry_after_fallback: int = 1,
    sse_refusal: bool = False,
) -> Callable[[Request, Exception], Any]:
    """An exception handler answering the provider's own refusal as the service's 429 or 503.

    For routes without :class:`GateMiddleware` (which answers these itself, ``provider_errors=True``)::

        app.add_exception_handler(openai.APIStatusError, provider_error_handler("openai"))
        app.add_exception_handler(anthropic.APIStatusError, provider_error_handler("anthropic"))

    The provider's 429 becomes a 429, its 503 or 529 a 503, with its ``Retry-After`` (see
    :func:`provider_refusal`); any other status error is raised on, to the server (a 500), as
    without the handler. Arguments are as for :func:`refusal_handler`.
    """
    check_style(refusal)

    async def handle(request: Request, error: Exception) -> Response:
        scope = request.scope
        answer = provider_refusal(
            error,
            refusal,
            key=_key_of(key, scope),
            retry_after_fallback=retry_after_fallback,
            event_stream=sse_refusal and _accepts_event_stream(scope),
        )
        if answer is None:
            raise error
        logger.warning(
            "%s %s: the provider refused (%s: %s); answered %d",
            request.method,
            request.url.path,
            type(error).__name__,
            error,
            answer.status,
        )
        return _response(answer)

    return handle


def _key_of(key: Callable[[Scope], Hashable | None] | None, scope: Scope) -> Hashable | None:
    """The request's key for the refusal's body; None if there is no key function, or it failed."""
    if key is None:
        return None
    try:
        return key(scope)
    except Exception:  # the refusal goes out all the same, without the key
        logger.exception("the refusal's key function %r raised; the refusal names no key", key)
        return None


def _accepts_event_stream(scope: Scope) -> bool:
    return any(n == b"accept" and b"text/event-stream" in v for n, v in scope.get("headers", ()))


def _response(answer: Refusal) -> Response:
    """A Starlette response carrying a refusal."""
    fields = dict(answer.headers)
    media_type = fields.pop(b"content-type").decode()
    del fields[b"content-length"]  # Response sets its own
    headers = {name.decode(): value.decode() for name, value in fields.items()}
    return Response(answer.body, status_code=answer.status, headers=headers, media_type=media_type)


class GatedStreamingResponse(StreamingResponse):
    """A Starlette ``StreamingResponse`` that owns a :class:`GatedStream` and closes it on every ending.

    ::

        stream = await gate.stream(lambda: client.chat.completions.create(..., stream=True))
        return GatedStreamingResponse(as_sse(stream), stream=stream, media_type="text/event-stream")

    However the response ends (the body sent to its end, the client gone, the body raising, the
    task cancelled by a server or by a middleware such as Starlette's ``BaseHTTPMiddleware``), the
    body iterator is closed and then the stream, in that order and shielded from cancellation, so
    its slot goes back and the provider's HTTP response is closed before the response is over:
    never later, by the garbage collector. If the response is never sent (an exception before
    it was called), call :meth:`aclose`. A :class:`Late` raised by the body (a stream that
    ended past its deadline) ends the body normally: it is counted late and logged, never raised
    into a response that has already started, which would cut it short.

    Args:
        content: The body, as for ``StreamingResponse``: often a generator over ``stream``, or
            ``stream`` itself when it yields ``str`` or ``bytes``.
        stream: The gated stream to close (default: ``content``, when it is a :class:`GatedStream`).
        status_code: As for ``StreamingResponse``.
        headers: As for ``StreamingResponse``.
        media_type: As for ``StreamingResponse``.
        background: As for ``StreamingResponse``.
    """

    def __init__(
        self,
        content: ContentStream,
        status_code: int = 200,
        headers: Mapping[str, str] | None = None,
        media_type: str | None = None,
        background: BackgroundTask | None = None,
        *,
        stream: GatedStream[Any] | None = None,
    ) -> None:
        super().__init__(content, status_code, headers, media_type, background)
        if stream is None and isinstance(content, GatedStream):
            stream = content
        self.stream = stream
        self._body = self.body_iterator
        self.body_iterator = self._never_late(self._body)

    @staticmethod
    async def _never_late(body: AsyncIterable[Any]) -> AsyncIterator[Any]:
        try:
            async for chunk in body:
                yield chunk
        except Late as late:
            logger.warning("a streamed response ended past its deadline: %s (counted late)", late)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the response; close the body and the stream however that ends."""
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Close the body iterator and the gated stream (idempotent), shielded from cancellation."""
        with anyio.CancelScope(shield=True):
            await _close_stream(self.body_iterator)
            if self._body is not self.stream:
                await _close_stream(self._body)
            if self.stream is not None:
                await self.stream.aclose()
