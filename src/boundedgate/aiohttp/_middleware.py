"""gate_middleware: every request an aiohttp ``ClientSession`` sends, admitted by a gate first.

aiohttp (>= 3.12) runs client middlewares around each request it sends; the handler returns once
the response headers are in. aiohttp has no byte stream to swap, so the slot rides on the
response's pooled connection instead: ``Connection.add_callback()`` callbacks run once when the
connection is released or closed, which happens at the body's end, on ``release()`` / ``close()``,
on leaving ``async with``, or when the response is collected.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

from .._core import Status
from .._streams import StreamPermit
from ..httpx._admission import Admission, Cost
from ..httpx._exchange import Exchange
from ..httpx._signals import ProviderSignal, parse_signal
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
    has no pool timeout to borrow); usage is not read from aiohttp bodies.

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
        exchange.status = response.status
        signal = exchange.signal = parse_signal(
            response.status, response.headers, request.url.host or "", exchange.headers, key=exchange.key
        )
        connection = response.connection
        if connection is None:  # no body left to read: released already
            _end(permit, exchange, on_exchange)
        else:
            connection.add_callback(lambda: _end(permit, exchange, on_exchange))
        if signal is not None and on_provider_signal is not None:
            on_provider_signal(signal)
        return response

    return middleware


def _end(permit: StreamPermit, exchange: Exchange, on_exchange: Callable[[Exchange], None] | None) -> None:
    if permit.status is Status.RUNNING:
        permit._finish()
        _ended(permit, exchange, on_exchange)


def _ended(permit: StreamPermit, exchange: Exchange, on_exchange: Callable[[Exchange], None] | None) -> None:
    loop = permit._loop
    exchange.ended = loop.time() if loop is not None else None
    exchange.outcome = permit.status.value
    if on_exchange is not None:
        on_exchange(exchange)
