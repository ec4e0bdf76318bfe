"""The decision core imports no event loop, no clock and no threads: it is told the time."""

from __future__ import annotations

import ast
from pathlib import Path

import boundedgate._core

FORBIDDEN = {"asyncio", "anyio", "trio", "time", "threading", "datetime", "selectors", "socket", "random"}


def test_core_imports_nothing_that_knows_the_time_or_does_io() -> None:
    core = Path(boundedgate._core.__file__).parent
    files = sorted(core.glob("*.py"))
    assert len(files) >= 5
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = {(node.module or "").split(".")[0]}
            else:
                continue
            assert not roots & FORBIDDEN, f"{path.name} imports {roots & FORBIDDEN}"
