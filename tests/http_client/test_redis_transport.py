"""GatedTransport over a cluster gate: the openai SDK's requests hold a slot in a real Redis.

Real time (looptime off), as every Redis test: the provider answers at once, so this stays short.
"""

from __future__ import annotations

import openai
import pytest
import redis.asyncio

from boundedgate.httpx import GatedTransport, refusal
from tests.distributed.conftest import client, name, redis_server, server_binary
from tests.distributed.helpers import cluster, make_gate, settles_empty
from tests.http_client.clients import Sdk
from tests.http_client.provider import limits_provider

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]

__all__ = ("client", "name", "redis_server", "server_binary")  # the fixtures, shared with tests/distributed


async def test_a_stream_holds_its_cluster_slot_and_a_refusal_is_the_sdks_503(
    client: redis.asyncio.Redis, name: str
) -> None:
    async with limits_provider() as provider, make_gate(client, name, 1, 0) as gate:
        sdk = Sdk("openai-httpx2", provider, GatedTransport(gate))
        stream = await sdk.stream("hold_after=1")
        assert (await cluster(client, name)).running == 1
        with pytest.raises(openai.InternalServerError) as caught:
            await sdk.plain()
        assert caught.value.code == "queue_full"
        assert refusal(caught.value.response) is not None
        assert len(provider.served) == 1
        provider.release()
        async for _ in stream:
            pass
        await settles_empty(client, name)
        assert (gate.stats().completed, gate.stats().rejected) == (1, 1)
        await sdk.aclose()
