"""What the mypy runs of tests/typed share."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parent.parent.parent
CACHE = ROOT / "build" / "mypy-typed"


@pytest.fixture(scope="session")
def strict_mypy() -> Callable[..., str]:
    """``check(*files)``: ``mypy --strict`` over ``files`` in the working directory; its report.

    Against this checkout's ``boundedgate`` (``MYPYPATH``), not an installed one. Every run shares
    one cache, this checkout's own (build/ is ignored by git), which outlives the session: the
    suite runs more than once (both builds) on each Python, and mypy's incremental mode checks
    what changed. The cache is mypy's files, not its SQLite store: a run in a CI job once found a
    store ``database is locked`` for over five seconds, and failed every test it fed.
    """

    def check(*files: str) -> str:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("MYPYPATH", str(ROOT / "src"))
            out, err, _ = api.run(
                ["--strict", "--cache-dir", str(CACHE), "--no-sqlite-cache", "--config-file", "", *files]
            )
        assert not err, err
        return out

    return check
