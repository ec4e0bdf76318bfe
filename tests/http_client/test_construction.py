"""GatedTransport and gate_call refuse bad settings when they are made, not at the first request."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import httpx2
import pytest
import redis.asyncio

from boundedgate import BoundedGate, KeyedGate
from boundedgate.httpx import GatedTransport, current_call, gate_call
from boundedgate.redis import RedisGate


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


# -- a gate the transport cannot use: the error says what to do instead ----------------------------


async def test_something_that_cannot_admit_says_what_can() -> None:
    with pytest.raises(TypeError, match=r"a BoundedGate, a KeyedGate \(with key=\), a RedisGate") as caught:
        GatedTransport(42)
    assert "docs/http.md" in str(caught.value)
    gate = _gate()
    permit = gate.try_admit()
    with pytest.raises(TypeError, match=r"a permit, not a gate: give GatedTransport the gate itself"):
        GatedTransport(permit)
    permit.release()


def test_a_priority_beyond_the_gates_classes_is_refused_when_made() -> None:
    with pytest.raises(ValueError, match=r"BoundedGate\(\.\.\., priorities=2\)"):
        GatedTransport(_gate(), priority=1)
    with pytest.raises(ValueError, match=r"priorities=3"):
        GatedTransport(BoundedGate(max_running=1, max_waiting=0, priorities=2), retry_priority=2)
    with pytest.raises(ValueError, match=r"priorities=2"):
        GatedTransport(KeyedGate(max_running=1, max_waiting=0), key=str, priority=1)
    GatedTransport(BoundedGate(max_running=1, max_waiting=0, priorities=2), priority=1, retry_priority=0)


async def test_a_cluster_gate_says_which_settings_it_has_no_use_for() -> None:
    redis_gate = RedisGate(redis.asyncio.Redis(port=1), max_running=1, max_waiting=0, name="cluster")
    with pytest.raises(TypeError, match=r"a RedisGate has no priority classes") as caught:
        GatedTransport(redis_gate, retry_priority=0)
    assert "BoundedGate(..., priorities=2)" in str(caught.value)
    await redis_gate.aclose()


def _answered(request: Any) -> Any:
    return httpx2.Response(200, json={})


async def test_a_gate_function_that_takes_no_deadline_is_refused_when_made() -> None:
    gate = _gate()
    with pytest.raises(TypeError, match=r"takes no deadline=") as caught:
        GatedTransport(lambda request: gate.admit())
    assert "lambda request, **options: gate.admit(**options)" in str(caught.value)
    with pytest.raises(TypeError, match=r"takes no priority="):
        GatedTransport(lambda request, deadline=None: gate.admit(deadline=deadline), priority=1)
    GatedTransport(lambda request, deadline=None: gate.admit(deadline=deadline))


async def test_a_gate_function_that_passes_on_what_its_gate_cannot_take() -> None:
    redis_gate = RedisGate(redis.asyncio.Redis(port=1), max_running=1, max_waiting=0, name="cluster")
    transport = GatedTransport(lambda request, **kw: redis_gate.admit(**kw), httpx2.MockTransport(_answered))
    async with httpx2.AsyncClient(transport=transport) as client, gate_call(priority=1):
        with pytest.raises(TypeError) as caught:
            await client.get("http://provider/")
    message = str(caught.value)
    assert "RedisGate.admit() takes no priority=" in message  # the gate's own reason and way out
    assert "priority=1" in message
    way_out = "lambda request, deadline=None, cost=None, **kw: gate.admit(deadline=deadline, cost=cost)"
    assert way_out in message
    assert isinstance(caught.value.__cause__, TypeError)
    await redis_gate.aclose()


@pytest.mark.parametrize("returned", ["None", "the gate", "a coroutine"])
async def test_a_gate_function_that_returns_no_permit(returned: str) -> None:
    gate = _gate()

    async def opened(**kw: Any) -> Any:
        return gate.admit(**kw)

    answers = {
        "None": lambda request, **kw: None,
        "the gate": lambda request, **kw: gate,
        "a coroutine": lambda request, **kw: opened(**kw),
    }
    transport = GatedTransport(answers[returned], httpx2.MockTransport(_answered))
    async with httpx2.AsyncClient(transport=transport) as client:
        with pytest.raises(TypeError, match=r"must return a permit") as caught:
            await client.get("http://provider/")
    assert "gate.admit(**kw)" in str(caught.value)
    assert (gate.running, gate.stats().admitted) == (0, 0)


@pytest.mark.parametrize("flavour", ["httpx", "httpx2"])
def test_a_synchronous_client_is_told_to_use_an_async_one(flavour: str) -> None:
    module = httpx2 if flavour == "httpx2" else __import__("httpx")
    client = module.Client(transport=GatedTransport(_gate()))
    with pytest.raises(TypeError, match=r"async transport: give it to an httpx.AsyncClient"):
        client.get("http://provider/")
    with pytest.raises(TypeError, match=r"AsyncOpenAI"), module.Client(transport=GatedTransport(_gate())):
        pass
