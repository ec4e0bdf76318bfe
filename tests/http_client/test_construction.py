"""GatedTransport and gate_call refuse bad settings when they are made, not at the first request."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import httpx2
import pytest

from boundedgate import BoundedGate, KeyedGate
from boundedgate.httpx import GatedTransport, current_call, gate_call


def _gate() -> BoundedGate:
    return BoundedGate(max_running=1, max_waiting=0)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"refuse": "silently"}, ValueError),
        ({"envelope": "xml"}, ValueError),
        ({"max_wait": -1}, ValueError),
        ({"max_wait": True}, TypeError),  # a bool is not a number of seconds
        ({"max_wait": 10**400}, ValueError),
        ({"default_retry_after": 10**400}, ValueError),  # beyond a float's range: named, no OverflowError
        ({"priority": -1}, ValueError),
        ({"retry_priority": 1.5}, TypeError),
        ({"cost": -1}, ValueError),
        ({"sdk_retry": 1}, TypeError),
        ({"default_retry_after": 0}, ValueError),
        ({"default_retry_after": math.inf}, ValueError),
        ({"key": str}, TypeError),  # not a keyed gate
    ],
)
def test_bad_settings(options: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        GatedTransport(_gate(), **options)


def test_a_keyed_gate_needs_a_key() -> None:
    with pytest.raises(TypeError, match="key="):
        GatedTransport(KeyedGate(max_running=1, max_waiting=0))


def test_a_gate_without_priorities_or_max_wait() -> None:
    class Plain:
        def admit(self, *, deadline: float | None = None) -> Any:  # a RedisGate's admit()
            raise AssertionError

    with pytest.raises(TypeError, match="priority"):
        GatedTransport(Plain(), retry_priority=0)
    with pytest.raises(TypeError, match="max_wait"):
        GatedTransport(Plain(), max_wait=3)
    GatedTransport(Plain())  # "pool" needs max_wait only where the gate takes it


def test_something_that_cannot_admit() -> None:
    with pytest.raises(TypeError, match="admit"):
        GatedTransport(42)
    with pytest.raises(TypeError, match="key="):
        GatedTransport(lambda request, **kw: None, key=str)


async def test_a_request_of_the_other_flavour_is_refused() -> None:
    import httpx

    transport = GatedTransport(_gate(), httpx2.AsyncHTTPTransport())
    with pytest.raises(TypeError, match="inner transport"):
        await transport.handle_async_request(httpx.Request("GET", "http://127.0.0.1:1/"))
    await transport.aclose()


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"timeout": 1, "deadline": 2}, ValueError),
        ({"timeout": -1}, ValueError),
        ({"timeout": math.nan}, ValueError),
        ({"timeout": 10**400}, ValueError),  # beyond a float's range: named, no OverflowError
        ({"deadline": -(10**400)}, ValueError),
        ({"cost": 10**400}, ValueError),
        ({"cost": math.inf}, ValueError),
        ({"priority": 1.5}, TypeError),
        ({"priority": True}, TypeError),
        ({"timeout": "1"}, TypeError),
    ],
)
def test_gate_call_bad_settings(options: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        gate_call(**options)


async def test_gate_call_nests_only_to_tighten_and_decorates() -> None:
    loop = asyncio.get_running_loop()
    now = loop.time()
    assert current_call() is None
    with gate_call(timeout=10) as outer:
        assert outer.deadline == now + 10
        async with gate_call(timeout=60, cost=5) as inner:
            assert current_call() is inner
            assert (inner.deadline, inner.cost) == (now + 10, 5)
        assert current_call() is outer
    assert current_call() is None

    @gate_call(timeout=3, priority=1)
    async def call() -> Any:
        return current_call()

    first, second = await call(), await call()
    assert first is not second
    assert (first.deadline, first.priority) == (now + 3, 1)


def test_every_public_name_lives_in_boundedgate_httpx_and_has_a_docstring() -> None:
    import inspect

    import boundedgate.httpx

    for name in boundedgate.httpx.__all__:
        obj = getattr(boundedgate.httpx, name)
        assert obj.__module__ == "boundedgate.httpx", name
        assert inspect.getdoc(obj), name
