"""Every python block of docs/adaptive.md runs and prints what it says, in virtual time (as the README's)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.test_docs import promised_output, virtual_asyncio_run  # noqa: F401 (a fixture)

PAGE = Path(__file__).resolve().parent.parent / "docs" / "adaptive.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)


def test_the_page_has_python_blocks() -> None:
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
@pytest.mark.usefixtures("virtual_asyncio_run")
def test_block_runs_and_prints_what_it_says(block: str) -> None:
    printed: dict[int, list[str]] = {}

    def recording_print(*values: object, sep: str | None = " ", **kwargs: Any) -> None:
        caller = sys._getframe(1)
        if caller.f_code.co_filename == "docs/adaptive.md":
            text = (" " if sep is None else sep).join(map(str, values))
            printed.setdefault(caller.f_lineno, []).append(text)
        print(*values, sep=sep, **kwargs)

    exec(compile(block, "docs/adaptive.md", "exec"), {"__name__": "__main__", "print": recording_print})
    promised = promised_output(block)
    assert promised or "print(" not in block  # a block that prints shows what
    for number, shown in promised.items():
        assert printed.get(number) == shown, f"docs/adaptive.md block line {number}"
