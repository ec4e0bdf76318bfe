"""Usage the transport cannot read never costs a slot: the real SDKs, a provider that sends nonsense.

Whatever a provider puts in ``usage`` (a count of 401 digits, a negative one, NaN, a string) and
whatever a user's ``usage_cost`` does with it, the caller gets the provider's answer, the slot is
given back exactly once, counted ``completed``, and the cost stays as declared (nothing is
settled), with one WARNING per response on the ``boundedgate`` logger naming the gate.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest

from boundedgate import RateLimit
from boundedgate.httpx import Exchange, GatedTransport, total_tokens
from tests.helpers import checked_gate
from tests.http_client.clients import COMBOS, Sdk, counted
from tests.http_client.provider import LimitsProvider

BURST = 10_000
DECLARED = 1_000

#: What the provider puts in its usage, by the name of the case.
NONSENSE: dict[str, object] = {
    "401 digits": 10**400,
    "negative": -5,
    "NaN": float("nan"),
    "infinite": float("inf"),
    "a string": "many",
    "a list": [1, 2],
}


def _broken(usage: Mapping[str, float]) -> float:
    raise KeyError("reasoning_tokens")


def _not_a_number(usage: Mapping[str, float]) -> float:
    return "lots"  # type: ignore[return-value]


def _too_large(usage: Mapping[str, float]) -> float:
    return 10**400


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("boundedgate") and r.levelno == logging.WARNING]


async def _call(sdk: Sdk, streamed: bool) -> str:
    """One call, its answer read to the end: the text the SDK made of it."""
    if not streamed:
        answer = await sdk.plain()
        return str(answer.choices[0].message.content if sdk.name == "openai" else answer.content[0].text)
    return "".join([sdk.text(item) async for item in await sdk.stream()])


@pytest.fixture(params=COMBOS)
def combo(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("nonsense", list(NONSENSE))
async def test_nonsense_usage_is_settled_as_unknown_and_the_slot_comes_back(
    combo: str, provider: LimitsProvider, caplog: pytest.LogCaptureFixture, nonsense: str, streamed: bool
) -> None:
    gate = checked_gate(1, 0, name="llm", rate_limits=[RateLimit(rate=1e-9, burst=BURST, unit="tokens")])
    exchanges: list[Exchange] = []
    sdk = Sdk(combo, provider, GatedTransport(gate, cost=DECLARED, on_exchange=exchanges.append))
    count = "total_tokens" if sdk.name == "openai" else "output_tokens"
    provider.usage = {count: NONSENSE[nonsense]}
    with caplog.at_level(logging.WARNING, logger="boundedgate"):
        # One slot, no waiting room: the second call is admitted only if the first gave it back.
        answers = [await _call(sdk, streamed) for _ in range(2)]
    assert answers == ["tok0 tok1 tok2 "] * 2
    counted(gate, completed=2)
    assert gate.stats().tokens[0] == pytest.approx(BURST - 2 * DECLARED)  # nothing settled
    assert [(e.outcome, e.usage, e.settled) for e in exchanges] == [("completed", None, None)] * 2
    logged = _warnings(caplog)
    assert len(logged) == 2  # once per response
    for record in logged:
        assert record.getMessage().startswith("llm: ")
        assert count in record.getMessage()
        assert getattr(record, "gate", None) == "llm"
    await sdk.aclose()


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("usage_cost", [_broken, _not_a_number, _too_large])
async def test_a_usage_cost_that_fails_is_settled_as_unknown(
    combo: str,
    provider: LimitsProvider,
    caplog: pytest.LogCaptureFixture,
    usage_cost: Any,
    streamed: bool,
) -> None:
    gate = checked_gate(1, 0, name="llm", rate_limits=[RateLimit(rate=1e-9, burst=BURST, unit="tokens")])
    exchanges: list[Exchange] = []
    transport = GatedTransport(gate, cost=DECLARED, usage_cost=usage_cost, on_exchange=exchanges.append)
    sdk = Sdk(combo, provider, transport)
    with caplog.at_level(logging.WARNING, logger="boundedgate"):
        answers = [await _call(sdk, streamed) for _ in range(2)]
    assert answers == ["tok0 tok1 tok2 "] * 2
    counted(gate, completed=2)
    assert gate.stats().tokens[0] == pytest.approx(BURST - 2 * DECLARED)
    assert [(e.outcome, e.settled) for e in exchanges] == [("completed", None)] * 2
    assert all(e.usage for e in exchanges)  # the provider's usage, read: the user's formula failed
    logged = _warnings(caplog)
    assert len(logged) == 2
    assert all(record.getMessage().startswith("llm: ") for record in logged)
    assert all(usage_cost.__name__ in record.getMessage() for record in logged)
    await sdk.aclose()


async def test_good_usage_beside_fields_that_are_not_counts_is_settled(
    provider: LimitsProvider, caplog: pytest.LogCaptureFixture
) -> None:
    """The providers' usage records carry more than counts: details, a tier, a null."""
    gate = checked_gate(1, 0, name="llm", rate_limits=[RateLimit(rate=1e-9, burst=BURST, unit="tokens")])
    exchanges: list[Exchange] = []
    sdk = Sdk("anthropic-httpx2", provider, GatedTransport(gate, cost=DECLARED, on_exchange=exchanges.append))
    provider.usage = {
        "cache_creation_input_tokens": None,
        "cache_creation": {"ephemeral_5m_input_tokens": 0},
        "service_tier": "standard",
    }
    with caplog.at_level(logging.WARNING, logger="boundedgate"):
        await _call(sdk, streamed=False)
        await _call(sdk, streamed=True)
    assert [e.settled for e in exchanges] == [8, 8]
    assert total_tokens(exchanges[0].usage or {}) == 8
    assert _warnings(caplog) == []
    await sdk.aclose()
