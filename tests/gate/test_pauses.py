"""Pauses: every one ends, a provider's is capped, and a refusal during one says when it ends.

A pause that never ends (``inf``, NaN) would leave the gate starting nothing while its statistics
say it is not paused, so it is refused with an error that names the argument; a provider's reset
(``signal("rate_limited")``, ``follow_provider``) is obeyed up to ``max_pause``; a request refused
while the gate is paused is told to come back no sooner than the pause's end.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import httpx
import httpx2
import pytest

from boundedgate import BoundedGate, KeyedGate, QueueExpired, QueueFull, RateLimit, RateLimited
from boundedgate._core import GateState, Ticket
from boundedgate._core._adaptive import MAX_PAUSE
from boundedgate.asgi import refusal_for
from boundedgate.httpx import GatedTransport, ProviderSignal, follow_provider, parse_signal
from boundedgate.httpx._refusal import refusal_headers

NOT_A_PAUSE = [math.inf, -math.inf, math.nan, -1, -0.5]


async def _starts_now(gate: BoundedGate) -> bool:
    permit = gate.try_admit()
    permit.release()
    return True


@pytest.mark.parametrize("seconds", NOT_A_PAUSE)
async def test_a_pause_that_never_ends_or_is_negative_is_refused_and_changes_nothing(seconds: float) -> None:
    gate = BoundedGate(max_running=2, max_waiting=2)
    with pytest.raises(ValueError, match=r"^seconds must be a finite number >= 0, got .*: give the seconds"):
        gate.pause(seconds)
    with pytest.raises(
        ValueError, match=r"^retry_after must be a finite number >= 0, got .*: give the seconds"
    ):
        gate.signal("rate_limited", retry_after=seconds)
    stats = gate.stats()
    assert (stats.pauses, stats.paused_until) == (0, None)
    assert await _starts_now(gate)


@pytest.mark.parametrize("seconds", ["12", True, None, [1]])
async def test_a_pause_that_is_not_a_number_is_refused(seconds: object) -> None:
    gate = BoundedGate(max_running=2, max_waiting=2)
    with pytest.raises(TypeError, match=r"^seconds must be a number of seconds, got "):
        gate.pause(seconds)  # type: ignore[arg-type]
    if seconds is not None:  # None: no reset said, no pause
        with pytest.raises(TypeError, match=r"^retry_after must be a number of seconds, got "):
            gate.signal("rate_limited", retry_after=seconds)  # type: ignore[arg-type]
    assert gate.stats().pauses == 0


@pytest.mark.parametrize("seconds", NOT_A_PAUSE)
async def test_a_keyed_gate_refuses_it_before_it_makes_the_key_a_gate(seconds: float) -> None:
    keyed: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=2)
    with pytest.raises(ValueError, match=r"^retry_after must be a finite number >= 0"):
        keyed.signal("a", "rate_limited", retry_after=seconds)
    assert keyed.get("a") is None
    permit = keyed.try_admit("a")
    gate = keyed.get("a")
    assert gate is not None
    with pytest.raises(ValueError, match=r"^seconds must be a finite number >= 0"):
        gate.pause(seconds)
    assert (gate.stats().pauses, gate.stats().paused_until) == (0, None)
    permit.release()


def test_the_core_refuses_a_pause_without_an_end() -> None:
    state = GateState(2, 2)
    for until in (math.inf, math.nan):
        with pytest.raises(ValueError, match=r"^a pause must end: until must be finite, got "):
            state.pause(until, 0.0)
    assert (state.max_running, state.paused_until, state.pauses) == (2, math.inf, 0)
    ticket = Ticket()
    state.arrive(ticket, 1.0)
    assert ticket.status.name == "RUNNING"


async def test_a_providers_reset_is_obeyed_up_to_max_pause() -> None:
    gate = BoundedGate(max_running=2, max_waiting=2)
    assert MAX_PAUSE == 300.0
    gate.signal("rate_limited", retry_after=1e15)  # Retry-After: 1e15
    assert gate.stats().paused_until == MAX_PAUSE
    gate.signal("rate_limited", retry_after=1e15, max_pause=600)
    assert gate.stats().paused_until == 600.0
    gate.signal("rate_limited", retry_after=10, max_pause=0)  # a shorter pause changes nothing
    assert gate.stats().paused_until == 600.0
    for bad in (math.inf, math.nan, -1):
        with pytest.raises(ValueError, match=r"^max_pause must be a finite number >= 0"):
            gate.signal("rate_limited", retry_after=1, max_pause=bad)
    async with gate.admit(timeout=1000):  # it ends
        assert asyncio.get_running_loop().time() == 600.0
    keyed: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=2)
    keyed.signal("a", "rate_limited", retry_after=1e15)
    key_gate = keyed.get("a")
    assert key_gate is not None
    assert key_gate.stats().paused_until == 600.0 + MAX_PAUSE


def _429(reset: str, retry_after: str | None = None) -> ProviderSignal:
    headers = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": reset}
    if retry_after is not None:
        headers["retry-after"] = retry_after
    signal = parse_signal(429, headers, "api.example", 0.0, key="a")
    assert signal is not None
    return signal


@pytest.mark.parametrize(
    ("reset", "retry_after"),
    [("9" * 400 + "s", None), ("1s", "1e15"), ("9" * 400 + "ms", None), ("2", "9" * 400)],
)
async def test_follow_provider_caps_a_reset_that_would_brick_the_gate(
    reset: str, retry_after: str | None
) -> None:
    gate = BoundedGate(max_running=2, max_waiting=2)
    signal = _429(reset, retry_after)
    follow_provider(gate)(signal)
    paused = gate.stats().paused_until
    assert paused is not None
    assert 0 < paused <= MAX_PAUSE
    assert gate._state.max_running == 0
    follow_provider(gate, max_pause=1000)(signal)
    assert 0 < (gate.stats().paused_until or 0) <= 1000
    keyed: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=2)
    follow_provider(keyed, max_pause=30)(signal)
    key_gate = keyed.get("a")
    assert key_gate is not None
    assert 0 < (key_gate.stats().paused_until or 0) <= 30
    async with gate.admit(timeout=2000):  # the gate starts again once the capped pause is over
        pass
    with pytest.raises(ValueError, match=r"^max_pause must be a finite number >= 0"):
        follow_provider(gate, max_pause=math.inf)


# -- refusals during a pause -----------------------------------------------------------------------


async def _hold(gate: BoundedGate, seconds: float) -> None:
    async with gate.admit(timeout=1000):
        await asyncio.sleep(seconds)


async def test_a_refusal_during_a_pause_is_told_to_come_back_after_it() -> None:
    gate = BoundedGate(max_running=1, max_waiting=1)
    await _hold(gate, 0.5)  # a pace: 0.5 s a run
    gate.pause(60)
    queued = asyncio.create_task(_hold(gate, 0.5))
    await asyncio.sleep(0)
    with pytest.raises(QueueFull) as full:
        gate.try_admit()
    # No sooner than the pause's end, then the queue ahead at the pace: what predicted_start says.
    assert full.value.retry_after == pytest.approx(60 + 2 * 0.5)
    assert full.value.headers() == {"Retry-After": "61"}
    assert full.value.to_dict()["retry_after"] == pytest.approx(61)
    await asyncio.sleep(10)
    with pytest.raises(QueueFull) as later:
        async with gate.admit():
            pass
    assert later.value.retry_after == pytest.approx(50 + 2 * 0.5)
    await queued


async def test_an_expiry_and_a_rate_limit_refusal_during_a_pause_count_it_too() -> None:
    gate = BoundedGate(max_running=1, max_waiting=5, rate_limits=[RateLimit.per_second(1, burst=1)])
    gate.try_admit().release()  # its one token taken: the next is due in 1 s
    gate.pause(30)
    with pytest.raises(RateLimited) as limited:  # its token cannot come before its deadline
        async with gate.admit(timeout=0.5):
            pass
    assert limited.value.retry_after == pytest.approx(30)  # the token in 1 s, but the pause in 30
    with pytest.raises(QueueExpired) as expired:
        async with gate.admit(timeout=5):
            pass
    assert expired.value.retry_after == pytest.approx(25)  # the pause has 25 s to go when it expires


async def test_a_gate_without_a_pace_still_says_the_pause() -> None:
    gate = BoundedGate(max_running=1, max_waiting=0)
    gate.pause(42)
    with pytest.raises(QueueFull) as full:
        gate.try_admit()
    assert full.value.retry_after == pytest.approx(42)
    assert full.value.headers() == {"Retry-After": "42"}
    await asyncio.sleep(42)
    blocker = gate.try_admit()
    with pytest.raises(QueueFull) as after:  # not paused, no pace: no estimate, as before
        gate.try_admit()
    blocker.release()
    assert after.value.retry_after is None


async def test_the_http_edges_send_the_pause_as_retry_after() -> None:
    gate = BoundedGate(max_running=1, max_waiting=0)
    gate.pause(90)
    with pytest.raises(QueueFull) as full:
        gate.try_admit()
    refusal = refusal_for(full.value, retry_after_fallback=1)  # the ASGI middleware's answer
    assert (b"retry-after", b"90") in refusal.headers
    headers = refusal_headers(full.value, sdk_retry=True, default_retry_after=1.0)  # GatedTransport's
    assert (headers["retry-after"], headers["retry-after-ms"]) == ("90", "90000")


@pytest.mark.parametrize("flavour", [httpx2, httpx], ids=lambda module: module.__name__)
async def test_a_429_through_the_transport_pauses_the_gate_for_at_most_max_pause(flavour: Any) -> None:
    gate = BoundedGate(max_running=2, max_waiting=2)
    headers = {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "9" * 400 + "s"}
    inner = flavour.MockTransport(lambda request: flavour.Response(429, headers=headers))
    transport = GatedTransport(gate, inner, on_provider_signal=follow_provider(gate, max_pause=120))
    async with flavour.AsyncClient(transport=transport) as client:
        response = await client.get("https://api.example/v1/chat")
        assert response.status_code == 429
        assert gate.stats().paused_until == 120.0  # the reset, capped
        refused = await client.get("https://api.example/v1/chat", extensions={"timeout": {"pool": 0}})
    assert refused.status_code == 503  # the gate's own refusal, during the pause
    assert refused.headers["retry-after"] == "120"
