"""A RedisGate's first admission and first stream import nothing (see ``tests/first_call.py``).

The redis client is warmed with commands of its own first, so only what the gate adds is counted.
"""

from __future__ import annotations

import textwrap

import pytest

from tests.first_call import first_call_imports

from .servers import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.looptime(False)]

IMPORTS = """
import redis.asyncio
from boundedgate.redis import RedisGate

async def ticks(n=3):
    for i in range(n):
        yield i
"""

SETUP = """
client = redis.asyncio.Redis.from_url({url!r})
await client.ping()
await client.set({name!r}, 1)
await client.delete({name!r})
gate = RedisGate(client, max_running=1, max_waiting=1, name={name!r})
"""

FIRST = {
    "admit": "async with gate.admit(timeout=30): pass",
    "stream": """
        async with gate.stream(ticks, timeout=30) as stream:
            async for _ in stream:
                break
        async with gate.stream(ticks) as stream:
            async for _ in stream: pass
    """,
}


@pytest.mark.parametrize("first", FIRST.values(), ids=FIRST.keys())
def test_the_first_call_imports_nothing(redis_server: RedisServer, name: str, first: str) -> None:
    setup = SETUP.format(url=redis_server.url, name=name)
    after = "\nawait gate.aclose()\nawait client.aclose()"
    assert first_call_imports(textwrap.dedent(first) + after, setup=setup, imports=IMPORTS) == []
