"""gate_middleware: every request an aiohttp ``ClientSession`` sends, admitted by a gate first.

aiohttp (>= 3.12) runs client middlewares around each request it sends; the handler returns once
the response headers are in. aiohttp has no byte stream to swap, so the slot rides on the
response's pooled connection instead: ``Connection.add_callback()`` callbacks run once when the
connection is released or closed, which happens at the body's end, on ``release()`` / ``close()``,
on leaving ``async with``, or when the response is collected.

What a 429 means depends on its body (a spent quota, or an overload): the middleware reads the
body of a 429 whose length is known and at most 64 KiB with ``response.read()``, before it returns
the response, so ``read()``, ``text()`` and ``json()`` give it again (aiohttp keeps it), while
``response.content`` is then at its end. Other responses are never read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

from .._core import Status
from .._streams import StreamPermit
from ..httpx._admission import Admission, Cost
from ..httpx._exchange import Exchange
from ..httpx._signals import BODY_LIMIT, ProviderSignal, parse_signal, reads_body
from ..httpx._transport import RETRY_COUNT, _int

__all__ = ("gate_middleware",)

FAILED = Status.FAILED

Handler = Callable[[Any], Awaitable[Any]]
Middleware = Callable[[Any, Handler], Awaitable[Any]]


def gate_middleware(
    gate: Any,
    *,
    key: Callable[[Any], Hashable] | None = None,
    cost: Cost = None,
    priority: int = 0,
    retry_priority: int | None = None,
    max_wait: float | None = None,
    on_provider_signal: Callable[[ProviderSignal], None] | None = None,
    on_exchange: Callable[[Exchange], None] | None = None,
) -> Middleware:
    """An aiohttp client middleware that admits each request through ``gate``.

    ::

        async with aiohttp.ClientSession(middlewares=(gate_middleware(gate),)) as session:
            async with session.post(url, json=body) as response:  # admitted; the slot held
                async for line in response.content:                 # while the body is read
                    ...

    The slot is held until the response's connection is released: the body read to its end,
    ``release()``/``close()``, leaving ``async with``, or the response collected; each of these
    ends the request as completed (or late past a :func:`~boundedgate.httpx.gate_call` deadline),
    since aiohttp does not say which it was. A request that fails before its headers arrive is
    failed. A refusal raises the gate's error (``QueueFull``, ``QueueExpired``, ...): no SDK
    retry loop sits between, and aiohttp offers no way to synthesise a response. The settings mean
    what they mean for :class:`~boundedgate.httpx.GatedTransport` (``max_wait`` in seconds: aiohttp
    has no pool timeout to borrow); usage is not read from aiohttp bodies. The body of a 429 of at
    most 64 KiB is read (``response.read()``, which gives it again) before the response is
    returned, to tell an overload from a spent quota.

    Raises:
        TypeError, ValueError: A setting :class:`~boundedgate.httpx.GatedTransport` would refuse.
    """
    admission = Admission(gate, key, cost, priority, retry_priority, max_wait)

    async def middleware(request: Any, handler: Handler) -> Any:
        loop = asyncio.get_running_loop()
        exchange = Exchange(
            request.method, str(request.url), _int(request.headers.get(RETRY_COUNT)), loop.time()
        )
        permit = admission.permit(request, exchange, None)
        await permit.__aenter__()
        exchange.admitted = loop.time()
        try:
            response = await handler(request)
        except BaseException:
            permit._finish(FAILED)
            _ended(permit, exchange, on_exchange)
            raise
        exchange.headers = loop.time()
        exchange.status = status = response.status
        connection = response.connection
        if connection is None:  # no body left to read: released already
            _end(permit, exchange, on_exchange)
        else:
            connection.add_callback(lambda: _end(permit, exchange, on_exchange))
        said = await _what_it_says(response) if reads_body(status) else None
        signal = exchange.signal = parse_signal(
            status, response.headers, request.url.host or "", exchange.headers, body=said, key=exchange.key
        )
        if signal is not None and on_provider_signal is not None:
            on_provider_signal(signal)
        return response

    return middleware


async def _what_it_says(response: Any) -> bytes | None:
    """The body of a response whose words decide its signal, when short enough to read now.

    Read with ``response.read()``, which aiohttp keeps for the caller's own ``read()``, ``text()``
    and ``json()``; a body of unknown length (chunked) or beyond :data:`BODY_LIMIT` is left alone.
    """
    length = response.content_length
    if length is None or length > BODY_LIMIT:
        return None
    body: bytes = await response.read()
    return body[:BODY_LIMIT]


def _end(permit: StreamPermit, exchange: Exchange, on_exchange: Callable[[Exchange], None] | None) -> None:
    if permit.status is Status.RUNNING:
        permit._finish(FAILED if exchange.errored else None)
        _ended(permit, exchange, on_exchange)


def _ended(permit: StreamPermit, exchange: Exchange, on_exchange: Callable[[Exchange], None] | None) -> None:
    loop = permit._loop
    exchange.ended = loop.time() if loop is not None else None
    exchange.outcome = permit.status.value
    if on_exchange is not None:
        on_exchange(exchange)
