"""What every test of the HTTP server edge runs under: no cyclic garbage collector."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _no_garbage_collector() -> Iterator[None]:
    # Whatever frees a slot here must not be the cyclic collector: no path may depend on it.
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()  # what the test left for the collector is collected here, inside it
