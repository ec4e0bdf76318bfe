"""Refusals over HTTP: the status, the headers and the body a refused request gets.

A refusal is answered before the app runs, so nothing about it depends on the app. The status is
the error's (503, or 429 for :class:`RateLimited`); ``Retry-After`` is always present, in whole
seconds >= 1 (the error's own estimate rounded up, or the fallback before the gate has a pace);
``Cache-Control: no-store`` keeps a proxy from serving a refusal to the next client, and
``x-should-retry: false`` tells the openai and anthropic SDKs to raise their typed error at once
rather than retry on their own (a client that wants to retry reads ``Retry-After``). The body is
one of the styles below, or what a function of the caller's returns.

The provider's own refusals (an SDK's rate-limit or overload error that the app let through)
become the same kind of answer, with the provider's ``Retry-After``: :func:`provider_refusal`.

Rendering never fails: a key of any kind is shown as JSON can carry it, and a body function that
raises (or returns what JSON cannot encode) is logged, and the public body is sent instead, so a
refusal is never turned into a 500 without ``Retry-After``.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Literal, NamedTuple, get_args

from .._errors import GateError

__all__ = (
    "REFUSAL_STYLES",
    "Refusal",
    "RefusalStyle",
    "key_for_json",
    "provider_refusal",
    "refusal_for",
    "retry_after_seconds",
)

logger = logging.getLogger("boundedgate.asgi")

#: The body styles :class:`GateMiddleware` and :func:`refusal_for` know by name.
RefusalStyle = Literal["public", "detailed", "openai", "anthropic", "session", "problem"]
REFUSAL_STYLES: tuple[str, ...] = get_args(RefusalStyle)

#: What a refusal function returns for a body: a JSON-ready mapping.
BodyFunction = Callable[[GateError, Hashable | None], Mapping[str, Any]]

#: What the public style says for each code: nothing about the gate's limits or counts.
_PUBLIC_MESSAGES = {
    "queue_full": "The service is at capacity. Retry later.",
    "rate_limited": "Too many requests. Retry later.",
    "queue_expired": "The request waited too long for capacity. Retry later.",
    "evicted": "The request gave way to more urgent work. Retry later.",
    "infeasible": "The service cannot answer within the request's deadline now. Retry later.",
    "cut": "The request ran out of time and was stopped. Retry later.",
    "gate_unavailable": "The service cannot take requests right now. Retry later.",
    "provider_rate_limited": "The service is rate limited by its provider. Retry later.",
    "provider_overloaded": "The service's provider is overloaded. Retry later.",
}
_TITLES = {429: "Too Many Requests", 503: "Service Unavailable", 504: "Gateway Timeout"}

#: The provider statuses :func:`provider_refusal` answers, and the status and code it answers with.
_PROVIDER_STATUSES = {
    429: (429, "provider_rate_limited"),
    503: (503, "provider_overloaded"),
    529: (503, "provider_overloaded"),  # anthropic's "overloaded": not a status HTTP clients know
}


class Refusal(NamedTuple):
    """An HTTP refusal, ready to send: the status, the headers (lower-case names) and the body."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


def retry_after_seconds(error: GateError, fallback: int) -> int:
    """``Retry-After`` for ``error``: its estimate rounded up to whole seconds (>= 1), else ``fallback``.

    The estimate is None before any run has finished (a gate that just started has no pace yet);
    the fallback is what a server answers then.
    """
    return _whole_seconds(error.retry_after, fallback)


def _whole_seconds(estimate: float | None, fallback: int) -> int:
    if estimate is None or not math.isfinite(estimate):
        return fallback
    return max(1, math.ceil(estimate))


def key_for_json(key: Hashable | None) -> str | int | None:
    """A request's key as JSON can carry it (the ``"session"`` style's ``sessionId``).

    A ``str``, an ``int`` or None as it is; ``bytes`` (a header's value) decoded as latin-1, as
    HTTP/1.1 carries header bytes (every byte maps to one character, so nothing fails);
    anything else (a UUID, a tuple, an object of the application's) as ``str(key)``.
    """
    if key is None or isinstance(key, (str, int)):
        return key
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key).decode("latin-1")
    return str(key)


class _Refused(NamedTuple):
    """What a body style needs to know about one refusal, whoever refused."""

    code: str
    status: int
    retry_after: int
    key: Hashable | None
    #: The gate's error (None for the provider's refusal: the style shows less).
    error: GateError | None
    #: What the ``"detailed"`` style shows of a provider's refusal.
    details: Mapping[str, Any]

    @property
    def message(self) -> str:
        return _PUBLIC_MESSAGES.get(self.code, "The request was refused. Retry later.")


def _public(refused: _Refused) -> dict[str, Any]:
    return {"code": refused.code, "message": refused.message, "retry_after": refused.retry_after}


def _styled(style: str, refused: _Refused) -> tuple[dict[str, Any], bytes]:
    """The JSON body of ``refused`` in ``style``, and its content type."""
    status, message, error = refused.status, refused.message, refused.error
    if style == "public":
        return _public(refused), b"application/json"
    if style == "detailed":
        shown = (
            error.to_dict()
            if error is not None
            else {"code": refused.code, "error": message, **refused.details}
        )
        return {**shown, "retry_after": refused.retry_after}, b"application/json"
    if style == "openai":
        kind = "rate_limit_error" if status == 429 else "server_error"
        envelope = {"message": message, "type": kind, "param": None, "code": refused.code}
        return {"error": envelope}, b"application/json"
    if style == "anthropic":
        kind = "rate_limit_error" if status == 429 else "overloaded_error"
        return {"type": "error", "error": {"type": kind, "message": message}}, b"application/json"
    if style == "session":
        pending_limit = pending = None
        if error is not None:
            running, waiting = error.max_running, error.max_waiting
            pending_limit = None if running is None or waiting is None else running + waiting
            pending = error.running + error.waiting
        return {
            "code": refused.code,
            "error": message,
            "sessionId": key_for_json(refused.key),
            "limit": pending_limit,
            "pendingCount": pending,
        }, b"application/json"
    if style == "problem":
        return {
            "type": "about:blank",
            "title": _TITLES.get(status, "Service Unavailable"),
            "status": status,
            "detail": message,
            "code": refused.code,
            "retry_after": refused.retry_after,
        }, b"application/problem+json"
    raise ValueError(_unknown_style(style))


def body_for(
    style: str, error: GateError, key: Hashable | None, retry_after: int
) -> tuple[dict[str, Any], bytes]:
    """The JSON body of a refusal in ``style``, and its content type."""
    return _styled(style, _Refused(error.code, error.http_status, retry_after, key, error, {}))


def _unknown_style(style: object) -> str:
    return (
        f"unknown refusal style {style!r}; expected one of {', '.join(REFUSAL_STYLES)}, "
        "or a function (error, key) -> dict returning the body"
    )


def check_style(style: object) -> None:
    """Raise at construction for a style that is neither a known name nor a function."""
    if callable(style):
        return
    if style not in REFUSAL_STYLES:
        raise ValueError(_unknown_style(style))


def refusal_for(
    error: GateError,
    style: str | BodyFunction = "public",
    *,
    key: Hashable | None = None,
    retry_after_fallback: int = 1,
    event_stream: bool = False,
) -> Refusal:
    """The HTTP response for a refused request.

    Args:
        error: The gate's refusal.
        style: A body style (see :data:`RefusalStyle`), or a function ``(error, key) -> dict``
            whose result is sent as JSON. If the function raises, or returns what JSON cannot
            encode, the ``boundedgate.asgi`` logger records it with its traceback and the public
            body is sent instead: the refusal still goes out, with its status and ``Retry-After``.
        key: The request's key (a session, tenant or API key), for the ``"session"`` style:
            any hashable: a ``str``, an ``int`` or None as it is, ``bytes`` (a header's value)
            decoded as latin-1, anything else as ``str(key)``.
        retry_after_fallback: ``Retry-After`` when the error has no estimate yet, in seconds >= 1.
        event_stream: Answer as an event stream an ``EventSource`` comes back from: status 200,
            ``text/event-stream``, a ``retry:`` field of the same delay and one ``error`` event
            carrying the body, then the end of the stream (a browser's ``EventSource`` gives up
            for good on any status but 200).
    """
    refused = _Refused(
        error.code, error.http_status, retry_after_seconds(error, retry_after_fallback), key, error, {}
    )
    return _response(refused, style, event_stream)


def provider_refusal(
    error: BaseException,
    style: str | BodyFunction = "public",
    *,
    key: Hashable | None = None,
    retry_after_fallback: int = 1,
    event_stream: bool = False,
) -> Refusal | None:
    """The service's own answer to the provider's refusal, or None for any other exception.

    ``error`` is what an LLM SDK raised for the provider's answer: a 429 (``openai.RateLimitError``,
    ``anthropic.RateLimitError``), a 503 (``openai.InternalServerError``) or anthropic's 529
    (``anthropic.OverloadedError``), or any exception with such a ``status_code`` and the
    provider's ``response`` (the SDKs are not imported: it reads those two attributes). The
    answer is 429 for the provider's 429 (code ``provider_rate_limited``) and 503 for its 503 or
    529 (``provider_overloaded``), in the body ``style`` (a body function gets the public body
    instead: it is written for the gate's errors), with the headers of every refusal and the
    provider's own ``Retry-After``: its ``retry-after-ms`` or ``Retry-After``, else the reset of
    the quota its ``x-ratelimit-*`` or ``anthropic-ratelimit-*`` headers say is spent, rounded up
    to whole seconds (>= 1); ``retry_after_fallback`` if it said none. Other arguments are as for
    :func:`refusal_for`.
    """
    status = getattr(error, "status_code", None)
    if isinstance(status, bool) or not isinstance(status, int) or status not in _PROVIDER_STATUSES:
        return None
    answer, code = _PROVIDER_STATUSES[status]
    headers = getattr(getattr(error, "response", None), "headers", None)
    wait = _provider_wait(headers) if isinstance(headers, Mapping) else None
    retry_after = _whole_seconds(wait, retry_after_fallback)
    refused = _Refused(code, answer, retry_after, key, None, {"provider_status": status})
    return _response(refused, "public" if callable(style) else style, event_stream)


def _provider_wait(headers: Mapping[str, str]) -> float | None:
    """Seconds the provider asked to wait: its retry-after, else the reset of a spent quota."""
    # Imported when first needed: the parsers import nothing but the stdlib, their package more.
    from ..httpx import parse_quotas, parse_retry_after  # noqa: PLC0415

    wait = parse_retry_after(headers)
    if wait is not None:
        return wait
    resets = [(quota.remaining, quota.reset) for quota in parse_quotas(headers) if quota.reset is not None]
    spent = [reset for remaining, reset in resets if remaining == 0]
    if spent:
        return max(spent)
    return min((reset for _, reset in resets), default=None)


def _response(refused: _Refused, style: str | BodyFunction, event_stream: bool) -> Refusal:
    data, content_type = _rendered(refused, style)
    retry_after = refused.retry_after
    headers = [
        (b"retry-after", str(retry_after).encode()),
        (b"cache-control", b"no-store"),
        (b"x-should-retry", b"false"),
    ]
    if event_stream:
        data = b"retry: %d\nevent: error\ndata: %s\n\n" % (retry_after * 1000, data)
        content_type = b"text/event-stream"
        status = 200
    else:
        status = refused.status
    headers.append((b"content-type", content_type))
    headers.append((b"content-length", str(len(data)).encode()))
    return Refusal(status, headers, data)


def _rendered(refused: _Refused, style: str | BodyFunction) -> tuple[bytes, bytes]:
    """The body in ``style``; the public one, logged, if that cannot be made."""
    try:
        if callable(style):
            body: Mapping[str, Any] = style(refused.error, refused.key)  # type: ignore[arg-type]
            content_type = b"application/json"
        else:
            body, content_type = _styled(style, refused)
        return json.dumps(body, separators=(",", ":"), allow_nan=False).encode(), content_type
    except Exception:
        what = f"the refusal body function {style!r}" if callable(style) else f"the {style!r} refusal body"
        logger.exception("%s failed for a %s refusal; the public body was sent instead", what, refused.code)
    return json.dumps(_public(refused), separators=(",", ":")).encode(), b"application/json"
