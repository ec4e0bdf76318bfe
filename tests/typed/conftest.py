"""What the mypy runs of tests/typed share."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.fixture(scope="session")
def mypy_cache() -> Path:
    """One mypy cache for every run: a run finds the SDKs and the frameworks there.

    It is this checkout's own (build/ is ignored by git) and outlives the session: the suite runs
    more than once (both builds) on each Python, and mypy's incremental mode checks what changed.
    """
    return ROOT / "build" / "mypy-typed"
