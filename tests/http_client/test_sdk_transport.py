"""The real openai and anthropic SDKs through a GatedTransport, over loopback to the fake provider.

Nothing of the SDKs or of httpx is mocked: they talk HTTP/1.1 to ``tests/http_client/provider.py`` on
127.0.0.1, on the test's own event loop, in virtual time (looptime): the provider's delays and
the SDKs' back-off sleeps are the loop's time.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import warnings
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from boundedgate import (
    Adaptive,
    BoundedGate,
    KeyedGate,
    QueueFull,
    RateLimit,
    admit_all,
)
from boundedgate._downstream import downstream_refusals
from boundedgate.httpx import Exchange, GatedTransport, ProviderSignal, follow_provider, gate_call, refusal
from tests.helpers import checked_gate
from tests.http_client.clients import COMBOS, SDKS, Sdk, counted
from tests.http_client.provider import LimitsBehaviour, LimitsProvider, usage_of
from tests.streams.sources import settle


@pytest.fixture(params=COMBOS)
def combo(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=SDKS)
def sdk_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def _drain(sdk: Sdk, stream: Any) -> str:
    return "".join([sdk.text(item) async for item in stream])


# -- the slot follows the body ---------------------------------------------------------------------


async def test_running_equals_the_providers_open_connections(combo: str, provider: LimitsProvider) -> None:
    gate = checked_gate(3, 20, name="llm")
    sdk = Sdk(combo, provider, GatedTransport(gate))
    samples: list[tuple[int, int]] = []

    async def sample() -> None:
        await asyncio.sleep(0.25)  # between the provider's chunks, which come on whole seconds
        while True:
            samples.append((gate.running, provider.active))
            await asyncio.sleep(0.5)

    async def call(i: int) -> str:
        if i % 3 == 2:
            return str((await sdk.plain(f"chunks={i % 4 + 1}")).id)
        return await _drain(sdk, await sdk.stream(f"chunks={i % 4 + 1},delay=1"))

    sampler = asyncio.create_task(sample())
    results = await asyncio.gather(*(call(i) for i in range(12)))
    sampler.cancel()
    assert len(results) == 12
    assert len(samples) >= 10
    assert all(running == active for running, active in samples), samples
    assert max(running for running, _ in samples) == 3
    assert provider.peak_active == 3
    counted(gate, completed=12)
    await sdk.aclose()


async def test_a_refused_call_never_reaches_the_provider(combo: str, provider: LimitsProvider) -> None:
    gate = checked_gate(1, 0, name="llm")
    sdk = Sdk(combo, provider, GatedTransport(gate))
    held = await sdk.stream("hold_after=1")
    started = asyncio.get_running_loop().time()
    with pytest.raises(sdk.unavailable) as caught:
        await sdk.plain(retries=2)  # the SDK would retry a 503: x-should-retry: false stops it
    assert asyncio.get_running_loop().time() == started  # no back-off
    error: Any = caught.value
    assert error.status_code == 503
    assert sdk.code(error) == "queue_full"
    assert error.response.json()["boundedgate"]["code"] == "queue_full"
    assert error.response.headers["x-should-retry"] == "false"
    gate_error = refusal(error.response)
    assert isinstance(gate_error, QueueFull)
    assert error.response.headers["retry-after"] == str(max(1, math.ceil(gate_error.retry_after or 1)))
    assert len(provider.served) == 1  # only the held stream
    provider.release()
    await _drain(sdk, held)
    counted(gate, completed=1, rejected=1)
    await sdk.aclose()


async def test_a_rate_limited_refusal_is_the_sdks_429(sdk_name: str, provider: LimitsProvider) -> None:
    gate = checked_gate(5, 5, name="llm", rate_limits=[RateLimit(rate=0.001, burst=1)])
    sdk = Sdk(sdk_name, provider, GatedTransport(gate))
    await sdk.plain()
    with pytest.raises(sdk.rate_limited) as caught:
        await sdk.plain(retries=2)
    assert sdk.code(caught.value) == "rate_limited"
    assert int(caught.value.response.headers["retry-after"]) >= 999  # type: ignore[attr-defined]
    assert len(provider.served) == 1
    await sdk.aclose()


async def test_refuse_raise_what_each_sdk_does_with_the_gates_error(
    sdk_name: str, provider: LimitsProvider
) -> None:
    gate = checked_gate(1, 0, name="llm")
    sdk = Sdk(sdk_name, provider, GatedTransport(gate, refuse="raise"))
    held = await sdk.stream("hold_after=1")
    if sdk.name == "openai":  # openai passes it through, unchanged, and does not retry
        with pytest.raises(QueueFull):
            await sdk.plain(retries=2)
        assert gate.stats().rejected == 1
    else:  # anthropic wraps it as a connection error, and retries it max_retries times
        with pytest.raises(anthropic.APIConnectionError) as caught:
            await sdk.plain(retries=2)
        assert isinstance(caught.value.__cause__, QueueFull)
        assert gate.stats().rejected == 3
    assert len(provider.served) == 1
    provider.release()
    await _drain(sdk, held)
    await sdk.aclose()


async def test_a_429_then_success_is_admitted_twice_and_holds_nothing_while_backing_off(
    sdk_name: str, provider: LimitsProvider
) -> None:
    gate = checked_gate(1, 5, name=f"llm-{sdk_name}-backoff", priorities=2)
    refused_before = downstream_refusals().get((gate.name, 429), 0)
    exchanges: list[Exchange] = []
    sdk = Sdk(
        sdk_name, provider, GatedTransport(gate, priority=1, retry_priority=0, on_exchange=exchanges.append)
    )
    loop = asyncio.get_running_loop()

    async def backing_off() -> tuple[int, str]:
        await asyncio.sleep(1)  # inside the SDK's 2 s back-off after the 429
        running = gate.running
        answer = await sdk.plain()  # admitted at once: the slot is free
        return running, str(answer.id)

    async def retried() -> Any:
        async with gate_call(timeout=30) as call:
            answer = await sdk.plain("rate_limited=1,retry_after_ms=2000", retries=2)
        return call, answer

    started = loop.time()
    (call, _), (running, _) = await asyncio.gather(retried(), backing_off())
    assert running == 0
    assert loop.time() - started == pytest.approx(2, abs=0.1)
    assert call.attempts == 2
    assert [(e.attempt, e.priority, e.status) for e in exchanges] == [(0, 1, 429), (0, 1, 200), (1, 0, 200)]
    assert [request.get("x-stainless-retry-count") for request in provider.requests] == ["0", "0", "1"]
    assert downstream_refusals()[gate.name, 429] == refused_before + 1  # for the board and its alert
    counted(gate, completed=2, failed=1)  # the 429 failed, as the SDK's call inside admit() would
    await sdk.aclose()


async def test_one_deadline_for_every_attempt_of_a_call(sdk_name: str, provider: LimitsProvider) -> None:
    gate = checked_gate(1, 5, name="llm")
    sdk = Sdk(sdk_name, provider, GatedTransport(gate))
    with pytest.raises(sdk.unavailable) as caught:
        async with gate_call(timeout=1.5):  # the 429's 2 s back-off outlives it
            await sdk.plain("rate_limited=1,retry_after_ms=2000", retries=2)
    assert sdk.code(caught.value) == "queue_expired"
    assert len(provider.served) == 1  # the retry never reached the provider
    counted(gate, failed=1)  # the 429; arriving past its deadline, the retry is refused uncounted
    await sdk.aclose()


async def test_the_pool_timeout_is_the_admission_budget(provider: LimitsProvider) -> None:
    gate = checked_gate(1, 5, name="llm")
    sdk = Sdk("openai-httpx2", provider, GatedTransport(gate), timeout=httpx2.Timeout(600, pool=2))
    held = await sdk.stream("hold_after=1")
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(openai.InternalServerError) as caught:
        await sdk.plain()
    assert loop.time() - started == pytest.approx(2)
    assert caught.value.code == "queue_expired"
    provider.release()
    await _drain(sdk, held)
    counted(gate, completed=1, expired=1)
    await sdk.aclose()


async def test_cancellation_mid_body_releases_at_once(sdk_name: str, provider: LimitsProvider) -> None:
    gate = checked_gate(1, 0, name="llm")
    sdk = Sdk(sdk_name, provider, GatedTransport(gate))
    reading = asyncio.Event()

    async def consume() -> None:
        async for item in await sdk.stream("hold_after=1"):
            if sdk.text(item):
                reading.set()

    task = asyncio.create_task(consume())
    await reading.wait()
    assert gate.running == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gate.running == 0  # in the step that ended the task, before anything else ran
    counted(gate, failed=1)
    await asyncio.wait_for(provider.wait_all_ended(), 5)
    assert [served.ended for served in provider.served] == ["client_gone"]
    await sdk.aclose()


async def test_break_without_close_holds_the_slot_until_the_sdk_closes(
    sdk_name: str, provider: LimitsProvider
) -> None:
    gate = checked_gate(1, 0, name="llm")
    sdk = Sdk(sdk_name, provider, GatedTransport(gate))
    stream = await sdk.stream("hold_after=1")
    async for item in stream:
        if sdk.text(item):
            break
    await settle()
    assert gate.running == 1  # the SDK leaves its HTTP response open after a break
    await stream.close()
    assert gate.running == 0
    counted(gate, completed=1)
    await sdk.aclose()


async def test_an_unclosed_response_collected_is_leaked(provider: LimitsProvider) -> None:
    gate = checked_gate(1, 0, name="llm")
    sdk = Sdk("openai-httpx2", provider, GatedTransport(gate))
    stream = await sdk.stream("hold_after=1")  # never iterated: the SDK never closes it
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del stream
        gc.collect()
        await settle()
    assert any("unclosed response body holding a slot of gate 'llm'" in str(w.message) for w in caught)
    counted(gate, leaked=1)
    await sdk.aclose()


# -- what the provider says --------------------------------------------------------------------------


async def test_the_buckets_after_a_stream_equal_the_reported_usage(
    combo: str, provider: LimitsProvider
) -> None:
    tpm = RateLimit(rate=1e-9, burst=10_000, unit="tokens")
    gate = checked_gate(2, 2, name="llm", rate_limits=[tpm])
    exchanges: list[Exchange] = []
    sdk = Sdk(combo, provider, GatedTransport(gate, cost=1_000, on_exchange=exchanges.append))
    await _drain(sdk, await sdk.stream("chunks=4"))
    await sdk.plain("chunks=2")
    reported = usage_of(LimitsBehaviour(chunks=4)) + usage_of(LimitsBehaviour(chunks=2))
    assert gate.stats().tokens[0] == pytest.approx(10_000 - reported)
    assert [e.settled for e in exchanges] == [
        usage_of(LimitsBehaviour(chunks=4)),
        usage_of(LimitsBehaviour(chunks=2)),
    ]
    await sdk.aclose()


async def test_times_to_first_and_last_byte(sdk_name: str, provider: LimitsProvider) -> None:
    gate = checked_gate(1, 0, name="llm")
    exchanges: list[Exchange] = []
    sdk = Sdk(sdk_name, provider, GatedTransport(gate, on_exchange=exchanges.append))
    stream = await sdk.stream("chunks=3,delay=1")
    assert stream.response.extensions["boundedgate"] is not None
    await _drain(sdk, stream)
    (exchange,) = exchanges
    assert exchange.queued == 0
    assert exchange.time_to_first_byte == pytest.approx(0, abs=0.01)  # the stream's opening events
    assert exchange.time_to_last_byte == pytest.approx(4, abs=0.01)  # 3 deltas and the finish, 1 s each
    assert exchange.outcome == "completed"
    await sdk.aclose()


async def test_provider_signals_reach_the_hook(sdk_name: str, provider: LimitsProvider) -> None:
    gate = checked_gate(1, 0, name="llm")
    signals: list[ProviderSignal] = []
    sdk = Sdk(sdk_name, provider, GatedTransport(gate, on_provider_signal=signals.append))
    await sdk.plain()
    with pytest.raises(sdk.rate_limited):
        await sdk.plain("rate_limited=1,retry_after_ms=1500")
    with pytest.raises(openai.APIStatusError if sdk.name == "openai" else anthropic.APIStatusError):
        await sdk.plain("overloaded=1")
    assert [(s.kind, s.status, s.retry_after) for s in signals] == [
        ("quota", 200, None),
        ("rate_limited", 429, 1.5),
        (
            "overloaded" if sdk.name == "anthropic" else "unavailable",
            529 if sdk.name == "anthropic" else 503,
            1,
        ),
    ]
    requests = signals[0].quota("requests")
    tokens = signals[0].quota("tokens")
    assert requests is not None
    assert tokens is not None
    assert (requests.limit, requests.remaining, tokens.remaining) == (60, 59, 79_000)
    if sdk.name == "openai":
        assert (requests.reset, tokens.reset) == (1.5, 360)
    else:
        assert requests.reset == 0  # an RFC 3339 time in the past
    counted(gate, completed=1, failed=2)  # the 429 and the 529 (503) failed
    await sdk.aclose()


# -- gates of every kind -----------------------------------------------------------------------------


async def test_a_keyed_gate_keyed_by_the_model_in_the_body(provider: LimitsProvider) -> None:
    models: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, name="model")

    def model(request: Any) -> str:
        return str(json.loads(request.content)["model"])

    sdk = Sdk("openai-httpx2", provider, GatedTransport(models, key=model))
    held = await sdk.stream("hold_after=1")  # model "m"
    await sdk.plain(model="other")  # another key's gate: admitted
    with pytest.raises(openai.InternalServerError) as caught:
        await sdk.plain()  # "m" is busy
    assert refusal(caught.value.response).gate == "model/m"  # type: ignore[union-attr]
    provider.release()
    await _drain(sdk, held)
    total = models.stats().total
    assert (total.completed, total.rejected, total.running) == (2, 1, 0)
    await sdk.aclose()


async def test_an_admit_all_chain(provider: LimitsProvider) -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, name="tenant")
    shared = checked_gate(2, 0, name="provider")

    def admit(request: Any, **kwargs: Any) -> Any:
        return admit_all((tenants, request.headers.get("x-tenant", "")), shared, **kwargs)

    sdk = Sdk("openai-httpx2", provider, GatedTransport(admit))
    client = sdk.client
    held = await client.chat.completions.create(
        model="m", messages=[], stream=True, extra_headers={"x-tenant": "a", "x-fake": "hold_after=1"}
    )
    tenant_a = tenants.get("a")
    assert tenant_a is not None
    assert (tenant_a.running, shared.running) == (1, 1)
    with pytest.raises(openai.InternalServerError) as caught:
        await client.chat.completions.create(model="m", messages=[], extra_headers={"x-tenant": "a"})
    assert caught.value.code == "queue_full"
    await client.chat.completions.create(model="m", messages=[], extra_headers={"x-tenant": "b"})
    provider.release()
    async for _ in held:
        pass
    assert (tenants.running, shared.running) == (0, 0)
    counted(shared, completed=2)  # the refusal at the tenant step never reached the shared gate
    await sdk.aclose()


async def test_every_call_through_one_client_cannot_exceed_the_limit(provider: LimitsProvider) -> None:
    """Seed 004's bypass: workers whose sub-calls (tools, summaries) all go through one client."""
    gate = BoundedGate(max_running=3, max_waiting=None, name="llm")
    sdk = Sdk("openai-httpx2", provider, GatedTransport(gate))

    async def worker(i: int) -> None:
        await _drain(sdk, await sdk.stream(f"chunks=2,delay={i % 3 + 1}"))
        await asyncio.gather(sdk.plain(), _drain(sdk, await sdk.stream("delay=0.5")))  # sub-calls

    await asyncio.gather(*(worker(i) for i in range(40)))
    assert len(provider.served) == 120
    assert provider.peak_active == 3
    counted(gate, completed=120)
    await sdk.aclose()


async def test_sdk_retry_lets_the_sdk_retry_a_refusal_after_its_retry_after(
    sdk_name: str, provider: LimitsProvider
) -> None:
    gate = checked_gate(1, 0, name="llm")
    exchanges: list[Exchange] = []
    transport = GatedTransport(gate, sdk_retry=True, default_retry_after=2, on_exchange=exchanges.append)
    sdk = Sdk(sdk_name, provider, transport)
    loop = asyncio.get_running_loop()
    held = asyncio.create_task(_drain(sdk, await sdk.stream("chunks=1,delay=0.75")))  # ends at 1.5 s
    started = loop.time()
    await sdk.plain(retries=2)  # refused now; the SDK sleeps the Retry-After, then it is admitted
    await held
    refused = exchanges[0]
    assert (refused.outcome, refused.status, refused.attempt) == ("queue_full", 503, 0)
    assert refused.refusal is not None
    waited = refused.refusal.retry_after or 2
    assert loop.time() - started == pytest.approx(waited, abs=0.05)
    assert [request.get("x-stainless-retry-count") for request in provider.requests] == ["0", "1"]
    counted(gate, completed=2, rejected=1)
    await sdk.aclose()


async def test_follow_provider_pauses_on_a_429_cuts_on_an_overload_and_lowers_buckets(
    sdk_name: str, provider: LimitsProvider
) -> None:
    requests_limit = RateLimit.per_minute(600, name="requests")
    gate = BoundedGate(
        max_running=10,
        max_waiting=10,
        name="llm",
        rate_limits=[requests_limit],
        adaptive=Adaptive(decrease=0.5),
    )
    sdk = Sdk(sdk_name, provider, GatedTransport(gate, on_provider_signal=follow_provider(gate)))
    await sdk.plain()
    loop = asyncio.get_running_loop()
    assert gate.stats().tokens[0] == pytest.approx(59, abs=0.5)  # the provider said 59 are left
    with pytest.raises(sdk.rate_limited):
        await sdk.plain("rate_limited=1,retry_after_ms=1500")
    paused = gate.stats().paused_until
    assert paused is not None
    assert paused == pytest.approx(loop.time() + 1.5, abs=0.05)
    assert gate.max_running == 10  # a rate limit leaves C alone
    began = loop.time()
    await sdk.plain()  # waits for the reset
    assert loop.time() - began == pytest.approx(1.5, abs=0.05)
    with pytest.raises(openai.APIStatusError if sdk.name == "openai" else anthropic.APIStatusError):
        await sdk.plain("overloaded=1")
    assert gate.max_running == 5  # an overload (529 or 503) cuts C once
    await sdk.aclose()


async def test_follow_provider_tells_a_keyed_gate_the_key_of_each_signal(
    sdk_name: str, provider: LimitsProvider
) -> None:
    # Keyed by the model in the body: a 529 (or 503) for model "a" cuts a's C alone; a 429 for "b"
    # pauses b alone; each response's remaining quotas lower that key's buckets alone.
    models: KeyedGate[str] = KeyedGate(
        max_running=8,
        max_waiting=10,
        name="model",
        rate_limits=[RateLimit.per_minute(600, name="requests")],
        adaptive=Adaptive(decrease=0.5),
    )

    def model(request: Any) -> str:
        return str(json.loads(request.content)["model"])

    transport = GatedTransport(models, key=model, on_provider_signal=follow_provider(models))
    sdk = Sdk(sdk_name, provider, transport)
    await sdk.plain(model="b")
    with pytest.raises(openai.APIStatusError if sdk.name == "openai" else anthropic.APIStatusError):
        await sdk.plain("overloaded=1", model="a")
    a, b = models.controller("a"), models.controller("b")
    assert a is not None
    assert b is not None
    assert (a.limit, a.cuts, b.limit, b.cuts) == (4, 1, 8, 0)
    assert models.stats().total.limit_changes == 1  # applied to a's gate while its request held it
    held = await sdk.stream("hold_after=1")  # model "m": its gate lives while the stream is held
    gate_m = models.get("m")
    assert gate_m is not None
    assert gate_m.stats().tokens[0] == pytest.approx(59, abs=0.5)  # the provider said 59 are left
    with pytest.raises(sdk.rate_limited):
        await sdk.plain("rate_limited=1,retry_after_ms=1500", model="b")
    loop = asyncio.get_running_loop()
    began = loop.time()
    await sdk.plain(model="a")  # not paused, and at its learned C
    assert loop.time() == began
    await sdk.plain(model="b")  # waits for b's reset
    assert loop.time() - began == pytest.approx(1.5, abs=0.05)
    assert gate_m.stats().paused_until is None
    provider.release()
    await _drain(sdk, held)
    await sdk.aclose()


async def test_a_429_that_says_overloaded_cuts_c_and_does_not_pause(
    combo: str, provider: LimitsProvider
) -> None:
    """Anthropic's overloaded_error, or OpenAI's "currently overloaded", sent with a 429 (gateways do).

    An overload is congestion: the adaptive gate cuts C once, and does not pause new starts as
    it would for a spent quota. The SDK still gets the provider's 429, body and all.
    """
    gate = BoundedGate(max_running=10, max_waiting=10, name="llm", adaptive=Adaptive(decrease=0.5))
    signals: list[ProviderSignal] = []
    hook = follow_provider(gate)

    def heard(signal: ProviderSignal) -> None:
        signals.append(signal)
        hook(signal)

    sdk = Sdk(combo, provider, GatedTransport(gate, on_provider_signal=heard))
    with pytest.raises(sdk.rate_limited) as caught:
        await sdk.plain("overloaded=1,overloaded_status=429")
    error: Any = caught.value
    assert error.status_code == 429
    if sdk.name == "anthropic":
        assert error.body["error"]["type"] == "overloaded_error"
    else:
        assert "currently overloaded" in error.message
    assert [(s.kind, s.status) for s in signals] == [("overloaded", 429)]
    assert gate.max_running == 5
    assert gate.stats().paused_until is None
    counted(gate, failed=1)
    await sdk.aclose()
