"""Refusals over HTTP: the status, the headers and the body a refused request gets.

A refusal is answered before the app runs, so nothing about it depends on the app. The status is
the error's (503, or 429 for :class:`RateLimited`); ``Retry-After`` is always present, in whole
seconds >= 1 (the error's own estimate rounded up, or the fallback before the gate has a pace);
``Cache-Control: no-store`` keeps a proxy from serving a refusal to the next client. The body is
one of the styles below, or what a function of the caller's returns.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Literal, NamedTuple, get_args

from .._errors import GateError

__all__ = ("REFUSAL_STYLES", "Refusal", "RefusalStyle", "refusal_for", "retry_after_seconds")

#: The body styles :class:`GateMiddleware` and :func:`refusal_response` know by name.
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
    "gate_unavailable": "The service cannot take requests right now. Retry later.",
}
_TITLES = {429: "Too Many Requests", 503: "Service Unavailable"}


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
    estimate = error.retry_after
    if estimate is None or not math.isfinite(estimate):
        return fallback
    return max(1, math.ceil(estimate))


def _public(error: GateError, retry_after: int) -> dict[str, Any]:
    return {
        "code": error.code,
        "message": _PUBLIC_MESSAGES.get(error.code, "The request was refused. Retry later."),
        "retry_after": retry_after,
    }


def body_for(
    style: str, error: GateError, key: Hashable | None, retry_after: int
) -> tuple[dict[str, Any], bytes]:
    """The JSON body of a refusal in ``style``, and its content type."""
    status = error.http_status
    message = _public(error, retry_after)["message"]
    if style == "public":
        return _public(error, retry_after), b"application/json"
    if style == "detailed":
        return {**error.to_dict(), "retry_after": retry_after}, b"application/json"
    if style == "openai":
        kind = "rate_limit_error" if status == 429 else "server_error"
        envelope = {"message": message, "type": kind, "param": None, "code": error.code}
        return {"error": envelope}, b"application/json"
    if style == "anthropic":
        kind = "rate_limit_error" if status == 429 else "overloaded_error"
        return {"type": "error", "error": {"type": kind, "message": message}}, b"application/json"
    if style == "session":
        running, waiting = error.max_running, error.max_waiting
        pending_limit = None if running is None or waiting is None else running + waiting
        return {
            "code": error.code,
            "error": message,
            "sessionId": key,
            "limit": pending_limit,
            "pendingCount": error.running + error.waiting,
        }, b"application/json"
    if style == "problem":
        return {
            "type": "about:blank",
            "title": _TITLES.get(status, "Service Unavailable"),
            "status": status,
            "detail": message,
            "code": error.code,
            "retry_after": retry_after,
        }, b"application/problem+json"
    raise ValueError(f"unknown refusal style {style!r}; expected one of {', '.join(REFUSAL_STYLES)}")


def check_style(style: object) -> None:
    """Raise at construction for a style that is neither a known name nor a function."""
    if callable(style):
        return
    if style not in REFUSAL_STYLES:
        raise ValueError(f"unknown refusal style {style!r}; expected one of {', '.join(REFUSAL_STYLES)}")


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
        style: A body style (see :data:`REFUSAL_STYLES`), or a function ``(error, key) -> dict``
            whose result is sent as JSON.
        key: The request's key (a session, tenant or API key), for the ``"session"`` style.
        retry_after_fallback: ``Retry-After`` when the error has no estimate yet, in seconds >= 1.
        event_stream: Answer as an event stream an ``EventSource`` comes back from: status 200,
            ``text/event-stream``, a ``retry:`` field of the same delay and one ``error`` event
            carrying the body, then the end of the stream (a browser's ``EventSource`` gives up
            for good on any status but 200).
    """
    retry_after = retry_after_seconds(error, retry_after_fallback)
    if callable(style):
        body: Mapping[str, Any] = style(error, key)
        content_type = b"application/json"
    else:
        body, content_type = body_for(style, error, key, retry_after)
    data = json.dumps(body, separators=(",", ":")).encode()
    headers = [
        (b"retry-after", str(retry_after).encode()),
        (b"cache-control", b"no-store"),
    ]
    if event_stream:
        data = b"retry: %d\nevent: error\ndata: %s\n\n" % (retry_after * 1000, data)
        content_type = b"text/event-stream"
        status = 200
    else:
        status = error.http_status
    headers.append((b"content-type", content_type))
    headers.append((b"content-length", str(len(data)).encode()))
    return Refusal(status, headers, data)
