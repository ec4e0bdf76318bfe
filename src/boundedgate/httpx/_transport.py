"""GatedTransport: every request an httpx client sends, admitted by a gate first."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Hashable, Mapping
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, Literal

from .._core import Status, check_flag, check_positive, shown
from .._downstream import downstream_refused
from .._driver import log_event
from .._errors import GateError
from .._streams import StreamPermit
from ._admission import Admission, Cost
from ._body import GatedBody, body_class
from ._exchange import EXCHANGE, Exchange
from ._refusal import REFUSAL, Envelope, envelope_for, refusal_body, refusal_headers
from ._signals import BODY_LIMIT, ProviderSignal, parse_signal, reads_body
from ._usage import UsageReader, decoded, is_count, total_tokens

__all__ = ("GatedTransport",)

if TYPE_CHECKING:
    # For type checkers only (importing boundedgate.httpx imports neither): a GatedTransport is an
    # AsyncBaseTransport of both flavours, so it type-checks as any httpx2 or httpx client's
    # transport (``AsyncClient(transport=...)``, ``mounts=``). With one flavour not installed,
    # a type checker reads that base as Any, which the other's clients accept as well.
    import httpx
    import httpx2

    class _AsyncTransport(httpx2.AsyncBaseTransport, httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: Any) -> Any: ...

else:
    _AsyncTransport = object

FAILED = Status.FAILED
CUT = Status.CUT

#: The header both SDKs number their attempts with (0 for the first).
RETRY_COUNT = "x-stainless-retry-count"

_SYNCHRONOUS = (
    "GatedTransport is an async transport: give it to an httpx.AsyncClient or httpx2.AsyncClient"
    " (the one of AsyncOpenAI or AsyncAnthropic), not to a synchronous Client (OpenAI(), Anthropic()):"
    " its gate admits requests on an asyncio event loop"
)


class GatedTransport(_AsyncTransport):
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
            ``KeyedGate`` (with ``key=``), a chain of them, a list taken in order by one
            :func:`~boundedgate.admit_all` per request (``[(tenants, tenant_of), cluster_gate]``,
            each keyed gate paired with the function of the request that gives its key, or alone
            to take it from ``key=``; the usage settles every gate), or a callable
            ``gate(request, deadline=, priority=, cost=)`` returning a permit.
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
            Usage that cannot be read (a count that is not a finite number >= 0), or a
            ``usage_cost`` that raises or returns no such number, settles nothing (the cost stays
            as declared) and is logged once per response, at WARNING, to the ``boundedgate``
            logger (``event="usage_unreadable"``).
        on_provider_signal: Called with a :class:`ProviderSignal` for every response that is a 429,
            503 or 529 or carries rate-limit headers, as its headers arrive (for a 429, once the
            start of its body has: up to 64 KiB of it are read ahead, to tell a rate limit from
            an overload).
        on_exchange: Called with the :class:`Exchange` of every request when its slot goes back
            (or it is refused), with its times to first and last byte.
        on_deadline: ``"late"`` (the default) or ``"cut"``: a request still running at the
            deadline of its :func:`gate_call` is cut off then (``admit(on_deadline="cut")``),
            counted ``cut``: before its response headers, the task sending it is cancelled and the
            transport raises :class:`~boundedgate.DeadlineCut`; after, its body is closed, and a
            read in flight, or the next one, raises it. Without a ``gate_call`` deadline nothing
            is cut. For a ``BoundedGate`` or ``KeyedGate``.

    Raises:
        TypeError, ValueError: A setting out of its type or range, named: a priority that is not
            an int >= 0 (below the gate's ``priorities`` when it says), a cost or ``max_wait`` that
            ``admit()`` would refuse, ``default_retry_after`` not a finite number > 0,
            ``sdk_retry`` not True or False, an unknown ``refuse``, ``envelope`` or ``on_deadline``;
            or a gate that cannot take what is given (no priorities, no ``max_wait``, no
            ``on_deadline``, a key for an unkeyed gate).
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
        on_deadline: Literal["late", "cut"] = "late",
    ) -> None:
        if on_deadline not in ("late", "cut"):
            raise ValueError(f"on_deadline must be 'late' or 'cut', got {shown(on_deadline)}")
        if refuse not in ("response", "raise"):
            raise ValueError(f"refuse must be 'response' or 'raise', got {shown(refuse)}")
        if envelope not in ("auto", "openai", "anthropic"):
            raise ValueError(f"envelope must be 'auto', 'openai' or 'anthropic', got {shown(envelope)}")
        sdk_retry = check_flag("sdk_retry", sdk_retry)
        retry_after = check_positive("default_retry_after", default_retry_after)
        self._admission = Admission(gate, key, cost, priority, retry_priority, max_wait, on_deadline == "cut")
        # The name the provider's 429s are counted under (downstream_refused, the exports' counter): the
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
        except BaseException as exc:
            if not _cut_off(permit):
                permit._finish(FAILED)
                raise
            permit._finish(CUT)  # the gate cut it at its deadline, waiting for the headers
            raise permit._cut_error() from exc  # type: ignore[attr-defined]  # a cut permit's
        exchange.headers = loop.time()
        body = self._hold(flavour, response, permit, exchange)
        said = await self._what_it_says(response, body)
        signal = parse_signal(
            response.status_code, response.headers, request.url.host, exchange.headers, said, exchange.key
        )
        exchange.signal = signal
        if signal is not None and self._on_signal is not None:
            try:
                self._on_signal(signal)
            except BaseException:
                await response.aclose()  # the client never sees this response: give its slot back
                raise
        return response

    def _hold(
        self, flavour: ModuleType, response: Any, permit: StreamPermit, exchange: Exchange
    ) -> GatedBody:
        """Give ``response`` a body that holds the slot until it ends (at once, for one read already)."""
        exchange.status = status = response.status_code
        if status == 429 and self._refused_as is not None:
            downstream_refused(self._refused_as, status)
        reader = UsageReader.for_response(response.headers) if 200 <= status < 300 else None
        body = body_class(flavour)(response.stream, permit, exchange, reader, self._settle, self._on_exchange)
        response.extensions[EXCHANGE] = exchange
        if response.is_closed:
            # Built with its content in memory (a MockTransport's, a cache's): httpx never reads or
            # closes such a stream again, so the body is complete now.
            body._in_memory(response.content)
        else:
            response.stream = body
        return body

    @staticmethod
    async def _what_it_says(response: Any, body: GatedBody) -> bytes | None:
        """The start of the body (decoded) when it decides the signal (a 429's), else None.

        Read ahead of the client, at most :data:`BODY_LIMIT` bytes, and handed to it unchanged;
        a read error or a cancellation meanwhile fails the request and closes the body.
        """
        if not reads_body(response.status_code):
            return None
        if response.is_closed:
            raw = response.content[:BODY_LIMIT]
        else:
            try:
                raw = await body.peek(BODY_LIMIT)
            except BaseException:
                await body.aclose()
                raise
        return decoded(raw, response.headers, BODY_LIMIT)

    def _settle(self, permit: StreamPermit, exchange: Exchange, problem: str | None) -> None:
        """Settle the usage the body reported; log, never raise, when it cannot be read or priced.

        ``problem``: why the body's usage is unknown, when its reader gave up on it.
        """
        usage = exchange.usage
        if problem is None and usage is not None:
            cost, problem = self._cost_of(usage)
            if cost is not None:
                try:
                    permit.settle(cost)
                except Exception as error:  # a callable gate's own permit that will not take it
                    problem = f"the permit refused the cost {cost!r}: {shown(error)}"
                else:
                    exchange.settled = cost
                    return
        if problem is not None:
            where = exchange.url.partition("?")[0]  # a query may carry a key: never logged
            log_event(
                permit.gate.name,
                "usage_unreadable",
                f"the usage of {exchange.method} {where} cannot be settled ({problem}): "
                "its cost stays as declared",
                logging.WARNING,
                problem=problem,
                url=where,
            )

    def _cost_of(self, usage: Mapping[str, float]) -> tuple[float | None, str | None]:
        """The cost ``usage_cost`` makes of ``usage``, or None and why it made none."""
        usage_cost = self._usage_cost
        name = getattr(usage_cost, "__qualname__", None) or repr(usage_cost)
        try:
            cost = usage_cost(usage)
        except Exception as error:
            return None, f"usage_cost {name} raised {shown(error)}"
        if not is_count(cost):
            return None, f"usage_cost {name} returned {shown(cost)}, not a finite number >= 0"
        return float(cost), None

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

    def handle_request(self, request: Any) -> Any:
        """Refuse a synchronous client, saying which to use: the gate admits on an event loop."""
        raise TypeError(_SYNCHRONOUS)

    def __enter__(self) -> Any:
        """Refuse a synchronous client's ``with``, as :meth:`handle_request` does its requests."""
        raise TypeError(_SYNCHRONOUS)

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


def _cut_off(permit: Any) -> bool:
    """True if the gate cut the request off at its deadline (``on_deadline="cut"``), and no one else."""
    take_back = getattr(permit, "_take_back_cut", None)
    return take_back is not None and bool(take_back())


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
