"""One real run: real SDK streams through GatedTransport to a loopback provider whose capacity halves.

The provider answers 529 (Anthropic) or 503 (OpenAI) to a request beyond its concurrent capacity.
An adaptive gate fed by ``follow_provider`` learns the new capacity and stops sending it the
overload; a static gate keeps sending it. On looptime's virtual clock, with real sockets.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from boundedgate import Adaptive, BoundedGate
from boundedgate.httpx import GatedTransport, follow_provider
from tests.http_client.clients import SDKS, Sdk
from tests.http_client.provider import LimitsBehaviour, LimitsProvider

HALVED_AT = 15.0
UNTIL = 40.0


class _OverCapacity(dict[str, int]):
    """The provider's count of 529s sent per key, which says "one more is due" while it is over capacity."""

    def __init__(self, provider: CapacityProvider) -> None:
        super().__init__()
        self.provider = provider

    def get(self, key: str, default: Any = None) -> Any:
        # Asked twice for a request it refuses (to decide, then to count): decide once per request.
        provider = self.provider
        request = provider.served[-1]
        if request is provider.deciding:
            return -1
        if provider.in_flight() > provider.capacity():
            provider.deciding = request
            provider.refused.append(provider.now())
            return -1  # the base provider answers 529 / 503 when its "overloaded" count exceeds this
        return 0


class CapacityProvider(LimitsProvider):
    """The limits provider with a concurrent capacity: 6, then 3 from ``HALVED_AT``."""

    def __init__(self) -> None:
        super().__init__(LimitsBehaviour(chunks=4, delay=0.25))
        self.refused: list[float] = []
        self.deciding: object = None
        self._overloaded = _OverCapacity(self)
        self.began = asyncio.get_running_loop().time()

    def now(self) -> float:
        """Seconds since the provider was made."""
        return asyncio.get_running_loop().time() - self.began

    def capacity(self) -> int:
        return 6 if self.now() < HALVED_AT else 3

    def in_flight(self) -> int:
        """Requests being answered now (the one being decided included)."""
        return sum(served.ended is None for served in self.served)


async def _run(sdk_name: str, adaptive: bool) -> tuple[CapacityProvider, BoundedGate, int]:
    provider = CapacityProvider()
    await provider.start(None)
    gate = BoundedGate(
        max_running=6,
        max_waiting=20,
        name="llm",
        adaptive=Adaptive(window=1.0, min_samples=5) if adaptive else None,
    )
    hook = follow_provider(gate) if adaptive else None
    sdk = Sdk(sdk_name, provider, GatedTransport(gate, on_provider_signal=hook))
    answered = 0

    async def worker() -> None:
        nonlocal answered
        while provider.now() < UNTIL:
            try:
                stream = await sdk.stream()
                async for _ in stream:
                    pass
                answered += 1
            except Exception:  # the provider's 529/503, or the gate's own refusal as a 503
                await asyncio.sleep(0.2)

    try:
        await asyncio.gather(*(worker() for _ in range(12)))
    finally:
        await sdk.client.close()
        provider.release()
        await provider.stop()
    return provider, gate, answered


@pytest.mark.parametrize("sdk_name", SDKS)
async def test_the_adaptive_gate_follows_a_capacity_that_halves(sdk_name: str) -> None:
    static_provider, static_gate, static_answered = await _run(sdk_name, adaptive=False)
    adaptive_provider, adaptive_gate, adaptive_answered = await _run(sdk_name, adaptive=True)
    settled = HALVED_AT + 5
    static_overload = sum(t >= settled for t in static_provider.refused)
    adaptive_overload = sum(t >= settled for t in adaptive_provider.refused)
    assert static_gate.max_running == 6
    assert adaptive_gate.max_running is not None
    assert adaptive_gate.max_running <= 4
    assert adaptive_gate.stats().limit_changes >= 1
    assert static_overload > 0
    # AIMD probes one slot above K now and then, so some overload remains: far less than static's.
    assert adaptive_overload < static_overload / 10
    assert adaptive_answered >= static_answered  # and it answered at least as many
