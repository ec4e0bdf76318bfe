"""Fixtures of the Redis tests: real servers on loopback, clients, unique gate names.

Every test here runs in real time (``looptime`` off): leases, polls and sockets do not fast-forward.
A session server serves the tests that only need a Redis; a test that kills or restarts Redis gets
its own server (``own_server``).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio

from .servers import RedisServer, find_server_binary, in_ci, missing_server


@pytest.fixture(scope="session")
def server_binary() -> str:
    binary = find_server_binary()
    if binary is None:
        missing_server(in_ci())
    return binary  # type: ignore[return-value]


def _running(server_binary: str) -> Iterator[RedisServer]:
    server = RedisServer(server_binary)
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def redis_server(server_binary: str) -> Iterator[RedisServer]:
    """The server most tests share."""
    yield from _running(server_binary)


@pytest.fixture
def own_server(server_binary: str) -> Iterator[RedisServer]:
    """A server of the test's own, for tests that stop, restart or pause it."""
    yield from _running(server_binary)


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[redis.asyncio.Redis]:
    connection = redis.asyncio.Redis.from_url(redis_server.url)
    try:
        yield connection
    finally:
        await connection.aclose()


@pytest.fixture
def name() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"
