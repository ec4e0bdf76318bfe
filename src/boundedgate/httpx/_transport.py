"""GatedTransport: every request an httpx client sends, admitted by a gate first."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Hashable, Mapping
from types import ModuleType, TracebackType
from typing import Any, Literal

from .._core import Status, check_flag, check_positive, shown
from .._downstream import downstream_refused
from .._errors import GateError
from .._streams import StreamPermit
from ._admission import Admission, Cost
from ._body import body_class
from ._exchange import EXCHANGE, Exchange
from ._refusal import REFUSAL, Envelope, envelope_for, refusal_body, refusal_headers
from ._signals import ProviderSignal, parse_signal
from ._usage import UsageReader, total_tokens

__all__ = ("GatedTransport",)

FAILED = Status.FAILED

#: The header both SDKs number their attempts with (0 for the first).
RETRY_COUNT = "x-stainless-retry-count"


class GatedTransport:
    """An ``httpx.AsyncBaseTransport`` (httpx or httpx2) that admits each request through a gate.

    ::

        client = AsyncOpenAI(http_client=httpx2.AsyncClient(transport=GatedTransport(gate)))

    Every request the client sends arrives at the gate first and, once admitted, goes to the inner
    transport; the slot is held until the response body is read to its end or closed (a streamed
    completion holds it for the whole stream), and given back exactly once however it ends. Each
    attempt of an SDK's retry loop is a request of its own, so it is admitted again and nothing is
    held while the SDK backs off; inside :func:`gate_call` all attempts share one deadline.

    Args:
        gate: What admits: a ``BoundedGate`` or ``RedisGate`` (anything with ``admit()``), a
            ``KeyedGate`` (with ``key=``), or a callable ``gate(request, deadline=, priority=,
            cost=)`` returning a permit, e.g. ``lambda request, **kw: admit_all(...)``.
        transport: The transport that sends the request (default: the request's httpx flavour's
            ``AsyncHTTPTransport()``, made at the first request).
        key: For a ``KeyedGate``: ``key(request)``, the key of the gate to take.
        cost: The rate cost a request declares: a number, or ``cost(request)`` (None: the gate's
            default); a :func:`gate_call`'s ``cost`` wins. Settled from the usage in the body.
        priority: The priority class of a first attempt.
        retry_priority: The class of an SDK retry (``x-stainless-retry-count`` > 0), e.g. 0 so a
            call that already waited and failed once is not starved; None: as a first attempt.
        max_wait: The queue budget of each attempt: ``"pool"`` (the request's httpx pool timeout:
            "time to wait for a connection" becomes "time to wait for a slot"), seconds, or None.
            Used with gates whose ``admit()`` takes ``max_wait`` (``BoundedGate``).
        refuse: ``"response"`` (a refusal becomes a 503/429 response the SDK raises its typed
            status error for, without retrying) or ``"raise"`` (the gate's error is raised from
            the transport: openai passes it through; anthropic wraps it in ``APIConnectionError``
            and retries it ``max_retries`` times).
        sdk_retry: Tell the SDK to retry a refusal after its ``Retry-After`` (``x-should-retry:
            true``) instead of raising at once.
        envelope: The error body's shape: ``"openai"``, ``"anthropic"``, or ``"auto"`` (by the
            request: Anthropic's when it has an ``anthropic-version`` header).
        default_retry_after: ``Retry-After`` seconds for a refusal that has no estimate.
        usage_cost: Turns the usage a body reported into the cost to settle (default: total tokens).
        on_provider_signal: Called with a :class:`ProviderSignal` for every response that is a 429,
            503 or 529 or carries rate-limit headers, as its headers arrive.
        on_exchange: Called with the :class:`Exchange` of every request when its slot goes back
            (or it is refused), with its times to first and last byte.

    Raises:
        TypeError, ValueError: A setting out of its type or range, named: a priority that is not
            an int >= 0 (below the gate's ``priorities`` when it says), a cost or ``max_wait`` that
            ``admit()`` would refuse, ``default_retry_after`` not a finite number > 0,
            ``sdk_retry`` not True or False, an unknown ``refuse`` or ``envelope``; or a gate that
            cannot take what is given (no priorities, no ``max_wait``, a key for an unkeyed gate).
    """

    def __init__(
        self,
        gate: Any,
        transport: Any = None,
        *,
        key: Callable[[Any], Hashable] | None = None,
        cost: Cost = None,
        priority: int = 0,
        retry_priority: int | None = None,
        max_wait: float | Literal["pool"] | None = "pool",
        refuse: Literal["response", "raise"] = "response",
        sdk_retry: bool = False,
        envelope: Envelope = "auto",
        default_retry_after: float = 1.0,
        usage_cost: Callable[[Mapping[str, float]], float] = total_tokens,
        on_provider_signal: Callable[[ProviderSignal], None] | None = None,
        on_exchange: Callable[[Exchange], None] | None = None,
    ) -> None:
        if refuse not in ("response", "raise"):
            raise ValueError(f"refuse must be 'response' or 'raise', got {shown(refuse)}")
        if envelope not in ("auto", "openai", "anthropic"):
            raise ValueError(f"envelope must be 'auto', 'openai' or 'anthropic', got {shown(envelope)}")
        sdk_retry = check_flag("sdk_retry", sdk_retry)
        retry_after = check_positive("default_retry_after", default_retry_after)
        self._admission = Admission(gate, key, cost, priority, retry_priority, max_wait)
        # The name the provider's 429s are counted under (boundedgate.downstream_refused): the
        # gate's own, so that a keyed gate is one series, not one per key; none for a callable.
        self._refused_as: str | None = getattr(gate, "name", None)
        self._inner = transport
        # Known from the inner transport when it is one of httpx's own, else from the first request.
        self._flavour: ModuleType | None = None if transport is None else _transport_flavour(transport)
        self._refuse = refuse
        self._sdk_retry = sdk_retry
        self._envelope: Envelope = envelope
        self._default_retry_after = retry_after
        self._usage_cost = usage_cost
        self._on_signal = on_provider_signal
        self._on_exchange = on_exchange

    @property
    def gate(self) -> Any:
        """What admits the requests, as given."""
        return self._admission.gate

    async def handle_async_request(self, request: Any) -> Any:
        """Admit ``request``, send it, and return its response with the slot riding on its body.

        A refusal is returned as a synthesised response (or raised, with ``refuse="raise"``); a
        cancellation while waiting propagates, having taken nothing.
        """
        flavour = self._flavour_for(request)
        loop = asyncio.get_running_loop()
        headers = request.headers
        attempt = _int(headers.get(RETRY_COUNT))
        exchange = Exchange(request.method, str(request.url), attempt, loop.time())
        timeouts = request.extensions.get("timeout")
        pool = timeouts.get("pool") if isinstance(timeouts, dict) else None
        permit = self._admission.permit(request, exchange, pool)
        try:
            await permit.__aenter__()
        except GateError as error:
            exchange.refusal = error
            exchange.outcome = error.code
            exchange.ended = loop.time()
            if self._on_exchange is not None:
                self._on_exchange(exchange)
            if self._refuse == "raise":
                raise
            return self._refusal(flavour, request, error, exchange)
        exchange.admitted = loop.time()
        try:
            response = await self._inner.handle_async_request(request)
        except BaseException:
            permit._finish(FAILED)
            raise
        exchange.headers = loop.time()
        exchange.status = status = response.status_code
        if status == 429 and self._refused_as is not None:
            downstream_refused(self._refused_as, status)
        response_headers = response.headers
        signal = parse_signal(status, response_headers, request.url.host, exchange.headers, key=exchange.key)
        exchange.signal = signal
        reader = UsageReader.for_response(response_headers) if 200 <= status < 300 else None
        body = body_class(flavour)(response.stream, permit, exchange, reader, self._settle, self._on_exchange)
        response.extensions[EXCHANGE] = exchange
        if response.is_closed:
            # Built with its content in memory (a MockTransport's, a cache's): httpx never reads or
            # closes such a stream again, so the body is complete now.
            body._in_memory(response.content)
        else:
            response.stream = body
        if signal is not None and self._on_signal is not None:
            try:
                self._on_signal(signal)
            except BaseException:
                await response.aclose()  # the client never sees this response: give its slot back
                raise
        return response

    def _settle(self, permit: StreamPermit, exchange: Exchange) -> None:
        usage = exchange.usage
        if usage is None:
            return
        try:
            cost = float(self._usage_cost(usage))
            permit.settle(cost)
        except (TypeError, ValueError):  # a usage record that does not add up to a cost
            return
        exchange.settled = cost

    def _refusal(self, flavour: ModuleType, request: Any, error: GateError, exchange: Exchange) -> Any:
        shape = envelope_for(self._envelope, request.url.host, request.headers)
        exchange.status = error.http_status
        return flavour.Response(
            error.http_status,
            headers=refusal_headers(error, self._sdk_retry, self._default_retry_after),
            content=refusal_body(error, shape),
            request=request,
            extensions={REFUSAL: error, EXCHANGE: exchange},
        )

    def _flavour_for(self, request: Any) -> ModuleType:
        flavour = self._flavour
        if flavour is None:
            flavour = self._flavour = _flavour_of(request)
            if self._inner is None:
                self._inner = flavour.AsyncHTTPTransport()
        elif type(request).__module__.partition(".")[0] != flavour.__name__:
            raise TypeError(
                f"a {type(request).__module__} request through a {flavour.__name__} transport: "
                "give GatedTransport the inner transport of the client's own httpx"
            )
        return flavour

    # -- the transport's life, passed on -------------------------------------------------------

    async def aclose(self) -> None:
        """Close the inner transport."""
        if self._inner is not None:
            await self._inner.aclose()

    async def __aenter__(self) -> GatedTransport:
        enter = getattr(
            self._inner, "__aenter__", None
        )  # httpx's transports have it; a hand-made one may not
        if enter is not None:
            await enter()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> None:
        leave = getattr(self._inner, "__aexit__", None)
        if leave is not None:
            await leave(exc_type, exc, tb)
        elif self._inner is not None:
            await self._inner.aclose()

    def __repr__(self) -> str:
        return f"<GatedTransport through {self._admission.gate!r}>"


def refusal(response: Any) -> GateError | None:
    """The gate's error a synthesised refusal response stands for (None for a provider's response).

    Reach it from an SDK's status error: ``refusal(error.response)``.
    """
    extensions = getattr(response, "extensions", None)
    if not isinstance(extensions, dict):
        return None
    error = extensions.get(REFUSAL)
    return error if isinstance(error, GateError) else None


def _int(value: str | None) -> int:
    if value is None:
        return 0
    try:
        return max(0, int(value))
    except ValueError:
        return 0


def _flavour_of(thing: object) -> ModuleType:
    """The httpx module (``httpx`` or ``httpx2``) a request or transport belongs to."""
    name = type(thing).__module__.partition(".")[0]
    module = sys.modules.get(name)
    if module is None or not hasattr(module, "AsyncByteStream") or not hasattr(module, "Response"):
        raise TypeError(f"{thing!r} is not an httpx or httpx2 object")
    return module


def _transport_flavour(transport: object) -> ModuleType | None:
    """The httpx module whose ``AsyncBaseTransport`` ``transport`` is (None for one of its own kind)."""
    for name in ("httpx2", "httpx"):
        module = sys.modules.get(name)
        if module is not None and isinstance(transport, module.AsyncBaseTransport):
            return module
    return None
