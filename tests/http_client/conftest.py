"""The provider every transport test talks to: the fake one, with rate-limit headers and usage."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.http_client.provider import LimitsProvider, limits_provider


@pytest.fixture
async def provider() -> AsyncIterator[LimitsProvider]:
    async with limits_provider() as provider:
        yield provider
