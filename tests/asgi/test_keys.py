"""Keys from the request: any hashable key renders in every refusal style; a missing key is gated.

A header gives bytes, a parsed id a UUID: the ``"session"`` style names the key in JSON, and no
refusal, in any style, becomes a 500 without ``Retry-After`` (a body function that raises falls back
to the public body, and is logged). A key function that returns None gates those requests under a
key of their own; ``UNGATED`` is the explicit way through.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Hashable
from typing import Any

import pytest

from boundedgate import BoundedGate, KeyedGate, QueueFull, asgi
from boundedgate.asgi import GateMiddleware, refusal_for
from boundedgate.asgi._refusal import REFUSAL_STYLES
from tests.asgi.harness import Client, Scope, StreamingApp, http_scope, serve, turns

FULL = QueueFull(
    gate="session/A",
    max_running=1,
    max_waiting=4,
    running=1,
    waiting=4,
    waited=0.0,
    elapsed=0.0,
    recent_run=2.0,
)
ID = uuid.UUID("12345678-1234-5678-1234-567812345678")
PUBLIC = {"code": "queue_full", "message": "The service is at capacity. Retry later.", "retry_after": 10}


class Tenant:
    """A key of the application's own: hashable, not JSON."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tenant) and other.name == self.name

    def __str__(self) -> str:
        return f"tenant:{self.name}"


KEYS: list[tuple[Hashable, object]] = [
    (b"A\xe9", "A\xe9"),  # a header's bytes: latin-1, as HTTP/1.1 carries them
    (ID, str(ID)),
    (7, 7),
    (("org", 3), "('org', 3)"),
    (Tenant("x"), "tenant:x"),
    (None, None),
]


@pytest.mark.parametrize("style", REFUSAL_STYLES)
@pytest.mark.parametrize(("key", "shown"), KEYS, ids=[type(k).__name__ for k, _ in KEYS])
def test_every_style_renders_any_hashable_key(style: str, key: Hashable, shown: object) -> None:
    refusal = refusal_for(FULL, style, key=key)
    assert refusal.status == 503
    assert dict(refusal.headers)[b"retry-after"] == b"10"
    body = json.loads(refusal.body)
    if style == "session":
        assert body["sessionId"] == shown


def _sessions(scope: Scope) -> bytes:
    return bytes(dict(scope["headers"]).get(b"x-session", b""))


@pytest.mark.parametrize(
    "key", [_sessions, lambda scope: uuid.UUID(_sessions(scope).decode())], ids=["bytes", "uuid"]
)
async def test_a_session_refusal_keyed_by_bytes_or_a_uuid_is_a_503_with_retry_after(key: Any) -> None:
    sessions: KeyedGate[Hashable] = KeyedGate(max_running=1, max_waiting=0, name="session")
    middleware = GateMiddleware(StreamingApp(chunks=1, pause=30), gate=sessions, key=key, refusal="session")
    scope = http_scope(headers=[("x-session", str(ID))])
    held = serve(middleware, Client(), scope)
    await turns(3)
    refused = Client()
    await serve(middleware, refused, http_scope(headers=[("x-session", str(ID))]))
    assert refused.status == 503
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["sessionId"] == str(ID)
    await held


def test_a_body_function_that_raises_falls_back_to_the_public_body_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(error: Any, key: Hashable | None) -> dict[str, Any]:
        raise KeyError("tenant")

    with caplog.at_level(logging.ERROR, logger="boundedgate.asgi"):
        refusal = refusal_for(FULL, broken, key="A")
    assert refusal.status == 503
    assert dict(refusal.headers)[b"retry-after"] == b"10"
    assert json.loads(refusal.body) == PUBLIC
    (record,) = caplog.records
    assert "the refusal body function" in record.getMessage()
    assert record.exc_info is not None
    assert record.exc_info[0] is KeyError


def test_a_body_function_returning_what_json_cannot_encode_falls_back_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="boundedgate.asgi"):
        refusal = refusal_for(FULL, lambda error, key: {"when": object()}, key="A")
    assert json.loads(refusal.body) == PUBLIC
    assert len(caplog.records) == 1


async def test_the_middleware_answers_a_broken_body_function_with_the_public_refusal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = BoundedGate(max_running=1, max_waiting=0)
    held = gate.try_admit()
    refused = Client()
    try:
        with caplog.at_level(logging.ERROR, logger="boundedgate.asgi"):
            await serve(
                GateMiddleware(StreamingApp(), gate=gate, refusal=lambda error, key: {"x": 1 / 0}), refused
            )
    finally:
        held.release()
    assert refused.status == 503
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["code"] == "queue_full"
    assert any(r.exc_info and r.exc_info[0] is ZeroDivisionError for r in caplog.records)


# -- a missing key ----------------------------------------------------------------------------


def _tenant(scope: Scope) -> str | None:
    value = dict(scope["headers"]).get(b"x-tenant")
    return None if value is None else value.decode()


async def test_requests_without_a_key_share_a_key_of_their_own_not_a_bypass() -> None:
    tenants: KeyedGate[str | None] = KeyedGate(max_running=1, max_waiting=0, name="tenant")
    app = StreamingApp(chunks=1, pause=30)
    middleware = GateMiddleware(app, gate=tenants, key=_tenant, refusal="session")
    anonymous = serve(middleware, Client())  # no x-tenant header
    await turns(3)
    assert tenants.running == 1
    refused = Client()
    await serve(middleware, refused)  # another without one: the same (None) key, whose slot is taken
    assert refused.status == 503
    assert refused.json()["sessionId"] is None
    named = serve(middleware, Client(), http_scope(headers=[("x-tenant", "a")]))
    await turns(3)
    assert tenants.running == 2  # a named tenant has its own
    await anonymous
    await named
    assert app.entered == 2


async def test_ungated_is_the_explicit_way_past_a_keyed_gate() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, name="tenant")
    app = StreamingApp(chunks=1, pause=30)

    def tenant_or_internal(scope: Scope) -> Any:
        return _tenant(scope) or asgi.UNGATED

    middleware = GateMiddleware(app, gate=tenants, key=tenant_or_internal)
    first, second = Client(), Client()
    tasks = [serve(middleware, first), serve(middleware, second)]
    await turns(3)
    assert app.entered == 2
    assert tenants.stats().total.arrived == 0  # neither was counted anywhere
    for task in tasks:
        await task
    assert first.complete
    assert second.complete
    assert repr(asgi.UNGATED) == "boundedgate.asgi.UNGATED"
