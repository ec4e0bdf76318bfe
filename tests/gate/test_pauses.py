"""Pauses: every one ends, a provider's is capped, and a refusal during one says when it ends.

A pause that never ends (``inf``, NaN) would leave the gate starting nothing while its statistics
say it is not paused, so it is refused with an error that names the argument; a provider's reset
(``signal("rate_limited")``, ``follow_provider``) is obeyed up to ``max_pause``; a request refused
while the gate is paused is told to come back no sooner than the pause's end.
"""

from __future__ import annotations

import asyncio
import math

import pytest

from boundedgate import BoundedGate, KeyedGate
from boundedgate._core import GateState, Ticket
from boundedgate._core._adaptive import MAX_PAUSE
from boundedgate.httpx import ProviderSignal, follow_provider, parse_signal

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
