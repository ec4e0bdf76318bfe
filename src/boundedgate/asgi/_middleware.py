"""GateMiddleware: every HTTP request admitted on arrival, its permit held to the last body byte.

Theory of operation
===================

For each ``http`` request the middleware runs two tasks of its own beside the server's:

the pump
    reads the server's ``receive()`` from the start and buffers what it reads for the app (at most
    ``max_buffer`` bytes of body ahead of the app), so an ``http.disconnect`` is seen the moment the
    server delivers it, whether the app reads ``receive()`` or not;
the exchange
    admits the request (``gate.admit(...)``), answers a refusal itself, else calls the app with
    the buffered ``receive`` and a ``send`` that watches the response.

The permit ends exactly once, on the first of:

- the ``http.response.body`` with ``more_body=False`` has been sent: completed, or late past the
  deadline (``Late`` is counted and logged, never raised: the response has already started, and
  raising would truncate it);
- the client disconnected (the pump read ``http.disconnect``, or ``send`` raised ``OSError``)
  before that: in the loop turn the middleware learns it, a request still on its way to a slot
  leaves the queue (*disconnected*; the app never sees it, even if a slot was handed to it in
  that very turn: the slot passes on unused), one that had not arrived yet is never counted, and
  a running one has its app cancelled; its slot goes back as *aborted* the moment the app has
  stopped, its clean-up (closing the provider's stream) included, and not before: the gate never
  shows a free slot while the work it stands for still runs;
- the app raised, or returned without finishing the response: failed. An app that raised the
  provider's own refusal (an SDK's 429, 503 or 529) before its response started is answered with
  the service's 429 or 503 and the provider's ``Retry-After`` (``provider_errors=True``), and
  still counted failed.

Stacked middlewares (a tenant's gate outside a shared one) list themselves in the request's scope
(``scope["boundedgate.asgi"]``, outermost first). The outermost reads the server's
``receive()``, so it learns of a hang-up first: it tells the next one in, which ends its own part
first (leaves its queue, or stops its app), and so on inwards. A gate whose app is another gate
that never let the request through to the real app counts the request *disconnected* too, not
aborted: it held a slot, but the work behind the slot (the app, the provider call) never ran, so
the slot is given back as one that was granted and never used (the admission is taken back, and
no run time is recorded). The list is emptied when the outermost is done with the request.

Nothing waits for the garbage collector: each ending above is an event the middleware sees
itself, whatever other middleware does around or inside it. The server's task waits for the
exchange to finish (the app's own clean-up runs before the request is over), and a cancellation of
the server's task is passed on to the exchange.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from .._core import (
    Status,
    check_cost,
    check_count,
    check_flag,
    check_max_wait,
    check_priority,
    check_timeout,
)
from .._driver import Chain, is_chain, is_keyed
from .._errors import GateError
from ._limits import chain_ratelimit_fields, ratelimit_fields
from ._refusal import BodyFunction, Refusal, check_style, provider_refusal, refusal_for
from ._types import ASGIApp, Message, Receive, Scope, Send

__all__ = ("UNGATED", "GateMiddleware")

logger = logging.getLogger("boundedgate.asgi")

NEW = Status.NEW
QUEUED = Status.QUEUED
RUNNING = Status.RUNNING
LATE = Status.LATE
CUT = Status.CUT
FAILED = Status.FAILED
ABORTED = Status.ABORTED

#: The messages that end a response body for good.
_PATH_SEND = "http.response.pathsend"

#: The scope key under which the middlewares a request passes through list their exchanges.
CHAIN = "boundedgate.asgi"


class _Ungated:
    """What a ``key=`` function returns to let a request past a keyed gate ungated: ``UNGATED``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "boundedgate.asgi.UNGATED"


#: What a ``key=`` function returns for a request that goes past a keyed gate ungated (internal
#: traffic, a health probe). None is not that: it is a key like any other, the key of every
#: request that has none (a missing header), so those share one key's limits.
UNGATED: Any = _Ungated()


def _exemption(exempt: Callable[[Scope], bool] | Iterable[str] | None) -> Callable[[Scope], bool] | None:
    """A predicate over the scope from ``exempt``: a predicate already, or paths (``"/x/"``: a prefix)."""
    if exempt is None or callable(exempt):
        return exempt
    if isinstance(exempt, str):
        raise TypeError(
            "exempt must be a list of paths or a function of the scope, not a single str: "
            f"write exempt=[{exempt!r}]"
        )
    paths = list(exempt)
    for path in paths:
        if not isinstance(path, str) or not path.startswith("/"):
            shown = f"'/{path}'" if isinstance(path, str) else "a str such as '/healthz'"
            raise ValueError(
                f"an exempt path must be a str starting with '/', got {path!r}: write it {shown}"
            )
    exact = frozenset(p for p in paths if not p.endswith("/") or p == "/")
    prefixes = tuple(p for p in paths if p.endswith("/") and p != "/")

    def exempted(scope: Scope) -> bool:
        path = scope.get("path", "")
        return path in exact or path.startswith(prefixes)

    return exempted


def _accepts_event_stream(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"accept" and b"text/event-stream" in value:
            return True
    return False


class GateMiddleware:
    """Pure ASGI middleware: admit each HTTP request through a gate before the app sees it.

    ::

        app = FastAPI()
        app.add_middleware(GateMiddleware, gate=BoundedGate(max_running=50, max_waiting=100), timeout=60)

    Each ``http`` request arrives at the gate when it reaches the middleware. If it is refused, the
    app is never called and the client gets the refusal (status 503, or 429 for
    :class:`RateLimited`, with ``Retry-After``, ``Cache-Control: no-store``, ``x-should-retry:
    false`` and a JSON body in the ``refusal`` style). If it is admitted, the app runs, and the
    request keeps its slot until the last body message has been sent, or the client has gone. A
    client that disconnects while its request is queued leaves the queue at once (counted
    ``disconnected``), and the app never sees the request; one that disconnects while the response
    streams has its app cancelled in that loop turn, and its slot back (counted ``aborted``) as
    soon as the app has stopped. Stacked middlewares count a client that left while queued at an
    inner one ``disconnected`` at each (the outer ones held a slot the app never used).
    WebSocket and lifespan scopes pass through ungated.

    Admitted responses carry ``Server-Timing: gate;dur=<ms>;desc="queue"``, the time the request
    waited (visible in a browser's developer tools), and with ``ratelimit_headers=True`` the IETF
    ``RateLimit-Policy`` and ``RateLimit`` fields, one policy per limit, named after the gate
    (``"openai"``, ``"openai/rpm"``): the concurrency's ``q`` is C and ``r`` the slots free now; a
    rate limit's ``q`` is its burst, ``w`` the seconds to refill it, ``r`` the whole tokens now and
    ``t`` the seconds until it is full.

    Args:
        app: The ASGI app to guard.
        gate: A :class:`BoundedGate`, a :class:`KeyedGate` or ``RedisKeyedGate`` (with ``key``) or a
            ``RedisGate``; or a chain of them, a list taken in order by one :func:`admit_all` per
            request (one deadline, one queue budget, all or nothing): ``gate=[(tenants,
            tenant_of), cluster_gate]``, each keyed gate paired with the function of the scope
            that gives its key, or given alone to take its key from ``key``. A refusal answers
            with the refusing gate's error; a client that hangs up while queued is
            *disconnected* at every gate.
        key: A function from the ASGI scope to the request's key, for a :class:`KeyedGate` (a
            session id, a tenant from a header, an API key: any hashable). Routing has not run
            yet, so read the path or headers, not ``path_params``. None is a key like any other:
            the requests for which it returns None (a missing header) share that one key's
            limits. To let a request through ungated, return :data:`UNGATED`.
        timeout: Seconds from arrival to the deadline, covering the wait and the response. A
            response that ends after it is counted late (and logged), never cut short, unless
            ``on_deadline="cut"``.
        on_deadline: ``"late"`` (the default) or ``"cut"``: the app still running at the
            deadline is cancelled then (``admit(on_deadline="cut")``), its slot held until it has
            stopped, counted ``cut``. If its response has not started the client gets a 504
            (code ``cut``, in the ``refusal`` style); if it has, the response is cut short: the
            exchange raises :class:`~boundedgate.DeadlineCut` to the server, which closes the
            connection. Needs a ``timeout``.
        max_wait: Seconds the request may wait in the queue, apart from the deadline: it expires
            at the earlier of the two.
        priority: The request's priority class, or a function of the scope giving it.
        cost: The request's rate cost (for rate limits counted in tokens), or a function of the
            scope giving it (None: 0).
        exempt: Routes that bypass the gate (health checks, the limits document): a function of
            the scope, or a list of paths, each matched exactly, or as a prefix when it ends in
            ``/``.
        refusal: The refusal body: ``"public"`` (the default: code, message and retry-after, no
            internal counts), ``"detailed"`` (``GateError.to_dict()``), ``"openai"`` or
            ``"anthropic"`` (their SDKs' error envelopes), ``"session"`` (a per-session
            shape) or ``"problem"`` (RFC 9457 problem details); or a function ``(error, key)``
            returning the body as a dict.
        sse_refusal: Refuse a client that accepts ``text/event-stream`` with a 200 event stream
            carrying ``retry:`` and an ``error`` event, which a browser's ``EventSource`` retries
            (it gives up for good on any other status).
        retry_after_fallback: ``Retry-After`` in seconds (an int >= 1) when the gate has no pace
            yet to estimate it from (no request has finished since it started). Default 1.
        ratelimit_headers: Add ``RateLimit-Policy`` and ``RateLimit`` to admitted responses.
        server_timing: Add the ``Server-Timing`` entry to admitted responses.
        max_buffer: Bytes of request body the middleware reads ahead of the app (it must read to
            see a disconnect). Beyond it, it waits until the app has read them.
        provider_errors: Answer the provider's own refusal, when the app raises it before its
            response started (an LLM SDK's 429, 503 or 529 error: ``openai.RateLimitError``,
            ``anthropic.OverloadedError``...), as the service's 429 or 503 in the ``refusal``
            style, with the provider's ``Retry-After`` (see :func:`provider_refusal`), rather than
            let it reach the server as a 500. Logged at WARNING, counted failed. False: the
            exception goes on to the server.

    Raises:
        TypeError, ValueError: A setting out of its type or range, named, when the middleware is
            made (not at the first request): a budget, priority or cost that ``admit()`` would
            refuse, a count beyond ``sys.maxsize``, a flag that is not True or False, an unknown
            refusal style; or a gate that cannot take what is given.
    """

    __slots__ = (
        "_admit",
        "_app",
        "_chain",
        "_cost",
        "_exempt",
        "_gate",
        "_key",
        "_keyed",
        "_max_buffer",
        "_options",
        "_priority",
        "_provider_errors",
        "_ratelimit",
        "_refusal",
        "_retry_after_fallback",
        "_server_timing",
        "_sse",
    )

    def __init__(
        self,
        app: ASGIApp,
        *,
        gate: Any,
        key: Callable[[Scope], Hashable | None] | None = None,
        timeout: float | None = None,
        max_wait: float | None = None,
        priority: int | Callable[[Scope], int] = 0,
        cost: float | Callable[[Scope], float | None] | None = None,
        exempt: Callable[[Scope], bool] | Iterable[str] | None = None,
        refusal: str | BodyFunction = "public",
        sse_refusal: bool = False,
        retry_after_fallback: int = 1,
        ratelimit_headers: bool = False,
        server_timing: bool = True,
        max_buffer: int = 1 << 20,
        provider_errors: bool = True,
        on_deadline: str = "late",
    ) -> None:
        chain, keyed = _checked_gate(gate, key, max_wait, priority, cost)
        if chain is not None:
            key = None  # the chain found each keyed gate its key function
        cut = cut_option(gate, on_deadline, timeout)
        check_style(refusal)
        retry_after_fallback = check_count("retry_after_fallback", retry_after_fallback, 1)
        max_buffer = check_count("max_buffer", max_buffer)
        if not callable(priority):
            check_count("priority", priority)
            classes = getattr(gate, "priorities", None)
            if chain is not None:
                chain.check_priority(priority)
            elif isinstance(classes, int):
                check_priority(priority, classes)
        if cost is not None and not callable(cost):
            check_cost(cost)
        sse_refusal = check_flag("sse_refusal", sse_refusal)
        ratelimit_headers = check_flag("ratelimit_headers", ratelimit_headers)
        server_timing = check_flag("server_timing", server_timing)
        self._app = app
        self._gate = gate
        self._keyed = keyed
        self._key = key
        self._priority = priority
        self._cost = cost
        self._options = admission_options(timeout, max_wait)
        if cut:
            self._options["on_deadline"] = "cut"
        self._exempt = _exemption(exempt)
        self._refusal = refusal
        self._sse = sse_refusal
        self._retry_after_fallback = retry_after_fallback
        self._ratelimit = ratelimit_headers
        self._server_timing = server_timing
        self._max_buffer = max_buffer
        self._provider_errors = bool(provider_errors)
        self._chain = chain
        self._admit = chain.admit if chain is not None else gate.admit

    @property
    def gate(self) -> Any:
        """The gate requests go through (the chain, as given, for a chain)."""
        return self._gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection: HTTP requests through the gate, anything else as it is."""
        if scope["type"] != "http" or (self._exempt is not None and self._exempt(scope)):
            await self._app(scope, receive, send)
            return
        key: Hashable | None = None
        options = self._options
        priority, cost = self._priority, self._cost
        if callable(priority) or priority or cost is not None:
            options = dict(options)
            priority = priority(scope) if callable(priority) else priority
            if priority:
                options["priority"] = priority
            cost = cost(scope) if callable(cost) else cost
            if cost is not None:
                options["cost"] = cost
        permit: Any
        if self._chain is not None:
            permit, key = self._chain.admit(scope, options, UNGATED)
            if permit is None:  # every gate of the chain is keyed, and the request ungated at each
                await self._app(scope, receive, send)
                return
        elif self._keyed:
            key = self._key(scope)  # type: ignore[misc]
            if key is UNGATED:
                await self._app(scope, receive, send)
                return
            permit = self._admit(key, **options)
        else:
            permit = self._admit(**options)
        await _Exchange(self, scope, receive, send, permit, key).run()


def _checked_gate(
    gate: Any, key: Any, max_wait: float | None, priority: Any, cost: Any
) -> tuple[Chain | None, bool]:
    """Refuse at construction a gate the other settings do not fit; the chain if it is one, and if keyed."""
    if key is not None and not callable(key):
        raise TypeError(f"key must be a function of the ASGI scope, got {key!r}")
    if is_chain(gate):
        chain = Chain(gate, key, "GateMiddleware")
        if callable(priority) and chain.cluster:
            chain.check_priority(1)  # a priority function could name a class the cluster lacks
        return chain, False
    if not hasattr(gate, "admit"):
        raise TypeError(
            f"gate must be a BoundedGate, a KeyedGate or RedisKeyedGate (with key=), a RedisGate, "
            f"or a list of them (a chain), got {gate!r}; "
            "see docs/http.md, 'Serving HTTP: the ASGI middleware'"
        )
    keyed = is_keyed(gate)
    if keyed and key is None:
        raise TypeError(
            "a KeyedGate needs key=, a function from the ASGI scope to the request's key, "
            "such as key=lambda scope: dict(scope['headers']).get(b'x-tenant')"
        )
    if key is not None and not keyed:
        raise TypeError(
            "key= is for a KeyedGate; this gate has one queue for every request: "
            "remove key=, or use a KeyedGate for one queue per key"
        )
    _check_takes(gate, "max_wait", max_wait is not None, "bound the wait with timeout= instead")
    uses_priority = callable(priority) or bool(priority)
    _check_takes(gate, "priority", uses_priority, "priority classes need a BoundedGate or a KeyedGate")
    _check_takes(
        gate, "cost", cost is not None, "rate costs need a BoundedGate or a KeyedGate with rate_limits"
    )
    return None, keyed


def _check_takes(gate: Any, option: str, given: bool, instead: str) -> None:
    """Refuse at construction an option the gate's ``admit()`` cannot take, saying what to do instead."""
    if given and option not in inspect.signature(gate.admit).parameters:
        raise TypeError(f"{type(gate).__name__}.admit() takes no {option}: {instead} (see docs/http.md)")


def cut_option(gate: Any, on_deadline: object, timeout: float | None) -> bool:
    """Whether an edge cuts its requests off at their deadline: ``on_deadline``, checked now.

    Raises:
        ValueError: ``on_deadline`` is neither ``"late"`` nor ``"cut"``, or ``"cut"`` without a
            ``timeout`` (there would be no deadline to cut at).
        TypeError: The gate's ``admit()`` cannot cut (a gate without ``on_deadline=``), or a chain.
    """
    if on_deadline == "late":
        return False
    if on_deadline != "cut":
        raise ValueError(f"on_deadline must be 'late' or 'cut', got {on_deadline!r}")
    if timeout is None:
        raise ValueError("on_deadline='cut' needs a timeout=: without a deadline nothing is ever cut")
    if is_chain(gate):
        raise TypeError(
            "on_deadline='cut' takes one gate, not a chain (admit_all() does not cut): leave "
            "on_deadline='late', the default, or put the call inside asyncio.timeout() (see docs/http.md)"
        )
    _check_takes(gate, "on_deadline", True, "leave on_deadline='late', the default")
    return True


def admission_options(timeout: float | None, max_wait: float | None) -> dict[str, Any]:
    """The budgets every admission of a route passes to ``admit()``, checked now, not at a request."""
    options: dict[str, Any] = {}
    if timeout is not None:
        check_timeout(timeout)
        options["timeout"] = timeout
    if max_wait is not None:
        check_max_wait(max_wait)
        options["max_wait"] = max_wait
    return options


class _Exchange:
    """One HTTP request through the middleware: the pump, the admission, the app, the ending."""

    __slots__ = (
        "_app_called",
        "_app_task",
        "_arrived",
        "_buffered",
        "_chain",
        "_done",
        "_drained",
        "_failure",
        "_gone",
        "_inbox",
        "_key",
        "_middleware",
        "_permit",
        "_pump_task",
        "_pumping",
        "_receive",
        "_scope",
        "_send",
        "_started",
    )

    def __init__(
        self, middleware: GateMiddleware, scope: Scope, receive: Receive, send: Send, permit: Any, key: Any
    ) -> None:
        self._middleware = middleware
        self._scope = scope
        self._receive = receive
        self._send = send
        self._permit = permit
        self._key = key
        self._inbox: deque[Message] = deque()
        self._buffered = 0  # body bytes in the inbox
        self._arrived = asyncio.Event()  # set when the inbox has news for readers (each waits its own way)
        self._pumping = True  # the pump reads for the app (until the response is complete)
        self._drained: asyncio.Future[None] | None = None  # the pump waits on it when the inbox is full
        self._failure: BaseException | None = None  # what the server's receive() raised
        self._gone = False  # the client disconnected before the response was complete
        self._started = False  # http.response.start was sent
        self._done = False  # the last body message was sent
        self._app_called = False  # its admission is over and the app was called
        self._app_task: asyncio.Task[None] | None = None
        self._pump_task: asyncio.Task[None] | None = None
        chain: list[_Exchange] | None = scope.get(CHAIN)
        if chain is None:
            chain = scope[CHAIN] = []
        chain.append(self)
        self._chain = chain

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        # The pump first: it reads a disconnect that is already there before the request arrives
        # at the gate, so a client that left before it was counted is never counted.
        pump = self._pump_task = loop.create_task(self._pump())
        exchange = self._app_task = loop.create_task(self._exchange())
        try:
            await asyncio.wait((exchange,))
        except BaseException:
            # The server's task was cancelled (shutdown, an outer middleware): so is the exchange,
            # which releases its permit as failed; wait until the app has cleaned up.
            exchange.cancel()
            while not exchange.done():
                try:
                    await asyncio.wait((exchange,))
                except asyncio.CancelledError:
                    continue
            if not exchange.cancelled():
                exchange.exception()  # retrieved: the cancellation is what the server hears of
            raise
        finally:
            pump.cancel()
            if self._chain[0] is self:
                self._chain.clear()  # the request is over: the scope holds none of its exchanges
        if exchange.cancelled():
            if self._gone:
                return  # the client left: there is nobody to answer
            raise asyncio.CancelledError()
        error = exchange.exception()
        if error is not None:
            if self._gone and isinstance(error, (OSError, asyncio.CancelledError)):
                return
            raise error

    # -- the pump ---------------------------------------------------------------------------

    async def _pump(self) -> None:
        receive = self._receive
        inbox = self._inbox
        limit = self._middleware._max_buffer
        try:
            while True:
                while self._buffered > limit:
                    self._drained = asyncio.get_running_loop().create_future()
                    await self._drained
                message = await receive()
                inbox.append(message)
                if message["type"] == "http.disconnect":
                    self._wake()
                    self._client_gone()
                    return
                self._buffered += len(message.get("body", b""))
                self._wake()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the server's receive() failed: the app hears of it
            self._failure = exc
            self._wake()

    def _wake(self) -> None:
        self._arrived.set()

    async def _app_receive(self) -> Message:
        """The ``receive()`` the app gets: what the pump read, in order."""
        inbox = self._inbox
        while not inbox:
            if self._failure is not None:
                raise self._failure
            if not self._pumping or self._pump_task is None or self._pump_task.done():
                if self._gone:
                    return {"type": "http.disconnect"}
                return await self._receive()  # the response is complete: the pump has stopped
            # An Event, not a shared future: a reader cancelled while it waits (Starlette's
            # is_disconnected() polls that way) must not cancel the wait of another.
            self._arrived.clear()
            await self._arrived.wait()
        message = inbox.popleft()
        if message["type"] == "http.disconnect":
            inbox.appendleft(message)  # every later read sees it too
            return message
        self._buffered -= len(message.get("body", b""))
        drained = self._drained
        if drained is not None and self._buffered <= self._middleware._max_buffer:
            self._drained = None
            if not drained.done():
                drained.set_result(None)
        return message

    # -- the client leaving -----------------------------------------------------------------

    def _client_gone(self) -> None:
        """The client disconnected: end the request now, unless its response was already complete."""
        if self._done or self._gone:
            return
        self._gone = True
        inner = self._inside()
        if inner is not None:
            inner._client_gone()  # the gate inside ends its part first: it may hold the request queued
        permit = self._permit
        if not self._app_called and (getattr(permit, "arrival", None) is not None or permit.status is QUEUED):
            disconnect = getattr(permit, "disconnect", None)
            if disconnect is not None:
                # On its way to a slot: out of the queue now, as disconnected, even if a slot was
                # handed to it in this very turn (it passes on unused); the admission raises
                # CancelledError, and the app is never called.
                disconnect()
                return
        task = self._app_task
        if permit.status in (NEW, QUEUED, RUNNING) and task is not asyncio.current_task():
            # Not arrived yet: never counted. Running: the app stops, then the slot is aborted.
            task.cancel()  # type: ignore[union-attr]

    def _inside(self) -> _Exchange | None:
        """The middleware's exchange the request went through next, inside this one's app, if any."""
        chain = self._chain
        index = chain.index(self) + 1 if self in chain else len(chain)
        return chain[index] if index < len(chain) else None

    def _reached_the_app(self) -> bool:
        """Whether the request got through every gate to the real app (the innermost gate called it)."""
        return self._chain[-1]._app_called

    # -- the exchange -----------------------------------------------------------------------

    async def _exchange(self) -> None:
        permit = self._permit
        middleware = self._middleware
        try:
            await permit.__aenter__()
        except GateError as error:
            await self._refuse(error)
            return
        answer: Refusal | None = None
        self._app_called = True
        try:
            await middleware._app(self._scope, self._app_receive, self._app_send)
        except asyncio.CancelledError:
            if self._gone or not self._cut_off():
                raise
            permit._finish(CUT)  # the gate's cut at the deadline, once the app has stopped
            await self._answer_cut()
            return
        except Exception as error:
            answer = self._provider_refusal(error)
            if answer is None:
                raise
        finally:
            if not self._done:  # the app raised, was cancelled or returned before the end
                self._end_unfinished()
        if answer is not None:
            await self._answer(answer)

    def _cut_off(self) -> bool:
        """True if the gate cut the app off at its deadline (``on_deadline="cut"``), and no one else."""
        take_back = getattr(self._permit, "_take_back_cut", None)
        return take_back is not None and bool(take_back())

    async def _answer_cut(self) -> None:
        """The app was cut off at its deadline: a 504 if its response had not started, else the error."""
        error = self._permit._cut_error()
        if self._started:
            raise error  # the response is cut short: the server closes the connection
        await self._refuse(error)

    def _end_unfinished(self) -> None:
        """End the permit of a request whose response did not complete: failed, aborted or disconnected."""
        permit = self._permit
        if not self._gone:
            permit._finish(CUT if self._cut_off() else FAILED)
        elif self._reached_the_app():
            permit._finish(ABORTED)
        else:
            # Its client left while a gate inside still held it back from the app: this gate's
            # slot was never used for the work it stands for.
            permit._give_back_unused()

    def _provider_refusal(self, error: Exception) -> Refusal | None:
        """The service's answer to the provider's refusal the app raised, if it is one and can be sent."""
        middleware = self._middleware
        if not middleware._provider_errors or self._started or self._gone:
            return None
        answer = provider_refusal(
            error,
            middleware._refusal,
            key=self._key,
            retry_after_fallback=middleware._retry_after_fallback,
            event_stream=middleware._sse and _accepts_event_stream(self._scope),
        )
        if answer is not None:
            logger.warning(
                "%s %s: the provider refused (%s: %s); answered %d with Retry-After: %s",
                self._scope.get("method", ""),
                self._scope.get("path", ""),
                type(error).__name__,
                error,
                answer.status,
                dict(answer.headers)[b"retry-after"].decode(),
            )
        return answer

    async def _refuse(self, error: GateError) -> None:
        middleware = self._middleware
        refusal = refusal_for(
            error,
            middleware._refusal,
            key=self._key,
            retry_after_fallback=middleware._retry_after_fallback,
            event_stream=middleware._sse and _accepts_event_stream(self._scope),
        )
        await self._answer(refusal)

    async def _answer(self, refusal: Refusal) -> None:
        """Send a refusal: the gate's, or the provider's (the app's own response never started)."""
        self._done = True  # not the app's response: a disconnect now cancels nothing
        start = {"type": "http.response.start", "status": refusal.status, "headers": refusal.headers}
        await self._send(start)
        await self._send({"type": "http.response.body", "body": refusal.body})

    async def _app_send(self, message: Message) -> None:
        """The ``send`` the app gets: the response passes through, and its end releases the permit."""
        kind = message["type"]
        if kind == "http.response.start":
            if not self._started:
                self._started = True
                extra = self._headers()
                if extra:
                    message = {**message, "headers": [*message.get("headers", ()), *extra]}
        elif kind == _PATH_SEND or (kind == "http.response.body" and not message.get("more_body", False)):
            try:
                await self._send(message)
            except OSError:
                self._client_gone()
                raise
            self._complete()
            return
        try:
            await self._send(message)
        except OSError:
            self._client_gone()
            raise

    def _complete(self) -> None:
        """The last body message was sent: the request is over for the gate."""
        if self._gone:
            return  # sent to nobody: the app's end aborts it
        self._done = True
        self._pumping = False
        pump = self._pump_task
        if pump is not None:
            pump.cancel()
        self._wake()  # a reader waiting now reads the server's receive() itself
        permit = self._permit
        permit._finish()
        if permit.status is LATE or permit.status is CUT:  # cut: it ended at its deadline, before the cut
            overrun = permit.ended - permit.deadline
            logger.warning(
                "%s %s on gate %r finished %.3fs past its deadline (counted %s)",
                self._scope.get("method", ""),
                self._scope.get("path", ""),
                permit.gate.name,
                overrun,
                permit.status.value,
            )

    def _headers(self) -> list[tuple[bytes, bytes]]:
        middleware = self._middleware
        permit = self._permit
        headers: list[tuple[bytes, bytes]] = []
        if middleware._server_timing:
            started, arrival = getattr(permit, "started", None), getattr(permit, "arrival", None)
            if started is not None and arrival is not None:
                entry = b'gate;dur=%.3f;desc="queue"' % ((started - arrival) * 1000)
                gate = permit.gate
                loop = getattr(gate, "_loop", None)
                if loop is not None and loop.time() >= permit.deadline:
                    entry += b', gate-late;desc="deadline passed"'
                headers.append((b"server-timing", entry))
        if middleware._ratelimit:
            gates = getattr(permit, "gates", None)  # a chain's: every gate's limits
            headers += ratelimit_fields(permit.gate) if gates is None else chain_ratelimit_fields(gates)
        return headers
