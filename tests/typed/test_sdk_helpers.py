"""A GatedStream has the helpers of the stream it wraps, with their types: mypy --strict on user code.

``user_code.py`` uses every typed helper of an anthropic, an openai and a plain stream, asserting
each one's type, and gives a GatedTransport to httpx2 and httpx clients as docs/http.md does;
``user_mistakes.py`` makes one mistake per marked line. mypy runs once over both.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

# mypy reads the sources (MYPYPATH), whichever build the suite imports; it shares its cache with
# test_docs_blocks.py, so the two run on one worker of pytest-xdist, one after the other.
pytestmark = [pytest.mark.build_independent, pytest.mark.xdist_group("mypy-typed")]

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def reported(strict_mypy: Callable[..., str]) -> dict[str, dict[int, str]]:
    """mypy's errors, by file name and line."""
    out = strict_mypy(str(HERE / "user_code.py"), str(HERE / "user_mistakes.py"))
    errors: dict[str, dict[int, str]] = {"user_code.py": {}, "user_mistakes.py": {}}
    for line in out.splitlines():
        found = re.match(r"^(?:.*/)?(user_\w+\.py):(\d+): error: (.*)$", line)
        if found:
            errors[found.group(1)][int(found.group(2))] = found.group(3)
    return errors


def test_correct_use_of_every_helper_type_checks(reported: dict[str, dict[int, str]]) -> None:
    assert reported["user_code.py"] == {}


def test_every_mistake_is_reported_and_nothing_else(reported: dict[str, dict[int, str]]) -> None:
    lines = (HERE / "user_mistakes.py").read_text().splitlines()
    marked = {number for number, line in enumerate(lines, start=1) if "# error:" in line}
    assert len(marked) == 12
    assert set(reported["user_mistakes.py"]) == marked, reported["user_mistakes.py"]
