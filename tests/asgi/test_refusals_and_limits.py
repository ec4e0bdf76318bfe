"""Refusal bodies in every style, as the SDKs read them; the limits document; the RateLimit fields."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from boundedgate import BoundedGate, KeyedGate, QueueFull, RateLimit, RateLimited
from boundedgate.asgi import GateMiddleware, limits_app, limits_document, refusal_for
from boundedgate.asgi._limits import ratelimit_fields
from boundedgate.asgi._refusal import REFUSAL_STYLES, retry_after_seconds
from tests.asgi.harness import Client, http_scope, serve

#: The limits and counts of a refusal at a gate of one slot (busy) and no waiting room.
COUNTS: dict[str, Any] = {
    "max_running": 1,
    "max_waiting": 0,
    "running": 1,
    "waiting": 0,
    "waited": 0.0,
    "elapsed": 0.0,
}

FULL = QueueFull(
    gate="session/A",
    max_running=1,
    max_waiting=4,
    running=1,
    waiting=4,
    waited=0.0,
    elapsed=0.0,
    recent_run=2.0,  # retry_after = 5 * 2.0 / 1 = 10 s
)
MESSAGE = "The service is at capacity. Retry later."

GOLDEN: dict[str, tuple[str, dict[str, Any]]] = {
    "public": ("application/json", {"code": "queue_full", "message": MESSAGE, "retry_after": 10}),
    "detailed": (
        "application/json",
        {
            "code": "queue_full",
            "error": "gate 'session/A' [running 1/1, waiting 4/4] is full",
            "gate": "session/A",
            "max_running": 1,
            "max_waiting": 4,
            "running": 1,
            "waiting": 4,
            "waited": 0.0,
            "elapsed": 0.0,
            "retry_after": 10,
        },
    ),
    "openai": (
        "application/json",
        {"error": {"message": MESSAGE, "type": "server_error", "param": None, "code": "queue_full"}},
    ),
    "anthropic": (
        "application/json",
        {"type": "error", "error": {"type": "overloaded_error", "message": MESSAGE}},
    ),
    "session": (
        "application/json",
        {"code": "queue_full", "error": MESSAGE, "sessionId": "A", "limit": 5, "pendingCount": 5},
    ),
    "problem": (
        "application/problem+json",
        {
            "type": "about:blank",
            "title": "Service Unavailable",
            "status": 503,
            "detail": MESSAGE,
            "code": "queue_full",
            "retry_after": 10,
        },
    ),
}


@pytest.mark.parametrize("style", REFUSAL_STYLES)
def test_each_style_s_body(style: str) -> None:
    refusal = refusal_for(FULL, style, key="A")
    content_type, body = GOLDEN[style]
    assert refusal.status == 503
    headers = dict(refusal.headers)
    assert headers[b"content-type"] == content_type.encode()
    assert headers[b"retry-after"] == b"10"
    assert headers[b"cache-control"] == b"no-store"
    assert headers[b"content-length"] == str(len(refusal.body)).encode()
    assert json.loads(refusal.body) == body


def test_only_the_detailed_style_shows_the_gate_s_counts() -> None:
    for style in REFUSAL_STYLES:
        text = refusal_for(FULL, style, key="A").body.decode()
        assert ("max_running" in text) == (style == "detailed"), style
        assert ("session/A" in text) == (style == "detailed"), style


def test_a_body_function_and_the_retry_after_rounding() -> None:
    refusal = refusal_for(FULL, lambda error, key: {"busy": error.code, "who": key}, key="k")
    assert json.loads(refusal.body) == {"busy": "queue_full", "who": "k"}
    no_pace = QueueFull(gate="g", **COUNTS, recent_run=None)
    assert retry_after_seconds(no_pace, 3) == 3
    assert retry_after_seconds(QueueFull(gate="g", **COUNTS, recent_run=0.2), 3) == 1
    assert (
        retry_after_seconds(
            QueueFull(gate="g", **{**COUNTS, "max_running": 4, "running": 4}, recent_run=8.4), 3
        )
        == 3
    )  # 2.1 s, rounded up
    limited = RateLimited(gate="g", **{**COUNTS, "running": 0}, limit="rpm", retry_after=59.2)
    assert refusal_for(limited).status == 429
    assert dict(refusal_for(limited).headers)[b"retry-after"] == b"60"


def _sdk_http(middleware: Any) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=middleware), base_url="http://service")


@contextlib.asynccontextmanager
async def _refusing(style: str, limited: bool) -> AsyncIterator[Any]:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("never called: the gate refuses")

    if limited:
        gate = BoundedGate(max_running=1, max_waiting=0, rate_limits=[RateLimit.per_minute(1)])
        await serve(GateMiddleware(_ok, gate=gate), Client())  # spends the one request
    else:
        gate = BoundedGate(max_running=1, max_waiting=0)
    with contextlib.ExitStack() as holding:
        if not limited:
            holding.callback(gate.try_admit().release)  # holds the only slot for the test
        yield GateMiddleware(app, gate=gate, refusal=style, timeout=5)


async def _ok(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


@pytest.mark.parametrize("limited", [False, True], ids=["queue_full", "rate_limited"])
async def test_an_openai_sdk_client_of_the_service_gets_a_typed_error_with_our_code(limited: bool) -> None:
    async with _refusing("openai", limited) as middleware, _sdk_http(middleware) as http:
        client = openai.AsyncOpenAI(
            base_url="http://service/v1", api_key="k", max_retries=0, http_client=http
        )
        expected = openai.RateLimitError if limited else openai.InternalServerError
        with pytest.raises(expected) as caught:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.code == ("rate_limited" if limited else "queue_full")
    assert caught.value.type == ("rate_limit_error" if limited else "server_error")
    assert caught.value.response.headers["retry-after"] == ("60" if limited else "1")


@pytest.mark.parametrize("limited", [False, True], ids=["queue_full", "rate_limited"])
async def test_an_anthropic_sdk_client_of_the_service_gets_a_typed_error(limited: bool) -> None:
    async with _refusing("anthropic", limited) as middleware, _sdk_http(middleware) as http:
        client = anthropic.AsyncAnthropic(
            base_url="http://service", api_key="k", max_retries=0, http_client=http
        )
        expected = anthropic.RateLimitError if limited else anthropic.InternalServerError
        with pytest.raises(expected) as caught:
            await client.messages.create(
                model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
    assert caught.value.body["error"]["type"] == ("rate_limit_error" if limited else "overloaded_error")  # type: ignore[index]


def test_the_limits_document_publishes_null_for_unlimited() -> None:
    provider = BoundedGate(
        max_running=50, max_waiting=100, name="openai", rate_limits=[RateLimit.per_minute(600, name="rpm")]
    )
    sessions: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=4, name="session")
    unbounded = BoundedGate(max_running=None, max_waiting=None)
    document = limits_document({"openai": provider, "session": sessions, "batch": unbounded})
    assert document == {
        "limits": {
            "openai": {
                "max_running": 50,
                "max_waiting": 100,
                "max_pending": 150,
                "rate_limits": [
                    {
                        "name": "rpm",
                        "unit": "requests",
                        "per_second": 10.0,
                        "burst": 600,
                        "window_seconds": 60.0,
                    }
                ],
                "per_key": False,
            },
            "session": {
                "max_running": 1,
                "max_waiting": 4,
                "max_pending": 5,
                "rate_limits": [],
                "per_key": True,
            },
            "batch": {
                "max_running": None,
                "max_waiting": None,
                "max_pending": None,
                "rate_limits": [],
                "per_key": False,
            },
        }
    }
    live = limits_document({"openai": provider}, live=True)["limits"]["openai"]
    assert (live["running"], live["waiting"]) == (0, 0)


@pytest.mark.parametrize(("method", "status"), [("GET", 200), ("HEAD", 200), ("POST", 405)])
async def test_the_limits_endpoint(method: str, status: int) -> None:
    gate = BoundedGate(max_running=2, max_waiting=0, name="g")
    client = Client()
    await serve(limits_app({"g": gate}, live=True), client, http_scope("/limits", method=method))
    assert client.status == status
    if method == "GET":
        assert client.headers["cache-control"] == "no-store"  # live counts are never cached
        assert client.json()["limits"]["g"]["running"] == 0
    elif method == "HEAD":
        assert client.body == b""
    else:
        assert client.headers["allow"] == "GET, HEAD"


async def test_ratelimit_fields_follow_the_ietf_draft() -> None:
    gate = BoundedGate(
        max_running=3,
        max_waiting=0,
        name="openai",
        rate_limits=[
            RateLimit.per_minute(60, name="rpm"),
            RateLimit.per_minute(1000, unit="tokens", name="tpm"),
        ],
    )
    client = Client()
    await serve(GateMiddleware(_ok, gate=gate, ratelimit_headers=True, cost=100), client)
    assert client.headers["ratelimit-policy"] == (
        '"openai";q=3;qu="concurrency", '
        '"openai/rpm";q=60;qu="request";w=60, '
        '"openai/tpm";q=1000;qu="tokens";w=60'
    )
    assert client.headers["ratelimit"] == '"openai";r=2, "openai/rpm";r=59;t=1, "openai/tpm";r=900;t=6'
    assert ratelimit_fields(BoundedGate(max_running=None, max_waiting=None)) == []


def test_the_package_imports_nothing_but_the_stdlib_and_boundedgate() -> None:
    script = (
        "import sys\n"
        "for name in ('starlette', 'fastapi', 'uvicorn'): sys.modules[name] = None\n"
        "import boundedgate.asgi as asgi\n"
        "asgi.GateMiddleware, asgi.limits_app, asgi.refusal_for\n"
        "try:\n"
        "    asgi.GatedStreamingResponse\n"
        "except ImportError:\n"
        "    print('lazy')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "lazy"


class _SdkError(Exception):
    """An SDK's status error as the middleware sees it: ``status_code`` and ``response.headers``."""

    def __init__(self, status_code: object, headers: dict[str, str] | None) -> None:
        super().__init__("provider said no")
        self.status_code = status_code
        self.response = None if headers is None else type("Response", (), {"headers": headers})()


@pytest.mark.parametrize(
    ("headers", "retry_after"),
    [
        ({"retry-after-ms": "2100", "retry-after": "9"}, "3"),  # the finer one first
        ({"retry-after": "4"}, "4"),
        ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "6m0s"}, "360"),
        (  # the quota that is spent, not the other
            {
                "x-ratelimit-remaining-requests": "10",
                "x-ratelimit-reset-requests": "1s",
                "x-ratelimit-remaining-tokens": "0",
                "x-ratelimit-reset-tokens": "12.5s",
            },
            "13",
        ),
        ({}, "7"),  # it said nothing: the fallback
        (None, "7"),  # no response at all
    ],
)
def test_the_provider_s_retry_after_is_read_from_its_headers(
    headers: dict[str, str] | None, retry_after: str
) -> None:
    from boundedgate.asgi import provider_refusal

    answer = provider_refusal(_SdkError(429, headers), "problem", retry_after_fallback=7)
    assert answer is not None
    assert answer.status == 429
    assert dict(answer.headers)[b"retry-after"] == retry_after.encode()
    assert json.loads(answer.body)["code"] == "provider_rate_limited"


def test_only_the_provider_s_429_503_and_529_are_its_refusals() -> None:
    from boundedgate.asgi import provider_refusal

    assert provider_refusal(_SdkError(529, {}), "anthropic").status == 503  # type: ignore[union-attr]
    assert provider_refusal(_SdkError(503, {}), "public").status == 503  # type: ignore[union-attr]
    for other in (400, 500, 502, True, "429", None):
        assert provider_refusal(_SdkError(other, {}), "public") is None, other
    assert provider_refusal(ValueError("no status"), "public") is None
    detailed = json.loads(provider_refusal(_SdkError(429, {}), "detailed").body)  # type: ignore[union-attr]
    assert detailed == {
        "code": "provider_rate_limited",
        "error": "The service is rate limited by its provider. Retry later.",
        "provider_status": 429,
        "retry_after": 1,
    }
