"""Every python block in the README runs, and the examples give the seed's answers, in virtual time."""

from __future__ import annotations

import asyncio
import re
import runpy
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import looptime
import pytest

ROOT = Path(__file__).resolve().parent.parent
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.DOTALL)


def run_on_virtual_time(coro: Coroutine[Any, Any, Any]) -> Any:
    loop = looptime.new_event_loop(start=0)
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


@pytest.fixture
def virtual_asyncio_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asyncio, "run", run_on_virtual_time)


def test_the_readme_has_python_blocks() -> None:
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
@pytest.mark.usefixtures("virtual_asyncio_run")
def test_readme_block_runs(block: str) -> None:
    exec(compile(block, "README.md", "exec"), {"__name__": "__main__"})


@pytest.mark.usefixtures("virtual_asyncio_run")
def test_seed_replay_example_agrees_with_the_seed(capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(ROOT / "examples" / "seed_replay.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "MISMATCH" not in out
    assert out.count("agrees") == 5
    assert re.search(r"^C\s+completed\s+-\s+100\s+150\s+100\s+agrees$", out, flags=re.MULTILINE)
    assert re.search(r"^D\s+expired\s+QueueExpired\s+-\s+90\s+90\s+agrees$", out, flags=re.MULTILINE)
    assert "C ran 50 ms, but its caller waited 150 ms" in out
