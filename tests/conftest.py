"""Shared test setup: virtual time for every async test (``--looptime`` in pyproject), hypothesis profiles."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import warnings
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

# Virtual time makes wall-clock deadlines meaningless; examples are many and cheap.
settings.register_profile(
    "dev",
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "ci",
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
# Mutation testing runs the suite once per mutant: fewer examples, same properties.
settings.register_profile(
    "mutation",
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
)
# HYPOTHESIS_PROFILE wins; else `ci` under CI=true. CI runs the suite four times (two builds, three
# Pythons): the Makefile gives `ci` to the first pass and `dev` to the repeats, which check the same
# properties on another build or Python, where a difference shows in the first examples.
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


@pytest.fixture(autouse=True)
def _close_the_loop_looptime_opens_for_sync_tests(request: pytest.FixtureRequest) -> Iterator[None]:
    # looptime's pytest hook asks the policy for an event loop even around sync tests, and on
    # Python < 3.12 that creates one which nobody closes; close it, or GC warns mid-suite.
    yield
    if inspect.iscoroutinefunction(request.function):
        return
    policy = asyncio.get_event_loop_policy()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            loop = policy.get_event_loop()
    except RuntimeError:  # none was set, and the policy no longer makes one
        return
    if not loop.is_running():
        loop.close()
        policy.set_event_loop(None)


@pytest.fixture(autouse=True)
def _the_boundedgate_logger_as_it_was() -> Iterator[None]:
    # The FastAPI recipes (README, docs/http.md) give the library's logger a handler and a level, as
    # a service does; tests/test_docs.py and the recipe's test run them: no test may leave them on.
    logger = logging.getLogger("boundedgate")
    handlers, level = list(logger.handlers), logger.level
    yield
    if logger.handlers != handlers:
        logger.handlers[:] = handlers
    if logger.level != level:
        logger.setLevel(level)
