"""The generic suite's one fixture: ``subject``, parametrised over every gate that keeps the semantics.

Each test that takes ``subject`` runs once per subject, as trio's generic lock tests run once per
lock factory. The Redis subject carries the ``redis`` marker and runs in real time (looptime off);
without a redis-server it skips, and under ``CI=true`` it fails, as tests/distributed does.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Generator, Iterator

import pytest

from tests.distributed.servers import RedisServer, find_server_binary, in_ci, missing_server

from .subjects import LOCAL_SUBJECTS, REDIS_SUBJECTS, Subject, make_subject

SUBJECTS = [
    *(pytest.param(id, id=id) for id in LOCAL_SUBJECTS),
    *(
        pytest.param(id, id=id, marks=[pytest.mark.redis, pytest.mark.looptime(False)])
        for id in REDIS_SUBJECTS
    ),
]


@pytest.fixture(scope="session")
def generic_redis_server() -> Iterator[RedisServer]:
    """A redis-server for the Redis subject, started on first use."""
    binary = find_server_binary()
    if binary is None:
        missing_server(in_ci())
    server = RedisServer(binary)  # type: ignore[arg-type]
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(params=SUBJECTS)
async def subject(request: pytest.FixtureRequest) -> AsyncIterator[Subject]:
    """One subject, for one test."""
    made = make_subject(request.param, lambda: request.getfixturevalue("generic_redis_server").url)
    try:
        yield made
    finally:
        await made.aclose()
        if request.node.stash.get(_FAILED, False):
            # What a failed test left behind (a permit a defect leaked, say) is collected now,
            # while its loop runs: its finaliser's warning names this test, not the next one.
            gc.collect()


_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call" and report.failed:
        item.stash[_FAILED] = True
    return report
