"""What the mypy runs of tests/typed share."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One mypy cache for the session's runs: the second finds the SDKs and the frameworks in it.

    Each run is incremental against it; a fresh directory per session, so nothing stale is read.
    """
    return tmp_path_factory.mktemp("mypy-cache")
